#!/usr/bin/env python3
"""Checks moe-run on the multimodal plan of an onnxruntime-genai folder.

  check_genai_vlm.py PLAN FOLDER WORKDIR [--vision-plan VPLAN]

FOLDER's reference.npz (examples/zoo/genai/make_genai_vlm.py) holds the
processor's pixel_values and image_grid_thw for FOLDER/image.png, onnxruntime's
image_features, a prompt with image tokens and the greedy new ids
onnxruntime-genai gives for it (new_ids), and a prompt without images and its
ids (text_new_ids). This runs `moe-run PLAN --prompt-ids` with the vision
inputs as .npy files, with `--image FOLDER/image.png`, and with the text
prompt, and requires the same ids; with --vision-plan (the vision graph
compiled alone), its image_features within 1e-5 of the largest. Prints one
"ok" line per check; exits 1 on the first mismatch.
"""

import argparse
import os
import subprocess
import sys

import numpy as np


def run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(command)} exited {done.returncode}: "
                 f"{done.stderr.strip()}")
    return done.stdout


def generated(plan, prompt, count, extra, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    run(["moe-run", plan, "--prompt-ids", ",".join(map(str, prompt)),
         "--max-new-tokens", str(count), "--output-dir", out_dir] + extra)
    ids = np.load(os.path.join(out_dir, "tokens.npy")).reshape(-1)
    return [int(i) for i in ids]


def expect(what, got, want):
    if got != want:
        sys.exit(f"FAIL {what}: moe-run gave {got}, onnxruntime-genai {want}")
    print(f"ok {what}: {len(got)} new ids")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("folder")
    parser.add_argument("workdir")
    parser.add_argument("--vision-plan")
    args = parser.parse_args()
    ref = np.load(os.path.join(args.folder, "reference.npz"))
    os.makedirs(args.workdir, exist_ok=True)
    vision = []
    for name in ("pixel_values", "image_grid_thw"):
        path = os.path.join(args.workdir, name + ".npy")
        np.save(path, ref[name])
        vision += ["--vision-input", f"{name}={path}"]
    prompt = [int(i) for i in ref["prompt"]]
    want = [int(i) for i in ref["new_ids"]]
    expect("vision inputs",
           generated(args.plan, prompt, len(want), vision,
                     os.path.join(args.workdir, "vision")), want)
    expect("image file",
           generated(args.plan, prompt, len(want),
                     ["--image", os.path.join(args.folder, "image.png")],
                     os.path.join(args.workdir, "image")), want)
    text = [int(i) for i in ref["text_prompt"]]
    want = [int(i) for i in ref["text_new_ids"]]
    expect("text only",
           generated(args.plan, text, len(want), [],
                     os.path.join(args.workdir, "text")), want)
    if args.vision_plan:
        out_dir = os.path.join(args.workdir, "features")
        run(["moe-run", args.vision_plan, "--input",
             f"pixel_values={args.workdir}/pixel_values.npy", "--output-dir",
             out_dir])
        ours = np.load(os.path.join(out_dir, "image_features.npy"))
        theirs = ref["image_features"]
        error = float(np.abs(ours - theirs).max() /
                      max(1.0, np.abs(theirs).max()))
        if ours.shape != theirs.shape or error > 1e-5:
            sys.exit(f"FAIL image features: {ours.shape} vs {theirs.shape}, "
                     f"relative error {error:.2e}")
        print(f"ok image features: relative error {error:.1e}")


if __name__ == "__main__":
    main()
