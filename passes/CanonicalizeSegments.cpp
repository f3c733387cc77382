//===- CanonicalizeSegments.cpp - one form for the segments' indexing -----===//
//
// Brings the indexing idioms exporters write around per-expert row segments
// (transformers' grouped_mm: rows sorted by expert, each expert's rows a
// `Range` of the sorted order) to one form, so that moe-detect-segment-experts
// matches the computation once, whatever op the exporter chose:
//
//  * `gather_nd(data, indices)` whose index tuples have one element (and no
//    batch dimensions) is `gather(data, squeeze(indices, -1), axis 0)`;
//  * `scatter_nd(data, indices, updates)` into a vector, with one-element
//    index tuples, is `scatter_elements(data, squeeze(indices, -1), updates,
//    axis 0)` with the same reduction.
//
//  * the per-expert `range(ends[e-1], ends[e])` over `ends = cum_sum` of a
//    histogram (torch.histc's or bincount's) of the ids a stable sort of
//    the flattened expert ids gives is `moe.segment %sorted expert e`: the
//    positions of expert e's rows among the sorted rows, bounded by their
//    count T*k. The range stays as the segment's fallback.
//
// The first two are exact (the same elements are read or written, negative
// indices alike) and produce ops every backend runs; a moe.segment that
// moe-detect-segment-experts does not absorb becomes its fallback again, so
// a graph no detector takes still runs as it did.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchSupport.h"
#include "passes/SegmentSupport.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace moec {
#define GEN_PASS_DEF_MOECANONICALIZESEGMENTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;
using namespace moec::segments;

namespace {

/// `indices` (`[..., 1]`) without its trailing dimension: the operand of an
/// `unsqueeze(x, -1)` that made it, else a new squeeze.
Value dropTrailingUnit(PatternRewriter &rewriter, Location loc, Value indices) {
  int64_t rank = getShape(indices).size();
  if (auto unsqueeze = indices.getDefiningOp<moe::UnsqueezeOp>())
    if (unsqueeze.getAxes() &&
        isConstAxes(unsqueeze.getAxes(), {rank - 1}, rank))
      return unsqueeze.getData();
  auto axesType = RankedTensorType::get({1}, rewriter.getI64Type());
  Value axes = moe::ConstantOp::create(
      rewriter, loc, moe::getI64Elements(axesType, {rank - 1}));
  return moe::SqueezeOp::create(rewriter, loc, indices, axes);
}

/// Whether `indices` is a tensor of one-element index tuples (`[..., 1]`).
bool hasUnitTuples(Value indices) {
  ArrayRef<int64_t> shape = getShape(indices);
  return !shape.empty() && shape.back() == 1;
}

/// gather_nd(data, indices[..., 1]) -> gather(data, indices[...], axis 0).
struct GatherNDToGather : OpRewritePattern<moe::GatherNDOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::GatherNDOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getBatchDims() != 0 || !hasUnitTuples(op.getIndices()) ||
        getShape(op.getData()).empty())
      return failure();
    Value indices = dropTrailingUnit(rewriter, op.getLoc(), op.getIndices());
    // Both ops give `indices.shape[:-1] + data.shape[1:]`; the declared type
    // is kept.
    rewriter.replaceOpWithNewOp<moe::GatherOp>(
        op, op.getType(), op.getData(), indices, rewriter.getI64IntegerAttr(0));
    return success();
  }
};

/// scatter_nd(data[N], indices[M, 1], updates[M]) ->
/// scatter_elements(data, indices[M], updates, axis 0).
struct ScatterNDToScatterElements : OpRewritePattern<moe::ScatterNDOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::ScatterNDOp op,
                                PatternRewriter &rewriter) const override {
    if (getShape(op.getData()).size() != 1 ||
        getShape(op.getIndices()).size() != 2 ||
        !hasUnitTuples(op.getIndices()) ||
        getShape(op.getUpdates()).size() != 1)
      return failure();
    Value indices = dropTrailingUnit(rewriter, op.getLoc(), op.getIndices());
    rewriter.replaceOpWithNewOp<moe::ScatterElementsOp>(
        op, op.getType(), op.getData(), indices, op.getUpdates(),
        rewriter.getI64IntegerAttr(0), op.getReductionAttr());
    return success();
  }
};

/// `value` with integer and float casts looked through: the counts and ends
/// the segments are built from are small non-negative integers, which every
/// cast the exporters insert (f32, i32, i64) keeps exact.
Value stripCasts(Value value) {
  while (auto cast = value.getDefiningOp<moe::CastOp>())
    value = cast.getInput();
  return value;
}

/// Whether `bins` maps every expert id `e` in [0, E) of `ids` to `e`: `ids`
/// itself, or torch.histc's `clip(int(float(ids) / width), 0, E - 1)`, whose
/// mapping is checked on every id in f32 as the runtime computes it.
bool isIdentityBinning(Value bins, Value ids, int64_t numExperts) {
  if (bins == ids)
    return true;
  auto clip = bins.getDefiningOp<moe::ClipOp>();
  if (!clip || !clip.getMin() || !clip.getMax() ||
      moe::getConstantInt(clip.getMin()) != 0 ||
      moe::getConstantInt(clip.getMax()) != numExperts - 1)
    return false;
  auto toInt = clip.getInput().getDefiningOp<moe::CastOp>();
  if (!toInt || !toInt.getTo().isSignlessInteger())
    return false;
  auto div = toInt.getInput().getDefiningOp<moe::DivOp>();
  std::optional<double> width =
      div ? getScalarFloat(div.getRhs()) : std::nullopt;
  if (!width || !getElementTypeOrSelf(div.getType()).isF32())
    return false;
  Value numerator = div.getLhs();
  if (auto reshape = numerator.getDefiningOp<moe::ReshapeOp>())
    if (isFlattenedVector(numerator, reshape.getData()))
      numerator = reshape.getData();
  auto toFloat = numerator.getDefiningOp<moe::CastOp>();
  if (!toFloat || toFloat.getInput() != ids)
    return false;
  float divisor = static_cast<float>(*width);
  for (int64_t e = 0; e < numExperts; ++e) {
    float quotient = static_cast<float>(e) / divisor;
    int64_t bin = static_cast<int64_t>(std::trunc(quotient));
    if (std::clamp<int64_t>(bin, 0, numExperts - 1) != e)
      return false;
  }
  return true;
}

/// Whether `counts` (`[E]`) is the histogram of the expert ids `ids`:
/// `scatter_elements(zeros, bins, ones, add)` (torch.histc) or
/// `reduce_sum(one_hot(ids, E), 0)` (torch.bincount).
bool isHistogram(Value counts, Value ids, int64_t numExperts) {
  if (getShape(counts) != ArrayRef<int64_t>{numExperts})
    return false;
  if (auto scatter = counts.getDefiningOp<moe::ScatterElementsOp>()) {
    Value ones = scatter.getUpdates();
    if (auto expand = ones.getDefiningOp<moe::ExpandOp>())
      ones = expand.getInput();
    return scatter.getReduction() == "add" && scatter.getAxis() == 0 &&
           isSplatOf(scatter.getData(), 0) && isSplatOf(ones, 1) &&
           isIdentityBinning(scatter.getIndices(), ids, numExperts);
  }
  if (auto sum = counts.getDefiningOp<moe::ReduceSumOp>()) {
    auto oneHot = sum.getData().getDefiningOp<moe::OneHotOp>();
    return oneHot && sum.getKeepdims() == 0 && sum.getAxes() &&
           isConstAxes(sum.getAxes(), {0}, 2) &&
           isAxis(oneHot.getAxis(), 1, 2) &&
           moe::getConstantInt(oneHot.getDepth()) == numExperts &&
           moe::getConstantInts(oneHot.getValues()) ==
               SmallVector<int64_t>{0, 1} &&
           oneHot.getIndices() == ids;
  }
  return false;
}

/// The `[E]` vector and the index e of which the scalar `value` is element
/// e: `squeeze(split(ends)#e)` into one-element pieces or `gather(ends, e)`.
std::optional<std::pair<Value, int64_t>> getElementOf(Value value) {
  if (auto squeeze = value.getDefiningOp<moe::SqueezeOp>()) {
    auto piece = dyn_cast<OpResult>(squeeze.getData());
    auto split = piece ? dyn_cast<moe::SplitOp>(piece.getOwner()) : nullptr;
    if (split && split.getAxis() == 0 &&
        getShape(piece) == ArrayRef<int64_t>{1})
      return std::pair(split.getInput(),
                       static_cast<int64_t>(piece.getResultNumber()));
    return std::nullopt;
  }
  auto gather = value.getDefiningOp<moe::GatherOp>();
  std::optional<int64_t> index =
      gather ? moe::getConstantInt(gather.getIndices()) : std::nullopt;
  if (!index || gather.getAxis() != 0 || !getShape(value).empty() ||
      getShape(gather.getData()).size() != 1 || *index < 0)
    return std::nullopt;
  return std::pair(gather.getData(), *index);
}

/// range(ends[e-1], ends[e]) (ends[-1] = 0) over ends = cum_sum(histogram of
/// the sorted ids S) -> moe.segment S expert e fallback (the range). The
/// histogram has E bins and every id is an expert index in [0, E), so
/// ends[e] = #(S <= e); S is sorted ascending, so the range is exactly the
/// positions of e in S.
struct RangeToSegment : OpRewritePattern<moe::RangeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::RangeOp range,
                                PatternRewriter &rewriter) const override {
    if (llvm::any_of(range->getUsers(), llvm::IsaPred<moe::SegmentOp>) ||
        moe::getConstantInt(range.getDelta()) != 1)
      return failure();
    std::optional<std::pair<Value, int64_t>> limit =
        getElementOf(range.getLimit());
    if (!limit)
      return failure();
    auto [ends, expert] = *limit;
    bool startsRight = expert == 0
                           ? moe::getConstantInt(range.getStart()) == 0
                           : getElementOf(range.getStart()) ==
                                 std::optional(std::pair(ends, expert - 1));
    auto cumSum = stripCasts(ends).getDefiningOp<moe::CumSumOp>();
    if (!startsRight || !cumSum || cumSum.getExclusive() != 0 ||
        cumSum.getReverse() != 0 || moe::getConstantInt(cumSum.getAxis()) != 0)
      return failure();
    Value counts = stripCasts(cumSum.getX());
    ArrayRef<int64_t> countsShape = getShape(counts);
    if (countsShape.size() != 1 || ShapedType::isDynamic(countsShape[0]) ||
        expert >= countsShape[0])
      return failure();
    // The sorted ids the histogram counts: the values of an expert sort.
    for (Value sorted : getHistogrammedIds(counts)) {
      auto result = dyn_cast<OpResult>(sorted);
      auto sort = result ? dyn_cast<moe::TopKOp>(result.getOwner()) : nullptr;
      std::optional<ExpertSort> expertSort = sort && sorted == sort.getValues()
                                                 ? matchExpertSort(sort)
                                                 : std::nullopt;
      if (!expertSort || expertSort->numExperts != countsShape[0] ||
          !isHistogram(counts, sorted, countsShape[0]))
        continue;
      rewriter.setInsertionPointAfter(range);
      auto segment = moe::SegmentOp::create(rewriter, range.getLoc(), sorted,
                                            range.getOutput(),
                                            rewriter.getI64IntegerAttr(expert));
      rewriter.replaceAllUsesExcept(range.getOutput(), segment.getRows(),
                                    segment);
      return success();
    }
    return failure();
  }

  /// The candidate ids a histogram `counts` counts (the operand its bins
  /// are computed from); isHistogram proves which.
  static SmallVector<Value> getHistogrammedIds(Value counts) {
    SmallVector<Value> candidates;
    if (auto sum = counts.getDefiningOp<moe::ReduceSumOp>()) {
      if (auto oneHot = sum.getData().getDefiningOp<moe::OneHotOp>())
        candidates.push_back(oneHot.getIndices());
      return candidates;
    }
    auto scatter = counts.getDefiningOp<moe::ScatterElementsOp>();
    if (!scatter)
      return candidates;
    Value bins = scatter.getIndices();
    candidates.push_back(bins);
    if (auto clip = bins.getDefiningOp<moe::ClipOp>())
      if (auto toInt = clip.getInput().getDefiningOp<moe::CastOp>())
        if (auto div = toInt.getInput().getDefiningOp<moe::DivOp>()) {
          Value numerator = div.getLhs();
          if (auto reshape = numerator.getDefiningOp<moe::ReshapeOp>())
            numerator = reshape.getData();
          if (auto toFloat = numerator.getDefiningOp<moe::CastOp>())
            candidates.push_back(toFloat.getInput());
        }
    return candidates;
  }
};

struct CanonicalizeSegmentsPass
    : public moec::impl::MoeCanonicalizeSegmentsBase<CanonicalizeSegmentsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<GatherNDToGather, ScatterNDToScatterElements, RangeToSegment>(
        &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
