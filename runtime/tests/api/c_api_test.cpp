//===- c_api_test.cpp - The C API (moert/moert_c.h) -----------------------===//
//
// A plan of y = softmax(x @ w) over T tokens runs through the C API and is
// checked against the same computation in double; bound inputs are read in
// place and bound outputs written in place; every error path returns its
// code and a message naming the file, input or output at fault, on the
// calling thread only.
//
//===----------------------------------------------------------------------===//

#include "generation_model.h"
#include "moert/generator.h"
#include "moert/moert_c.h"
#include "multimodal_plans.h"

#include "test_util.h"

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <thread>

namespace moert::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kIn = 3, kOut = 4, kMaxTokens = 8;

/// The weights of the test plan.
std::vector<float> weights() {
  std::vector<float> w(kIn * kOut);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = 0.25f * static_cast<float>(i) - 1.5f;
  return w;
}

/// Writes the plan y = softmax(x @ w), x: [T, 3] with T in [1, 8], to a
/// file of the test's own name; its path.
std::string writePlan() {
  std::string path =
      ::testing::TempDir() + "/c_api_" +
      ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".plan";
  PlanWriter writer;
  int t = writer.addSymbol("T", 1, kMaxTokens);
  ScheduleBuilder &s = writer.schedule();
  std::vector<float> w = weights();
  int32_t x = s.addTensor("x", DType::F32, {PlanDim::symbol(t), kIn});
  int32_t wt = s.addWeight("w", DType::F32, {kIn, kOut}, w.data(),
                           w.size() * sizeof(float));
  int32_t h = s.addTensor("h", DType::F32, {PlanDim::symbol(t), kOut});
  int32_t y = s.addTensor("y", DType::F32, {PlanDim::symbol(t), kOut});
  fb::AxisAttrsT axis;
  axis.axis = -1;
  s.addInput(x);
  s.addOutput(y);
  s.addStep(fb::OpKind::MatMul, "proj", {x, wt}, {h});
  s.addStep(fb::OpKind::Softmax, "softmax", {h}, {y}, attrs(axis));
  absl::Status status = writer.write(path);
  EXPECT_TRUE(status.ok()) << status;
  return path;
}

/// softmax(x @ w) in double.
std::vector<double> reference(const std::vector<float> &x) {
  std::vector<float> w = weights();
  size_t tokens = x.size() / kIn;
  std::vector<double> y(tokens * kOut);
  for (size_t r = 0; r < tokens; ++r) {
    double row[kOut], max = -INFINITY, sum = 0;
    for (int64_t c = 0; c < kOut; ++c) {
      row[c] = 0;
      for (int64_t k = 0; k < kIn; ++k)
        row[c] += double(x[r * kIn + k]) * w[k * kOut + c];
      max = std::max(max, row[c]);
    }
    for (int64_t c = 0; c < kOut; ++c)
      sum += row[c] = std::exp(row[c] - max);
    for (int64_t c = 0; c < kOut; ++c)
      y[r * kOut + c] = row[c] / sum;
  }
  return y;
}

std::vector<float> randomInput(int64_t tokens, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(tokens * kIn);
  for (float &v : x)
    v = normal(rng);
  return x;
}

void expectMatches(const moert_tensor &y, const std::vector<float> &x) {
  std::vector<double> want = reference(x);
  int64_t tokens = static_cast<int64_t>(x.size()) / kIn;
  ASSERT_EQ(y.dtype, MOERT_DTYPE_F32);
  ASSERT_EQ(y.rank, 2);
  EXPECT_EQ(y.shape[0], tokens);
  EXPECT_EQ(y.shape[1], kOut);
  ASSERT_EQ(y.bytes, want.size() * sizeof(float));
  const float *got = static_cast<const float *>(y.data);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6) << "at " << i;
}

/// Loads `path` and creates a session of 2 threads; fails the test on error.
struct Loaded {
  moert_plan *plan = nullptr;
  moert_session *session = nullptr;
  explicit Loaded(const std::string &path) {
    EXPECT_EQ(moert_plan_load(path.c_str(), &plan), MOERT_OK)
        << moert_last_error();
    moert_session_options options = moert_session_options_default();
    options.threads = 2;
    if (plan) {
      EXPECT_EQ(moert_session_create(plan, &options, &session), MOERT_OK)
          << moert_last_error();
    }
  }
  ~Loaded() {
    moert_session_free(session);
    moert_plan_free(plan);
  }
};

TEST(CApi, DescribesThePlan) {
  Loaded l(writePlan());
  ASSERT_TRUE(l.session);
  EXPECT_THAT(moert_version(),
              ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  ASSERT_EQ(moert_plan_num_inputs(l.plan), 1u);
  ASSERT_EQ(moert_plan_num_outputs(l.plan), 1u);
  EXPECT_EQ(moert_plan_num_devices(l.plan), 1);
  moert_tensor_desc x;
  ASSERT_EQ(moert_plan_input(l.plan, 0, &x), MOERT_OK);
  EXPECT_STREQ(x.name, "x");
  EXPECT_EQ(x.dtype, MOERT_DTYPE_F32);
  ASSERT_EQ(x.rank, 2);
  EXPECT_EQ(x.dims[0].kind, MOERT_DIM_SYMBOLIC);
  EXPECT_STREQ(x.dims[0].symbol, "T");
  EXPECT_EQ(x.dims[0].symbol_min, 1);
  EXPECT_EQ(x.dims[0].bound, kMaxTokens);
  EXPECT_EQ(x.dims[1].kind, MOERT_DIM_STATIC);
  EXPECT_EQ(x.dims[1].bound, kIn);
  EXPECT_EQ(x.dims[1].symbol, nullptr);
  EXPECT_EQ(x.max_bytes, uint64_t(kMaxTokens * kIn * 4));
  moert_tensor_desc y;
  ASSERT_EQ(moert_plan_output(l.plan, 0, &y), MOERT_OK);
  EXPECT_STREQ(y.name, "y");
  EXPECT_EQ(y.max_bytes, uint64_t(kMaxTokens * kOut * 4));
  EXPECT_EQ(moert_plan_output(l.plan, 1, &y), MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("output index 1 is out of range"));
  EXPECT_STREQ(moert_dtype_name(MOERT_DTYPE_BF16), "bf16");
  EXPECT_EQ(moert_dtype_size(MOERT_DTYPE_I64), 8u);
}

TEST(CApi, RunsAndTimes) {
  Loaded l(writePlan());
  ASSERT_TRUE(l.session);
  for (int64_t tokens : {int64_t{1}, int64_t{5}, kMaxTokens}) {
    std::vector<float> x = randomInput(tokens, static_cast<unsigned>(tokens));
    int64_t shape[2] = {tokens, kIn};
    ASSERT_EQ(moert_session_set_input(l.session, "x", MOERT_DTYPE_F32, shape, 2,
                                      x.data(), x.size() * 4),
              MOERT_OK)
        << moert_last_error();
    ASSERT_EQ(moert_session_run(l.session), MOERT_OK) << moert_last_error();
    moert_tensor y;
    ASSERT_EQ(moert_session_output(l.session, "y", &y), MOERT_OK);
    expectMatches(y, x);
  }
  uint64_t runs = 0;
  double seconds = -1;
  ASSERT_EQ(moert_session_run_time(l.session, &runs, &seconds), MOERT_OK);
  EXPECT_EQ(runs, 3u);
  EXPECT_GT(seconds, 0);
  ASSERT_EQ(moert_session_num_steps(l.session), 2u);
  moert_step_stats step;
  ASSERT_EQ(moert_session_step_stats(l.session, 1, &step), MOERT_OK);
  EXPECT_STREQ(step.name, "softmax");
  EXPECT_STREQ(step.op, "Softmax");
  EXPECT_EQ(step.calls, 3u);
  EXPECT_GT(step.total_seconds, 0);
  EXPECT_EQ(moert_session_step_stats(l.session, 2, &step),
            MOERT_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(moert_session_reset_stats(l.session), MOERT_OK);
  ASSERT_EQ(moert_session_step_stats(l.session, 0, &step), MOERT_OK);
  EXPECT_EQ(step.calls, 0u);
  ASSERT_EQ(moert_session_run_time(l.session, &runs, nullptr), MOERT_OK);
  EXPECT_EQ(runs, 0u);
}

TEST(CApi, BoundBuffersAreUsedInPlace) {
  Loaded l(writePlan());
  ASSERT_TRUE(l.session);
  int64_t tokens = 6;
  std::vector<float> x = randomInput(tokens, 1);
  int64_t shape[2] = {tokens, kIn};
  std::vector<float> out(kMaxTokens * kOut, -7.0f);
  ASSERT_EQ(moert_session_bind_input(l.session, "x", MOERT_DTYPE_F32, shape, 2,
                                     x.data(), x.size() * 4),
            MOERT_OK)
      << moert_last_error();
  ASSERT_EQ(
      moert_session_bind_output(l.session, "y", out.data(), out.size() * 4),
      MOERT_OK)
      << moert_last_error();
  ASSERT_EQ(moert_session_run(l.session), MOERT_OK) << moert_last_error();
  moert_tensor y;
  ASSERT_EQ(moert_session_output(l.session, "y", &y), MOERT_OK);
  EXPECT_EQ(y.data, out.data());
  expectMatches(y, x);
  // The runs read the caller's memory as it is now: a copy taken when the
  // input was bound would give the old values.
  std::vector<float> next = randomInput(tokens, 2);
  std::copy(next.begin(), next.end(), x.begin());
  ASSERT_EQ(moert_session_run(l.session), MOERT_OK) << moert_last_error();
  ASSERT_EQ(moert_session_output(l.session, "y", &y), MOERT_OK);
  expectMatches(y, next);
  EXPECT_EQ(out[tokens * kOut], -7.0f) << "wrote past the output's rows";
  // A buffer smaller than the output's bound is refused.
  EXPECT_EQ(moert_session_bind_output(l.session, "y", out.data(), 16),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("output 'y'"));
}

TEST(CApi, MissingAndCorruptedPlansAreErrors) {
  moert_plan *plan = reinterpret_cast<moert_plan *>(1);
  std::string missing = ::testing::TempDir() + "/c_api_no_such.plan";
  EXPECT_EQ(moert_plan_load(missing.c_str(), &plan), MOERT_ERROR_NOT_FOUND);
  EXPECT_EQ(plan, nullptr);
  EXPECT_THAT(moert_last_error(), HasSubstr(missing));

  std::string path = writePlan();
  std::vector<char> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 200u);
  bytes[bytes.size() / 2] ^= 0x10;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_EQ(moert_plan_load(path.c_str(), &plan), MOERT_ERROR_INVALID_PLAN);
  EXPECT_EQ(plan, nullptr);
  EXPECT_THAT(moert_last_error(), HasSubstr(path));

  EXPECT_EQ(moert_plan_load(nullptr, &plan), MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("path is null"));
}

TEST(CApi, BadInputsAndCallOrderAreErrors) {
  Loaded l(writePlan());
  ASSERT_TRUE(l.session);
  std::vector<float> x = randomInput(2, 3);
  int64_t shape[2] = {2, kIn};
  moert_tensor y;
  EXPECT_EQ(moert_session_output(l.session, "y", &y),
            MOERT_ERROR_FAILED_PRECONDITION);
  EXPECT_THAT(moert_last_error(), HasSubstr("output 'y'"));
  EXPECT_EQ(moert_session_run(l.session), MOERT_ERROR_FAILED_PRECONDITION);
  EXPECT_THAT(moert_last_error(), HasSubstr("input 'x' is not set"));
  EXPECT_EQ(moert_session_set_input(l.session, "nope", MOERT_DTYPE_F32, shape,
                                    2, x.data(), x.size() * 4),
            MOERT_ERROR_NOT_FOUND);
  EXPECT_THAT(moert_last_error(), HasSubstr("unknown input 'nope'"));
  EXPECT_THAT(moert_last_error(), HasSubstr("'x'"));
  EXPECT_EQ(moert_session_bind_input(l.session, "x", MOERT_DTYPE_I64, shape, 2,
                                     x.data(), x.size() * 4),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("input 'x': has dtype i64"));
  int64_t tooMany[2] = {kMaxTokens + 1, kIn};
  std::vector<float> big((kMaxTokens + 1) * kIn);
  EXPECT_EQ(moert_session_set_input(l.session, "x", MOERT_DTYPE_F32, tooMany, 2,
                                    big.data(), big.size() * 4),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("input 'x': dim 0 is 9"));
  EXPECT_EQ(moert_session_set_input(l.session, "x", MOERT_DTYPE_F32, shape, 2,
                                    x.data(), 4),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("has 4 bytes"));
  EXPECT_EQ(moert_session_set_input(l.session, "x", MOERT_DTYPE_F32, nullptr, 2,
                                    x.data(), x.size() * 4),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moert_session_output(l.session, "z", &y), MOERT_ERROR_NOT_FOUND);
  EXPECT_THAT(moert_last_error(), HasSubstr("unknown output 'z'"));
  // A failed create stores null.
  int sentinel = 0;
  moert_session *other = reinterpret_cast<moert_session *>(&sentinel);
  EXPECT_EQ(moert_session_create(nullptr, nullptr, &other),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(other, nullptr);
  EXPECT_THAT(moert_last_error(), HasSubstr("plan is null"));
  moert_session_options options = moert_session_options_default();
  options.threads = -1;
  EXPECT_EQ(moert_session_create(l.plan, &options, &other),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("threads is -1"));
}

TEST(CApi, TheLastErrorIsPerThread) {
  moert_plan *plan = nullptr;
  EXPECT_EQ(moert_plan_load(nullptr, &plan), MOERT_ERROR_INVALID_ARGUMENT);
  std::string mine = moert_last_error();
  std::string theirs;
  std::thread([&] {
    EXPECT_STREQ(moert_last_error(), "");
    moert_plan *p = nullptr;
    std::string missing = ::testing::TempDir() + "/c_api_other.plan";
    EXPECT_EQ(moert_plan_load(missing.c_str(), &p), MOERT_ERROR_NOT_FOUND);
    theirs = moert_last_error();
  }).join();
  EXPECT_THAT(theirs, HasSubstr("c_api_other.plan"));
  EXPECT_EQ(moert_last_error(), mine);
}

/// Writes the attention generation plan (generation_model.h) to a file of
/// the test's own name; its path.
std::string writeGenerationPlan(bool batchable = false) {
  std::string path =
      ::testing::TempDir() + "/c_api_gen_" +
      ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".plan";
  test::AttentionPlanOptions options;
  options.batchable = batchable;
  std::vector<uint8_t> bytes = test::writeAttentionGenerationPlan(options);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

void collectToken(int64_t token, void *user) {
  static_cast<std::vector<int64_t> *>(user)->push_back(token);
}

TEST(CApiGenerator, GeneratesTheModelsGreedyIdsAndStepsByStep) {
  moert_plan *plan = nullptr;
  ASSERT_EQ(moert_plan_load(writeGenerationPlan().c_str(), &plan), MOERT_OK)
      << moert_last_error();
  moert_generator *generator = nullptr;
  ASSERT_EQ(moert_generator_create(plan, nullptr, &generator), MOERT_OK)
      << moert_last_error();

  // Greedy: each id the argmax of the model's logits after the ones before.
  std::vector<int64_t> sequence = {1, 3};
  std::vector<int64_t> want;
  for (int i = 0; i < 5; ++i) {
    want.push_back(test::argmax(test::attentionLogits(sequence)));
    sequence.push_back(want.back());
  }
  moert_generate_options options = moert_generate_options_default();
  options.max_new_tokens = 5;
  std::vector<int64_t> streamed;
  options.on_token = collectToken;
  options.user_data = &streamed;
  const int64_t prompt[] = {1, 3};
  int64_t tokens[8] = {};
  size_t count = 0;
  ASSERT_EQ(moert_generator_generate(generator, prompt, 2, &options, tokens, 8,
                                     &count),
            MOERT_OK)
      << moert_last_error();
  EXPECT_EQ(std::vector<int64_t>(tokens, tokens + count), want);
  EXPECT_EQ(streamed, want);
  moert_generation_times times{};
  ASSERT_EQ(moert_generator_times(generator, &times), MOERT_OK);
  EXPECT_EQ(times.prompt_tokens, 2);
  EXPECT_EQ(times.new_tokens, 5);
  EXPECT_EQ(times.decode_steps, 4);
  EXPECT_EQ(times.stopped_early, 0);

  // should_stop after the second id ends the generation there.
  streamed.clear();
  options.should_stop = [](void *data) {
    return static_cast<std::vector<int64_t> *>(data)->size() == 2 ? 1 : 0;
  };
  ASSERT_EQ(moert_generator_generate(generator, prompt, 2, &options, tokens, 8,
                                     &count),
            MOERT_OK)
      << moert_last_error();
  EXPECT_EQ(std::vector<int64_t>(tokens, tokens + count),
            std::vector<int64_t>(want.begin(), want.begin() + 2));
  ASSERT_EQ(moert_generator_times(generator, &times), MOERT_OK);
  EXPECT_EQ(times.decode_steps, 1);
  EXPECT_EQ(times.stopped_early, 1);

  // Step by step: the logits after each step.
  ASSERT_EQ(moert_generator_prefill(generator, prompt, 2), MOERT_OK)
      << moert_last_error();
  ASSERT_EQ(moert_generator_decode(generator, 4), MOERT_OK)
      << moert_last_error();
  const float *logits = nullptr;
  int64_t vocab = 0;
  ASSERT_EQ(moert_generator_logits(generator, &logits, &vocab), MOERT_OK);
  std::vector<float> expected = test::attentionLogits({1, 3, 4});
  ASSERT_EQ(vocab, static_cast<int64_t>(expected.size()));
  for (int64_t v = 0; v < vocab; ++v)
    EXPECT_NEAR(logits[v], expected[v], 1e-5) << "logit " << v;
  int64_t length = 0, maxSeq = 0;
  ASSERT_EQ(moert_generator_length(generator, &length, &maxSeq), MOERT_OK);
  EXPECT_EQ(length, 3);
  EXPECT_EQ(maxSeq, test::kMaxSeq);

  moert_generator_free(generator);
  moert_plan_free(plan);
}

TEST(CApiGenerator, ErrorsNameWhatIsWrong) {
  Loaded plain(writePlan());
  moert_generator *generator = nullptr;
  EXPECT_EQ(moert_generator_create(plain.plan, nullptr, &generator),
            MOERT_ERROR_FAILED_PRECONDITION);
  EXPECT_THAT(moert_last_error(), HasSubstr("not a generation plan"));
  EXPECT_EQ(generator, nullptr);

  moert_plan *plan = nullptr;
  ASSERT_EQ(moert_plan_load(writeGenerationPlan().c_str(), &plan), MOERT_OK);
  ASSERT_EQ(moert_generator_create(plan, nullptr, &generator), MOERT_OK);
  const float *logits = nullptr;
  int64_t vocab = 0;
  EXPECT_EQ(moert_generator_logits(generator, &logits, &vocab),
            MOERT_ERROR_FAILED_PRECONDITION);
  EXPECT_EQ(moert_generator_decode(generator, 1),
            MOERT_ERROR_FAILED_PRECONDITION);
  EXPECT_THAT(moert_last_error(), HasSubstr("decode before prefill"));
  int64_t tokens[4];
  size_t count = 0;
  const int64_t prompt[] = {1, 3}, outside[] = {1, test::kVocab};
  moert_generate_options options = moert_generate_options_default();
  EXPECT_EQ(moert_generator_generate(generator, prompt, 2, &options, tokens, 4,
                                     &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("tokens has room for 4 ids"));
  options.max_new_tokens = 4;
  EXPECT_EQ(moert_generator_generate(generator, outside, 2, &options, tokens, 4,
                                     &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("outside the vocabulary"));
  options.max_new_tokens = 4;
  const int64_t longPrompt[] = {1, 2, 3, 4, 0};
  EXPECT_EQ(moert_generator_generate(generator, longPrompt, 5, &options, tokens,
                                     4, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("max_seq"));
  EXPECT_EQ(moert_generator_prefill(generator, nullptr, 2),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("prompt is null"));
  moert_generator_free(generator);
  moert_plan_free(plan);
}

// Tests a multimodal plan's vision inputs through the C API: the ids are
// the C++ Generator's, and a bad input is an error naming it.
TEST(CApiGenerator, TakesVisionInputs) {
  std::string path = ::testing::TempDir() + "/c_api_multimodal.plan";
  std::vector<uint8_t> bytes = test::writeMultimodalPlan();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  moert_plan *plan = nullptr;
  ASSERT_EQ(moert_plan_load(path.c_str(), &plan), MOERT_OK)
      << moert_last_error();
  moert_generator *generator = nullptr;
  ASSERT_EQ(moert_generator_create(plan, nullptr, &generator), MOERT_OK)
      << moert_last_error();
  const float pixels[] = {0.5f, -0.25f, 2.0f, 1.0f};
  const int64_t grid[] = {1, 1, 2}, pixelShape[] = {2, test::kDim},
                gridShape[] = {1, 3};
  const int64_t image = test::kMultimodalImageToken;
  const int64_t prompt[] = {1, image, image, 2};
  moert_vision_input vision[] = {
      {"pixels", MOERT_DTYPE_F32, pixelShape, 2, pixels, sizeof pixels},
      {"grid", MOERT_DTYPE_I64, gridShape, 2, grid, sizeof grid}};
  moert_generate_options options = moert_generate_options_default();
  options.max_new_tokens = 3;
  int64_t tokens[3];
  size_t count = 0;
  ASSERT_EQ(moert_generator_generate_vision(generator, prompt, 4, vision, 2,
                                            &options, tokens, 3, &count),
            MOERT_OK)
      << moert_last_error();
  auto loaded = Plan::loadFromMemory(bytes.data(), bytes.size());
  ASSERT_TRUE(loaded.ok());
  auto cxx = Generator::create(**loaded, {/*threads=*/1});
  ASSERT_TRUE(cxx.ok());
  VisionInputs inputs = {
      {"pixels", {DType::F32, {2, test::kDim}, pixels, sizeof pixels}},
      {"grid", {DType::I64, {1, 3}, grid, sizeof grid}}};
  GenerateOptions cxxOptions;
  cxxOptions.maxNewTokens = 3;
  auto want = (*cxx)->generate({1, image, image, 2}, inputs, cxxOptions);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(std::vector<int64_t>(tokens, tokens + count), *want);
  // An input the plan does not take, and one of another dtype.
  vision[0].name = "nope";
  EXPECT_EQ(moert_generator_generate_vision(generator, prompt, 4, vision, 2,
                                            &options, tokens, 3, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(),
              HasSubstr("vision input 'nope' is not one of the plan's "
                        "(pixels, grid)"));
  vision[0].name = "pixels";
  vision[1].dtype = MOERT_DTYPE_I32;
  EXPECT_EQ(moert_generator_generate_vision(generator, prompt, 4, vision, 2,
                                            &options, tokens, 3, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("'grid'"));
  EXPECT_EQ(moert_generator_generate_vision(generator, prompt, 4, nullptr, 2,
                                            &options, tokens, 3, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("vision is null"));
  moert_generator_free(generator);
  moert_plan_free(plan);
}

/// A PNG of 2 x 1 RGB pixels, (255, 0, 128) and (10, 200, 30).
const uint8_t kPng[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d,
    0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01,
    0x08, 0x02, 0x00, 0x00, 0x00, 0x7b, 0x40, 0xe8, 0xdd, 0x00, 0x00, 0x00,
    0x0f, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xf8, 0xcf, 0xd0, 0xc0,
    0x75, 0x42, 0x0e, 0x00, 0x09, 0xcd, 0x02, 0x70, 0x2e, 0x29, 0x64, 0x59,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

// Tests images through the C API: an image file and its bytes give the ids
// of the vision inputs the processor rule makes of its pixels, and a bad
// image, a plan without images and image tokens the image does not fill
// are errors naming them.
TEST(CApiGenerator, TakesImagesAsFilesOrBytes) {
  std::string planPath = ::testing::TempDir() + "/c_api_images.plan";
  std::vector<uint8_t> bytes = test::writeImagePlan();
  std::ofstream(planPath, std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  std::string pngPath = ::testing::TempDir() + "/c_api_image.png";
  std::ofstream(pngPath, std::ios::binary)
      .write(reinterpret_cast<const char *>(kPng), sizeof kPng);
  moert_plan *plan = nullptr;
  ASSERT_EQ(moert_plan_load(planPath.c_str(), &plan), MOERT_OK)
      << moert_last_error();
  moert_generator *generator = nullptr;
  ASSERT_EQ(moert_generator_create(plan, nullptr, &generator), MOERT_OK)
      << moert_last_error();
  const int64_t image = test::kMultimodalImageToken;
  const int64_t prompt[] = {1, image, image, 2};
  moert_generate_options options = moert_generate_options_default();
  options.max_new_tokens = 3;
  int64_t fromBytes[3], fromFile[3], fromPixels[3];
  size_t count = 0;
  moert_image encoded = {nullptr, kPng, sizeof kPng};
  moert_status status = moert_generator_generate_images(
      generator, prompt, 4, &encoded, 1, &options, fromBytes, 3, &count);
  if (status != MOERT_OK &&
      std::string(moert_last_error()).find("without libpng") !=
          std::string::npos) {
    moert_generator_free(generator);
    moert_plan_free(plan);
    GTEST_SKIP() << moert_last_error();
  }
  ASSERT_EQ(status, MOERT_OK) << moert_last_error();
  ASSERT_EQ(count, 3u);
  moert_image file = {pngPath.c_str(), nullptr, 0};
  ASSERT_EQ(moert_generator_generate_images(generator, prompt, 4, &file, 1,
                                            &options, fromFile, 3, &count),
            MOERT_OK)
      << moert_last_error();
  // The rule by hand: v / 255, then (x - 0.5) / std per channel; each pixel
  // is a patch, grid 1 x 1 x 2.
  const uint8_t rgb[] = {255, 0, 128, 10, 200, 30};
  const float stds[] = {0.5f, 0.25f, 0.5f};
  float pixels[6];
  for (int i = 0; i < 6; ++i)
    pixels[i] = (static_cast<float>(rgb[i] * (1.0 / 255)) - 0.5f) / stds[i % 3];
  const int64_t grid[] = {1, 1, 2}, pixelShape[] = {2, 3}, gridShape[] = {1, 3};
  moert_vision_input vision[] = {
      {"pixels", MOERT_DTYPE_F32, pixelShape, 2, pixels, sizeof pixels},
      {"grid", MOERT_DTYPE_I64, gridShape, 2, grid, sizeof grid}};
  ASSERT_EQ(moert_generator_generate_vision(generator, prompt, 4, vision, 2,
                                            &options, fromPixels, 3, &count),
            MOERT_OK)
      << moert_last_error();
  EXPECT_EQ(std::vector<int64_t>(fromBytes, fromBytes + 3),
            std::vector<int64_t>(fromPixels, fromPixels + 3));
  EXPECT_EQ(std::vector<int64_t>(fromFile, fromFile + 3),
            std::vector<int64_t>(fromPixels, fromPixels + 3));

  int64_t tokens[3];
  // Truncated bytes, a missing file, mixed paths and bytes.
  moert_image truncated = {nullptr, kPng, 40};
  EXPECT_EQ(moert_generator_generate_images(generator, prompt, 4, &truncated, 1,
                                            &options, tokens, 3, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("image 0: not a valid PNG image"));
  moert_image missing = {"/nonexistent/x.png", nullptr, 0};
  EXPECT_EQ(moert_generator_generate_images(generator, prompt, 4, &missing, 1,
                                            &options, tokens, 3, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(),
              HasSubstr("/nonexistent/x.png: cannot open the image file"));
  moert_image mixed[] = {file, encoded};
  EXPECT_EQ(moert_generator_generate_images(generator, prompt, 4, mixed, 2,
                                            &options, tokens, 3, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("every image as a path"));
  // Three image tokens for an image of two patches.
  const int64_t three[] = {1, image, image, image};
  EXPECT_EQ(moert_generator_generate_images(generator, three, 4, &encoded, 1,
                                            &options, tokens, 3, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(),
              HasSubstr("need one more image than the 1 given"));
  EXPECT_EQ(moert_generator_generate_images(generator, prompt, 4, nullptr, 1,
                                            &options, tokens, 3, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("images is null"));
  moert_generator_free(generator);
  moert_plan_free(plan);

  // A plan without an image processor, and one that is not multimodal.
  std::vector<uint8_t> plain = test::writeMultimodalPlan();
  std::ofstream(planPath, std::ios::binary)
      .write(reinterpret_cast<const char *>(plain.data()),
             static_cast<std::streamsize>(plain.size()));
  ASSERT_EQ(moert_plan_load(planPath.c_str(), &plan), MOERT_OK);
  ASSERT_EQ(moert_generator_create(plan, nullptr, &generator), MOERT_OK);
  EXPECT_EQ(moert_generator_generate_images(generator, prompt, 4, &encoded, 1,
                                            &options, tokens, 3, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("the plan has no image processor"));
  moert_generator_free(generator);
  moert_plan_free(plan);
  ASSERT_EQ(moert_plan_load(writeGenerationPlan().c_str(), &plan), MOERT_OK);
  ASSERT_EQ(moert_generator_create(plan, nullptr, &generator), MOERT_OK);
  const int64_t text[] = {1, 2};
  EXPECT_EQ(moert_generator_generate_images(generator, text, 2, &encoded, 1,
                                            &options, tokens, 3, &count),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("images need a multimodal plan"));
  moert_generator_free(generator);
  moert_plan_free(plan);
}

TEST(CApiBatch, SequencesShareStepsAndDrawTheirOwnIds) {
  moert_plan *plan = nullptr;
  ASSERT_EQ(
      moert_plan_load(writeGenerationPlan(/*batchable=*/true).c_str(), &plan),
      MOERT_OK)
      << moert_last_error();
  moert_batch *batch = nullptr;
  ASSERT_EQ(moert_batch_create(plan, nullptr, 3, &batch), MOERT_OK)
      << moert_last_error();
  EXPECT_STREQ(moert_batch_blocker(batch), "");
  const std::vector<std::vector<int64_t>> prompts = {{1, 3}, {4}, {2, 2, 0}};
  std::map<int64_t, std::vector<int64_t>> want, got;
  moert_generate_options options = moert_generate_options_default();
  options.max_new_tokens = 4;
  for (const std::vector<int64_t> &prompt : prompts) {
    int64_t id = 0;
    ASSERT_EQ(
        moert_batch_add(batch, prompt.data(), prompt.size(), &options, &id),
        MOERT_OK)
        << moert_last_error();
    std::vector<int64_t> seen = prompt;
    for (int i = 0; i < 4; ++i) {
      want[id].push_back(test::argmax(test::attentionLogits(seen)));
      seen.push_back(want[id].back());
    }
  }
  int32_t slots = 0, inUse = 0, waiting = 0;
  ASSERT_EQ(moert_batch_counts(batch, &slots, &inUse, &waiting), MOERT_OK);
  EXPECT_EQ(slots, 3);
  EXPECT_EQ(waiting, 3);
  int steps = 0;
  size_t ended = 0;
  for (;; ++steps) {
    const moert_batch_event *events = nullptr;
    size_t count = 0;
    ASSERT_EQ(moert_batch_step(batch, &events, &count), MOERT_OK)
        << moert_last_error();
    if (count == 0)
      break;
    for (size_t i = 0; i < count; ++i) {
      got[events[i].sequence].push_back(events[i].token);
      ended += events[i].finish == MOERT_FINISH_LENGTH;
    }
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(ended, 3u);
  // Three sequences of 4 ids in 4 steps: every step ran all three.
  EXPECT_EQ(steps, 4);
  int found = -1;
  ASSERT_EQ(moert_batch_cancel(batch, 1, &found), MOERT_OK);
  EXPECT_EQ(found, 0);
  size_t layers = 99;
  ASSERT_EQ(moert_batch_expert_selections(batch, 0, nullptr, nullptr, &layers),
            MOERT_OK);
  EXPECT_EQ(layers, 0u);
  const uint64_t *counts = nullptr;
  EXPECT_EQ(moert_batch_expert_selections(batch, 0, &counts, nullptr, nullptr),
            MOERT_ERROR_INVALID_ARGUMENT);
  const int64_t outside[] = {1, 9};
  int64_t id = 0;
  EXPECT_EQ(moert_batch_add(batch, outside, 2, &options, &id),
            MOERT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(moert_last_error(), HasSubstr("outside the vocabulary"));
  moert_batch_free(batch);
  moert_plan_free(plan);
}

} // namespace
} // namespace moert::testing
