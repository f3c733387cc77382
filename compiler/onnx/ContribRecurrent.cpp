//===- ContribRecurrent.cpp - onnxruntime's recurrent-state op imports ----===//
//
// The com.microsoft ops of hybrid layers, whose state is a fixed-size tensor
// replaced each step (a generation plan's state pair) rather than a cache
// that grows:
//
//  * CausalConvWithState (LFM2, Qwen3.5's gated delta layers): a causal
//    depthwise 1-D convolution over [B, C, L] with a [C, 1, K] kernel, whose
//    state [B, C, K - 1] holds the last K - 1 inputs of the previous call
//    (zeros without one). It becomes moe.causal_conv, whose state input and
//    output continuous batching swaps for each sequence's own.
//  * LinearAttention with update_rule "gated_delta" (Qwen3.5's Gated
//    DeltaNet): moe.gated_delta_rule on the packed [B, S, H * D] query, key
//    and value reshaped to [B, S, H, D], with the state [B, Hv, Dk, Dv]
//    (zeros without one) and the per-head decay and beta [B, S, Hv]. A
//    scale of 0 means 1 / sqrt(Dk), as in onnxruntime's kernel.
//
// Imported as a first prompt (ImportOptions::firstPrompt), both start from
// a zero state, so that the state inputs drop out and the graph can be the
// plan's prefill schedule.
//  * LinearAttentionGate: decay = decay_scale * softplus(a + dt_bias) (the
//    export's decay_scale is -exp(A_log)) and beta = sigmoid(b).
//  * GatedRMSNorm: the RMS norm of x over groups of the scale's length,
//    times the scale, times silu(gate) (activation "silu"/"swish") or
//    sigmoid(gate) ("sigmoid").
//  * GatedAdd: x + y * gate, gate [..., 1] broadcasting over the last axis.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/GraphImporter.h"
#include "compiler/onnx/Model.h"
#include "compiler/onnx/OpEmitter.h"
#include "compiler/onnx/OpImport.h"

#include "mlir/IR/BuiltinTypes.h"

#include <cmath>

using namespace mlir;
using namespace moec;
using namespace moec::onnx_import;

namespace {

/// A zero f32 state [batch, dims...].
Value zeros(OpEmitter &ops, Value batch, ArrayRef<int64_t> dims, Type element) {
  Value shape = ops.concat({ops.unsqueeze(batch, {0}), ops.i64Vector(dims)}, 0);
  return ops.emit(
      "moe.constant_of_shape", {shape},
      {ops.attr("value", DenseElementsAttr::get(
                             RankedTensorType::get({1}, element), 0.0f))});
}

LogicalResult importCausalConvWithState(NodeImporter &node) {
  bool silu = false;
  for (const NamedAttribute &attr : node.getAttributes()) {
    StringRef name = attr.getName().getValue();
    auto asInt = dyn_cast<IntegerAttr>(attr.getValue());
    auto asString = dyn_cast<StringAttr>(attr.getValue());
    if (name == "ndim" && asInt && asInt.getInt() == 1)
      continue;
    if (name == "state_window" && asInt && asInt.getInt() == 0)
      continue;
    if (name == "activation" && asString &&
        (asString == "none" || asString == "silu" || asString == "swish")) {
      silu = asString != "none";
      continue;
    }
    return node.emitAttributeError(name)
           << "is not supported (moec runs the 1-D convolution, activation "
              "none or silu, without a state window)";
  }
  SmallVectorImpl<Value> &operands = node.getOperands();
  Value input = operands[0], weight = operands[1];
  Value bias = operands.size() > 2 ? operands[2] : Value();
  Value past = operands.size() > 3 ? operands[3] : Value();
  auto inputType = dyn_cast<RankedTensorType>(input.getType());
  auto weightType = dyn_cast<RankedTensorType>(weight.getType());
  if (!inputType || inputType.getRank() != 3 ||
      !inputType.getElementType().isF32())
    return node.emitError() << "input must be a float32 [batch, channels, "
                               "length] tensor, got "
                            << input.getType();
  if (!weightType || weightType.getRank() != 3 ||
      !weightType.hasStaticShape() || weightType.getDimSize(1) != 1 ||
      weightType.getDimSize(2) < 1)
    return node.emitError() << "weight must be a static [channels, 1, kernel] "
                               "tensor (a depthwise kernel), got "
                            << weight.getType();
  int64_t channels = weightType.getDimSize(0);
  int64_t kernel = weightType.getDimSize(2);
  if (!inputType.isDynamicDim(1) && inputType.getDimSize(1) != channels)
    return node.emitError() << "input has " << inputType.getDimSize(1)
                            << " channels but the weight " << channels;

  OpEmitter ops(node.getBuilder(), node.getLoc());
  int64_t history = kernel - 1;
  // A first prompt starts from zeros whatever the state input holds.
  if (!past || node.getGraphImporter().getOptions().firstPrompt)
    past = zeros(ops, ops.dim(input, 0), {channels, history},
                 node.getBuilder().getF32Type());
  SmallVector<Value> convOperands = {
      input, ops.reshape(weight, {channels, kernel}), past};
  if (bias)
    convOperands.push_back(ops.reshape(bias, {channels}));
  SmallVector<Value> results =
      ops.emitAll("moe.causal_conv", convOperands,
                  {ops.attr("silu", node.getBuilder().getBoolAttr(silu))});
  if (ops.failed())
    return failure();
  return node.setResults({results[0], results[1]});
}

/// The static size of the last dimension of `value`'s type, or -1.
int64_t staticLastDim(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || type.getRank() == 0 || type.isDynamicDim(type.getRank() - 1))
    return -1;
  return type.getDimSize(type.getRank() - 1);
}

LogicalResult importLinearAttention(NodeImporter &node) {
  int64_t queryHeads = 0, kvHeads = 0;
  float scale = 0.0f;
  for (const NamedAttribute &attr : node.getAttributes()) {
    StringRef name = attr.getName().getValue();
    auto asInt = dyn_cast<IntegerAttr>(attr.getValue());
    auto asString = dyn_cast<StringAttr>(attr.getValue());
    if (name == "q_num_heads" && asInt) {
      queryHeads = asInt.getInt();
      continue;
    }
    if (name == "kv_num_heads" && asInt) {
      kvHeads = asInt.getInt();
      continue;
    }
    if (name == "scale" && isa<FloatAttr>(attr.getValue())) {
      scale = cast<FloatAttr>(attr.getValue()).getValueAsDouble();
      continue;
    }
    // The chunk size only tiles onnxruntime's prefill; the result is the
    // recurrence's.
    if (name == "chunk_size" && asInt)
      continue;
    if (name == "update_rule" && asString) {
      if (asString == "gated_delta")
        continue;
      return node.emitAttributeError(name)
             << "is not supported: moec runs update_rule \"gated_delta\" "
                "only, got \""
             << asString.getValue() << "\"";
    }
    if (name == "state_window" && asInt && asInt.getInt() == 0)
      continue;
    return node.emitAttributeError(name)
           << "is not supported (moec runs the gated delta rule without a "
              "state window)";
  }
  if (queryHeads <= 0 || kvHeads <= 0 || kvHeads % queryHeads != 0)
    return node.emitAttributeError("q_num_heads")
           << "must be positive and divide kv_num_heads, got " << queryHeads
           << " and " << kvHeads;
  SmallVectorImpl<Value> &operands = node.getOperands();
  operands.resize(6);
  Value query = operands[0], key = operands[1], value = operands[2],
        state = operands[3], decay = operands[4], beta = operands[5];
  if (!key || !value || !decay || !beta)
    return node.emitError() << "update_rule \"gated_delta\" needs the key, "
                               "value, decay and beta inputs";
  int64_t queryWidth = staticLastDim(query), keyWidth = staticLastDim(key),
          valueWidth = staticLastDim(value);
  for (Value v : {query, key, value, decay, beta}) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || type.getRank() != 3 || !type.getElementType().isF32() ||
        staticLastDim(v) < 0)
      return node.emitError()
             << "query, key, value, decay and beta must be float32 [batch, "
                "sequence, hidden] tensors of a static hidden size, got "
             << v.getType();
  }
  if (queryWidth % queryHeads != 0 || valueWidth % kvHeads != 0)
    return node.emitError()
           << "query width " << queryWidth << " and value width " << valueWidth
           << " are not multiples of q_num_heads " << queryHeads
           << " and kv_num_heads " << kvHeads;
  int64_t keyDim = queryWidth / queryHeads, valueDim = valueWidth / kvHeads;
  if (keyDim == 0 || keyWidth % keyDim != 0 || keyWidth == 0 ||
      kvHeads % (keyWidth / keyDim) != 0)
    return node.emitError()
           << "key width " << keyWidth << " is not a number of heads of size "
           << keyDim << " dividing kv_num_heads " << kvHeads;
  if (staticLastDim(decay) != kvHeads)
    return node.emitError() << "decay must have one gate per head ([batch, "
                               "sequence, "
                            << kvHeads << "]); per key dimension is not "
                            << "supported, got " << decay.getType();
  if (staticLastDim(beta) != kvHeads)
    return node.emitError() << "beta must have one rate per head ([batch, "
                               "sequence, "
                            << kvHeads << "]), got " << beta.getType();
  if (scale == 0.0f)
    scale = 1.0f / std::sqrt(static_cast<float>(keyDim));

  OpEmitter ops(node.getBuilder(), node.getLoc());
  // A first prompt starts from zeros whatever the state input holds.
  if (!state || node.getGraphImporter().getOptions().firstPrompt)
    state = zeros(ops, ops.dim(query, 0), {kvHeads, keyDim, valueDim},
                  node.getBuilder().getF32Type());
  SmallVector<Value> results = ops.emitAll(
      "moe.gated_delta_rule",
      {ops.reshape(query, {0, 0, queryHeads, keyDim}),
       ops.reshape(key, {0, 0, keyWidth / keyDim, keyDim}),
       ops.reshape(value, {0, 0, kvHeads, valueDim}), state, decay, beta},
      {ops.attr("scale", node.getBuilder().getF32FloatAttr(scale))});
  if (ops.failed())
    return failure();
  Value output = ops.reshape(results[0], {0, 0, kvHeads * valueDim});
  if (ops.failed())
    return failure();
  return node.setResults({output, results[1]});
}

LogicalResult importLinearAttentionGate(NodeImporter &node) {
  if (!node.getAttributes().empty())
    return node.emitAttributeError(
               node.getAttributes().begin()->getName().getValue())
           << "is not an attribute of LinearAttentionGate";
  SmallVectorImpl<Value> &operands = node.getOperands();
  operands.resize(4);
  bool wantsBeta =
      node.getNumOutputs() > 1 && !node.getNode().output(1).empty();
  if (wantsBeta && !operands[3])
    return node.emitError() << "output 1 ('beta') needs input 3 ('b')";
  OpEmitter ops(node.getBuilder(), node.getLoc());
  Value decay =
      ops.binary("moe.mul", operands[2],
                 ops.emit("moe.softplus",
                          {ops.binary("moe.add", operands[0], operands[1])}));
  Value beta = wantsBeta ? ops.emit("moe.sigmoid", {operands[3]}) : decay;
  if (ops.failed())
    return failure();
  return node.setResults({decay, beta});
}

LogicalResult importGatedRMSNorm(NodeImporter &node) {
  float epsilon = 1e-5f;
  bool silu = true;
  for (const NamedAttribute &attr : node.getAttributes()) {
    StringRef name = attr.getName().getValue();
    auto asString = dyn_cast<StringAttr>(attr.getValue());
    if (name == "epsilon" && isa<FloatAttr>(attr.getValue())) {
      epsilon = cast<FloatAttr>(attr.getValue()).getValueAsDouble();
      continue;
    }
    if (name == "activation" && asString &&
        (asString == "silu" || asString == "swish" || asString == "sigmoid")) {
      silu = asString != "sigmoid";
      continue;
    }
    return node.emitAttributeError(name)
           << "is not supported (GatedRMSNorm takes epsilon and activation "
              "silu, swish or sigmoid)";
  }
  SmallVectorImpl<Value> &operands = node.getOperands();
  Value input = operands[0], weight = operands[1], gate = operands[2];
  auto inputType = dyn_cast<RankedTensorType>(input.getType());
  auto weightType = dyn_cast<RankedTensorType>(weight.getType());
  if (!inputType || inputType.getRank() < 1 || !weightType ||
      !weightType.hasStaticShape() || weightType.getNumElements() < 1)
    return node.emitError() << "needs a ranked input and a static scale, got "
                            << input.getType() << " and " << weight.getType();
  int64_t groupSize = weightType.getNumElements();
  int64_t width = staticLastDim(input);
  if (width >= 0 && width % groupSize != 0)
    return node.emitError()
           << "input width " << width
           << " is not a multiple of the scale's length " << groupSize;
  OpEmitter ops(node.getBuilder(), node.getLoc());
  // Groups of the scale's length: [..., W] -> [..., W / n, n] and back.
  int64_t rank = inputType.getRank();
  bool grouped = width != groupSize;
  Value rows = input;
  if (grouped) {
    SmallVector<int64_t> shape(rank - 1, 0);
    shape.append({-1, groupSize});
    rows = ops.reshape(input, shape);
  }
  Value scale =
      weightType.getRank() == 1 ? weight : ops.reshape(weight, {groupSize});
  Value norm = ops.emit(
      "moe.simplified_layer_normalization", {rows, scale},
      {ops.i64Attr("axis", -1),
       ops.attr("epsilon", node.getBuilder().getF32FloatAttr(epsilon))});
  if (grouped) {
    SmallVector<int64_t> shape(rank - 1, 0);
    shape.push_back(-1);
    norm = ops.reshape(norm, shape);
  }
  Value activated = ops.emit("moe.sigmoid", {gate});
  if (silu)
    activated = ops.binary("moe.mul", gate, activated);
  Value output = ops.binary("moe.mul", norm, activated);
  if (ops.failed())
    return failure();
  return node.setResults({output});
}

LogicalResult importGatedAdd(NodeImporter &node) {
  if (!node.getAttributes().empty())
    return node.emitAttributeError(
               node.getAttributes().begin()->getName().getValue())
           << "is not an attribute of GatedAdd";
  SmallVectorImpl<Value> &operands = node.getOperands();
  int64_t gateWidth = staticLastDim(operands[2]);
  if (gateWidth != 1)
    return node.emitError() << "gate must have a last dimension of 1, got "
                            << operands[2].getType();
  OpEmitter ops(node.getBuilder(), node.getLoc());
  Value output = ops.binary("moe.add", operands[0],
                            ops.binary("moe.mul", operands[1], operands[2]));
  if (ops.failed())
    return failure();
  return node.setResults({output});
}

} // namespace

void moec::onnx_import::populateContribRecurrentImports(OpImportTable &table) {
  table.onOp("CausalConvWithState", 1, "input, weight, bias?, past_state?",
             importCausalConvWithState, StringRef(""), kMicrosoftDomain);
  table.onOp("LinearAttention", 1,
             "query, key?, value?, past_state?, decay?, beta?",
             importLinearAttention, StringRef(""), kMicrosoftDomain);
  table.onOp("LinearAttentionGate", 1, "a, dt_bias, decay_scale, b?",
             importLinearAttentionGate, StringRef(""), kMicrosoftDomain);
  table.onOp("GatedRMSNorm", 1, "X, scale, gate", importGatedRMSNorm,
             StringRef(""), kMicrosoftDomain);
  table.onOp("GatedAdd", 1, "X, Y, gate", importGatedAdd, StringRef(""),
             kMicrosoftDomain);
}
