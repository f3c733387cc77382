//===- expert_kernels.cu - Experts and SharedExpert kernels ---------------===//
//
// The kernels of an expert network step (design: docs/cuda.md, "Expert GEMMs
// on the GPU"). They only map block and thread indices, shared memory and
// barriers onto the per-thread logic of expert_logic.h, which the unit test
// runs on the host; the bf16 wide tiles add the warps' WMMA fragment loads,
// MMAs and stores, which the test emulates with emulateMma at the same
// offsets. No kernel waits for the host: the tile schedule is built on the
// device from the device offsets, and every grid is sized by bounds of the
// actual token count, its surplus blocks exiting at once.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/expert_kernels.h"

#include <cuda_bf16.h>
#include <mma.h>

#include <type_traits>

namespace moert::cuda {
namespace {

constexpr int kScheduleThreads = 1024;

/// Checks the offsets (recording the first bad one) and writes the exclusive
/// prefixes of the narrow and wide tile counts, all zero when the offsets
/// are bad (no tile then runs; the session reports the error). One block.
__global__ void __launch_bounds__(kScheduleThreads)
    scheduleKernel(const int64_t *offsets, int64_t experts, int64_t rows,
                   const void *const *present, int32_t *narrowPrefix,
                   int32_t *widePrefix, DeviceErrorRecord *errors, int step) {
  __shared__ int32_t scanNarrow[kScheduleThreads], scanWide[kScheduleThreads];
  int t = threadIdx.x;
  int bad = 0;
  for (int64_t e = t; e <= experts; e += kScheduleThreads)
    if (!offsetValid(offsets, rows, e)) {
      bad = 1;
      recordDeviceError(errors,
                        e == 0 ? kExpertErrorFirstOffset : kExpertErrorOffset,
                        step, e, offsets[e]);
    }
  bad = __syncthreads_or(bad);
  int32_t carryNarrow = 0, carryWide = 0;
  if (t == 0)
    narrowPrefix[0] = widePrefix[0] = 0;
  for (int64_t base = 0; base < experts; base += kScheduleThreads) {
    int64_t e = base + t;
    bool mine = e < experts && !bad;
    scanNarrow[t] =
        mine ? int32_t(tileCount(offsets, rows, e, kRegimeNarrow, present)) : 0;
    scanWide[t] =
        mine ? int32_t(tileCount(offsets, rows, e, kRegimeWide, present)) : 0;
    __syncthreads();
    // Inclusive Hillis-Steele scan of the chunk.
    for (int stride = 1; stride < kScheduleThreads; stride <<= 1) {
      int32_t narrow = t >= stride ? scanNarrow[t - stride] : 0;
      int32_t wide = t >= stride ? scanWide[t - stride] : 0;
      __syncthreads();
      scanNarrow[t] += narrow;
      scanWide[t] += wide;
      __syncthreads();
    }
    if (e < experts) {
      narrowPrefix[e + 1] = carryNarrow + scanNarrow[t];
      widePrefix[e + 1] = carryWide + scanWide[t];
    }
    carryNarrow += scanNarrow[kScheduleThreads - 1];
    carryWide += scanWide[kScheduleThreads - 1];
    __syncthreads(); // The chunk's totals are read before the next fill.
  }
}

/// One narrow tile (grid.x) and block of units (grid.y) of a projection.
template <typename P>
__device__ void narrowTile(const P &p, const float *a, int64_t lda,
                           int64_t rows) {
  __shared__ float partials[kNarrowThreads][2 * kNarrowRows];
  float sums[2 * kNarrowRows]; // Registers; shared memory only once.
  narrowPartial(p, a, lda, rows, blockIdx.y, threadIdx.x, sums);
  for (int i = 0; i < 2 * kNarrowRows; ++i)
    partials[threadIdx.x][i] = sums[i];
  __syncthreads();
  narrowFinish(p, rows, blockIdx.y, threadIdx.x, partials);
}

/// One wide tile: virtual columns [j0, j0 + kTileCols) of the tile's rows.
template <typename P>
__device__ void wideTile(const P &p, const float *a, int64_t lda, int64_t rows,
                         int64_t j0) {
  __shared__ float as[kTileDepth][kWideRows];
  __shared__ float bs[kTileDepth][kTileCols];
  int t = threadIdx.x;
  float acc[kMicro][kMicro] = {};
  for (int64_t k0 = 0; k0 < p.depth(); k0 += kTileDepth) {
    loadTileA(a, lda, rows, p.depth(), k0, t, as);
    loadTileB(p, k0, j0, t, bs);
    __syncthreads();
    multiplyTile(as, bs, t, acc);
    __syncthreads();
  }
  storeTile(p, rows, j0, t, acc);
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
namespace wmma = nvcuda::wmma;
using MmaAccumulator =
    wmma::fragment<wmma::accumulator, kMmaShape, kMmaShape, kMmaShape, float>;

__device__ const __nv_bfloat16 *asBf16(const uint16_t *bits) {
  return reinterpret_cast<const __nv_bfloat16 *>(bits);
}

/// Warp `warp`'s MMAs of one staged slice: per 16-deep step, its two weight
/// fragments, then for each live fragment row the hi and the lo activation
/// fragment against both. BLayout is the staged weights' layout
/// (mmaBOffset).
template <typename BLayout>
__device__ void
mmaSlice(const MmaStage &stage, bool inOut, int warp, int64_t rows,
         MmaAccumulator (&acc)[kMmaWarpFragments][kMmaWarpFragments]) {
  if (!mmaRowsLive(mmaFragmentRow(warp, 0), rows))
    return;
  for (int k = 0; k < kMmaDepth; k += kMmaShape) {
    wmma::fragment<wmma::matrix_b, kMmaShape, kMmaShape, kMmaShape,
                   __nv_bfloat16, BLayout>
        b[kMmaWarpFragments];
    for (int fj = 0; fj < kMmaWarpFragments; ++fj)
      wmma::load_matrix_sync(
          b[fj],
          asBf16(stage.b + mmaBOffset(inOut, k, mmaFragmentCol(warp, fj))),
          mmaBPitch(inOut));
    for (int fi = 0; fi < kMmaWarpFragments; ++fi) {
      int row = mmaFragmentRow(warp, fi);
      if (!mmaRowsLive(row, rows))
        continue;
      wmma::fragment<wmma::matrix_a, kMmaShape, kMmaShape, kMmaShape,
                     __nv_bfloat16, wmma::row_major>
          hi, lo;
      wmma::load_matrix_sync(hi, asBf16(stage.aHi + mmaAOffset(row, k)),
                             kMmaLdA);
      wmma::load_matrix_sync(lo, asBf16(stage.aLo + mmaAOffset(row, k)),
                             kMmaLdA);
      for (int fj = 0; fj < kMmaWarpFragments; ++fj) {
        wmma::mma_sync(acc[fi][fj], hi, b[fj], acc[fi][fj]);
        wmma::mma_sync(acc[fi][fj], lo, b[fj], acc[fi][fj]);
      }
    }
  }
}
#endif

/// One wide tile of a projection with bf16 weights (grid.y: blocks of
/// kMmaCols virtual columns) on the tensor cores: column starts, then
/// slices staged by all threads and multiplied per warp, then the
/// accumulators through shared memory to the epilogue.
template <typename P>
__device__ void wideMmaTile(const P &p, const float *a, int64_t lda,
                            int64_t rows) {
  int64_t j0 = int64_t(blockIdx.y) * kMmaCols;
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ MmaShared shared;
  int t = threadIdx.x, warp = t / 32;
  MmaAccumulator acc[kMmaWarpFragments][kMmaWarpFragments];
  for (int fi = 0; fi < kMmaWarpFragments; ++fi)
    for (int fj = 0; fj < kMmaWarpFragments; ++fj)
      wmma::fill_fragment(acc[fi][fj], 0.0f);
  mmaColumnStarts(p, j0, t, shared.stage.columns);
  __syncthreads();
  for (int64_t k0 = 0; k0 < p.depth(); k0 += kMmaDepth) {
    stageSplitActivations(a, lda, rows, p.depth(), k0, t, shared.stage.aHi,
                          shared.stage.aLo);
    stageStoredWeights(shared.stage.columns, p.inputStride(), p.f.inOut,
                       p.depth(), k0, t, shared.stage.b);
    __syncthreads();
    if (p.f.inOut)
      mmaSlice<wmma::row_major>(shared.stage, true, warp, rows, acc);
    else
      mmaSlice<wmma::col_major>(shared.stage, false, warp, rows, acc);
    __syncthreads(); // The slice is read before the next one is staged.
  }
  // The stage is dead: its memory takes the accumulators.
  for (int fi = 0; fi < kMmaWarpFragments; ++fi)
    for (int fj = 0; fj < kMmaWarpFragments; ++fj)
      wmma::store_matrix_sync(shared.c + mmaCOffset(mmaFragmentRow(warp, fi),
                                                    mmaFragmentCol(warp, fj)),
                              acc[fi][fj], kMmaLdC, wmma::mem_row_major);
  __syncthreads();
  mmaEpilogue(p, rows, j0, t, shared.c);
#else
  // No bf16 MMA before sm_80: the SIMT tile over the same columns.
  for (int64_t j = j0; j < j0 + kMmaCols; j += kTileCols) {
    wideTile(p, a, lda, rows, j);
    __syncthreads(); // Its shared memory is reused by the next columns.
  }
#endif
}

/// The wide tile of weight type W: tensor cores for bf16.
template <typename W, typename P>
__device__ void wideTileOf(const P &p, const float *a, int64_t lda,
                           int64_t rows) {
  static_assert(kMmaThreads == kTileThreads, "one launch size for both tiles");
  if constexpr (std::is_same_v<W, Bf16>)
    wideMmaTile(p, a, lda, rows);
  else
    wideTile(p, a, lda, rows, int64_t(blockIdx.y) * kTileCols);
}

/// Virtual columns per wide block for weight type W.
template <typename W> constexpr int wideColumns() {
  return std::is_same_v<W, Bf16> ? kMmaCols : kTileCols;
}

template <typename W> struct Step {
  ExpertFfn ffn;
  ExpertWeights<W> w;
  const float *x;
  int64_t rows;
  const int64_t *offsets;
  const int32_t *narrowPrefix, *widePrefix;
  const float *gate; ///< The per-token factors, or null.
  float *act, *y;
};

template <typename W>
__global__ void __launch_bounds__(kNarrowThreads)
    firstNarrowKernel(const Step<W> s) {
  ExpertTile tile = findTile(s.narrowPrefix, s.ffn.experts, s.offsets, s.rows,
                             kRegimeNarrow, blockIdx.x);
  if (tile.expert < 0)
    return;
  FirstProjection<W> p{s.ffn, s.w, tile.expert, tile.row, s.act};
  narrowTile(p, s.x + tile.row * s.ffn.hidden, s.ffn.hidden, tile.rows);
}

template <typename W>
__global__ void __launch_bounds__(kTileThreads)
    firstWideKernel(const Step<W> s) {
  ExpertTile tile = findTile(s.widePrefix, s.ffn.experts, s.offsets, s.rows,
                             kRegimeWide, blockIdx.x);
  if (tile.expert < 0)
    return;
  FirstProjection<W> p{s.ffn, s.w, tile.expert, tile.row, s.act};
  wideTileOf<W>(p, s.x + tile.row * s.ffn.hidden, s.ffn.hidden, tile.rows);
}

template <typename W>
__global__ void __launch_bounds__(kNarrowThreads)
    secondNarrowKernel(const Step<W> s) {
  ExpertTile tile = findTile(s.narrowPrefix, s.ffn.experts, s.offsets, s.rows,
                             kRegimeNarrow, blockIdx.x);
  if (tile.expert < 0)
    return;
  SecondProjection<W> p{s.ffn, s.w, tile.expert, tile.row, s.gate, s.y};
  narrowTile(p, s.act + tile.row * s.ffn.inter, s.ffn.inter, tile.rows);
}

template <typename W>
__global__ void __launch_bounds__(kTileThreads)
    secondWideKernel(const Step<W> s) {
  ExpertTile tile = findTile(s.widePrefix, s.ffn.experts, s.offsets, s.rows,
                             kRegimeWide, blockIdx.x);
  if (tile.expert < 0)
    return;
  SecondProjection<W> p{s.ffn, s.w, tile.expert, tile.row, s.gate, s.y};
  wideTileOf<W>(p, s.act + tile.row * s.ffn.inter, s.ffn.inter, tile.rows);
}

/// Zeroes the rows no expert received (grid-stride over all rows' elements).
__global__ void zeroPaddingKernel(const int64_t *offsets, int64_t experts,
                                  int64_t rows, int64_t hidden, float *y) {
  int64_t begin = paddingBegin(offsets, experts, rows) * hidden;
  for (int64_t i = begin + blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < rows * hidden; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = 0.0f;
}

/// The shared expert's factor sigmoid(x[t] . gate) of each token: one warp
/// per token.
__global__ void gateKernel(const float *x, const float *gate, int64_t rows,
                           int64_t hidden, float *factors) {
  int64_t token = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (token >= rows)
    return;
  float sum = gatePartial(x + token * hidden, gate, hidden, lane);
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0)
    factors[token] = expertSigmoid(sum);
}

unsigned blocksFor(int64_t items, int64_t perBlock) {
  return unsigned((items + perBlock - 1) / perBlock);
}

template <typename W>
cudaError_t launchTyped(const ExpertLaunch &l, cudaStream_t stream) {
  const ExpertFfn &f = l.ffn;
  auto *base = static_cast<uint8_t *>(l.scratch);
  ExpertScratch layout = expertScratch(f.experts, l.rows, f.inter);
  Step<W> s;
  s.ffn = f;
  s.w.w1 = static_cast<const W *>(l.w1);
  s.w.w3 = static_cast<const W *>(l.w3);
  s.w.w2 = static_cast<const W *>(l.w2);
  s.w.b1 = l.b1;
  s.w.b3 = l.b3;
  s.w.b2 = l.b2;
  s.w.table = l.table;
  s.w.experts = f.experts;
  s.x = l.x;
  s.rows = l.rows;
  s.offsets = l.offsets;
  auto *narrowPrefix = reinterpret_cast<int32_t *>(base + layout.narrowPrefix);
  auto *widePrefix = reinterpret_cast<int32_t *>(base + layout.widePrefix);
  s.narrowPrefix = narrowPrefix;
  s.widePrefix = widePrefix;
  float *factors = reinterpret_cast<float *>(base + layout.gate);
  s.gate = l.gate ? factors : nullptr;
  s.act = reinterpret_cast<float *>(base + layout.act);
  s.y = l.y;

  scheduleKernel<<<1, kScheduleThreads, 0, stream>>>(
      l.offsets, f.experts, l.rows, l.present, narrowPrefix, widePrefix,
      l.errors, l.step);
  if (l.gate && l.rows > 0)
    gateKernel<<<blocksFor(l.rows * 32, 256), 256, 0, stream>>>(
        l.x, l.gate, l.rows, f.hidden, factors);

  int parts = isGatedActivation(f.activation) ? 2 : 1;
  unsigned narrowTiles = unsigned(maxTiles(l.rows, f.experts, kRegimeNarrow));
  unsigned wideTiles = unsigned(maxTiles(l.rows, f.experts, kRegimeWide));
  dim3 narrowFirst(narrowTiles,
                   blocksFor(f.inter, narrowUnitsPerBlock(f.inOut)));
  dim3 narrowSecond(narrowTiles,
                    blocksFor(f.hidden, narrowUnitsPerBlock(f.inOut)));
  dim3 wideFirst(wideTiles, blocksFor(f.inter * parts, wideColumns<W>()));
  dim3 wideSecond(wideTiles, blocksFor(f.hidden, wideColumns<W>()));
  // Every row's intermediate is complete before any output row is written:
  // y may be x (in place).
  if (narrowTiles && narrowFirst.y)
    firstNarrowKernel<W><<<narrowFirst, kNarrowThreads, 0, stream>>>(s);
  if (wideTiles && wideFirst.y)
    firstWideKernel<W><<<wideFirst, kTileThreads, 0, stream>>>(s);
  // Every round of a tiered step zeroes them again: no expert's rows.
  if (l.rows > 0 && f.hidden > 0) {
    // A grid-stride loop: a bounded grid covers any row count.
    // Capped before the narrowing to unsigned: rows * hidden / 256 may
    // exceed 2^32 (and wrap to a 0-block grid) for the largest bounds.
    int64_t blocks = (l.rows * f.hidden + 255) / 256;
    unsigned grid = unsigned(blocks < 1024 ? blocks : 1024);
    zeroPaddingKernel<<<grid, 256, 0, stream>>>(l.offsets, f.experts, l.rows,
                                                f.hidden, l.y);
  }
  if (narrowTiles && narrowSecond.y)
    secondNarrowKernel<W><<<narrowSecond, kNarrowThreads, 0, stream>>>(s);
  if (wideTiles && wideSecond.y)
    secondWideKernel<W><<<wideSecond, kTileThreads, 0, stream>>>(s);
  return cudaGetLastError();
}

} // namespace

cudaError_t launchExpertFfn(const ExpertLaunch &launch, cudaStream_t stream) {
  switch (launch.weightType) {
  case kWeightBf16:
    return launchTyped<Bf16>(launch, stream);
  case kWeightF16:
    return launchTyped<F16>(launch, stream);
  default:
    return launchTyped<float>(launch, stream);
  }
}

} // namespace moert::cuda
