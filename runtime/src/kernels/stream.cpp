//===- stream.cpp - Weight-streaming products for few rows ----------------===//
//
// Register-tiled products over GCC/Clang vector extensions. On x86-64 the
// entry points are cloned for x86-64-v3 (AVX2, FMA) and baseline SSE2, picked
// once at load time by the dynamic linker (ifunc), so the library runs on any
// x86-64 and uses 8-wide FMAs where the CPU has them.
//
// [out, K] weights: a tile computes R rows by C columns of the output in
// registers over the whole inner dimension K (C contiguous weight rows), so
// each weight element it loads is used R times from a register. Column tiles
// are the outer loop and row tiles the inner one: the first row tile streams
// the tile's weights from memory, the others find them in cache. [K, out]
// weights: over a range of whole weight rows, four at a time, into partial
// products of all the outputs: one sequential stream, where a column block
// would read a short segment of each row, a page apart.
//
//===----------------------------------------------------------------------===//

#include "kernels/stream.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MOERT_MULTIVERSION                                                     \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MOERT_MULTIVERSION
#endif
#define MOERT_ALWAYS_INLINE inline __attribute__((always_inline))

// The vector helpers below are always inlined, so the ABI of passing 32-byte
// vectors by value, which GCC warns about when AVX is off, never applies.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace moert::detail {
namespace {

constexpr int kLanes = 8;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

MOERT_ALWAYS_INLINE Vec load(const float *p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
MOERT_ALWAYS_INLINE void store(float *p, Vec v) {
  std::memcpy(p, &v, sizeof v);
}
MOERT_ALWAYS_INLINE float horizontalSum(Vec v) {
  float s = 0;
  for (int i = 0; i < kLanes; ++i)
    s += v[i];
  return s;
}

//===----------------------------------------------------------------------===//
// [out, K] weights: each output is a dot product of a row with a weight row.
//===----------------------------------------------------------------------===//

/// c[r, j] = dot(x[r, :], w[j, :]) + bias[j] for r < R, j < C; the C weight
/// rows are C sequential streams.
template <int R, int C>
MOERT_ALWAYS_INLINE void dotTile(const float *x, int64_t ldx, const float *w,
                                 int64_t K, const float *bias, float *c,
                                 int64_t ldc) {
  Vec acc[R][C] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    Vec wv[C];
    for (int j = 0; j < C; ++j)
      wv[j] = load(w + j * K + k);
    for (int r = 0; r < R; ++r) {
      Vec xv = load(x + r * ldx + k);
      for (int j = 0; j < C; ++j)
        acc[r][j] += xv * wv[j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j) {
      float s = horizontalSum(acc[r][j]);
      for (int64_t t = k; t < K; ++t)
        s += x[r * ldx + t] * w[j * K + t];
      c[r * ldc + j] = bias ? s + bias[j] : s;
    }
}

/// Rows [0, n) of one column tile of C columns (rows two at a time).
template <int C>
MOERT_ALWAYS_INLINE void dotColumns(const float *x, int64_t n, int64_t K,
                                    const float *w, const float *bias, float *c,
                                    int64_t ldc) {
  int64_t r = 0;
  for (; r + 2 <= n; r += 2)
    dotTile<2, C>(x + r * K, K, w, K, bias, c + r * ldc, ldc);
  if (r < n)
    dotTile<1, C>(x + r * K, K, w, K, bias, c + r * ldc, ldc);
}

MOERT_MULTIVERSION
void streamOutIn(const float *x, int64_t n, int64_t K, const float *w,
                 int64_t c0, int64_t m, const float *bias, float *c,
                 int64_t ldc) {
  constexpr int C = 4;
  int64_t j = 0;
  for (; j + C <= m; j += C)
    dotColumns<C>(x, n, K, w + (c0 + j) * K, bias ? bias + c0 + j : nullptr,
                  c + j, ldc);
  for (; j < m; ++j)
    dotColumns<1>(x, n, K, w + (c0 + j) * K, bias ? bias + c0 + j : nullptr,
                  c + j, ldc);
}

//===----------------------------------------------------------------------===//
// [K, out] weights: ranges of whole weight rows.
//===----------------------------------------------------------------------===//

/// Four weight rows at a time: each 8-column vector of the four rows is
/// loaded once into registers and used for every row of x, and each
/// accumulator vector is loaded and stored once per four weight rows.
MOERT_MULTIVERSION
void streamRows(const float *x, int64_t n, int64_t ldx, const float *w,
                int64_t out, int64_t k0, int64_t k1, float *c) {
  std::fill(c, c + n * out, 0.0f);
  int64_t k = k0;
  for (; k + 4 <= k1; k += 4) {
    const float *w0 = w + k * out, *w1 = w0 + out, *w2 = w1 + out,
                *w3 = w2 + out;
    int64_t j = 0;
    for (; j + kLanes <= out; j += kLanes) {
      Vec a = load(w0 + j), b = load(w1 + j), d = load(w2 + j),
          e = load(w3 + j);
      for (int64_t r = 0; r < n; ++r) {
        const float *xr = x + r * ldx + k;
        float *cr = c + r * out + j;
        store(cr, load(cr) + a * xr[0] + b * xr[1] + d * xr[2] + e * xr[3]);
      }
    }
    for (; j < out; ++j)
      for (int64_t r = 0; r < n; ++r) {
        const float *xr = x + r * ldx + k;
        c[r * out + j] +=
            w0[j] * xr[0] + w1[j] * xr[1] + w2[j] * xr[2] + w3[j] * xr[3];
      }
  }
  for (; k < k1; ++k)
    for (int64_t r = 0; r < n; ++r) {
      float xs = x[r * ldx + k];
      for (int64_t j = 0; j < out; ++j)
        c[r * out + j] += xs * w[k * out + j];
    }
}

} // namespace

void streamRowRange(const float *x, int64_t n, int64_t ldx, const float *w,
                    int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows(x, n, ldx, w, out, k0, k1, c);
}

void streamProject(const float *x, int64_t n, int64_t K, const float *w,
                   int64_t c0, int64_t m, const float *bias, float *c,
                   int64_t ldc) {
  streamOutIn(x, n, K, w, c0, m, bias, c, ldc);
}

} // namespace moert::detail
