#!/usr/bin/env python3
"""`import moert` on a compiled plan, against onnxruntime (install_check.py).

Runs the plan through moert.Session on fresh random inputs at two shapes and
compares every output with onnxruntime (e2e.py's tolerance), then checks
that the module is zero-copy both ways and that mistakes raise clear
exceptions:

  - in: the session reads the caller's array in place, so an in-place change
    of the array followed by run() with no inputs gives the outputs of the
    new values (a copy made when the array was passed would give the old
    ones);
  - out: every output is a view of a buffer the runtime wrote (not a fresh
    copy that owns its data), the outputs of one run survive the next, and
    with run(outputs=...) the result is the caller's buffer;
  - a wrong name raises KeyError, a wrong dtype TypeError, a shape beyond
    the bound or a strided array ValueError, each naming the input; a
    missing plan FileNotFoundError and a corrupted one moert.Error naming
    the file.
Exit 0 when all hold.
"""

import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e  # noqa: E402


def expect_raises(label, error, words, fn):
    """Checks that fn() raises `error` whose message holds every word."""
    try:
        fn()
    except error as e:
        message = str(e)
        missing = [w for w in words if w not in message]
        if missing:
            sys.exit(f"python: {label}: {error.__name__} '{message}' does not "
                     f"name {missing}")
        print(f"python: {label}: {error.__name__}: {message}")
        return
    except Exception as e:  # noqa: BLE001 - any other type is the failure
        sys.exit(f"python: {label}: raised {type(e).__name__} ({e}), not "
                 f"{error.__name__}")
    sys.exit(f"python: {label}: no exception")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--module-dir", required=True,
                        help="where moert must be imported from")
    parser.add_argument("--int-high", type=int, default=64)
    args = parser.parse_args()

    import moert
    where = os.path.dirname(os.path.abspath(moert.__file__))
    if where != os.path.abspath(args.module_dir):
        sys.exit(f"python: moert imported from {where}, not the installed "
                 f"{args.module_dir}")

    model = onnx.load(args.model)
    names = [o.name for o in model.graph.output]
    reference = ort.InferenceSession(args.model,
                                     providers=["CPUExecutionProvider"])
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"python: inputs seeded with {seed}")
    rng = np.random.default_rng(seed)

    plan = moert.Plan(args.plan)
    for info in plan.inputs + plan.outputs:
        print(f"python: {info!r} max {info.max_shape}")
    session = moert.Session(plan, threads=2)
    if session.threads != 2:
        sys.exit(f"python: the session has {session.threads} threads, not 2")

    def check(label, got, feeds):
        want = reference.run(names, feeds)
        ok = all(e2e.compare(label, n, got[n], w, 1e-5, "onnxruntime")
                 for n, w in zip(names, want))
        if not ok:
            sys.exit(f"python: {label} does not match onnxruntime")
        return want

    runs = 0
    for batch, tokens in [(1, 7), (2, 5)]:
        feeds = e2e.make_inputs(model, tokens, batch, args.int_high, rng)
        check(f"batch={batch} tokens={tokens}", session.run(feeds), feeds)
        runs += 1
    print("python: Session.run matches onnxruntime")

    # Zero copy in: change the arrays in place, run without inputs.
    feeds = e2e.make_inputs(model, 6, 1, args.int_high, rng)
    first = session.run(feeds)
    kept = {n: first[n].copy() for n in names}
    fresh = e2e.make_inputs(model, 6, 1, args.int_high, rng)
    for name, value in feeds.items():
        value[...] = fresh[name]
    second = session.run()
    runs += 2
    check("in place", second, fresh)
    if all(np.array_equal(first[n], second[n]) for n in names):
        sys.exit("python: run() after an in-place change of the inputs gave "
                 "the old outputs: the inputs were copied")
    print("python: inputs are read in place")

    # Zero copy out: views of the runtime's buffers, one set per run.
    for name in names:
        value = second[name]
        if value.flags.owndata or value.base is None:
            sys.exit(f"python: output {name} owns its data: it was copied")
        if not np.array_equal(first[name], kept[name]):
            sys.exit(f"python: output {name} of a run changed in the next")
        if np.shares_memory(first[name], second[name]):
            sys.exit(f"python: output {name} of two runs share memory")
    out = plan.outputs[0]
    buffer = np.full(int(np.prod(out.max_shape)), np.nan, dtype=out.dtype)
    given = session.run(feeds, outputs={out.name: buffer})
    runs += 1
    result = given[out.name]
    if result.ctypes.data != buffer.ctypes.data:
        sys.exit(f"python: run(outputs=...) returned {out.name} outside the "
                 f"given buffer")
    check("given output buffer", given, fresh)
    print("python: outputs are written in place")

    stats = session.stats()
    if stats["runs"] != runs or not stats["last_run_seconds"] > 0 or \
            not stats["steps"] or stats["steps"][0]["calls"] != runs:
        sys.exit(f"python: bad stats after {runs} runs: runs "
                 f"{stats['runs']}, last {stats['last_run_seconds']}, "
                 f"{len(stats['steps'])} steps")
    print(f"python: stats: {stats['runs']} runs, {len(stats['steps'])} steps")

    # Mistakes.
    name, value = next(iter(feeds.items()))
    expect_raises("unknown input", KeyError, ["nope", name],
                  lambda: session.run({"nope": value}))
    other = np.float64 if value.dtype != np.float64 else np.float32
    expect_raises("wrong dtype", TypeError, [name, str(np.dtype(other))],
                  lambda: session.run({name: value.astype(other)}))
    info = plan.inputs[0]
    too_big = np.zeros([d + 1 for d in info.max_shape], dtype=value.dtype)
    expect_raises("shape beyond the bound", ValueError, [name, "dim"],
                  lambda: session.run({info.name: too_big}))
    strided = np.zeros([d * 2 for d in value.shape], value.dtype)[..., ::2]
    expect_raises("strided input", ValueError, [name, "C-contiguous"],
                  lambda: session.run({name: strided}))
    expect_raises("list input", TypeError, [name, "numpy.ndarray"],
                  lambda: session.run({name: value.tolist()}))
    expect_raises("missing plan", FileNotFoundError, ["/nonexistent.plan"],
                  lambda: moert.Plan("/nonexistent.plan"))
    corrupted = args.plan + ".corrupted"
    data = bytearray(open(args.plan, "rb").read())
    data[len(data) // 2] ^= 0x40
    open(corrupted, "wb").write(data)
    expect_raises("corrupted plan", moert.Error, [corrupted],
                  lambda: moert.Plan(corrupted))
    print("python: all checks pass")


if __name__ == "__main__":
    main()
