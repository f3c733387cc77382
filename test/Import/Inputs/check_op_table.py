"""Checks `moec ops --json` against ONNX's own operator schemas.

For every default-domain op moec imports and every opset moec accepts
(13..24), the op version moec selects must be the one onnx.defs says is in
effect at that opset, and moec must select none where ONNX defines no
version yet. A version missing from the table would import a node with the
handler of an older form; this is what catches it.

Each entry's inputs (what the importer checks every node against before
building anything) must be the schema's: names, order, and which are
optional or variadic. And the dialect op an entry becomes must require as
many operands as the ONNX op has required inputs, so that a node that
passes the check never hands op inference a missing operand.
"""

import json
import sys

import onnx.defs

MIN_OPSET, MAX_OPSET = 13, 24
# onnxruntime's ops registered in the default domain; onnx.defs has no
# schema for them.
NOT_ONNX = {"SimplifiedLayerNormalization"}

Option = onnx.defs.OpSchema.FormalParameterOption


def schema_inputs(schema):
    suffix = {Option.Single: "", Option.Optional: "?", Option.Variadic: "..."}
    return ", ".join(p.name + suffix[p.option] for p in schema.inputs)


def num_required(inputs):
    return sum(1 for name in inputs.split(", ")
               if name and not name.endswith(("?", "...")))


def main():
    with open(sys.argv[1]) as f:
        entries = json.load(f)
    versions = {}
    errors = []
    for e in entries:
        if e["domain"] == "ai.onnx":
            versions.setdefault(e["op_type"], []).append(e["since_version"])
        if e["target_min_operands"] >= 0 and e["domain"] == "ai.onnx" and \
                e["target_min_operands"] != num_required(e["inputs"]):
            errors.append(f"{e['op_type']}-{e['since_version']}: "
                          f"{e['target']} requires {e['target_min_operands']}"
                          f" operands, the inputs '{e['inputs']}' "
                          f"{num_required(e['inputs'])}")
        if e["domain"] != "ai.onnx" or e["op_type"] in NOT_ONNX:
            continue
        schema = onnx.defs.get_schema(e["op_type"], e["since_version"])
        if schema.since_version == e["since_version"] and \
                schema_inputs(schema) != e["inputs"]:
            errors.append(f"{e['op_type']}-{e['since_version']}: inputs "
                          f"'{e['inputs']}', ONNX has "
                          f"'{schema_inputs(schema)}'")
    for op, since in sorted(versions.items()):
        if op in NOT_ONNX:
            continue
        for opset in range(MIN_OPSET, MAX_OPSET + 1):
            ours = max((v for v in since if v <= opset), default=None)
            try:
                theirs = onnx.defs.get_schema(op, opset).since_version
            except onnx.defs.SchemaError:
                theirs = None
            if ours != theirs:
                errors.append(f"{op} at opset {opset}: moec imports version "
                              f"{ours}, ONNX defines version {theirs}")
    for e in errors:
        print(e)
    print(f"checked {len(versions)} ops, {len(errors)} mismatches")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
