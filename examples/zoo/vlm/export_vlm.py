#!/usr/bin/env python3
"""Exports the zoo's multimodal track: tiny random-weight MoE VLMs, split into
the component graphs transformers 5.x's exporters give.

For each model (Qwen3-VL-MoE, Llama 4, GLM-4.5V-MoE), a tiny config with
fixed seeds on the CPU, and one image plus a short prompt:

- `decompose_multimodal()` on the model's forward, then `OnnxExporter().export`
  on each vision component: `image_encoder`, and Llama 4's
  `multi_modal_projector`;
- `OnnxExporter().export_for_generation()`: `language_model` (the prefill,
  taking `inputs_embeds`), `lm_head` and `decode` (it leaves the vision tower
  out, because `generate()` encodes the image before the first forward);
  for Llama 4 on its text model, from `inputs_embeds`, with the rotary in
  real arithmetic (llama4_generation_export);
- `embed`: the token embedding (`get_input_embeddings()`) on its own.

The graphs go to examples/zoo/vlm/out/<model>/<component>.onnx (weights
inline, the exporter's per-node annotations dropped; the folder is
committed, so that CI runs its tests without torch), with the model's
config.json. Next to
each vision graph, <component>.npz holds its inputs as the exporter's input
preparer computes them for two image sizes (`<input>_g<i>`), and torch's
outputs for them, so that a test can feed the index inputs (grid, segment
bounds, patch positions, interpolation indices) and fresh random pixels.
For every model, generate.npz holds torch's greedy `generate()` (Llama 4's:
its text model's, on the embeddings of the model's parts, because its whole
generate() fails in transformers 5.24) on prompts with one image (each
image size) and without: the
prompt's ids (`input_ids_<case>`), the vision graph's inputs for its image
(`image_encoder.<input>_<case>`) and the new ids (`generated_<case>`).

Qwen3-VL-MoE's folder also gets what `moe-run --image` needs and checks:
preprocessor_config.json (the Qwen2-VL image processor's), three images
(image.png at a size the processor keeps, image_resized.png one it resizes,
image.jpg), and in generate.npz, for each (cases `png`, `png_resized` and
`jpeg`), its file name (`image_file_<case>`), the processor's
`pixel_values_<case>` and `image_grid_thw_<case>` and torch's greedy ids on
them. vision_inputs.onnx is the exporter's own input preparer
(transformers' grid_thw helpers: cu_seqlens, patch positions, interpolation
indices and weights) exported as a graph of grid_thw, the reference the
runtime's grid rule is checked against (docs/multimodal.md, "Vision inputs
from the grid").

examples/zoo/vlm/manifest.json (committed) records the versions, each graph's
inputs, outputs and op counts, whether each export succeeded (an exporter
failure is a result, with its message), and onnxruntime's agreement with torch
on the vision graphs. Rerunning rewrites everything.

    .venv-export-v5/bin/python examples/zoo/vlm/export_vlm.py [--only qwen3_vl_moe ...]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import shutil
import sys
import traceback
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers

VLM_DIR = Path(__file__).resolve().parent
OUT_DIR = VLM_DIR / "out"
MANIFEST = VLM_DIR / "manifest.json"
REPO_ROOT = VLM_DIR.parent.parent.parent

TORCH_VERSION = "2.15.0"
TRANSFORMERS_VERSION = "5.24.0"
# |ort - torch| <= PARITY_TOLERANCE * max(1, max |torch|), as export_zoo.py.
PARITY_TOLERANCE = 1e-4
# New tokens of the saved generate() cases.
GENERATE_TOKENS = 8
# Transformers' init at this scale gives O(1) activations in tiny models.
INITIALIZER_RANGE = 0.2

# The tiny MoE language model every VLM gets (hidden 64, 4 experts, top-2).
TEXT = dict(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512)


# --------------------------------------------------------------------------- #
# Models: config, and the forward inputs of one image and a prompt
# --------------------------------------------------------------------------- #


def patches(grid, channels, temporal, patch, gen):
    """Pixel patches as Qwen's and GLM's processors give them:
    [t*h*w, channels*temporal*patch*patch]."""
    t, h, w = grid
    return torch.randn(t * h * w, channels * temporal * patch * patch, generator=gen)


def prompt(image_tokens, image_id, start_id, end_id):
    """A prompt with one image: two text tokens, the image's tokens between
    its start and end markers, two more text tokens."""
    return torch.tensor([[1, 2, start_id] + [image_id] * image_tokens + [end_id, 5, 6]])


class Qwen3VlMoe:
    name = "qwen3_vl_moe"
    patch, temporal, merge = 8, 2, 2
    grids = ((1, 4, 6), (1, 8, 8))
    # Image processor (Qwen2-VL's): pixel bounds of its smart resize.
    min_pixels, max_pixels = 16 * 16, 128 * 128
    # The images (height, width): PNGs the processor keeps (multiples of
    # patch * merge) and resizes (to 32 x 48), and a JPEG.
    images = {"png": (32, 48), "png_resized": (30, 50), "jpeg": (32, 48)}

    def config(self):
        text = dict(TEXT, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                     "mrope_section": [2, 3, 3], "mrope_interleaved": True})
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=self.patch,
                      temporal_patch_size=self.temporal, spatial_merge_size=self.merge, out_hidden_size=64,
                      num_position_embeddings=64, deepstack_visual_indexes=[0])
        return transformers.Qwen3VLMoeConfig(text_config=text, vision_config=vision, image_token_id=250,
                                             video_token_id=251, vision_start_token_id=252,
                                             vision_end_token_id=253)

    def model_class(self):
        return transformers.Qwen3VLMoeForConditionalGeneration

    def inputs(self, grid, gen):
        ids = prompt(grid[0] * grid[1] * grid[2] // self.merge**2, 250, 252, 253)
        return dict(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=(ids == 250).long(),
                    pixel_values=patches(grid, 3, self.temporal, self.patch, gen),
                    image_grid_thw=torch.tensor([list(grid)]))

    def vision_inputs(self, captured, full):
        return captured


class Glm4vMoe(Qwen3VlMoe):
    name = "glm4v_moe"
    images = {}
    patch, temporal, merge = 8, 2, 2
    grids = ((1, 4, 6), (1, 8, 8))

    def config(self):
        text = dict(TEXT, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2,
                    n_shared_experts=1, first_k_dense_replace=1,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                     "mrope_section": [2, 1, 1], "partial_rotary_factor": 0.5})
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=self.patch,
                      temporal_patch_size=self.temporal, spatial_merge_size=self.merge, out_hidden_size=64,
                      image_size=32)
        return transformers.Glm4vMoeConfig(text_config=text, vision_config=vision, image_token_id=250,
                                           video_token_id=251, image_start_token_id=252,
                                           image_end_token_id=253, video_start_token_id=254,
                                           video_end_token_id=255)

    def model_class(self):
        return transformers.Glm4vMoeForConditionalGeneration


class Llama4(Qwen3VlMoe):
    name = "llama4"
    images = {}
    image_size, patch = 32, 8
    # Llama 4's images are tiles of image_size; the exporter fixes the
    # encoder's batch to the one tile it traced, so both cases are one tile.
    grids = (1, 1)

    def config(self):
        # attention_chunk_size None: full attention in every layer (the
        # export of the zoo's first Llama 4, kept); Llama4Chunked has the
        # chunks.
        text = dict(TEXT, intermediate_size_mlp=64, num_local_experts=4, num_experts_per_tok=1,
                    attention_chunk_size=None, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
        # The pixel shuffle's features (hidden * 4) go through the vision
        # adapter, whose input width is intermediate_size (as in the real
        # config: 1408 * 4 = 5632).
        vision = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                      vision_output_dim=64, image_size=self.image_size, patch_size=self.patch,
                      projector_input_dim=64, projector_output_dim=64, pixel_shuffle_ratio=0.5)
        return transformers.Llama4Config(text_config=text, vision_config=vision, boi_token_index=252,
                                         eoi_token_index=253, image_token_index=250)

    def model_class(self):
        return transformers.Llama4ForConditionalGeneration

    def write_processor(self, out: Path):
        """The folder's preprocessor_config.json, as the HF processor saves
        it: transformers' Llama4ImageProcessor (torchvision backend) with
        tiles of the encoder's image_size and at most 4 of them (a canvas of
        several tiles adds a global one)."""
        processor = transformers.Llama4ImageProcessor(size={"height": self.image_size, "width": self.image_size},
                                                      max_patches=4)
        processor.save_pretrained(str(out))
        return processor

    def embeddings(self, model, inputs):
        """The language model's inputs_embeds for `inputs`, computed by the
        model's parts as its forward does (which fails in transformers 5.24
        after these ran): the vision model's last hidden state, flattened
        over the tiles, through the projector, scattered over the image
        tokens in order."""
        ids = inputs["input_ids"]
        with torch.no_grad():
            embeds = model.get_input_embeddings()(ids)
            if "pixel_values" in inputs:
                features = model.vision_model(inputs["pixel_values"]).last_hidden_state
                projected = model.multi_modal_projector(features.reshape(-1, features.shape[-1]))
                embeds = embeds.masked_scatter((ids == model.config.image_token_id)[..., None], projected)
        return embeds

    def inputs(self, tiles, gen):
        # pixel shuffle 0.5 halves both sides: (32/8)^2 / 4 = 4 tokens a tile.
        per_tile = (self.image_size // self.patch) ** 2 // 4
        ids = prompt(tiles * per_tile, 250, 252, 253)
        return dict(input_ids=ids, attention_mask=torch.ones_like(ids),
                    pixel_values=torch.randn(tiles, 3, self.image_size, self.image_size, generator=gen))


class Llama4Chunked(Llama4):
    """Llama 4 with its chunked attention: layer 0 (with RoPE) attends
    within chunks of 8 tokens (`attention_chunk_size`), layer 1 (no RoPE)
    to everything, as the real model interleaves them. The exported graphs
    compute the chunks from the positions; the chunked layer's cache also
    carries its window size (`_sliding_window_tensor`, a scalar) through
    them unread, which moec drops. The prompts of generate.npz and the 8
    new tokens run past one chunk (to position 17 and 14)."""
    name = "llama4_chunked"

    def config(self):
        cfg = super().config()
        cfg.text_config.attention_chunk_size = 8
        cfg.text_config.no_rope_layers = [1, 0]
        cfg.text_config.layer_types = ["chunked_attention", "full_attention"]
        return cfg

    def write_processor(self, out: Path):
        return None


MODELS = {m.name: m for m in (Qwen3VlMoe(), Llama4(), Glm4vMoe(), Llama4Chunked())}


def make_model(spec):
    cfg = spec.config()
    for sub in (cfg, getattr(cfg, "text_config", None), getattr(cfg, "vision_config", None)):
        if sub is not None:
            sub.initializer_range = INITIALIZER_RANGE
    torch.manual_seed(1)
    return spec.model_class()._from_config(cfg, attn_implementation="eager").eval()


# --------------------------------------------------------------------------- #
# Export
# --------------------------------------------------------------------------- #


def quiet():
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def save_inline(src: Path, path: Path) -> onnx.ModelProto:
    """The graph at `src` (external data allowed) as one file at `path`, with
    every node's metadata dropped: the exporter's annotations (stack traces,
    source modules, FX nodes, name scopes), which nothing reads and which
    were a third of the committed folder's bytes."""
    model = onnx.load(str(src), load_external_data=True)
    for node in model.graph.node:
        del node.metadata_props[:]
    onnx.save(model, str(path))
    return model


def describe(model: onnx.ModelProto, path: Path) -> dict:
    def shape(v):
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    def elem(v):
        return onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name

    return {
        "file": str(path.relative_to(REPO_ROOT)),
        "size_bytes": path.stat().st_size,
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "inputs": [{"name": i.name, "dtype": elem(i), "shape": shape(i)} for i in model.graph.input],
        "outputs": [{"name": o.name, "dtype": elem(o), "shape": shape(o)} for o in model.graph.output],
        "nodes": len(model.graph.node),
        "op_counts": dict(sorted(Counter(n.op_type for n in model.graph.node).items())),
    }


def export_component(module, inputs, path: Path) -> onnx.ModelProto:
    from transformers.exporters import OnnxConfig, OnnxExporter

    tmp = path.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with quiet():
            OnnxExporter().export(module, inputs, config=OnnxConfig(dynamic=True)).save_pretrained(str(tmp))
        return save_inline(tmp / "model.onnx", path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def failure(e: Exception) -> dict:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    cause = e.__cause__
    if cause is not None:
        lines += [f"caused by {type(cause).__name__}: " + (str(cause).strip().splitlines() or [""])[0]]
    return {"error": f"{type(e).__name__}: " + " | ".join(lines[:2])[:400] + (" | " + lines[-1][:300] if cause else "")}


def run_ort(path, feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    return names, session.run(names, {k: v for k, v in feeds.items() if k in wanted})


def flatten_outputs(out) -> list[np.ndarray]:
    """A vision module's outputs in graph order: the model output's fields,
    lists (deepstack features) flattened."""
    if isinstance(out, torch.Tensor):
        return [out.numpy()]
    values = out.values() if hasattr(out, "values") else out
    flat = []
    for v in values:
        if isinstance(v, (tuple, list)):
            flat += [t.numpy() for t in v]
        elif v is not None:
            flat.append(v.numpy())
    return flat


def vision_reference(spec, model, name, module, path: Path, record: dict):
    """<name>.npz: for each image size, the vision graph's inputs (as the
    exporter prepares them) and torch's outputs; records onnxruntime's
    agreement with torch."""
    from transformers.exporters.utils import prepare_for_export

    arrays, checks = {}, {}
    gen = torch.Generator().manual_seed(200)
    graph_inputs = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
    for g, grid in enumerate(spec.grids):
        _, captured = decompose_vision(model, spec.inputs(grid, gen), {})[name]
        feeds = dict(captured)
        with torch.no_grad():
            prepare_for_export(module, feeds)
            want = flatten_outputs(module(**copy.copy(feeds)))
        feeds = {k: v.numpy() for k, v in feeds.items() if k in graph_inputs}
        names, got = run_ort(path, feeds)
        errs = [float(np.max(np.abs(w.astype(np.float64) - o))) if w.shape == o.shape else float("inf")
                for w, o in zip(want, got)]
        scale = max([1.0] + [float(np.max(np.abs(w))) for w in want])
        checks[f"g{g}"] = {"grid": list(grid) if isinstance(grid, tuple) else grid,
                           "max_abs": max(errs), "ok": len(want) == len(got) and max(errs) <= PARITY_TOLERANCE * scale}
        for k, v in feeds.items():
            arrays[f"{k}_g{g}"] = v
        for k, v in zip(names, want):
            arrays[f"{k}_g{g}"] = v
    np.savez_compressed(path.with_suffix(".npz"), **arrays)
    record["reference"] = str(path.with_suffix(".npz").relative_to(REPO_ROOT))
    record["ort_vs_torch"] = checks
    record["ort_matches_torch"] = all(c["ok"] for c in checks.values())


def decompose_vision(model, inputs, notes: dict):
    """decompose_multimodal's (module, forward kwargs) per vision component.
    When the model's forward fails after its vision parts ran (Llama 4 in
    transformers 5.24 reads `image_outputs` from its language model's
    output, which has none), their captured calls are used and the failure
    is recorded."""
    from transformers.exporters import utils

    try:
        with torch.no_grad():
            return utils.decompose_multimodal(model, copy.deepcopy(inputs))
    except Exception as e:
        notes["decompose_multimodal_failed"] = failure(e)
    parts = {k: v for k, v in utils._find_multimodal_submodules(model).items()
             if k in ("image_encoder", "multi_modal_projector")}
    with contextlib.ExitStack() as stack, torch.no_grad():
        calls = {name: stack.enter_context(utils._capture_forward(m)) for name, m in parts.items()}
        try:
            model(**copy.deepcopy(inputs))
        except Exception:
            pass
    found = {name: (parts[name], calls[name][-1]) for name in parts if calls[name]}
    if found:
        notes["vision_captured_before_the_failure"] = sorted(found)
    return found


def encoder_feeds(model, module, name, inputs, graph_inputs):
    """The vision graph's inputs for `inputs` (a forward's kwargs), as the
    exporter's input preparer computes them."""
    from transformers.exporters.utils import prepare_for_export

    _, captured = decompose_vision(model, inputs, {})[name]
    feeds = dict(captured)
    with torch.no_grad():
        prepare_for_export(module, feeds)
    return {k: v.numpy() for k, v in feeds.items() if k in graph_inputs}


def generation_reference(spec, model, out: Path, entry: dict):
    """generate.npz: torch's greedy generate() on a prompt with one image at
    each image size and on a text-only prompt, with the vision graph's inputs
    for each image (see the module docstring)."""
    parts = decompose_vision(model, spec.inputs(spec.grids[0], torch.Generator().manual_seed(300)), {})
    module = parts["image_encoder"][0]
    graph_inputs = [i.name for i in onnx.load(str(out / "image_encoder.onnx"), load_external_data=False).graph.input]
    arrays, cases = {}, {}
    gen = torch.Generator().manual_seed(300)
    text = torch.tensor([[1, 2, 7, 9, 5, 6, 3]])
    for case, grid in [(f"g{g}", grid) for g, grid in enumerate(spec.grids)] + [("text", None)]:
        if grid is None:
            inputs = dict(input_ids=text, attention_mask=torch.ones_like(text))
        else:
            inputs = spec.inputs(grid, gen)
            for k, v in encoder_feeds(model, module, "image_encoder", copy.deepcopy(inputs), graph_inputs).items():
                arrays[f"image_encoder.{k}_{case}"] = v
        prompt_ids = inputs["input_ids"]
        with torch.no_grad():
            ids = model.generate(**copy.deepcopy(inputs), max_new_tokens=GENERATE_TOKENS, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
        arrays[f"input_ids_{case}"] = prompt_ids.numpy()
        arrays[f"generated_{case}"] = ids[:, prompt_ids.shape[1]:].numpy()
        cases[case] = {"prompt_tokens": int(prompt_ids.shape[1]), "grid": list(grid) if grid else None,
                       "generated": arrays[f"generated_{case}"][0].tolist()}
    for case, (name, pixels, grid) in image_cases(spec, out).items():
        t, h, w = grid[0].tolist()
        ids = prompt(t * h * w // spec.merge**2, 250, 252, 253)
        with torch.no_grad():
            new = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 mm_token_type_ids=(ids == 250).long(), pixel_values=torch.from_numpy(pixels),
                                 image_grid_thw=torch.from_numpy(grid), max_new_tokens=GENERATE_TOKENS,
                                 do_sample=False, eos_token_id=None, pad_token_id=0)
        arrays[f"pixel_values_{case}"], arrays[f"image_grid_thw_{case}"] = pixels, grid
        arrays[f"image_file_{case}"] = np.array(name)
        arrays[f"input_ids_{case}"] = ids.numpy()
        arrays[f"generated_{case}"] = new[:, ids.shape[1]:].numpy()
        cases[case] = {"prompt_tokens": int(ids.shape[1]), "grid": [t, h, w],
                       "generated": arrays[f"generated_{case}"][0].tolist()}
    np.savez_compressed(out / "generate.npz", **arrays)
    entry["generate"] = {"reference": str((out / "generate.npz").relative_to(REPO_ROOT)), "cases": cases}


def llama4_rotary_pairs(self, x, position_ids):
    """Llama4TextRotaryEmbedding.forward with each rotation as a (cos, sin)
    pair, [batch, n, head_dim / 2, 2], instead of torch.polar's complex
    number: the same angles (position times inverse frequency) and scale."""
    angles = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
    return torch.stack((angles.cos(), angles.sin()), dim=-1) * self.attention_scaling


def llama4_apply_rotary_pairs(xq, xk, pairs):
    """modeling_llama4.apply_rotary_emb in real arithmetic: each adjacent
    pair (re, im) of a head's channels times (cos, sin) as complex numbers,
    (re cos - im sin, re sin + im cos)."""
    cos, sin = pairs[:, :, None, :, 0], pairs[:, :, None, :, 1]

    def rotate(x):
        pair = x.float().reshape(*x.shape[:-1], -1, 2)
        re, im = pair[..., 0], pair[..., 1]
        return torch.stack((re * cos - im * sin, re * sin + im * cos), dim=-1).flatten(3).type_as(x)

    return rotate(xq), rotate(xk)


@contextlib.contextmanager
def llama4_real_rotary():
    """Llama 4's text RoPE rewritten without complex numbers, which neither
    dynamo nor the OnnxExporter exports (the same products in real
    arithmetic; llama4_generation_export checks it against the model's own
    forward)."""
    from unittest import mock

    from transformers.models.llama4 import modeling_llama4 as llama4

    with mock.patch.object(llama4.Llama4TextRotaryEmbedding, "forward", llama4_rotary_pairs), \
            mock.patch.object(llama4, "apply_rotary_emb", llama4_apply_rotary_pairs):
        yield


# |rewritten - torch| of the text model's logits, at most (x max(1, |torch|)).
REWRITE_TOLERANCE = 1e-5


def llama4_generation_export(model, sample, out: Path, record, entry: dict):
    """Llama 4's language side: export_for_generation on the text model
    (Llama4ForCausalLM) with the rotary in real arithmetic, from
    inputs_embeds, since the whole model's generate() fails in transformers
    5.24. Its prefill (logits included, no separate head) becomes
    `language_model`, its decode `decode`. The rewrite is first checked
    against the text model's own forward on a text-only prompt."""
    from transformers.exporters import OnnxConfig, OnnxExporter

    lm = model.language_model
    ids = torch.randint(0, lm.config.vocab_size, (1, 23), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        want = lm(input_ids=ids).logits
        with llama4_real_rotary():
            got = lm(input_ids=ids).logits
    err = float((want - got).abs().max())
    scale = max(1.0, float(want.abs().max()))
    entry["real_rotary_vs_torch"] = {"max_abs": err, "scale": scale, "ok": err <= REWRITE_TOLERANCE * scale}
    if not entry["real_rotary_vs_torch"]["ok"]:
        raise RuntimeError(f"the real-arithmetic rotary differs from torch's by {err} (scale {scale})")
    tmp = out / ".generation"
    try:
        with quiet(), llama4_real_rotary():
            OnnxExporter().export_for_generation(lm, sample, config=OnnxConfig(dynamic=True)).save_pretrained(str(tmp))
        for src, name in (("prefill", "language_model"), ("decode", "decode")):
            record(name, lambda p, s=tmp / f"{src}.onnx": save_inline(s, p))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def pieces_generation_reference(spec, model, out: Path, entry: dict):
    """generate.npz for a model whose own generate() fails (Llama 4): the
    same cases as generation_reference, with torch's greedy ids from the
    text model's generate() on the embeddings the model's parts give
    (spec.embeddings), and the vision graph's input for each image."""
    arrays, cases = {}, {}
    gen = torch.Generator().manual_seed(300)
    text = torch.tensor([[1, 2, 7, 9, 5, 6, 3]])
    for case, grid in [(f"g{g}", grid) for g, grid in enumerate(spec.grids)] + [("text", None)]:
        inputs = dict(input_ids=text) if grid is None else spec.inputs(grid, gen)
        prompt_ids = inputs["input_ids"]
        embeds = spec.embeddings(model, inputs)
        with torch.no_grad():
            ids = model.language_model.generate(inputs_embeds=embeds, attention_mask=torch.ones_like(prompt_ids),
                                                max_new_tokens=GENERATE_TOKENS, do_sample=False,
                                                eos_token_id=None, pad_token_id=0)
        if grid is not None:
            arrays[f"image_encoder.pixel_values_{case}"] = inputs["pixel_values"].numpy()
        arrays[f"input_ids_{case}"] = prompt_ids.numpy()
        # generate() from inputs_embeds returns the new ids only.
        arrays[f"generated_{case}"] = ids[:, -GENERATE_TOKENS:].numpy()
        cases[case] = {"prompt_tokens": int(prompt_ids.shape[1]), "grid": grid,
                       "generated": arrays[f"generated_{case}"][0].tolist()}
    np.savez_compressed(out / "generate.npz", **arrays)
    entry["generate"] = {"reference": str((out / "generate.npz").relative_to(REPO_ROOT)), "cases": cases,
                         "how": "the text model's generate() on the embeddings of the model's parts"}


def image_cases(spec, out: Path) -> dict:
    """Writes the model's preprocessor_config.json (Qwen2-VL's image
    processor, PIL backend) and one image file per `spec.images` case (a
    smooth gradient plus noise, fixed seed), and returns the file's name and
    the processor's (pixel_values, image_grid_thw) for each."""
    if not spec.images:
        return {}
    from PIL import Image

    processor = transformers.Qwen2VLImageProcessorPil(
        patch_size=spec.patch, temporal_patch_size=spec.temporal, merge_size=spec.merge,
        min_pixels=spec.min_pixels, max_pixels=spec.max_pixels)
    processor.save_pretrained(str(out))
    rng = np.random.default_rng(400)
    cases = {}
    for case, (height, width) in spec.images.items():
        y, x = np.mgrid[0:height, 0:width]
        base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], axis=-1)
        rgb = np.clip(base + rng.normal(0, 40, base.shape), 0, 255).astype(np.uint8)
        name = {"png": "image.png", "png_resized": "image_resized.png", "jpeg": "image.jpg"}[case]
        Image.fromarray(rgb).save(out / name, **({"quality": 90} if case == "jpeg" else {}))
        got = processor(images=[Image.open(out / name)], return_tensors="np")
        cases[case] = (name, got["pixel_values"].astype(np.float32), got["image_grid_thw"].astype(np.int64))
    return cases


class VisionInputs(torch.nn.Module):
    """The exporter's input preparer for grid_thw encoders
    (transformers.exporters.utils.prepare_for_export on the vision model) as
    grid_thw -> cu_seqlens, position_ids, interp_indices, interp_weights."""

    def __init__(self, visual):
        super().__init__()
        self.visual = visual

    def forward(self, grid_thw):
        from transformers.exporters.utils import precompute_export_inputs

        inputs = {"grid_thw": grid_thw}
        precompute_export_inputs(self.visual, inputs)
        return inputs["cu_seqlens"], inputs["position_ids"], inputs["interp_indices"], inputs["interp_weights"]


def export_vision_inputs(model, path: Path) -> onnx.ModelProto:
    """vision_inputs.onnx: VisionInputs of the model's vision tower, through
    torch.onnx.export (dynamo); its sizes depend on grid_thw's values."""
    module = VisionInputs(model.model.visual).eval()
    tmp = path.with_suffix(".tmp.onnx")
    with quiet(), torch.no_grad():
        torch.onnx.export(module, (torch.tensor([[1, 4, 6]]),), str(tmp), dynamo=True,
                          input_names=["grid_thw"],
                          output_names=["cu_seqlens", "position_ids", "interp_indices", "interp_weights"])
    try:
        return save_inline(tmp, path)
    finally:
        for f in (tmp, Path(str(tmp) + ".data")):
            f.unlink(missing_ok=True)


class Embed(torch.nn.Module):
    """The token embedding as input_ids -> inputs_embeds."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def forward(self, input_ids):
        return self.table(input_ids)


def export_model(spec, results: dict):
    from transformers.exporters import OnnxConfig, OnnxExporter

    out = OUT_DIR / spec.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    model = make_model(spec)
    model.config.to_json_file(str(out / "config.json"))
    if hasattr(spec, "write_processor"):
        spec.write_processor(out)
    entry = results[spec.name] = {
        "architecture": type(model).__name__, "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0], "onnxruntime": ort.__version__, "components": {}}
    sample = spec.inputs(spec.grids[0], torch.Generator().manual_seed(100))
    components = entry["components"]

    def record(name, fn):
        path = out / f"{name}.onnx"
        try:
            model_proto = fn(path)
        except Exception as e:  # the exporter's failure is a result
            components[name] = {"export_failed": failure(e)}
            print(f"  {name}: export fails: {components[name]['export_failed']['error'][:300]}")
            traceback.print_exc(limit=-3, file=sys.stderr)
            return None
        components[name] = describe(model_proto, path)
        print(f"  {name}: {components[name]['size_bytes']} bytes, {components[name]['nodes']} nodes")
        return path

    # Vision: decompose_multimodal on the forward, then export each part.
    parts = decompose_vision(model, sample, entry)
    for name in ("image_encoder", "multi_modal_projector"):
        if name not in parts:
            continue
        module, inputs = parts[name]
        path = record(name, lambda p, m=module, i=inputs: export_component(m, dict(i), p))
        if path is not None:
            try:
                vision_reference(spec, model, name, module, path, components[name])
            except Exception as e:
                components[name]["reference_failed"] = failure(e)

    # The exporter's grid_thw input preparer as a graph (Qwen3-VL-MoE).
    if spec.images:
        record("vision_inputs", lambda p: export_vision_inputs(model, p))

    # Token embedding.
    ids = sample["input_ids"]
    record("embed", lambda p: export_component(Embed(model.get_input_embeddings()), {"input_ids": ids}, p))

    # The language side: export_for_generation.
    if hasattr(spec, "embeddings"):
        try:
            sample_embeds = dict(inputs_embeds=spec.embeddings(model, sample),
                                 attention_mask=torch.ones_like(sample["input_ids"]))
            llama4_generation_export(model, sample_embeds, out, record, entry)
            pieces_generation_reference(spec, model, out, entry)
            print(f"  generate: {entry['generate']['cases']}")
        except Exception as e:
            entry["export_for_generation_failed"] = failure(e)
            print(f"  language side fails: {entry['export_for_generation_failed']['error'][:300]}")
        return
    tmp = out / ".generation"
    try:
        with quiet():
            OnnxExporter().export_for_generation(model, copy.deepcopy(sample),
                                                 config=OnnxConfig(dynamic=True)).save_pretrained(str(tmp))
        for src in sorted(tmp.glob("*.onnx")):
            record(src.stem, lambda p, s=src: save_inline(s, p))
    except Exception as e:
        entry["export_for_generation_failed"] = failure(e)
        print(f"  export_for_generation fails: {entry['export_for_generation_failed']['error'][:300]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # torch's greedy generation, for the multimodal plans' end-to-end tests.
    if "image_encoder" in parts and "export_for_generation_failed" not in entry:
        try:
            generation_reference(spec, model, out, entry)
            print(f"  generate: {entry['generate']['cases']}")
        except Exception as e:
            entry["generate_failed"] = failure(e)
            print(f"  generate fails: {entry['generate_failed']['error'][:300]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(MODELS), help="models to export (default: all)")
    args = parser.parse_args()
    if transformers.__version__ != TRANSFORMERS_VERSION or not torch.__version__.startswith(TORCH_VERSION):
        sys.exit(f"export_vlm: needs transformers {TRANSFORMERS_VERSION} and torch {TORCH_VERSION} "
                 f"(examples/zoo/requirements-export-v5.txt), not {transformers.__version__} / {torch.__version__}")
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    results = manifest.setdefault("models", {})
    for name in args.only or list(MODELS):
        print(name)
        export_model(MODELS[name], results)
    manifest.update(version=1, generator="examples/zoo/vlm/export_vlm.py (see examples/zoo/vlm/README.md)",
                    tolerance=PARITY_TOLERANCE)
    manifest["models"] = dict(sorted(results.items()))
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
