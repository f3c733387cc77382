//===- SharedExperts.h - dense expert networks and shared experts -*- C++
//-*-===//
//
// Matchers of a dense SwiGLU network on every token (a projection, the
// SwiGLU MLP, a shared expert optionally gated by `sigmoid(x @ g)`), and the
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

/// A SwiGLU feed-forward network `(silu(x @ w1) * (x @ w3)) @ w2` on rows
/// `x`, with constant weights, all `[in, out]` or all `[out, in]`.
struct SwiGlu {
  mlir::Value input;
  moe::ConstantOp w1, w3, w2;
  moe::WeightLayout layout = moe::WeightLayout::InOut;

  /// The FFN size when the weights are f32 of the layout's shapes for hidden
  /// size `hidden`, else nullopt.
  std::optional<int64_t> getFfnSize(int64_t hidden);
};

/// Matches `output` as a SwiGLU MLP with `silu(a) = a * sigmoid(a)`;
/// returns why it is not one.
std::optional<std::string> matchSwiGlu(mlir::Value output, SwiGlu &ffn);

/// An expert's feed-forward network on rows `x`:
///   `act(x @ w1 + b1) @ w2 + b2` (relu, gelu, gelu_tanh, silu), or
///   `(act(x @ w1 + b1) * (x @ w3 + b3)) @ w2 + b2` (silu_glu, gelu_glu,
///   gelu_tanh_glu),
/// with constant weights all `[in, out]` or all `[out, in]`; every bias is
/// optional (a null constant), and `w3` is null for an ungated activation.
struct ExpertMlp {
  mlir::Value input;
  moe::ConstantOp w1, b1, w3, b3, w2, b2;
  moe::Activation activation = moe::Activation::SiluGlu;
  moe::WeightLayout layout = moe::WeightLayout::InOut;

  /// The FFN size when the weights and biases are f32 of the layout's
  /// shapes for hidden size `hidden`, else nullopt.
  std::optional<int64_t> getFfnSize(int64_t hidden);
};

/// Matches `output` as an ExpertMlp; returns why it is not one.
std::optional<std::string> matchExpertMlp(mlir::Value output, ExpertMlp &ffn);

/// A shared expert: a SwiGLU MLP on every token, optionally scaled by
/// `sigmoid(x @ gate)` with a `[H, 1]` gate (Qwen2-MoE's
/// `shared_expert_gate`).
struct SharedExpert {
  SwiGlu ffn;
  moe::ConstantOp gate;
};

/// Matches `value` as a shared expert on `tokens`: the rows the routed
/// experts see (`[T, H]`), or the model's `[B, S, H]` they were flattened
/// from. Sets `nearMiss` when `value` is a SwiGLU MLP (possibly gated) that
/// is not such a shared expert.
std::optional<SharedExpert>
matchSharedExpert(mlir::Value value, mlir::Value tokens,
                  std::optional<std::string> &nearMiss);

/// Rewrites the shared experts whose output is added to `combine`'s (the
/// routed experts of a layer just detected on the `[T, H]` `tokens`) into
/// `moe.shared_expert`, each validated on its own (`pass` names the
/// remarks); the original ops die with the layer's.
void rewriteSharedExperts(llvm::StringRef pass, moe::CombineOp combine,
                          mlir::Value tokens);

} // namespace moec

#endif // MOEC_PASSES_SHAREDEXPERTS_H
