//===- tier_assignment.h - Which experts of a budget are hot ----*- C++ -*-===//
//
// The one rule that assigns expert tiers for a memory budget, shared by the
// plan writer (`moec compile --device-memory`) and the runtime (`moe-run
// --device-memory`, which overrides a plan's tiers when a session starts),
// so that the two always agree (docs/tiered-experts.md):
//
//   budget = resident weights                           (fixed)
//          + hot experts (pinned)                       (in rank order)
//          + the cold experts' cache                    (at least `window`)
//
// The activation arena (planned for the compile's token bounds, and paged
// in only as far as a run's tokens reach) is not part of the budget.
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_TIER_ASSIGNMENT_H
#define MOERT_SRC_TIER_ASSIGNMENT_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <vector>

namespace moert::detail {

/// A tiered layer as the assignment sees it.
struct TierLayerShape {
  /// Experts of the layer.
  uint32_t experts = 0;
  /// Bytes of one expert's paged weights (all of a layer's experts have the
  /// same).
  uint64_t expertBytes = 0;
};

/// The outcome of assignTiers.
struct TierAssignment {
  /// The experts of rank below hotCount are hot.
  uint32_t hotCount = 0;
  uint64_t hotBytes = 0;
  uint64_t coldBytes = 0;
  /// The resident weights.
  uint64_t fixedBytes = 0;
  /// What the experts may hold at once: budget - fixedBytes (hot experts
  /// pinned, the rest the cold experts' cache).
  uint64_t cacheBytes = 0;
  /// The least cache the cold experts need (coldWindow).
  uint64_t window = 0;
};

/// Ranks every expert of `loads` (per layer, per expert: its expected load,
/// such as a routing profile's tokens; an empty layer counts as all zero):
/// result[l][e] is expert e of layer l's place in the order of decreasing
/// load, ties broken by expert index and then layer (so that without a
/// profile the budget spreads evenly over the layers: expert 0 of every
/// layer first, then expert 1, ...).
std::vector<std::vector<uint32_t>>
rankExperts(const std::vector<TierLayerShape> &layers,
            const std::vector<std::vector<double>> &loads);

/// The least cache the cold experts need: room for `topK` experts (at most
/// the layer's count) of the layer whose experts are largest, so that one
/// token's choices of a layer load in one round.
uint64_t coldWindow(const std::vector<TierLayerShape> &layers, uint32_t topK);

/// Assigns the tiers of `layers` (with their ranks, rankExperts) for
/// `budget` bytes: every expert is hot when all fit in budget - fixedBytes;
/// else experts in rank order while they leave `window` bytes for the cold
/// ones. Fails (saying by how much) when the budget is below fixedBytes plus
/// the window.
absl::StatusOr<TierAssignment>
assignTiers(uint64_t budget, uint64_t fixedBytes,
            const std::vector<TierLayerShape> &layers,
            const std::vector<std::vector<uint32_t>> &ranks, uint64_t window);

} // namespace moert::detail

#endif // MOERT_SRC_TIER_ASSIGNMENT_H
