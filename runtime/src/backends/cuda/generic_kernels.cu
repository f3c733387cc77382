//===- generic_kernels.cu - Data-op kernels (copies, math, norms) ---------===//
//
// Thread-index mapping around generic_logic.h: grid-stride loops of
// kGenericBlock threads over output elements, and one block of kRowBlock
// threads per row for Softmax and the norms (partials combined in shared
// memory by the same tree as treeReduce); TopK and ArgMax one thread per row,
// ScatterElements one per line of indices (select_logic.h). Compiled with
// -fmad=false (runtime/CMakeLists.txt): a contracted multiply-add would round
// differently from the CPU.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/generic_kernels.h"

namespace moert::cuda {
namespace {

static_assert(kRowBlock == kGenericBlock, "one block size for all kernels");

unsigned blocksFor(int64_t n) {
  int64_t blocks = (n + kGenericBlock - 1) / kGenericBlock;
  // A grid-stride loop covers the rest.
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1)
                                              : 65535);
}

unsigned rowBlocks(int64_t rows) {
  return static_cast<unsigned>(rows < 65535 ? (rows > 0 ? rows : 1) : 65535);
}

#define MOERT_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

__global__ void stridedCopyKernel(const float *in, const StridedArgs args,
                                  int64_t n, float *out) {
  MOERT_GRID_STRIDE(i, n) { out[i] = in[stridedSource(args, i)]; }
}

__global__ void broadcastCopyKernel(const float *in, const FusedArgs args,
                                    float *out) {
  MOERT_GRID_STRIDE(i, args.numel) { out[i] = in[broadcastSource(args, 0, i)]; }
}

__global__ void concatKernel(const ConcatArgs args, int64_t n, float *out) {
  MOERT_GRID_STRIDE(i, n) {
    int part;
    int64_t element;
    concatSource(args, i, part, element);
    out[i] = args.inputs[part][element];
  }
}

template <typename Index>
__global__ void gatherKernel(const float *data, const Index *indices,
                             const GatherArgs args, int64_t n, float *out,
                             DeviceErrorRecord *errors, int step) {
  MOERT_GRID_STRIDE(i, n) {
    int64_t position;
    int64_t index = indices[(i / args.block) % args.count];
    int64_t source = gatherSource(args, index, i, position);
    if (source < 0) {
      recordDeviceError(errors, kGatherIndexOutOfRange, step, index, position);
      out[i] = 0.0f;
    } else {
      out[i] = data[source];
    }
  }
}

__global__ void binaryKernel(GenericBinary op, const float *a, const float *b,
                             const FusedArgs args, float *out) {
  MOERT_GRID_STRIDE(i, args.numel) {
    out[i] = applyBinary(op, a[broadcastSource(args, 0, i)],
                         b[broadcastSource(args, 1, i)]);
  }
}

__global__ void compareKernel(GenericCompare op, const float *a, const float *b,
                              const FusedArgs args, uint8_t *out) {
  MOERT_GRID_STRIDE(i, args.numel) {
    out[i] = applyCompare(op, a[broadcastSource(args, 0, i)],
                          b[broadcastSource(args, 1, i)]);
  }
}

__global__ void whereKernel(const uint8_t *cond, const float *x, const float *y,
                            const FusedArgs args, float *out) {
  MOERT_GRID_STRIDE(i, args.numel) {
    out[i] = cond[broadcastSource(args, 0, i)] ? x[broadcastSource(args, 1, i)]
                                               : y[broadcastSource(args, 2, i)];
  }
}

__global__ void unaryKernel(GenericUnary op, const float *in, int64_t n,
                            float *out) {
  MOERT_GRID_STRIDE(i, n) { out[i] = applyUnary(op, in[i]); }
}

__global__ void castKernel(GenericCast cast, const void *in, int64_t n,
                           void *out) {
  MOERT_GRID_STRIDE(i, n) {
    switch (cast) {
    case GenericCast::F32ToI64:
      static_cast<int64_t *>(out)[i] = castFloatToInt<int64_t>(
          static_cast<const float *>(in)[i], INT64_MIN, INT64_MAX);
      break;
    case GenericCast::F32ToI32:
      static_cast<int32_t *>(out)[i] = castFloatToInt<int32_t>(
          static_cast<const float *>(in)[i], INT32_MIN, INT32_MAX);
      break;
    case GenericCast::F32ToBool:
      static_cast<uint8_t *>(out)[i] = static_cast<const float *>(in)[i] != 0;
      break;
    case GenericCast::I64ToF32:
      static_cast<float *>(out)[i] =
          castIntToFloat(static_cast<const int64_t *>(in)[i]);
      break;
    case GenericCast::I32ToF32:
      static_cast<float *>(out)[i] =
          castIntToFloat(static_cast<const int32_t *>(in)[i]);
      break;
    case GenericCast::BoolToF32:
      static_cast<float *>(out)[i] = static_cast<const uint8_t *>(in)[i] != 0;
      break;
    }
  }
}

__global__ void reduceKernel(GenericReduce op, const float *in,
                             const ReduceArgs args, int64_t n, float *out) {
  MOERT_GRID_STRIDE(o, n) { out[o] = reduceOutput(op, args, in, o); }
}

__global__ void fillKernel(float value, int64_t n, float *out) {
  MOERT_GRID_STRIDE(i, n) { out[i] = value; }
}

/// Combines the block's partials in shared memory with treeReduce's tree;
/// every thread gets the result.
template <typename T, typename Fn>
__device__ T blockReduce(T *shared, T value, Fn combine) {
  int t = threadIdx.x;
  shared[t] = value;
  __syncthreads();
  for (int stride = kRowBlock / 2; stride > 0; stride /= 2) {
    if (t < stride)
      shared[t] = combine(shared[t], shared[t + stride]);
    __syncthreads();
  }
  T result = shared[0];
  __syncthreads(); // The next reduction reuses the buffer.
  return result;
}

__global__ void __launch_bounds__(kRowBlock)
    softmaxKernel(const float *in, const RowSpan span, float *out) {
  __shared__ double sums[kRowBlock];
  __shared__ float maxima[kRowBlock];
  int lane = threadIdx.x;
  for (int64_t r = blockIdx.x; r < span.rows; r += gridDim.x) {
    int64_t base = rowBase(span, r);
    const float *p = in + base;
    float max = blockReduce(maxima, softmaxPartialMax(p, span, lane, kRowBlock),
                            [](float a, float b) { return maxNanLast(a, b); });
    double sum =
        blockReduce(sums, softmaxPartialSum(p, span, max, lane, kRowBlock),
                    [](double a, double b) { return a + b; });
    softmaxWrite(p, out + base, span, max, sum, lane, kRowBlock);
  }
}

__global__ void __launch_bounds__(kRowBlock)
    normKernel(const float *in, int64_t rows, int64_t n, double epsilon,
               bool simplified, const FusedArgs params, const float *scale,
               const float *bias, float *out, float *meanOut, float *invOut) {
  __shared__ double sums[kRowBlock];
  int lane = threadIdx.x;
  auto add = [](double a, double b) { return a + b; };
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *p = in + r * n;
    double sum =
        simplified
            ? 0.0
            : blockReduce(sums, normPartialSum(p, n, lane, kRowBlock), add);
    double mean = simplified || n == 0 ? 0.0 : sum / n;
    double squares =
        blockReduce(sums, normPartialSquares(p, n, mean, lane, kRowBlock), add);
    float m, inv;
    normStats(sum, squares, n, epsilon, simplified, m, inv);
    normWrite(p, out + r * n, n, m, inv, params, scale, bias, lane, kRowBlock);
    if (lane == 0) {
      if (meanOut)
        meanOut[r] = m;
      if (invOut)
        invOut[r] = inv;
    }
  }
}

__global__ void topKKernel(const float *in, const TopKArgs args, float *values,
                           int64_t *indices) {
  MOERT_GRID_STRIDE(r, args.span.rows) {
    topKRow(args, in, r, values, indices);
  }
}

__global__ void argMaxKernel(const float *in, const RowSpan span, bool last,
                             int64_t *out) {
  MOERT_GRID_STRIDE(r, span.rows) { out[r] = argMaxRow(span, in, r, last); }
}

template <typename Index>
__global__ void gatherElementsKernel(const float *data, const Index *indices,
                                     const ElementIndexArgs args, int64_t n,
                                     float *out, DeviceErrorRecord *errors,
                                     int step) {
  MOERT_GRID_STRIDE(i, n) {
    int64_t index = indices[i];
    int64_t source = elementSource(args, i, index);
    if (source < 0) {
      recordDeviceError(errors, kElementIndexOutOfRange, step, index, i);
      out[i] = 0.0f;
    } else {
      out[i] = data[source];
    }
  }
}

template <typename Index>
__global__ void
scatterElementsKernel(ScatterOp op, const Index *indices, const float *updates,
                      const ElementIndexArgs args, int64_t lines, float *out,
                      DeviceErrorRecord *errors, int step) {
  MOERT_GRID_STRIDE(line, lines) {
    int64_t index = 0;
    int64_t bad = scatterLine(op, args, indices, updates, line, out, index);
    if (bad >= 0)
      recordDeviceError(errors, kElementIndexOutOfRange, step, index, bad);
  }
}

} // namespace

cudaError_t launchStridedCopy(const float *in, const StridedArgs &args,
                              int64_t n, float *out, cudaStream_t stream) {
  if (n > 0)
    stridedCopyKernel<<<blocksFor(n), kGenericBlock, 0, stream>>>(in, args, n,
                                                                  out);
  return cudaGetLastError();
}

cudaError_t launchBroadcastCopy(const float *in, const FusedArgs &args,
                                float *out, cudaStream_t stream) {
  if (args.numel > 0)
    broadcastCopyKernel<<<blocksFor(args.numel), kGenericBlock, 0, stream>>>(
        in, args, out);
  return cudaGetLastError();
}

cudaError_t launchConcat(const ConcatArgs &args, int64_t n, float *out,
                         cudaStream_t stream) {
  if (n > 0)
    concatKernel<<<blocksFor(n), kGenericBlock, 0, stream>>>(args, n, out);
  return cudaGetLastError();
}

cudaError_t launchGather(const float *data, const void *indices, bool indices32,
                         const GatherArgs &args, int64_t n, float *out,
                         DeviceErrorRecord *errors, int step,
                         cudaStream_t stream) {
  if (n <= 0)
    return cudaGetLastError();
  if (indices32)
    gatherKernel<<<blocksFor(n), kGenericBlock, 0, stream>>>(
        data, static_cast<const int32_t *>(indices), args, n, out, errors,
        step);
  else
    gatherKernel<<<blocksFor(n), kGenericBlock, 0, stream>>>(
        data, static_cast<const int64_t *>(indices), args, n, out, errors,
        step);
  return cudaGetLastError();
}

cudaError_t launchBinary(GenericBinary op, const float *a, const float *b,
                         const FusedArgs &args, float *out,
                         cudaStream_t stream) {
  if (args.numel > 0)
    binaryKernel<<<blocksFor(args.numel), kGenericBlock, 0, stream>>>(
        op, a, b, args, out);
  return cudaGetLastError();
}

cudaError_t launchCompare(GenericCompare op, const float *a, const float *b,
                          const FusedArgs &args, uint8_t *out,
                          cudaStream_t stream) {
  if (args.numel > 0)
    compareKernel<<<blocksFor(args.numel), kGenericBlock, 0, stream>>>(
        op, a, b, args, out);
  return cudaGetLastError();
}

cudaError_t launchWhere(const uint8_t *cond, const float *x, const float *y,
                        const FusedArgs &args, float *out,
                        cudaStream_t stream) {
  if (args.numel > 0)
    whereKernel<<<blocksFor(args.numel), kGenericBlock, 0, stream>>>(cond, x, y,
                                                                     args, out);
  return cudaGetLastError();
}

cudaError_t launchUnary(GenericUnary op, const float *in, int64_t n, float *out,
                        cudaStream_t stream) {
  if (n > 0)
    unaryKernel<<<blocksFor(n), kGenericBlock, 0, stream>>>(op, in, n, out);
  return cudaGetLastError();
}

cudaError_t launchCast(GenericCast cast, const void *in, int64_t n, void *out,
                       cudaStream_t stream) {
  if (n > 0)
    castKernel<<<blocksFor(n), kGenericBlock, 0, stream>>>(cast, in, n, out);
  return cudaGetLastError();
}

cudaError_t launchReduce(GenericReduce op, const float *in,
                         const ReduceArgs &args, int64_t n, float *out,
                         cudaStream_t stream) {
  if (n > 0)
    reduceKernel<<<blocksFor(n), kGenericBlock, 0, stream>>>(op, in, args, n,
                                                             out);
  return cudaGetLastError();
}

cudaError_t launchFill(float value, int64_t n, float *out,
                       cudaStream_t stream) {
  if (n > 0)
    fillKernel<<<blocksFor(n), kGenericBlock, 0, stream>>>(value, n, out);
  return cudaGetLastError();
}

cudaError_t launchSoftmax(const float *in, const RowSpan &span, float *out,
                          cudaStream_t stream) {
  if (span.rows > 0 && span.n > 0)
    softmaxKernel<<<rowBlocks(span.rows), kRowBlock, 0, stream>>>(in, span,
                                                                  out);
  return cudaGetLastError();
}

cudaError_t launchNorm(const float *in, int64_t rows, int64_t n, double epsilon,
                       bool simplified, const FusedArgs &params,
                       const float *scale, const float *bias, float *out,
                       float *meanOut, float *invOut, cudaStream_t stream) {
  if (rows > 0)
    normKernel<<<rowBlocks(rows), kRowBlock, 0, stream>>>(
        in, rows, n, epsilon, simplified, params, scale, bias, out, meanOut,
        invOut);
  return cudaGetLastError();
}

cudaError_t launchTopK(const float *in, const TopKArgs &args, float *values,
                       int64_t *indices, cudaStream_t stream) {
  if (args.span.rows > 0 && args.k > 0)
    topKKernel<<<blocksFor(args.span.rows), kGenericBlock, 0, stream>>>(
        in, args, values, indices);
  return cudaGetLastError();
}

cudaError_t launchArgMax(const float *in, const RowSpan &span, bool last,
                         int64_t *out, cudaStream_t stream) {
  if (span.rows > 0)
    argMaxKernel<<<blocksFor(span.rows), kGenericBlock, 0, stream>>>(in, span,
                                                                     last, out);
  return cudaGetLastError();
}

cudaError_t launchGatherElements(const float *data, const void *indices,
                                 bool indices32, const ElementIndexArgs &args,
                                 int64_t n, float *out,
                                 DeviceErrorRecord *errors, int step,
                                 cudaStream_t stream) {
  if (n <= 0)
    return cudaGetLastError();
  if (indices32)
    gatherElementsKernel<<<blocksFor(n), kGenericBlock, 0, stream>>>(
        data, static_cast<const int32_t *>(indices), args, n, out, errors,
        step);
  else
    gatherElementsKernel<<<blocksFor(n), kGenericBlock, 0, stream>>>(
        data, static_cast<const int64_t *>(indices), args, n, out, errors,
        step);
  return cudaGetLastError();
}

cudaError_t launchScatterElements(ScatterOp op, const void *indices,
                                  bool indices32, const float *updates,
                                  const ElementIndexArgs &args, int64_t lines,
                                  float *out, DeviceErrorRecord *errors,
                                  int step, cudaStream_t stream) {
  if (lines <= 0)
    return cudaGetLastError();
  if (indices32)
    scatterElementsKernel<<<blocksFor(lines), kGenericBlock, 0, stream>>>(
        op, static_cast<const int32_t *>(indices), updates, args, lines, out,
        errors, step);
  else
    scatterElementsKernel<<<blocksFor(lines), kGenericBlock, 0, stream>>>(
        op, static_cast<const int64_t *>(indices), updates, args, lines, out,
        errors, step);
  return cudaGetLastError();
}

} // namespace moert::cuda
