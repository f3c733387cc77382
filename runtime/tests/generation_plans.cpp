//===- generation_plans.cpp - Generation plans the runtime tests write ----===//

#include "format/plan_writer.h"
#include "generation_model.h"

#include "gtest/gtest.h"

#include <cmath>

namespace moert::test {

namespace {

/// Adds to `s` the steps from the ids and the cache (`past`: -1 for none)
/// to the logits over `n` tokens; returns {present, logits}.
std::pair<int32_t, int32_t>
addAttentionModel(ScheduleBuilder &s, PlanDim n, int32_t ids, int32_t past,
                  int32_t embed, int32_t proj,
                  const AttentionPlanOptions &options) {
  using fb::OpKind;
  const int64_t axis1[] = {1}, shape3[] = {1, -1, kDim};
  int32_t axes = s.addWeight("axes1", DType::I64, {1}, axis1, 8);
  int32_t shape = s.addWeight("shape3", DType::I64, {3}, shape3, 24);
  int32_t rows = s.addTensor("rows", DType::F32, {1, n, kDim});
  int32_t rows4 = s.addTensor("rows4", DType::F32, {1, 1, n, kDim});
  fb::AxisAttrsT axis0;
  s.addStep(OpKind::Gather, "embed", {embed, ids}, {rows}, attrs(axis0));
  s.addStep(OpKind::Unsqueeze, "rows4", {rows, axes}, {rows4});
  int32_t present = rows4;
  if (past >= 0) {
    present = s.addTensor("present.0", DType::F32,
                          {1, 1, PlanDim::dynamic(kMaxSeq), kDim});
    fb::AxisAttrsT concatAxis;
    concatAxis.axis = 2;
    s.addStep(OpKind::Concat, "cat", {past, rows4}, {present},
              attrs(concatAxis));
    int32_t dims = s.addTensor("present_shape", DType::I64, {4});
    s.addStep(OpKind::Shape, "present_shape", {present}, {dims},
              attrs(fb::ShapeAttrsT()));
  }
  int32_t attended = s.addTensor("attended", DType::F32, {1, 1, n, kDim});
  fb::AttentionAttrsT attention;
  attention.scale = kScale;
  s.addStep(OpKind::Attention, "attention", {rows4, present, present},
            {attended}, attrs(attention));
  int32_t flat = s.addTensor("flat", DType::F32, {1, n, kDim});
  s.addStep(OpKind::Reshape, "flat", {attended, shape}, {flat},
            attrs(fb::ReshapeAttrsT()));
  if (options.sumPresent && past >= 0) {
    const int64_t axis2[] = {2};
    int32_t sumAxes = s.addWeight("axes2", DType::I64, {1}, axis2, 8);
    int32_t sum = s.addTensor("sum", DType::F32, {1, 1, kDim});
    fb::ReduceAttrsT reduce;
    reduce.keepdims = false;
    s.addStep(OpKind::ReduceSum, "sum", {present, sumAxes}, {sum},
              attrs(reduce));
    s.addOutput(sum);
  }
  int32_t logits = s.addTensor("logits", DType::F32, {1, n, kVocab});
  s.addStep(OpKind::MatMul, "proj", {flat, proj}, {logits});
  return {present, logits};
}

} // namespace

std::vector<float> attentionLogits(const std::vector<int64_t> &tokens) {
  const float *q = &kEmbed[tokens.back() * kDim];
  std::vector<double> scores;
  double top = -INFINITY;
  for (int64_t t : tokens) {
    double s = 0;
    for (int64_t d = 0; d < kDim; ++d)
      s += double(q[d]) * kEmbed[t * kDim + d];
    scores.push_back(s * kScale);
    top = std::max(top, scores.back());
  }
  double total = 0;
  for (double &s : scores)
    total += s = std::exp(s - top);
  double out[kDim] = {0, 0};
  for (size_t j = 0; j < tokens.size(); ++j)
    for (int64_t d = 0; d < kDim; ++d)
      out[d] += scores[j] / total * kEmbed[tokens[j] * kDim + d];
  std::vector<float> logits(kVocab);
  for (int64_t v = 0; v < kVocab; ++v) {
    double sum = 0;
    for (int64_t d = 0; d < kDim; ++d)
      sum += out[d] * kProj[d * kVocab + v];
    logits[v] = static_cast<float>(sum);
  }
  return logits;
}

DecodeInputs addTokenInputs(ScheduleBuilder &s, PlanDim n) {
  DecodeInputs inputs;
  inputs.ids = s.addTensor("input_ids", DType::I64, {1, n});
  inputs.positions = s.addTensor("position_ids", DType::I64, {1, n});
  s.addInput(inputs.ids);
  s.addInput(inputs.positions);
  return inputs;
}

DecodeInputs addDecodeInputs(ScheduleBuilder &s, PlanDim n, int pastSymbol) {
  DecodeInputs inputs = addTokenInputs(s, n);
  inputs.past = s.addTensor("past.0", DType::F32,
                            {1, 1, PlanDim::symbol(pastSymbol), kDim});
  s.addInput(inputs.past);
  return inputs;
}

void setGenerationTable(PlanWriter &writer, std::string input,
                        std::string prefillOutput) {
  fb::GenerationT &gen = writer.generation();
  gen.max_seq = kMaxSeq;
  gen.input_ids = "input_ids";
  gen.position_ids = "position_ids";
  gen.logits = "logits";
  auto pair = std::make_unique<fb::CachePairT>();
  pair->input = std::move(input);
  pair->output = "present.0";
  pair->prefill_output = std::move(prefillOutput);
  pair->axis = 2;
  gen.cache.push_back(std::move(pair));
}

std::vector<uint8_t>
writeAttentionGenerationPlan(const AttentionPlanOptions &options) {
  PlanWriter writer({Backend::Cpu, 1}, "cache_in_place_test");
  int past = writer.addSymbol("past", options.prefill ? 1 : 0, kMaxSeq - 1);
  int tokens = writer.addSymbol("n", 1, options.prefill ? 1 : kMaxSeq - 1);
  ScheduleBuilder &d = writer.schedule(0);
  PlanDim n = PlanDim::symbol(tokens);
  DecodeInputs inputs = addDecodeInputs(d, n, past);
  int32_t embed =
      d.addWeight("embed", DType::F32, {kVocab, kDim}, kEmbed.data(), 40);
  int32_t proj =
      d.addWeight("proj", DType::F32, {kDim, kVocab}, kProj.data(), 40);
  auto [present, logits] =
      addAttentionModel(d, n, inputs.ids, inputs.past, embed, proj, options);
  d.addOutput(logits);
  d.addOutput(present);
  std::string prefillOutput = "present.0";
  if (options.prefill) {
    int prompt = writer.addSymbol("prefill.n", 1, kMaxSeq - 1);
    ScheduleBuilder &p = writer.prefillSchedule(0);
    PlanDim m = PlanDim::symbol(prompt);
    int32_t pIds = addTokenInputs(p, m).ids;
    auto [start, pLogits] =
        addAttentionModel(p, m, pIds, -1, p.addSharedWeight("embed", 0, embed),
                          p.addSharedWeight("proj", 0, proj), options);
    p.addOutput(pLogits);
    p.addOutput(start);
    prefillOutput = "rows4";
  }
  setGenerationTable(writer, "past.0", prefillOutput);
  writer.generation().batchable = options.batchable;
  writer.generation().batch_windows = options.batchWindows;
  auto bytes = writer.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

} // namespace moert::test
