//===- stream.cpp - Weight-streaming products for few rows ----------------===//
//
// Register-tiled products over GCC/Clang vector extensions. On x86-64 the
// entry points are cloned for x86-64-v3 (AVX2, FMA) and baseline SSE2, picked
// once at load time by the dynamic linker (ifunc), so the library runs on any
// x86-64 and uses 8-wide FMAs where the CPU has them; both layouts have
// 16-lane AVX-512 entry points as well, chosen by CPUID (hasAvx512Streams):
// the [out, K] ones in stream_avx512.cpp, which shares this file's vector
// types through stream_vectors.h.
//
// [out, K] weights: a tile computes R rows by C columns of the output in
// registers over the whole inner dimension K (C contiguous weight rows), so
// each weight element it loads is used R times from a register. Column tiles
// are the outer loop and row tiles the inner one: the first row tile streams
// the tile's weights from memory, the others find them in cache. The 16-lane
// (AVX-512) entry points read one weight row at a time instead, the block in
// memory order, for every weight type (stream_avx512.cpp). [K, out]
// weights: over a range of whole weight rows, four at a time, into partial
// products of all the outputs: one sequential stream, where a column block
// would read a short segment of each row, a page apart.
//
// 16-bit weights (bf16, f16) are widened to f32 in registers as they are
// loaded (integer vector operations, exact), so they stream half the bytes;
// the arithmetic is the f32 path's. int8 weights are converted the same way
// (a quarter of the bytes) and each output is scaled once, after its sum.
//
//===----------------------------------------------------------------------===//

#include "kernels/stream.h"
#include "kernels/stream_vectors.h"

#include "exec/tensor.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

namespace moert::detail {
namespace {

using namespace lanes;

constexpr int kLanes = 8;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

MOERT_ALWAYS_INLINE Vec load(const float *p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
MOERT_ALWAYS_INLINE void store(float *p, Vec v) {
  std::memcpy(p, &v, sizeof v);
}
typedef uint16_t Vec16 __attribute__((vector_size(kLanes * sizeof(uint16_t))));
typedef uint32_t VecU __attribute__((vector_size(kLanes * sizeof(uint32_t))));

MOERT_ALWAYS_INLINE Vec asFloats(VecU v) {
  Vec f;
  std::memcpy(&f, &v, sizeof f);
  return f;
}
MOERT_ALWAYS_INLINE VecU asBits(Vec v) {
  VecU u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}
MOERT_ALWAYS_INLINE VecU load16(const uint16_t *p) {
  Vec16 h;
  std::memcpy(&h, p, sizeof h);
  return __builtin_convertvector(h, VecU);
}
typedef int8_t Vec8 __attribute__((vector_size(kLanes * sizeof(int8_t))));
typedef int32_t VecI __attribute__((vector_size(kLanes * sizeof(int32_t))));

/// How each weight storage loads kLanes elements, or one, as f32.
struct F32Weights {
  using T = float;
  using V = Vec;
  static MOERT_ALWAYS_INLINE Vec vector(const float *p) { return load(p); }
  static MOERT_ALWAYS_INLINE float scalar(float v) { return v; }
};
/// bf16 is the top half of an f32.
struct Bf16Weights {
  using T = uint16_t;
  using V = Vec;
  static MOERT_ALWAYS_INLINE Vec vector(const uint16_t *p) {
    return asFloats(load16(p) << 16);
  }
  static MOERT_ALWAYS_INLINE float scalar(uint16_t v) {
    return bfloatToFloat(v);
  }
};
/// int8: sign-extended and converted (exact); the scale comes after the sum.
struct I8Weights {
  using T = int8_t;
  using V = Vec;
  static MOERT_ALWAYS_INLINE Vec vector(const int8_t *p) {
    Vec8 q;
    std::memcpy(&q, p, sizeof q);
    return __builtin_convertvector(__builtin_convertvector(q, VecI), Vec);
  }
  static MOERT_ALWAYS_INLINE float scalar(int8_t v) { return float(v); }
};
/// f16 without F16C: exponent and mantissa move up 13 bits and the
/// exponent is rebiased; infinities and NaNs get the f32 maximum exponent;
/// zeros and subnormals are rebuilt exactly as (2^-14 + m 2^-24) - 2^-14 (no
/// subnormal f32 is ever an operand, which some CPUs handle slowly).
struct F16Weights {
  using T = uint16_t;
  using V = Vec;
  static MOERT_ALWAYS_INLINE Vec vector(const uint16_t *p) {
    VecU h = load16(p);
    VecU bits = (h & 0x7fff) << 13;
    VecU exponent = bits & 0x0f800000;
    bits += 0x38000000;
    VecU special = (VecU)(exponent == 0x0f800000);
    bits += special & 0x38000000;
    VecU tiny = (VecU)(exponent == 0);
    VecU rebuilt =
        asBits(asFloats(bits + 0x00800000) - asFloats(VecU{} + 0x38800000));
    bits = (bits & ~tiny) | (rebuilt & tiny);
    return asFloats(bits | ((h & 0x8000) << 16));
  }
  static MOERT_ALWAYS_INLINE float scalar(uint16_t v) { return halfToFloat(v); }
};

#if MOERT_V3_DISPATCH
/// f16 with F16C (x86-64-v3 has it): one instruction per 8 values, where the
/// integer form costs about ten (1-token f16 experts were slower than f32
/// ones with it). Written as inline assembly because the intrinsic would
/// need F16C enabled in every function it is inlined through; only the
/// x86-64-v3 entry points below instantiate it, and only when the CPU has
/// F16C (hasV3Kernels). GCC 12's own _Float16 vector conversion goes element by
/// element.
struct F16CWeights {
  using T = uint16_t;
  using V = Vec;
  static MOERT_ALWAYS_INLINE Vec vector(const uint16_t *p) {
    Vec16 h;
    std::memcpy(&h, p, sizeof h);
    Vec f;
    asm("vcvtph2ps %1, %0" : "=x"(f) : "x"(h));
    return f;
  }
  static MOERT_ALWAYS_INLINE float scalar(uint16_t v) { return halfToFloat(v); }
};

/// int8 with AVX2: one sign-extending load and one conversion per 8 values
/// (inline assembly for the same reason as F16CWeights: GCC 12 builds an
/// 8-byte vector's conversion from scalar moves, measured slower than f32
/// weights at 1 token).
/// 8 bytes the assembly reads in place (a copy into a local would make GCC
/// store it to the stack and load it back for every vector).
struct Bytes8 {
  uint8_t b[8];
};
struct I8Avx2Weights {
  using T = int8_t;
  using V = Vec;
  static MOERT_ALWAYS_INLINE Vec vector(const int8_t *p) {
    Vec f;
    asm("vpmovsxbd %1, %0\n\tvcvtdq2ps %0, %0"
        : "=x"(f)
        : "m"(*reinterpret_cast<const Bytes8 *>(p)));
    return f;
  }
  static MOERT_ALWAYS_INLINE float scalar(int8_t v) { return float(v); }
};

/// Whether the CPU runs the x86-64-v3 entry points written for AVX2 and
/// F16C (F16CWeights, I8Avx2Weights).
bool hasV3Kernels() {
  static const bool has = __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has;
}
#endif

/// The lanes of v summed in order (the same order for every storage, so
/// that the 8-lane kernels of 16-bit weights equal the f32 kernel's bit for
/// bit on the widened values).
template <typename V> MOERT_ALWAYS_INLINE float horizontalSum(V v) {
  float s = 0;
  for (size_t i = 0; i < sizeof(V) / sizeof(float); ++i)
    s += v[i];
  return s;
}

//===----------------------------------------------------------------------===//
// [out, K] weights: each output is a dot product of a row with a weight row.
//===----------------------------------------------------------------------===//

/// c[r, j] = dot(x[r, :], w[j, :]) (* scale[j]) + bias[j] for r < R,
/// j < C; the C weight rows are C sequential streams.
template <int R, int C, typename W>
MOERT_ALWAYS_INLINE void
dotTile(const float *x, int64_t ldx, const typename W::T *w, int64_t K,
        const float *scale, const float *bias, float *c, int64_t ldc) {
  using V = typename W::V;
  constexpr int64_t lanes = sizeof(V) / sizeof(float);
  V acc[R][C] = {};
  int64_t k = 0;
  for (; k + lanes <= K; k += lanes) {
    V wv[C];
    for (int j = 0; j < C; ++j)
      wv[j] = W::vector(w + j * K + k);
    for (int r = 0; r < R; ++r) {
      V xv = loadAs<V>(x + r * ldx + k);
      for (int j = 0; j < C; ++j)
        acc[r][j] += xv * wv[j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j) {
      float s = horizontalSum(acc[r][j]);
      for (int64_t t = k; t < K; ++t)
        s += x[r * ldx + t] * W::scalar(w[j * K + t]);
      if (scale)
        s *= scale[j];
      c[r * ldc + j] = bias ? s + bias[j] : s;
    }
}

/// Rows [0, n) of one column tile of C columns (rows two at a time).
template <int C, typename W>
MOERT_ALWAYS_INLINE void dotColumns(const float *x, int64_t n, int64_t K,
                                    const typename W::T *w, const float *scale,
                                    const float *bias, float *c, int64_t ldc) {
  int64_t r = 0;
  for (; r + 2 <= n; r += 2)
    dotTile<2, C, W>(x + r * K, K, w, K, scale, bias, c + r * ldc, ldc);
  if (r < n)
    dotTile<1, C, W>(x + r * K, K, w, K, scale, bias, c + r * ldc, ldc);
}

template <typename W>
MOERT_ALWAYS_INLINE void streamOutIn(const float *x, int64_t n, int64_t K,
                                     const void *weights, int64_t c0, int64_t m,
                                     const float *scale, const float *bias,
                                     float *c, int64_t ldc) {
  // 16-bit weights: eight columns per tile, eight streams of half the
  // bytes (measured at 1 and 4 rows, [2816, 1024]: 20-35% faster than
  // four; f32 keeps its measured four).
  constexpr int C = std::is_same_v<W, F32Weights> ? 4 : 8;
  const auto *w = static_cast<const typename W::T *>(weights);
  auto at = [&](const float *v, int64_t j) { return v ? v + c0 + j : nullptr; };
  int64_t j = 0;
  for (; j + C <= m; j += C)
    dotColumns<C, W>(x, n, K, w + (c0 + j) * K, at(scale, j), at(bias, j),
                     c + j, ldc);
  for (; j < m; ++j)
    dotColumns<1, W>(x, n, K, w + (c0 + j) * K, at(scale, j), at(bias, j),
                     c + j, ldc);
}

// One multiversioned entry point per storage (GCC clones functions, not
// templates); the template bodies are inlined into each clone.
MOERT_MULTIVERSION
void streamOutInF32(const float *x, int64_t n, int64_t K, const void *w,
                    int64_t c0, int64_t m, const float *scale,
                    const float *bias, float *c, int64_t ldc) {
  streamOutIn<F32Weights>(x, n, K, w, c0, m, scale, bias, c, ldc);
}
MOERT_MULTIVERSION
void streamOutInBf16(const float *x, int64_t n, int64_t K, const void *w,
                     int64_t c0, int64_t m, const float *scale,
                     const float *bias, float *c, int64_t ldc) {
  streamOutIn<Bf16Weights>(x, n, K, w, c0, m, scale, bias, c, ldc);
}
MOERT_MULTIVERSION
void streamOutInF16(const float *x, int64_t n, int64_t K, const void *w,
                    int64_t c0, int64_t m, const float *scale,
                    const float *bias, float *c, int64_t ldc) {
  streamOutIn<F16Weights>(x, n, K, w, c0, m, scale, bias, c, ldc);
}
MOERT_MULTIVERSION
void streamOutInI8(const float *x, int64_t n, int64_t K, const void *w,
                   int64_t c0, int64_t m, const float *scale, const float *bias,
                   float *c, int64_t ldc) {
  streamOutIn<I8Weights>(x, n, K, w, c0, m, scale, bias, c, ldc);
}
#if MOERT_V3_DISPATCH
MOERT_X86_64_V3
void streamOutInI8Avx2(const float *x, int64_t n, int64_t K, const void *w,
                       int64_t c0, int64_t m, const float *scale,
                       const float *bias, float *c, int64_t ldc) {
  streamOutIn<I8Avx2Weights>(x, n, K, w, c0, m, scale, bias, c, ldc);
}
#endif
#if MOERT_V3_DISPATCH
MOERT_X86_64_V3
void streamOutInF16C(const float *x, int64_t n, int64_t K, const void *w,
                     int64_t c0, int64_t m, const float *scale,
                     const float *bias, float *c, int64_t ldc) {
  streamOutIn<F16CWeights>(x, n, K, w, c0, m, scale, bias, c, ldc);
}
#endif

//===----------------------------------------------------------------------===//
// [K, out] weights: ranges of whole weight rows.
//===----------------------------------------------------------------------===//

/// Four weight rows at a time: each 8-column vector of the four rows is
/// loaded once into registers and used for every row of x, and each
/// accumulator vector is loaded and stored once per four weight rows.
template <typename W>
MOERT_ALWAYS_INLINE void streamRows(const float *x, int64_t n, int64_t ldx,
                                    const void *weights, int64_t out,
                                    int64_t k0, int64_t k1, float *c) {
  using T = typename W::T;
  using V = typename W::V;
  constexpr int64_t lanes = sizeof(V) / sizeof(float);
  const T *w = static_cast<const T *>(weights);
  std::fill(c, c + n * out, 0.0f);
  int64_t k = k0;
  if constexpr (!std::is_same_v<W, F32Weights>) {
    // 16-bit weights halve the bytes per weight, which leaves the
    // accumulators' loads and stores the larger cost: eight weight rows per
    // pass halve them. The sums keep the order of two passes of four (the
    // f32 path's), so results do not depend on the weights' storage.
    for (; k + 8 <= k1; k += 8) {
      const T *wk = w + k * out;
      int64_t j = 0;
      for (; j + lanes <= out; j += lanes) {
        V v[8];
        for (int g = 0; g < 8; ++g)
          v[g] = W::vector(wk + g * out + j);
        for (int64_t r = 0; r < n; ++r) {
          const float *xr = x + r * ldx + k;
          float *cr = c + r * out + j;
          storeAs(cr, loadAs<V>(cr) + v[0] * xr[0] + v[1] * xr[1] +
                          v[2] * xr[2] + v[3] * xr[3] + v[4] * xr[4] +
                          v[5] * xr[5] + v[6] * xr[6] + v[7] * xr[7]);
        }
      }
      for (; j < out; ++j)
        for (int64_t r = 0; r < n; ++r) {
          const float *xr = x + r * ldx + k;
          for (int half = 0; half < 8; half += 4)
            c[r * out + j] +=
                W::scalar(wk[half * out + j]) * xr[half] +
                W::scalar(wk[(half + 1) * out + j]) * xr[half + 1] +
                W::scalar(wk[(half + 2) * out + j]) * xr[half + 2] +
                W::scalar(wk[(half + 3) * out + j]) * xr[half + 3];
        }
    }
  }
  for (; k + 4 <= k1; k += 4) {
    const T *w0 = w + k * out, *w1 = w0 + out, *w2 = w1 + out, *w3 = w2 + out;
    int64_t j = 0;
    for (; j + lanes <= out; j += lanes) {
      V a = W::vector(w0 + j), b = W::vector(w1 + j), d = W::vector(w2 + j),
        e = W::vector(w3 + j);
      for (int64_t r = 0; r < n; ++r) {
        const float *xr = x + r * ldx + k;
        float *cr = c + r * out + j;
        storeAs(cr,
                loadAs<V>(cr) + a * xr[0] + b * xr[1] + d * xr[2] + e * xr[3]);
      }
    }
    for (; j < out; ++j)
      for (int64_t r = 0; r < n; ++r) {
        const float *xr = x + r * ldx + k;
        c[r * out + j] += W::scalar(w0[j]) * xr[0] + W::scalar(w1[j]) * xr[1] +
                          W::scalar(w2[j]) * xr[2] + W::scalar(w3[j]) * xr[3];
      }
  }
  for (; k < k1; ++k)
    for (int64_t r = 0; r < n; ++r) {
      float xs = x[r * ldx + k];
      for (int64_t j = 0; j < out; ++j)
        c[r * out + j] += xs * W::scalar(w[k * out + j]);
    }
}

MOERT_MULTIVERSION
void streamRowsF32(const float *x, int64_t n, int64_t ldx, const void *w,
                   int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows<F32Weights>(x, n, ldx, w, out, k0, k1, c);
}
MOERT_MULTIVERSION
void streamRowsBf16(const float *x, int64_t n, int64_t ldx, const void *w,
                    int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows<Bf16Weights>(x, n, ldx, w, out, k0, k1, c);
}
MOERT_MULTIVERSION
void streamRowsF16(const float *x, int64_t n, int64_t ldx, const void *w,
                   int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows<F16Weights>(x, n, ldx, w, out, k0, k1, c);
}
MOERT_MULTIVERSION
void streamRowsI8(const float *x, int64_t n, int64_t ldx, const void *w,
                  int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows<I8Weights>(x, n, ldx, w, out, k0, k1, c);
}
#if MOERT_V3_DISPATCH
MOERT_X86_64_V3
void streamRowsI8Avx2(const float *x, int64_t n, int64_t ldx, const void *w,
                      int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows<I8Avx2Weights>(x, n, ldx, w, out, k0, k1, c);
}
#endif
#if MOERT_V3_DISPATCH
// [K, out] weights on 16 lanes: the same sums as the 8-lane entry points
// (lanes run along the outputs, so each output's order is the same), with
// half the instructions per weight for the rows of a batched step
// (bench/README.md, "Several rows per weight row").
MOERT_AVX512
void streamRowsF32Avx512(const float *x, int64_t n, int64_t ldx, const void *w,
                         int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows<F32x16Weights>(x, n, ldx, w, out, k0, k1, c);
}
MOERT_AVX512
void streamRowsBf16Avx512(const float *x, int64_t n, int64_t ldx, const void *w,
                          int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows<Bf16x16Weights>(x, n, ldx, w, out, k0, k1, c);
}
MOERT_AVX512
void streamRowsF16Avx512(const float *x, int64_t n, int64_t ldx, const void *w,
                         int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows<F16x16Weights>(x, n, ldx, w, out, k0, k1, c);
}
MOERT_AVX512
void streamRowsI8Avx512(const float *x, int64_t n, int64_t ldx, const void *w,
                        int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows<I8x16Weights>(x, n, ldx, w, out, k0, k1, c);
}
#endif
#if MOERT_V3_DISPATCH
MOERT_X86_64_V3
void streamRowsF16C(const float *x, int64_t n, int64_t ldx, const void *w,
                    int64_t out, int64_t k0, int64_t k1, float *c) {
  streamRows<F16CWeights>(x, n, ldx, w, out, k0, k1, c);
}
#endif

template <typename W>
MOERT_ALWAYS_INLINE void widen(const void *weights, int64_t count, float *out) {
  const auto *w = static_cast<const typename W::T *>(weights);
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes)
    store(out + i, W::vector(w + i));
  for (; i < count; ++i)
    out[i] = W::scalar(w[i]);
}
MOERT_MULTIVERSION
void widenBf16(const void *w, int64_t count, float *out) {
  widen<Bf16Weights>(w, count, out);
}
MOERT_MULTIVERSION
void widenF16(const void *w, int64_t count, float *out) {
  widen<F16Weights>(w, count, out);
}
MOERT_MULTIVERSION
void widenI8(const void *w, int64_t count, float *out) {
  widen<I8Weights>(w, count, out);
}
#if MOERT_V3_DISPATCH
MOERT_X86_64_V3
void widenI8Avx2(const void *w, int64_t count, float *out) {
  widen<I8Avx2Weights>(w, count, out);
}
#endif
#if MOERT_V3_DISPATCH
MOERT_X86_64_V3
void widenF16C(const void *w, int64_t count, float *out) {
  widen<F16CWeights>(w, count, out);
}
#endif

} // namespace

void widenWeights(const void *w, StreamWeights type, int64_t count,
                  float *out) {
  switch (type) {
  case StreamWeights::F32:
    std::memcpy(out, w, count * sizeof(float));
    return;
  case StreamWeights::BF16:
    return widenBf16(w, count, out);
  case StreamWeights::I8:
#if MOERT_V3_DISPATCH
    if (hasV3Kernels())
      return widenI8Avx2(w, count, out);
#endif
    return widenI8(w, count, out);
  case StreamWeights::F16:
#if MOERT_V3_DISPATCH
    if (hasV3Kernels())
      return widenF16C(w, count, out);
#endif
    return widenF16(w, count, out);
  }
}

void widenWeightsPortable(const void *w, StreamWeights type, int64_t count,
                          float *out) {
  if (type == StreamWeights::F16)
    return widenF16(w, count, out);
  if (type == StreamWeights::I8)
    return widenI8(w, count, out);
  widenWeights(w, type, count, out);
}

void streamRowRange(const float *x, int64_t n, int64_t ldx, const void *w,
                    StreamWeights type, int64_t out, int64_t k0, int64_t k1,
                    float *c) {
#if MOERT_V3_DISPATCH
  if (hasAvx512Streams())
    switch (type) {
    case StreamWeights::F32:
      return streamRowsF32Avx512(x, n, ldx, w, out, k0, k1, c);
    case StreamWeights::BF16:
      return streamRowsBf16Avx512(x, n, ldx, w, out, k0, k1, c);
    case StreamWeights::F16:
      return streamRowsF16Avx512(x, n, ldx, w, out, k0, k1, c);
    case StreamWeights::I8:
      return streamRowsI8Avx512(x, n, ldx, w, out, k0, k1, c);
    }
#endif
  switch (type) {
  case StreamWeights::F32:
    return streamRowsF32(x, n, ldx, w, out, k0, k1, c);
  case StreamWeights::BF16:
    return streamRowsBf16(x, n, ldx, w, out, k0, k1, c);
  case StreamWeights::I8:
#if MOERT_V3_DISPATCH
    if (hasV3Kernels())
      return streamRowsI8Avx2(x, n, ldx, w, out, k0, k1, c);
#endif
    return streamRowsI8(x, n, ldx, w, out, k0, k1, c);
  case StreamWeights::F16:
#if MOERT_V3_DISPATCH
    if (hasV3Kernels())
      return streamRowsF16C(x, n, ldx, w, out, k0, k1, c);
#endif
    return streamRowsF16(x, n, ldx, w, out, k0, k1, c);
  }
}

bool hasAvx512Streams() {
#if MOERT_V3_DISPATCH
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
#else
  return false;
#endif
}

void streamProject(const float *x, int64_t n, int64_t K, const void *w,
                   StreamWeights type, int64_t c0, int64_t m,
                   const float *scale, const float *bias, float *c,
                   int64_t ldc) {
  if (hasAvx512Streams())
    return streamProjectAvx512(x, n, K, w, type, c0, m, scale, bias, c, ldc);
  streamProject8Lanes(x, n, K, w, type, c0, m, scale, bias, c, ldc);
}

void streamProjectAvx512(const float *x, int64_t n, int64_t K, const void *w,
                         StreamWeights type, int64_t c0, int64_t m,
                         const float *scale, const float *bias, float *c,
                         int64_t ldc) {
#if MOERT_V3_DISPATCH
  return lanes::streamOutInAvx512(x, n, K, w, type, c0, m, scale, bias, c, ldc);
#else
  streamProject8Lanes(x, n, K, w, type, c0, m, scale, bias, c, ldc);
#endif
}

void streamProject8Lanes(const float *x, int64_t n, int64_t K, const void *w,
                         StreamWeights type, int64_t c0, int64_t m,
                         const float *scale, const float *bias, float *c,
                         int64_t ldc) {
  switch (type) {
  case StreamWeights::F32:
    return streamOutInF32(x, n, K, w, c0, m, scale, bias, c, ldc);
  case StreamWeights::BF16:
    return streamOutInBf16(x, n, K, w, c0, m, scale, bias, c, ldc);
  case StreamWeights::I8:
#if MOERT_V3_DISPATCH
    if (hasV3Kernels())
      return streamOutInI8Avx2(x, n, K, w, c0, m, scale, bias, c, ldc);
#endif
    return streamOutInI8(x, n, K, w, c0, m, scale, bias, c, ldc);
  case StreamWeights::F16:
#if MOERT_V3_DISPATCH
    if (hasV3Kernels())
      return streamOutInF16C(x, n, K, w, c0, m, scale, bias, c, ldc);
#endif
    return streamOutInF16(x, n, K, w, c0, m, scale, bias, c, ldc);
  }
}

} // namespace moert::detail
