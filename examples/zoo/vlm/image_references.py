#!/usr/bin/env python3
"""Adds torch's greedy generate() on prompts of image files to the
multimodal zoo's folders (examples/zoo/vlm/out/, made by export_vlm.py;
needs torch, transformers and pillow):

    .venv-export-v5/bin/python examples/zoo/vlm/image_references.py [--only llama4 ...]

Rebuilds each folder's model (export_vlm.make_model: the same seeds), runs
the model's image processor (PIL backend) on image files, and writes
out/<model>/generate_images.npz in generate.npz's layout: per case the
prompt's ids, the files' names (`image_file_<case>`, one per image, in
order), the processor's `pixel_values_<case>` and `image_grid_thw_<case>`
and the new ids, which test/E2E/vlm-<model>-images.test compares with
`moe-run --image A [--image B ...]`.

- qwen3_vl_moe: the folder's images (export_vlm.py wrote them and its
  Qwen2-VL preprocessor_config.json), case `two` (image.png, then
  image.jpg, text between) and `three` (image.jpg, image_resized.png,
  image.png). The exported encoder takes one image; the plan runs it once
  per image (docs/multimodal.md, "Running it").
- glm4v_moe: writes the folder's preprocessor_config.json (transformers'
  Glm4vImageProcessor: 8 x 8 patches, 2 frames, merge 2, 256 to 16384
  pixels) and three PNGs (a gradient plus noise, fixed seed) where GLM's
  smart resize differs from Qwen2-VL's or not: `glm_kept.png` (32 x 48,
  kept), `glm_shrunk.png` (96 x 128: its two frames' pixels are over the
  bound, so it shrinks to 64 x 96, which Qwen2-VL's rule keeps) and
  `glm_small.png` (10 x 40: a side under 16 is first scaled up, to 16 x
  64; Qwen2-VL's rule gives 16 x 32); cases `kept`, `shrunk`, `small` and
  `two` (kept, then small).
- llama4: writes the folder's preprocessor_config.json (export_vlm.py's
  Llama4.write_processor: transformers' Llama4ImageProcessor, 32 x 32
  tiles, at most 4) where the export predates it, and three images:
  `l4_tile.png` (32 x 32: one tile, kept), `l4_wide.png` (20 x 90: a
  1 x 3 canvas, kept (a side is upscaled at most to the tile) and padded,
  plus the global tile) and `l4_tall.jpg` (70 x 50: resized to 64 x 45 on
  a 2 x 2 canvas, plus the global tile); cases `tile`,
  `wide`, `tall` and `two` (tile, then wide). The prompt holds each image
  in the processor's layout (Llama4Processor._prompt_split_image) with the
  tiny vocabulary's ids: LLAMA4_TOKENS. torch's ids come from the text
  model's generate() on the embeddings of the model's parts, as
  export_vlm.py's generate.npz (the whole model's generate() fails in
  transformers 5.24); the pixel values are the processor's (bfloat16, as
  f32), `tiles_<case>` each image's tile count.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_vlm  # noqa: E402

QWEN_CASES = {"two": ["image.png", "image.jpg"],
              "three": ["image.jpg", "image_resized.png", "image.png"]}
GLM_IMAGES = {"glm_kept.png": (32, 48), "glm_shrunk.png": (96, 128), "glm_small.png": (10, 40)}
GLM_CASES = {"kept": ["glm_kept.png"], "shrunk": ["glm_shrunk.png"], "small": ["glm_small.png"],
             "two": ["glm_kept.png", "glm_small.png"]}


LLAMA4_IMAGES = {"l4_tile.png": (32, 32), "l4_wide.png": (20, 90), "l4_tall.jpg": (70, 50)}
LLAMA4_CASES = {"tile": ["l4_tile.png"], "wide": ["l4_wide.png"], "tall": ["l4_tall.jpg"],
                "two": ["l4_tile.png", "l4_wide.png"]}
# Llama4Processor's tokens in the tiny vocabulary: <|image_start|> and
# <|image_end|> are config.json's boi and eoi, <|patch|> its image token.
LLAMA4_TOKENS = {"image_start": 252, "image_end": 253, "patch": 250, "tile_x_separator": 247,
                 "tile_y_separator": 248, "image": 249}


def gradient_image(height, width, rng):
    """A gradient plus noise, 8-bit RGB."""
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], axis=-1)
    return np.clip(base + rng.normal(0, 40, base.shape), 0, 255).astype(np.uint8)


def llama4_layout(ratio_h, ratio_w, per_tile):
    """An image's tokens as Llama4Processor._prompt_split_image lays them
    out: the tiles' patches row by row (x separators between tiles, a y
    separator after each row) where there are several, then the global
    tile's after <|image|>."""
    t = LLAMA4_TOKENS
    ids = [t["image_start"]]
    if ratio_h * ratio_w > 1:
        for _ in range(ratio_h):
            for x in range(ratio_w):
                ids += [t["patch"]] * per_tile + ([t["tile_x_separator"]] if x < ratio_w - 1 else [])
            ids.append(t["tile_y_separator"])
    return ids + [t["image"]] + [t["patch"]] * per_tile + [t["image_end"]]


def llama4_references():
    spec = export_vlm.MODELS["llama4"]
    out = export_vlm.OUT_DIR / spec.name
    processor = spec.write_processor(out)
    rng = np.random.default_rng(600)
    for name, (height, width) in LLAMA4_IMAGES.items():
        Image.fromarray(gradient_image(height, width, rng)).save(out / name, **({"quality": 90} if name.endswith(".jpg") else {}))
    model = export_vlm.make_model(spec)
    per_tile = (spec.image_size // spec.patch) ** 2 // 4
    arrays = {}
    for case, files in LLAMA4_CASES.items():
        got = processor(images=[Image.open(out / f) for f in files], return_tensors="pt")
        pixels = got["pixel_values"].float()
        ids = [1, 2]
        for k, (ratio_h, ratio_w) in enumerate(got["aspect_ratios"].tolist()):
            ids += llama4_layout(ratio_h, ratio_w, per_tile) + [5 + k]
        ids = torch.tensor([ids])
        embeds = spec.embeddings(model, {"input_ids": ids, "pixel_values": pixels})
        with torch.no_grad():
            new = model.language_model.generate(inputs_embeds=embeds, attention_mask=torch.ones_like(ids),
                                                max_new_tokens=export_vlm.GENERATE_TOKENS, do_sample=False,
                                                eos_token_id=None, pad_token_id=0)
        arrays[f"input_ids_{case}"] = ids.numpy()
        arrays[f"generated_{case}"] = new[:, -export_vlm.GENERATE_TOKENS:].numpy()
        arrays[f"image_file_{case}"] = np.array(files)
        arrays[f"pixel_values_{case}"] = pixels.numpy()
        arrays[f"tiles_{case}"] = np.array([r * c + (r * c > 1) for r, c in got["aspect_ratios"].tolist()])
        print(f"llama4 {case}: {files}, tiles {got['aspect_ratios'].tolist()} -> {pixels.shape[0]}, "
              f"{ids.shape[1]} prompt tokens, torch {arrays[f'generated_{case}'][0].tolist()}")
    np.savez_compressed(out / "generate_images.npz", **arrays)


def write_glm_inputs(spec, out):
    """GLM's processor config and its images; the processor."""
    processor = transformers.Glm4vImageProcessorPil(
        patch_size=spec.patch, temporal_patch_size=spec.temporal, merge_size=spec.merge,
        size={"shortest_edge": 16 * 16, "longest_edge": 128 * 128})
    processor.save_pretrained(str(out))
    rng = np.random.default_rng(500)
    for name, (height, width) in GLM_IMAGES.items():
        y, x = np.mgrid[0:height, 0:width]
        base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], axis=-1)
        rgb = np.clip(base + rng.normal(0, 40, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(rgb).save(out / name)
    return processor


def references(name, cases, processor):
    spec = export_vlm.MODELS[name]
    out = export_vlm.OUT_DIR / spec.name
    model = export_vlm.make_model(spec)
    arrays = {}
    for case, files in cases.items():
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
        print(f"{name} {case}: {files}, grids {grids.tolist()}, {ids.shape[1]} prompt tokens, "
              f"torch {arrays[f'generated_{case}'][0].tolist()}")
    np.savez_compressed(out / "generate_images.npz", **arrays)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=["qwen3_vl_moe", "glm4v_moe", "llama4"],
                        help="models to write references for (default: all)")
    only = parser.parse_args().only or ["qwen3_vl_moe", "glm4v_moe", "llama4"]
    if "qwen3_vl_moe" in only:
        qwen = export_vlm.OUT_DIR / "qwen3_vl_moe"
        references("qwen3_vl_moe", QWEN_CASES, transformers.Qwen2VLImageProcessorPil.from_pretrained(str(qwen)))
    if "glm4v_moe" in only:
        spec = export_vlm.MODELS["glm4v_moe"]
        processor = write_glm_inputs(spec, export_vlm.OUT_DIR / spec.name)
        references("glm4v_moe", GLM_CASES, processor)
    if "llama4" in only:
        llama4_references()

if __name__ == "__main__":
    main()
