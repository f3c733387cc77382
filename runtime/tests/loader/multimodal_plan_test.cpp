//===- multimodal_plan_test.cpp - Loading and running multimodal plans ----===//
//
// The tiny multimodal plan of multimodal_plans.h, written with the plan
// writer (format 1.17). The tests run the real loader and Generator: the
// features replace the image tokens' embeddings (they reach the decode's sum),
// and each malformed table is one error naming the stage, feed or field.
//
//===----------------------------------------------------------------------===//

#include "format/plan_writer.h"
#include "generation_model.h"
#include "moert/generator.h"
#include "multimodal_plans.h"
#include "plan_bytes.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <functional>

namespace moert {
namespace {

using ::testing::HasSubstr;
using namespace ::moert::test;

constexpr int64_t kImageToken = kMultimodalImageToken;

std::vector<uint8_t>
writePlan(const std::function<void(PlanWriter &)> &edit = {}) {
  return writeMultimodalPlan(edit);
}

absl::StatusOr<std::unique_ptr<Plan>> load(const std::vector<uint8_t> &bytes) {
  return Plan::loadFromMemory(bytes.data(), bytes.size());
}

/// The load error of writePlan(edit), which must be written as format
/// 1.`written` (any where it is -1), with its header rewritten to
/// 1.`older` ("" if it loads).
std::string olderVersionError(const std::function<void(PlanWriter &)> &edit,
                              int written, int older) {
  auto plan = load(testing::rewrite(
      writePlan(edit),
      [&](detail::FileHeader &header, std::vector<detail::SectionEntry> &) {
        if (written >= 0) {
          EXPECT_EQ(header.versionMinor, written);
        }
        header.versionMinor = older;
      }));
  return plan.ok() ? "" : std::string(plan.status().message());
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
  std::vector<float> first =
      decodeLogits({kEmbed[2 * kDim], kEmbed[2 * kDim + 1]}, {});
  for (int64_t v = 0; v < kVocab; ++v)
    EXPECT_NEAR((*gen)->logits()[v], first[v], 1e-6);
  ASSERT_TRUE((*gen)->decode(3).ok());
  std::vector<float> rows = {kEmbed[2], kEmbed[3], pixels[0], pixels[1],
                             pixels[2], pixels[3], kEmbed[4], kEmbed[5]};
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
  absl::Status status =
      (*gen)->prefill({kImageToken, kImageToken, kImageToken}, vision);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("need one more image than the 1 given"));
}

// Tests a plan whose embedding takes the vision stage's features, as
// onnxruntime-genai's does: written as 1.26, refused as 1.25; with an image
// the features reach the image tokens as before, and a prompt without one
// runs through the decode schedule (the embedding has no features then).
TEST(MultimodalPlan, EmbeddingTakesTheFeatures) {
  std::vector<uint8_t> bytes = writeEmbedFeaturesPlan();
  auto plan = load(bytes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), 26);
  EXPECT_TRUE((*plan)->multimodal()->textThroughDecode);
  auto gen = Generator::create(**plan, {/*threads=*/1});
  ASSERT_TRUE(gen.ok()) << gen.status();
  std::vector<float> pixels = {0.5f, -0.25f, 2.0f, 1.0f};
  std::vector<int64_t> grid = {1, 1, 2};
  VisionInputs vision = {{"pixels", {DType::F32, {2, kDim}, pixels.data(), 16}},
                         {"grid", {DType::I64, {1, 3}, grid.data(), 24}}};
  ASSERT_TRUE((*gen)->prefill({1, kImageToken, kImageToken, 2}, vision).ok());
  std::vector<float> first =
      decodeLogits({kEmbed[2 * kDim], kEmbed[2 * kDim + 1]}, {});
  for (int64_t v = 0; v < kVocab; ++v)
    EXPECT_NEAR((*gen)->logits()[v], first[v], 1e-6);
  ASSERT_TRUE((*gen)->prefill({1, 2}, {}).ok());
  ASSERT_TRUE((*gen)->decode(3).ok());
  std::vector<float> text = decodeLogits({}, {1, 2, 3});
  for (int64_t v = 0; v < kVocab; ++v)
    EXPECT_NEAR((*gen)->logits()[v], text[v], 1e-5);
  plan = load(testing::rewrite(bytes, [](detail::FileHeader &header,
                                         std::vector<detail::SectionEntry> &) {
    header.versionMinor = 25;
  }));
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("stage 'embed' reads vision output 'features', which "
                        "needs format 1.26"));
}

// Tests that a prompt of more images than the vision stage takes (one) runs
// it once per image: each image's rows reach its tokens, in order, and
// patches that are not the grids' count are an error.
TEST(MultimodalPlan, RunsImagesOneAtATime) {
  std::vector<uint8_t> bytes = writePlan();
  auto plan = load(bytes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->multimodal()->maxImages, 1);
  auto gen = Generator::create(**plan, {/*threads=*/1});
  ASSERT_TRUE(gen.ok()) << gen.status();
  // Images of 1 x 1 x 2 and 1 x 1 x 1 patches.
  std::vector<float> pixels = {0.5f, -0.25f, 2.0f, 1.0f, -3.0f, 0.75f};
  std::vector<int64_t> grids = {1, 1, 2, 1, 1, 1};
  VisionInputs vision = {{"pixels", {DType::F32, {3, kDim}, pixels.data(), 24}},
                         {"grid", {DType::I64, {2, 3}, grids.data(), 48}}};
  std::vector<int64_t> prompt = {1, kImageToken, kImageToken, 2, kImageToken};
  ASSERT_TRUE((*gen)->prefill(prompt, vision).ok());
  ASSERT_TRUE((*gen)->decode(3).ok());
  std::vector<float> rows = {kEmbed[2], kEmbed[3], pixels[0], pixels[1],
                             pixels[2], pixels[3], kEmbed[4], kEmbed[5],
                             pixels[4], pixels[5]};
  std::vector<float> want = decodeLogits(rows, {3});
  for (int64_t v = 0; v < kVocab; ++v)
    EXPECT_NEAR((*gen)->logits()[v], want[v], 1e-5);
  vision[0].second.shape[0] = 2;
  vision[0].second.bytes = 16;
  absl::Status status = (*gen)->prefill(prompt, vision);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("vision input 'pixels' has 2 patches but the grids in "
                        "'grid' make 3"));
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
  EXPECT_THAT(
      loadError([](PlanWriter &w) { w.multimodal().image_token_id = kVocab; }),
      HasSubstr("image_token_id 5 is not in the vocabulary [0, 5)"));
  EXPECT_THAT(
      loadError([](PlanWriter &w) { w.multimodal().position_rows.pop_back(); }),
      HasSubstr("the decode schedule's positions 'position_ids' have "
                "4 rows but the rule 3"));
  EXPECT_THAT(loadError([](PlanWriter &w) { w.multimodal().logits = "x"; }),
              HasSubstr("logits 'x' are not an f32 [1, n, 5] output of "
                        "stage 3"));
  EXPECT_THAT(
      loadError([](PlanWriter &w) { w.multimodal().image_features_stage = 1; }),
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
  EXPECT_THAT(
      loadError([](PlanWriter &w) { w.multimodal().decode_feeds.clear(); }),
      HasSubstr("graph input 'mm_token_type_ids' is neither the "
                "tokens"));
  EXPECT_THAT(
      loadError([](PlanWriter &w) { w.multimodal().spatial_merge_size = 0; }),
      HasSubstr("spatial_merge_size 0 is not in [1, 1024]"));
  EXPECT_THAT(
      loadError([](PlanWriter &w) { w.multimodal().image_grid.clear(); }),
      HasSubstr("no image_grid input, which the position rows read"));
  // A plan of one device: one schedule per stage (format 1.27 counts the
  // Prefill stage's per device).
  for (int stage : {0, 2})
    EXPECT_THAT(
        loadError([&](PlanWriter &w) {
          w.multimodal().stages[stage]->other_device_schedules.push_back(
              std::make_unique<fb::ScheduleT>());
        }),
        HasSubstr(stage ? "stage 2 'language_model': 2 schedules; the "
                          "Prefill stage has one per device (1)"
                        : "2 schedules; a stage other than the "
                          "Prefill has one (1)"));
}

// Tests that a file older than 1.17 with the table is refused.
TEST(MultimodalPlan, NeedsItsVersion) {
  EXPECT_THAT(olderVersionError({}, -1, 16),
              HasSubstr("multimodal: the table needs format 1.17, but the "
                        "file is version 1.16"));
  // Index positions (no rows) and no grid came with 1.21.
  EXPECT_THAT(olderVersionError(
                  [](PlanWriter &w) {
                    w.multimodal().position_rows.clear();
                    w.multimodal().image_grid.clear();
                  },
                  21, 19),
              HasSubstr("index positions or no image grid need format 1.21, "
                        "but the file is version 1.19"));
}

// Tests the grid rule and image processor tables (format 1.22): a plan
// with them is written as 1.22 and refused as 1.21, and malformed ones are
// refused naming the field.
TEST(MultimodalPlan, ChecksGridRuleAndImageProcessor) {
  auto processor = [](PlanWriter &w) {
    auto proc = std::make_unique<fb::ImageProcessorT>();
    proc->pixel_input = "pixels";
    proc->patch_size = 1;
    proc->temporal_patch_size = 1;
    proc->do_normalize = true;
    proc->image_mean = {0.5, 0.5, 0.5};
    proc->image_std = {0.25, 0.25, 0.25};
    w.multimodal().image_processor = std::move(proc);
  };
  EXPECT_THAT(olderVersionError(processor, 22, 21),
              HasSubstr("grid_rule and image_processor need format 1.22, but "
                        "the file is version 1.21"));
  // The patches are f32 [p, 2]; 1 x 1 RGB patches are 3 wide.
  EXPECT_THAT(loadError(processor),
              HasSubstr("image_processor.pixel_input 'pixels' is f32 "));
  EXPECT_THAT(loadError(processor),
              HasSubstr("the processor gives f32 [p, 3]"));
  EXPECT_THAT(loadError([&](PlanWriter &w) {
                processor(w);
                w.multimodal().image_processor->patch_size = 0;
              }),
              HasSubstr("image_processor: patch_size 0 is not in [1, 1024]"));
  EXPECT_THAT(loadError([&](PlanWriter &w) {
                processor(w);
                w.multimodal().image_processor->image_std[1] = 0;
              }),
              HasSubstr("image_mean and image_std need 3 finite values each, "
                        "std nonzero"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                auto rule = std::make_unique<fb::GridRuleT>();
                rule->table_side = 70000;
                w.multimodal().grid_rule = std::move(rule);
              }),
              HasSubstr("grid_rule.table_side 70000 is not in [0, 65536]"));
  // A grid rule's feed needs the rule, and the type the rule writes.
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().stages[0]->feeds[0]->kind =
                    fb::FeedKind::GridPatchPositions;
              }),
              HasSubstr("the plan has no grid_rule"));
  EXPECT_THAT(loadError([](PlanWriter &w) {
                w.multimodal().grid_rule = std::make_unique<fb::GridRuleT>();
                w.multimodal().stages[0]->feeds[0]->kind =
                    fb::FeedKind::GridPatchPositions;
              }),
              HasSubstr("the feed gives i64 [p, 2] (patch positions)"));
  // GLM-4V's sizing is written as 1.24 and refused as 1.23; a sizing the
  // format does not name is refused.
  auto glm = [&](PlanWriter &w) {
    processor(w);
    w.multimodal().image_processor->resize = fb::ImageResize::Glm4v;
  };
  EXPECT_THAT(olderVersionError(glm, 24, 23),
              HasSubstr("image_processor: resize Glm4v needs format 1.24, but "
                        "the file is version 1.23"));
  EXPECT_THAT(loadError([&](PlanWriter &w) {
                processor(w);
                w.multimodal().image_processor->resize =
                    static_cast<fb::ImageResize>(7);
              }),
              HasSubstr("image_processor: resize 7 is no ImageResize"));
  // Llama 4's tiles are written as 1.25 and refused as 1.24; they need a
  // tile count and f32 [tiles, 3, S, S] pixels.
  auto tiles = [&](PlanWriter &w) {
    processor(w);
    w.multimodal().image_processor->resize = fb::ImageResize::Llama4Tiles;
    w.multimodal().image_processor->max_tiles = 4;
    w.multimodal().image_processor->do_resize = true;
  };
  EXPECT_THAT(olderVersionError(tiles, 25, 24),
              HasSubstr("image_processor: resize Llama4Tiles needs format "
                        "1.25, but the file is version 1.24"));
  EXPECT_THAT(loadError([&](PlanWriter &w) {
                tiles(w);
                w.multimodal().image_processor->max_tiles = 0;
              }),
              HasSubstr("image_processor: max_tiles 0 is not in [1, 1024]"));
  EXPECT_THAT(loadError([&](PlanWriter &w) {
                tiles(w);
                w.multimodal().image_processor->do_resize = false;
              }),
              HasSubstr("image_processor: resize Llama4Tiles needs do_resize"));
  EXPECT_THAT(loadError(tiles),
              HasSubstr("image_processor.pixel_input 'pixels' is f32 [<=8, 2]; "
                        "the processor gives f32 [tiles, 3, 1, 1]"));
}

} // namespace
} // namespace moert
