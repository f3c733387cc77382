#!/usr/bin/env python3
"""Checks moe-serve's images on a plan of Llama 4's tiles (docs/serving.md,
"Images") with a real client (the openai package, httpx) on loopback:

  serve_tiles_check.py --plan MM.PLAN --tokenizer DIR --workdir W
                       --reference GENERATE_IMAGES.npz [--size HxW ...]
                       [--bare-tokenizer DIR] [-- MOE-SERVE ARGS...]

DIR is make_vlm_tokenizer.py --llama4's folder (with the model's
config.json), whose chat template makes a user message [image, word 5,
image, word 6, ...] the zoo's reference prompt [1, 2, <image>, 5, <image>,
6, ...]. For each case of the reference (examples/zoo/vlm/
image_references.py: its files and Llama4Processor's prompt), a chat
request with the images as data URIs gives moe-run --prompt-ids PROMPT
--image FILE...'s greedy ids and torch's, and usage counts the processor's
prompt. PNGs of random pixels of the given sizes give moe-run's ids for the
layout the numpy rule (vision_rules.py's canvas) gives. Then the errors:
image tokens or placeholders typed in the text, a truncated image, a prompt
over the plan's max-seq; with --bare-tokenizer (a folder without
config.json), images are a 400 saying what the layout needs while text
still serves. Prints "ok ..." per check; exits 1 at the first failure.
"""

import argparse
import base64
import os
import subprocess
import sys

import httpx
import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vision_rules  # noqa: E402
from serve_check import TIMEOUT, Failure, Server, check  # noqa: E402
from serve_image_check import (FAILURES, NEW, bad, chat, data_uri, image_size,  # noqa: E402
                               random_pngs, report_failure)

# The zoo's tiny Llama 4 (examples/zoo/vlm/image_references.py): tiles of
# 32 pixels, at most 4; patches of 8 and a pixel shuffle ratio of 0.5 give
# 4 image tokens a tile.
TILE, MAX_TILES, PER_TILE = 32, 4, 4


def layout(tok, rows, cols):
    """Llama4Processor's tokens of an image on a rows x cols canvas, written
    out here from transformers' rule, not the server's code."""
    t = tok.token_to_id
    patches = [t("<|patch|>")] * PER_TILE
    ids = [t("<|image_start|>")]
    if rows * cols > 1:
        for _ in range(rows):
            for x in range(cols):
                ids += patches + ([t("<|tile_x_separator|>")] if x + 1 < cols else [])
            ids.append(t("<|tile_y_separator|>"))
    return ids + [t("<|image|>")] + patches + [t("<|image_end|>")]


def message(tok, images):
    """A user message [image 0, word 5, image 1, word 6, ...]."""
    parts = []
    for k, image in enumerate(images):
        parts += [{"type": "image_url", "image_url": {"url": data_uri(image)}},
                  {"type": "text", "text": tok.id_to_token(5 + k)}]
    return [{"role": "user", "content": parts}]


def moe_run(plan, prompt, images, work):
    os.makedirs(work, exist_ok=True)
    cmd = ["moe-run", plan, "--prompt-ids", ",".join(map(str, prompt)),
           "--max-new-tokens", str(NEW), "--threads", "2", "--output-dir", work]
    for image in images:
        cmd += ["--image", image]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        raise Failure(f"{' '.join(cmd)}: {result.stderr}")
    return np.load(os.path.join(work, "tokens.npy")).reshape(-1).tolist()


def scenario(server, args, tok, randoms):
    ref = np.load(args.reference)
    folder = os.path.dirname(os.path.abspath(args.reference))
    cases = sorted(k[len("input_ids_"):] for k in ref.files if k.startswith("input_ids_"))
    for case in cases:
        images = [os.path.join(folder, f) for f in ref[f"image_file_{case}"].tolist()]
        prompt = ref[f"input_ids_{case}"].reshape(-1).tolist()
        torch_ids = ref[f"generated_{case}"].reshape(-1).tolist()[:NEW]
        want = moe_run(args.plan, prompt, images, os.path.join(args.workdir, case))
        got, used = chat(server, message(tok, images))
        check(got == want == torch_ids and used == len(prompt),
              f"{case} ({len(images)} image(s), {len(prompt)} prompt tokens): moe-run --image's "
              f"ids and torch's {want}, usage {used}")
    for k, image in enumerate(randoms):
        height, width = image_size(image)
        (ch, cw), _ = vision_rules.llama4_size(height, width, TILE, MAX_TILES)
        t = tok.token_to_id
        prompt = [t("<|begin_of_text|>"), t("<|header_start|>")] + layout(
            tok, ch // TILE, cw // TILE) + [5]
        want = moe_run(args.plan, prompt, [image], os.path.join(args.workdir, f"r{k}"))
        got, used = chat(server, message(tok, [image]))
        check(got == want and used == len(prompt),
              f"image {os.path.basename(image)} ({ch // TILE} x {cw // TILE} tiles): moe-run "
              f"--image's ids {want}")
    text = [{"role": "user", "content": tok.id_to_token(5)}]
    want = moe_run(args.plan, [1, 2, 5], [], os.path.join(args.workdir, "text"))
    got, used = chat(server, text)
    check(got == want and used == 3, f"text-only chat: moe-run's ids {want}")

    tile = os.path.join(folder, "l4_tile.png")
    one = message(tok, [tile])
    patch = [{"role": "user", "content": "<|patch|> " + tok.id_to_token(5)}]
    bad(server, patch, "an image token in the text", "text may not hold image tokens")
    extra = [{"role": "user", "content": one[0]["content"] + [{"type": "text", "text": "<|image|>"}]}]
    bad(server, extra, "a placeholder in the text", "2 image placeholder(s) (id 249) for 1 image(s)")
    with open(tile, "rb") as f:
        head = f.read()[:60]
    cut = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(head).decode()}}]}]
    bad(server, cut, "a truncated image", "image 0: not a valid")
    wide = os.path.join(folder, "l4_wide.png")
    r = httpx.post(server.url + "/v1/chat/completions", timeout=TIMEOUT,
                   json={"messages": message(tok, [wide] * 3), "max_tokens": 2})
    msg = r.json().get("error", {}).get("message") or ""
    check(r.status_code == 400 and "the prompt's 71 tokens plus max_tokens 2" in msg,
          f"three 1 x 3 images over the plan's max-seq: {r.status_code} {msg!r}")
    got, _ = chat(server, one)
    check(got == ref["generated_tile"].reshape(-1).tolist()[:NEW], "after the bad requests the server still serves")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--plan", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--size", action="append", default=[], help="HxW of a random PNG")
    p.add_argument("--bare-tokenizer")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    os.makedirs(args.workdir, exist_ok=True)
    randoms = random_pngs(args.workdir, args.size, 5)
    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    servers = []
    try:
        server = Server(args.plan, args.tokenizer, argv[cut + 1:])
        servers.append(server)
        scenario(server, args, tok, randoms)
        server.stop()
        if args.bare_tokenizer:
            server = Server(args.plan, args.bare_tokenizer, argv[cut + 1:])
            servers.append(server)
            tile = os.path.join(os.path.dirname(os.path.abspath(args.reference)), "l4_tile.png")
            bad(server, message(tok, [tile]), "an image without the model's config.json",
                "layout needs the vision patch_size")
            got, _ = chat(server, [{"role": "user", "content": tok.id_to_token(5)}])
            check(len(got) == NEW, "without config.json text still serves")
            server.stop()
    except FAILURES as e:
        return report_failure(e, servers)
    print("serve tiles: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
