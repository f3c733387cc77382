//===- SharedExperts.h - dense expert networks and shared experts -*- C++
//-*-===//
//
// Matchers of a dense expert network on every token (a projection, the
// expert MLP, a shared expert optionally gated by `sigmoid(x @ g)`), and the
// rewrite of the shared experts added to a detected layer's combined output
// into moe.shared_expert, which every detector of routed experts shares.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_SHAREDEXPERTS_H
#define MOEC_PASSES_SHAREDEXPERTS_H

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Value.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace moec {

/// The float weight constant defining `value`, or null.
moe::ConstantOp getWeight(mlir::Value value);

/// A projection `x @ w` of rows `x`: a MatMul, or a Gemm without bias
/// (`transB` set when `w` is stored `[out, in]`, as torch's Linear exports).
struct Linear {
  mlir::Value input;
  /// The weight; null when it is not a float constant.
  moe::ConstantOp weight;
  bool transposed = false;
};

/// Matches `output` as a Linear; nullopt when it is neither op.
std::optional<Linear> matchLinear(mlir::Value output);

/// An expert's feed-forward network on rows `x`:
///   `act(x @ w1 + b1) @ w2 + b2` (relu, gelu, gelu_tanh, silu), or
///   `(act(x @ w1 + b1) * (x @ w3 + b3)) @ w2 + b2` (silu_glu, gelu_glu,
///   gelu_tanh_glu),
/// with constant weights all `[in, out]` or all `[out, in]`; every bias is
/// optional (a null constant), and `w3` is null for an ungated activation
/// or a fused gate/up projection `w1` of size 2F (`glu` set).
struct ExpertMlp {
  mlir::Value input;
  moe::ConstantOp w1, b1, w3, b3, w2, b2;
  moe::Activation activation = moe::Activation::SiluGlu;
  moe::WeightLayout layout = moe::WeightLayout::InOut;
  /// How gate and up are packed in a fused `w1`; nullopt without one.
  std::optional<moe::GluLayout> glu;
  /// The clamped_swiglu parameters (MatchFfn.h's GatedActivation).
  std::optional<float> alpha, beta, limit;

  /// The FFN size when the weights and biases are f32 of the layout's
  /// shapes for hidden size `hidden`, else nullopt.
  std::optional<int64_t> getFfnSize(int64_t hidden);
};

/// Matches `output` as an ExpertMlp; returns why it is not one.
std::optional<std::string> matchExpertMlp(mlir::Value output, ExpertMlp &ffn);

/// A shared expert: an expert network (any ExpertMlp, two projections or a
/// fused gate/up one) on every token, optionally scaled by
/// `sigmoid(x @ gate)` with a `[H, 1]` gate (Qwen2-MoE's
/// `shared_expert_gate`).
struct SharedExpert {
  ExpertMlp ffn;
  moe::ConstantOp gate;
};

/// Matches `value` as a shared expert on the rows of `tokens` (`[T, H]`):
/// its input holds the same elements in the same order with a last
/// dimension H (the tokens, the model's `[B, S, H]` they were flattened
/// from, or any reshape of either). Sets `nearMiss` when `value` is an
/// expert network (possibly gated) that is not such a shared expert.
std::optional<SharedExpert>
matchSharedExpert(mlir::Value value, mlir::Value tokens,
                  std::optional<std::string> &nearMiss);

/// Rewrites the shared experts whose output is added to `combine`'s (the
/// routed experts of a layer just detected on the `[T, H]` `tokens`), to
/// it or to a reshape of it, either operand first, into
/// `moe.shared_expert`, each validated on its own (`pass` names the
/// remarks); the original ops die with the layer's.
void rewriteSharedExperts(llvm::StringRef pass, moe::CombineOp combine,
                          mlir::Value tokens);

} // namespace moec

#endif // MOEC_PASSES_SHAREDEXPERTS_H
