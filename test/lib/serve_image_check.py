#!/usr/bin/env python3
"""Checks moe-serve's images (docs/serving.md, "Images") on a multimodal
plan with a real client (the openai package, httpx) on loopback:

  serve_image_check.py --plan MM.PLAN --tokenizer DIR --workdir W
                       --processor PREPROCESSOR_CONFIG.json
                       [--image FILE ...] [--size HxW ...]
                       [--text-plan PLAN --text-tokenizer DIR]
                       [-- MOE-SERVE ARGS...]

The images are the given files and PNGs of random pixels of the given sizes
written here. For each image, then for all of them in one message, a chat
request with the image as a data URI gives the greedy ids that `moe-run
PLAN --prompt-ids IDS --image FILE...` gives, IDS being the chat template's
prompt with each image's one image token repeated as many times as the
image has merged patches (by the processor rule in vision_rules.py); usage counts those ids. A text-only chat gives
moe-run's ids of its prompt. Then the bad requests (a URL to fetch, not a
data URI, another media type, bad base64, an image over --max-image-bytes,
bytes that are no image, a truncated PNG, image tokens in the text, a
content part of another type) are 400s naming the part, the server serves
on, and with --text-plan a text-only plan's server refuses an image. Prints
"ok ..." per check; exits 1 at the first failure.
"""

import argparse
import base64
import json
import os
import struct
import subprocess
import sys

import httpx
import numpy as np
import openai
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vision_rules  # noqa: E402
from serve_check import TIMEOUT, Failure, Server, check  # noqa: E402

NEW = 6


def image_size(path):
    """(height, width) of a PNG (its IHDR) or a JPEG (its first SOF)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        width, height = struct.unpack(">II", data[16:24])
        return height, width
    i = 2
    while i + 9 < len(data):
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return height, width
        i += 2 + length
    raise Failure(f"{path}: no image size found")


def data_uri(path):
    kind = "jpeg" if path.lower().endswith((".jpg", ".jpeg")) else "png"
    with open(path, "rb") as f:
        return f"data:image/{kind};base64," + base64.b64encode(f.read()).decode()


def message(images, text="describe this"):
    parts = [{"type": "image_url", "image_url": {"url": data_uri(p)}} for p in images]
    return [{"role": "user", "content": parts + [{"type": "text", "text": text}]}]


def chat(server, messages):
    r = server.client().chat.completions.create(
        model=server.model, messages=messages, max_tokens=NEW, temperature=0,
        extra_body={"return_token_ids": True, "ignore_eos": True})
    return r.choices[0].model_extra["token_ids"], r.usage.prompt_tokens


def moe_run(plan, prompt, images, work):
    os.makedirs(work, exist_ok=True)
    cmd = ["moe-run", plan, "--prompt-ids", ",".join(map(str, prompt)),
           "--max-new-tokens", str(NEW), "--threads", "2", "--output-dir", work,
           "--save-vision-inputs", os.path.join(work, "vision")]
    for image in images:
        cmd += ["--image", image]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        raise Failure(f"{' '.join(cmd)}: {result.stderr}")
    grids = []
    if images:
        grids = np.load(os.path.join(work, "vision", "grid_thw.npy")).tolist()
    return np.load(os.path.join(work, "tokens.npy")).reshape(-1).tolist(), grids


def prompt_ids(tok, counts):
    """The chat template's prompt for one user message of images and text,
    each image's token repeated `counts[k]` times."""
    t = tok.token_to_id
    ids = [t("<|im_start|>"), t("user")]
    for n in counts:
        ids += [t("<|vision_start|>")] + [t("<|image_pad|>")] * n + [t("<|vision_end|>")]
    return ids + [t("describe"), t("this"), t("<|im_end|>"), t("<|im_start|>"), t("assistant")]


def bad(server, messages, what, needle):
    r = httpx.post(server.url + "/v1/chat/completions", timeout=TIMEOUT,
                   json={"messages": messages, "max_tokens": 2})
    err = r.json().get("error", {})
    msg = err.get("message") or ""
    check(r.status_code == 400 and needle in msg and err.get("param") == "messages",
          f"{what}: {r.status_code} {msg!r}")


def scenario(server, args, tok, images):
    with open(args.processor) as f:
        proc = json.load(f)
    patch, merge = proc["patch_size"], proc["merge_size"]
    size = proc.get("size", {})
    lo = size.get("shortest_edge", proc.get("min_pixels"))
    hi = size.get("longest_edge", proc.get("max_pixels"))

    def tokens_of(image):
        """The image's tokens by the processor rule (vision_rules.py): its
        merged patches after the smart resize."""
        height, width = image_size(image)
        h, w = vision_rules.smart_resize(height, width, patch * merge, lo, hi)
        return (h // patch) * (w // patch) // (merge * merge)

    for k, image in enumerate(images):
        ids = prompt_ids(tok, [tokens_of(image)])
        want, _ = moe_run(args.plan, ids, [image], os.path.join(args.workdir, f"i{k}"))
        got, used = chat(server, message([image]))
        check(got == want and used == len(ids),
              f"image {os.path.basename(image)} ({tokens_of(image)} tokens): moe-run --image's ids "
              f"{want}, usage {used}")
    if len(images) > 1:
        ids = prompt_ids(tok, [tokens_of(i) for i in images])
        want, _ = moe_run(args.plan, ids, images, os.path.join(args.workdir, "all"))
        got, used = chat(server, message(images))
        check(got == want and used == len(ids),
              f"{len(images)} images in one message: moe-run --image x {len(images)}'s ids {want}")
    text = [{"role": "user", "content": "describe this"}]
    t = tok.token_to_id
    ids = [t("<|im_start|>"), t("user"), t("describe"), t("this"), t("<|im_end|>"), t("<|im_start|>"),
           t("assistant")]
    want, _ = moe_run(args.plan, ids, [], os.path.join(args.workdir, "text"))
    got, used = chat(server, text)
    check(got == want and used == len(ids), f"text-only chat: moe-run's ids {want}")

    def with_url(u):
        return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}},
                                             {"type": "text", "text": "describe this"}]}]

    bad(server, with_url("https://example.com/cat.png"), "an http URL", "does not fetch image URLs")
    bad(server, with_url("cat.png"), "not a data URI", "messages[0].content[0]: not a data URI")
    bad(server, with_url("data:image/gif;base64,R0lGOD"), "a GIF", "media type is 'image/gif'")
    bad(server, with_url("data:image/png,rawbytes"), "not base64", "is not base64")
    bad(server, with_url("data:image/png;base64,iVBOR*w0K"), "bad base64", "not valid base64")
    big = os.path.join(args.workdir, "big.png")
    vision_rules.write_png(big, np.random.default_rng(7).integers(0, 256, [64, 64, 3]))
    bad(server, message([big]), "an image over --max-image-bytes", "larger than the server's limit")
    junk = "data:image/png;base64," + base64.b64encode(b"no image at all").decode()
    bad(server, with_url(junk), "bytes that are no image", "image 0: not a PNG or JPEG image")
    with open(images[0], "rb") as f:
        head = f.read()[:60]
    bad(server, with_url("data:image/png;base64," + base64.b64encode(head).decode()),
        "a truncated image", "image 0: not a valid")
    bad(server, [{"role": "user", "content": "<|image_pad|> describe this"}],
        "an image token in the text", "1 image token(s) (id")
    bad(server, [{"role": "user", "content": [{"type": "input_audio"}]}], "an audio part",
        "content parts are text or image_url, not 'input_audio'")
    ids = prompt_ids(tok, [tokens_of(images[0])])
    want, _ = moe_run(args.plan, ids, [images[0]], os.path.join(args.workdir, "i0"))
    got, _ = chat(server, message([images[0]]))
    check(got == want, "after the bad requests the server still serves")


def random_pngs(workdir, sizes, seed):
    """PNGs of random pixels, one per "HxW" of `sizes`, written in workdir."""
    rng = np.random.default_rng(seed)
    paths = []
    for size in sizes:
        h, w = map(int, size.split("x"))
        path = os.path.join(workdir, f"random_{h}x{w}.png")
        vision_rules.write_png(path, rng.integers(0, 256, [h, w, 3]))
        paths.append(path)
    return paths


#: What a failed check raises.
FAILURES = (Failure, AssertionError, openai.OpenAIError, httpx.HTTPError, KeyError)


def report_failure(error, servers):
    """Prints the failure with the last server's log, kills the servers
    still running, and returns 1 (the exit status)."""
    print(f"FAIL {type(error).__name__}: {error}\n--- moe-serve log:\n" + servers[-1].log(), flush=True)
    for s in servers:
        if s.proc.poll() is None:
            s.proc.kill()
    return 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--plan", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--processor", required=True,
                   help="the plan's folder's preprocessor_config.json")
    p.add_argument("--image", action="append", default=[])
    p.add_argument("--size", action="append", default=[], help="HxW of a random PNG")
    p.add_argument("--text-plan")
    p.add_argument("--text-tokenizer")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    os.makedirs(args.workdir, exist_ok=True)
    images = list(args.image) + random_pngs(args.workdir, args.size, 3)
    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    servers = []
    try:
        server = Server(args.plan, args.tokenizer, argv[cut + 1:])
        servers.append(server)
        scenario(server, args, tok, images)
        server.stop()
        if args.text_plan:
            server = Server(args.text_plan, args.text_tokenizer, [])
            servers.append(server)
            bad(server, message(images[:1]), "an image for a text-only plan", "takes no images")
            server.stop()
    except FAILURES as e:
        return report_failure(e, servers)
    print("serve images: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
