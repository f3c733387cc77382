//===- tensor.h - Run-time tensor views and dtype helpers -------*- C++ -*-===//

#ifndef MOERT_SRC_TENSOR_H
#define MOERT_SRC_TENSOR_H

#include "moert/moert.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

namespace moert::detail {

/// A run-time shape of rank <= kMaxRank (the loader rejects larger ranks).
struct Shape {
  int rank = 0;
  int64_t dims[kMaxRank] = {};

  Shape() = default;
  Shape(std::initializer_list<int64_t> values) {
    for (int64_t value : values)
      dims[rank++] = value;
  }
  int64_t operator[](int i) const { return dims[i]; }
  int64_t &operator[](int i) { return dims[i]; }
  /// Appends a dimension; the caller checks rank < kMaxRank.
  void push(int64_t value) { dims[rank++] = value; }
  /// Product of the dims; the caller guarantees that it cannot overflow
  /// (shapes of allocated tensors are bounded by the plan).
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i)
      n *= dims[i];
    return n;
  }
  /// Product of dims [begin, end).
  int64_t span(int begin, int end) const {
    int64_t n = 1;
    for (int i = begin; i < end; ++i)
      n *= dims[i];
    return n;
  }
  bool operator==(const Shape &other) const {
    if (rank != other.rank)
      return false;
    for (int i = 0; i < rank; ++i)
      if (dims[i] != other.dims[i])
        return false;
    return true;
  }
  bool operator!=(const Shape &other) const { return !(*this == other); }
  /// "[2, 3]".
  std::string str() const;
};

/// A tensor during execution: planned storage with its actual shape.
struct Tensor {
  DType dtype = DType::F32;
  Shape shape;
  uint8_t *data = nullptr;
  /// A KV-cache view (Generator::create binds one where the schedule allows
  /// it, cache_in_place.h): dimension `cacheAxis` is laid out with
  /// `cachePitch` positions, of which the first shape[cacheAxis] hold data.
  /// -1 for a contiguous tensor. Only the steps cacheViewUse() accepts read
  /// or write such a view.
  int cacheAxis = -1;
  int64_t cachePitch = 0;

  bool isCacheView() const { return cacheAxis >= 0; }
  int64_t numel() const { return shape.numel(); }
  size_t bytes() const {
    return static_cast<size_t>(numel()) * dtypeSize(dtype);
  }
  template <typename T> T *as() const { return reinterpret_cast<T *>(data); }
};

/// Bit set of dtypes, for validation rules.
using DTypeSet = uint32_t;
/// The set holding `dtype` alone; empty for a value that names no dtype (a
/// plan's enum fields may hold any number), so that no rule accepts it.
constexpr DTypeSet bit(DType dtype) {
  unsigned index = static_cast<unsigned>(dtype);
  return index < 32 ? 1u << index : 0;
}
inline constexpr DTypeSet kFloatTypes = bit(DType::F32);
inline constexpr DTypeSet kIntTypes = bit(DType::I64) | bit(DType::I32);
inline constexpr DTypeSet kNumericTypes = kFloatTypes | kIntTypes;
inline constexpr DTypeSet kIndexTypes = kIntTypes;
inline constexpr DTypeSet kAllTypes =
    kNumericTypes | bit(DType::Bool) | bit(DType::F16) | bit(DType::BF16);
/// The dtypes of expert weight matrices (Experts, SharedExpert): f32, or
/// 16-bit floats that the kernels widen to f32 as they read them.
inline constexpr DTypeSet kWeightTypes =
    kFloatTypes | bit(DType::F16) | bit(DType::BF16);
/// kWeightTypes and the int8 matrices (with per-channel scales) that only
/// Experts takes.
inline constexpr DTypeSet kExpertWeightTypes = kWeightTypes | bit(DType::I8);
/// "f32, i64" for diagnostics.
std::string dtypeSetName(DTypeSet set);

//===----------------------------------------------------------------------===//
// 16-bit floats. Widening is exact; narrowing rounds to nearest even, keeps
// NaN a NaN (quiet) and infinities infinite, and f16 overflows to infinity.
// Cast, the expert kernels and the plan writer all use these, so every path
// that produces or reads a 16-bit weight agrees bit for bit.
//===----------------------------------------------------------------------===//

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

/// Normalises an ONNX axis in [-rank, rank) to [0, rank); false if outside.
inline bool normalizeAxis(int64_t axis, int rank, int &out) {
  if (axis < -rank || axis >= rank)
    return false;
  out = static_cast<int>(axis < 0 ? axis + rank : axis);
  return true;
}

/// a * b, or false on overflow or when either is negative.
inline bool checkedMul(int64_t a, int64_t b, int64_t &out) {
  if (a < 0 || b < 0)
    return false;
  return !__builtin_mul_overflow(a, b, &out);
}

/// Row-major strides of `shape` in elements.
inline void contiguousStrides(const Shape &shape, int64_t *strides) {
  int64_t stride = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
}

/// Reads element `i` of an integer tensor (i64 or i32) as int64.
inline int64_t readIndex(const Tensor &tensor, int64_t i) {
  if (tensor.dtype == DType::I32)
    return tensor.as<const int32_t>()[i];
  return tensor.as<const int64_t>()[i];
}

/// Invokes `fn(T{})` with T the C++ type of a numeric dtype (f32, i64, i32),
/// or of any storable dtype for `dispatchAny`. Returns false for other dtypes.
template <typename Fn> bool dispatchNumeric(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::F32:
    fn(float{});
    return true;
  case DType::I64:
    fn(int64_t{});
    return true;
  case DType::I32:
    fn(int32_t{});
    return true;
  default:
    return false;
  }
}

/// Invokes `fn(T{})` with an unsigned integer type of `bytes` bytes (1, 2,
/// 4 or 8): for kernels that only move elements.
template <typename Fn> bool dispatchBySize(size_t bytes, Fn &&fn) {
  switch (bytes) {
  case 1:
    fn(uint8_t{});
    return true;
  case 2:
    fn(uint16_t{});
    return true;
  case 4:
    fn(uint32_t{});
    return true;
  case 8:
    fn(uint64_t{});
    return true;
  default:
    return false;
  }
}
template <typename Fn> bool dispatchBySize(DType dtype, Fn &&fn) {
  return dispatchBySize(dtypeSize(dtype), std::forward<Fn>(fn));
}

} // namespace moert::detail

#endif // MOERT_SRC_TENSOR_H
