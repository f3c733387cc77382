//===- GraphOpsCommon.h - hooks shared by graph op families -----*- C++ -*-===//
//
// Type inference and verification shared by whole families of graph ops
// (elementwise, broadcasting, reductions). The ODS definitions in
// MoeGraphOps.td call these from the generated `inferReturnTypes`/`verify`, so
// this header is included by MoeOps.h before the generated op classes.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECTS_MOE_GRAPHOPSCOMMON_H
#define MOEC_DIALECTS_MOE_GRAPHOPSCOMMON_H

#include "mlir/IR/Location.h"
#include "mlir/IR/TypeRange.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace moec::moe {

/// Result types are compatible when they agree in element type and rank and no
/// two static sizes differ, so declared types may be more or less refined than
/// inferred ones.
bool areCompatibleTypes(mlir::TypeRange lhs, mlir::TypeRange rhs);

/// The result has the first operand's type.
llvm::LogicalResult inferSameAsFirst(std::optional<mlir::Location> loc,
                                     mlir::ValueRange operands,
                                     llvm::SmallVectorImpl<mlir::Type> &types);

/// Numpy broadcasting of operands that share one element type, which the
/// result keeps.
llvm::LogicalResult inferBroadcast(std::optional<mlir::Location> loc,
                                   mlir::ValueRange operands,
                                   llvm::SmallVectorImpl<mlir::Type> &types);

/// Numpy broadcasting where only the first operand's element type matters.
llvm::LogicalResult
inferBroadcastFirstType(std::optional<mlir::Location> loc,
                        mlir::ValueRange operands,
                        llvm::SmallVectorImpl<mlir::Type> &types);

/// Numpy broadcasting of same-typed operands into an i1 result.
llvm::LogicalResult
inferBroadcastPredicate(std::optional<mlir::Location> loc,
                        mlir::ValueRange operands,
                        llvm::SmallVectorImpl<mlir::Type> &types);

/// Where(condition, x, y): broadcast of all three, element type of x and y.
llvm::LogicalResult inferWhere(std::optional<mlir::Location> loc,
                               mlir::ValueRange operands,
                               llvm::SmallVectorImpl<mlir::Type> &types);

/// A reduction of `data` over the optional constant `axes`.
llvm::LogicalResult inferReduction(std::optional<mlir::Location> loc,
                                   mlir::Value data, mlir::Value axes,
                                   int64_t keepdims, int64_t noopWithEmptyAxes,
                                   llvm::SmallVectorImpl<mlir::Type> &types);

/// Checks the 0/1 flags of a reduction.
llvm::LogicalResult verifyReduction(mlir::Operation *op, int64_t keepdims,
                                    int64_t noopWithEmptyAxes);

/// Checks that attribute `name` is an axis in [-rank, rank).
llvm::LogicalResult verifyAxis(mlir::Operation *op, llvm::StringRef name,
                               int64_t axis, int64_t rank);

} // namespace moec::moe

#endif // MOEC_DIALECTS_MOE_GRAPHOPSCOMMON_H
