#!/usr/bin/env python3
"""Builds qwen35_moe_vlm_fp32: an onnxruntime-genai multimodal folder of a tiny
random-weight Qwen3.5-MoE (Qwen3_5MoeForConditionalGeneration with its vision
tower).

  make_genai_vlm.py [--keep-hf DIR]

Run with the export venv of requirements-export-genai.txt (torch 2.15.0,
transformers 5.24.0, onnxruntime-genai 0.18.0, onnxruntime 1.32.0; CI never
does). onnxruntime-genai runs such a model (its model type `qwen3_5_moe`) as
three graphs that genai_config.json names:

  vision     pixel_values [patches, 3 * 2 * P * P], image_grid_thw [images, 3]
             -> image_features [image tokens, hidden]
  embedding  input_ids [batch, seq], image_features -> inputs_embeds
  decoder    inputs_embeds, attention_mask, position_ids [3, batch, seq] and
             the caches and states -> logits and the new caches

The model builder writes the decoder and its genai_config.json section
(`--extra_options exclude_embeds=true`, which makes the type `qwen3_5_moe`);
the builder does not make the vision and embedding graphs (onnxruntime-genai
documents no script for them: its own test folders, test/models/qwen3-5,
hold hand-made dummies of these signatures). This script exports them with
torch.onnx.export from the same checkpoint:

  vision.onnx     the vision tower (patch embedding, learned position table,
                  rotary attention block, patch merger) traced on the image
                  grid of image.png (1 x 4 x 6 patches): the grid-derived
                  attention segments, patch positions and position-table taps
                  that transformers computes in Python become constants of
                  that grid, so the graph serves that image size;
  embedding.onnx  the token embedding with the image features put at the image
                  tokens in order (transformers' masked_scatter, written as a
                  CumSum and Gather that also take 0 feature rows, as
                  onnxruntime-genai's decode steps feed).

and adds the `vision` and `embedding` sections, image_token_id and
vision_start_token_id to genai_config.json. The folder also holds the
transformers image processor's preprocessor_config.json, image.png, and:

  reference.npz   pixel_values and image_grid_thw (Qwen2VLImageProcessorPil
                  on image.png), image_features (onnxruntime on vision.onnx),
                  prompt (ids with 6 image tokens) and new_ids: the 12 greedy
                  ids onnxruntime-genai's Generator gives for prompt plus
                  image (og.NamedTensors, do_sample false), and text_prompt /
                  text_new_ids: a prompt without image tokens; torch_new_ids
                  and torch_text_new_ids: transformers' generate() on the
                  same inputs (the script stops unless they are genai's).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_genai import QWEN35_MOE_TEXT  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "qwen35_moe_vlm_fp32"
SEED = 0
NEW_TOKENS = 12
IMAGE_TOKEN = 300
VISION_START = 301
VISION_END = 302
VIDEO_TOKEN = 303
# 32 x 48 pixels: a 1 x 4 x 6 grid of 8 x 8 patches, 6 merged image tokens.
IMAGE_HW = (32, 48)
PROMPT = [5, 6, VISION_START] + [IMAGE_TOKEN] * 6 + [VISION_END, 7, 8]
TEXT_PROMPT = [5, 6, 9, 10, 11]


def make_checkpoint(out_dir):
    """The text model of make_genai.py's qwen35_moe with a small vision
    tower: patch 8, 1 block, spatial merge 2, out width = hidden 64."""
    import torch
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration

    text = dict(QWEN35_MOE_TEXT)
    vision = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2,
                  out_hidden_size=64, num_position_embeddings=16,
                  patch_size=8, temporal_patch_size=2, spatial_merge_size=2,
                  initializer_range=0.2)
    config = Qwen3_5MoeConfig(text_config=text, vision_config=vision,
                              image_token_id=IMAGE_TOKEN,
                              vision_start_token_id=VISION_START,
                              vision_end_token_id=VISION_END,
                              video_token_id=VIDEO_TOKEN,
                              tie_word_embeddings=False)
    config.architectures = ["Qwen3_5MoeForConditionalGeneration"]
    torch.manual_seed(SEED)
    model = Qwen3_5MoeForConditionalGeneration(config).eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    return model


def write_image_and_processor(out_dir):
    """image.png (seeded noise) and the transformers processor's config; its
    pixel_values and image_grid_thw for the image."""
    from PIL import Image
    from transformers import Qwen2VLImageProcessorPil

    rng = np.random.default_rng(SEED)
    pixels = rng.integers(0, 256, (*IMAGE_HW, 3), dtype=np.uint8)
    path = os.path.join(out_dir, "image.png")
    Image.fromarray(pixels).save(path)
    processor = Qwen2VLImageProcessorPil(
        patch_size=8, temporal_patch_size=2, merge_size=2,
        size={"shortest_edge": 16 * 16, "longest_edge": 64 * 64},
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    processor.save_pretrained(out_dir)
    out = processor(images=[Image.open(path)], return_tensors="np")
    return (out["pixel_values"].astype(np.float32),
            out["image_grid_thw"].astype(np.int64))


def export_vision(model, out_dir, pixel_values, grid):
    import torch

    from transformers.vision_utils import (
        get_vision_cu_seqlens, get_vision_interpolation_indices_and_weights)

    class Vision(torch.nn.Module):
        """The tower on the traced grid. Its attention segments and position
        table taps, which transformers computes from the grid with F.pad (a
        Pad that moec refuses), are given as the grid's constants; the
        patches' rotary positions become constants of the traced grid too."""

        def __init__(self, visual, grid):
            super().__init__()
            self.visual = visual
            self.register_buffer(
                "cu_seqlens", get_vision_cu_seqlens(grid).to(torch.int32))
            indices, weights = get_vision_interpolation_indices_and_weights(
                grid, num_grid_per_side=visual.num_grid_per_side,
                mode=visual.interpolation_mode,
                align_corners=visual.interpolation_align_corners,
                spatial_merge_size=visual.spatial_merge_size)
            self.register_buffer("interp_indices", indices)
            self.register_buffer("interp_weights", weights)

        def forward(self, pixel_values, image_grid_thw):
            return self.visual(pixel_values, grid_thw=image_grid_thw,
                               cu_seqlens=self.cu_seqlens,
                               interp_indices=self.interp_indices,
                               interp_weights=self.interp_weights).pooler_output

    torch.onnx.export(
        Vision(model.model.visual, torch.from_numpy(grid)).eval(),
        (torch.from_numpy(pixel_values), torch.from_numpy(grid)),
        os.path.join(out_dir, "vision.onnx"), dynamo=False, opset_version=17,
        input_names=["pixel_values", "image_grid_thw"],
        output_names=["image_features"])
    # Traced on one grid, the graph reads nothing from image_grid_thw and the
    # exporter drops it; onnxruntime-genai feeds it, so it stays an input.
    import onnx

    path = os.path.join(out_dir, "vision.onnx")
    graph = onnx.load(path)
    if all(i.name != "image_grid_thw" for i in graph.graph.input):
        graph.graph.input.append(onnx.helper.make_tensor_value_info(
            "image_grid_thw", onnx.TensorProto.INT64, list(grid.shape)))
        onnx.save(graph, path)


def export_embedding(model, out_dir):
    import torch

    class Embedding(torch.nn.Module):
        def __init__(self, table):
            super().__init__()
            self.table = table

        def forward(self, input_ids, image_features):
            embeds = self.table(input_ids)
            mask = input_ids == IMAGE_TOKEN
            # The k-th image token takes feature row k; other tokens read a
            # zero row appended after the features (0 rows at decode).
            rows = torch.cumsum(mask.to(torch.int64), dim=1) - 1
            fallback = image_features.shape[0]
            rows = torch.where(mask, rows, torch.full_like(rows, fallback))
            padded = torch.cat(
                [image_features, image_features.new_zeros(1, embeds.shape[-1])])
            return torch.where(mask[..., None], padded[rows], embeds)

    ids = torch.tensor([PROMPT])
    features = torch.zeros(6, model.config.text_config.hidden_size)
    torch.onnx.export(
        Embedding(model.model.language_model.embed_tokens).eval(),
        (ids, features), os.path.join(out_dir, "embedding.onnx"),
        dynamo=False, opset_version=17,
        input_names=["input_ids", "image_features"],
        output_names=["inputs_embeds"],
        dynamic_axes={"input_ids": {0: "batch_size", 1: "sequence_length"},
                      "image_features": {0: "num_image_tokens"},
                      "inputs_embeds": {0: "batch_size",
                                        1: "sequence_length"}})


def complete_config(out_dir):
    path = os.path.join(out_dir, "genai_config.json")
    config = json.load(open(path))
    model = config["model"]
    model["image_token_id"] = IMAGE_TOKEN
    model["vision_start_token_id"] = VISION_START
    model["video_token_id"] = VIDEO_TOKEN
    model["vision"] = {
        "filename": "vision.onnx", "spatial_merge_size": 2, "patch_size": 8,
        "inputs": {"pixel_values": "pixel_values",
                   "image_grid_thw": "image_grid_thw"},
        "outputs": {"image_features": "image_features"}}
    model["embedding"] = {
        "filename": "embedding.onnx",
        "inputs": {"input_ids": "input_ids",
                   "image_features": "image_features"},
        "outputs": {"inputs_embeds": "inputs_embeds"}}
    with open(path, "w") as f:
        json.dump(config, f, indent=4)


def genai_greedy(out_dir, prompt, vision):
    import onnxruntime_genai as og

    model = og.Model(out_dir)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + NEW_TOKENS,
                              do_sample=False)
    generator = og.Generator(model, params)
    inputs = og.NamedTensors()
    # og keeps token ids as int32 (its processor's dtype), whatever the
    # embedding graph takes.
    inputs["input_ids"] = np.array([prompt], np.int32)
    for name, value in vision.items():
        inputs[name] = value
    if vision:
        # What og's processor adds beside the pixels: the image tokens.
        inputs["num_image_tokens"] = np.array(
            [prompt.count(IMAGE_TOKEN)], np.int64)
    generator.set_inputs(inputs)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(i) for i in generator.get_sequence(0)[len(prompt):]]


def torch_greedy(model, prompt, vision):
    import torch

    kwargs = {k: torch.from_numpy(v) for k, v in vision.items()}
    # The processor's token types (1 at image tokens), which M-RoPE reads.
    kwargs["mm_token_type_ids"] = (torch.tensor([prompt]) ==
                                   IMAGE_TOKEN).long()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS,
                             do_sample=False, eos_token_id=None, **kwargs)
    return [int(i) for i in out[0, len(prompt):]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-hf", help="keep the checkpoint in this folder")
    args = parser.parse_args()
    import onnxruntime as ort

    out_dir = os.path.join(HERE, NAME)
    shutil.rmtree(out_dir, ignore_errors=True)
    hf_dir = args.keep_hf or tempfile.mkdtemp()
    model = make_checkpoint(hf_dir)
    subprocess.run(
        [sys.executable, "-m", "onnxruntime_genai.models.builder", "-m",
         hf_dir, "-o", out_dir, "-p", "fp32", "-e", "cpu", "--extra_options",
         "exclude_embeds=true"], check=True, stdout=subprocess.DEVNULL)
    pixel_values, grid = write_image_and_processor(out_dir)
    export_vision(model, out_dir, pixel_values, grid)
    export_embedding(model, out_dir)
    complete_config(out_dir)
    features = ort.InferenceSession(
        os.path.join(out_dir, "vision.onnx"),
        providers=["CPUExecutionProvider"]).run(
            None, {"pixel_values": pixel_values, "image_grid_thw": grid})[0]
    vision = {"pixel_values": pixel_values, "image_grid_thw": grid}
    new_ids = genai_greedy(out_dir, PROMPT, vision)
    text_new_ids = genai_greedy(out_dir, TEXT_PROMPT, {})
    torch_ids = torch_greedy(model, PROMPT, vision)
    torch_text_ids = torch_greedy(model, TEXT_PROMPT, {})
    print("genai:", new_ids, text_new_ids, "\ntorch:", torch_ids,
          torch_text_ids)
    if new_ids != torch_ids or text_new_ids != torch_text_ids:
        raise SystemExit("onnxruntime-genai's greedy ids are not torch's")
    np.savez(os.path.join(out_dir, "reference.npz"),
             pixel_values=pixel_values, image_grid_thw=grid,
             image_features=features, prompt=np.array(PROMPT, np.int64),
             new_ids=np.array(new_ids, np.int64),
             torch_new_ids=np.array(torch_ids, np.int64),
             text_prompt=np.array(TEXT_PROMPT, np.int64),
             text_new_ids=np.array(text_new_ids, np.int64),
             torch_text_new_ids=np.array(torch_text_ids, np.int64))
    if not args.keep_hf:
        shutil.rmtree(hf_dir)


if __name__ == "__main__":
    main()
