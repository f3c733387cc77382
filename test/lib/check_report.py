#!/usr/bin/env python3
"""Checks a `moe-run --report-html` page against the --stats of its run.

    check_report.py REPORT.html --stats STATS.json --runs R [--devices N]
                    [--title-contains TEXT] [--screenshot PNG]

Parses the page as XML (the report writes well-formed markup, so that any
unescaped name breaks this parse) and checks: no script, style sheet, image,
frame or object, and no src=/href= or url() anywhere, so that the page is
self-contained; the title names the plan (TEXT, untrusted characters and
all); the bar charts (step kinds, imbalance, and the communication share of
a multi-device run) and, per MoE layer of the stats, an expert-load heatmap
with experts x R cells (experts: the layer's tokens_per_expert in the
stats) whose tokens add up to the stats' count, and one per device of an
expert-parallel run. With --screenshot, when Chromium is installed, renders
the page headless into PNG and checks that it is not blank; without
Chromium it says it skipped that. Exits 1 at the first failure.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

SVG = "{http://www.w3.org/2000/svg}"
XHTML = "{http://www.w3.org/1999/xhtml}"


def fail(message):
    print(f"check_report: error: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def local(tag):
    return tag.rsplit("}", 1)[-1]


def png_pixels(path):
    """The (width, height, rows of RGB(A) bytes) of an 8-bit RGB/RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    check(depth == 8 and color in (2, 6) and interlace == 0,
          f"{path}: unexpected PNG format (depth {depth}, color {color})")
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def screenshot(report, png):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("screenshot: skipped: chromium is not installed "
              "(Debian package chromium)")
        return
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu",
             f"--user-data-dir={profile}", f"--screenshot={png}",
             "--window-size=1000,1400",
             "file://" + os.path.abspath(report)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=120, check=True)
    width, height, channels, rows = png_pixels(png)
    colors, inked = set(), 0
    for row in rows[::4]:
        for x in range(0, width * channels, channels * 4):
            pixel = row[x:x + 3]
            colors.add(pixel)
            inked += pixel != b"\xff\xff\xff"
    sampled = len(rows[::4]) * len(range(0, width * channels, channels * 4))
    check(inked > sampled // 50 and len(colors) >= 8,
          f"the screenshot looks blank: {inked} of {sampled} sampled pixels "
          f"not white, {len(colors)} colors")
    print(f"ok screenshot: {width}x{height}, {len(colors)} colors")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("--stats", required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--title-contains")
    parser.add_argument("--screenshot")
    args = parser.parse_args()

    with open(args.stats) as f:
        stats = json.load(f)
    try:
        root = ET.parse(args.report).getroot()
    except ET.ParseError as e:
        fail(f"the report is not well-formed markup: {e}")
    with open(args.report, encoding="utf-8") as f:
        text = f.read()

    # Self-contained: nothing the browser would fetch or run.
    for element in root.iter():
        tag = local(element.tag)
        check(tag not in ("script", "link", "img", "iframe", "object",
                          "embed", "image", "use", "foreignObject"),
              f"the report has a <{tag}> element")
        for name, value in element.attrib.items():
            check(local(name) not in ("src", "href") and
                  not local(name).startswith("on"),
                  f"<{tag}> has the attribute {local(name)}='{value}'")
    for needle in ("url(", "@import", "@font-face", "<script"):
        check(needle not in text.lower(), f"the report contains '{needle}'")
    print("ok self-contained: no scripts, links, images, fonts or fetches")

    if args.title_contains is not None:
        title = root.find(f"{XHTML}head/{XHTML}title")
        check(title is not None and args.title_contains in title.text,
              f"the title {title.text if title is not None else None!r} "
              f"does not contain {args.title_contains!r}")
        print("ok title: names the plan, escaped")

    svgs = list(root.iter(f"{SVG}svg"))
    ids = {svg.get("id") for svg in svgs}
    wanted = {"step-kinds", "imbalance", "layer-parts"}
    if args.devices > 1:
        wanted.add("comm-share")
    check(wanted <= ids, f"bar charts {sorted(wanted - ids)} are missing")
    for chart in wanted:
        svg = next(s for s in svgs if s.get("id") == chart)
        check(list(svg.iter(f"{SVG}rect")), f"the chart {chart} has no bars")
    print(f"ok charts: {', '.join(sorted(wanted))}")

    maps = [s for s in svgs if s.get("class") == "heatmap"]
    layers = stats["moe_layers"]
    for index, layer in enumerate(layers):
        experts = len(layer["tokens_per_expert"])
        devices = ["all"] + ([str(d) for d in range(args.devices)]
                             if args.devices > 1 else [])
        for device in devices:
            found = [m for m in maps if m.get("data-layer") == str(index) and
                     m.get("data-device") == device]
            check(len(found) == 1,
                  f"layer {index}: {len(found)} heatmaps of device {device}")
            cells = [r for r in found[0].iter(f"{SVG}rect")
                     if r.get("class") == "cell"]
            check(int(found[0].get("data-experts")) == experts and
                  len(cells) == experts * args.runs,
                  f"layer {index} device {device}: {len(cells)} cells, "
                  f"expected {experts} experts x {args.runs} runs")
            check({int(c.get("data-expert")) for c in cells} ==
                  set(range(experts)) and
                  {int(c.get("data-column")) for c in cells} ==
                  set(range(args.runs)),
                  f"layer {index} device {device}: cells do not cover "
                  f"experts x runs")
            if device == "all":
                tokens = sum(int(c.get("data-tokens")) for c in cells)
                check(tokens == sum(layer["tokens_per_expert"]),
                      f"layer {index}: the heatmap holds {tokens} tokens, "
                      f"the stats {sum(layer['tokens_per_expert'])}")
    print(f"ok heatmaps: {len(layers)} layers x "
          f"{1 + (args.devices if args.devices > 1 else 0)} maps of experts "
          f"x {args.runs} runs")

    if args.screenshot:
        screenshot(args.report, args.screenshot)
    print("check_report: ok")


if __name__ == "__main__":
    main()
