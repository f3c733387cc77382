//===- MatchFfn.h - the activations of expert networks ----------*- C++ -*-===//
//
// Matchers of what an expert network computes between its two projections,
// in the forms exporters write it, for the detectors whose experts use a
// fused gate/up projection: SwiGLU (`silu(g) * u`) and GPT-OSS's clamped
// SwiGLU, on the two concatenated halves or the even/odd columns of the
// fused projection.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_MATCHFFN_H
#define MOEC_PASSES_MATCHFFN_H

#include "passes/MatchSupport.h"

namespace moec {

/// A gated activation `act(g) * u` whose g and u are the two parts of one
/// fused `[..., 2F]` projection `fused`, packed as `glu` says; or, when not
/// `gated`, `act(h)` of a `[..., F]` projection `fused`.
struct GatedActivation {
  mlir::Value fused;
  bool gated = true;
  moe::Activation activation = moe::Activation::SiluGlu;
  moe::GluLayout glu = moe::GluLayout::Concatenated;
  std::optional<float> alpha, beta, limit;
};

/// The fused `[..., 2F]` projection whose even columns (along the last
/// axis) are `gate` and whose odd ones are `up`: two Slices with step 2
/// starting at 0 and 1. Null when they are not.
inline mlir::Value getInterleavedGlu(mlir::Value gate, mlir::Value up) {
  using namespace mlir;
  std::optional<int64_t> width = getGluHalfWidth(gate, up);
  if (!width)
    return nullptr;
  int64_t rank = getShape(gate).size(), ffn = *width;
  auto isHalf = [&](Value half, int64_t start) -> Value {
    auto slice = getLastAxisSlice(half, rank, start, /*step=*/2);
    // Any end at or past 2F takes every second column to the end.
    if (!slice || slice->second < 2 * ffn)
      return nullptr;
    return slice->first;
  };
  Value fused = isHalf(gate, 0);
  if (!fused || isHalf(up, 1) != fused || getShape(fused).back() != 2 * ffn)
    return nullptr;
  return fused;
}

/// Matches `a = g' * sigmoid(alpha * g') * (u' + beta)` with
/// `g' = min(g, limit)` and `u' = clamp(u, -limit, limit)` (GPT-OSS; the
/// runtime's `clamped_swiglu`), any operand order, setting `parts` to
/// {g, u}; returns why it is not one.
inline std::optional<std::string>
matchClampedSwiglu(mlir::Value a, GatedActivation &activation,
                   std::pair<mlir::Value, mlir::Value> &parts) {
  using namespace mlir;
  auto product = a.getDefiningOp<moe::MulOp>();
  if (!product)
    return std::string("the activation is not a product of gate and up terms");
  // One factor is `u' + beta`, the other `g' * sigmoid(alpha * g')`.
  for (auto [upTerm, gateTerm] :
       {std::pair(product.getLhs(), product.getRhs()),
        std::pair(product.getRhs(), product.getLhs())}) {
    auto upShift = upTerm.getDefiningOp<moe::AddOp>();
    auto gated = gateTerm.getDefiningOp<moe::MulOp>();
    if (!upShift || !gated)
      continue;
    for (auto [clippedUp, beta] :
         {std::pair(upShift.getLhs(), upShift.getRhs()),
          std::pair(upShift.getRhs(), upShift.getLhs())}) {
      std::optional<double> betaValue = getScalarFloat(beta);
      auto upClip = clippedUp.getDefiningOp<moe::ClipOp>();
      if (!betaValue || !upClip)
        continue;
      for (auto [clippedGate, sigmoidValue] :
           {std::pair(gated.getLhs(), gated.getRhs()),
            std::pair(gated.getRhs(), gated.getLhs())}) {
        auto sigmoid = sigmoidValue.getDefiningOp<moe::SigmoidOp>();
        auto scaled =
            sigmoid ? sigmoid.getInput().getDefiningOp<moe::MulOp>() : nullptr;
        Value alpha = scaled ? otherOperand(scaled, clippedGate) : Value();
        std::optional<double> alphaValue = getScalarFloat(alpha);
        if (!alphaValue)
          continue;
        auto gateClip = clippedGate.getDefiningOp<moe::ClipOp>();
        if (!gateClip || gateClip.getMin() || !gateClip.getMax())
          return std::string("the gate is not clamped from above only");
        std::optional<double> limit = getScalarFloat(gateClip.getMax());
        std::optional<double> upMin = getScalarFloat(upClip.getMin());
        std::optional<double> upMax = getScalarFloat(upClip.getMax());
        if (!limit || upMin != -*limit || upMax != *limit)
          return std::string("the up projection is not clamped to [-limit, "
                             "limit] with the gate's limit");
        activation.activation = moe::Activation::ClampedSwiglu;
        activation.alpha = *alphaValue;
        activation.beta = *betaValue;
        activation.limit = *limit;
        parts = {gateClip.getInput(), upClip.getInput()};
        return std::nullopt;
      }
      return std::string("the gated term is not gate * sigmoid(alpha * gate) "
                         "with a constant alpha");
    }
  }
  return std::string("the activation is not (clip(up) + beta) times the "
                     "gated term");
}

/// Matches `a` (`[..., F]`) as a gated activation of one fused projection:
/// `silu(g) * u` or a clamped SwiGLU, with g and u its concatenated halves
/// or its even and odd columns. Returns why it is not one.
inline std::optional<std::string>
matchGatedActivation(mlir::Value a, GatedActivation &activation) {
  activation = GatedActivation();
  std::pair<mlir::Value, mlir::Value> clamped;
  std::optional<std::pair<mlir::Value, mlir::Value>> parts;
  std::optional<std::string> clampedFailure =
      matchClampedSwiglu(a, activation, clamped);
  if (!clampedFailure)
    parts = clamped;
  else
    parts = matchSiluGlu(a);
  if (!parts) {
    // A product of the clamped SwiGLU's shape that differs in a detail
    // (a clamp, alpha) says which; anything else gets the general reason.
    if (!llvm::StringRef(*clampedFailure).starts_with("the activation is not"))
      return clampedFailure;
    return std::string("the down projection's input is not silu(gate) * up "
                       "or a clamped SwiGLU");
  }
  if (mlir::Value fused = getConcatenatedGlu(parts->first, parts->second)) {
    activation.fused = fused;
    activation.glu = moe::GluLayout::Concatenated;
    return std::nullopt;
  }
  if (mlir::Value fused = getInterleavedGlu(parts->first, parts->second)) {
    activation.fused = fused;
    activation.glu = moe::GluLayout::Interleaved;
    return std::nullopt;
  }
  return std::string("gate and up are not the two halves of one fused "
                     "projection of size 2F");
}

/// Matches `a` as `act(h)` of one projection h: ReLU, ReLU² (`relu(h) *
/// relu(h)` or `relu(h) ^ 2`), GELU (exact or the tanh approximation) or
/// SiLU (`h * sigmoid(h)`, any operand order).
/// Returns whether it is one.
inline bool matchPlainActivation(mlir::Value a, GatedActivation &activation) {
  activation = GatedActivation();
  activation.gated = false;
  if (auto relu = a.getDefiningOp<moe::ReluOp>()) {
    activation.fused = relu.getInput();
    activation.activation = moe::Activation::Relu;
    return true;
  }
  if (auto gelu = a.getDefiningOp<moe::GeluOp>()) {
    if (gelu.getApproximate() != "none" && gelu.getApproximate() != "tanh")
      return false;
    activation.fused = gelu.getInput();
    activation.activation = gelu.getApproximate() == "tanh"
                                ? moe::Activation::GeluTanh
                                : moe::Activation::Gelu;
    return true;
  }
  // ReLU² (Primer): relu(h) * relu(h), or relu(h) ^ 2.
  mlir::Value squared;
  if (auto square = a.getDefiningOp<moe::MulOp>();
      square && square.getLhs() == square.getRhs())
    squared = square.getLhs();
  else if (auto pow = a.getDefiningOp<moe::PowOp>();
           pow && getScalarFloat(pow.getExponent()) == 2.0)
    squared = pow.getBase();
  if (auto relu = squared ? squared.getDefiningOp<moe::ReluOp>() : nullptr) {
    activation.fused = relu.getInput();
    activation.activation = moe::Activation::ReluSquared;
    return true;
  }
  auto silu = a.getDefiningOp<moe::MulOp>();
  if (!silu)
    return false;
  for (auto [h, sigmoidValue] : {std::pair(silu.getLhs(), silu.getRhs()),
                                 std::pair(silu.getRhs(), silu.getLhs())}) {
    auto sigmoid = sigmoidValue.getDefiningOp<moe::SigmoidOp>();
    if (sigmoid && sigmoid.getInput() == h) {
      activation.fused = h;
      activation.activation = moe::Activation::Silu;
      return true;
    }
  }
  return false;
}

/// The gated activation `act(g) * u` whose gate function is the ungated
/// `act` (silu -> silu_glu, gelu -> gelu_glu, gelu_tanh -> gelu_tanh_glu);
/// nullopt for the others, which the runtime has no gated form of.
inline std::optional<moe::Activation> getGatedActivation(moe::Activation act) {
  switch (act) {
  case moe::Activation::Silu:
    return moe::Activation::SiluGlu;
  case moe::Activation::Gelu:
    return moe::Activation::GeluGlu;
  case moe::Activation::GeluTanh:
    return moe::Activation::GeluTanhGlu;
  default:
    return std::nullopt;
  }
}

/// Sets `ffn`'s activation and its attributes to `activation`'s.
inline void setActivation(ExpertFfn &ffn, const GatedActivation &activation) {
  ffn.activation = activation.activation;
  ffn.glu = activation.gated ? std::optional(activation.glu) : std::nullopt;
  ffn.alpha = activation.alpha;
  ffn.beta = activation.beta;
  ffn.limit = activation.limit;
}

} // namespace moec

#endif // MOEC_PASSES_MATCHFFN_H
