//===- matmul_test.cpp - MatMul, Gemm and Einsum --------------------------===//

#include "kernels/tiles.h"
#include "test_util.h"

#include <cmath>
#include <map>
#include <optional>

namespace moert::testing {
namespace {

using fb::OpKind;

/// Naive row-major C[m, n] = A[m, k] B[k, n].
std::vector<float> naiveMatMul(const float *a, const float *b, int64_t m,
                               int64_t k, int64_t n) {
  std::vector<float> c(m * n, 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += double(a[i * k + p]) * b[p * n + j];
      c[i * n + j] = static_cast<float>(sum);
    }
  return c;
}

TEST(MatMul, TwoDimensional) {
  std::vector<float> a = randomFloats(6 * 5, 1), b = randomFloats(5 * 7, 2);
  Value y = run1(OpKind::MatMul, {f32({6, 5}, a), f32({5, 7}, b)},
                 {DType::F32, {6, 7}});
  expectNear(y, {6, 7}, naiveMatMul(a.data(), b.data(), 6, 5, 7), 1e-5f);
}

TEST(MatMul, BatchBroadcastsLikeNumpy) {
  // [2, 1, 3, 4] x [3, 4, 5] -> [2, 3, 3, 5]; A's batch dim 1 broadcasts.
  std::vector<float> a = randomFloats(2 * 3 * 4, 3),
                     b = randomFloats(3 * 4 * 5, 4);
  Value y = run1(OpKind::MatMul, {f32({2, 1, 3, 4}, a), f32({3, 4, 5}, b)},
                 {DType::F32, {2, 3, 3, 5}});
  std::vector<float> expected;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      std::vector<float> c =
          naiveMatMul(a.data() + i * 12, b.data() + j * 20, 3, 4, 5);
      expected.insert(expected.end(), c.begin(), c.end());
    }
  expectNear(y, {2, 3, 3, 5}, expected);
}

TEST(MatMul, SharedWeightFoldsBatchIntoRows) {
  std::vector<float> a = randomFloats(2 * 3 * 4, 5), b = randomFloats(4 * 6, 6);
  Value y = run1(OpKind::MatMul, {f32({2, 3, 4}, a), f32({4, 6}, b)},
                 {DType::F32, {2, 3, 6}});
  expectNear(y, {2, 3, 6}, naiveMatMul(a.data(), b.data(), 6, 4, 6));
}

TEST(MatMul, VectorOperandsArePromotedAndRemoved) {
  Value mv = run1(OpKind::MatMul,
                  {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({3}, {1, 0, -1})},
                  {DType::F32, {2}});
  expectNear(mv, {2}, {-2, -2});
  Value vm =
      run1(OpKind::MatMul, {f32({2}, {1, 2}), f32({2, 3}, {1, 2, 3, 4, 5, 6})},
           {DType::F32, {3}});
  expectNear(vm, {3}, {9, 12, 15});
  Value dot = run1(OpKind::MatMul, {f32({3}, {1, 2, 3}), f32({3}, {4, 5, 6})},
                   {DType::F32, {}});
  expectNear(dot, {}, {32});
}

TEST(MatMul, EmptyInnerDimensionGivesZeros) {
  Value y = run1(OpKind::MatMul, {f32({2, 0}, {}), f32({0, 3}, {})},
                 {DType::F32, {2, 3}});
  expectNear(y, {2, 3}, {0, 0, 0, 0, 0, 0});
}

TEST(MatMul, InnerMismatchIsAnError) {
  auto r = runStep(
      OpKind::MatMul,
      {f32({2, 3}, std::vector<float>(6)), f32({2, 3}, std::vector<float>(6))},
      {{DType::F32, {2, 3}}});
  EXPECT_THAT(r.status(), StatusHas("inner dimensions differ"));
}

TEST(MatMul, OutputBeyondItsPlannedShapeIsAnError) {
  auto r = runStep(
      OpKind::MatMul,
      {f32({4, 3}, std::vector<float>(12)), f32({3, 2}, std::vector<float>(6))},
      {{DType::F32, {PlanDim::dynamic(3), 2}}});
  EXPECT_THAT(r.status(), StatusHas("step 0 'step' (MatMul): output 0 'out0' "
                                    "has shape [4, 2], which does not fit the "
                                    "planned [<=3, 2]"));
}

TEST(Gemm, TransposesScalesAndAddsBroadcastBias) {
  // A^T is [2, 3], B^T is [3, 2], C is a row [2].
  std::vector<float> a = {1, 4, 2, 5, 3, 6}; // A = [3, 2]
  std::vector<float> b = {1, 0, 1, 0, 1, 1}; // B = [2, 3]
  fb::GemmAttrsT g;
  g.trans_a = true;
  g.trans_b = true;
  g.alpha = 2.0f;
  g.beta = 0.5f;
  Value y =
      run1(OpKind::Gemm, {f32({3, 2}, a), f32({2, 3}, b), f32({2}, {10, 20})},
           {DType::F32, {2, 2}}, attrs(g));
  // A^T B^T = [[1,2,3],[4,5,6]] x [[1,0],[0,1],[1,1]] = [[4,5],[10,11]].
  expectNear(y, {2, 2}, {2 * 4 + 5, 2 * 5 + 10, 2 * 10 + 5, 2 * 11 + 10});
  fb::GemmAttrsT plain;
  Value z = run1(OpKind::Gemm, {f32({1, 2}, {1, 2}), f32({2, 1}, {3, 4})},
                 {DType::F32, {1, 1}}, attrs(plain));
  expectNear(z, {1, 1}, {11});
}

TEST(Gemm, FewRowsByTransposedBEqualTheRowsAlone) {
  // A Gemm of up to 8 rows by B^T with alpha 1 (a router, as torch exports
  // nn.Linear of 2-D inputs), without C and with a bias row C [N] or
  // [1, N]: each row of the product equals that row run alone, bit for bit
  // where the CPU has AVX-512 (the register tiles), and the f64 product
  // within f32 accumulation; K = 70 (a tail) and 1000, N = 37, 1 and 3
  // threads.
  for (int64_t K : {70, 1000})
    for (int bias = 0; bias < 3; ++bias)
      for (int threads : {1, 3}) {
        const int64_t N = 37;
        std::vector<float> b = randomFloats(N * K, 7), c = randomFloats(N, 8);
        fb::GemmAttrsT g;
        g.trans_b = true;
        auto gemm = [&](const std::vector<float> &a, int64_t m) {
          std::vector<std::optional<Value>> inputs = {f32({m, K}, a),
                                                      f32({N, K}, b)};
          if (bias == 1)
            inputs.push_back(f32({N}, c));
          if (bias == 2)
            inputs.push_back(f32({1, N}, c));
          return run1(OpKind::Gemm, inputs, {DType::F32, {m, N}}, attrs(g),
                      threads);
        };
        for (int64_t m = 1; m <= 8; ++m) {
          SCOPED_TRACE(::testing::Message()
                       << "K " << K << " bias " << bias << " threads "
                       << threads << " rows " << m);
          std::vector<float> a = randomFloats(m * K, 9 + m);
          std::vector<float> y = gemm(a, m).as<float>();
          for (int64_t i = 0; i < m; ++i) {
            std::vector<float> row(a.begin() + i * K, a.begin() + (i + 1) * K);
            std::vector<float> alone = gemm(row, 1).as<float>();
            for (int64_t j = 0; j < N; ++j) {
              if (detail::hasF32Tiles())
                ASSERT_EQ(y[i * N + j], alone[j]) << i << ", " << j;
              double want = bias ? c[j] : 0.0, magnitude = std::fabs(want);
              for (int64_t p = 0; p < K; ++p) {
                want += double(a[i * K + p]) * b[j * K + p];
                magnitude += std::fabs(double(a[i * K + p]) * b[j * K + p]);
              }
              ASSERT_NEAR(y[i * N + j], want, 1e-6 * magnitude) << i << j;
            }
          }
        }
      }
}

TEST(Gemm, EmptyInnerDimensionGivesTheBias) {
  // K = 0 by a transposed B: the product is empty, the result C.
  fb::GemmAttrsT g;
  g.trans_b = true;
  Value y = run1(OpKind::Gemm,
                 {f32({2, 0}, {}), f32({3, 0}, {}), f32({3}, {1, 2, 3})},
                 {DType::F32, {2, 3}}, attrs(g));
  expectNear(y, {2, 3}, {1, 2, 3, 1, 2, 3});
}

TEST(Gemm, BiasThatDoesNotBroadcastIsAnError) {
  fb::GemmAttrsT g;
  auto r = runStep(OpKind::Gemm,
                   {f32({2, 2}, std::vector<float>(4)),
                    f32({2, 2}, std::vector<float>(4)), f32({3}, {1, 2, 3})},
                   {{DType::F32, {2, 2}}}, attrs(g));
  EXPECT_THAT(r.status(), StatusHas("does not broadcast"));
}

/// Evaluates an explicit einsum (letters only, "->" given) by brute force.
std::vector<float> naiveEinsum(const std::string &equation,
                               const std::vector<Value> &inputs,
                               std::vector<int64_t> &shape) {
  std::vector<std::string> terms;
  size_t arrow = equation.find("->");
  std::string lhs = equation.substr(0, arrow), rhs = equation.substr(arrow + 2);
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  std::map<char, int64_t> sizes;
  for (size_t t = 0; t < terms.size(); ++t)
    for (size_t d = 0; d < terms[t].size(); ++d)
      sizes[terms[t][d]] = inputs[t].shape[d];
  std::string labels;
  for (auto &[c, n] : sizes)
    labels.push_back(c);
  shape.clear();
  for (char c : rhs)
    shape.push_back(sizes[c]);
  int64_t outCount = 1;
  for (int64_t d : shape)
    outCount *= d;
  std::vector<double> out(outCount, 0.0);
  std::map<char, int64_t> index;
  for (char c : labels)
    index[c] = 0;
  while (true) {
    double product = 1;
    for (size_t t = 0; t < terms.size(); ++t) {
      int64_t offset = 0;
      for (size_t d = 0; d < terms[t].size(); ++d)
        offset = offset * inputs[t].shape[d] + index[terms[t][d]];
      product *= inputs[t].as<float>()[offset];
    }
    int64_t o = 0;
    for (size_t d = 0; d < rhs.size(); ++d)
      o = o * shape[d] + index[rhs[d]];
    out[o] += product;
    int k = static_cast<int>(labels.size()) - 1;
    for (; k >= 0; --k) {
      if (++index[labels[k]] < sizes[labels[k]])
        break;
      index[labels[k]] = 0;
    }
    if (k < 0)
      break;
  }
  return std::vector<float>(out.begin(), out.end());
}

void checkEinsum(const std::string &equation, const std::vector<Value> &inputs,
                 const std::string &reference = "") {
  std::vector<int64_t> shape;
  std::vector<float> expected =
      naiveEinsum(reference.empty() ? equation : reference, inputs, shape);
  fb::EinsumAttrsT e;
  e.equation = equation;
  std::vector<PlanDim> dims(shape.begin(), shape.end());
  std::vector<std::optional<Value>> in(inputs.begin(), inputs.end());
  Value y = run1(OpKind::Einsum, in, {DType::F32, dims}, attrs(e));
  SCOPED_TRACE(equation);
  expectNear(y, shape, expected, 1e-4f);
}

TEST(Einsum, MatchesBruteForce) {
  Value a = f32({3, 4}, randomFloats(12, 1));
  Value b = f32({4, 5}, randomFloats(20, 2));
  Value c = f32({5, 2}, randomFloats(10, 3));
  Value sq = f32({4, 4}, randomFloats(16, 4));
  Value ba = f32({2, 3, 4}, randomFloats(24, 5));
  Value bb = f32({2, 4, 5}, randomFloats(40, 6));
  Value tokens = f32({6, 4}, randomFloats(24, 7));
  Value experts = f32({3, 4, 5}, randomFloats(60, 8));
  checkEinsum("ij,jk->ik", {a, b});
  checkEinsum("ij,jk->ki", {a, b});
  checkEinsum("bij,bjk->bik", {ba, bb});
  checkEinsum("ii->i", {sq});
  checkEinsum("ij->ji", {a});
  checkEinsum("ij->", {a});
  checkEinsum("ij->j", {a});
  checkEinsum("ij,jk,kl->il", {a, b, c});
  checkEinsum("td,edf->tef", {tokens, experts});
  checkEinsum("bij,bjk->ik", {ba, bb});
  // Implicit output: labels seen once, alphabetical.
  checkEinsum("ij,jk", {a, b}, "ij,jk->ik");
  checkEinsum(
      "ba,ac",
      {f32({2, 3}, randomFloats(6, 9)), f32({3, 2}, randomFloats(6, 10))},
      "ba,ac->bc");
  // Ellipsis: leading batch dims.
  checkEinsum("...ij,...jk->...ik", {ba, bb}, "bij,bjk->bik");
  checkEinsum("i,i->", {f32({3}, {1, 2, 3}), f32({3}, {4, 5, 6})});
}

TEST(Einsum, MalformedEquationsFailAtLoad) {
  fb::EinsumAttrsT e;
  e.equation = "ij,jk->iz";
  auto r = runStep(
      OpKind::Einsum,
      {f32({2, 2}, std::vector<float>(4)), f32({2, 2}, std::vector<float>(4))},
      {{DType::F32, {2, 2}}}, attrs(e));
  EXPECT_THAT(r.status(), StatusHas("equation 'ij,jk->iz'"));
  e.equation = "ijk->i";
  r = runStep(OpKind::Einsum, {f32({2, 2}, std::vector<float>(4))},
              {{DType::F32, {2}}}, attrs(e));
  EXPECT_THAT(r.status(), StatusHas("does not match input 0 of rank 2"));
}

} // namespace
} // namespace moert::testing
