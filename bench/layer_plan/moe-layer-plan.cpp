//===- moe-layer-plan.cpp - A MoE layer plan of any size, for benchmarks --===//
//
// Writes the plan of one Mixtral-style MoE layer (gate MatMul, Router with
// softmax top-k and renormalisation, Dispatch, SwiGLU Experts with [E, F, H]
// / [E, H, F] weights as Hugging Face stores them, Combine) at sizes that no
// ONNX export on the build machine could carry, with seeded pseudo-random
// weights made in place:
//
//   moe-layer-plan -o layer.bin --experts 64 --top-k 4 --hidden 4096
//                  --ffn 14336 --max-tokens 4096 --weight-dtype bf16
//                  --backend cuda
//
// The steps and attributes are those `moec compile` emits for such a layer
// (test/E2E checks that path against onnxruntime); this tool exists so that
// bench/gpu_layer.py can time the runtime's kernels at the sizes
// (22 GB of bf16 expert weights) on the GPU machine, which has no compiler.
// Only the runtime library is needed (no LLVM).
//
//===----------------------------------------------------------------------===//

#include "format/plan_writer.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using moert::DType;
using moert::PlanDim;
using moert::fb::OpKind;

struct Options {
  std::string output;
  int64_t experts = 64, topK = 4, hidden = 4096, ffn = 14336;
  int64_t maxTokens = 4096;
  DType weightDtype = DType::BF16;
  moert::Backend backend = moert::Backend::Cuda;
  uint64_t seed = 1;
};

[[noreturn]] void usage(const char *why) {
  std::fprintf(stderr,
               "moe-layer-plan: %s\nusage: moe-layer-plan -o PLAN [--experts "
               "E] [--top-k K] [--hidden H] [--ffn F] [--max-tokens T] "
               "[--weight-dtype f32|bf16|f16] [--backend cpu|cuda] "
               "[--seed N]\n",
               why);
  std::exit(2);
}

/// A value in [-1, 1) from (seed, stream, index): splitmix64, so that any
/// element is made independently (threads fill disjoint ranges) and never
/// zero-patterned.
float noise(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t z =
      seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + index + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/// `value` rounded to the nearest bf16 / f16 (ties to even), as raw bits.
uint16_t toBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet and a NaN.
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

uint16_t toF16(float value) {
  // Finite values of |x| < 65504 only (the weights here are in [-1, 1)).
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  float magnitude = std::fabs(value);
  if (magnitude < 6.103515625e-05f) // Subnormal: a multiple of 2^-24.
    return static_cast<uint16_t>(
        sign | static_cast<uint32_t>(std::nearbyint(magnitude * 16777216.0f)));
  uint32_t abs = bits & 0x7fffffffu;
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1);
  return static_cast<uint16_t>(sign | ((rounded >> 13) - (112u << 10)));
}

/// Fills `count` weights of `stream` scaled by `scale`, in `dtype`, on all
/// cores.
std::vector<uint8_t> makeWeights(const Options &o, uint64_t stream,
                                 size_t count, float scale) {
  size_t width = o.weightDtype == DType::F32 ? 4 : 2;
  std::vector<uint8_t> bytes(count * width);
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      size_t begin = count * t / threads, end = count * (t + 1) / threads;
      for (size_t i = begin; i < end; ++i) {
        float v = noise(o.seed, stream, i) * scale;
        if (o.weightDtype == DType::F32) {
          std::memcpy(&bytes[4 * i], &v, 4);
        } else {
          uint16_t h = o.weightDtype == DType::BF16 ? toBf16(v) : toF16(v);
          std::memcpy(&bytes[2 * i], &h, 2);
        }
      }
    });
  for (std::thread &thread : pool)
    thread.join();
  return bytes;
}

int64_t number(const char *flag, const char *text) {
  char *end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (!*text || *end || value < 1)
    usage((std::string(flag) + " needs a positive integer").c_str());
  return value;
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc)
      usage(("missing value after " + flag).c_str());
    const char *value = argv[++i];
    if (flag == "-o")
      o.output = value;
    else if (flag == "--experts")
      o.experts = number("--experts", value);
    else if (flag == "--top-k")
      o.topK = number("--top-k", value);
    else if (flag == "--hidden")
      o.hidden = number("--hidden", value);
    else if (flag == "--ffn")
      o.ffn = number("--ffn", value);
    else if (flag == "--max-tokens")
      o.maxTokens = number("--max-tokens", value);
    else if (flag == "--seed")
      o.seed = static_cast<uint64_t>(number("--seed", value));
    else if (flag == "--weight-dtype") {
      std::string d = value;
      if (d == "f32")
        o.weightDtype = DType::F32;
      else if (d == "bf16")
        o.weightDtype = DType::BF16;
      else if (d == "f16")
        o.weightDtype = DType::F16;
      else
        usage("--weight-dtype is f32, bf16 or f16");
    } else if (flag == "--backend") {
      std::string b = value;
      if (b != "cpu" && b != "cuda")
        usage("--backend is cpu or cuda");
      o.backend = b == "cpu" ? moert::Backend::Cpu : moert::Backend::Cuda;
    } else {
      usage(("unknown option " + flag).c_str());
    }
  }
  if (o.output.empty())
    usage("-o PLAN is required");
  if (o.topK > o.experts)
    usage("--top-k exceeds --experts");
  return o;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  const int64_t E = o.experts, K = o.topK, H = o.hidden, F = o.ffn;
  moert::PlanWriter writer(
      {o.backend, 1, o.backend == moert::Backend::Cuda ? 90u : 0u},
      "moe-layer-plan");
  int T = writer.addSymbol("T", 1, o.maxTokens);
  moert::ScheduleBuilder &s = writer.schedule(0);
  PlanDim tokens = PlanDim::symbol(T), rows = PlanDim::dynamic(o.maxTokens * K);

  // Weights: the router's in f32, the experts' in the chosen dtype, each
  // scaled by 1/sqrt(fan-in) so that activations stay O(1).
  std::vector<float> gate(H * E);
  for (int64_t i = 0; i < H * E; ++i)
    gate[i] = noise(o.seed, 0, i) / std::sqrt(float(H));
  std::vector<uint8_t> w1 =
      makeWeights(o, 1, E * F * H, 1 / std::sqrt(float(H)));
  std::vector<uint8_t> w3 =
      makeWeights(o, 3, E * F * H, 1 / std::sqrt(float(H)));
  std::vector<uint8_t> w2 =
      makeWeights(o, 2, E * H * F, 1 / std::sqrt(float(F)));

  int32_t x = s.addTensor("x", DType::F32, {tokens, H});
  s.addInput(x);
  int32_t gateW =
      s.addWeightRef("gate", DType::F32, {H, E}, gate.data(), gate.size() * 4);
  int32_t logits = s.addTensor("logits", DType::F32, {tokens, E});
  s.addStep(OpKind::MatMul, "gate", {x, gateW}, {logits});

  moert::fb::RouterAttrsT router;
  router.top_k = K;
  router.normalize = true;
  int32_t weights = s.addTensor("weights", DType::F32, {tokens, K});
  int32_t indices = s.addTensor("indices", DType::I64, {tokens, K});
  s.addStep(OpKind::Router, "router", {logits}, {weights, indices},
            moert::attrs(router));

  moert::fb::DispatchAttrsT dispatch;
  dispatch.num_experts = E;
  int32_t grouped = s.addTensor("rows", DType::F32, {rows, H});
  int32_t offsets = s.addTensor("offsets", DType::I64, {E + 1});
  int32_t source = s.addTensor("source", DType::I64, {rows});
  s.addStep(OpKind::Dispatch, "dispatch", {x, indices},
            {grouped, offsets, source}, moert::attrs(dispatch));

  int32_t w1t =
      s.addWeightRef("w1", o.weightDtype, {E, F, H}, w1.data(), w1.size());
  int32_t w3t =
      s.addWeightRef("w3", o.weightDtype, {E, F, H}, w3.data(), w3.size());
  int32_t w2t =
      s.addWeightRef("w2", o.weightDtype, {E, H, F}, w2.data(), w2.size());
  moert::fb::FfnAttrsT ffn;
  ffn.activation = moert::fb::Activation::SiluGlu;
  ffn.weight_layout = moert::fb::WeightLayout::OutIn;
  int32_t expertOut = s.addTensor("expert_out", DType::F32, {rows, H});
  s.addStep(OpKind::Experts, "experts",
            {grouped, offsets, w1t, -1, w3t, -1, w2t, -1}, {expertOut},
            moert::attrs(ffn));

  int32_t y = s.addTensor("y", DType::F32, {tokens, H});
  s.addStep(OpKind::Combine, "combine", {expertOut, source, weights}, {y});
  s.addOutput(y);

  absl::Status written = writer.write(o.output);
  if (!written.ok()) {
    std::fprintf(stderr, "moe-layer-plan: %s\n",
                 std::string(written.message()).c_str());
    return 1;
  }
  std::printf("moe-layer-plan: wrote %s (E=%lld k=%lld H=%lld F=%lld, %.2f GB "
              "of expert weights)\n",
              o.output.c_str(), (long long)E, (long long)K, (long long)H,
              (long long)F, double(w1.size() + w2.size() + w3.size()) / 1e9);
  return 0;
}
