//===- batch_invariant.cpp - Products that ignore the other rows ----------===//
//
// The batch-invariant mode's f32 product (batch_invariant.h). Its tiles only
// reuse loads: a tile of rows and columns accumulates each element in the
// same order as an element computed alone would.
//
//===----------------------------------------------------------------------===//

#include "kernels/batch_invariant.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

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
    (transB ? productNK : productKN)(rowsOfA, rows, n, k, alpha, b, ldb, beta,
                                     c + i0 * ldc, ldc);
  }
}

} // namespace moert::detail
