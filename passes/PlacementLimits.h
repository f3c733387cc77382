//===- PlacementLimits.h - bounds of expert-parallel placements -*- C++ -*-===//
//
// The sizes moe-place-experts and moe-insert-all-to-all allocate by (slots
// per layer, devices, micro-batches) come from the model and the flags; they
// are checked against format/format.h's limits before anything is sized by
// them, with one error naming the layer or the option.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_PLACEMENTLIMITS_H
#define MOEC_PASSES_PLACEMENTLIMITS_H

#include "format/format.h"

#include "mlir/IR/Operation.h"
#include "llvm/Support/MathExtras.h"

namespace moec {

/// Fails with an error on `experts` (layer `layer` of the model, in program
/// order) unless its `slots` slots for `numExperts` experts on `devices`
/// devices hold at most moert::kMaxDeviceSlots entries (devices x slots,
/// checked for overflow).
inline mlir::LogicalResult checkDeviceSlots(mlir::Operation *experts,
                                            int64_t layer, int64_t numExperts,
                                            int64_t slots, int64_t devices) {
  int64_t product = 0;
  if (!llvm::MulOverflow(slots, devices, product) && product >= 0 &&
      static_cast<uint64_t>(product) <= moert::kMaxDeviceSlots)
    return mlir::success();
  return experts->emitError("MoE layer ")
         << layer << " has " << numExperts << " experts (" << slots
         << " slots) on " << devices << " devices: devices x slots exceeds "
         << moert::kMaxDeviceSlots << ", the most expert parallelism places";
}

} // namespace moec

#endif // MOEC_PASSES_PLACEMENTLIMITS_H
