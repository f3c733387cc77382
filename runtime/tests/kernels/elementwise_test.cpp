//===- elementwise_test.cpp - Elementwise kernels -------------------------===//

#include "test_util.h"

#include <cmath>
#include <functional>

namespace moert::testing {
namespace {

using fb::OpKind;

Out f32Out(std::vector<PlanDim> dims) { return {DType::F32, std::move(dims)}; }

TEST(Elementwise, AddBroadcastsTrailingVector) {
  Value y = run1(OpKind::Add,
                 {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({3}, {10, 20, 30})},
                 f32Out({2, 3}));
  expectNear(y, {2, 3}, {11, 22, 33, 14, 25, 36});
}

TEST(Elementwise, SubBroadcastsBothWays) {
  // [2, 1] - [1, 3] -> [2, 3].
  Value y = run1(OpKind::Sub, {f32({2, 1}, {1, 2}), f32({1, 3}, {1, 2, 3})},
                 f32Out({2, 3}));
  expectNear(y, {2, 3}, {0, -1, -2, 1, 0, -1});
}

TEST(Elementwise, MulWithScalarAndHigherRank) {
  Value y = run1(OpKind::Mul, {f32({}, {2}), f32({2, 1, 2}, {1, 2, 3, 4})},
                 f32Out({2, 1, 2}));
  expectNear(y, {2, 1, 2}, {2, 4, 6, 8});
}

TEST(Elementwise, BroadcastMiddleDimensionMatchesReference) {
  // [4, 1, 5] / [3, 1] -> [4, 3, 5], checked against index arithmetic.
  std::vector<float> a = randomFloats(20, 1), b = {1.5f, -2.0f, 4.0f};
  Value y =
      run1(OpKind::Div, {f32({4, 1, 5}, a), f32({3, 1}, b)}, f32Out({4, 3, 5}));
  std::vector<float> expected;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 5; ++k)
        expected.push_back(a[i * 5 + k] / b[j]);
  expectNear(y, {4, 3, 5}, expected);
}

TEST(Elementwise, LargeTensorRunsInParallel) {
  // More elements than one parallel task takes, with a broadcast operand.
  const int64_t rows = 300, cols = 257;
  std::vector<float> a = randomFloats(rows * cols, 2),
                     b = randomFloats(cols, 3);
  Value y = run1(OpKind::Add, {f32({rows, cols}, a), f32({cols}, b)},
                 f32Out({rows, cols}), {}, /*threads=*/4);
  std::vector<float> expected(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    expected[i] = a[i] + b[i % cols];
  expectNear(y, {rows, cols}, expected);
}

TEST(Elementwise, IncompatibleShapesAreAnError) {
  auto r = runStep(OpKind::Add,
                   {f32({2, 3}, std::vector<float>(6)), f32({2}, {1, 2})},
                   {f32Out({PlanDim::dynamic(3), PlanDim::dynamic(3)})});
  EXPECT_THAT(r.status(), StatusHas("do not broadcast"));
}

TEST(Elementwise, IntegerDivisionTruncatesAndRejectsZero) {
  Value y =
      run1(OpKind::Div, {i64({4}, {7, -7, 7, -7}), i64({4}, {2, 2, -2, -2})},
           {DType::I64, {4}});
  EXPECT_EQ(y.as<int64_t>(), (std::vector<int64_t>{3, -3, -3, 3}));
  auto r = runStep(OpKind::Div, {i64({2}, {1, 2}), i64({2}, {1, 0})},
                   {{DType::I64, {2}}});
  EXPECT_THAT(r.status(), StatusHas("division by zero"));
}

TEST(Elementwise, ModFollowsDivisorSignUnlessFmod) {
  fb::ModAttrsT python;
  Value y =
      run1(OpKind::Mod, {i32({4}, {7, -7, 7, -7}), i32({4}, {3, 3, -3, -3})},
           {DType::I32, {4}}, attrs(python));
  EXPECT_EQ(y.as<int32_t>(), (std::vector<int32_t>{1, 2, -2, -1}));
  fb::ModAttrsT c;
  c.fmod = true;
  Value z = run1(OpKind::Mod, {f32({2}, {7.5f, -7.5f}), f32({2}, {2, 2})},
                 f32Out({2}), attrs(c));
  expectNear(z, {2}, {1.5f, -1.5f});
  auto r = runStep(OpKind::Mod, {f32({1}, {1}), f32({1}, {1})}, {f32Out({1})},
                   attrs(python));
  EXPECT_THAT(r.status(), StatusHas("fmod must be 1"));
}

TEST(Elementwise, PowMixesBaseAndExponentTypes) {
  Value y =
      run1(OpKind::Pow, {f32({3}, {2, 4, 9}), f32({1}, {0.5f})}, f32Out({3}));
  expectNear(y, {3}, {std::sqrt(2.0f), 2, 3});
  Value z =
      run1(OpKind::Pow, {f32({2}, {2, 3}), i64({2}, {3, 2})}, f32Out({2}));
  expectNear(z, {2}, {8, 9});
  Value w = run1(OpKind::Pow, {i64({2}, {2, -3}), i64({2}, {10, 3})},
                 {DType::I64, {2}});
  EXPECT_EQ(w.as<int64_t>(), (std::vector<int64_t>{1024, -27}));
}

TEST(Elementwise, VariadicMinMaxSumBroadcastAndPropagateNaN) {
  float nan = std::nanf("");
  Value sum =
      run1(OpKind::Sum,
           {f32({2, 2}, {1, 2, 3, 4}), f32({2}, {10, 20}), f32({}, {100})},
           f32Out({2, 2}));
  expectNear(sum, {2, 2}, {111, 122, 113, 124});
  Value max = run1(OpKind::Max, {f32({3}, {1, nan, 5}), f32({3}, {2, 0, 4})},
                   f32Out({3}));
  expectNear(max, {3}, {2, nan, 5});
  Value min = run1(OpKind::Min, {i64({3}, {1, -4, 5})}, {DType::I64, {3}});
  EXPECT_EQ(min.as<int64_t>(), (std::vector<int64_t>{1, -4, 5}));
}

struct UnaryCase {
  OpKind op;
  std::function<float(float)> reference;
};

TEST(Elementwise, UnaryFunctionsMatchTheirDefinitions) {
  std::vector<float> x = {-3.5f, -1.0f, -0.25f, 0.0f, 0.3f, 1.0f, 2.5f, 20.0f};
  std::vector<float> positive = {0.01f, 0.5f, 1.0f, 2.0f, 9.0f, 100.0f};
  auto gelu = [](float v) {
    return 0.5f * v * (1.0f + std::erf(v / std::sqrt(2.0f)));
  };
  std::vector<UnaryCase> cases = {
      {OpKind::Exp, [](float v) { return std::exp(v); }},
      {OpKind::Tanh, [](float v) { return std::tanh(v); }},
      {OpKind::Erf, [](float v) { return std::erf(v); }},
      {OpKind::Sigmoid, [](float v) { return 1.0f / (1.0f + std::exp(-v)); }},
      {OpKind::Relu, [](float v) { return v > 0 ? v : 0.0f; }},
      {OpKind::Sign,
       [](float v) { return v > 0   ? 1.0f
                            : v < 0 ? -1.0f
                                    : 0.0f; }},
      {OpKind::Neg, [](float v) { return -v; }},
      {OpKind::Abs, [](float v) { return std::fabs(v); }},
      {OpKind::Sin, [](float v) { return std::sin(v); }},
      {OpKind::Cos, [](float v) { return std::cos(v); }},
      {OpKind::Floor, [](float v) { return std::floor(v); }},
      {OpKind::Ceil, [](float v) { return std::ceil(v); }},
      {OpKind::Softplus,
       [](float v) {
         return static_cast<float>(std::log1p(std::exp(double(v))));
       }},
  };
  for (const UnaryCase &c : cases) {
    Value y = run1(c.op, {f32({8}, x)}, f32Out({8}));
    std::vector<float> expected;
    for (float v : x)
      expected.push_back(c.reference(v));
    SCOPED_TRACE(fb::EnumNameOpKind(c.op));
    expectNear(y, {8}, expected);
  }
  for (auto [op, fn] : std::vector<std::pair<OpKind, float (*)(float)>>{
           {OpKind::Sqrt, [](float v) { return std::sqrt(v); }},
           {OpKind::Log, [](float v) { return std::log(v); }},
           {OpKind::Reciprocal, [](float v) { return 1.0f / v; }}}) {
    Value y = run1(op, {f32({6}, positive)}, f32Out({6}));
    std::vector<float> expected;
    for (float v : positive)
      expected.push_back(fn(v));
    expectNear(y, {6}, expected);
  }
  fb::GeluAttrsT exact;
  Value g = run1(OpKind::Gelu, {f32({8}, x)}, f32Out({8}), attrs(exact));
  std::vector<float> expected;
  for (float v : x)
    expected.push_back(gelu(v));
  expectNear(g, {8}, expected);
  fb::GeluAttrsT tanh;
  tanh.approximate = fb::GeluApproximation::Tanh;
  Value t = run1(OpKind::Gelu, {f32({8}, x)}, f32Out({8}), attrs(tanh));
  expectNear(t, {8}, expected, 2e-3f);
}

TEST(Elementwise, GeluOverManyElementsMatchesItsDefinitions) {
  // 1003 values over [-9, 9]: the vector loops of every width run, and
  // their tails; against both formulas in double.
  const int64_t n = 1003;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = -9.0f + 18.0f * static_cast<float>(i) / (n - 1);
  std::vector<float> exact, tanhForm;
  for (float v : x) {
    double d = v;
    exact.push_back(
        static_cast<float>(0.5 * d * (1.0 + std::erf(d / std::sqrt(2.0)))));
    double u = std::sqrt(2.0 / M_PI) * (d + 0.044715 * d * d * d);
    tanhForm.push_back(static_cast<float>(0.5 * d * (1.0 + std::tanh(u))));
  }
  fb::GeluAttrsT erf;
  expectNear(run1(OpKind::Gelu, {f32({n}, x)}, f32Out({n}), attrs(erf)), {n},
             exact);
  fb::GeluAttrsT tanh;
  tanh.approximate = fb::GeluApproximation::Tanh;
  expectNear(run1(OpKind::Gelu, {f32({n}, x)}, f32Out({n}), attrs(tanh)), {n},
             tanhForm);
}

TEST(Elementwise, IntegerNegAbsReluSign) {
  Value neg = run1(OpKind::Neg, {i64({3}, {1, -2, 0})}, {DType::I64, {3}});
  EXPECT_EQ(neg.as<int64_t>(), (std::vector<int64_t>{-1, 2, 0}));
  Value abs = run1(OpKind::Abs, {i32({3}, {1, -2, 0})}, {DType::I32, {3}});
  EXPECT_EQ(abs.as<int32_t>(), (std::vector<int32_t>{1, 2, 0}));
  Value relu = run1(OpKind::Relu, {i32({3}, {1, -2, 0})}, {DType::I32, {3}});
  EXPECT_EQ(relu.as<int32_t>(), (std::vector<int32_t>{1, 0, 0}));
  Value sign = run1(OpKind::Sign, {i64({3}, {7, -2, 0})}, {DType::I64, {3}});
  EXPECT_EQ(sign.as<int64_t>(), (std::vector<int64_t>{1, -1, 0}));
}

TEST(Elementwise, FloatOnlyOpsRejectIntegersAtLoad) {
  auto r = runStep(OpKind::Exp, {i64({1}, {1})}, {{DType::I64, {1}}});
  EXPECT_THAT(r.status(), StatusHas("has dtype i64; expected f32"));
}

TEST(Elementwise, ComparisonsProduceBool) {
  Value a = f32({4}, {1, 2, 3, 4});
  Value b = f32({}, {2.5f});
  std::vector<std::pair<OpKind, std::vector<uint8_t>>> cases = {
      {OpKind::Equal, {0, 0, 0, 0}},
      {OpKind::Less, {1, 1, 0, 0}},
      {OpKind::LessOrEqual, {1, 1, 0, 0}},
      {OpKind::Greater, {0, 0, 1, 1}},
      {OpKind::GreaterOrEqual, {0, 0, 1, 1}}};
  for (auto &[op, expected] : cases) {
    Value y = run1(op, {a, b}, {DType::Bool, {4}});
    EXPECT_EQ(y.as<uint8_t>(), expected) << fb::EnumNameOpKind(op);
  }
  Value eq = run1(OpKind::Equal, {i64({3}, {1, 2, 3}), i64({3}, {1, 0, 3})},
                  {DType::Bool, {3}});
  EXPECT_EQ(eq.as<uint8_t>(), (std::vector<uint8_t>{1, 0, 1}));
  Value beq = run1(OpKind::Equal, {boolean({2}, {1, 0}), boolean({2}, {1, 1})},
                   {DType::Bool, {2}});
  EXPECT_EQ(beq.as<uint8_t>(), (std::vector<uint8_t>{1, 0}));
}

TEST(Elementwise, LogicOps) {
  Value a = boolean({4}, {0, 0, 1, 1}), b = boolean({4}, {0, 1, 0, 1});
  EXPECT_EQ(run1(OpKind::And, {a, b}, {DType::Bool, {4}}).as<uint8_t>(),
            (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(run1(OpKind::Or, {a, b}, {DType::Bool, {4}}).as<uint8_t>(),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(run1(OpKind::Not, {a}, {DType::Bool, {4}}).as<uint8_t>(),
            (std::vector<uint8_t>{1, 1, 0, 0}));
}

TEST(Elementwise, WhereBroadcastsAllThree) {
  Value y = run1(OpKind::Where,
                 {boolean({2, 1}, {1, 0}), f32({3}, {1, 2, 3}), f32({}, {-1})},
                 f32Out({2, 3}));
  expectNear(y, {2, 3}, {1, 2, 3, -1, -1, -1});
  Value z = run1(OpKind::Where,
                 {boolean({2}, {0, 1}), i64({2}, {5, 6}), i64({2}, {7, 8})},
                 {DType::I64, {2}});
  EXPECT_EQ(z.as<int64_t>(), (std::vector<int64_t>{7, 6}));
}

TEST(Elementwise, ClipWithOptionalBounds) {
  Value x = f32({5}, {-2, -0.5f, 0, 0.5f, 2});
  expectNear(run1(OpKind::Clip, {x, f32({}, {-1}), f32({}, {1})}, f32Out({5})),
             {5}, {-1, -0.5f, 0, 0.5f, 1});
  expectNear(run1(OpKind::Clip, {x, std::nullopt, f32({}, {0})}, f32Out({5})),
             {5}, {-2, -0.5f, 0, 0, 0});
  expectNear(run1(OpKind::Clip, {x}, f32Out({5})), {5},
             {-2, -0.5f, 0, 0.5f, 2});
  Value i =
      run1(OpKind::Clip, {i64({3}, {-5, 3, 9}), i64({1}, {0}), i64({1}, {4})},
           {DType::I64, {3}});
  EXPECT_EQ(i.as<int64_t>(), (std::vector<int64_t>{0, 3, 4}));
}

TEST(Elementwise, CastConvertsBetweenAllTypes) {
  fb::CastAttrsT toI64;
  toI64.to = fb::DType::I64;
  Value a =
      run1(OpKind::Cast, {f32({5}, {1.7f, -1.7f, 0, 3e20f, std::nanf("")})},
           {DType::I64, {5}}, attrs(toI64));
  EXPECT_EQ(a.as<int64_t>(), (std::vector<int64_t>{1, -1, 0, INT64_MAX, 0}));
  fb::CastAttrsT toBool;
  toBool.to = fb::DType::Bool;
  Value b = run1(OpKind::Cast, {f32({3}, {0, -0.5f, 2})}, {DType::Bool, {3}},
                 attrs(toBool));
  EXPECT_EQ(b.as<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
  fb::CastAttrsT toI32;
  toI32.to = fb::DType::I32;
  Value c = run1(OpKind::Cast, {i64({2}, {(int64_t{1} << 32) + 5, -3})},
                 {DType::I32, {2}}, attrs(toI32));
  EXPECT_EQ(c.as<int32_t>(), (std::vector<int32_t>{5, -3}));
  fb::CastAttrsT toF32;
  toF32.to = fb::DType::F32;
  expectNear(
      run1(OpKind::Cast, {boolean({2}, {1, 0})}, f32Out({2}), attrs(toF32)),
      {2}, {1, 0});
}

TEST(Elementwise, CastFromOrToInt8IsALoadError) {
  // int8 tensors are quantized expert weights: no step casts them.
  fb::CastAttrsT toI8;
  toI8.to = fb::DType::I8;
  auto r = runStep(OpKind::Cast, {f32({2}, {1, 2})}, {{DType::I8, {2}}},
                   attrs(toI8));
  EXPECT_THAT(r.status(), StatusHas("casts f32 to i8; int8 tensors are "
                                    "expert weights, never cast"));
  fb::CastAttrsT toF32;
  toF32.to = fb::DType::F32;
  r = runStep(OpKind::Cast,
              {Value::of(DType::I8, {2}, std::vector<int8_t>{1, 2})},
              {f32Out({2})}, attrs(toF32));
  EXPECT_THAT(r.status(), StatusHas("casts i8 to f32"));
}

TEST(Elementwise, CastRoundsToHalfAndBfloat) {
  // 1 + 2^-11 is halfway between two halves: ties to even (1.0); 65520
  // overflows to infinity; 2^-24 is the smallest subnormal half.
  std::vector<float> x = {1.0f,  1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                          -2.5f, 65520.0f,           std::ldexp(1.0f, -24),
                          0.1f};
  fb::CastAttrsT toF16;
  toF16.to = fb::DType::F16;
  Value h = run1(OpKind::Cast, {f32({7}, x)}, {DType::F16, {7}}, attrs(toF16));
  EXPECT_EQ(h.as<uint16_t>(),
            (std::vector<uint16_t>{0x3c00, 0x3c00, 0x3c02, 0xc100, 0x7c00,
                                   0x0001, 0x2e66}));
  fb::CastAttrsT toF32;
  toF32.to = fb::DType::F32;
  Value back = run1(OpKind::Cast, {h}, f32Out({7}), attrs(toF32));
  expectNear(back, {7},
             {1.0f, 1.0f, 1.0f + 2.0f / 1024, -2.5f, INFINITY,
              std::ldexp(1.0f, -24), 0.0999755859375f});
  fb::CastAttrsT toBf16;
  toBf16.to = fb::DType::BF16;
  Value bf = run1(OpKind::Cast, {f32({3}, {1.0f, -2.5f, 1.00390625f})},
                  {DType::BF16, {3}}, attrs(toBf16));
  // 1 + 2^-8 is halfway between bf16 values: ties to even (1.0).
  EXPECT_EQ(bf.as<uint16_t>(), (std::vector<uint16_t>{0x3f80, 0xc020, 0x3f80}));
}

TEST(Elementwise, CastLikeTakesTheSecondInputsType) {
  Value y = run1(OpKind::CastLike, {f32({2}, {2.9f, -2.9f}), i32({1}, {0})},
                 {DType::I32, {2}});
  EXPECT_EQ(y.as<int32_t>(), (std::vector<int32_t>{2, -2}));
}

TEST(Elementwise, CastOutputMustMatchTarget) {
  fb::CastAttrsT toI64;
  toI64.to = fb::DType::I64;
  auto r =
      runStep(OpKind::Cast, {f32({1}, {1})}, {{DType::I32, {1}}}, attrs(toI64));
  EXPECT_THAT(r.status(), StatusHas("expected i64"));
}

} // namespace
} // namespace moert::testing
