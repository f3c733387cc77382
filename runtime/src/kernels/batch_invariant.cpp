//===- batch_invariant.cpp - Products that ignore the other rows ----------===//
//
// The batch-invariant mode's f32 product (batch_invariant.h). Its tiles only
// reuse loads: a tile of rows and columns accumulates each element in the
// same order as an element computed alone would.
//
//===----------------------------------------------------------------------===//

#include "kernels/batch_invariant.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MOERT_INVARIANT_AVX2 1
#define MOERT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define MOERT_TARGET_AVX2_INLINE                                               \
  inline __attribute__((always_inline, target("avx2,fma")))
#endif

namespace moert::detail {
namespace {

/// Rows of C per tile: each column block of B (or row of transposed B) is
/// read once per tile.
constexpr int64_t kRowTile = 4;
/// Columns of C per tile of the [k, n] form: the accumulators of a tile,
/// kRowTile x kColumnTile floats, stay in L1.
constexpr int64_t kColumnTile = 256;
/// Partial sums of the [n, k] form (one per k modulo kLanes).
constexpr int64_t kLanes = 8;

inline void store(float *out, float sum, float alpha, float beta) {
  // beta == 0 ignores C, which may hold NaNs from the arena.
  *out = alpha * sum + (beta == 0 ? 0.0f : beta * *out);
}

/// Row i of op(A), contiguous: A's own row, or row i of A^T copied into
/// `buffer`.
const float *rowOfA(bool transA, const float *a, int64_t lda, int64_t i,
                    int64_t k, float *buffer) {
  if (!transA)
    return a + i * lda;
  for (int64_t p = 0; p < k; ++p)
    buffer[p] = a[p * lda + i];
  return buffer;
}

/// C rows [i0, i0 + rows) for B stored [k, n]: for every p ascending,
/// acc[r][j] += A(i0 + r, p) * B(p, j).
void productKN(const float *const *rowsOfA, int64_t rows, int64_t n, int64_t k,
               float alpha, const float *b, int64_t ldb, float beta, float *c,
               int64_t ldc) {
  float acc[kRowTile][kColumnTile];
  for (int64_t j0 = 0; j0 < n; j0 += kColumnTile) {
    const int64_t cols = std::min(kColumnTile, n - j0);
    for (int64_t r = 0; r < rows; ++r)
      std::fill(acc[r], acc[r] + cols, 0.0f);
    for (int64_t p = 0; p < k; ++p) {
      const float *bp = b + p * ldb + j0;
      for (int64_t r = 0; r < rows; ++r) {
        const float x = rowsOfA[r][p];
        float *ar = acc[r];
        for (int64_t j = 0; j < cols; ++j)
          ar[j] += x * bp[j];
      }
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        store(c + r * ldc + j0 + j, acc[r][j], alpha, beta);
  }
}

/// The sum of x[p] * y[p] over p < k: lane l adds the terms p = l (mod
/// kLanes) in ascending order, and the lanes are added in a fixed tree.
inline float dot(const float *x, const float *y, int64_t k) {
  float lane[kLanes] = {};
  int64_t p = 0;
  for (; p + kLanes <= k; p += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      lane[l] += x[p + l] * y[p + l];
  for (int64_t l = 0; p + l < k; ++l)
    lane[l] += x[p + l] * y[p + l];
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) +
         ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

/// C rows [i0, i0 + rows) for B stored [n, k] (transposed): one dot()
/// per element, a row of B shared by the tile's rows.
void productNK(const float *const *rowsOfA, int64_t rows, int64_t n, int64_t k,
               float alpha, const float *b, int64_t ldb, float beta, float *c,
               int64_t ldc) {
  for (int64_t j = 0; j < n; ++j) {
    const float *bj = b + j * ldb;
    for (int64_t r = 0; r < rows; ++r)
      store(c + r * ldc + j, dot(rowsOfA[r], bj, k), alpha, beta);
  }
}

#ifdef MOERT_INVARIANT_AVX2
// The AVX2 forms, which a CPU with AVX2 and FMA runs for every product of
// the process. Each element is one running fused multiply-add per vector
// lane (or, past the vectors, per scalar with std::fma, the same rounding),
// so tiles of 1 to 4 rows and 1 or 2 columns give each element the bits
// it has alone.

bool hasAvx2Fma() {
  static const bool yes =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

/// Element (r, j) of the [n, k] form from its 8 partial sums: the terms
/// past the last whole vector added to their lanes, then the fixed tree.
MOERT_TARGET_AVX2_INLINE void finishDot(__m256 sums, const float *x,
                                        const float *y, int64_t whole,
                                        int64_t k, float alpha, float beta,
                                        float *out) {
  alignas(32) float lane[kLanes];
  _mm256_store_ps(lane, sums);
  for (int64_t l = 0; whole + l < k; ++l)
    lane[l] = std::fma(x[whole + l], y[whole + l], lane[l]);
  store(out,
        ((lane[0] + lane[4]) + (lane[1] + lane[5])) +
            ((lane[2] + lane[6]) + (lane[3] + lane[7])),
        alpha, beta);
}

/// productNK for R rows: two rows of B at a time share each load of A.
template <int R>
MOERT_TARGET_AVX2 void
productNKAvx2(const float *const *rowsOfA, int64_t n, int64_t k, float alpha,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  const int64_t whole = k / kLanes * kLanes;
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const float *b0 = b + j * ldb, *b1 = b0 + ldb;
    __m256 acc0[R], acc1[R];
    for (int r = 0; r < R; ++r)
      acc0[r] = acc1[r] = _mm256_setzero_ps();
    for (int64_t p = 0; p < whole; p += kLanes) {
      const __m256 v0 = _mm256_loadu_ps(b0 + p), v1 = _mm256_loadu_ps(b1 + p);
      for (int r = 0; r < R; ++r) {
        const __m256 x = _mm256_loadu_ps(rowsOfA[r] + p);
        acc0[r] = _mm256_fmadd_ps(x, v0, acc0[r]);
        acc1[r] = _mm256_fmadd_ps(x, v1, acc1[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      finishDot(acc0[r], rowsOfA[r], b0, whole, k, alpha, beta,
                c + r * ldc + j);
      finishDot(acc1[r], rowsOfA[r], b1, whole, k, alpha, beta,
                c + r * ldc + j + 1);
    }
  }
  for (; j < n; ++j) {
    const float *b0 = b + j * ldb;
    __m256 acc0[R];
    for (int r = 0; r < R; ++r)
      acc0[r] = _mm256_setzero_ps();
    for (int64_t p = 0; p < whole; p += kLanes) {
      const __m256 v0 = _mm256_loadu_ps(b0 + p);
      for (int r = 0; r < R; ++r)
        acc0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(rowsOfA[r] + p), v0, acc0[r]);
    }
    for (int r = 0; r < R; ++r)
      finishDot(acc0[r], rowsOfA[r], b0, whole, k, alpha, beta,
                c + r * ldc + j);
  }
}

/// Columns [j, j + 8V) of productKN's R rows, for every such strip from j
/// on; returns the first column left. Each A(r, p) is broadcast against the
/// strip's row of B.
template <int R, int V>
MOERT_TARGET_AVX2_INLINE int64_t productKNStrips(
    const float *const *rowsOfA, int64_t j, int64_t n, int64_t k, float alpha,
    const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  for (; j + 8 * V <= n; j += 8 * V) {
    __m256 acc[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v)
        acc[r][v] = _mm256_setzero_ps();
    for (int64_t p = 0; p < k; ++p) {
      const float *bp = b + p * ldb + j;
      __m256 row[V];
      for (int v = 0; v < V; ++v)
        row[v] = _mm256_loadu_ps(bp + 8 * v);
      for (int r = 0; r < R; ++r) {
        const __m256 x = _mm256_set1_ps(rowsOfA[r][p]);
        for (int v = 0; v < V; ++v)
          acc[r][v] = _mm256_fmadd_ps(x, row[v], acc[r][v]);
      }
    }
    for (int r = 0; r < R; ++r) {
      alignas(32) float sums[8 * V];
      for (int v = 0; v < V; ++v)
        _mm256_store_ps(sums + 8 * v, acc[r][v]);
      for (int l = 0; l < 8 * V; ++l)
        store(c + r * ldc + j + l, sums[l], alpha, beta);
    }
  }
  return j;
}

/// productKN for R rows: strips as wide as eight accumulators allow (the
/// longer the runs read from each row of B, the better they stream), then
/// 8 columns at a time, then single columns with std::fma.
template <int R>
MOERT_TARGET_AVX2 void
productKNAvx2(const float *const *rowsOfA, int64_t n, int64_t k, float alpha,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  constexpr int kWide = R == 1 ? 8 : R == 2 ? 4 : 2;
  int64_t j =
      productKNStrips<R, kWide>(rowsOfA, 0, n, k, alpha, b, ldb, beta, c, ldc);
  j = productKNStrips<R, 1>(rowsOfA, j, n, k, alpha, b, ldb, beta, c, ldc);
  for (; j < n; ++j) {
    float sums[R] = {};
    for (int64_t p = 0; p < k; ++p)
      for (int r = 0; r < R; ++r)
        sums[r] = std::fma(rowsOfA[r][p], b[p * ldb + j], sums[r]);
    for (int r = 0; r < R; ++r)
      store(c + r * ldc + j, sums[r], alpha, beta);
  }
}

/// The AVX2 form of `rows` (1 to kRowTile) rows; false without AVX2.
bool productAvx2(bool transB, const float *const *rowsOfA, int64_t rows,
                 int64_t n, int64_t k, float alpha, const float *b, int64_t ldb,
                 float beta, float *c, int64_t ldc) {
  if (!hasAvx2Fma())
    return false;
  static_assert(kRowTile == 4, "one case per row count");
  auto run = [&](auto product) {
    product(rowsOfA, n, k, alpha, b, ldb, beta, c, ldc);
    return true;
  };
  switch (rows) {
  case 1:
    return transB ? run(productNKAvx2<1>) : run(productKNAvx2<1>);
  case 2:
    return transB ? run(productNKAvx2<2>) : run(productKNAvx2<2>);
  case 3:
    return transB ? run(productNKAvx2<3>) : run(productKNAvx2<3>);
  default:
    return transB ? run(productNKAvx2<4>) : run(productKNAvx2<4>);
  }
}
#endif

} // namespace

bool batchInvariant() {
  static const bool on = [] {
    const char *value = std::getenv("MOERT_BATCH_INVARIANT");
    return value && std::strcmp(value, "1") == 0;
  }();
  return on;
}

void invariantSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float beta, float *c, int64_t ldc) {
  static thread_local std::vector<float> buffer;
  if (transA)
    buffer.resize(static_cast<size_t>(kRowTile * k));
  for (int64_t i0 = 0; i0 < m; i0 += kRowTile) {
    const int64_t rows = std::min(kRowTile, m - i0);
    const float *rowsOfA[kRowTile];
    for (int64_t r = 0; r < rows; ++r)
      rowsOfA[r] = rowOfA(transA, a, lda, i0 + r, k,
                          transA ? buffer.data() + r * k : nullptr);
#ifdef MOERT_INVARIANT_AVX2
    if (productAvx2(transB, rowsOfA, rows, n, k, alpha, b, ldb, beta,
                    c + i0 * ldc, ldc))
      continue;
#endif
    (transB ? productNK : productKN)(rowsOfA, rows, n, k, alpha, b, ldb, beta,
                                     c + i0 * ldc, ldc);
  }
}

} // namespace moert::detail
