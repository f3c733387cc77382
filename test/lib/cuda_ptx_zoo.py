"""Compiles every valid zoo model with `moec compile --target cuda` and
assembles each emitted PTX module with ptxas (the CUDA target's validity
check).

The models are those of examples/zoo/manifest.json whose validity is
`any_input` (the others are wrong exports kept as detector tests). Prints one
line per model, `ptx: NAME: N kernels, ptxas ok`, then a summary; exits 1 on
the first model that fails to compile or assemble, with the tool's output.
"""

import argparse
import json
import os
import re
import subprocess
import sys

import onnx


def dim_params(path):
    """The named dimensions of a model's inputs."""
    model = onnx.load(path, load_external_data=False)
    return {d.dim_param for i in model.graph.input
            for d in i.type.tensor_type.shape.dim if d.dim_param}


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stdout.write(result.stdout + result.stderr)
        print(f"ptx: FAILED: {' '.join(cmd)} (exit {result.returncode})")
        sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--moec", default="moec")
    parser.add_argument("--ptxas", default="ptxas")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(args.manifest))))
    with open(args.manifest) as f:
        manifest = json.load(f)
    models = sorted(os.path.join(root, entry["file"])
                    for entry in manifest["models"].values()
                    if entry.get("validity") == "any_input")
    total = 0
    for model in models:
        name = os.path.basename(model)
        stem = os.path.join(args.workdir, name[:-len(".onnx")])
        # moec refuses a --bound naming no dimension of the model.
        bound = ["--bound", "batch=1"] if "batch" in dim_params(model) else []
        run([args.moec, "compile", model, "-o", stem + ".bin",
             "--target", "cuda", "--cuda-arch", args.arch,
             "--ptx-output", stem + ".ptx", *bound,
             f"--max-tokens={args.max_tokens}"])
        with open(stem + ".ptx") as f:
            ptx = f.read()
        if f".target {args.arch}" not in ptx:
            print(f"ptx: FAILED: {name}: the module does not target "
                  f"{args.arch}")
            sys.exit(1)
        kernels = len(re.findall(r"^\.visible \.entry ", ptx, re.M))
        run([args.ptxas, f"-arch={args.arch}", stem + ".ptx", "-o",
             stem + ".cubin"])
        total += kernels
        print(f"ptx: {name}: {kernels} kernels, ptxas ok")
    print(f"ptx: {len(models)} models, {total} kernels, all accepted")


if __name__ == "__main__":
    main()
