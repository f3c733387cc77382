//===- generic_kernels.h - Launches of the data-op kernels ------*- C++ -*-===//
//
// Plain launch functions of generic_kernels.cu (the generic data ops on the
// GPU; no Abseil or plan header, so that nvcc compiles them on their own).
// Each enqueues one kernel on `stream` and returns the launch status; none
// waits for the device. Shapes are checked and the argument structs filled
// by the caller (generic_ops.cpp, select_ops.cpp); the per-thread logic is
// generic_logic.h and select_logic.h.
// `n` is the number of output elements (0: nothing is launched).
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_GENERIC_KERNELS_H
#define MOERT_SRC_CUDA_GENERIC_KERNELS_H

#include "backends/cuda/device_error.h"
#include "backends/cuda/generic_logic.h"
#include "backends/cuda/select_logic.h"

#include <cuda_runtime_api.h>

namespace moert::cuda {

/// out[i] = in[stridedSource(args, i)] (Transpose, Slice).
cudaError_t launchStridedCopy(const float *in, const StridedArgs &args,
                              int64_t n, float *out, cudaStream_t stream);

/// out[i] = in[broadcastSource(args, 0, i)] (Expand).
cudaError_t launchBroadcastCopy(const float *in, const FusedArgs &args,
                                float *out, cudaStream_t stream);

/// Concat of args.inputs.
cudaError_t launchConcat(const ConcatArgs &args, int64_t n, float *out,
                         cudaStream_t stream);

/// Gather of `data` by int64 (`indices32` false) or int32 indices; a bad
/// index is recorded as kGatherIndexOutOfRange (a: the index, b: its
/// position) and its elements written 0.
cudaError_t launchGather(const float *data, const void *indices, bool indices32,
                         const GatherArgs &args, int64_t n, float *out,
                         DeviceErrorRecord *errors, int step,
                         cudaStream_t stream);

/// out = a op b over the broadcast `args` (operands 0 and 1).
cudaError_t launchBinary(GenericBinary op, const float *a, const float *b,
                         const FusedArgs &args, float *out,
                         cudaStream_t stream);

/// out = a op b as bool bytes.
cudaError_t launchCompare(GenericCompare op, const float *a, const float *b,
                          const FusedArgs &args, uint8_t *out,
                          cudaStream_t stream);

/// out = cond ? x : y over the broadcast `args` (operands cond, x, y).
cudaError_t launchWhere(const uint8_t *cond, const float *x, const float *y,
                        const FusedArgs &args, float *out, cudaStream_t stream);

/// out[i] = op(in[i]).
cudaError_t launchUnary(GenericUnary op, const float *in, int64_t n, float *out,
                        cudaStream_t stream);

/// The casts the GPU runs: f32 to and from i64, i32 and bool.
enum class GenericCast : int {
  F32ToI64,
  F32ToI32,
  F32ToBool,
  I64ToF32,
  I32ToF32,
  BoolToF32
};
cudaError_t launchCast(GenericCast cast, const void *in, int64_t n, void *out,
                       cudaStream_t stream);

/// out[o] = reduceOutput(op, args, in, o) for o < n.
cudaError_t launchReduce(GenericReduce op, const float *in,
                         const ReduceArgs &args, int64_t n, float *out,
                         cudaStream_t stream);

/// out[i] = value for i < n (ConstantOfShape).
cudaError_t launchFill(float value, int64_t n, float *out, cudaStream_t stream);

/// Softmax over rows of `span` (one block per row).
cudaError_t launchSoftmax(const float *in, const RowSpan &span, float *out,
                          cudaStream_t stream);

/// LayerNormalization (`simplified` false) or RMSNorm over `rows` rows of
/// `n`; scale (operand 0 of `params`) and optional bias (operand 1);
/// optional statistics outputs `meanOut`, `invOut` (null: none).
cudaError_t launchNorm(const float *in, int64_t rows, int64_t n, double epsilon,
                       bool simplified, const FusedArgs &params,
                       const float *scale, const float *bias, float *out,
                       float *meanOut, float *invOut, cudaStream_t stream);

/// TopK over args.span.rows rows: values (f32) and indices (i64).
cudaError_t launchTopK(const float *in, const TopKArgs &args, float *values,
                       int64_t *indices, cudaStream_t stream);

/// ArgMax over span.rows rows into out (i64).
cudaError_t launchArgMax(const float *in, const RowSpan &span, bool last,
                         int64_t *out, cudaStream_t stream);

/// GatherElements of `n` elements by int64 (`indices32` false) or int32
/// indices; a bad index is recorded as kElementIndexOutOfRange (a: the
/// index, b: its position) and its element written 0.
cudaError_t launchGatherElements(const float *data, const void *indices,
                                 bool indices32, const ElementIndexArgs &args,
                                 int64_t n, float *out,
                                 DeviceErrorRecord *errors, int step,
                                 cudaStream_t stream);

/// ScatterElements into `out` (a copy of the data already) over `lines`
/// lines of the indices; bad indices recorded as in launchGatherElements.
cudaError_t launchScatterElements(ScatterOp op, const void *indices,
                                  bool indices32, const float *updates,
                                  const ElementIndexArgs &args, int64_t lines,
                                  float *out, DeviceErrorRecord *errors,
                                  int step, cudaStream_t stream);

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_GENERIC_KERNELS_H
