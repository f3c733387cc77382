//===- stats.h - Per-layer MoE statistics of a session --------*- C++ -*-===//
//
// Groups the per-step statistics of a session (Session::stepStats) into the
// MoE layers of its schedule: which expert received how many tokens, the time
// of the expert networks, and how evenly the load spread. Kept out of moert.h
// so that plain users of the runtime do not pay for it.
//
//   std::vector<moert::MoeLayerStats> layers =
//       moert::moeLayerStats(*plan, session->stepStats());
//
// Expert-parallel plans (docs/expert-parallelism.md) have one schedule per
// device; each device's layers are grouped the same way and
// mergeDeviceLayerStats() adds them up into the model's layers.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_STATS_H
#define MOERT_STATS_H

#include "moert/moert.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moert {

/// One MoE layer of a device schedule, found by data flow from its Dispatch
/// step: the Router that produced the indices it permutes (through
/// reshapes), the Experts step that reads its offsets, the Combine step that
/// reads its source map, and a SharedExpert step on the same tokens. In an
/// expert-parallel schedule the layer is found from its AssignSlots step
/// instead: every Dispatch of the slots (one per micro-batch), the exchanges
/// of their rows, and the Regroup/Experts/Ungroup steps between them. Counts
/// and times are sums over the runs since the session's last reset (`runs`
/// of them); divide by `runs` for per-run values.
struct MoeLayerStats {
  /// The (first) Dispatch step's name; names the layer in reports.
  std::string name;
  /// Indices into Session::stepStats() (schedule order) of the layer's first
  /// step of each kind (several with micro-batches); -1 when the layer has no
  /// such step on this device. `assignSlots` is set in expert-parallel
  /// schedules only.
  int router = -1;
  int assignSlots = -1;
  int dispatch = -1;
  int experts = -1;
  int combine = -1;
  int sharedExpert = -1;
  /// Every step of the layer found, in schedule order.
  std::vector<int> steps;
  /// Runs of the layer (calls of its first Dispatch step).
  uint64_t runs = 0;
  /// Assignments (token, expert) each expert computed: the Experts steps'
  /// rows per expert (in an expert-parallel schedule, the rows this device's
  /// slots computed, mapped to their experts), or the Router's kept
  /// assignments when no Experts step is on this device of a single-device
  /// plan. With no capacity their sum over all devices is tokens * top_k per
  /// run.
  std::vector<uint64_t> tokensPerExpert;
  /// Expert parallel: the Router's kept assignments of this device's tokens,
  /// per expert (wherever they were computed).
  std::vector<uint64_t> routedPerExpert;
  /// Expert parallel: the expert held by each of this device's slots (all
  /// slots, in global order, once merged), and the rows each slot computed.
  std::vector<int64_t> slotExperts;
  std::vector<uint64_t> tokensPerSlot;
  /// Assignments the Router dropped because their expert was at capacity;
  /// kept plus dropped is tokens * top_k per run.
  uint64_t droppedAssignments = 0;
  /// Seconds in the Experts steps (the layer's expert group), in the layer's
  /// exchanges (AllToAll, AllToAllStart and AllToAllWait steps), and in all
  /// of the layer's steps. Merged over devices, the largest device's.
  double expertsSeconds = 0;
  double commSeconds = 0;
  double layerSeconds = 0;
  /// Merged only: the rows each device's experts computed, in device order.
  std::vector<uint64_t> deviceRows;
  /// Tiered plans (docs/tiered-experts.md): the layer's Experts steps' expert
  /// cache counters (StepStats), summed; merged, summed over the devices
  /// (the seconds the largest device's).
  bool tiered = false;
  ExpertCacheCounters cache;

  /// Assignments kept over all experts (the sum of tokensPerExpert).
  uint64_t keptAssignments() const;
  /// The largest expert load over the mean load (1: perfectly even); 0 when
  /// nothing was routed.
  double imbalance() const;
  /// The largest of deviceRows over their mean; 0 when not merged or empty.
  double deviceImbalance() const;
};

/// The largest of `loads` over their mean (1: perfectly even); 0 when they
/// sum to 0.
double loadImbalance(const std::vector<uint64_t> &loads);

/// The MoE layers of schedule `device` of `plan` (its prefill schedule with
/// `prefill`, a generation plan's), in schedule order, with the statistics
/// of `steps` (the Session::stepStats() of a session on that schedule).
/// Empty when the schedule has no Dispatch step.
std::vector<MoeLayerStats> moeLayerStats(const Plan &plan,
                                         const std::vector<StepStats> &steps,
                                         int device = 0, bool prefill = false);

/// The model's MoE layers from every device's (`devices[d]` is
/// moeLayerStats(plan, ..., d)): counts summed over the devices (so
/// tokensPerExpert is the whole model's), slots concatenated in device order
/// (the global slot order), times the largest device's, and deviceRows set.
/// Fails when the devices disagree on the number of layers or experts.
absl::StatusOr<std::vector<MoeLayerStats>>
mergeDeviceLayerStats(const std::vector<std::vector<MoeLayerStats>> &devices);

/// A byte image of `layers` for gathering them from other MPI ranks, and its
/// inverse (which fails on malformed bytes).
std::vector<uint8_t> serializeLayerStats(const std::vector<MoeLayerStats> &);
absl::StatusOr<std::vector<MoeLayerStats>>
deserializeLayerStats(const uint8_t *data, size_t size);

} // namespace moert

#endif // MOERT_STATS_H
