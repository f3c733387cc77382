//===- DetectStackedExperts.cpp - stacked-weight MoE form to sparse ops ---===//
//
// Recognises the MoE form transformers v5 exports with stacked expert weights
// and `experts_implementation = "batched_mm"`: every token is repeated k
// times, row `r = t * k + j` of the repeated tokens gathers the weights of
// its expert `indices[t, j]` from the stacked `[E, ...]` tensors (and the
// biases from `[E, out]` ones) and runs a batched matrix-vector product, and
// the weighted rows are summed over k:
//
//   out[t] = sum_j w[t, j] * FFN_{indices[t, j]}(x[t])
//
// The match is rooted at that sum and proves the equation op by op, on the
// expert side only: `indices` and `w` are whatever `[T, k]` values the graph
// computes (the indices provably expert indices), so that any gate is
// detected. A known gate becomes moe.router; any other stays as generic ops
// feeding moe.dispatch and moe.combine. The stacked weights are used in
// place: `W[e] @ x` (the exported form) is `layout out_in`, `x @ W[e]` is
// `layout in_out`. Shared experts added to the sum become moe.shared_expert.
// Anything else stays generic with a remark naming the first condition that
// failed.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchFfn.h"
#include "passes/MatchSupport.h"
#include "passes/NearMiss.h"
#include "passes/SharedExperts.h"

#include "mlir/IR/BuiltinTypes.h"

namespace moec {
#define GEN_PASS_DEF_MOEDETECTSTACKEDEXPERTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// Why a match failed: the message of the remark.
using Failure = std::string;

/// One product of the rows with their experts' gathered weights.
struct ExpertProduct {
  /// The stacked `[E, a, b]` weight constant.
  Value weight;
  /// The stacked `[E, out]` bias constant added to the product, or null.
  Value bias;
  /// The `[N, in]` rows the product is applied to.
  Value rows;
  moe::WeightLayout layout = moe::WeightLayout::OutIn;
};

/// The stacked f32 constant of rank `rank` with `numExperts` rows defining
/// `value`, or null.
Value getStackedConstant(Value value, int64_t rank, int64_t numExperts) {
  auto constant = value.getDefiningOp<moe::ConstantOp>();
  if (!constant || !constant.getType().getElementType().isF32() ||
      constant.getType().getRank() != rank ||
      (numExperts >= 0 && constant.getType().getDimSize(0) != numExperts))
    return nullptr;
  return constant.getOutput();
}

/// Matches `value` (`[N, out]`) as row `r` times the weights of the expert
/// `flatIndices[r]`: `squeeze(gather(W, idx) @ unsqueeze(x, -1), -1)` with
/// `W : [E, out, in]` (layout out_in), or `squeeze(unsqueeze(x, 1) @
/// gather(W, idx), 1)` with `W : [E, in, out]` (layout in_out), optionally
/// plus `gather(B, idx)` with `B : [E, out]`. A negative `numExperts` takes
/// E from the weight.
std::optional<ExpertProduct> matchExpertProduct(Value value, Value flatIndices,
                                                int64_t numExperts) {
  Value bias;
  if (auto add = value.getDefiningOp<moe::AddOp>()) {
    for (auto [product, biasRows] : {std::pair(add.getLhs(), add.getRhs()),
                                     std::pair(add.getRhs(), add.getLhs())}) {
      auto gather = biasRows.getDefiningOp<moe::GatherOp>();
      if (gather && gather.getIndices() == flatIndices &&
          gather.getAxis() == 0 && getShape(product) == getShape(value) &&
          getShape(biasRows) == getShape(value)) {
        bias = getStackedConstant(gather.getData(), 2, numExperts);
        if (bias) {
          value = product;
          break;
        }
      }
    }
    if (!bias)
      return std::nullopt;
  }
  auto squeeze = value.getDefiningOp<moe::SqueezeOp>();
  auto product =
      squeeze ? squeeze.getData().getDefiningOp<moe::MatMulOp>() : nullptr;
  if (!product || !squeeze.getAxes() || getShape(value).size() != 2)
    return std::nullopt;
  // Column form: the gathered weights on the left, rows as [N, in, 1].
  bool column = isConstAxes(squeeze.getAxes(), {2}, 3);
  if (!column && !isConstAxes(squeeze.getAxes(), {1}, 3))
    return std::nullopt;
  Value weights = column ? product.getA() : product.getB();
  Value vectors = column ? product.getB() : product.getA();
  auto gather = weights.getDefiningOp<moe::GatherOp>();
  auto unsqueeze = vectors.getDefiningOp<moe::UnsqueezeOp>();
  if (!gather || gather.getIndices() != flatIndices || gather.getAxis() != 0 ||
      !unsqueeze || !unsqueeze.getAxes() ||
      !isConstAxes(unsqueeze.getAxes(), {column ? 2 : 1}, 3))
    return std::nullopt;
  Value weight = getStackedConstant(gather.getData(), 3, numExperts);
  if (!weight || (bias && getShape(bias)[0] != getShape(weight)[0]))
    return std::nullopt;
  ExpertProduct result{weight, bias, unsqueeze.getData(),
                       column ? moe::WeightLayout::OutIn
                              : moe::WeightLayout::InOut};
  // A bias has one entry per output of the matrix.
  if (bias && getShape(bias)[1] !=
                  getMatrixInOut(getShape(weight), result.layout).second)
    return std::nullopt;
  return result;
}

/// The `[in, out]` sizes of one expert's matrix of `product`.
std::pair<int64_t, int64_t> getInOut(const ExpertProduct &product) {
  return getMatrixInOut(getShape(product.weight), product.layout);
}

/// One stacked-weight MoE layer, as matched.
struct StackedLayer {
  LayerGate gate;
  ExpertProduct gateUp, down;
  GatedActivation activation;
  /// The final ReduceSum over k, whose `[T, H]` result the layer replaces.
  moe::ReduceSumOp result;
  /// The op remarks about the layer go to: the indices' top-k, else the
  /// down projection's gather.
  Operation *anchor = nullptr;
};

/// Matches the stacked form backwards from the sum over k; each step checks
/// one op and states the condition it needs.
class StackedMatcher {
public:
  explicit StackedMatcher(moe::ReduceSumOp sum) { layer.result = sum; }

  /// Whether the sum is over rows weighted per (token, choice) whose
  /// values are products with expert weights gathered at flattened indices:
  /// the layers this pass is about. Only those get a remark when the rest
  /// of the match fails.
  bool isCandidate() {
    if (matchCombine())
      return false;
    // The down projection's rows, possibly plus a bias: a product with
    // stacked weights gathered at flattened indices.
    Value value = downOutput;
    if (auto add = value.getDefiningOp<moe::AddOp>())
      value = add.getLhs().getDefiningOp<moe::SqueezeOp>() ? add.getLhs()
                                                           : add.getRhs();
    auto squeeze = value.getDefiningOp<moe::SqueezeOp>();
    auto product =
        squeeze ? squeeze.getData().getDefiningOp<moe::MatMulOp>() : nullptr;
    if (!product)
      return false;
    for (Value operand : {product.getA(), product.getB()}) {
      auto gather = operand.getDefiningOp<moe::GatherOp>();
      if (!gather || !getStackedConstant(gather.getData(), 3, -1))
        continue;
      Value indices = gather.getIndices();
      auto flatten = indices.getDefiningOp<moe::ReshapeOp>();
      if (!flatten || !isFlattenedVector(indices, flatten.getData()))
        continue;
      flatIndices = indices;
      ids = flatten.getData();
      layer.anchor = ids.getDefiningOp<moe::TopKOp>() ? ids.getDefiningOp()
                                                      : gather.getOperation();
      return true;
    }
    return false;
  }

  std::optional<Failure> match() {
    int64_t topK = getShape(ids).size() == 2 ? getShape(ids)[1] : -1;
    if (topK < 1 || getShape(weights).size() != 2 ||
        getShape(weights)[1] != topK || perTokenShape[1] != topK)
      return Failure("the expert indices and routing weights are not [T, k] "
                     "with the k of the weighted rows' [T, k, H]");
    std::optional<ExpertProduct> down =
        matchExpertProduct(downOutput, flatIndices, -1);
    if (!down)
      return Failure("the weighted rows are not a product with the down "
                     "projections gathered at the flattened top-k indices");
    layer.down = *down;
    int64_t numExperts = getShape(down->weight)[0];
    auto [ffn, hidden] = getInOut(layer.down);
    if (hidden != perTokenShape[2])
      return Failure("the down projection does not produce H columns");

    // A gated activation of a fused [N, 2F] projection, else one of an
    // [N, F] projection (ReLU, GELU, SiLU).
    if (std::optional<Failure> failure =
            matchGatedActivation(down->rows, layer.activation))
      if (!matchPlainActivation(down->rows, layer.activation))
        return failure;
    Value fused = layer.activation.fused;
    int64_t width = layer.activation.gated ? 2 * ffn : ffn;
    if (getShape(fused).back() != width)
      return Failure("gate and up are not the two halves of one fused "
                     "projection of size 2F");
    std::optional<ExpertProduct> gateUp =
        matchExpertProduct(fused, flatIndices, numExperts);
    if (!gateUp || gateUp->layout != down->layout)
      return Failure("the fused gate/up projection is not a product with "
                     "stacked weights gathered at the flattened top-k "
                     "indices, in the down projection's layout");
    layer.gateUp = *gateUp;
    if (getInOut(layer.gateUp) != std::pair(hidden, width))
      return Failure("the fused gate/up weights are not H x 2F per expert "
                     "(H x F without a gate)");
    Value tokens = getRepeatedTokens(gateUp->rows, topK, hidden);
    if (!tokens)
      return Failure("the experts' rows are not the router's tokens each "
                     "repeated k times");
    return matchLayerGate(tokens, ids, weights, numExperts, layer.gate);
  }

  StackedLayer layer;

private:
  /// The `[T * k, H]` expert outputs the routing weights scale.
  Value downOutput;
  /// The `[T, k]` routing weights and expert indices, and the flattened
  /// indices the weights are gathered at.
  Value weights, ids, flatIndices;
  ArrayRef<int64_t> perTokenShape;

  /// Matches `reduce_sum(reshape(y * unsqueeze(reshape(w, [-1]), -1),
  /// [T, k, H]), 1)`: row `t * k + j` of y scaled by `w[t, j]`, summed over
  /// j. Sets `downOutput` to y and `weights` to w.
  std::optional<Failure> matchCombine() {
    moe::ReduceSumOp sum = layer.result;
    if (!sum.getAxes() || sum.getKeepdims() != 0 ||
        !isConstAxes(sum.getAxes(), {1}, 3))
      return Failure("not a sum over k");
    auto perToken = sum.getData().getDefiningOp<moe::ReshapeOp>();
    perTokenShape =
        perToken ? getShape(perToken.getOutput()) : ArrayRef<int64_t>();
    // The element count fixes the leading dimension to T once the others
    // are k and H.
    if (perTokenShape.size() != 3 || ShapedType::isDynamic(perTokenShape[1]) ||
        ShapedType::isDynamic(perTokenShape[2]))
      return Failure("the weighted rows are not reshaped to [T, k, H]");
    auto scale = perToken.getData().getDefiningOp<moe::MulOp>();
    if (!scale)
      return Failure("the routing weights do not scale the expert rows");
    for (auto [rows, column] : {std::pair(scale.getLhs(), scale.getRhs()),
                                std::pair(scale.getRhs(), scale.getLhs())}) {
      auto unsqueeze = column.getDefiningOp<moe::UnsqueezeOp>();
      auto flat = unsqueeze
                      ? unsqueeze.getData().getDefiningOp<moe::ReshapeOp>()
                      : nullptr;
      if (!flat || !unsqueeze.getAxes() ||
          !isConstAxes(unsqueeze.getAxes(), {1}, 2) ||
          !isFlattenedVector(flat.getOutput(), flat.getData()) ||
          getShape(rows).size() != 2 || getShape(rows)[1] != perTokenShape[2])
        continue;
      downOutput = rows;
      weights = flat.getData();
      return std::nullopt;
    }
    return Failure("the routing weights are not flattened to a column of "
                   "one weight per repeated token row");
  }

  /// The `[T, H]` tokens `x` when `rows` is `flatten(tile(unsqueeze(x, 1),
  /// [1, k, 1]))` (row `t * k + j` is token t: torch's repeat_interleave),
  /// else null.
  static Value getRepeatedTokens(Value rows, int64_t topK, int64_t hidden) {
    Value repeated;
    if (auto flatten = rows.getDefiningOp<moe::FlattenOp>()) {
      if (flatten.getAxis() == 2)
        repeated = flatten.getInput();
    } else if (auto reshape = rows.getDefiningOp<moe::ReshapeOp>()) {
      if (moe::getConstantInts(reshape.getShape()) ==
          SmallVector<int64_t>{-1, hidden})
        repeated = reshape.getData();
    }
    auto tile = repeated ? repeated.getDefiningOp<moe::TileOp>() : nullptr;
    auto unsqueeze =
        tile ? tile.getInput().getDefiningOp<moe::UnsqueezeOp>() : nullptr;
    if (!unsqueeze || !unsqueeze.getAxes() ||
        !isConstAxes(unsqueeze.getAxes(), {1}, 3) ||
        moe::getConstantInts(tile.getRepeats()) !=
            SmallVector<int64_t>{1, topK, 1} ||
        getShape(unsqueeze.getData()).size() != 2)
      return nullptr;
    return unsqueeze.getData();
  }
};

struct DetectStackedExpertsPass
    : public moec::impl::MoeDetectStackedExpertsBase<DetectStackedExpertsPass> {
  void runOnOperation() override {
    SmallVector<moe::ReduceSumOp> candidates;
    getOperation().walk([&](moe::ReduceSumOp op) { candidates.push_back(op); });
    bool changed = false;
    for (moe::ReduceSumOp sum : lastLayerFirst(candidates)) {
      StackedMatcher matcher(sum);
      if (!matcher.isCandidate())
        continue;
      if (std::optional<Failure> failure = matcher.match()) {
        recordNearMiss(matcher.layer.anchor, "stacked experts", *failure);
        continue;
      }
      changed |= succeeded(rewrite(matcher.layer));
    }
    if (changed)
      eraseDeadOps(getOperation().getBody());
  }

  LogicalResult rewrite(StackedLayer &layer) {
    ExpertFfn ffn;
    ffn.w1 = layer.gateUp.weight;
    ffn.b1 = layer.gateUp.bias;
    ffn.w2 = layer.down.weight;
    ffn.b2 = layer.down.bias;
    ffn.layout = layer.down.layout;
    setActivation(ffn, layer.activation);
    moe::CombineOp combine;
    std::optional<Failure> why = replaceWithExpertsLayer(
        getArgument(), layer.anchor, layer.result.getOutput(), layer.gate, ffn,
        &combine);
    if (!why) {
      rewriteSharedExperts(getArgument(), combine, layer.gate.tokens);
      return success();
    }
    if (!why->empty())
      layer.anchor->emitRemark("MoE stacked experts not rewritten: ") << *why;
    return failure();
  }
};

} // namespace
