//===- kv_cache_in_place_test.cpp - KV caches written in place
//---------------===//
//
// A tiny attention "model" as a generation plan: the token's embedding is
// the query, the embeddings of every token so far are the keys and values
// (the cache), and the logits are attention's output @ W. Its decode
// schedule has the exported form, Concat(past, new) read by fused attention
// and a Shape, so the Generator writes the cache in place; the tests
// compare every step's logits with the same arithmetic in double, with the
// cache written in place and copied, with and without a prefill schedule,
// and check what keeps a cache from being written in place.
//
//===----------------------------------------------------------------------===//

#include "exec/kv_cache_in_place.h"
#include "format/plan_writer.h"
#include "generation_model.h"
#include "loader/plan_impl.h"
#include "moert/generator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>

namespace moert {
namespace {

using ::testing::HasSubstr;
using namespace ::moert::test;

std::unique_ptr<Plan> loadModel(const AttentionPlanOptions &options) {
  std::vector<uint8_t> bytes = writeAttentionGenerationPlan(options);
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? std::move(*plan) : nullptr;
}

void expectLogits(const std::vector<float> &got,
                  const std::vector<int64_t> &tokens) {
  std::vector<float> want = attentionLogits(tokens);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0f, std::fabs(want[i])))
        << "logit " << i << " after " << tokens.size() << " tokens";
}

/// Prefills {1, 3} and decodes up to max_seq, checking every step; returns
/// the last logits.
std::vector<float> runToMaxSeq(Generator &generator) {
  std::vector<int64_t> tokens = {1, 3};
  EXPECT_TRUE(generator.prefill(tokens).ok());
  expectLogits(generator.logits(), tokens);
  while (generator.length() < kMaxSeq) {
    int64_t next = (tokens.back() * 3 + 1) % kVocab;
    tokens.push_back(next);
    absl::Status status = generator.decode(next);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok())
      break;
    expectLogits(generator.logits(), tokens);
  }
  return generator.logits();
}

class CacheInPlace : public ::testing::TestWithParam<bool> {};

TEST_P(CacheInPlace, DecodesAppendingWhereTheCacheLies) {
  AttentionPlanOptions options;
  options.prefill = GetParam();
  std::unique_ptr<Plan> plan = loadModel(options);
  ASSERT_TRUE(plan);
  SessionOptions session;
  session.threads = 2;
  auto inPlace = Generator::create(*plan, session);
  ASSERT_TRUE(inPlace.ok()) << inPlace.status();
  EXPECT_EQ((*inPlace)->numCaches(), 1);
  EXPECT_EQ((*inPlace)->cachesInPlace(), 1);
  // One buffer of max_seq positions.
  EXPECT_EQ((*inPlace)->cacheBytes(), uint64_t(kMaxSeq * kDim * 4));
  std::vector<float> last = runToMaxSeq(**inPlace);
  // The cache is full: one more position is refused, and a new prompt
  // starts over in the same buffer.
  EXPECT_FALSE((*inPlace)->decode(0).ok());
  EXPECT_EQ(runToMaxSeq(**inPlace), last);

  session.kvCacheInPlace = false;
  auto copied = Generator::create(*plan, session);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ((*copied)->cachesInPlace(), 0);
  EXPECT_EQ((*copied)->cacheBytes(), uint64_t(2 * kMaxSeq * kDim * 4));
  runToMaxSeq(**copied);
}

TEST_P(CacheInPlace, GeneratesTheSameTokensAsCopying) {
  AttentionPlanOptions options;
  options.prefill = GetParam();
  std::unique_ptr<Plan> plan = loadModel(options);
  ASSERT_TRUE(plan);
  GenerateOptions generate;
  generate.maxNewTokens = 4;
  generate.sampling.temperature = 0.8;
  generate.sampling.seed = 7;
  std::vector<int64_t> ids[2];
  for (bool inPlace : {true, false}) {
    SessionOptions session;
    session.kvCacheInPlace = inPlace;
    auto generator = Generator::create(*plan, session);
    ASSERT_TRUE(generator.ok()) << generator.status();
    auto tokens = (*generator)->generate({2, 4, 0}, generate);
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    ids[inPlace] = *tokens;
  }
  EXPECT_EQ(ids[0].size(), 4u);
  EXPECT_EQ(ids[0], ids[1]);
}

INSTANTIATE_TEST_SUITE_P(Schedules, CacheInPlace, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return info.param ? "WithPrefill" : "SingleGraph";
                         });

TEST(CacheInPlace, AnyOtherReadOfThePresentKeepsTheCopy) {
  AttentionPlanOptions options;
  options.sumPresent = true;
  std::unique_ptr<Plan> plan = loadModel(options);
  ASSERT_TRUE(plan);
  const detail::ScheduleInfo &decode = plan->impl().schedules[0];
  int32_t past = -1, present = -1;
  for (uint32_t id : decode.inputs)
    if (decode.tensors[id].name == "past.0")
      past = static_cast<int32_t>(id);
  for (uint32_t id : decode.outputs)
    if (decode.tensors[id].name == "present.0")
      present = static_cast<int32_t>(id);
  ASSERT_GE(past, 0);
  ASSERT_GE(present, 0);
  EXPECT_THAT(detail::cacheInPlaceBlocker(decode, past, present, 2),
              HasSubstr("'sum' (ReduceSum) reads the present 'present.0'"));
  // Along another axis the Concat is no append to the cache.
  EXPECT_THAT(detail::cacheInPlaceBlocker(decode, past, present, 1),
              HasSubstr("not a Concat of the past"));
  // The logits are no cache at all.
  EXPECT_THAT(detail::cacheInPlaceBlocker(decode, past, decode.outputs[0], 2),
              HasSubstr("not a Concat of the past"));

  auto generator = Generator::create(*plan);
  ASSERT_TRUE(generator.ok()) << generator.status();
  EXPECT_EQ((*generator)->cachesInPlace(), 0);
  runToMaxSeq(**generator);
}

} // namespace
} // namespace moert
