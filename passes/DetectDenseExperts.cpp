//===- DetectDenseExperts.cpp - dense-masked MoE forms to sparse ops ------===//
//
// Recognises the dense MoE forms: every expert runs on every token with
// stacked 3-D weights, and a [T, E] routing matrix that is zero outside each
// token's top-k experts weights the expert outputs in a sum over the experts.
// GPT-OSS exports it with batched products on `[E, T, N]` (the tokens tiled
// E times) and `reduce_sum(Y * R^T)`; Tutel- and fairseq-style code writes
// it with einsums on `[T, E, N]` (`th,ehf->tef`, `te,teh->th`). The match is
// rooted at a `moe.top_k` and proves, op by op, that the final sum equals
//
//   out[t] = sum_j w[t, j] * FFN_{indices[t, j]}(x[t])
//
// (the top-k indices are distinct, so the scatter puts each w[t, j] at its
// own expert), so the rewrite into [moe.router ->] dispatch -> experts ->
// combine only skips the work whose routing weight is zero. That is exact
// for finite expert outputs: an expert output that is infinite or NaN at a
// zero weight makes the dense sum NaN, which the sparse layer does not
// reproduce (as in every sparse engine). The stacked weights are used as
// they are; nothing is copied. Anything else stays generic with a remark
// naming the first condition that failed.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/LayerForm.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchFfn.h"
#include "passes/MatchSupport.h"
#include "passes/NearMiss.h"
#include "passes/RoutingMatrix.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/StringExtras.h"

namespace moec {
#define GEN_PASS_DEF_MOEDETECTDENSEEXPERTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// Why a match failed: the message of the remark.
using Failure = std::string;

/// The letters of a two-operand einsum `lhs,rhs->out` whose terms name
/// every dimension once (no `...`, no repeated letter in a term).
struct EinsumTerms {
  std::string lhs, rhs, out;
};

std::optional<EinsumTerms> parseEinsum(moe::EinsumOp einsum) {
  if (einsum.getInputs().size() != 2)
    return std::nullopt;
  std::string equation;
  for (char c : einsum.getEquation())
    if (c != ' ')
      equation.push_back(c);
  size_t comma = equation.find(','), arrow = equation.find("->");
  if (comma == std::string::npos || arrow == std::string::npos || comma > arrow)
    return std::nullopt;
  EinsumTerms terms{equation.substr(0, comma),
                    equation.substr(comma + 1, arrow - comma - 1),
                    equation.substr(arrow + 2)};
  for (const std::string &term : {terms.lhs, terms.rhs, terms.out}) {
    if (!llvm::all_of(term, [](char c) { return llvm::isAlpha(c); }))
      return std::nullopt;
    for (size_t i = 0; i < term.size(); ++i)
      if (term.find(term[i], i + 1) != std::string::npos)
        return std::nullopt;
  }
  return terms;
}

/// A projection of rows by every expert's weight, batched over an expert
/// axis of a rank-3 result `[.., E, .., out]`.
struct BatchedLinear {
  /// The rows: `[T, in]` shared by every expert, or `[.., E, .., in]` with
  /// the result's layout (one row set per expert).
  Value input;
  bool shared = false;
  /// `[E, in, out]` (in_out) or `[E, out, in]` (out_in).
  moe::ConstantOp weight;
  moe::WeightLayout layout = moe::WeightLayout::InOut;
  /// Null, or a constant broadcasting `[E, out]` over the result: 1 at
  /// every other axis.
  moe::ConstantOp bias;
  int64_t expertAxis = 0;
};

/// Whether `bias` broadcasts as `[E, out]` onto a rank-3 `[.., E, .., out]`
/// result with the experts at `expertAxis`.
bool isExpertBias(moe::ConstantOp bias, int64_t expertAxis, int64_t experts,
                  int64_t out) {
  if (!bias.getType().getElementType().isF32())
    return false;
  ArrayRef<int64_t> shape = bias.getType().getShape();
  if (shape.size() == 2)
    return expertAxis == 1 && shape == ArrayRef<int64_t>{experts, out};
  if (shape.size() != 3 || shape[expertAxis] != experts || shape[2] != out)
    return false;
  return shape[1 - expertAxis] == 1;
}

/// Matches `output` as a BatchedLinear: `matmul(A, W)` with `A` `[E, T, in]`
/// and `W` `[E, in, out]` (GPT-OSS), or an einsum of rows and a constant
/// `[E, ., .]` weight whose letters contract `in` and keep E and `out` last
/// (`th,ehf->tef`, `tef,efh->teh`, `eth,ehf->etf`, weights in either
/// layout), each plus an optional bias.
std::optional<BatchedLinear> matchBatchedLinear(Value output) {
  ArrayRef<int64_t> outShape = getShape(output);
  if (outShape.size() != 3 || !getElementTypeOrSelf(output.getType()).isF32())
    return std::nullopt;
  Value product = output;
  moe::ConstantOp bias;
  if (auto add = output.getDefiningOp<moe::AddOp>()) {
    for (auto [lhs, rhs] : {std::pair(add.getLhs(), add.getRhs()),
                            std::pair(add.getRhs(), add.getLhs())})
      if (auto constant = rhs.getDefiningOp<moe::ConstantOp>();
          constant && isa<moe::MatMulOp, moe::EinsumOp>(lhs.getDefiningOp())) {
        product = lhs;
        bias = constant;
        break;
      }
    if (!bias)
      return std::nullopt;
  }
  BatchedLinear linear;
  if (auto matMul = product.getDefiningOp<moe::MatMulOp>()) {
    linear.input = matMul.getA();
    linear.weight = matMul.getB().getDefiningOp<moe::ConstantOp>();
    if (getShape(linear.input).size() != 3)
      return std::nullopt;
  } else if (auto einsum = product.getDefiningOp<moe::EinsumOp>()) {
    std::optional<EinsumTerms> terms = parseEinsum(einsum);
    if (!terms || terms->out.size() != 3)
      return std::nullopt;
    Value lhs = einsum.getInputs()[0], rhs = einsum.getInputs()[1];
    std::string rows = terms->lhs, weightLetters = terms->rhs;
    if (lhs.getDefiningOp<moe::ConstantOp>() &&
        !rhs.getDefiningOp<moe::ConstantOp>()) {
      std::swap(lhs, rhs);
      std::swap(rows, weightLetters);
    }
    linear.input = lhs;
    linear.weight = rhs.getDefiningOp<moe::ConstantOp>();
    const std::string &out = terms->out;
    if (weightLetters.size() != 3)
      return std::nullopt;
    // The weight is [e, in, out] or [e, out, in]: e and out kept in the
    // result, in contracted with the rows.
    char expert = weightLetters[0], outLetter = out.back();
    size_t expertAt = out.find(expert);
    if (expertAt == std::string::npos || expertAt == 2)
      return std::nullopt;
    char inLetter;
    if (weightLetters[2] == outLetter) {
      inLetter = weightLetters[1];
      linear.layout = moe::WeightLayout::InOut;
    } else if (weightLetters[1] == outLetter) {
      inLetter = weightLetters[2];
      linear.layout = moe::WeightLayout::OutIn;
    } else {
      return std::nullopt;
    }
    if (out.find(inLetter) != std::string::npos)
      return std::nullopt;
    char tokenLetter = out[1 - expertAt];
    if (rows == std::string{tokenLetter, inLetter}) {
      linear.shared = true;
    } else {
      std::string perExpert = out;
      perExpert[2] = inLetter;
      if (rows != perExpert)
        return std::nullopt;
    }
    linear.expertAxis = expertAt;
  } else {
    return std::nullopt;
  }
  if (!linear.weight || !linear.weight.getType().getElementType().isF32() ||
      linear.weight.getType().getRank() != 3)
    return std::nullopt;
  int64_t experts = linear.weight.getType().getDimSize(0);
  if (bias && !isExpertBias(bias, linear.expertAxis, experts, outShape[2]))
    return std::nullopt;
  linear.bias = bias;
  return linear;
}

/// One dense MoE layer, as matched.
struct DenseLayer {
  moe::TopKOp topK;
  /// The `[T, H]` rows every expert runs on; the routing matrix's top-k
  /// weights.
  Value tokens, weights;
  int64_t numExperts = 0, hidden = 0, ffn = 0;
  /// The experts at axis 0 (`[E, T, N]`) or 1 (`[T, E, N]`) of the values
  /// between the tokens and the sum.
  int64_t expertAxis = 0;
  ExpertFfn experts;
  /// The final sum over the experts, and the leading sizes both reshapes
  /// before a `reduce_sum` split the token dimension into (empty when the
  /// layer works on `[T, ...]` directly).
  Value result;
  SmallVector<Value> tokenSplit;
};

/// Matches a dense layer from its `moe.top_k` forwards; each step checks one
/// op and states the condition it needs.
class DenseMatcher {
public:
  DenseMatcher(moe::TopKOp topK, moe::ScatterElementsOp routing)
      : routing(routing) {
    layer.topK = topK;
  }

  std::optional<Failure> match() {
    // The candidate's scatter is a routing matrix (matchRoutingMatrix): the
    // top-k's distinct indices put each weight at its own expert.
    layer.numExperts = getShape(layer.topK.getInput())[1];
    layer.weights = routing.getUpdates();
    if (std::optional<Failure> failure = matchCombine())
      return failure;
    return matchExperts();
  }

  DenseLayer layer;

private:
  moe::ScatterElementsOp routing;
  /// The `[.., E, .., H]` expert outputs the routing matrix weights.
  Value expertOutputs;

  std::optional<Failure> matchCombine() {
    Value matrix = routing.getOutput();
    if (auto einsum = getOnlyUserOf<moe::EinsumOp>(matrix))
      return matchEinsumCombine(einsum);
    return matchReduceSumCombine();
  }

  /// Matches `einsum("te,teh->th", R, Y)` (any letters, either operand
  /// order, Y `[T, E, H]` or `[E, T, H]`).
  std::optional<Failure> matchEinsumCombine(moe::EinsumOp einsum) {
    std::optional<EinsumTerms> terms = parseEinsum(einsum);
    Value matrix = routing.getOutput();
    if (!terms)
      return Failure("the routing matrix feeds an einsum that is not a "
                     "weighted sum over the experts");
    std::string weightsTerm = terms->lhs, outputsTerm = terms->rhs;
    expertOutputs = einsum.getInputs()[1];
    if (einsum.getInputs()[1] == matrix) {
      std::swap(weightsTerm, outputsTerm);
      expertOutputs = einsum.getInputs()[0];
    }
    const std::string &out = terms->out;
    if (expertOutputs == matrix || weightsTerm.size() != 2 ||
        outputsTerm.size() != 3 || out.size() != 2 ||
        out[0] != weightsTerm[0] || out[1] != outputsTerm[2] ||
        out.find(weightsTerm[1]) != std::string::npos)
      return Failure("the routing matrix feeds an einsum that is not a "
                     "weighted sum over the experts");
    size_t expertAt = outputsTerm.find(weightsTerm[1]);
    size_t tokenAt = outputsTerm.find(weightsTerm[0]);
    if (expertAt == std::string::npos || tokenAt == std::string::npos ||
        expertAt == 2 || tokenAt == 2)
      return Failure("the einsum does not weight the expert outputs by the "
                     "routing matrix");
    layer.expertAxis = expertAt;
    layer.result = einsum.getOutput();
    return std::nullopt;
  }

  /// Matches `reduce_sum(Y * unsqueeze(R^T), axes = [0])` where Y is the
  /// `[E, T, H]` expert output and R the routing matrix, both optionally
  /// reshaped to split T alike.
  std::optional<Failure> matchReduceSumCombine() {
    int64_t numExperts = layer.numExperts;
    auto transpose = getOnlyUserOf<moe::TransposeOp>(routing.getOutput());
    if (!transpose || transpose.getPermutation() != SmallVector<int64_t>{1, 0})
      return Failure("the routing matrix is neither transposed to [E, T] "
                     "nor an einsum operand");
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
    expertOutputs = mul ? otherOperand(mul, unsqueeze.getOutput()) : Value();
    if (!expertOutputs)
      return Failure("the routing weights do not scale the expert outputs");
    auto sum = getOnlyUserOf<moe::ReduceSumOp>(mul.getOutput());
    if (!sum || !sum.getAxes() || sum.getKeepdims() != 0 ||
        !isConstAxes(sum.getAxes(), {0}, weightsRank + 1))
      return Failure("the weighted expert outputs are not summed over the "
                     "experts");
    layer.result = sum.getOutput();
    layer.expertAxis = 0;
    if (!weightsSplit)
      return std::nullopt;
    // Both reshapes must split T identically: the output's shape lists the
    // routing weights' sizes and then H.
    auto outputReshape = expertOutputs.getDefiningOp<moe::ReshapeOp>();
    auto outputSplit =
        outputReshape ? outputReshape.getShape().getDefiningOp<moe::ConcatOp>()
                      : moe::ConcatOp();
    ArrayRef<int64_t> outputShape = getShape(expertOutputs);
    if (!outputSplit || outputSplit.getAxis() != 0 ||
        outputReshape.getAllowzero() != 0 || outputShape.empty() ||
        !llvm::equal(outputSplit.getInputs().drop_back(),
                     weightsSplit.getInputs()) ||
        moe::getConstantInt(outputSplit.getInputs().back()) !=
            outputShape.back())
      return Failure("the expert outputs are not split like the routing "
                     "weights");
    for (Value size : weightsSplit.getInputs().drop_front()) {
      ArrayRef<int64_t> sizeShape = getShape(size);
      if (sizeShape.size() != 1 || sizeShape[0] != 1)
        return Failure("the token split sizes are not one-element lists");
      layer.tokenSplit.push_back(size);
    }
    layer.tokenSplit.push_back(outputSplit.getInputs().back());
    expertOutputs = outputReshape.getData();
    return std::nullopt;
  }

  /// A batched projection at the layer's expert axis, or why it is not one.
  std::optional<Failure> matchProjection(Value value, StringRef what,
                                         BatchedLinear &linear) {
    std::optional<BatchedLinear> matched = matchBatchedLinear(value);
    if (!matched || matched->expertAxis != layer.expertAxis ||
        matched->weight.getType().getDimSize(0) != layer.numExperts)
      return Failure(
          (Twine("the ") + what +
           " is not a product with stacked [E, ., .] f32 weights over the "
           "experts' axis (plus an [E, out] bias)")
              .str());
    linear = *matched;
    return std::nullopt;
  }

  /// Matches every expert on every token: `act(x @ w1 + b1) [* (x @ w3 +
  /// b3)] @ w2 + b2` batched over the experts, with any activation the
  /// runtime's experts have, on the tokens shared by every expert.
  std::optional<Failure> matchExperts() {
    BatchedLinear down, gate, up;
    if (std::optional<Failure> failure = matchProjection(
            expertOutputs, "expert output's down projection", down))
      return failure;
    if (down.shared)
      return Failure("the down projection does not take one row set per "
                     "expert");
    ExpertFfn &ffn = layer.experts;
    // The activation: gated on the two parts of one fused projection,
    // ungated, or gated on two projections (w1, w3).
    GatedActivation activation;
    Value first, second;
    std::optional<Failure> gatedFailure =
        matchGatedActivation(down.input, activation);
    if (!gatedFailure || matchPlainActivation(down.input, activation)) {
      first = activation.fused;
      setActivation(ffn, activation);
    } else if (auto product = down.input.getDefiningOp<moe::MulOp>()) {
      for (auto [gateTerm, upTerm] :
           {std::pair(product.getLhs(), product.getRhs()),
            std::pair(product.getRhs(), product.getLhs())}) {
        GatedActivation gateFunction;
        std::optional<moe::Activation> gated =
            matchPlainActivation(gateTerm, gateFunction)
                ? getGatedActivation(gateFunction.activation)
                : std::nullopt;
        if (!gated)
          continue;
        first = gateFunction.fused;
        second = upTerm;
        ffn.activation = *gated;
        break;
      }
    }
    if (!first)
      return *gatedFailure;
    if (std::optional<Failure> failure =
            matchProjection(first, "experts' first projection", gate))
      return failure;
    if (second) {
      if (std::optional<Failure> failure =
              matchProjection(second, "experts' up projection", up))
        return failure;
      if (up.input != gate.input || up.layout != gate.layout)
        return Failure("the gate and up projections differ in rows or "
                       "weight layout");
    }
    if (gate.layout != down.layout)
      return Failure("the projections mix [in, out] and [out, in] weights");
    if (std::optional<Failure> failure = matchTokens(gate))
      return failure;

    // Sizes: w1 [E, H, F or 2F], w3 like w1, w2 [E, F, H] in the layout.
    ffn.layout = down.layout;
    auto [downIn, downOut] =
        getMatrixInOut(down.weight.getType().getShape(), ffn.layout);
    auto [gateIn, gateOut] =
        getMatrixInOut(gate.weight.getType().getShape(), ffn.layout);
    layer.ffn = downIn;
    int64_t width = ffn.glu ? 2 * layer.ffn : layer.ffn;
    if (downOut != layer.hidden || gateIn != layer.hidden || gateOut != width ||
        (second && up.weight.getType() != gate.weight.getType()))
      return Failure("the expert weights' sizes do not chain H -> F -> H");
    // A null bias constant stays a null value.
    auto value = [](moe::ConstantOp constant) {
      return constant ? constant.getResult() : Value();
    };
    ffn.w1 = gate.weight;
    ffn.b1 = value(gate.bias);
    ffn.w2 = down.weight;
    ffn.b2 = value(down.bias);
    if (second) {
      ffn.w3 = up.weight;
      ffn.b3 = value(up.bias);
    }
    return std::nullopt;
  }

  /// The first projection's rows are the tokens: the `[T, H]` matrix itself
  /// (einsum), or it tiled E times and reshaped to `[E, T, H]` (GPT-OSS).
  std::optional<Failure> matchTokens(const BatchedLinear &gate) {
    Value tokens = gate.input;
    if (!gate.shared) {
      auto reshape = tokens.getDefiningOp<moe::ReshapeOp>();
      auto tile = reshape ? reshape.getData().getDefiningOp<moe::TileOp>()
                          : moe::TileOp();
      ArrayRef<int64_t> shape = getShape(tile ? tile.getInput() : Value());
      if (!tile || layer.expertAxis != 0 || shape.size() != 2 ||
          moe::getConstantInts(tile.getRepeats()) !=
              SmallVector<int64_t>{layer.numExperts, 1} ||
          reshape.getAllowzero() != 0 ||
          !isConstAxes(reshape.getShape(), {layer.numExperts, -1, shape[1]}, 0))
        return Failure("the experts' rows are not the tokens, shared or "
                       "repeated once per expert");
      tokens = tile.getInput();
    }
    ArrayRef<int64_t> shape = getShape(tokens);
    if (shape.size() != 2 || ShapedType::isDynamic(shape[1]) ||
        !getElementTypeOrSelf(tokens.getType()).isF32())
      return Failure("the tokens are not an f32 [T, H] matrix with static H");
    layer.tokens = tokens;
    layer.hidden = shape[1];
    return std::nullopt;
  }
};

/// The routing scatter that makes `topK` a candidate of the dense form:
/// a routing matrix of its indices (matchRoutingMatrix).
/// Other top-ks are routers of other forms (or no routers) and get no remark
/// here.
moe::ScatterElementsOp getRoutingScatter(moe::TopKOp topK) {
  for (Operation *user : topK.getIndices().getUsers())
    if (auto scatter = dyn_cast<moe::ScatterElementsOp>(user);
        scatter && matchRoutingMatrix(scatter.getOutput()))
      return scatter;
  return nullptr;
}

struct DetectDenseExpertsPass
    : public moec::impl::MoeDetectDenseExpertsBase<DetectDenseExpertsPass> {
  void runOnOperation() override {
    SmallVector<std::pair<moe::TopKOp, moe::ScatterElementsOp>> candidates;
    getOperation().walk([&](moe::TopKOp op) {
      if (moe::ScatterElementsOp scatter = getRoutingScatter(op))
        candidates.emplace_back(op, scatter);
    });
    bool changed = false;
    for (auto [topK, scatter] : lastLayerFirst(candidates)) {
      DenseMatcher matcher(topK, scatter);
      std::optional<Failure> failure = matcher.match();
      LayerGate gate;
      if (!failure)
        failure = matchLayerGate(matcher.layer.tokens, topK.getIndices(),
                                 matcher.layer.weights,
                                 matcher.layer.numExperts, gate);
      if (failure) {
        recordNearMiss(topK, "dense experts", *failure);
        continue;
      }
      changed |= succeeded(rewrite(matcher.layer, gate));
    }
    if (changed)
      eraseDeadOps(getOperation().getBody());
  }

  /// The `[E, N]` form of a bias that broadcasts as `[E, N]` (null stays
  /// null): a reshape that keeps the elements' order.
  static Value reshapeBias(OpBuilder &builder, Location loc, Value bias) {
    if (!bias)
      return bias;
    ArrayRef<int64_t> shape = getShape(bias);
    if (shape.size() == 2)
      return bias;
    int64_t experts = shape[0] * shape[1], out = shape[2];
    auto type = RankedTensorType::get({experts, out},
                                      getElementTypeOrSelf(bias.getType()));
    auto targetType = RankedTensorType::get({2}, builder.getI64Type());
    Value target = moe::ConstantOp::create(
        builder, loc, moe::getI64Elements(targetType, {experts, out}));
    return moe::ReshapeOp::create(builder, loc, type, bias, target,
                                  builder.getI64IntegerAttr(0));
  }

  LogicalResult rewrite(DenseLayer &layer, const LayerGate &gate) {
    Operation *resultOp = layer.result.getDefiningOp();
    OpBuilder builder(resultOp);
    Location loc = resultOp->getLoc();
    MLIRContext *context = builder.getContext();
    LayerRouting routing = createLayerRouting(builder, loc, gate);
    const ExpertFfn &ffn = layer.experts;
    Value b1 = reshapeBias(builder, loc, ffn.b1);
    Value b3 = reshapeBias(builder, loc, ffn.b3);
    Value b2 = reshapeBias(builder, loc, ffn.b2);
    auto f32 = [&](std::optional<float> value) {
      return value ? builder.getF32FloatAttr(*value) : FloatAttr();
    };
    auto experts = moe::ExpertsOp::create(
        builder, loc, routing.dispatch.getRows(), routing.dispatch.getOffsets(),
        ffn.w1, b1, ffn.w3, b3, ffn.w2, b2,
        moe::ActivationAttr::get(context, ffn.activation),
        moe::WeightLayoutAttr::get(context, ffn.layout),
        ffn.glu ? moe::GluLayoutAttr::get(context, *ffn.glu)
                : moe::GluLayoutAttr(),
        f32(ffn.alpha), f32(ffn.beta), f32(ffn.limit));
    moe::setLayerForm(experts, "dense");
    Value combined = moe::CombineOp::create(
        builder, loc, experts.getOutput(), routing.dispatch.getSource(),
        routing.weights, /*passthrough=*/Value(), /*indices=*/Value());
    if (!layer.tokenSplit.empty()) {
      // Split the tokens back as the dense form did: its leading sizes
      // without E, then H.
      Value shape = moe::ConcatOp::create(builder, loc, layer.tokenSplit,
                                          builder.getI64IntegerAttr(0));
      combined = moe::ReshapeOp::create(builder, loc, combined, shape,
                                        builder.getI64IntegerAttr(0));
    }
    if (combined.getType() != layer.result.getType()) {
      layer.topK.emitRemark("MoE dense experts not rewritten: the combined "
                            "output type ")
          << combined.getType() << " differs from the layer's "
          << layer.result.getType();
      // Erase what was built, so the graph is left as it was.
      eraseIfUnused(combined);
      return failure();
    }
    return commitLayerRewrite(getArgument(), layer.topK, layer.result, combined,
                              layer.tokens);
  }
};

} // namespace
