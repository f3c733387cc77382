"""CLI test of moe-run on expert-parallel plans: `--devices N` in-process and
`mpirun -np N` on loopback give the 1-device plan's outputs; the --stats
JSON has per-device traffic; device-count mismatches and faults (a device
that stalls or exits, injected with MOERT_FAULT_INJECT) end every device with
a clear error within a bounded time. Run by ctest:

    moe_run_ep_test.py --moe-run BIN --make-plans BIN --workdir DIR
                       [--mpirun BIN]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from moe_run_cli_test import Runner as CliRunner

TOP_K = 2


class Runner(CliRunner):
    """Adds runs under mpirun, with an environment and a time limit."""

    def __init__(self, moe_run, mpirun, workdir):
        super().__init__(moe_run, workdir)
        self.mpirun = mpirun

    def command(self, args, ranks=None):
        if ranks is None:
            return [self.moe_run, *args]
        # Loopback only; more ranks than cores; Open MPI refuses root unless
        # told (containers often run tests as root).
        cmd = [self.mpirun, "-np", str(ranks), "--oversubscribe",
               "--mca", "btl", "self,vader"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        return cmd + [self.moe_run, *args]

    def launch(self, args, ranks=None, env=None, timeout=120):
        start = time.monotonic()
        result = subprocess.run(self.command(args, ranks), capture_output=True,
                                text=True, timeout=timeout,
                                env={**os.environ, **(env or {})})
        return result, time.monotonic() - start

    def expect_run(self, name, args, code, needles=(), ranks=None, env=None,
                   within=None):
        """Runs moe-run; checks the exit code (any non-zero for code -1),
        substrings of stderr and the wall time."""
        result, seconds = self.launch(args, ranks, env)
        code_ok = result.returncode != 0 if code == -1 else \
            result.returncode == code
        missing = [n for n in needles if n not in result.stderr]
        slow = within is not None and seconds > within
        self.check(name, code_ok and not missing and not slow,
                   f"exit {result.returncode} (want {code}), missing "
                   f"{missing}, {seconds:.1f} s\n  stdout: {result.stdout}\n"
                   f"  stderr: {result.stderr}")
        return result

    def outputs(self, name, plan, tokens, ranks=None, devices=None,
                extra=()):
        out = self.path(name)
        args = [plan, "--tokens", str(tokens), "--output-dir", out,
                "--threads", "1", *extra]
        if devices:
            args += ["--devices", str(devices)]
        result = self.expect_run(name, args, 0, ranks=ranks)
        if result.returncode != 0:
            return None
        return np.load(os.path.join(out, "out.npy"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--moe-run", required=True)
    parser.add_argument("--make-plans", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--mpirun")
    args = parser.parse_args()

    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    subprocess.run([args.make_plans, args.workdir], check=True)
    r = Runner(args.moe_run, args.mpirun, args.workdir)
    plans = {n: r.path(f"ep{n}.plan") for n in ("1", "2", "4", "2r")}
    devices = {"2": 2, "4": 4, "2r": 2}

    # Every split equals the 1-device plan; 1 token leaves devices empty.
    modes = [("in-process", False)] + ([("mpi", True)] if args.mpirun else [])
    for tokens in (1, 5, 16):
        want = r.outputs(f"one-device-{tokens}", plans["1"], tokens)
        for key, n in devices.items():
            for mode, mpi in modes:
                name = f"{mode} ep{key} {tokens} tokens"
                got = r.outputs(name, plans[key], tokens,
                                ranks=n if mpi else None,
                                devices=None if mpi else n)
                if want is not None and got is not None:
                    r.check(f"{name} matches one device",
                            got.shape == want.shape and
                            np.allclose(got, want, rtol=1e-5, atol=1e-6),
                            f"max diff {np.abs(got - want).max()}")

    # Stats: every assignment reached one expert; what leaves arrives.
    for mode, mpi in modes:
        stats = r.path(f"stats-{mode}.json")
        args_ = [plans["2r"], "--tokens", "16", "--output-dir",
                 r.path("stats-out"), "--stats", stats, "--bench", "2"]
        if not mpi:
            args_ += ["--devices", "2"]
        result = r.expect_run(f"{mode} stats", args_, 0,
                              ranks=2 if mpi else None)
        if result.returncode == 0:
            with open(stats) as f:
                report = json.load(f)
            devs = report["devices"]
            runs = report["runs"]
            r.check(f"{mode} stats: expert rows are tokens x k",
                    sum(d["expert_rows"] for d in devs) == 16 * TOP_K * runs,
                    str(devs))
            r.check(f"{mode} stats: rows sent equal rows received",
                    sum(d["rows_sent"] for d in devs) ==
                    sum(d["rows_received"] for d in devs), str(devs))
            ep = report["expert_parallel"]
            r.check(f"{mode} stats: summary",
                    ep["devices"] == 2 and ep["backend"] == mode and
                    ep["load_imbalance"] >= 1.0, str(ep))

    # Device-count mismatches.
    r.expect_run("no --devices", [plans["2"]], 1,
                 ["the plan has 2 device schedules; run it with --devices 2 "
                  "or mpirun -np 2"])
    r.expect_run("--devices mismatch", [plans["2"], "--devices", "4"], 1,
                 ["--devices 4 but", "has 2 device schedules"])
    r.expect_run("bad --comm-timeout", [plans["2"], "--comm-timeout", "0"], 2,
                 ["--comm-timeout needs a number of seconds"])

    # Faults, in-process: device 1 stops before its first exchange (step 10);
    # device 0 gives up after the timeout and names it.
    for action in ("stall", "exit"):
        r.expect_run(f"in-process {action}",
                     [plans["2"], "--devices", "2", "--comm-timeout", "1",
                      "--output-dir", r.path("fault")], 1,
                     [f"device 1 {action}",
                      "step 10 'a2a_counts' (AllToAll): device 0 "
                      "(in-process) timed out after 1 s waiting for device 1"],
                     env={"MOERT_FAULT_INJECT": f"1:10:{action}"}, within=15)

    if args.mpirun:
        # Any world size but the plan's is one error saying so: more ranks
        # than schedules (a rank would have none), fewer, and one.
        for ranks in (3, 1):
            r.expect_run(f"mpi rank-count mismatch ({ranks})", [plans["2"]],
                         -1, [f"mpirun started {ranks} "
                              f"rank{'s' if ranks > 1 else ''} but the plan "
                              "has 2 device schedules; run it with mpirun "
                              "-np 2"], ranks=ranks, within=60)
        r.expect_run("mpi rank-count mismatch (1-device plan)", [plans["1"]],
                     -1, ["mpirun started 2 ranks but the plan has 1 device "
                          "schedule; run it with mpirun -np 1"], ranks=2,
                     within=60)
        r.expect_run("mpi stall", [plans["4"], "--comm-timeout", "2",
                                   "--output-dir", r.path("fault")], -1,
                     ["device 2 stalls", "timed out after 2 s waiting for "
                      "device 2"],
                     ranks=4, env={"MOERT_FAULT_INJECT": "2:10:stall"},
                     within=60)
        r.expect_run("mpi exit", [plans["2"], "--comm-timeout", "2",
                                  "--output-dir", r.path("fault")], -1,
                     ["device 1 exits"], ranks=2,
                     env={"MOERT_FAULT_INJECT": "1:10:exit"}, within=60)

    print(f"{r.checks - r.failures} of {r.checks} checks passed")
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
