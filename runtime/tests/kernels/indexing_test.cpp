//===- indexing_test.cpp - Gather and scatter kernels ---------------------===//

#include "format/float16.h"
#include "format/plan_writer.h"
#include "plan_bytes.h"
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

/// A plan gathering rows `rows` of a [7, 37] table stored as `dtype` (the
/// writer narrowing its f32 `values`) into f32, as moec writes a narrowed
/// embedding (format 1.19).
absl::StatusOr<std::vector<uint8_t>>
wideningGatherPlan(DType dtype, const std::vector<float> &values,
                   const std::vector<int64_t> &rows) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int64_t n = static_cast<int64_t>(rows.size());
  int32_t ids = s.addTensor("ids", DType::I64, {PlanDim(n)});
  s.addInput(ids);
  int32_t table = s.addNarrowedWeightPieces(
      "table", dtype, {7, 37}, {{values.data(), values.size() * 4}});
  int32_t y = s.addTensor("y", DType::F32, {PlanDim(n), PlanDim(37)});
  s.addOutput(y);
  s.addStep(OpKind::Gather, "embed", {table, ids}, {y}, axisAttrs(0));
  return writer.serialize();
}

TEST(Gather, WidensANarrowedTableExactly) {
  std::vector<float> values = randomFloats(7 * 37, 5);
  std::vector<int64_t> rows = {6, 0, 3, 3, -1};
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtypeName(dtype));
    absl::StatusOr<std::vector<uint8_t>> bytes =
        wideningGatherPlan(dtype, values, rows);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    std::unique_ptr<Plan> plan;
    auto session = openSession(*bytes, 2, plan);
    ASSERT_TRUE(session.ok()) << session.status();
    EXPECT_EQ(plan->versionMinor(), detail::kFormatVersionMinorWideningGather);
    ASSERT_TRUE((*session)
                    ->setInput("ids", DType::I64, {5}, rows.data(), 5 * 8)
                    .ok());
    ASSERT_TRUE((*session)->run().ok());
    absl::StatusOr<Value> y = outputValue(**session, "y");
    ASSERT_TRUE(y.ok()) << y.status();
    std::vector<float> got = y->as<float>();
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t c = 0; c < 37; ++c) {
        float w = values[(rows[i] + (rows[i] < 0 ? 7 : 0)) * 37 + c];
        float want = dtype == DType::BF16
                         ? detail::bfloatToFloat(detail::floatToBfloat(w))
                         : detail::halfToFloat(detail::floatToHalf(w));
        ASSERT_EQ(got[i * 37 + c], want) << i << ", " << c;
      }
    std::vector<uint8_t> older =
        rewrite(*bytes, [](detail::FileHeader &header, auto &) {
          header.versionMinor = detail::kFormatVersionMinorGridSample;
        });
    EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
                StatusHas("is a Gather that widens its table, which needs "
                          "format 1.19, but the file is version 1.18"));
  }
  // Only a weight table widens: a bf16 input is a type error.
  auto r = runStep(OpKind::Gather,
                   {Value::of(DType::BF16, {2, 2}, std::vector<uint16_t>(4)),
                    i64({1}, {1})},
                   {{DType::F32, {1, 2}}}, axisAttrs(0));
  EXPECT_THAT(r.status(), StatusHas("widens only a weight table"));
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
