//===- RewriteValidator.h - validation of MoE rewrites ----------*- C++ -*-===//
//
// The backstop behind the MoE detectors (docs/architecture.md, "MoE
// detection"): before a detector replaces a layer, the layer's original ops
// and the sparse ops proposed for it are each extracted into a standalone
// function of the layer's tokens, lowered through the rest of the pipeline
// into a plan, and run on the runtime's CPU kernels with the model's real
// weights on seeded random tokens. A mismatch keeps the generic ops.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_VERIFY_REWRITEVALIDATOR_H
#define MOEC_COMPILER_VERIFY_REWRITEVALIDATOR_H

#include "mlir/IR/MLIRContext.h"

#include <cstdint>

namespace moec::verify {

struct ValidationOptions {
  /// Run the validation (`moec compile --no-verify-rewrites` turns it off).
  bool enabled = true;
  /// The token bound of the compiled model: validation runs at 1, 7 and 64
  /// tokens, none above it.
  int64_t maxTokens = 256;
  /// Test only (`--moe-test-corrupt-rewrite`): break every proposed rewrite
  /// before it is validated.
  bool corrupt = false;
};

/// Registers the validator on `context`'s moe dialect (loading it), so that
/// every MoE detector run in `context` validates its rewrites. Nothing is
/// registered when `options` neither validates nor corrupts.
void registerRewriteValidator(mlir::MLIRContext &context,
                              const ValidationOptions &options);

/// Frees what `context`'s validator keeps from one rewrite to the next (the
/// file in memory that both sides of each layer are written to, the size
/// of the largest layer): call it once the detectors have run, before the
/// model's own plan is written.
void releaseRewriteValidatorMemory(mlir::MLIRContext &context);

} // namespace moec::verify

#endif // MOEC_COMPILER_VERIFY_REWRITEVALIDATOR_H
