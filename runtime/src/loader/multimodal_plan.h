//===- multimodal_plan.h - Loading multimodal plans -------------*- C++ -*-===//
//
// The part of the loader that checks a multimodal plan's `Multimodal` table
// (format 1.17, docs/plan-format.md "Multimodal plans"): its stages'
// schedules, their feeds and the position rule, so that a Generator can run
// the stages trusting every name, index and shape it uses.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_LOADER_MULTIMODAL_PLAN_H
#define MOERT_SRC_LOADER_MULTIMODAL_PLAN_H

#include "loader/diag.h"
#include "loader/plan_impl.h"
#include "loader/validation.h"

#include "absl/status/status.h"

namespace moert::detail {

/// Validates each stage's schedule into `impl.stageSchedules` and records
/// the stages' names and roles (and which is the Prefill) in
/// `impl.multimodal`, before the generation table is checked against them.
absl::Status loadStages(const Diag &diag, const Layout &layout,
                        const fb::Multimodal &table, Plan::Impl &impl);

/// Checks the table's feeds, features, logits and position rule against the
/// stages and the generation table (validated), and completes
/// `impl.multimodal`.
absl::Status validateMultimodal(const Diag &diag, const fb::Multimodal &table,
                                Plan::Impl &impl);

} // namespace moert::detail

#endif // MOERT_SRC_LOADER_MULTIMODAL_PLAN_H
