//===- DimTrace.h - dimensions traced to where they were made --*- C++ -*-===//
//
// Proofs that two dynamic dimensions are equal in every run: each is traced
// back through the ops that pass it on unchanged to a static size, a mask's
// count of true elements, or the value where the trace stops. The MoE
// canonicalisations use them where a rewrite is exact only when two shapes
// agree (makeMoE's [B, T, ...] masks and accumulators, routing matrices
// filled with the shape of other logits).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_DIMTRACE_H
#define MOEC_PASSES_DIMTRACE_H

#include "mlir/IR/Value.h"

#include <optional>

namespace moec {

/// The `dim` of a DimKey for a NonZero's second axis: the true elements of
/// its input, the same for every reshape of that input.
constexpr int64_t kTrueCount = -2;
/// The `dim` of a DimKey for the rows `reshape(x, [-1, ...])` infers when
/// the other sizes are x's trailing ones: the product of x's leading
/// dimensions.
constexpr int64_t kFlatRows = -3;

/// A dimension traced back to where it was made (traceDim): a static size,
/// or dimension `dim` (or kTrueCount, kFlatRows) of `source`.
struct DimKey {
  std::optional<int64_t> constant;
  mlir::Value source;
  int64_t dim = -1;

  bool isKnown() const { return constant || source; }
  bool operator==(const DimKey &other) const {
    return constant == other.constant && source == other.source &&
           dim == other.dim;
  }
};

/// Dimension `dim` of `value` traced back through the ops that pass it on
/// unchanged (elementwise ops, projections, reductions and top-k over other
/// axes, rank changes, gathers at index rows, fills and expansions of a
/// shape), to a static size, a NonZero's count of true elements (the same
/// for every reshape of the mask), or the dimension of the value where the
/// trace stops. Two dimensions with equal keys are equal in every run.
DimKey traceDim(mlir::Value value, int64_t dim, unsigned depth = 0);

/// The dimension a shape-vector element denotes, traced; nullopt when it is
/// unknown.
std::optional<DimKey> traceShapeEntry(mlir::Value shape, int64_t index);

/// Whether the first `count` dimensions of `a` and `b` are provably equal.
bool haveSameLeadingDims(mlir::Value a, mlir::Value b, int64_t count);

/// The rank of `value`'s ranked type, or -1.
int64_t rankOf(mlir::Value value);

/// `value` without the reshapes that made it: they keep its elements.
mlir::Value stripReshapes(mlir::Value value);

} // namespace moec

#endif // MOEC_PASSES_DIMTRACE_H
