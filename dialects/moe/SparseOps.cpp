//===- SparseOps.cpp - sparse Mixture-of-Experts ops ----------------------===//
//
// Type inference and verifiers of the router, dispatch, experts, combine,
// shared_expert and all_to_all ops.
//
// Inference is deliberately lenient: it derives result types from whatever
// ranked operands it is given (sizes it cannot know become `?`) and fails only
// on operands that are not ranked tensors. Builders therefore never abort on
// inconsistent operands, and the verifiers, which run after the inferred types
// were checked, report every inconsistency with a message that names the
// operand, the expected shape and what it got.
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <cmath>
#include <limits>
#include <string>

using namespace mlir;
using namespace moec::moe;

namespace {

constexpr int64_t kDynamic = ShapedType::kDynamic;

/// Dimension `index` of `type`, or dynamic when the type is too short.
int64_t dimOrDynamic(RankedTensorType type, int64_t index) {
  return type && index < type.getRank() ? type.getDimSize(index) : kDynamic;
}

/// `lhs * rhs`, or dynamic when either is dynamic or the product overflows.
int64_t mulSizes(int64_t lhs, int64_t rhs) {
  if (ShapedType::isDynamic(lhs) || ShapedType::isDynamic(rhs))
    return kDynamic;
  std::optional<int64_t> product = llvm::checkedMul(lhs, rhs);
  return product ? *product : kDynamic;
}

/// `attr + offset` as a tensor size, or dynamic when the attribute is absent
/// or would not make a valid size (the verifier rejects those values).
int64_t sizeFromAttr(IntegerAttr attr, int64_t offset = 0) {
  if (!attr)
    return kDynamic;
  int64_t value = attr.getInt();
  if (value < 0 || value > std::numeric_limits<int64_t>::max() - offset)
    return kDynamic;
  return value + offset;
}

/// Fails with a diagnostic at `location` when an operand is not a ranked
/// tensor: the only input inference cannot derive results from.
LogicalResult requireRanked(std::optional<Location> location, StringRef opName,
                            ValueRange operands) {
  for (Value operand : operands)
    if (operand && !isa<RankedTensorType>(operand.getType()))
      return emitOptionalError(location, "'", opName,
                               "' op expects ranked tensor operands, got ",
                               operand.getType());
  return success();
}

/// Checks that `value` has the rank of `expected` and sizes that agree with
/// it (dynamic entries match anything); `meaning` names the dimensions, as in
/// "[E, F, H] with layout in_out".
LogicalResult checkShape(Operation *op, StringRef name, Value value,
                         ArrayRef<int64_t> expected, StringRef meaning) {
  auto type = cast<RankedTensorType>(value.getType());
  if (succeeded(verifyCompatibleShape(type.getShape(), expected)))
    return success();
  return op->emitOpError("expects ")
         << name << " of shape " << formatShape(expected) << " (" << meaning
         << "), got " << type;
}

/// Checks that `value` has rank `rank`; `meaning` names the dimensions.
LogicalResult checkRank(Operation *op, StringRef name, Value value,
                        int64_t rank, StringRef meaning) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() == rank)
    return success();
  return op->emitOpError("expects ")
         << name << " of rank " << rank << " (" << meaning << "), got " << type;
}

/// Checks that `value` holds `elementType`, the element type of `reference`.
LogicalResult checkElementType(Operation *op, StringRef name, Value value,
                               Type elementType, StringRef reference) {
  Type actual = cast<RankedTensorType>(value.getType()).getElementType();
  if (actual == elementType)
    return success();
  return op->emitOpError("expects ")
         << name << " to have the element type of " << reference << " ("
         << elementType << "), got " << actual;
}

/// One result of the type of `operand` (ranked operands only).
LogicalResult inferTypeOf(std::optional<Location> location, StringRef opName,
                          ValueRange operands, Value operand,
                          SmallVectorImpl<Type> &types) {
  if (failed(requireRanked(location, opName, operands)))
    return failure();
  types.push_back(operand.getType());
  return success();
}

/// Fails unless `values` are non-negative, each at most once.
LogicalResult checkDistinct(Operation *op, StringRef name,
                            ArrayRef<int64_t> values) {
  llvm::SmallDenseSet<int64_t> seen;
  for (int64_t value : values) {
    if (value < 0)
      return op->emitOpError("expects non-negative ")
             << name << ", got " << value;
    if (!seen.insert(value).second)
      return op->emitOpError("expects distinct ")
             << name << ", got " << value << " twice";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Expert networks (shared by moe.experts and moe.shared_expert)
//===----------------------------------------------------------------------===//

/// Whether `op`'s w1 holds both the gate and the up projection.
template <typename OpTy> bool hasFusedGateUp(OpTy op) {
  return ExpertsOp::isGated(op.getActivation()) && !op.getW3();
}

/// The output size of `op`'s w1 (F, or 2F when fused), whose weights have
/// `lead` leading expert dimensions.
template <typename OpTy> int64_t getW1OutSize(OpTy op, int64_t lead) {
  bool inOut = op.getWeightLayout() == WeightLayout::InOut;
  return cast<RankedTensorType>(op.getW1().getType())
      .getDimSize(lead + (inOut ? 1 : 0));
}

/// F, the intermediate size of `op`'s network.
template <typename OpTy> int64_t getFfnInterSize(OpTy op, int64_t lead) {
  int64_t w1Out = getW1OutSize(op, lead);
  return hasFusedGateUp(op) && !ShapedType::isDynamic(w1Out) ? w1Out / 2
                                                             : w1Out;
}

/// Verifies the weights and attributes of an expert network applied to rows
/// of size `hidden`. Routed experts (`lead` = 1) carry a leading expert
/// dimension on every weight and bias.
template <typename OpTy>
LogicalResult verifyFfn(OpTy op, int64_t lead, int64_t hidden) {
  Operation *operation = op.getOperation();
  Activation activation = op.getActivation();

  // Activation parameters exist only where the formula uses them.
  if (activation == Activation::ClampedSwiglu) {
    if (!op.getAlphaAttr() || !op.getBetaAttr())
      return op.emitOpError(
          "activation clamped_swiglu needs `alpha` and `beta`");
    if (FloatAttr limit = op.getLimitAttr();
        limit && !(limit.getValueAsDouble() > 0.0))
      return op.emitOpError("expects a positive `limit`, got ")
             << limit.getValueAsDouble();
  } else {
    for (auto [name, attr] : {std::pair{"alpha", op.getAlphaAttr()},
                              std::pair{"beta", op.getBetaAttr()},
                              std::pair{"limit", op.getLimitAttr()}})
      if (attr)
        return op.emitOpError("`")
               << name << "` applies only to activation clamped_swiglu, not "
               << stringifyActivation(activation);
  }

  // Gate and up projections: separate (w1 and w3) or fused into w1.
  if (op.getW3() && !ExpertsOp::isGated(activation))
    return op.emitOpError("w3 (a separate up projection) needs a gated "
                          "activation, not ")
           << stringifyActivation(activation);
  if (op.getB3() && !op.getW3())
    return op.emitOpError("b3 needs w3");
  bool fused = hasFusedGateUp(op);
  if (fused && !op.getGluLayoutAttr())
    return op.emitOpError("a fused gate/up projection (a gated activation "
                          "without w3) needs `glu concatenated` or `glu "
                          "interleaved`");
  if (!fused && op.getGluLayoutAttr())
    return op.emitOpError("`glu` applies only to a fused gate/up projection "
                          "(a gated activation without w3)");

  Type elementType = op.getTokens().getType().getElementType();
  std::pair<StringRef, Value> weights[] = {
      {"w1", op.getW1()}, {"w3", op.getW3()}, {"w2", op.getW2()}};
  std::pair<StringRef, Value> biases[] = {
      {"b1", op.getB1()}, {"b3", op.getB3()}, {"b2", op.getB2()}};
  StringRef weightMeaning =
      lead ? "an expert dimension and a matrix" : "a matrix";
  StringRef biasMeaning =
      lead ? "an expert dimension and a vector" : "a vector";
  for (auto [name, value] : weights) {
    if (value &&
        (failed(checkRank(operation, name, value, lead + 2, weightMeaning)) ||
         failed(checkElementType(operation, name, value, elementType,
                                 "the tokens"))))
      return failure();
  }
  for (auto [name, value] : biases) {
    if (value &&
        (failed(checkRank(operation, name, value, lead + 1, biasMeaning)) ||
         failed(checkElementType(operation, name, value, elementType,
                                 "the tokens"))))
      return failure();
  }

  // The projections chain H -> F (2F fused) -> H in the declared layout, with
  // the expert count of w1 on every operand.
  auto w1Type = cast<RankedTensorType>(op.getW1().getType());
  SmallVector<int64_t> experts;
  if (lead) {
    experts.push_back(w1Type.getDimSize(0));
    if (experts.front() == 0)
      return op.emitOpError("expects at least one expert, got w1 of type ")
             << w1Type;
  }
  int64_t w1Out = getW1OutSize(op, lead);
  if (fused && !ShapedType::isDynamic(w1Out) && w1Out % 2 != 0)
    return op.emitOpError("expects the fused gate/up projection w1 to have an "
                          "even output size (2F), got ")
           << w1Out;
  int64_t inter = getFfnInterSize(op, lead);

  bool inOut = op.getWeightLayout() == WeightLayout::InOut;
  std::string layoutName = stringifyWeightLayout(op.getWeightLayout()).str();
  std::string prefix = lead ? "E, " : "";
  auto matrix = [&](int64_t in, int64_t out) {
    SmallVector<int64_t> shape(experts);
    shape.append(inOut ? std::initializer_list<int64_t>{in, out}
                       : std::initializer_list<int64_t>{out, in});
    return shape;
  };
  auto matrixMeaning = [&](StringRef in, StringRef out) {
    return "[" + prefix + (inOut ? in + ", " + out : out + ", " + in).str() +
           "] with layout " + layoutName;
  };
  auto vector = [&](int64_t size) {
    SmallVector<int64_t> shape(experts);
    shape.push_back(size);
    return shape;
  };
  auto vectorMeaning = [&](StringRef size) {
    return "[" + prefix + size.str() + "]";
  };
  StringRef w1Name = fused ? "2F" : "F";
  if (failed(checkShape(operation, "w1", op.getW1(), matrix(hidden, w1Out),
                        matrixMeaning("H", w1Name))))
    return failure();
  if (op.getW3() &&
      failed(checkShape(operation, "w3", op.getW3(), matrix(hidden, inter),
                        matrixMeaning("H", "F"))))
    return failure();
  if (failed(checkShape(operation, "w2", op.getW2(), matrix(inter, hidden),
                        matrixMeaning("F", "H"))))
    return failure();
  if (op.getB1() && failed(checkShape(operation, "b1", op.getB1(),
                                      vector(w1Out), vectorMeaning(w1Name))))
    return failure();
  if (op.getB3() && failed(checkShape(operation, "b3", op.getB3(),
                                      vector(inter), vectorMeaning("F"))))
    return failure();
  if (op.getB2() && failed(checkShape(operation, "b2", op.getB2(),
                                      vector(hidden), vectorMeaning("H"))))
    return failure();
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// RouterOp
//===----------------------------------------------------------------------===//

LogicalResult RouterOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  if (failed(
          requireRanked(location, getOperationName(), adaptor.getOperands())))
    return failure();
  auto logits = cast<RankedTensorType>(adaptor.getLogits().getType());
  // [..., E] -> [..., k]; the verifier rejects ranks other than 2 and 3.
  SmallVector<int64_t> shape(logits.getShape());
  int64_t topK = sizeFromAttr(adaptor.getTopKAttr());
  if (shape.empty())
    shape.push_back(topK);
  else
    shape.back() = topK;
  types.push_back(RankedTensorType::get(shape, logits.getElementType()));
  types.push_back(RankedTensorType::get(shape, IntegerType::get(context, 64)));
  return success();
}

LogicalResult RouterOp::verify() {
  RankedTensorType logits = getLogits().getType();
  if (logits.getRank() != 2 && logits.getRank() != 3)
    return emitOpError("expects logits of rank 2 ([tokens, experts]) or 3 "
                       "([batch, sequence, experts]), got ")
           << logits;
  int64_t numExperts = logits.getShape().back();
  if (ShapedType::isDynamic(numExperts))
    return emitOpError("expects a static number of experts (the last logits "
                       "dimension), got ")
           << logits;
  int64_t topK = getTopKAttr().getInt();
  if (topK < 1 || topK > numExperts)
    return emitOpError("expects top_k in [1, ")
           << numExperts << "] (the number of experts), got " << topK;

  if (getBias()) {
    if (failed(checkShape(*this, "bias", getBias(), {numExperts}, "[E]")) ||
        failed(checkElementType(*this, "bias", getBias(),
                                logits.getElementType(), "the logits")))
      return failure();
  }

  int64_t numGroups = getNGroupAttr().getInt();
  int64_t keptGroups = getTopkGroupAttr().getInt();
  if (numGroups < 1 || numExperts % numGroups != 0)
    return emitOpError("expects the group count to divide the ")
           << numExperts << " experts, got " << numGroups;
  if (keptGroups < 1 || keptGroups > numGroups)
    return emitOpError("expects the kept group count in [1, ")
           << numGroups << "] (the group count), got " << keptGroups;
  if (numGroups > 1) {
    int64_t groupSize = numExperts / numGroups;
    // A group's score is the sum of its two best experts.
    if (groupSize < 2)
      return emitOpError("expects groups of at least 2 experts (a group "
                         "scores by its top two), got ")
             << numGroups << " groups of " << groupSize;
    if (keptGroups * groupSize < topK)
      return emitOpError("expects the ")
             << keptGroups << " kept groups of " << groupSize
             << " experts to hold at least top_k = " << topK << " experts";
  }

  if (getScoreAfterTopk()) {
    if (getScoreFunction() != ScoreFunction::Softmax)
      return emitOpError("`after_topk` needs softmax scores: sigmoid is "
                         "elementwise, so its order with top-k is moot");
    if (getNormalize())
      return emitOpError("`normalize` is redundant with `after_topk`: the "
                         "softmax over the chosen logits already sums to one");
  }

  double scale = getRoutedScalingFactorAttr().getValueAsDouble();
  if (!(scale > 0.0) || !std::isfinite(scale))
    return emitOpError("expects a positive finite routed_scaling_factor, got ")
           << scale;
  if (IntegerAttr capacity = getCapacityAttr();
      capacity && capacity.getInt() < 1)
    return emitOpError("expects a positive capacity, got ")
           << capacity.getInt();
  if (FloatAttr kept = getNormalizeKeptAttr()) {
    double epsilon = kept.getValueAsDouble();
    if (!(epsilon > 0.0) || !std::isfinite(epsilon))
      return emitOpError("expects a positive finite normalize_kept epsilon, "
                         "got ")
             << epsilon;
    // The renormalisation is over the assignments capacity kept.
    if (!getCapacityAttr())
      return emitOpError("`normalize_kept` needs a `capacity`: it "
                         "renormalises over the assignments capacity kept");
    if (getNormalize())
      return emitOpError("`normalize` and `normalize_kept` would divide the "
                         "weights twice");
    if (scale != 1.0)
      return emitOpError("`normalize_kept` needs scale 1: the scale would "
                         "come before the renormalisation");
  }
  return success();
}

//===----------------------------------------------------------------------===//
// DispatchOp
//===----------------------------------------------------------------------===//

LogicalResult DispatchOp::inferReturnTypes(MLIRContext *context,
                                           std::optional<Location> location,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  if (failed(
          requireRanked(location, getOperationName(), adaptor.getOperands())))
    return failure();
  auto tokens = cast<RankedTensorType>(adaptor.getTokens().getType());
  auto indices = cast<RankedTensorType>(adaptor.getIndices().getType());
  Type i64 = IntegerType::get(context, 64);
  int64_t rows = mulSizes(dimOrDynamic(tokens, 0), dimOrDynamic(indices, 1));
  types.push_back(RankedTensorType::get({rows, dimOrDynamic(tokens, 1)},
                                        tokens.getElementType()));
  types.push_back(RankedTensorType::get(
      {sizeFromAttr(adaptor.getNumExpertsAttr(), 1)}, i64));
  types.push_back(RankedTensorType::get({rows}, i64));
  return success();
}

LogicalResult DispatchOp::verify() {
  if (failed(checkRank(*this, "tokens", getTokens(), 2, "[T, H]")) ||
      failed(checkRank(*this, "indices", getIndices(), 2, "[T, k]")))
    return failure();
  int64_t numTokens = getTokens().getType().getDimSize(0);
  if (failed(checkShape(*this, "indices", getIndices(),
                        {numTokens, getIndices().getType().getDimSize(1)},
                        "[T, k], T from the tokens")))
    return failure();
  if (getNumExpertsAttr().getInt() < 1)
    return emitOpError("expects at least one expert, got num_experts = ")
           << getNumExpertsAttr().getInt();
  return success();
}

//===----------------------------------------------------------------------===//
// ExpertsOp
//===----------------------------------------------------------------------===//

bool ExpertsOp::isGated(Activation activation) {
  switch (activation) {
  case Activation::SiluGlu:
  case Activation::GeluGlu:
  case Activation::GeluTanhGlu:
  case Activation::ClampedSwiglu:
    return true;
  case Activation::Relu:
  case Activation::ReluSquared:
  case Activation::Gelu:
  case Activation::GeluTanh:
  case Activation::Silu:
  case Activation::Identity:
    return false;
  }
  llvm_unreachable("unknown activation");
}

int64_t ExpertsOp::getInterSize() { return getFfnInterSize(*this, 1); }

LogicalResult ExpertsOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferTypeOf(location, getOperationName(), adaptor.getOperands(),
                     adaptor.getTokens(), types);
}

LogicalResult ExpertsOp::verify() {
  if (failed(checkRank(*this, "tokens", getTokens(), 2, "[N, H]")) ||
      failed(checkRank(*this, "offsets", getOffsets(), 1, "[E + 1]")))
    return failure();
  if (failed(verifyFfn(*this, /*lead=*/1, getTokens().getType().getDimSize(1))))
    return failure();
  int64_t numExperts = getW1().getType().getDimSize(0);
  return checkShape(
      *this, "offsets", getOffsets(),
      {ShapedType::isDynamic(numExperts) ? kDynamic : numExperts + 1},
      "[E + 1], E from the weights");
}

//===----------------------------------------------------------------------===//
// CombineOp
//===----------------------------------------------------------------------===//

LogicalResult CombineOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  if (failed(
          requireRanked(location, getOperationName(), adaptor.getOperands())))
    return failure();
  auto outputs = cast<RankedTensorType>(adaptor.getExpertOutputs().getType());
  auto weights = cast<RankedTensorType>(adaptor.getWeights().getType());
  types.push_back(RankedTensorType::get(
      {dimOrDynamic(weights, 0), dimOrDynamic(outputs, 1)},
      outputs.getElementType()));
  return success();
}

LogicalResult CombineOp::verify() {
  if (failed(checkRank(*this, "expert_outputs", getExpertOutputs(), 2,
                       "[N, H]")) ||
      failed(checkRank(*this, "source", getSource(), 1, "[N]")) ||
      failed(checkRank(*this, "weights", getWeights(), 2, "[T, k]")))
    return failure();
  RankedTensorType outputs = getExpertOutputs().getType();
  RankedTensorType weights = getWeights().getType();
  if (failed(checkShape(*this, "source", getSource(), {outputs.getDimSize(0)},
                        "[N], N from the expert outputs")))
    return failure();
  if (static_cast<bool>(getPassthrough()) != static_cast<bool>(getIndices()))
    return emitOpError("expects `passthrough` and `indices` together: "
                       "dropped assignments are found through the indices");
  if (!getPassthrough())
    return success();
  if (failed(checkShape(*this, "passthrough", getPassthrough(),
                        {weights.getDimSize(0), outputs.getDimSize(1)},
                        "[T, H], T from the weights, H from the expert "
                        "outputs")) ||
      failed(checkElementType(*this, "passthrough", getPassthrough(),
                              outputs.getElementType(), "the expert outputs")))
    return failure();
  return checkShape(*this, "indices", getIndices(),
                    {weights.getDimSize(0), weights.getDimSize(1)},
                    "[T, k], as the weights");
}

//===----------------------------------------------------------------------===//
// SharedExpertOp
//===----------------------------------------------------------------------===//

int64_t SharedExpertOp::getInterSize() { return getFfnInterSize(*this, 0); }

LogicalResult SharedExpertOp::inferReturnTypes(MLIRContext *,
                                               std::optional<Location> location,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  return inferTypeOf(location, getOperationName(), adaptor.getOperands(),
                     adaptor.getTokens(), types);
}

LogicalResult SharedExpertOp::verify() {
  if (failed(checkRank(*this, "tokens", getTokens(), 2, "[T, H]")))
    return failure();
  int64_t hidden = getTokens().getType().getDimSize(1);
  if (failed(verifyFfn(*this, /*lead=*/0, hidden)))
    return failure();
  Value gate = getGate();
  if (!gate)
    return success();
  if (failed(checkElementType(*this, "gate", gate,
                              getTokens().getType().getElementType(),
                              "the tokens")))
    return failure();
  // [H], [H, 1] and [1, H] hold the same vector in the same memory.
  ArrayRef<int64_t> shape = cast<RankedTensorType>(gate.getType()).getShape();
  SmallVector<int64_t> vectorShapes[] = {{hidden}, {hidden, 1}, {1, hidden}};
  if (llvm::none_of(vectorShapes, [&](ArrayRef<int64_t> vectorShape) {
        return succeeded(verifyCompatibleShape(shape, vectorShape));
      }))
    return emitOpError("expects gate of shape [H], [H, 1] or [1, H] with H = ")
           << (ShapedType::isDynamic(hidden) ? std::string("?")
                                             : std::to_string(hidden))
           << ", got " << gate.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// AllToAllOp
//===----------------------------------------------------------------------===//

namespace {

/// The result types of an all-to-all exchange (moe.all_to_all and
/// moe.all_to_all_start).
template <typename AdaptorT>
LogicalResult inferAllToAllTypes(MLIRContext *context,
                                 std::optional<Location> location,
                                 StringRef opName, AdaptorT adaptor,
                                 SmallVectorImpl<Type> &types) {
  if (failed(requireRanked(location, opName, adaptor.getOperands())))
    return failure();
  auto data = cast<RankedTensorType>(adaptor.getData().getType());
  int64_t numDevices = sizeFromAttr(adaptor.getNumDevicesAttr());
  SmallVector<int64_t> shape(data.getShape());
  if (!shape.empty()) {
    if (Value like = adaptor.getRowsLike())
      shape.front() = dimOrDynamic(cast<RankedTensorType>(like.getType()), 0);
    else
      // Every device may send all of its rows to this one.
      shape.front() = mulSizes(shape.front(), numDevices);
  }
  types.push_back(RankedTensorType::get(shape, data.getElementType()));
  types.push_back(
      RankedTensorType::get({numDevices}, IntegerType::get(context, 64)));
  return success();
}

/// The verifier of moe.all_to_all and moe.all_to_all_start.
template <typename OpTy> LogicalResult verifyAllToAll(OpTy op) {
  RankedTensorType data = op.getData().getType();
  if (data.getRank() < 1)
    return op.emitOpError("expects data with a leading row dimension, got ")
           << data;
  int64_t numDevices = op.getNumDevicesAttr().getInt();
  if (numDevices < 1)
    return op.emitOpError("expects at least one device, got num_devices = ")
           << numDevices;
  if (op.getGroup().empty())
    return op.emitOpError("expects a non-empty device group name");
  if (Value like = op.getRowsLike())
    if (cast<RankedTensorType>(like.getType()).getRank() < 1)
      return op.emitOpError("expects `like` to have a leading row dimension, "
                            "got ")
             << like.getType();
  return checkShape(op, "send_counts", op.getSendCounts(), {numDevices},
                    "[num_devices]");
}

} // namespace

LogicalResult AllToAllOp::inferReturnTypes(MLIRContext *context,
                                           std::optional<Location> location,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  return inferAllToAllTypes(context, location, getOperationName(), adaptor,
                            types);
}

LogicalResult AllToAllOp::verify() { return verifyAllToAll(*this); }

//===----------------------------------------------------------------------===//
// AllToAllStartOp / AllToAllWaitOp
//===----------------------------------------------------------------------===//

LogicalResult AllToAllStartOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  return inferAllToAllTypes(context, location, getOperationName(), adaptor,
                            types);
}

LogicalResult AllToAllStartOp::verify() {
  if (failed(verifyAllToAll(*this)))
    return failure();
  // Exactly one wait completes the exchange; a second would wait for an
  // exchange that is no longer in flight, none would leave it running.
  int waits = llvm::count_if(getReceived().getUsers(), [](Operation *user) {
    return isa<AllToAllWaitOp>(user);
  });
  if (waits != 1)
    return emitOpError("expects exactly one moe.all_to_all_wait on its "
                       "received rows, found ")
           << waits;
  return success();
}

LogicalResult AllToAllWaitOp::verify() {
  auto start = getReceived().getDefiningOp<AllToAllStartOp>();
  if (!start || start.getRecvCounts() != getRecvCounts())
    return emitOpError("expects `received` and `recv_counts` to be the "
                       "results of one moe.all_to_all_start");
  if (start.getData() != getData() ||
      start.getSendCounts() != getSendCounts() ||
      start.getRowsLike() != getRowsLike())
    return emitOpError("expects `data`, `send_counts` and `like` to be the "
                       "operands of the moe.all_to_all_start it completes");
  if (start->getBlock() != (*this)->getBlock() ||
      !start->isBeforeInBlock(*this))
    return emitOpError("expects to follow its moe.all_to_all_start in the "
                       "same block");
  return success();
}

//===----------------------------------------------------------------------===//
// AssignSlotsOp
//===----------------------------------------------------------------------===//

LogicalResult AssignSlotsOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> location,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  return inferTypeOf(location, getOperationName(), adaptor.getOperands(),
                     adaptor.getIndices(), types);
}

LogicalResult AssignSlotsOp::verify() {
  if (failed(checkRank(*this, "indices", getIndices(), 2, "[T, k]")))
    return failure();
  ArrayRef<int64_t> offsets = getExpertSlotOffsets();
  ArrayRef<int64_t> slots = getExpertSlots();
  if (offsets.size() < 2 || offsets.front() != 0)
    return emitOpError("expects expert_slot_offsets of E + 1 >= 2 entries "
                       "starting at 0");
  for (size_t e = 0; e + 1 < offsets.size(); ++e)
    if (offsets[e + 1] <= offsets[e])
      return emitOpError("expects every expert to have a slot, but expert ")
             << e << " has " << offsets[e + 1] - offsets[e];
  if (offsets.back() != static_cast<int64_t>(slots.size()))
    return emitOpError("expects expert_slot_offsets to end at the number of "
                       "slots (")
           << slots.size() << "), got " << offsets.back();
  return checkDistinct(*this, "expert_slots", slots);
}

//===----------------------------------------------------------------------===//
// RegroupOp / UngroupOp
//===----------------------------------------------------------------------===//

LogicalResult RegroupOp::inferReturnTypes(MLIRContext *context,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  if (failed(
          requireRanked(location, getOperationName(), adaptor.getOperands())))
    return failure();
  auto received = cast<RankedTensorType>(adaptor.getReceived().getType());
  Type i64 = IntegerType::get(context, 64);
  types.push_back(received);
  types.push_back(
      RankedTensorType::get({sizeFromAttr(adaptor.getNumSlotsAttr(), 1)}, i64));
  types.push_back(RankedTensorType::get({dimOrDynamic(received, 0)}, i64));
  return success();
}

LogicalResult RegroupOp::verify() {
  if (failed(checkRank(*this, "received", getReceived(), 2, "[R, H]")))
    return failure();
  int64_t sources = getNumSourcesAttr().getInt();
  int64_t slots = getNumSlotsAttr().getInt();
  if (sources < 1 || slots < 1)
    return emitOpError("expects at least one source and one slot, got ")
           << sources << " and " << slots;
  return checkShape(*this, "slot_counts", getSlotCounts(),
                    {mulSizes(sources, slots)}, "[num_sources * num_slots]");
}

LogicalResult UngroupOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferTypeOf(location, getOperationName(), adaptor.getOperands(),
                     adaptor.getGroupedOut(), types);
}

LogicalResult UngroupOp::verify() {
  if (failed(checkRank(*this, "grouped_out", getGroupedOut(), 2, "[R, H]")))
    return failure();
  return checkShape(*this, "perm", getPerm(),
                    {getGroupedOut().getType().getDimSize(0)},
                    "[R], R from grouped_out");
}

//===----------------------------------------------------------------------===//
// ShardOp
//===----------------------------------------------------------------------===//

LogicalResult ShardOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  if (failed(
          requireRanked(location, getOperationName(), adaptor.getOperands())))
    return failure();
  auto weight = cast<RankedTensorType>(adaptor.getWeight().getType());
  SmallVector<int64_t> shape(weight.getShape());
  if (!shape.empty())
    shape.front() = static_cast<int64_t>(adaptor.getRows().size());
  types.push_back(RankedTensorType::get(shape, weight.getElementType()));
  return success();
}

LogicalResult ShardOp::verify() {
  RankedTensorType weight = getWeight().getType();
  if (weight.getRank() < 1 || weight.isDynamicDim(0))
    return emitOpError("expects a weight with a static leading dimension, "
                       "got ")
           << weight;
  Operation *def = getWeight().getDefiningOp();
  auto stack = dyn_cast_or_null<StackOp>(def);
  if (!isa_and_nonnull<ConstantOp>(def) && !(stack && stack.isWeight()))
    return emitOpError("expects a constant weight (moe.constant or a "
                       "moe.stack of constants)");
  if (getRows().empty())
    return emitOpError("expects at least one row");
  for (int64_t row : getRows())
    if (row < 0 || row >= weight.getDimSize(0))
      return emitOpError("expects rows in [0, ")
             << weight.getDimSize(0) << "), got " << row;
  return checkDistinct(*this, "rows", getRows());
}

//===----------------------------------------------------------------------===//
// SegmentOp
//===----------------------------------------------------------------------===//

LogicalResult SegmentOp::inferReturnTypes(MLIRContext *context,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  if (failed(
          requireRanked(location, getOperationName(), adaptor.getOperands())))
    return failure();
  auto fallback = cast<RankedTensorType>(adaptor.getFallback().getType());
  types.push_back(RankedTensorType::get({dimOrDynamic(fallback, 0)},
                                        IntegerType::get(context, 64)));
  return success();
}

LogicalResult SegmentOp::verify() {
  if (failed(checkRank(*this, "ids", getIds(), 1, "[N] sorted expert ids")) ||
      failed(checkRank(*this, "fallback", getFallback(), 1,
                       "the segment's positions")))
    return failure();
  if (getExpertAttr().getInt() < 0)
    return emitOpError("expects a non-negative expert, got ")
           << getExpertAttr().getInt();
  int64_t length = getFallback().getType().getDimSize(0);
  int64_t rows = getIds().getType().getDimSize(0);
  if (!ShapedType::isDynamic(length) && !ShapedType::isDynamic(rows) &&
      length > rows)
    return emitOpError("expects a segment of at most the ")
           << rows << " sorted rows, got " << length << " positions";
  return success();
}
