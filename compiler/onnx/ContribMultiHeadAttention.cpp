//===- ContribMultiHeadAttention.cpp - onnxruntime's MultiHeadAttention ---===//
//
// com.microsoft.MultiHeadAttention (the attention op of onnxruntime's
// transformer optimizer and of onnxruntime-genai's exports where its
// GroupQueryAttention is not available) as head reshapes, the present caches
// as `Concat(past, new)` along the positions, an additive mask and one
// `moe.attention`.
//
// The semantics followed are onnxruntime's CPU kernel's (checked against it
// by test/E2E/contrib-multihead-attention.test):
//
//  * query [B, S, D]; key [B, L, D] and value [B, L, Dv], each split into
//    num_heads heads of D / num_heads (Dv / num_heads), with bias [D + D +
//    Dv] added first; or key and value already as [B, N, L, H] heads
//    (cross-attention's cached keys), without bias or past.
//  * past_key and past_value [B, N, P, H] come before the new keys: the
//    presents are Concat(past, new) on axis 2, T = P + L positions.
//  * Scores are scale * q.k (scale 0: 1 / sqrt(head size)) plus
//    attention_bias [B or 1, N or 1, S, T] plus the mask: mask_filter_value
//    (default -10000, a finite value: a row whose keys are all masked still
//    averages them) where key_padding_mask [B, T] or [B, S, T] is 0, plus
//    -10000 whatever mask_filter_value is where unidirectional 1 hides key
//    j > P + i from query i of a call with S > 1 (onnxruntime's kernel
//    applies no causal mask to a single query row).
//
// Packed QKV or KV (5-D query or key, which onnxruntime's CPU kernel does not
// implement either), key lengths as a 1-D key_padding_mask, a shared
// past/present buffer (past_sequence_length), beam search's
// cache_indirection and the qk output are refused with an error naming the
// input or output.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/GraphImporter.h"
#include "compiler/onnx/Model.h"
#include "compiler/onnx/OpEmitter.h"
#include "compiler/onnx/OpImport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinTypes.h"

#include <cmath>

using namespace mlir;
using namespace moec;
using namespace moec::onnx_import;

namespace {

/// MultiHeadAttention's inputs in ONNX order.
enum MhaInput : unsigned {
  kQuery,
  kKey,
  kValue,
  kBias,
  kKeyPaddingMask,
  kAttentionBias,
  kPastKey,
  kPastValue,
  kPastSequenceLength,
  kCacheIndirection,
};

class MhaImporter {
public:
  explicit MhaImporter(NodeImporter &node)
      : node(node), builder(node.getBuilder()), ops(builder, node.getLoc()) {}

  LogicalResult import();

private:
  Value operand(unsigned input) const {
    SmallVectorImpl<Value> &operands = node.getOperands();
    return input < operands.size() ? operands[input] : Value();
  }
  RankedTensorType typeOf(unsigned input) const {
    return dyn_cast<RankedTensorType>(operand(input).getType());
  }
  LogicalResult readAttributes();
  LogicalResult checkInputs();
  /// `x` [B, S, heads * size] as [B, heads, S, size].
  Value splitHeads(Value x, int64_t size) {
    return ops.transpose(ops.reshape(x, {0, 0, numHeads, size}), {0, 2, 1, 3});
  }
  /// The additive mask over the scores [B, N, S, T], or null when there is
  /// none: `keys` holds the T positions, `pastLength` is P.
  Value buildMask(Value query, Value keys, Value pastLength);

  NodeImporter &node;
  OpBuilder &builder;
  OpEmitter ops;
  int64_t numHeads = 0;
  float scale = 0.0f;
  float maskFilterValue = -10000.0f;
  bool unidirectional = false;
  int64_t headSize = 0, valueHeadSize = 0;
  /// key and value come as [B, N, L, H] heads.
  bool keysAsHeads = false;
};

LogicalResult MhaImporter::readAttributes() {
  for (const NamedAttribute &attr : node.getAttributes()) {
    StringRef name = attr.getName().getValue();
    auto intValue = dyn_cast<IntegerAttr>(attr.getValue());
    auto floatValue = dyn_cast<FloatAttr>(attr.getValue());
    if (name == "num_heads" && intValue && intValue.getInt() > 0)
      numHeads = intValue.getInt();
    else if (name == "unidirectional" && intValue &&
             (intValue.getInt() == 0 || intValue.getInt() == 1))
      unidirectional = intValue.getInt() == 1;
    else if (name == "scale" && floatValue &&
             std::isfinite(floatValue.getValueAsDouble()) &&
             floatValue.getValueAsDouble() >= 0)
      scale = float(floatValue.getValueAsDouble());
    else if (name == "mask_filter_value" && floatValue &&
             std::isfinite(floatValue.getValueAsDouble()))
      maskFilterValue = float(floatValue.getValueAsDouble());
    else
      return node.emitAttributeError(name)
             << "has an unsupported value or is not an attribute of "
                "MultiHeadAttention";
  }
  if (numHeads <= 0)
    return node.emitAttributeError("num_heads")
           << "is required and must be positive";
  return success();
}

LogicalResult MhaImporter::checkInputs() {
  auto floatTensor = [&](unsigned input, ArrayRef<int64_t> ranks,
                         StringRef name) -> LogicalResult {
    RankedTensorType type = typeOf(input);
    if (type && type.getElementType().isF32() &&
        llvm::is_contained(ranks, type.getRank()))
      return success();
    InFlightDiagnostic diag = node.emitError();
    diag << "input " << input << " (" << name << ") must be a rank-";
    llvm::interleave(ranks, diag, " or rank-");
    return diag << " float32 tensor, got " << operand(input).getType();
  };
  if (RankedTensorType type = typeOf(kQuery); type && type.getRank() == 5)
    return node.emitError() << "input 0 (query) is packed QKV [B, L, N, 3, "
                               "H], which is not supported";
  if (failed(floatTensor(kQuery, {3}, "query")))
    return failure();
  if (!operand(kKey) || !operand(kValue))
    return node.emitError() << "needs key and value (input 1 and 2): packed "
                               "QKV in the query is not supported";
  if (RankedTensorType type = typeOf(kKey); type && type.getRank() == 5)
    return node.emitError() << "input 1 (key) is packed KV [B, L, N, 2, H], "
                               "which is not supported";
  if (failed(floatTensor(kKey, {3, 4}, "key")) ||
      failed(floatTensor(kValue, {3, 4}, "value")))
    return failure();
  keysAsHeads = typeOf(kKey).getRank() == 4;
  if (typeOf(kValue).getRank() != typeOf(kKey).getRank())
    return node.emitError()
           << "key and value must have the same rank, got "
           << operand(kKey).getType() << " and " << operand(kValue).getType();
  for (auto [input, name] : {std::pair<unsigned, StringRef>{
                                 kPastSequenceLength, "past_sequence_length"},
                             {kCacheIndirection, "cache_indirection"}})
    if (operand(input))
      return node.emitError()
             << "input " << input << " (" << name
             << ") is not supported: moec keeps past and present apart and "
                "runs no beam search";
  if (bool(operand(kPastKey)) != bool(operand(kPastValue)))
    return node.emitError() << "past_key and past_value must be given together";
  if (keysAsHeads && (operand(kBias) || operand(kPastKey)))
    return node.emitError()
           << "key and value given as [B, N, L, H] heads take no bias and no "
              "past_key/past_value";

  int64_t width = typeOf(kQuery).getDimSize(2);
  if (ShapedType::isDynamic(width) || width % numHeads != 0)
    return node.emitError()
           << "the query's last dimension " << width
           << " must be a static multiple of " << numHeads << " heads";
  headSize = width / numHeads;
  RankedTensorType keyType = typeOf(kKey), valueType = typeOf(kValue);
  int64_t keyWidth = keyType.getDimSize(keyType.getRank() - 1);
  int64_t valueWidth = valueType.getDimSize(valueType.getRank() - 1);
  if (keysAsHeads) {
    valueHeadSize = valueWidth;
    if (keyWidth != headSize || keyType.getDimSize(1) != numHeads ||
        valueType.getDimSize(1) != numHeads ||
        ShapedType::isDynamic(valueWidth))
      return node.emitError()
             << "key and value as heads must be [B, " << numHeads << ", L, "
             << headSize << "] and [B, " << numHeads << ", L, Hv], got "
             << keyType << " and " << valueType;
  } else {
    if (keyWidth != width)
      return node.emitError() << "the key's last dimension must be the "
                                 "query's "
                              << width << ", got " << keyType;
    if (ShapedType::isDynamic(valueWidth) || valueWidth % numHeads != 0)
      return node.emitError()
             << "the value's last dimension " << valueWidth
             << " must be a static multiple of " << numHeads << " heads";
    valueHeadSize = valueWidth / numHeads;
  }
  if (operand(kBias)) {
    if (failed(floatTensor(kBias, {1}, "bias")))
      return failure();
    int64_t size = typeOf(kBias).getDimSize(0);
    if (size != 2 * width + valueWidth)
      return node.emitError()
             << "input 3 (bias) must hold " << 2 * width + valueWidth
             << " values (query, key and value widths), got " << size;
  }
  if (operand(kPastKey)) {
    if (failed(floatTensor(kPastKey, {4}, "past_key")) ||
        failed(floatTensor(kPastValue, {4}, "past_value")))
      return failure();
    if (typeOf(kPastKey).getDimSize(3) != headSize ||
        typeOf(kPastValue).getDimSize(3) != valueHeadSize)
      return node.emitError() << "past_key and past_value must be [B, N, P, "
                              << headSize << "] and [B, N, P, " << valueHeadSize
                              << "], got " << operand(kPastKey).getType()
                              << " and " << operand(kPastValue).getType();
  }
  if (operand(kKeyPaddingMask)) {
    RankedTensorType type = typeOf(kKeyPaddingMask);
    if (type && type.getRank() == 1)
      return node.emitError()
             << "input 4 (key_padding_mask) holds key lengths ([batch] or [3 * "
                "batch + 2]), which is not supported; a [batch, "
                "total_sequence_length] mask is";
    if (!type || !type.getElementType().isInteger(32) ||
        (type.getRank() != 2 && type.getRank() != 3))
      return node.emitError()
             << "input 4 (key_padding_mask) must be an int32 [batch, "
                "total_sequence_length] or [batch, sequence_length, "
                "total_sequence_length] tensor, got "
             << operand(kKeyPaddingMask).getType();
  }
  if (operand(kAttentionBias) &&
      failed(floatTensor(kAttentionBias, {4}, "attention_bias")))
    return failure();
  // Output 3 (qk) would need the scores, which moe.attention keeps inside.
  if (node.getNumOutputs() > 3 && !node.getNode().output(3).empty())
    return node.emitError() << "output 3 (qk) is not supported";
  return success();
}

Value MhaImporter::buildMask(Value query, Value keys, Value pastLength) {
  Type i64Type = builder.getI64Type();
  auto penalty = [&](Value seen, float value) {
    return ops.emit("moe.where",
                    {seen, ops.f32Scalar(0.0f), ops.f32Scalar(value)});
  };
  Value mask;
  auto addTerm = [&](Value term) {
    mask = mask ? ops.binary("moe.add", mask, term) : term;
  };
  if (Value padding = operand(kKeyPaddingMask)) {
    // [B, T] -> [B, 1, 1, T]; [B, S, T] -> [B, 1, S, T].
    bool perQuery = typeOf(kKeyPaddingMask).getRank() == 3;
    Value kept = ops.binary("moe.greater", ops.castTo(padding, i64Type),
                            ops.i64Scalar(0));
    addTerm(penalty(ops.unsqueeze(kept, perQuery ? ArrayRef<int64_t>{1}
                                                 : ArrayRef<int64_t>{1, 2}),
                    maskFilterValue));
  }
  if (unidirectional) {
    // Query i sees key j <= P + i; a single query row sees every key.
    Value rows = ops.dim(query, 1);
    Value queryIndex = ops.reshape(
        ops.emit("moe.range", {ops.i64Scalar(0), rows, ops.i64Scalar(1)}),
        {1, 1, -1, 1});
    Value keyIndex =
        ops.reshape(ops.emit("moe.range", {ops.i64Scalar(0), ops.dim(keys, 2),
                                           ops.i64Scalar(1)}),
                    {1, 1, 1, -1});
    Value seen =
        ops.binary("moe.or",
                   ops.binary("moe.less_or_equal", keyIndex,
                              ops.binary("moe.add", queryIndex, pastLength)),
                   ops.binary("moe.equal", rows, ops.i64Scalar(1)));
    // onnxruntime's causal mask ignores mask_filter_value.
    addTerm(penalty(seen, -10000.0f));
  }
  if (Value bias = operand(kAttentionBias))
    addTerm(bias);
  return mask;
}

LogicalResult MhaImporter::import() {
  if (failed(readAttributes()) || failed(checkInputs()))
    return failure();
  int64_t width = numHeads * headSize;
  Value query = operand(kQuery), key = operand(kKey), value = operand(kValue);
  if (Value bias = operand(kBias)) {
    query = ops.binary("moe.add", query, ops.slice(bias, 0, width, 0));
    key = ops.binary("moe.add", key, ops.slice(bias, width, 2 * width, 0));
    value = ops.binary(
        "moe.add", value,
        ops.slice(bias, 2 * width, 2 * width + numHeads * valueHeadSize, 0));
  }
  Value q = splitHeads(query, headSize);
  Value keys = keysAsHeads ? key : splitHeads(key, headSize);
  Value values = keysAsHeads ? value : splitHeads(value, valueHeadSize);
  Value pastLength = ops.i64Scalar(0);
  if (operand(kPastKey)) {
    keys = ops.concat({operand(kPastKey), keys}, 2);
    values = ops.concat({operand(kPastValue), values}, 2);
    pastLength = ops.dim(operand(kPastKey), 2);
  }
  Value mask = buildMask(operand(kQuery), keys, pastLength);

  float attentionScale = scale > 0 ? scale : 1.0f / std::sqrt(float(headSize));
  SmallVector<Value> attentionOperands = {q, keys, values};
  if (mask)
    attentionOperands.push_back(mask);
  Value attended =
      ops.emit("moe.attention", attentionOperands,
               {ops.attr("scale", builder.getF32FloatAttr(attentionScale)),
                ops.attr("softcap", builder.getF32FloatAttr(0.0f))},
               {1, 1, 1, mask ? 1 : 0, 0});
  Value output = ops.reshape(ops.transpose(attended, {0, 2, 1, 3}),
                             {0, 0, numHeads * valueHeadSize});
  if (ops.failed())
    return failure();
  // Output 3 (qk), refused above when named, is bound to nothing.
  return node.setResults({output, keys, values, Value()});
}

LogicalResult importMultiHeadAttention(NodeImporter &node) {
  return MhaImporter(node).import();
}

} // namespace

void moec::onnx_import::populateContribMultiHeadAttentionImports(
    OpImportTable &table) {
  table.onOp("MultiHeadAttention", 1,
             "query, key?, value?, bias?, key_padding_mask?, "
             "attention_bias?, past_key?, past_value?, past_sequence_length?, "
             "cache_indirection?",
             importMultiHeadAttention, StringRef(""), kMicrosoftDomain);
}
