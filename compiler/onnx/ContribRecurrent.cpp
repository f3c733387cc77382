//===- ContribRecurrent.cpp - onnxruntime's recurrent-state op imports ----===//
//
// The com.microsoft ops of hybrid layers, whose state is a fixed-size tensor
// replaced each step (a generation plan's state pair) rather than a cache
// that grows:
//
//  * CausalConvWithState (LFM2, Qwen3.5's gated delta layers): a causal
//    depthwise 1-D convolution over [B, C, L] with a [C, 1, K] kernel, whose
//    state [B, C, K - 1] holds the last K - 1 inputs of the previous call
//    (zeros without one). It becomes Concat(state, input) along L, K shifted
//    slices scaled by the kernel's columns and summed, the bias and SiLU
//    (activation "silu"), and the present state as the concatenation's last
//    K - 1 columns.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/Model.h"
#include "compiler/onnx/OpEmitter.h"
#include "compiler/onnx/OpImport.h"

#include "mlir/IR/BuiltinTypes.h"

#include <limits>

using namespace mlir;
using namespace moec;
using namespace moec::onnx_import;

namespace {

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
  if (!past) {
    // No state: the previous inputs are zeros.
    Value shape = ops.concat({ops.unsqueeze(ops.dim(input, 0), {0}),
                              ops.i64Vector({channels, history})},
                             0);
    past = ops.emit(
        "moe.constant_of_shape", {shape},
        {ops.attr("value", DenseElementsAttr::get(
                               RankedTensorType::get(
                                   {1}, node.getBuilder().getF32Type()),
                               0.0f))});
  }
  Value all = ops.concat({past, input}, 2);
  constexpr int64_t kToTheEnd = std::numeric_limits<int64_t>::max();
  Value output;
  for (int64_t k = 0; k < kernel; ++k) {
    // Output position t reads all[t + k]: the slice [k, k + L).
    Value shifted =
        ops.slice(all, k, k == history ? kToTheEnd : k - history, 2);
    Value column = ops.reshape(ops.slice(weight, k, k + 1, 2), {channels, 1});
    Value term = ops.binary("moe.mul", shifted, column);
    output = output ? ops.binary("moe.add", output, term) : term;
  }
  if (bias)
    output = ops.binary("moe.add", output, ops.reshape(bias, {channels, 1}));
  if (silu)
    output = ops.binary("moe.mul", output, ops.emit("moe.sigmoid", {output}));
  // The last K - 1 columns; the reshape states the size the slice of a
  // dynamic length cannot.
  Value present = ops.reshape(history ? ops.slice(all, -history, kToTheEnd, 2)
                                      : ops.slice(all, 0, 0, 2),
                              {0, channels, history});
  if (ops.failed())
    return failure();
  return node.setResults({output, present});
}

} // namespace

void moec::onnx_import::populateContribRecurrentImports(OpImportTable &table) {
  table.onOp("CausalConvWithState", 1, "input, weight, bias?, past_state?",
             importCausalConvWithState, StringRef(""), kMicrosoftDomain);
}
