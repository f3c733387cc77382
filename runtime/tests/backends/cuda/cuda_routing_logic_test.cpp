//===- cuda_routing_logic_test.cpp - Routing kernels' logic vs the CPU ----===//
//
// The per-thread logic of the GPU's Router, Dispatch, Combine and Gemm
// kernels (cuda/routing_logic.h), run for every thread index of each launch
// in the kernels' launch order ("emulated grid") and compared with the CPU
// backend's kernels, which run as one-step plans (test_util.h's runStep).
// Within a launch the threads are visited in a random order: the result must
// not depend on it, as on the GPU. Builds and runs with or without CUDA; the
// kernels themselves (routing_kernels.cu) only map thread indices to these
// functions.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/routing_logic.h"
#include "moert/cuda.h"
#include "test_util.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace moert::testing {
namespace {

using fb::OpKind;
namespace gpu = moert::cuda;

/// Calls fn(i) for every thread index i of a launch of n threads, in a
/// random order.
template <typename Fn> void forEachThread(int64_t n, std::mt19937 &rng, Fn fn) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t i : order)
    fn(i);
}

/// The host twin of DeviceErrorRecord: the first recorded error wins.
struct ErrorRecord {
  int code = 0;
  int64_t a = 0, b = 0;
  void record(int c, int64_t x, int64_t y) {
    if (!code) {
      code = c;
      a = x;
      b = y;
    }
  }
};

/// Random multiples of `step` in [-range, range]: distinct values are far
/// apart (no near-ties that expf and the CPU's exp could order differently)
/// and equal values are frequent (exact ties).
std::vector<float> quantized(size_t count, float range, float step,
                             std::mt19937 &rng) {
  int64_t steps = static_cast<int64_t>(range / step);
  std::uniform_int_distribution<int64_t> pick(-steps, steps);
  std::vector<float> out(count);
  for (float &v : out)
    v = static_cast<float>(pick(rng)) * step;
  return out;
}

/// Expects `got` to match `want` within `tolerance` relative to |want| or
/// `floor`, whichever is larger (NaN matches NaN).
void expectClose(const std::vector<float> &got, const std::vector<float> &want,
                 float tolerance = 1e-6f, float floor = 1e-3f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << "element " << i << ": " << got[i];
      continue;
    }
    ASSERT_NEAR(got[i], want[i],
                tolerance * std::max(std::fabs(want[i]), floor))
        << "element " << i;
  }
}

//===----------------------------------------------------------------------===//
// Router
//===----------------------------------------------------------------------===//

/// A router's attributes, and whether the step has a bias input.
struct RouterCase : RouterSpec {
  bool bias = false;
  bool sigmoid() const { return score == fb::ScoreFunction::Sigmoid; }
};

/// The router kernels' launches: one thread per token, then (capacity) one
/// per (sequence, expert), then (normalize_kept) one per token.
void emulateRouter(const RouterCase &c, const std::vector<float> &logits,
                   const float *bias, int64_t E, int64_t sequences,
                   std::mt19937 &rng, std::vector<float> &weights,
                   std::vector<int64_t> &indices) {
  gpu::RouterLogicParams p{E,           c.topK,  c.sigmoid(), c.afterTopK,
                           c.normalize, c.scale, c.groups,    c.keep};
  int64_t T = static_cast<int64_t>(logits.size()) / E, k = c.topK;
  weights.assign(T * k, -7.0f);
  indices.assign(T * k, -7);
  forEachThread(T, rng, [&](int64_t t) {
    gpu::routeToken(p, logits.data(), bias, t, weights.data(), indices.data());
  });
  if (c.capacity > 0)
    forEachThread(sequences * E, rng, [&](int64_t i) {
      gpu::applyCapacity(indices.data(), T / sequences, k, c.capacity, i / E,
                         i % E);
    });
  if (c.keptEpsilon > 0)
    forEachThread(T, rng, [&](int64_t t) {
      gpu::normalizeKept(weights.data() + t * k, indices.data() + t * k, k,
                         c.keptEpsilon);
    });
}

/// Runs the CPU Router and the emulated grid on the same logits [shape].
void checkRouter(const RouterCase &c, const std::vector<int64_t> &shape,
                 const std::vector<float> &logits,
                 const std::vector<float> &bias, std::mt19937 &rng) {
  int64_t E = shape.back();
  std::vector<int64_t> outShape = shape;
  outShape.back() = c.topK;
  std::vector<PlanDim> outDims(outShape.begin(), outShape.end());
  std::vector<std::optional<Value>> inputs = {f32(shape, logits)};
  if (c.bias)
    inputs.push_back(f32({E}, bias));
  auto cpu =
      runStep(OpKind::Router, inputs,
              {{DType::F32, outDims}, {DType::I64, outDims}}, routerAttrs(c));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::vector<float> weights;
  std::vector<int64_t> indices;
  emulateRouter(c, logits, c.bias ? bias.data() : nullptr, E,
                shape.size() == 3 ? shape[0] : 1, rng, weights, indices);
  ASSERT_EQ(indices, (*cpu)[1].as<int64_t>());
  expectClose(weights, (*cpu)[0].as<float>());
}

/// Shapes of T tokens: [T, E] and, for capacity per sequence, [B, S, E].
std::vector<int64_t> tokenShape(int64_t T, int64_t E, bool sequences) {
  if (!sequences)
    return {T, E};
  int64_t B = T % 4 == 0 ? 4 : T % 3 == 0 ? 3 : 1;
  return {B, T / B, E};
}

TEST(CudaRoutingLogic, RouterMatchesTheCpuOverEveryVariant) {
  std::mt19937 rng(17);
  int checked = 0;
  for (int64_t E : {4, 8, 64, 256})
    for (int64_t k : {1, 2, 4, 8}) {
      if (k > E)
        continue;
      // Groups of at least two experts, enough kept to hold k.
      int64_t groups = E == 4 ? 2 : E == 8 ? 4 : 8, size = E / groups;
      int64_t keep = std::min(
          groups, std::max<int64_t>(groups / 2, (k + size - 1) / size));
      std::vector<std::pair<const char *, RouterCase>> variants;
      RouterCase softmax;
      softmax.topK = k;
      variants.push_back({"softmax", softmax});
      RouterCase mixtral = softmax;
      mixtral.normalize = true;
      variants.push_back({"softmax normalize", mixtral});
      RouterCase after = softmax;
      after.afterTopK = true;
      variants.push_back({"after_topk", after});
      RouterCase deepseek = softmax;
      deepseek.score = fb::ScoreFunction::Sigmoid;
      deepseek.normalize = deepseek.bias = true;
      deepseek.scale = 2.5f;
      deepseek.groups = groups;
      deepseek.keep = keep;
      variants.push_back({"sigmoid bias groups normalize scale", deepseek});
      RouterCase sigmoid = softmax;
      sigmoid.score = fb::ScoreFunction::Sigmoid;
      sigmoid.bias = true;
      variants.push_back({"sigmoid bias", sigmoid});
      RouterCase afterGrouped = after;
      afterGrouped.bias = true;
      afterGrouped.groups = groups;
      afterGrouped.keep = keep;
      afterGrouped.scale = 0.5f;
      variants.push_back({"after_topk bias groups scale", afterGrouped});
      for (int64_t T : {1, 7, 64, 300}) {
        RouterCase capacity = mixtral;
        // About half of an even share: most sequences drop assignments.
        std::vector<int64_t> shape = tokenShape(T, E, true);
        capacity.capacity = std::max<int64_t>(1, shape[1] * k / (2 * E));
        RouterCase gshard = softmax;
        gshard.capacity = capacity.capacity;
        gshard.keptEpsilon = 1.1920929e-7f;
        auto all = variants;
        all.push_back({"capacity", capacity});
        all.push_back({"capacity normalize_kept", gshard});
        for (const auto &[name, c] : all) {
          SCOPED_TRACE(::testing::Message()
                       << name << ", E " << E << ", k " << k << ", T " << T);
          std::vector<int64_t> s = tokenShape(T, E, c.capacity > 0);
          std::vector<float> logits = quantized(T * E, 4.0f, 0.125f, rng);
          std::vector<float> bias = quantized(E, 0.5f, 0.0625f, rng);
          checkRouter(c, s, logits, bias, rng);
          if (HasFatalFailure())
            return;
          ++checked;
        }
      }
    }
  EXPECT_EQ(checked, 15 * 4 * 8);
}

TEST(CudaRoutingLogic, RouterTiesGoToTheLowerIndex) {
  std::mt19937 rng(3);
  RouterCase c;
  c.topK = 4;
  c.normalize = true;
  // Every logit equal: experts 0..3, equal weights.
  checkRouter(c, {5, 8}, std::vector<float>(40, 0.25f), {}, rng);
  c.score = fb::ScoreFunction::Sigmoid;
  c.bias = true;
  c.groups = 4;
  c.keep = 2;
  // Equal groups too: groups 0 and 1 are kept.
  checkRouter(c, {3, 8}, std::vector<float>(24, -1.0f),
              std::vector<float>(8, 0.5f), rng);
}

TEST(CudaRoutingLogic, RouterRanksNanAboveEveryNumber) {
  std::mt19937 rng(5);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits = quantized(4 * 8, 2.0f, 0.125f, rng);
  logits[3] = nan;           // Token 0: one NaN logit.
  logits[8 + 6] = nan;       // Token 1: two.
  logits[8 + 1] = nan;       //
  logits[24 + 7] = INFINITY; // Token 3: an infinite one.
  for (bool sigmoid : {false, true}) {
    RouterCase c;
    c.topK = 3;
    c.score = sigmoid ? fb::ScoreFunction::Sigmoid : fb::ScoreFunction::Softmax;
    c.normalize = true;
    SCOPED_TRACE(sigmoid ? "sigmoid" : "softmax");
    checkRouter(c, {4, 8}, logits, {}, rng);
    c.bias = true;
    c.groups = 2;
    checkRouter(c, {4, 8}, logits, quantized(8, 0.5f, 0.0625f, rng), rng);
  }
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

fb::AttrsUnion dispatchAttrs(int64_t experts) {
  fb::DispatchAttrsT a;
  a.num_experts = experts;
  return attrs(a);
}

struct Dispatched {
  std::vector<float> rows;
  std::vector<int64_t> offsets, source;
  ErrorRecord error;
};

/// The dispatch kernels' five launches.
Dispatched emulateDispatch(const std::vector<float> &x,
                           const std::vector<int64_t> &idx, int64_t T,
                           int64_t k, int64_t H, int64_t E, std::mt19937 &rng) {
  int64_t rows = T * k, chunks = gpu::dispatchChunks(rows);
  Dispatched d;
  std::vector<int32_t> counts(chunks * E, -7);
  d.offsets.assign(E + 1, -7);
  d.source.assign(rows, -7);
  d.rows.assign(rows * H, -7.0f);
  forEachThread(chunks * E, rng, [&](int64_t i) {
    int64_t c = i / E, e = i % E;
    gpu::chunkHistogram(idx.data(), rows, E, c, e, counts.data());
    if (e == 0)
      if (int64_t bad = gpu::firstInvalidIndex(idx.data(), rows, E, c);
          bad >= 0)
        d.error.record(gpu::kDispatchIndexOutOfRange, bad, idx[bad]);
  });
  forEachThread(E, rng, [&](int64_t e) {
    gpu::chunkPrefix(counts.data(), chunks, E, e, d.offsets.data());
  });
  gpu::scanOffsets(d.offsets.data(), E);
  forEachThread(rows, rng, [&](int64_t a) {
    gpu::placeAssignment(idx.data(), rows, E, counts.data(), d.offsets.data(),
                         a, d.source.data());
  });
  forEachThread(rows * H, rng, [&](int64_t i) {
    d.rows[i] =
        gpu::dispatchElement(x.data(), d.source.data(), k, H, i / H, i % H);
  });
  return d;
}

absl::StatusOr<std::vector<Value>> cpuDispatch(const std::vector<float> &x,
                                               const std::vector<int64_t> &idx,
                                               int64_t T, int64_t k, int64_t H,
                                               int64_t E) {
  return runStep(
      OpKind::Dispatch, {f32({T, H}, x), i64({T, k}, idx)},
      {{DType::F32, {T * k, H}}, {DType::I64, {E + 1}}, {DType::I64, {T * k}}},
      dispatchAttrs(E));
}

/// Expert indices in [-1, E): about 10% dropped; `hot` sends most to one
/// expert (counts far above a chunk).
std::vector<int64_t> randomIndices(int64_t count, int64_t E, bool hot,
                                   std::mt19937 &rng) {
  std::uniform_int_distribution<int64_t> expert(0, E - 1);
  std::uniform_real_distribution<float> coin(0, 1);
  std::vector<int64_t> idx(count);
  for (int64_t &e : idx) {
    float u = coin(rng);
    e = u < 0.1f ? -1 : hot && u < 0.8f ? E / 2 : expert(rng);
  }
  return idx;
}

TEST(CudaRoutingLogic, DispatchIsTheCpusStableCountingSort) {
  std::mt19937 rng(29);
  const int64_t H = 5;
  for (int64_t E : {4, 8, 64, 256})
    for (int64_t k : {1, 2, 4, 8})
      for (int64_t T : {1, 7, 64, 300})
        for (bool hot : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "E " << E << ", k " << k << ", T " << T
                       << (hot ? ", hot" : ""));
          std::vector<float> x = randomFloats(T * H, T + E);
          std::vector<int64_t> idx = randomIndices(T * k, E, hot, rng);
          auto cpu = cpuDispatch(x, idx, T, k, H, E);
          ASSERT_TRUE(cpu.ok()) << cpu.status();
          Dispatched d = emulateDispatch(x, idx, T, k, H, E, rng);
          EXPECT_EQ(d.error.code, 0);
          ASSERT_EQ(d.offsets, (*cpu)[1].as<int64_t>());
          ASSERT_EQ(d.source, (*cpu)[2].as<int64_t>());
          // Row copies and zeroed padding rows, bit for bit.
          ASSERT_EQ(d.rows, (*cpu)[0].as<float>());
        }
}

TEST(CudaRoutingLogic, DispatchRecordsAnOutOfRangeExpertIndex) {
  std::mt19937 rng(31);
  const int64_t T = 50, k = 2, H = 3, E = 8;
  std::vector<float> x = randomFloats(T * H, 1);
  for (int64_t bad : {int64_t(8), int64_t(-2), int64_t(1) << 40}) {
    std::vector<int64_t> idx = randomIndices(T * k, E, false, rng);
    idx[77] = bad;
    auto cpu = cpuDispatch(x, idx, T, k, H, E);
    EXPECT_THAT(cpu.status(),
                StatusHas(absl::StrCat("expert index ", bad,
                                       " at position 77 is out of range")));
    Dispatched d = emulateDispatch(x, idx, T, k, H, E, rng);
    EXPECT_EQ(d.error.code, gpu::kDispatchIndexOutOfRange);
    EXPECT_EQ(d.error.a, 77);
    EXPECT_EQ(d.error.b, bad);
    // The other assignments are still placed inside the outputs.
    for (int64_t a : d.source)
      EXPECT_TRUE(a >= -1 && a < T * k && a != 77);
  }
}

//===----------------------------------------------------------------------===//
// Combine
//===----------------------------------------------------------------------===//

struct Combined {
  std::vector<float> out;
  ErrorRecord error;
};

/// The combine kernels' four launches.
Combined emulateCombine(const std::vector<float> &y,
                        const std::vector<int64_t> &source,
                        const std::vector<float> &w, const float *passthrough,
                        const int64_t *indices, int64_t T, int64_t k, int64_t H,
                        std::mt19937 &rng) {
  int64_t N = static_cast<int64_t>(source.size()), assignments = T * k;
  std::vector<long long> row(assignments, -7);
  Combined c;
  c.out.assign(T * H, -7.0f);
  forEachThread(assignments, rng, [&](int64_t a) { row[a] = gpu::kNoRow; });
  forEachThread(N, rng, [&](int64_t r) {
    int status = gpu::combineSourceStatus(source.data(), assignments, r);
    if (status == 0)
      gpu::keepSmallerRow(&row[source[r]], r);
    else if (status > 0)
      c.error.record(status, r, source[r]);
  });
  forEachThread(N, rng, [&](int64_t r) {
    if (gpu::combineSourceStatus(source.data(), assignments, r) == 0 &&
        gpu::combineSourceRepeats(source.data(), row.data(), r))
      c.error.record(gpu::kCombineSourceRepeats, r, row[source[r]]);
  });
  forEachThread(T * H, rng, [&](int64_t i) {
    c.out[i] = gpu::combineElement(y.data(), row.data(), w.data(), passthrough,
                                   indices, k, H, i / H, i % H);
  });
  return c;
}

TEST(CudaRoutingLogic, CombineMatchesTheCpuWithAndWithoutPassthrough) {
  std::mt19937 rng(37);
  const int64_t H = 6;
  for (int64_t E : {4, 8, 64, 256})
    for (int64_t k : {1, 2, 4, 8})
      for (int64_t T : {1, 7, 64, 300}) {
        SCOPED_TRACE(::testing::Message()
                     << "E " << E << ", k " << k << ", T " << T);
        std::vector<int64_t> idx = randomIndices(T * k, E, false, rng);
        auto dispatched = cpuDispatch(randomFloats(T * H, 2), idx, T, k, H, E);
        ASSERT_TRUE(dispatched.ok()) << dispatched.status();
        std::vector<int64_t> source = (*dispatched)[2].as<int64_t>();
        int64_t N = T * k;
        std::vector<float> y = randomFloats(N * H, 3);
        std::vector<float> w = randomFloats(T * k, 4);
        std::vector<float> passthrough = randomFloats(T * H, 5);
        for (bool withPassthrough : {false, true}) {
          std::vector<std::optional<Value>> inputs = {
              f32({N, H}, y), i64({N}, source), f32({T, k}, w)};
          if (withPassthrough) {
            inputs.push_back(f32({T, H}, passthrough));
            inputs.push_back(i64({T, k}, idx));
          }
          auto cpu = runStep(OpKind::Combine, inputs, {{DType::F32, {T, H}}});
          ASSERT_TRUE(cpu.ok()) << cpu.status();
          Combined c = emulateCombine(
              y, source, w, withPassthrough ? passthrough.data() : nullptr,
              withPassthrough ? idx.data() : nullptr, T, k, H, rng);
          EXPECT_EQ(c.error.code, 0);
          expectClose(c.out, (*cpu)[0].as<float>());
        }
      }
}

TEST(CudaRoutingLogic, CombineRecordsBadSources) {
  std::mt19937 rng(41);
  auto cpu = [](std::vector<int64_t> source) {
    return runStep(
               OpKind::Combine,
               {f32({3, 1}, {1, 2, 3}), i64({3}, source), f32({1, 2}, {1, 1})},
               {{DType::F32, {1, 1}}})
        .status();
  };
  auto gpuRecord = [&](std::vector<int64_t> source) {
    return emulateCombine({1, 2, 3}, source, {1, 1}, nullptr, nullptr, 1, 2, 1,
                          rng)
        .error;
  };
  EXPECT_THAT(cpu({0, 2, -1}), StatusHas("source[1] = 2 is out of range"));
  ErrorRecord outOfRange = gpuRecord({0, 2, -1});
  EXPECT_EQ(outOfRange.code, gpu::kCombineSourceOutOfRange);
  EXPECT_EQ(outOfRange.a, 1);
  EXPECT_EQ(outOfRange.b, 2);

  EXPECT_THAT(cpu({-1, 1, 1}),
              StatusHas("source[2] repeats assignment 1 of source[1]"));
  // Whatever the order of the threads, the smaller row is the original.
  for (int run = 0; run < 5; ++run) {
    ErrorRecord repeat = gpuRecord({-1, 1, 1});
    EXPECT_EQ(repeat.code, gpu::kCombineSourceRepeats);
    EXPECT_EQ(repeat.a, 2);
    EXPECT_EQ(repeat.b, 1);
  }
}

//===----------------------------------------------------------------------===//
// MatMul and Gemm: the cuBLAS call's arguments
//===----------------------------------------------------------------------===//

/// What cuBLAS computes for `g` (column-major, op(X)(i, j) = X(j, i) when
/// transposed): C = alpha op(first) op(second) + beta C.
void columnMajorReference(const gpu::ColumnMajorGemm &g, float alpha,
                          const float *first, const float *second, float beta,
                          float *c) {
  auto at = [](const float *x, int64_t ld, bool trans, int64_t i, int64_t j) {
    return trans ? x[j + i * ld] : x[i + j * ld];
  };
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < g.k; ++p)
        sum += double(at(first, g.ldFirst, g.transFirst, i, p)) *
               at(second, g.ldSecond, g.transSecond, p, j);
      float &out = c[i + j * g.ldc];
      out = static_cast<float>(alpha * sum + (beta == 0 ? 0.0 : beta * out));
    }
}

TEST(CudaRoutingLogic, GemmArgumentsMatchTheCpuGemm) {
  const int64_t m = 3, n = 4, k = 5;
  const float alpha = 0.75f, beta = 1.5f;
  std::vector<std::vector<int64_t>> cShapes = {{},     {1},    {n},   {1, n},
                                               {m, 1}, {m, n}, {1, 1}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const std::vector<int64_t> &cs : cShapes) {
        SCOPED_TRACE(::testing::Message() << "transA " << ta << ", transB "
                                          << tb << ", C rank " << cs.size());
        std::vector<int64_t> sa =
            ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
        std::vector<int64_t> sb =
            tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
        std::vector<float> a = randomFloats(m * k, 6),
                           b = randomFloats(k * n, 7);
        int64_t cCount = 1;
        for (int64_t d : cs)
          cCount *= d;
        std::vector<float> c = randomFloats(cCount, 8);
        fb::GemmAttrsT g;
        g.alpha = alpha;
        g.beta = beta;
        g.trans_a = ta;
        g.trans_b = tb;
        auto cpu = runStep(OpKind::Gemm, {f32(sa, a), f32(sb, b), f32(cs, c)},
                           {{DType::F32, {m, n}}}, attrs(g));
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        // Y = C broadcast, then the column-major call on the row-major data.
        int64_t rowStride, colStride;
        gpu::gemmCStrides(static_cast<int>(cs.size()), cs.data(), rowStride,
                          colStride);
        std::vector<float> y(m * n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            y[i * n + j] =
                gpu::broadcastCElement(c.data(), rowStride, colStride, i, j);
        gpu::ColumnMajorGemm call =
            gpu::columnMajorGemm(ta, tb, m, n, k, sa[1], sb[1], n);
        columnMajorReference(call, alpha, b.data(), a.data(), beta, y.data());
        // Sums of products of O(1) values: an absolute tolerance.
        expectClose(y, (*cpu)[0].as<float>(), 1e-5f, 1.0f);
      }
}

TEST(CudaRoutingLogic, StridedBatchedMatMulMatchesTheCpu) {
  // A [3, m, k] x B [k, n] (B broadcast: stride 0) and A [m, k] x B [3, k, n]
  // (A broadcast), as strided batched calls.
  const int64_t batch = 3, m = 2, k = 4, n = 5;
  for (bool batchedA : {true, false}) {
    SCOPED_TRACE(batchedA ? "A batched" : "B batched");
    std::vector<int64_t> sa = {m, k}, sb = {k, n};
    (batchedA ? sa : sb).insert((batchedA ? sa : sb).begin(), batch);
    std::vector<float> a = randomFloats((batchedA ? batch : 1) * m * k, 9);
    std::vector<float> b = randomFloats((batchedA ? 1 : batch) * k * n, 10);
    auto cpu = runStep(OpKind::MatMul, {f32(sa, a), f32(sb, b)},
                       {{DType::F32, {batch, m, n}}});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    int64_t strideA = batchedA ? m * k : 0, strideB = batchedA ? 0 : k * n;
    std::vector<float> c(batch * m * n);
    gpu::ColumnMajorGemm call =
        gpu::columnMajorGemm(false, false, m, n, k, k, n, n);
    for (int64_t i = 0; i < batch; ++i)
      columnMajorReference(call, 1.0f, b.data() + i * strideB,
                           a.data() + i * strideA, 0.0f, c.data() + i * m * n);
    expectClose(c, (*cpu)[0].as<float>(), 1e-5f, 1.0f);
  }
}

//===----------------------------------------------------------------------===//
// On a GPU: the real kernels and cuBLAS against the CPU backend
//===----------------------------------------------------------------------===//

constexpr int64_t kLayerE = 8, kLayerK = 2, kLayerH = 16, kLayerMaxT = 64;

/// A routed layer that runs every GPU routing op: logits = x gate (MatMul),
/// Router (sigmoid, bias, groups, capacity; renormalised before capacity,
/// or with `keptNormalize` over the kept choices after it), Dispatch, a Gemm
/// standing in for the experts (transposed B, broadcast C), Combine with
/// passthrough.
absl::StatusOr<std::vector<uint8_t>>
layerPlan(Backend backend, int64_t capacity, bool keptNormalize = false) {
  static const std::vector<float> gate = randomFloats(kLayerH * kLayerE, 51);
  static const std::vector<float> bias = randomFloats(kLayerE, 52);
  static const std::vector<float> w = randomFloats(kLayerH * kLayerH, 53);
  static const std::vector<float> c = randomFloats(kLayerH, 54);
  PlanWriter writer({backend, 1, backend == Backend::Cuda ? 90u : 0u});
  int T = writer.addSymbol("T", 1, kLayerMaxT);
  ScheduleBuilder &s = writer.schedule();
  PlanDim tokens = PlanDim::symbol(T),
          rows = PlanDim::dynamic(kLayerMaxT * kLayerK);
  int32_t x = s.addTensor("x", DType::F32, {tokens, kLayerH});
  s.addInput(x);
  auto weight = [&](const char *name, std::vector<int64_t> shape,
                    const std::vector<float> &data) {
    return s.addWeight(name, DType::F32, std::move(shape), data.data(),
                       data.size() * sizeof(float));
  };
  int32_t gateW = weight("gate", {kLayerH, kLayerE}, gate);
  int32_t biasW = weight("bias", {kLayerE}, bias);
  int32_t expertW = weight("w", {kLayerH, kLayerH}, w);
  int32_t expertC = weight("c", {kLayerH}, c);
  int32_t logits = s.addTensor("logits", DType::F32, {tokens, kLayerE});
  int32_t weights = s.addTensor("weights", DType::F32, {tokens, kLayerK});
  int32_t idx = s.addTensor("idx", DType::I64, {tokens, kLayerK});
  int32_t expertIn = s.addTensor("rows", DType::F32, {rows, kLayerH});
  int32_t offsets = s.addTensor("offsets", DType::I64, {kLayerE + 1});
  int32_t source = s.addTensor("source", DType::I64, {rows});
  int32_t expertOut = s.addTensor("y", DType::F32, {rows, kLayerH});
  int32_t out = s.addTensor("out", DType::F32, {tokens, kLayerH});
  for (int32_t id : {out, weights, idx, offsets, source})
    s.addOutput(id);
  s.addStep(OpKind::MatMul, "gate", {x, gateW}, {logits});
  RouterCase router;
  router.score = fb::ScoreFunction::Sigmoid;
  router.normalize = true;
  router.topK = kLayerK;
  router.groups = 4;
  router.keep = 2;
  router.capacity = capacity;
  if (keptNormalize) {
    router.normalize = false;
    router.keptEpsilon = 1.1920929e-7f;
  }
  s.addStep(OpKind::Router, "router", {logits, biasW}, {weights, idx},
            routerAttrs(router));
  s.addStep(OpKind::Dispatch, "dispatch", {x, idx}, {expertIn, offsets, source},
            dispatchAttrs(kLayerE));
  fb::GemmAttrsT gemm;
  gemm.trans_b = true;
  gemm.alpha = 0.5f;
  gemm.beta = 2.0f;
  s.addStep(OpKind::Gemm, "experts", {expertIn, expertW, expertC}, {expertOut},
            attrs(gemm));
  s.addStep(OpKind::Combine, "combine", {expertOut, source, weights, x, idx},
            {out});
  return writer.serialize();
}

/// Runs `session` (created from a plan of layerPlan) on x [T, H].
template <typename SessionT>
absl::StatusOr<std::vector<Value>> runLayer(SessionT &session,
                                            const std::vector<float> &x) {
  int64_t T = static_cast<int64_t>(x.size()) / kLayerH;
  MOERT_RETURN_IF_ERROR(session.setInput("x", DType::F32, {T, kLayerH},
                                         x.data(), x.size() * sizeof(float)));
  MOERT_RETURN_IF_ERROR(session.run());
  std::vector<Value> results;
  for (const char *name : {"out", "weights", "idx", "offsets", "source"}) {
    MOERT_ASSIGN_OR_RETURN(Value v, outputValue(session, name));
    results.push_back(std::move(v));
  }
  return results;
}

TEST(CudaRoutingDevice, LayerPlansLoadAndTheCpuRunsThem) {
  // What the GPU test below needs of the plans, checked everywhere: a GPU
  // failure there is then the GPU's.
  for (auto [backend, kept] :
       {std::pair(Backend::Cpu, false), std::pair(Backend::Cuda, false),
        std::pair(Backend::Cpu, true), std::pair(Backend::Cuda, true)}) {
    auto bytes = layerPlan(backend, 3, kept);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
    ASSERT_TRUE(plan.ok()) << plan.status();
    if (backend != Backend::Cpu)
      continue;
    auto cpu = Session::create(**plan, SessionOptions());
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto result = runLayer(**cpu, randomFloats(7 * kLayerH, 1));
    ASSERT_TRUE(result.ok()) << result.status();
    // Capacity 3 of 7 tokens x 2 choices over 8 experts drops some.
    std::vector<int64_t> idx = (*result)[2].as<int64_t>();
    EXPECT_NE(std::count(idx.begin(), idx.end(), -1), 0);
  }
}

TEST(CudaRoutingDevice, LayerMatchesTheCpuBackend) {
  MOERT_REQUIRE_GPU();
  for (auto [capacity, kept] :
       {std::pair<int64_t, bool>(0, false), std::pair<int64_t, bool>(3, false),
        std::pair<int64_t, bool>(3, true)}) {
    auto cpuBytes = layerPlan(Backend::Cpu, capacity, kept);
    auto gpuBytes = layerPlan(Backend::Cuda, capacity, kept);
    ASSERT_TRUE(cpuBytes.ok() && gpuBytes.ok());
    auto pair = openOnBothBackends(*cpuBytes, *gpuBytes);
    ASSERT_TRUE(pair.ok()) << pair.status();
    Session *cpu = pair->cpu.get();
    CudaSession *gpu = pair->gpu.get();
    // Every step runs on the GPU, so runs go through CUDA graphs: per size,
    // the first run is eager, the second captured, the third replayed; the
    // sizes alternate so that replays follow other sizes' runs.
    EXPECT_TRUE(gpu->usesGraphs());
    for (int pass = 0; pass < 3; ++pass)
      for (int64_t T : {1, 7, 64}) {
        SCOPED_TRACE(::testing::Message()
                     << "T " << T << ", capacity " << capacity
                     << (kept ? " normalize_kept" : "") << ", pass " << pass);
        std::vector<float> x = randomFloats(T * kLayerH, 60 + T + 100 * pass);
        auto want = runLayer(*cpu, x);
        auto got = runLayer(*gpu, x);
        ASSERT_TRUE(want.ok()) << want.status();
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ((*got)[2].as<int64_t>(), (*want)[2].as<int64_t>()); // idx
        EXPECT_EQ((*got)[3].as<int64_t>(), (*want)[3].as<int64_t>()); // offsets
        EXPECT_EQ((*got)[4].as<int64_t>(), (*want)[4].as<int64_t>()); // source
        expectClose((*got)[1].as<float>(), (*want)[1].as<float>());
        expectClose((*got)[0].as<float>(), (*want)[0].as<float>(), 1e-5f, 1.0f);
      }
    // Every step ran on the GPU, none fell back to the host, and the MoE
    // stats (copied back after each run) equal the CPU's over the same runs.
    // The steps' CUDA events are timed in the eager, captured and replayed
    // runs alike (recorded as graph nodes: a plain record in a capture
    // leaves the event unusable).
    std::vector<StepStats> cpuStats = cpu->stepStats();
    std::vector<StepStats> gpuStats = gpu->stepStats();
    ASSERT_EQ(gpuStats.size(), cpuStats.size());
    double gpuSeconds = 0;
    for (size_t i = 0; i < gpuStats.size(); ++i) {
      EXPECT_THAT(gpuStats[i].op, ::testing::EndsWith("@cuda"))
          << gpuStats[i].name;
      EXPECT_EQ(gpuStats[i].calls, 9u) << gpuStats[i].name;
      gpuSeconds += gpuStats[i].totalSeconds;
      EXPECT_EQ(gpuStats[i].expertLoad, cpuStats[i].expertLoad)
          << gpuStats[i].name;
      EXPECT_EQ(gpuStats[i].droppedAssignments, cpuStats[i].droppedAssignments)
          << gpuStats[i].name;
    }
    EXPECT_GT(gpuSeconds, 0);
  }
}

TEST(CudaRoutingDevice, DataErrorsNameTheStep) {
  MOERT_REQUIRE_GPU();
  // Dispatch then Combine over graph inputs: x [4, 1], idx [4, 2].
  PlanWriter writer({Backend::Cuda, 1, 90});
  ScheduleBuilder &s = writer.schedule();
  int32_t x = s.addTensor("x", DType::F32, {4, 1});
  int32_t idx = s.addTensor("idx", DType::I64, {4, 2});
  int32_t w = s.addTensor("w", DType::F32, {4, 2});
  int32_t source = s.addTensor("source", DType::I64, {8});
  for (int32_t id : {x, idx, w, source})
    s.addInput(id);
  int32_t rows = s.addTensor("rows", DType::F32, {8, 1});
  int32_t offsets = s.addTensor("offsets", DType::I64, {5});
  int32_t sorted = s.addTensor("sorted", DType::I64, {8});
  int32_t out = s.addTensor("out", DType::F32, {4, 1});
  s.addOutput(sorted);
  s.addOutput(out);
  s.addStep(OpKind::Dispatch, "dispatch", {x, idx}, {rows, offsets, sorted},
            dispatchAttrs(4));
  s.addStep(OpKind::Combine, "combine", {rows, source, w}, {out});
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto session = CudaSession::create(**plan);
  ASSERT_TRUE(session.ok()) << session.status();
  auto run = [&](std::vector<int64_t> experts, std::vector<int64_t> rowsOf) {
    std::vector<float> xs = {1, 2, 3, 4}, ws(8, 0.5f);
    CudaSession &c = **session;
    MOERT_RETURN_IF_ERROR(c.setInput("x", DType::F32, {4, 1}, xs.data(), 16));
    MOERT_RETURN_IF_ERROR(
        c.setInput("idx", DType::I64, {4, 2}, experts.data(), 64));
    MOERT_RETURN_IF_ERROR(c.setInput("w", DType::F32, {4, 2}, ws.data(), 32));
    MOERT_RETURN_IF_ERROR(
        c.setInput("source", DType::I64, {8}, rowsOf.data(), 64));
    return c.run();
  };
  std::vector<int64_t> fine = {0, 1, 2, 3, 0, -1, 1, 2};
  std::vector<int64_t> identity = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_TRUE(run(fine, identity).ok());
  std::vector<int64_t> badExpert = fine;
  badExpert[3] = 9;
  EXPECT_THAT(run(badExpert, identity),
              StatusHas("'dispatch' (Dispatch): expert index 9 at position 3 "
                        "is out of range"));
  std::vector<int64_t> repeated = identity;
  repeated[6] = 2;
  EXPECT_THAT(run(fine, repeated),
              StatusHas("'combine' (Combine): source[6] repeats the "
                        "assignment of source[2]"));
  std::vector<int64_t> outside = identity;
  outside[5] = 8;
  EXPECT_THAT(run(fine, outside),
              StatusHas("'combine' (Combine): source[5] = 8 is out of range"));
  // The record is cleared for the next run.
  EXPECT_TRUE(run(fine, identity).ok());
}

} // namespace
} // namespace moert::testing
