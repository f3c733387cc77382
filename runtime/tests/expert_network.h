//===- expert_network.h - Expert networks and their f64 reference -*- C++
//-*-===//
//
// An expert network (attributes and weights in either layout) with a naive
// double-precision reference written from the moe dialect's semantics, and
// the check that runs an Experts step over given rows per expert against
// it: shared by the kernel tests of f32 (moe_test.cpp) and int8
// (int8_test.cpp) expert weights.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TESTS_EXPERT_NETWORK_H
#define MOERT_TESTS_EXPERT_NETWORK_H

#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace moert::testing {

/// x [K] quantized to int8 per block of `block` columns as onnxruntime's
/// MLAS does for accuracy_level 4 (its QuantizeARow): per block scale =
/// amax / 127, inverse 127 / amax (0 for an all-zero block) and code =
/// x * inverse rounded half to even, all in f32. Codes into `codes` [K],
/// scales into `scales` [ceil(K / block)].
inline void quantizeLikeOnnxruntime(const float *x, int64_t K, int64_t block,
                                    std::vector<int> &codes,
                                    std::vector<float> &scales) {
  codes.assign(K, 0);
  scales.assign((K + block - 1) / block, 0.0f);
  for (int64_t b = 0; b * block < K; ++b) {
    int64_t end = std::min(K, (b + 1) * block);
    float amax = 0;
    for (int64_t k = b * block; k < end; ++k)
      amax = std::max(amax, std::fabs(x[k]));
    scales[b] = amax / 127.0f;
    float inverse = amax == 0.0f ? 0.0f : 127.0f / amax;
    for (int64_t k = b * block; k < end; ++k)
      codes[k] = int(std::nearbyint(x[k] * inverse));
  }
}

/// x [K] as the int8 products see it: each code times its block's scale.
inline std::vector<double> dequantizedInt8(const float *x, int64_t K,
                                           int64_t block) {
  std::vector<int> codes;
  std::vector<float> scales;
  quantizeLikeOnnxruntime(x, K, block, codes, scales);
  std::vector<double> out(K);
  for (int64_t k = 0; k < K; ++k)
    out[k] = double(codes[k]) * scales[k / block];
  return out;
}

/// An expert network: attributes and weights in the chosen layout.
struct Network {
  fb::Activation activation = fb::Activation::SiluGlu;
  bool inOut = false;
  fb::GluLayout glu = fb::GluLayout::None;
  bool separateUp = true; ///< w3 (gated only; else a fused w1 with `glu`).
  bool biases = false;
  float alpha = 1, beta = 0, limit = 0;
  int64_t E = 1, H = 0, F = 0;
  std::vector<float> w1, b1, w3, b3, w2, b2;
  /// After quantize(): the matrices' int8 values and [E, out] scales (the
  /// f32 matrices then hold the dequantized values, so `apply` is the int8
  /// network's reference).
  bool int8 = false;
  std::vector<int8_t> q1, q3, q2;
  std::vector<float> s1, s3, s2;
  /// Nonzero: `apply` quantizes each matrix's input to int8 in blocks of
  /// this many columns (quantizeLikeOnnxruntime, as onnxruntime's
  /// accuracy_level 4), and multiplies the weights by its dequantized codes.
  int64_t int8Block = 0;

  bool gated() const {
    return activation >= fb::Activation::SiluGlu &&
           activation <= fb::Activation::ClampedSwiglu;
  }
  bool fused() const { return gated() && !separateUp; }
  int64_t w1Out() const { return fused() ? 2 * F : F; }

  void init(int64_t experts, int64_t hidden, int64_t inter, uint32_t seed) {
    E = experts;
    H = hidden;
    F = inter;
    w1 = randomFloats(E * H * w1Out(), seed);
    w2 = randomFloats(E * F * H, seed + 1);
    if (gated() && separateUp)
      w3 = randomFloats(E * H * F, seed + 2);
    // Scaled like trained weights (1/sqrt(fan-in)), so that outputs stay
    // near 1 and the float GEMMs' rounding within the tolerance.
    for (auto [w, fanIn] : {std::pair{&w1, H}, {&w3, H}, {&w2, F}})
      for (float &v : *w)
        v /= std::sqrt(static_cast<float>(fanIn));
    if (biases) {
      b1 = randomFloats(E * w1Out(), seed + 3);
      b2 = randomFloats(E * H, seed + 4);
      if (!w3.empty())
        b3 = randomFloats(E * F, seed + 5);
    }
  }

  fb::AttrsUnion attributes() const {
    fb::FfnAttrsT a;
    a.activation = activation;
    a.weight_layout = inOut ? fb::WeightLayout::InOut : fb::WeightLayout::OutIn;
    a.glu_layout = glu;
    a.alpha = alpha;
    a.beta = beta;
    a.limit = limit;
    return attrs(a);
  }

  /// Quantizes w1, w3 and w2 per expert and output channel as the plan
  /// writer does (`moec compile --weight-dtype int8`): scale = max |w| /
  /// 127, q = w / scale rounded to nearest even, clamped to [-127, 127].
  void quantize() {
    int8 = true;
    auto one = [&](std::vector<float> &w, int64_t in, int64_t out,
                   std::vector<int8_t> &q, std::vector<float> &scales) {
      if (w.empty())
        return;
      q.assign(w.size(), 0);
      scales.assign(E * out, 0.0f);
      auto index = [&](int64_t e, int64_t i, int64_t o) {
        return inOut ? e * in * out + i * out + o : e * in * out + o * in + i;
      };
      for (int64_t e = 0; e < E; ++e)
        for (int64_t o = 0; o < out; ++o) {
          float maxAbs = 0;
          for (int64_t i = 0; i < in; ++i)
            maxAbs = std::max(maxAbs, std::fabs(w[index(e, i, o)]));
          float scale = maxAbs / 127.0f;
          scales[e * out + o] = scale;
          for (int64_t i = 0; i < in; ++i) {
            float &v = w[index(e, i, o)];
            float r = scale == 0 ? 0.0f : std::nearbyint(v / scale);
            auto value = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
            q[index(e, i, o)] = value;
            v = value * scale;
          }
        }
    };
    one(w1, H, w1Out(), q1, s1);
    one(w3, H, F, q3, s3);
    one(w2, F, H, q2, s2);
  }

  /// Weight `w` of expert e as a matrix with `in` inputs and `out` outputs.
  static double at(const std::vector<float> &w, bool inOut, int64_t e,
                   int64_t in, int64_t out, int64_t i, int64_t o) {
    return inOut ? w[e * in * out + i * out + o] : w[e * in * out + o * in + i];
  }

  std::vector<int64_t> matrixShape(int64_t in, int64_t out, bool lead) const {
    return ffnMatrixShape(E, lead, inOut, in, out);
  }
  std::vector<int64_t> vectorShape(int64_t size, bool lead) const {
    return ffnVectorShape(E, lead, size);
  }

  /// w1, b1, w3, b3, w2, b2 as step inputs (absent ones omitted); int8
  /// matrices, then their scales s1, s3, s2, after quantize().
  std::vector<std::optional<Value>> weightInputs(bool lead) const {
    auto opt = [](const std::vector<float> &v, std::vector<int64_t> shape) {
      return v.empty() ? std::optional<Value>() : f32(std::move(shape), v);
    };
    auto matrix = [&](const std::vector<float> &w, const std::vector<int8_t> &q,
                      std::vector<int64_t> shape) {
      if (!int8)
        return opt(w, std::move(shape));
      return q.empty() ? std::optional<Value>()
                       : Value::of(DType::I8, std::move(shape), q);
    };
    std::vector<std::optional<Value>> inputs = {
        matrix(w1, q1, matrixShape(H, w1Out(), lead)),
        opt(b1, vectorShape(w1Out(), lead)),
        matrix(w3, q3, matrixShape(H, F, lead)),
        opt(b3, vectorShape(F, lead)),
        matrix(w2, q2, matrixShape(F, H, lead)),
        opt(b2, vectorShape(H, lead))};
    if (int8)
      for (auto [scales, out] : {std::pair{&s1, w1Out()}, {&s3, F}, {&s2, H}})
        inputs.push_back(opt(*scales, vectorShape(out, lead)));
    return inputs;
  }

  static double act(fb::Activation a, double x) {
    switch (a) {
    case fb::Activation::Relu:
      return std::max(x, 0.0);
    case fb::Activation::ReluSquared:
      return std::max(x, 0.0) * std::max(x, 0.0);
    case fb::Activation::Gelu:
    case fb::Activation::GeluGlu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case fb::Activation::GeluTanh:
    case fb::Activation::GeluTanhGlu:
      return 0.5 * x *
             (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case fb::Activation::Silu:
    case fb::Activation::SiluGlu:
      return x / (1 + std::exp(-x));
    default:
      return x;
    }
  }

  /// The input of a matrix: x, or with int8Block its int8 codes times
  /// their block scales (exact in f64).
  std::vector<double> matrixInput(const float *x, int64_t K) const {
    std::vector<double> in(x, x + K);
    if (int8Block)
      in = dequantizedInt8(x, K, int8Block);
    return in;
  }

  /// Expert e's output for one row.
  std::vector<double> apply(int64_t e, const float *xRow) const {
    std::vector<double> h(w1Out()), u(F), a(F), y(H);
    const std::vector<double> x = matrixInput(xRow, H);
    for (int64_t o = 0; o < w1Out(); ++o) {
      double sum = b1.empty() ? 0 : b1[e * w1Out() + o];
      for (int64_t i = 0; i < H; ++i)
        sum += x[i] * at(w1, inOut, e, H, w1Out(), i, o);
      h[o] = sum;
    }
    for (int64_t f = 0; f < F; ++f) {
      if (!gated()) {
        a[f] = act(activation, h[f]);
        continue;
      }
      double g, up;
      if (!fused()) {
        g = h[f];
        up = b3.empty() ? 0 : b3[e * F + f];
        for (int64_t i = 0; i < H; ++i)
          up += x[i] * at(w3, inOut, e, H, F, i, f);
      } else if (glu == fb::GluLayout::Interleaved) {
        g = h[2 * f];
        up = h[2 * f + 1];
      } else {
        g = h[f];
        up = h[F + f];
      }
      if (activation == fb::Activation::ClampedSwiglu) {
        double lim = limit > 0 ? limit : INFINITY;
        g = std::min(g, lim);
        up = std::clamp(up, -lim, lim);
        a[f] = g / (1 + std::exp(-alpha * g)) * (up + beta);
      } else {
        a[f] = act(activation, g) * up;
      }
    }
    if (int8Block) {
      // The kernels quantize the f32 activations.
      std::vector<float> rounded(a.begin(), a.end());
      a = matrixInput(rounded.data(), F);
    }
    for (int64_t o = 0; o < H; ++o) {
      double sum = b2.empty() ? 0 : b2[e * H + o];
      for (int64_t f = 0; f < F; ++f)
        sum += a[f] * at(w2, inOut, e, F, H, f, o);
      y[o] = sum;
    }
    return y;
  }
};

/// The graph tensors of a one-step Experts plan: inputs "x" [N, H] and
/// "offsets" [E + 1], output "y" [N, H], in the arena one after another.
struct ExpertsSignature {
  int32_t tokens, offsets, out;
};
inline ExpertsSignature addExpertsSignature(ScheduleBuilder &s, int64_t N,
                                            int64_t H, int64_t E) {
  ExpertsSignature sig;
  sig.tokens = s.addTensor("x", DType::F32, {N, H});
  sig.offsets = s.addTensor("offsets", DType::I64, {E + 1});
  sig.out = s.addTensor("y", DType::F32, {N, H});
  s.addInput(sig.tokens);
  s.addInput(sig.offsets);
  s.addOutput(sig.out);
  return sig;
}

/// Adds `net`'s weights and its Experts step from `tokens` and `offsets` to
/// `out`.
inline void addExpertsStep(ScheduleBuilder &s, const Network &net,
                           int32_t tokens, int32_t offsets, int32_t out) {
  std::vector<int32_t> inputs = {tokens, offsets};
  int slot = 0;
  for (auto &w : net.weightInputs(/*lead=*/true)) {
    inputs.push_back(w ? s.addWeight(absl::StrCat("w", slot), w->dtype,
                                     w->shape, w->bytes.data(), w->bytes.size())
                       : -1);
    ++slot;
  }
  s.addStep(fb::OpKind::Experts, "experts", inputs, {out}, net.attributes());
}

/// A one-step Experts plan of `net` (inputs "x", "offsets", output "y")
/// whose expert weights lie in a paged section, tiered for `budget`.
inline absl::StatusOr<std::vector<uint8_t>>
writeTieredPlan(const Network &net, int64_t N, bool tiered, uint64_t budget,
                std::vector<double> loads,
                fb::TierPrefetch prefetch = fb::TierPrefetch::None) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  auto [tokens, offs, out] = addExpertsSignature(s, N, net.H, net.E);
  int section = tiered ? writer.addWeightSection(/*paged=*/true) : -1;
  std::vector<int32_t> inputs = {tokens, offs};
  int slot = 0;
  for (auto &w : net.weightInputs(/*lead=*/true)) {
    inputs.push_back(w ? s.addWeight(absl::StrCat("w", slot), w->dtype,
                                     w->shape, w->bytes.data(), w->bytes.size(),
                                     section)
                       : -1);
    ++slot;
  }
  int step = s.addStep(fb::OpKind::Experts, "experts", inputs, {out},
                       net.attributes());
  if (tiered)
    s.setExpertTiers(budget, {{step, std::move(loads)}}, prefetch);
  return writer.serialize();
}

/// Serializes and loads the one-step Experts plan of `writer` (inputs "x"
/// [N, H] and "offsets" [E + 1], output "y"), runs it on `x` and `offsets`
/// with 2 threads and returns y.
inline absl::StatusOr<Value>
runExpertsPlan(PlanWriter &writer, int64_t H, const std::vector<float> &x,
               const std::vector<int64_t> &offsets) {
  int64_t N = x.size() / H, E = offsets.size() - 1;
  MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> plan, writer.serialize());
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Plan> loaded,
                         Plan::loadFromMemory(plan.data(), plan.size()));
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                         Session::create(*loaded, {/*threads=*/2}));
  MOERT_RETURN_IF_ERROR(session->setInput("x", DType::F32, {N, H}, x.data(),
                                          x.size() * sizeof(float)));
  MOERT_RETURN_IF_ERROR(session->setInput("offsets", DType::I64, {E + 1},
                                          offsets.data(),
                                          offsets.size() * sizeof(int64_t)));
  MOERT_RETURN_IF_ERROR(session->run());
  return outputValue(*session, "y");
}

/// Runs an Experts step whose output takes the slot of its tokens input.
inline absl::StatusOr<Value>
runExpertsInPlace(const Network &net, const std::vector<float> &x,
                  const std::vector<int64_t> &offsets) {
  int64_t N = x.size() / net.H;
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  uint64_t bytes = x.size() * sizeof(float);
  int32_t tokens = s.addTensor("x", DType::F32, {N, net.H}, 0, bytes);
  int32_t out = s.addTensor("y", DType::F32, {N, net.H}, 0, bytes);
  int32_t offs = s.addTensor("offsets", DType::I64, {net.E + 1}, bytes);
  s.addInput(tokens);
  s.addInput(offs);
  s.addOutput(out);
  addExpertsStep(s, net, tokens, offs, out);
  return runExpertsPlan(writer, net.H, x, offsets);
}

/// Runs an Experts step with `rows[e]` rows for expert e and checks every
/// kept row against the reference (padding rows are zero).
inline void checkExperts(const Network &net, const std::vector<int64_t> &rows,
                         int64_t padding, uint32_t seed, int threads = 2,
                         bool inPlace = false, float tolerance = 1e-4f) {
  std::vector<int64_t> offsets = {0};
  for (int64_t n : rows)
    offsets.push_back(offsets.back() + n);
  int64_t N = offsets.back() + padding;
  std::vector<float> x = randomFloats(N * net.H, seed);
  std::vector<std::optional<Value>> inputs = {f32({N, net.H}, x),
                                              i64({net.E + 1}, offsets)};
  for (auto &w : net.weightInputs(/*lead=*/true))
    inputs.push_back(std::move(w));
  absl::StatusOr<std::vector<Value>> r;
  if (inPlace) {
    absl::StatusOr<Value> y = runExpertsInPlace(net, x, offsets);
    if (y.ok())
      r = std::vector<Value>{*std::move(y)};
    else
      r = y.status();
  } else {
    r = runStep(fb::OpKind::Experts, inputs, {{DType::F32, {N, net.H}}},
                net.attributes(), threads);
  }
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> expected(N * net.H, 0.0f);
  for (int64_t e = 0; e < net.E; ++e)
    for (int64_t row = offsets[e]; row < offsets[e + 1]; ++row) {
      std::vector<double> y = net.apply(e, x.data() + row * net.H);
      std::copy(y.begin(), y.end(), expected.begin() + row * net.H);
    }
  expectNear((*r)[0], {N, net.H}, expected, tolerance);
}

/// Every activation in both layouts, with and without biases, and for gated
/// ones every gate/up packing.
inline std::vector<Network> everyNetwork() {
  std::vector<Network> nets;
  for (int a = 0; a <= static_cast<int>(fb::Activation::MAX); ++a)
    for (bool inOut : {false, true})
      for (bool biases : {false, true}) {
        Network net;
        net.activation = static_cast<fb::Activation>(a);
        net.inOut = inOut;
        net.biases = biases;
        if (net.activation == fb::Activation::ClampedSwiglu) {
          net.alpha = 1.702f;
          net.beta = 1.0f;
          net.limit = biases ? 0.6f : 0.0f; // With and without clamping.
        }
        if (!net.gated()) {
          net.separateUp = false;
          nets.push_back(net);
          continue;
        }
        nets.push_back(net);
        net.separateUp = false;
        for (fb::GluLayout glu :
             {fb::GluLayout::Concatenated, fb::GluLayout::Interleaved}) {
          net.glu = glu;
          nets.push_back(net);
        }
      }
  return nets;
}

inline std::string describe(const Network &net) {
  return absl::StrCat(
      fb::EnumNameActivation(net.activation), net.inOut ? " in_out" : " out_in",
      net.biases ? " biases" : "",
      net.fused() ? absl::StrCat(" glu ", fb::EnumNameGluLayout(net.glu)) : "",
      net.gated() && !net.fused() ? " w3" : "");
}

} // namespace moert::testing

#endif // MOERT_TESTS_EXPERT_NETWORK_H
