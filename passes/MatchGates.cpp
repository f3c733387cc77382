//===- MatchGates.cpp - the known router forms ----------------------------===//

#include "passes/MatchGates.h"

#include "passes/MatchSupport.h"
#include "passes/SharedExperts.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <cstring>

using namespace mlir;

namespace moec {

using Failure = std::string;

/// Whether `value` is a single integer constant equal to `expected`.
bool isConstInt(Value value, int64_t expected) {
  std::optional<int64_t> actual = moe::getConstantInt(value);
  return actual && *actual == expected;
}

Value createI64Constant(OpBuilder &builder, Location loc,
                        ArrayRef<int64_t> shape, ArrayRef<int64_t> values) {
  auto type = RankedTensorType::get(shape, builder.getI64Type());
  return moe::ConstantOp::create(builder, loc,
                                 moe::getI64Elements(type, values));
}

/// A ranked type of rank 2 whose second dimension is static `dim1`.
bool isMatrixWithCols(Value value, int64_t dim1) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.getRank() == 2 && type.getDimSize(1) == dim1;
}

/// Strips reshapes between `[n, cols]` matrices: element counts match, so
/// the rows and their contents are unchanged.
Value stripMatrixReshapes(Value value, int64_t cols) {
  while (auto reshape = value.getDefiningOp<moe::ReshapeOp>()) {
    if (!isMatrixWithCols(reshape.getData(), cols) ||
        !isMatrixWithCols(reshape.getOutput(), cols))
      break;
    value = reshape.getData();
  }
  return value;
}

/// Whether `value` is a `constant_of_shape` filled with float zeros.
moe::ConstantOfShapeOp getZeros(Value value) {
  auto zeros = value.getDefiningOp<moe::ConstantOfShapeOp>();
  if (!zeros || !zeros.getValue())
    return nullptr;
  auto fill = dyn_cast<DenseFPElementsAttr>(*zeros.getValue());
  if (!fill || fill.getNumElements() != 1 ||
      !(*fill.getValues<APFloat>().begin()).isZero())
    return nullptr;
  return zeros;
}

bool isZerosShapedLike(Value zeros, Value like) {
  if (auto fill = getZeros(zeros)) {
    auto shape = fill.getInput().getDefiningOp<moe::ShapeOp>();
    return shape && shape.getData() == like && shape.getStart() == 0 &&
           !shape.getEnd();
  }
  auto type = dyn_cast<RankedTensorType>(zeros.getType());
  DenseFPElementsAttr attr;
  return type && type.hasStaticShape() && type == like.getType() &&
         matchPattern(zeros, m_Constant(&attr)) &&
         // A splat is checked once, whatever number of elements it stands
         // for.
         (attr.isSplat()
              ? attr.getSplatValue<APFloat>().isZero()
              : llvm::all_of(attr.getValues<APFloat>(),
                             [](const APFloat &v) { return v.isZero(); }));
}

/// The bytes of a constant, or nullopt where they are not directly readable.
/// `storage` keeps expanded splats alive.
std::optional<ArrayRef<char>> getWeightBytes(moe::ConstantOp constant,
                                             std::vector<char> &storage) {
  auto type = cast<ShapedType>(constant.getType());
  int64_t bytes = type.getNumElements() * type.getElementTypeBitWidth() / 8;
  if (auto resource =
          dyn_cast<DenseResourceElementsAttr>(constant.getValue())) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob || static_cast<int64_t>(blob->getData().size()) != bytes)
      return std::nullopt;
    return blob->getData();
  }
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || type.getElementTypeBitWidth() % 8)
    return std::nullopt;
  ArrayRef<char> raw = dense.getRawData();
  if (!dense.isSplat())
    return raw;
  storage.clear();
  for (int64_t i = 0, e = type.getNumElements(); i < e; ++i)
    storage.insert(storage.end(), raw.begin(), raw.end());
  return ArrayRef<char>(storage);
}

/// The elements of an f32 constant of at most `maxElements` elements (so
/// that probing an operand never copies a weight), or nullopt.
std::optional<SmallVector<float>> getConstantFloats(Value value,
                                                    int64_t maxElements) {
  moe::ConstantOp constant = getWeight(value);
  if (!constant || !constant.getType().getElementType().isF32() ||
      constant.getType().getNumElements() > maxElements)
    return std::nullopt;
  std::vector<char> storage;
  std::optional<ArrayRef<char>> bytes = getWeightBytes(constant, storage);
  if (!bytes)
    return std::nullopt;
  SmallVector<float> floats(bytes->size() / sizeof(float));
  std::memcpy(floats.data(), bytes->data(), floats.size() * sizeof(float));
  return floats;
}

/// Whether `value` is a one-element f32 constant equal to `expected`.
bool isConstFloat(Value value, float expected) {
  std::optional<SmallVector<float>> floats = getConstantFloats(value, 1);
  return floats && floats->size() == 1 && (*floats)[0] == expected;
}

/// Whether the axis attribute `axis` (as stored: a signed value in an
/// unsigned getter) names the last axis of a `rank`-D tensor.
bool isLastAxis(uint64_t axis, int64_t rank) {
  int64_t signedAxis = static_cast<int64_t>(axis);
  return signedAxis == -1 || signedAxis == rank - 1;
}

/// Whether `op` selects the largest entries along the last axis of its
/// `rank`-D input.
bool isLargestOnLastAxis(moe::TopKOp op, int64_t rank) {
  return op.getLargest() == 1 && isLastAxis(op.getAxis(), rank);
}

Value getFillShape(Value value, float fill) {
  if (auto expand = value.getDefiningOp<moe::ExpandOp>())
    return isConstFloat(expand.getInput(), fill) ? expand.getShape() : Value();
  auto constant = value.getDefiningOp<moe::ConstantOfShapeOp>();
  if (!constant)
    return nullptr;
  if (!constant.getValue())
    return fill == 0.0f ? constant.getInput() : Value();
  auto attr = dyn_cast<DenseFPElementsAttr>(*constant.getValue());
  if (!attr || attr.getNumElements() != 1 ||
      (*attr.getValues<APFloat>().begin()).convertToFloat() != fill)
    return nullptr;
  return constant.getInput();
}

/// `where(not(cast(mask)), fill, c)` where `mask` marks the experts of the
/// `topk_group` groups with the largest sum of their two best `c`; the
/// constant `fill` is checked against the choice scores by the caller.
static std::optional<Failure> matchGroupMask(moe::WhereOp where, Value choice,
                                             int64_t numExperts,
                                             KnownGate &gate) {
  auto negate = where.getCondition().getDefiningOp<moe::NotOp>();
  auto toBool =
      negate ? negate.getInput().getDefiningOp<moe::CastOp>() : nullptr;
  std::optional<SmallVector<float>> fill = getConstantFloats(where.getX(), 1);
  if (!toBool || !toBool.getTo().isInteger(1) || !fill || fill->size() != 1)
    return Failure("experts outside the kept groups are not set to a "
                   "constant");
  gate.maskFill = (*fill)[0];
  auto flat = toBool.getInput().getDefiningOp<moe::ReshapeOp>();
  // The repeat is an Expand, or the Tile moe-canonicalize-idioms makes of
  // it.
  Operation *repeat = flat ? flat.getData().getDefiningOp() : nullptr;
  if (!isa_and_nonnull<moe::ExpandOp, moe::TileOp>(repeat))
    repeat = nullptr;
  auto unsqueeze = repeat
                       ? repeat->getOperand(0).getDefiningOp<moe::UnsqueezeOp>()
                       : nullptr;
  if (!unsqueeze || !isMatrixWithCols(flat.getOutput(), numExperts) ||
      !isConstAxes(unsqueeze.getAxes(), {2}, 3))
    return Failure("the expert mask is not the group mask repeated over "
                   "each group's experts");
  auto groupMask = unsqueeze.getData();
  auto groupMaskType = cast<RankedTensorType>(groupMask.getType());
  if (groupMaskType.getRank() != 2 || groupMaskType.isDynamicDim(1))
    return Failure("the group mask is not a [T, n] matrix");
  int64_t nGroup = groupMaskType.getDimSize(1);
  if (nGroup < 1 || numExperts % nGroup || numExperts / nGroup < 2)
    return Failure("the groups do not split E into groups of at least 2");
  int64_t groupSize = numExperts / nGroup;
  SmallVector<int64_t> repeated = {1, nGroup, groupSize};
  if (isa<moe::TileOp>(repeat))
    repeated = {1, 1, groupSize};
  if (moe::getConstantInts(repeat->getOperand(1)) != repeated)
    return Failure("the expert mask is not the group mask repeated over "
                   "each group's experts");

  // mask = scatter_elements(zeros_like(g), top_k(g, m).indices, 1).
  auto scatter = groupMask.getDefiningOp<moe::ScatterElementsOp>();
  Value onesShape =
      scatter ? getFillShape(scatter.getUpdates(), 1.0f) : Value();
  Value zerosShape = scatter ? getFillShape(scatter.getData(), 0.0f) : Value();
  auto groupTopK =
      scatter ? scatter.getIndices().getDefiningOp<moe::TopKOp>() : nullptr;
  if (!onesShape || !zerosShape || !groupTopK ||
      scatter.getIndices() != groupTopK.getIndices() ||
      !isLastAxis(scatter.getAxis(), 2) || scatter.getReduction() != "none")
    return Failure("the group mask is not ones scattered at the top "
                   "groups' indices into zeros");
  // From here on the group top-k, and the top-k within groups feeding it,
  // are part of this gate rather than candidates of their own.
  Value groupScores = groupTopK.getInput();
  auto sum = groupScores.getDefiningOp<moe::ReduceSumOp>();
  auto innerTopK = sum ? sum.getData().getDefiningOp<moe::TopKOp>() : nullptr;
  gate.groupTopKs.push_back(groupTopK);
  if (innerTopK)
    gate.groupTopKs.push_back(innerTopK);
  auto shapeOfScores = zerosShape.getDefiningOp<moe::ShapeOp>();
  std::optional<int64_t> topkGroup = moe::getConstantInt(groupTopK.getK());
  if (!shapeOfScores || shapeOfScores.getData() != groupScores ||
      shapeOfScores.getStart() != 0 || shapeOfScores.getEnd() ||
      !isLargestOnLastAxis(groupTopK, 2) || !topkGroup || *topkGroup < 1 ||
      *topkGroup > nGroup)
    return Failure("the kept groups are not the top-m of the group scores");

  // g = reduce_sum(top_k(reshape(c, [-1, n, E / n]), 2).values, -1).
  auto grouped = innerTopK
                     ? innerTopK.getInput().getDefiningOp<moe::ReshapeOp>()
                     : nullptr;
  if (!grouped || sum.getData() != innerTopK.getValues() ||
      sum.getKeepdims() != 0 || !sum.getAxes() ||
      !isConstAxes(sum.getAxes(), {2}, 3) ||
      !isLargestOnLastAxis(innerTopK, 3) || !isConstInt(innerTopK.getK(), 2) ||
      grouped.getData() != choice ||
      moe::getConstantInts(grouped.getShape()) !=
          SmallVector<int64_t>{-1, nGroup, groupSize})
    return Failure("a group's score is not the sum of its two best "
                   "choice scores");
  gate.nGroup = nGroup;
  gate.topkGroup = *topkGroup;
  return std::nullopt;
}

/// Sigmoid scores `s` chosen by `c = s [+ bias]`, optionally restricted to
/// the best expert groups (DeepSeek-V3).
static std::optional<Failure> matchSigmoidSelection(Value selection,
                                                    KnownGate &gate) {
  const char *notScores = "top-k input is neither a softmax nor sigmoid "
                          "scores with an optional selection bias";
  // DeepSeek-V3's own code masks the groups in [T, n, E / n]: a form
  // moe-canonicalize-experts rewrites where it proves it exact.
  Operation *flat = selection.getDefiningOp();
  if (isa_and_nonnull<moe::FlattenOp, moe::ReshapeOp>(flat))
    if (auto grouped = flat->getOperand(0).getDefiningOp<moe::WhereOp>();
        grouped && getShape(grouped.getOutput()).size() == 3)
      return Failure("grouped selection: the groups of [T, n, E / n] "
                     "scores are masked by a value not proven to be ones "
                     "with zeros at the kept groups, of the tokens' rows");
  Value choice = selection;
  auto where = selection.getDefiningOp<moe::WhereOp>();
  if (where)
    choice = where.getY();
  auto choiceType = dyn_cast<RankedTensorType>(choice.getType());
  if (!choiceType || choiceType.getRank() != 2 || choiceType.isDynamicDim(1))
    return Failure(notScores);
  int64_t numExperts = choiceType.getDimSize(1);
  Value base = choice;
  if (auto add = choice.getDefiningOp<moe::AddOp>()) {
    for (auto [lhs, rhs] : {std::pair{add.getLhs(), add.getRhs()},
                            std::pair{add.getRhs(), add.getLhs()}}) {
      moe::ConstantOp constant = getWeight(rhs);
      auto shape =
          constant ? constant.getType().getShape() : ArrayRef<int64_t>();
      if (!constant || !(shape == ArrayRef<int64_t>{numExperts} ||
                         shape == ArrayRef<int64_t>{1, numExperts}))
        continue;
      std::optional<SmallVector<float>> bias =
          getConstantFloats(rhs, numExperts);
      if (!bias)
        return Failure("the selection bias is not readable f32 data");
      gate.bias = std::move(*bias);
      base = lhs;
      break;
    }
  }
  auto sigmoid =
      stripMatrixReshapes(base, numExperts).getDefiningOp<moe::SigmoidOp>();
  if (!sigmoid)
    return Failure(notScores);
  gate.scores = sigmoid.getOutput();
  gate.logits = sigmoid.getInput();
  gate.score = moe::ScoreFunction::Sigmoid;
  if (!where)
    return std::nullopt;
  if (auto failure = matchGroupMask(where, choice, numExperts, gate))
    return Failure(llvm::formatv("grouped selection: {0}", *failure));
  // Masked experts get the fill value, which excludes them only while it
  // is below every eligible choice score `sigmoid + bias >= bias` (the
  // sigmoid may underflow to 0).
  SmallVector<float> lowest = gate.bias;
  if (lowest.empty())
    lowest.push_back(0.0f);
  if (llvm::any_of(lowest, [&](float b) { return !(b > gate.maskFill); })) {
    char fill[32];
    std::snprintf(fill, sizeof(fill), "%g", gate.maskFill);
    return Failure(llvm::formatv("grouped selection sets masked experts to "
                                 "{0}, not below every selection bias, so "
                                 "they could still be chosen",
                                 fill));
  }
  return std::nullopt;
}

std::optional<Failure> matchGateScores(moe::TopKOp topK, KnownGate &gate) {
  Value selection = topK.getInput();
  if (auto softmax = selection.getDefiningOp<moe::SoftmaxOp>()) {
    int64_t softmaxAxis = static_cast<int64_t>(softmax.getAxis());
    if (softmaxAxis != 1 && softmaxAxis != -1)
      return Failure("softmax or top-k is not over the expert axis");
    gate.scores = softmax.getOutput();
    gate.logits = softmax.getInput();
    gate.score = moe::ScoreFunction::Softmax;
    return std::nullopt;
  }
  // top_k(x @ W [+ b]): the softmax comes after, over the k chosen logits.
  if (isa_and_nonnull<moe::MatMulOp, moe::GemmOp>(selection.getDefiningOp()) ||
      (selection.getDefiningOp<moe::AddOp>() && matchBiasedLinear(selection))) {
    gate.scores = selection;
    gate.logits = selection;
    gate.score = moe::ScoreFunction::Softmax;
    gate.afterTopK = true;
    return std::nullopt;
  }
  return matchSigmoidSelection(selection, gate);
}

std::optional<Failure> matchGateWeights(Value gathered, moe::TopKOp topK,
                                        KnownGate &gate) {
  Value chosen = gathered;
  if (auto mul = chosen.getDefiningOp<moe::MulOp>()) {
    for (auto [lhs, rhs] : {std::pair{mul.getLhs(), mul.getRhs()},
                            std::pair{mul.getRhs(), mul.getLhs()}}) {
      std::optional<SmallVector<float>> factor = getConstantFloats(rhs, 1);
      if (!factor || factor->size() != 1 || !((*factor)[0] > 0.0f) ||
          !std::isfinite((*factor)[0]))
        continue;
      gate.scale = (*factor)[0];
      chosen = lhs;
      break;
    }
  }
  if (auto div = chosen.getDefiningOp<moe::DivOp>()) {
    Value denominator = div.getRhs();
    // The router adds the same 1e-20 (see moe.router).
    if (auto add = denominator.getDefiningOp<moe::AddOp>()) {
      if (isConstFloat(add.getRhs(), 1e-20f))
        denominator = add.getLhs();
      else if (isConstFloat(add.getLhs(), 1e-20f))
        denominator = add.getRhs();
    }
    auto sum = denominator.getDefiningOp<moe::ReduceSumOp>();
    if (!sum || sum.getData() != div.getLhs() || sum.getKeepdims() != 1 ||
        !sum.getAxes() || !isConstAxes(sum.getAxes(), {1}, 2))
      return Failure("routing weights are neither the top-k scores nor "
                     "their renormalisation over k");
    gate.normalize = true;
    chosen = div.getLhs();
  }
  if (gate.afterTopK) {
    // softmax(top_k(logits).values) over k (a renormalisation of it, which
    // sums to 1 already, changes nothing the router does not also do).
    auto softmax = chosen.getDefiningOp<moe::SoftmaxOp>();
    if (!softmax || softmax.getInput() != topK.getValues() ||
        !isLastAxis(softmax.getAxis(), 2))
      return Failure("routing weights are not the softmax of the top-k "
                     "logits over k");
    return std::nullopt;
  }
  bool isTopKValues =
      chosen == topK.getValues() && topK.getInput() == gate.scores;
  auto gatherScores = chosen.getDefiningOp<moe::GatherElementsOp>();
  bool isGatheredScores = gatherScores &&
                          gatherScores.getData() == gate.scores &&
                          gatherScores.getIndices() == topK.getIndices() &&
                          isLastAxis(gatherScores.getAxis(), 2);
  if (!isTopKValues && !isGatheredScores)
    return Failure("routing weights are neither the top-k scores nor "
                   "their renormalisation over k");
  return std::nullopt;
}

} // namespace moec
