//===- tensor.h - Run-time tensor views and dtype helpers -------*- C++ -*-===//

#ifndef MOERT_SRC_TENSOR_H
#define MOERT_SRC_TENSOR_H

#include "format/float16.h"
#include "format/format.h"
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
  /// it, kv_cache_in_place.h): dimension `cacheAxis` is laid out with
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
