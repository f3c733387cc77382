//===- generation_model.h - The generator tests' tiny model -----*- C++ -*-===//
//
// The arithmetic of the tiny generation plans that generator_test.cpp and
// group_generator_test.cpp write: logits after tokens t_0..t_k are
// (E[t_0] + ... + E[t_k]) @ W, with the embeddings as the KV cache.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TESTS_GENERATION_MODEL_H
#define MOERT_TESTS_GENERATION_MODEL_H

#include <algorithm>
#include <cstdint>
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

} // namespace moert::test

#endif // MOERT_TESTS_GENERATION_MODEL_H
