//===- collective_kernels.h - Launches of the collective kernels -*- C++
//-*-===//
//
// Plain launch functions of collective_kernels.cu (AssignSlots, Regroup,
// Ungroup on the GPU; no Abseil or plan header, so that nvcc compiles them
// on their own). Each enqueues its kernels on `stream` and returns the
// launch status; none waits for the device. Shapes are checked by the
// caller (collectives.cpp); data errors are recorded in `errors` with the
// step's index (collective_logic.h's codes).
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_COLLECTIVE_KERNELS_H
#define MOERT_SRC_CUDA_COLLECTIVE_KERNELS_H

#include "backends/cuda/collective_logic.h"
#include "backends/cuda/device_error.h"

#include <cuda_runtime_api.h>

namespace moert::cuda {

/// slots [T, k] from expert `indices` [T, k]; `offsets` [experts + 1] and
/// `slotList` are device copies of the step's SlotAttrs.
cudaError_t launchAssignSlots(const int64_t *indices, int64_t T, int64_t k,
                              const int64_t *offsets, const int64_t *slotList,
                              int64_t experts, int64_t *slots,
                              DeviceErrorRecord *errors, int step,
                              cudaStream_t stream);

/// Scratch of launchRegroup: the block starts.
inline int64_t regroupScratchBytes(int64_t N, int64_t S) {
  return N * S * static_cast<int64_t>(sizeof(int64_t));
}

/// Regroup of `received` [R, rowBytes bytes] by `counts` [N * S] into
/// `grouped` (rows without a source are zero), `offsets` [S + 1] and
/// `perm` [R]; `scratch` holds regroupScratchBytes(N, S).
cudaError_t launchRegroup(const void *received, const int64_t *counts,
                          int64_t N, int64_t S, int64_t R, int64_t rowBytes,
                          void *grouped, int64_t *offsets, int64_t *perm,
                          void *scratch, DeviceErrorRecord *errors, int step,
                          cudaStream_t stream);

/// Scratch of launchUngroup: the claim of each out row.
inline int64_t ungroupScratchBytes(int64_t R) {
  return R * static_cast<int64_t>(sizeof(unsigned long long));
}

/// Ungroup: out row perm[r] = grouped row r, the other out rows zero;
/// `scratch` holds ungroupScratchBytes(R).
cudaError_t launchUngroup(const void *grouped, const int64_t *perm, int64_t R,
                          int64_t rowBytes, void *out, void *scratch,
                          DeviceErrorRecord *errors, int step,
                          cudaStream_t stream);

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_COLLECTIVE_KERNELS_H
