//===- generation_model.h - The generator tests' tiny model -----*- C++ -*-===//
//
// The arithmetic of the tiny generation plans that generator_test.cpp and
// group_generator_test.cpp write: logits after tokens t_0..t_k are
// (E[t_0] + ... + E[t_k]) @ W, with the embeddings as the KV cache.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TESTS_GENERATION_MODEL_H
#define MOERT_TESTS_GENERATION_MODEL_H

#include "format/plan_writer.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace moert::test {

constexpr int64_t kVocab = 5;
constexpr int64_t kDim = 2;
constexpr int64_t kMaxSeq = 8;

/// E, [kVocab, kDim].
inline const std::vector<float> kEmbed = {0.1f, 1.0f, 0.5f, -1.0f, -0.3f,
                                          0.2f, 1.0f, 0.0f, 0.0f,  0.7f};
/// W, [kDim, kVocab].
inline const std::vector<float> kProj = {0.3f,  -0.2f, 0.9f, 0.1f, -0.5f,
                                         -0.4f, 0.8f,  0.1f, 0.2f, 0.6f};

/// What the plans compute: the logits after `tokens`.
inline std::vector<float> expectedLogits(const std::vector<int64_t> &tokens) {
  float sum[kDim] = {0, 0};
  for (int64_t t : tokens)
    for (int64_t d = 0; d < kDim; ++d)
      sum[d] += kEmbed[t * kDim + d];
  std::vector<float> logits(kVocab, 0.0f);
  for (int64_t v = 0; v < kVocab; ++v)
    for (int64_t d = 0; d < kDim; ++d)
      logits[v] += sum[d] * kProj[d * kVocab + v];
  return logits;
}

inline int64_t argmax(const std::vector<float> &v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

/// The decode schedule's graph inputs that the test plans share: the token
/// ids and positions [1, n] and the cache's past "past.0" [1, 1, past,
/// kDim], added to `s` in that order.
struct DecodeInputs {
  int32_t ids = -1, positions = -1, past = -1;
};
DecodeInputs addDecodeInputs(ScheduleBuilder &s, PlanDim n, int pastSymbol);
/// The same without the past: a prefill schedule's ids and positions.
DecodeInputs addTokenInputs(ScheduleBuilder &s, PlanDim n);

/// Makes `writer`'s plan a generation plan (max_seq kMaxSeq, "input_ids",
/// "position_ids", "logits") with one cache pair along axis 2: `input` ->
/// "present.0", started by the prefill's `prefillOutput`.
void setGenerationTable(PlanWriter &writer, std::string input,
                        std::string prefillOutput);

/// The attention generation plan (generation_plans.cpp): the token's
/// embedding is the query, the embeddings of every token so far are the keys
/// and values (the KV cache, [1, 1, positions, kDim]), and the logits are
/// attention's output (scale kScale) @ W. Its decode schedule has the
/// exported form, Concat(past, new) read by fused attention and a Shape, so
/// that a Generator writes its cache in place.
struct AttentionPlanOptions {
  /// A prefill schedule (else the decode schedule runs the prompt with an
  /// empty past).
  bool prefill = true;
  /// The decode schedule also sums the present (a read that keeps the
  /// cache from being written in place).
  bool sumPresent = false;
  /// The compiler's batching verdict (Generation.batchable): the prefill
  /// schedule may run the rows of several sequences. Its attention has no
  /// mask, but only its last row's logits and the keys (the embeddings) are
  /// read, which causal attention over the rows computes alike.
  bool batchable = false;
  /// Generation.batch_windows (format 1.14).
  std::vector<int64_t> batchWindows;
};
constexpr float kScale = 0.5f;
/// The bytes of that plan (empty after a test failure).
std::vector<uint8_t>
writeAttentionGenerationPlan(const AttentionPlanOptions &options = {});
/// What it computes: the logits after `tokens`, attention of the last
/// token's embedding over all of them, in double.
std::vector<float> attentionLogits(const std::vector<int64_t> &tokens);

} // namespace moert::test

#endif // MOERT_TESTS_GENERATION_MODEL_H
