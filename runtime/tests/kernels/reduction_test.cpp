//===- reduction_test.cpp - Reductions, ArgMax, CumSum, Softmax, TopK -----===//

#include "test_util.h"

#include <cmath>

namespace moert::testing {
namespace {

using fb::OpKind;

fb::AttrsUnion reduceAttrs(bool keepdims, bool noop = false) {
  fb::ReduceAttrsT r;
  r.keepdims = keepdims;
  r.noop_with_empty_axes = noop;
  return attrs(r);
}

// x = [[[0, 1, 2], [3, 4, 5]], [[6, 7, 8], [9, 10, 11]]], shape [2, 2, 3].
Value x223() {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i)
    v[i] = static_cast<float>(i);
  return f32({2, 2, 3}, v);
}

TEST(Reduce, SumOverOneAxisWithAndWithoutKeepdims) {
  expectNear(run1(OpKind::ReduceSum, {x223(), i64({1}, {1})},
                  {DType::F32, {2, 1, 3}}, reduceAttrs(true)),
             {2, 1, 3}, {3, 5, 7, 15, 17, 19});
  expectNear(run1(OpKind::ReduceSum, {x223(), i64({1}, {-1})},
                  {DType::F32, {2, 2}}, reduceAttrs(false)),
             {2, 2}, {3, 12, 21, 30});
}

TEST(Reduce, NonAdjacentAxesAndAllAxes) {
  // Axes {0, 2}: sum over i and k of x[i][j][k].
  expectNear(run1(OpKind::ReduceSum, {x223(), i64({2}, {0, -1})},
                  {DType::F32, {2}}, reduceAttrs(false)),
             {2}, {0 + 1 + 2 + 6 + 7 + 8, 3 + 4 + 5 + 9 + 10 + 11});
  expectNear(run1(OpKind::ReduceSum, {x223(), std::nullopt},
                  {DType::F32, {1, 1, 1}}, reduceAttrs(true)),
             {1, 1, 1}, {66});
  expectNear(run1(OpKind::ReduceSum, {x223(), i64({0}, {})},
                  {DType::F32, {2, 2, 3}}, reduceAttrs(true, true)),
             {2, 2, 3}, x223().as<float>());
}

TEST(Reduce, MeanMaxMinAndIntegers) {
  expectNear(run1(OpKind::ReduceMean, {x223(), i64({1}, {0})},
                  {DType::F32, {2, 3}}, reduceAttrs(false)),
             {2, 3}, {3, 4, 5, 6, 7, 8});
  expectNear(run1(OpKind::ReduceMax, {x223(), i64({2}, {1, 2})},
                  {DType::F32, {2}}, reduceAttrs(false)),
             {2}, {5, 11});
  expectNear(run1(OpKind::ReduceMin, {x223(), i64({1}, {2})},
                  {DType::F32, {2, 2, 1}}, reduceAttrs(true)),
             {2, 2, 1}, {0, 3, 6, 9});
  Value s = run1(OpKind::ReduceSum, {i64({2, 2}, {1, 2, 3, 4}), i64({1}, {0})},
                 {DType::I64, {2}}, reduceAttrs(false));
  EXPECT_EQ(s.as<int64_t>(), (std::vector<int64_t>{4, 6}));
  // An empty reduction: sum 0, max -inf.
  expectNear(run1(OpKind::ReduceMax, {f32({2, 0}, {}), i64({1}, {1})},
                  {DType::F32, {2}}, reduceAttrs(false)),
             {2}, {-INFINITY, -INFINITY});
}

TEST(Reduce, RepeatedAxisIsAnError) {
  auto r = runStep(OpKind::ReduceSum, {x223(), i64({2}, {1, -2})},
                   {{DType::F32, {2, 3}}}, reduceAttrs(false));
  EXPECT_THAT(r.status(), StatusHas("is repeated"));
}

TEST(ArgMax, FirstOrLastMaximum) {
  Value x = f32({2, 4}, {1, 5, 5, 2, 7, 0, 7, 7});
  fb::ArgMaxAttrsT a;
  a.axis = -1;
  a.keepdims = false;
  EXPECT_EQ(
      run1(OpKind::ArgMax, {x}, {DType::I64, {2}}, attrs(a)).as<int64_t>(),
      (std::vector<int64_t>{1, 0}));
  a.select_last_index = true;
  EXPECT_EQ(
      run1(OpKind::ArgMax, {x}, {DType::I64, {2}}, attrs(a)).as<int64_t>(),
      (std::vector<int64_t>{2, 3}));
  fb::ArgMaxAttrsT b;
  b.axis = 0;
  EXPECT_EQ(
      run1(OpKind::ArgMax, {x}, {DType::I64, {1, 4}}, attrs(b)).as<int64_t>(),
      (std::vector<int64_t>{1, 0, 1, 1}));
}

TEST(CumSum, ForwardReverseExclusive) {
  Value x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  fb::CumSumAttrsT plain;
  expectNear(run1(OpKind::CumSum, {x, i64({}, {1})}, {DType::F32, {2, 3}},
                  attrs(plain)),
             {2, 3}, {1, 3, 6, 4, 9, 15});
  expectNear(run1(OpKind::CumSum, {x, i32({1}, {0})}, {DType::F32, {2, 3}},
                  attrs(plain)),
             {2, 3}, {1, 2, 3, 5, 7, 9});
  fb::CumSumAttrsT both;
  both.exclusive = true;
  both.reverse = true;
  expectNear(run1(OpKind::CumSum, {x, i64({}, {-1})}, {DType::F32, {2, 3}},
                  attrs(both)),
             {2, 3}, {5, 3, 0, 11, 6, 0});
  Value i = run1(OpKind::CumSum, {i64({4}, {1, 1, 1, 1}), i64({}, {0})},
                 {DType::I64, {4}}, attrs(plain));
  EXPECT_EQ(i.as<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4}));
}

std::vector<float> softmaxRows(const std::vector<float> &x, int rows, int n,
                               bool log) {
  std::vector<float> y(x.size());
  for (int r = 0; r < rows; ++r) {
    double max = -INFINITY, sum = 0;
    for (int i = 0; i < n; ++i)
      max = std::max<double>(max, x[r * n + i]);
    for (int i = 0; i < n; ++i)
      sum += std::exp(x[r * n + i] - max);
    for (int i = 0; i < n; ++i)
      y[r * n + i] =
          static_cast<float>(log ? x[r * n + i] - max - std::log(sum)
                                 : std::exp(x[r * n + i] - max) / sum);
  }
  return y;
}

TEST(Softmax, LastAxisAndLogSoftmax) {
  std::vector<float> x = randomFloats(4 * 7, 11);
  x[3] = 80.0f; // Large values stay finite (max subtraction).
  fb::AxisAttrsT last;
  last.axis = -1;
  expectNear(run1(OpKind::Softmax, {f32({4, 7}, x)}, {DType::F32, {4, 7}},
                  attrs(last)),
             {4, 7}, softmaxRows(x, 4, 7, false));
  expectNear(run1(OpKind::LogSoftmax, {f32({4, 7}, x)}, {DType::F32, {4, 7}},
                  attrs(last)),
             {4, 7}, softmaxRows(x, 4, 7, true));
}

TEST(Softmax, InnerAxisOfRank3) {
  // Softmax over axis 1 of [2, 3, 2] equals a softmax of the transposed rows.
  std::vector<float> x = randomFloats(12, 12);
  fb::AxisAttrsT mid;
  mid.axis = 1;
  Value y = run1(OpKind::Softmax, {f32({2, 3, 2}, x)}, {DType::F32, {2, 3, 2}},
                 attrs(mid));
  std::vector<float> rows(12);
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 2; ++c)
      for (int b = 0; b < 3; ++b)
        rows[(a * 2 + c) * 3 + b] = x[(a * 3 + b) * 2 + c];
  std::vector<float> s = softmaxRows(rows, 4, 3, false), expected(12);
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 2; ++c)
      for (int b = 0; b < 3; ++b)
        expected[(a * 3 + b) * 2 + c] = s[(a * 2 + c) * 3 + b];
  expectNear(y, {2, 3, 2}, expected);
}

TEST(TopK, LargestSmallestTiesAndAxis) {
  Value x = f32({2, 5}, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3});
  fb::TopKAttrsT largest;
  auto r =
      runStep(OpKind::TopK, {x, i64({1}, {3})},
              {{DType::F32, {2, 3}}, {DType::I64, {2, 3}}}, attrs(largest));
  ASSERT_TRUE(r.ok()) << r.status();
  expectNear((*r)[0], {2, 3}, {5, 4, 3, 9, 6, 5});
  EXPECT_EQ((*r)[1].as<int64_t>(), (std::vector<int64_t>{4, 2, 0, 0, 2, 3}));
  fb::TopKAttrsT smallest;
  smallest.largest = false;
  r = runStep(OpKind::TopK, {x, i64({1}, {2})},
              {{DType::F32, {2, 2}}, {DType::I64, {2, 2}}}, attrs(smallest));
  ASSERT_TRUE(r.ok()) << r.status();
  expectNear((*r)[0], {2, 2}, {1, 1, 2, 3});
  // Equal values: the lower index first.
  EXPECT_EQ((*r)[1].as<int64_t>(), (std::vector<int64_t>{1, 3, 1, 4}));
  fb::TopKAttrsT axis0;
  axis0.axis = 0;
  r = runStep(OpKind::TopK, {x, i64({1}, {1})},
              {{DType::F32, {1, 5}}, {DType::I64, {1, 5}}}, attrs(axis0));
  ASSERT_TRUE(r.ok()) << r.status();
  expectNear((*r)[0], {1, 5}, {9, 2, 6, 5, 5});
  EXPECT_EQ((*r)[1].as<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1, 0}));
}

TEST(TopK, KLargerThanTheAxisIsAnError) {
  fb::TopKAttrsT t;
  auto r = runStep(OpKind::TopK, {f32({3}, {1, 2, 3}), i64({1}, {4})},
                   {{DType::F32, {PlanDim::dynamic(4)}},
                    {DType::I64, {PlanDim::dynamic(4)}}},
                   attrs(t));
  EXPECT_THAT(r.status(), StatusHas("K = 4 is not in [0, 3]"));
}

} // namespace
} // namespace moert::testing
