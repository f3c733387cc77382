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

} // namespace moert::test

#endif // MOERT_TESTS_MULTIMODAL_PLANS_H
