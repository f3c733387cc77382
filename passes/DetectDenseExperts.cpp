//===- DetectDenseExperts.cpp - dense (GPT-OSS) MoE form to sparse ops ----===//
//
// Recognises the dense MoE form GPT-OSS exports: every expert runs on every
// token with stacked 3-D weights, and a [T, E] routing matrix that is zero
// outside each token's top-k experts weights the expert outputs before a
// ReduceSum over the experts. The match is rooted at a `moe.top_k` and proves,
// op by op, that the final sum equals
//
//   out[t] = sum_j w[t, j] * FFN_{indices[t, j]}(x[t])
//
// with w the softmax over the k selected logits, so the rewrite into
// moe.router (after_topk) -> dispatch -> experts -> combine is exact and only
// skips the (E - k) / E of the work whose weight is zero. The stacked weights
// are used as they are (layout in_out); nothing is copied. Anything else stays
// generic with a remark naming the first condition that failed.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/LayerForm.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchFfn.h"
#include "passes/MatchSupport.h"
#include "passes/NearMiss.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace moec {
#define GEN_PASS_DEF_MOEDETECTDENSEEXPERTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// Why a match failed: the message of the remark.
using Failure = std::string;

/// A float weight constant of exactly `shape`, or null.
moe::ConstantOp getWeight(Value value, ArrayRef<int64_t> shape) {
  auto constant = value.getDefiningOp<moe::ConstantOp>();
  if (!constant || !isa<FloatType>(constant.getType().getElementType()) ||
      constant.getType().getShape() != shape)
    return nullptr;
  return constant;
}

/// Splits `value = matmul + bias` (either operand order) into its batched
/// product and bias; leaves both null where `value` is not such a sum.
void splitBiasAdd(Value value, moe::MatMulOp &product, Value &bias) {
  auto add = value.getDefiningOp<moe::AddOp>();
  if (!add)
    return;
  for (auto [lhs, rhs] : {std::pair(add.getLhs(), add.getRhs()),
                          std::pair(add.getRhs(), add.getLhs())}) {
    if (auto matMul = lhs.getDefiningOp<moe::MatMulOp>()) {
      product = matMul;
      bias = rhs;
      return;
    }
  }
}

/// One dense MoE layer, as matched.
struct DenseLayer {
  moe::TopKOp topK;
  Value logits, tokens;
  int64_t topKValue = 0, numExperts = 0, hidden = 0, ffn = 0;
  /// Fused interleaved gate/up `[E, H, 2F]`, its bias `[E, 1, 2F]`, the down
  /// projection `[E, F, H]` and its bias `[E, 1, H]`.
  Value w1, b1, w2, b2;
  double alpha = 0, beta = 0, limit = 0;
  /// The final ReduceSum over the experts, and the `[E, ...]` leading sizes
  /// both reshapes before it split the token dimension into (empty when the
  /// layer works on `[T, ...]` directly).
  moe::ReduceSumOp result;
  SmallVector<Value> tokenSplit;
};

/// Matches the dense form from its `moe.top_k` forwards; each step checks one
/// op and states the condition it needs.
class DenseMatcher {
public:
  explicit DenseMatcher(moe::TopKOp topK) { layer.topK = topK; }

  std::optional<Failure> match() {
    if (std::optional<Failure> failure = matchRouter())
      return failure;
    return matchCombine();
  }

  DenseLayer layer;

private:
  /// The routing matrix `[T, E]`: the softmax over the top-k logits scattered
  /// into zeros at the top-k indices.
  moe::ScatterElementsOp routing;

  std::optional<Failure> matchRouter() {
    moe::TopKOp topK = layer.topK;
    ArrayRef<int64_t> logitsShape = getShape(topK.getInput());
    if (logitsShape.size() != 2 || ShapedType::isDynamic(logitsShape[1]) ||
        !isa<Float32Type>(getElementTypeOrSelf(topK.getInput().getType())))
      return Failure("top-k input is not f32 [T, E] logits with static E");
    layer.logits = topK.getInput();
    layer.numExperts = logitsShape[1];
    std::optional<int64_t> k = moe::getConstantInt(topK.getK());
    if (!k || *k < 1 || *k > layer.numExperts)
      return Failure("top-k k is not a constant in [1, E]");
    layer.topKValue = *k;
    if (!isAxis(topK.getAxis(), 1, 2) || topK.getLargest() != 1)
      return Failure("top-k does not take the largest logits of each token");

    auto softmax = getOnlyUserOf<moe::SoftmaxOp>(topK.getValues());
    if (!softmax || !topK.getValues().hasOneUse() ||
        !isAxis(softmax.getAxis(), 1, 2))
      return Failure("the top-k logits do not only feed a softmax over k");

    routing = getOnlyUserOf<moe::ScatterElementsOp>(softmax.getOutput());
    if (!routing || routing.getIndices() != topK.getIndices() ||
        routing.getUpdates() != softmax.getOutput() ||
        !isAxis(routing.getAxis(), 1, 2) || routing.getReduction() != "none")
      return Failure("the softmax is not scattered at the top-k indices "
                     "along the experts");
    auto zeros = routing.getData().getDefiningOp<moe::ConstantOfShapeOp>();
    auto fill = zeros && zeros.getValue()
                    ? dyn_cast<DenseFPElementsAttr>(*zeros.getValue())
                    : DenseFPElementsAttr();
    if (!fill || fill.getNumElements() != 1 ||
        !(*fill.getValues<APFloat>().begin()).isZero())
      return Failure("the routing scatter does not start from zeros");
    auto shape = zeros.getInput().getDefiningOp<moe::ShapeOp>();
    if (!shape || shape.getData() != layer.logits || shape.getStart() != 0 ||
        (shape.getEnd() && static_cast<int64_t>(*shape.getEnd()) != 2 &&
         static_cast<int64_t>(*shape.getEnd()) != -1))
      return Failure("the routing zeros do not have the logits' shape");

    // The router's tokens: the logits are a projection of them, which ties
    // the logits' rows to the rows the experts run on.
    Operation *projection = layer.logits.getDefiningOp();
    auto gemm = dyn_cast_or_null<moe::GemmOp>(projection);
    if (!(gemm && gemm.getTransA() == 0) &&
        !isa_and_nonnull<moe::MatMulOp>(projection))
      return Failure("the logits are not a projection of the tokens");
    layer.tokens = projection->getOperand(0);
    ArrayRef<int64_t> tokensShape = getShape(layer.tokens);
    if (tokensShape.size() != 2 || ShapedType::isDynamic(tokensShape[1]) ||
        !isa<Float32Type>(getElementTypeOrSelf(layer.tokens.getType())))
      return Failure("tokens are not an f32 [T, H] matrix with static H");
    layer.hidden = tokensShape[1];
    return std::nullopt;
  }

  /// Matches `reduce_sum(Y * unsqueeze(R^T), axes = [0])` where Y is the
  /// `[E, T, H]` expert output and R the routing matrix, both optionally
  /// reshaped to split T alike.
  std::optional<Failure> matchCombine() {
    int64_t numExperts = layer.numExperts;
    auto transpose = getOnlyUserOf<moe::TransposeOp>(routing.getOutput());
    if (!transpose || transpose.getPermutation() != SmallVector<int64_t>{1, 0})
      return Failure("the routing matrix is not transposed to [E, T]");
    Value weights = transpose.getOutput();
    auto reshape = getOnlyUserOf<moe::ReshapeOp>(weights);
    moe::ConcatOp weightsSplit;
    if (reshape) {
      weightsSplit = reshape.getShape().getDefiningOp<moe::ConcatOp>();
      if (!weightsSplit || weightsSplit.getAxis() != 0 ||
          reshape.getAllowzero() != 0 ||
          moe::getConstantInt(weightsSplit.getInputs().front()) != numExperts)
        return Failure("the [E, T] routing weights are reshaped other than "
                       "by splitting T");
      weights = reshape.getOutput();
    }
    int64_t weightsRank = getShape(weights).size();
    auto unsqueeze = getOnlyUserOf<moe::UnsqueezeOp>(weights);
    if (!unsqueeze || !unsqueeze.getAxes() ||
        !isConstAxes(unsqueeze.getAxes(), {weightsRank}, weightsRank + 1))
      return Failure("the routing weights are not unsqueezed to broadcast "
                     "over the hidden dimension");
    auto mul = getOnlyUserOf<moe::MulOp>(unsqueeze.getOutput());
    Value expertOutput =
        mul ? otherOperand(mul, unsqueeze.getOutput()) : Value();
    if (!expertOutput)
      return Failure("the routing weights do not scale the expert outputs");
    layer.result = getOnlyUserOf<moe::ReduceSumOp>(mul.getOutput());
    if (!layer.result || !layer.result.getAxes() ||
        layer.result.getKeepdims() != 0 ||
        !isConstAxes(layer.result.getAxes(), {0}, weightsRank + 1))
      return Failure("the weighted expert outputs are not summed over the "
                     "experts");

    if (weightsSplit) {
      // Both reshapes must split T identically: the output's shape lists the
      // routing weights' sizes and then H.
      auto outputReshape = expertOutput.getDefiningOp<moe::ReshapeOp>();
      auto outputSplit =
          outputReshape
              ? outputReshape.getShape().getDefiningOp<moe::ConcatOp>()
              : moe::ConcatOp();
      if (!outputSplit || outputSplit.getAxis() != 0 ||
          outputReshape.getAllowzero() != 0 ||
          !llvm::equal(outputSplit.getInputs().drop_back(),
                       weightsSplit.getInputs()) ||
          moe::getConstantInt(outputSplit.getInputs().back()) != layer.hidden)
        return Failure("the expert outputs are not split like the routing "
                       "weights");
      for (Value size : weightsSplit.getInputs().drop_front()) {
        ArrayRef<int64_t> sizeShape = getShape(size);
        if (sizeShape.size() != 1 || sizeShape[0] != 1)
          return Failure("the token split sizes are not one-element lists");
        layer.tokenSplit.push_back(size);
      }
      layer.tokenSplit.push_back(outputSplit.getInputs().back());
      expertOutput = outputReshape.getData();
    }
    return matchExperts(expertOutput);
  }

  /// Matches the `[E, T, H]` output of every expert on every token:
  /// `clamped_swiglu(x @ w1 + b1) @ w2 + b2` with interleaved gate/up.
  std::optional<Failure> matchExperts(Value output) {
    int64_t numExperts = layer.numExperts, hidden = layer.hidden;
    moe::MatMulOp down;
    Value b2;
    splitBiasAdd(output, down, b2);
    if (!down)
      return Failure("the expert outputs are not a batched down projection "
                     "plus bias");
    ArrayRef<int64_t> w2Shape = getShape(down.getB());
    if (w2Shape.size() != 3 || ShapedType::isDynamic(w2Shape[1]))
      return Failure("the down projection weight is not [E, F, H]");
    layer.ffn = w2Shape[1];
    int64_t ffn = layer.ffn;
    if (!getWeight(down.getB(), {numExperts, ffn, hidden}) ||
        !getWeight(b2, {numExperts, 1, hidden}))
      return Failure("the down projection is not constant [E, F, H] weights "
                     "with an [E, 1, H] bias");
    layer.w2 = down.getB();
    layer.b2 = b2;

    if (std::optional<Failure> failure = matchActivation(down.getA()))
      return failure;

    // The tokens, repeated once per expert: tile(x, [E, 1]) reshaped to
    // [E, T, H].
    auto reshape = gateUp.getA().getDefiningOp<moe::ReshapeOp>();
    auto tile = reshape ? reshape.getData().getDefiningOp<moe::TileOp>()
                        : moe::TileOp();
    ArrayRef<int64_t> repeatedShape =
        reshape ? getShape(reshape.getOutput()) : ArrayRef<int64_t>();
    if (!tile || tile.getInput() != layer.tokens ||
        moe::getConstantInts(tile.getRepeats()) !=
            SmallVector<int64_t>{numExperts, 1} ||
        reshape.getAllowzero() != 0 ||
        !isConstAxes(reshape.getShape(), {numExperts, -1, hidden}, 0) ||
        repeatedShape.size() != 3 || repeatedShape[0] != numExperts)
      return Failure("the experts' input is not the router's tokens "
                     "repeated once per expert");
    return std::nullopt;
  }

  /// The gate/up projection, kept for the tokens check.
  moe::MatMulOp gateUp;

  /// Matches `a = g' * sigmoid(alpha * g') * (u' + beta)` with
  /// `g' = min(g, limit)`, `u' = clamp(u, -limit, limit)`, and g / u the even
  /// / odd columns of `x @ w1 + b1`.
  std::optional<Failure> matchActivation(Value value) {
    GatedActivation activation;
    std::pair<Value, Value> parts;
    if (std::optional<Failure> failure =
            matchClampedSwiglu(value, activation, parts))
      return failure;
    layer.alpha = *activation.alpha;
    layer.beta = *activation.beta;
    layer.limit = *activation.limit;
    return matchGateUp(parts.first, parts.second);
  }

  /// Whether `slice` takes every second column of the last dimension of a
  /// rank-3 tensor starting at `start`.
  static bool isInterleavedHalf(moe::SliceOp slice, int64_t start,
                                int64_t columns) {
    std::optional<int64_t> end = moe::getConstantInt(slice.getEnds());
    return slice.getAxes() && slice.getSteps() &&
           isConstAxes(slice.getAxes(), {2}, 3) &&
           moe::getConstantInt(slice.getStarts()) == start && end &&
           *end >= columns && moe::getConstantInt(slice.getSteps()) == 2;
  }

  std::optional<Failure> matchGateUp(Value gate, Value up) {
    auto gateSlice = gate.getDefiningOp<moe::SliceOp>();
    auto upSlice = up.getDefiningOp<moe::SliceOp>();
    if (!gateSlice || !upSlice || gateSlice.getData() != upSlice.getData())
      return Failure("gate and up are not slices of one fused projection");
    int64_t numExperts = layer.numExperts, ffn = layer.ffn;
    if (!isInterleavedHalf(gateSlice, 0, 2 * ffn) ||
        !isInterleavedHalf(upSlice, 1, 2 * ffn))
      return Failure("gate and up are not the even and odd columns of the "
                     "fused projection");
    Value b1;
    splitBiasAdd(gateSlice.getData(), gateUp, b1);
    if (!gateUp ||
        !getWeight(gateUp.getB(), {numExperts, layer.hidden, 2 * ffn}) ||
        !getWeight(b1, {numExperts, 1, 2 * ffn}))
      return Failure("the fused gate/up projection is not constant "
                     "[E, H, 2F] weights with an [E, 1, 2F] bias");
    layer.w1 = gateUp.getB();
    layer.b1 = b1;
    return std::nullopt;
  }
};

struct DetectDenseExpertsPass
    : public moec::impl::MoeDetectDenseExpertsBase<DetectDenseExpertsPass> {
  void runOnOperation() override {
    SmallVector<moe::TopKOp> candidates;
    getOperation().walk([&](moe::TopKOp op) { candidates.push_back(op); });
    bool changed = false;
    for (moe::TopKOp topK : candidates) {
      // The dense form takes the top-k of the logits and scatters the
      // routing weights at its indices; other top-ks are routers of other
      // forms (or no routers) and get no remark here.
      bool candidate =
          !topK.getInput().getDefiningOp<moe::SoftmaxOp>() &&
          llvm::any_of(topK.getIndices().getUsers(), [&](Operation *user) {
            auto scatter = dyn_cast<moe::ScatterElementsOp>(user);
            return scatter && scatter.getIndices() == topK.getIndices();
          });
      if (!candidate)
        continue;
      DenseMatcher matcher(topK);
      if (std::optional<Failure> failure = matcher.match()) {
        recordNearMiss(topK, "dense experts", *failure);
        continue;
      }
      changed |= succeeded(rewrite(matcher.layer));
    }
    if (changed)
      eraseDeadOps(getOperation().getBody());
  }

  /// Drops the unit dimension of an `[E, 1, N]` bias.
  static Value squeezeBias(OpBuilder &builder, Location loc, Value bias) {
    ArrayRef<int64_t> shape = getShape(bias);
    auto type = RankedTensorType::get({shape[0], shape[2]},
                                      getElementTypeOrSelf(bias.getType()));
    auto targetType = RankedTensorType::get({2}, builder.getI64Type());
    Value target = moe::ConstantOp::create(
        builder, loc, moe::getI64Elements(targetType, {shape[0], shape[2]}));
    return moe::ReshapeOp::create(builder, loc, type, bias, target,
                                  builder.getI64IntegerAttr(0));
  }

  LogicalResult rewrite(DenseLayer &layer) {
    moe::ReduceSumOp result = layer.result;
    OpBuilder builder(result);
    Location loc = result.getLoc();
    MLIRContext *context = builder.getContext();
    RouterConfig config;
    config.topK = layer.topKValue;
    config.afterTopK = true;
    auto [router, dispatch] = createRouterAndDispatch(
        builder, loc, layer.logits, config, layer.tokens, layer.numExperts);
    Value b1 = squeezeBias(builder, loc, layer.b1);
    Value b2 = squeezeBias(builder, loc, layer.b2);
    auto experts = moe::ExpertsOp::create(
        builder, loc, dispatch.getRows(), dispatch.getOffsets(), layer.w1, b1,
        /*w3=*/Value(), /*b3=*/Value(), layer.w2, b2,
        moe::ActivationAttr::get(context, moe::Activation::ClampedSwiglu),
        moe::WeightLayoutAttr::get(context, moe::WeightLayout::InOut),
        moe::GluLayoutAttr::get(context, moe::GluLayout::Interleaved),
        builder.getF32FloatAttr(layer.alpha),
        builder.getF32FloatAttr(layer.beta),
        builder.getF32FloatAttr(layer.limit));
    moe::setLayerForm(experts, "dense");
    Value combined =
        moe::CombineOp::create(builder, loc, experts.getOutput(),
                               dispatch.getSource(), router.getWeights(),
                               /*passthrough=*/Value(), /*indices=*/Value());
    if (!layer.tokenSplit.empty()) {
      // Split the tokens back as the dense form did: its leading sizes
      // without E, then H.
      Value shape = moe::ConcatOp::create(builder, loc, layer.tokenSplit,
                                          builder.getI64IntegerAttr(0));
      combined = moe::ReshapeOp::create(builder, loc, combined, shape,
                                        builder.getI64IntegerAttr(0));
    }
    if (combined.getType() != result.getType()) {
      layer.topK.emitRemark("MoE dense experts not rewritten: the combined "
                            "output type ")
          << combined.getType() << " differs from the layer's "
          << result.getType();
      // Erase what was built, users first, so the graph is left as it was.
      for (Operation *op = combined.getDefiningOp(); op != router;) {
        Operation *previous = op->getPrevNode();
        op->erase();
        op = previous;
      }
      router.erase();
      return failure();
    }
    return commitLayerRewrite(getArgument(), layer.topK, result.getOutput(),
                              combined, layer.tokens);
  }
};

} // namespace
