#!/usr/bin/env python3
"""Exports the MoE benchmark models (bench/README.md) into bench/models/.

    .venv-export/bin/python bench/export_models.py                  # E=8 k=2 and E=64 k=4
    .venv-export/bin/python bench/export_models.py --configs 8x2 --kinds layer,contrib

For each configuration of E experts and top-k, with hidden 1024 and ffn 2816:

  mixtral_layer_e{E}k{k}.onnx   transformers' MixtralSparseMoeBlock exported
                                with TorchScript: the per-expert loop form
  contrib_moe_e{E}k{k}.onnx     onnxruntime's com.microsoft.MoE on the same
                                weights (the layer's router MatMul + MoE)
  mixtral_model_e{E}k{k}.onnx   a whole MixtralForCausalLM: 2 layers, 8 heads,
                                2 KV heads, vocabulary 1024, the same MoE sizes

The models are the zoo's builders (examples/zoo/zoo_mixtral.py: mixtral_block,
mixtral_contrib_moe, mixtral_tiny) with these sizes swapped into the zoo's size
tables, so they are the zoo's real exports at benchmark scale, not lookalikes.
A model whose weights pass 2 GB (the protobuf limit) keeps them as external
data in `<model>.onnx.data` beside it. The weights of E=8 are 277 MB per
layer, of E=64 2.2 GB per layer: several times a server's last-level cache.
"""

import argparse
import contextlib
import functools
import shutil
import sys
import tempfile
import time
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "zoo"))
import export_zoo as zoo  # noqa: E402
import zoo_mixtral  # noqa: E402

HIDDEN, FFN = 1024, 2816
VOCAB, LAYERS, HEADS, KV_HEADS = 1024, 2, 8, 2
PROTOBUF_LIMIT = 2 << 30
KINDS = {
    # kind -> (file prefix, zoo builder)
    "layer": ("mixtral_layer", zoo_mixtral.mixtral_block),
    "contrib": ("contrib_moe", zoo_mixtral.mixtral_contrib_moe),
    "whole": ("mixtral_model", zoo_mixtral.mixtral_tiny),
}


@contextlib.contextmanager
def zoo_sizes(experts: int, top_k: int):
    """Swaps the benchmark's sizes into the zoo's size tables."""
    saved = zoo_mixtral.MIXTRAL_BLOCK, zoo_mixtral.MIXTRAL_TINY
    zoo_mixtral.MIXTRAL_BLOCK = dict(hidden=HIDDEN, ffn=FFN, experts=experts,
                                     top_k=top_k)
    zoo_mixtral.MIXTRAL_TINY = dict(vocab=VOCAB, hidden=HIDDEN, ffn=FFN,
                                    experts=experts, top_k=top_k,
                                    layers=LAYERS, heads=HEADS,
                                    kv_heads=KV_HEADS)
    try:
        yield
    finally:
        zoo_mixtral.MIXTRAL_BLOCK, zoo_mixtral.MIXTRAL_TINY = saved


@contextlib.contextmanager
def external_data(location: str):
    """Makes the zoo's onnx.save keep the weights in one external file: its
    exporter loads and re-saves every model, which protobuf refuses past 2 GB.
    """
    save = onnx.save
    onnx.save = functools.partial(save, save_as_external_data=True,
                                  all_tensors_to_one_file=True,
                                  location=location, size_threshold=1024)
    try:
        yield
    finally:
        onnx.save = save


def weight_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def export(kind: str, experts: int, top_k: int, out_dir: Path) -> Path:
    prefix, builder = KINDS[kind]
    name = f"{prefix}_e{experts}k{top_k}"
    path = out_dir / f"{name}.onnx"
    with zoo_sizes(experts, top_k):
        model = builder()
    big = weight_bytes(model.module) >= PROTOBUF_LIMIT
    # Export in a scratch folder: past 2 GB, torch's exporter leaves a file
    # per tensor there before the re-save gathers them into one.
    with tempfile.TemporaryDirectory(dir=out_dir) as scratch:
        scratch_path = Path(scratch) / path.name
        location = path.name + ".data"
        with external_data(location) if big else contextlib.nullcontext():
            zoo.export_onnx(name, model, scratch_path)
        for stale in (path, out_dir / location):
            stale.unlink(missing_ok=True)
        shutil.move(str(scratch_path), path)
        if big:
            shutil.move(str(Path(scratch) / location), out_dir / location)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="8x2,64x4",
                        help="comma-separated EXPERTSxTOP_K (default 8x2,64x4)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated subset of {','.join(KINDS)}")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "models")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    for kind in kinds:
        if kind not in KINDS:
            parser.error(f"unknown kind {kind!r}; expected one of "
                         f"{', '.join(KINDS)}")
    configs = []
    for config in args.configs.split(","):
        try:
            experts, top_k = (int(v) for v in config.split("x"))
        except ValueError:
            parser.error(f"--configs: {config!r} is not EXPERTSxTOP_K")
        if not 1 <= top_k <= experts:
            parser.error(f"--configs: {config!r} needs 1 <= top_k <= experts")
        configs.append((experts, top_k))
    args.out.mkdir(parents=True, exist_ok=True)
    for experts, top_k in configs:
        for kind in kinds:
            start = time.perf_counter()
            path = export(kind, experts, top_k, args.out)
            print(f"{path.relative_to(ROOT)}: "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
