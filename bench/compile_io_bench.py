#!/usr/bin/env python3
"""Compile I/O of a large model (issue 33 item 5): how fast `moec compile`
reads the ONNX external data and writes the plan, against the disk's own
sequential rates measured in the same run, and its peak RSS.

    .venv/bin/python bench/compile_io_bench.py --work DIR
        [--baseline OTHER_MOEC] [--layers 8 --experts 16 --hidden 1024
        --ffn 2048] [--configs f32,f32-noverify,bf16,int8,tiered]
        [--repeats 2] [--limit 1G]

Builds (once, into --work; never on the CI path) a stack of loop-form MoE
layers (test/lib/gen_stacked_moe.py; the defaults make 3.0 GiB of f32
expert weights in one external data file), measures the disk with dd
(1 GiB written and read back with O_DIRECT, and read through the page
cache), then compiles the model with each configuration (f32 as is, and
without the rewrite validator, which compiles each MoE layer twice into a
plan of its own; `--weight-dtype bf16`, `int8`; `--device-memory` for a
tiered plan at a third of the weights) by each binary in turns, dropping the page cache before each
compile (all of it as root, else the files under --work) so that the
model is read from the disk. Each compile
is timed to its exit and to the end of a `sync` after it (a plan written
through the page cache is not on the disk when moec exits). With --limit,
each compile runs in a cgroup v1 memory controller of that size, which
counts the page cache too: a model larger than the memory it may use (the
peak of the cgroup's usage is a column). The table gives
per compile the medians of: wall seconds, the disk's bytes read and written
by the process (getrusage block counts), the nominal I/O rate (model data +
plan bytes over the wall time to sync), the weights' rate (plan bytes over
the same time) and the peak RSS. Plans are compared between the binaries:
all bytes after the first MiB (the weight sections) must be identical, and
the first MiB may differ only where the provenance differs (moec's git
commit: build the baseline in the same tree, its sources checked out, for
byte-identical plans); the plans are deleted after each compile (a large
disk is not assumed).
"""

import argparse
import hashlib
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "lib"))
import gen_stacked_moe  # noqa: E402

HEAD = 1 << 20


WORK = None  # --work: whose files drop_caches evicts without root


def drop_caches():
    """Empties the page cache (root), or else evicts every file under
    --work from it (POSIX_FADV_DONTNEED after a sync drops a file's clean
    pages; a container may refuse /proc/sys/vm/drop_caches even to root)."""
    subprocess.run(["sync"], check=True)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return
    except OSError:
        pass
    for name in os.listdir(WORK):
        fd = os.open(os.path.join(WORK, name), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def dd(args):
    r = subprocess.run(["dd"] + args, capture_output=True, text=True)
    m = re.search(r"copied, ([0-9.]+) s", r.stderr)
    if r.returncode or not m:
        sys.exit(f"dd {' '.join(args)} failed:\n{r.stderr}")
    return float(m.group(1))


def disk_rates(work, size=1 << 30):
    """MB/s of O_DIRECT writes, O_DIRECT reads and page-cache reads."""
    path = os.path.join(work, "dd.bin")
    count = size // (8 << 20)
    drop_caches()
    write = size / dd(["if=/dev/zero", f"of={path}", "bs=8M",
                       f"count={count}", "oflag=direct"]) / 1e6
    drop_caches()
    read = size / dd([f"if={path}", "of=/dev/null", "bs=8M",
                      "iflag=direct"]) / 1e6
    drop_caches()
    cached = size / dd([f"if={path}", "of=/dev/null", "bs=8M"]) / 1e6
    os.remove(path)
    return write, read, cached


def digest(path):
    """The plan's first MiB and the SHA-256 of the rest."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        head = f.read(HEAD)
        while chunk := f.read(64 << 20):
            h.update(chunk)
    return head, h.hexdigest()


def compile_once(moec, model, plan, flags, cgroup=None):
    drop_caches()
    cmd = ["/usr/bin/time", "-f", "%M %I %O", moec, "compile", model,
           "-o", plan] + flags
    if cgroup:
        cgroup.reset_peak()
    start = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True,
                       preexec_fn=cgroup.join if cgroup else None)
    wall = time.monotonic() - start
    subprocess.run(["sync"], check=True)
    synced = time.monotonic() - start
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    rss, blocks_in, blocks_out = map(int, r.stderr.strip().splitlines()[-1]
                                     .split())
    size = os.path.getsize(plan)
    head, rest = digest(plan)
    os.remove(plan)
    return dict(wall=wall, synced=synced, rss=rss * 1024,
                peak=cgroup.peak() if cgroup else 0,
                read=blocks_in * 512, written=blocks_out * 512, size=size,
                head=head, rest=rest)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--baseline", help="another moec to compare in turns")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--configs", default="f32,f32-noverify,bf16,int8,tiered")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--limit", help="compile in a cgroup v1 memory "
                   "controller of this size (page cache included; e.g. 1G "
                   "for a model larger than that memory; needs root)")
    p.add_argument("--extra", default="",
                   help="flags added to every compile, e.g. "
                        "--no-verify-rewrites")
    args = p.parse_args()
    global WORK
    WORK = args.work
    os.makedirs(args.work, exist_ok=True)
    model = os.path.join(args.work, "model.onnx")
    if not os.path.exists(model):
        gen_stacked_moe.build(model, args.layers, args.experts, args.hidden,
                              args.ffn, skew=1.0)
    data = os.path.getsize(model + ".data")
    configs = {
        "f32": [], "f32-noverify": ["--no-verify-rewrites"],
        "bf16": ["--weight-dtype", "bf16"],
        "int8": ["--weight-dtype", "int8"],
        "tiered": ["--device-memory", str(data // 3)]}
    binaries = [("this", os.path.join(args.build, "bin", "moec"))]
    if args.baseline:
        binaries.insert(0, ("baseline", args.baseline))
    plan = os.path.join(args.work, "plan.bin")

    print(f"load average {load()} before the disk measurement")
    write, read, cached = disk_rates(args.work)
    cgroup = None
    if args.limit:
        from larger_than_ram_bench import Cgroup, size_bytes
        cgroup = Cgroup("moec_compile_io_bench", size_bytes(args.limit))
        print(f"compiles in a cgroup of {args.limit} (the model's data is "
              f"{data / 2**30:.2f} GiB)")
    print(f"disk: O_DIRECT write {write:.0f} MB/s, O_DIRECT read {read:.0f} "
          f"MB/s, page-cache read {cached:.0f} MB/s (dd, 8 MiB blocks, "
          "1 GiB)")
    results = {}
    for name in args.configs.split(","):
        flags = configs[name] + args.extra.split()
        for _ in range(args.repeats):
            for label, moec in binaries:
                r = compile_once(moec, model, plan, flags, cgroup)
                r["load"] = load()
                results.setdefault((name, label), []).append(r)
                print(f"  {name} {label}: {r['wall']:.2f} s, sync "
                      f"{r['synced']:.2f} s, load {r['load']}", flush=True)
    print()
    print("| config | moec | wall s | to sync s | disk read MB | disk written "
          "MB | I/O MB/s | weights MB/s | vs disk write | peak RSS MB | "
          "cgroup peak MB | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, label), runs in results.items():
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("wall", "synced", "read", "written", "rss", "peak")}
        size = runs[0]["size"]
        io = (data + size) / med["synced"] / 1e6
        weights = size / med["synced"] / 1e6
        loads = ", ".join(r["load"] for r in runs)
        print(f"| {name} | {label} | {med['wall']:.2f} | {med['synced']:.2f} "
              f"| {med['read'] / 1e6:.0f} | {med['written'] / 1e6:.0f} | "
              f"{io:.0f} | {weights:.0f} | {io / write:.2f} | "
              f"{med['rss'] / 2**20:.0f} | "
              f"{med['peak'] / 2**20:.0f} | {loads} |")
    failed = False
    for name in args.configs.split(","):
        runs = [results[(name, label)] for label, _ in binaries]
        rests = {r["rest"] for group in runs for r in group}
        heads = {r["head"] for group in runs for r in group}
        if len(rests) != 1:
            print(f"{name}: the weight sections differ between compiles")
            failed = True
        if len(heads) > len(binaries):
            print(f"{name}: one binary's plans differ between its compiles")
            failed = True
        if len(binaries) == 2 and not failed:
            a, b = runs[0][0]["head"], runs[1][0]["head"]
            diff = sum(x != y for x, y in zip(a, b))
            print(f"{name}: the plans are byte-identical" if not diff else
                  f"{name}: weight sections identical; the first MiB "
                  f"differs in {diff} bytes (the provenance, when the "
                  "binaries' git commits differ)")
    if cgroup:
        cgroup.remove()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
