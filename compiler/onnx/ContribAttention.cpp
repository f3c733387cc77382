//===- ContribAttention.cpp - onnxruntime's attention and norm imports ----===//
//
// The com.microsoft ops that onnxruntime-genai's model builder writes around
// the MoE layers of every export, expressed in ops the passes already
// understand:
//
//  * SkipSimplifiedLayerNormalization becomes the residual Add and
//    `moe.simplified_layer_normalization` (which moe-fuse-norms fuses).
//  * GroupQueryAttention becomes head reshapes, rotary embedding by graph
//    ops, the present caches as `Concat(past, new)` along the positions
//    (what the generation plan's cache pairs are, so the runtime writes them
//    in place), a mask built from the positions, and one `moe.attention`.
//
// The semantics followed are onnxruntime's CPU kernel's (its contrib op
// schema, checked against onnxruntime 1.32 by test/E2E/genai-*.test):
//
//  * The past holds exactly the valid positions: the new keys follow it.
//    This is onnxruntime's layout when past and present do not share one
//    buffer and rows are not padded, and the layout moec's generator runs.
//    The position of new token i of row b is seqlens_k[b] + 1 - S + i (0 +
//    i when the call is the first prompt, S == total_sequence_length), or
//    position_ids[b, i] when given. A mismatch between seqlens_k and the
//    past's length changes positions, never the shapes.
//  * Query i of row b sees key j if j <= pos and, with local_window_size W
//    > 0, j > pos - W (a window of W keys, its own included); with causal 0,
//    if j <= seqlens_k[b]. Masked scores are -inf.
//  * Scores are scale * q.k (scale 0: 1 / sqrt(head_size)), soft-capped when
//    softcap > 0, then masked and attention_bias added; head_sink (or zero
//    with smooth_softmax 1) is one more logit per head in the softmax.
//  * Rotary (do_rotary 1) rotates the first 2 * cos_cache.dim(1) features of
//    each query and key head, in halves or interleaved pairs, before the
//    keys are cached; q_norm_weight and k_norm_weight RMS-normalise each head
//    first (epsilon qk_norm_epsilon).
//
//  * sliding_window_cache 1 (the builder's default for sliding layers): the
//    past and present hold the C positions before and up to the step's last
//    (C the past's static size, else the window W), a fixed-size state; the
//    keys are Concat(past, new), at positions pastLength - C + j, those
//    below 0 masked, and the present is their last C.
//
// A quantized KV cache and qk_output are refused with an error naming the
// attribute.
//
// A generation compile imports the graph twice (ImportOptions, Import.h):
// as the decode step, with the positions read from a `position_ids` input
// that the generator fills with past length + i (what seqlens_k gives under
// its all-ones attention mask), and as the first prompt, whose past is
// empty and whose mask is causal over the rows. The second is the plan's
// prefill schedule, which continuous batching runs (docs/serving.md).
//
//  * RotaryEmbedding (the builder's separate rotary, e.g. Gemma-4's partial
//    rotary) rotates each head of a [B, S, heads * D] or [B, heads, S, D]
//    input like GroupQueryAttention's do_rotary, at position_ids [B, S] (or
//    position_ids[0] + s for a [1] offset). Without rotary_embedding_dim the
//    head size is 2 * cos_cache.dim(1) (onnxruntime's CPU kernel); with it,
//    num_heads gives the heads and the features past the rotary dimension
//    pass unchanged. scale other than 1 and is_packed_batching 1 are
//    refused.
//  * MRotaryEmbedding (M-RoPE: Qwen2/2.5/3-VL, Qwen3.5) rotates the same
//    way at position_ids [3, B, S], the temporal, height and width streams:
//    frequency i of the half rotary dimension takes its cos/sin row from
//    one stream, chosen by mrope_section (3 sizes adding up to
//    cos_cache.dim(1)) in contiguous sections (mrope_layout 0) or
//    interleaved (1: T, but H at i % 3 == 1 below 3 * section[1] and W at
//    i % 3 == 2 below 3 * section[2]), as onnxruntime's op schema states.
//    mrope_layout 2 (blocked) is refused.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/GraphImporter.h"
#include "compiler/onnx/Model.h"
#include "compiler/onnx/OpEmitter.h"
#include "compiler/onnx/OpImport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace moec;
using namespace moec::onnx_import;

namespace {

//===----------------------------------------------------------------------===//
// SkipSimplifiedLayerNormalization
//===----------------------------------------------------------------------===//

LogicalResult importSkipSimplifiedLayerNorm(NodeImporter &node) {
  // Outputs: output, mean (never computed by onnxruntime's simplified
  // kernel), inv_std_var, input_skip_bias_sum.
  if (node.getNumOutputs() > 1 && !node.getNode().output(1).empty())
    return node.emitError() << "output 1 ('mean') is not produced by "
                               "SkipSimplifiedLayerNormalization";
  float epsilon = 1e-5f;
  for (const NamedAttribute &attr : node.getAttributes()) {
    if (attr.getName() != "epsilon")
      return node.emitAttributeError(attr.getName().getValue())
             << "is not an attribute of SkipSimplifiedLayerNormalization";
    epsilon = cast<FloatAttr>(attr.getValue()).getValueAsDouble();
  }
  SmallVectorImpl<Value> &operands = node.getOperands();
  OpBuilder &builder = node.getBuilder();
  OpEmitter ops(builder, node.getLoc());
  Value sum = ops.binary("moe.add", operands[0], operands[1]);
  if (operands.size() > 3 && operands[3])
    sum = ops.binary("moe.add", sum, operands[3]);
  SmallVector<Value> norm =
      ops.emitAll("moe.simplified_layer_normalization", {sum, operands[2]},
                  {ops.i64Attr("axis", -1),
                   ops.attr("epsilon", builder.getF32FloatAttr(epsilon))});
  if (ops.failed())
    return failure();
  return node.setResults({norm[0], norm[0], norm[1], sum});
}

//===----------------------------------------------------------------------===//
// GroupQueryAttention
//===----------------------------------------------------------------------===//

/// GroupQueryAttention's inputs in ONNX order.
enum GqaInput : unsigned {
  kQuery,
  kKey,
  kValue,
  kPastKey,
  kPastValue,
  kSeqlensK,
  kTotalSequenceLength,
  kCosCache,
  kSinCache,
  kPositionIds,
  kAttentionBias,
  kHeadSink,
  kKScale,
  kVScale,
  kQNormWeight,
  kKNormWeight,
};

struct GqaAttributes {
  int64_t numHeads = 0;
  int64_t kvNumHeads = 0;
  float scale = 0.0f;
  float softcap = 0.0f;
  int64_t localWindowSize = -1;
  bool doRotary = false;
  bool rotaryInterleaved = false;
  bool smoothSoftmax = false;
  bool causal = true;
  float qkNormEpsilon = 1e-6f;
  /// The past holds the window's last positions only (a fixed-size state).
  bool windowCache = false;
};

class GqaImporter {
public:
  explicit GqaImporter(NodeImporter &node)
      : node(node), builder(node.getBuilder()), ops(builder, node.getLoc()),
        generation(node.getGraphImporter().getOptions()) {}

  LogicalResult import();

private:
  Value operand(unsigned input) const {
    SmallVectorImpl<Value> &operands = node.getOperands();
    return input < operands.size() ? operands[input] : Value();
  }
  LogicalResult readAttributes();
  LogicalResult checkInputs();
  /// `x` [B, S, heads * D] as [B, heads, S, D].
  Value splitHeads(Value x, int64_t heads);
  /// RMS-normalises each head of `x` [B, h, S, D] by `weight` [D].
  Value normalizeHeads(Value x, Value weight);
  /// Rotates `x` [B, h, S, D] by `cos`, `sin` [B, 1, S, R/2].
  Value rotate(Value x, Value cos, Value sin);
  /// With do_rotary: rotates `q` and `k` at `positions` [B, S].
  void rotateAt(Value &q, Value &k, Value positions);
  /// ImportOptions::firstPrompt: `q`, `k`, `v` [B, h, S, D] before rotary,
  /// at `positions` [B, S]; `steps` is [1, S] = 0 .. S-1.
  LogicalResult importFirstPrompt(Value q, Value k, Value v, Value positions,
                                  Value steps);
  /// The attention over `keys` and `values` under `mask`, and the node's
  /// results.
  LogicalResult finish(Value q, Value keys, Value values, Value mask,
                       Value presentKey, Value presentValue);

  NodeImporter &node;
  OpBuilder &builder;
  OpEmitter ops;
  const ImportOptions &generation;
  GqaAttributes attrs;
  int64_t headSize = 0;
  int64_t rotaryHalf = 0;
  /// With sliding_window_cache: the positions the past and present hold.
  int64_t windowCapacity = 0;
};

LogicalResult GqaImporter::readAttributes() {
  for (const NamedAttribute &attr : node.getAttributes()) {
    StringRef name = attr.getName().getValue();
    Attribute value = attr.getValue();
    auto asInt = [&] { return cast<IntegerAttr>(value).getInt(); };
    auto asFloat = [&] {
      return float(cast<FloatAttr>(value).getValueAsDouble());
    };
    auto isInt = isa<IntegerAttr>(value), isFloat = isa<FloatAttr>(value);
    if (name == "num_heads" && isInt)
      attrs.numHeads = asInt();
    else if (name == "kv_num_heads" && isInt)
      attrs.kvNumHeads = asInt();
    else if (name == "scale" && isFloat)
      attrs.scale = asFloat();
    else if (name == "softcap" && isFloat)
      attrs.softcap = asFloat();
    else if (name == "local_window_size" && isInt)
      attrs.localWindowSize = asInt();
    else if (name == "do_rotary" && isInt)
      attrs.doRotary = asInt() != 0;
    else if (name == "rotary_interleaved" && isInt)
      attrs.rotaryInterleaved = asInt() != 0;
    else if (name == "smooth_softmax" && isInt)
      // The schema's default is -1; onnxruntime enables it only at 1.
      attrs.smoothSoftmax = asInt() == 1;
    else if (name == "causal" && isInt && (asInt() == 0 || asInt() == 1))
      attrs.causal = asInt() == 1;
    else if (name == "qk_norm_epsilon" && isFloat)
      attrs.qkNormEpsilon = asFloat();
    else if ((name == "qk_output" || name == "kv_cache_bit_width" ||
              name == "sliding_window_cache") &&
             isInt && asInt() == 0)
      continue;
    else if (name == "sliding_window_cache" && isInt && asInt() == 1)
      attrs.windowCache = true;
    else if ((name == "k_quant_type" || name == "v_quant_type") &&
             isa<StringAttr>(value) && cast<StringAttr>(value) == "NONE")
      continue;
    else if (name == "qk_output" || name == "kv_cache_bit_width" ||
             name == "k_quant_type" || name == "v_quant_type")
      return node.emitAttributeError(name)
             << "is not supported: moec keeps the KV cache in float32 and "
                "returns no attention scores";
    else
      return node.emitAttributeError(name)
             << "has an unsupported value or is not an attribute of "
                "GroupQueryAttention";
  }
  if (attrs.numHeads <= 0 || attrs.kvNumHeads <= 0 ||
      attrs.numHeads % attrs.kvNumHeads != 0)
    return node.emitAttributeError("num_heads")
           << "must be a positive multiple of kv_num_heads, got "
           << attrs.numHeads << " and " << attrs.kvNumHeads;
  if (!std::isfinite(attrs.scale) || attrs.scale < 0)
    return node.emitAttributeError("scale") << "must be finite and >= 0";
  if (!std::isfinite(attrs.softcap) || attrs.softcap < 0)
    return node.emitAttributeError("softcap") << "must be finite and >= 0";
  if (attrs.localWindowSize == 0 || attrs.localWindowSize < -1)
    return node.emitAttributeError("local_window_size")
           << "must be -1 (no window) or positive, got "
           << attrs.localWindowSize;
  if (!attrs.causal && attrs.localWindowSize > 0)
    return node.emitAttributeError("local_window_size")
           << "needs causal attention (causal 1)";
  if (attrs.windowCache && attrs.localWindowSize < 1)
    return node.emitAttributeError("sliding_window_cache")
           << "needs a window (local_window_size > 0)";
  return success();
}

LogicalResult GqaImporter::checkInputs() {
  auto rankedF32 = [&](unsigned input, int64_t rank) -> LogicalResult {
    auto type = dyn_cast<RankedTensorType>(operand(input).getType());
    if (type && type.getRank() == rank && type.getElementType().isF32())
      return success();
    return node.emitError()
           << "input " << input << " must be a rank-" << rank
           << " float32 tensor, got " << operand(input).getType();
  };
  for (unsigned input : {kKScale, kVScale})
    if (operand(input))
      return node.emitError() << "input " << input
                              << " (a quantized KV cache's scale) is not "
                                 "supported";
  if (failed(rankedF32(kQuery, 3)))
    return failure();
  if (bool(operand(kKey)) != bool(operand(kValue)))
    return node.emitError() << "key and value must be given together";
  if (bool(operand(kPastKey)) != bool(operand(kPastValue)))
    return node.emitError() << "past_key and past_value must be given together";
  if (bool(operand(kQNormWeight)) != bool(operand(kKNormWeight)))
    return node.emitError()
           << "q_norm_weight and k_norm_weight must be given together";
  int64_t width =
      cast<RankedTensorType>(operand(kQuery).getType()).getDimSize(2);
  int64_t packedHeads =
      operand(kKey) ? attrs.numHeads : attrs.numHeads + 2 * attrs.kvNumHeads;
  if (ShapedType::isDynamic(width) || width % packedHeads != 0)
    return node.emitError()
           << "the query's last dimension " << width
           << " must be a static multiple of " << packedHeads << " heads";
  headSize = width / packedHeads;
  for (unsigned input : {kKey, kValue})
    if (operand(input) && failed(rankedF32(input, 3)))
      return failure();
  for (unsigned input : {kPastKey, kPastValue})
    if (operand(input) && failed(rankedF32(input, 4)))
      return failure();
  if (attrs.windowCache) {
    if (!operand(kPastKey))
      return node.emitAttributeError("sliding_window_cache")
             << "needs past_key and past_value";
    // The buffer's capacity: the past's size when static, else the window
    // (onnxruntime's least).
    int64_t size =
        cast<RankedTensorType>(operand(kPastKey).getType()).getDimSize(2);
    windowCapacity = ShapedType::isDynamic(size) ? attrs.localWindowSize : size;
    if (windowCapacity < attrs.localWindowSize)
      return node.emitError() << "past_key holds " << windowCapacity
                              << " positions, fewer than the window of "
                              << attrs.localWindowSize;
  }
  if (attrs.doRotary) {
    if (!operand(kCosCache) || !operand(kSinCache))
      return node.emitAttributeError("do_rotary")
             << "needs cos_cache and sin_cache";
    if (failed(rankedF32(kCosCache, 2)) || failed(rankedF32(kSinCache, 2)))
      return failure();
    rotaryHalf =
        cast<RankedTensorType>(operand(kCosCache).getType()).getDimSize(1);
    if (ShapedType::isDynamic(rotaryHalf) || rotaryHalf <= 0 ||
        2 * rotaryHalf > headSize)
      return node.emitError()
             << "cos_cache's dimension 1 must be static, in [1, head size / "
                "2 = "
             << headSize / 2 << "], got " << rotaryHalf;
  }
  for (unsigned input : {kSeqlensK, kTotalSequenceLength}) {
    auto type = dyn_cast<RankedTensorType>(operand(input).getType());
    if (!type || !type.getElementType().isInteger(32) || type.getRank() > 1)
      return node.emitError()
             << "input " << input
             << " must be a rank-0 or rank-1 int32 tensor, got "
             << operand(input).getType();
  }
  return success();
}

Value GqaImporter::splitHeads(Value x, int64_t heads) {
  return ops.transpose(ops.reshape(x, {0, 0, heads, headSize}), {0, 2, 1, 3});
}

Value GqaImporter::normalizeHeads(Value x, Value weight) {
  return ops.emit(
      "moe.simplified_layer_normalization", {x, weight},
      {ops.i64Attr("axis", -1),
       ops.attr("epsilon", builder.getF32FloatAttr(attrs.qkNormEpsilon))});
}

/// Rotates the first 2 * rotaryHalf features of each head of `x` [B, h, S,
/// headSize] by `cos`, `sin` [B, 1, S, rotaryHalf]: in halves, or in pairs
/// (2i, 2i + 1) when `interleaved`.
Value rotateHeads(OpEmitter &ops, Value x, Value cos, Value sin,
                  int64_t rotaryHalf, int64_t headSize, bool interleaved) {
  int64_t rotary = 2 * rotaryHalf;
  Value x1, x2;
  Value rotated = rotary == headSize ? x : ops.slice(x, 0, rotary, 3);
  if (interleaved) {
    // Pairs (2i, 2i + 1): rotate as [.., R/2, 2] and interleave back.
    Value pairs = ops.reshape(rotated, {0, 0, 0, rotaryHalf, 2});
    x1 = ops.reshape(ops.slice(pairs, 0, 1, 4), {0, 0, 0, rotaryHalf});
    x2 = ops.reshape(ops.slice(pairs, 1, 2, 4), {0, 0, 0, rotaryHalf});
  } else {
    x1 = ops.slice(rotated, 0, rotaryHalf, 3);
    x2 = ops.slice(rotated, rotaryHalf, rotary, 3);
  }
  Value y1 = ops.binary("moe.sub", ops.binary("moe.mul", x1, cos),
                        ops.binary("moe.mul", x2, sin));
  Value y2 = ops.binary("moe.add", ops.binary("moe.mul", x2, cos),
                        ops.binary("moe.mul", x1, sin));
  Value result;
  if (interleaved)
    result = ops.reshape(
        ops.concat({ops.unsqueeze(y1, {4}), ops.unsqueeze(y2, {4})}, 4),
        {0, 0, 0, rotary});
  else
    result = ops.concat({y1, y2}, 3);
  if (rotary == headSize)
    return result;
  return ops.concat({result, ops.slice(x, rotary, headSize, 3)}, 3);
}

void GqaImporter::rotateAt(Value &q, Value &k, Value positions) {
  if (!attrs.doRotary)
    return;
  Value cos = ops.unsqueeze(
      ops.emit("moe.gather", {operand(kCosCache), positions}), {1});
  Value sin = ops.unsqueeze(
      ops.emit("moe.gather", {operand(kSinCache), positions}), {1});
  q = rotate(q, cos, sin);
  k = rotate(k, cos, sin);
}

Value GqaImporter::rotate(Value x, Value cos, Value sin) {
  return rotateHeads(ops, x, cos, sin, rotaryHalf, headSize,
                     attrs.rotaryInterleaved);
}

LogicalResult GqaImporter::import() {
  if (node.getNumOutputs() > 3)
    return node.emitError() << "output 3 (output_qk) is not supported";
  if (failed(readAttributes()) || failed(checkInputs()))
    return failure();
  int64_t heads = attrs.numHeads, kvHeads = attrs.kvNumHeads;
  Type i64Type = builder.getI64Type();

  Value query = operand(kQuery), key = operand(kKey), value = operand(kValue);
  if (!key) {
    key = ops.slice(query, heads * headSize, (heads + kvHeads) * headSize, 2);
    value = ops.slice(query, (heads + kvHeads) * headSize,
                      (heads + 2 * kvHeads) * headSize, 2);
    query = ops.slice(query, 0, heads * headSize, 2);
  }
  Value q = splitHeads(query, heads);
  Value k = splitHeads(key, kvHeads);
  Value v = splitHeads(value, kvHeads);
  if (operand(kQNormWeight)) {
    q = normalizeHeads(q, operand(kQNormWeight));
    k = normalizeHeads(k, operand(kKNormWeight));
  }

  // Positions of the new tokens, [B, S] i64.
  Value seqlens = ops.castTo(ops.reshape(operand(kSeqlensK), {-1, 1}), i64Type);
  Value newTokens = ops.dim(operand(kQuery), 1);
  Value steps = ops.unsqueeze(
      ops.emit("moe.range", {ops.i64Scalar(0), newTokens, ops.i64Scalar(1)}),
      {0});
  // The valid past per row, [B, 1]: seqlens_k + 1 - S, or 0 for the first
  // prompt (S == total length).
  Value total =
      ops.castTo(ops.reshape(operand(kTotalSequenceLength), {}), i64Type);
  Value pastLength = ops.binary(
      "moe.sub", ops.binary("moe.add", seqlens, ops.i64Scalar(1)), newTokens);
  Value firstPrompt = ops.binary("moe.equal", newTokens, total);
  pastLength =
      ops.emit("moe.where", {firstPrompt, ops.i64Scalar(0), pastLength});
  Value positions;
  if (operand(kPositionIds))
    positions = ops.castTo(operand(kPositionIds), i64Type);
  else if (generation.positionInput)
    positions = node.getGraphImporter().getPositionInput();
  // A graph's own position_ids of M-RoPE's [3, B, S] rotate elsewhere.
  if (positions && !operand(kPositionIds) &&
      cast<RankedTensorType>(positions.getType()).getRank() != 2)
    positions = Value();
  // Without rotary here, a first prompt needs no positions.
  if (!positions && generation.firstPrompt && attrs.doRotary)
    return node.emitError() << "has no first-prompt form: its positions "
                               "cannot come from a 'position_ids' input (the "
                               "graph has an input of that name it does not "
                               "read)";
  if (!positions)
    positions = ops.binary("moe.add", pastLength, steps);
  if (generation.firstPrompt)
    return importFirstPrompt(q, k, v, positions, steps);

  rotateAt(q, k, positions);

  Value presentKey = k, presentValue = v;
  if (operand(kPastKey)) {
    presentKey = ops.concat({operand(kPastKey), k}, 2);
    presentValue = ops.concat({operand(kPastValue), v}, 2);
  }

  // The mask [B, 1, S, T]: 0 where query i of row b sees key j, else -inf.
  Value keyIndex = ops.reshape(
      ops.emit("moe.range",
               {ops.i64Scalar(0), ops.dim(presentKey, 2), ops.i64Scalar(1)}),
      {1, 1, 1, -1});
  Value keys = presentKey, values = presentValue;
  Value keyValid;
  if (attrs.windowCache) {
    // The past's C entries are the positions just before the new tokens
    // (pastLength - C + j; negative ones never written), and the present
    // keeps the last C of past and new.
    keyIndex =
        ops.binary("moe.add", keyIndex,
                   ops.unsqueeze(ops.binary("moe.sub", pastLength,
                                            ops.i64Scalar(windowCapacity)),
                                 {1, 2}));
    keyValid = ops.binary("moe.greater_or_equal", keyIndex, ops.i64Scalar(0));
    auto lastEntries = [&](Value all) {
      return ops.reshape(ops.slice(all, -windowCapacity,
                                   std::numeric_limits<int64_t>::max(), 2),
                         {0, kvHeads, windowCapacity, headSize});
    };
    presentKey = lastEntries(keys);
    presentValue = lastEntries(values);
  }
  Value seen;
  if (attrs.causal) {
    Value queryPosition = ops.unsqueeze(positions, {1, 3});
    seen = ops.binary("moe.less_or_equal", keyIndex, queryPosition);
    if (attrs.localWindowSize > 0) {
      Value first = ops.binary("moe.sub", queryPosition,
                               ops.i64Scalar(attrs.localWindowSize));
      seen = ops.binary("moe.and", seen,
                        ops.binary("moe.greater", keyIndex, first));
    }
  } else {
    seen = ops.binary("moe.less_or_equal", keyIndex,
                      ops.unsqueeze(seqlens, {1, 2}));
  }
  if (keyValid)
    seen = ops.binary("moe.and", seen, keyValid);
  Value mask = ops.emit(
      "moe.where", {seen, ops.f32Scalar(0.0f),
                    ops.f32Scalar(-std::numeric_limits<float>::infinity())});
  if (operand(kAttentionBias))
    mask = ops.binary("moe.add", mask, operand(kAttentionBias));

  return finish(q, keys, values, mask, presentKey, presentValue);
}

LogicalResult GqaImporter::finish(Value q, Value keys, Value values, Value mask,
                                  Value presentKey, Value presentValue) {
  int64_t heads = attrs.numHeads;
  Value sinks = operand(kHeadSink);
  if (!sinks && attrs.smoothSoftmax) {
    auto type = RankedTensorType::get({heads}, builder.getF32Type());
    sinks = moe::ConstantOp::create(builder, node.getLoc(), type,
                                    DenseElementsAttr::get(type, 0.0f));
  }
  float scale =
      attrs.scale > 0 ? attrs.scale : 1.0f / std::sqrt(float(headSize));
  SmallVector<Value> attentionOperands = {q, keys, values, mask};
  if (sinks)
    attentionOperands.push_back(sinks);
  Value attended =
      ops.emit("moe.attention", attentionOperands,
               {ops.attr("scale", builder.getF32FloatAttr(scale)),
                ops.attr("softcap", builder.getF32FloatAttr(attrs.softcap))},
               {1, 1, 1, 1, sinks ? 1 : 0});
  Value output = ops.reshape(ops.transpose(attended, {0, 2, 1, 3}),
                             {0, 0, heads * headSize});
  if (ops.failed())
    return failure();
  return node.setResults({output, presentKey, presentValue});
}

LogicalResult GqaImporter::importFirstPrompt(Value q, Value k, Value v,
                                             Value positions, Value steps) {
  // What a first prompt computes: the past is empty (seqlens_k + 1 == S),
  // so the keys are the new ones at positions 0 .. S-1 and query i sees key
  // j exactly when j <= i (and j > i - W in a window of W). The mask is
  // built from the row count alone, the form moe-analyze-batch-rows proves
  // causal; the positions still come from `positions`, which a first
  // prompt's caller sets to 0 .. S-1.
  if (attrs.windowCache)
    return node.emitAttributeError("sliding_window_cache")
           << "has no first-prompt form: the cache is a fixed-size state";
  if (!attrs.causal)
    return node.emitAttributeError("causal")
           << "has no first-prompt form: the attention is not causal";
  if (operand(kAttentionBias))
    return node.emitError()
           << "has no first-prompt form: input " << unsigned(kAttentionBias)
           << " (attention_bias) may mix the rows";
  rotateAt(q, k, positions);
  Value keys = ops.reshape(steps, {1, 1, 1, -1});
  Value queries = ops.reshape(steps, {1, 1, -1, 1});
  Value seen = ops.binary("moe.less_or_equal", keys, queries);
  if (attrs.localWindowSize > 0)
    seen = ops.binary(
        "moe.and", seen,
        ops.binary("moe.greater", keys,
                   ops.binary("moe.sub", queries,
                              ops.i64Scalar(attrs.localWindowSize))));
  Value mask = ops.emit(
      "moe.where", {seen, ops.f32Scalar(0.0f),
                    ops.f32Scalar(-std::numeric_limits<float>::infinity())});
  // The presents are the rows' keys and values, on axis 2.
  node.getGraphImporter().markTokenRows(k, 2);
  node.getGraphImporter().markTokenRows(v, 2);
  return finish(q, k, v, mask, k, v);
}

LogicalResult importGroupQueryAttention(NodeImporter &node) {
  return GqaImporter(node).import();
}

//===----------------------------------------------------------------------===//
// RotaryEmbedding
//===----------------------------------------------------------------------===//

/// The frequency index i of M-RoPE's half rotary dimension takes its
/// cos/sin from position stream a (0 T, 1 H, 2 W): in contiguous sections
/// (layout 0) or, interleaved (layout 1), T everywhere but H at i % 3 == 1
/// below 3 * section[1] and W at i % 3 == 2 below 3 * section[2].
int64_t mropeStream(ArrayRef<int64_t> section, int64_t layout, int64_t i) {
  if (layout == 0)
    return i < section[0] ? 0 : i < section[0] + section[1] ? 1 : 2;
  if (i % 3 == 1 && i < 3 * section[1])
    return 1;
  if (i % 3 == 2 && i < 3 * section[2])
    return 2;
  return 0;
}

/// RotaryEmbedding, or MRotaryEmbedding when `multimodal`.
LogicalResult importRotary(NodeImporter &node, bool multimodal) {
  int64_t numHeads = 0, rotaryDim = 0, mropeLayout = 0;
  bool interleaved = false;
  SmallVector<int64_t> mropeSection;
  for (const NamedAttribute &attr : node.getAttributes()) {
    StringRef name = attr.getName().getValue();
    auto value = dyn_cast<IntegerAttr>(attr.getValue());
    auto floatValue = dyn_cast<FloatAttr>(attr.getValue());
    auto values = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (multimodal && name == "mrope_section" && values && values.size() == 3 &&
        llvm::all_of(values.asArrayRef(), [](int64_t v) { return v >= 0; }))
      mropeSection.assign(values.asArrayRef().begin(),
                          values.asArrayRef().end());
    else if (multimodal && name == "mrope_layout" && value &&
             (value.getInt() == 0 || value.getInt() == 1))
      mropeLayout = value.getInt();
    else if (multimodal && name == "mrope_section")
      return node.emitAttributeError(name)
             << "must be three non-negative integers";
    else if (multimodal && name == "mrope_layout")
      return node.emitAttributeError(name)
             << "must be 0 (sections) or 1 (interleaved); 2 (blocked) is not "
                "supported";
    else if (name == "num_heads" && value && value.getInt() >= 0)
      numHeads = value.getInt();
    else if (name == "rotary_embedding_dim" && value && value.getInt() >= 0)
      rotaryDim = value.getInt();
    else if (name == "interleaved" && value &&
             (value.getInt() == 0 || value.getInt() == 1))
      interleaved = value.getInt() == 1;
    else if ((name == "is_packed_batching" && value && value.getInt() == 0) ||
             (name == "scale" && floatValue &&
              floatValue.getValueAsDouble() == 1.0))
      continue;
    else if (name == "is_packed_batching" || name == "scale")
      return node.emitAttributeError(name)
             << "is not supported (moec takes unpacked batches and scale 1)";
    else
      return node.emitAttributeError(name)
             << "has an unsupported value or is not an attribute of "
             << (multimodal ? "MRotaryEmbedding" : "RotaryEmbedding");
  }
  if (multimodal && mropeSection.empty())
    return node.emitAttributeError("mrope_section") << "is required";
  if (rotaryDim > 0 && numHeads == 0)
    return node.emitAttributeError("rotary_embedding_dim") << "needs num_heads";

  SmallVectorImpl<Value> &operands = node.getOperands();
  auto typeOf = [&](unsigned input) {
    return dyn_cast<RankedTensorType>(operands[input].getType());
  };
  RankedTensorType inputType = typeOf(0), cosType = typeOf(2),
                   sinType = typeOf(3), positionType = typeOf(1);
  if (!inputType || !inputType.getElementType().isF32() ||
      (inputType.getRank() != 3 && inputType.getRank() != 4))
    return node.emitError() << "input 0 must be a rank-3 or rank-4 float32 "
                               "tensor, got "
                            << operands[0].getType();
  for (RankedTensorType cache : {cosType, sinType})
    if (!cache || !cache.getElementType().isF32() || cache.getRank() != 2 ||
        cache != cosType)
      return node.emitError()
             << "cos_cache and sin_cache must be float32 "
                "[max_sequence_length, rotary / 2] tensors "
                "of one shape, got "
             << operands[2].getType() << " and " << operands[3].getType();
  if (multimodal &&
      (!positionType || !positionType.getElementType().isInteger(64) ||
       positionType.getRank() != 3 || positionType.getDimSize(0) != 3))
    return node.emitError()
           << "position_ids must be an int64 [3, batch, sequence] tensor, got "
           << operands[1].getType();
  if (!multimodal &&
      (!positionType || !positionType.getElementType().isInteger(64) ||
       (positionType.getRank() != 1 && positionType.getRank() != 2)))
    return node.emitError()
           << "position_ids must be an int64 [1] or [batch, sequence] tensor, "
              "got "
           << operands[1].getType();
  int64_t rotaryHalf = cosType.getDimSize(1);
  bool fourD = inputType.getRank() == 4;
  int64_t width = inputType.getDimSize(fourD ? 3 : 2);
  int64_t headSize = fourD          ? width
                     : numHeads > 0 ? width / numHeads
                                    : 2 * rotaryHalf;
  if (ShapedType::isDynamic(width) || ShapedType::isDynamic(rotaryHalf) ||
      rotaryHalf <= 0 || headSize <= 0 || (!fourD && width % headSize != 0) ||
      2 * rotaryHalf > headSize ||
      (rotaryDim > 0 ? rotaryDim != 2 * rotaryHalf
                     : 2 * rotaryHalf != headSize))
    return node.emitError()
           << "the input's last dimension " << width << ", num_heads "
           << numHeads << ", rotary_embedding_dim " << rotaryDim
           << " and cos_cache's dimension 1 " << rotaryHalf
           << " do not give whole heads with a rotary dimension of 2 * "
              "cos_cache.dim(1)";
  if (multimodal &&
      mropeSection[0] + mropeSection[1] + mropeSection[2] != rotaryHalf)
    return node.emitAttributeError("mrope_section")
           << "must add up to cos_cache.dim(1) " << rotaryHalf << ", got "
           << mropeSection[0] << " + " << mropeSection[1] << " + "
           << mropeSection[2];

  OpEmitter ops(node.getBuilder(), node.getLoc());
  Value x = operands[0];
  int64_t heads = width / headSize;
  if (!fourD)
    x = ops.transpose(ops.reshape(x, {0, 0, heads, headSize}), {0, 2, 1, 3});
  // Positions [B or 1, S]: given, or an offset plus 0 .. S-1.
  Value positions = operands[1];
  if (positionType.getRank() == 1) {
    Value steps = ops.emit("moe.range", {ops.i64Scalar(0),
                                         ops.dim(operands[0], fourD ? 2 : 1),
                                         ops.i64Scalar(1)});
    positions = ops.unsqueeze(
        ops.binary("moe.add", ops.reshape(positions, {}), steps), {0});
  }
  // [B, S, R/2] rows of a cache at the positions; for M-RoPE, rows at
  // each of the 3 streams, [3, B, S, R/2] -> [B, S, 3 * R/2], from which
  // frequency i takes column stream(i) * R/2 + i.
  SmallVector<int64_t> columns;
  for (int64_t i = 0; multimodal && i < rotaryHalf; ++i)
    columns.push_back(mropeStream(mropeSection, mropeLayout, i) * rotaryHalf +
                      i);
  auto rows = [&](Value cache) {
    Value table = ops.emit("moe.gather", {cache, positions});
    if (multimodal)
      table = ops.emit("moe.gather",
                       {ops.reshape(ops.transpose(table, {1, 2, 0, 3}),
                                    {0, 0, 3 * rotaryHalf}),
                        ops.i64Vector(columns)},
                       {ops.i64Attr("axis", 2)});
    return ops.unsqueeze(table, {1});
  };
  Value cos = rows(operands[2]);
  Value sin = rows(operands[3]);
  Value y = rotateHeads(ops, x, cos, sin, rotaryHalf, headSize, interleaved);
  if (!fourD)
    y = ops.reshape(ops.transpose(y, {0, 2, 1, 3}), {0, 0, width});
  if (ops.failed())
    return failure();
  return node.setResults({y});
}

LogicalResult importRotaryEmbedding(NodeImporter &node) {
  return importRotary(node, /*multimodal=*/false);
}

LogicalResult importMRotaryEmbedding(NodeImporter &node) {
  return importRotary(node, /*multimodal=*/true);
}

} // namespace

void moec::onnx_import::populateContribAttentionImports(OpImportTable &table) {
  table.onOp("SkipSimplifiedLayerNormalization", 1, "input, skip, gamma, bias?",
             importSkipSimplifiedLayerNorm, StringRef(""), kMicrosoftDomain);
  table.onOp("GroupQueryAttention", 1,
             "query, key?, value?, past_key?, past_value?, seqlens_k, "
             "total_sequence_length, cos_cache?, sin_cache?, position_ids?, "
             "attention_bias?, head_sink?, k_scale?, v_scale?, "
             "q_norm_weight?, k_norm_weight?",
             importGroupQueryAttention, StringRef(""), kMicrosoftDomain);
  table.onOp("RotaryEmbedding", 1, "input, position_ids, cos_cache, sin_cache",
             importRotaryEmbedding, StringRef(""), kMicrosoftDomain);
  table.onOp("MRotaryEmbedding", 1, "input, position_ids, cos_cache, sin_cache",
             importMRotaryEmbedding, StringRef(""), kMicrosoftDomain);
}
