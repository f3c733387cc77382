//===- DetectStackedExperts.cpp - stacked-weight MoE form to sparse ops ---===//
//
// Recognises the MoE form transformers v5 exports with stacked expert weights
// and `experts_implementation = "batched_mm"`: every token is repeated k
// times, row `r = t * k + j` of the repeated tokens gathers the weights of
// its expert `indices[t, j]` from the stacked `[E, ...]` tensors and runs a
// batched matrix-vector product, and the weighted rows are summed over k:
//
//   out[t] = sum_j w[t, j] * FFN_{indices[t, j]}(x[t])
//
// The match is rooted at a `moe.top_k` and proves that equation op by op, so
// the rewrite into moe.router -> dispatch -> experts -> combine is exact. The
// stacked weights are used in place: `W[e] @ x` (the exported form) is
// `layout out_in`, `x @ W[e]` is `layout in_out`. Anything else stays generic
// with a remark naming the first condition that failed.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchSupport.h"

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
  /// The `[N, in]` rows the product is applied to.
  Value rows;
  moe::WeightLayout layout = moe::WeightLayout::OutIn;
};

/// Matches `value` (`[N, out]`) as row `r` times the weights of the expert
/// `flatIndices[r]`: `squeeze(gather(W, idx) @ unsqueeze(x, -1), -1)` with
/// `W : [E, out, in]` (layout out_in), or `squeeze(unsqueeze(x, 1) @
/// gather(W, idx), 1)` with `W : [E, in, out]` (layout in_out).
std::optional<ExpertProduct> matchExpertProduct(Value value, Value flatIndices,
                                                int64_t numExperts) {
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
  auto constant = gather.getData().getDefiningOp<moe::ConstantOp>();
  if (!constant || !constant.getType().getElementType().isF32() ||
      constant.getType().getRank() != 3 ||
      constant.getType().getDimSize(0) != numExperts)
    return std::nullopt;
  return ExpertProduct{constant.getOutput(), unsqueeze.getData(),
                       column ? moe::WeightLayout::OutIn
                              : moe::WeightLayout::InOut};
}

/// The `[in, out]` sizes of one expert's matrix of `product`.
std::pair<int64_t, int64_t> getInOut(const ExpertProduct &product) {
  return getMatrixInOut(getShape(product.weight), product.layout);
}

/// One stacked-weight MoE layer, as matched.
struct StackedLayer {
  SoftmaxGate gate;
  ExpertProduct gateUp, down;
  /// The final ReduceSum over k, whose `[T, H]` result the layer replaces.
  moe::ReduceSumOp result;
};

/// Matches the stacked form from its `moe.top_k`; each step checks one op and
/// states the condition it needs.
class StackedMatcher {
public:
  explicit StackedMatcher(moe::TopKOp topK) : topK(topK) {}

  std::optional<Failure> match() {
    SoftmaxGate &gate = layer.gate;
    if (std::optional<Failure> failure = matchSoftmaxGate(topK, gate))
      return failure;
    Value flatIndices;
    for (Operation *user : topK.getIndices().getUsers())
      if (user->getNumResults() == 1 &&
          isFlattenedVector(user->getResult(0), topK.getIndices()))
        flatIndices = user->getResult(0);
    if (!flatIndices)
      return Failure("top-k indices are not flattened to one expert per "
                     "repeated token row");
    if (std::optional<Failure> failure = matchCombine())
      return failure;

    int64_t numExperts = gate.numExperts;
    std::optional<ExpertProduct> down =
        matchExpertProduct(downOutput, flatIndices, numExperts);
    if (!down)
      return Failure("the weighted rows are not a product with the down "
                     "projections gathered at the flattened top-k indices");
    layer.down = *down;
    auto [ffn, hidden] = getInOut(layer.down);
    if (hidden != gate.hidden)
      return Failure("the down projection does not produce H columns");

    std::optional<std::pair<Value, Value>> glu = matchSiluGlu(down->rows);
    if (!glu)
      return Failure("the down projection's input is not silu(gate) * up");
    Value fused = getConcatenatedGlu(glu->first, glu->second);
    if (!fused || getShape(fused).back() != 2 * ffn)
      return Failure("gate and up are not the two halves of one fused "
                     "projection of size 2F");
    std::optional<ExpertProduct> gateUp =
        matchExpertProduct(fused, flatIndices, numExperts);
    if (!gateUp || gateUp->layout != down->layout)
      return Failure("the fused gate/up projection is not a product with "
                     "stacked weights gathered at the flattened top-k "
                     "indices, in the down projection's layout");
    layer.gateUp = *gateUp;
    if (getInOut(layer.gateUp) != std::pair(gate.hidden, 2 * ffn))
      return Failure("the fused gate/up weights are not H x 2F per expert");
    if (!isRepeatedTokens(gateUp->rows))
      return Failure("the experts' rows are not the router's tokens each "
                     "repeated k times");
    return std::nullopt;
  }

  StackedLayer layer;

private:
  moe::TopKOp topK;
  /// The `[T * k, H]` expert outputs the routing weights scale.
  Value downOutput;

  /// Matches `reduce_sum(reshape(y * unsqueeze(reshape(w, [-1]), -1),
  /// [T, k, H]), 1)`: row `t * k + j` of y scaled by `w[t, j]`, summed over j.
  std::optional<Failure> matchCombine() {
    const SoftmaxGate &gate = layer.gate;
    auto flatWeights = getOnlyUserOf<moe::ReshapeOp>(gate.weights);
    auto column = flatWeights
                      ? getOnlyUserOf<moe::UnsqueezeOp>(flatWeights.getOutput())
                      : nullptr;
    if (!flatWeights ||
        !isFlattenedVector(flatWeights.getOutput(), gate.weights) || !column ||
        !column.getAxes() || !isConstAxes(column.getAxes(), {1}, 2))
      return Failure("the routing weights are not flattened to a column of "
                     "one weight per repeated token row");
    auto scale = getOnlyUserOf<moe::MulOp>(column.getOutput());
    downOutput = scale ? otherOperand(scale, column.getOutput()) : Value();
    if (!downOutput || getShape(downOutput).size() != 2)
      return Failure("the routing weights do not scale the expert rows");
    auto perToken = getOnlyUserOf<moe::ReshapeOp>(scale.getOutput());
    ArrayRef<int64_t> perTokenShape =
        perToken ? getShape(perToken.getOutput()) : ArrayRef<int64_t>();
    // The element count fixes the leading dimension to T once the others
    // are k and H.
    if (perTokenShape.size() != 3 || perTokenShape[1] != gate.topK ||
        perTokenShape[2] != gate.hidden)
      return Failure("the weighted rows are not reshaped to [T, k, H]");
    layer.result = getOnlyUserOf<moe::ReduceSumOp>(perToken.getOutput());
    if (!layer.result || !layer.result.getAxes() ||
        layer.result.getKeepdims() != 0 ||
        !isConstAxes(layer.result.getAxes(), {1}, 3))
      return Failure("the weighted rows are not summed over k");
    return std::nullopt;
  }

  /// Whether `rows` is `flatten(tile(unsqueeze(x, 1), [1, k, 1]))`: row
  /// `t * k + j` is token t (torch's repeat_interleave).
  bool isRepeatedTokens(Value rows) {
    const SoftmaxGate &gate = layer.gate;
    Value repeated;
    if (auto flatten = rows.getDefiningOp<moe::FlattenOp>()) {
      if (flatten.getAxis() == 2)
        repeated = flatten.getInput();
    } else if (auto reshape = rows.getDefiningOp<moe::ReshapeOp>()) {
      if (moe::getConstantInts(reshape.getShape()) ==
          SmallVector<int64_t>{-1, gate.hidden})
        repeated = reshape.getData();
    }
    auto tile = repeated ? repeated.getDefiningOp<moe::TileOp>() : nullptr;
    auto unsqueeze =
        tile ? tile.getInput().getDefiningOp<moe::UnsqueezeOp>() : nullptr;
    return unsqueeze && unsqueeze.getData() == gate.tokens &&
           unsqueeze.getAxes() && isConstAxes(unsqueeze.getAxes(), {1}, 3) &&
           moe::getConstantInts(tile.getRepeats()) ==
               SmallVector<int64_t>{1, gate.topK, 1};
  }
};

/// Whether `topK` looks like the router of a stacked-weight layer: its
/// indices, possibly reshaped, gather from a stacked `[E, a, b]` constant.
/// Only candidates that then fail to match get a remark: a top-k of some
/// other purpose is not a near-miss.
bool isStackedCandidate(moe::TopKOp topK) {
  SmallVector<Value> indices = {topK.getIndices()};
  for (Operation *user : topK.getIndices().getUsers())
    if (isa<moe::ReshapeOp, moe::FlattenOp>(user))
      indices.push_back(user->getResult(0));
  for (Value value : indices)
    for (Operation *user : value.getUsers()) {
      auto gather = dyn_cast<moe::GatherOp>(user);
      auto constant =
          gather ? gather.getData().getDefiningOp<moe::ConstantOp>() : nullptr;
      if (constant && gather.getIndices() == value &&
          constant.getType().getRank() == 3)
        return true;
    }
  return false;
}

struct DetectStackedExpertsPass
    : public moec::impl::MoeDetectStackedExpertsBase<DetectStackedExpertsPass> {
  void runOnOperation() override {
    SmallVector<moe::TopKOp> candidates;
    getOperation().walk([&](moe::TopKOp op) { candidates.push_back(op); });
    bool changed = false;
    for (moe::TopKOp topK : candidates) {
      if (!isStackedCandidate(topK))
        continue;
      StackedMatcher matcher(topK);
      if (std::optional<Failure> failure = matcher.match()) {
        topK.emitRemark("MoE stacked experts not detected: ") << *failure;
        continue;
      }
      changed |= succeeded(rewrite(topK, matcher.layer));
    }
    if (changed)
      eraseDeadOps(getOperation().getBody());
  }

  LogicalResult rewrite(moe::TopKOp topK, StackedLayer &layer) {
    std::optional<Failure> why = replaceWithSiluGluLayer(
        getArgument(), topK, layer.result.getOutput(), layer.gate,
        layer.gateUp.weight, layer.down.weight, layer.down.layout);
    if (!why)
      return success();
    if (!why->empty())
      topK.emitRemark("MoE stacked experts not rewritten: ") << *why;
    return failure();
  }
};

} // namespace
