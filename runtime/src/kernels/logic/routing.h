//===- routing.h - The router's logic, for the CPU and the GPU --*- C++ -*-===//
//
// What Router computes for one token once its scores are known, and what
// capacity and normalize_kept do to a sequence and to a token: the
// semantics, written once for both backends as MOERT_HD functions (hd.h).
// The CPU kernel (kernels/router.cpp) calls them from its pool's tasks; the
// GPU's routing kernels (backends/cuda/routing_logic.h) from one thread per
// token, which the CPU tests replay against the CPU kernel.
//
// The scores are each backend's: the CPU computes a token's [E] scores once,
// vectorised; a GPU thread keeps no [E] array and recomputes a score from
// its logit when asked (deterministic). routeScores reads them through a
// `Scores` policy:
//
//   float score(int64_t e) const;     // step 1: softmax, sigmoid, or the
//                                     // logit itself with after_topk
//   float selection(int64_t e) const; // step 2: the score plus the bias
//   static float exp(float x);        // the backend's e^x
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_LOGIC_ROUTING_H
#define MOERT_SRC_KERNELS_LOGIC_ROUTING_H

#include "kernels/logic/hd.h"

#include <math.h>
#include <stdint.h>

namespace moert::logic {

/// The router's attributes (RouterAttrs), resolved for one step.
struct RouterParams {
  int64_t experts;
  int64_t topK;
  bool sigmoid;
  bool afterTopK;
  bool normalize;
  float scale;
  int64_t groups;
  int64_t keptGroups;
};

/// Ranking of selection scores: larger first, NaN above every number (as
/// TopK ranks it).
MOERT_HD inline bool ranksAbove(float a, float b) {
  return a > b || (a != a && b == b);
}

/// Keeps the `k` best of the candidates offered in increasing id order,
/// sorted best first in values/ids[0, count): a candidate equal to a kept
/// one ranks below it, so ties go to the earlier id.
MOERT_HD inline void offerCandidate(float value, int64_t id, int64_t k,
                                    int64_t &count, float *values,
                                    int64_t *ids) {
  if (count == k && !ranksAbove(value, values[k - 1]))
    return;
  int64_t pos = count < k ? count++ : k - 1;
  for (; pos > 0 && ranksAbove(value, values[pos - 1]); --pos) {
    values[pos] = values[pos - 1];
    ids[pos] = ids[pos - 1];
  }
  values[pos] = value;
  ids[pos] = id;
}

/// Words of the bit mask of kept groups.
MOERT_HD constexpr int64_t keptMaskWords(int64_t groups) {
  return (groups + 63) / 64;
}

/// One token's working memory, from the caller (a GPU thread's registers,
/// a CPU task's scratch).
struct RouterWork {
  float *groupScores;  ///< [groups]
  int64_t *keptGroups; ///< [groups]
  uint64_t *keptMask;  ///< [keptMaskWords(groups)]
  float *chosen;       ///< [topK]
};

/// Steps 3 to 7 of routing one token whose scores `scores` gives: weights
/// `w` [k] and expert indices `idx` [k], best first.
template <typename Scores>
MOERT_HD inline void routeScores(const RouterParams &p, const Scores &scores,
                                 const RouterWork &work, float *w,
                                 int64_t *idx) {
  const int64_t E = p.experts, k = p.topK;
  const int64_t size = E / p.groups;
  // 3. Grouped selection: a group scores by the sum of its two best
  //    experts; only the experts of the best `keptGroups` groups stay
  //    eligible.
  bool grouped = p.groups > 1;
  if (grouped) {
    int64_t kept = 0;
    for (int64_t g = 0; g < p.groups; ++g) {
      float best[2];
      int64_t bestIds[2], count = 0;
      for (int64_t e = g * size; e < (g + 1) * size; ++e)
        offerCandidate(scores.selection(e), e, 2, count, best, bestIds);
      offerCandidate(best[0] + best[1], g, p.keptGroups, kept, work.groupScores,
                     work.keptGroups);
    }
    for (int64_t i = 0; i < keptMaskWords(p.groups); ++i)
      work.keptMask[i] = 0;
    for (int64_t i = 0; i < kept; ++i)
      work.keptMask[work.keptGroups[i] / 64] |= uint64_t(1)
                                                << (work.keptGroups[i] % 64);
  }

  // 4. The k best eligible experts, best first, ties to the lower index.
  int64_t count = 0;
  for (int64_t g = 0; g < p.groups; ++g) {
    if (grouped && !(work.keptMask[g / 64] >> (g % 64) & 1))
      continue;
    for (int64_t e = g * size; e < (g + 1) * size; ++e)
      offerCandidate(scores.selection(e), e, k, count, work.chosen, idx);
  }

  // 5-7. Weights from the unbiased scores: softmax over the k (after_topk),
  //      renormalised, scaled.
  for (int64_t j = 0; j < k; ++j)
    w[j] = scores.score(idx[j]);
  if (p.afterTopK) {
    float max = -INFINITY;
    for (int64_t j = 0; j < k; ++j)
      if (max < w[j])
        max = w[j];
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      w[j] = Scores::exp(w[j] - max);
      sum += w[j];
    }
    for (int64_t j = 0; j < k; ++j)
      w[j] = static_cast<float>(w[j] / sum);
  }
  if (p.normalize) {
    double sum = 0;
    for (int64_t j = 0; j < k; ++j)
      sum += w[j];
    for (int64_t j = 0; j < k; ++j)
      w[j] = static_cast<float>(w[j] / (sum + 1e-20));
  }
  if (p.scale != 1.0f)
    for (int64_t j = 0; j < k; ++j)
      w[j] *= p.scale;
}

/// Capacity over one sequence `seq` [length, k] of expert indices, its
/// assignments taken in (choice, token) order: first choices in token
/// order, then second choices, and so on. `load(e)` is the counter of
/// expert e's kept assignments, or null for an expert the caller leaves to
/// others (a GPU thread counts one expert). An assignment to a counted
/// expert whose counter has reached `capacity` becomes -1 (capacity 0
/// keeps every one). Returns how many became -1.
template <typename Load>
MOERT_HD inline int64_t dropOverCapacity(int64_t *seq, int64_t length,
                                         int64_t k, int64_t capacity,
                                         const Load &load) {
  int64_t dropped = 0;
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < length; ++t) {
      int64_t &slot = seq[t * k + j];
      int64_t *count = load(slot);
      if (!count)
        continue;
      if (capacity > 0 && *count >= capacity) {
        slot = -1;
        ++dropped;
      } else {
        ++*count;
      }
    }
  return dropped;
}

/// Renormalisation over the kept assignments (`normalize_kept`, GShard), for
/// one token after capacity: its weights `w` [k] become `w_j / max(sum,
/// epsilon)` where `idx` [k] kept choice j (>= 0), else 0, with `sum` the
/// f32 sum of the kept weights in choice order. A NaN sum stays NaN, as
/// DeepSpeed's clamp keeps it.
MOERT_HD inline void normalizeKept(float *w, const int64_t *idx, int64_t k,
                                   float epsilon) {
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j)
    if (idx[j] >= 0)
      sum += w[j];
  float denominator = sum < epsilon ? epsilon : sum;
  for (int64_t j = 0; j < k; ++j)
    w[j] = idx[j] >= 0 ? w[j] / denominator : 0.0f;
}

} // namespace moert::logic

#endif // MOERT_SRC_KERNELS_LOGIC_ROUTING_H
