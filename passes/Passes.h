//===- Passes.h - moec passes -----------------------------------*- C++ -*-===//

#ifndef MOEC_PASSES_PASSES_H
#define MOEC_PASSES_PASSES_H

#include "dialects/moe/MoeDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace moec {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace moec

#endif // MOEC_PASSES_PASSES_H
