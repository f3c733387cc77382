#!/usr/bin/env python3
"""Fails when a runtime layer includes a layer above it (or a sibling), or an
installed API header includes anything but the API: the leaks the linker
cannot see. The order is runtime/CMakeLists.txt's; ctest runs this check."""
import pathlib, re, sys

RANK = {"format": 0, "loader": 1, "exec": 2, "kernels": 3, "tiers": 3,
        "multidevice": 3, "generate": 4, "observe": 5, "api": 6,
        "backends": 7}
# Known edges up the order, each to go (runtime/README.md).
ALLOWED = {
    # The loader checks every step with its op's validator (the registry
    # the kernel files fill).
    ("src/loader/schedule_validation.cpp", "exec/ops.h"),
    # Sessions own a tiered plan's expert store.
    ("src/exec/session_state.h", "tiers/expert_store.h"),
}
runtime = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                       pathlib.Path(__file__).resolve().parent.parent / "runtime")
errors = []
for path in sorted(runtime.glob("*/**/*")):
    rel = path.relative_to(runtime).as_posix()
    parts = rel.split("/")
    if path.suffix not in (".h", ".cpp", ".cu") or parts[0] not in (
            "format", "src", "include"):
        continue
    layer = parts[0] if parts[0] != "src" else parts[1]
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m or (rel, m.group(1)) in ALLOWED:
            continue
        target = m.group(1).split("/")[0]
        if target in ("src", "..", "."):
            errors.append(f"runtime/{rel}:{n}: includes {m.group(1)}; spell "
                          "includes from a root (\"exec/tensor.h\")")
            continue
        if layer == "include":
            bad = target not in ("moert", "absl")
        else:
            bad = target in RANK and target != layer and (
                RANK[target] >= RANK[layer])
        if bad:
            errors.append(f"runtime/{rel}:{n}: {layer}/ includes "
                          f"{m.group(1)}, a layer not below it")
print("\n".join(errors) or "runtime includes: every layer includes only "
      "the layers below it")
sys.exit(1 if errors else 0)
