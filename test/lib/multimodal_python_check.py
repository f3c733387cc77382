#!/usr/bin/env python3
"""Checks moert.Generator.generate(..., vision=...) on a multimodal plan
against moe-run's ids for the same prompt (check_multimodal.py's workdir):

    multimodal_python_check.py WORKDIR

Case g0 (one image, its inputs WORKDIR/g0.<input>.npy, moe-run's ids
WORKDIR/g0/tokens.npy) and the text case; then a vision input of the wrong
dtype raises ValueError naming it. Where the workdir has PNG cases
(png_rgb.png, a plan with an image processor), generate(images=[path])
gives moe-run --image's ids, and so do the file's bytes; load_images gives
the vision inputs moe-run --save-vision-inputs wrote, and names a bad image.
A workdir of Llama 4's tiles (tiles4.png, gen_multimodal.py --tiles) checks
generate(images=) with the 4-tile PNG's path and bytes against moe-run
--image's ids, load_images against its saved tiles and its canvas
(canvases=True) against vision_rules.py's instead.
With a second argument, a zoo folder (examples/zoo/vlm/out/NAME) whose
plan check_multimodal.py compiled into WORKDIR (an expert-parallel one,
say): generate(images=[its image.png]) gives moe-run --image's ids for the
reference's `png` prompt. Prints one line per check.
"""

import os
import struct
import sys

import numpy as np

import moert

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vision_rules  # noqa: E402


def check_tiles(work, plan, generator):
    """Llama 4's tiles: the 4-tile PNG by path and bytes, load_images."""
    png = os.path.join(work, "tiles4.png")
    want = np.load(os.path.join(work, "tiles4", "tokens.npy")).tolist()
    prompt = [1, 2, 12] + [13] * 4 + [14, 5]
    with open(png, "rb") as f:
        data = f.read()
    for what, image in (("path", png), ("bytes", data)):
        got = generator.generate(prompt, max_new_tokens=len(want), images=[image])
        print(f"python tiles {what}:", "ok" if got == want else f"MISMATCH {got} != {want}")
    loaded = moert.load_images(plan, [png])
    saved = np.load(os.path.join(work, "tiles4", "vision", "pixel_values.npy"))
    same = sorted(loaded) == ["pixel_values"] and np.array_equal(loaded["pixel_values"], saved)
    print("python tiles load_images:", "ok" if same else f"MISMATCH {loaded} != {saved}")
    # Its canvas, by the rule in numpy (gen_multimodal.py's processor: at
    # most 4 tiles), and the same tiles with it.
    width, height = struct.unpack(">II", data[16:24])
    tile = plan.multimodal["tile_size"]
    (ch, cw), _ = vision_rules.llama4_size(height, width, tile, 4)
    again, canvases = moert.load_images(plan, [data], canvases=True)
    same = canvases == [(ch // tile, cw // tile)] and np.array_equal(again["pixel_values"], saved)
    print("python tiles canvases:", "ok" if same else f"MISMATCH {canvases} != {[(ch // tile, cw // tile)]}")


def check_zoo(work, folder, plan, generator):
    """The zoo's `png` case: its prompt and image file."""
    ref = np.load(os.path.join(folder, "generate.npz"))
    prompt = [int(i) for i in ref["input_ids_png"][0]]
    want = np.load(os.path.join(work, "png", "tokens.npy")).reshape(-1).tolist()
    got = generator.generate(prompt, max_new_tokens=len(want),
                             images=[os.path.join(folder, "image.png")])
    print(f"python zoo image on {plan.num_devices} devices:",
          "ok" if got == want else f"MISMATCH {got} != {want}")


def main():
    work = sys.argv[1]
    plan = moert.Plan(os.path.join(work, "mm.plan"))
    generator = moert.Generator(plan, threads=2)
    if len(sys.argv) > 2:
        check_zoo(work, sys.argv[2], plan, generator)
        return
    if os.path.exists(os.path.join(work, "tiles4.png")):
        check_tiles(work, plan, generator)
        return
    prompt = [1, 2, 12] + [13] * 6 + [14, 5, 6]
    vision = {name: np.load(os.path.join(work, f"g0.{name}.npy")) for name in ("hidden_states", "grid_thw")}
    want = np.load(os.path.join(work, "g0", "tokens.npy")).tolist()
    got = generator.generate(prompt, max_new_tokens=len(want), vision=vision)
    print("python g0:", "ok" if got == want else f"MISMATCH {got} != {want}")
    want = np.load(os.path.join(work, "text", "tokens.npy")).tolist()
    got = generator.generate([1, 2, 7, 9, 5], max_new_tokens=len(want))
    print("python text:", "ok" if got == want else f"MISMATCH {got} != {want}")
    png = os.path.join(work, "png_rgb.png")
    if os.path.exists(png):
        want = np.load(os.path.join(work, "png_rgb", "tokens.npy")).tolist()
        got = generator.generate(prompt, max_new_tokens=len(want), images=[png])
        print("python image:", "ok" if got == want else f"MISMATCH {got} != {want}")
        # The same image as encoded bytes, and load_images' inputs.
        with open(png, "rb") as f:
            data = f.read()
        got = generator.generate(prompt, max_new_tokens=len(want), images=[data])
        print("python image bytes:", "ok" if got == want else f"MISMATCH {got} != {want}")
        loaded = moert.load_images(plan, [bytearray(data)])
        saved = {name: np.load(os.path.join(work, "png_rgb", "vision", f"{name}.npy"))
                 for name in loaded}
        same = all(np.array_equal(loaded[n], saved[n]) and loaded[n].dtype == saved[n].dtype
                   for n in saved)
        print("python load_images:", "ok" if same and sorted(loaded) == sorted(
            plan.multimodal["vision_inputs"]) else f"MISMATCH {loaded} != {saved}")
        # A grid processor has no canvases and no tile size.
        _, canvases = moert.load_images(plan, [data], canvases=True)
        print("python grid canvases:", "ok" if canvases is None and plan.multimodal["tile_size"] == 0
              else f"MISMATCH {canvases}")
        for bad in ([data[:50]], [data, png], [3]):
            try:
                moert.load_images(plan, bad)
                print("python bad image: no error")
            except (ValueError, TypeError) as e:
                print(f"python bad image: {type(e).__name__}: {e}")
    vision["hidden_states"] = vision["hidden_states"].astype(np.int64)
    try:
        generator.generate(prompt, max_new_tokens=2, vision=vision)
        print("python dtype: no error")
    except ValueError as e:
        print("python dtype: ValueError:", e)


if __name__ == "__main__":
    main()
