//===- SegmentRows.cpp - row facts of the segments form -------------------===//
//
// What the segment idioms' patterns prove about rows: which value's length
// a value's row count is (the N rows of an expert sort, an expert's
// segment), the positions a boolean mask selects, the inverse permutation
// and the tokens' row count the gate's ids were chosen for (declared in
// SegmentSupport.h).
//
//===----------------------------------------------------------------------===//

#include "passes/SegmentSupport.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchSupport.h"

#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/SmallBitVector.h"

namespace moec::segments {

namespace {
Value getRowSourceImpl(Value value, unsigned depth);
} // namespace

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
namespace {

Value getRowSourceImpl(Value value, unsigned depth) {
  ArrayRef<int64_t> shape = getShape(value);
  Operation *def = value.getDefiningOp();
  if (!def || shape.empty() || depth > 48)
    return value;
  auto recurse = [&](Value v) { return getRowSourceImpl(v, depth + 1); };
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

} // namespace

Value getRowSource(Value value) { return getRowSourceImpl(value, 0); }

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

SmallVector<std::pair<Value, int64_t>> getComparedExpert(Value rows) {
  SmallVector<std::pair<Value, int64_t>> comparisons;
  Value mask = getNonZeroMask(rows);
  auto equal = mask ? mask.getDefiningOp<moe::EqualOp>() : nullptr;
  if (!equal || llvm::any_of(rows.getUsers(), llvm::IsaPred<moe::SegmentOp>))
    return comparisons;
  for (auto [ids, expert] : {std::pair(equal.getLhs(), equal.getRhs()),
                             std::pair(equal.getRhs(), equal.getLhs())})
    if (std::optional<int64_t> e = moe::getConstantInt(expert);
        e && isScalarLike(expert) && getShape(ids).size() == 1)
      comparisons.push_back({ids, *e});
  return comparisons;
}

Value createNonZeroRows(PatternRewriter &rewriter, Location loc, Value mask) {
  Type i64 = rewriter.getI64Type();
  Value nonZero = moe::NonZeroOp::create(
      rewriter, loc, RankedTensorType::get({1, ShapedType::kDynamic}, i64),
      mask);
  Value column = moe::TransposeOp::create(
      rewriter, loc, RankedTensorType::get({ShapedType::kDynamic, 1}, i64),
      nonZero, rewriter.getDenseI64ArrayAttr({1, 0}));
  return moe::SqueezeOp::create(
      rewriter, loc, RankedTensorType::get({ShapedType::kDynamic}, i64), column,
      createI64Constant(rewriter, loc, {1}, {1}));
}

} // namespace moec::segments
