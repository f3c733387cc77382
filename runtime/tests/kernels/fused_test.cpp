//===- fused_test.cpp - Fused elementwise expression programs -------------===//

#include "test_util.h"

#include <cmath>

namespace moert::testing {
namespace {

using fb::ExprOp;
using fb::Instr;
using fb::OpKind;

fb::AttrsUnion program(uint8_t registers, std::vector<Instr> instrs,
                       std::vector<uint8_t> results) {
  fb::FusedElementwiseAttrsT f;
  f.num_registers = registers;
  f.program = std::move(instrs);
  f.results = std::move(results);
  return attrs(f);
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

TEST(Fused, SwiGluOverManyChunksAndThreads) {
  // out = silu(gate) * up, over more elements than one chunk and one task.
  const int64_t rows = 70, cols = 1000;
  std::vector<float> gate = randomFloats(rows * cols, 1);
  std::vector<float> up = randomFloats(rows * cols, 2);
  auto p = program(
      3,
      {Instr(ExprOp::Input, 0, 0, 0, 0), Instr(ExprOp::Sigmoid, 1, 0, 0, 0),
       Instr(ExprOp::Mul, 1, 0, 1, 0), Instr(ExprOp::Input, 2, 1, 0, 0),
       Instr(ExprOp::Mul, 0, 1, 2, 0)},
      {0});
  Value y = run1(OpKind::FusedElementwise,
                 {f32({rows, cols}, gate), f32({rows, cols}, up)},
                 {DType::F32, {rows, cols}}, std::move(p), /*threads=*/3);
  std::vector<float> expected(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    expected[i] = silu(gate[i]) * up[i];
  expectNear(y, {rows, cols}, expected);
}

TEST(Fused, BroadcastInputsConstantsAndTwoResults) {
  // a = x * 2 + bias (bias broadcast over rows); b = gelu(a) - 1.
  std::vector<float> x = randomFloats(3 * 5, 3), bias = randomFloats(5, 4);
  auto p = program(
      4,
      {Instr(ExprOp::Input, 0, 0, 0, 0), Instr(ExprOp::Const, 1, 0, 0, 2.0f),
       Instr(ExprOp::Mul, 0, 0, 1, 0), Instr(ExprOp::Input, 2, 1, 0, 0),
       Instr(ExprOp::Add, 0, 0, 2, 0), Instr(ExprOp::Gelu, 3, 0, 0, 0),
       Instr(ExprOp::Const, 1, 0, 0, 1.0f), Instr(ExprOp::Sub, 3, 3, 1, 0)},
      {0, 3});
  auto r = runStep(OpKind::FusedElementwise, {f32({3, 5}, x), f32({5}, bias)},
                   {{DType::F32, {3, 5}}, {DType::F32, {3, 5}}}, std::move(p));
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> a(15), b(15);
  for (int i = 0; i < 15; ++i) {
    a[i] = x[i] * 2 + bias[i % 5];
    b[i] = 0.5f * a[i] * (1 + std::erf(a[i] / std::sqrt(2.0f))) - 1;
  }
  expectNear((*r)[0], {3, 5}, a);
  expectNear((*r)[1], {3, 5}, b);
}

TEST(Fused, EveryOperationMatchesItsStandaloneKernel) {
  std::vector<float> x = {-2.5f, -1, -0.1f, 0.2f, 1, 3};
  std::vector<float> y = {0.5f, 2, -3, 1.5f, -0.5f, 2};
  struct Case {
    ExprOp op;
    float (*fn)(float, float);
  };
  std::vector<Case> cases = {
      {ExprOp::Add, [](float a, float b) { return a + b; }},
      {ExprOp::Sub, [](float a, float b) { return a - b; }},
      {ExprOp::Mul, [](float a, float b) { return a * b; }},
      {ExprOp::Div, [](float a, float b) { return a / b; }},
      {ExprOp::Max, [](float a, float b) { return std::max(a, b); }},
      {ExprOp::Min, [](float a, float b) { return std::min(a, b); }},
      {ExprOp::Neg, [](float a, float) { return -a; }},
      {ExprOp::Abs, [](float a, float) { return std::fabs(a); }},
      {ExprOp::Exp, [](float a, float) { return std::exp(a); }},
      {ExprOp::Tanh, [](float a, float) { return std::tanh(a); }},
      {ExprOp::Erf, [](float a, float) { return std::erf(a); }},
      {ExprOp::Sigmoid, [](float a, float) { return 1 / (1 + std::exp(-a)); }},
      {ExprOp::Relu, [](float a, float) { return std::max(a, 0.0f); }},
      {ExprOp::Sin, [](float a, float) { return std::sin(a); }},
      {ExprOp::Cos, [](float a, float) { return std::cos(a); }},
      {ExprOp::Floor, [](float a, float) { return std::floor(a); }},
      {ExprOp::Ceil, [](float a, float) { return std::ceil(a); }},
      {ExprOp::Softplus,
       [](float a, float) { return std::log1p(std::exp(a)); }},
      {ExprOp::GeluTanh,
       [](float a, float) {
         return 0.5f * a *
                (1 + std::tanh(0.7978845608f * (a + 0.044715f * a * a * a)));
       }},
  };
  for (const Case &c : cases) {
    auto p =
        program(2,
                {Instr(ExprOp::Input, 0, 0, 0, 0),
                 Instr(ExprOp::Input, 1, 1, 0, 0), Instr(c.op, 0, 0, 1, 0)},
                {0});
    Value out = run1(OpKind::FusedElementwise, {f32({6}, x), f32({6}, y)},
                     {DType::F32, {6}}, std::move(p));
    std::vector<float> expected;
    for (int i = 0; i < 6; ++i)
      expected.push_back(c.fn(x[i], y[i]));
    SCOPED_TRACE(fb::EnumNameExprOp(c.op));
    expectNear(out, {6}, expected, 1e-5f);
  }
}

TEST(Fused, ProgramsAreValidatedAtLoad) {
  auto check = [](fb::AttrsUnion p, const char *message) {
    auto r = runStep(OpKind::FusedElementwise, {f32({2}, {1, 2})},
                     {{DType::F32, {2}}}, std::move(p));
    EXPECT_THAT(r.status(), StatusHas(message));
  };
  check(program(2, {Instr(ExprOp::Add, 0, 0, 1, 0)}, {0}),
        "instruction 0 (Add): reads a register before it is written");
  check(program(2, {Instr(ExprOp::Input, 0, 3, 0, 0)}, {0}),
        "instruction 0 (Input): input 3 does not exist");
  check(program(2, {Instr(ExprOp::Input, 5, 0, 0, 0)}, {0}),
        "destination r5 is not a register");
  check(program(2, {Instr(ExprOp::Input, 0, 0, 0, 0)}, {1}),
        "result 0 names register r1, which is never written");
  check(program(2, {Instr(ExprOp::Input, 0, 0, 0, 0)}, {0, 0}),
        "has 2 results for 1 outputs");
  check(program(0, {}, {}), "num_registers must be at least 1");
  check(program(2, {Instr(static_cast<ExprOp>(200), 0, 0, 0, 0)}, {0}),
        "unknown operation 200");
}

} // namespace
} // namespace moert::testing
