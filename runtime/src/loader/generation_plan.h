//===- generation_plan.h - Loading generation plans -------------*- C++ -*-===//
//
// The part of the loader that checks a generation plan's `Generation` table
// (docs/plan-format.md, "Generation plans") against its already validated
// schedules, so that a Generator can trust every name and shape it uses.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_GENERATION_PLAN_H
#define MOERT_SRC_GENERATION_PLAN_H

#include "loader/plan_impl.h"

#include "absl/status/status.h"

namespace moert::detail {

/// Checks `generation` against the schedules of `impl` and fills in
/// `impl.generation`. Errors start with `source`. A multimodal plan's
/// (`multimodal`, its stages loaded) caches start in its Prefill stage, and
/// its decode schedule may take the inputs of the table's decode feeds.
absl::Status validateGeneration(const std::string &source,
                                const fb::Generation &generation,
                                Plan::Impl &impl,
                                const fb::Multimodal *multimodal = nullptr);

/// The id of `schedule`'s graph input (`inputs`) or output named `name`, or
/// -1.
int32_t findSignatureTensor(const ScheduleInfo &schedule, bool inputs,
                            absl::string_view name);

} // namespace moert::detail

#endif // MOERT_SRC_GENERATION_PLAN_H
