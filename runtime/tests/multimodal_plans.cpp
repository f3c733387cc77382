//===- multimodal_plans.cpp - The multimodal tests' tiny plan -------------===//

#include "multimodal_plans.h"

#include "generation_model.h"

#include "gtest/gtest.h"

namespace moert::test {

static std::unique_ptr<fb::FeedT> feed(std::string input, fb::FeedKind kind,
                                       int stage = -1,
                                       std::string output = "") {
  auto entry = std::make_unique<fb::FeedT>();
  entry->input = std::move(input);
  entry->kind = kind;
  entry->stage = stage;
  entry->output = std::move(output);
  return entry;
}

namespace {

/// The plan of writeMultimodalPlan, or with `images` of writeImagePlan, or
/// with `embedFeatures` of writeEmbedFeaturesPlan.
std::vector<uint8_t> writePlan(const std::function<void(PlanWriter &)> &edit,
                               bool images, bool embedFeatures = false) {
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
  d.addStep(OpKind::Concat, "cat", {past, rows4}, {present}, attrs(concatAxis));
  d.addStep(OpKind::ReduceSum, "sum", {present, sumAxes}, {sum}, attrs(reduce));
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

  // Vision: the patches [p, kDim] are the features (merge 1); with images,
  // the RGB patches [p, 3] times kPixelProj.
  ScheduleBuilder &v = writer.addStage("image_encoder", fb::StageRole::Vision);
  PlanDim p = PlanDim::symbol(writer.addSymbol("image_encoder.p", 1, 8));
  int32_t pixels = v.addTensor("pixels", DType::F32, {p, images ? 3 : kDim});
  int32_t grid = v.addTensor("grid", DType::I64, {1, 3});
  v.addInput(pixels);
  v.addInput(grid);
  int32_t features = v.addTensor("features", DType::F32, {p, kDim});
  if (images) {
    int32_t w = v.addWeight("pixel_proj", DType::F32, {3, kDim},
                            kPixelProj.data(), 4 * kPixelProj.size());
    v.addStep(OpKind::MatMul, "features", {pixels, w}, {features});
  } else {
    v.addStep(OpKind::Identity, "features", {pixels}, {features});
  }
  v.addOutput(features);
  // Embed.
  ScheduleBuilder &e = writer.addStage("embed", fb::StageRole::Embed);
  PlanDim n = PlanDim::symbol(writer.addSymbol("embed.n", 1, kMaxSeq - 1));
  int32_t eIds = e.addTensor("input_ids", DType::I64, {1, n});
  e.addInput(eIds);
  if (embedFeatures) {
    PlanDim f = PlanDim::symbol(writer.addSymbol("embed.m", 1, 8));
    e.addInput(e.addTensor("image_features", DType::F32, {f, kDim}));
  }
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
  if (embedFeatures)
    mm.stages[1]->feeds.push_back(
        feed("image_features", fb::FeedKind::StageOutput, 0, "features"));
  mm.stages[2]->feeds.push_back(
      feed("inputs_embeds", fb::FeedKind::MergedEmbeddings, 1, "out"));
  mm.stages[2]->feeds.push_back(feed("position_ids", fb::FeedKind::Positions));
  mm.stages[3]->feeds.push_back(
      feed("x", fb::FeedKind::LastPosition, 2, "hidden"));
  mm.image_token_id = kMultimodalImageToken;
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
  if (images) {
    // Qwen2-VL's processor with 1 x 1 patches: a pixel is a patch.
    mm.image_processor = std::make_unique<fb::ImageProcessorT>();
    fb::ImageProcessorT &proc = *mm.image_processor;
    proc.pixel_input = "pixels";
    proc.patch_size = 1;
    proc.temporal_patch_size = 1;
    proc.do_rescale = true;
    proc.rescale_factor = 1.0 / 255;
    proc.do_normalize = true;
    proc.image_mean = {0.5, 0.5, 0.5};
    proc.image_std = {0.5, 0.25, 0.5};
  }
  if (edit)
    edit(writer);
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

} // namespace

std::vector<uint8_t>
writeMultimodalPlan(const std::function<void(PlanWriter &)> &edit) {
  return writePlan(edit, /*images=*/false);
}

std::vector<uint8_t> writeImagePlan() { return writePlan({}, true); }

std::vector<uint8_t> writeEmbedFeaturesPlan() {
  return writePlan({}, false, true);
}

} // namespace moert::test
