//===- shape_test.cpp - Shape manipulation and data movement --------------===//

#include "test_util.h"

namespace moert::testing {
namespace {

using fb::OpKind;

Value iota(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(i);
  return f32(std::move(shape), v);
}

TEST(Reshape, CopiesInfersAndKeepsZeros) {
  fb::ReshapeAttrsT r;
  Value y = run1(OpKind::Reshape, {iota({2, 3, 4}), i64({3}, {0, -1, 2})},
                 {DType::F32, {2, 6, 2}}, attrs(r));
  expectNear(y, {2, 6, 2}, iota({24}).as<float>());
  fb::ReshapeAttrsT zero;
  zero.allowzero = true;
  Value e = run1(OpKind::Reshape, {f32({0, 3}, {}), i64({2}, {3, 0})},
                 {DType::F32, {3, 0}}, attrs(zero));
  EXPECT_EQ(e.shape, (std::vector<int64_t>{3, 0}));
}

TEST(Reshape, BadShapesAreErrors) {
  fb::ReshapeAttrsT r;
  auto two = runStep(OpKind::Reshape, {iota({4}), i64({2}, {-1, -1})},
                     {{DType::F32, {2, 2}}}, attrs(r));
  EXPECT_THAT(two.status(), StatusHas("more than one -1"));
  auto count = runStep(OpKind::Reshape, {iota({4}), i64({2}, {3, 2})},
                       {{DType::F32, {3, 2}}}, attrs(r));
  EXPECT_THAT(count.status(), StatusHas("cannot view [4]"));
}

TEST(Views, FlattenSqueezeUnsqueezeIdentity) {
  fb::AxisAttrsT axis;
  axis.axis = -1;
  expectNear(run1(OpKind::Flatten, {iota({2, 3, 2})}, {DType::F32, {6, 2}},
                  attrs(axis)),
             {6, 2}, iota({12}).as<float>());
  axis.axis = 0;
  expectNear(
      run1(OpKind::Flatten, {iota({2, 3})}, {DType::F32, {1, 6}}, attrs(axis)),
      {1, 6}, iota({6}).as<float>());
  EXPECT_EQ(run1(OpKind::Squeeze, {iota({1, 3, 1}), i64({1}, {-1})},
                 {DType::F32, {1, 3}})
                .shape,
            (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(run1(OpKind::Squeeze, {iota({1, 3, 1})}, {DType::F32, {3}}).shape,
            (std::vector<int64_t>{3}));
  EXPECT_EQ(run1(OpKind::Unsqueeze, {iota({3}), i64({2}, {0, -1})},
                 {DType::F32, {1, 3, 1}})
                .shape,
            (std::vector<int64_t>{1, 3, 1}));
  // A scalar is one axis, as onnxruntime reads Unsqueeze's (a fuzz find:
  // moec wrote such a step and the loader refused the plan).
  EXPECT_EQ(
      run1(OpKind::Unsqueeze, {iota({3}), i64({}, {-1})}, {DType::F32, {3, 1}})
          .shape,
      (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(
      run1(OpKind::Squeeze, {iota({3, 1}), i64({}, {1})}, {DType::F32, {3}})
          .shape,
      (std::vector<int64_t>{3}));
  expectNear(run1(OpKind::Identity, {iota({2})}, {DType::F32, {2}}), {2},
             {0, 1});
  auto r = runStep(OpKind::Squeeze, {iota({2, 3}), i64({1}, {0})},
                   {{DType::F32, {3}}});
  EXPECT_THAT(r.status(), StatusHas("cannot squeeze axis 0 of size 2"));
  r = runStep(OpKind::Unsqueeze, {iota({3}), i64({1, 1}, {0})},
              {{DType::F32, {1, 3}}});
  EXPECT_THAT(r.status(), StatusHas("axes (input 1) has rank 2; expected a "
                                    "scalar or 1-D"));
}

TEST(Transpose, PermutationsAndDefaultReverse) {
  fb::TransposeAttrsT t;
  t.perm = {2, 0, 1};
  Value y = run1(OpKind::Transpose, {iota({2, 3, 4})}, {DType::F32, {4, 2, 3}},
                 attrs(t));
  std::vector<float> expected;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        expected.push_back(static_cast<float>((i * 3 + j) * 4 + k));
  expectNear(y, {4, 2, 3}, expected);
  fb::TransposeAttrsT reverse;
  Value z = run1(OpKind::Transpose, {i64({2, 2}, {1, 2, 3, 4})},
                 {DType::I64, {2, 2}}, attrs(reverse));
  EXPECT_EQ(z.as<int64_t>(), (std::vector<int64_t>{1, 3, 2, 4}));
  fb::TransposeAttrsT bad;
  bad.perm = {0, 0};
  auto r = runStep(OpKind::Transpose, {iota({2, 2})}, {{DType::F32, {2, 2}}},
                   attrs(bad));
  EXPECT_THAT(r.status(), StatusHas("perm is not a permutation"));
}

TEST(Concat, NegativeAxis) {
  fb::AxisAttrsT a;
  a.axis = -1;
  Value y =
      run1(OpKind::Concat, {f32({2, 1}, {1, 2}), f32({2, 2}, {3, 4, 5, 6})},
           {DType::F32, {2, 3}}, attrs(a));
  expectNear(y, {2, 3}, {1, 3, 4, 2, 5, 6});
  auto r =
      runStep(OpKind::Concat, {f32({2, 1}, {1, 2}), f32({3, 1}, {3, 4, 5})},
              {{DType::F32, {5, 1}}}, attrs(a));
  EXPECT_THAT(r.status(), StatusHas("does not match input 0"));
}

TEST(Split, SizesEqualPartsAndUnevenTail) {
  fb::SplitAttrsT s;
  s.axis = 1;
  auto r = runStep(OpKind::Split, {iota({2, 5}), i64({2}, {2, 3})},
                   {{DType::F32, {2, 2}}, {DType::F32, {2, 3}}}, attrs(s));
  ASSERT_TRUE(r.ok()) << r.status();
  expectNear((*r)[0], {2, 2}, {0, 1, 5, 6});
  expectNear((*r)[1], {2, 3}, {2, 3, 4, 7, 8, 9});
  fb::SplitAttrsT parts;
  parts.num_outputs = 2;
  r = runStep(OpKind::Split, {iota({5})},
              {{DType::F32, {3}}, {DType::F32, {2}}}, attrs(parts));
  ASSERT_TRUE(r.ok()) << r.status();
  expectNear((*r)[0], {3}, {0, 1, 2});
  expectNear((*r)[1], {2}, {3, 4});
  r = runStep(OpKind::Split, {iota({5}), i64({2}, {2, 2})},
              {{DType::F32, {2}}, {DType::F32, {2}}}, attrs(fb::SplitAttrsT()));
  EXPECT_THAT(r.status(), StatusHas("sum to 4, not the axis size 5"));
}

TEST(Slice, StepsClampingAndNegativeIndices) {
  Value x = iota({10});
  // x[8:2:-2] = 8, 6, 4.
  Value y =
      run1(OpKind::Slice,
           {x, i64({1}, {8}), i64({1}, {2}), i64({1}, {0}), i64({1}, {-2})},
           {DType::F32, {3}});
  expectNear(y, {3}, {8, 6, 4});
  // x[-3:100] = 7, 8, 9.
  Value z = run1(OpKind::Slice, {x, i64({1}, {-3}), i64({1}, {100})},
                 {DType::F32, {3}});
  expectNear(z, {3}, {7, 8, 9});
  // Reverse everything with INT64_MIN end.
  Value w = run1(OpKind::Slice,
                 {iota({4}), i64({1}, {-1}), i64({1}, {INT64_MIN}),
                  std::nullopt, i64({1}, {-1})},
                 {DType::F32, {4}});
  expectNear(w, {4}, {3, 2, 1, 0});
  // 2-D: rows 1..2, every other column from 0.
  Value m = run1(OpKind::Slice,
                 {iota({3, 4}), i64({2}, {1, 0}), i64({2}, {3, 4}),
                  i64({2}, {0, 1}), i64({2}, {1, 2})},
                 {DType::F32, {2, 2}});
  expectNear(m, {2, 2}, {4, 6, 8, 10});
  // Empty result.
  Value e = run1(OpKind::Slice, {x, i64({1}, {5}), i64({1}, {2})},
                 {DType::F32, {PlanDim::dynamic(10)}});
  EXPECT_EQ(e.shape, (std::vector<int64_t>{0}));
  auto r =
      runStep(OpKind::Slice,
              {x, i64({1}, {0}), i64({1}, {5}), std::nullopt, i64({1}, {0})},
              {{DType::F32, {PlanDim::dynamic(10)}}});
  EXPECT_THAT(r.status(), StatusHas("step of axis 0 is 0"));
}

TEST(Expand, BidirectionalBroadcast) {
  Value y = run1(OpKind::Expand, {f32({3, 1}, {1, 2, 3}), i64({2}, {1, 2})},
                 {DType::F32, {3, 2}});
  expectNear(y, {3, 2}, {1, 1, 2, 2, 3, 3});
  Value z = run1(OpKind::Expand, {i64({2}, {4, 5}), i64({3}, {2, 1, 2})},
                 {DType::I64, {2, 1, 2}});
  EXPECT_EQ(z.as<int64_t>(), (std::vector<int64_t>{4, 5, 4, 5}));
}

TEST(Tile, RepeatsEveryDim) {
  Value y = run1(OpKind::Tile, {f32({2, 2}, {1, 2, 3, 4}), i64({2}, {2, 3})},
                 {DType::F32, {4, 6}});
  expectNear(y, {4, 6}, {1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,
                         1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4});
}

TEST(ShapeOps, ShapeSizeConstantOfShape) {
  fb::ShapeAttrsT all;
  EXPECT_EQ(
      run1(OpKind::Shape, {iota({2, 3, 4})}, {DType::I64, {3}}, attrs(all))
          .as<int64_t>(),
      (std::vector<int64_t>{2, 3, 4}));
  fb::ShapeAttrsT tail;
  tail.start = -2;
  EXPECT_EQ(
      run1(OpKind::Shape, {iota({2, 3, 4})}, {DType::I64, {2}}, attrs(tail))
          .as<int64_t>(),
      (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(run1(OpKind::Size, {iota({2, 3})}, {DType::I64, {}}).as<int64_t>(),
            (std::vector<int64_t>{6}));
  fb::ConstantOfShapeAttrsT c;
  c.dtype = fb::DType::I64;
  c.int_value = 7;
  EXPECT_EQ(run1(OpKind::ConstantOfShape, {i64({2}, {1, 2})},
                 {DType::I64, {1, 2}}, attrs(c))
                .as<int64_t>(),
            (std::vector<int64_t>{7, 7}));
  fb::ConstantOfShapeAttrsT f;
  f.float_value = 0.5f;
  expectNear(run1(OpKind::ConstantOfShape, {i64({1}, {3})}, {DType::F32, {3}},
                  attrs(f)),
             {3}, {0.5f, 0.5f, 0.5f});
}

TEST(Range, FloatAndIntegerCounts) {
  Value y = run1(OpKind::Range, {f32({}, {1}), f32({}, {2}), f32({}, {0.3f})},
                 {DType::F32, {PlanDim::dynamic(8)}});
  expectNear(y, {4}, {1, 1.3f, 1.6f, 1.9f});
  Value z = run1(OpKind::Range, {i64({}, {10}), i64({}, {3}), i64({}, {-3})},
                 {DType::I64, {PlanDim::dynamic(8)}});
  EXPECT_EQ(z.as<int64_t>(), (std::vector<int64_t>{10, 7, 4}));
  Value e = run1(OpKind::Range, {i64({}, {3}), i64({}, {3}), i64({}, {1})},
                 {DType::I64, {PlanDim::dynamic(8)}});
  EXPECT_EQ(e.shape, (std::vector<int64_t>{0}));
  auto r = runStep(OpKind::Range, {i64({}, {0}), i64({}, {100}), i64({}, {1})},
                   {{DType::I64, {PlanDim::dynamic(8)}}});
  EXPECT_THAT(r.status(), StatusHas("dim 0 exceeds its bound 8"));
}

TEST(Trilu, UpperAndLowerWithDiagonalOffset) {
  fb::TriluAttrsT upper;
  Value y = run1(OpKind::Trilu, {iota({3, 3}), i64({}, {1})},
                 {DType::F32, {3, 3}}, attrs(upper));
  expectNear(y, {3, 3}, {0, 1, 2, 0, 0, 5, 0, 0, 0});
  fb::TriluAttrsT lower;
  lower.upper = false;
  Value z = run1(OpKind::Trilu, {iota({2, 2, 3})}, {DType::F32, {2, 2, 3}},
                 attrs(lower));
  expectNear(z, {2, 2, 3}, {0, 0, 0, 3, 4, 0, 6, 0, 0, 9, 10, 0});
}

TEST(OneHot, NegativeIndicesOutOfRangeAndAxis) {
  fb::AxisAttrsT last;
  last.axis = -1;
  Value y = run1(OpKind::OneHot,
                 {i64({4}, {0, 2, -1, 5}), i64({}, {3}), f32({2}, {0, 1})},
                 {DType::F32, {4, 3}}, attrs(last));
  expectNear(y, {4, 3}, {1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0});
  fb::AxisAttrsT first;
  first.axis = 0;
  Value z =
      run1(OpKind::OneHot, {i64({2}, {1, 0}), f32({}, {2}), i64({2}, {-1, 7})},
           {DType::I64, {2, 2}}, attrs(first));
  EXPECT_EQ(z.as<int64_t>(), (std::vector<int64_t>{-1, 7, 7, -1}));
}

TEST(NonZero, DynamicCountInRowMajorOrder) {
  Value y = run1(OpKind::NonZero, {f32({2, 3}, {0, 1, 0, 2, 0, 3})},
                 {DType::I64, {2, PlanDim::dynamic(6)}});
  EXPECT_EQ(y.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y.as<int64_t>(), (std::vector<int64_t>{0, 1, 1, 1, 0, 2}));
  Value none = run1(OpKind::NonZero, {boolean({3}, {0, 0, 0})},
                    {DType::I64, {1, PlanDim::dynamic(3)}});
  EXPECT_EQ(none.shape, (std::vector<int64_t>{1, 0}));
}

} // namespace
} // namespace moert::testing
