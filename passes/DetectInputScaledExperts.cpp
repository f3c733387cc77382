//===- DetectInputScaledExperts.cpp - Llama4's MoE form to sparse ops -----===//
//
// Recognises the MoE form of Llama4 (transformers v5): every expert runs on
// every token, the token scaled *before* the expert by its router score,
// which is zero for the experts the token was not routed to:
//
//   s   = sigmoid(scatter(-inf everywhere, top_k(logits, 1)))      [T, E]
//   out = sum_e FFN_e(x * s[:, e])
//
// With one expert per token and expert networks without biases (so that
// `FFN_e(0) = 0` exactly: SwiGLU and the clamped SwiGLU both give 0), every
// term but the chosen expert's is zero and
//
//   out[t] = FFN_{i_t}(x[t] * s[t, i_t])
//
// which is moe.dispatch of the scaled tokens `x * gather(s, i)`, the chosen
// expert, and moe.combine with unit weights. The gate stays as the graph
// computes it (its scores scale the input, which no moe.router describes).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchFfn.h"
#include "passes/MatchGates.h"
#include "passes/MatchSupport.h"
#include "passes/NearMiss.h"
#include "passes/SharedExperts.h"

#include "mlir/IR/BuiltinTypes.h"

#include <cmath>

namespace moec {
#define GEN_PASS_DEF_MOEDETECTINPUTSCALEDEXPERTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// Why a match failed: the message of the remark.
using Failure = std::string;

/// One input-scaled MoE layer, as matched.
struct ScaledLayer {
  moe::TopKOp topK;
  /// The `[T, H]` tokens and the `[T, E]` scores that scale them.
  Value tokens, scores;
  int64_t numExperts = 0, hidden = 0, ffn = 0;
  Value w1, w2;
  GatedActivation activation;
  /// The sum over the experts, which the layer replaces.
  moe::ReduceSumOp result;
};

/// The `[E, T, n]` operand of a batched product over all experts, reshaped
/// from `[E * T, n]` or not.
Value stripExpertReshape(Value value, int64_t numExperts) {
  if (auto reshape = value.getDefiningOp<moe::ReshapeOp>()) {
    ArrayRef<int64_t> shape = getShape(reshape.getOutput());
    if (shape.size() == 3 && shape[0] == numExperts &&
        getShape(reshape.getData()).size() == 3 &&
        getShape(reshape.getData())[0] == numExperts &&
        getShape(reshape.getData())[2] == shape[2])
      return reshape.getData();
  }
  return value;
}

/// `value` without an Expand to a shape of ones no longer than its rank,
/// the identity (dynamo writes `x.repeat(E, 1)` as such an Expand, then a
/// Tile).
Value stripUnitExpand(Value value) {
  auto expand = value.getDefiningOp<moe::ExpandOp>();
  std::optional<SmallVector<int64_t>> shape =
      expand ? moe::getConstantInts(expand.getShape()) : std::nullopt;
  if (shape &&
      static_cast<int64_t>(shape->size()) <=
          static_cast<int64_t>(getShape(expand.getInput()).size()) &&
      llvm::all_of(*shape, [](int64_t size) { return size == 1; }))
    return expand.getInput();
  return value;
}

/// The stacked `[E, in, out]` f32 constant `product`'s right operand is,
/// when `product` is `lhs @ W` with lhs `[E, T, in]`; null otherwise.
Value getStackedRhs(moe::MatMulOp product, int64_t numExperts) {
  auto constant = product ? product.getB().getDefiningOp<moe::ConstantOp>()
                          : moe::ConstantOp();
  if (!constant || !constant.getType().getElementType().isF32() ||
      constant.getType().getRank() != 3 ||
      constant.getType().getDimSize(0) != numExperts ||
      getShape(product.getA()).size() != 3)
    return nullptr;
  return constant.getOutput();
}

/// Whether `value` is a tensor of one float `fill` with `sigmoid(fill) = 0`
/// (minus infinity) the size of `like`: `constant_of_shape(shape(like))`,
/// `expand(fill, shape(like))`, or a splat constant of like's static type.
bool isMinusInfinityLike(Value value, Value like) {
  // Folded where the logits' shape is static (a decode step).
  if (auto constant = value.getDefiningOp<moe::ConstantOp>()) {
    auto splat = dyn_cast<DenseFPElementsAttr>(constant.getValue());
    return splat && splat.isSplat() &&
           splat.getSplatValue<APFloat>().isNegInfinity() &&
           cast<ShapedType>(like.getType()).hasStaticShape() &&
           value.getType() == like.getType();
  }
  Value shape, fill;
  std::optional<double> fillValue;
  if (auto expand = value.getDefiningOp<moe::ExpandOp>()) {
    shape = expand.getShape();
    fillValue = getScalarFloat(expand.getInput());
  } else if (auto constant = value.getDefiningOp<moe::ConstantOfShapeOp>()) {
    shape = constant.getInput();
    auto attr = constant.getValue()
                    ? dyn_cast<DenseFPElementsAttr>(*constant.getValue())
                    : DenseFPElementsAttr();
    if (attr && attr.getNumElements() == 1)
      fillValue = (*attr.getValues<APFloat>().begin()).convertToDouble();
  }
  auto shapeOf = shape ? shape.getDefiningOp<moe::ShapeOp>() : moe::ShapeOp();
  return fillValue && std::isinf(*fillValue) && *fillValue < 0 && shapeOf &&
         shapeOf.getData() == like && shapeOf.getStart() == 0 &&
         !shapeOf.getEnd() && value.getType() == like.getType();
}

/// Matches the layer backwards from the sum over the experts.
class ScaledMatcher {
public:
  explicit ScaledMatcher(moe::ReduceSumOp sum) { layer.result = sum; }

  /// Whether the sum over dim 0 is of products with stacked `[E, F, H]`
  /// weights: the layers this pass is about, which get a remark when the
  /// rest of the match fails. Sets the anchor of the remark.
  bool isCandidate() {
    moe::ReduceSumOp sum = layer.result;
    ArrayRef<int64_t> shape = getShape(sum.getData());
    if (!sum.getAxes() || sum.getKeepdims() != 0 || shape.size() != 3 ||
        ShapedType::isDynamic(shape[0]) || !isConstAxes(sum.getAxes(), {0}, 3))
      return false;
    layer.numExperts = shape[0];
    down = stripExpertReshape(sum.getData(), layer.numExperts)
               .getDefiningOp<moe::MatMulOp>();
    layer.w2 = getStackedRhs(down, layer.numExperts);
    return static_cast<bool>(layer.w2);
  }

  std::optional<Failure> match() {
    int64_t numExperts = layer.numExperts;
    ArrayRef<int64_t> w2Shape = getShape(layer.w2);
    layer.ffn = w2Shape[1];
    layer.hidden = w2Shape[2];
    if (std::optional<Failure> failure =
            matchGatedActivation(down.getA(), layer.activation))
      return failure;
    auto gateUp = layer.activation.fused.getDefiningOp<moe::MatMulOp>();
    layer.w1 = getStackedRhs(gateUp, numExperts);
    if (!layer.w1 || getShape(layer.w1)[1] != layer.hidden ||
        getShape(layer.w1)[2] != 2 * layer.ffn)
      return Failure("the fused gate/up projection is not a product with "
                     "stacked [E, H, 2F] weights");
    // rows = reshape(tile(x, [E, 1]) * reshape(transpose(s), [-1, 1])):
    // row e * T + t is x[t] * s[t, e].
    Value rows = stripExpertReshape(gateUp.getA(), numExperts);
    auto reshape = gateUp.getA().getDefiningOp<moe::ReshapeOp>();
    auto scaled =
        reshape ? reshape.getData().getDefiningOp<moe::MulOp>() : moe::MulOp();
    if (rows != gateUp.getA() || !scaled ||
        moe::getConstantInts(reshape.getShape()) !=
            SmallVector<int64_t>{numExperts, -1, layer.hidden})
      return Failure("the experts' rows are not [E * T, H] rows reshaped to "
                     "[E, T, H]");
    for (auto [tiled, column] : {std::pair(scaled.getLhs(), scaled.getRhs()),
                                 std::pair(scaled.getRhs(), scaled.getLhs())}) {
      auto tile = tiled.getDefiningOp<moe::TileOp>();
      auto flat = column.getDefiningOp<moe::ReshapeOp>();
      // One token (a decode step): transpose(s) is [E, 1] already, and the
      // reshape to [-1, 1] folded away.
      auto transpose = flat ? flat.getData().getDefiningOp<moe::TransposeOp>()
                            : column.getDefiningOp<moe::TransposeOp>();
      bool oneToken =
          !flat && transpose &&
          getShape(transpose.getOutput()) == ArrayRef<int64_t>{numExperts, 1};
      if (!tile || !transpose || !transpose.getPerm() ||
          *transpose.getPerm() != ArrayRef<int64_t>{1, 0} ||
          moe::getConstantInts(tile.getRepeats()) !=
              SmallVector<int64_t>{numExperts, 1} ||
          (!oneToken && moe::getConstantInts(flat.getShape()) !=
                            SmallVector<int64_t>{-1, 1}))
        continue;
      layer.tokens = stripUnitExpand(tile.getInput());
      layer.scores = transpose.getData();
      return matchScores();
    }
    return Failure("the experts' rows are not the tokens tiled E times, "
                   "each scaled by its score for the expert");
  }

  ScaledLayer layer;

private:
  moe::MatMulOp down;

  /// s = sigmoid(scatter_elements(-inf, i, v, axis 1)) with (v, i) the
  /// top-1 of `[T, E]` logits that project the tokens.
  std::optional<Failure> matchScores() {
    ArrayRef<int64_t> tokensShape = getShape(layer.tokens);
    if (tokensShape.size() != 2 || tokensShape[1] != layer.hidden ||
        !getElementTypeOrSelf(layer.tokens.getType()).isF32())
      return Failure("the tokens are not an f32 [T, H] matrix");
    auto sigmoid = layer.scores.getDefiningOp<moe::SigmoidOp>();
    auto scatter =
        sigmoid ? sigmoid.getInput().getDefiningOp<moe::ScatterElementsOp>()
                : moe::ScatterElementsOp();
    auto topK = scatter ? scatter.getIndices().getDefiningOp<moe::TopKOp>()
                        : moe::TopKOp();
    if (!topK || scatter.getUpdates() != topK.getValues() ||
        scatter.getReduction() != "none" || !isLastAxis(scatter.getAxis(), 2))
      return Failure("the scores are not the sigmoid of the top-k logits "
                     "scattered into a [T, E] matrix");
    layer.topK = topK;
    Value logits = topK.getInput();
    std::optional<Linear> projection = matchLinear(logits);
    if (!isMinusInfinityLike(scatter.getData(), logits) ||
        getShape(logits) !=
            ArrayRef<int64_t>{tokensShape[0], layer.numExperts} ||
        !projection || projection->input != layer.tokens)
      return Failure("the scores of experts not chosen are not "
                     "sigmoid(-inf) = 0 in [T, E] logits projecting the "
                     "tokens");
    if (!isLargestOnLastAxis(topK, 2) || !isConstInt(topK.getK(), 1))
      return Failure("the router does not choose one expert per token "
                     "(only then is every other expert's input zero)");
    return std::nullopt;
  }
};

struct DetectInputScaledExpertsPass
    : public moec::impl::MoeDetectInputScaledExpertsBase<
          DetectInputScaledExpertsPass> {
  void runOnOperation() override {
    SmallVector<moe::ReduceSumOp> candidates;
    getOperation().walk([&](moe::ReduceSumOp op) { candidates.push_back(op); });
    bool changed = false;
    for (moe::ReduceSumOp sum : lastLayerFirst(candidates)) {
      ScaledMatcher matcher(sum);
      if (!matcher.isCandidate())
        continue;
      if (std::optional<Failure> failure = matcher.match()) {
        // At the layer's router once the matcher found it, where the other
        // forms' reasons for the same layer go.
        Operation *anchor = matcher.layer.topK ? matcher.layer.topK : sum;
        recordNearMiss(anchor, "input-scaled experts", *failure);
        continue;
      }
      changed |= succeeded(rewrite(matcher.layer));
    }
    if (changed)
      eraseDeadOps(getOperation().getBody());
  }

  LogicalResult rewrite(ScaledLayer &layer) {
    moe::ReduceSumOp result = layer.result;
    OpBuilder builder(result);
    Location loc = result.getLoc();
    auto f32Scalar = [&](float value) {
      return moe::ConstantOp::create(
          builder, loc,
          DenseElementsAttr::get(
              RankedTensorType::get({}, builder.getF32Type()),
              ArrayRef<float>(value)));
    };
    Value indices = layer.topK.getIndices();
    // The chosen expert's score [T, 1] scales its input; the combine
    // weight is one (0 * s + 1: s is a sigmoid, always finite).
    Value chosen = moe::GatherElementsOp::create(
        builder, loc, layer.scores, indices, builder.getI64IntegerAttr(1));
    Value tokens = moe::MulOp::create(builder, loc, layer.tokens, chosen);
    Value ones = moe::AddOp::create(
        builder, loc, moe::MulOp::create(builder, loc, chosen, f32Scalar(0)),
        f32Scalar(1));
    LayerGate gate;
    gate.tokens = tokens;
    gate.indices = indices;
    gate.weights = ones;
    gate.numExperts = layer.numExperts;
    gate.topK = 1;
    ExpertFfn ffn;
    ffn.w1 = layer.w1;
    ffn.w2 = layer.w2;
    ffn.layout = moe::WeightLayout::InOut;
    setActivation(ffn, layer.activation);
    moe::CombineOp combine;
    std::optional<Failure> why = replaceWithExpertsLayer(
        getArgument(), layer.topK, result.getOutput(), gate, ffn, &combine,
        /*validationTokens=*/layer.tokens);
    if (!why) {
      rewriteSharedExperts(getArgument(), combine, layer.tokens);
      return success();
    }
    // Validation erased what it rejected, the scaling included; a type
    // mismatch leaves the scaling to erase.
    if (!why->empty()) {
      eraseIfUnused(ones);
      eraseIfUnused(tokens);
      layer.topK.emitRemark("MoE input-scaled experts not rewritten: ") << *why;
    }
    return failure();
  }
};

} // namespace
