//===- stream_avx512.cpp - 16-lane streaming products of [out, K] --------===//
//
// The AVX-512 entry points of streamProject (kernels/stream.h) for 16-bit
// and int8 weights stored [out, K]: one weight row at a time in memory
// order, each 16-lane weight vector feeding up to four rows of x, or, when
// the rows of x outgrow L1, chunk by chunk through blocks of weight rows.
// f32 weights go to the register tiles (kernels/tiles.h), whose order of
// summation is then the same for every count of rows. Chosen by CPUID
// (hasAvx512Streams); the 8-lane kernels and the dispatch are stream.cpp's.
//
//===----------------------------------------------------------------------===//

#include "kernels/stream_vectors.h"
#include "kernels/tiles.h"

#include <algorithm>
#include <vector>

namespace moert::detail::lanes {
#if MOERT_V3_DISPATCH
namespace {

typedef float Vec __attribute__((vector_size(8 * sizeof(float))));

/// The lanes of a 16-lane v summed as a tree (halves, then quarters, ...):
/// a few vector adds where the in-order sum is fifteen dependent ones, a
/// cost per weight row that the narrow weights' short rows (1 KiB of int8
/// at K = 1024) felt.
typedef float Vec4f __attribute__((vector_size(4 * sizeof(float))));
template <typename V> MOERT_ALWAYS_INLINE float treeSum(V v) {
  static_assert(sizeof(V) == 16 * sizeof(float), "16 lanes");
  Vec lo, hi;
  std::memcpy(&lo, &v, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char *>(&v) + sizeof lo, sizeof hi);
  Vec eight = lo + hi;
  Vec4f a, b;
  std::memcpy(&a, &eight, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char *>(&eight) + sizeof a, sizeof b);
  Vec4f four = a + b;
  return (four[0] + four[2]) + (four[1] + four[3]);
}

// The 16-lane [out, K] products. Each output c[r, j] is summed the same
// way whatever the other rows of x are and however the block is traversed:
// over chunks of kChunk inputs, each chunk into four accumulators (the
// chunk's 16-lane vectors in turn), whose sum is added to the output's
// running vector; a tree sum of that vector, then the scalar tail of K,
// the scale and the bias. So a row's result does not depend on how many
// rows share its block.

/// Inputs per chunk: 8 rows of x over one chunk (8 KiB) stay in L1 while a
/// block of weight rows multiplies them.
constexpr int64_t kChunk = 256;
/// Rows of x per pass of a chunk (R of chunkRows): each 16-lane weight
/// vector, loaded and widened once, feeds one FMA per row, from 4 x
/// kRowGroup accumulators (bench/README.md, "Several rows per weight
/// row").
constexpr int kRowGroup = 4;
/// Rows of x per slab: the running vectors of a block are kBlockRows x
/// kSlabRows (8 KiB).
constexpr int64_t kSlabRows = 8;
/// Weight rows per block when x's slab does not fit in L1 with them.
constexpr int64_t kBlockRows = 16;
/// How far ahead of the weight row being read one weight row at a time
/// prefetches, by the bytes of a weight (bench/README.md, "Prefetching 8 KiB
/// ahead" and "f32 rows 4 KiB ahead"): bf16, f16 and int8 rows read 7-20%
/// faster at 8 KiB than with none; f32 rows decode the whole model 5-8%
/// faster at 4 KiB than at 2 KiB, and no faster at 8 KiB.
template <typename T>
constexpr int64_t kPrefetchAhead = sizeof(T) == 4 ? 4096 : 8192;
/// The most bytes of x (a slab's rows over all of K) that one weight row at
/// a time reads from L1 (half of a 48 KiB L1; beyond, x's rows come from L2
/// for every weight row).
constexpr int64_t kL1Rows = 24 << 10;

/// part[r] += the products of x[r, k0 : k1] and w[k0 : k1] over 16-lane
/// vectors (four accumulators, summed in pairs), for r < R; k1 - k0 is
/// kChunk, or the last chunk's length (its 16-lane part only: the scalar
/// tail is the caller's).
template <int R, typename W>
MOERT_ALWAYS_INLINE void chunkRows(const float *x, int64_t ldx,
                                   const typename W::T *w, int64_t k0,
                                   int64_t k1, typename W::V *part) {
  using V = typename W::V;
  constexpr int64_t lanes = sizeof(V) / sizeof(float);
  constexpr int U = 4;
  V acc[R][U] = {};
  int64_t k = k0;
  for (; k + U * lanes <= k1; k += U * lanes) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      V wv = W::vector(w + k + u * lanes);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][u] += loadAs<V>(x + r * ldx + k + u * lanes) * wv;
    }
  }
  for (; k + lanes <= k1; k += lanes) {
    V wv = W::vector(w + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      acc[r][0] += loadAs<V>(x + r * ldx + k) * wv;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    part[r] += (acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3]);
}

/// chunkRows over rows [0, n) of x (n <= kSlabRows): groups of kRowGroup,
/// then the rest in one group.
template <typename W, int G = kRowGroup>
MOERT_ALWAYS_INLINE void chunkSlab(const float *x, int64_t n, int64_t ldx,
                                   const typename W::T *w, int64_t k0,
                                   int64_t k1, typename W::V *part) {
  int64_t r = 0;
  for (; r + G <= n; r += G)
    chunkRows<G, W>(x + r * ldx, ldx, w, k0, k1, part + r);
  if constexpr (G > 1) {
    if (n - r == G - 1)
      return chunkRows<G - 1, W>(x + r * ldx, ldx, w, k0, k1, part + r);
    if (n > r)
      chunkSlab<W, G - 1>(x + r * ldx, n - r, ldx, w, k0, k1, part + r);
  }
}

/// c[r, j] for rows r < n (n <= kSlabRows) of x (leading dimension ldx)
/// and the `rows` weight rows at w (each K long): chunk by chunk, each chunk
/// through every weight row of the block, so that x's chunk stays in L1
/// across the block's rows; each row's next chunk is prefetched.
template <typename W>
MOERT_ALWAYS_INLINE void slabBlock(const float *x, int64_t n, int64_t ldx,
                                   int64_t K, const typename W::T *w,
                                   int64_t rows, const float *scale,
                                   const float *bias, float *c, int64_t ldc) {
  using V = typename W::V;
  constexpr int64_t lane = sizeof(V) / sizeof(float);
  V part[kBlockRows][kSlabRows];
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t r = 0; r < n; ++r)
      part[j][r] = V{};
  const int64_t vectors = K / lane * lane;
  for (int64_t k0 = 0; k0 < vectors; k0 += kChunk) {
    const int64_t k1 = std::min(vectors, k0 + kChunk);
    for (int64_t j = 0; j < rows; ++j) {
      const typename W::T *row = w + j * K;
      // This row's next chunk, or at the last chunk the next block's first
      // (the same row `rows` rows on; a prefetch never faults).
      const char *next = k1 < vectors
                             ? reinterpret_cast<const char *>(row + k1)
                             : reinterpret_cast<const char *>(row + rows * K);
      const int64_t bytes = kChunk * int64_t(sizeof(typename W::T));
      for (int64_t line = 0; line < bytes; line += 64)
        __builtin_prefetch(next + line);
      chunkSlab<W>(x, n, ldx, row, k0, k1, part[j]);
    }
  }
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t r = 0; r < n; ++r) {
      float s = treeSum(part[j][r]);
      for (int64_t t = vectors; t < K; ++t)
        s += x[r * ldx + t] * W::scalar(w[j * K + t]);
      if (scale)
        s *= scale[j];
      c[r * ldc + j] = bias ? s + bias[j] : s;
    }
}

/// slabBlock of one weight row and R rows of x (R <= kSlabRows), with the
/// running vectors in registers: the same sums, without a block's loops
/// around each row (their set-up cost about 5% at one row of x).
template <int R, typename W>
MOERT_ALWAYS_INLINE void
slabRow(const float *x, int64_t K, const typename W::T *w, int64_t ahead,
        const float *scale, const float *bias, float *c, int64_t ldc) {
  using V = typename W::V;
  constexpr int64_t lane = sizeof(V) / sizeof(float);
  V part[R] = {};
  const int64_t vectors = K / lane * lane;
  for (int64_t k0 = 0; k0 < vectors; k0 += kChunk) {
    const int64_t k1 = std::min(vectors, k0 + kChunk);
    if (ahead > 0) {
      const char *next = reinterpret_cast<const char *>(w + k0) + ahead;
      const int64_t bytes = (k1 - k0) * int64_t(sizeof(typename W::T));
      for (int64_t line = 0; line < bytes; line += 64)
        __builtin_prefetch(next + line);
    }
    chunkSlab<W>(x, R, K, w, k0, k1, part);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float s = treeSum(part[r]);
    for (int64_t t = vectors; t < K; ++t)
      s += x[r * K + t] * W::scalar(w[t]);
    if (scale)
      s *= scale[0];
    c[r * ldc] = bias ? s + bias[0] : s;
  }
}

/// slabRow for every weight row of [0, m), the slab's R rows of x.
template <int R, typename W>
MOERT_ALWAYS_INLINE void
slabRows(const float *x, int64_t K, const typename W::T *w, int64_t m,
         const float *scale, const float *bias, float *c, int64_t ldc) {
  for (int64_t j = 0; j < m; ++j)
    slabRow<R, W>(x, K, w + j * K, kPrefetchAhead<typename W::T>,
                  scale ? scale + j : nullptr, bias ? bias + j : nullptr, c + j,
                  ldc);
}

/// [out, K] weights on 16 lanes. Where a slab of x fits in L1 beside a weight
/// row (kL1Rows), one weight row at a time, in memory order: the block is one
/// sequential stream, which the hardware prefetchers of the AVX-512 CPUs
/// measured keep up with where the column tiles' eight concurrent streams of
/// a page or two each did not (bench/README.md, "Decode at the memory bus on
/// AVX-512"), with a software prefetch kPrefetchAhead bytes ahead. Larger
/// slabs go chunk by chunk through blocks of
/// kBlockRows weight rows, prefetching each row's next chunk, so that x's
/// chunk is read from L1 (bench/README.md, "Several rows per weight row").
/// Slabs of kSlabRows rows of x.
template <typename W>
MOERT_ALWAYS_INLINE void
streamOutInRows(const float *x, int64_t n, int64_t K, const void *weights,
                int64_t c0, int64_t m, const float *scale, const float *bias,
                float *c, int64_t ldc) {
  using T = typename W::T;
  const auto *w = static_cast<const T *>(weights) + c0 * K;
  auto at = [&](const float *v, int64_t j) { return v ? v + c0 + j : nullptr; };
  thread_local std::vector<float> packed;
  for (int64_t r0 = 0; r0 < n; r0 += kSlabRows) {
    const int64_t rows = std::min(kSlabRows, n - r0);
    const float *xs = x + r0 * K;
    float *cs = c + r0 * ldc;
    if (rows * K * int64_t(sizeof(float)) <= kL1Rows) {
      const float *s = at(scale, 0), *b = at(bias, 0);
      switch (rows) {
      case 1:
        slabRows<1, W>(xs, K, w, m, s, b, cs, ldc);
        break;
      case 2:
        slabRows<2, W>(xs, K, w, m, s, b, cs, ldc);
        break;
      case 3:
        slabRows<3, W>(xs, K, w, m, s, b, cs, ldc);
        break;
      case 4:
        slabRows<4, W>(xs, K, w, m, s, b, cs, ldc);
        break;
      case 5:
        slabRows<5, W>(xs, K, w, m, s, b, cs, ldc);
        break;
      case 6:
        slabRows<6, W>(xs, K, w, m, s, b, cs, ldc);
        break;
      case 7:
        slabRows<7, W>(xs, K, w, m, s, b, cs, ldc);
        break;
      default:
        slabRows<8, W>(xs, K, w, m, s, b, cs, ldc);
        break;
      }
      continue;
    }
    // The slab copied with a stride of K rounded up to 16 plus 16: rows
    // 4 KiB apart (K = 1024) would share L1's sets, 8 of them filling most
    // ways of those sets.
    const int64_t ldx = (K + 15) / 16 * 16 + 16;
    packed.resize(rows * ldx);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(xs + r * K, xs + (r + 1) * K, packed.data() + r * ldx);
    for (int64_t j = 0; j < m; j += kBlockRows)
      slabBlock<W>(packed.data(), rows, ldx, K, w + j * K,
                   std::min(kBlockRows, m - j), at(scale, j), at(bias, j),
                   cs + j, ldc);
  }
}

// 16-bit and int8 weights on 16 lanes: at one token the 8-lane kernels are
// bound by their arithmetic, not by memory, so the wider FMAs pay for int8;
// bf16 is already near memory speed with two threads (bench/README.md,
// "Kernel measurements behind the CPU kernels' design").
MOERT_AVX512
void streamOutInBf16Avx512(const float *x, int64_t n, int64_t K, const void *w,
                           int64_t c0, int64_t m, const float *scale,
                           const float *bias, float *c, int64_t ldc) {
  streamOutInRows<Bf16x16Weights>(x, n, K, w, c0, m, scale, bias, c, ldc);
}
MOERT_AVX512
void streamOutInF16Avx512(const float *x, int64_t n, int64_t K, const void *w,
                          int64_t c0, int64_t m, const float *scale,
                          const float *bias, float *c, int64_t ldc) {
  streamOutInRows<F16x16Weights>(x, n, K, w, c0, m, scale, bias, c, ldc);
}
MOERT_AVX512
void streamOutInI8Avx512(const float *x, int64_t n, int64_t K, const void *w,
                         int64_t c0, int64_t m, const float *scale,
                         const float *bias, float *c, int64_t ldc) {
  streamOutInRows<I8x16Weights>(x, n, K, w, c0, m, scale, bias, c, ldc);
}

} // namespace

void streamOutInAvx512(const float *x, int64_t n, int64_t K, const void *w,
                       StreamWeights type, int64_t c0, int64_t m,
                       const float *scale, const float *bias, float *c,
                       int64_t ldc) {
  switch (type) {
  case StreamWeights::F32:
    // The register tiles' order, so that a row's sums are the same whether
    // it streams or shares a tile with others (kernels/tiles.h): slabs of
    // rows that keep it.
    for (int64_t r0 = 0; r0 < n; r0 += kInvariantRowsF32)
      tileProject(x + r0 * K, std::min(kInvariantRowsF32, n - r0), K, w, type,
                  c0, m, scale, bias, c + r0 * ldc, ldc);
    return;
  case StreamWeights::BF16:
    return streamOutInBf16Avx512(x, n, K, w, c0, m, scale, bias, c, ldc);
  case StreamWeights::F16:
    return streamOutInF16Avx512(x, n, K, w, c0, m, scale, bias, c, ldc);
  case StreamWeights::I8:
    return streamOutInI8Avx512(x, n, K, w, c0, m, scale, bias, c, ldc);
  }
}
#endif
} // namespace moert::detail::lanes
