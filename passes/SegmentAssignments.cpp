//===- SegmentAssignments.cpp - per-assignment masks onto segments --------===//
//
// Patterns of moe-canonicalize-segments for expert code that never sorts:
// DeepSeek-MoE's training path repeats every token k times (one row per
// assignment, `x.repeat_interleave(k, 0)`) and finds expert e's rows with
// `flat_ids == e`, `y[flat_ids == e] = expert(xs[flat_ids == e])`. With
// `perm` a stable argsort of the flattened ids (one is added when the graph
// has none) the positions of e among the flat ids are `perm[segment(e)]`,
// in the same ascending order, which brings the layer onto the segments
// form:
//
//  * `nonzero(flat_ids == e)` -> `gather(perm, moe.segment(sorted, e))`;
//  * `repeat_interleave(x, k)[perm[s]]` -> `x[perm / k][s]`.
//
// The masked writes then become row scatters and their concatenation
// (SegmentIdioms.cpp). Both rewrites are exact: a stable sort keeps equal
// ids in position order, and row j of the repeated tokens is x[j / k].
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchSupport.h"
#include "passes/SegmentSupport.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace moec;
using namespace moec::segments;

namespace {

/// The `[T, k]` expert ids whose flattening `flat` is, with E, or nullopt.
std::optional<std::pair<Value, int64_t>> getFlattenedIds(Value flat) {
  auto reshape = flat.getDefiningOp<moe::ReshapeOp>();
  if (!reshape || !isFlattenedVector(flat, reshape.getData()))
    return std::nullopt;
  Value ids = reshape.getData();
  ArrayRef<int64_t> shape = getShape(ids);
  std::optional<int64_t> numExperts = getExpertCount(ids);
  if (shape.size() != 2 || ShapedType::isDynamic(shape[1]) || !numExperts ||
      !getElementTypeOrSelf(ids.getType()).isSignlessInteger(64))
    return std::nullopt;
  return std::pair(ids, *numExperts);
}

/// The stable sort of all of `flat` (the flattened expert ids): an existing
/// expert sort of it, else a new `top_k(flat, len(flat), largest 0)` right
/// after `flat`.
moe::TopKOp getOrCreateSort(PatternRewriter &rewriter, Value flat) {
  for (Operation *user : flat.getUsers())
    if (auto sort = dyn_cast<moe::TopKOp>(user))
      if (sort.getInput() == flat && matchExpertSort(sort))
        return sort;
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointAfterValue(flat);
  Location loc = flat.getLoc();
  Value length = moe::DimOp::create(rewriter, loc, flat, 0);
  Value axes = createI64Constant(rewriter, loc, {1}, {0});
  Value k = moe::UnsqueezeOp::create(rewriter, loc, length, axes);
  return moe::TopKOp::create(
      rewriter, loc, TypeRange{flat.getType(), flat.getType()}, flat, k,
      rewriter.getI64IntegerAttr(0), rewriter.getI64IntegerAttr(0),
      rewriter.getI64IntegerAttr(1));
}

/// squeeze(transpose(nonzero(flat == e)), 1), flat the flattened `[T, k]`
/// top-k ids -> gather(perm, moe.segment(sorted, e)) over a stable sort of
/// flat: the sort keeps equal ids in position order, so the positions of e
/// in flat are perm at the positions of e in the sorted ids, ascending. The
/// segment's fallback is `nonzero(sorted == e)`.
struct FlatNonZeroToSortedPositions : OpRewritePattern<moe::SqueezeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::SqueezeOp squeeze,
                                PatternRewriter &rewriter) const override {
    for (auto [flat, e] : getComparedExpert(squeeze.getOutput())) {
      std::optional<std::pair<Value, int64_t>> ids = getFlattenedIds(flat);
      if (!ids || e < 0 || e >= ids->second)
        continue;
      moe::TopKOp sort = getOrCreateSort(rewriter, flat);
      Location loc = squeeze.getLoc();
      Value sorted = sort.getValues();
      Value isExpert = moe::EqualOp::create(
          rewriter, loc, sorted, createI64Constant(rewriter, loc, {}, {e}));
      Value fallback = createNonZeroRows(rewriter, loc, isExpert);
      auto segment = moe::SegmentOp::create(rewriter, loc, sorted, fallback,
                                            rewriter.getI64IntegerAttr(e));
      rewriter.replaceOpWithNewOp<moe::GatherOp>(
          squeeze, squeeze.getType(), sort.getIndices(), segment.getRows(),
          rewriter.getI64IntegerAttr(0));
      return success();
    }
    return failure();
  }
};

/// The tokens x and k of which `rows` is `x.repeat_interleave(k, 0)`:
/// `unsqueeze(x, 1)` tiled or expanded to `[T, k, H]`, then flattened to
/// `[T * k, H]` (reshape to `[-1, H]` or flatten at axis 2).
std::optional<std::pair<Value, int64_t>> getRepeatedTokens(Value rows) {
  ArrayRef<int64_t> shape = getShape(rows);
  if (shape.size() != 2 || ShapedType::isDynamic(shape[1]))
    return std::nullopt;
  Value repeated;
  if (auto reshape = rows.getDefiningOp<moe::ReshapeOp>()) {
    if (moe::getConstantInts(reshape.getShape()) !=
        SmallVector<int64_t>{-1, shape[1]})
      return std::nullopt;
    repeated = reshape.getData();
  } else if (auto flatten = rows.getDefiningOp<moe::FlattenOp>()) {
    if (flatten.getAxis() != 2)
      return std::nullopt;
    repeated = flatten.getInput();
  } else {
    return std::nullopt;
  }
  ArrayRef<int64_t> repeatedShape = getShape(repeated);
  if (repeatedShape.size() != 3 || ShapedType::isDynamic(repeatedShape[1]) ||
      repeatedShape[2] != shape[1])
    return std::nullopt;
  int64_t k = repeatedShape[1];
  Operation *def = repeated.getDefiningOp();
  std::optional<SmallVector<int64_t>> factors;
  if (auto tile = dyn_cast_or_null<moe::TileOp>(def))
    factors = moe::getConstantInts(tile.getRepeats());
  else if (auto expand = dyn_cast_or_null<moe::ExpandOp>(def))
    factors = moe::getConstantInts(expand.getShape());
  // An expand to [1, k, 1] or [1, k, H] broadcasts the unit axis alone.
  if (!factors || factors->size() != 3 || (*factors)[0] != 1 ||
      (*factors)[1] != k ||
      ((*factors)[2] != 1 &&
       !(isa<moe::ExpandOp>(def) && (*factors)[2] == shape[1])))
    return std::nullopt;
  auto unsqueeze = def->getOperand(0).getDefiningOp<moe::UnsqueezeOp>();
  if (!unsqueeze || !isConstAxes(unsqueeze.getAxes(), {1}, 3) ||
      getShape(unsqueeze.getData()).size() != 2)
    return std::nullopt;
  return std::pair(unsqueeze.getData(), k);
}

/// `x[perm / k]`, the tokens in sorted order: an existing one (so that
/// every expert's rows are one value), else new ops after the sort.
Value getOrCreateSortedTokens(PatternRewriter &rewriter, moe::TopKOp sort,
                              Value tokens, int64_t topK) {
  Value perm = sort.getIndices();
  for (Operation *user : perm.getUsers())
    if (auto div = dyn_cast<moe::DivOp>(user))
      if (div.getLhs() == perm && moe::getConstantInt(div.getRhs()) == topK)
        for (Operation *divUser : div->getUsers())
          if (auto gather = dyn_cast<moe::GatherOp>(divUser))
            if (gather.getData() == tokens && gather.getAxis() == 0 &&
                gather.getIndices() == div.getOutput())
              return gather.getOutput();
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointAfter(sort);
  if (Operation *def = tokens.getDefiningOp())
    if (sort->isBeforeInBlock(def))
      rewriter.setInsertionPointAfter(def);
  Location loc = sort.getLoc();
  Value k = createI64Constant(rewriter, loc, {}, {topK});
  Value token = moe::DivOp::create(rewriter, loc, perm, k);
  return moe::GatherOp::create(rewriter, loc, tokens, token,
                               rewriter.getI64IntegerAttr(0));
}

/// repeat_interleave(x, k)[perm[s]] -> x[perm / k][s], perm the stable sort
/// of the flattened `[T, k]` ids chosen for x's T tokens: row j < T*k of
/// the repeated tokens is x[j / k].
struct RepeatedRowsAtSortedPositions : OpRewritePattern<moe::GatherOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::GatherOp gather,
                                PatternRewriter &rewriter) const override {
    std::optional<std::pair<Value, int64_t>> repeated =
        getRepeatedTokens(gather.getData());
    auto positions = gather.getIndices().getDefiningOp<moe::GatherOp>();
    if (!repeated || gather.getAxis() != 0 || !positions ||
        positions.getAxis() != 0)
      return failure();
    moe::TopKOp sort = getSortOfResult(positions.getData());
    std::optional<std::pair<moe::TopKOp, int64_t>> segment =
        getSegmentOf(positions.getIndices());
    std::optional<ExpertSort> expertSort =
        sort ? matchExpertSort(sort) : std::nullopt;
    auto [tokens, topK] = *repeated;
    if (!expertSort || positions.getData() != sort.getIndices() || !segment ||
        segment->first != sort || getShape(expertSort->ids)[1] != topK ||
        !getTokenRows(expertSort->ids)
             .isSameAs(moe::ShapeEntry::ofDim(tokens, 0)))
      return failure();
    Value rows = getOrCreateSortedTokens(rewriter, sort, tokens, topK);
    rewriter.replaceOpWithNewOp<moe::GatherOp>(gather, gather.getType(), rows,
                                               positions.getIndices(),
                                               rewriter.getI64IntegerAttr(0));
    return success();
  }
};

} // namespace

bool moec::segments::hasAssignmentRows(Value value, moe::TopKOp sort) {
  std::optional<ExpertSort> expertSort = matchExpertSort(sort);
  std::optional<std::pair<Value, int64_t>> repeated =
      getRepeatedTokens(getRowSource(value));
  return expertSort && repeated &&
         getShape(expertSort->ids)[1] == repeated->second &&
         getTokenRows(expertSort->ids)
             .isSameAs(moe::ShapeEntry::ofDim(repeated->first, 0));
}

void moec::segments::populateSegmentAssignmentPatterns(
    RewritePatternSet &patterns) {
  patterns.add<FlatNonZeroToSortedPositions, RepeatedRowsAtSortedPositions>(
      patterns.getContext());
}
