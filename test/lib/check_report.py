#!/usr/bin/env python3
"""Checks a `moe-run --report-html` page against the --stats of its run.

    check_report.py REPORT.html --stats STATS.json --runs R [--devices N]
                    [--inspect INSPECT.json] [--title-contains TEXT]
                    [--screenshot PNG]

Parses the page as XML (the report writes well-formed markup, so that any
unescaped name breaks this parse) and checks: no script, style sheet, image,
frame or object, and no src=/href= or url() anywhere, so that the page is
self-contained; the title names the plan (TEXT, untrusted characters and
all); the bar charts (step kinds, imbalance, and the communication share of
a multi-device run) and, per MoE layer of the stats, an expert-load heatmap
with experts x R cells (experts: the layer's tokens_per_expert in the
stats) whose tokens add up to the stats' count, and one per device of an
expert-parallel run, each with a color scale from 0 to its darkest cell.

Also the sections about the run as a whole, with the values they must
hold: the latency table (p50/p90/p99 of the per-run series, which has a
point per recorded run, each no longer than --stats' time of that run);
the memory table (weights and arenas per device as `moec inspect --json`
counts them, the peak resident set near --stats'); the provenance (the
model's digest and every compile option, as inspect has them). For a
generation run (stats with time_to_first_token_ms; R is its decode steps):
the time to first token and prefill and decode tokens/s equal --stats',
the KV cache bytes, and the run table names sizes as a user knows them
("prompt tokens = P", "past length = L"), never a compiler symbol.

With --screenshot, when Chromium is installed, renders the page headless
into PNG and checks that it is not blank; without Chromium it says it
skipped that. Exits 1 at the first failure.
"""

import argparse
import json
import os
import re
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


def quantile(values, q):
    """numpy's default (linear) quantile of `values`, as moe-run's."""
    v = sorted(values)
    if not v:
        return 0.0
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def text_of(element):
    return "".join(element.itertext())


def by_id(root, ident):
    found = [e for e in root.iter() if e.get("id") == ident]
    check(len(found) == 1, f"the report has {len(found)} elements with "
          f"id '{ident}'")
    return found[0]


def check_latency(root, series_id, table_id, runs, stats_run_ms):
    """The series has a point per run (each within --stats' time of that
    run when given) and the table's percentiles are the points'."""
    series = by_id(root, series_id)
    points = [c for c in series.iter(f"{SVG}circle")
              if c.get("class") == "point"]
    check(len(points) == runs and series.find(f"{SVG}polyline") is not None,
          f"{series_id}: {len(points)} points, expected {runs} and a line")
    ms = [float(p.get("data-ms")) for p in points]
    check(all(v > 0 for v in ms), f"{series_id}: a run of no time: {ms}")
    if stats_run_ms is not None:
        check(len(stats_run_ms) == runs,
              f"--stats has {len(stats_run_ms)} runs, expected {runs}")
        # The session's clock reads lie inside moe-run's.
        for i, (mine, theirs) in enumerate(zip(ms, stats_run_ms)):
            check(mine <= theirs + 2e-6,
                  f"{series_id}: run {i} took {mine} ms, longer than the "
                  f"{theirs} ms --stats timed")
    table = by_id(root, table_id)
    cells = {c.get("data-stat"): float(c.get("data-ms"))
             for c in table.iter(f"{XHTML}td") if c.get("data-stat")}
    for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        check(key in cells and abs(cells[key] - quantile(ms, q)) <= 2e-6,
              f"{table_id}: {key} {cells.get(key)}, the series' "
              f"{quantile(ms, q)}")
    check(cells["min"] <= cells["p50"] <= cells["p90"] <= cells["p99"] <=
          cells["max"], f"{table_id}: percentiles out of order: {cells}")
    return cells


def check_memory(root, inspect, stats, generation):
    """The memory table against `moec inspect --json` and --stats."""
    cells = {}
    for td in root.iter(f"{XHTML}td"):
        if td.get("data-memory"):
            cells[(td.get("data-memory"), td.get("data-device"))] = \
                int(td.get("data-bytes"))
    if inspect is not None:
        for d, schedule in enumerate(inspect["schedules"]):
            for key, field in (("weights", "weight_bytes"),
                               ("arena", "arena_bytes")):
                check(cells.get((key, str(d))) == schedule[field] > 0,
                      f"memory: device {d} {key} "
                      f"{cells.get((key, str(d)))}, inspect {schedule[field]}")
        gen = inspect.get("generation")
        if gen:
            for d, schedule in enumerate(gen.get("prefill_schedules", [])):
                check(cells.get(("prefill-arena", str(d))) ==
                      schedule["arena_bytes"],
                      f"memory: device {d} prefill arena "
                      f"{cells.get(('prefill-arena', str(d)))}, inspect "
                      f"{schedule['arena_bytes']}")
            check(cells.get(("kv-cache-max-seq", None)) == gen["cache_bytes"],
                  f"memory: KV caches at max_seq "
                  f"{cells.get(('kv-cache-max-seq', None))}, inspect "
                  f"{gen['cache_bytes']}")
    if generation:
        check(cells.get(("kv-cache", None)) == stats["kv_cache_bytes"] > 0,
              f"memory: KV caches {cells.get(('kv-cache', None))}, stats "
              f"{stats['kv_cache_bytes']}")
    # The report and --stats read the peak at different moments.
    rss, theirs = cells.get(("peak-rss", None), 0), \
        stats["memory"]["peak_rss_bytes"]
    check(rss > 0 and theirs / 2 <= rss <= theirs * 2,
          f"memory: peak resident set {rss}, stats {theirs}")
    print(f"ok memory: {len(cells)} figures, weights and arenas as inspect "
          f"counts them")


def check_provenance(root, inspect):
    """The model's digest(s) and every compile option, as inspect has
    them."""
    table = by_id(root, "provenance-table")
    digests = [td.get("data-sha256") for td in table.iter(f"{XHTML}td")
               if td.get("data-sha256")]
    p = inspect["provenance"]
    want = [p["model_sha256"]] + ([p["prefill_sha256"]]
                                  if p.get("prefill_file") else [])
    check(digests == want, f"provenance: digests {digests}, inspect {want}")
    check(p["compiler_version"] in text_of(table) and
          p["git_commit"] in text_of(table),
          f"provenance: no '{p['compiler_version']}' (git "
          f"{p['git_commit']}) in the table")
    options = by_id(root, "compile-options")
    flags = []
    for tr in options.iter(f"{XHTML}tr"):
        tds = list(tr.iter(f"{XHTML}td"))
        if tds:
            flags.append([tds[0].get("data-option"), tds[1].get("data-value")])
    check(flags == p["flags"], f"provenance: options {flags}, inspect "
          f"{p['flags']}")
    print(f"ok provenance: model digest and {len(flags)} compile options")


def check_generation(root, stats):
    """The headline figures equal --stats' (the generator's own times)."""
    table = by_id(root, "generation-times")
    values = {}
    for td in table.iter(f"{XHTML}td"):
        for key in ("data-ttft-ms", "data-prefill-tokens-per-s",
                    "data-decode-tokens-per-s"):
            if td.get(key):
                values[key] = float(td.get(key))
    for key, field, tolerance in (
            ("data-ttft-ms", "time_to_first_token_ms", 2e-6),
            ("data-prefill-tokens-per-s", "prefill_tokens_per_s", 2e-3),
            ("data-decode-tokens-per-s", "decode_tokens_per_s", 2e-3)):
        check(key in values and values[key] > 0 and
              abs(values[key] - stats[field]) <= tolerance,
              f"generation: {key} {values.get(key)}, stats {stats[field]}")
    # Sizes as a user knows them: the run table holds no compiler symbol.
    config = root.find(f".//{XHTML}table")
    text = text_of(config)
    internal = re.findall(r"\b(?:prefill\.)?s[0-9]+\b", text)
    check(not internal, f"the run table names compiler symbols: {internal}")
    prompt = stats["prompt_tokens"] // max(stats.get("prompts", 1), 1)
    check(f"prompt tokens = {prompt}" in text and "past length = " in text,
          f"the run table does not give 'prompt tokens = {prompt}' and the "
          f"past length: {text!r}")
    print(f"ok generation: time to first token {values['data-ttft-ms']:.3f} "
          f"ms, prefill and decode tokens/s as --stats; sizes named "
          f"'prompt tokens', 'past length'")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("--stats", required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--inspect", help="`moec inspect --json` of the plan")
    parser.add_argument("--title-contains")
    parser.add_argument("--screenshot")
    args = parser.parse_args()

    with open(args.stats) as f:
        stats = json.load(f)
    inspect = None
    if args.inspect:
        with open(args.inspect) as f:
            inspect = json.load(f)
    generation = "time_to_first_token_ms" in stats
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
            figure = next(f for f in root.iter(f"{XHTML}figure")
                          if found[0] in list(f))
            scale = [x for x in figure.iter(f"{SVG}svg")
                     if x.get("class") == "scale"]
            darkest = max(int(c.get("data-tokens")) for c in cells)
            check(len(scale) == 1 and int(scale[0].get("data-max")) ==
                  darkest and len([r for r in scale[0].iter(f"{SVG}rect")
                                   if r.get("class") == "swatch"]) >= 2,
                  f"layer {index} device {device}: no color scale up to its "
                  f"darkest cell ({darkest} tokens)")
            # A generation's stats count the prefill's tokens too.
            if device == "all" and not generation:
                tokens = sum(int(c.get("data-tokens")) for c in cells)
                check(tokens == sum(layer["tokens_per_expert"]),
                      f"layer {index}: the heatmap holds {tokens} tokens, "
                      f"the stats {sum(layer['tokens_per_expert'])}")
    print(f"ok heatmaps: {len(layers)} layers x "
          f"{1 + (args.devices if args.devices > 1 else 0)} maps of experts "
          f"x {args.runs} runs, each with its color scale")

    if generation:
        check(stats["decode_steps"] == args.runs,
              f"--runs {args.runs}, but the stats have "
              f"{stats['decode_steps']} decode steps")
        check_generation(root, stats)
        cells = check_latency(root, "decode-series", "decode-latency",
                              args.runs, None)
    else:
        cells = check_latency(root, "run-series", "run-latency", args.runs,
                              stats.get("run_ms"))
    print(f"ok latency: p50 {cells['p50']:.3f} ms, p90 {cells['p90']:.3f} "
          f"ms, p99 {cells['p99']:.3f} ms of {args.runs} recorded "
          f"{'decode steps' if generation else 'runs'}, one point each")
    check_memory(root, inspect, stats, generation)
    if inspect is not None:
        check_provenance(root, inspect)

    if args.screenshot:
        screenshot(args.report, args.screenshot)
    print("check_report: ok")


if __name__ == "__main__":
    main()
