//===- tier_validation.h - Load-time checks of expert tiers -----*- C++ -*-===//

#ifndef MOERT_SRC_LOADER_TIER_VALIDATION_H
#define MOERT_SRC_LOADER_TIER_VALIDATION_H

#include "loader/diag.h"
#include "loader/plan_impl.h"

namespace moert::detail {

/// Checks a schedule's expert tiers against its steps and paged weights and
/// fills `schedule.tiers`: a paged weight is read by one input (w1 .. s2)
/// of one tiered Experts step and nothing else, with the step's experts
/// first; every tiered layer has exactly its experts' ranks and checksums,
/// and the ranks of all layers are one permutation. A generation plan's
/// prefill schedule (`decode` set: its device's decode schedule) has no
/// tiers of its own: its paged weights are the decode's. The plan loader
/// (loader/schedule_validation.cpp) calls it once per schedule, after the
/// steps.
absl::Status validateTiers(const Diag &diag, const Plan::Impl &impl,
                           const fb::Schedule &fbSched, ScheduleInfo &schedule,
                           const ScheduleInfo *decode);

} // namespace moert::detail

#endif // MOERT_SRC_LOADER_TIER_VALIDATION_H
