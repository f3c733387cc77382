//===- moe.h - Checks shared by the MoE steps' backends ---------*- C++ -*-===//
//
// The run-time shape checks and size derivations of Router, Dispatch,
// Combine, Experts and SharedExpert that the CPU kernels (router.cpp,
// dispatch.cpp, experts.cpp) and their GPU versions (cuda/moe_routing.cpp,
// cuda/experts.cpp) share, so that both backends reject the same tensors
// with the same message. Defined in dispatch.cpp and experts.cpp, except the
// Router's template.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_MOE_H
#define MOERT_SRC_KERNELS_MOE_H

#include "kernels/common.h"

namespace moert::detail {

/// Reads the Router step's attributes and its expert count (the logits' last
/// dimension) into `p`, and checks the logits against top_k and n_group and
/// the bias (input 1) against the expert count. Returns the shape of both
/// outputs: the logits' with top_k experts. `Params` is the CPU kernel's or
/// the GPU's copy of the same fields (the GPU's is plain, for its kernels).
template <typename Params>
absl::StatusOr<Shape> readRouter(const KernelContext &ctx, Params &p) {
  const auto *attrs = ctx.attrs<fb::RouterAttrs>();
  const Shape &logits = ctx.in(0).shape;
  int rank = logits.rank;
  p.experts = logits[rank - 1];
  p.topK = attrs->top_k();
  p.sigmoid = attrs->score_function() == fb::ScoreFunction::Sigmoid;
  p.afterTopK = attrs->score_after_topk();
  p.normalize = attrs->normalize();
  p.scale = attrs->routed_scaling_factor();
  p.groups = attrs->n_group();
  p.keptGroups = attrs->topk_group();
  if (p.topK > p.experts || p.experts % p.groups != 0)
    return ctx.error("logits of shape ", logits.str(), " do not fit top_k ",
                     p.topK, " and ", p.groups, " groups");
  if (ctx.has(1) && ctx.in(1).shape != Shape{p.experts})
    return ctx.error("bias has shape ", ctx.in(1).shape.str(), "; expected [",
                     p.experts, "]");
  Shape out = logits;
  out[rank - 1] = p.topK;
  return out;
}

/// Dispatch's indices have a row per token.
absl::Status checkDispatchShapes(const KernelContext &ctx);

/// Combine's source has a row per expert output row, and the optional
/// passthrough and indices come together, shaped [T, H] and [T, k].
absl::Status checkCombineShapes(const KernelContext &ctx);

/// Sizes of an expert network, derived from its weights.
struct FfnSizes {
  int64_t experts = 1; ///< E; 1 for a shared expert.
  int64_t hidden = 0;  ///< H.
  int64_t inter = 0;   ///< F.
  int64_t w1Out = 0;   ///< F, or 2F when w1 holds the gate and up halves.
};

/// The sizes of an expert network from the dims of its w1 (`lead` is 1 when
/// they start with the expert dimension), whether it has a w3, and the
/// tokens' row size `hidden`. Checks nothing: resolveFfn in experts.cpp checks
/// the weights against them.
FfnSizes ffnSizes(const fb::FfnAttrs &attrs, const int64_t *w1, int lead,
                  bool hasW3, int64_t hidden);

/// Experts' offsets have shape [E + 1] for its `experts` experts.
absl::Status checkExpertOffsets(const KernelContext &ctx, const Shape &offsets,
                                int64_t experts);

/// SharedExpert's gate holds `hidden` elements as a vector, a column or a
/// row.
absl::Status checkSharedGate(const KernelContext &ctx, const Shape &gate,
                             int64_t hidden);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_MOE_H
