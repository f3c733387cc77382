//===- batch_invariant_test.cpp - Products that ignore the other rows -----===//
//
// invariantSgemm (kernels/batch_invariant.h) against an f64 reference in
// all four transpose forms with alpha and beta, odd sizes and leading
// dimensions; and its promise: each row computed alone, or a block of
// columns alone, gives the same bits as the whole product.
//
//===----------------------------------------------------------------------===//

#include "kernels/batch_invariant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace moert::testing {
namespace {

struct Operands {
  bool transA, transB;
  int64_t m, n, k, lda, ldb, ldc;
  std::vector<float> a, b, c;
};

Operands makeOperands(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                      unsigned seed) {
  Operands o{transA, transB, m, n, k, 0, 0, n + 3, {}, {}, {}};
  // Leading dimensions past the rows, so that strides are exercised.
  o.lda = (transA ? m : k) + 2;
  o.ldb = (transB ? k : n) + 1;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  o.a.resize((transA ? k : m) * o.lda);
  o.b.resize((transB ? n : k) * o.ldb);
  o.c.resize(m * o.ldc);
  for (float &x : o.a)
    x = dist(rng);
  for (float &x : o.b)
    x = dist(rng);
  for (float &x : o.c)
    x = dist(rng);
  return o;
}

double elementA(const Operands &o, int64_t i, int64_t p) {
  return o.transA ? o.a[p * o.lda + i] : o.a[i * o.lda + p];
}
double elementB(const Operands &o, int64_t p, int64_t j) {
  return o.transB ? o.b[j * o.ldb + p] : o.b[p * o.ldb + j];
}

TEST(BatchInvariant, MatchesAnF64ReferenceInEveryForm) {
  const int64_t sizes[][3] = {{1, 1, 1},    {1, 37, 64}, {5, 300, 33},
                              {9, 17, 200}, {4, 513, 8}, {3, 2, 0}};
  unsigned seed = 1;
  for (bool transA : {false, true})
    for (bool transB : {false, true})
      for (const auto &size : sizes)
        for (float beta : {0.0f, 0.5f}) {
          Operands o =
              makeOperands(transA, transB, size[0], size[1], size[2], seed++);
          std::vector<float> c = o.c;
          const float alpha = 0.75f;
          detail::invariantSgemm(transA, transB, o.m, o.n, o.k, alpha,
                                 o.a.data(), o.lda, o.b.data(), o.ldb, beta,
                                 c.data(), o.ldc);
          for (int64_t i = 0; i < o.m; ++i)
            for (int64_t j = 0; j < o.n; ++j) {
              double sum = 0, magnitude = 0;
              for (int64_t p = 0; p < o.k; ++p) {
                sum += elementA(o, i, p) * elementB(o, p, j);
                magnitude += std::fabs(elementA(o, i, p) * elementB(o, p, j));
              }
              double want = alpha * sum + beta * o.c[i * o.ldc + j];
              EXPECT_NEAR(c[i * o.ldc + j], want, 1e-6 * (1 + magnitude))
                  << "transA " << transA << " transB " << transB << " m " << o.m
                  << " n " << o.n << " k " << o.k << " at " << i << "," << j;
            }
          // Columns past n (the leading dimension's padding) are untouched.
          for (int64_t i = 0; i < o.m; ++i)
            for (int64_t j = o.n; j < o.ldc; ++j)
              EXPECT_EQ(c[i * o.ldc + j], o.c[i * o.ldc + j]);
        }
}

TEST(BatchInvariant, ARowOrAColumnBlockAloneHasTheSameBits) {
  for (bool transA : {false, true})
    for (bool transB : {false, true}) {
      Operands o = makeOperands(transA, transB, 11, 300, 130, 7);
      std::vector<float> whole(o.c.size(), 0.0f);
      detail::invariantSgemm(transA, transB, o.m, o.n, o.k, 1.0f, o.a.data(),
                             o.lda, o.b.data(), o.ldb, 0.0f, whole.data(),
                             o.ldc);
      for (int64_t i = 0; i < o.m; ++i) {
        // Row i as a product of one row, as a decode step of one sequence.
        std::vector<float> row(o.n, 0.0f);
        const float *a = transA ? o.a.data() + i : o.a.data() + i * o.lda;
        detail::invariantSgemm(transA, transB, 1, o.n, o.k, 1.0f, a, o.lda,
                               o.b.data(), o.ldb, 0.0f, row.data(), o.n);
        EXPECT_EQ(std::memcmp(row.data(), whole.data() + i * o.ldc,
                              o.n * sizeof(float)),
                  0)
            << "transA " << transA << " transB " << transB << " row " << i;
      }
      // Columns [40, 77) alone, as a thread's block of a split product.
      const int64_t j0 = 40, cols = 37;
      std::vector<float> block(o.m * cols, 0.0f);
      const float *b = transB ? o.b.data() + j0 * o.ldb : o.b.data() + j0;
      detail::invariantSgemm(transA, transB, o.m, cols, o.k, 1.0f, o.a.data(),
                             o.lda, b, o.ldb, 0.0f, block.data(), cols);
      for (int64_t i = 0; i < o.m; ++i)
        EXPECT_EQ(std::memcmp(block.data() + i * cols,
                              whole.data() + i * o.ldc + j0,
                              cols * sizeof(float)),
                  0)
            << "transA " << transA << " transB " << transB << " row " << i;
    }
}

} // namespace
} // namespace moert::testing
