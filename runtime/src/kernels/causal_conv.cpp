//===- causal_conv.cpp - The causal convolution that carries a state ------===//
//
// The CausalConv step (docs/plan-format.md, the moe.causal_conv op): per
// channel, each output is the kernel's dot product with the K - 1 inputs
// before it and itself, the state holding the inputs before the step's
// first. Continuous batching runs the same code per sequence segment
// (kernels/recurrent_state.h).
//
//===----------------------------------------------------------------------===//

#include "kernels/common.h"
#include "kernels/recurrent_state.h"

#include <algorithm>
#include <cstring>

namespace moert::detail {

namespace {

/// Runs rows [begin, end) of channel `c` from its state (K - 1 values),
/// then replaces the state by the last K - 1 inputs.
void runChannel(const CausalConvArgs &a, int64_t c, int64_t begin, int64_t end,
                float *state) {
  const int64_t history = a.kernel - 1, n = end - begin;
  const float *x = a.input + c * a.length + begin;
  const float *w = a.weight + c * a.kernel;
  float *out = a.output + c * a.length + begin;
  // Element j of the state followed by the segment's inputs.
  auto at = [&](int64_t j) { return j < history ? state[j] : x[j - history]; };
  for (int64_t t = 0; t < n; ++t) {
    // The kernel's columns in order, then the bias (as the graph it
    // replaces adds them).
    float y = at(t) * w[0];
    for (int64_t k = 1; k < a.kernel; ++k)
      y += at(t + k) * w[k];
    if (a.bias)
      y += a.bias[c];
    out[t] = a.silu ? y * sigmoid(y) : y;
  }
  // Ascending, element n + i is read before any write reaches it (n >= 1).
  for (int64_t i = 0; i < history && n > 0; ++i)
    state[i] = at(n + i);
}

absl::Status validateCausalConv(const StepCheck &check) {
  static constexpr int kRanks[] = {3, 2, 3, 1};
  for (int i = 0; i < 4; ++i) {
    if (i == 3 && !check.has(3))
      continue;
    MOERT_RETURN_IF_ERROR(check.inType(i, kFloatTypes));
    MOERT_RETURN_IF_ERROR(check.inRank(i, kRanks[i]));
  }
  for (int o = 0; o < 2; ++o) {
    MOERT_RETURN_IF_ERROR(check.outType(o, kFloatTypes));
    MOERT_RETURN_IF_ERROR(check.outRank(o, 3));
  }
  return absl::OkStatus();
}

absl::Status causalConvKernel(KernelContext &ctx) {
  const Tensor &x = ctx.in(0), &w = ctx.in(1), &state = ctx.in(2);
  const Shape &xs = x.shape, &ss = state.shape;
  int64_t channels = w.shape[0], kernel = w.shape[1];
  if (kernel < 1 || xs[1] != channels || ss[0] != xs[0] || ss[1] != channels ||
      ss[2] != kernel - 1)
    return ctx.error("input ", xs.str(), ", weight ", w.shape.str(),
                     " and state ", ss.str(),
                     " are not [B, C, L], [C, K] and [B, C, K - 1]");
  if (ctx.has(3) && ctx.in(3).shape[0] != channels)
    return ctx.error("bias ", ctx.in(3).shape.str(), " is not [", channels,
                     "]");
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, xs));
  MOERT_ASSIGN_OR_RETURN(Tensor * next, ctx.allocate(1, ss));
  float *states = next->as<float>();
  size_t stateSize = static_cast<size_t>(ss.numel());
  if (stateSize && states != state.as<const float>())
    std::memmove(states, state.as<const float>(), stateSize * sizeof(float));
  CausalConvArgs args;
  args.channels = channels;
  args.length = xs[2];
  args.kernel = kernel;
  args.silu = ctx.attrs<fb::CausalConvAttrs>()->silu();
  args.weight = w.as<const float>();
  args.bias = ctx.has(3) ? ctx.in(3).as<const float>() : nullptr;
  for (int64_t b = 0; b < xs[0]; ++b) {
    CausalConvArgs one = args;
    one.input = x.as<const float>() + b * channels * xs[2];
    one.output = out->as<float>() + b * channels * xs[2];
    computeCausalConv(ctx.pool(), one,
                      {{0, xs[2], states + b * channels * (kernel - 1)}});
  }
  return absl::OkStatus();
}

} // namespace

void computeCausalConv(ThreadPool &pool, const CausalConvArgs &a,
                       const std::vector<StateSegment> &segments) {
  if (a.channels == 0 || segments.empty())
    return;
  int64_t history = a.kernel - 1;
  pool.parallelFor(a.channels, rowGrain(a.length * a.kernel),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t c = begin; c < end; ++c)
                       for (const StateSegment &s : segments)
                         runChannel(a, c, s.begin, s.end,
                                    s.state + c * history);
                   });
}

void registerCausalConvOps(OpRegistry &r) {
  r.add(fb::OpKind::CausalConv,
        makeOp("CausalConv", 3, 4, validateCausalConv, causalConvKernel,
               fb::Attrs::CausalConvAttrs)
            .withOutputs(2));
}

} // namespace moert::detail
