//===- linear_attention.cpp - The gated delta rule ------------------------===//
//
// The GatedDeltaRule step (docs/plan-format.md, the moe.gated_delta_rule op):
// linear attention whose [Dk, Dv] state per value head decays, is corrected
// toward each token's value by the delta rule, and is read by the query.
// The tokens of a head form a sequential recurrence; the batch's value heads
// are independent, one task each. The new state is computed in place in the
// output after a copy of the old one. Continuous batching runs the same
// recurrence per sequence segment (kernels/recurrent_state.h).
//
//===----------------------------------------------------------------------===//

#include "kernels/common.h"
#include "kernels/recurrent_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace moert::detail {

namespace {

/// Multiply-adds per task below which tasks are grouped.
constexpr int64_t kTaskWork = 1 << 15;

/// Runs the recurrence of value head `h` over the rows of `segment`, from
/// and into its state. `retrieved` has valueDim elements.
void runHead(const GatedDeltaArgs &a, const StateSegment &segment, int64_t h,
             float *retrieved) {
  const int64_t dk = a.keyDim, dv = a.valueDim;
  const int64_t qh = h / (a.valueHeads / a.queryHeads);
  const int64_t kh = h / (a.valueHeads / a.keyHeads);
  float *s = segment.state + h * dk * dv;
  for (int64_t row = segment.begin; row < segment.end; ++row) {
    const float *q = a.query + (row * a.queryHeads + qh) * dk;
    const float *k = a.key + (row * a.keyHeads + kh) * dk;
    const float *v = a.value + (row * a.valueHeads + h) * dv;
    float *out = a.output + (row * a.valueHeads + h) * dv;
    float factor = std::exp(a.decay[row * a.valueHeads + h]);
    float beta = a.beta[row * a.valueHeads + h];
    // S = exp(g) S, and S^T k of the decayed state in the same pass.
    std::fill_n(retrieved, dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float *si = s + i * dv;
      float ki = k[i];
      for (int64_t j = 0; j < dv; ++j) {
        si[j] *= factor;
        retrieved[j] += si[j] * ki;
      }
    }
    // delta = beta (v - S^T k); S += k delta^T; out = scale S^T q.
    for (int64_t j = 0; j < dv; ++j) {
      retrieved[j] = beta * (v[j] - retrieved[j]);
      out[j] = 0.0f;
    }
    for (int64_t i = 0; i < dk; ++i) {
      float *si = s + i * dv;
      float ki = k[i], qi = q[i];
      for (int64_t j = 0; j < dv; ++j) {
        si[j] += ki * retrieved[j];
        out[j] += si[j] * qi;
      }
    }
    for (int64_t j = 0; j < dv; ++j)
      out[j] *= a.scale;
  }
}

} // namespace

void computeGatedDeltaRule(ThreadPool &pool, const GatedDeltaArgs &a,
                           const std::vector<StateSegment> &segments) {
  // One task per (segment, value head).
  int64_t tasks = static_cast<int64_t>(segments.size()) * a.valueHeads;
  if (tasks == 0)
    return;
  int64_t rows =
      std::max<int64_t>(1, a.tokens / static_cast<int64_t>(segments.size()));
  int64_t work = std::max<int64_t>(1, rows * a.keyDim * a.valueDim * 3);
  pool.parallelFor(tasks, std::max<int64_t>(1, kTaskWork / work),
                   [&](int64_t begin, int64_t end) {
                     std::vector<float> retrieved(
                         static_cast<size_t>(a.valueDim));
                     for (int64_t task = begin; task < end; ++task)
                       runHead(a, segments[task / a.valueHeads],
                               task % a.valueHeads, retrieved.data());
                   });
}

namespace {

absl::Status validateGatedDeltaRule(const StepCheck &check) {
  static constexpr int kRanks[] = {4, 4, 4, 4, 3, 3};
  for (int i = 0; i < 6; ++i) {
    MOERT_RETURN_IF_ERROR(check.inType(i, kFloatTypes));
    MOERT_RETURN_IF_ERROR(check.inRank(i, kRanks[i]));
  }
  float scale = check.attrs<fb::GatedDeltaRuleAttrs>()->scale();
  if (!std::isfinite(scale))
    return check.error("scale ", scale, " is not finite");
  for (int o = 0; o < 2; ++o) {
    MOERT_RETURN_IF_ERROR(check.outType(o, kFloatTypes));
    MOERT_RETURN_IF_ERROR(check.outRank(o, 4));
  }
  return absl::OkStatus();
}

absl::Status gatedDeltaRuleKernel(KernelContext &ctx) {
  const Tensor &q = ctx.in(0), &k = ctx.in(1), &v = ctx.in(2),
               &state = ctx.in(3), &decay = ctx.in(4), &beta = ctx.in(5);
  const Shape &qs = q.shape, &ks = k.shape, &vs = v.shape, &ss = state.shape;
  for (const Tensor *t : {&k, &v, &decay, &beta})
    if (t->shape[0] != qs[0] || t->shape[1] != qs[1])
      return ctx.error(t->shape.str(), " and query ", qs.str(),
                       " differ in batch or tokens");
  if (ks[3] != qs[3])
    return ctx.error("key ", ks.str(), " and query ", qs.str(),
                     " differ in head size");
  if (ss[0] != qs[0] || ss[1] != vs[2] || ss[2] != qs[3] || ss[3] != vs[3])
    return ctx.error("state ", ss.str(), " is not [", qs[0], ", ", vs[2], ", ",
                     qs[3], ", ", vs[3],
                     "] (batch, value heads, key size, value size)");
  for (const Tensor *t : {&decay, &beta})
    if (t->shape[2] != vs[2])
      return ctx.error(t->shape.str(), " does not have one value per value ",
                       "head (", vs[2], ")");
  for (int64_t heads : {qs[2], ks[2]})
    if (heads == 0 || vs[2] % heads != 0)
      return ctx.error("query or key heads ", heads,
                       " do not divide the value heads ", vs[2]);
  GatedDeltaArgs args;
  args.tokens = qs[0] * qs[1];
  args.queryHeads = qs[2];
  args.keyHeads = ks[2];
  args.valueHeads = vs[2];
  args.keyDim = qs[3];
  args.valueDim = vs[3];
  args.scale = ctx.attrs<fb::GatedDeltaRuleAttrs>()->scale();
  args.query = q.as<const float>();
  args.key = k.as<const float>();
  args.value = v.as<const float>();
  args.decay = decay.as<const float>();
  args.beta = beta.as<const float>();
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, vs));
  MOERT_ASSIGN_OR_RETURN(Tensor * next, ctx.allocate(1, ss));
  args.output = out->as<float>();
  float *states = next->as<float>();
  size_t stateSize = static_cast<size_t>(ss.numel());
  const float *initial = state.as<const float>();
  if (stateSize && states != initial)
    std::memmove(states, initial, stateSize * sizeof(float));
  // Each batch element is a segment of S rows with its own state.
  std::vector<StateSegment> segments;
  for (int64_t b = 0; b < qs[0] && qs[1] > 0; ++b)
    segments.push_back(
        {b * qs[1], (b + 1) * qs[1], states + b * vs[2] * qs[3] * vs[3]});
  computeGatedDeltaRule(ctx.pool(), args, segments);
  return absl::OkStatus();
}

} // namespace

void registerLinearAttentionOps(OpRegistry &r) {
  r.add(fb::OpKind::GatedDeltaRule,
        makeOp("GatedDeltaRule", 6, 6, validateGatedDeltaRule,
               gatedDeltaRuleKernel, fb::Attrs::GatedDeltaRuleAttrs)
            .withOutputs(2));
}

} // namespace moert::detail
