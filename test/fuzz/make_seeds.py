#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (scripts/fuzz.sh runs it).

    make_seeds.py --out DIR --moec MOEC [--make-plans MOERT_MAKE_TEST_PLANS]

DIR/fuzz_onnx_import/: the zoo's exported MoE models (examples/zoo, those
small enough to compile quickly), every model test/lib/gen_onnx.py and
gen_onnx_if.py build (valid ones and ones with one defect each) but the big
ones, and the
regression inputs (test/fuzz/regressions) but those pending a fix.
DIR/fuzz_plan/: the plans moec compiles from those models (--max-tokens 8),
the plans the runtime's tests write (make_test_plans) and the plan
regressions. Nothing here is committed: it is all made from the tree.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# Larger models cost too much per execution to be worth mutating.
MAX_MODEL_BYTES = 200 * 1024
MAX_PLAN_BYTES = 256 * 1024


def pending():
    path = os.path.join(HERE, "pending-fixes.txt")
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {line.split("#")[0].strip() for line in f} - {""}


def copy_regressions(target, out):
    skip = pending()
    directory = os.path.join(HERE, "regressions", target)
    for name in sorted(os.listdir(directory)):
        if name != "README.md" and f"{target}/{name}" not in skip:
            shutil.copy(os.path.join(directory, name),
                        os.path.join(out, "regression-" + name))


def gen_onnx_models(out):
    sys.path.insert(0, os.path.join(ROOT, "test", "lib"))
    import gen_onnx
    import gen_onnx_if

    # gen_onnx_if's models (If: folded and selected branches, nested ones,
    # malformed subgraphs) are named gen-if-*.
    sources = [("gen-", gen_onnx.MODELS), ("gen-if-", gen_onnx_if.MODELS)]
    with tempfile.TemporaryDirectory() as tmp:
        for prefix, models in sources:
            for name in sorted(models):
                if "big" in name or "large" in name:
                    continue
                path = os.path.join(tmp, prefix + name, "model.onnx")
                os.makedirs(os.path.dirname(path))
                model = models[name](path)
                if model is not None:
                    gen_onnx.write_bytes(path, model.SerializeToString())
                if os.path.isfile(path) and \
                        os.path.getsize(path) <= MAX_MODEL_BYTES:
                    shutil.copy(path, os.path.join(out,
                                                   f"{prefix}{name}.onnx"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--moec", required=True)
    parser.add_argument("--make-plans")
    args = parser.parse_args()
    onnx_dir = os.path.join(args.out, "fuzz_onnx_import")
    plan_dir = os.path.join(args.out, "fuzz_plan")
    for d in (onnx_dir, plan_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)

    zoo = os.path.join(ROOT, "examples", "zoo")
    for name in sorted(os.listdir(zoo)):
        path = os.path.join(zoo, name)
        if name.endswith(".onnx") and os.path.getsize(path) <= MAX_MODEL_BYTES:
            shutil.copy(path, os.path.join(onnx_dir, "zoo-" + name))
    gen_onnx_models(onnx_dir)
    copy_regressions("fuzz_onnx_import", onnx_dir)

    def compile_plan(name):
        plan = os.path.join(plan_dir, os.path.splitext(name)[0] + ".plan")
        result = subprocess.run(
            [args.moec, "compile", os.path.join(onnx_dir, name), "-o", plan,
             "--max-tokens", "8"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        if result.returncode != 0 or os.path.getsize(plan) > MAX_PLAN_BYTES:
            if os.path.exists(plan):
                os.remove(plan)

    models = [n for n in sorted(os.listdir(onnx_dir))
              if not n.startswith("regression-")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(compile_plan, models))
    if args.make_plans:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([args.make_plans, tmp], check=True,
                           stdout=subprocess.DEVNULL)
            for name in sorted(os.listdir(tmp)):
                shutil.copy(os.path.join(tmp, name),
                            os.path.join(plan_dir, "runtime-" + name))
    copy_regressions("fuzz_plan", plan_dir)
    for d in (onnx_dir, plan_dir):
        print(f"make_seeds: {len(os.listdir(d))} seeds in {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
