#!/usr/bin/env python3
"""Exports moec's model zoo: tiny random-weight Hugging Face MoE layers as ONNX.

Every model is a real transformers module (an MoE block, or a whole tiny
Mixtral) built from a small config with fixed seeds on the CPU, exported with
the exporter its entry names, checked with onnx.checker, run in onnxruntime
at several token counts and compared with the torch module. The results and
the gate's ground truth (what moec's detector must recover) go to
manifest.json.

Different MoE forms need different transformers releases (README.md says
why), so each model belongs to a *track*, one pinned venv:

    .venv-export/bin/python examples/zoo/export_zoo.py          # this venv's track
    .venv-export/bin/python examples/zoo/export_zoo.py --all    # every track, each in its venv
    .venv-export/bin/python examples/zoo/export_zoo.py --only mixtral_block

The manifest is merged: a run rewrites the entries of the models it exported
and keeps the others. The builders are zoo_mixtral.py's and
zoo_families.py's, and what they share zoo_common.py's; this script exports,
checks and records what they register.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from onnx import TensorProto, helper, numpy_helper

# The builders register themselves (@model), the Mixtral ones first;
# init_params is export_zoo_v5.py's.
import zoo_mixtral  # noqa: E402,I001
import zoo_families  # noqa: E402
import zoo_common  # noqa: E402
from zoo_common import (  # noqa: E402,F401
    DYNAMO_OPSET,
    MACHINE_SPECIFIC_METADATA,
    MANIFEST,
    MANIFEST_VERSION,
    Model,
    PARITY_SEED,
    PARITY_SHAPES,
    PARITY_TOLERANCE,
    REGISTRY,
    REPO_ROOT,
    TORCHSCRIPT_OPSET,
    TRACKS,
    init_params,
)


# dynamo records each module's class path in its export
# (pkg.torch.onnx.class_hierarchy); the zoo's own wrappers keep the `__main__`
# paths they had when they lived in this script, so that exports stay the
# same.
for _module in (zoo_common, zoo_mixtral, zoo_families):
    for _cls in vars(_module).values():
        if isinstance(_cls, type) and _cls.__module__ == _module.__name__:
            _cls.__module__ = "__main__"


# --------------------------------------------------------------------------- #
# Export, check, parity, manifest
# --------------------------------------------------------------------------- #


def dynamic_axes_of(m: Model) -> dict[int, str]:
    return {i: a for i, a in enumerate(m.input_axes) if isinstance(a, str)}


def export_onnx(name: str, m: Model, path: Path):
    """Writes m's ONNX graph to path, weights inline, dynamic axes named."""
    if m.onnx_model is not None:
        onnx.save(m.onnx_model, str(path))
        return
    module = m.export_module if m.export_module is not None else m.module
    # torch.onnx.export restores the top module's training flag onto every
    # submodule afterwards; a wrapper left in training mode would switch on
    # the experts' dropout for the parity check.
    module.eval()
    axes = dynamic_axes_of(m)
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns about every Python-side use of a tensor value;
        # README.md discusses the ones that matter.
        warnings.simplefilter("ignore")
        if m.exporter == "torchscript":
            torch.onnx.export(
                module,
                (m.trace_input,),
                str(path),
                input_names=[m.input_name],
                output_names=[m.output_name],
                dynamic_axes={m.input_name: axes, m.output_name: axes},
                opset_version=TORCHSCRIPT_OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        elif m.exporter == "dynamo":
            program = torch.onnx.export(
                module,
                (m.trace_input,),
                input_names=[m.input_name],
                output_names=[m.output_name],
                dynamic_shapes=({i: torch.export.Dim.DYNAMIC for i in axes},),
                opset_version=DYNAMO_OPSET,
                dynamo=True,
                external_data=False,
                optimize=True,
                verbose=False,
            )
            program.save(str(path), external_data=False)
        else:
            raise ValueError(f"{name}: unknown exporter {m.exporter!r}")
    proto = onnx.load(str(path))
    # Name the dynamic axes as the manifest does, whatever the exporter chose.
    for value in list(proto.graph.input) + list(proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        for i, axis in axes.items():
            if i < len(dims) and not dims[i].HasField("dim_value"):
                dims[i].dim_param = axis
    for node in proto.graph.node:
        keep = [p for p in node.metadata_props if p.key not in MACHINE_SPECIFIC_METADATA]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    onnx.save(proto, str(path))


def add_metadata(path: Path, name: str, track: str):
    proto = onnx.load(str(path))
    meta = {
        "moec.zoo.name": name,
        "moec.zoo.generator": "examples/zoo/export_zoo.py",
        "moec.zoo.track": track,
        "moec.zoo.transformers": transformers.__version__,
        "moec.zoo.torch": torch.__version__.split("+")[0],
    }
    del proto.metadata_props[:]
    for k, v in meta.items():
        proto.metadata_props.add(key=k, value=v)
    onnx.save(proto, str(path))


def difference(got: np.ndarray, want: np.ndarray) -> dict:
    """max_abs, max_rel and ok of onnxruntime's output against torch's."""
    if got.shape != want.shape:
        return {"ok": False, "error": f"output shape {list(got.shape)} != torch {list(want.shape)}"}
    diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
    scale = float(np.abs(want).max())
    return {
        "max_abs": diff,
        "max_rel": diff / max(scale, 1e-30),
        "ok": diff <= PARITY_TOLERANCE * max(1.0, scale),
    }


def compare(session, m: Model, references: list[torch.nn.Module]) -> list[list[dict]]:
    """Runs session and each reference on PARITY_SHAPES; one result list per reference."""
    gen = torch.Generator().manual_seed(PARITY_SEED)
    results: list[list[dict]] = [[] for _ in references]
    for ref in references:
        ref.eval()
    for batch, seq in PARITY_SHAPES:
        if batch != 1 and "batch" not in m.input_axes:
            continue
        x = m.make_input(gen, batch, seq)
        base = {"batch": batch, "seq": seq, "tokens": batch * seq, "input_shape": list(x.shape)}
        try:
            got = session.run(None, {m.input_name: x.numpy()})[0]
        except Exception as e:  # onnxruntime's exception types are not public
            for r in results:
                r.append({**base, "ok": False, "error": str(e).splitlines()[0][:300]})
            continue
        for ref, r in zip(references, results):
            with torch.no_grad():
                want = ref(x).numpy()
            r.append({**base, **difference(got, want)})
    return results


def graph_summary(proto: onnx.ModelProto) -> dict:
    ops = Counter(
        (f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type for n in proto.graph.node
    )

    def io(values):
        return [
            {
                "name": v.name,
                "dtype": helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name,
                "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim],
            }
            for v in values
        ]

    opsets = {(o.domain or "ai.onnx"): o.version for o in proto.opset_import}
    return {
        "opset": opsets.get("ai.onnx"),
        "opsets": opsets,
        "ir_version": proto.ir_version,
        "inputs": io(proto.graph.input),
        "outputs": io(proto.graph.output),
        "initializers": len(proto.graph.initializer),
        "weight_bytes": sum(numpy_helper.to_array(t).nbytes for t in proto.graph.initializer),
        "nodes": sum(ops.values()),
        "op_counts": dict(sorted(ops.items())),
    }


def export_one(name: str, track: str) -> dict:
    m = REGISTRY[name][1]()
    rel = m.file or f"examples/zoo/{name}.onnx"
    path = REPO_ROOT / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    export_onnx(name, m, path)
    add_metadata(path, name, track)

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    if any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer):
        raise RuntimeError(f"{name}: weights went to external data")
    summary = graph_summary(proto)
    wrong_ops = {
        op: (summary["op_counts"].get(op, 0), want)
        for op, want in m.expect_ops.items()
        if summary["op_counts"].get(op, 0) != want
    }
    if wrong_ops:
        raise RuntimeError(f"{name}: op counts (got, expected) {wrong_ops}")

    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # failures are recorded in the manifest
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    references = [m.reference or m.module] + ([m.module] if m.reference is not None else [])
    checks = compare(session, m, references)
    at_trace = None
    if m.validity != "any_input":
        # The graph is right for the input it was traced on: show that.
        with torch.no_grad():
            want = m.module(m.trace_input).numpy()
        got = session.run(None, {m.input_name: m.trace_input.numpy()})[0]
        at_trace = {"input_shape": list(m.trace_input.shape), **difference(got, want)}

    data = path.read_bytes()
    entry = {
        "file": rel,
        "size_bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "architecture": m.architecture,
        "form": m.form,
        "exporter": m.exporter,
        "track": track,
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        **summary,
        "dynamic_axes": {m.input_name: {str(i): a for i, a in dynamic_axes_of(m).items()}},
        "gate": dataclasses.asdict(m.gates[0]) if len(m.gates) == 1 else None,
        "layers": [dataclasses.asdict(g) for g in m.gates] if len(m.gates) > 1 else None,
        "validity": m.validity,
        "parity": checks[0],
        "parity_vs_full_module": checks[1] if len(checks) > 1 else None,
        "parity_at_trace_input": at_trace,
        "notes": m.notes,
        **m.extra,
    }
    entry = {k: v for k, v in entry.items() if v is not None}
    failed = [c for c in checks[0] if not c["ok"]]
    if failed and m.validity == "any_input":
        raise RuntimeError(f"{name}: onnxruntime disagrees with torch: {failed}")
    if m.validity == "trace_routing" and not at_trace["ok"]:
        raise RuntimeError(f"{name}: wrong even for its trace input: {at_trace}")
    return entry


def current_track() -> str:
    for name, t in TRACKS.items():
        if transformers.__version__ == t.transformers:
            return name
    pins = ", ".join(f"{n}: {t.transformers}" for n, t in TRACKS.items())
    sys.exit(
        f"export_zoo.py: transformers {transformers.__version__} matches no track ({pins}); "
        "create the venvs as examples/zoo/README.md says"
    )


def _compact_json(value, indent: int = 0) -> str:
    """JSON with scalar-only lists and small flat objects kept on one line."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    flat = json.dumps(value)
    is_leaf_list = isinstance(value, list) and all(not isinstance(v, (list, dict)) for v in value)
    is_small_dict = isinstance(value, dict) and len(flat) <= 100 and all(
        not isinstance(v, (list, dict)) or (isinstance(v, list) and len(v) <= 4) for v in value.values()
    )
    if not isinstance(value, (list, dict)) or is_leaf_list or is_small_dict:
        return flat
    if isinstance(value, list):
        items = [inner + _compact_json(v, indent + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    items = [f"{inner}{json.dumps(k)}: {_compact_json(v, indent + 1)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + pad + "}"


def write_manifest(models: dict):
    doc = {
        "version": MANIFEST_VERSION,
        "generator": "examples/zoo/export_zoo.py (see examples/zoo/README.md)",
        "paths": "relative to the repository root",
        "parity": {
            "shapes": "(batch, seq) = " + ", ".join(f"({b}, {s})" for b, s in PARITY_SHAPES),
            "inputs": f"torch.randn (or randint for input_ids), generator seed {PARITY_SEED}",
            "max_abs": "max |onnxruntime - torch| over the output",
            "max_rel": "max_abs / max |torch output|",
            "ok": f"max_abs <= {PARITY_TOLERANCE} * max(1, max |torch output|)",
        },
        "models": dict(sorted(models.items())),
    }
    MANIFEST.write_text(_compact_json(doc) + "\n")


def run_track(track: str, only: list[str] | None) -> int:
    pinned = TRACKS[track].torch
    if torch.__version__.split("+")[0] != pinned:
        sys.exit(f"export_zoo.py: torch {torch.__version__} is not the pinned {pinned}")
    names = [n for n, (t, _) in REGISTRY.items() if t == track and (not only or n in only)]
    failures = 0
    for name in names:
        print(f"[{track}] {name} ...", flush=True)
        try:
            entry = export_one(name, track)
        except Exception as e:  # report every model, then fail
            failures += 1
            print(f"[{track}] {name}: FAILED: {e}", file=sys.stderr, flush=True)
            continue
        models = json.loads(MANIFEST.read_text())["models"] if MANIFEST.exists() else {}
        models[name] = entry
        write_manifest(models)
        worst = max((c.get("max_abs", float("inf")) for c in entry["parity"]), default=0.0)
        flag = f" (validity: {entry['validity']})" if entry["validity"] != "any_input" else ""
        print(
            f"[{track}] {name}: {entry['size_bytes']} bytes, {entry['nodes']} nodes, "
            f"max |ort - torch| = {worst:.3g}{flag}",
            flush=True,
        )
    return failures


def run_all(only: list[str] | None) -> int:
    failures = 0
    for track, t in TRACKS.items():
        if only and not any(REGISTRY[n][0] == track for n in only):
            continue
        python = REPO_ROOT / t.venv / "bin" / "python"
        if not python.exists():
            print(
                f"export_zoo.py: {python} is missing; create it with\n"
                f"  python3 -m venv {t.venv} && {t.venv}/bin/pip install -r examples/zoo/{t.requirements}",
                file=sys.stderr,
            )
            failures += 1
            continue
        cmd = [str(python), str(Path(__file__).resolve()), "--track", track]
        if only:
            cmd += ["--only", *only]
        failures += subprocess.run(cmd, cwd=REPO_ROOT).returncode != 0
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all", action="store_true", help="run every track, each in its own venv")
    parser.add_argument("--track", choices=sorted(TRACKS), help="fail unless this interpreter runs this track")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="export only these models")
    parser.add_argument("--list", action="store_true", help="list the models and their tracks")
    args = parser.parse_args(argv)
    if args.list:
        for name, (track, _) in REGISTRY.items():
            print(f"{name:28} {track}")
        return 0
    unknown = [n for n in args.only or [] if n not in REGISTRY]
    if unknown:
        parser.error(f"unknown model(s): {', '.join(unknown)}; see --list")
    if args.all:
        return 1 if run_all(args.only) else 0
    track = current_track()
    if args.track and args.track != track:
        sys.exit(f"export_zoo.py: --track {args.track}, but transformers {transformers.__version__} is track {track}")
    return 1 if run_track(track, args.only) else 0


if __name__ == "__main__":
    sys.exit(main())
