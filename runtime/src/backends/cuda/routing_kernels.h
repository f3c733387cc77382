//===- routing_kernels.h - Launches of the routing kernels ------*- C++ -*-===//
//
// Plain launch functions of routing_kernels.cu (no Abseil or plan header, so
// that nvcc compiles the kernels on their own). Each enqueues its kernels on
// `stream` and returns the launch status (cudaGetLastError); none waits for
// the device. Shapes are checked by the caller (moe_routing.cpp); data errors
// are recorded in `errors` with the step's index.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_ROUTING_KERNELS_H
#define MOERT_SRC_CUDA_ROUTING_KERNELS_H

#include "backends/cuda/device_error.h"
#include "backends/cuda/routing_logic.h"

#include <cuda_runtime_api.h>

namespace moert::cuda {

/// Router over `tokens` tokens of `logits` [tokens, E] into weights and
/// indices [tokens, k]; then, when capacity > 0, capacity per sequence of
/// `indices` viewed as [sequences, tokens / sequences, k]; then, when
/// keptEpsilon > 0, the renormalisation over the kept choices.
cudaError_t launchRouter(const RouterLogicParams &params, const float *logits,
                         const float *bias, int64_t tokens, int64_t sequences,
                         int64_t capacity, float keptEpsilon, float *weights,
                         int64_t *indices, cudaStream_t stream);

/// Scratch of launchDispatch: the chunk bases.
inline int64_t dispatchScratchBytes(int64_t rows, int64_t experts) {
  return dispatchChunks(rows) * experts * static_cast<int64_t>(sizeof(int32_t));
}

/// Dispatch of `tokens` [T, H] by `indices` [T, k] (rows = T * k) into
/// `expertInputs` [rows, H], `offsets` [E + 1] and `source` [rows];
/// `scratch` holds dispatchScratchBytes(rows, E).
cudaError_t launchDispatch(const float *tokens, const int64_t *indices,
                           int64_t T, int64_t k, int64_t hidden,
                           int64_t experts, float *expertInputs,
                           int64_t *offsets, int64_t *source, void *scratch,
                           DeviceErrorRecord *errors, int step,
                           cudaStream_t stream);

/// Scratch of launchCombine: the inverse of `source`.
inline int64_t combineScratchBytes(int64_t assignments) {
  return assignments * static_cast<int64_t>(sizeof(long long));
}

/// Combine of `outputs` [N, H] by `source` [N] and `weights` [T, k] into
/// `out` [T, H] (passthrough [T, H] and indices [T, k] both or neither);
/// `scratch` holds combineScratchBytes(T * k).
cudaError_t launchCombine(const float *outputs, const int64_t *source,
                          const float *weights, const float *passthrough,
                          const int64_t *indices, int64_t N, int64_t T,
                          int64_t k, int64_t hidden, float *out, void *scratch,
                          DeviceErrorRecord *errors, int step,
                          cudaStream_t stream);

/// out [M, N] = C broadcast (element strides rowStride, colStride), times
/// `beta` unless beta is 1 (Gemm's starting value).
cudaError_t launchBroadcastC(const float *c, int64_t rowStride,
                             int64_t colStride, int64_t M, int64_t N,
                             float beta, float *out, cudaStream_t stream);

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_ROUTING_KERNELS_H
