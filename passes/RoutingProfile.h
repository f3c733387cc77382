//===- RoutingProfile.h - expected expert loads from moe-run --stats -*- C++
//-*-===//
//
// A routing profile is the JSON `moe-run --stats` writes: per MoE layer, the
// tokens each expert received. moe-place-experts balances devices by it and
// the plan emitter ranks experts by it for tiered weights (`moec compile
// --device-memory`).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_ROUTINGPROFILE_H
#define MOEC_PASSES_ROUTINGPROFILE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

namespace moec {

/// The per-layer expert loads of a routing profile, by layer index (the
/// moe.experts ops of @main in program order).
using RoutingProfile = llvm::SmallVector<llvm::SmallVector<double>>;

/// Reads `path`: {"moe_layers": [{"tokens_per_expert": [n, ...]}, ...]}.
/// Every error names the file and the field, reported on `module`.
mlir::FailureOr<RoutingProfile> readRoutingProfile(mlir::ModuleOp module,
                                                   llvm::StringRef path);

} // namespace moec

#endif // MOEC_PASSES_ROUTINGPROFILE_H
