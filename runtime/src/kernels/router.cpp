//===- router.cpp - The Router step ---------------------------------------===//
//
// The CPU kernel of Router (dialects/moe/MoeSparseOps.td,
// docs/plan-format.md): per token, scores (softmax or sigmoid), an optional
// selection bias, grouped selection, the top k and their weights; then, per
// sequence, capacity and the renormalisation over the kept choices.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/routing_logic.h"
#include "kernels/moe_internal.h"

#include <algorithm>

namespace moert::detail {
namespace {

/// Ranking of selection scores: larger first, NaN above every number (as
/// TopK ranks it). Equal scores keep the order in which they were offered.
inline bool ranksAbove(float a, float b) { return a > b || (a != a && b == b); }

/// Keeps the `k` best of the candidates offered in increasing index order:
/// `ids`/`values` hold `count` entries sorted best first. A candidate equal to
/// a kept one ranks below it, so ties go to the lower index.
inline void offer(float value, int64_t id, int64_t k, int64_t &count,
                  float *values, int64_t *ids) {
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

/// The router's attributes, read once per step.
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

/// Per-task scratch of the router.
struct RouterScratch {
  float *scores, *biased, *groupScores, *chosen; // [E], [E], [groups], [k]
  int64_t *keptGroups;                           // [groups]
  uint8_t *eligible;                             // [E]
};

/// Routes one token: logits `l` [E] -> weights `w` [k] and indices `idx`
/// [k].
void routeToken(const RouterParams &p, const float *l, const float *bias,
                const RouterScratch &work, float *w, int64_t *idx) {
  const int64_t E = p.experts, k = p.topK;
  // 1. Scores (with after_topk the logits themselves; the softmax over the
  //    chosen k comes in step 5).
  float *s = work.scores;
  if (p.afterTopK) {
    std::copy(l, l + E, s);
  } else if (p.sigmoid) {
    for (int64_t e = 0; e < E; ++e)
      s[e] = sigmoid(l[e]);
  } else {
    softmaxRow(l, s, E);
  }
  // 2. Selection scores: the bias steers the choice, never the weights.
  const float *c = s;
  if (bias) {
    float *biased = work.biased;
    for (int64_t e = 0; e < E; ++e)
      biased[e] = s[e] + bias[e];
    c = biased;
  }
  // 3. Grouped selection: a group scores by the sum of its two best experts;
  //    only the experts of the best `keptGroups` groups stay eligible.
  bool grouped = p.groups > 1;
  if (grouped) {
    int64_t size = E / p.groups;
    uint8_t *eligible = work.eligible;
    int64_t kept = 0;
    for (int64_t g = 0; g < p.groups; ++g) {
      float best[2];
      int64_t bestIds[2], count = 0;
      for (int64_t e = g * size; e < (g + 1) * size; ++e)
        offer(c[e], e, 2, count, best, bestIds);
      offer(best[0] + best[1], g, p.keptGroups, kept, work.groupScores,
            work.keptGroups);
    }
    std::fill(eligible, eligible + E, 0);
    for (int64_t i = 0; i < kept; ++i) {
      int64_t g = work.keptGroups[i];
      std::fill(eligible + g * size, eligible + (g + 1) * size, 1);
    }
  }
  // 4. The k best eligible experts, best first, ties to the lower index.
  int64_t count = 0;
  for (int64_t e = 0; e < E; ++e)
    if (!grouped || work.eligible[e])
      offer(c[e], e, k, count, work.chosen, idx);
  // 5-7. Weights from the unbiased scores, softmax over the k, renormalised,
  //      scaled.
  for (int64_t j = 0; j < k; ++j)
    w[j] = s[idx[j]];
  if (p.afterTopK) {
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < k; ++j)
      max = std::max(max, w[j]);
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      w[j] = fastExp(w[j] - max);
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

absl::Status routerKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::RouterAttrs>();
  const Tensor &logits = ctx.in(0);
  int rank = logits.shape.rank;
  RouterParams p;
  MOERT_ASSIGN_OR_RETURN(Shape shape, readRouter(ctx, p));
  const float *bias = ctx.has(1) ? ctx.in(1).as<const float>() : nullptr;
  MOERT_ASSIGN_OR_RETURN(Tensor * weights, ctx.allocate(0, shape));
  MOERT_ASSIGN_OR_RETURN(Tensor * indices, ctx.allocate(1, shape));
  const int64_t E = p.experts, k = p.topK;
  int64_t tokens = logits.shape.span(0, rank - 1);
  const float *l = logits.as<const float>();
  float *w = weights->as<float>();
  int64_t *idx = indices->as<int64_t>();

  // One fused pass over the tokens.
  ctx.pool().parallelFor(
      tokens, std::max<int64_t>(1, kElementwiseGrain / (8 * E)),
      [&](int64_t begin, int64_t end) {
        RouterScratch work;
        work.scores = scratch<float>(Scratch::Task, 2 * E + p.groups + k);
        work.biased = work.scores + E;
        work.groupScores = work.biased + E;
        work.chosen = work.groupScores + p.groups;
        work.keptGroups = scratch<int64_t>(Scratch::Task, p.groups);
        work.eligible = scratch<uint8_t>(Scratch::Task, E);
        for (int64_t t = begin; t < end; ++t)
          routeToken(p, l + t * E, bias, work, w + t * k, idx + t * k);
      });

  // Capacity, per sequence: first choices in token order, then second
  // choices, and so on; an assignment to a full expert becomes -1. The loads
  // are counted here too, for the stats.
  int64_t capacity = attrs->capacity();
  float keptEpsilon = attrs->normalize_kept_epsilon();
  MoeCounters *counters = ctx.moeCounters();
  if (capacity == 0 && !counters)
    return absl::OkStatus();
  int64_t sequences = rank == 3 ? logits.shape[0] : 1;
  int64_t length = sequences ? tokens / sequences : 0;
  int64_t *load = scratch<int64_t>(Scratch::Step, 2 * E);
  int64_t *total = load + E;
  std::fill(total, total + E, 0);
  int64_t dropped = 0;
  for (int64_t b = 0; b < sequences; ++b) {
    std::fill(load, load + E, 0);
    int64_t *seq = idx + b * length * k;
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t = 0; t < length; ++t) {
        int64_t &e = seq[t * k + j];
        if (capacity && load[e] >= capacity) {
          e = -1;
          ++dropped;
        } else {
          ++load[e];
        }
      }
    for (int64_t e = 0; e < E; ++e)
      total[e] += load[e];
  }
  // GShard renormalises over the choices capacity kept (the shared helper
  // of the CUDA kernels, so both backends divide alike).
  if (keptEpsilon > 0)
    for (int64_t t = 0; t < tokens; ++t)
      cuda::normalizeKept(w + t * k, idx + t * k, k, keptEpsilon);
  countLoads(ctx, E, total, dropped);
  return absl::OkStatus();
}

absl::Status validateRouter(const StepCheck &check) {
  const auto *attrs = check.attrs<fb::RouterAttrs>();
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.outType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.outType(1, bit(DType::I64)));
  int rank = check.in(0).rank;
  if (rank != 2 && rank != 3)
    return check.error("logits have rank ", rank,
                       "; expected 2 ([T, E]) or 3 ([B, S, E])");
  MOERT_RETURN_IF_ERROR(check.outRank(0, rank));
  MOERT_RETURN_IF_ERROR(check.outRank(1, rank));
  int64_t experts = staticDim(check.in(0), rank - 1);
  if (experts < 1)
    return check.error("logits are declared ", declaredShape(check.in(0)),
                       "; the expert count (last dimension) must be static "
                       "and positive");
  if (check.has(1) &&
      (check.in(1).rank != 1 || staticDim(check.in(1), 0) != experts))
    return check.error("bias is declared ", declaredShape(check.in(1)),
                       "; expected [", experts, "]");
  if (attrs->score_function() != fb::ScoreFunction::Softmax &&
      attrs->score_function() != fb::ScoreFunction::Sigmoid)
    return check.error("unknown score function ",
                       static_cast<int>(attrs->score_function()));
  int64_t k = attrs->top_k();
  if (k < 1 || k > experts)
    return check.error("top_k ", k, " is not in [1, ", experts, "]");
  for (int o = 0; o < 2; ++o)
    if (staticDim(check.out(o), rank - 1) != k)
      return check.error("output ", o, " is declared ",
                         declaredShape(check.out(o)), "; its last dimension ",
                         "must be top_k = ", k);
  int64_t groups = attrs->n_group(), kept = attrs->topk_group();
  if (groups < 1 || experts % groups != 0)
    return check.error("n_group ", groups, " does not divide the ", experts,
                       " experts");
  if (kept < 1 || kept > groups)
    return check.error("topk_group ", kept, " is not in [1, ", groups, "]");
  if (groups > 1 && experts / groups < 2)
    return check.error("groups of 1 expert; a group scores by its best two");
  if (groups > 1 && kept * (experts / groups) < k)
    return check.error("the ", kept, " kept groups of ", experts / groups,
                       " experts hold fewer than top_k = ", k);
  if (attrs->score_after_topk() &&
      (attrs->score_function() != fb::ScoreFunction::Softmax ||
       attrs->normalize()))
    return check.error("score_after_topk needs softmax scores and no "
                       "normalize");
  float scale = attrs->routed_scaling_factor();
  if (!(scale > 0) || !std::isfinite(scale))
    return check.error("routed_scaling_factor ", scale,
                       " must be positive and finite");
  if (attrs->capacity() < 0)
    return check.error("capacity ", attrs->capacity(),
                       " is negative (0 means unlimited)");
  float keptEpsilon = attrs->normalize_kept_epsilon();
  if (keptEpsilon != 0.0f &&
      (!(keptEpsilon > 0) || !std::isfinite(keptEpsilon) ||
       attrs->capacity() == 0 || attrs->normalize() || scale != 1.0f))
    return check.error("normalize_kept_epsilon ", keptEpsilon,
                       " must be positive and finite, with a capacity, ",
                       "without normalize and with scale 1");
  return absl::OkStatus();
}

} // namespace

void registerRouterOp(OpRegistry &r) {
  r.add(fb::OpKind::Router, makeOp("Router", 1, 2, validateRouter, routerKernel,
                                   fb::Attrs::RouterAttrs)
                                .withOptionalInputs(0b10)
                                .withOutputs(2));
}

} // namespace moert::detail
