//===- fast_math.h - Vectorisable math functions ----------------*- C++ -*-===//
//
// Branch-free float functions that GCC vectorises inside kernel loops (the
// libm calls would stay scalar). `exp` is accurate to 2 ulp over the whole
// float range, subnormal results, overflow, infinities and NaN included.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_FAST_MATH_H
#define MOERT_SRC_KERNELS_FAST_MATH_H

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

/// Compiles a kernel function for AVX-512 (x86-64-v4) and AVX2 (v3) as well
/// as baseline x86-64, the version chosen by CPUID when the program starts:
/// for the loops over the functions below, where baseline code computes
/// four lanes at a time. The wider versions contract multiply-adds, so
/// their results may differ from baseline's in the last bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MOERT_MATH_CLONES                                                      \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MOERT_MATH_CLONES
#endif

namespace moert::detail {

inline float bitsToFloat(int32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
inline int32_t floatToBits(float f) {
  int32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

/// e^x: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6 polynomial
/// (Cephes expf coefficients), 2^n applied in two halves so that subnormal
/// results stay exact.
inline float fastExp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  // Round-to-nearest through the float mantissa (vectorises without SSE4.1).
  constexpr float kShifter = 12582912.0f; // 1.5 * 2^23
  // NaN computes on 0 and is put back at the end.
  float clamped = x != x ? 0.0f : std::min(std::max(x, -104.0f), 89.0f);
  float shifted = clamped * kLog2e + kShifter;
  int32_t n = floatToBits(shifted) - floatToBits(kShifter);
  float fn = shifted - kShifter;
  float r = clamped - fn * kLn2Hi - fn * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t half = n >> 1;
  float scale1 = bitsToFloat(static_cast<int32_t>(uint32_t(half + 127) << 23));
  float scale2 =
      bitsToFloat(static_cast<int32_t>(uint32_t(n - half + 127) << 23));
  float result = p * scale1 * scale2;
  return x != x ? x : result;
}

/// erf(x) as x P(x^2) / Q(x^2), P and Q of degree 5: a least-squares fit
/// of erf(x) / x on [0, 3.92] weighted to its relative error; beyond 3.92
/// erf rounds to +-1 in float. Within 6 ulp and 3.6e-7 relative of erf
/// over the float range (fast_math_test); NaN stays NaN. Branch-free, so
/// loops vectorise it. Used by GELU and
/// Erf, where libm's erf is a scalar call.
inline float fastErf(float x) {
  constexpr float kLimit = 3.92f;
  // The clamp keeps NaN (std::max and std::min return their first operand
  // when unordered), and the arithmetic carries it.
  float c = std::min(std::max(x, -kLimit), kLimit);
  float t = c * c;
  float p = 2.11802215e-06f;
  p = p * t + 2.84519509e-04f;
  p = p * t + 3.61890745e-03f;
  p = p * t + 5.23052003e-02f;
  p = p * t + 1.86596306e-01f;
  p = p * t + 1.12837916e+00f;
  float q = 3.87759714e-05f;
  q = q * t + 1.13244043e-03f;
  q = q * t + 1.46728132e-02f;
  q = q * t + 1.12589165e-01f;
  q = q * t + 4.98699729e-01f;
  q = q * t + 1.0f;
  return c * p / q;
}

/// 1 / (1 + e^-x); exact limits 0 and 1 for large |x|.
inline float fastSigmoid(float x) { return 1.0f / (1.0f + fastExp(-x)); }

/// The exponentials of a softmax of the `n` values of `in` into `out`
/// (which may be `in`), as the Softmax step computes them: the maximum
/// subtracted, exponentials in f32, their sum in double; returns the one f32
/// reciprocal of the sum that normalises them (softmaxRow multiplies it in;
/// the Attention step, after its product with the values). A `sink`
/// (attention sinks) is one more logit that takes its share of the sum and
/// has no output of its own.
inline float softmaxExponentials(const float *in, float *out, int64_t n,
                                 const float *sink = nullptr) {
  // The maximum and the sum in independent chains, so that the loops
  // vectorise: one chain through the row waits on every operation's
  // latency. (The maximum is the same in any order; the double sum differs
  // from a sequential one by double roundings only.) The maximum's chains
  // are four 4-lane vectors: GCC leaves a loop of std::max over an array of
  // lanes scalar. `x > m ? x : m` keeps m where x is NaN, as std::max(m,
  // x) does.
  typedef float Lanes4 __attribute__((vector_size(4 * sizeof(float))));
  float start = sink ? *sink : -std::numeric_limits<float>::infinity();
  Lanes4 chains[4];
  for (Lanes4 &chain : chains)
    chain = Lanes4{} + start;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int c = 0; c < 4; ++c) {
      Lanes4 x;
      std::memcpy(&x, in + j + 4 * c, sizeof x);
      chains[c] = x > chains[c] ? x : chains[c];
    }
  float max = start;
  for (const Lanes4 &chain : chains)
    for (int l = 0; l < 4; ++l)
      max = std::max(max, chain[l]);
  for (; j < n; ++j)
    max = std::max(max, in[j]);
  for (j = 0; j < n; ++j)
    out[j] = fastExp(in[j] - max);
  constexpr int kSumLanes = 16;
  double sums[kSumLanes] = {};
  for (j = 0; j + kSumLanes <= n; j += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l)
      sums[l] += out[j + l];
  for (; j < n; ++j)
    sums[0] += out[j];
  double sum = sink ? fastExp(*sink - max) : 0.0;
  for (int l = 0; l < kSumLanes; ++l)
    sum += sums[l];
  return static_cast<float>(1.0 / sum);
}

/// The softmax of the `n` values of `in` into `out` (which may be `in`):
/// softmaxExponentials, then each multiplied by the sum's reciprocal. -inf
/// entries get 0 (exactly) when the row has a finite entry; a row of only
/// -inf gives NaN, as onnxruntime's Softmax does; with a finite sink, a row
/// of only -inf gives zeros.
inline void softmaxRow(const float *in, float *out, int64_t n,
                       const float *sink = nullptr) {
  float inverse = softmaxExponentials(in, out, n, sink);
  for (int64_t j = 0; j < n; ++j)
    out[j] *= inverse;
}

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_FAST_MATH_H
