//===- cuda_generic_logic_test.cpp - Data-op kernels' logic vs the CPU ----===//
//
// Runs the per-thread logic of the generic data-op kernels
// (runtime/src/backends/cuda/generic_logic.h) on the CPU over every thread
// index of each launch, and compares with the CPU backend's kernels on random
// inputs: broadcasting, negative axes and indices, edge sizes 0 and 1. The row
// ops are emulated block by block: every lane's partial, the kernels' tree,
// then every lane's writes. On a GPU, `CudaGenericDevice` runs a plan of these
// ops on the real kernels against the CPU backend (skipped without one).
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/generic_logic.h"
#include "backends/cuda/launch.h"
#include "moert/cuda.h"
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace moert::testing {
namespace {

using namespace moert::cuda;
using fb::OpKind;

Out f32Out(std::vector<PlanDim> dims) { return {DType::F32, std::move(dims)}; }

detail::Shape shapeOf(const std::vector<int64_t> &dims) {
  detail::Shape shape;
  for (int64_t d : dims)
    shape.push(d);
  return shape;
}

/// Random floats with a few exact repeats and zeros (ties, signed zeros).
std::vector<float> values(int64_t n, uint32_t seed) {
  std::vector<float> v = randomFloats(static_cast<size_t>(n), seed);
  for (int64_t i = 0; i < n; i += 7)
    v[i] = (i / 7) % 3 == 0 ? 0.0f : -0.0f;
  return v;
}

/// Closeness within `relative` of max(|want|, floor).
void expectCloseFloats(const std::vector<float> &got,
                       const std::vector<float> &want, float relative,
                       float floor = 1e-6f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
      continue;
    }
    if (got[i] == want[i])
      continue; // infinities
    float tolerance = relative * std::max(std::fabs(want[i]), floor);
    ASSERT_NEAR(got[i], want[i], tolerance) << "element " << i;
  }
}

/// planFusedArgs over shapes broadcast to `out`.
FusedArgs broadcastArgsOf(const std::vector<int64_t> &out,
                          const std::vector<std::vector<int64_t>> &inputs) {
  detail::Shape outShape = shapeOf(out);
  std::vector<detail::Shape> shapes;
  for (const auto &in : inputs)
    shapes.push_back(shapeOf(in));
  std::vector<const detail::Shape *> pointers;
  for (const auto &s : shapes)
    pointers.push_back(&s);
  FusedArgs args;
  absl::Status status = planFusedArgs(outShape, pointers.data(),
                                      static_cast<int>(pointers.size()), args);
  EXPECT_TRUE(status.ok()) << status;
  return args;
}

/// numpy broadcast of two shapes (the test's own, right-aligned).
std::vector<int64_t> broadcast(std::vector<int64_t> a, std::vector<int64_t> b) {
  if (a.size() < b.size())
    std::swap(a, b);
  b.insert(b.begin(), a.size() - b.size(), 1);
  for (size_t d = 0; d < a.size(); ++d)
    if (a[d] == 1)
      a[d] = b[d];
  return a;
}

//===----------------------------------------------------------------------===//
// Transpose, Slice (strided reads), Expand (broadcast read)
//===----------------------------------------------------------------------===//

/// The strided read of `in` [shape] by perm, as the host part fills it.
StridedArgs transposeArgs(const std::vector<int64_t> &shape,
                          const std::vector<int> &perm) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  StridedArgs args{};
  args.rank = static_cast<int>(shape.size());
  for (int d = 0; d < args.rank; ++d) {
    args.shape[d] = shape[perm[d]];
    args.strides[d] = strides[perm[d]];
  }
  return args;
}

std::vector<float> emulateStrided(const std::vector<float> &in,
                                  const StridedArgs &args, int64_t n) {
  std::vector<float> out(n, NAN);
  for (int64_t i = 0; i < n; ++i)
    out[i] = in[stridedSource(args, i)];
  return out;
}

TEST(GenericLogic, TransposeMatchesTheCpu) {
  std::mt19937 rng(3);
  std::vector<std::vector<int64_t>> shapes = {
      {2, 3, 4}, {1, 5}, {7}, {0, 2}, {2, 1, 3, 1}, {3, 2, 2, 2, 2}, {}};
  for (const auto &shape : shapes) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int> perm(shape.size());
      std::iota(perm.begin(), perm.end(), 0);
      fb::TransposeAttrsT attrs;
      if (trial == 0) {
        std::reverse(perm.begin(), perm.end()); // empty attribute
      } else {
        std::shuffle(perm.begin(), perm.end(), rng);
        attrs.perm.assign(perm.begin(), perm.end());
      }
      std::vector<int64_t> outShape;
      for (int p : perm)
        outShape.push_back(shape[p]);
      SCOPED_TRACE(::testing::Message()
                   << "shape rank " << shape.size() << " trial " << trial);
      std::vector<float> in = values(numelOf(shape), 10 + trial);
      Value want = run1(OpKind::Transpose, {f32(shape, in)},
                        f32Out(dimsOf(outShape)), moert::attrs(attrs));
      expectSameFloats(
          emulateStrided(in, transposeArgs(shape, perm), numelOf(outShape)),
          want.as<float>());
    }
  }
}

struct SliceCase {
  std::vector<int64_t> shape, starts, ends, axes, steps;
};

TEST(GenericLogic, SliceWithStepsAndNegativeIndicesMatchesTheCpu) {
  std::vector<SliceCase> cases = {
      {{10}, {2}, {8}, {}, {}},
      {{10}, {-3}, {-1}, {0}, {1}},
      {{10}, {8}, {1}, {0}, {-3}},
      {{10}, {-1}, {-100}, {-1}, {-1}},
      {{10}, {100}, {-100}, {0}, {-4}},
      {{10}, {0}, {100}, {0}, {25}},
      {{10}, {9}, {-100}, {0}, {-25}},
      {{10}, {5}, {5}, {0}, {1}},
      {{4, 6}, {1, -5}, {3, 6}, {0, 1}, {1, 2}},
      {{4, 6}, {-1, 0}, {0, 100}, {-2, -1}, {-1, 3}},
      {{3, 1, 5}, {0, 0}, {1, 1}, {1, 0}, {}},
      {{2, 0, 3}, {0}, {2}, {2}, {}},
      {{1}, {0}, {1}, {}, {}},
  };
  for (const SliceCase &c : cases) {
    int rank = static_cast<int>(c.shape.size());
    // The expected geometry, computed independently of the CPU kernel.
    std::vector<int64_t> begin(rank, 0), step(rank, 1), outShape = c.shape;
    for (size_t k = 0; k < c.starts.size(); ++k) {
      int d = static_cast<int>(c.axes.empty() ? k : c.axes[k]);
      if (d < 0)
        d += rank;
      int64_t dim = c.shape[d], st = c.steps.empty() ? 1 : c.steps[k];
      std::vector<int64_t> picked;
      int64_t s = c.starts[k] < 0 ? c.starts[k] + dim : c.starts[k];
      int64_t e = c.ends[k] < 0 ? c.ends[k] + dim : c.ends[k];
      if (st > 0) {
        s = std::clamp<int64_t>(s, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
        for (int64_t i = s; i < e; i += st)
          picked.push_back(i);
      } else {
        s = std::clamp<int64_t>(s, -1, dim - 1);
        e = std::clamp<int64_t>(e, -1, dim - 1);
        for (int64_t i = s; i > e; i += st)
          picked.push_back(i);
      }
      begin[d] = picked.empty() ? 0 : picked[0];
      step[d] = st;
      outShape[d] = static_cast<int64_t>(picked.size());
    }
    StridedArgs args{};
    args.rank = rank;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      args.shape[d] = outShape[d];
      args.strides[d] = step[d] * stride;
      args.offset += begin[d] * stride;
      stride *= c.shape[d];
    }
    int64_t k = static_cast<int64_t>(c.starts.size());
    std::vector<float> in = values(numelOf(c.shape), 20);
    std::vector<std::optional<Value>> inputs = {
        f32(c.shape, in), i64({k}, c.starts), i64({k}, c.ends)};
    inputs.push_back(c.axes.empty() && c.steps.empty()
                         ? std::nullopt
                         : std::optional<Value>(i64(
                               {static_cast<int64_t>(c.axes.size())}, c.axes)));
    if (!c.steps.empty())
      inputs.push_back(i64({k}, c.steps));
    if (c.axes.empty() && !c.steps.empty())
      inputs[3] = std::nullopt;
    SCOPED_TRACE(::testing::Message() << "case starting " << c.starts[0]);
    Value want = run1(OpKind::Slice, inputs, f32Out(dimsOf(outShape)));
    expectSameFloats(emulateStrided(in, args, numelOf(outShape)),
                     want.as<float>());
  }
}

TEST(GenericLogic, ExpandBroadcastsLikeTheCpu) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{3, 1}, {2, 3, 4}}, {{1}, {5}},
      {{}, {2, 2}},        {{2, 1, 3}, {1, 4, 1}},
      {{4}, {0, 4}},       {{2, 3}, {1}},
      {{1, 1}, {1, 1}},    {{5, 1, 1}, {5, 2, 3}}};
  for (const auto &[inShape, target] : cases) {
    std::vector<int64_t> outShape = broadcast(inShape, target);
    std::vector<float> in = values(numelOf(inShape), 30);
    Value want = run1(
        OpKind::Expand,
        {f32(inShape, in), i64({static_cast<int64_t>(target.size())}, target)},
        f32Out(dimsOf(outShape)));
    FusedArgs args = broadcastArgsOf(outShape, {inShape});
    std::vector<float> got(numelOf(outShape));
    for (int64_t i = 0; i < args.numel; ++i)
      got[i] = in[broadcastSource(args, 0, i)];
    expectSameFloats(got, want.as<float>());
  }
}

//===----------------------------------------------------------------------===//
// Concat, Gather
//===----------------------------------------------------------------------===//

TEST(GenericLogic, ConcatMatchesTheCpu) {
  struct Case {
    std::vector<std::vector<int64_t>> shapes;
    int64_t axis;
  };
  std::vector<Case> cases = {
      {{{2, 3}, {2, 1}, {2, 4}}, 1},
      {{{2, 3}, {1, 3}}, 0},
      {{{2, 3}, {5, 3}, {1, 3}}, -2},
      {{{2, 0, 3}, {2, 2, 3}, {2, 0, 3}, {2, 1, 3}}, -2},
      {{{4}}, 0},
      {{{1, 1, 1}, {1, 1, 1}}, 2},
      {{{3, 2, 2}, {3, 2, 2}, {3, 2, 2}, {3, 2, 2}, {3, 2, 2}}, 1},
  };
  uint32_t seed = 40;
  for (const Case &c : cases) {
    int rank = static_cast<int>(c.shapes[0].size());
    int axis = static_cast<int>(c.axis < 0 ? c.axis + rank : c.axis);
    std::vector<int64_t> outShape = c.shapes[0];
    outShape[axis] = 0;
    std::vector<std::optional<Value>> inputs;
    std::vector<std::vector<float>> data;
    ConcatArgs args{};
    args.count = static_cast<int>(c.shapes.size());
    for (size_t p = 0; p < c.shapes.size(); ++p) {
      data.push_back(values(numelOf(c.shapes[p]), seed++));
      inputs.push_back(f32(c.shapes[p], data.back()));
      args.begin[p + 1] = args.begin[p] + c.shapes[p][axis];
      outShape[axis] += c.shapes[p][axis];
    }
    for (size_t p = 0; p < c.shapes.size(); ++p)
      args.inputs[p] = data[p].data();
    args.outer = numelOf({outShape.begin(), outShape.begin() + axis});
    args.total = outShape[axis];
    args.inner = numelOf({outShape.begin() + axis + 1, outShape.end()});
    fb::AxisAttrsT attrs;
    attrs.axis = c.axis;
    Value want = run1(OpKind::Concat, inputs, f32Out(dimsOf(outShape)),
                      moert::attrs(attrs));
    std::vector<float> got(numelOf(outShape));
    for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
      int part;
      int64_t element;
      concatSource(args, i, part, element);
      got[i] = args.inputs[part][element];
    }
    expectSameFloats(got, want.as<float>());
  }
}

TEST(GenericLogic, GatherMatchesTheCpuAndFindsBadIndices) {
  struct Case {
    std::vector<int64_t> data, indicesShape, indices;
    int64_t axis;
  };
  std::vector<Case> cases = {
      {{5, 3}, {4}, {0, -1, 4, 2}, 0}, {{5, 3}, {2, 2}, {2, -3, 0, 1}, 1},
      {{2, 3, 4}, {}, {-4}, -1},       {{2, 3, 4}, {3}, {1, 1, -2}, 1},
      {{1}, {3}, {0, 0, -1}, 0},       {{6, 2}, {0}, {}, 0},
  };
  uint32_t seed = 50;
  for (const Case &c : cases) {
    int rank = static_cast<int>(c.data.size());
    int axis = static_cast<int>(c.axis < 0 ? c.axis + rank : c.axis);
    std::vector<int64_t> outShape(c.data.begin(), c.data.begin() + axis);
    outShape.insert(outShape.end(), c.indicesShape.begin(),
                    c.indicesShape.end());
    outShape.insert(outShape.end(), c.data.begin() + axis + 1, c.data.end());
    std::vector<float> data = values(numelOf(c.data), seed++);
    fb::AxisAttrsT attrs;
    attrs.axis = c.axis;
    GatherArgs args{numelOf({c.data.begin(), c.data.begin() + axis}),
                    c.data[axis],
                    numelOf({c.data.begin() + axis + 1, c.data.end()}),
                    numelOf(c.indicesShape)};
    for (bool use32 : {false, true}) {
      std::vector<int32_t> narrow(c.indices.begin(), c.indices.end());
      Value indices =
          use32 ? i32(c.indicesShape, narrow) : i64(c.indicesShape, c.indices);
      Value want = run1(OpKind::Gather, {f32(c.data, data), indices},
                        f32Out(dimsOf(outShape)), moert::attrs(attrs));
      std::vector<float> got(numelOf(outShape));
      for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
        int64_t position;
        int64_t source = gatherSource(
            args, c.indices[(i / args.block) % args.count], i, position);
        ASSERT_GE(source, 0);
        got[i] = data[source];
      }
      expectSameFloats(got, want.as<float>());
    }
  }
  // Out of [-dim, dim): found with the index and its position, as the CPU
  // refuses it.
  GatherArgs args{2, 3, 2, 3};
  std::vector<int64_t> bad = {0, 3, -4};
  for (int64_t i = 0; i < 2 * 3 * 2; ++i) {
    int64_t position;
    int64_t index = bad[(i / args.block) % args.count];
    int64_t source = gatherSource(args, index, i, position);
    EXPECT_EQ(source < 0, index != 0) << i;
    EXPECT_EQ(position, (i / 2) % 3);
  }
  fb::AxisAttrsT attrs;
  attrs.axis = 1;
  auto cpu =
      runStep(OpKind::Gather, {f32({2, 3, 2}, values(12, 1)), i64({3}, bad)},
              {f32Out({2, 3, 2})}, moert::attrs(attrs));
  EXPECT_THAT(cpu.status(), StatusHas("index 3 at position 1"));
}

//===----------------------------------------------------------------------===//
// Elementwise: binary, compare, Where, unary, Cast
//===----------------------------------------------------------------------===//

const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>
    kBroadcastPairs = {{{2, 3}, {2, 3}},    {{2, 3}, {3}},
                       {{3, 1}, {1, 4}},    {{}, {2, 2}},
                       {{2, 1, 3}, {4, 1}}, {{0, 3}, {1}},
                       {{1}, {1}},          {{5, 1, 1, 2}, {1, 3, 1, 2}}};

TEST(GenericLogic, BinaryOpsAndComparisonsBroadcastLikeTheCpu) {
  const std::pair<OpKind, GenericBinary> binaries[] = {
      {OpKind::Add, GenericBinary::Add}, {OpKind::Sub, GenericBinary::Sub},
      {OpKind::Mul, GenericBinary::Mul}, {OpKind::Div, GenericBinary::Div},
      {OpKind::Min, GenericBinary::Min}, {OpKind::Max, GenericBinary::Max}};
  const std::pair<OpKind, GenericCompare> compares[] = {
      {OpKind::Equal, GenericCompare::Equal},
      {OpKind::Less, GenericCompare::Less},
      {OpKind::LessOrEqual, GenericCompare::LessOrEqual},
      {OpKind::Greater, GenericCompare::Greater},
      {OpKind::GreaterOrEqual, GenericCompare::GreaterOrEqual}};
  uint32_t seed = 60;
  for (const auto &[aShape, bShape] : kBroadcastPairs) {
    std::vector<int64_t> outShape = broadcast(aShape, bShape);
    std::vector<float> a = values(numelOf(aShape), seed++);
    std::vector<float> b = values(numelOf(bShape), seed++);
    if (a.size() > 2)
      a[1] = NAN; // NaN-propagating Min/Max; false comparisons
    if (b.size() > 1)
      b[0] = a[0]; // an exact tie
    FusedArgs args = broadcastArgsOf(outShape, {aShape, bShape});
    for (const auto &[kind, op] : binaries) {
      Value want = run1(kind, {f32(aShape, a), f32(bShape, b)},
                        f32Out(dimsOf(outShape)));
      std::vector<float> got(numelOf(outShape));
      for (int64_t i = 0; i < args.numel; ++i)
        got[i] = applyBinary(op, a[broadcastSource(args, 0, i)],
                             b[broadcastSource(args, 1, i)]);
      expectSameFloats(got, want.as<float>());
    }
    for (const auto &[kind, op] : compares) {
      Value want = run1(kind, {f32(aShape, a), f32(bShape, b)},
                        {DType::Bool, dimsOf(outShape)});
      std::vector<uint8_t> got(numelOf(outShape));
      for (int64_t i = 0; i < args.numel; ++i)
        got[i] = applyCompare(op, a[broadcastSource(args, 0, i)],
                              b[broadcastSource(args, 1, i)]);
      EXPECT_EQ(got, want.as<uint8_t>());
    }
  }
}

TEST(GenericLogic, WhereBroadcastsLikeTheCpu) {
  uint32_t seed = 70;
  for (const auto &[xShape, yShape] : kBroadcastPairs) {
    for (const std::vector<int64_t> &cShape :
         {std::vector<int64_t>{}, xShape, std::vector<int64_t>{1, 1}}) {
      std::vector<int64_t> outShape =
          broadcast(broadcast(cShape, xShape), yShape);
      std::vector<uint8_t> cond(numelOf(cShape));
      std::mt19937 rng(seed);
      for (auto &c : cond)
        c = rng() % 2;
      std::vector<float> x = values(numelOf(xShape), seed++);
      std::vector<float> y = values(numelOf(yShape), seed++);
      Value want = run1(OpKind::Where,
                        {boolean(cShape, cond), f32(xShape, x), f32(yShape, y)},
                        f32Out(dimsOf(outShape)));
      FusedArgs args = broadcastArgsOf(outShape, {cShape, xShape, yShape});
      std::vector<float> got(numelOf(outShape));
      for (int64_t i = 0; i < args.numel; ++i)
        got[i] = cond[broadcastSource(args, 0, i)]
                     ? x[broadcastSource(args, 1, i)]
                     : y[broadcastSource(args, 2, i)];
      expectSameFloats(got, want.as<float>());
    }
  }
}

TEST(GenericLogic, UnaryMathMatchesTheCpu) {
  struct Case {
    OpKind kind;
    GenericUnary op;
    float tolerance; // 0: bit-exact
  };
  const Case cases[] = {{OpKind::Neg, GenericUnary::Neg, 0},
                        {OpKind::Abs, GenericUnary::Abs, 0},
                        {OpKind::Relu, GenericUnary::Relu, 0},
                        {OpKind::Sign, GenericUnary::Sign, 0},
                        {OpKind::Sqrt, GenericUnary::Sqrt, 0},
                        {OpKind::Reciprocal, GenericUnary::Reciprocal, 0},
                        {OpKind::Floor, GenericUnary::Floor, 0},
                        {OpKind::Ceil, GenericUnary::Ceil, 0},
                        // The CPU's fastExp is within 2 ulp of expf.
                        {OpKind::Exp, GenericUnary::Exp, 4e-7f},
                        {OpKind::Sigmoid, GenericUnary::Sigmoid, 4e-7f},
                        // The CPU's fastErf is within 6 ulp of erff.
                        {OpKind::Erf, GenericUnary::Erf, 5e-7f},
                        // libm on both sides here; CUDA's are within 2 ulp.
                        {OpKind::Log, GenericUnary::Log, 0},
                        {OpKind::Tanh, GenericUnary::Tanh, 0},
                        {OpKind::Sin, GenericUnary::Sin, 0},
                        {OpKind::Cos, GenericUnary::Cos, 0}};
  std::vector<float> in = values(300, 80);
  for (size_t i = 0; i < in.size(); i += 11)
    in[i] *= 40.0f; // larger arguments (Sin, Cos, Exp)
  in[3] = NAN;
  in[5] = INFINITY;
  in[9] = -INFINITY;
  for (const Case &c : cases) {
    SCOPED_TRACE(static_cast<int>(c.op));
    for (const std::vector<int64_t> &shape :
         {std::vector<int64_t>{300}, std::vector<int64_t>{0, 5},
          std::vector<int64_t>{}}) {
      std::vector<float> x(in.begin(), in.begin() + numelOf(shape));
      Value want = run1(c.kind, {f32(shape, x)}, f32Out(dimsOf(shape)));
      std::vector<float> got(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        got[i] = applyUnary(c.op, x[i]);
      if (c.tolerance == 0)
        expectSameFloats(got, want.as<float>());
      else
        expectCloseFloats(got, want.as<float>(), c.tolerance);
    }
  }
}

TEST(GenericLogic, CastsMatchTheCpu) {
  std::vector<float> f = {1.7f, -1.7f, 0.0f,   -0.0f,   3e20f,    -3e20f, NAN,
                          0.5f, -0.5f, 2.5e9f, -2.5e9f, INFINITY, 1e-30f};
  int64_t n = static_cast<int64_t>(f.size());
  auto castTo = [&](const Value &in, fb::DType to, DType out) {
    fb::CastAttrsT attrs;
    attrs.to = to;
    return run1(OpKind::Cast, {in}, {out, {in.numel()}}, moert::attrs(attrs));
  };
  {
    std::vector<int64_t> got;
    for (float x : f)
      got.push_back(castFloatToInt<int64_t>(x, INT64_MIN, INT64_MAX));
    EXPECT_EQ(got,
              castTo(f32({n}, f), fb::DType::I64, DType::I64).as<int64_t>());
  }
  {
    std::vector<int32_t> got;
    for (float x : f)
      got.push_back(castFloatToInt<int32_t>(x, INT32_MIN, INT32_MAX));
    EXPECT_EQ(got,
              castTo(f32({n}, f), fb::DType::I32, DType::I32).as<int32_t>());
  }
  {
    std::vector<uint8_t> got;
    for (float x : f)
      got.push_back(x != 0);
    EXPECT_EQ(got,
              castTo(f32({n}, f), fb::DType::Bool, DType::Bool).as<uint8_t>());
  }
  std::vector<int64_t> ints = {
      0,         1,         -1,        (1LL << 24) + 1,
      INT64_MAX, INT64_MIN, 123456789, (1LL << 53) + 1};
  std::vector<float> got;
  for (int64_t x : ints)
    got.push_back(castIntToFloat(x));
  expectSameFloats(
      got, castTo(i64({8}, ints), fb::DType::F32, DType::F32).as<float>());
  std::vector<int32_t> narrow = {0, -7, INT32_MAX, INT32_MIN, (1 << 24) + 1};
  got.clear();
  for (int32_t x : narrow)
    got.push_back(castIntToFloat(x));
  expectSameFloats(
      got, castTo(i32({5}, narrow), fb::DType::F32, DType::F32).as<float>());
  std::vector<uint8_t> flags = {0, 1, 1, 0};
  EXPECT_EQ(castTo(boolean({4}, flags), fb::DType::F32, DType::F32).as<float>(),
            (std::vector<float>{0, 1, 1, 0}));
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST(GenericLogic, ReductionsMatchTheCpuBitForBit) {
  struct Case {
    std::vector<int64_t> shape, axes;
    bool keepdims;
  };
  std::vector<Case> cases = {
      {{4, 5}, {1}, true},          {{4, 5}, {0}, false},
      {{2, 3, 4}, {0, 2}, true},    {{2, 3, 4}, {-1, -2}, false},
      {{2, 3, 4}, {}, false},       {{3, 1, 700}, {2}, true},
      {{2, 0, 3}, {1}, true},       {{1}, {0}, false},
      {{2, 1, 3, 1}, {1, 3}, false}};
  const std::pair<OpKind, GenericReduce> ops[] = {
      {OpKind::ReduceSum, GenericReduce::Sum},
      {OpKind::ReduceMean, GenericReduce::Mean},
      {OpKind::ReduceMax, GenericReduce::Max},
      {OpKind::ReduceMin, GenericReduce::Min}};
  uint32_t seed = 110;
  for (const Case &c : cases) {
    int rank = static_cast<int>(c.shape.size());
    std::vector<bool> reduced(rank, c.axes.empty());
    for (int64_t a : c.axes)
      reduced[a < 0 ? a + rank : a] = true;
    // The geometry, unmerged (the kernels' order is the same either way).
    ReduceArgs args{};
    std::vector<int64_t> outShape;
    int64_t stride = 1;
    std::vector<int64_t> strides(rank);
    for (int d = rank - 1; d >= 0; --d) {
      strides[d] = stride;
      stride *= c.shape[d];
    }
    args.reduceCount = 1;
    for (int d = 0; d < rank; ++d) {
      if (reduced[d]) {
        args.reducedDims[args.reducedRank] = c.shape[d];
        args.reducedStrides[args.reducedRank++] = strides[d];
        args.reduceCount *= c.shape[d];
        if (c.keepdims)
          outShape.push_back(1);
      } else {
        args.keptDims[args.keptRank] = c.shape[d];
        args.keptStrides[args.keptRank++] = strides[d];
        outShape.push_back(c.shape[d]);
      }
    }
    std::vector<float> in = values(numelOf(c.shape), seed++);
    if (in.size() > 30)
      in[29] = NAN;
    fb::ReduceAttrsT attrs;
    attrs.keepdims = c.keepdims;
    for (const auto &[kind, op] : ops) {
      Value want = run1(kind,
                        {f32(c.shape, in),
                         i64({static_cast<int64_t>(c.axes.size())}, c.axes)},
                        f32Out(dimsOf(outShape)), moert::attrs(attrs));
      std::vector<float> got(numelOf(outShape));
      for (int64_t o = 0; o < static_cast<int64_t>(got.size()); ++o)
        got[o] = reduceOutput(op, args, in.data(), o);
      SCOPED_TRACE(::testing::Message()
                   << "op " << static_cast<int>(op) << " rank " << rank);
      expectSameFloats(got, want.as<float>());
    }
  }
}

//===----------------------------------------------------------------------===//
// Softmax and the norms: every lane, the tree, every lane's writes
//===----------------------------------------------------------------------===//

/// One block's reduction as the kernels do it.
template <typename T, typename Partial, typename Combine>
T emulateBlockReduce(Partial partial, Combine combine) {
  std::vector<T> partials(kRowBlock);
  for (int lane = 0; lane < kRowBlock; ++lane)
    partials[lane] = partial(lane);
  treeReduce(partials.data(), kRowBlock, combine);
  return partials[0];
}

std::vector<float> emulateSoftmax(const std::vector<float> &in,
                                  const RowSpan &span) {
  std::vector<float> out(in.size(), NAN);
  for (int64_t r = 0; r < span.rows; ++r) {
    const float *p = in.data() + rowBase(span, r);
    float max = emulateBlockReduce<float>(
        [&](int lane) { return softmaxPartialMax(p, span, lane, kRowBlock); },
        maxNanLast);
    double sum = emulateBlockReduce<double>(
        [&](int lane) {
          return softmaxPartialSum(p, span, max, lane, kRowBlock);
        },
        [](double a, double b) { return a + b; });
    for (int lane = 0; lane < kRowBlock; ++lane)
      softmaxWrite(p, out.data() + rowBase(span, r), span, max, sum, lane,
                   kRowBlock);
  }
  return out;
}

TEST(GenericLogic, SoftmaxRowsMatchTheCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  std::vector<Case> cases = {{{4, 10}, -1},    {{3, 700}, 1}, {{2, 5, 3}, 1},
                             {{2, 5, 3}, -3},  {{6, 1}, -1},  {{1}, 0},
                             {{3, 300, 2}, 1}, {{2, 0, 4}, 2}};
  uint32_t seed = 90;
  for (const Case &c : cases) {
    int rank = static_cast<int>(c.shape.size());
    int axis = static_cast<int>(c.axis < 0 ? c.axis + rank : c.axis);
    std::vector<float> in = values(numelOf(c.shape), seed++);
    for (float &v : in)
      v *= 8.0f;
    if (in.size() > 40)
      in[17] = NAN; // ignored by the max unless first, as on the CPU
    RowSpan span;
    span.inner = numelOf({c.shape.begin() + axis + 1, c.shape.end()});
    span.n = c.shape[axis];
    span.rows = numelOf({c.shape.begin(), c.shape.begin() + axis}) * span.inner;
    fb::AxisAttrsT attrs;
    attrs.axis = c.axis;
    Value want = run1(OpKind::Softmax, {f32(c.shape, in)},
                      f32Out(dimsOf(c.shape)), moert::attrs(attrs));
    std::vector<float> got =
        span.n > 0 ? emulateSoftmax(in, span) : std::vector<float>(in.size());
    SCOPED_TRACE(::testing::Message()
                 << "axis " << c.axis << " of rank " << rank);
    expectCloseFloats(got, want.as<float>(), 1e-6f, 1e-30f);
  }
}

struct NormResult {
  std::vector<float> y, mean, inv;
};

NormResult emulateNorm(const std::vector<float> &x, int64_t rows, int64_t n,
                       double epsilon, bool simplified, const FusedArgs &params,
                       const float *scale, const float *bias) {
  NormResult result{std::vector<float>(x.size(), NAN), std::vector<float>(rows),
                    std::vector<float>(rows)};
  auto add = [](double a, double b) { return a + b; };
  for (int64_t r = 0; r < rows; ++r) {
    const float *p = x.data() + r * n;
    double sum = simplified
                     ? 0.0
                     : emulateBlockReduce<double>(
                           [&](int lane) {
                             return normPartialSum(p, n, lane, kRowBlock);
                           },
                           add);
    double mean = simplified || n == 0 ? 0.0 : sum / n;
    double squares = emulateBlockReduce<double>(
        [&](int lane) {
          return normPartialSquares(p, n, mean, lane, kRowBlock);
        },
        add);
    float m, inv;
    normStats(sum, squares, n, epsilon, simplified, m, inv);
    for (int lane = 0; lane < kRowBlock; ++lane)
      normWrite(p, result.y.data() + r * n, n, m, inv, params, scale, bias,
                lane, kRowBlock);
    result.mean[r] = m;
    result.inv[r] = inv;
  }
  return result;
}

TEST(GenericLogic, LayerNormAndRmsNormMatchTheCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
    std::vector<int64_t> scale, bias; // bias {}: none
    float epsilon;
  };
  std::vector<Case> cases = {
      {{4, 16}, -1, {16}, {16}, 1e-5f},   {{3, 600}, -1, {600}, {1}, 1e-6f},
      {{2, 3, 8}, 1, {3, 8}, {8}, 1e-5f}, {{2, 3, 8}, -2, {1, 8}, {}, 0.1f},
      {{5, 1}, -1, {1}, {1}, 0.0f},       {{1, 257}, 1, {257}, {}, 1e-5f},
      {{0, 4}, -1, {4}, {4}, 1e-5f},
  };
  uint32_t seed = 100;
  for (const Case &c : cases) {
    int rank = static_cast<int>(c.shape.size());
    int axis = static_cast<int>(c.axis < 0 ? c.axis + rank : c.axis);
    std::vector<int64_t> target(c.shape.begin() + axis, c.shape.end());
    std::vector<int64_t> stats = c.shape;
    for (int d = axis; d < rank; ++d)
      stats[d] = 1;
    int64_t rows = numelOf({c.shape.begin(), c.shape.begin() + axis});
    int64_t n = numelOf(target);
    std::vector<float> x = values(numelOf(c.shape), seed++);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = x[i] * 3.0f + 0.5f; // a mean away from 0
    std::vector<float> scale = values(numelOf(c.scale), seed++);
    std::vector<float> bias = values(numelOf(c.bias), seed++);
    fb::NormAttrsT attrs;
    attrs.axis = c.axis;
    attrs.epsilon = c.epsilon;
    for (bool simplified : {false, true}) {
      bool hasBias = !simplified && !c.bias.empty();
      std::vector<std::optional<Value>> inputs = {f32(c.shape, x),
                                                  f32(c.scale, scale)};
      if (hasBias)
        inputs.push_back(f32(c.bias, bias));
      std::vector<Out> outs = {f32Out(dimsOf(c.shape)), f32Out(dimsOf(stats))};
      if (!simplified)
        outs.push_back(f32Out(dimsOf(stats)));
      auto want = runStep(simplified ? OpKind::SimplifiedLayerNormalization
                                     : OpKind::LayerNormalization,
                          inputs, outs, moert::attrs(attrs));
      ASSERT_TRUE(want.ok()) << want.status();
      FusedArgs params =
          broadcastArgsOf(target, {c.scale, hasBias ? c.bias : c.scale});
      NormResult got =
          emulateNorm(x, rows, n, c.epsilon, simplified, params, scale.data(),
                      hasBias ? bias.data() : nullptr);
      SCOPED_TRACE(::testing::Message()
                   << (simplified ? "RMSNorm" : "LayerNorm") << " axis "
                   << c.axis << " n " << n);
      expectCloseFloats(got.y, (*want)[0].as<float>(), 2e-6f, 1e-3f);
      if (simplified) {
        expectCloseFloats(got.inv, (*want)[1].as<float>(), 1e-6f);
      } else {
        expectCloseFloats(got.mean, (*want)[1].as<float>(), 1e-6f, 1e-3f);
        expectCloseFloats(got.inv, (*want)[2].as<float>(), 1e-6f);
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// On a GPU: the real kernels against the CPU backend
//===----------------------------------------------------------------------===//

constexpr int64_t kGenH = 8, kGenMaxT = 16;

/// A plan of every generic op on x [T, kGenH] (T symbolic), shape operands
/// as weights: RMSNorm, Unsqueeze, Reshape, Transpose, Slice (step -2),
/// Concat, Expand, Gather, Sin/Neg/Cos, Mul/Add (broadcast), Greater, Where,
/// Cast f32 -> i64 -> f32, Softmax over a middle axis, LayerNorm with stats,
/// Squeeze (of the stats), Identity, ReduceMean, ConstantOfShape.
absl::StatusOr<std::vector<uint8_t>> genericPlan(Backend backend) {
  static const std::vector<float> scale = randomFloats(kGenH, 201);
  static const std::vector<float> bias = randomFloats(kGenH, 202);
  static const std::vector<float> table = randomFloats(5 * kGenH, 203);
  static const std::vector<int64_t> unsqueezeAxes = {1};
  static const std::vector<int64_t> reshapeTo = {0, 2, -1};
  static const std::vector<int64_t> starts = {-1}, ends = {-100}, axes = {2},
                                    steps = {-2};
  static const std::vector<int64_t> expandTo = {2, 1, 1, 1};
  static const std::vector<int64_t> gatherIdx = {4, -1, 0};
  static const std::vector<int64_t> squeezeAxes = {-1};
  PlanWriter writer({backend, 1, backend == Backend::Cuda ? 90u : 0u});
  int T = writer.addSymbol("T", 1, kGenMaxT);
  ScheduleBuilder &s = writer.schedule();
  PlanDim t = PlanDim::symbol(T);
  auto weightF = [&](const char *name, std::vector<int64_t> shape,
                     const std::vector<float> &data) {
    return s.addWeight(name, DType::F32, std::move(shape), data.data(),
                       data.size() * sizeof(float));
  };
  auto weightI = [&](const char *name, const std::vector<int64_t> &data) {
    return s.addWeight(name, DType::I64, {static_cast<int64_t>(data.size())},
                       data.data(), data.size() * sizeof(int64_t));
  };
  auto f = [&](const char *name, std::vector<PlanDim> dims) {
    return s.addTensor(name, DType::F32, std::move(dims));
  };
  int32_t x = f("x", {t, kGenH});
  s.addInput(x);
  fb::NormAttrsT norm;
  int32_t normed = f("normed", {t, kGenH});
  s.addStep(OpKind::SimplifiedLayerNormalization, "rms",
            {x, weightF("scale", {kGenH}, scale)}, {normed}, attrs(norm));
  int32_t u = f("u", {t, 1, kGenH});
  s.addStep(OpKind::Unsqueeze, "unsqueeze",
            {normed, weightI("uaxes", unsqueezeAxes)}, {u});
  int32_t r = f("r", {t, 2, kGenH / 2});
  s.addStep(OpKind::Reshape, "reshape", {u, weightI("shape", reshapeTo)}, {r},
            attrs(fb::ReshapeAttrsT()));
  fb::TransposeAttrsT perm;
  perm.perm = {1, 0, 2};
  int32_t tr = f("tr", {2, t, kGenH / 2});
  s.addStep(OpKind::Transpose, "transpose", {r}, {tr}, attrs(perm));
  int32_t sl = f("sl", {2, t, kGenH / 4});
  s.addStep(OpKind::Slice, "slice",
            {tr, weightI("starts", starts), weightI("ends", ends),
             weightI("axes", axes), weightI("steps", steps)},
            {sl});
  fb::AxisAttrsT last;
  last.axis = -1;
  int32_t cat = f("cat", {2, t, kGenH / 2 + kGenH / 4});
  s.addStep(OpKind::Concat, "concat", {tr, sl}, {cat}, attrs(last));
  int32_t sinv = f("sin", {2, t, 6}), neg = f("neg", {2, t, 6}),
          cosv = f("cos", {2, t, 6});
  s.addStep(OpKind::Sin, "sin", {cat}, {sinv});
  s.addStep(OpKind::Neg, "neg", {sinv}, {neg});
  s.addStep(OpKind::Cos, "cos", {cat}, {cosv});
  int32_t gathered = f("gathered", {3, kGenH});
  fb::AxisAttrsT first;
  s.addStep(OpKind::Gather, "gather",
            {weightF("table", {5, kGenH}, table), weightI("idx", gatherIdx)},
            {gathered}, attrs(first));
  int32_t ex = f("ex", {2, 2, t, 6});
  s.addStep(OpKind::Expand, "expand", {neg, weightI("to", expandTo)}, {ex});
  int32_t mul = f("mul", {2, 2, t, 6}), add = f("add", {2, 2, t, 6});
  s.addStep(OpKind::Mul, "mul", {ex, cosv}, {mul});
  s.addStep(OpKind::Add, "add", {mul, sinv}, {add});
  int32_t gt = s.addTensor("gt", DType::Bool, {2, 2, t, 6});
  s.addStep(OpKind::Greater, "greater", {add, cosv}, {gt});
  int32_t where = f("where", {2, 2, t, 6});
  s.addStep(OpKind::Where, "where", {gt, mul, neg}, {where});
  fb::CastAttrsT toI64, toF32;
  toI64.to = fb::DType::I64;
  toF32.to = fb::DType::F32;
  int32_t scaled = f("scaled", {2, 2, t, 6});
  s.addStep(OpKind::Mul, "scale",
            {where, weightF("ten", {1}, std::vector<float>{10.0f})}, {scaled});
  int32_t asInt = s.addTensor("asInt", DType::I64, {2, 2, t, 6});
  s.addStep(OpKind::Cast, "toint", {scaled}, {asInt}, attrs(toI64));
  // A view of i64 data made on the GPU runs there too.
  int32_t sameInt = s.addTensor("sameInt", DType::I64, {2, 2, t, 6});
  s.addStep(OpKind::Identity, "identityint", {asInt}, {sameInt});
  int32_t back = f("back", {2, 2, t, 6});
  s.addStep(OpKind::Cast, "tofloat", {sameInt}, {back}, attrs(toF32));
  fb::AxisAttrsT middle;
  middle.axis = 2;
  int32_t soft = f("soft", {2, 2, t, 6});
  s.addStep(OpKind::Softmax, "softmax", {back}, {soft}, attrs(middle));
  fb::NormAttrsT layer;
  layer.axis = -2;
  int32_t ln = f("ln", {2, 2, t, 6}), mean = f("mean", {2, 2, 1, 1}),
          inv = f("inv", {2, 2, 1, 1});
  s.addStep(OpKind::LayerNormalization, "layernorm",
            {soft, weightF("lnscale", {1, 6}, std::vector<float>(6, 1.5f)),
             weightF("lnbias", {6},
                     std::vector<float>(bias.begin(), bias.begin() + 6))},
            {ln, mean, inv}, attrs(layer));
  int32_t meanSq = f("meanSq", {2, 2, 1});
  s.addStep(OpKind::Squeeze, "squeeze", {mean, weightI("saxes", squeezeAxes)},
            {meanSq});
  int32_t out = f("out", {2, 2, t, 6});
  s.addStep(OpKind::Identity, "identity", {ln}, {out});
  static const std::vector<int64_t> reduceAxes = {-1};
  fb::ReduceAttrsT keep;
  int32_t reducedOut = f("reduced", {2, 2, t, 1});
  s.addStep(OpKind::ReduceMean, "reducemean",
            {ln, weightI("raxes", reduceAxes)}, {reducedOut}, attrs(keep));
  static const std::vector<int64_t> fillShape = {1, 2};
  fb::ConstantOfShapeAttrsT fill;
  fill.float_value = 0.25f;
  int32_t filled = f("filled", {1, 2});
  s.addStep(OpKind::ConstantOfShape, "fill", {weightI("fshape", fillShape)},
            {filled}, attrs(fill));
  int32_t sum = f("sum", {2, 2, t, 2});
  s.addStep(OpKind::Add, "addfill", {reducedOut, filled}, {sum});
  for (int32_t id : {out, meanSq, inv, gathered, gt, sum})
    s.addOutput(id);
  return writer.serialize();
}

template <typename SessionT>
absl::StatusOr<std::vector<Value>> runGeneric(SessionT &session,
                                              const std::vector<float> &x) {
  int64_t T = static_cast<int64_t>(x.size()) / kGenH;
  MOERT_RETURN_IF_ERROR(session.setInput("x", DType::F32, {T, kGenH}, x.data(),
                                         x.size() * sizeof(float)));
  MOERT_RETURN_IF_ERROR(session.run());
  std::vector<Value> results;
  for (const char *name : {"out", "meanSq", "inv", "gathered", "gt", "sum"}) {
    MOERT_ASSIGN_OR_RETURN(Value v, outputValue(session, name));
    results.push_back(std::move(v));
  }
  return results;
}

TEST(CudaGenericDevice, PlanLoadsAndTheCpuRunsIt) {
  // What the GPU test needs of the plan, checked everywhere.
  for (Backend backend : {Backend::Cpu, Backend::Cuda}) {
    auto bytes = genericPlan(backend);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
    ASSERT_TRUE(plan.ok()) << plan.status();
    if (backend != Backend::Cpu)
      continue;
    auto cpu = Session::create(**plan, SessionOptions());
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    for (int64_t T : {int64_t{1}, int64_t{5}, kGenMaxT}) {
      auto result = runGeneric(**cpu, randomFloats(T * kGenH, 7 + T));
      ASSERT_TRUE(result.ok()) << result.status();
    }
  }
}

TEST(CudaGenericDevice, EveryStepRunsOnTheGpuAndMatchesTheCpu) {
  MOERT_REQUIRE_GPU();
  auto cpuBytes = genericPlan(Backend::Cpu);
  auto gpuBytes = genericPlan(Backend::Cuda);
  ASSERT_TRUE(cpuBytes.ok() && gpuBytes.ok());
  auto pair = openOnBothBackends(*cpuBytes, *gpuBytes);
  ASSERT_TRUE(pair.ok()) << pair.status();
  Session *cpu = pair->cpu.get();
  CudaSession *gpu = pair->gpu.get();
  // Every step on the GPU: runs go through CUDA graphs (eager, captured,
  // replayed per size).
  EXPECT_TRUE(gpu->usesGraphs());
  for (int pass = 0; pass < 3; ++pass)
    for (int64_t T : {int64_t{1}, int64_t{5}, kGenMaxT}) {
      SCOPED_TRACE(::testing::Message() << "T " << T << " pass " << pass);
      std::vector<float> x = randomFloats(T * kGenH, 300 + T + 10 * pass);
      auto want = runGeneric(*cpu, x);
      auto got = runGeneric(*gpu, x);
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_TRUE(got.ok()) << got.status();
      for (int k : {0, 1, 2, 5}) {
        EXPECT_EQ((*got)[k].shape, (*want)[k].shape) << k;
        expectCloseFloats((*got)[k].as<float>(), (*want)[k].as<float>(), 1e-4f,
                          1e-2f);
      }
      expectSameFloats((*got)[3].as<float>(), (*want)[3].as<float>());
      EXPECT_EQ((*got)[4].as<uint8_t>(), (*want)[4].as<uint8_t>());
    }
  for (const StepStats &step : gpu->stepStats())
    EXPECT_THAT(step.op, ::testing::EndsWith("@cuda")) << step.name;
}

/// x [T, 4] -> out = Reshape(x, [Dim(x, 0), -1]) + Cast(Range(0, Dim(x, 0),
/// 1))[:, None]: shape arithmetic on the host (Dim, Unsqueeze, Concat,
/// Range) whose results a GPU step reads on the host (Reshape's shape) and
/// as data (Cast's input), as exports compute masks and positions.
absl::StatusOr<std::vector<uint8_t>> hostShapePlan(Backend backend) {
  PlanWriter writer({backend, 1, backend == Backend::Cuda ? 90u : 0u});
  int t = writer.addSymbol("T", 1, 16);
  ScheduleBuilder &s = writer.schedule();
  // Shape operands as weights: vectors, or scalars (Range's start, delta).
  auto weightI = [&](const char *name, std::vector<int64_t> data,
                     bool scalar = false) {
    std::vector<int64_t> shape;
    if (!scalar)
      shape.push_back(static_cast<int64_t>(data.size()));
    return s.addWeight(name, DType::I64, shape, data.data(), data.size() * 8);
  };
  int32_t x = s.addTensor("x", DType::F32, {PlanDim::symbol(t), 4});
  s.addInput(x);
  int32_t n = s.addTensor("n", DType::I64, {});
  fb::AxisAttrsT axis0;
  s.addStep(OpKind::Dim, "dim", {x}, {n}, attrs(axis0));
  int32_t n1 = s.addTensor("n1", DType::I64, {1});
  s.addStep(OpKind::Unsqueeze, "n1", {n, weightI("axes0", {0})}, {n1});
  int32_t shape = s.addTensor("shape", DType::I64, {2});
  s.addStep(OpKind::Concat, "shape", {n1, weightI("minus1", {-1})}, {shape},
            attrs(axis0));
  int32_t y = s.addTensor("y", DType::F32, {PlanDim::symbol(t), 4});
  s.addStep(OpKind::Reshape, "reshape", {x, shape}, {y},
            attrs(fb::ReshapeAttrsT()));
  int32_t r = s.addTensor("r", DType::I64, {PlanDim::symbol(t)});
  s.addStep(OpKind::Range, "range",
            {weightI("zero", {0}, true), n, weightI("one", {1}, true)}, {r});
  fb::CastAttrsT toF32;
  toF32.to = fb::DType::F32;
  int32_t rf = s.addTensor("rf", DType::F32, {PlanDim::symbol(t)});
  s.addStep(OpKind::Cast, "cast", {r}, {rf}, attrs(toF32));
  int32_t rf2 = s.addTensor("rf2", DType::F32, {PlanDim::symbol(t), 1});
  s.addStep(OpKind::Unsqueeze, "rf2", {rf, weightI("axes1", {1})}, {rf2});
  int32_t out = s.addTensor("out", DType::F32, {PlanDim::symbol(t), 4});
  s.addStep(OpKind::Add, "add", {y, rf2}, {out});
  s.addOutput(out);
  return writer.serialize();
}

TEST(CudaGenericDevice, HostShapePlanRunsOnTheCpu) {
  auto bytes = hostShapePlan(Backend::Cpu);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto cpu = Session::create(**plan, SessionOptions());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::vector<float> x = randomFloats(3 * 4, 5);
  ASSERT_TRUE((*cpu)->setInput("x", DType::F32, {3, 4}, x.data(), 48).ok());
  ASSERT_TRUE((*cpu)->run().ok());
  auto out = (*cpu)->output("out");
  ASSERT_TRUE(out.ok()) << out.status();
  const float *o = static_cast<const float *>(out->data);
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(o[i], x[i] + float(i / 4)) << i;
}

TEST(CudaGenericDevice, GraphsReplayOverHostShapeArithmetic) {
  MOERT_REQUIRE_GPU();
  auto bytes = hostShapePlan(Backend::Cuda);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto gpu = CudaSession::create(**plan);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  // Dim, Unsqueeze and Concat of i64, Range: on the host, from sizes only.
  EXPECT_TRUE((*gpu)->usesGraphs());
  for (int pass = 0; pass < 4; ++pass)
    for (int64_t T : {int64_t{1}, int64_t{7}, int64_t{16}}) {
      SCOPED_TRACE(::testing::Message() << "T " << T << " pass " << pass);
      std::vector<float> x = randomFloats(T * 4, 40 + T + 100 * pass);
      ASSERT_TRUE(
          (*gpu)
              ->setInput("x", DType::F32, {T, 4}, x.data(), x.size() * 4)
              .ok());
      absl::Status ran = (*gpu)->run();
      ASSERT_TRUE(ran.ok()) << ran;
      auto out = (*gpu)->output("out");
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->shape, (std::vector<int64_t>{T, 4}));
      const float *o = static_cast<const float *>(out->data);
      for (int64_t i = 0; i < T * 4; ++i)
        ASSERT_EQ(o[i], x[i] + float(i / 4)) << i;
    }
  EXPECT_EQ((*gpu)->graphsRefused(), "");
  EXPECT_TRUE((*gpu)->usesGraphs());
}

} // namespace
} // namespace moert::testing
