//===- plan_test.cpp - Writer, loader validation and session --------------===//

#include "test_util.h"

#include "observe/inspect.h"

#include <cstdio>
#include <unistd.h>

namespace moert::testing {
namespace {

using fb::OpKind;

constexpr int64_t kMaxTokens = 8;

/// y = relu(x W1) W2 for x: [T <= 8, 4], with the memory plan written out:
/// h at [128, 320), relu in place of h, y reusing x's slot (dead after step
/// 0). W1[i][j] = (i - j) / 8, W2[i][j] = (i + 2 j) / 16.
struct MlpPlan {
  std::vector<float> w1, w2;
  std::vector<uint8_t> bytes;

  explicit MlpPlan(Backend backend = Backend::Cpu) {
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j)
        w1.push_back((i - j) / 8.0f);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 3; ++j)
        w2.push_back((i + 2 * j) / 16.0f);
    PlanWriter writer({backend, 1, 0}, "plan_test");
    int t = writer.addSymbol("T", 1, kMaxTokens);
    ScheduleBuilder &s = writer.schedule();
    int32_t x = s.addTensor("x", DType::F32, {PlanDim::symbol(t), 4}, 0, 128);
    int32_t wa =
        s.addWeight("w1", DType::F32, {4, 6}, w1.data(), w1.size() * 4);
    int32_t wb =
        s.addWeight("w2", DType::F32, {6, 3}, w2.data(), w2.size() * 4);
    int32_t h = s.addTensor("h", DType::F32, {PlanDim::symbol(t), 6}, 128, 192);
    int32_t a = s.addTensor("a", DType::F32, {PlanDim::symbol(t), 6}, 128, 192);
    int32_t y = s.addTensor("y", DType::F32, {PlanDim::symbol(t), 3}, 0, 96);
    s.addInput(x);
    s.addOutput(y);
    s.addStep(OpKind::MatMul, "up", {x, wa}, {h});
    s.addStep(OpKind::Relu, "act", {h}, {a});
    s.addStep(OpKind::MatMul, "down", {a, wb}, {y});
    s.setArenaSize(320);
    auto serialized = writer.serialize();
    EXPECT_TRUE(serialized.ok()) << serialized.status();
    if (serialized.ok())
      bytes = std::move(*serialized);
  }

  std::vector<float> reference(const std::vector<float> &x) const {
    int64_t tokens = static_cast<int64_t>(x.size()) / 4;
    std::vector<float> y(tokens * 3, 0.0f);
    for (int64_t t = 0; t < tokens; ++t) {
      float h[6] = {};
      for (int j = 0; j < 6; ++j) {
        for (int i = 0; i < 4; ++i)
          h[j] += x[t * 4 + i] * w1[i * 6 + j];
        h[j] = std::max(h[j], 0.0f);
      }
      for (int k = 0; k < 3; ++k)
        for (int j = 0; j < 6; ++j)
          y[t * 3 + k] += h[j] * w2[j * 3 + k];
    }
    return y;
  }
};

std::unique_ptr<Plan> load(const std::vector<uint8_t> &bytes) {
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? std::move(*plan) : nullptr;
}

absl::Status loadStatus(PlanWriter &writer) {
  MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.serialize());
  return Plan::loadFromMemory(bytes.data(), bytes.size()).status();
}

TEST(Plan, DescribesItsSignature) {
  MlpPlan mlp;
  std::unique_ptr<Plan> plan = load(mlp.bytes);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->versionMajor(), kFormatVersionMajor);
  EXPECT_EQ(plan->producer(), "plan_test");
  EXPECT_EQ(plan->target().backend, Backend::Cpu);
  EXPECT_EQ(plan->numDevices(), 1);
  EXPECT_EQ(plan->numSteps(), 3u);
  EXPECT_EQ(plan->arenaSize(), 320u);
  ASSERT_EQ(plan->symbols().size(), 1u);
  EXPECT_EQ(plan->symbols()[0].name, "T");
  EXPECT_EQ(plan->symbols()[0].max, kMaxTokens);
  ASSERT_EQ(plan->inputs().size(), 1u);
  const TensorDesc &x = plan->inputs()[0];
  EXPECT_EQ(x.name, "x");
  ASSERT_EQ(x.dims.size(), 2u);
  EXPECT_EQ(x.dims[0].kind, DimDesc::Kind::Symbolic);
  EXPECT_EQ(x.dims[0].symbol, "T");
  EXPECT_EQ(x.dims[0].bound, kMaxTokens);
  EXPECT_EQ(x.dims[1].bound, 4);
  ASSERT_EQ(plan->outputs().size(), 1u);
  EXPECT_EQ(plan->outputs()[0].name, "y");
}

TEST(Plan, WeightSectionsArePageAligned) {
  MlpPlan mlp;
  ASSERT_GE(mlp.bytes.size(), 4096u);
  // The section table's second entry is the weight section.
  uint64_t offset = 0;
  for (int i = 0; i < 8; ++i)
    offset |= uint64_t{mlp.bytes[kFileHeaderSize + kSectionEntrySize + 8 + i]}
              << (8 * i);
  EXPECT_EQ(offset % kWeightSectionAlignment, 0u);
  EXPECT_GT(offset, 0u);
}

TEST(Session, RunsWithEveryTokenCountAndReusesMemory) {
  MlpPlan mlp;
  std::unique_ptr<Plan> plan = load(mlp.bytes);
  ASSERT_TRUE(plan);
  auto session = Session::create(*plan, {/*threads=*/2});
  ASSERT_TRUE(session.ok()) << session.status();
  for (int64_t tokens : {1, 3, 8}) {
    std::vector<float> x =
        randomFloats(tokens * 4, static_cast<uint32_t>(tokens));
    ASSERT_TRUE(
        (*session)
            ->setInput("x", DType::F32, {tokens, 4}, x.data(), x.size() * 4)
            .ok());
    // Twice: the input is restaged although y reused its arena slot.
    for (int repeat = 0; repeat < 2; ++repeat) {
      ASSERT_TRUE((*session)->run().ok());
      auto y = (*session)->output("y");
      ASSERT_TRUE(y.ok()) << y.status();
      Value v;
      v.shape = y->shape;
      const auto *p = static_cast<const uint8_t *>(y->data);
      v.bytes.assign(p, p + y->bytes);
      expectNear(v, {tokens, 3}, mlp.reference(x));
    }
  }
  std::vector<StepStats> stats = (*session)->stepStats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].name, "up");
  EXPECT_EQ(stats[1].op, "Relu");
  EXPECT_EQ(stats[2].calls, 6u);
}

/// Writes `bytes` to a new temporary file; its path, or "" on failure.
std::string writeTempPlan(const std::vector<uint8_t> &bytes) {
  char path[] = "/tmp/moert_plan_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0)
    return "";
  bool written = write(fd, bytes.data(), bytes.size()) ==
                 static_cast<ssize_t>(bytes.size());
  close(fd);
  return written ? path : "";
}

TEST(Session, LoadsFromAFileThroughMmap) {
  MlpPlan mlp;
  std::string path = writeTempPlan(mlp.bytes);
  ASSERT_FALSE(path.empty());
  auto plan = Plan::load(path);
  std::remove(path.c_str());
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto session = Session::create(**plan);
  ASSERT_TRUE(session.ok());
  std::vector<float> x = randomFloats(8, 5);
  ASSERT_TRUE((*session)->setInput("x", DType::F32, {2, 4}, x.data(), 32).ok());
  ASSERT_TRUE((*session)->run().ok());
  auto y = (*session)->output("y");
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Plan::load("/nonexistent/plan.bin").status(),
              StatusHas("cannot open"));
}

// Tests LoadOptions::weightPages: a plan copied into huge pages runs as
// the mapped file does, and auto maps a plan this small.
TEST(Session, LoadsIntoHugePages) {
  MlpPlan mlp;
  std::string path = writeTempPlan(mlp.bytes);
  ASSERT_FALSE(path.empty());
  std::vector<float> x = randomFloats(8, 5);
  std::vector<std::vector<float>> outputs;
  using Pages = LoadOptions::WeightPages;
  for (Pages pages : {Pages::Mapped, Pages::Huge, Pages::Auto}) {
    LoadOptions options;
    options.weightPages = pages;
    auto plan = Plan::load(path, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ((*plan)->onHugePages(), pages == Pages::Huge);
    auto session = Session::create(**plan);
    ASSERT_TRUE(session.ok());
    ASSERT_TRUE(
        (*session)->setInput("x", DType::F32, {2, 4}, x.data(), 32).ok());
    ASSERT_TRUE((*session)->run().ok());
    auto y = (*session)->output("y");
    ASSERT_TRUE(y.ok());
    const float *data = static_cast<const float *>(y->data);
    outputs.emplace_back(data, data + 6);
  }
  std::remove(path.c_str());
  EXPECT_EQ(outputs[1], outputs[0]);
  EXPECT_EQ(outputs[2], outputs[0]);
}

TEST(Session, RejectsBadInputsClearly) {
  MlpPlan mlp;
  std::unique_ptr<Plan> plan = load(mlp.bytes);
  ASSERT_TRUE(plan);
  auto created = Session::create(*plan);
  ASSERT_TRUE(created.ok());
  Session &s = **created;
  std::vector<float> x(40, 0.0f);
  EXPECT_THAT(s.run(), StatusHas("input 'x' is not set"));
  EXPECT_THAT(s.setInput("z", DType::F32, {1, 4}, x.data(), 16),
              StatusHas("unknown input 'z'; the plan's inputs are: 'x'"));
  EXPECT_THAT(s.setInput("x", DType::I64, {1, 2}, x.data(), 16),
              StatusHas("has dtype i64; the plan expects f32"));
  EXPECT_THAT(s.setInput("x", DType::F32, {4}, x.data(), 16),
              StatusHas("has rank 1; the plan expects 2"));
  EXPECT_THAT(s.setInput("x", DType::F32, {1, 5}, x.data(), 20),
              StatusHas("dim 1 is 5; the plan expects 4"));
  EXPECT_THAT(s.setInput("x", DType::F32, {9, 4}, x.data(), 144),
              StatusHas("dim 0 is 9; the plan allows [1, 8] for symbol 'T'"));
  EXPECT_THAT(s.setInput("x", DType::F32, {0, 4}, x.data(), 0),
              StatusHas("symbol 'T' is at least 1"));
  EXPECT_THAT(s.setInput("x", DType::F32, {2, 4}, x.data(), 16),
              StatusHas("has 16 bytes; shape [2, 4] of f32 needs 32"));
  EXPECT_THAT(s.output("y").status(), StatusHas("before a successful run"));
  EXPECT_THAT(s.output("q").status(), StatusHas("unknown output 'q'"));
}

TEST(Session, SymbolsMustAgreeAcrossInputs) {
  PlanWriter writer;
  int t = writer.addSymbol("T", 1, 4);
  ScheduleBuilder &s = writer.schedule();
  int32_t a = s.addTensor("a", DType::F32, {PlanDim::symbol(t)});
  int32_t b = s.addTensor("b", DType::F32, {PlanDim::symbol(t)});
  int32_t c = s.addTensor("c", DType::F32, {PlanDim::symbol(t)});
  s.addInput(a);
  s.addInput(b);
  s.addOutput(c);
  s.addStep(OpKind::Add, "add", {a, b}, {c});
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok());
  std::unique_ptr<Plan> plan = load(*bytes);
  auto session = Session::create(*plan);
  ASSERT_TRUE(session.ok());
  float v[4] = {1, 2, 3, 4};
  ASSERT_TRUE((*session)->setInput("a", DType::F32, {2}, v, 8).ok());
  ASSERT_TRUE((*session)->setInput("b", DType::F32, {3}, v, 12).ok());
  EXPECT_THAT((*session)->run(),
              StatusHas("inputs 'a' and 'b' disagree on symbol 'T' (2 vs 3)"));
}

TEST(Session, CudaPlansNeedTheCudaBackend) {
  MlpPlan mlp(Backend::Cuda);
  std::unique_ptr<Plan> plan = load(mlp.bytes);
  ASSERT_TRUE(plan);
  EXPECT_THAT(Session::create(*plan).status(),
              StatusHas("the plan targets the cuda backend"));
}

TEST(Session, SymbolicIntermediateMustEqualItsSymbol) {
  // NonZero's count is data dependent; declaring it as T is a plan bug the
  // session reports instead of reading past the data.
  PlanWriter writer;
  int t = writer.addSymbol("T", 1, 4);
  ScheduleBuilder &s = writer.schedule();
  int32_t x = s.addTensor("x", DType::F32, {PlanDim::symbol(t)});
  int32_t nz = s.addTensor("nz", DType::I64, {1, PlanDim::symbol(t)});
  s.addInput(x);
  s.addOutput(nz);
  s.addStep(OpKind::NonZero, "nonzero", {x}, {nz});
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok());
  std::unique_ptr<Plan> plan = load(*bytes);
  auto session = Session::create(*plan);
  float v[3] = {1, 0, 2};
  ASSERT_TRUE((*session)->setInput("x", DType::F32, {3}, v, 12).ok());
  EXPECT_THAT(
      (*session)->run(),
      StatusHas("step 0 'nonzero' (NonZero): output 0 'nz' has shape "
                "[1, 2], which does not fit the planned [1, <=4]: dim 1 "
                "must equal symbol value 3"));
}

//===----------------------------------------------------------------------===//
// Load-time validation of the program
//===----------------------------------------------------------------------===//

/// A writer with input x: f32 [4] and helpers to add steps.
struct Builder {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int32_t x = s.addTensor("x", DType::F32, {4});
  Builder() { s.addInput(x); }
  int32_t tensor(const char *name, DType dtype = DType::F32,
                 std::vector<PlanDim> dims = {4}) {
    return s.addTensor(name, dtype, std::move(dims));
  }
};

TEST(Validation, UseBeforeDefinition) {
  Builder b;
  int32_t y = b.tensor("y"), z = b.tensor("z");
  b.s.addStep(OpKind::Relu, "first", {y}, {z});
  b.s.addStep(OpKind::Relu, "second", {b.x}, {y});
  b.s.addOutput(z);
  EXPECT_THAT(loadStatus(b.writer),
              StatusHas("<memory>: schedule 0: step 0 'first' (Relu): input 0 "
                        "'y' is used before any step produces it"));
}

TEST(Validation, TensorsAreProducedOnce) {
  Builder b;
  int32_t y = b.tensor("y");
  b.s.addStep(OpKind::Relu, "a", {b.x}, {y});
  b.s.addStep(OpKind::Neg, "b", {b.x}, {y});
  b.s.addOutput(y);
  EXPECT_THAT(loadStatus(b.writer),
              StatusHas("output 0 'y' is already produced by an earlier step"));
  Builder c;
  c.s.addStep(OpKind::Relu, "a", {c.x}, {c.x});
  EXPECT_THAT(loadStatus(c.writer), StatusHas("'x' is a graph input"));
}

TEST(Validation, ArityAttributesAndUnknownOps) {
  Builder b;
  int32_t y = b.tensor("y");
  b.s.addStep(OpKind::Add, "add", {b.x}, {y});
  EXPECT_THAT(loadStatus(b.writer),
              StatusHas("step 0 'add' (Add): has 1 inputs; expected 2 to 2"));
  Builder c;
  int32_t z = c.tensor("z");
  c.s.addStep(OpKind::Softmax, "softmax", {c.x}, {z});
  EXPECT_THAT(loadStatus(c.writer),
              StatusHas("expects AxisAttrs attributes, found none"));
  Builder d;
  int32_t w = d.tensor("w");
  d.s.addStep(OpKind::Relu, "relu", {d.x}, {w}, attrs(fb::AxisAttrsT()));
  EXPECT_THAT(loadStatus(d.writer),
              StatusHas("expects no attributes, found AxisAttrs"));
  Builder e;
  int32_t u = e.tensor("u");
  e.s.addStep(static_cast<OpKind>(999), "future", {e.x}, {u});
  EXPECT_THAT(loadStatus(e.writer),
              StatusHas("step 0 'future': unknown op kind 999"));
  Builder f;
  int32_t v = f.tensor("v");
  f.s.addStep(OpKind::Relu, "relu", {42}, {v});
  EXPECT_THAT(loadStatus(f.writer),
              StatusHas("input 0 names tensor 42 but the schedule has 2"));
  Builder g;
  int32_t q = g.tensor("q");
  g.s.addStep(OpKind::Add, "add", {g.x, -1}, {q});
  EXPECT_THAT(loadStatus(g.writer),
              StatusHas("input 1 is required but omitted"));
}

TEST(Validation, DtypeAndRankRules) {
  Builder b;
  int32_t y = b.tensor("y", DType::I64);
  b.s.addStep(OpKind::Relu, "relu", {b.x}, {y});
  EXPECT_THAT(loadStatus(b.writer),
              StatusHas("output 0 'y' has dtype i64 but input 0 'x' has "
                        "dtype f32"));
  Builder c;
  int32_t z = c.tensor("z", DType::F32, {2, 2});
  c.s.addStep(OpKind::Relu, "relu", {c.x}, {z});
  EXPECT_THAT(loadStatus(c.writer),
              StatusHas("output 0 'z' has rank 2; expected 1"));
  Builder d;
  int32_t w = d.tensor("w", DType::F32, {1, 1, 1, 1, 1, 1, 1, 1, 1});
  d.s.addOutput(w);
  EXPECT_THAT(loadStatus(d.writer), StatusHas("rank 9 exceeds the maximum 8"));
  Builder e;
  int32_t v = e.tensor("v");
  e.s.tensor(v).dtype = static_cast<fb::DType>(77);
  EXPECT_THAT(loadStatus(e.writer),
              StatusHas("tensor 1 'v': unknown dtype 77"));
}

TEST(Validation, ArenaBoundsAndPlannedSizes) {
  Builder b;
  int32_t y = b.tensor("y");
  b.s.addStep(OpKind::Relu, "relu", {b.x}, {y});
  b.s.addOutput(y);
  b.s.setArenaSize(20);
  EXPECT_THAT(loadStatus(b.writer),
              StatusHas("tensor 1 'y': arena bytes [64, +16) exceed the arena "
                        "size 20"));
  Builder c;
  int32_t z = c.s.addTensor("z", DType::F32, {4}, 64, 8);
  c.s.addStep(OpKind::Relu, "relu", {c.x}, {z});
  EXPECT_THAT(loadStatus(c.writer),
              StatusHas("planned size 8 bytes is less than 16 bytes needed"));
  Builder d;
  d.s.tensor(d.x).offset = 2;
  EXPECT_THAT(loadStatus(d.writer),
              StatusHas("offset 2 is not a multiple of the 4-byte element"));
}

TEST(Validation, LiveTensorsMustNotOverlap) {
  // y and z live at once (z reads x and y) but share bytes.
  Builder b;
  int32_t y = b.s.addTensor("y", DType::F32, {4}, 16, 16);
  int32_t z = b.s.addTensor("z", DType::F32, {4}, 24, 16);
  b.s.addStep(OpKind::Relu, "relu", {b.x}, {y});
  b.s.addStep(OpKind::Add, "add", {b.x, y}, {z});
  b.s.addOutput(z);
  EXPECT_THAT(
      loadStatus(b.writer),
      StatusHas("memory plan overlaps live tensors: tensor 1 'y' (bytes "
                "[16, 32), live from step 0 to step 1) and tensor 2 'z' "
                "(bytes [24, 40), live from step 1 to the end)"));
}

TEST(Validation, InPlaceOnlyWhereTheOpAllowsIt) {
  // Relu over x's slot in place: allowed (x is not read afterwards).
  Builder ok;
  int32_t y = ok.s.addTensor("y", DType::F32, {4}, 0, 16);
  ok.s.addStep(OpKind::Relu, "relu", {ok.x}, {y});
  ok.s.addOutput(y);
  EXPECT_TRUE(loadStatus(ok.writer).ok()) << loadStatus(ok.writer);
  // x read again later: not allowed.
  Builder late;
  int32_t a = late.s.addTensor("a", DType::F32, {4}, 0, 16);
  int32_t c = late.tensor("c");
  late.s.addStep(OpKind::Relu, "relu", {late.x}, {a});
  late.s.addStep(OpKind::Add, "add", {late.x, a}, {c});
  late.s.addOutput(c);
  EXPECT_THAT(loadStatus(late.writer), StatusHas("memory plan overlaps"));
  // MatMul never runs in place.
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int32_t m = s.addTensor("m", DType::F32, {2, 2}, 0, 16);
  int32_t w = s.addTensor("w", DType::F32, {2, 2});
  int32_t o = s.addTensor("o", DType::F32, {2, 2}, 0, 16);
  s.addInput(m);
  s.addInput(w);
  s.addStep(OpKind::MatMul, "mm", {m, w}, {o});
  s.addOutput(o);
  EXPECT_THAT(loadStatus(writer), StatusHas("memory plan overlaps"));
}

TEST(Validation, InPlaceResultsAreCorrect) {
  // x -> exp in place -> neg in place -> output: three tensors, one slot.
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int32_t x = s.addTensor("x", DType::F32, {3}, 0, 12);
  int32_t e = s.addTensor("e", DType::F32, {3}, 0, 12);
  int32_t n = s.addTensor("n", DType::F32, {3}, 0, 12);
  s.addInput(x);
  s.addOutput(n);
  s.addStep(OpKind::Exp, "exp", {x}, {e});
  s.addStep(OpKind::Neg, "neg", {e}, {n});
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok());
  std::unique_ptr<Plan> plan = load(*bytes);
  ASSERT_TRUE(plan);
  auto session = Session::create(*plan);
  float v[3] = {0, 1, 2};
  ASSERT_TRUE((*session)->setInput("x", DType::F32, {3}, v, 12).ok());
  ASSERT_TRUE((*session)->run().ok());
  auto out = (*session)->output("n");
  const float *p = static_cast<const float *>(out->data);
  EXPECT_FLOAT_EQ(p[0], -1.0f);
  EXPECT_FLOAT_EQ(p[2], -std::exp(2.0f));
}

TEST(Validation, WeightsSymbolsAndSignature) {
  Builder b;
  float data[4] = {};
  int32_t w = b.s.addWeight("w", DType::F32, {4}, data, 16);
  b.s.tensor(w).size = 8;
  EXPECT_THAT(loadStatus(b.writer), StatusHas("weight size 8 bytes differs"));
  Builder c;
  int32_t v = c.s.addWeight("v", DType::F32, {4}, data, 16);
  c.s.tensor(v).offset = 4096;
  EXPECT_THAT(loadStatus(c.writer), StatusHas("exceed weight section 1"));
  Builder d;
  int32_t u = d.s.addWeight("u", DType::F32, {4}, data, 16);
  d.s.tensor(u).section = 0;
  EXPECT_THAT(loadStatus(d.writer), StatusHas("section 0 is not a weight "
                                              "section"));
  PlanWriter e;
  int t = e.addSymbol("T", 1, 8);
  ScheduleBuilder &s = e.schedule();
  int32_t x = s.addTensor("x", DType::F32, {PlanDim::symbol(t)});
  s.addInput(x);
  s.tensor(x).dims[0] = fb::Dim(16, t, fb::DimKind::Symbolic);
  EXPECT_THAT(loadStatus(e),
              StatusHas("dim 0 has bound 16 but its symbol 'T' has max 8"));
  Builder f;
  f.s.addInput(f.x);
  EXPECT_THAT(loadStatus(f.writer), StatusHas("input name 'x' appears twice"));
  Builder g;
  int32_t y = g.tensor("y");
  g.s.addOutput(y);
  EXPECT_THAT(loadStatus(g.writer), StatusHas("output 'y' is produced by no "
                                              "step"));
}

TEST(Validation, WriterReportsMisuse) {
  PlanWriter writer;
  float data[2] = {};
  writer.schedule().addWeight("w", DType::F32, {3}, data, 8);
  EXPECT_THAT(writer.serialize().status(),
              StatusHas("weight 'w' has 8 bytes, which does not match"));
  PlanWriter symbols;
  symbols.schedule().addTensor("x", DType::F32, {PlanDim::symbol(3)});
  EXPECT_THAT(symbols.serialize().status(), StatusHas("unknown symbol 3"));
}

TEST(Plan, WeightGatheredFromPieces) {
  // A stacked [3, 2] weight from two referenced pieces around a zero piece
  // (an expert absent from the model), read back through an Identity step.
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  float first[2] = {1.5f, -2.0f}, last[2] = {3.0f, 4.25f};
  int32_t w = s.addWeightPieces(
      "w", DType::F32, {3, 2},
      {{first, sizeof(first)}, {nullptr, 8}, {last, sizeof(last)}});
  int32_t y = s.addTensor("y", DType::F32, {3, 2});
  s.addStep(OpKind::Identity, "copy", {w}, {y});
  s.addOutput(y);
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::unique_ptr<Plan> plan = load(*bytes);
  ASSERT_TRUE(plan);
  auto session = Session::create(*plan);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->run().ok());
  auto out = (*session)->output("y");
  ASSERT_TRUE(out.ok()) << out.status();
  Value v;
  v.shape = out->shape;
  const auto *p = static_cast<const uint8_t *>(out->data);
  v.bytes.assign(p, p + out->bytes);
  expectNear(v, {3, 2}, {1.5f, -2.0f, 0.0f, 0.0f, 3.0f, 4.25f});
}

TEST(Plan, MultipleDeviceSchedules) {
  PlanWriter writer({Backend::Cpu, 2, 0});
  for (int d = 0; d < 2; ++d) {
    ScheduleBuilder &s = writer.schedule(d);
    int32_t x = s.addTensor("x", DType::F32, {2});
    int32_t y = s.addTensor("y", DType::F32, {2});
    s.addInput(x);
    s.addOutput(y);
    s.addStep(d ? OpKind::Neg : OpKind::Abs, "op", {x}, {y});
  }
  int section = writer.addWeightSection();
  EXPECT_EQ(section, 0);
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok());
  std::unique_ptr<Plan> plan = load(*bytes);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->numDevices(), 2);
  auto session = Session::create(*plan, {1, /*device=*/1});
  ASSERT_TRUE(session.ok());
  float v[2] = {1, -2};
  ASSERT_TRUE((*session)->setInput("x", DType::F32, {2}, v, 8).ok());
  ASSERT_TRUE((*session)->run().ok());
  const float *p = static_cast<const float *>((*session)->output("y")->data);
  EXPECT_EQ(p[0], -1.0f);
  EXPECT_EQ(p[1], 2.0f);
  EXPECT_THAT(Session::create(*plan, {1, 2}).status(),
              StatusHas("device 2 is not in [0, 2)"));
}

//===----------------------------------------------------------------------===//
// Provenance
//===----------------------------------------------------------------------===//

/// A valid one-step plan (y = relu(x)) carrying `provenance`.
std::vector<uint8_t> planWithProvenance(const ProvenanceDesc &provenance) {
  Builder b;
  int32_t y = b.tensor("y");
  b.s.addStep(OpKind::Relu, "relu", {b.x}, {y});
  b.s.addOutput(y);
  b.writer.setProvenance(provenance);
  absl::StatusOr<std::vector<uint8_t>> bytes = b.writer.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

ProvenanceDesc sampleProvenance() {
  ProvenanceDesc p;
  p.compilerVersion = "moec 9.8.7";
  p.gitCommit = "0123456789ab";
  p.modelFile = "models/m.onnx";
  p.modelSha256 = std::string(64, 'a');
  p.flags = {{"max-tokens", "64"}, {"bound", ""}};
  return p;
}

TEST(Provenance, RoundTripsThroughThePlan) {
  std::vector<uint8_t> bytes = planWithProvenance(sampleProvenance());
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ProvenanceDesc &p = (*plan)->provenance();
  EXPECT_EQ(p.compilerVersion, "moec 9.8.7");
  EXPECT_EQ(p.gitCommit, "0123456789ab");
  EXPECT_EQ(p.modelFile, "models/m.onnx");
  EXPECT_EQ(p.modelSha256, std::string(64, 'a'));
  EXPECT_EQ(p.prefillFile, "");
  ASSERT_EQ(p.flags.size(), 2u);
  EXPECT_EQ(p.flags[0],
            std::make_pair(std::string("max-tokens"), std::string("64")));
  EXPECT_EQ(p.flags[1].second, "");
}

TEST(Provenance, PlansWithoutOneLoadWithNone) {
  Builder b;
  int32_t y = b.tensor("y");
  b.s.addStep(OpKind::Relu, "relu", {b.x}, {y});
  b.s.addOutput(y);
  auto bytes = b.writer.serialize();
  ASSERT_TRUE(bytes.ok());
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE((*plan)->provenance().modelFile.empty());
  EXPECT_TRUE((*plan)->provenance().flags.empty());
}

TEST(Provenance, MalformedFieldsAreRejectedByName) {
  auto status = [](const ProvenanceDesc &p) {
    std::vector<uint8_t> bytes = planWithProvenance(p);
    return Plan::loadFromMemory(bytes.data(), bytes.size()).status();
  };
  ProvenanceDesc digest = sampleProvenance();
  digest.modelSha256 = "not-a-digest";
  EXPECT_THAT(status(digest),
              StatusHas("provenance.model_sha256 is not a SHA-256 digest"));
  ProvenanceDesc upper = sampleProvenance();
  upper.prefillSha256 = std::string(64, 'A');
  EXPECT_THAT(status(upper),
              StatusHas("provenance.prefill_sha256 is not a SHA-256 digest"));
  ProvenanceDesc longText = sampleProvenance();
  longText.modelFile = std::string(5000, 'm');
  EXPECT_THAT(status(longText),
              StatusHas("provenance.model_file is 5000 bytes long; at most "
                        "4096 are allowed"));
  ProvenanceDesc manyFlags = sampleProvenance();
  manyFlags.flags.assign(65, {"f", "v"});
  EXPECT_THAT(status(manyFlags),
              StatusHas("provenance.flags has 65 entries; at most 64"));
  ProvenanceDesc unnamed = sampleProvenance();
  unnamed.flags.push_back({"", "v"});
  EXPECT_THAT(status(unnamed),
              StatusHas("provenance.flags has an entry without a name"));
}

TEST(Provenance, InspectPrintsItWithoutControlBytes) {
  ProvenanceDesc p = sampleProvenance();
  p.modelFile = "evil\x1b[2J.onnx";
  std::vector<uint8_t> bytes = planWithProvenance(p);
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::string text = describePlanText(**plan);
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "compiled by moec 9.8.7 (git 0123456789ab) from "
                        "evil?[2J.onnx (sha256 " +
                        std::string(64, 'a') + ")"));
  EXPECT_THAT(text,
              ::testing::HasSubstr("options: --max-tokens=64 --bound=''"));
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  std::string json = describePlanJson(**plan);
  EXPECT_THAT(json,
              ::testing::HasSubstr("\"model_file\": \"evil\\u001b[2J.onnx\""));
  EXPECT_THAT(json, ::testing::HasSubstr("[\"max-tokens\", \"64\"]"));
}

} // namespace
} // namespace moert::testing
