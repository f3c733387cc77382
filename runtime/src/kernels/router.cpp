//===- router.cpp - The Router step ---------------------------------------===//
//
// The CPU kernel of Router (dialects/moe/MoeSparseOps.td,
// docs/plan-format.md): per token, scores (softmax or sigmoid), an optional
// selection bias, grouped selection, the top k and their weights; then, per
// sequence, capacity and the renormalisation over the kept choices. All but
// the scores is the logic the CUDA backend's router runs too
// (kernels/logic/routing.h), so that both backends route alike.
//
//===----------------------------------------------------------------------===//

#include "kernels/logic/routing.h"
#include "kernels/moe_internal.h"

#include <algorithm>

namespace moert::detail {
namespace {

using logic::RouterParams;

/// The CPU's scores of one token (logic::routeScores' policy): computed
/// once for all experts, vectorised.
struct StoredScores {
  const float *s; ///< [E]: step 1.
  const float *c; ///< [E]: step 2, the selection scores.
  float score(int64_t e) const { return s[e]; }
  float selection(int64_t e) const { return c[e]; }
  static float exp(float x) { return fastExp(x); }
};

/// Routes one token: logits `l` [E] -> weights `w` [k] and indices `idx`
/// [k]. `scores` and `biased` are [E] of the task's scratch.
void routeToken(const RouterParams &p, const float *l, const float *bias,
                float *scores, float *biased, const logic::RouterWork &work,
                float *w, int64_t *idx) {
  const int64_t E = p.experts;
  // 1. Scores (with after_topk the logits themselves; the softmax over the
  //    chosen k comes in step 5).
  const float *s = l;
  if (p.sigmoid && !p.afterTopK) {
    for (int64_t e = 0; e < E; ++e)
      scores[e] = sigmoid(l[e]);
    s = scores;
  } else if (!p.afterTopK) {
    softmaxRow(l, scores, E);
    s = scores;
  }
  // 2. Selection scores: the bias steers the choice, never the weights.
  const float *c = s;
  if (bias) {
    for (int64_t e = 0; e < E; ++e)
      biased[e] = s[e] + bias[e];
    c = biased;
  }
  // 3-7. Selection and weights, as the GPU's threads do them.
  logic::routeScores(p, StoredScores{s, c}, work, w, idx);
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
        float *scores = scratch<float>(Scratch::Task, 2 * E + p.groups + k);
        float *biased = scores + E;
        logic::RouterWork work;
        work.groupScores = biased + E;
        work.chosen = work.groupScores + p.groups;
        work.keptGroups = scratch<int64_t>(Scratch::Task, p.groups);
        work.keptMask =
            scratch<uint64_t>(Scratch::Task, logic::keptMaskWords(p.groups));
        for (int64_t t = begin; t < end; ++t)
          routeToken(p, l + t * E, bias, scores, biased, work, w + t * k,
                     idx + t * k);
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
    dropped += logic::dropOverCapacity(
        idx + b * length * k, length, k, capacity,
        [load](int64_t e) { return e >= 0 ? &load[e] : nullptr; });
    for (int64_t e = 0; e < E; ++e)
      total[e] += load[e];
  }
  // GShard renormalises over the choices capacity kept.
  if (keptEpsilon > 0)
    for (int64_t t = 0; t < tokens; ++t)
      logic::normalizeKept(w + t * k, idx + t * k, k, keptEpsilon);
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
