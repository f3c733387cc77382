//===- tier_description.cpp - What a tiered schedule holds ----------------===//
//
// The description of a schedule's expert tiers that `moec inspect`,
// `moe-run --device-memory` and the API print (Plan::expertTiers): which
// experts are hot under a budget, the cold cache and what it reads ahead;
// and the names of the expert read modes and cache policies.
//
//===----------------------------------------------------------------------===//

#include "format/tier_assignment.h"
#include "tiers/expert_store.h"

#include "absl/strings/str_cat.h"

#include <cstdlib>
#include <string>

namespace moert {
namespace detail {

const char *expertReadModeName(ExpertReadMode mode) {
  switch (mode) {
  case ExpertReadMode::Direct:
    return "direct";
  case ExpertReadMode::Mmap:
    return "mmap";
  case ExpertReadMode::Auto:
    return "auto";
  case ExpertReadMode::Pread:
    break;
  }
  return "pread";
}

absl::StatusOr<ExpertReadMode> parseExpertReadMode(absl::string_view text) {
  for (ExpertReadMode mode : {ExpertReadMode::Pread, ExpertReadMode::Direct,
                              ExpertReadMode::Mmap, ExpertReadMode::Auto})
    if (text == expertReadModeName(mode))
      return mode;
  return absl::InvalidArgumentError(
      absl::StrCat("the expert read mode must be pread, direct, mmap or auto, "
                   "not '",
                   text, "'"));
}

ExpertReadMode chooseExpertReadMode(uint64_t coldBytes, uint64_t budget,
                                    uint64_t available) {
  return available && coldBytes > 0 && coldBytes + budget > available
             ? ExpertReadMode::Direct
             : ExpertReadMode::Pread;
}

namespace {

const char *evictionName(ExpertCache::Eviction eviction) {
  switch (eviction) {
  case ExpertCache::Eviction::Lfu:
    return "lfu";
  case ExpertCache::Eviction::Adaptive:
    return "adaptive";
  case ExpertCache::Eviction::Lru:
    break;
  }
  return "lru";
}

} // namespace

absl::StatusOr<ExpertCachePolicy>
parseExpertCachePolicy(absl::string_view text) {
  ExpertCachePolicy policy;
  if (text.empty() || text == "static")
    return policy;
  absl::string_view kind = text.substr(0, text.find(':'));
  policy.pinned = 0;
  bool kindOk = false;
  for (ExpertCache::Eviction eviction :
       {ExpertCache::Eviction::Lru, ExpertCache::Eviction::Lfu,
        ExpertCache::Eviction::Adaptive})
    if (kind == evictionName(eviction)) {
      policy.eviction = eviction;
      kindOk = true;
    }
  bool fractionOk = true;
  if (kind.size() < text.size()) {
    std::string fraction(text.substr(kind.size() + 1));
    char *end = nullptr;
    policy.pinned = std::strtod(fraction.c_str(), &end);
    fractionOk = !fraction.empty() && end && !*end && policy.pinned >= 0 &&
                 policy.pinned <= 1;
  }
  if (!kindOk || !fractionOk)
    return absl::InvalidArgumentError(absl::StrCat(
        "the expert cache policy must be static, lru[:F], lfu[:F] or "
        "adaptive[:F] (F from 0 to 1: the share of the hot experts kept "
        "pinned), not '",
        text, "'"));
  return policy;
}

std::string expertCachePolicyName(const ExpertCachePolicy &policy) {
  if (policy.pinned >= 1 && policy.eviction == ExpertCache::Eviction::Lru)
    return "static";
  std::string name = evictionName(policy.eviction);
  if (policy.pinned > 0)
    absl::StrAppend(&name, ":", policy.pinned);
  return name;
}

absl::StatusOr<ExpertTiersDesc> describeTiers(const Plan::Impl &plan,
                                              const ScheduleInfo &schedule,
                                              uint64_t budget,
                                              uint32_t layersAhead) {
  const TierInfo &tiers = schedule.tiers;
  if (!tiers.present)
    return absl::FailedPreconditionError(absl::StrCat(
        plan.source, ": the plan is not tiered (its expert weights are not "
                     "laid out for paging); compile it with moec compile "
                     "--device-memory BYTES"));
  std::vector<TierLayerShape> shapes;
  std::vector<std::vector<uint32_t>> ranks;
  for (const TierLayerInfo &layer : tiers.layers) {
    shapes.push_back({layer.experts, layer.expertBytes});
    ranks.push_back(layer.rank);
  }
  uint64_t fixed = tiers.residentBytes;
  uint64_t window = coldWindow(shapes, tiers.topK) * (1 + layersAhead);
  if (layersAhead && !budget)
    budget = tiers.budget;
  ExpertTiersDesc desc;
  desc.residentBytes = tiers.residentBytes;
  desc.arenaBytes = schedule.arenaSize;
  desc.windowBytes = window;
  uint32_t hotCount;
  if (budget) {
    absl::StatusOr<TierAssignment> assignment =
        assignTiers(budget, fixed, shapes, ranks, window);
    if (!assignment.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(plan.source, ": ", assignment.status().message()));
    hotCount = assignment->hotCount;
    desc.budget = budget;
  } else {
    hotCount = tiers.hotCount;
    desc.budget = tiers.budget;
  }
  for (size_t l = 0; l < tiers.layers.size(); ++l) {
    const TierLayerInfo &layer = tiers.layers[l];
    TierLayerDesc out;
    out.step = std::string(schedule.steps[layer.step].name);
    out.stepIndex = layer.step;
    out.experts = layer.experts;
    out.expertBytes = layer.expertBytes;
    for (uint32_t e = 0; e < layer.experts; ++e) {
      bool hot = layer.rank[e] < hotCount;
      out.hot.push_back(hot);
      (hot ? desc.hotExperts : desc.coldExperts) += 1;
      (hot ? desc.hotBytes : desc.coldBytes) += layer.expertBytes;
    }
    desc.layers.push_back(std::move(out));
  }
  // The plan's own tiers are checked as untrusted input: its hot experts
  // and the cold experts' least cache fit in its budget.
  uint64_t need = fixed + desc.hotBytes + (desc.coldExperts ? window : 0);
  if (desc.budget < need)
    return absl::InvalidArgumentError(
        absl::StrCat(plan.source, ": expert tiers: the budget of ", desc.budget,
                     " bytes is less than the ", need,
                     " bytes its resident weights, hot experts and cold cache "
                     "need"));
  desc.cacheBytes = desc.budget - fixed;
  desc.prefetch = expertPrefetchName(tiers.prefetch);
  desc.layersReadAhead = ExpertStore::layersReadAhead(schedule, tiers.prefetch);
  return desc;
}

} // namespace detail

bool Plan::tiered(int device) const {
  return impl_->schedules.at(device).tiers.present;
}

absl::StatusOr<ExpertTiersDesc> Plan::expertTiers(int device,
                                                  uint64_t budget) const {
  return detail::describeTiers(*impl_, impl_->schedules.at(device), budget);
}

} // namespace moert
