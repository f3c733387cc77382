#!/usr/bin/env python3
"""Checks a multimodal plan end to end: `moec compile DIR --max-seq S`, then
`moe-run PLAN --prompt-ids ... --vision-input NAME=FILE.npy ...` against a
reference for prompts with and without an image.

    check_multimodal.py DIR --workdir W --reference ort     (a tiny folder)
    check_multimodal.py DIR --workdir W --reference GEN.npz (the zoo's)

- `ort`: DIR is test/lib/gen_multimodal.py's folder. The reference runs
  each graph in onnxruntime and feeds them in Python as docs/multimodal.md
  says (image features at the image tokens, in order; M-RoPE positions by
  transformers 5's get_rope_index for still images, text positions first;
  the head on the last position; decode positions advancing from the
  largest plus one). The greedy ids must be equal and every step's logits
  within --rtol. Case `two` holds two images, which an encoder traced on
  one (a static grid of one row) runs one at a time, the outputs' rows
  concatenated in order. The image prompts' inputs stay in W (`<case>.<input>.npy`)
  with a few broken ones for the error tests (`bad.*.npy`). A --tiled
  folder (with multi_modal_projector.onnx) is fed as Llama 4's: the
  encoder's output flattened through the projector, the tokens' indices
  as positions, the language model's own logits.
- GEN.npz: export_vlm.py's generate.npz (torch's greedy generate()), or
  image_references.py's generate_images.npz (prompts of image files): the
  ids must be equal; the vision inputs are the saved ones the plan takes
  (`moec inspect --json`'s multimodal.given_inputs).

Where the encoder takes the grid rule's inputs (docs/multimodal.md, "Vision
inputs from the grid"), the plan computes them: the reference uses
vision_rules.py's, and moe-run's (--save-vision-inputs) must equal them
(the zoo's: its vision_inputs.onnx, the exporter's own helper, in
onnxruntime). Where the folder has a preprocessor_config.json, image cases
run `moe-run --image`: on PNGs written here (`ort`), whose pixel patches
must equal vision_rules.py's processor rule (within one 8-bit level when
resized), or on the zoo's images, whose patches must equal the ones the
processor (PIL) gave at export time: a PNG's exactly (within --resize-tol
when resized), a JPEG's within --jpeg-levels 8-bit levels (over the
processor's std), the spread of libjpeg's own IDCTs on the zoo's JPEG:
decoded with its accurate integer IDCT (libjpeg-turbo's default, PIL's
and moe-run's) the pixels are equal, with its fast integer or float IDCT
they differ by at most 4 levels, which another libjpeg build may choose.

Prints one line per case and exits 1 on any mismatch.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

import vision_rules

IMAGE_TOKEN = 13
GRID_INPUTS = ("cu_seqlens", "position_ids", "interp_indices", "interp_weights")


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"check_multimodal: {' '.join(cmd)} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


def generate(args, plan, prompt, vision, work, tokens, images=()):
    """moe-run's greedy ids and per-token logits; the vision inputs it fed
    are in WORK/vision/NAME.npy."""
    os.makedirs(work, exist_ok=True)
    cmd = args.launcher.split() + [
        args.moe_run, plan, "--prompt-ids", ",".join(str(int(i)) for i in prompt),
        "--max-new-tokens", str(tokens), "--threads", "2", "--output-dir", work] + args.run_flag
    for name, array in vision.items():
        path = os.path.join(work, name + ".npy")
        np.save(path, array)
        cmd += ["--vision-input", f"{name}={path}"]
    for image in images:
        cmd += ["--image", image]
    if vision or images:
        cmd += ["--save-vision-inputs", os.path.join(work, "vision")]
    run(cmd)
    return [int(i) for i in np.load(os.path.join(work, "tokens.npy")).reshape(-1)], np.load(os.path.join(work, "logits.npy"))


# --------------------------------------------------------------------------- #
# The onnxruntime reference over gen_multimodal.py's folder
# --------------------------------------------------------------------------- #


def rope_index(ids, grids, merge):
    """Position rows (t, h, w) and the decode delta, as transformers 5's
    get_rope_index computes them for text and still images."""
    rows, current, image, i = [[], [], []], 0, 0, 0
    while i < len(ids):
        if ids[i] != IMAGE_TOKEN:
            for row in rows:
                row.append(current)
            current += 1
            i += 1
            continue
        t, h, w = (int(v) for v in grids[image])
        h, w = h // merge, w // merge
        for a in range(t):
            for b in range(h):
                for c in range(w):
                    rows[0].append(current + a)
                    rows[1].append(current + b)
                    rows[2].append(current + c)
        i += t * h * w
        current += max(h, w)
        image += 1
    return np.array(rows, np.int64), current - len(ids)


class OrtModel:
    def __init__(self, folder):
        import onnxruntime as ort

        def session(name):
            return ort.InferenceSession(os.path.join(folder, name + ".onnx"), providers=["CPUExecutionProvider"])

        self.encoder, self.embed, self.lm, self.head, self.decode = (
            session(n) for n in ("image_encoder", "embed", "language_model", "lm_head", "decode"))
        with open(os.path.join(folder, "config.json")) as f:
            vision = json.load(f)["vision_config"]
        self.merge = vision["spatial_merge_size"]
        self.side = int(round(vision.get("num_position_embeddings", 0) ** 0.5))
        self.grid_inputs = [i.name for i in self.encoder.get_inputs() if i.name in GRID_INPUTS]
        self.rows = self.lm.get_inputs()[0].shape[0]
        self.encoder_images = [i.shape[0] for i in self.encoder.get_inputs() if i.name == "grid_thw"][0]

    def generate(self, prompt, vision, tokens):
        ids = np.array([prompt], np.int64)
        mask = ids == IMAGE_TOKEN
        embeds = self.embed.run(None, {"input_ids": ids})[0]
        hidden = embeds.shape[-1]
        deep = np.zeros([0, hidden], np.float32)
        grids = []
        if mask.any():
            grids = vision["grid_thw"]
            # An encoder of one image runs once per image (its grid row and
            # patch rows), the outputs' rows concatenated in order.
            one = self.encoder_images == 1
            parts, start = [], 0
            for k in range(len(grids)) if one else [None]:
                feeds = dict(vision)
                if one:
                    n = int(np.prod(grids[k]))
                    feeds = {"hidden_states": vision["hidden_states"][start:start + n], "grid_thw": grids[k:k + 1]}
                    start += n
                if self.grid_inputs:
                    rule = vision_rules.grid_inputs(feeds["grid_thw"], self.merge, self.side)
                    feeds.update({k: rule[k] for k in self.grid_inputs})
                parts.append(self.encoder.run(None, feeds))
            features = np.concatenate([p[0] for p in parts])
            deep = np.concatenate([p[1] for p in parts])
            embeds[mask] = features
        thw, delta = rope_index(prompt, grids, self.merge)
        seq = np.arange(len(prompt), dtype=np.int64)[None]
        rows = np.concatenate([seq, thw]) if self.rows == 4 else thw
        last, cache = self.lm.run(None, {"position_ids": rows[:, None, :], "inputs_embeds": embeds,
                                         "visual_pos_masks": mask, "deepstack_visual_embeds.0": deep})
        logits = [self.head.run(None, {"input": last[:, -1:]})[0][0, -1]]
        out = [int(np.argmax(logits[-1]))]
        for step in range(tokens - 1):
            index = len(prompt) + step
            rows = [index + delta] * 3
            if self.rows == 4:
                rows = [index] + rows
            token = out[-1]
            feeds = {"input_ids": np.array([[token]], np.int64),
                     "position_ids": np.array(rows, np.int64).reshape(self.rows, 1, 1),
                     "input.cache.layers.0.keys": cache,
                     "mm_token_type_ids": np.array([[int(token == IMAGE_TOKEN)]], np.int64)}
            step_logits, cache = self.decode.run(None, feeds)
            logits.append(step_logits[0, -1])
            out.append(int(np.argmax(logits[-1])))
        return out, np.array(logits)


class OrtTiledModel:
    """The reference over gen_multimodal.py --tiled's folder: the encoder's
    [1, m, W] output flattened to [m, W] through the projector, merged at
    the image tokens; positions the tokens' indices; the language model
    gives the logits."""

    def __init__(self, folder):
        import onnxruntime as ort

        def session(name):
            return ort.InferenceSession(os.path.join(folder, name + ".onnx"), providers=["CPUExecutionProvider"])

        self.encoder, self.projector, self.embed, self.lm, self.decode = (
            session(n) for n in ("image_encoder", "multi_modal_projector", "embed", "language_model", "decode"))

    def generate(self, prompt, vision, tokens):
        ids = np.array([prompt], np.int64)
        mask = ids == IMAGE_TOKEN
        embeds = self.embed.run(None, {"input_ids": ids})[0]
        if mask.any():
            # An encoder of a static number of tiles runs on that many at
            # a time.
            pixels = vision["pixel_values"]
            take = self.encoder.get_inputs()[0].shape[0]
            take = take if isinstance(take, int) and pixels.ndim == 4 else len(pixels)
            features = np.concatenate([self.encoder.run(None, {"pixel_values": pixels[i:i + take]})[0]
                                       for i in range(0, len(pixels), take)])
            embeds[mask] = self.projector.run(None, {"image_features": features.reshape(-1, features.shape[-1])})[0]
        positions = np.arange(len(prompt), dtype=np.int64)[None]
        prompt_logits, cache = self.lm.run(None, {"position_ids": positions, "inputs_embeds": embeds})
        logits = [prompt_logits[0, -1]]
        out = [int(np.argmax(logits[-1]))]
        for step in range(tokens - 1):
            feeds = {"input_ids": np.array([[out[-1]]], np.int64),
                     "position_ids": np.array([[len(prompt) + step]], np.int64),
                     "input.cache.layers.0.keys": cache}
            step_logits, cache = self.decode.run(None, feeds)
            logits.append(step_logits[0, -1])
            out.append(int(np.argmax(logits[-1])))
        return out, np.array(logits)


def tiled_cases(work):
    """(name, prompt, vision inputs) of the --tiled folder: images of 24 and
    8 patches (6 and 2 image tokens), a text-only prompt."""
    rng = np.random.default_rng(12)
    cases = []
    for name, patches in (("g0", 24), ("g1", 8)):
        pixels = rng.standard_normal([1, patches, 3]).astype(np.float32)
        cases.append((name, [1, 2, 12] + [IMAGE_TOKEN] * (patches // 4) + [14, 5, 6], {"pixel_values": pixels}))
    cases.append(("text", [1, 2, 7, 9, 5], {}))
    for name, prompt, vision in cases:
        for key, array in vision.items():
            np.save(os.path.join(work, f"{name}.{key}.npy"), array)
    return cases


def tile_image_cases(folder, work):
    """(name, prompt, expected vision inputs, PNG paths) for Llama 4's tile
    processor (gen_multimodal.py --tiles): PNGs written here of one tile, a
    1 x 3 canvas and a 2 x 2 one (each plus the global tile) and two images
    in one prompt, one image token a tile; the expected pixel values by
    vision_rules.llama4_preprocess."""
    with open(os.path.join(folder, "preprocessor_config.json")) as f:
        config = json.load(f)
    rng = np.random.default_rng(13)
    images = {"tile1": rng.integers(0, 256, [2, 2, 3], dtype=np.uint8),
              "tiles4": rng.integers(0, 256, [2, 5, 3], dtype=np.uint8),
              "tiles5": rng.integers(0, 256, [5, 3, 3], dtype=np.uint8)}
    pngs, pixels = {}, {}
    for name, rgb in images.items():
        pngs[name] = os.path.join(work, name + ".png")
        vision_rules.write_png(pngs[name], rgb)
        pixels[name] = vision_rules.llama4_preprocess(rgb, config)
    cases = []
    for name, parts in (("tile1", ["tile1"]), ("tiles4", ["tiles4"]), ("tiles5", ["tiles5"]),
                        ("two", ["tile1", "tiles5"])):
        prompt = [1, 2]
        for k, part in enumerate(parts):
            prompt += [12] + [IMAGE_TOKEN] * len(pixels[part]) + [14, 5 + k]
        cases.append((name, prompt, {"pixel_values": np.concatenate([pixels[p] for p in parts])},
                      [pngs[p] for p in parts]))
    return cases


def synthetic_cases(work):
    """(name, prompt, vision inputs) of the tiny folder, and the broken
    inputs the error tests use."""
    rng = np.random.default_rng(11)
    cases = []
    for name, grid in (("g0", (1, 4, 6)), ("g1", (1, 2, 4))):
        tokens = grid[0] * grid[1] * grid[2] // 4
        patches = rng.standard_normal([grid[0] * grid[1] * grid[2], 3]).astype(np.float32)
        prompt = [1, 2, 12] + [IMAGE_TOKEN] * tokens + [14, 5, 6]
        cases.append((name, prompt, {"hidden_states": patches, "grid_thw": np.array([grid], np.int64)}))
    # Two images in one prompt, which an encoder of one runs one at a time.
    grids = np.array([[1, 2, 4], [1, 4, 6]], np.int64)
    patches = rng.standard_normal([32, 3]).astype(np.float32)
    prompt = [1, 2, 12] + [IMAGE_TOKEN] * 2 + [14, 5, 12] + [IMAGE_TOKEN] * 6 + [14, 6]
    cases.append(("two", prompt, {"hidden_states": patches, "grid_thw": grids}))
    cases.append(("text", [1, 2, 7, 9, 5], {}))
    for name, prompt, vision in cases:
        for key, array in vision.items():
            np.save(os.path.join(work, f"{name}.{key}.npy"), array)
    # Wrong image size (16 patches for a 1 x 4 x 6 grid), two grids for the
    # patches of one, patches of the wrong dtype and of the wrong width.
    np.save(os.path.join(work, "bad.hidden_16.npy"), rng.standard_normal([16, 3]).astype(np.float32))
    np.save(os.path.join(work, "bad.grid_two.npy"), np.array([[1, 4, 6], [1, 2, 4]], np.int64))
    np.save(os.path.join(work, "bad.hidden_i64.npy"), np.ones([24, 3], np.int64))
    np.save(os.path.join(work, "bad.hidden_wide.npy"), rng.standard_normal([24, 5]).astype(np.float32))
    return cases


def image_cases(folder, work):
    """(name, prompt, expected vision inputs, PNG paths) for PNGs written
    here, when the folder has a preprocessor_config.json: RGB at a size the
    processor keeps, RGBA (composited onto white), gray, and RGB it
    resizes; the expected patches by vision_rules.preprocess."""
    path = os.path.join(folder, "preprocessor_config.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        config = json.load(f)
    with open(os.path.join(folder, "config.json")) as f:
        merge = json.load(f)["vision_config"]["spatial_merge_size"]
    rng = np.random.default_rng(12)
    rgb = rng.integers(0, 256, [4, 6, 3], dtype=np.uint8)
    rgba = rng.integers(0, 256, [4, 6, 4], dtype=np.uint8)
    gray = rng.integers(0, 256, [4, 6], dtype=np.uint8)
    big = rng.integers(0, 256, [5, 7, 3], dtype=np.uint8)
    # A side under patch * merge: GLM-4V's sizing scales it up first.
    small = rng.integers(0, 256, [1, 6, 3], dtype=np.uint8)
    alpha = rgba[..., 3:].astype(np.uint32)
    composited = ((rgba[..., :3] * alpha + 255 * (255 - alpha) + 127) // 255).astype(np.uint8)
    cases = []
    for name, pixels, seen in (("png_rgb", rgb, rgb), ("png_rgba", rgba, composited),
                               ("png_gray", gray, np.repeat(gray[..., None], 3, 2)),
                               ("png_resized", big, big), ("png_small_resized", small, small)):
        png = os.path.join(work, name + ".png")
        vision_rules.write_png(png, pixels)
        patches, grid = vision_rules.preprocess(seen, config, merge)
        tokens = int(np.prod(grid[0])) // merge**2
        cases.append((name, [1, 2, 12] + [IMAGE_TOKEN] * tokens + [14, 5, 6],
                      {"hidden_states": patches, "grid_thw": grid}, png))
    return cases


def image_tolerance(args, name, files, grids, config):
    """The largest |patch diff| allowed in each patch row of `files` (one
    image each, `grids` their (t, h, w)): a JPEG's rows --jpeg-levels 8-bit
    levels over the processor's smallest std, a PNG's --resize-tol in a
    case of resized images, else 0."""
    level = config["rescale_factor"] / min(config["image_std"])
    rows = []
    for file, grid in zip(files, grids):
        jpeg = file.lower().endswith((".jpg", ".jpeg"))
        tol = args.jpeg_levels * level if jpeg else args.resize_tol if "resized" in name else 0.0
        rows += [tol] * int(np.prod(grid))
    return np.array(rows, np.float64)


def given_rule(work):
    """The grid rule's inputs moe-run saved in WORK/vision."""
    return [k for k in GRID_INPUTS if os.path.exists(os.path.join(work, "vision", k + ".npy"))]


def compare_saved(name, work, want, tol=0.0, only=None):
    """Whether moe-run's saved vision inputs equal `want` (floats within
    `tol`: a number, or one per row of a float input); prints the largest
    difference of each."""
    ok = True
    for key, array in want.items():
        if only is not None and key not in only:
            continue
        path = os.path.join(work, "vision", key + ".npy")
        got = np.load(path) if os.path.exists(path) else None
        same = got is not None and got.shape == array.shape and got.dtype == array.dtype
        diff = np.abs(got.astype(np.float64) - array) if same and array.size else np.zeros([1])
        err = float(np.max(diff))
        bound = np.asarray(tol if array.dtype.kind == "f" else 0.0, np.float64)
        same = same and bool(np.all(diff.reshape(len(diff), -1) <= bound.reshape(-1, 1)))
        ok &= same
        if not same:
            print(f"check_multimodal: {name}: {key}: moe-run's "
                  f"{None if got is None else (got.dtype, got.shape)} differs from "
                  f"{(array.dtype, array.shape)} (max |diff| {err:.2e})")
    return ok


# --------------------------------------------------------------------------- #


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--reference", required=True, help="ort, or export_vlm.py's generate.npz")
    parser.add_argument("--moec", default="moec")
    parser.add_argument("--moe-run", dest="moe_run", default="moe-run")
    parser.add_argument("--max-seq", dest="max_seq", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=6)
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--dim", action="append", default=[], help="moec compile --dim NAME=N")
    parser.add_argument("--compile-flag", dest="compile_flag", action="append", default=[],
                        help="another moec compile flag, e.g. --compile-flag=--devices=2")
    parser.add_argument("--run-flag", dest="run_flag", action="append", default=[],
                        help="another moe-run flag, e.g. --run-flag=--devices=2")
    parser.add_argument("--launcher", default="",
                        help="what runs moe-run, e.g. 'mpirun -np 2' (expert-parallel plans)")
    parser.add_argument("--resize-tol", dest="resize_tol", type=float, default=0.05,
                        help="largest |patch diff| of a resized image (8-bit levels over std)")
    parser.add_argument("--jpeg-levels", dest="jpeg_levels", type=float, default=4,
                        help="largest |pixel diff| of a JPEG's patches, in 8-bit levels")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    plan = os.path.join(args.workdir, "mm.plan")
    run([args.moec, "compile", args.folder, "--max-seq", str(args.max_seq), "-o", plan]
        + [f"--dim={d}" for d in args.dim] + args.compile_flag)
    info = json.loads(run([args.moec, "inspect", plan, "--json"]))["multimodal"]
    given = set(info["given_inputs"])
    bad = 0
    if args.reference == "ort":
        tiled = os.path.exists(os.path.join(args.folder, "multi_modal_projector.onnx"))
        model = OrtTiledModel(args.folder) if tiled else OrtModel(args.folder)
        # Llama 4's tile processor (gen_multimodal.py --tiles): its images
        # are the cases.
        tiles = tiled and os.path.exists(os.path.join(args.folder, "preprocessor_config.json"))
        cases = [] if tiles else (tiled_cases if tiled else synthetic_cases)(args.workdir)
        for name, prompt, vision in cases:
            want, want_logits = model.generate(prompt, vision, args.tokens)
            got, got_logits = generate(args, plan, prompt, {k: v for k, v in vision.items() if k in given},
                                       os.path.join(args.workdir, name), args.tokens)
            err = float(np.max(np.abs(got_logits.reshape(want_logits.shape) - want_logits)))
            ok = list(got) == list(want) and err <= args.rtol * max(1.0, float(np.max(np.abs(want_logits))))
            if vision and getattr(model, "grid_inputs", None):
                rule = vision_rules.grid_inputs(vision["grid_thw"], model.merge, model.side)
                ok &= compare_saved(name, os.path.join(args.workdir, name), rule, only=model.grid_inputs)
            bad += not ok
            print(f"check_multimodal: {name}: {'ok' if ok else 'MISMATCH'}: moe-run {list(got)}, "
                  f"onnxruntime {list(want)}, max |logits diff| {err:.2e}")
        for name, prompt, vision, png in (tile_image_cases if tiles else image_cases)(args.folder, args.workdir):
            want, want_logits = model.generate(prompt, vision, args.tokens)
            work = os.path.join(args.workdir, name)
            got, got_logits = generate(args, plan, prompt, {}, work, args.tokens,
                                       png if isinstance(png, list) else [png])
            # An 8-bit level over the smallest std, where resized.
            tol = 1.0 / 255 / 0.26 + 1e-6 if "resized" in name else 0.0
            ok = compare_saved(name, work, vision, tol)
            if tol == 0.0:
                err = float(np.max(np.abs(got_logits.reshape(want_logits.shape) - want_logits)))
                ok &= list(got) == list(want) and err <= args.rtol * max(1.0, float(np.max(np.abs(want_logits))))
            bad += not ok
            print(f"check_multimodal: {name}: {'ok' if ok else 'MISMATCH'}: moe-run {list(got)}"
                  + (f", onnxruntime {list(want)}" if tol == 0.0 else ""))
    else:
        ref = np.load(args.reference)
        cases = sorted(k[len("input_ids_"):] for k in ref.files if k.startswith("input_ids_"))
        for name in cases:
            prompt = ref[f"input_ids_{name}"][0]
            want = [int(i) for i in ref[f"generated_{name}"][0]]
            prefix = "image_encoder."
            vision = {k[len(prefix):-len(name) - 1]: ref[k] for k in ref.files
                      if k.startswith(prefix) and k.endswith("_" + name)}
            vision = {k: v for k, v in vision.items() if k in given}
            images, pixels = [], {}
            if f"pixel_values_{name}" in ref.files:
                # An image file through the plan's image processor.
                images = [os.path.join(args.folder, str(f)) for f in np.atleast_1d(ref[f"image_file_{name}"])]
                if f"image_grid_thw_{name}" in ref.files:
                    pixels = {"hidden_states": ref[f"pixel_values_{name}"], "grid_thw": ref[f"image_grid_thw_{name}"]}
                else:  # Llama 4's tiles: no grid.
                    pixels = {"pixel_values": ref[f"pixel_values_{name}"]}
            work = os.path.join(args.workdir, name)
            got, _ = generate(args, plan, prompt, vision, work, len(want), images)
            ok = list(got) == list(want)
            if pixels:
                with open(os.path.join(args.folder, "preprocessor_config.json")) as f:
                    config = json.load(f)
                files = [str(f) for f in np.atleast_1d(ref[f"image_file_{name}"])]
                if "grid_thw" not in pixels:
                    # Llama 4's tiles (`tiles_<case>` per image), resized
                    # and normalised in bfloat16: a JPEG's within its
                    # levels, a level of the resize and a bfloat16 step.
                    tiles = [[int(t)] for t in np.atleast_1d(ref[f"tiles_{name}"])]
                    tol = image_tolerance(args, name, files, tiles, config)
                    level = config["rescale_factor"] / min(config["image_std"])
                    ok &= compare_saved(name, work, pixels, np.where(tol > 0, tol + level + 2.0**-7, 0.0))
                patches = np.load(os.path.join(work, "vision", "hidden_states.npy")) if "grid_thw" in pixels else None
                if "grid_thw" in pixels:
                    ok &= compare_saved(name, work, pixels,
                                        image_tolerance(args, name, files, pixels["grid_thw"], config))
                if patches is not None and patches.shape == pixels["hidden_states"].shape:
                    # Patch rows are (channel, frame, y, x): each channel's
                    # difference in 8-bit levels.
                    diff = np.abs(patches - pixels["hidden_states"]).reshape(len(patches), 3, -1)
                    levels = diff * np.array(config["image_std"])[:, None] / config["rescale_factor"]
                    print(f"check_multimodal: {name}: patches {', '.join(files)}: "
                          f"max |diff| {float(np.max(levels)):.2f} 8-bit levels")
            grids = pixels.get("grid_thw", vision.get("grid_thw"))
            helper = os.path.join(args.folder, "vision_inputs.onnx")
            if grids is not None and len(grids) == 1 and os.path.exists(helper):
                # The rule against the exporter's own helper, in onnxruntime
                # (traced on one image, it takes one).
                import onnxruntime as ort

                session = ort.InferenceSession(helper, providers=["CPUExecutionProvider"])
                names = [o.name for o in session.get_outputs()]
                wanted = dict(zip(names, session.run(None, {"grid_thw": grids})))
                ok &= compare_saved(name, work, wanted, only=given_rule(work))
            bad += not ok
            print(f"check_multimodal: {name}: {'ok' if ok else 'MISMATCH'}: moe-run {list(got)}, torch {list(want)}")
    print("check_multimodal: " + ("all cases match" if not bad else f"{bad} cases differ"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
