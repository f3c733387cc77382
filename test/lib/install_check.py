#!/usr/bin/env python3
"""What an embedder gets from `cmake --install`, checked on a real model.

Installs the build directory into a fresh prefix, compiles the model with the
installed moec, and runs the plan on fresh random inputs through

  (a) a C program (test/Embed/Inputs/app.c, the C API) built with
      `pkg-config --cflags --libs moert` against the shared libmoert;
  (b) a throwaway CMake project (Ninja) with find_package(moert): a C++
      program on moert::moert (the C++ API) and the C program on
      moert::moert_static;
  (c) `import moert` from the installed tree (moert_python_check.py: zero
      copy both ways, the exceptions of wrong names, dtypes and shapes);
  (d) the installed moe-run;

each compared with onnxruntime (e2e.py's tolerance); and (e) a C program
(test/Embed/Inputs/generate.c, the C API's generator) built with
pkg-config generates from the zoo's Mixtral generation pair, compiled by the
installed moec, transformers' greedy ids (examples/zoo/v5). Also checks what the
prefix holds: the tools, libmoert.so and libmoert.a, the headers, the CMake
package, moert.pc, the Python module, and none of the compiler's archives.
Exit 0 when everything matches.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e  # noqa: E402


def run(cmd, env=None, cwd=None):
    """Runs `cmd`; exits with its output when it fails."""
    result = subprocess.run(cmd, capture_output=True, text=True, env=env,
                            cwd=cwd)
    if result.returncode != 0:
        sys.exit(f"install: command failed ({result.returncode}): "
                 f"{' '.join(cmd)}\n{result.stdout}{result.stderr}")
    return result.stdout


def check_layout(prefix):
    """Checks the installed files; returns the Python module directory."""
    want = ["bin/moec", "bin/moe-run", "bin/moec-opt", "lib/libmoert.a",
            "include/moert/moert.h", "include/moert/moert_c.h",
            "lib/cmake/moert/moertConfig.cmake",
            "lib/cmake/moert/moertConfigVersion.cmake",
            "lib/cmake/moert/moertTargets.cmake", "lib/pkgconfig/moert.pc"]
    missing = [f for f in want if not os.path.exists(os.path.join(prefix, f))]
    if not os.path.exists(os.path.join(prefix, "lib", "libmoert.so")):
        missing.append("lib/libmoert.so")
    installed = []
    for root, _, files in os.walk(prefix):
        installed += [os.path.relpath(os.path.join(root, f), prefix)
                      for f in files]
    archives = sorted(f for f in installed
                      if f.endswith(".a") and f != "lib/libmoert.a")
    if archives:
        sys.exit(f"install: compiler or internal archives installed: "
                 f"{', '.join(archives)}")
    if os.path.exists(os.path.join(prefix, "include", "moert",
                                   "plan_writer.h")):
        sys.exit("install: the compiler's plan_writer.h is installed")
    modules = [f for f in installed if os.path.basename(f).startswith("moert.")
               and f.endswith(".so")]
    if len(modules) != 1:
        missing.append("the moert Python module (pybind11-dev installed?)")
    if missing:
        sys.exit(f"install: missing from {prefix}: {', '.join(missing)}")
    print(f"install: layout ok ({len(installed)} files, no compiler "
          f"archives)")
    return os.path.join(prefix, os.path.dirname(modules[0]))


def app_args(plan, outdir, feeds):
    """The command-line arguments of app.c / app.cpp for `feeds`."""
    args = [plan, outdir]
    for name, value in feeds.items():
        path = os.path.join(outdir, f"{name}.in")
        value.tofile(path)
        args.append(f"{name}={path}:{'x'.join(map(str, value.shape))}")
    return args


def check_app(label, cmd, plan, workdir, feeds, reference, outputs):
    """Runs an app on `feeds` and compares its raw outputs with
    `reference`."""
    outdir = os.path.join(workdir, label.replace(" ", "_"))
    os.makedirs(outdir, exist_ok=True)
    stdout = run(cmd + app_args(plan, outdir, feeds))
    ok = True
    for name, want in zip(outputs, reference):
        got = np.fromfile(os.path.join(outdir, f"{name}.bin"),
                          dtype=want.dtype)
        if got.size != want.size:
            sys.exit(f"install: {label}: output {name} has {got.size} "
                     f"elements; onnxruntime's {want.size}\n{stdout}")
        ok &= e2e.compare(label, name, got.reshape(want.shape), want, 1e-5,
                          "onnxruntime")
    if not ok:
        sys.exit(f"install: {label} does not match onnxruntime\n{stdout}")
    print(f"install: {label} matches onnxruntime")
    return stdout


def check_generation(prefix, inputs, workdir, env_flags, libdir):
    """Builds Inputs/generate.c with pkg-config's flags and checks its greedy
    ids against examples/zoo/v5/mixtral_generation_greedy.json."""
    zoo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "examples", "zoo", "v5")
    plan = os.path.join(workdir, "gen.plan")
    run([os.path.join(prefix, "bin", "moec"), "compile",
         os.path.join(zoo, "mixtral_generation_decode.onnx"), "--prefill",
         os.path.join(zoo, "mixtral_generation_prefill.onnx"), "--max-seq",
         "48", "-o", plan])
    app = os.path.join(workdir, "generate")
    run(["cc", "-std=c99", "-Wall", "-Werror",
         os.path.join(inputs, "generate.c"), "-o", app] + env_flags +
        [f"-Wl,-rpath,{libdir}"])
    with open(os.path.join(zoo, "mixtral_generation_greedy.json")) as f:
        cases = json.load(f)["cases"]
    for case in cases:
        out = run([app, plan, str(len(case["new_ids"])),
                   ",".join(map(str, case["prompt"]))])
        got = [int(x) for x in out.splitlines()[0].split()]
        if got != case["new_ids"]:
            sys.exit(f"install: C generation of {case['prompt']}: {got}, "
                     f"transformers {case['new_ids']}")
    print(f"install: C generation matches transformers' greedy ids "
          f"({len(cases)} prompts)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True, help="the build directory")
    parser.add_argument("--model", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--int-high", type=int, default=64)
    args = parser.parse_args()

    here = os.path.dirname(os.path.abspath(__file__))
    inputs = os.path.join(here, "..", "Embed", "Inputs")
    workdir = os.path.abspath(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    prefix = os.path.join(workdir, "prefix")
    start = time.monotonic()
    run(["cmake", "--install", args.build, "--prefix", prefix])
    print(f"install: installed in {time.monotonic() - start:.1f} s")
    python_dir = check_layout(prefix)

    plan = os.path.join(workdir, "model.plan")
    run([os.path.join(prefix, "bin", "moec"), "compile", args.model, "-o",
         plan, "--max-tokens", "16"])
    model = onnx.load(args.model)
    outputs = [o.name for o in model.graph.output]
    session = ort.InferenceSession(args.model,
                                   providers=["CPUExecutionProvider"])
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"install: inputs seeded with {seed}")
    rng = np.random.default_rng(seed)
    feeds = e2e.make_inputs(model, 7, 1, args.int_high, rng)
    reference = session.run(outputs, feeds)

    # (a) pkg-config, the C API, the shared library.
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib",
                                                        "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "moert"], env=env).split()
    libdir = run(["pkg-config", "--variable=libdir", "moert"], env=env).strip()
    app = os.path.join(workdir, "app")
    start = time.monotonic()
    run(["cc", "-std=c99", "-Wall", "-Werror", os.path.join(inputs, "app.c"),
         "-o", app] + flags + [f"-Wl,-rpath,{libdir}"])
    print(f"install: C program built with pkg-config in "
          f"{time.monotonic() - start:.1f} s")
    stdout = check_app("C program (pkg-config)", [app], plan, workdir, feeds,
                       reference, outputs)
    for line in stdout.splitlines():
        if line.startswith(("input ", "output ", "stats:", "unknown input:",
                            "missing plan:")):
            print(f"app: {line}")

    # (b) find_package(moert) in a CMake project of its own.
    consumer = os.path.join(workdir, "consumer")
    start = time.monotonic()
    run(["cmake", "-G", "Ninja", "-S", inputs, "-B", consumer,
         "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={prefix}"])
    run(["cmake", "--build", consumer])
    print(f"install: CMake project built in {time.monotonic() - start:.1f} s")
    check_app("C++ program (moert::moert)",
              [os.path.join(consumer, "app_cxx")], plan, workdir, feeds,
              reference, outputs)
    check_app("C program (moert::moert_static)",
              [os.path.join(consumer, "app_static")], plan, workdir, feeds,
              reference, outputs)
    shared = run(["ldd", os.path.join(consumer, "app_static")])
    if "libmoert" in shared:
        sys.exit(f"install: app_static loads a shared libmoert:\n{shared}")

    # (c) import moert from the installed tree.
    env = dict(os.environ, PYTHONPATH=python_dir)
    print(run([sys.executable, os.path.join(here, "moert_python_check.py"),
               "--plan", plan, "--model", args.model, "--module-dir",
               python_dir, "--int-high", str(args.int_high)], env=env),
          end="")

    # (d) the installed moe-run.
    npy = os.path.join(workdir, "moe_run")
    os.makedirs(npy)
    run_args = [os.path.join(prefix, "bin", "moe-run"), plan, "--output-dir",
                npy]
    for name, value in feeds.items():
        np.save(os.path.join(npy, f"{name}.in.npy"), value)
        run_args += ["--input", f"{name}={os.path.join(npy, name)}.in.npy"]
    run(run_args)
    for name, want in zip(outputs, reference):
        if not e2e.compare("moe-run", name,
                           np.load(os.path.join(npy, f"{name}.npy")), want,
                           1e-5, "onnxruntime"):
            sys.exit("install: the installed moe-run does not match")
    print("install: moe-run matches onnxruntime")

    # (e) generation through the C API: the zoo's Mixtral generation pair,
    # compiled by the installed moec, against transformers' greedy ids.
    check_generation(prefix, inputs, workdir, env_flags=flags, libdir=libdir)
    print("install: all embedding checks pass")


if __name__ == "__main__":
    main()
