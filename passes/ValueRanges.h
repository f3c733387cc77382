//===- ValueRanges.h - integer value ranges of tensors ----------*- C++ -*-===//
//
// A forward value-range analysis over the ops of a function whose operand
// types are already bounded (moe-bound-shapes' clone): for every integer (or
// boolean) tensor it keeps one interval holding all its elements and, for
// tensors whose elements are non-negative, an upper bound of their sum. The
// sums are what bound data-dependent sizes computed from routing: a
// histogram of T*k expert ids (ReduceSum of a OneHot, ScatterElements-add of
// ones) sums to at most T*k, its CumSum never exceeds that total, and so a
// Range between two entries of the CumSum has at most T*k elements.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_VALUERANGES_H
#define MOEC_PASSES_VALUERANGES_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>
#include <string>

namespace moec {

/// Every element of a tensor lies in [min, max]. When min >= 0, `total`
/// bounds the sum of all its elements (at most the element count times max;
/// tighter where the tensor sums something known). `why` says in words where
/// the range comes from, for remarks.
struct IntRange {
  int64_t min = 0;
  int64_t max = 0;
  int64_t total = 0;
  std::string why;

  bool isNonNegative() const { return min >= 0; }
};

/// The ranges of the integer values of one function, computed op by op in
/// program order: `visit` each op after its operands have their bounded
/// types. Anything it cannot prove stays unknown; nothing here guesses.
class ValueRanges {
public:
  /// The range of `value`, if known.
  const IntRange *lookup(mlir::Value value) const;

  /// Computes the ranges of the results of `op` (an op of the bounded
  /// clone, whose operands have static types) from its operands' ranges.
  /// `original` is its counterpart in the unbounded function, which tells
  /// static dimensions (exact sizes) from bounded ones (at most the bound).
  void visit(mlir::Operation *original, mlir::Operation *op);

  /// Whether the elements of the 1-D `vector` are non-decreasing (a CumSum
  /// of non-negative counts: the segment ends of a grouped matmul).
  bool isNonDecreasing(mlir::Value vector) const {
    return nonDecreasing.contains(vector);
  }

  /// The 1-D vector and index whose element the one-element `value` is
  /// (a Split, Gather or Slice of one element, reshaped), if known.
  std::optional<std::pair<mlir::Value, int64_t>>
  getElementOf(mlir::Value value) const;

private:
  void set(mlir::Value value, int64_t min, int64_t max,
           std::optional<int64_t> total, std::string why);

  void visitRanges(mlir::Operation *original, mlir::Operation *op);
  void visitOrder(mlir::Operation *original, mlir::Operation *op);

  llvm::DenseMap<mlir::Value, IntRange> ranges;
  llvm::DenseSet<mlir::Value> nonDecreasing;
  llvm::DenseMap<mlir::Value, std::pair<mlir::Value, int64_t>> elementOf;
};

} // namespace moec

#endif // MOEC_PASSES_VALUERANGES_H
