#!/usr/bin/env python3
"""Runs moec on every export of the v5-day0 track and prints the README table.

For each model of examples/zoo/v5/manifest.json that exported: `moec compile
--report` (MoE layers detected), then test/lib/e2e.py at 1, 7 and 64 tokens
against onnxruntime on fresh random inputs and, with the model's .npz,
against torch's saved outputs. Needs no torch; run from the repository root
with the project's venv and a build:

    .venv/bin/python examples/zoo/check_zoo_v5.py [--build build] [NAME...]

Writes examples/zoo/v5/moec-results.json and prints a Markdown table.
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
V5 = ROOT / "examples" / "zoo" / "v5"


def first_error(text):
    for line in text.splitlines():
        if "error:" in line or line.startswith("e2e:") or "MISMATCH" in line:
            return line.strip()[:300]
    return text.strip().splitlines()[-1][:300] if text.strip() else ""


def check(name, entry, build, max_tokens):
    moec = str(build / "bin" / "moec")
    model = ROOT / entry["file"]
    work = Path(f"/tmp/moec-zoo-v5/{name}")
    work.mkdir(parents=True, exist_ok=True)
    result = {"compiles": False, "matches": None, "moe_layers": None}
    compiled = subprocess.run([moec, "compile", str(model), "-o", str(work / "plan.bin"),
                               f"--max-tokens={max_tokens}", "--report", str(work / "report.json")],
                              capture_output=True, text=True)
    remarks = [l for l in compiled.stderr.splitlines() if "bounded by" in l and "value ranges" in l]
    result["value_range_bounds"] = len(remarks)
    if compiled.returncode != 0:
        result["error"] = first_error(compiled.stderr)
        return result
    result["compiles"] = True
    layers = json.loads((work / "report.json").read_text())["moe_layers"]
    result["moe_layers"] = len(layers)
    result["layers"] = [f"{l['experts']}e top{l['top_k']} {l['activation']}" for l in layers]
    cmd = [sys.executable, str(ROOT / "test/lib/e2e.py"), str(model), "--workdir", str(work / "e2e"),
           "--tokens", f"1,7,{max_tokens}", f"--max-tokens={max_tokens}", "--moec", moec,
           "--moe-run", str(build / "bin" / "moe-run")]
    if entry.get("reference"):
        cmd += ["--torch-reference", str(ROOT / entry["reference"])]
    if all(isinstance(d, int) for d in entry["inputs"][0]["shape"]):
        # A decode step routes its one static token whatever --tokens sets
        # (the KV cache length): --stats' count check assumes --tokens.
        cmd.append("--no-check-stats")
    run = subprocess.run(cmd, capture_output=True, text=True)
    result["matches"] = run.returncode == 0
    result["torch_compared"] = bool(entry.get("reference"))
    if run.returncode != 0:
        result["error"] = first_error(run.stdout + run.stderr)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    manifest = json.loads((V5 / "manifest.json").read_text())["models"]
    out = V5 / "moec-results.json"
    results = json.loads(out.read_text()) if out.exists() else {}
    for name, entry in manifest.items():
        if args.names and name not in args.names or "file" not in entry:
            continue
        results[name] = check(name, entry, Path(args.build), args.max_tokens)
        print(name, json.dumps(results[name]), flush=True)
        out.write_text(json.dumps(dict(sorted(results.items())), indent=1) + "\n")
    print(table(manifest, results))


def clean(text, limit=140):
    """One line of an error for the table: no colours, no paths."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    text = re.sub(r"(?:moec: error: )?\S*/examples/zoo/v5/\S*: (?:error: )?",
                  "", text)
    text = text.split(" | ")[-1]  # the cause, after the exporter's generic message
    text = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", text)
    return text.replace("|", "/")[:limit]


def table(manifest, results):
    """The README's table: one row per export attempt."""
    rows = ["| export | exporter | experts | ort = torch | compiles | matches ort, torch | MoE layers "
            "| value-range bounds | note |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, entry in manifest.items():
        failed = entry.get("failed_first", []) + entry.get("export_failed", [])
        for attempt in failed:
            base = name.removesuffix("_batched_mm") if "file" in entry else name
            rows.append(f"| `{base}` | {entry['exporter']} | {attempt.get('experts_implementation', '—')} "
                        f"| export fails | — | — | — | — | {clean(attempt['error'])} |")
        if "file" not in entry:
            continue
        r = results.get(name, {})
        ort_ok = entry.get("ort_matches_torch")
        note = clean(r.get("error", ""))
        if ort_ok is False:
            bad = [t for t, c in entry["ort_vs_torch"].items() if not c["ok"]]
            note = f"exporter wrong at {', '.join(bad)} token(s); " + note
        matches = "—" if r.get("matches") is None else ("yes" if r["matches"] else "**no**")
        if r.get("matches") and not r.get("torch_compared"):
            matches = "yes (ort only)"
        rows.append(f"| `{name}` | {entry['exporter']} | {entry.get('experts_implementation', '—')} | "
                    f"{'—' if ort_ok is None else ('yes' if ort_ok else '**no**')} | "
                    f"{'yes' if r.get('compiles') else '**no**'} | {matches} | "
                    f"{r.get('moe_layers', '—') if r.get('compiles') else '—'} | "
                    f"{r.get('value_range_bounds', 0) if r.get('compiles') else '—'} | {note} |")
    return "\n".join(rows)

if __name__ == "__main__":
    main()
