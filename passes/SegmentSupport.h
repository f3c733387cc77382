//===- SegmentSupport.h - the sort the segments form starts from -*- C++
//-*-===//
//
// What moe-canonicalize-segments and moe-detect-segment-experts both prove
// about the stable sort of the flattened expert ids that transformers'
// grouped_mm segments start from: that it sorts all of them ascending, and
// that the ids are expert indices in [0, E) whatever gate chose them.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_SEGMENTSUPPORT_H
#define MOEC_PASSES_SEGMENTSUPPORT_H

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchSupport.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

#include <optional>

namespace moec::segments {

// The helpers read like the passes that use them.
using namespace mlir;

/// Whether `value` is a constant whose every element equals `expected`.
inline bool isSplatOf(Value value, double expected) {
  Attribute attr;
  if (!matchPattern(value, m_Constant(&attr)))
    return false;
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return false;
  // A splat is checked once: it may stand for more elements than could be
  // visited (a crafted model's shape of 2^40).
  auto isInt = [&](const APInt &v) {
    // An i1 true is 1, not -1.
    int64_t element =
        v.getBitWidth() == 1 ? v.getZExtValue() : v.getSExtValue();
    return static_cast<double>(element) == expected;
  };
  auto isFloat = [&](const APFloat &v) {
    return v.convertToDouble() == expected;
  };
  if (dense.getElementType().isInteger())
    return dense.isSplat() ? isInt(dense.getSplatValue<APInt>())
                           : llvm::all_of(dense.getValues<APInt>(), isInt);
  if (isa<FloatType>(dense.getElementType()))
    return dense.isSplat() ? isFloat(dense.getSplatValue<APFloat>())
                           : llvm::all_of(dense.getValues<APFloat>(), isFloat);
  return false;
}

/// Whether `value` is filled with `expected`: a splat constant, a
/// constant_of_shape of it, or an expand of a splat constant.
inline bool isFilledWith(Value value, double expected) {
  if (auto expand = value.getDefiningOp<moe::ExpandOp>())
    return isSplatOf(expand.getInput(), expected);
  if (auto build = value.getDefiningOp<moe::ConstantOfShapeOp>()) {
    auto fill = dyn_cast_or_null<DenseElementsAttr>(build.getValueAttr());
    if (!fill)
      return expected == 0; // ONNX's default value is a float zero.
    if (!fill.isSplat())
      return false;
    if (isa<FloatType>(fill.getElementType()))
      return fill.getSplatValue<APFloat>().convertToDouble() == expected;
    return static_cast<double>(fill.getSplatValue<APInt>().getSExtValue()) ==
           expected;
  }
  return isSplatOf(value, expected);
}

/// Whether the 1-element `k` operand of a top-k is the whole length of the
/// 1-D `input`: a sort of all of it.
inline bool isWholeLength(Value k, Value input) {
  std::optional<SmallVector<moe::ShapeEntry>> entries = moe::getShapeEntries(k);
  if (!entries || entries->size() != 1)
    return false;
  moe::ShapeEntry length = moe::ShapeEntry::ofDim(input, 0);
  return entries->front().isSameAs(length);
}

/// The number of experts E when every element of `ids` is provably an
/// expert index in [0, E): the indices of a top-k or an arg-max over a
/// dimension of static size E, or a concatenation or reshape of such (the
/// arg-maxes of PhiMoE's sparsemixer). Whatever gate chose them.
inline std::optional<int64_t> getExpertCount(Value ids) {
  Operation *op = ids.getDefiningOp();
  auto sizeAlong = [](Value input, int64_t axis) -> std::optional<int64_t> {
    ArrayRef<int64_t> shape = getShape(input);
    int64_t rank = shape.size();
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis >= rank || ShapedType::isDynamic(shape[axis]))
      return std::nullopt;
    return shape[axis];
  };
  if (auto topK = dyn_cast_or_null<moe::TopKOp>(op))
    return ids == topK.getIndices() ? sizeAlong(topK.getInput(), topK.getAxis())
                                    : std::nullopt;
  if (auto argMax = dyn_cast_or_null<moe::ArgMaxOp>(op))
    return sizeAlong(argMax.getData(), argMax.getAxis());
  if (isa_and_nonnull<moe::UnsqueezeOp, moe::ReshapeOp>(op))
    return getExpertCount(op->getOperand(0));
  if (auto concat = dyn_cast_or_null<moe::ConcatOp>(op)) {
    std::optional<int64_t> count;
    for (Value input : concat.getInputs()) {
      std::optional<int64_t> inputCount = getExpertCount(input);
      if (!inputCount || (count && *count != *inputCount))
        return std::nullopt;
      count = inputCount;
    }
    return count;
  }
  return std::nullopt;
}

/// The `[T, k]` expert ids (static k) whose flattening `sort` sorts, or
/// null: the candidates of this form.
inline Value getSortedIds(moe::TopKOp sort) {
  Value input = sort.getInput();
  auto reshape = input.getDefiningOp<moe::ReshapeOp>();
  if (!reshape || !isFlattenedVector(input, reshape.getData()))
    return nullptr;
  Value ids = reshape.getData();
  ArrayRef<int64_t> shape = getShape(ids);
  if (shape.size() != 2 || ShapedType::isDynamic(shape[1]) || shape[1] < 1 ||
      !getElementTypeOrSelf(ids.getType()).isSignlessInteger(64))
    return nullptr;
  return ids;
}

/// The flattened `[T, k]` expert ids a stable sort of all of them
/// (`top_k(flatten(ids), N, largest 0)`) orders, with E.
struct ExpertSort {
  Value ids;
  int64_t numExperts = 0;
};

/// Matches `sort` as an ExpertSort; nullopt when it is not one.
inline std::optional<ExpertSort> matchExpertSort(moe::TopKOp sort) {
  Value ids = getSortedIds(sort);
  std::optional<int64_t> numExperts = ids ? getExpertCount(ids) : std::nullopt;
  if (!numExperts || sort.getLargest() != 0 || sort.getSorted() != 1 ||
      !isAxis(sort.getAxis(), 0, 1) ||
      !isWholeLength(sort.getK(), sort.getInput()))
    return std::nullopt;
  return ExpertSort{ids, *numExperts};
}

/// The scalar `value` as element `index` of a static vector: looks through
/// reshapes of one-element values, `gather(v, 0)` of a one-element `v`,
/// `squeeze(split(vector)#e)` into one-element pieces, `slice(vector, e,
/// e + 1)` and `gather(vector, e)` with constant e. Defined in
/// CanonicalizeSegments.cpp.
std::optional<std::pair<Value, int64_t>> getElementOf(Value value);

/// The expert sort whose ids `counts` (an `[E]` vector, casts looked
/// through) is the histogram of: torch.histc's scatter-add of ones,
/// bincount's `reduce_sum(one_hot)`, or the `[T, E]` routing map of a
/// top-k's `[T, k]` indices (`scatter(zeros, ids, 1)`, distinct per row)
/// summed over the tokens. Null when not proven. Defined in
/// CanonicalizeSegments.cpp.
moe::TopKOp getSortOfHistogram(Value counts);

/// The expert sort of which `ends` (casts looked through) is the cum_sum of
/// a histogram (getSortOfHistogram): then 0 <= ends[e-1] <= ends[e] <= N
/// and `[ends[e-1], ends[e])` are exactly the positions of expert e among
/// the sorted ids. Null when not proven.
moe::TopKOp getSortOfEnds(Value ends);

/// The sort, ends and expert e of a segment's bounds `[start, limit)` =
/// `[ends[e-1], ends[e])` (0 for e = 0) over ends a proven cum_sum of a
/// histogram (getSortOfEnds).
struct SegmentBounds {
  moe::TopKOp sort;
  Value ends;
  int64_t expert = 0;
};

/// Matches `[start, limit)` (scalars or one-element vectors) as the bounds of
/// expert e's segment; nullopt when not proven.
std::optional<SegmentBounds> matchSegmentBounds(Value start, Value limit);

/// Whether `value` is `perm / k` (a flat assignment's token, `perm >= 0`):
/// integer division, torch's floor-division form `perm / k - (perm < 0 and
/// perm % k)` whose correction is zero for the non-negative indices of a
/// sort, or, for k a power of two (exact in f32), the float form
/// `int(floor(|p / k|) * sign(p / k))` of `p = float(perm)`; reshapes to
/// `[-1]` looked through.
bool isTokenOf(Value value, Value perm, int64_t topK);

/// Whether `value` has a static single element (a broadcast operand that
/// keeps rows).
bool isScalarLike(Value value);

/// The expert sort whose permutation or sorted values `value` is, or null.
moe::TopKOp getSortOfResult(Value value);

/// The expert sort and expert e of which the index vector `rows` is the
/// positions of e among the sorted ids: a moe.segment, or the range of a
/// segment's bounds (matchSegmentBounds).
std::optional<std::pair<moe::TopKOp, int64_t>> getSegmentOf(Value rows);

/// The value whose length provably is `value`'s row count, traced through
/// ops that keep rows (index arithmetic, gathers along axis 0, projections,
/// elementwise ops, rank changes and column splits or slices, scatters, a
/// fill of a shape) and a concatenation of every expert's segment of one
/// sort (its N rows). A sort's values and permutation both give the
/// permutation; `value` itself where nothing applies.
Value getRowSource(Value value);

/// Whether `value` has the N rows of the expert sort `sort`.
bool hasSortedRows(Value value, moe::TopKOp sort);

/// A new i64 constant of `shape` holding `values`.
Value createI64Constant(PatternRewriter &rewriter, Location loc,
                        ArrayRef<int64_t> shape, ArrayRef<int64_t> values);

/// `scatter_elements(zeros(len(perm)), perm, 0..N-1)` of the sort's
/// permutation (an existing one is reused), built after the sort.
Value getOrCreateInverse(PatternRewriter &rewriter, Location loc,
                         moe::TopKOp sort);

/// The 1-D mask whose true positions the index vector `rows` lists
/// (`squeeze(transpose(nonzero(mask)), 1)`, also as a segment's fallback),
/// or null.
Value getNonZeroMask(Value rows);

/// The (ids, e) comparisons `ids == e` (either operand order, e a scalar
/// constant) whose true positions the index vector `rows` lists
/// (getNonZeroMask), when no moe.segment uses `rows` yet.
SmallVector<std::pair<Value, int64_t>> getComparedExpert(Value rows);

/// `squeeze(transpose(nonzero(mask)), 1)`: the positions of the 1-D mask's
/// true elements, ascending.
Value createNonZeroRows(PatternRewriter &rewriter, Location loc, Value mask);

/// Whether the `[T, k]` weights have the T rows of the `[T, k]` ids.
bool hasRowsOfIds(Value weights, Value ids);

/// The row size of the `[T, H]` tokens whose projection the top-k choosing
/// `ids` ranks.
moe::ShapeEntry getTokenRows(Value ids);

/// Whether `value` has the T*k rows of the assignments of `sort`'s `[T, k]`
/// ids in their flat order: the tokens repeated k times
/// (`repeat_interleave`, SegmentAssignments.cpp).
bool hasAssignmentRows(Value value, moe::TopKOp sort);

/// Adds the patterns of SegmentAssignments.cpp (per-assignment masks of
/// flattened ids onto the segments form).
void populateSegmentAssignmentPatterns(RewritePatternSet &patterns);

/// Adds the patterns that bring the per-expert idioms of Megatron-Core's
/// permutation, JetMoE's (scattermoe) and masked-assignment code onto the
/// segments form (SegmentIdioms.cpp).
void populateSegmentIdiomPatterns(RewritePatternSet &patterns);

} // namespace moec::segments

#endif // MOEC_PASSES_SEGMENTSUPPORT_H
