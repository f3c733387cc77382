//===- stream_vectors.h - Vector types of the streaming kernels -*- C++ -*-===//
//
// What the streaming kernels' files (stream.cpp: 8-lane kernels, [K, out]
// row ranges, dispatch; stream_avx512.cpp: 16-lane [out, K] products) share:
// the build's multiversioning macros, the 16-lane vector type and how each
// weight storage loads 16 elements as f32 (inline assembly, as the
// templates they are inlined through are not compiled for AVX-512), and
// unaligned vector loads and stores. Internal to the kernels.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_STREAM_VECTORS_H
#define MOERT_SRC_KERNELS_STREAM_VECTORS_H

#include "exec/tensor.h"
#include "kernels/stream.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MOERT_MULTIVERSION                                                     \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MOERT_MULTIVERSION
#endif
#define MOERT_ALWAYS_INLINE inline __attribute__((always_inline))
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MOERT_V3_DISPATCH 1
#define MOERT_X86_64_V3 __attribute__((target("arch=x86-64-v3")))
#else
#define MOERT_V3_DISPATCH 0
#endif

// The vector helpers are always inlined, so the ABI of passing 32- and
// 64-byte vectors by value, which GCC warns about when AVX is off, never
// applies (this header is included only by the streaming kernels' files).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#if MOERT_V3_DISPATCH
#define MOERT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#endif

namespace moert::detail::lanes {

template <typename V> MOERT_ALWAYS_INLINE V loadAs(const float *p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V> MOERT_ALWAYS_INLINE void storeAs(float *p, V v) {
  std::memcpy(p, &v, sizeof v);
}

#if MOERT_V3_DISPATCH
/// 16 lanes for the AVX-512 entry points (inline assembly: the templates
/// they are inlined through are not compiled for AVX-512).
typedef float Vec16f __attribute__((vector_size(16 * sizeof(float))));
/// 16 bytes the assembly reads.
struct Bytes16 {
  uint8_t b[16];
};
struct F32x16Weights {
  using T = float;
  using V = Vec16f;
  static MOERT_ALWAYS_INLINE V vector(const float *p) {
    V f;
    std::memcpy(&f, p, sizeof f);
    return f;
  }
  static MOERT_ALWAYS_INLINE float scalar(float v) { return v; }
};
struct F16x16Weights {
  using T = uint16_t;
  using V = Vec16f;
  static MOERT_ALWAYS_INLINE V vector(const uint16_t *p) {
    V f;
    asm("vcvtph2ps %1, %0"
        : "=v"(f)
        : "m"(*reinterpret_cast<const Bytes16(*)[2]>(p)));
    return f;
  }
  static MOERT_ALWAYS_INLINE float scalar(uint16_t v) { return halfToFloat(v); }
};
struct Bf16x16Weights {
  using T = uint16_t;
  using V = Vec16f;
  static MOERT_ALWAYS_INLINE V vector(const uint16_t *p) {
    V f;
    asm("vpmovzxwd %1, %0\n\tvpslld $16, %0, %0"
        : "=v"(f)
        : "m"(*reinterpret_cast<const Bytes16(*)[2]>(p)));
    return f;
  }
  static MOERT_ALWAYS_INLINE float scalar(uint16_t v) {
    return bfloatToFloat(v);
  }
};
struct I8x16Weights {
  using T = int8_t;
  using V = Vec16f;
  static MOERT_ALWAYS_INLINE V vector(const int8_t *p) {
    V f;
    asm("vpmovsxbd %1, %0\n\tvcvtdq2ps %0, %0"
        : "=v"(f)
        : "m"(*reinterpret_cast<const Bytes16 *>(p)));
    return f;
  }
  static MOERT_ALWAYS_INLINE float scalar(int8_t v) { return float(v); }
};
#endif

#if MOERT_V3_DISPATCH
/// streamProjectAvx512's kernels for each weight storage
/// (stream_avx512.cpp): c[n, m] = x[n, K] @ W[c0 : c0 + m, :]^T (* scale)
/// (+ bias) for W stored [out, K].
void streamOutInAvx512(const float *x, int64_t n, int64_t K, const void *w,
                       StreamWeights type, int64_t c0, int64_t m,
                       const float *scale, const float *bias, float *c,
                       int64_t ldc);
#endif

} // namespace moert::detail::lanes

#endif // MOERT_SRC_KERNELS_STREAM_VECTORS_H
