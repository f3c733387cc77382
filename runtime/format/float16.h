//===- float16.h - f16 and bf16 conversions ---------------------*- C++ -*-===//
//
// 16-bit floats. Widening is exact; narrowing rounds to nearest even, keeps
// NaN a NaN (quiet) and infinities infinite, and f16 overflows to infinity.
// Cast, the expert kernels and the plan writer all use these, so every path
// that produces or reads a 16-bit weight agrees bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_FORMAT_FLOAT16_H
#define MOERT_FORMAT_FLOAT16_H

#include "moert/moert.h"

#include <cstdint>
#include <cstring>

namespace moert::detail {

/// The f32 value of IEEE binary16 bits `h`.
inline float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal: normalise.
    int shift = 0;
    while (!(mantissa & 0x400)) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | ((113 - shift) << 23) | ((mantissa & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// `f` rounded to the nearest IEEE binary16, as bits.
inline uint16_t floatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t abs = bits & 0x7fffffff;
  if (abs >= 0x7f800000) // Inf or NaN (quieted).
    return sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);
  if (abs >= 0x477ff000) // Rounds to >= 65520: overflow to infinity.
    return sign | 0x7c00;
  if (abs < 0x38800000) { // Below the smallest normal half: subnormal or 0.
    if (abs < 0x33000000)
      return sign;
    uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
    int shift = 126 - static_cast<int>(abs >> 23);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1)))
      ++half;
    return sign | static_cast<uint16_t>(half);
  }
  // Normal: rebias and round to nearest even on the 13 dropped bits.
  uint32_t value = abs - 0x38000000;
  uint32_t half = value >> 13;
  uint32_t rest = value & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half;
  return sign | static_cast<uint16_t>(half);
}

/// The f32 value of bfloat16 bits `h`.
inline float bfloatToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// `f` rounded to the nearest bfloat16, as bits.
inline uint16_t floatToBfloat(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) // NaN: keep it one (quiet).
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

/// Narrows `count` f32 values to `dtype` (F16 or BF16) bits.
inline void narrowFloats(DType dtype, const float *in, int64_t count,
                         uint16_t *out) {
  if (dtype == DType::BF16)
    for (int64_t i = 0; i < count; ++i)
      out[i] = floatToBfloat(in[i]);
  else
    for (int64_t i = 0; i < count; ++i)
      out[i] = floatToHalf(in[i]);
}

/// Widens `count` values of `dtype` (F16 or BF16) bits to f32.
inline void widenFloats(DType dtype, const uint16_t *in, int64_t count,
                        float *out) {
  if (dtype == DType::BF16)
    for (int64_t i = 0; i < count; ++i)
      out[i] = bfloatToFloat(in[i]);
  else
    for (int64_t i = 0; i < count; ++i)
      out[i] = halfToFloat(in[i]);
}

} // namespace moert::detail

#endif // MOERT_FORMAT_FLOAT16_H
