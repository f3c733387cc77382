//===- PlanEmitter.h - moe dialect to plan.bin ------------------*- C++ -*-===//
//
// The last stage of the compiler: serialises a planned function (bounds from
// moe-bound-shapes, arena offsets from moe-plan-memory) into the runtime's
// plan format through the runtime's plan writer. The schema belongs to the
// runtime; this file only maps ops and attributes onto it.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PLAN_PLANEMITTER_H
#define MOEC_COMPILER_PLAN_PLANEMITTER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"

#include <string>

namespace moec::plan {

/// Writes the plan of `func` to `path`. Every unsupported op, type or missing
/// planning attribute is reported as an error located at the op.
mlir::LogicalResult emitPlan(mlir::func::FuncOp func, llvm::StringRef path);

} // namespace moec::plan

#endif // MOEC_COMPILER_PLAN_PLANEMITTER_H
