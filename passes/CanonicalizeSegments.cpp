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

/// The `[T, k]` top-k indices of which `counts` (`[E]`) is the routing map
/// summed over the tokens: `reduce_sum(scatter_elements(zeros[T', E], ids,
/// ones, axis 1), 0)`, casts looked through (Megatron-Core's and JetMoE's
/// counts). A top-k's indices are distinct within a row, so map[t, e] is 1
/// exactly where e is one of ids[t] and the sum over t counts e's
/// assignments (exact in f32 up to 2^24 of them); rows of zeros past T stay
/// zero. Null otherwise.
Value getRoutingMapIds(Value counts, int64_t numExperts) {
  auto sum = counts.getDefiningOp<moe::ReduceSumOp>();
  if (!sum || sum.getKeepdims() != 0 || !sum.getAxes() ||
      !isConstAxes(sum.getAxes(), {0}, 2))
    return nullptr;
  auto scatter =
      stripCasts(sum.getData()).getDefiningOp<moe::ScatterElementsOp>();
  if (!scatter || scatter.getReduction() != "none" ||
      !isAxis(scatter.getAxis(), 1, 2) ||
      getShape(scatter.getData()).size() != 2 ||
      getShape(scatter.getData())[1] != numExperts ||
      !isFilledWith(scatter.getData(), 0) ||
      !isFilledWith(scatter.getUpdates(), 1))
    return nullptr;
  Value ids = scatter.getIndices();
  auto topK = ids.getDefiningOp<moe::TopKOp>();
  if (!topK || topK.getIndices() != ids || !isAxis(topK.getAxis(), 1, 2) ||
      getShape(topK.getInput()).size() != 2 ||
      getShape(topK.getInput())[1] != numExperts)
    return nullptr;
  return ids;
}

/// The expert sort that orders `ids`: its sorted values themselves, or the
/// `[T, k]` ids (or their flattening) whose flattening it sorts.
moe::TopKOp findExpertSort(Value ids) {
  if (auto result = dyn_cast<OpResult>(ids))
    if (auto sort = dyn_cast<moe::TopKOp>(result.getOwner()))
      if (ids == sort.getValues() && matchExpertSort(sort))
        return sort;
  SmallVector<Value, 2> flats{ids};
  for (Operation *user : ids.getUsers())
    if (auto reshape = dyn_cast<moe::ReshapeOp>(user))
      if (isFlattenedVector(reshape.getOutput(), ids))
        flats.push_back(reshape.getOutput());
  for (Value flat : flats)
    for (Operation *user : flat.getUsers())
      if (auto sort = dyn_cast<moe::TopKOp>(user))
        if (sort.getInput() == flat && matchExpertSort(sort))
          return sort;
  return nullptr;
}

/// The `[E]` vector and the index e of which the scalar or one-element
/// `value` is element e.
std::optional<std::pair<Value, int64_t>> getElementOfImpl(Value value,
                                                          unsigned depth) {
  if (depth > 8 || getShape(value).size() > 1 ||
      (getShape(value).size() == 1 && getShape(value)[0] != 1))
    return std::nullopt;
  Operation *def = value.getDefiningOp();
  if (isa_and_nonnull<moe::ReshapeOp, moe::UnsqueezeOp>(def))
    return getElementOfImpl(def->getOperand(0), depth + 1);
  if (auto squeeze = dyn_cast_or_null<moe::SqueezeOp>(def)) {
    auto piece = dyn_cast<OpResult>(squeeze.getData());
    auto split = piece ? dyn_cast<moe::SplitOp>(piece.getOwner()) : nullptr;
    if (split && split.getAxis() == 0 &&
        getShape(piece) == ArrayRef<int64_t>{1})
      return std::pair(split.getInput(),
                       static_cast<int64_t>(piece.getResultNumber()));
    return getElementOfImpl(squeeze.getData(), depth + 1);
  }
  if (auto slice = dyn_cast_or_null<moe::SliceOp>(def)) {
    std::optional<int64_t> start = moe::getConstantInt(slice.getStarts());
    std::optional<int64_t> end = moe::getConstantInt(slice.getEnds());
    ArrayRef<int64_t> shape = getShape(slice.getData());
    if (!start || !end || *start < 0 || *end != *start + 1 ||
        shape.size() != 1 || ShapedType::isDynamic(shape[0]) ||
        *end > shape[0] ||
        (slice.getAxes() && !isConstAxes(slice.getAxes(), {0}, 1)) ||
        (slice.getSteps() && moe::getConstantInt(slice.getSteps()) != 1))
      return std::nullopt;
    return std::pair(slice.getData(), *start);
  }
  auto gather = dyn_cast_or_null<moe::GatherOp>(def);
  std::optional<int64_t> index =
      gather ? moe::getConstantInt(gather.getIndices()) : std::nullopt;
  ArrayRef<int64_t> shape =
      gather ? getShape(gather.getData()) : ArrayRef<int64_t>();
  if (!index || gather.getAxis() != 0 || shape.size() != 1 ||
      ShapedType::isDynamic(shape[0]) || *index < 0 || *index >= shape[0] ||
      getShape(gather.getIndices()).size() > 1)
    return std::nullopt;
  if (shape[0] == 1 && *index == 0)
    if (auto inner = getElementOfImpl(gather.getData(), depth + 1))
      return inner;
  return std::pair(gather.getData(), *index);
}

} // namespace

std::optional<std::pair<Value, int64_t>>
moec::segments::getElementOf(Value value) {
  return getElementOfImpl(value, 0);
}

moe::TopKOp moec::segments::getSortOfHistogram(Value counts) {
  counts = stripCasts(counts);
  ArrayRef<int64_t> shape = getShape(counts);
  if (shape.size() != 1 || ShapedType::isDynamic(shape[0]))
    return nullptr;
  int64_t numExperts = shape[0];
  SmallVector<Value> candidates;
  if (Value ids = getRoutingMapIds(counts, numExperts)) {
    moe::TopKOp sort = findExpertSort(ids);
    std::optional<ExpertSort> expertSort =
        sort ? matchExpertSort(sort) : std::nullopt;
    return expertSort && expertSort->ids == ids &&
                   expertSort->numExperts == numExperts
               ? sort
               : nullptr;
  }
  if (auto sum = counts.getDefiningOp<moe::ReduceSumOp>()) {
    if (auto oneHot = sum.getData().getDefiningOp<moe::OneHotOp>())
      candidates.push_back(oneHot.getIndices());
  } else if (auto scatter = counts.getDefiningOp<moe::ScatterElementsOp>()) {
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
  }
  // The histogram of the sorted ids: the values of an expert sort.
  for (Value sorted : candidates) {
    auto result = dyn_cast<OpResult>(sorted);
    auto sort = result ? dyn_cast<moe::TopKOp>(result.getOwner()) : nullptr;
    std::optional<ExpertSort> expertSort = sort && sorted == sort.getValues()
                                               ? matchExpertSort(sort)
                                               : std::nullopt;
    if (expertSort && expertSort->numExperts == numExperts &&
        isHistogram(counts, sorted, numExperts))
      return sort;
  }
  return nullptr;
}

moe::TopKOp moec::segments::getSortOfEnds(Value ends) {
  auto cumSum = stripCasts(ends).getDefiningOp<moe::CumSumOp>();
  if (!cumSum || cumSum.getExclusive() != 0 || cumSum.getReverse() != 0 ||
      moe::getConstantInt(cumSum.getAxis()) != 0)
    return nullptr;
  return getSortOfHistogram(cumSum.getX());
}

std::optional<SegmentBounds> moec::segments::matchSegmentBounds(Value start,
                                                                Value limit) {
  std::optional<std::pair<Value, int64_t>> last = getElementOf(limit);
  if (!last)
    return std::nullopt;
  auto [ends, expert] = *last;
  bool startsRight =
      expert == 0
          ? moe::getConstantInt(start) == 0
          : getElementOf(start) == std::optional(std::pair(ends, expert - 1));
  moe::TopKOp sort = startsRight ? getSortOfEnds(ends) : nullptr;
  if (!sort || expert >= getShape(ends)[0])
    return std::nullopt;
  return SegmentBounds{sort, ends, expert};
}

bool moec::segments::isTokenOf(Value value, Value perm, int64_t topK) {
  if (auto reshape = value.getDefiningOp<moe::ReshapeOp>())
    if (isFlattenedVector(value, reshape.getData()))
      value = reshape.getData();
  auto isQuotient = [&](Value quotient) {
    auto div = quotient.getDefiningOp<moe::DivOp>();
    return div && div.getLhs() == perm &&
           moe::getConstantInt(div.getRhs()) == topK;
  };
  if (isQuotient(value))
    return true;
  if (auto toInt = value.getDefiningOp<moe::CastOp>()) {
    // int(floor(|q|) * sign(q)), q = float(perm) / k: trunc of the exact
    // quotient where k is a power of two.
    auto product = toInt.getInput().getDefiningOp<moe::MulOp>();
    if (!product || topK <= 0 || (topK & (topK - 1)) != 0 ||
        !toInt.getTo().isSignlessInteger(64))
      return false;
    for (auto [lhs, rhs] : {std::pair(product.getLhs(), product.getRhs()),
                            std::pair(product.getRhs(), product.getLhs())}) {
      auto floor = lhs.getDefiningOp<moe::FloorOp>();
      auto abs = floor ? floor.getInput().getDefiningOp<moe::AbsOp>() : nullptr;
      auto sign = rhs.getDefiningOp<moe::SignOp>();
      if (!abs || !sign || abs.getInput() != sign.getInput())
        continue;
      auto div = abs.getInput().getDefiningOp<moe::DivOp>();
      auto toFloat = div ? div.getLhs().getDefiningOp<moe::CastOp>() : nullptr;
      std::optional<double> divisor =
          div ? getScalarFloat(div.getRhs()) : std::nullopt;
      if (toFloat && toFloat.getInput() == perm && divisor &&
          *divisor == static_cast<double>(topK) &&
          getElementTypeOrSelf(div.getType()).isF32())
        return true;
    }
    return false;
  }
  auto sub = value.getDefiningOp<moe::SubOp>();
  if (!sub || !isQuotient(sub.getLhs()))
    return false;
  auto cast = sub.getRhs().getDefiningOp<moe::CastOp>();
  auto both = cast ? cast.getInput().getDefiningOp<moe::AndOp>() : nullptr;
  if (!both)
    return false;
  // `perm < 0`, possibly compared with true: false for every sorted index,
  // so the conjunction and the correction are zero.
  auto isNegative = [&](Value test) {
    if (auto equal = test.getDefiningOp<moe::EqualOp>()) {
      if (!isSplatOf(equal.getRhs(), 1))
        return false;
      test = equal.getLhs();
    }
    auto less = test.getDefiningOp<moe::LessOp>();
    return less && less.getLhs() == perm && isSplatOf(less.getRhs(), 0);
  };
  return isNegative(both.getLhs()) || isNegative(both.getRhs());
}

namespace {

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
    std::optional<SegmentBounds> bounds =
        matchSegmentBounds(range.getStart(), range.getLimit());
    if (!bounds)
      return failure();
    moe::TopKOp sort = bounds->sort;
    int64_t expert = bounds->expert;
    rewriter.setInsertionPointAfter(range);
    auto segment = moe::SegmentOp::create(rewriter, range.getLoc(),
                                          sort.getValues(), range.getOutput(),
                                          rewriter.getI64IntegerAttr(expert));
    rewriter.replaceAllUsesExcept(range.getOutput(), segment.getRows(),
                                  segment);
    return success();
  }
};

struct CanonicalizeSegmentsPass
    : public moec::impl::MoeCanonicalizeSegmentsBase<CanonicalizeSegmentsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<GatherNDToGather, ScatterNDToScatterElements, RangeToSegment>(
        &getContext());
    populateSegmentIdiomPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
