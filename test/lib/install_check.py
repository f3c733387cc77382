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
installed moec, transformers' greedy ids (examples/zoo/v5); and (f) on a
"machine without the CUDA toolkit" (the toolkit hidden: CUDAToolkit_ROOT
pointing nowhere, its directories ignored by CMake's searches, no nvcc on
PATH and no CUDA variables, which the consumer project proves by failing
find_package(CUDAToolkit)), a C and a C++ program built with
find_package(moert) on moert::moert and with pkg-config (moert.pc for C,
whose --libs is -lmoert alone, moert-cxx.pc for C++) run the plan and match
onnxruntime, and asking for the static component fails naming the toolkit
when the runtime was built with the CUDA backend. Also checks what the
prefix holds: the tools, libmoert.so and libmoert.a, the headers, the CMake
package, moert.pc and moert-cxx.pc, the Python module, and none of the
compiler's archives; and that the installed moec-verify, run by a Python
without numpy and onnxruntime, names the pip packages with
requirements.txt's pins. Exit 0 when everything matches.
"""

import argparse
import json
import os
import re
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
            "lib/cmake/moert/moertTargets.cmake",
            "lib/cmake/moert/moertStaticTargets.cmake",
            "lib/pkgconfig/moert.pc", "lib/pkgconfig/moert-cxx.pc",
            "bin/moec-verify"]
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


def hidden_cuda(workdir):
    """The environment and CMake arguments of a machine without the CUDA
    toolkit: no CUDA variables, no nvcc on PATH, CUDAToolkit_ROOT pointing
    nowhere and every directory holding an nvcc (PATH's, /usr/local's, the
    toolkits' roots) ignored by CMake's searches."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDA", "NVCC")) and
           k not in ("LIBRARY_PATH", "CPATH", "CUDAToolkit_ROOT")}
    search = os.environ.get("PATH", "").split(os.pathsep) + [
        "/usr/local/bin", "/usr/local/cuda/bin", "/opt/cuda/bin"]
    bins, roots = set(), {"/usr/local/cuda", "/opt/cuda"}
    for d in search:
        nvcc = os.path.join(d, "nvcc")
        if d and os.path.exists(nvcc):
            bins.update({d, os.path.dirname(os.path.realpath(nvcc))})
            roots.add(os.path.dirname(os.path.dirname(
                os.path.realpath(nvcc))))
    for root in list(roots):
        if os.path.exists(root):
            roots.add(os.path.realpath(root))
    env["PATH"] = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and d not in bins)
    args = [f"-DCUDAToolkit_ROOT={os.path.join(workdir, 'no-cuda-toolkit')}",
            f"-DCMAKE_IGNORE_PATH={';'.join(sorted(bins))}",
            f"-DCMAKE_IGNORE_PREFIX_PATH={';'.join(sorted(roots))}"]
    return env, args


def built_with_cuda(build):
    """Whether the build directory's runtime has the CUDA backend."""
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        return any(re.match(r"MOERT_CUDA:BOOL=(ON|TRUE|1)$", line.strip())
                   for line in f)


def check_without_cuda(prefix, inputs, workdir, build, plan, feeds,
                       reference, outputs):
    """(f): the installed runtime on a machine without the CUDA toolkit,
    through find_package(moert) and pkg-config, C and C++."""
    env, hide = hidden_cuda(workdir)
    consumer = os.path.join(workdir, "cpu_only")
    source = os.path.join(inputs, "cpu-only")
    run(["cmake", "-G", "Ninja", "-S", source, "-B", consumer,
         "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={prefix}"] +
        hide, env=env)
    print("install: CUDA toolkit hidden (find_package(CUDAToolkit) fails); "
          "find_package(moert) succeeds")
    run(["cmake", "--build", consumer], env=env)
    for label, app in (("C", "app_c"), ("C++", "app_cxx")):
        check_app(f"{label} program (moert::moert, no CUDA toolkit)",
                  [os.path.join(consumer, app)], plan, workdir, feeds,
                  reference, outputs)

    # libmoert.a of a CUDA build leaves the static CUDA runtime to the
    # program: without the toolkit the component is refused, saying why.
    static = os.path.join(workdir, "cpu_only_static")
    result = subprocess.run(
        ["cmake", "-G", "Ninja", "-S", source, "-B", static,
         f"-DCMAKE_PREFIX_PATH={prefix}", "-DMOERT_COMPONENTS=static"] + hide,
        capture_output=True, text=True, env=env)
    said = " ".join((result.stdout + result.stderr).split())
    if built_with_cuda(build):
        if result.returncode == 0 or "CUDA toolkit" not in said or \
                "moert::moert (libmoert.so) needs none of it" not in said:
            sys.exit(f"install: find_package(moert COMPONENTS static) "
                     f"without the CUDA toolkit: exit {result.returncode}, "
                     f"expected a failure naming the toolkit:\n{said}")
        print("install: moert::moert_static without the CUDA toolkit is "
              "refused, naming the toolkit and moert::moert")
    elif result.returncode != 0:
        sys.exit(f"install: a runtime without the CUDA backend refuses its "
                 f"static component:\n{said}")
    else:
        print("install: moert::moert_static without the CUDA toolkit is "
              "available (no CUDA backend)")

    # pkg-config: moert.pc for C (-lmoert alone: the C API needs none of
    # Abseil), moert-cxx.pc for C++.
    env["PKG_CONFIG_PATH"] = os.path.join(prefix, "lib", "pkgconfig")
    libdir = run(["pkg-config", "--variable=libdir", "moert"],
                 env=env).strip()
    libs = run(["pkg-config", "--libs", "moert"], env=env).split()
    if libs != [f"-L{libdir}", "-lmoert"]:
        sys.exit(f"install: pkg-config --libs moert gives {' '.join(libs)}; "
                 f"a C program needs -L{libdir} -lmoert alone")
    print(f"install: pkg-config --libs moert: -L... -lmoert, no Abseil")
    c_flags = run(["pkg-config", "--cflags", "--libs", "moert"],
                  env=env).split()
    cxx_flags = run(["pkg-config", "--cflags", "--libs", "moert-cxx"],
                    env=env).split()
    for label, compiler, source_file, flags in (
            ("C", ["cc", "-std=c99"], "app.c", c_flags),
            ("C++", ["c++", "-std=c++17"], "app.cpp", cxx_flags)):
        app = os.path.join(workdir, f"pc_{label.replace('+', 'x')}")
        run(compiler + ["-Wall", "-Werror", os.path.join(inputs, source_file),
                        "-o", app] + flags + [f"-Wl,-rpath,{libdir}"],
            env=env)
        needed = run(["readelf", "-d", app], env=env)
        if label == "C" and "libabsl" in needed:
            sys.exit(f"install: the C program links Abseil itself:\n{needed}")
        check_app(f"{label} program (pkg-config "
                  f"{'moert' if label == 'C' else 'moert-cxx'}, no CUDA "
                  f"toolkit)", [app], plan, workdir, feeds, reference,
                  outputs)


def check_verify_requirements(prefix):
    """The installed moec-verify, run by a Python without site-packages
    (so without numpy and onnxruntime), names the pip command with
    requirements.txt's pins."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "requirements.txt")) as f:
        pins = {line.split("==")[0]: line.strip() for line in f
                if "==" in line}
    result = subprocess.run(
        [sys.executable, "-S", "-I", os.path.join(prefix, "bin",
                                                  "moec-verify"), "x.onnx"],
        capture_output=True, text=True)
    want = f"pip install {pins['numpy']} {pins['onnxruntime']}"
    if result.returncode != 1 or want not in result.stderr:
        sys.exit(f"install: the installed moec-verify without numpy exits "
                 f"{result.returncode} and does not say '{want}':\n"
                 f"{result.stderr}")
    print("install: the installed moec-verify names the pip packages it "
          "needs, with requirements.txt's pins")


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

    # (f) a machine without the CUDA toolkit.
    check_without_cuda(prefix, inputs, workdir, args.build, plan, feeds,
                       reference, outputs)
    check_verify_requirements(prefix)
    print("install: all embedding checks pass")


if __name__ == "__main__":
    main()
