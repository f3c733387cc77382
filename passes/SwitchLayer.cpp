//===- SwitchLayer.cpp - Switch Transformers layers to sparse ops ---------===//
//
// Matches the Switch Transformers block op by op and rewrites it exactly
// into the sparse MoE ops (see detectSwitchLayer); anything else stays
// generic with a recorded reason.
//
//===----------------------------------------------------------------------===//

#include "passes/SwitchLayer.h"

#include "passes/MatchSupport.h"
#include "passes/NearMiss.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/LayerForm.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace moec;

namespace {

/// Why a match failed: the message of the remark.
using Failure = std::string;

/// A matched Switch Transformers layer: top-1 routing with per-sequence
/// capacity whose dropped tokens pass through, and ReLU MLP experts that
/// overwrite their tokens' rows of a copy of the input.
struct SwitchLayer {
  moe::ArgMaxOp argMax;
  /// `[B, S, E]` logits and the `[B, S, H]` tokens they project.
  Value logits, tokens;
  int64_t numExperts = 0, hidden = 0, ffn = 0, capacity = 0;
  moe::WeightLayout layout = moe::WeightLayout::InOut;
  /// Per expert: its `w1` and `w2`, indexed by expert.
  SmallVector<moe::ConstantOp> w1, w2;
  /// `max(scores) * rows`: the layer's output, replaced by the rewrite.
  Value result;
};

/// Matches the Switch Transformers block rooted at `argMax`:
///
///   scores = softmax(x @ wr); e = argmax(scores); p = max(scores)
///   keep = one_hot(e) * (cumsum(one_hot(e), seq) <= C)
///   rows = x; for each e: rows[keep[..., e]] = relu(x[keep] @ w1) @ w2
///   out = p[..., None] * rows
///
/// which is exactly router(top 1, capacity C) -> dispatch -> experts(relu)
/// -> combine(passthrough x): a kept token gets p * FFN(x), a dropped one
/// p * x.
class SwitchMatcher {
public:
  explicit SwitchMatcher(moe::ArgMaxOp argMax) { layer.argMax = argMax; }

  std::optional<Failure> match() {
    if (auto failure = matchRouter())
      return failure;
    return matchExperts();
  }

  SwitchLayer layer;

private:
  Value scores, keep, weight;

  std::optional<Failure> matchRouter() {
    moe::ArgMaxOp argMax = layer.argMax;
    auto softmax = argMax.getData().getDefiningOp<moe::SoftmaxOp>();
    ArrayRef<int64_t> shape = getShape(argMax.getData());
    if (!softmax)
      return Failure("");
    if (shape.size() != 3 || ShapedType::isDynamic(shape[2]) ||
        !isAxis(static_cast<int64_t>(argMax.getAxis()), 2, 3) ||
        !isAxis(static_cast<int64_t>(softmax.getAxis()), 2, 3) ||
        argMax.getKeepdims() != 0 || argMax.getSelectLastIndex() != 0)
      return Failure("arg-max is not the first largest softmax score over "
                     "the experts of [B, S, E] logits");
    scores = softmax.getOutput();
    layer.logits = softmax.getInput();
    layer.numExperts = shape[2];
    std::optional<Linear> projection = matchLinear(layer.logits);
    ArrayRef<int64_t> tokensShape =
        projection ? getShape(projection->input) : ArrayRef<int64_t>();
    if (!projection || tokensShape.size() != 3 ||
        ShapedType::isDynamic(tokensShape[2]) ||
        !getElementTypeOrSelf(projection->input.getType()).isF32())
      return Failure("router logits are not a matmul of f32 [B, S, H] "
                     "tokens");
    layer.tokens = projection->input;
    layer.hidden = tokensShape[2];

    // keep = one_hot * cast(cumsum(one_hot, axis = 1) <= C).
    auto oneHot =
        findUser<moe::OneHotOp>(argMax.getOutput(), [&](moe::OneHotOp op) {
          return isAxis(op.getAxis(), 2, 3) &&
                 isConstInt(op.getDepth(), layer.numExperts) &&
                 moe::getConstantInts(op.getValues()) ==
                     SmallVector<int64_t>{0, 1};
        });
    auto cumSum = oneHot ? findUser<moe::CumSumOp>(
                               oneHot.getOutput(),
                               [](moe::CumSumOp op) {
                                 std::optional<int64_t> axis =
                                     moe::getConstantInt(op.getAxis());
                                 return axis && isAxis(*axis, 1, 3) &&
                                        !op.getExclusive() && !op.getReverse();
                               })
                         : nullptr;
    auto within = cumSum ? findUser<moe::LessOrEqualOp>(
                               cumSum.getOutput(),
                               [&](moe::LessOrEqualOp op) {
                                 return op.getLhs() == cumSum.getOutput();
                               })
                         : nullptr;
    if (!within)
      return Failure("the arg-max is not one-hot encoded and counted per "
                     "sequence against a capacity");
    std::optional<int64_t> capacity = moe::getConstantInt(within.getRhs());
    if (!capacity || *capacity < 1)
      return Failure("the capacity is not a positive constant");
    layer.capacity = *capacity;
    auto toInt =
        findUser<moe::CastOp>(within.getOutput(), [](auto) { return true; });
    auto masked = toInt ? findUser<moe::MulOp>(
                              toInt.getOutput(),
                              [&](moe::MulOp op) {
                                return otherOperand(op, toInt.getOutput()) ==
                                       oneHot.getOutput();
                              })
                        : nullptr;
    if (!masked)
      return Failure("the kept assignments are not the one-hot masked by "
                     "the capacity test");
    keep = masked.getOutput();
    if (auto toBool = findUser<moe::CastOp>(
            keep, [](moe::CastOp op) { return op.getTo().isInteger(1); }))
      keep = toBool.getOutput();

    // The weight: the largest score, as a [B, S, 1] column.
    auto max = findUser<moe::ReduceMaxOp>(scores, [](moe::ReduceMaxOp op) {
      return op.getAxes() && isConstAxes(op.getAxes(), {2}, 3) &&
             op.getKeepdims() == 0;
    });
    auto column = max ? findUser<moe::UnsqueezeOp>(max.getOutput(),
                                                   [](moe::UnsqueezeOp op) {
                                                     return isConstAxes(
                                                         op.getAxes(), {2}, 3);
                                                   })
                      : nullptr;
    if (!column)
      return Failure("the routing weight is not the largest score");
    weight = column.getOutput();
    return std::nullopt;
  }

  /// Every `gather(keep, e, axis = 2)` is one expert's block; the blocks
  /// overwrite rows of a copy of the tokens, and the result is scaled by the
  /// routing weight.
  std::optional<Failure> matchExperts() {
    layer.w1.assign(layer.numExperts, nullptr);
    layer.w2.assign(layer.numExperts, nullptr);
    llvm::DenseMap<Value, Value> next;
    for (Operation *user : keep.getUsers()) {
      auto gather = dyn_cast<moe::GatherOp>(user);
      std::optional<int64_t> expert =
          gather ? moe::getConstantInt(gather.getIndices()) : std::nullopt;
      if (!gather || !isAxis(gather.getAxis(), 2, 3) || !expert ||
          !getShape(gather.getIndices()).empty())
        continue;
      if (*expert < 0 || *expert >= layer.numExperts || layer.w1[*expert])
        return Failure(llvm::formatv("expert {0} is selected out of range or "
                                     "twice",
                                     *expert));
      Value previous, updated;
      if (auto failure =
              matchBlock(gather.getOutput(), *expert, previous, updated))
        return Failure(llvm::formatv("expert {0}: {1}", *expert, *failure));
      if (!next.try_emplace(previous, updated).second)
        return Failure("two experts update the same rows");
    }
    // A token kept for an absent expert would keep its input row, which the
    // sparse layer cannot express.
    for (int64_t e = 0; e < layer.numExperts; ++e)
      if (!layer.w1[e])
        return Failure(llvm::formatv("expert {0} has no block", e));
    Value rows = layer.tokens;
    for (int64_t e = 0; e < layer.numExperts; ++e) {
      rows = next.lookup(rows);
      if (!rows)
        return Failure("the experts do not update one copy of the tokens in "
                       "a chain");
    }
    auto scale = findUser<moe::MulOp>(
        rows, [&](moe::MulOp op) { return otherOperand(op, rows) == weight; });
    if (!scale || scale.getType() != layer.tokens.getType())
      return Failure("the updated rows are not scaled by the routing weight");
    layer.result = scale.getOutput();
    return std::nullopt;
  }

  /// rows' = scatter_nd(rows, nonzero(expand(sel[..., None], shape(rows))),
  ///                    flatten(relu(gather_nd(x, nonzero(sel)) @ w1) @ w2)).
  std::optional<Failure> matchBlock(Value selected, int64_t expert,
                                    Value &previous, Value &updated) {
    auto nonZero =
        findUser<moe::NonZeroOp>(selected, [](auto) { return true; });
    auto pairs = nonZero
                     ? findUser<moe::TransposeOp>(
                           nonZero.getOutput(),
                           [](moe::TransposeOp op) {
                             return op.getPerm() &&
                                    *op.getPerm() == ArrayRef<int64_t>{1, 0};
                           })
                     : nullptr;
    auto gather = pairs ? findUser<moe::GatherNDOp>(
                              pairs.getOutput(),
                              [&](moe::GatherNDOp op) {
                                return op.getData() == layer.tokens &&
                                       op.getIndices() == pairs.getOutput() &&
                                       op.getBatchDims() == 0;
                              })
                        : nullptr;
    if (!gather)
      return Failure("the expert's input is not the tokens at NonZero of its "
                     "kept mask");
    moe::ScatterNDOp scatter;
    Value output;
    for (Operation *user : selected.getUsers()) {
      auto unsqueeze = dyn_cast<moe::UnsqueezeOp>(user);
      if (!unsqueeze || !isConstAxes(unsqueeze.getAxes(), {2}, 3))
        continue;
      for (Operation *expandUser : unsqueeze.getOutput().getUsers()) {
        auto expand = dyn_cast<moe::ExpandOp>(expandUser);
        auto shape =
            expand ? expand.getShape().getDefiningOp<moe::ShapeOp>() : nullptr;
        auto elements =
            expand ? findUser<moe::NonZeroOp>(expand.getOutput(),
                                              [](auto) { return true; })
                   : nullptr;
        auto indices =
            elements ? findUser<moe::TransposeOp>(
                           elements.getOutput(),
                           [](moe::TransposeOp op) {
                             return op.getPerm() &&
                                    *op.getPerm() == ArrayRef<int64_t>{1, 0};
                           })
                     : nullptr;
        if (!shape || !indices || shape.getStart() != 0 || shape.getEnd())
          continue;
        scatter = findUser<moe::ScatterNDOp>(
            indices.getOutput(), [&](moe::ScatterNDOp op) {
              return op.getIndices() == indices.getOutput() &&
                     op.getData() == shape.getData() &&
                     op.getReduction() == "none";
            });
        if (!scatter)
          continue;
        // The updates are the flattened output, sliced to the number of
        // scattered elements: all of it.
        auto slice = scatter.getUpdates().getDefiningOp<moe::SliceOp>();
        auto flat =
            slice ? slice.getData().getDefiningOp<moe::ReshapeOp>() : nullptr;
        auto count = slice ? stripScalarReshapes(slice.getEnds())
                                 .getDefiningOp<moe::DimOp>()
                           : nullptr;
        if (!flat || !isConstInt(slice.getStarts(), 0) ||
            (slice.getAxes() && !isConstAxes(slice.getAxes(), {0}, 1)) ||
            (slice.getSteps() && !isConstInt(slice.getSteps(), 1)) || !count ||
            count.getInput() != elements.getOutput() || count.getIndex() != 1 ||
            !isConstAxes(flat.getShape(), {-1}, 0))
          return Failure("the scattered values are not the expert's whole "
                         "output, flattened");
        output = flat.getData();
        break;
      }
      if (scatter)
        break;
    }
    if (!scatter)
      return Failure("the expert output does not overwrite its tokens' rows");
    previous = scatter.getData();
    updated = scatter.getOutput();

    std::optional<Linear> second = matchLinear(output);
    auto relu = second ? second->input.getDefiningOp<moe::ReluOp>() : nullptr;
    std::optional<Linear> first =
        relu ? matchLinear(relu.getInput()) : std::nullopt;
    if (!first || first->input != gather.getOutput() || !first->weight ||
        !second->weight || first->transposed != second->transposed)
      return Failure("the expert is not relu(x @ w1) @ w2 with constant "
                     "weights of one layout");
    moe::WeightLayout layout =
        first->transposed ? moe::WeightLayout::OutIn : moe::WeightLayout::InOut;
    ArrayRef<int64_t> w1 = getShape(first->weight);
    int64_t ffn = first->transposed ? w1[0] : w1[1];
    auto expect = [&](moe::ConstantOp weight, int64_t in, int64_t out) {
      ArrayRef<int64_t> shape = getShape(weight);
      return weight.getType().getElementType().isF32() &&
             shape == (first->transposed ? ArrayRef<int64_t>{out, in}
                                         : ArrayRef<int64_t>{in, out});
    };
    bool firstExpert = llvm::all_of(layer.w1, [](auto w) { return !w; });
    if (!expect(first->weight, layer.hidden, ffn) ||
        !expect(second->weight, ffn, layer.hidden) ||
        (!firstExpert && (ffn != layer.ffn || layout != layer.layout)))
      return Failure("expert weights are not f32 [H, F], [F, H] (or both "
                     "transposed) with one F and layout for all experts");
    layer.ffn = ffn;
    layer.layout = layout;
    layer.w1[expert] = first->weight;
    layer.w2[expert] = second->weight;
    return std::nullopt;
  }
};

/// Rewrites a matched Switch layer; the loop's ops die with the old output.
LogicalResult rewriteSwitch(StringRef pass, SwitchLayer &layer) {
  Value result = layer.result;
  OpBuilder builder(result.getDefiningOp());
  Location loc = result.getLoc();
  MLIRContext *context = builder.getContext();
  auto stack = [&](ArrayRef<moe::ConstantOp> weights) -> Value {
    SmallVector<Value> slices;
    for (moe::ConstantOp weight : weights)
      slices.push_back(weight);
    return moe::StackOp::create(builder, loc, slices);
  };
  Value w1 = stack(layer.w1), w2 = stack(layer.w2);
  auto shapeOf = [&](ArrayRef<int64_t> shape) -> Value {
    auto type = RankedTensorType::get({static_cast<int64_t>(shape.size())},
                                      builder.getI64Type());
    return moe::ConstantOp::create(builder, loc,
                                   DenseElementsAttr::get(type, shape));
  };
  auto flatten = [&](Value value, int64_t cols) -> Value {
    auto type = RankedTensorType::get(
        {ShapedType::kDynamic, cols},
        cast<RankedTensorType>(value.getType()).getElementType());
    return moe::ReshapeOp::create(builder, loc, type, value,
                                  shapeOf({-1, cols}));
  };
  // Capacity counts per sequence: the router keeps the [B, S, E] logits.
  RouterConfig config;
  config.capacity = layer.capacity;
  moe::RouterOp router = createRouter(builder, loc, layer.logits, config);
  Value tokens = flatten(layer.tokens, layer.hidden);
  Value indices = flatten(router.getIndices(), 1);
  Value weights = flatten(router.getWeights(), 1);
  auto dispatch =
      moe::DispatchOp::create(builder, loc, tokens, indices,
                              builder.getI64IntegerAttr(layer.numExperts));
  auto experts = moe::ExpertsOp::create(
      builder, loc, dispatch.getRows(), dispatch.getOffsets(), w1,
      /*b1=*/Value(), /*w3=*/Value(), /*b3=*/Value(), w2, /*b2=*/Value(),
      moe::ActivationAttr::get(context, moe::Activation::Relu),
      moe::WeightLayoutAttr::get(context, layer.layout),
      /*glu_layout=*/nullptr, /*alpha=*/nullptr, /*beta=*/nullptr,
      /*limit=*/nullptr);
  moe::setLayerForm(experts, "Switch");
  auto combine =
      moe::CombineOp::create(builder, loc, experts.getOutput(),
                             dispatch.getSource(), weights, tokens, indices);
  Value shape = moe::ShapeOp::create(builder, loc, layer.tokens,
                                     builder.getI64IntegerAttr(0),
                                     /*end=*/nullptr);
  Value output = moe::ReshapeOp::create(builder, loc, result.getType(),
                                        combine.getOutput(), shape);
  return commitLayerRewrite(pass, layer.argMax, result, output, layer.tokens);
}

} // namespace

void moec::detectSwitchLayer(moe::ArgMaxOp argMax, StringRef pass) {
  SwitchMatcher matcher(argMax);
  if (std::optional<Failure> failure = matcher.match()) {
    if (!failure->empty())
      recordNearMiss(argMax, "Switch layer", *failure);
    return;
  }
  (void)rewriteSwitch(pass, matcher.layer);
}
