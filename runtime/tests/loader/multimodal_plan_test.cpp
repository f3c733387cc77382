//===- multimodal_plan_test.cpp - Loading and running multimodal plans ----===//
//
// A tiny multimodal plan written with the plan writer (format 1.17): a
// vision stage that passes its patches through as the image features, an
// embedding, a "language model" whose cache is its embeddings and whose
// hidden state is each token's embedding, a head, and the decode schedule
// of generation_model.h's arithmetic (logits = sum of the cache @ W). The
// tests run the real loader and Generator: the features replace the image
// tokens' embeddings (they reach the decode's sum), and each malformed
// table is one error naming the stage, feed or field.
//
//===----------------------------------------------------------------------===//

#include "format/plan_writer.h"
#include "generation_model.h"
#include "moert/generator.h"
#include "plan_bytes.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <functional>

namespace moert {
namespace {

using ::testing::HasSubstr;
using namespace ::moert::test;

constexpr int64_t kImageToken = 4;


std::unique_ptr<fb::FeedT> feed(std::string input, fb::FeedKind kind,
                                int stage = -1, std::string output = "") {
  auto entry = std::make_unique<fb::FeedT>();
  entry->input = std::move(input);
  entry->kind = kind;
  entry->stage = stage;
  entry->output = std::move(output);
  return entry;
}

/// The plan; `edit` changes the tables before they are written.
std::vector<uint8_t> writePlan(const std::function<void(PlanWriter &)> &edit =
                                   {}) {
  using fb::OpKind;
  PlanWriter writer({Backend::Cpu, 1}, "multimodal_plan_test");
  int pastSymbol = writer.addSymbol("past", 0, kMaxSeq - 1);
  const int64_t axis1[] = {1}, axis2[] = {2};
  fb::AxisAttrsT axis0;
  fb::AxisAttrsT concatAxis;
  concatAxis.axis = 2;
  fb::ReduceAttrsT reduce;
  reduce.keepdims = false;

  // The decode schedule.
  ScheduleBuilder &d = writer.schedule(0);
  int32_t ids = d.addTensor("input_ids", DType::I64, {1, 1});
  int32_t positions = d.addTensor("position_ids", DType::I64, {4, 1, 1});
  int32_t past = d.addTensor("past.0", DType::F32,
                             {1, 1, PlanDim::symbol(pastSymbol), kDim});
  int32_t types = d.addTensor("mm_token_type_ids", DType::I64, {1, 1});
  for (int32_t input : {ids, positions, past, types})
    d.addInput(input);
  int32_t embed =
      d.addWeight("embed", DType::F32, {kVocab, kDim}, kEmbed.data(), 40);
  int32_t proj =
      d.addWeight("proj", DType::F32, {kDim, kVocab}, kProj.data(), 40);
  int32_t unsqueezeAxes = d.addWeight("axes1", DType::I64, {1}, axis1, 8);
  int32_t sumAxes = d.addWeight("axes2", DType::I64, {1}, axis2, 8);
  int32_t rows = d.addTensor("rows", DType::F32, {1, 1, kDim});
  int32_t rows4 = d.addTensor("rows4", DType::F32, {1, 1, 1, kDim});
  int32_t present = d.addTensor("present.0", DType::F32,
                                {1, 1, PlanDim::dynamic(kMaxSeq), kDim});
  int32_t sum = d.addTensor("sum", DType::F32, {1, 1, kDim});
  int32_t logits = d.addTensor("logits", DType::F32, {1, 1, kVocab});
  d.addStep(OpKind::Gather, "embed", {embed, ids}, {rows}, attrs(axis0));
  d.addStep(OpKind::Unsqueeze, "rows4", {rows, unsqueezeAxes}, {rows4});
  d.addStep(OpKind::Concat, "cat", {past, rows4}, {present},
            attrs(concatAxis));
  d.addStep(OpKind::ReduceSum, "sum", {present, sumAxes}, {sum},
            attrs(reduce));
  d.addStep(OpKind::MatMul, "proj", {sum, proj}, {logits});
  d.addOutput(logits);
  d.addOutput(present);
  fb::GenerationT &gen = writer.generation();
  gen.max_seq = kMaxSeq;
  gen.input_ids = "input_ids";
  gen.position_ids = "position_ids";
  gen.logits = "logits";
  auto pair = std::make_unique<fb::CachePairT>();
  pair->input = "past.0";
  pair->output = "present.0";
  pair->prefill_output = "cache";
  pair->axis = 2;
  gen.cache.push_back(std::move(pair));

  // Vision: the patches [p, kDim] are the features (merge 1).
  ScheduleBuilder &v = writer.addStage("image_encoder", fb::StageRole::Vision);
  PlanDim p = PlanDim::symbol(writer.addSymbol("image_encoder.p", 1, 8));
  int32_t pixels = v.addTensor("pixels", DType::F32, {p, kDim});
  int32_t grid = v.addTensor("grid", DType::I64, {1, 3});
  v.addInput(pixels);
  v.addInput(grid);
  int32_t features = v.addTensor("features", DType::F32, {p, kDim});
  v.addStep(OpKind::Identity, "features", {pixels}, {features});
  v.addOutput(features);
  // Embed.
  ScheduleBuilder &e = writer.addStage("embed", fb::StageRole::Embed);
  PlanDim n = PlanDim::symbol(writer.addSymbol("embed.n", 1, kMaxSeq - 1));
  int32_t eIds = e.addTensor("input_ids", DType::I64, {1, n});
  e.addInput(eIds);
  int32_t eTable =
      e.addWeight("embed", DType::F32, {kVocab, kDim}, kEmbed.data(), 40);
  int32_t eOut = e.addTensor("out", DType::F32, {1, n, kDim});
  e.addStep(OpKind::Gather, "embed", {eTable, eIds}, {eOut}, attrs(axis0));
  e.addOutput(eOut);
  // The language model: cache = the embeddings; hidden = the embeddings.
  ScheduleBuilder &l =
      writer.addStage("language_model", fb::StageRole::Prefill);
  PlanDim m =
      PlanDim::symbol(writer.addSymbol("language_model.n", 1, kMaxSeq - 1));
  int32_t lEmbeds = l.addTensor("inputs_embeds", DType::F32, {1, m, kDim});
  int32_t lPositions = l.addTensor("position_ids", DType::I64, {4, 1, m});
  l.addInput(lEmbeds);
  l.addInput(lPositions);
  int32_t lAxes = l.addWeight("axes1", DType::I64, {1}, axis1, 8);
  int32_t cache = l.addTensor("cache", DType::F32, {1, 1, m, kDim});
  int32_t hidden = l.addTensor("hidden", DType::F32, {1, m, kDim});
  l.addStep(OpKind::Unsqueeze, "cache", {lEmbeds, lAxes}, {cache});
  l.addStep(OpKind::Identity, "hidden", {lEmbeds}, {hidden});
  l.addOutput(hidden);
  l.addOutput(cache);
  // The head on the last position.
  ScheduleBuilder &h = writer.addStage("lm_head", fb::StageRole::Head);
  PlanDim one = PlanDim::symbol(writer.addSymbol("lm_head.n", 1, 1));
  int32_t hIn = h.addTensor("x", DType::F32, {1, one, kDim});
  h.addInput(hIn);
  int32_t hProj =
      h.addWeight("proj", DType::F32, {kDim, kVocab}, kProj.data(), 40);
  int32_t hOut = h.addTensor("logits", DType::F32, {1, one, kVocab});
  h.addStep(OpKind::MatMul, "proj", {hIn, hProj}, {hOut});
  h.addOutput(hOut);

  fb::MultimodalT &mm = writer.multimodal();
  mm.stages[0]->feeds.push_back(feed("pixels", fb::FeedKind::Given));
  mm.stages[0]->feeds.push_back(feed("grid", fb::FeedKind::Given));
  mm.stages[1]->feeds.push_back(feed("input_ids", fb::FeedKind::TokenIds));
  mm.stages[2]->feeds.push_back(
      feed("inputs_embeds", fb::FeedKind::MergedEmbeddings, 1, "out"));
  mm.stages[2]->feeds.push_back(
      feed("position_ids", fb::FeedKind::Positions));
  mm.stages[3]->feeds.push_back(
      feed("x", fb::FeedKind::LastPosition, 2, "hidden"));
  mm.image_token_id = kImageToken;
  mm.image_features_stage = 0;
  mm.image_features = "features";
  mm.logits_stage = 3;
  mm.logits = "logits";
  mm.position_rows = {fb::PositionRow::Sequence, fb::PositionRow::Time,
                      fb::PositionRow::Height, fb::PositionRow::Width};
  mm.spatial_merge_size = 1;
  mm.image_grid = "grid";
  mm.max_images = 1;
  mm.decode_feeds.push_back(
      feed("mm_token_type_ids", fb::FeedKind::TokenTypes));
  if (edit)
    edit(writer);
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

absl::StatusOr<std::unique_ptr<Plan>> load(const std::vector<uint8_t> &bytes) {
  return Plan::loadFromMemory(bytes.data(), bytes.size());
}

/// What the decode computes after a prompt whose rows are `rows` and the
/// new tokens `tokens`: (sum of the rows and the new embeddings) @ W.
std::vector<float> decodeLogits(std::vector<float> rows,
                                const std::vector<int64_t> &tokens) {
  for (int64_t t : tokens)
    rows.insert(rows.end(), kEmbed.begin() + t * kDim,
                kEmbed.begin() + (t + 1) * kDim);
  std::vector<float> out(kVocab, 0.0f);
  for (size_t r = 0; r < rows.size() / kDim; ++r)
    for (int64_t v = 0; v < kVocab; ++v)
      for (int64_t k = 0; k < kDim; ++k)
        out[v] += rows[r * kDim + k] * kProj[k * kVocab + v];
  return out;
}

// Tests that a valid plan loads with its stages and that the Generator
// merges the image features into the image tokens' rows.
TEST(MultimodalPlan, LoadsAndGenerates) {
  std::vector<uint8_t> bytes = writePlan();
  auto plan = load(bytes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), 17);
  const MultimodalDesc *mm = (*plan)->multimodal();
  ASSERT_NE(mm, nullptr);
  ASSERT_EQ(mm->stages.size(), 4u);
  EXPECT_EQ(mm->prefillStage, 2);
  EXPECT_FALSE(mm->textThroughDecode);
  EXPECT_EQ(mm->givenInputs, (std::vector<std::string>{"pixels", "grid"}));
  auto gen = Generator::create(**plan, {/*threads=*/1});
  ASSERT_TRUE(gen.ok()) << gen.status();
  // Prompt 1, <image> <image>, 2 with an image of 1 x 1 x 2 patches.
  std::vector<float> pixels = {0.5f, -0.25f, 2.0f, 1.0f};
  std::vector<int64_t> grid = {1, 1, 2};
  VisionInputs vision = {{"pixels", {DType::F32, {2, kDim}, pixels.data(), 16}},
                         {"grid", {DType::I64, {1, 3}, grid.data(), 24}}};
  std::vector<int64_t> prompt = {1, kImageToken, kImageToken, 2};
  ASSERT_TRUE((*gen)->prefill(prompt, vision).ok());
  std::vector<float> first = decodeLogits(
      {kEmbed[2 * kDim], kEmbed[2 * kDim + 1]}, {});
  for (int64_t v = 0; v < kVocab; ++v)
    EXPECT_NEAR((*gen)->logits()[v], first[v], 1e-6);
  ASSERT_TRUE((*gen)->decode(3).ok());
  std::vector<float> rows = {kEmbed[2],  kEmbed[3],  pixels[0], pixels[1],
                             pixels[2],  pixels[3],  kEmbed[4], kEmbed[5]};
  std::vector<float> next = decodeLogits(rows, {3});
  for (int64_t v = 0; v < kVocab; ++v)
    EXPECT_NEAR((*gen)->logits()[v], next[v], 1e-5);
  // Without images the vision stage does not run.
  ASSERT_TRUE((*gen)->prefill({1, 2}, {}).ok());
  ASSERT_TRUE((*gen)->decode(3).ok());
  std::vector<float> text = decodeLogits({}, {1, 2, 3});
  for (int64_t v = 0; v < kVocab; ++v)
    EXPECT_NEAR((*gen)->logits()[v], text[v], 1e-5);
  // Image tokens the grid does not cover.
  absl::Status status = (*gen)->prefill({kImageToken, kImageToken,
                                         kImageToken},
                                        vision);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("need one more image than the 1 given"));
}

/// The load error of the plan with `edit` applied.
std::string loadError(const std::function<void(PlanWriter &)> &edit) {
  auto plan = load(writePlan(edit));
  return plan.ok() ? "loaded" : std::string(plan.status().message());
}

// Tests that each malformed table is refused naming what is wrong.
TEST(MultimodalPlan, RefusesMalformedTables) {
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().stages[2]->feeds[0]->stage = 3;
              }),
              HasSubstr("multimodal: stage 2 'language_model': feed 0 "
                        "'inputs_embeds' (MergedEmbeddings): reads stage 3, "
                        "which is not an earlier stage"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().stages[2]->feeds.pop_back();
              }),
              HasSubstr("stage 2 'language_model': graph input "
                        "'position_ids' has no feed"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().stages[1]->feeds[0]->kind = fb::FeedKind::Given;
              }),
              HasSubstr("only a Vision stage takes given inputs"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().stages[1]->feeds[0]->kind =
                    fb::FeedKind::ImageTokenMask;
              }),
              HasSubstr("the input is i64 [1, <=7]; the feed gives bool "
                        "[1, n]"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().image_token_id = kVocab;
              }),
              HasSubstr("image_token_id 5 is not in the vocabulary [0, 5)"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().position_rows.pop_back();
              }),
              HasSubstr("the decode schedule's positions 'position_ids' have "
                        "4 rows but the rule 3"));
  EXPECT_THAT(loadError([](PlanWriter &w) { w.multimodal().logits = "x"; }),
              HasSubstr("logits 'x' are not an f32 [1, n, 5] output of "
                        "stage 3"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().image_features_stage = 1;
              }),
              HasSubstr("image_features_stage 1 is not a Vision stage"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().stages[3]->role = fb::StageRole::Vision;
              }),
              HasSubstr("a Vision stage after a Prefill one"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.generation().cache[0]->prefill_output = "nope";
              }),
              HasSubstr("generation: stage 2 'language_model': cache pair 0 "
                        "'nope' is not a graph output of the schedule"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().decode_feeds[0]->kind = fb::FeedKind::Positions;
              }),
              HasSubstr("a decode feed gives the new token's ids, types or "
                        "image mask only"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().decode_feeds.clear();
              }),
              HasSubstr("graph input 'mm_token_type_ids' is neither the "
                        "tokens"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().spatial_merge_size = 0;
              }),
              HasSubstr("spatial_merge_size 0 is not in [1, 1024]"));
}

// Tests that a file older than 1.17 with the table is refused.
TEST(MultimodalPlan, NeedsItsVersion) {
  std::vector<uint8_t> bytes = testing::rewrite(
      writePlan(),
      [](detail::FileHeader &header, std::vector<detail::SectionEntry> &) {
        header.versionMinor = 16;
      });
  auto plan = load(bytes);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("multimodal: the table needs format 1.17, but the "
                        "file is version 1.16"));
}

} // namespace
} // namespace moert
