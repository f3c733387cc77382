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
  if (dense.getElementType().isInteger())
    return llvm::all_of(dense.getValues<APInt>(), [&](const APInt &v) {
      // An i1 true is 1, not -1.
      int64_t element =
          v.getBitWidth() == 1 ? v.getZExtValue() : v.getSExtValue();
      return static_cast<double>(element) == expected;
    });
  if (isa<FloatType>(dense.getElementType()))
    return llvm::all_of(dense.getValues<APFloat>(), [&](const APFloat &v) {
      return v.convertToDouble() == expected;
    });
  return false;
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

} // namespace moec::segments

#endif // MOEC_PASSES_SEGMENTSUPPORT_H
