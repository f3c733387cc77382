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

/// A scalar or one-element value (a broadcast operand that keeps rows).
bool isScalarLike(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.hasStaticShape() && type.getNumElements() == 1;
}

/// The expert sort whose permutation or sorted values `value` is, or null.
moe::TopKOp getSortOfResult(Value value) {
  auto result = dyn_cast<OpResult>(value);
  auto sort = result ? dyn_cast<moe::TopKOp>(result.getOwner()) : nullptr;
  return sort && matchExpertSort(sort) ? sort : nullptr;
}

/// The expert sort and expert e of which the index vector `rows` is the
/// positions of e among the sorted ids: a moe.segment, or
/// `range(ends[e-1], ends[e])` over a proven cum_sum of a histogram.
std::optional<std::pair<moe::TopKOp, int64_t>> getSegmentOf(Value rows) {
  if (auto segment = rows.getDefiningOp<moe::SegmentOp>()) {
    moe::TopKOp sort = getSortOfResult(segment.getIds());
    if (sort && segment.getIds() == sort.getValues())
      return std::pair(sort, segment.getExpert());
    return std::nullopt;
  }
  auto range = rows.getDefiningOp<moe::RangeOp>();
  std::optional<SegmentBounds> bounds =
      range && moe::getConstantInt(range.getDelta()) == 1
          ? matchSegmentBounds(range.getStart(), range.getLimit())
          : std::nullopt;
  if (!bounds)
    return std::nullopt;
  return std::pair(bounds->sort, bounds->expert);
}

/// The value whose length provably is `value`'s row count (dimension 0),
/// traced through ops that keep rows: index arithmetic on a vector, gathers
/// along axis 0 (their indices), projections, elementwise ops, column
/// splits and slices, scatters (their data), a fill of a shape, and the
/// concatenation of every expert's segment of one sort (its N rows). A
/// sort's values and permutation both give the permutation. The value
/// itself where none of these applies (comparing by identity).
Value getRowSource(Value value, unsigned depth = 0) {
  ArrayRef<int64_t> shape = getShape(value);
  Operation *def = value.getDefiningOp();
  if (!def || shape.empty() || depth > 48)
    return value;
  auto recurse = [&](Value v) { return getRowSource(v, depth + 1); };
  // Elementwise ops: every operand of full rank has the result's rows.
  auto ofOperands = [&]() -> Value {
    Value source;
    for (Value operand : def->getOperands()) {
      if (isScalarLike(operand) || getShape(operand).size() < shape.size())
        continue;
      Value operandSource = recurse(operand);
      if (source && source != operandSource)
        return value;
      source = operandSource;
    }
    return source ? source : value;
  };
  if (auto sort = dyn_cast<moe::TopKOp>(def))
    return shape.size() == 1 && matchExpertSort(sort) ? sort.getIndices()
                                                      : value;
  if (isa<moe::CastOp, moe::FloorOp, moe::AbsOp, moe::SignOp, moe::NegOp,
          moe::NotOp, moe::SigmoidOp, moe::ReluOp, moe::TanhOp, moe::ExpOp,
          moe::ErfOp, moe::GeluOp, moe::SoftplusOp, moe::IdentityOp, moe::AddOp,
          moe::SubOp, moe::MulOp, moe::DivOp, moe::ModOp, moe::AndOp,
          moe::EqualOp, moe::LessOp>(def))
    return ofOperands();
  if (auto reshape = dyn_cast<moe::ReshapeOp>(def))
    return shape.size() == 1 && getShape(reshape.getData()).size() == 1
               ? recurse(reshape.getData())
               : value;
  if (isa<moe::UnsqueezeOp, moe::SqueezeOp>(def)) {
    // Rank changes that keep dimension 0 (and the axes counted from the
    // larger rank).
    int64_t rank = std::max(shape.size(), getShape(def->getOperand(0)).size());
    std::optional<SmallVector<int64_t>> axes =
        def->getNumOperands() > 1 ? moe::getConstantInts(def->getOperand(1))
                                  : std::nullopt;
    if (!axes || getShape(def->getOperand(0)).empty() ||
        llvm::any_of(*axes,
                     [&](int64_t axis) { return axis == 0 || axis == -rank; }))
      return value;
    return recurse(def->getOperand(0));
  }
  if (auto gather = dyn_cast<moe::GatherOp>(def))
    return gather.getAxis() == 0 && getShape(gather.getIndices()).size() == 1
               ? recurse(gather.getIndices())
               : value;
  if (auto matmul = dyn_cast<moe::MatMulOp>(def))
    return shape.size() == 2 && getShape(matmul.getB()).size() == 2
               ? recurse(matmul.getA())
               : value;
  if (auto gemm = dyn_cast<moe::GemmOp>(def))
    return gemm.getTransA() == 0 ? recurse(gemm.getA()) : value;
  if (auto split = dyn_cast<moe::SplitOp>(def))
    return shape.size() == 2 && isAxis(split.getAxis(), 1, 2)
               ? recurse(split.getInput())
               : value;
  if (auto slice = dyn_cast<moe::SliceOp>(def)) {
    int64_t rank = shape.size();
    std::optional<SmallVector<int64_t>> axes =
        slice.getAxes() ? moe::getConstantInts(slice.getAxes()) : std::nullopt;
    if (!axes || llvm::any_of(*axes, [&](int64_t axis) {
          return axis == 0 || axis == -rank;
        }))
      return value;
    return recurse(slice.getData());
  }
  if (isa<moe::ScatterNDOp, moe::ScatterElementsOp>(def))
    return recurse(def->getOperand(0));
  if (isa<moe::ConstantOfShapeOp, moe::ExpandOp>(def)) {
    Value shapeOperand = def->getOperand(isa<moe::ExpandOp>(def) ? 1 : 0);
    if (isa<moe::ExpandOp>(def) && !isScalarLike(def->getOperand(0)))
      return value;
    std::optional<SmallVector<moe::ShapeEntry>> entries =
        moe::getShapeEntries(shapeOperand);
    if (!entries || entries->size() != shape.size() ||
        !entries->front().isDim() || entries->front().dim != 0)
      return value;
    return recurse(entries->front().source);
  }
  if (auto concat = dyn_cast<moe::ConcatOp>(def)) {
    if (concat.getAxis() != 0)
      return ofOperands();
    // Every expert's segment of one sort, once each: the N sorted rows.
    moe::TopKOp sort;
    llvm::SmallBitVector seen;
    for (Value input : concat.getInputs()) {
      std::optional<std::pair<moe::TopKOp, int64_t>> segment =
          getSegmentOf(recurse(input));
      if (!segment || (sort && segment->first != sort))
        return value;
      sort = segment->first;
      std::optional<ExpertSort> expertSort = matchExpertSort(sort);
      if (seen.empty())
        seen.resize(expertSort->numExperts);
      if (segment->second < 0 || segment->second >= expertSort->numExperts ||
          seen.test(segment->second))
        return value;
      seen.set(segment->second);
    }
    return sort && seen.all() ? sort.getIndices() : value;
  }
  return value;
}

/// Whether `value` has the N rows of the expert sort `sort`.
bool hasSortedRows(Value value, moe::TopKOp sort) {
  return getRowSource(value) == sort.getIndices();
}

/// A new i64 constant of `shape` holding `values`.
Value createI64Constant(PatternRewriter &rewriter, Location loc,
                        ArrayRef<int64_t> shape, ArrayRef<int64_t> values) {
  auto type = RankedTensorType::get(shape, rewriter.getI64Type());
  return moe::ConstantOp::create(rewriter, loc,
                                 moe::getI64Elements(type, values));
}

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

/// `inverse(perm) = scatter_elements(zeros(len(perm)), perm, 0..N-1)`: the
/// position of each assignment among the sorted rows. An existing one of
/// `perm` is reused.
Value getOrCreateInverse(PatternRewriter &rewriter, Location loc,
                         moe::TopKOp sort) {
  Value perm = sort.getIndices();
  for (Operation *user : perm.getUsers())
    if (auto scatter = dyn_cast<moe::ScatterElementsOp>(user))
      if (scatter.getIndices() == perm && scatter.getAxis() == 0 &&
          scatter.getReduction() == "none")
        if (auto range = scatter.getUpdates().getDefiningOp<moe::RangeOp>())
          if (moe::getConstantInt(range.getStart()) == 0 &&
              moe::getConstantInt(range.getDelta()) == 1)
            if (auto dim = range.getLimit().getDefiningOp<moe::DimOp>())
              if (dim.getInput() == perm && dim.getIndex() == 0)
                if (auto data = scatter.getData()
                                    .getDefiningOp<moe::ConstantOfShapeOp>())
                  if (auto shape =
                          data.getInput().getDefiningOp<moe::ShapeOp>())
                    if (shape.getData() == perm)
                      return scatter.getOutput();
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointAfter(sort);
  Value length = moe::DimOp::create(rewriter, loc, perm, 0);
  Value zero = createI64Constant(rewriter, loc, {}, {0});
  Value one = createI64Constant(rewriter, loc, {}, {1});
  Value iota =
      moe::RangeOp::create(rewriter, loc, perm.getType(), zero, length, one);
  Value shape = moe::ShapeOp::create(rewriter, loc, perm,
                                     rewriter.getI64IntegerAttr(0), nullptr);
  auto fillType = RankedTensorType::get({1}, rewriter.getI64Type());
  Value zeros = moe::ConstantOfShapeOp::create(
      rewriter, loc, perm.getType(), shape,
      DenseElementsAttr::get(fillType, rewriter.getI64IntegerAttr(0)));
  return moe::ScatterElementsOp::create(rewriter, loc, zeros, perm, iota,
                                        rewriter.getI64IntegerAttr(0),
                                        rewriter.getStringAttr("none"));
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

/// The 1-D mask `sel` whose true positions the index vector `rows` lists:
/// `squeeze(transpose(nonzero(sel)), 1)`, also as the fallback of the
/// moe.segment that replaced it. Null otherwise.
Value getNonZeroMask(Value rows) {
  if (auto segment = rows.getDefiningOp<moe::SegmentOp>())
    rows = segment.getFallback();
  auto squeeze = rows.getDefiningOp<moe::SqueezeOp>();
  auto transpose =
      squeeze ? squeeze.getData().getDefiningOp<moe::TransposeOp>() : nullptr;
  auto nonZero =
      transpose ? transpose.getData().getDefiningOp<moe::NonZeroOp>() : nullptr;
  if (!nonZero || getShape(nonZero.getX()).size() != 1 ||
      transpose.getPermutation() != SmallVector<int64_t>{1, 0} ||
      !squeeze.getAxes() || !isConstAxes(squeeze.getAxes(), {1}, 2))
    return nullptr;
  return nonZero.getX();
}

/// squeeze(transpose(nonzero(sorted == e)), 1) over the values of an expert
/// sort -> moe.segment sorted expert e: by definition the ascending
/// positions of e among the sorted ids (the squeeze is its fallback).
struct NonZeroToSegment : OpRewritePattern<moe::SqueezeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::SqueezeOp squeeze,
                                PatternRewriter &rewriter) const override {
    if (llvm::any_of(squeeze->getUsers(), llvm::IsaPred<moe::SegmentOp>))
      return failure();
    Value mask = getNonZeroMask(squeeze.getOutput());
    auto equal = mask ? mask.getDefiningOp<moe::EqualOp>() : nullptr;
    if (!equal)
      return failure();
    for (auto [sorted, expert] : {std::pair(equal.getLhs(), equal.getRhs()),
                                  std::pair(equal.getRhs(), equal.getLhs())}) {
      moe::TopKOp sort = getSortOfResult(sorted);
      std::optional<int64_t> e = moe::getConstantInt(expert);
      if (!sort || sorted != sort.getValues() || !e || *e < 0 ||
          *e >= matchExpertSort(sort)->numExperts || !isScalarLike(expert))
        continue;
      rewriter.setInsertionPointAfter(squeeze);
      auto segment = moe::SegmentOp::create(rewriter, squeeze.getLoc(), sorted,
                                            squeeze.getOutput(),
                                            rewriter.getI64IntegerAttr(*e));
      rewriter.replaceAllUsesExcept(squeeze.getOutput(), segment.getRows(),
                                    segment);
      return success();
    }
    return failure();
  }
};

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
    // The flattened values, sliced to the count of true mask elements.
    auto slice = op.getUpdates().getDefiningOp<moe::SliceOp>();
    auto flat =
        slice ? slice.getData().getDefiningOp<moe::ReshapeOp>() : nullptr;
    if (!flat || !isFlattenedVector(flat.getOutput(), flat.getData()) ||
        moe::getConstantInt(slice.getStarts()) != 0 ||
        (slice.getAxes() && !isConstAxes(slice.getAxes(), {0}, 1)) ||
        (slice.getSteps() && moe::getConstantInt(slice.getSteps()) != 1))
      return failure();
    std::optional<SmallVector<moe::ShapeEntry>> count =
        moe::getShapeEntries(slice.getEnds());
    if (!count || count->size() != 1 ||
        !count->front().isSameAs(
            moe::ShapeEntry::ofDim(nonZero.getOutput(), 1)))
      return failure();
    Value values = flat.getData();
    // The mask has the output's rows (no broadcast), and the values are the
    // selected rows, C columns each.
    Value rows = getRowSource(values);
    if (getShape(values).size() != 2 || getShape(values)[1] != shape[1] ||
        getNonZeroMask(rows) != sel || getShape(sel).size() != 1 ||
        getRowSource(sel) != getRowSource(op.getData()) ||
        getRowSource(sel) == sel)
      return failure();
    Value axes = createI64Constant(rewriter, op.getLoc(), {1}, {1});
    Value indices = moe::UnsqueezeOp::create(rewriter, op.getLoc(), rows, axes);
    rewriter.replaceOpWithNewOp<moe::ScatterNDOp>(
        op, op.getType(), op.getData(), indices, values,
        rewriter.getStringAttr("none"));
    return success();
  }
};

/// out = zeros (the sort's N rows); out[segment(e)] = v_e for every expert
/// once (a chain of row scatter_nds) -> concat(v_0, ..., v_{E-1}): the
/// segments of the E experts are consecutive and cover [0, N) in expert
/// order, and each v_e has its segment's rows.
struct SegmentWritesToConcat : OpRewritePattern<moe::ScatterNDOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::ScatterNDOp op,
                                PatternRewriter &rewriter) const override {
    moe::TopKOp sort;
    SmallVector<Value> pieces;
    Value acc = op.getOutput();
    while (auto write = acc.getDefiningOp<moe::ScatterNDOp>()) {
      auto column = write.getIndices().getDefiningOp<moe::UnsqueezeOp>();
      std::optional<std::pair<moe::TopKOp, int64_t>> segment =
          column && isConstAxes(column.getAxes(), {1}, 2)
              ? getSegmentOf(column.getData())
              : std::nullopt;
      if (!segment || write.getReduction() != "none" ||
          (sort && segment->first != sort) ||
          (acc != op.getOutput() && !acc.hasOneUse()) ||
          getShape(write.getUpdates()).size() != 2)
        return failure();
      sort = segment->first;
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
        !isFilledWith(acc, 0) || !hasSortedRows(acc, sort) ||
        getShape(acc).size() != 2)
      return failure();
    for (Value piece : pieces)
      if (getShape(piece)[1] != getShape(acc)[1])
        return failure();
    rewriter.replaceOpWithNewOp<moe::ConcatOp>(op, op.getType(), pieces,
                                               rewriter.getI64IntegerAttr(0));
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

/// Whether the `[T, k]` routing weights `weights` have the T rows of the
/// sort's `[T, k]` ids: both come from one top-k (the weights through
/// row-wise ops such as the softmax over k), or share their row size.
bool hasRowsOfIds(Value weights, Value ids) {
  moe::ShapeEntry rows = moe::ShapeEntry::ofDim(weights, 0);
  if (rows.isSameAs(moe::ShapeEntry::ofDim(ids, 0)))
    return true;
  auto result = rows.isDim() ? dyn_cast<OpResult>(rows.source) : OpResult();
  return result && rows.dim == 0 && ids.getDefiningOp() == result.getOwner();
}

/// The routing weights applied after the unpermute (Megatron):
/// `reshape(gather(y, inverse(perm)), [T, k, H]) * unsqueeze(w, -1)` ->
/// `reshape(gather(y * unsqueeze(flatten(w)[perm], 1), inverse(perm)), ...)`.
/// Row perm[i] of the result is y[i] * w_flat[perm[i]] on both sides.
struct WeightsBeforeUnpermute : OpRewritePattern<moe::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(moe::MulOp mul,
                                PatternRewriter &rewriter) const override {
    for (auto [lhs, rhs] : {std::pair(mul.getLhs(), mul.getRhs()),
                            std::pair(mul.getRhs(), mul.getLhs())}) {
      auto perToken = lhs.getDefiningOp<moe::ReshapeOp>();
      auto unsorted = perToken
                          ? perToken.getData().getDefiningOp<moe::GatherOp>()
                          : nullptr;
      auto column = rhs.getDefiningOp<moe::UnsqueezeOp>();
      if (!unsorted || !column || unsorted.getAxis() != 0 ||
          !perToken.getOutput().hasOneUse())
        continue;
      moe::TopKOp sort = getSortOfInverse(unsorted.getIndices());
      std::optional<ExpertSort> expertSort =
          sort ? matchExpertSort(sort) : std::nullopt;
      Value weights = column.getData();
      ArrayRef<int64_t> shape = getShape(perToken.getOutput());
      int64_t topK = expertSort ? getShape(expertSort->ids)[1] : 0;
      if (!expertSort || shape.size() != 3 || shape[1] != topK ||
          getShape(weights) != ArrayRef<int64_t>{ShapedType::kDynamic, topK} ||
          !isConstAxes(column.getAxes(), {2}, 3) ||
          getShape(unsorted.getData()).size() != 2 ||
          !hasRowsOfIds(weights, expertSort->ids) ||
          getElementTypeOrSelf(weights.getType()) !=
              getElementTypeOrSelf(mul.getType()) ||
          mul.getType() != perToken.getOutput().getType())
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
      rewriter.replaceOpWithNewOp<moe::ReshapeOp>(mul, mul.getType(), gathered,
                                                  perToken.getShape(),
                                                  perToken.getAllowzeroAttr());
      return success();
    }
    return failure();
  }
};

/// The `[T, H]` tokens' row size: dimension 0 of what the gate's top-k
/// scores were projected from (`ids` are the top-k's indices).
moe::ShapeEntry getTokenRows(Value ids) {
  auto topK = ids.getDefiningOp<moe::TopKOp>();
  if (!topK)
    return moe::ShapeEntry::unknown();
  Value scores = topK.getInput();
  for (unsigned depth = 0; depth < 8; ++depth) {
    Operation *def = scores.getDefiningOp();
    if (auto matmul = dyn_cast_or_null<moe::MatMulOp>(def))
      scores = matmul.getA();
    else if (auto gemm = dyn_cast_or_null<moe::GemmOp>(def);
             gemm && gemm.getTransA() == 0)
      scores = gemm.getA();
    else if (isa_and_nonnull<moe::SoftmaxOp, moe::SigmoidOp>(def))
      scores = def->getOperand(0);
    else
      break;
  }
  return moe::ShapeEntry::ofDim(scores, 0);
}

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
  patterns
      .add<SliceToSegmentRange, SplitToSegmentRanges, NonZeroToSegment,
           MaskedRowsToRowScatter, SegmentWritesToConcat, UnpermuteToGather,
           WeightsBeforeUnpermute, TokenScatterToSum<moe::ScatterElementsOp>,
           TokenScatterToSum<moe::ScatterNDOp>>(patterns.getContext());
}
