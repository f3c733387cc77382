#!/usr/bin/env python3
"""Checks a `moe-run --trace` file against the plan and the --stats it ran.

    check_trace.py TRACE.json --inspect INSPECT.json --stats STATS.json
                   --devices N --runs R
    check_trace.py TRACE.json --inspect INSPECT.json --layers L
                   --generation DECODE_RUNS

INSPECT.json is `moec inspect PLAN --json` (the step count of each device
schedule), STATS.json the `--stats` of the same run. Checks the Chrome
trace-event structure (every complete event has ts, dur, pid and tid, no
negative durations, metadata names every process and thread), one process
per device, R runs per device each holding one span per step of the
device's schedule inside its run span, the MoE layer parts named per layer,
the exchanges of a multi-device run as their own spans, and that the
tokens per expert the Experts spans carry add up to what --stats counted.
With --generation, checks the prefill thread (one run of the prefill
schedule) and the decode thread (DECODE_RUNS runs of the decode schedule)
instead. Prints one `ok` line per check; exits 1 at the first failure.
"""

import argparse
import collections
import json
import sys


def fail(message):
    print(f"check_trace: error: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


STEP_CATEGORIES = {"step", "moe", "comm"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--inspect", required=True)
    parser.add_argument("--stats")
    parser.add_argument("--layers", type=int,
                        help="MoE layers, without --stats (generation)")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--generation", type=int, default=None)
    args = parser.parse_args()

    with open(args.trace) as f:
        trace = json.load(f)
    with open(args.inspect) as f:
        inspect = json.load(f)
    stats = {"moe_layers": [None] * (args.layers or 0)}
    if args.stats:
        with open(args.stats) as f:
            stats = json.load(f)

    check(isinstance(trace, dict) and "traceEvents" in trace and
          trace.get("displayTimeUnit") in ("ms", "ns"),
          "not a trace-event JSON object (traceEvents, displayTimeUnit)")
    events = trace["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    meta = [e for e in events if e.get("ph") == "M"]
    check(complete, "no complete events")
    for e in complete:
        for key in ("name", "ts", "dur", "pid", "tid"):
            check(key in e, f"complete event without '{key}': {e}")
        check(e["dur"] >= 0, f"negative duration: {e}")
        check(e["ts"] >= 0, f"timestamp before the origin: {e}")
    processes = {e["pid"]: e["args"]["name"] for e in meta
                 if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta
               if e["name"] == "thread_name"}
    used = {(e["pid"], e["tid"]) for e in complete}
    check(set(processes) == {p for p, _ in used},
          f"processes named {sorted(processes)}, used {sorted(used)}")
    check(used <= set(threads), f"threads used {used}, named {threads}")
    print(f"ok structure: {len(complete)} complete events, "
          f"{len(meta)} metadata events")

    check(sorted(processes) == list(range(args.devices)),
          f"expected one process per device 0..{args.devices - 1}, got "
          f"{sorted(processes)}")
    print(f"ok tracks: {len(processes)} devices")

    schedules = inspect["schedules"]
    # (pid, tid) -> [(run event, [step events inside it])]
    runs = collections.defaultdict(list)
    for e in sorted(complete, key=lambda e: (e["pid"], e["tid"], e["ts"])):
        if e.get("cat") == "run":
            runs[(e["pid"], e["tid"])].append((e, []))
    for e in complete:
        if e.get("cat") not in STEP_CATEGORIES:
            continue
        track = runs.get((e["pid"], e["tid"]))
        check(track, f"step span outside any run: {e}")
        owner = [r for r, _ in track if r["args"]["run"] == e["args"]["run"]]
        check(len(owner) == 1, f"step span of no run: {e}")
        run = owner[0]
        # Microsecond timestamps with three decimals: allow their rounding.
        check(run["ts"] - 0.002 <= e["ts"] and
              e["ts"] + e["dur"] <= run["ts"] + run["dur"] + 0.002,
              f"step span {e['name']} outside its run {run}")
        for r, steps in track:
            if r is run:
                steps.append(e)

    if args.generation is not None:
        gen = inspect["generation"]
        prefill_steps = len(gen["prefill_schedules"][0]["steps"])
        decode_steps = len(schedules[0]["steps"])
        names = {tid: threads[(0, tid)] for (_, tid) in threads}
        check(names == {0: "prefill", 1: "decode"},
              f"expected prefill and decode threads, got {names}")
        check(len(runs[(0, 0)]) == 1 and
              runs[(0, 0)][0][0]["name"] == "prefill",
              f"expected one prefill run, got {len(runs[(0, 0)])}")
        check(len(runs[(0, 1)]) == args.generation,
              f"expected {args.generation} decode runs, got "
              f"{len(runs[(0, 1)])}")
        for tid, count in ((0, prefill_steps), (1, decode_steps)):
            for run, steps in runs[(0, tid)]:
                check(len(steps) == count,
                      f"{run['name']}: {len(steps)} step spans, the schedule "
                      f"has {count}")
        print(f"ok runs: prefill with {prefill_steps} steps, "
              f"{args.generation} decode steps with {decode_steps} each")
    else:
        for d in range(args.devices):
            count = len(schedules[d]["steps"])
            track = runs[(d, 0)]
            check(len(track) == args.runs,
                  f"device {d}: {len(track)} runs, expected {args.runs}")
            for run, steps in track:
                check(len(steps) == count,
                      f"device {d} {run['name']}: {len(steps)} step spans, "
                      f"the schedule has {count}")
        print(f"ok runs: {args.runs} per device, one span per step")

    # The MoE layers' parts, named per layer on every device.
    layers = len(stats["moe_layers"])
    check(layers > 0, "the stats have no MoE layer")
    for d in range(args.devices):
        names = {e["name"] for e in complete if e["pid"] == d}
        parts = ["router", "dispatch", "experts", "combine"]
        if args.devices > 1:
            parts += ["dispatch all-to-all", "combine all-to-all",
                      "counts all-to-all"]
        for layer in range(layers):
            for part in parts:
                check(f"layer {layer} {part}" in names,
                      f"device {d}: no span 'layer {layer} {part}'")
        if args.devices > 1:
            comm = [e for e in complete if e["pid"] == d and
                    e.get("cat") == "comm"]
            check(comm and all("all-to-all" in e["name"] for e in comm),
                  f"device {d}: exchanges are not their own spans")
    print(f"ok names: {layers} MoE layers with "
          f"{', '.join(parts)} per layer")

    # The per-run routing adds up to the stats' totals over the runs.
    if args.stats and args.generation is None:
        for layer, entry in enumerate(stats["moe_layers"]):
            total = [0] * len(entry["tokens_per_expert"])
            spans = 0
            for e in complete:
                if e["name"] == f"layer {layer} experts":
                    spans += 1
                    loads = e["args"]["tokens_per_expert"]
                    if args.devices == 1:
                        total = [a + b for a, b in zip(total, loads)]
                    else:  # Per slot: only the sum compares.
                        total[0] += sum(loads)
            want = entry["tokens_per_expert"]
            if args.devices > 1:
                want = [sum(want)] + [0] * (len(want) - 1)
            check(spans == args.runs * args.devices,
                  f"layer {layer}: {spans} experts spans")
            check(total == want,
                  f"layer {layer}: the spans' tokens per expert add up to "
                  f"{total}, the stats say {want}")
        print("ok routing: tokens per expert of the spans add up to the "
              "stats")
    print("check_trace: ok")


if __name__ == "__main__":
    main()
