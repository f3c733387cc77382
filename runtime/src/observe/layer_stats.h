//===- layer_stats.h - MoE layers of one schedule --------------*- C++ -*-===//
//
// moeLayerStats (moert/stats.h) over a schedule given directly, so that the
// trace can name the MoE steps of prefill schedules as well.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_LAYER_STATS_H
#define MOERT_SRC_LAYER_STATS_H

#include "loader/plan_impl.h"
#include "moert/stats.h"

namespace moert::detail {

/// The MoE layers of `schedule` (device `device` of its plan) with the
/// statistics of `steps`, one entry per step of the schedule (else none).
std::vector<MoeLayerStats>
scheduleLayerStats(const ScheduleInfo &schedule,
                   const std::vector<StepStats> &steps, int device);

} // namespace moert::detail

#endif // MOERT_SRC_LAYER_STATS_H
