"""Checks `moec inspect --json` output: the provenance digest against the
model file, the flags, the named dimensions and the step attributes."""
import hashlib
import json
import sys

plan = json.load(open(sys.argv[1]))
digest = hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest()
provenance = plan["provenance"]
print("digest", "ok" if provenance["model_sha256"] == digest else
      f"WRONG {provenance['model_sha256']} != {digest}")
print("flags", " ".join(f"{name}={value}" for name, value in provenance["flags"]))
schedule = plan["schedules"][0]
inputs = [t for t in schedule["tensors"] if t["input"]]
print("input dims", [(d["kind"], d.get("symbol")) for d in inputs[0]["dims"]])
router = next(s for s in schedule["steps"] if s["op"] == "Router")["attrs"]
print("Router top_k", router["top_k"], "normalize", router["normalize"],
      "score_function", router["score_function"])
experts = next(s for s in schedule["steps"] if s["op"] == "Experts")["attrs"]
print("Experts activation", experts["activation"])
print("steps without attrs print null:",
      any(s["attrs"] is None for s in schedule["steps"]))
