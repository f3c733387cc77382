//===- multimodal_plans.h - The multimodal tests' tiny plan -----*- C++ -*-===//
//
// A tiny multimodal plan (format 1.17) written with the plan writer, which
// loader/multimodal_plan_test.cpp and api/c_api_test.cpp run: a vision stage
// that passes its patches `pixels` [p, kDim] through as the image features
// (`grid` [1, 3] its grid, merge 1), an embedding, a "language model" whose
// cache is its embeddings and whose hidden state is each token's embedding,
// a head, and the decode schedule of generation_model.h's arithmetic
// (logits = the sum of the cache @ W).
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TESTS_MULTIMODAL_PLANS_H
#define MOERT_TESTS_MULTIMODAL_PLANS_H

#include "format/plan_writer.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace moert::test {

/// The plan's image token id.
constexpr int64_t kMultimodalImageToken = 4;

/// The plan's bytes; `edit` (if any) changes the tables before they are
/// written.
std::vector<uint8_t>
writeMultimodalPlan(const std::function<void(PlanWriter &)> &edit = {});

/// writeMultimodalPlan's plan with an image processor (format 1.22,
/// Qwen2-VL's rule with 1 x 1 patches, no resize): its vision stage takes
/// RGB patches `pixels` [p, 3] and gives them times kPixelProj as the
/// features.
std::vector<uint8_t> writeImagePlan();

/// writeMultimodalPlan's plan whose embedding also takes the vision stage's
/// features (`image_features` [m, kDim], unread), as onnxruntime-genai's
/// embedding graphs do (format 1.26).
std::vector<uint8_t> writeEmbedFeaturesPlan();

/// The image plan's [3, kDim] projection of the pixel patches.
inline const std::vector<float> kPixelProj = {1.0f, -0.5f, 0.25f,
                                              2.0f, -1.5f, 0.75f};

} // namespace moert::test

#endif // MOERT_TESTS_MULTIMODAL_PLANS_H
