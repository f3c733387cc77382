//===- indexing_test.cpp - Gather and scatter kernels ---------------------===//

#include "test_util.h"

namespace moert::testing {
namespace {

using fb::OpKind;

fb::AttrsUnion axisAttrs(int64_t axis) {
  fb::AxisAttrsT a;
  a.axis = axis;
  return attrs(a);
}

fb::AttrsUnion scatterAttrs(int64_t axis, fb::ScatterReduction reduction) {
  fb::ScatterAttrsT s;
  s.axis = axis;
  s.reduction = reduction;
  return attrs(s);
}

Value table() { return f32({3, 2}, {1, 2, 3, 4, 5, 6}); }

TEST(Gather, RowsWithNegativeIndicesAndIndexShape) {
  Value y = run1(OpKind::Gather, {table(), i64({2, 2}, {0, -1, 1, 0})},
                 {DType::F32, {2, 2, 2}}, axisAttrs(0));
  expectNear(y, {2, 2, 2}, {1, 2, 5, 6, 3, 4, 1, 2});
  Value cols = run1(OpKind::Gather, {table(), i32({1}, {1})},
                    {DType::F32, {3, 1}}, axisAttrs(-1));
  expectNear(cols, {3, 1}, {2, 4, 6});
  Value scalar = run1(OpKind::Gather, {table(), i64({}, {2})},
                      {DType::F32, {2}}, axisAttrs(0));
  expectNear(scalar, {2}, {5, 6});
}

TEST(Gather, OutOfRangeIndexIsAnError) {
  auto r = runStep(OpKind::Gather, {table(), i64({2}, {1, 3})},
                   {{DType::F32, {2, 2}}}, axisAttrs(0));
  EXPECT_THAT(r.status(), StatusHas("index 3 at position 1 is out of range for "
                                    "a dimension of size 3"));
  r = runStep(OpKind::Gather, {table(), i64({1}, {-4})}, {{DType::F32, {1, 2}}},
              axisAttrs(0));
  EXPECT_THAT(r.status(), StatusHas("index -4"));
}

TEST(GatherElements, PicksAlongAxis) {
  Value y = run1(OpKind::GatherElements,
                 {f32({2, 3}, {1, 2, 3, 4, 5, 6}), i64({2, 2}, {2, 0, -1, 1})},
                 {DType::F32, {2, 2}}, axisAttrs(1));
  expectNear(y, {2, 2}, {3, 1, 6, 5});
  auto r = runStep(OpKind::GatherElements,
                   {f32({2, 2}, {1, 2, 3, 4}), i64({3, 1}, {0, 0, 0})},
                   {{DType::F32, {3, 1}}}, axisAttrs(1));
  EXPECT_THAT(r.status(), StatusHas("exceed data of shape [2, 2] in dim 0"));
}

TEST(GatherND, TuplesAndBatchDims) {
  Value data = f32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  fb::GatherNDAttrsT plain;
  Value y = run1(OpKind::GatherND, {data, i64({2, 2}, {0, 1, 1, 0})},
                 {DType::F32, {2, 2}}, attrs(plain));
  expectNear(y, {2, 2}, {2, 3, 4, 5});
  fb::GatherNDAttrsT batched;
  batched.batch_dims = 1;
  Value z = run1(OpKind::GatherND, {data, i64({2, 1}, {1, 0})},
                 {DType::F32, {2, 2}}, attrs(batched));
  expectNear(z, {2, 2}, {2, 3, 4, 5});
  Value w = run1(OpKind::GatherND, {data, i64({1, 3}, {1, 1, 1})},
                 {DType::F32, {1}}, attrs(plain));
  expectNear(w, {1}, {7});
}

TEST(ScatterElements, OverwriteAndAddWithDuplicates) {
  Value data = f32({2, 3}, {0, 0, 0, 0, 0, 0});
  Value idx = i64({2, 2}, {1, 1, 0, 2});
  Value upd = f32({2, 2}, {1, 2, 3, 4});
  expectNear(run1(OpKind::ScatterElements, {data, idx, upd},
                  {DType::F32, {2, 3}},
                  scatterAttrs(1, fb::ScatterReduction::Add)),
             {2, 3}, {0, 3, 0, 3, 0, 4});
  // Without reduction the later duplicate wins.
  expectNear(run1(OpKind::ScatterElements, {data, idx, upd},
                  {DType::F32, {2, 3}},
                  scatterAttrs(-1, fb::ScatterReduction::None)),
             {2, 3}, {0, 2, 0, 3, 0, 4});
  // Token combine (index_add along axis 0 of [T, H]).
  Value rows =
      run1(OpKind::ScatterElements,
           {f32({3, 2}, {1, 1, 1, 1, 1, 1}), i64({2, 2}, {2, 2, 0, 0}),
            f32({2, 2}, {5, 6, 7, 8})},
           {DType::F32, {3, 2}}, scatterAttrs(0, fb::ScatterReduction::Add));
  expectNear(rows, {3, 2}, {8, 9, 1, 1, 6, 7});
  Value max =
      run1(OpKind::ScatterElements,
           {i64({3}, {5, 5, 5}), i64({2}, {0, 1}), i64({2}, {9, 1})},
           {DType::I64, {3}}, scatterAttrs(0, fb::ScatterReduction::Max));
  EXPECT_EQ(max.as<int64_t>(), (std::vector<int64_t>{9, 5, 5}));
}

TEST(ScatterElements, BadIndexLeavesAClearError) {
  auto r =
      runStep(OpKind::ScatterElements,
              {f32({3}, {0, 0, 0}), i64({1}, {3}), f32({1}, {1})},
              {{DType::F32, {3}}}, scatterAttrs(0, fb::ScatterReduction::None));
  EXPECT_THAT(r.status(), StatusHas("index 3 at position 0 is out of range"));
}

TEST(ScatterND, SlicesWithReduction) {
  Value data = f32({3, 2}, {1, 1, 1, 1, 1, 1});
  Value y = run1(
      OpKind::ScatterND, {data, i64({2, 1}, {2, 0}), f32({2, 2}, {5, 6, 7, 8})},
      {DType::F32, {3, 2}}, scatterAttrs(0, fb::ScatterReduction::Mul));
  expectNear(y, {3, 2}, {7, 8, 1, 1, 5, 6});
  Value z =
      run1(OpKind::ScatterND, {data, i64({1, 2}, {1, 1}), f32({1}, {9})},
           {DType::F32, {3, 2}}, scatterAttrs(0, fb::ScatterReduction::None));
  expectNear(z, {3, 2}, {1, 1, 1, 9, 1, 1});
  auto r = runStep(
      OpKind::ScatterND, {data, i64({1, 1}, {0}), f32({3}, {1, 2, 3})},
      {{DType::F32, {3, 2}}}, scatterAttrs(0, fb::ScatterReduction::None));
  EXPECT_THAT(r.status(), StatusHas("updates have shape [3]; expected [1, 2]"));
}

} // namespace
} // namespace moert::testing
