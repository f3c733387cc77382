#!/usr/bin/env python3
"""Decode of a tiered plan several times larger than the memory it may use
(issue 33 step 4): the plan file's read rate, and decode tokens/s with the
bytes each token reads, per expert cache policy.

    sudo .venv/bin/python bench/larger_than_ram_bench.py --work DIR
        [--layers 16 --experts 16 --hidden 1024 --ffn 2816] [--limit 3G]
        [--budget 1536M] [--policies static,lru,adaptive]
        [--prefetch none,next-layer] [--expert-read pread,direct]
        [--tokens 24] [--rounds 3] [--threads 2]
        [--moe-run LABEL=PATH,LABEL=PATH]

Builds (once, into --work; never on the CI path) a stack of loop-form MoE
layers (test/lib/gen_stacked_moe.py, f32, router skew 1), compiles it
all-resident, takes its routing profile (256 fresh tokens) and reference
outputs (the decode runs' last token, and a 64-token prompt) from that plan,
deletes it (the disk holds the model and one plan), and compiles the tiered
plan for --budget with the profile. Needs root: every measured process runs
in a cgroup v1 memory controller limited to --limit (page cache included),
so that a plan several times the limit cannot stay cached, as a plan larger
than the machine's memory would not; before each measurement the plan's
pages are evicted from the page cache (posix_fadvise DONTNEED on the file
alone, which leaves other processes' cache alone).

Measures, in the cgroup:
  read rate   at the start of every round: `dd` of the plan's paged
              sections, buffered and O_DIRECT, 8 MiB blocks, one stream;
              and O_DIRECT reads of one expert input each, in a random
              order, on two threads at once (the store's two readers) and
              on four
  decode      `moe-run --tokens 1 --bench N --fresh-inputs`: one token per
              run, each run routing its own token, per --expert-cache
              policy, --prefetch and --expert-read, in turns, --rounds
              times
and prints, per configuration (and per moe-run binary of --moe-run, run in
turns), the medians of: tokens/s, the experts' bytes a token read from the
file (misses read on demand, `bytes_paged_in`, plus reads ahead,
`prefetch.bytes`), the decode's read rate (those bytes times tokens/s) and
its share of the round's read rate (the best of dd's buffered and O_DIRECT
single streams and the random reads), the rate of the steps' own reads
while one is in flight (`bytes_paged_in` over `read_ms`: the store's read
path, huge-page buffers included), the hit rate, the wait per token and the
cgroup's peak usage. Every output is compared byte for byte with the
all-resident plan's (with --tokens other than the first run's, with the
tiered plan's outputs when every expert is resident: the all-resident plan
is deleted).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "lib"))
import gen_stacked_moe  # noqa: E402

CGROUP_ROOT = "/sys/fs/cgroup/memory"


def size_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if text[-1:].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


class Cgroup:
    """A cgroup v1 memory controller that the measured processes join."""

    def __init__(self, name, limit):
        self.path = os.path.join(CGROUP_ROOT, name)
        os.makedirs(self.path, exist_ok=True)
        self.write("memory.limit_in_bytes", str(limit))

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def join(self):
        """For subprocess's preexec_fn: moves the child into the cgroup."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def reset_peak(self):
        self.write("memory.max_usage_in_bytes", "0")

    def peak(self):
        return int(self.read("memory.max_usage_in_bytes"))

    def remove(self):
        os.rmdir(self.path)


def run(cmd, cgroup=None):
    r = subprocess.run(cmd, capture_output=True, text=True,
                       preexec_fn=cgroup.join if cgroup else None)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def evict(path):
    """Drops `path`'s pages from the page cache (clean pages: the plan is
    written and synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def dd_rate(path, offset, length, direct, streams, cgroup):
    """MB/s of reading [offset, offset + length) of `path` with dd in
    `streams` parallel pieces, after evicting it."""
    block = 8 << 20
    evict(path)
    first = offset // block
    count = (length + block - 1) // block
    per = (count + streams - 1) // streams
    start = time.monotonic()
    procs = []
    for s in range(streams):
        n = min(per, count - s * per)
        if n <= 0:
            continue
        cmd = ["dd", f"if={path}", "of=/dev/null", f"bs={block}",
               f"skip={first + s * per}", f"count={n}"]
        if direct:
            cmd.append("iflag=direct")
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL,
                                      preexec_fn=cgroup.join))
    for p in procs:
        if p.wait():
            sys.exit(f"dd of {path} failed")
    seconds = time.monotonic() - start
    return min(count * block, os.path.getsize(path) - first * block) \
        / seconds / 1e6


READER = """
import mmap, os, random, sys, threading
path, first, end, piece, threads = sys.argv[1], *map(int, sys.argv[2:6])
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
at = list(range(first, end - piece + 1, piece))
random.Random(0).shuffle(at)
lock = threading.Lock()
def work():
    buffer = mmap.mmap(-1, piece)
    while True:
        with lock:
            if not at:
                return
            offset = at.pop()
        os.preadv(fd, [buffer], offset)
workers = [threading.Thread(target=work) for _ in range(threads)]
[t.start() for t in workers]
[t.join() for t in workers]
"""


def random_rate(path, offset, length, piece, threads, cgroup):
    """MB/s of O_DIRECT reads of `piece` bytes (one expert's input) in a
    random order over [offset, offset + length), on `threads` threads at
    once, as the store's readers read, after evicting the file."""
    evict(path)
    first = offset // 4096 * 4096
    count = (offset + length - first) // piece
    start = time.monotonic()
    run([sys.executable, "-c", READER, path, str(first),
         str(first + count * piece), str(piece), str(threads)], cgroup)
    return count * piece / (time.monotonic() - start) / 1e6


def same_outputs(out, ref):
    for npy in os.listdir(ref):
        if npy.endswith(".npy") and open(f"{out}/{npy}", "rb").read() != \
                open(f"{ref}/{npy}", "rb").read():
            return npy
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=2816)
    p.add_argument("--skew", type=float, default=1.0)
    p.add_argument("--limit", default="3G")
    p.add_argument("--budget", default="1536M")
    p.add_argument("--policies", default="static,lru,adaptive")
    p.add_argument("--prefetch", default="none,next-layer")
    p.add_argument("--expert-read", default="pread")
    p.add_argument("--tokens", type=int, default=24,
                   help="timed decode runs per process")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cgroup", default="moec_ltr_bench")
    p.add_argument("--keep-cgroup", action="store_true")
    p.add_argument("--moe-run", default="",
                   help="LABEL=PATH,...: moe-run binaries to compare in "
                   "turns (default: --build's)")
    args = p.parse_args()
    w = args.work
    os.makedirs(w, exist_ok=True)
    moec = os.path.join(args.build, "bin", "moec")
    moe_run = os.path.join(args.build, "bin", "moe-run")
    binaries = [tuple(b.split("=", 1)) for b in args.moe_run.split(",")
                if b] or [("this", moe_run)]
    threads = ["--threads", str(args.threads)]
    model = os.path.join(w, f"stack_l{args.layers}_e{args.experts}_h"
                         f"{args.hidden}_f{args.ffn}_s{args.skew}.onnx")
    tiered = f"{w}/tiered.plan"
    decode_args = ["--tokens", "1", "--bench", str(args.tokens), "--warmup",
                   str(args.warmup), "--fresh-inputs"] + threads
    prompt_args = ["--tokens", "64", "--seed", "7"] + threads
    if not os.path.exists(model):
        gen_stacked_moe.build(model, args.layers, args.experts, args.hidden,
                              args.ffn, skew=args.skew)
    # Without translation validation: it would run every layer twice more,
    # reading the model again, and is not what is measured here.
    base = [moec, "compile", model, "--max-tokens", "256",
            "--no-verify-rewrites"]
    # The last decode run's inputs depend on the number of runs.
    ref_decode = f"{w}/ref_decode_{args.tokens}"
    if not os.path.exists(f"{w}/profile.json"):
        resident = f"{w}/resident.plan"
        run(base + ["-o", resident])
        run([moe_run, resident, "--tokens", "256", "--stats",
             f"{w}/profile.json"] + threads)
        run([moe_run, resident, "--output-dir", f"{w}/ref_prompt"]
            + prompt_args)
        run([moe_run, resident, "--output-dir", ref_decode] + decode_args)
        os.remove(resident)
    if not os.path.exists(tiered):
        run(base + ["-o", tiered, "--device-memory", args.budget,
                    "--routing-profile", f"{w}/profile.json",
                    "--report", f"{w}/tiered.json"])
    if not os.path.exists(ref_decode):
        # The all-resident plan is gone (the disk holds one plan): the
        # tiered one with every expert resident, outside the cgroup.
        print(f"{ref_decode}: from {tiered} at --device-memory 1T")
        run([moe_run, tiered, "--device-memory", "1T", "--output-dir",
             ref_decode] + decode_args)
    report = json.load(open(f"{w}/tiered.json"))["tiers"][0]
    expert_bytes = report["hot_bytes"] + report["cold_bytes"] \
        if "cold_bytes" in report else None
    plan_bytes = os.path.getsize(tiered)
    # One expert's largest paged input (w1, w3 and w2 are the same size
    # here): the piece the readers read at once.
    piece = 4 * args.hidden * args.ffn

    cgroup = Cgroup(args.cgroup, size_bytes(args.limit))
    try:
        # The paged sections: the plan's end, from the first paged byte
        # (the stats' tiers give it; the resident part is small here).
        paged_from = plan_bytes - (expert_bytes or plan_bytes)
        print(f"plan {plan_bytes / 1e9:.2f} GB ({tiered}), paged sections "
              f"{(plan_bytes - paged_from) / 1e9:.2f} GB, cgroup limit "
              f"{args.limit}, budget {args.budget}, load {load()}")
        configs = [(policy, ahead, mode, label)
                   for mode in args.expert_read.split(",")
                   for ahead in args.prefetch.split(",")
                   for policy in args.policies.split(",")
                   for label, _ in binaries]
        results, rates = {}, []
        for r in range(args.rounds):
            rate = {}
            for direct in (False, True):
                key = "O_DIRECT" if direct else "buffered"
                rate[key] = dd_rate(tiered, paged_from,
                                    plan_bytes - paged_from, direct, 1,
                                    cgroup)
            for threads in (2, 4):
                rate[f"random x{threads}"] = random_rate(
                    tiered, paged_from, plan_bytes - paged_from, piece,
                    threads, cgroup)
            print(f"round {r} read rate (MB/s): dd buffered "
                  f"{rate['buffered']:.0f}, dd O_DIRECT {rate['O_DIRECT']:.0f}"
                  f", random {piece >> 20} MiB O_DIRECT reads on 2 threads "
                  f"{rate['random x2']:.0f}, on 4 {rate['random x4']:.0f}; "
                  f"load {load()}", flush=True)
            rates.append(rate)
            best = max(rate.values())
            for policy, ahead, mode, label in configs:
                binary = dict(binaries)[label]
                name = f"{label}_{policy}_{ahead}_{mode}".replace(":", "")
                out = f"{w}/{name}"
                evict(tiered)
                cgroup.reset_peak()
                before = load()
                run([binary, tiered, "--device-memory", args.budget,
                     "--expert-cache", policy, "--prefetch", ahead,
                     "--expert-read", mode, "--stats", f"{out}.json",
                     "--output-dir", out] + decode_args, cgroup)
                differs = same_outputs(out, ref_decode)
                if differs:
                    sys.exit(f"{name}: {differs} differs from the "
                             "all-resident plan's")
                stats = json.load(open(f"{out}.json"))
                hits = misses = demand = ahead_bytes = 0
                wait = read_ms = 0.0
                for layer in stats["moe_layers"]:
                    ec = layer.get("expert_cache")
                    if not ec:
                        continue
                    hits += ec["hits"]
                    misses += ec["misses"]
                    demand += ec["bytes_paged_in"]
                    ahead_bytes += ec["prefetch"]["bytes"]
                    wait += ec["wait_ms"]
                    read_ms += ec["read_ms"]
                tps = 1e3 / stats["mean_ms"]
                read = (demand + ahead_bytes) / args.tokens
                res = dict(tps=tps, mb=read / 1e6,
                           ahead_mb=ahead_bytes / args.tokens / 1e6,
                           rate=read * tps / 1e6,
                           share=read * tps / 1e6 / best,
                           # The steps' own reads while in flight (wall
                           # time with one running; per run).
                           flight=demand / args.tokens / read_ms / 1e3
                           if read_ms else 0.0,
                           hit=hits / (hits + misses) if hits + misses
                           else None, wait=wait,
                           peak=cgroup.peak() / 2**30, load=before,
                           mode=stats["expert_cache"]["read_mode"])
                results.setdefault((policy, ahead, mode, label),
                                   []).append(res)
                print(f"round {r} {name} ({res['mode']} reads): "
                      f"{tps:.2f} tokens/s, "
                      f"{res['mb']:.0f} MB read/token "
                      f"({res['ahead_mb']:.0f} ahead), "
                      f"{res['rate']:.0f} MB/s = {res['share']:.2f} of "
                      f"{best:.0f} ({res['flight']:.0f} MB/s while a step's "
                      f"reads are in flight), hit {res['hit']:.3f}, wait "
                      f"{wait:.0f} ms, peak {res['peak']:.2f} GiB, load "
                      f"{before}", flush=True)
        # A prompt of 64 tokens, once per read mode, against the reference.
        for mode in args.expert_read.split(","):
            evict(tiered)
            out = f"{w}/prompt_{mode}"
            run([binaries[-1][1], tiered, "--device-memory", args.budget,
                 "--expert-read", mode, "--output-dir", out] + prompt_args,
                cgroup)
            differs = same_outputs(out, f"{w}/ref_prompt")
            if differs:
                sys.exit(f"prompt, {mode}: {differs} differs from the "
                         "all-resident plan's")
    finally:
        if not args.keep_cgroup:
            cgroup.remove()

    med = (lambda rs, k: statistics.median(r[k] for r in rs))
    print(f"\nmedians of {args.rounds} rounds; read rates (MB/s) dd buffered "
          + " / ".join(f"{r['buffered']:.0f}" for r in rates)
          + ", dd O_DIRECT " + " / ".join(f"{r['O_DIRECT']:.0f}" for r in rates)
          + ", random reads on 2 threads "
          + " / ".join(f"{r['random x2']:.0f}" for r in rates)
          + ", on 4 " + " / ".join(f"{r['random x4']:.0f}" for r in rates)
          + " (a round's share is of its best); outputs byte-identical to "
          "the all-resident plan's")
    print("| moe-run | policy | prefetch | read | tokens/s | MB read/token "
          "(ahead) | decode read MB/s | share of read rate | reads in flight "
          "MB/s | hit rate | wait ms/token | peak GiB | load (first round) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for policy, ahead, mode, label in configs:
        rs = results[(policy, ahead, mode, label)]
        print(f"| {label} | {policy} | {ahead} | {mode} | "
              f"{med(rs, 'tps'):.2f} | {med(rs, 'mb'):.0f} "
              f"({med(rs, 'ahead_mb'):.0f}) | {med(rs, 'rate'):.0f} | "
              f"{med(rs, 'share'):.2f} | {med(rs, 'flight'):.0f} | "
              f"{med(rs, 'hit'):.3f} | "
              f"{med(rs, 'wait'):.0f} | {max(r['peak'] for r in rs):.2f} | "
              f"{rs[0]['load']} |")


if __name__ == "__main__":
    main()
