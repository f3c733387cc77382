//===- inspect.h - Human- and tool-readable dumps of a plan -----*- C++ -*-===//
//
// What `moec inspect PLAN` prints: the header, the symbols, and per device the
// memory plan, the tensors (weights and arena buffers) and the steps.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_INSPECT_H
#define MOERT_INSPECT_H

#include "moert/moert.h"

#include <string>

namespace moert {

/// Describes a loaded (hence validated) plan as aligned text for a human.
std::string describePlanText(const Plan &plan);

/// Describes a loaded plan as one JSON object for tools.
std::string describePlanJson(const Plan &plan);

/// The bytes of the weights schedule `device` of `plan` holds (stored,
/// narrowed sizes), as `moec inspect` prints them.
uint64_t planWeightBytes(const Plan &plan, int device = 0);

/// A schedule's expert tiers (Plan::expertTiers) as text lines, each
/// starting with `indent`, and as one JSON object: the budget, the
/// resident bytes, the hot and cold experts with their bytes, the cache,
/// and per tiered layer its hot experts.
std::string describeTiersText(const ExpertTiersDesc &tiers,
                              const std::string &indent);
std::string describeTiersJson(const ExpertTiersDesc &tiers);

} // namespace moert

#endif // MOERT_INSPECT_H
