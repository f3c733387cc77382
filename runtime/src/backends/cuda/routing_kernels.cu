//===- routing_kernels.cu - Router, Dispatch, Combine kernels -------------===//
//
// The kernels only map thread indices to the per-thread logic of
// routing_logic.h (tested on the CPU by cuda_routing_logic_test.cpp); every
// launch is a grid-stride loop over its threads, so that a grid of at most
// kMaxBlocks covers any size. Launches follow one another on the stream:
// each one sees the writes of the previous ones, and nothing waits for the
// host.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/routing_kernels.h"

namespace moert::cuda {
namespace {

constexpr int kBlock = 256;
/// Enough blocks to fill an H200 several times over; the loops stride.
constexpr int64_t kMaxBlocks = 4096;

unsigned blocksFor(int64_t threads) {
  int64_t blocks = (threads + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < 1            ? 1
                               : blocks > kMaxBlocks ? kMaxBlocks
                                                     : blocks);
}

__device__ inline int64_t threadIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t threadStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__global__ void __launch_bounds__(kBlock)
    routerKernel(RouterLogicParams params, const float *logits,
                 const float *bias, int64_t tokens, float *weights,
                 int64_t *indices) {
  for (int64_t t = threadIndex(); t < tokens; t += threadStride())
    routeToken(params, logits, bias, t, weights, indices);
}

__global__ void __launch_bounds__(kBlock)
    capacityKernel(int64_t *indices, int64_t sequences, int64_t length,
                   int64_t k, int64_t experts, int64_t capacity) {
  for (int64_t i = threadIndex(); i < sequences * experts; i += threadStride())
    applyCapacity(indices, length, k, capacity, i / experts, i % experts);
}

__global__ void __launch_bounds__(kBlock)
    keptNormalizeKernel(float *weights, const int64_t *indices,
                        int64_t tokens, int64_t k, float epsilon) {
  for (int64_t t = threadIndex(); t < tokens; t += threadStride())
    normalizeKept(weights + t * k, indices + t * k, k, epsilon);
}

__global__ void __launch_bounds__(kBlock)
    histogramKernel(const int64_t *indices, int64_t rows, int64_t experts,
                    int32_t *counts, DeviceErrorRecord *errors, int step) {
  int64_t chunks = dispatchChunks(rows);
  for (int64_t i = threadIndex(); i < chunks * experts; i += threadStride()) {
    int64_t c = i / experts, e = i % experts;
    chunkHistogram(indices, rows, experts, c, e, counts);
    if (e == 0) {
      int64_t bad = firstInvalidIndex(indices, rows, experts, c);
      if (bad >= 0)
        recordDeviceError(errors, kDispatchIndexOutOfRange, step, bad,
                          indices[bad]);
    }
  }
}

__global__ void __launch_bounds__(kBlock)
    prefixKernel(int32_t *counts, int64_t chunks, int64_t experts,
                 int64_t *offsets) {
  for (int64_t e = threadIndex(); e < experts; e += threadStride())
    chunkPrefix(counts, chunks, experts, e, offsets);
}

__global__ void scanKernel(int64_t *offsets, int64_t experts) {
  if (threadIndex() == 0)
    scanOffsets(offsets, experts);
}

__global__ void __launch_bounds__(kBlock)
    placeKernel(const int64_t *indices, int64_t rows, int64_t experts,
                const int32_t *bases, const int64_t *offsets, int64_t *source) {
  for (int64_t a = threadIndex(); a < rows; a += threadStride())
    placeAssignment(indices, rows, experts, bases, offsets, a, source);
}

__global__ void __launch_bounds__(kBlock)
    gatherRowsKernel(const float *tokens, const int64_t *source, int64_t rows,
                     int64_t k, int64_t hidden, float *expertInputs) {
  for (int64_t i = threadIndex(); i < rows * hidden; i += threadStride())
    expertInputs[i] =
        dispatchElement(tokens, source, k, hidden, i / hidden, i % hidden);
}

__global__ void __launch_bounds__(kBlock)
    fillRowsKernel(long long *row, int64_t assignments) {
  for (int64_t i = threadIndex(); i < assignments; i += threadStride())
    row[i] = kNoRow;
}

__global__ void __launch_bounds__(kBlock)
    invertSourceKernel(const int64_t *source, int64_t N, int64_t assignments,
                       long long *row, DeviceErrorRecord *errors, int step) {
  for (int64_t r = threadIndex(); r < N; r += threadStride()) {
    int status = combineSourceStatus(source, assignments, r);
    if (status == 0)
      keepSmallerRow(&row[source[r]], r);
    else if (status > 0)
      recordDeviceError(errors, status, step, r, source[r]);
  }
}

__global__ void __launch_bounds__(kBlock)
    repeatCheckKernel(const int64_t *source, int64_t N, int64_t assignments,
                      const long long *row, DeviceErrorRecord *errors,
                      int step) {
  for (int64_t r = threadIndex(); r < N; r += threadStride())
    if (combineSourceStatus(source, assignments, r) == 0 &&
        combineSourceRepeats(source, row, r))
      recordDeviceError(errors, kCombineSourceRepeats, step, r, row[source[r]]);
}

__global__ void __launch_bounds__(kBlock)
    combineKernel(const float *outputs, const long long *row,
                  const float *weights, const float *passthrough,
                  const int64_t *indices, int64_t T, int64_t k, int64_t hidden,
                  float *out) {
  for (int64_t i = threadIndex(); i < T * hidden; i += threadStride())
    out[i] = combineElement(outputs, row, weights, passthrough, indices, k,
                            hidden, i / hidden, i % hidden);
}

__global__ void __launch_bounds__(kBlock)
    broadcastCKernel(const float *c, int64_t rowStride, int64_t colStride,
                     int64_t M, int64_t N, float beta, float *out) {
  for (int64_t i = threadIndex(); i < M * N; i += threadStride()) {
    float value = broadcastCElement(c, rowStride, colStride, i / N, i % N);
    out[i] = beta == 1.0f ? value : beta * value;
  }
}

} // namespace

cudaError_t launchRouter(const RouterLogicParams &params, const float *logits,
                         const float *bias, int64_t tokens, int64_t sequences,
                         int64_t capacity, float keptEpsilon,
                         float *weights, int64_t *indices,
                         cudaStream_t stream) {
  if (tokens > 0)
    routerKernel<<<blocksFor(tokens), kBlock, 0, stream>>>(
        params, logits, bias, tokens, weights, indices);
  if (capacity > 0 && tokens > 0 && sequences > 0)
    capacityKernel<<<blocksFor(sequences * params.experts), kBlock, 0,
                     stream>>>(indices, sequences, tokens / sequences,
                               params.topK, params.experts, capacity);
  if (keptEpsilon > 0 && tokens > 0)
    keptNormalizeKernel<<<blocksFor(tokens), kBlock, 0, stream>>>(
        weights, indices, tokens, params.topK, keptEpsilon);
  return cudaGetLastError();
}

cudaError_t launchDispatch(const float *tokens, const int64_t *indices,
                           int64_t T, int64_t k, int64_t hidden,
                           int64_t experts, float *expertInputs,
                           int64_t *offsets, int64_t *source, void *scratch,
                           DeviceErrorRecord *errors, int step,
                           cudaStream_t stream) {
  int64_t rows = T * k, chunks = dispatchChunks(rows);
  auto *counts = static_cast<int32_t *>(scratch);
  if (chunks > 0)
    histogramKernel<<<blocksFor(chunks * experts), kBlock, 0, stream>>>(
        indices, rows, experts, counts, errors, step);
  prefixKernel<<<blocksFor(experts), kBlock, 0, stream>>>(counts, chunks,
                                                          experts, offsets);
  scanKernel<<<1, 1, 0, stream>>>(offsets, experts);
  if (rows > 0)
    placeKernel<<<blocksFor(rows), kBlock, 0, stream>>>(
        indices, rows, experts, counts, offsets, source);
  if (rows * hidden > 0)
    gatherRowsKernel<<<blocksFor(rows * hidden), kBlock, 0, stream>>>(
        tokens, source, rows, k, hidden, expertInputs);
  return cudaGetLastError();
}

cudaError_t launchCombine(const float *outputs, const int64_t *source,
                          const float *weights, const float *passthrough,
                          const int64_t *indices, int64_t N, int64_t T,
                          int64_t k, int64_t hidden, float *out, void *scratch,
                          DeviceErrorRecord *errors, int step,
                          cudaStream_t stream) {
  int64_t assignments = T * k;
  auto *row = static_cast<long long *>(scratch);
  if (assignments > 0)
    fillRowsKernel<<<blocksFor(assignments), kBlock, 0, stream>>>(row,
                                                                  assignments);
  if (N > 0) {
    invertSourceKernel<<<blocksFor(N), kBlock, 0, stream>>>(
        source, N, assignments, row, errors, step);
    repeatCheckKernel<<<blocksFor(N), kBlock, 0, stream>>>(
        source, N, assignments, row, errors, step);
  }
  if (T * hidden > 0)
    combineKernel<<<blocksFor(T * hidden), kBlock, 0, stream>>>(
        outputs, row, weights, passthrough, indices, T, k, hidden, out);
  return cudaGetLastError();
}

cudaError_t launchBroadcastC(const float *c, int64_t rowStride,
                             int64_t colStride, int64_t M, int64_t N,
                             float beta, float *out, cudaStream_t stream) {
  if (M * N > 0)
    broadcastCKernel<<<blocksFor(M * N), kBlock, 0, stream>>>(
        c, rowStride, colStride, M, N, beta, out);
  return cudaGetLastError();
}

} // namespace moert::cuda
