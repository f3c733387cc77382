//===- cuda_select_logic_test.cpp - TopK, ArgMax, ... kernels vs the CPU --===//
//
// Runs the per-thread logic of the CUDA backend's TopK, ArgMax,
// GatherElements and ScatterElements kernels (runtime/src/backends/cuda/
// select_logic.h) on the CPU over every thread index of each launch, in
// launch order and shuffled, and compares with the CPU backend's kernels bit
// for bit: ties, NaN, signed zeros and infinities, every k, both `largest`,
// sorted and unsorted (onnxruntime's order), several axes, repeated scatter
// indices under every reduction, I32 and I64 indices, bad indices. The
// placement test shows which TopK steps the GPU takes (no GPU needed); on a
// GPU, `CudaSelectDevice` runs a plan of these ops on the real kernels
// against the CPU backend (skipped without one).
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/select_logic.h"
#include "kernels/shape_plan.h"
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

/// Values with many exact ties (multiples of 0.5 in [-2, 2]), signed zeros,
/// infinities and NaN at a few positions (none when `plain`).
std::vector<float> tiedValues(int64_t n, uint32_t seed, bool plain = false) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> level(-4, 4), special(0, 19);
  std::vector<float> v(n);
  for (float &x : v) {
    x = level(rng) * 0.5f;
    if (plain)
      continue;
    switch (special(rng)) {
    case 0:
      x = NAN;
      break;
    case 1:
      x = -0.0f;
      break;
    case 2:
      x = INFINITY;
      break;
    case 3:
      x = -INFINITY;
      break;
    default:
      break;
    }
  }
  return v;
}

/// 0..n-1, shuffled unless `inOrder`: the order the emulations run threads.
std::vector<int64_t> threadOrder(int64_t n, bool inOrder, uint32_t seed) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (!inOrder)
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  return order;
}

/// The [outer, n, inner] rows around `axis` of `shape`.
RowSpan spanOf(const std::vector<int64_t> &shape, int axis) {
  RowSpan span;
  span.inner = numelOf({shape.begin() + axis + 1, shape.end()});
  span.n = shape[axis];
  span.rows = numelOf({shape.begin(), shape.begin() + axis}) * span.inner;
  return span;
}

//===----------------------------------------------------------------------===//
// TopK
//===----------------------------------------------------------------------===//

struct TopKResult {
  std::vector<float> values;
  std::vector<int64_t> indices;
};

/// Every thread (row) of a TopK launch, in `order`.
TopKResult emulateTopK(const std::vector<float> &x,
                       const std::vector<int64_t> &shape, int axis, int64_t k,
                       bool largest, bool sorted, bool inOrder) {
  TopKArgs args;
  args.span = spanOf(shape, axis);
  args.k = k;
  args.largest = largest;
  args.sorted = sorted;
  int64_t outSize = args.span.rows / args.span.inner * k * args.span.inner;
  TopKResult result{std::vector<float>(outSize, 12345.0f),
                    std::vector<int64_t>(outSize, -7)};
  for (int64_t r : threadOrder(args.span.rows, inOrder, 77 + k))
    topKRow(args, x.data(), r, result.values.data(), result.indices.data());
  return result;
}

TEST(SelectLogic, TopKMatchesTheCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int axis;
  };
  std::vector<Case> cases = {
      {{7, 1}, 1},     {{7, 2}, 1},   {{7, 3}, 1},    {{7, 4}, -1},
      {{7, 5}, 1},     {{9, 8}, 1},   {{5, 16}, -1},  {{4, 33}, 1},
      {{3, 64}, 1},    {{2, 256}, 1}, {{2, 5, 3}, 1}, {{2, 16, 3}, -2},
      {{2, 40, 3}, 1}, {{6, 4}, 0},   {{30, 2}, 0},   {{2, 3, 12}, 2},
      {{0, 6}, 1},
  };
  uint32_t seed = 1;
  int compared = 0, unsortedHeaps = 0, refused = 0;
  for (const Case &c : cases) {
    int rank = static_cast<int>(c.shape.size());
    int axis = c.axis < 0 ? c.axis + rank : c.axis;
    int64_t n = c.shape[axis];
    std::vector<int64_t> ks;
    for (int64_t k = 0; k <= n; ++k)
      if (n <= 40 || k <= 8 || k % 16 == 0 || k == n)
        ks.push_back(k);
    for (bool plain : {false, true}) {
      std::vector<float> x = tiedValues(numelOf(c.shape), seed++, plain);
      for (int64_t k : ks)
        for (bool largest : {true, false})
          for (bool sorted : {true, false}) {
            // Where the CPU takes std::nth_element's order the GPU does not
            // run the step (topKAccepts, topKRun).
            if (!sorted && !detail::topKUsesHeap(k, n)) {
              ++refused;
              continue;
            }
            std::vector<int64_t> outShape = c.shape;
            outShape[axis] = k;
            fb::TopKAttrsT attrs;
            attrs.axis = c.axis;
            attrs.largest = largest;
            attrs.sorted = sorted;
            auto want = runStep(OpKind::TopK, {f32(c.shape, x), i64({1}, {k})},
                                {{DType::F32, dimsOf(outShape)},
                                 {DType::I64, dimsOf(outShape)}},
                                moert::attrs(attrs));
            ASSERT_TRUE(want.ok()) << want.status();
            for (bool inOrder : {true, false}) {
              SCOPED_TRACE(::testing::Message()
                           << "shape " << ::testing::PrintToString(c.shape)
                           << " axis " << c.axis << " k " << k << " largest "
                           << largest << " sorted " << sorted << " plain "
                           << plain << " in order " << inOrder);
              TopKResult got =
                  emulateTopK(x, c.shape, axis, k, largest, sorted, inOrder);
              EXPECT_EQ(got.indices, (*want)[1].as<int64_t>());
              expectSameFloats(got.values, (*want)[0].as<float>());
            }
            ++compared;
            if (!sorted && k >= 4)
              ++unsortedHeaps;
          }
    }
  }
  // The unsorted heap order was compared with k beyond the trivial cases,
  // and the refused (nth_element) cases exist.
  EXPECT_GT(compared, 1000);
  EXPECT_GT(unsortedHeaps, 50);
  EXPECT_GT(refused, 100);
}

TEST(SelectLogic, TopKRanksNanFirstWhenLargestAndLastWhenSmallest) {
  // A hand-checked row, independent of the CPU kernel: NaN ranks above
  // +inf, ties keep the lower index first, -0 ties with +0.
  std::vector<float> x = {1.0f, NAN, -0.0f, INFINITY, 0.0f, 1.0f, NAN};
  TopKResult top = emulateTopK(x, {7}, 0, 4, true, true, true);
  EXPECT_EQ(top.indices, (std::vector<int64_t>{1, 6, 3, 0}));
  TopKResult bottom = emulateTopK(x, {7}, 0, 4, false, true, true);
  EXPECT_EQ(bottom.indices, (std::vector<int64_t>{2, 4, 0, 5}));
  TopKResult last = emulateTopK(x, {7}, 0, 7, false, true, true);
  EXPECT_EQ(last.indices, (std::vector<int64_t>{2, 4, 0, 5, 3, 1, 6}));
}

//===----------------------------------------------------------------------===//
// ArgMax
//===----------------------------------------------------------------------===//

TEST(SelectLogic, ArgMaxMatchesTheCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int axis;
  };
  std::vector<Case> cases = {{{5, 1}, 1},    {{5, 8}, -1},  {{3, 33}, 1},
                             {{2, 7, 3}, 1}, {{6, 4}, 0},   {{2, 3, 9}, -1},
                             {{0, 4}, 1},    {{4, 0, 2}, 0}};
  uint32_t seed = 500;
  for (const Case &c : cases) {
    int rank = static_cast<int>(c.shape.size());
    int axis = c.axis < 0 ? c.axis + rank : c.axis;
    RowSpan span = spanOf(c.shape, axis);
    for (bool plain : {false, true}) {
      std::vector<float> x = tiedValues(numelOf(c.shape), seed++, plain);
      for (bool keepdims : {true, false})
        for (bool last : {false, true}) {
          std::vector<int64_t> outShape;
          for (int d = 0; d < rank; ++d)
            if (d != axis)
              outShape.push_back(c.shape[d]);
            else if (keepdims)
              outShape.push_back(1);
          fb::ArgMaxAttrsT attrs;
          attrs.axis = c.axis;
          attrs.keepdims = keepdims;
          attrs.select_last_index = last;
          auto want =
              runStep(OpKind::ArgMax, {f32(c.shape, x)},
                      {{DType::I64, dimsOf(outShape)}}, moert::attrs(attrs));
          ASSERT_TRUE(want.ok()) << want.status();
          std::vector<int64_t> got(span.rows, -7);
          for (int64_t r : threadOrder(span.rows, false, seed))
            got[r] = argMaxRow(span, x.data(), r, last);
          EXPECT_EQ(got, (*want)[0].as<int64_t>())
              << "shape " << ::testing::PrintToString(c.shape) << " axis "
              << c.axis << " keepdims " << keepdims << " last " << last;
        }
    }
  }
}

//===----------------------------------------------------------------------===//
// GatherElements, ScatterElements
//===----------------------------------------------------------------------===//

/// What the host part fills: contiguous data strides, the indices' shape.
ElementIndexArgs elementArgsOf(const std::vector<int64_t> &data,
                               const std::vector<int64_t> &indices, int axis) {
  ElementIndexArgs args{};
  args.rank = static_cast<int>(data.size());
  args.axis = axis;
  args.dim = data[axis];
  int64_t stride = 1;
  for (int d = args.rank - 1; d >= 0; --d) {
    args.shape[d] = indices[d];
    args.strides[d] = stride;
    stride *= data[d];
  }
  return args;
}

/// Random indices in [-dim, dim) (negative ones count from the end), many
/// repeats along each line.
std::vector<int64_t> randomIndices(int64_t count, int64_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pick(-dim, dim - 1);
  std::vector<int64_t> v(count);
  for (int64_t &i : v)
    i = pick(rng);
  return v;
}

Value indexValue(const std::vector<int64_t> &shape,
                 const std::vector<int64_t> &v, bool use32) {
  if (!use32)
    return i64(shape, v);
  return i32(shape, std::vector<int32_t>(v.begin(), v.end()));
}

struct ElementCase {
  std::vector<int64_t> data, indices;
  int axis;
};

const std::vector<ElementCase> &elementCases() {
  static const std::vector<ElementCase> cases = {
      {{4, 6}, {4, 3}, 1},       {{4, 6}, {3, 5}, 1},
      {{4, 6}, {7, 6}, 0},       {{4, 6}, {2, 2}, -2},
      {{2, 5, 3}, {2, 4, 2}, 1}, {{2, 5, 3}, {1, 5, 7}, -1},
      {{3, 4}, {3, 0}, 1},       {{8, 1}, {8, 1}, 1},
  };
  return cases;
}

TEST(SelectLogic, GatherElementsMatchesTheCpu) {
  uint32_t seed = 900;
  for (const ElementCase &c : elementCases()) {
    int rank = static_cast<int>(c.data.size());
    int axis = c.axis < 0 ? c.axis + rank : c.axis;
    std::vector<float> data = tiedValues(numelOf(c.data), seed++);
    std::vector<int64_t> index =
        randomIndices(numelOf(c.indices), c.data[axis], seed++);
    ElementIndexArgs args = elementArgsOf(c.data, c.indices, axis);
    for (bool use32 : {false, true}) {
      fb::AxisAttrsT attrs;
      attrs.axis = c.axis;
      auto want =
          runStep(OpKind::GatherElements,
                  {f32(c.data, data), indexValue(c.indices, index, use32)},
                  {{DType::F32, dimsOf(c.indices)}}, moert::attrs(attrs));
      ASSERT_TRUE(want.ok()) << want.status();
      std::vector<float> got(index.size(), 12345.0f);
      for (int64_t i : threadOrder(got.size(), false, seed)) {
        int64_t source = elementSource(args, i, index[i]);
        ASSERT_GE(source, 0);
        got[i] = data[source];
      }
      SCOPED_TRACE(::testing::Message()
                   << "data " << ::testing::PrintToString(c.data) << " indices "
                   << ::testing::PrintToString(c.indices) << " axis " << c.axis
                   << " i32 " << use32);
      expectSameFloats(got, (*want)[0].as<float>());
    }
  }
}

TEST(SelectLogic, OutOfRangeElementIndicesAreFound) {
  // The index the kernels report and its position are the CPU's.
  std::vector<int64_t> shape = {3, 4};
  std::vector<float> data = tiedValues(12, 3);
  std::vector<int64_t> index = {0, 1, -4, 3, 2, 4, 0, 1, -5, 0, 0, 0};
  ElementIndexArgs args = elementArgsOf(shape, shape, 1);
  fb::AxisAttrsT attrs;
  attrs.axis = 1;
  auto cpu =
      runStep(OpKind::GatherElements, {f32(shape, data), i64(shape, index)},
              {{DType::F32, dimsOf(shape)}}, moert::attrs(attrs));
  EXPECT_THAT(cpu.status(), StatusHas("index 4 at position 5 is out of range"));
  std::vector<int64_t> bad;
  for (int64_t i = 0; i < 12; ++i)
    if (elementSource(args, i, index[i]) < 0)
      bad.push_back(i);
  EXPECT_EQ(bad, (std::vector<int64_t>{5, 8}));
  // ScatterElements: the line stops at its first bad index.
  std::vector<float> out = data;
  std::vector<float> updates(12, 9.0f);
  int64_t badIndex = 0;
  EXPECT_EQ(scatterLine(ScatterOp::None, args, index.data(), updates.data(), 1,
                        out.data(), badIndex),
            5);
  EXPECT_EQ(badIndex, 4);
  EXPECT_EQ(scatterLine(ScatterOp::None, args, index.data(), updates.data(), 0,
                        out.data(), badIndex),
            -1);
}

TEST(SelectLogic, ScatterElementsMatchesTheCpu) {
  uint32_t seed = 1300;
  const std::pair<fb::ScatterReduction, ScatterOp> reductions[] = {
      {fb::ScatterReduction::None, ScatterOp::None},
      {fb::ScatterReduction::Add, ScatterOp::Add},
      {fb::ScatterReduction::Mul, ScatterOp::Mul},
      {fb::ScatterReduction::Max, ScatterOp::Max},
      {fb::ScatterReduction::Min, ScatterOp::Min}};
  for (const ElementCase &c : elementCases()) {
    int rank = static_cast<int>(c.data.size());
    int axis = c.axis < 0 ? c.axis + rank : c.axis;
    std::vector<float> data = tiedValues(numelOf(c.data), seed++);
    std::vector<float> updates = randomFloats(numelOf(c.indices), seed++);
    if (!updates.empty())
      updates[0] = NAN;
    std::vector<int64_t> index =
        randomIndices(numelOf(c.indices), c.data[axis], seed++);
    ElementIndexArgs args = elementArgsOf(c.data, c.indices, axis);
    int64_t count = c.indices[axis];
    int64_t lines = count ? numelOf(c.indices) / count : 0;
    for (auto [reduction, op] : reductions)
      for (bool use32 : {false, true}) {
        fb::ScatterAttrsT attrs;
        attrs.axis = c.axis;
        attrs.reduction = reduction;
        auto want =
            runStep(OpKind::ScatterElements,
                    {f32(c.data, data), indexValue(c.indices, index, use32),
                     f32(c.indices, updates)},
                    {{DType::F32, dimsOf(c.data)}}, moert::attrs(attrs));
        ASSERT_TRUE(want.ok()) << want.status();
        std::vector<float> got = data; // the copy before the launch
        std::vector<int32_t> index32(index.begin(), index.end());
        for (int64_t line : threadOrder(lines, false, seed)) {
          int64_t badIndex = 0;
          int64_t bad =
              use32 ? scatterLine(op, args, index32.data(), updates.data(),
                                  line, got.data(), badIndex)
                    : scatterLine(op, args, index.data(), updates.data(), line,
                                  got.data(), badIndex);
          ASSERT_EQ(bad, -1);
        }
        SCOPED_TRACE(::testing::Message()
                     << "data " << ::testing::PrintToString(c.data)
                     << " indices " << ::testing::PrintToString(c.indices)
                     << " axis " << c.axis << " reduction "
                     << fb::EnumNameScatterReduction(reduction) << " i32 "
                     << use32);
        expectSameFloats(got, (*want)[0].as<float>());
      }
  }
}

//===----------------------------------------------------------------------===//
// Placement (no GPU needed) and, on a GPU, the real kernels
//===----------------------------------------------------------------------===//

constexpr int64_t kSelE = 8, kSelMaxT = 16;

/// A generic gate's ops on logits x [T, kSelE] (T symbolic): TopK sorted
/// (k 3), unsorted (k 4 of 8: the heap) and over the token axis (k 1,
/// smallest), ArgMax (last index), GatherElements and ScatterElements (Add)
/// by the TopK indices, and Concat of the i64 indices made on the GPU.
/// `unsortedK` and `kAsInput` make variants the GPU refuses.
absl::StatusOr<std::vector<uint8_t>>
selectPlan(Backend backend, int64_t unsortedK = 4, bool kAsInput = false) {
  static const std::vector<int64_t> k3 = {3}, k1 = {1};
  std::vector<int64_t> kU = {unsortedK};
  PlanWriter writer({backend, 1, backend == Backend::Cuda ? 90u : 0u});
  int T = writer.addSymbol("T", 1, kSelMaxT);
  ScheduleBuilder &s = writer.schedule();
  PlanDim t = PlanDim::symbol(T);
  auto weightI = [&](const char *name, const std::vector<int64_t> &data) {
    return s.addWeight(name, DType::I64, {1}, data.data(), sizeof(int64_t));
  };
  int32_t x = s.addTensor("x", DType::F32, {t, kSelE});
  s.addInput(x);
  int32_t kUnsorted = s.addTensor("k", DType::I64, {1});
  if (kAsInput)
    s.addInput(kUnsorted);
  else
    kUnsorted = weightI("ku", kU);
  auto topK = [&](const char *name, int32_t k, std::vector<PlanDim> dims,
                  int64_t axis, bool largest, bool sorted, int32_t &values,
                  int32_t &indices) {
    values = s.addTensor(absl::StrCat(name, "_values"), DType::F32, dims);
    indices = s.addTensor(absl::StrCat(name, "_indices"), DType::I64, dims);
    fb::TopKAttrsT attrs;
    attrs.axis = axis;
    attrs.largest = largest;
    attrs.sorted = sorted;
    s.addStep(OpKind::TopK, name, {x, k}, {values, indices},
              moert::attrs(attrs));
  };
  int32_t v3, i3, vu, iu, v0, i0;
  topK("top3", weightI("k3", k3), {t, 3}, -1, true, true, v3, i3);
  topK("unsorted", kUnsorted, {t, PlanDim::dynamic(kSelE)}, 1, true, false, vu,
       iu);
  topK("column_min", weightI("k1", k1), {1, kSelE}, 0, false, true, v0, i0);
  fb::ArgMaxAttrsT argMax;
  argMax.axis = -1;
  argMax.select_last_index = true;
  int32_t best = s.addTensor("best", DType::I64, {t, 1});
  s.addStep(OpKind::ArgMax, "argmax", {x}, {best}, moert::attrs(argMax));
  fb::AxisAttrsT last;
  last.axis = 1;
  int32_t gathered = s.addTensor("gathered", DType::F32, {t, 3});
  s.addStep(OpKind::GatherElements, "gather", {x, i3}, {gathered},
            moert::attrs(last));
  fb::ScatterAttrsT scatter;
  scatter.axis = 1;
  scatter.reduction = fb::ScatterReduction::Add;
  int32_t scattered = s.addTensor("scattered", DType::F32, {t, kSelE});
  s.addStep(OpKind::ScatterElements, "scatter", {x, i3, v3}, {scattered},
            moert::attrs(scatter));
  int32_t both = s.addTensor("both", DType::I64, {t, 4});
  s.addStep(OpKind::Concat, "concat", {best, i3}, {both}, moert::attrs(last));
  for (int32_t id : {v3, i3, vu, iu, v0, i0, gathered, scattered, both})
    s.addOutput(id);
  return writer.serialize();
}

const char *const kSelectOutputs[] = {
    "top3_values",      "top3_indices",      "unsorted_values",
    "unsorted_indices", "column_min_values", "column_min_indices",
    "gathered",         "scattered",         "both"};

/// The placement of `bytes`' steps, by step name: "TopK:gpu" and so on.
std::vector<std::string> placementOf(const std::vector<uint8_t> &bytes,
                                     bool &graphs) {
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  EXPECT_TRUE(plan.ok()) << plan.status();
  auto placement = cudaPlacement(**plan, 0);
  EXPECT_TRUE(placement.ok()) << placement.status();
  std::vector<std::string> where;
  for (size_t i = 0; i < placement->steps.size(); ++i)
    where.push_back(placement->steps[i] +
                    (placement->onGpu[i] ? ": gpu" : ": host"));
  graphs = placement->graphs;
  return where;
}

TEST(CudaSelectDevice, GenericGateOpsArePlacedOnTheGpu) {
  if (!cudaBackendBuilt())
    GTEST_SKIP() << "built without the CUDA backend";
  auto bytes = selectPlan(Backend::Cuda);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  bool graphs = false;
  for (const std::string &step : placementOf(*bytes, graphs))
    EXPECT_THAT(step, ::testing::EndsWith(": gpu"));
  EXPECT_TRUE(graphs);
  // Unsorted with K = 5 of 8: the CPU takes std::nth_element's order, so
  // the step stays on the host; and so does a K only the run knows.
  for (auto variant : {selectPlan(Backend::Cuda, 5),
                       selectPlan(Backend::Cuda, 4, /*kAsInput=*/true)}) {
    ASSERT_TRUE(variant.ok()) << variant.status();
    std::vector<std::string> where = placementOf(*variant, graphs);
    EXPECT_EQ(where[1], "step 1 'unsorted' (TopK): host");
    EXPECT_EQ(where[0], "step 0 'top3' (TopK): gpu");
    EXPECT_FALSE(graphs);
  }
}

TEST(CudaSelectDevice, TopKWithKFromTheHostRunsOnTheGpu) {
  if (!cudaBackendBuilt())
    GTEST_SKIP() << "built without the CUDA backend";
  // K = Dim(x, 1) is made on the host (from sizes). Sorted, any K runs on
  // the GPU; unsorted only where every K the axis allows takes the heap
  // (an axis of 3, not of 8).
  for (int64_t width : {int64_t{3}, int64_t{8}}) {
    PlanWriter writer({Backend::Cuda, 1, 90u});
    int T = writer.addSymbol("T", 1, kSelMaxT);
    ScheduleBuilder &s = writer.schedule();
    int32_t x = s.addTensor("x", DType::F32, {PlanDim::symbol(T), width});
    s.addInput(x);
    int32_t k = s.addTensor("k", DType::I64, {});
    fb::AxisAttrsT axis1;
    axis1.axis = 1;
    s.addStep(OpKind::Dim, "dim", {x}, {k}, moert::attrs(axis1));
    for (bool sorted : {true, false}) {
      std::vector<PlanDim> dims = {PlanDim::symbol(T), PlanDim::dynamic(width)};
      int32_t values = s.addTensor(sorted ? "sv" : "uv", DType::F32, dims);
      int32_t indices = s.addTensor(sorted ? "si" : "ui", DType::I64, dims);
      fb::TopKAttrsT attrs;
      attrs.sorted = sorted;
      s.addStep(OpKind::TopK, sorted ? "sorted" : "unsorted", {x, k},
                {values, indices}, moert::attrs(attrs));
      s.addOutput(values);
      s.addOutput(indices);
    }
    auto bytes = writer.serialize();
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    bool graphs = false;
    std::vector<std::string> where = placementOf(*bytes, graphs);
    ASSERT_EQ(where.size(), 3u);
    EXPECT_EQ(where[0], "step 0 'dim' (Dim): host");
    EXPECT_EQ(where[1], "step 1 'sorted' (TopK): gpu");
    EXPECT_EQ(where[2], width == 3 ? "step 2 'unsorted' (TopK): gpu"
                                   : "step 2 'unsorted' (TopK): host");
    EXPECT_EQ(graphs, width == 3) << width;
  }
}

template <typename SessionT>
absl::StatusOr<std::vector<Value>> runSelect(SessionT &session,
                                             const std::vector<float> &x) {
  int64_t T = static_cast<int64_t>(x.size()) / kSelE;
  MOERT_RETURN_IF_ERROR(session.setInput("x", DType::F32, {T, kSelE}, x.data(),
                                         x.size() * sizeof(float)));
  MOERT_RETURN_IF_ERROR(session.run());
  std::vector<Value> results;
  for (const char *name : kSelectOutputs) {
    MOERT_ASSIGN_OR_RETURN(Value v, outputValue(session, name));
    results.push_back(std::move(v));
  }
  return results;
}

TEST(CudaSelectDevice, PlanLoadsAndTheCpuRunsIt) {
  auto bytes = selectPlan(Backend::Cpu);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto cpu = Session::create(**plan, SessionOptions());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  for (int64_t T : {int64_t{1}, int64_t{5}, kSelMaxT}) {
    auto result = runSelect(**cpu, tiedValues(T * kSelE, 7 + T));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ((*result)[8].shape, (std::vector<int64_t>{T, 4}));
  }
}

TEST(CudaSelectDevice, EveryStepRunsOnTheGpuAndMatchesTheCpu) {
  MOERT_REQUIRE_GPU();
  auto cpuBytes = selectPlan(Backend::Cpu);
  auto gpuBytes = selectPlan(Backend::Cuda);
  ASSERT_TRUE(cpuBytes.ok() && gpuBytes.ok());
  auto pair = openOnBothBackends(*cpuBytes, *gpuBytes);
  ASSERT_TRUE(pair.ok()) << pair.status();
  Session *cpu = pair->cpu.get();
  CudaSession *gpu = pair->gpu.get();
  EXPECT_TRUE(gpu->usesGraphs());
  // Eager, captured and replayed runs per size; the ops are exact, so the
  // results are the CPU's bit for bit.
  for (int pass = 0; pass < 3; ++pass)
    for (int64_t T : {int64_t{1}, int64_t{5}, kSelMaxT}) {
      SCOPED_TRACE(::testing::Message() << "T " << T << " pass " << pass);
      std::vector<float> x =
          tiedValues(T * kSelE, 300 + T + 10 * pass, /*plain=*/pass == 2);
      auto want = runSelect(*cpu, x);
      auto got = runSelect(*gpu, x);
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_TRUE(got.ok()) << got.status();
      for (size_t o = 0; o < std::size(kSelectOutputs); ++o) {
        SCOPED_TRACE(kSelectOutputs[o]);
        EXPECT_EQ((*got)[o].shape, (*want)[o].shape);
        if ((*want)[o].dtype == DType::F32)
          expectSameFloats((*got)[o].as<float>(), (*want)[o].as<float>());
        else
          EXPECT_EQ((*got)[o].as<int64_t>(), (*want)[o].as<int64_t>());
      }
    }
  EXPECT_EQ(gpu->graphsRefused(), "");
  for (const StepStats &step : gpu->stepStats())
    EXPECT_THAT(step.op, ::testing::EndsWith("@cuda")) << step.name;
}

TEST(CudaSelectDevice, BadElementIndexFailsTheRun) {
  MOERT_REQUIRE_GPU();
  // GatherElements by a graph input of indices: a bad one is recorded on
  // the device and fails the run with the step's label.
  PlanWriter writer({Backend::Cuda, 1, 90u});
  ScheduleBuilder &s = writer.schedule();
  int32_t x = s.addTensor("x", DType::F32, {2, 4});
  int32_t idx = s.addTensor("idx", DType::I64, {2, 2});
  s.addInput(x);
  s.addInput(idx);
  int32_t out = s.addTensor("out", DType::F32, {2, 2});
  fb::AxisAttrsT last;
  last.axis = 1;
  s.addStep(OpKind::GatherElements, "gather", {x, idx}, {out},
            moert::attrs(last));
  s.addOutput(out);
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto gpu = CudaSession::create(**plan);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::vector<float> xv(8, 1.0f);
  std::vector<int64_t> iv = {0, 3, 4, -1};
  ASSERT_TRUE((*gpu)->setInput("x", DType::F32, {2, 4}, xv.data(), 32).ok());
  ASSERT_TRUE((*gpu)->setInput("idx", DType::I64, {2, 2}, iv.data(), 32).ok());
  EXPECT_THAT((*gpu)->run(),
              StatusHas("step 0 'gather' (GatherElements): index 4 at "
                        "position 2 is out of range"));
}

} // namespace
} // namespace moert::testing
