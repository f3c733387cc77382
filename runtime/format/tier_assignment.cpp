//===- tier_assignment.cpp - Which experts of a budget are hot ------------===//

#include "format/tier_assignment.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace moert::detail {

std::vector<std::vector<uint32_t>>
rankExperts(const std::vector<TierLayerShape> &layers,
            const std::vector<std::vector<double>> &loads) {
  struct Item {
    double load;
    uint32_t expert, layer;
  };
  std::vector<Item> items;
  for (uint32_t l = 0; l < layers.size(); ++l)
    for (uint32_t e = 0; e < layers[l].experts; ++e) {
      double load = l < loads.size() && e < loads[l].size() ? loads[l][e] : 0;
      items.push_back({load, e, l});
    }
  std::sort(items.begin(), items.end(), [](const Item &a, const Item &b) {
    return std::make_tuple(-a.load, a.expert, a.layer) <
           std::make_tuple(-b.load, b.expert, b.layer);
  });
  std::vector<std::vector<uint32_t>> ranks(layers.size());
  for (uint32_t l = 0; l < layers.size(); ++l)
    ranks[l].resize(layers[l].experts);
  for (uint32_t r = 0; r < items.size(); ++r)
    ranks[items[r].layer][items[r].expert] = r;
  return ranks;
}

uint64_t coldWindow(const std::vector<TierLayerShape> &layers, uint32_t topK) {
  uint64_t window = 0;
  for (const TierLayerShape &layer : layers)
    window =
        std::max(window, std::min<uint64_t>(std::max(topK, 1u), layer.experts) *
                             layer.expertBytes);
  return window;
}

absl::StatusOr<TierAssignment>
assignTiers(uint64_t budget, uint64_t fixedBytes,
            const std::vector<TierLayerShape> &layers,
            const std::vector<std::vector<uint32_t>> &ranks, uint64_t window) {
  TierAssignment out;
  out.fixedBytes = fixedBytes;
  out.window = window;
  std::vector<uint64_t> byRank;
  for (uint32_t l = 0; l < layers.size(); ++l)
    for (uint32_t e = 0; e < layers[l].experts; ++e) {
      uint32_t r = ranks[l][e];
      if (r >= byRank.size())
        byRank.resize(r + 1, 0);
      byRank[r] = layers[l].expertBytes;
    }
  uint64_t total = std::accumulate(byRank.begin(), byRank.end(), uint64_t{0});
  if (budget < fixedBytes || budget - fixedBytes < std::min(window, total))
    return absl::InvalidArgumentError(absl::StrCat(
        "the memory budget of ", budget, " bytes is less than the ", fixedBytes,
        " bytes of resident weights plus the ", std::min(window, total),
        " bytes the cold experts' cache needs at least "
        "(one token's experts of a layer); give at least ",
        fixedBytes + std::min(window, total), " bytes"));
  out.cacheBytes = budget - fixedBytes;
  uint64_t room = total <= out.cacheBytes ? total : out.cacheBytes - window;
  for (uint64_t bytes : byRank) {
    if (out.hotBytes + bytes > room)
      break;
    out.hotBytes += bytes;
    ++out.hotCount;
  }
  out.coldBytes = total - out.hotBytes;
  return out;
}

} // namespace moert::detail
