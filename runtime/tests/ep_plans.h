//===- ep_plans.h - Expert-parallel test plans ------------------*- C++ -*-===//
//
// One MoE layer (gate MatMul, Router, Dispatch, Experts, Combine) written as
// a 1-device plan or as the expert-parallel sequence of
// docs/expert-parallelism.md over N devices, with the same weights: the
// runtime's tests and moe-run's CLI test compare the two.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TESTS_EP_PLANS_H
#define MOERT_TESTS_EP_PLANS_H

#include "format/plan_writer.h"

namespace moert::testing {

/// Sizes of the layer: experts, top-k, hidden, intermediate, max tokens.
inline constexpr int64_t kLayerExperts = 4, kLayerTopK = 2, kLayerHidden = 8,
                         kLayerInter = 6, kLayerMaxTokens = 16;

/// Where the experts live: device d holds slots [slotBegin[d],
/// slotBegin[d + 1]); slot s runs expert slotExpert[s] (an expert with
/// several slots is replicated).
struct Placement {
  std::vector<int64_t> slotBegin;
  std::vector<int64_t> slotExpert;
};

/// The plan bytes of the layer: input x [T <= 16, 8] f32, output out
/// [T, 8]. Without `placement`, the 1-device plan; with it, one schedule per
/// device. `overlap` runs the dispatch exchange as AllToAllStart/Wait around
/// an unrelated step.
absl::StatusOr<std::vector<uint8_t>>
writeMoeLayerPlan(const Placement *placement, bool overlap = false);

inline fb::AttrsUnion slotAttrs(std::vector<int64_t> offsets,
                                std::vector<int64_t> slots) {
  fb::SlotAttrsT a;
  a.expert_slot_offsets = std::move(offsets);
  a.expert_slots = std::move(slots);
  return attrs(a);
}

inline fb::AttrsUnion regroupAttrs(int64_t sources, int64_t slots) {
  fb::RegroupAttrsT a;
  a.num_sources = sources;
  a.num_slots = slots;
  return attrs(a);
}

inline fb::AttrsUnion collectiveAttrs(int64_t devices) {
  fb::CollectiveAttrsT a;
  a.num_devices = devices;
  return attrs(a);
}

} // namespace moert::testing

#endif // MOERT_TESTS_EP_PLANS_H
