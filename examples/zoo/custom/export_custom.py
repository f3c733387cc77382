#!/usr/bin/env python3
"""Exports the zoo's custom track: MoE layers written outside transformers.

Each design below is a small torch module written for this corpus in the
style of one code base's MoE layer (Mistral's reference inference code,
DeepSeek-V3's and DeepSeek-MoE's own inference code, Megatron-Core, DeepSpeed/
GShard, Switch/t5x, Tutel/fairseq, research code that gathers expert weights,
Grok-1, V-MoE, OLMoE, JetMoE, makeMoE). None of them is a copy: each module
reproduces the idiom its authors use (how rows are selected per expert, how
results are written back, which gate, which activation), at tiny sizes with
fixed seeds.

Every design goes through torch.onnx.export with dynamo=True and dynamo=False
(TorchScript), at opsets 18 and 20. Where an exporter refuses the original
code, or exports it wrongly (TorchScript freezes data-dependent sizes), the
design's export-friendly variant, the rewrite a user would make, is exported
as well (file suffix `_friendly`), and the refusal is recorded. Every export
is checked with onnxruntime against torch at 1, 7 and 64 tokens (plus batch
2 x 5 tokens for [batch, seq, H] inputs); an export that disagrees is the
exporter's fault, recorded, never fitted.

    .venv-export-v5/bin/python examples/zoo/custom/export_custom.py            # export
    .venv-export-v5/bin/python examples/zoo/custom/export_custom.py --only mistral_ref
    .venv-export-v5/bin/python examples/zoo/custom/export_custom.py --moec-today  # detection table
    .venv-export-v5/bin/python examples/zoo/custom/export_custom.py --write-tests  # test/E2E/custom-*.test

The designs are designs_llm.py's (LLM code bases) and designs_frameworks.py's
(training frameworks, research code), with design_parts.py's shared pieces.

Outputs (examples/zoo/custom/): NAME.onnx, NAME.npz (inputs and torch outputs
at 1, 7 and 64 tokens as `hidden_states_t<T>`, `output_t<T>`, the format of
test/lib/e2e.py --torch-reference) and manifest.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

# The v5 track's rule for what a committed export keeps (weights inline, no
# machine-specific metadata).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from export_zoo_v5 import clean_and_inline  # noqa: E402
from export_zoo_v5 import describe as describe_v5  # noqa: E402

# The designs, one module per kind of code base.
import design_parts  # noqa: E402
import designs_frameworks  # noqa: E402
import designs_llm  # noqa: E402
from design_parts import init_weights  # noqa: E402
from designs_frameworks import (  # noqa: E402
    GatheredWeightBmm,
    GShardTop2Capacity,
    MakeMoE,
    MegatronPermute,
    SwitchTop1Capacity,
    TutelDenseMask,
    VMoEGelu,
)
from designs_llm import (  # noqa: E402
    DeepSeekMoE,
    DeepSeekV3Inference,
    Grok1GeGLU,
    JetMoE,
    MistralReference,
    OLMoE,
)

OUT_DIR = Path(__file__).resolve().parent
REPO_ROOT = OUT_DIR.parent.parent.parent
MANIFEST = OUT_DIR / "manifest.json"
E2E_DIR = REPO_ROOT / "test" / "E2E"

TORCH_VERSION = "2.15.0"
TOKENS = (1, 7, 64)
SEED = 100
# |ort - torch| <= PARITY_TOLERANCE * max(1, max |torch|), as the other tracks.
PARITY_TOLERANCE = 1e-4
EXPORTERS = ("dynamo", "torchscript")
OPSETS = (18, 20)
ort.set_default_logger_severity(3)


DESIGNS = {
    "mistral_ref": MistralReference,
    "deepseek_v3_ref": DeepSeekV3Inference,
    "deepseek_moe": DeepSeekMoE,
    "megatron_permute": MegatronPermute,
    "gshard_top2_capacity": GShardTop2Capacity,
    "switch_top1_capacity": SwitchTop1Capacity,
    "tutel_dense_mask": TutelDenseMask,
    "gathered_bmm": GatheredWeightBmm,
    "grok1_geglu": Grok1GeGLU,
    "vmoe_gelu": VMoEGelu,
    "olmoe": OLMoE,
    "jetmoe": JetMoE,
    "makemoe": MakeMoE,
}

# dynamo records each module's class path in its export
# (pkg.torch.onnx.class_hierarchy); the designs keep the `__main__` paths they
# had when they lived in this script, so that their exports stay the same.
for _module in (design_parts, designs_frameworks, designs_llm):
    for _cls in vars(_module).values():
        if isinstance(_cls, type) and _cls.__module__ == _module.__name__:
            _cls.__module__ = "__main__"

# The gate and expert of each design, in the words of the main zoo manifest:
# what a detector should recover.
GROUND_TRUTH = {
    "mistral_ref": dict(score="softmax", topk_before_softmax=True, normalize=True, activation="silu_glu"),
    "deepseek_v3_ref": dict(score="sigmoid", topk_before_softmax=False, normalize=True, selection_bias=True,
                            n_group=4, topk_group=2, routed_scaling_factor=2.5, activation="silu_glu",
                            shared_experts={"count": 1, "ffn": 32, "gate": "none"}),
    "deepseek_moe": dict(score="softmax", topk_before_softmax=False, normalize=False, activation="silu_glu",
                         shared_experts={"count": 2, "ffn": 64, "gate": "none"}),
    "megatron_permute": dict(score="softmax", topk_before_softmax=True, normalize=True, activation="silu_glu"),
    "gshard_top2_capacity": dict(score="softmax", topk_before_softmax=False, normalize=True, capacity=24,
                                 activation="relu", expert_bias=True),
    "switch_top1_capacity": dict(score="softmax", topk_before_softmax=False, normalize=False, capacity=12,
                                 activation="relu", dropped="zero"),
    "tutel_dense_mask": dict(score="softmax", topk_before_softmax=True, normalize=True, activation="relu",
                             expert_bias=True),
    "gathered_bmm": dict(score="softmax", topk_before_softmax=False, normalize=True, activation="relu_squared"),
    "grok1_geglu": dict(score="softmax", topk_before_softmax=False, normalize=False, activation="gelu_tanh_glu"),
    "vmoe_gelu": dict(score="softmax", topk_before_softmax=False, normalize=False, activation="gelu_erf",
                      expert_bias=True),
    "olmoe": dict(score="softmax", topk_before_softmax=False, normalize=False, activation="silu_glu"),
    "jetmoe": dict(score="softmax", topk_before_softmax=True, normalize=True, activation="silu_glu",
                   output_bias=True),
    "makemoe": dict(score="softmax", topk_before_softmax=True, normalize=True, activation="relu",
                    expert_bias=True, router_bias=True),
}


def build(name: str, friendly=False) -> nn.Module:
    """The design's module; `friendly` is False (the original code) or the
    exporter whose export-friendly variant is wanted."""
    cls = DESIGNS[name]
    torch.manual_seed(1)
    module = cls(friendly=friendly) if getattr(cls, "has_friendly", False) else cls()
    seed = 1 + sorted(DESIGNS).index(name)
    if hasattr(module, "init"):
        module.init(seed)
    else:
        init_weights(module, seed)
    return module.eval()


# --------------------------------------------------------------------------- #
# Inputs, export, parity
# --------------------------------------------------------------------------- #


def shaped(layout: str, batch: int, tokens: int, hidden: int, gen) -> torch.Tensor:
    if layout == "th":
        return torch.randn(batch * tokens, hidden, generator=gen)
    return torch.randn(batch, tokens, hidden, generator=gen)


def trace_sample(cls) -> torch.Tensor:
    """32 tokens (2 x 16): no size of the trace equals a size that is checked
    (1, 7, 64, 2 x 5), and (per design's seed) every expert gets at least two
    tokens: TorchScript specialises an expert traced with one."""
    return shaped(cls.layout, 2, 16, cls.hidden, torch.Generator().manual_seed(getattr(cls, "trace_seed", 2)))


def export(module, sample, path: Path, exporter: str, opset: int, layout: str):
    names = dict(input_names=["hidden_states"], output_names=["output"])
    if exporter == "dynamo":
        if layout == "th":
            dyn = ({0: torch.export.Dim("tokens")},)
        else:
            dyn = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")},)
        program = torch.onnx.export(module, (sample,), dynamo=True, opset_version=opset, dynamic_shapes=dyn,
                                    verbose=False, **names)
        program.save(str(path))
    else:
        axes = {0: "tokens"} if layout == "th" else {0: "batch", 1: "seq"}
        torch.onnx.export(module, (sample,), str(path), dynamo=False, opset_version=opset,
                          dynamic_axes={"hidden_states": axes, "output": axes}, **names)


@contextlib.contextmanager
def quiet():
    """Silences the exporters, whose C++ side prints whole graphs on errors."""
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sys.stdout.flush()
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def first_line(e: BaseException) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    if "## Exception summary" in text:
        # dynamo wraps the error of torch.export or of its translation: the
        # summary's first line says which and why.
        summary = [l.strip() for l in text.split("## Exception summary", 1)[1].splitlines() if l.strip()]
        step = re.search(r"step \d/3", text)
        return f"{type(e).__name__} ({step.group(0) if step else 'export'}): {summary[0][:400]}"
    reason = f"{type(e).__name__}: {text.splitlines()[0][:300]}" if text else type(e).__name__
    for line in text.splitlines()[1:]:
        if any(key in line for key in ("Could not guard", "data-dependent", "No ONNX function", "not supported",
                                       "Unsupported", "Could not extract")):
            reason += " | " + line.strip()[:300]
            break
    return reason


def parity(want: np.ndarray, got: np.ndarray) -> dict:
    if want.shape != got.shape:
        return {"ok": False, "error": f"shape {list(got.shape)} != torch {list(want.shape)}"}
    err = float(np.max(np.abs(want.astype(np.float64) - got))) if want.size else 0.0
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    return {"ok": err <= PARITY_TOLERANCE * scale, "max_abs": err}


def check(path: Path, module, layout: str, hidden: int) -> tuple[dict, dict]:
    """onnxruntime against torch at 1, 7 and 64 tokens (saved for the .npz)
    and at batch 2 x 5 tokens; returns (checks, arrays)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:
        session, load_error = None, f"onnxruntime: {str(e).strip().splitlines()[0][:300]}"
    gen = torch.Generator().manual_seed(SEED)
    cases = [(str(t), 1, t) for t in TOKENS] + [("2x5", 2, 5)]
    checks, arrays = {}, {}
    for label, batch, tokens in cases:
        x = shaped(layout, batch, tokens, hidden, gen)
        with torch.no_grad():
            want = module(x).numpy()
        if batch == 1:
            arrays[f"hidden_states_t{tokens}"] = x.numpy()
            arrays[f"output_t{tokens}"] = want
        if session is None:
            checks[label] = {"ok": False, "error": load_error}
            continue
        try:
            (got,) = session.run(["output"], {"hidden_states": x.numpy()})
            checks[label] = parity(want, got)
        except Exception as e:
            checks[label] = {"ok": False, "error": f"onnxruntime: {str(e).strip().splitlines()[0][:300]}"}
    return checks, arrays


def describe(model: onnx.ModelProto, path: Path) -> dict:
    """The v5 track's manifest record of an export, with its ai.onnx opset."""
    record = describe_v5(model, path)
    record["opset"] = record["opsets"]["ai.onnx"]
    return record


def export_one(name: str, exporter: str, opset: int, friendly: bool) -> dict:
    """Exports one (design, code, exporter, opset); returns its record (with
    `refusal` instead of a file when the exporter refuses)."""
    cls = DESIGNS[name]
    entry = f"{name}_{exporter}_op{opset}" + ("_friendly" if friendly else "")
    module = build(name, exporter if friendly else False)
    path = OUT_DIR / f"{entry}.onnx"
    record = {"design": name, "class": cls.__name__, "code": "export-friendly" if friendly else "original",
              "exporter": exporter, "opset_requested": opset, "layout": cls.layout,
              "sizes": {"hidden": cls.hidden, "ffn": cls.ffn, "experts": cls.experts, "top_k": cls.top_k},
              "gate": {"num_experts": cls.experts, "top_k": cls.top_k, **GROUND_TRUTH[name]},
              "torch": torch.__version__.split("+")[0]}
    try:
        with quiet():
            export(module, trace_sample(cls), path, exporter, opset, cls.layout)
        model = clean_and_inline(path)
    except Exception as e:  # the exporter's refusal is a result
        record["refusal"] = first_line(e)
        for leftover in (path, path.with_name(path.name + ".data")):
            if leftover.exists():
                leftover.unlink()
        print(f"  {entry}: refused: {record['refusal'][:160]}")
        return {entry: record}
    module.eval()
    record.update(describe(model, path))
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # an invalid model is the exporter's, like a wrong one
        record["checker_error"] = first_line(e)
    checks, arrays = check(path, module, cls.layout, cls.hidden)
    np.savez_compressed(OUT_DIR / f"{entry}.npz", **arrays)
    record["reference"] = str((OUT_DIR / f"{entry}.npz").relative_to(REPO_ROOT))
    record["ort_vs_torch"] = checks
    record["ort_matches_torch"] = all(c["ok"] for c in checks.values())
    if not record["ort_matches_torch"]:
        record["validity"] = "exporter-wrong"
    if record["opset"] != opset:
        record["note_opset"] = f"asked for opset {opset}, the file has {record['opset']}"
    print(f"  {entry}: {record['size_bytes']} bytes, opset {record['opset']}, "
          f"ort = torch: {record['ort_matches_torch']}"
          + ("" if record["ort_matches_torch"] else f" {json.dumps(checks)[:200]}"))
    return {entry: record}


def export_design(name: str, results: dict):
    print(name)
    for exporter in EXPORTERS:
        for opset in OPSETS:
            got = export_one(name, exporter, opset, friendly=False)
            results.update(got)
            (record,) = got.values()
            failed = "refusal" in record or not record["ort_matches_torch"]
            if failed and getattr(DESIGNS[name], "has_friendly", False):
                results.update(export_one(name, exporter, opset, friendly=True))


# --------------------------------------------------------------------------- #
# moec today, README table, E2E test
# --------------------------------------------------------------------------- #


def moec_today(results: dict, moec: Path):
    """Runs `moec compile --max-tokens 64` on every export: layers detected
    (from the summary line) and the first remark or error line."""
    for entry, record in sorted(results.items()):
        if "file" not in record:
            continue
        proc = subprocess.run([str(moec), "compile", str(REPO_ROOT / record["file"]), "-o", "/tmp/custom_zoo_p.bin",
                               "--max-tokens", "64"], capture_output=True, text=True)
        text = proc.stdout + proc.stderr
        summary = re.search(r"moec: wrote [^\n]*?: (no MoE layer[^,\n]*|(\d+) MoE layers? \(([^)]*)\))", text)
        name = Path(record["file"]).name
        # The file's directory is dropped, so that the record reads the same
        # on every machine.
        lines = [l.strip().replace(str(REPO_ROOT / record["file"]), name) for l in text.splitlines()]
        remark = next((l for l in lines if l.startswith("moec: remark:")), None)
        error = next((l for l in lines if l.startswith("moec: error:")), None)
        layers = int(summary.group(2)) if summary and summary.group(2) else 0
        record["moec_today"] = {
            "rc": proc.returncode,
            "moe_layers": layers if proc.returncode == 0 else None,
            "form": summary.group(3) if summary and summary.group(3) else None,
            "summary": summary.group(0) if summary else None,
            "first_remark": remark,
            "error": error if proc.returncode else None,
        }
        print(f"  {entry}: rc {proc.returncode}, {layers} layer(s); {(remark or error or '')[:120]}")


def write_tests(results: dict):
    """test/E2E/custom-<design>.test: one RUN line per export that onnxruntime
    gets right, comparing moe-run with onnxruntime and torch (numerics only)."""
    for old in E2E_DIR.glob("custom-*.test"):
        old.unlink()
    for name, cls in DESIGNS.items():
        entries = [(e, r) for e, r in sorted(results.items())
                   if r.get("design") == name and r.get("ort_matches_torch")]
        if not entries:
            continue
        lines = [
            f"# Tests that the custom-track exports of {cls.__name__} (examples/zoo/custom,",
            f"# export_custom.py: {cls.__doc__.strip().splitlines()[0].rstrip('.')})",
            "# compile, and that moe-run matches onnxruntime on fresh random inputs and the",
            "# torch module's saved outputs at 1, 7 and 64 tokens (--torch-reference): every",
            "# export of this design that onnxruntime gets right (examples/zoo/custom/README.md).",
            "",
        ]
        for entry, record in entries:
            p = entry.upper()
            today = record.get("moec_today", {})
            lines.append(f"# {entry}: {record['exporter']} opset {record['opset']}, {record['code']} code.")
            if today.get("rc"):
                lines.append(f"# moec bug: moec compile fails on this export, which onnxruntime gets right: "
                             f"{today.get('error')}")
            if record.get("moec_bug"):
                lines.append(f"# moec bug: {record['moec_bug']}")
            lines.append(f"# RUN: %python %moec_src/test/lib/e2e.py %moec_src/{record['file']} --workdir %t/{entry} "
                         f"--tokens 1,7,64 --max-tokens 64 --torch-reference %moec_src/{record['reference']} "
                         f"| FileCheck %s --check-prefix={p}")
            lines.append(f"# {p}: ok torch-tokens=64 output {{{{.*}}}} vs torch: max abs error")
            lines.append(f"# {p}: e2e: {entry}.onnx matches onnxruntime")
            lines.append("")
        path = E2E_DIR / f"custom-{name.replace('_', '-')}.test"
        path.write_text("\n".join(lines))
        print(f"wrote {path.relative_to(REPO_ROOT)} ({len(entries)} exports)")


def short_remark(today: dict) -> str:
    line = today.get("error") or today.get("first_remark") or ""
    # "moec: remark: FILE: node 'X' (Op): text" -> "node 'X' (Op): text"
    return re.sub(r"^moec: (remark|error): [^:]*\.onnx: ", lambda m: "error: " if m.group(1) == "error" else "",
                  line).replace("|", "\\|")


def print_table(results: dict):
    """The README's results table (markdown) from the manifest."""
    print("| export | exporter | opset | code | ort = torch (1, 7, 64, 2x5) | moec today | first remark (or error) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in DESIGNS:
        for entry, r in sorted(results.items()):
            if r.get("design") != name:
                continue
            if "refusal" in r:
                print(f"| `{entry}` | {r['exporter']} | {r['opset_requested']} | {r['code']} | refused | — | "
                      f"{r['refusal'][:160].replace('|', '/')} |")
                continue
            checks = r["ort_vs_torch"]
            def cell(c):
                return "ok" if c["ok"] else ("error" if "error" in c else f"{c['max_abs']:.2g}")

            ort_cell = "yes" if r["ort_matches_torch"] else "**no**: " + ", ".join(
                f"{k}: {cell(c)}" for k, c in checks.items())
            today = r.get("moec_today", {})
            if today.get("rc"):
                layers = "fails"
            else:
                n = today.get("moe_layers", 0)
                layers = f"{n} ({today['form']})" if n else "0"
            print(f"| `{entry}` | {r['exporter']} | {r['opset']} | {r['code']} | {ort_cell} | {layers} | "
                  f"{short_remark(today)} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="designs to export (default: all)")
    parser.add_argument("--moec-today", action="store_true", help="run moec on every export (no export)")
    parser.add_argument("--moec", default=str(REPO_ROOT / "build" / "bin" / "moec"))
    parser.add_argument("--write-tests", action="store_true", help="write test/E2E/custom-<design>.test")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--table", action="store_true", help="print the README's results table")
    args = parser.parse_args()
    if args.list:
        for name, cls in DESIGNS.items():
            print(f"{name}: {cls.__name__}: {cls.__doc__.splitlines()[0]}")
        return
    if not torch.__version__.startswith(TORCH_VERSION):
        sys.exit(f"export_custom: needs torch {TORCH_VERSION}, not {torch.__version__}")
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    results = manifest.setdefault("models", {})
    if args.table:
        print_table(results)
        return
    if args.moec_today:
        moec_today(results, Path(args.moec))
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        manifest["moec_today"] = {
            "command": "moec compile X.onnx -o plan.bin --max-tokens 64",
            "git_head": head,
            "binary_mtime": __import__("datetime").datetime.fromtimestamp(
                Path(args.moec).stat().st_mtime).isoformat(timespec="seconds")}
    elif not args.write_tests:
        for name in DESIGNS:
            if args.only and name not in args.only:
                continue
            for stale in [k for k, r in results.items() if r.get("design") == name]:
                del results[stale]
            for stale in OUT_DIR.glob(f"{name}_*"):
                stale.unlink()
            export_design(name, results)
    if args.write_tests:
        write_tests(results)
    manifest.update(version=1, generator="examples/zoo/custom/export_custom.py (see README.md)",
                    torch=torch.__version__.split("+")[0], onnx=onnx.__version__, onnxruntime=ort.__version__,
                    tokens=list(TOKENS), seed=SEED, tolerance=PARITY_TOLERANCE)
    manifest["models"] = dict(sorted(results.items()))
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
