#!/usr/bin/env python3
"""Checks that every plan step an op declares in ODS (Moe_PlanStep<"Kind">,
whose generated class holds `kPlanStepKind{"Kind"}`) is an OpKind of the
plan schema, so that a kind missing from runtime/format/plan.fbs fails here
rather than when a model first reaches the emitter. Prints the counts."""
import pathlib, re, sys

generated, schema = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
declared = {}
for inc in sorted(generated.glob("*.h.inc")):
    text = inc.read_text()
    # The op class each kind belongs to, for the message.
    for m in re.finditer(r'class (\w+) : public ::mlir::Op<\1\b(.*?)\n};',
                         text, re.S):
        for kind in re.findall(r'kPlanStepKind\{"(\w+)"\}', m.group(2)):
            declared.setdefault(kind, []).append(m.group(1))
enum = re.search(r"enum OpKind\s*:\s*\w+\s*\{(.*?)\}", schema.read_text(),
                 re.S)
if not enum:
    sys.exit(f"{schema}: no `enum OpKind`")
body = re.sub(r"//[^\n]*", "", enum.group(1))
kinds = {k.split("=")[0].strip() for k in body.split(",") if k.strip()}
missing = sorted(k for k in declared if k not in kinds)
for kind in missing:
    print(f"error: {', '.join(declared[kind])} declares the plan step "
          f"'{kind}', which {schema.name} does not have")
print(f"{sum(map(len, declared.values()))} ops declare "
      f"{len(declared)} plan step kinds; the schema has {len(kinds) - 1}")
sys.exit(1 if missing or not declared else 0)
