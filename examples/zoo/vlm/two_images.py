#!/usr/bin/env python3
"""Adds torch's greedy generate() on a prompt with several images to the
multimodal zoo's Qwen3-VL-MoE folder (examples/zoo/vlm/out/qwen3_vl_moe,
made by export_vlm.py; needs torch, transformers and pillow):

    .venv-export-v5/bin/python examples/zoo/vlm/two_images.py

Rebuilds the folder's model (export_vlm.make_model: the same seeds), runs
transformers' Qwen2-VL image processor (PIL backend, the folder's
preprocessor_config.json) on the folder's image files, and writes
out/qwen3_vl_moe/generate_images.npz in generate.npz's layout, case
`two` (image.png, then image.jpg, text between) and case `three` (image.jpg,
image_resized.png, image.png): the prompt's ids, the files' names
(`image_file_<case>`, one per image, in order), the processor's
`pixel_values_<case>` and `image_grid_thw_<case>` and the new ids, which
test/E2E/vlm-qwen3-vl-moe-generate.test compares with `moe-run --image A
--image B ...`. The exported encoder takes one image; the plan runs it once
per image (docs/multimodal.md, "Images").
"""

import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_vlm  # noqa: E402

CASES = {"two": ["image.png", "image.jpg"],
         "three": ["image.jpg", "image_resized.png", "image.png"]}


def main():
    spec = export_vlm.MODELS["qwen3_vl_moe"]
    out = export_vlm.OUT_DIR / spec.name
    model = export_vlm.make_model(spec)
    processor = transformers.Qwen2VLImageProcessorPil.from_pretrained(str(out))
    arrays = {}
    for case, files in CASES.items():
        got = processor(images=[Image.open(out / f) for f in files], return_tensors="np")
        pixels = got["pixel_values"].astype(np.float32)
        grids = got["image_grid_thw"].astype(np.int64)
        ids = [1, 2]
        for k, (t, h, w) in enumerate(grids.tolist()):
            ids += [252] + [250] * (t * h * w // spec.merge**2) + [253, 5 + k]
        ids = torch.tensor([ids])
        with torch.no_grad():
            new = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 mm_token_type_ids=(ids == 250).long(), pixel_values=torch.from_numpy(pixels),
                                 image_grid_thw=torch.from_numpy(grids),
                                 max_new_tokens=export_vlm.GENERATE_TOKENS, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
        arrays[f"input_ids_{case}"] = ids.numpy()
        arrays[f"generated_{case}"] = new[:, ids.shape[1]:].numpy()
        arrays[f"image_file_{case}"] = np.array(files)
        arrays[f"pixel_values_{case}"], arrays[f"image_grid_thw_{case}"] = pixels, grids
        print(f"{case}: {files}, grids {grids.tolist()}, {ids.shape[1]} prompt tokens, "
              f"torch {arrays[f'generated_{case}'][0].tolist()}")
    np.savez_compressed(out / "generate_images.npz", **arrays)


if __name__ == "__main__":
    main()
