//===- SegmentIdioms.cpp - permutation idioms onto the segments form ------===//
//
// Patterns of moe-canonicalize-segments that bring what MoE code outside
// transformers writes around a sort of the flattened expert ids onto the
// segments form moe-detect-segment-experts proves (rows sorted by expert,
// expert e's rows a moe.segment of the sorted ids, `gather(y,
// inverse(perm))` back to assignment order, a sum over k):
//
//  * Megatron-Core: `rows[ends[e-1]:ends[e]]` slices of the cum_sum of a
//    histogram -> `gather(rows, range(ends[e-1], ends[e]))`; the unpermute
//    `zeros.scatter_add(0, perm, y)` into the T*k slots -> `gather(y,
//    inverse(perm))`; the routing weights applied after it -> before it.
//  * JetMoE (scattermoe): `split(rows, counts)` -> gathers of the ranges;
//    `zeros.index_add(0, perm / k, u)` (scatter add at the tokens) -> the
//    sum over k of `gather(u, inverse(perm))`.
//  * masked assignment (`out[sorted == e] = f(rows[sorted == e])`):
//    `nonzero(sorted == e)` -> moe.segment; the element scatter of
//    index_put's boolean mask -> a row scatter; the overwrites of every
//    expert's segment of zeros -> the concatenation of the experts' rows.
//
// Each pattern is exact, element for element: it fires only where the row
// counts, the sort and the histogram it relies on are proven (a scatter
// add's order of duplicate additions is unspecified in ONNX, so the sum over
// k is one of the orders the original allows).
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchSupport.h"
#include "passes/SegmentSupport.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/PatternMatch.h"

#include "llvm/ADT/SmallBitVector.h"

using namespace mlir;
using namespace moec;
using namespace moec::segments;

namespace {

/// The scalar `vector[index]` (i64).
Value createElement(PatternRewriter &rewriter, Location loc, Value vector,
                    int64_t index) {
  Value at = createI64Constant(rewriter, loc, {}, {index});
  return moe::GatherOp::create(rewriter, loc, vector, at,
                               rewriter.getI64IntegerAttr(0));
}

/// `range(e == 0 ? 0 : ends[e-1], ends[e])` over the i64 vector `ends`.
Value createSegmentRange(PatternRewriter &rewriter, Location loc, Value ends,
                         int64_t expert) {
  Value start = expert == 0 ? createI64Constant(rewriter, loc, {}, {0})
                            : createElement(rewriter, loc, ends, expert - 1);
  Value limit = createElement(rewriter, loc, ends, expert);
  Value one = createI64Constant(rewriter, loc, {}, {1});
  auto type =
      RankedTensorType::get({ShapedType::kDynamic}, rewriter.getI64Type());
  return moe::RangeOp::create(rewriter, loc, type, start, limit, one);
}

/// Whether `indices` (`[N, H]`) repeats the column `column` over H columns:
/// `tile(unsqueeze(column, 1), [1, H])` or `expand(unsqueeze(column, 1),
/// shape)` to H columns.
bool isColumnRepeated(Value indices, Value column, int64_t hidden) {
  ArrayRef<int64_t> shape = getShape(indices);
  if (shape.size() != 2 || shape[1] != hidden)
    return false;
  Value unsqueezed;
  if (auto tile = indices.getDefiningOp<moe::TileOp>()) {
    if (moe::getConstantInts(tile.getRepeats()) !=
        SmallVector<int64_t>{1, hidden})
      return false;
    unsqueezed = tile.getInput();
  } else if (auto expand = indices.getDefiningOp<moe::ExpandOp>()) {
    unsqueezed = expand.getInput();
  } else {
    return false;
  }
  auto unsqueeze = unsqueezed.getDefiningOp<moe::UnsqueezeOp>();
  return unsqueeze && unsqueeze.getData() == column &&
         getShape(unsqueezed) == ArrayRef<int64_t>{ShapedType::kDynamic, 1} &&
         isConstAxes(unsqueeze.getAxes(), {1}, 2);
}

/// The rows `updates` of a scatter into `indices`' positions stand for:
/// `updates`, or `updates` sliced from the origin to `shape(indices)` (a
/// no-op for rows of that shape), or expanded to it without broadcasting.
Value getScatteredRows(Value updates, Value indices) {
  if (auto slice = updates.getDefiningOp<moe::SliceOp>()) {
    auto shape = slice.getEnds().getDefiningOp<moe::ShapeOp>();
    std::optional<SmallVector<int64_t>> starts =
        moe::getConstantInts(slice.getStarts());
    if (shape && shape.getData() == indices && !slice.getAxes() &&
        !slice.getSteps() && starts &&
        llvm::all_of(*starts, [](int64_t s) { return s == 0; }) &&
        getShape(slice.getData()) == getShape(updates))
      return slice.getData();
    return nullptr;
  }
  if (auto expand = updates.getDefiningOp<moe::ExpandOp>()) {
    // No broadcast: the shape asks for the input's rows and columns.
    Value input = expand.getInput();
    ArrayRef<int64_t> shape = getShape(input);
    std::optional<SmallVector<moe::ShapeEntry>> entries =
        moe::getShapeEntries(expand.getShape());
    if (shape.size() != 2 || ShapedType::isDynamic(shape[1]) || !entries ||
        entries->size() != 2 || !(*entries)[0].isDim() ||
        (*entries)[0].dim != 0 ||
        getRowSource((*entries)[0].source) != getRowSource(input) ||
        !(*entries)[1].isSameAs(moe::ShapeEntry::ofConstant(shape[1])) ||
        getShape(input) != getShape(updates))
      return nullptr;
    return input;
  }
  return updates;
}

/// rows[ends[e-1]:ends[e]] (axis 0, step 1) over the cum_sum of a histogram
/// of an expert sort's ids, `rows` of the sort's N rows ->
/// gather(rows, range(ends[e-1], ends[e])): the histogram counts N ids in
/// [0, E), so 0 <= ends[e-1] <= ends[e] <= N and the slice takes exactly
/// that range (moe-canonicalize-segments then makes it a segment).
struct SliceToSegmentRange : OpRewritePattern<moe::SliceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::SliceOp slice,
                                PatternRewriter &rewriter) const override {
    Value rows = slice.getData();
    if (getShape(rows).size() != 2 ||
        (slice.getAxes() && !isConstAxes(slice.getAxes(), {0}, 2)) ||
        (slice.getSteps() && moe::getConstantInt(slice.getSteps()) != 1))
      return failure();
    std::optional<SegmentBounds> bounds =
        slice.getAxes() ? matchSegmentBounds(slice.getStarts(), slice.getEnds())
                        : std::nullopt;
    if (!bounds ||
        !getElementTypeOrSelf(bounds->ends.getType()).isSignlessInteger(64) ||
        !hasSortedRows(rows, bounds->sort))
      return failure();
    Value range = createSegmentRange(rewriter, slice.getLoc(), bounds->ends,
                                     bounds->expert);
    rewriter.replaceOpWithNewOp<moe::GatherOp>(
        slice, slice.getType(), rows, range, rewriter.getI64IntegerAttr(0));
    return success();
  }
};

/// split(rows, counts) along axis 0 of the sort's N rows, `counts` a
/// histogram of its ids (the vector, or its elements concatenated) ->
/// gather(rows, range(ends[e-1], ends[e])) per piece, ends =
/// cum_sum(counts): the counts add up to N, so piece e is that range.
struct SplitToSegmentRanges : OpRewritePattern<moe::SplitOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::SplitOp split,
                                PatternRewriter &rewriter) const override {
    Value rows = split.getInput();
    int64_t pieces = split->getNumResults();
    if (!split.getSplit() || split.getAxis() != 0 || getShape(rows).size() != 2)
      return failure();
    Value counts = split.getSplit();
    if (auto concat = counts.getDefiningOp<moe::ConcatOp>()) {
      counts = nullptr;
      for (auto [e, input] : llvm::enumerate(concat.getInputs())) {
        std::optional<std::pair<Value, int64_t>> element = getElementOf(input);
        if (!element || element->second != static_cast<int64_t>(e) ||
            (counts && element->first != counts))
          return failure();
        counts = element->first;
      }
    }
    if (!counts || getShape(counts) != ArrayRef<int64_t>{pieces} ||
        !getElementTypeOrSelf(counts.getType()).isSignlessInteger(64))
      return failure();
    moe::TopKOp sort = getSortOfHistogram(counts);
    if (!sort || !hasSortedRows(rows, sort))
      return failure();
    Location loc = split.getLoc();
    Value axis = createI64Constant(rewriter, loc, {}, {0});
    Value ends = moe::CumSumOp::create(rewriter, loc, counts, axis);
    SmallVector<Value> replacements;
    for (int64_t e = 0; e < pieces; ++e) {
      Value range = createSegmentRange(rewriter, loc, ends, e);
      replacements.push_back(
          moe::GatherOp::create(rewriter, loc, split.getResult(e).getType(),
                                rows, range, rewriter.getI64IntegerAttr(0)));
    }
    rewriter.replaceOp(split, replacements);
    return success();
  }
};

/// squeeze(transpose(nonzero(sorted == e)), 1) over the values of an expert
/// sort -> moe.segment sorted expert e: by definition the ascending
/// positions of e among the sorted ids (the squeeze is its fallback).
struct NonZeroToSegment : OpRewritePattern<moe::SqueezeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::SqueezeOp squeeze,
                                PatternRewriter &rewriter) const override {
    for (auto [sorted, e] : getComparedExpert(squeeze.getOutput())) {
      moe::TopKOp sort = getSortOfResult(sorted);
      if (!sort || sorted != sort.getValues() || e < 0 ||
          e >= matchExpertSort(sort)->numExperts)
        continue;
      rewriter.setInsertionPointAfter(squeeze);
      auto segment = moe::SegmentOp::create(rewriter, squeeze.getLoc(), sorted,
                                            squeeze.getOutput(),
                                            rewriter.getI64IntegerAttr(e));
      rewriter.replaceAllUsesExcept(squeeze.getOutput(), segment.getRows(),
                                    segment);
      return success();
    }
    return failure();
  }
};

/// The `[n, C]` values whose flattening `updates` is, index_put's element
/// values for the mask `sel` (nonzero of the expanded mask `nonZero`):
/// `slice(flatten(v), 0, count)` (TorchScript) or `flatten(expand(v,
/// [sum(sel), C]))` (dynamo). Either is all of v when v has a row per true
/// element of sel, which the caller proves.
Value getMaskedValues(Value updates, Value sel, moe::NonZeroOp nonZero) {
  if (auto slice = updates.getDefiningOp<moe::SliceOp>()) {
    auto flat = slice.getData().getDefiningOp<moe::ReshapeOp>();
    std::optional<SmallVector<moe::ShapeEntry>> count =
        moe::getShapeEntries(slice.getEnds());
    if (!flat || !isFlattenedVector(flat.getOutput(), flat.getData()) ||
        moe::getConstantInt(slice.getStarts()) != 0 ||
        (slice.getAxes() && !isConstAxes(slice.getAxes(), {0}, 1)) ||
        (slice.getSteps() && moe::getConstantInt(slice.getSteps()) != 1) ||
        !count || count->size() != 1 ||
        !count->front().isSameAs(
            moe::ShapeEntry::ofDim(nonZero.getOutput(), 1)))
      return nullptr;
    return flat.getData();
  }
  auto flat = updates.getDefiningOp<moe::ReshapeOp>();
  auto expand = flat && isFlattenedVector(updates, flat.getData())
                    ? flat.getData().getDefiningOp<moe::ExpandOp>()
                    : nullptr;
  auto shape =
      expand ? expand.getShape().getDefiningOp<moe::ConcatOp>() : nullptr;
  if (!shape || shape.getInputs().size() != 2 ||
      getShape(expand.getInput()).size() != 2 ||
      moe::getConstantInts(shape.getInputs()[1]) !=
          SmallVector<int64_t>{getShape(expand.getInput())[1]})
    return nullptr;
  // The count of true elements of sel: reduce_sum(int(sel)), kept as [1].
  auto sum = shape.getInputs()[0].getDefiningOp<moe::ReduceSumOp>();
  auto cast = sum ? sum.getData().getDefiningOp<moe::CastOp>() : nullptr;
  Value counted = cast ? cast.getInput() : Value();
  if (auto reshape =
          counted ? counted.getDefiningOp<moe::ReshapeOp>() : nullptr)
    if (isFlattenedVector(counted, reshape.getData()))
      counted = reshape.getData();
  if (!sum || sum.getAxes() || sum.getKeepdims() != 1 || counted != sel ||
      !cast.getTo().isSignlessInteger(64))
    return nullptr;
  return expand.getInput();
}

/// Whether the rows listed by `rows` (a root index vector, getRowSource)
/// are as many as the true elements of the 1-D mask `sel`: the positions
/// nonzero(sel) themselves, or expert e's segment of a sort where sel is
/// `ids == e` on its sorted values or on the flattened ids it sorts.
bool hasOneRowPerTrue(Value rows, Value sel) {
  if (getNonZeroMask(rows) == sel)
    return true;
  std::optional<std::pair<moe::TopKOp, int64_t>> segment = getSegmentOf(rows);
  auto equal = sel.getDefiningOp<moe::EqualOp>();
  if (!segment || !equal)
    return false;
  moe::TopKOp sort = segment->first;
  for (auto [ids, expert] : {std::pair(equal.getLhs(), equal.getRhs()),
                             std::pair(equal.getRhs(), equal.getLhs())})
    if ((ids == sort.getValues() || ids == sort.getInput()) &&
        isScalarLike(expert) && moe::getConstantInt(expert) == segment->second)
      return true;
  return false;
}

/// Whether the 1-D mask `sel` has the rows of `out`: provably the same row
/// count, or the flattened ids of a sort and out the assignments' rows.
bool hasRowsOf(Value sel, Value out) {
  Value source = getRowSource(sel);
  if (source != sel && source == getRowSource(out))
    return true;
  auto equal = sel.getDefiningOp<moe::EqualOp>();
  if (!equal)
    return false;
  for (Value flat : {equal.getLhs(), equal.getRhs()})
    for (Operation *user : flat.getUsers())
      if (auto sort = dyn_cast<moe::TopKOp>(user))
        if (sort.getInput() == flat && matchExpertSort(sort) &&
            hasAssignmentRows(out, sort))
          return true;
  return false;
}

/// index_put with a boolean row mask, `out[sel] = v` (`[R, C]`, v holding
/// the rows `nonzero(sel)` of something): scatter_nd(out,
/// transpose(nonzero(expand(unsqueeze(sel, 1), shape(out)))),
/// slice(flatten(v), 0, count)) -> scatter_nd(out, unsqueeze(rows, 1), v).
/// The mask's true elements are the C columns of each selected row, in
/// row-major order, which is the order of v's flattened elements.
struct MaskedRowsToRowScatter : OpRewritePattern<moe::ScatterNDOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::ScatterNDOp op,
                                PatternRewriter &rewriter) const override {
    ArrayRef<int64_t> shape = getShape(op.getData());
    if (op.getReduction() != "none" || shape.size() != 2 ||
        ShapedType::isDynamic(shape[1]))
      return failure();
    auto transpose = op.getIndices().getDefiningOp<moe::TransposeOp>();
    auto nonZero = transpose
                       ? transpose.getData().getDefiningOp<moe::NonZeroOp>()
                       : nullptr;
    auto expand =
        nonZero ? nonZero.getX().getDefiningOp<moe::ExpandOp>() : nullptr;
    auto unsqueeze =
        expand ? expand.getInput().getDefiningOp<moe::UnsqueezeOp>() : nullptr;
    auto outShape =
        expand ? expand.getShape().getDefiningOp<moe::ShapeOp>() : nullptr;
    if (!unsqueeze ||
        transpose.getPermutation() != SmallVector<int64_t>{1, 0} ||
        !isConstAxes(unsqueeze.getAxes(), {1}, 2) || !outShape ||
        outShape.getData() != op.getData() || outShape.getStart() != 0 ||
        outShape.getEnd())
      return failure();
    Value sel = unsqueeze.getData();
    Value values = getMaskedValues(op.getUpdates(), sel, nonZero);
    // The mask has the output's rows (no broadcast), and the values are the
    // selected rows, C columns each.
    Value rows = values ? getRowSource(values) : Value();
    if (!rows || getShape(values).size() != 2 ||
        getShape(values)[1] != shape[1] || !hasOneRowPerTrue(rows, sel) ||
        getShape(sel).size() != 1 || !hasRowsOf(sel, op.getData()))
      return failure();
    // The positions of the mask's true elements, in order: the values' own
    // row vector where it is nonzero(sel), else a new nonzero(sel) (which
    // the patterns then bring to segment form).
    Location loc = op.getLoc();
    if (getNonZeroMask(rows) != sel)
      rows = createNonZeroRows(rewriter, loc, sel);
    Value axes = createI64Constant(rewriter, loc, {1}, {1});
    Value indices = moe::UnsqueezeOp::create(rewriter, loc, rows, axes);
    rewriter.replaceOpWithNewOp<moe::ScatterNDOp>(
        op, op.getType(), op.getData(), indices, values,
        rewriter.getStringAttr("none"));
    return success();
  }
};

/// out = zeros (the sort's N rows); out[segment(e)] = v_e for every expert
/// once (a chain of row scatter_nds) -> concat(v_0, ..., v_{E-1}): the
/// segments of the E experts are consecutive and cover [0, N) in expert
/// order, and each v_e has its segment's rows. Where the writes are at
/// `perm[segment(e)]` (the positions of e among the flattened ids, out the
/// assignments' rows) -> gather(concat(...), inverse(perm)): row perm[j] of
/// out is row j of the concatenation.
struct SegmentWritesToConcat : OpRewritePattern<moe::ScatterNDOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::ScatterNDOp op,
                                PatternRewriter &rewriter) const override {
    moe::TopKOp sort;
    std::optional<bool> atPositions;
    SmallVector<Value> pieces;
    Value acc = op.getOutput();
    while (auto write = acc.getDefiningOp<moe::ScatterNDOp>()) {
      auto column = write.getIndices().getDefiningOp<moe::UnsqueezeOp>();
      Value rows = column && isConstAxes(column.getAxes(), {1}, 2)
                       ? column.getData()
                       : Value();
      // perm[segment(e)]: the write is at the flattened ids' positions.
      auto positions = rows ? rows.getDefiningOp<moe::GatherOp>() : nullptr;
      bool permuted = positions && positions.getAxis() == 0 &&
                      getSortOfResult(positions.getData());
      if (permuted)
        rows = positions.getIndices();
      std::optional<std::pair<moe::TopKOp, int64_t>> segment =
          rows ? getSegmentOf(rows) : std::nullopt;
      if (!segment || write.getReduction() != "none" ||
          (sort && segment->first != sort) ||
          (atPositions && *atPositions != permuted) ||
          (permuted && positions.getData() != segment->first.getIndices()) ||
          (acc != op.getOutput() && !acc.hasOneUse()) ||
          getShape(write.getUpdates()).size() != 2)
        return failure();
      sort = segment->first;
      atPositions = permuted;
      int64_t numExperts = matchExpertSort(sort)->numExperts;
      if (pieces.empty())
        pieces.resize(numExperts);
      if (segment->second < 0 || segment->second >= numExperts ||
          pieces[segment->second])
        return failure();
      pieces[segment->second] = write.getUpdates();
      acc = write.getData();
    }
    if (!sort || llvm::any_of(pieces, [](Value v) { return !v; }) ||
        !isFilledWith(acc, 0) || getShape(acc).size() != 2 ||
        !(*atPositions ? hasAssignmentRows(acc, sort)
                       : hasSortedRows(acc, sort)))
      return failure();
    for (Value piece : pieces)
      if (getShape(piece)[1] != getShape(acc)[1])
        return failure();
    if (!*atPositions) {
      rewriter.replaceOpWithNewOp<moe::ConcatOp>(op, op.getType(), pieces,
                                                 rewriter.getI64IntegerAttr(0));
      return success();
    }
    Location loc = op.getLoc();
    Value sorted = moe::ConcatOp::create(rewriter, loc, op.getType(), pieces,
                                         rewriter.getI64IntegerAttr(0));
    Value inverse = getOrCreateInverse(rewriter, loc, sort);
    rewriter.replaceOpWithNewOp<moe::GatherOp>(
        op, op.getType(), sorted, inverse, rewriter.getI64IntegerAttr(0));
    return success();
  }
};

/// Megatron's unpermute: zeros(shape(y)).scatter_add(0, repeat(perm, H), y)
/// with y the sort's N rows -> gather(y, inverse(perm)). perm is a
/// permutation of [0, N): slot perm[i] receives y[i] once, onto zero.
struct UnpermuteToGather : OpRewritePattern<moe::ScatterElementsOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::ScatterElementsOp op,
                                PatternRewriter &rewriter) const override {
    ArrayRef<int64_t> shape = getShape(op.getData());
    if (op.getReduction() != "add" || op.getAxis() != 0 || shape.size() != 2 ||
        ShapedType::isDynamic(shape[1]) || !isFilledWith(op.getData(), 0))
      return failure();
    Value rows = getScatteredRows(op.getUpdates(), op.getIndices());
    auto unsqueeze = op.getIndices().getDefiningOp<moe::TileOp>()
                         ? op.getIndices()
                               .getDefiningOp<moe::TileOp>()
                               .getInput()
                               .getDefiningOp<moe::UnsqueezeOp>()
                         : nullptr;
    moe::TopKOp sort =
        unsqueeze ? getSortOfResult(unsqueeze.getData()) : nullptr;
    if (!rows || !sort || unsqueeze.getData() != sort.getIndices() ||
        !isColumnRepeated(op.getIndices(), sort.getIndices(), shape[1]) ||
        !hasSortedRows(rows, sort) || !hasSortedRows(op.getData(), sort) ||
        rows.getType() != op.getType())
      return failure();
    Value inverse = getOrCreateInverse(rewriter, op.getLoc(), sort);
    rewriter.replaceOpWithNewOp<moe::GatherOp>(op, op.getType(), rows, inverse,
                                               rewriter.getI64IntegerAttr(0));
    return success();
  }
};

/// The expert sort whose inverse permutation `inverse` is
/// (`scatter_elements(_, perm, iota)` into a vector of perm's length).
moe::TopKOp getSortOfInverse(Value inverse) {
  auto scatter = inverse.getDefiningOp<moe::ScatterElementsOp>();
  moe::TopKOp sort = scatter ? getSortOfResult(scatter.getIndices()) : nullptr;
  auto range =
      scatter ? scatter.getUpdates().getDefiningOp<moe::RangeOp>() : nullptr;
  if (!sort || scatter.getIndices() != sort.getIndices() || !range ||
      scatter.getReduction() != "none" || scatter.getAxis() != 0 ||
      moe::getConstantInt(range.getStart()) != 0 ||
      moe::getConstantInt(range.getDelta()) != 1 ||
      !hasSortedRows(scatter.getData(), sort))
    return nullptr;
  auto dim = range.getLimit().getDefiningOp<moe::DimOp>();
  if (!dim || dim.getIndex() != 0 || !hasSortedRows(dim.getInput(), sort))
    return nullptr;
  return sort;
}

/// The routing weights applied after the unpermute (Megatron):
/// `reshape(gather(y, inverse(perm)), [T, k, H]) * unsqueeze(w, -1)` ->
/// `reshape(gather(y * unsqueeze(flatten(w)[perm], 1), inverse(perm)), ...)`,
/// and alike without the view, `gather(y, inverse(perm)) *
/// unsqueeze(flatten(w), 1)`. Row perm[i] of the result is
/// y[i] * w_flat[perm[i]] on both sides.
struct WeightsBeforeUnpermute : OpRewritePattern<moe::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::MulOp mul,
                                PatternRewriter &rewriter) const override {
    for (auto [lhs, rhs] : {std::pair(mul.getLhs(), mul.getRhs()),
                            std::pair(mul.getRhs(), mul.getLhs())}) {
      // The [T, k, H] view scaled by unsqueeze(w, 2), or the [N, H] rows
      // scaled by unsqueeze(flatten(w), 1) (moe-canonicalize-idioms' form).
      auto perToken = lhs.getDefiningOp<moe::ReshapeOp>();
      auto unsorted =
          (perToken ? perToken.getData() : lhs).getDefiningOp<moe::GatherOp>();
      auto column = rhs.getDefiningOp<moe::UnsqueezeOp>();
      if (!unsorted || !column || unsorted.getAxis() != 0 ||
          (perToken && !perToken.getOutput().hasOneUse()))
        continue;
      Value weights = column.getData();
      auto flatWeights = weights.getDefiningOp<moe::ReshapeOp>();
      if (!perToken) {
        if (!flatWeights ||
            !isFlattenedVector(weights, flatWeights.getData()) ||
            !isConstAxes(column.getAxes(), {1}, 2))
          continue;
        weights = flatWeights.getData();
      } else if (!isConstAxes(column.getAxes(), {2}, 3)) {
        continue;
      }
      moe::TopKOp sort = getSortOfInverse(unsorted.getIndices());
      std::optional<ExpertSort> expertSort =
          sort ? matchExpertSort(sort) : std::nullopt;
      int64_t topK = expertSort ? getShape(expertSort->ids)[1] : 0;
      ArrayRef<int64_t> shape = getShape(lhs);
      if (!expertSort ||
          (perToken && (shape.size() != 3 || shape[1] != topK)) ||
          getShape(weights) != ArrayRef<int64_t>{ShapedType::kDynamic, topK} ||
          getShape(unsorted.getData()).size() != 2 ||
          !hasRowsOfIds(weights, expertSort->ids) ||
          getElementTypeOrSelf(weights.getType()) !=
              getElementTypeOrSelf(mul.getType()) ||
          mul.getType() != lhs.getType())
        continue;
      Location loc = mul.getLoc();
      Value minusOne = createI64Constant(rewriter, loc, {1}, {-1});
      Value flat = moe::ReshapeOp::create(rewriter, loc, weights, minusOne);
      Value sorted =
          moe::GatherOp::create(rewriter, loc, flat, sort.getIndices(),
                                rewriter.getI64IntegerAttr(0));
      Value axis = createI64Constant(rewriter, loc, {1}, {1});
      Value sortedColumn =
          moe::UnsqueezeOp::create(rewriter, loc, sorted, axis);
      Value scaled =
          moe::MulOp::create(rewriter, loc, unsorted.getData(), sortedColumn);
      Value gathered = moe::GatherOp::create(rewriter, loc, unsorted.getType(),
                                             scaled, unsorted.getIndices(),
                                             rewriter.getI64IntegerAttr(0));
      if (!perToken) {
        rewriter.replaceOp(mul, gathered);
        return success();
      }
      rewriter.replaceOpWithNewOp<moe::ReshapeOp>(mul, mul.getType(), gathered,
                                                  perToken.getShape(),
                                                  perToken.getAllowzeroAttr());
      return success();
    }
    return failure();
  }
};

/// The sum over k of rows put back in assignment order, reshaped with a
/// computed shape `[T, k, -1]` (`y.view(*w.shape, -1)`, typed `[?, k, ?]`),
/// T the rows of the gate's `[T, k]` ids: the reshape is `[-1, k, H]`, and
/// the sum is retyped `[?, H]` with it (its users are moe ops, which take
/// the refined type).
struct RefineTokenSum : OpRewritePattern<moe::ReduceSumOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::ReduceSumOp sum,
                                PatternRewriter &rewriter) const override {
    auto perToken = sum.getData().getDefiningOp<moe::ReshapeOp>();
    auto unsorted =
        perToken ? perToken.getData().getDefiningOp<moe::GatherOp>() : nullptr;
    ArrayRef<int64_t> shape = getShape(sum.getData());
    if (!unsorted || !perToken.getOutput().hasOneUse() || shape.size() != 3 ||
        !ShapedType::isDynamic(shape[2]) || sum.getKeepdims() != 0 ||
        !sum.getAxes() || !isConstAxes(sum.getAxes(), {1}, 3) ||
        unsorted.getAxis() != 0 ||
        llvm::any_of(sum->getUsers(), [](Operation *user) {
          return !isa<moe::MoeDialect>(user->getDialect());
        }))
      return failure();
    moe::TopKOp sort = getSortOfInverse(unsorted.getIndices());
    std::optional<ExpertSort> expertSort =
        sort ? matchExpertSort(sort) : std::nullopt;
    ArrayRef<int64_t> rows = getShape(unsorted.getData());
    std::optional<SmallVector<moe::ShapeEntry>> entries =
        moe::getShapeEntries(perToken.getShape());
    if (!expertSort || rows.size() != 2 || ShapedType::isDynamic(rows[1]) ||
        !entries || entries->size() != 3)
      return failure();
    int64_t topK = getShape(expertSort->ids)[1], hidden = rows[1];
    const moe::ShapeEntry &tokens = (*entries)[0];
    bool tokensRight =
        tokens.isDim() && tokens.dim == 0 &&
        (tokens.isSameAs(moe::ShapeEntry::ofDim(expertSort->ids, 0)) ||
         tokens.source.getDefiningOp() == expertSort->ids.getDefiningOp());
    auto isConstant = [](const moe::ShapeEntry &entry, int64_t value) {
      return entry.isSameAs(moe::ShapeEntry::ofConstant(value));
    };
    if (!tokensRight || !isConstant((*entries)[1], topK) ||
        !(isConstant((*entries)[2], -1) || isConstant((*entries)[2], hidden)))
      return failure();
    Location loc = sum.getLoc();
    Type element = getElementTypeOrSelf(sum.getType());
    Value shapeValue =
        createI64Constant(rewriter, loc, {3}, {-1, topK, hidden});
    Value reshaped = moe::ReshapeOp::create(
        rewriter, loc,
        RankedTensorType::get({ShapedType::kDynamic, topK, hidden}, element),
        unsorted.getOutput(), shapeValue, rewriter.getI64IntegerAttr(0));
    Value refined = moe::ReduceSumOp::create(
        rewriter, loc,
        RankedTensorType::get({ShapedType::kDynamic, hidden}, element),
        reshaped, sum.getAxes(), rewriter.getI64IntegerAttr(0),
        rewriter.getI64IntegerAttr(0));
    rewriter.replaceOp(sum, refined);
    return success();
  }
};

/// JetMoE's (and Granite's) unsort: `zeros[T, H].index_add(0, perm / k, u)`
/// (scatter_elements with repeated indices or scatter_nd, reduction add) of
/// the sort's N rows u -> `reduce_sum(reshape(gather(u, inverse(perm)),
/// [T, k, H]), 1)`. perm is a permutation of [0, T*k), so token t receives
/// exactly the k rows u[inverse(perm)[t*k + j]]; ONNX leaves the order of
/// a scatter's additions open, and the sum over k is one such order.
template <typename ScatterOp>
struct TokenScatterToSum : OpRewritePattern<ScatterOp> {
  using OpRewritePattern<ScatterOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(ScatterOp op,
                                PatternRewriter &rewriter) const override {
    ArrayRef<int64_t> shape = getShape(op.getData());
    if (op.getReduction() != "add" || shape.size() != 2 ||
        ShapedType::isDynamic(shape[1]) || !isFilledWith(op.getData(), 0))
      return failure();
    Value tokens = getTokenColumn(op, shape[1]);
    Value rows = getScatteredRows(op.getUpdates(), op.getIndices());
    if (!tokens || !rows)
      return failure();
    // The sort whose permutation the token indices divide.
    Value perm = getRowSource(tokens);
    moe::TopKOp sort = getSortOfResult(perm);
    std::optional<ExpertSort> expertSort =
        sort ? matchExpertSort(sort) : std::nullopt;
    if (!expertSort)
      return failure();
    int64_t topK = getShape(expertSort->ids)[1];
    Value zerosShapeOperand;
    if (auto expand = op.getData().template getDefiningOp<moe::ExpandOp>())
      zerosShapeOperand = expand.getShape();
    else if (auto build =
                 op.getData().template getDefiningOp<moe::ConstantOfShapeOp>())
      zerosShapeOperand = build.getInput();
    std::optional<SmallVector<moe::ShapeEntry>> zerosShape =
        zerosShapeOperand ? moe::getShapeEntries(zerosShapeOperand)
                          : std::nullopt;
    moe::ShapeEntry tokenRows = getTokenRows(expertSort->ids);
    if (!isTokenOf(tokens, sort.getIndices(), topK) ||
        !hasSortedRows(rows, sort) || rows.getType() != op.getType() ||
        !zerosShape || zerosShape->size() != 2 || !tokenRows.isDim() ||
        !zerosShape->front().isSameAs(tokenRows))
      return failure();
    Location loc = op.getLoc();
    Value inverse = getOrCreateInverse(rewriter, loc, sort);
    Value unsorted =
        moe::GatherOp::create(rewriter, loc, rows.getType(), rows, inverse,
                              rewriter.getI64IntegerAttr(0));
    Value perTokenShape =
        createI64Constant(rewriter, loc, {3}, {-1, topK, shape[1]});
    auto perTokenType =
        RankedTensorType::get({ShapedType::kDynamic, topK, shape[1]},
                              getElementTypeOrSelf(op.getType()));
    Value perToken =
        moe::ReshapeOp::create(rewriter, loc, perTokenType, unsorted,
                               perTokenShape, rewriter.getI64IntegerAttr(0));
    Value axes = createI64Constant(rewriter, loc, {1}, {1});
    rewriter.replaceOpWithNewOp<moe::ReduceSumOp>(
        op, op.getType(), perToken, axes, rewriter.getI64IntegerAttr(0),
        rewriter.getI64IntegerAttr(0));
    return success();
  }

  /// The `[N]` token index of each scattered row: the column a
  /// scatter_elements repeats over the H columns, or the one-element
  /// tuples of a scatter_nd.
  static Value getTokenColumn(ScatterOp op, int64_t hidden) {
    if constexpr (std::is_same_v<ScatterOp, moe::ScatterElementsOp>) {
      if (op.getAxis() != 0)
        return nullptr;
      Value indices = op.getIndices();
      Operation *def = indices.getDefiningOp();
      auto unsqueeze =
          def ? def->getOperand(0).getDefiningOp<moe::UnsqueezeOp>() : nullptr;
      return unsqueeze && isColumnRepeated(indices, unsqueeze.getData(), hidden)
                 ? unsqueeze.getData()
                 : nullptr;
    } else {
      auto unsqueeze =
          op.getIndices().template getDefiningOp<moe::UnsqueezeOp>();
      return unsqueeze && isConstAxes(unsqueeze.getAxes(), {1}, 2) &&
                     getShape(unsqueeze.getData()).size() == 1
                 ? unsqueeze.getData()
                 : nullptr;
    }
  }
};

} // namespace

void moec::segments::populateSegmentIdiomPatterns(RewritePatternSet &patterns) {
  patterns.add<SliceToSegmentRange, SplitToSegmentRanges, NonZeroToSegment,
               MaskedRowsToRowScatter, SegmentWritesToConcat, UnpermuteToGather,
               WeightsBeforeUnpermute, RefineTokenSum,
               TokenScatterToSum<moe::ScatterElementsOp>,
               TokenScatterToSum<moe::ScatterNDOp>>(patterns.getContext());
  populateSegmentAssignmentPatterns(patterns);
}
