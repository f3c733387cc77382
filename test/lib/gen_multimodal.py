#!/usr/bin/env python3
"""Writes a tiny vision-language export folder, laid out as transformers
5.x's exporters leave Qwen3-VL-MoE (examples/zoo/vlm/), for the multimodal
plan tests without torch:

    gen_multimodal.py OUT_DIR [--no-merge-size] [--rows 3] [--grid-inputs]
    gen_multimodal.py OUT_DIR --tiled [--tiles N]

- image_encoder.onnx: `hidden_states` [p, 3] patches, `grid_thw` [1, 3]
  (unread, as in the export) -> `pooler_output` [p / 4, H] (each 2 x 2
  patches merged by a MatMul) and `deepstack_features.0` [p / 4, H];
- embed.onnx: `input_ids` [1, n] -> `output` [1, n, H];
- language_model.onnx: `position_ids` [4, 1, n], `inputs_embeds` [1, n, H],
  `visual_pos_masks` [1, n], `deepstack_visual_embeds.0` [m, H] ->
  `last_hidden_state` [1, n, H] (each token's vector plus a tenth of the
  running sum of those before and itself) and
  `cache.layers.0.keys` [1, 1, n, H] (those vectors);
- lm_head.onnx: [1, s, H] -> [1, s, V];
- decode.onnx: `input_ids` [1, 1], `position_ids` [4, 1, 1],
  `input.cache.layers.0.keys`, `mm_token_type_ids` [1, 1] -> `logits` and
  the present cache;
- config.json: image_token_id 13, spatial_merge_size 2, mrope_section.

With --grid-inputs the encoder also takes the inputs transformers'
exporter computes from the grid, as Qwen3-VL-MoE's does: `cu_seqlens` i32
[2], `position_ids` i64 [p, 2], `interp_indices` i64 [p, 4] and
`interp_weights` f32 [p, 4]; each patch's vector adds the weighted rows of a
4 x 4 position table at its taps, a linear map of its (h, w) and a hundredth
of the last segment bound. config.json then names the vision model
(`qwen3_vl_moe_vision`, num_position_embeddings 16), and
preprocessor_config.json is Qwen2-VL's image processor with 1 x 1 patches
and no temporal repeat (3 values a patch, as the encoder takes).

--tiled writes a folder laid out as examples/zoo/vlm/export_vlm.py leaves
Llama 4 instead: no grid, no M-RoPE, a projector as a second vision graph:

- image_encoder.onnx: `pixel_values` [1, p, 3] -> `last_hidden_state`
  [1, p / 4, W] (W = 5: not the language model's width);
- multi_modal_projector.onnx: `image_features` [m, W] -> `output` [m, H]
  (the model flattens the encoder's output between the two graphs);
- language_model.onnx: `position_ids` [1, n] (the tokens' indices),
  `inputs_embeds` -> `logits` [1, n, V] (no separate head) and the cache;
- decode.onnx: `input_ids`, `position_ids` [1, 1] and the cache;
- config.json: image_token_index 13 and no M-RoPE fields.

--tiled --tiles N takes Llama 4's image tiles instead: image_encoder.onnx
`pixel_values` [N, 3, 2, 2] (N static, as the export's one tile) ->
`last_hidden_state` [N, 1, W] (one image token a tile), and
preprocessor_config.json is Llama 4's processor of 2 x 2 tiles, at most 4.

A token's vector is its embedding plus the sine of a linear map of its
position rows plus the sum of the deepstack rows at image tokens (plus a term of its
token type in the decode), so that the generated ids depend on the merge,
every position row and each feed. The weights are seeded random.
"""

import argparse
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

H, V, PATCH, IMAGE_TOKEN, MERGE = 4, 16, 3, 13, 2
OPSET = 20


def weights(shape, seed, scale=0.5):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


EMBED = weights([V, H], 1)
HEAD = weights([H, V], 2)
POS = weights([4, H], 3, 1.0)
VISION = weights([PATCH, H], 4)
MERGER = weights([4 * H, H], 5)


def init(name, array):
    return helper.make_tensor(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape,
                              array.flatten().tolist())


def value(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def save(nodes, inputs, outputs, inits, path):
    graph = helper.make_graph(nodes, os.path.basename(path), inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, path)


def position_term(rows, n, prefix):
    """Nodes for Cast(position_ids) [rows, 1, n] -> [1, n, H]: the sine of
    a linear map of the rows, so that every row moves the logits."""
    return [
        helper.make_node("Cast", ["position_ids"], [prefix + "posf"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", [prefix + "posf"], [prefix + "post"], perm=[1, 2, 0]),
        helper.make_node("MatMul", [prefix + "post", "pos_w"], [prefix + "posl"]),
        helper.make_node("Sin", [prefix + "posl"], [prefix + "pos"]),
    ]


def write_embed(out):
    """embed.onnx: the token embedding."""
    save([helper.make_node("Gather", ["embed_w", "input_ids"], ["output"])],
         [value("input_ids", TensorProto.INT64, [1, "s70"])],
         [value("output", TensorProto.FLOAT, [1, "s70", H])],
         [init("embed_w", EMBED)], os.path.join(out, "embed.onnx"))


def prompt_tail(hidden):
    """The language model's nodes from the tokens' vectors `h` on: the
    cache, and each vector plus a tenth of the running sum as `hidden`."""
    return [
        helper.make_node("Unsqueeze", ["h", "axis1"], ["cache.layers.0.keys"]),
        helper.make_node("CumSum", ["h", "axis1s"], ["sum"]),
        helper.make_node("Mul", ["sum", "tenth"], ["sum10"]),
        helper.make_node("Add", ["sum10", "h"], [hidden]),
    ]


def decode_tail():
    """The decode's nodes from the new token's vector `h` on: appended to
    the cache, a tenth of the cache's sum added, the head."""
    return [
        helper.make_node("Unsqueeze", ["h", "axis1"], ["new"]),
        helper.make_node("Concat", ["input.cache.layers.0.keys", "new"], ["output.cache.layers.0.keys"], axis=2),
        helper.make_node("ReduceSum", ["output.cache.layers.0.keys", "axis2"], ["sum"], keepdims=0),
        helper.make_node("Mul", ["sum", "tenth"], ["sum10"]),
        helper.make_node("Add", ["sum10", "h"], ["last"]),
        helper.make_node("MatMul", ["last", "head_w"], ["logits"]),
    ]


def decode_outputs(pos_w):
    """The decode's outputs (logits, the present cache) and initializers."""
    return ([value("logits", TensorProto.FLOAT, [1, 1, V]),
             value("output.cache.layers.0.keys", TensorProto.FLOAT, [1, 1, "s53 + 1", H])],
            [init("pos_w", pos_w), init("embed_w", EMBED), init("head_w", HEAD),
             init("tenth", np.array(0.1, np.float32)),
             init("axis1", np.array([1], np.int64)), init("axis2", np.array([2], np.int64))])


TABLE = weights([16, H], 6, 1.0)
PATCH_POS = weights([2, H], 7, 0.3)


def write_encoder(out, grid_inputs):
    """The vision encoder: patches -> features, 2 x 2 patches merged."""
    nodes = [helper.make_node("MatMul", ["hidden_states", "vision_w"], ["x"])]
    inputs = [value("hidden_states", TensorProto.FLOAT, ["s11", PATCH]),
              value("grid_thw", TensorProto.INT64, [1, 3])]
    inits = [init("vision_w", VISION), init("merger_w", MERGER),
             init("merge_shape", np.array([-1, 4 * H], np.int64))]
    x = "x"
    if grid_inputs:
        inputs += [value("cu_seqlens", TensorProto.INT32, [2]),
                   value("position_ids", TensorProto.INT64, ["s11", 2]),
                   value("interp_indices", TensorProto.INT64, ["s11", 4]),
                   value("interp_weights", TensorProto.FLOAT, ["s11", 4])]
        inits += [init("table", TABLE), init("patch_pos", PATCH_POS),
                  init("axis1", np.array([1], np.int64)), init("axis2", np.array([2], np.int64)),
                  init("hundredth", np.array(0.01, np.float32))]
        nodes += [
            helper.make_node("Gather", ["table", "interp_indices"], ["taps"]),
            helper.make_node("Unsqueeze", ["interp_weights", "axis2"], ["w3"]),
            helper.make_node("Mul", ["taps", "w3"], ["weighted"]),
            helper.make_node("ReduceSum", ["weighted", "axis1"], ["interp"], keepdims=0),
            helper.make_node("Cast", ["position_ids"], ["posf"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["posf", "patch_pos"], ["pos"]),
            helper.make_node("Cast", ["cu_seqlens"], ["cuf"], to=TensorProto.FLOAT),
            helper.make_node("ReduceMax", ["cuf"], ["cumax"], keepdims=0),
            helper.make_node("Mul", ["cumax", "hundredth"], ["cuterm"]),
            helper.make_node("Add", ["x", "interp"], ["x1"]),
            helper.make_node("Add", ["x1", "pos"], ["x2"]),
            helper.make_node("Add", ["x2", "cuterm"], ["x3"])]
        x = "x3"
    nodes += [helper.make_node("Reshape", [x, "merge_shape"], ["xm"]),
              helper.make_node("MatMul", ["xm", "merger_w"], ["pooler_output"]),
              helper.make_node("Tanh", ["pooler_output"], ["deepstack_features.0"])]
    save(nodes, inputs,
         [value("pooler_output", TensorProto.FLOAT, ["m", H]),
          value("deepstack_features.0", TensorProto.FLOAT, ["m", H])],
         inits, os.path.join(out, "image_encoder.onnx"))


def write(out, rows, grid_inputs=False):
    os.makedirs(out, exist_ok=True)
    pos_w = POS[:rows]
    write_encoder(out, grid_inputs)
    write_embed(out)
    # The language model over the prompt.
    save(position_term(rows, "s10", "") + [
        helper.make_node("Cast", ["visual_pos_masks"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axis2"], ["mask3"]),
        helper.make_node("ReduceSum", ["deepstack_visual_embeds.0", "axis0"], ["deep"], keepdims=1),
        helper.make_node("Mul", ["mask3", "deep"], ["deepterm"]),
        helper.make_node("Add", ["inputs_embeds", "pos"], ["h0"]),
        helper.make_node("Add", ["h0", "deepterm"], ["h"]),
        *prompt_tail("last_hidden_state")],
        [value("position_ids", TensorProto.INT64, [rows, 1, "s10"]),
         value("inputs_embeds", TensorProto.FLOAT, [1, "s10", H]),
         value("visual_pos_masks", TensorProto.BOOL, [1, "s10"]),
         value("deepstack_visual_embeds.0", TensorProto.FLOAT, ["s1", H])],
        [value("last_hidden_state", TensorProto.FLOAT, [1, "s10", H]),
         value("cache.layers.0.keys", TensorProto.FLOAT, [1, 1, "s10", H])],
        [init("pos_w", pos_w), init("axis0", np.array([0], np.int64)), init("axis1s", np.array(1, np.int64)),
         init("tenth", np.array(0.1, np.float32)),
         init("axis1", np.array([1], np.int64)), init("axis2", np.array([2], np.int64))],
        os.path.join(out, "language_model.onnx"))
    save([helper.make_node("MatMul", ["input", "head_w"], ["output"])],
         [value("input", TensorProto.FLOAT, [1, "s81", H])],
         [value("output", TensorProto.FLOAT, [1, "s81", V])],
         [init("head_w", HEAD)], os.path.join(out, "lm_head.onnx"))
    # The decode step: the new token's vector appended to the cache.
    save(position_term(rows, 1, "") + [
        helper.make_node("Gather", ["embed_w", "input_ids"], ["e"]),
        helper.make_node("Cast", ["mm_token_type_ids"], ["typef"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["typef", "axis2"], ["type3"]),
        helper.make_node("Add", ["e", "pos"], ["h0"]),
        helper.make_node("Add", ["h0", "type3"], ["h"]),
        *decode_tail()],
        [value("input_ids", TensorProto.INT64, [1, 1]),
         value("position_ids", TensorProto.INT64, [rows, 1, 1]),
         value("input.cache.layers.0.keys", TensorProto.FLOAT, [1, 1, "s53", H]),
         value("mm_token_type_ids", TensorProto.INT64, [1, 1])],
        *decode_outputs(pos_w), os.path.join(out, "decode.onnx"))


TILED_W = 5
TILE = 2
TILED_MERGER = weights([4 * H, TILED_W], 6)
PROJECTOR = weights([TILED_W, H], 7)


def index_term(n, prefix):
    """Nodes for position_ids [1, n] -> [1, n, H]: the sine of a linear map
    of each token's index."""
    return [
        helper.make_node("Cast", ["position_ids"], [prefix + "posf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", [prefix + "posf", "axis2"], [prefix + "post"]),
        helper.make_node("MatMul", [prefix + "post", "pos_w"], [prefix + "posl"]),
        helper.make_node("Sin", [prefix + "posl"], [prefix + "pos"]),
    ]


def write_tile_encoder(out, tiles):
    """--tiles N: an encoder of N image tiles of 2 x 2 pixels, f32 [N, 3,
    2, 2] -> [N, 1, W] (each tile's 4 pixels mapped, then merged into one
    token), and Llama 4's image processor of such tiles."""
    save([helper.make_node("Reshape", ["pixel_values", "pixel_shape"], ["px"]),
          helper.make_node("Transpose", ["px"], ["pt"], perm=[0, 2, 1]),
          helper.make_node("MatMul", ["pt", "vision_w"], ["x"]),
          helper.make_node("Reshape", ["x", "merge_shape"], ["xm"]),
          helper.make_node("MatMul", ["xm", "merger_w"], ["last_hidden_state"])],
         [value("pixel_values", TensorProto.FLOAT, [tiles, 3, TILE, TILE])],
         [value("last_hidden_state", TensorProto.FLOAT, [tiles, 1, TILED_W])],
         [init("vision_w", VISION), init("merger_w", TILED_MERGER),
          init("pixel_shape", np.array([tiles, 3, TILE * TILE], np.int64)),
          init("merge_shape", np.array([tiles, 1, 4 * H], np.int64))],
         os.path.join(out, "image_encoder.onnx"))
    processor = {"image_processor_type": "Llama4ImageProcessor", "size": {"height": TILE, "width": TILE},
                 "max_patches": 4, "resize_to_max_canvas": False, "resample": 2, "do_resize": True,
                 "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                 "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True}
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump(processor, f, indent=1)


def write_tiled(out, tiles=0):
    """The --tiled folder (the module docstring); with `tiles`, the tile
    encoder and processor of --tiles."""
    os.makedirs(out, exist_ok=True)
    pos_w = POS[:1]
    if tiles:
        write_tile_encoder(out, tiles)
    else:
        save([helper.make_node("MatMul", ["pixel_values", "vision_w"], ["x"]),
              helper.make_node("Reshape", ["x", "merge_shape"], ["xm"]),
              helper.make_node("MatMul", ["xm", "merger_w"], ["last_hidden_state"])],
             [value("pixel_values", TensorProto.FLOAT, [1, "p", PATCH])],
             [value("last_hidden_state", TensorProto.FLOAT, [1, "m", TILED_W])],
             [init("vision_w", VISION), init("merger_w", TILED_MERGER),
              init("merge_shape", np.array([1, -1, 4 * H], np.int64))],
             os.path.join(out, "image_encoder.onnx"))
    save([helper.make_node("MatMul", ["image_features", "proj_w"], ["y"]),
          helper.make_node("Tanh", ["y"], ["output"])],
         [value("image_features", TensorProto.FLOAT, ["s28", TILED_W])],
         [value("output", TensorProto.FLOAT, ["s28", H])],
         [init("proj_w", PROJECTOR)], os.path.join(out, "multi_modal_projector.onnx"))
    write_embed(out)
    save(index_term("s29", "") + [
        helper.make_node("Add", ["inputs_embeds", "pos"], ["h"]),
        *prompt_tail("last"),
        helper.make_node("MatMul", ["last", "head_w"], ["logits"])],
        [value("position_ids", TensorProto.INT64, [1, "s29"]),
         value("inputs_embeds", TensorProto.FLOAT, [1, "s29", H])],
        [value("logits", TensorProto.FLOAT, [1, "s29", V]),
         value("cache.layers.0.keys", TensorProto.FLOAT, [1, 1, "s29", H])],
        [init("pos_w", pos_w), init("head_w", HEAD), init("axis1s", np.array(1, np.int64)),
         init("tenth", np.array(0.1, np.float32)),
         init("axis1", np.array([1], np.int64)), init("axis2", np.array([2], np.int64))],
        os.path.join(out, "language_model.onnx"))
    save(index_term(1, "") + [
        helper.make_node("Gather", ["embed_w", "input_ids"], ["e"]),
        helper.make_node("Add", ["e", "pos"], ["h"]),
        *decode_tail()],
        [value("input_ids", TensorProto.INT64, [1, 1]),
         value("position_ids", TensorProto.INT64, [1, 1]),
         value("input.cache.layers.0.keys", TensorProto.FLOAT, [1, 1, "s53", H])],
        *decode_outputs(pos_w), os.path.join(out, "decode.onnx"))
    config = {"image_token_index": IMAGE_TOKEN, "vision_config": {"pixel_shuffle_ratio": 0.5},
              "text_config": {"rope_parameters": {"rope_type": "default"}}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--rows", type=int, default=4, help="position rows (3: t, h, w; 4: text first)")
    parser.add_argument("--no-merge-size", action="store_true", help="leave spatial_merge_size out of config.json")
    parser.add_argument("--tiled", action="store_true", help="a Llama 4-style folder (see above)")
    parser.add_argument("--tiles", type=int, default=0,
                        help="with --tiled: an encoder of this many 2 x 2 tiles and Llama 4's processor")
    parser.add_argument("--grid-inputs", action="store_true",
                        help="an encoder of the grid rule's inputs, and an image processor")
    args = parser.parse_args()
    if args.tiled:
        write_tiled(args.out, args.tiles)
        return
    write(args.out, args.rows, args.grid_inputs)
    vision = {"spatial_merge_size": MERGE}
    if args.no_merge_size:
        vision = {}
    if args.grid_inputs:
        vision.update(model_type="qwen3_vl_moe_vision", num_position_embeddings=16)
        processor = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 1,
                     "temporal_patch_size": 1, "merge_size": MERGE, "do_resize": True,
                     "size": {"shortest_edge": 4, "longest_edge": 64}, "resample": 3,
                     "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                     "image_mean": [0.48145466, 0.4578275, 0.40821073],
                     "image_std": [0.26862954, 0.26130258, 0.27577711], "do_convert_rgb": True}
        with open(os.path.join(args.out, "preprocessor_config.json"), "w") as f:
            json.dump(processor, f, indent=1)
    config = {"image_token_id": IMAGE_TOKEN, "vision_config": vision,
              "text_config": {"rope_parameters": {"mrope_section": [1, 1, 0]}}}
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    main()
