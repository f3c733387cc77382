//===- DetectSegmentExperts.cpp - grouped_mm segments form to sparse ops -===//
//
// Recognises the MoE form transformers' ONNX exporter writes for the default
// `grouped_mm` experts, as moe-canonicalize-segments leaves it. With `ids`,
// `w` the `[T, k]` expert ids and routing weights:
//
//   perm        = argsort(flatten(ids))          (stable: top_k largest 0)
//   rows[i]     = x[perm[i] / k]                 (tokens in sorted order)
//   seg(e)      = moe.segment ids[perm] expert e (expert e's sorted rows)
//   h           = concat_e(rows[seg(e)] @ W1[e]) (+ b1[ids[perm]])
//   y           = concat_e(act(h)[seg(e)] @ W2[e]) (+ b2[ids[perm]])
//   z[perm[i]]  = y[i] * flatten(w)[perm[i]]     (the inverse permutation)
//   out[t]      = sum_j z[t * k + j]
//
// which is `out[t] = sum_j w[t, j] * FFN_{ids[t, j]}(x[t])`. The sorted rows
// are exactly moe.dispatch's (grouped by expert, each group in assignment
// order), so the layer becomes [moe.router ->] moe.dispatch -> moe.experts
// -> moe.combine. The gate is not this detector's business: ids are the
// indices of any top-k over `[T, E]` and w any `[T, k]` weights the graph
// computes; a gate matchLayerGate knows becomes moe.router, any other stays
// generic ops feeding the dispatch and the combine.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchFfn.h"
#include "passes/MatchSupport.h"
#include "passes/NearMiss.h"
#include "passes/SegmentSupport.h"
#include "passes/SharedExperts.h"

#include "mlir/IR/BuiltinTypes.h"

namespace moec {
#define GEN_PASS_DEF_MOEDETECTSEGMENTEXPERTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;
using namespace moec::segments;

namespace {

/// Why a match failed: the message of the remark.
using Failure = std::string;

/// Whether `value` is `0, 1, ..., N - 1`: `range(0, N, 1)`, or the constant
/// it folds to when N is static (one decoded token).
bool isIota(Value value) {
  if (auto range = value.getDefiningOp<moe::RangeOp>())
    return moe::getConstantInt(range.getStart()) == 0 &&
           moe::getConstantInt(range.getDelta()) == 1;
  std::optional<SmallVector<int64_t>> values = moe::getConstantInts(value);
  if (!values || getShape(value).size() != 1)
    return false;
  for (auto [i, v] : llvm::enumerate(*values))
    if (v != static_cast<int64_t>(i))
      return false;
  return true;
}

/// Whether the vector `data` provably has `perm`'s length: both static and
/// equal, or `data` expanded or built to `shape(perm)`.
bool hasLengthOf(Value data, Value perm) {
  ArrayRef<int64_t> dataShape = getShape(data), permShape = getShape(perm);
  if (dataShape.size() != 1 || permShape.size() != 1)
    return false;
  if (!ShapedType::isDynamic(dataShape[0]))
    return dataShape[0] == permShape[0];
  Value shape;
  if (auto expand = data.getDefiningOp<moe::ExpandOp>())
    shape = expand.getShape();
  else if (auto build = data.getDefiningOp<moe::ConstantOfShapeOp>())
    shape = build.getInput();
  std::optional<SmallVector<moe::ShapeEntry>> entries =
      shape ? moe::getShapeEntries(shape) : std::nullopt;
  return entries && entries->size() == 1 &&
         entries->front().isSameAs(moe::ShapeEntry::ofDim(perm, 0));
}

/// One projection of the experts in segment form: `concat_e(rows[segment_e]
/// @ W[e]) (+ b[sortedIds])`.
struct SegmentProduct {
  /// The sorted `[N, in]` rows.
  Value rows;
  /// The `[E, in, out]` (layout in_out) or `[E, out, in]` (out_in) weight
  /// and optional `[E, out]` bias.
  Value weight, bias;
  moe::WeightLayout layout = moe::WeightLayout::InOut;
  SmallVector<Value> segments;
};

/// The rows and matrix of `x @ W` (mat_mul, in_out) or `gemm(x, W)` without
/// bias or scaling (out_in where W is transposed), in `layout`.
std::optional<std::pair<Value, Value>>
matchProjection(Value value, moe::WeightLayout &layout) {
  if (auto matmul = value.getDefiningOp<moe::MatMulOp>()) {
    layout = moe::WeightLayout::InOut;
    return std::pair(matmul.getA(), matmul.getB());
  }
  auto gemm = value.getDefiningOp<moe::GemmOp>();
  if (!gemm || gemm.getC() || gemm.getTransA() != 0 ||
      gemm.getAlpha().convertToFloat() != 1.0f)
    return std::nullopt;
  layout =
      gemm.getTransB() ? moe::WeightLayout::OutIn : moe::WeightLayout::InOut;
  return std::pair(gemm.getA(), gemm.getB());
}

/// The `[E, in, out]` weights of which the `[in, out]` `matrices` are the
/// experts' in order: the constant a split into E pieces came from, or a
/// moe.stack of the matrices' constants (built before `anchor`).
Value getStackedWeight(ArrayRef<Value> matrices, Operation *anchor) {
  Value whole;
  for (auto [e, matrix] : llvm::enumerate(matrices)) {
    auto squeeze = matrix.getDefiningOp<moe::SqueezeOp>();
    auto piece = squeeze ? dyn_cast<OpResult>(squeeze.getData()) : OpResult();
    auto split = piece ? dyn_cast<moe::SplitOp>(piece.getOwner()) : nullptr;
    if (!split || piece.getResultNumber() != e || split.getAxis() != 0 ||
        split->getNumResults() != matrices.size() ||
        getShape(piece).size() != 3 || getShape(piece)[0] != 1 ||
        (whole && split.getInput() != whole)) {
      whole = nullptr;
      break;
    }
    whole = split.getInput();
  }
  auto constant = whole ? whole.getDefiningOp<moe::ConstantOp>() : nullptr;
  if (constant && constant.getType().getElementType().isF32())
    return whole;
  for (Value matrix : matrices) {
    auto piece = matrix.getDefiningOp<moe::ConstantOp>();
    if (!piece || getShape(matrix).size() != 2 ||
        getShape(matrix) != getShape(matrices.front()) ||
        !piece.getType().getElementType().isF32())
      return nullptr;
  }
  OpBuilder builder(anchor);
  return moe::StackOp::create(builder, anchor->getLoc(), matrices);
}

/// Matches `value` as a SegmentProduct over `numExperts` segments, the bias
/// gathered at `sortedIds`.
std::optional<SegmentProduct> matchSegmentProduct(Value value, Value sortedIds,
                                                  int64_t numExperts,
                                                  Operation *anchor) {
  SegmentProduct product;
  if (auto add = value.getDefiningOp<moe::AddOp>()) {
    for (auto [sum, bias] : {std::pair(add.getLhs(), add.getRhs()),
                             std::pair(add.getRhs(), add.getLhs())}) {
      auto gather = bias.getDefiningOp<moe::GatherOp>();
      auto constant =
          gather ? gather.getData().getDefiningOp<moe::ConstantOp>() : nullptr;
      if (constant && gather.getIndices() == sortedIds &&
          gather.getAxis() == 0 && getShape(constant).size() == 2 &&
          getShape(constant)[0] == numExperts &&
          constant.getType().getElementType().isF32()) {
        product.bias = constant.getOutput();
        value = sum;
        break;
      }
    }
    if (!product.bias)
      return std::nullopt;
  }
  auto concat = value.getDefiningOp<moe::ConcatOp>();
  if (!concat || concat.getAxis() != 0 ||
      concat.getInputs().size() != static_cast<size_t>(numExperts))
    return std::nullopt;
  SmallVector<Value> matrices;
  for (auto [e, piece] : llvm::enumerate(concat.getInputs())) {
    moe::WeightLayout layout;
    std::optional<std::pair<Value, Value>> projection =
        matchProjection(piece, layout);
    auto gather =
        projection ? projection->first.getDefiningOp<moe::GatherOp>() : nullptr;
    if (!gather || gather.getAxis() != 0 ||
        getShape(gather.getIndices()).size() != 1 ||
        getShape(projection->second).size() != 2 ||
        (product.rows && gather.getData() != product.rows) ||
        (e > 0 && layout != product.layout))
      return std::nullopt;
    product.layout = layout;
    product.rows = gather.getData();
    product.segments.push_back(gather.getIndices());
    matrices.push_back(projection->second);
  }
  product.weight = getStackedWeight(matrices, anchor);
  if (!product.weight)
    return std::nullopt;
  if (product.bias &&
      getShape(product.bias)[1] !=
          getMatrixInOut(getShape(product.weight), product.layout).second) {
    eraseIfUnused(product.weight);
    return std::nullopt;
  }
  return product;
}

/// Matches the gated activation `activated` of the first projection's
/// `[N, 2F]` output (matchGatedActivation: `silu(g) * u` or a clamped
/// SwiGLU, on its concatenated halves or its even / odd columns). Returns
/// that output and F in `ffn`, or null.
Value matchActivation(Value activated, GatedActivation &activation,
                      int64_t &ffn) {
  if (getShape(activated).size() != 2 ||
      matchGatedActivation(activated, activation) ||
      getShape(activation.fused).size() != 2)
    return nullptr;
  ffn = getShape(activated)[1];
  return activation.fused;
}

/// One segments-form MoE layer, as matched.
struct SegmentLayer {
  moe::TopKOp sort;
  /// The `[T, k]` expert ids and the op computing them (the remarks' anchor).
  Value ids;
  Operation *router = nullptr;
  /// The `[T, k]` routing weights and the `[T, H]` tokens.
  Value weights, tokens;
  int64_t numExperts = 0, topK = 0, hidden = 0;
  SegmentProduct gateUp, down;
  /// The `[E, ...]` up projection where it is apart from the gate's (then
  /// `gateUp` is the gate's alone), else null.
  Value upWeight;
  GatedActivation activation;
  /// The `[T, H]` sum over k the layer replaces.
  Value result;
};

/// Matches the segments form around the stable sort `sort` of the flattened
/// indices of `router`; each step checks one op and says what it needs.
class SegmentMatcher {
public:
  SegmentMatcher(Value ids, int64_t numExperts, moe::TopKOp sort) {
    layer.ids = ids;
    layer.router = ids.getDefiningOp();
    layer.numExperts = numExperts;
    layer.sort = sort;
  }

  std::optional<Failure> match() {
    moe::TopKOp sort = layer.sort;
    layer.topK = getShape(layer.ids)[1];
    Value perm = sort.getIndices(), sortedIds = sort.getValues();

    if (std::optional<Failure> failure = matchUnsort(perm))
      return failure;

    // The segments form proper (each projection's products concatenated),
    // or one expert network per segment, concatenated once (Megatron).
    int64_t ffn = 0;
    if (std::optional<SegmentProduct> down = matchSegmentProduct(
            expertRows, sortedIds, layer.numExperts, sort)) {
      layer.down = *down;
      Value gateUpOutput =
          matchActivation(layer.down.rows, layer.activation, ffn);
      if (!gateUpOutput)
        return Failure("the down projection's input is not a gated "
                       "activation of size F (silu(gate) * up on the halves "
                       "of the first projection, or a clamped SwiGLU on its "
                       "even and odd columns)");
      std::optional<SegmentProduct> gateUp =
          matchSegmentProduct(gateUpOutput, sortedIds, layer.numExperts, sort);
      if (!gateUp)
        return Failure("the first projection is not a concatenation of the "
                       "experts' segment products with their weights");
      layer.gateUp = *gateUp;
    } else if (std::optional<Failure> failure =
                   matchExpertNetworks(expertRows, ffn)) {
      return failure;
    }
    if (layer.down.layout != layer.gateUp.layout)
      return Failure("the two projections' weights are in different layouts");
    auto [downIn, downOut] =
        getMatrixInOut(getShape(layer.down.weight), layer.down.layout);
    auto [gateUpIn, gateUpOut] =
        getMatrixInOut(getShape(layer.gateUp.weight), layer.gateUp.layout);
    layer.hidden = downOut;
    if (downOut != hidden)
      return Failure("the down projection does not produce H columns");
    if (downIn != ffn)
      return Failure("the down projection's input is not a gated activation "
                     "of size F (silu(gate) * up on the halves of the first "
                     "projection, or a clamped SwiGLU on its even and odd "
                     "columns)");
    // The fused gate/up projection has 2F outputs, a gate apart from its up
    // projection (of the same shape) F.
    if (gateUpIn != layer.hidden ||
        gateUpOut != (layer.upWeight ? ffn : 2 * ffn) ||
        (layer.upWeight &&
         getShape(layer.upWeight) != getShape(layer.gateUp.weight)))
      return Failure("the first projection's weights are not H x 2F per "
                     "expert");
    if (std::optional<Failure> failure = checkSegments(layer.down.segments))
      return failure;
    if (std::optional<Failure> failure = checkSegments(layer.gateUp.segments))
      return failure;

    auto gather = layer.gateUp.rows.getDefiningOp<moe::GatherOp>();
    if (!gather || gather.getAxis() != 0 ||
        !isTokenOf(gather.getIndices(), perm, layer.topK))
      return Failure("the sorted rows are not the tokens gathered at sorted "
                     "assignment / k");
    layer.tokens = gather.getData();
    ArrayRef<int64_t> tokens = getShape(layer.tokens);
    if (tokens.size() != 2 || tokens[1] != layer.hidden ||
        !getElementTypeOrSelf(layer.tokens.getType()).isF32())
      return Failure("the tokens are not an f32 [T, H] matrix");
    return std::nullopt;
  }

  SegmentLayer layer;

private:
  /// The sorted `[N, H]` expert outputs the unsort reads, and H.
  Value expertRows;
  int64_t hidden = 0;

  /// Matches `concat_e(act(rows[segment e] @ W1[e]) @ W2[e])`: one gated
  /// expert network per segment (Megatron-Core's SequentialMLP), the same
  /// activation for every expert, into layer.gateUp, layer.down and
  /// layer.activation (F in `ffn`).
  std::optional<Failure> matchExpertNetworks(Value value, int64_t &ffn) {
    auto concat = value.getDefiningOp<moe::ConcatOp>();
    if (!concat || concat.getAxis() != 0 ||
        concat.getInputs().size() != static_cast<size_t>(layer.numExperts))
      return Failure("the down projection is neither a concatenation of the "
                     "experts' segment products with their weights nor one "
                     "expert network per segment");
    SmallVector<Value> gateUps, ups, downs;
    for (auto [e, piece] : llvm::enumerate(concat.getInputs())) {
      moe::WeightLayout downLayout, gateUpLayout, upLayout;
      std::optional<std::pair<Value, Value>> down =
          matchProjection(piece, downLayout);
      GatedActivation activation;
      int64_t width = 0;
      Value fused =
          down ? matchActivation(down->first, activation, width) : Value();
      std::optional<std::pair<Value, Value>> gateUp =
          fused ? matchProjection(fused, gateUpLayout) : std::nullopt;
      // Or silu(x @ W1) * (x @ W3) with separate gate and up matrices.
      std::optional<std::pair<Value, Value>> up;
      std::optional<std::pair<Value, Value>> parts =
          down && !fused ? matchSiluGlu(down->first) : std::nullopt;
      if (parts && getShape(parts->first).size() == 2) {
        gateUp = matchProjection(parts->first, gateUpLayout);
        up = matchProjection(parts->second, upLayout);
        activation = GatedActivation();
        width = getShape(parts->first)[1];
        if (!up || !gateUp || up->first != gateUp->first ||
            upLayout != gateUpLayout)
          gateUp = std::nullopt;
      }
      auto gather =
          gateUp ? gateUp->first.getDefiningOp<moe::GatherOp>() : nullptr;
      if (!gather || gather.getAxis() != 0 ||
          getShape(gather.getIndices()).size() != 1)
        return Failure("expert " + std::to_string(e) +
                       "'s network is not act(rows[segment] @ W1) @ W2 with "
                       "a gated activation");
      if (e > 0 && static_cast<bool>(up) != !ups.empty())
        return Failure("expert " + std::to_string(e) +
                       "'s network differs from expert 0's in its "
                       "activation, rows or weight layout");
      if (up)
        ups.push_back(up->second);
      const GatedActivation &first = layer.activation;
      if (e == 0) {
        layer.activation = activation;
        layer.gateUp.rows = gather.getData();
        layer.gateUp.layout = gateUpLayout;
        layer.down.layout = downLayout;
        ffn = width;
      } else if (activation.activation != first.activation ||
                 activation.glu != first.glu ||
                 activation.alpha != first.alpha ||
                 activation.beta != first.beta ||
                 activation.limit != first.limit || width != ffn ||
                 gather.getData() != layer.gateUp.rows ||
                 gateUpLayout != layer.gateUp.layout ||
                 downLayout != layer.down.layout) {
        return Failure("expert " + std::to_string(e) +
                       "'s network differs from expert 0's in its "
                       "activation, rows or weight layout");
      }
      layer.gateUp.segments.push_back(gather.getIndices());
      layer.down.segments.push_back(gather.getIndices());
      gateUps.push_back(gateUp->second);
      downs.push_back(down->second);
    }
    layer.gateUp.weight = getStackedWeight(gateUps, layer.sort);
    layer.down.weight = getStackedWeight(downs, layer.sort);
    if (!ups.empty())
      layer.upWeight = getStackedWeight(ups, layer.sort);
    if (!layer.gateUp.weight || !layer.down.weight ||
        (!ups.empty() && !layer.upWeight))
      return Failure("the experts' weights are not f32 constants of one "
                     "shape");
    return std::nullopt;
  }

  /// Whether the row vectors of the E products are, in order, the
  /// moe.segment of each expert of the sorted ids (which
  /// moe-canonicalize-segments proved the exporter's ranges to be).
  std::optional<Failure> checkSegments(ArrayRef<Value> segments) {
    for (auto [e, rows] : llvm::enumerate(segments)) {
      auto segment = rows.getDefiningOp<moe::SegmentOp>();
      if (!segment || segment.getIds() != layer.sort.getValues() ||
          segment.getExpert() != e)
        return Failure("the rows of expert " + std::to_string(e) +
                       " are not the moe.segment of expert " +
                       std::to_string(e) +
                       " of the sorted ids (the "
                       "exporter's ranges over a histogram of them)");
    }
    return std::nullopt;
  }

  /// Matches, from the sort's permutation, `reduce_sum(reshape(gather(y *
  /// unsqueeze(gather(flatten(w), perm), -1), inverse(perm)), [T, k, H]),
  /// 1)` with `inverse(perm) = scatter_elements(_, perm, range(0, N))`, and
  /// the down projection y.
  std::optional<Failure> matchUnsort(Value perm) {
    moe::ScatterElementsOp inverse;
    moe::GatherOp sortedWeights;
    for (Operation *user : perm.getUsers()) {
      if (auto scatter = dyn_cast<moe::ScatterElementsOp>(user))
        if (scatter.getIndices() == perm && scatter.getAxis() == 0 &&
            scatter.getReduction() == "none")
          inverse = scatter;
      if (auto gather = dyn_cast<moe::GatherOp>(user))
        if (gather.getIndices() == perm && gather.getAxis() == 0 &&
            getShape(gather.getData()).size() == 1)
          sortedWeights = gather;
    }
    // Every position of a vector of perm's length is written once (perm is
    // a permutation), so whatever it held is overwritten.
    if (!inverse || !isIota(inverse.getUpdates()) ||
        !hasLengthOf(inverse.getData(), perm))
      return Failure("the sorted order is not inverted by scattering "
                     "range(0, N) at the permutation into a vector of its "
                     "length");
    auto unsorted = getOnlyUserOf<moe::GatherOp>(inverse.getOutput());
    if (!unsorted || unsorted.getIndices() != inverse.getOutput() ||
        unsorted.getAxis() != 0)
      return Failure("the expert rows are not put back in assignment order "
                     "by the inverse permutation");
    Value scaled = unsorted.getData();

    if (!sortedWeights)
      return Failure("the routing weights are not taken in the sorted order");
    auto flatWeights = sortedWeights.getData().getDefiningOp<moe::ReshapeOp>();
    if (!flatWeights ||
        !isFlattenedVector(sortedWeights.getData(), flatWeights.getData()))
      return Failure("the sorted routing weights are not the flattened [T, k] "
                     "weights");
    layer.weights = flatWeights.getData();
    ArrayRef<int64_t> weights = getShape(layer.weights);
    if (weights.size() != 2 || weights[1] != layer.topK ||
        !getElementTypeOrSelf(layer.weights.getType()).isF32())
      return Failure("the routing weights are not f32 [T, k]");
    auto column = getOnlyUserOf<moe::UnsqueezeOp>(sortedWeights.getOutput());
    auto scale = scaled.getDefiningOp<moe::MulOp>();
    expertRows =
        scale && column ? otherOperand(scale, column.getOutput()) : Value();
    if (!expertRows || !column.getAxes() ||
        !isConstAxes(column.getAxes(), {1}, 2))
      return Failure("the sorted expert rows are not scaled by the sorted "
                     "routing weights");

    auto perToken = getOnlyUserOf<moe::ReshapeOp>(unsorted.getOutput());
    ArrayRef<int64_t> perTokenShape =
        perToken ? getShape(perToken.getOutput()) : ArrayRef<int64_t>();
    auto sum = perToken ? getOnlyUserOf<moe::ReduceSumOp>(perToken.getOutput())
                        : nullptr;
    if (perTokenShape.size() != 3 || perTokenShape[1] != layer.topK || !sum ||
        sum.getKeepdims() != 0 || !sum.getAxes() ||
        !isConstAxes(sum.getAxes(), {1}, 3))
      return Failure("the rows in assignment order are not summed over k");
    layer.result = sum.getOutput();
    hidden = perTokenShape[2];
    return std::nullopt;
  }
};

struct DetectSegmentExpertsPass
    : public moec::impl::MoeDetectSegmentExpertsBase<DetectSegmentExpertsPass> {
  void runOnOperation() override {
    SmallVector<std::tuple<Value, int64_t, moe::TopKOp>> candidates;
    getOperation().walk([&](moe::TopKOp sort) {
      if (std::optional<ExpertSort> expertSort = matchExpertSort(sort))
        candidates.push_back({expertSort->ids, expertSort->numExperts, sort});
    });
    SmallVector<SegmentLayer, 2> layers;
    for (auto [ids, numExperts, sort] : candidates) {
      SegmentMatcher matcher(ids, numExperts, sort);
      if (std::optional<Failure> failure = matcher.match()) {
        recordNearMiss(matcher.layer.router, "segment experts", *failure);
        continue;
      }
      layers.push_back(matcher.layer);
    }
    // The segments are the exporter's ranges again before any rewrite is
    // validated against the layer's original ops (and so that no plan holds
    // one where no layer was taken).
    bool changed = false;
    getOperation().walk([&](moe::SegmentOp segment) {
      segment.getRows().replaceAllUsesWith(segment.getFallback());
      segment.erase();
      changed = true;
    });
    for (SegmentLayer &layer : lastLayerFirst(layers)) {
      layer.gateUp.segments.clear();
      layer.down.segments.clear();
      changed |= succeeded(rewrite(layer));
    }
    // Also the weight stacks a failed match built.
    if (changed || !candidates.empty())
      eraseDeadOps(getOperation().getBody());
  }

  /// Builds [moe.router ->] moe.dispatch -> moe.experts -> moe.combine for
  /// `layer` and commits it through validation.
  LogicalResult rewrite(SegmentLayer &layer) {
    // The gate is any computation of provable expert indices; a known one
    // becomes moe.router (matchLayerGate, shared with the stacked form).
    LayerGate gate;
    if (std::optional<std::string> why = matchLayerGate(
            layer.tokens, layer.ids, layer.weights, layer.numExperts, gate)) {
      layer.router->emitRemark("MoE segment experts not rewritten: ") << *why;
      return failure();
    }
    ExpertFfn ffn;
    ffn.w1 = layer.gateUp.weight;
    ffn.b1 = layer.gateUp.bias;
    ffn.w2 = layer.down.weight;
    ffn.b2 = layer.down.bias;
    ffn.layout = layer.down.layout;
    setActivation(ffn, layer.activation);
    if (layer.upWeight) {
      ffn.w3 = layer.upWeight;
      ffn.glu = std::nullopt;
    }
    moe::CombineOp combine;
    std::optional<std::string> why = replaceWithExpertsLayer(
        getArgument(), layer.router, layer.result, gate, ffn, &combine);
    if (why) {
      if (!why->empty())
        layer.router->emitRemark("MoE segment experts not rewritten: ") << *why;
      return failure();
    }
    rewriteSharedExperts(getArgument(), combine, layer.tokens);
    return success();
  }
};

} // namespace
