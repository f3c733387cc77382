"""Checks `moec ops --json` against ONNX's own operator schemas.

For every default-domain op moec imports and every opset moec accepts
(13..21), the op version moec selects must be the one onnx.defs says is in
effect at that opset, and moec must select none where ONNX defines no
version yet. A version missing from the table would import a node with the
handler of an older form; this is what catches it.
"""

import json
import sys

import onnx.defs

MIN_OPSET, MAX_OPSET = 13, 21
# onnxruntime's ops registered in the default domain; onnx.defs has no
# schema for them.
NOT_ONNX = {"SimplifiedLayerNormalization"}


def main():
    with open(sys.argv[1]) as f:
        entries = json.load(f)
    versions = {}
    for e in entries:
        if e["domain"] == "ai.onnx":
            versions.setdefault(e["op_type"], []).append(e["since_version"])
    errors = []
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
