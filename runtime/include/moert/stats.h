//===- stats.h - Per-layer MoE statistics of a session ------------*- C++
//-*-===//
//
// Groups the per-step statistics of a session (Session::stepStats) into the
// MoE layers of its schedule: which expert received how many tokens, the time
// of the expert networks, and how evenly the load spread. Kept out of moert.h
// so that plain users of the runtime do not pay for it.
//
//   std::vector<moert::MoeLayerStats> layers =
//       moert::moeLayerStats(*plan, session->stepStats());
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
/// reads its source map, and a SharedExpert step on the same tokens. Counts and
/// times are sums over the runs since the session's last reset (`runs` of
/// them); divide by `runs` for per-run values.
struct MoeLayerStats {
  /// The Dispatch step's name; names the layer in reports.
  std::string name;
  /// Indices into Session::stepStats() (schedule order); -1 when the layer
  /// has no such step on this device.
  int router = -1;
  int dispatch = -1;
  int experts = -1;
  int combine = -1;
  int sharedExpert = -1;
  /// Runs of the layer (calls of its Dispatch step).
  uint64_t runs = 0;
  /// Assignments (token, expert) each expert computed: the Experts step's
  /// rows per expert, or the Router's kept assignments when the Experts step
  /// is not on this device. With no capacity their sum is tokens * top_k
  /// per run.
  std::vector<uint64_t> tokensPerExpert;
  /// Assignments the Router dropped because their expert was at capacity;
  /// kept plus dropped is tokens * top_k per run.
  uint64_t droppedAssignments = 0;
  /// Seconds in the Experts step (the layer's expert group) and in all of
  /// the layer's steps (router, dispatch, experts, shared expert, combine).
  double expertsSeconds = 0;
  double layerSeconds = 0;

  /// Assignments kept over all experts (the sum of tokensPerExpert).
  uint64_t keptAssignments() const;
  /// The largest expert load over the mean load (1: perfectly even); 0 when
  /// nothing was routed.
  double imbalance() const;
};

/// The largest of `loads` over their mean (1: perfectly even); 0 when they
/// sum to 0.
double loadImbalance(const std::vector<uint64_t> &loads);

/// The MoE layers of schedule `device` of `plan`, in schedule order, with the
/// statistics of `steps` (the Session::stepStats() of a session on that
/// schedule). Empty when the schedule has no Dispatch step.
std::vector<MoeLayerStats> moeLayerStats(const Plan &plan,
                                         const std::vector<StepStats> &steps,
                                         int device = 0);

} // namespace moert

#endif // MOERT_STATS_H
