//===- common.h - Helpers shared by the CPU kernels -------------*- C++ -*-===//

#ifndef MOERT_SRC_KERNELS_COMMON_H
#define MOERT_SRC_KERNELS_COMMON_H

#include "exec/ops.h"
#include "kernels/fast_math.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace moert::detail {

/// Elements per parallel task of cheap elementwise work.
inline constexpr int64_t kElementwiseGrain = 1 << 15;

/// Grain for row-wise work: about `kElementwiseGrain` elements per task.
inline int64_t rowGrain(int64_t rowLength) {
  return std::max<int64_t>(1,
                           kElementwiseGrain / std::max<int64_t>(1, rowLength));
}

/// C[m, n] = alpha * op(A) op(B) + beta * C, row-major, on the calling
/// thread only, through oneDNN (matmul.cpp), whose kernels are chosen by
/// CPUID when the process runs. Every size and leading dimension must fit in
/// 32 bits.
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc);

/// Makes oneDNN generate its sgemm kernels, once per process: the first
/// sgemm of a process takes about 20 ms doing it. Generators call it when
/// they are created, so that it is not the first prompt's (or the first
/// image's) time.
void prepareGemm();

/// sgemm split over the pool's threads: by rows of C when there are enough,
/// otherwise by column blocks (each thread reads its own part of B).
void parallelSgemm(ThreadPool &pool, bool transA, bool transB, int64_t m,
                   int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc);

/// Builds an OpDef; fields beyond these are set on the result.
inline OpDef makeOp(const char *name, int minInputs, int maxInputs,
                    ValidateFn validate, KernelFn kernel,
                    fb::Attrs attrs = fb::Attrs::NONE) {
  OpDef def;
  def.name = name;
  def.minInputs = minInputs;
  def.maxInputs = maxInputs;
  def.validate = validate;
  def.kernel = kernel;
  def.attrs = attrs;
  return def;
}

/// Two's-complement wrapping arithmetic for integers (signed overflow is
/// undefined behaviour in C++); plain arithmetic for floats.
template <typename T> inline T wrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) +
                          static_cast<std::make_unsigned_t<T>>(b));
  else
    return a + b;
}
template <typename T> inline T wrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) -
                          static_cast<std::make_unsigned_t<T>>(b));
  else
    return a - b;
}
template <typename T> inline T wrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) *
                          static_cast<std::make_unsigned_t<T>>(b));
  else
    return a * b;
}

/// Converts a double to T; for integer T, NaN becomes 0 and out-of-range
/// values saturate (a plain cast would be undefined behaviour).
template <typename T> inline T saturateCast(double value) {
  if constexpr (std::is_integral_v<T>) {
    if (std::isnan(value))
      return 0;
    if (value <= static_cast<double>(std::numeric_limits<T>::min()))
      return std::numeric_limits<T>::min();
    if (value >= static_cast<double>(std::numeric_limits<T>::max()))
      return std::numeric_limits<T>::max();
    return static_cast<T>(value);
  } else {
    return static_cast<T>(value);
  }
}

/// Scalar functions shared by the elementwise kernels and fused programs.
inline float sigmoid(float x) { return fastSigmoid(x); }
inline float softplus(float x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
inline float gelu(float x) {
  return 0.5f * x * (1.0f + fastErf(x * 0.70710678118654752f));
}
/// 0.5 x (1 + tanh(u)) computed as x sigmoid(2u), the same function
/// without tanh's cancellation for negative u, and vectorisable (libm's
/// tanh is a scalar call).
inline float geluTanh(float x) {
  constexpr float kTwoAlpha = 1.59576912160573071f; // 2 sqrt(2 / pi)
  return x * fastSigmoid(kTwoAlpha * (x + 0.044715f * x * x * x));
}
/// NaN-propagating max and min (numpy and onnxruntime semantics).
template <typename T> inline T nanMax(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) || std::isnan(b))
      return std::numeric_limits<T>::quiet_NaN();
  return a < b ? b : a;
}
template <typename T> inline T nanMin(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) || std::isnan(b))
      return std::numeric_limits<T>::quiet_NaN();
  return b < a ? b : a;
}

/// Iterates over an output shape broadcast from several input shapes (numpy
/// rules), in runs of consecutive output elements along the innermost
/// dimension. Dimensions are collapsed first, so same-shape operands form a
/// single run.
class BroadcastLoop {
public:
  static constexpr int kMaxOperands = 32;

  /// `inputs[i]` must broadcast to `out` (checked by `broadcastShapes`).
  BroadcastLoop(const Shape &out, const Shape *const *inputs, int count);

  /// Element stride of operand `i` along the innermost dimension (0 or 1).
  int64_t innerStride(int i) const { return strides_[i][rank_ - 1]; }

  /// Calls fn(outOffset, inputOffsets, length) for each run covering output
  /// elements [begin, end).
  template <typename Fn>
  void forEachRun(int64_t begin, int64_t end, Fn &&fn) const {
    int64_t inner = dims_[rank_ - 1];
    int64_t offsets[kMaxOperands];
    while (begin < end) {
      int64_t row = begin / inner, col = begin % inner;
      int64_t length = std::min(inner - col, end - begin);
      rowOffsets(row, offsets);
      for (int i = 0; i < count_; ++i)
        offsets[i] += col * strides_[i][rank_ - 1];
      fn(begin, static_cast<const int64_t *>(offsets), length);
      begin += length;
    }
  }

private:
  void rowOffsets(int64_t row, int64_t *offsets) const;

  int count_;
  int rank_;
  int64_t dims_[kMaxRank];
  int64_t strides_[kMaxOperands][kMaxRank];
};

/// The numpy broadcast of `count` shapes; false if they are incompatible.
bool broadcastShapes(const Shape *const *shapes, int count, Shape &out);

/// `broadcastShapes` with a diagnostic naming the step and the shapes.
absl::Status broadcastOrError(const KernelContext &ctx,
                              const Shape *const *shapes, int count,
                              Shape &out);

/// Load-time check of a broadcasting op: the output's declared rank is the
/// largest input rank.
absl::Status checkBroadcastRank(const StepCheck &check);

/// Reads a scalar operand (rank 0 or one element) as int64; `what` names it.
absl::StatusOr<int64_t> scalarInput(const KernelContext &ctx, int i,
                                    const char *what);

/// Reads an optional 1-D i64/i32 list operand (axes, shape, starts, ...).
absl::Status listInput(const KernelContext &ctx, int i, const char *what,
                       std::vector<int64_t> &out);

/// Normalises a list of axes against `rank`: in range, no repeats.
absl::Status normalizeAxes(const KernelContext &ctx, std::vector<int64_t> &axes,
                           int rank, const char *what);

/// Copies `count` elements of `size` bytes, `dst` and `src` possibly equal
/// (in-place views).
inline void copyBytes(void *dst, const void *src, size_t bytes) {
  if (dst != src && bytes)
    std::memmove(dst, src, bytes);
}

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_COMMON_H
