//===- InitAll.h - registration shared by every moec tool -------*- C++ -*-===//
//
// The one place that lists the dialects and passes moec's tools register, so
// `moec` and `moec-opt` always agree on what they understand.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_INITALL_H
#define MOEC_COMPILER_INITALL_H

#include "dialects/moe/MoeDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace moec {

/// Adds every dialect a moec module may contain to `registry`.
inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<moe::MoeDialect, mlir::func::FuncDialect>();
}

/// Registers moec's passes and the upstream ones its pipelines use.
inline void registerAllPasses() {
  registerMoePasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
}

} // namespace moec

#endif // MOEC_COMPILER_INITALL_H
