//===- dispatch.cpp - Dispatch, Combine and the MoE registry entries ------===//
//
// The CPU kernels of the steps around the expert networks (the moe
// dialect's ops of the same names, dialects/moe/MoeSparseOps.td,
// docs/plan-format.md):
//
//   Router -> Dispatch -> Experts -> Combine      (+ SharedExpert)
//
// Dispatch sorts the token rows by expert (a stable counting sort), Combine
// sums each token's k weighted expert outputs in order. registerMoeOps adds
// the entries of all five steps.
//
//===----------------------------------------------------------------------===//

#include "kernels/moe_internal.h"

#include <algorithm>

namespace moert::detail {

void countLoads(const KernelContext &ctx, int64_t numExperts,
                const int64_t *load, int64_t dropped) {
  MoeCounters *counters = ctx.moeCounters();
  if (!counters)
    return;
  if (counters->expertLoad.size() != static_cast<size_t>(numExperts))
    counters->expertLoad.assign(numExperts, 0);
  for (int64_t e = 0; e < numExperts; ++e)
    counters->expertLoad[e] += static_cast<uint64_t>(load[e]);
  counters->dropped += static_cast<uint64_t>(dropped);
}

namespace {

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

absl::Status dispatchKernel(KernelContext &ctx) {
  const Tensor &tokens = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  int64_t E = ctx.attrs<fb::DispatchAttrs>()->num_experts();
  int64_t T = tokens.shape[0], H = tokens.shape[1], k = indices.shape[1];
  MOERT_RETURN_IF_ERROR(checkDispatchShapes(ctx));
  int64_t rows = T * k;
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, Shape{rows, H}));
  MOERT_ASSIGN_OR_RETURN(Tensor * offsetsOut, ctx.allocate(1, Shape{E + 1}));
  MOERT_ASSIGN_OR_RETURN(Tensor * sourceOut, ctx.allocate(2, Shape{rows}));
  const int64_t *idx = indices.as<const int64_t>();
  int64_t *offsets = offsetsOut->as<int64_t>();
  int64_t *source = sourceOut->as<int64_t>();

  // Counting sort by expert, stable in assignment order (t, then j).
  std::fill(offsets, offsets + E + 1, 0);
  for (int64_t a = 0; a < rows; ++a) {
    int64_t e = idx[a];
    if (e < -1 || e >= E)
      return ctx.error("expert index ", e, " at position ", a,
                       " is out of range [-1, ", E, ")");
    if (e >= 0)
      ++offsets[e + 1];
  }
  for (int64_t e = 0; e < E; ++e)
    offsets[e + 1] += offsets[e];
  int64_t *cursor = scratch<int64_t>(Scratch::Step, E);
  std::copy(offsets, offsets + E, cursor);
  for (int64_t a = 0; a < rows; ++a)
    if (idx[a] >= 0)
      source[cursor[idx[a]]++] = a;
  std::fill(source + offsets[E], source + rows, -1);

  // The row copies, in parallel; padding rows are zeroed.
  const float *x = tokens.as<const float>();
  float *y = out->as<float>();
  ctx.pool().parallelFor(rows, rowGrain(H), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (source[r] >= 0)
        std::copy(x + source[r] / k * H, x + (source[r] / k + 1) * H,
                  y + r * H);
      else
        std::fill(y + r * H, y + (r + 1) * H, 0.0f);
    }
  });
  return absl::OkStatus();
}

absl::Status validateDispatch(const StepCheck &check) {
  int64_t E = check.attrs<fb::DispatchAttrs>()->num_experts();
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(0, 2));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 2));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  MOERT_RETURN_IF_ERROR(check.outType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.outType(2, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.outRank(0, 2));
  MOERT_RETURN_IF_ERROR(check.outRank(1, 1));
  MOERT_RETURN_IF_ERROR(check.outRank(2, 1));
  if (E < 1)
    return check.error("num_experts ", E, " must be positive");
  // (Compared as dim - 1: E comes from the file and may be huge.)
  if (staticDim(check.out(1), 0) - 1 != E)
    return check.error("offsets are declared ", declaredShape(check.out(1)),
                       "; expected [", E + 1, "] (num_experts + 1)");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Combine
//===----------------------------------------------------------------------===//

absl::Status combineKernel(KernelContext &ctx) {
  const Tensor &outputs = ctx.in(0);
  const Tensor &sourceIn = ctx.in(1);
  const Tensor &weightsIn = ctx.in(2);
  int64_t N = outputs.shape[0], H = outputs.shape[1];
  int64_t T = weightsIn.shape[0], k = weightsIn.shape[1];
  MOERT_RETURN_IF_ERROR(checkCombineShapes(ctx));
  const float *passthrough = ctx.has(3) ? ctx.in(3).as<const float>() : nullptr;
  const int64_t *indices = ctx.has(4) ? ctx.in(4).as<const int64_t>() : nullptr;
  // The inverse of `source`: the row of each assignment, or -1.
  int64_t *row = scratch<int64_t>(Scratch::Step, T * k);
  std::fill(row, row + T * k, -1);
  const int64_t *source = sourceIn.as<const int64_t>();
  for (int64_t r = 0; r < N; ++r) {
    int64_t a = source[r];
    if (a == -1)
      continue;
    if (a < 0 || a >= T * k)
      return ctx.error("source[", r, "] = ", a, " is out of range [-1, ", T * k,
                       ")");
    if (row[a] >= 0)
      return ctx.error("source[", r, "] repeats assignment ", a, " of source[",
                       row[a], "]");
    row[a] = r;
  }
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, Shape{T, H}));
  const float *y = outputs.as<const float>();
  const float *w = weightsIn.as<const float>();
  float *o = out->as<float>();
  // Each token sums its k contributions in order: no races, deterministic.
  ctx.pool().parallelFor(T, rowGrain(k * H), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float *ot = o + t * H;
      std::fill(ot, ot + H, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        float wj = w[t * k + j];
        if (int64_t r = row[t * k + j]; r >= 0)
          for (int64_t h = 0; h < H; ++h)
            ot[h] += wj * y[r * H + h];
        if (indices && indices[t * k + j] == -1)
          for (int64_t h = 0; h < H; ++h)
            ot[h] += wj * passthrough[t * H + h];
      }
    }
  });
  return absl::OkStatus();
}

absl::Status validateCombine(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inType(2, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(3, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(4, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(0, 2));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  MOERT_RETURN_IF_ERROR(check.inRank(2, 2));
  MOERT_RETURN_IF_ERROR(check.inRank(3, 2));
  MOERT_RETURN_IF_ERROR(check.inRank(4, 2));
  if (check.has(3) != check.has(4))
    return check.error("passthrough and indices must be given together");
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, 2);
}

} // namespace

absl::Status checkDispatchShapes(const KernelContext &ctx) {
  const Shape &tokens = ctx.in(0).shape;
  const Shape &indices = ctx.in(1).shape;
  if (indices[0] != tokens[0])
    return ctx.error("indices of shape ", indices.str(),
                     " do not match tokens of shape ", tokens.str());
  return absl::OkStatus();
}

absl::Status checkCombineShapes(const KernelContext &ctx) {
  const Shape &outputs = ctx.in(0).shape;
  const Shape &weights = ctx.in(2).shape;
  int64_t N = outputs[0], H = outputs[1];
  int64_t T = weights[0], k = weights[1];
  if (ctx.in(1).shape != Shape{N})
    return ctx.error("source has shape ", ctx.in(1).shape.str(), "; expected [",
                     N, "] (a row of the expert outputs)");
  if (ctx.has(3) != ctx.has(4))
    return ctx.error("passthrough and indices must be given together");
  if (ctx.has(3) &&
      (ctx.in(3).shape != Shape{T, H} || ctx.in(4).shape != Shape{T, k}))
    return ctx.error("passthrough of shape ", ctx.in(3).shape.str(),
                     " and indices of shape ", ctx.in(4).shape.str(),
                     " do not match [", T, ", ", H, "] and [", T, ", ", k, "]");
  return absl::OkStatus();
}

void registerMoeOps(OpRegistry &r) {
  registerRouterOp(r);

  r.add(fb::OpKind::Dispatch, makeOp("Dispatch", 2, 2, validateDispatch,
                                     dispatchKernel, fb::Attrs::DispatchAttrs)
                                  .withOutputs(3));

  registerExpertOps(r);

  // expert_outputs, source, weights, passthrough?, indices?
  r.add(fb::OpKind::Combine,
        makeOp("Combine", 3, 5, validateCombine, combineKernel)
            .withOptionalInputs(0b11000));
}

} // namespace moert::detail
