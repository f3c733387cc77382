//===- expert_kernels.h - Launching the expert GEMM kernels -----*- C++ -*-===//
//
// The plain launch interface of expert_kernels.cu (no Abseil or plan
// header): experts.cpp fills an ExpertLaunch from the step's shapes and
// device addresses and enqueues the whole Experts / SharedExpert step with
// one call. Every size in it is host metadata (the actual shapes); the
// per-expert row counts stay on the device.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_EXPERT_KERNELS_H
#define MOERT_SRC_CUDA_EXPERT_KERNELS_H

#include "backends/cuda/device_error.h"
#include "backends/cuda/expert_logic.h"

#include <cuda_runtime_api.h>

namespace moert::cuda {

/// Codes the expert kernels record in the DeviceErrorRecord.
enum ExpertErrorCode : int {
  /// offsets[0] is not 0; b: its value.
  kExpertErrorFirstOffset = 1,
  /// offsets[a] = b decreases or passes the rows.
  kExpertErrorOffset = 2,
};

/// One Experts or SharedExpert step.
struct ExpertLaunch {
  ExpertFfn ffn;
  int weightType = kWeightF32;
  /// w1, w3 (or null), w2 of weightType; biases float or null.
  const void *w1 = nullptr, *w3 = nullptr, *w2 = nullptr;
  const float *b1 = nullptr, *b3 = nullptr, *b2 = nullptr;
  /// Tokens [rows, H].
  const float *x = nullptr;
  int64_t rows = 0;
  /// Experts: the device offsets [E + 1]; SharedExpert: null.
  const int64_t *offsets = nullptr;
  /// SharedExpert's gate vector [H], or null.
  const float *gate = nullptr;
  /// Output [rows, H]; may be x (the intermediate is in scratch).
  float *y = nullptr;
  /// At least expertScratch(E, rows, F).bytes, 256-byte aligned.
  void *scratch = nullptr;
  DeviceErrorRecord *errors = nullptr;
  int step = 0;
  /// A tiered Experts step (docs/tiered-experts.md): the device table of
  /// the paged weights' per-expert blocks ([kExpertSlots][E],
  /// ExpertWeights::table), and which experts run in this launch (device
  /// [E], non-null: present); the step runs as rounds of the experts its
  /// cache holds at once, each writing only its experts' rows. Null: every
  /// weight is contiguous and every expert runs.
  const void *const *table = nullptr;
  const void *const *present = nullptr;
};

/// Enqueues the step on `stream`: the tile schedule, the first projection
/// (narrow and wide tiles; wide ones on the tensor cores for bf16 weights),
/// the padding rows, the gate, the second projection. Returns the first
/// launch error.
cudaError_t launchExpertFfn(const ExpertLaunch &launch, cudaStream_t stream);

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_EXPERT_KERNELS_H
