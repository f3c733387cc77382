#!/usr/bin/env python3
"""Checks moe-run on the multimodal plan of an onnxruntime-genai folder.

  check_genai_vlm.py PLAN FOLDER WORKDIR [--vision-plan VPLAN]
  check_genai_vlm.py --broken FOLDER OUT
  check_genai_vlm.py --as-version PLAN OUT MINOR

FOLDER's reference.npz (examples/zoo/genai/make_genai_vlm.py) holds the
processor's pixel_values and image_grid_thw for FOLDER/image.png, onnxruntime's
image_features, a prompt with image tokens and the greedy new ids
onnxruntime-genai gives for it (new_ids), and a prompt without images and its
ids (text_new_ids). This runs `moe-run PLAN --prompt-ids` with the vision
inputs as .npy files, with `--image FOLDER/image.png`, and with the text
prompt, and requires the same ids; with --vision-plan (the vision graph
compiled alone), its image_features within 1e-5 of the largest. Prints one
"ok" line per check; exits 1 on the first mismatch.

With --broken, writes copies of FOLDER under OUT, each with one change to
its genai_config.json that `moec compile` must refuse (BROKEN below). With
--as-version, copies PLAN to OUT declaring format 1.MINOR (the header's
minor version and checksum rewritten), for the loader's version checks.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np


# Flags of every generating moe-run (--run-flag), e.g. --devices=2.
RUN_FLAGS = []


def run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(command)} exited {done.returncode}: "
                 f"{done.stderr.strip()}")
    return done.stdout


def generated(plan, prompt, count, extra, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    run(["moe-run", plan, "--prompt-ids", ",".join(map(str, prompt)),
         "--max-new-tokens", str(count), "--output-dir", out_dir] + extra
        + RUN_FLAGS)
    ids = np.load(os.path.join(out_dir, "tokens.npy")).reshape(-1)
    return [int(i) for i in ids]


def expect(what, got, want):
    if got != want:
        sys.exit(f"FAIL {what}: moe-run gave {got}, onnxruntime-genai {want}")
    print(f"ok {what}: {len(got)} new ids")


def drop(section, key):
    del section[key]


# name -> a change to genai_config.json's "model" object.
BROKEN = {
    "no_embedding": lambda m: drop(m, "embedding"),
    "speech": lambda m: m.update(speech={"filename": "speech.onnx"}),
    "outside": lambda m: m["embedding"].update(filename="../embedding.onnx"),
    "ids_decoder": lambda m: m["decoder"]["inputs"].update(
        input_ids=m["decoder"]["inputs"].pop("inputs_embeds")),
    "audio": lambda m: m["embedding"]["inputs"].update(
        audio_features="audio_features"),
    "no_image_token": lambda m: drop(m, "image_token_id"),
    "vision_input": lambda m: m["vision"]["inputs"].update(
        image_sizes="image_sizes"),
    "features_name": lambda m: m["vision"]["outputs"].update(
        image_features="features"),
    "embeds_name": lambda m: m["decoder"]["inputs"].update(
        inputs_embeds="embeds"),
}


def write_broken(folder, out):
    for name, change in BROKEN.items():
        copy = os.path.join(out, name)
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy)
        path = os.path.join(copy, "genai_config.json")
        config = json.load(open(path))
        change(config["model"])
        json.dump(config, open(path, "w"), indent=4)


def write_as_version(plan, out, minor):
    """docs/plan-format.md's header: the minor version at byte 10, the
    section count and table offset at 24 and 28, and at 48 the CRC-32 of
    the 64 header bytes (checksum zeroed) and the section table."""
    import struct
    import zlib

    data = bytearray(open(plan, "rb").read())
    struct.pack_into("<H", data, 10, minor)
    count, offset = struct.unpack_from("<II", data, 24)
    header = bytearray(data[:64])
    struct.pack_into("<I", header, 48, 0)
    crc = zlib.crc32(bytes(data[offset:offset + 32 * count]),
                     zlib.crc32(bytes(header)))
    struct.pack_into("<I", data, 48, crc)
    open(out, "wb").write(data)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--broken":
        return write_broken(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 5 and sys.argv[1] == "--as-version":
        return write_as_version(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("folder")
    parser.add_argument("workdir")
    parser.add_argument("--vision-plan")
    parser.add_argument("--run-flag", dest="run_flag", action="append", default=[],
                        help="another moe-run flag, e.g. --run-flag=--devices=2")
    args = parser.parse_args()
    RUN_FLAGS.extend(args.run_flag)
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
