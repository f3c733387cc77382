//===- generic_logic.h - Per-thread logic of the data-op kernels -*- C++
//-*-===//
//
// What one GPU thread of the generic data ops (generic_kernels.cu) computes,
// as MOERT_HD functions (hd.h); cuda_generic_logic_test.cpp runs the same
// functions over every thread index of each launch against the CPU
// backend's kernels. Semantics are the CPU kernels' (runtime/src/kernels):
//
//  * Element-parallel ops, one thread per output element: strided reads
//    (Transpose, Slice), broadcast reads through planFusedArgs's collapsed
//    strides (Expand, Where, binary arithmetic and comparisons), Concat
//    (the input part found by a scan of at most kConcatMaxInputs starts),
//    Gather (a bad index is reported, and the element written 0), unary
//    math and Cast.
//  * Reductions (ReduceSum/Mean/Max/Min), one thread per output element
//    folding its reduced elements in the CPU's order (double accumulator),
//    so sums are bit-identical to the CPU's.
//  * Row ops, one block of kRowBlock threads per row: Softmax, LayerNorm
//    and RMSNorm. Each thread folds the row's elements j = lane, lane +
//    kRowBlock, ... into a partial (max in float, sums in double as on the
//    CPU), the block combines the partials with a fixed tree
//    (`treeReduce`: stride 128, 64, ..., 1), then every thread writes its
//    elements. The CPU sums sequentially, so sums differ by rounding only.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_GENERIC_LOGIC_H
#define MOERT_SRC_CUDA_GENERIC_LOGIC_H

#include "backends/cuda/hd.h"
#include "format/cuda_abi.h"

#include <cmath>
#include <cstdint>

namespace moert::cuda {

/// Threads per block of every generic kernel (a power of two).
inline constexpr int kGenericBlock = 256;
/// Threads per row of the row ops (one block per row).
inline constexpr int kRowBlock = 256;
/// Inputs of one Concat launch (more: the step runs on the host).
inline constexpr int kConcatMaxInputs = 16;
/// Dims of a strided read (detail::kMaxRank).
inline constexpr int kStridedMaxRank = 8;

/// Data error codes (DeviceErrorRecord::code) of the generic ops.
enum GenericError : int { kGatherIndexOutOfRange = 1 };

//===----------------------------------------------------------------------===//
// Index arithmetic
//===----------------------------------------------------------------------===//

/// Output element i (row-major over `shape`) reads input element
/// offset + sum_d index_d(i) * strides[d] (Transpose, Slice).
struct StridedArgs {
  int rank;
  long long shape[kStridedMaxRank];
  long long strides[kStridedMaxRank];
  long long offset;
};

MOERT_HD inline int64_t stridedSource(const StridedArgs &args, int64_t i) {
  int64_t source = args.offset;
  for (int d = args.rank - 1; d >= 0; --d) {
    source += (i % args.shape[d]) * args.strides[d];
    i /= args.shape[d];
  }
  return source;
}

/// The element of operand `operand` that output element i of a broadcast
/// reads (args from planFusedArgs: collapsed dims, 0 strides where
/// broadcast; rank 0 for one element).
MOERT_HD inline int64_t broadcastSource(const FusedArgs &args, int operand,
                                        int64_t i) {
  int64_t source = 0;
  for (int d = args.rank - 1; d >= 0; --d) {
    source += (i % args.shape[d]) * args.strides[operand][d];
    i /= args.shape[d];
  }
  return source;
}

/// Concat of up to kConcatMaxInputs parts along one axis: the output is
/// [outer, total, inner]; part p holds columns [begin[p], begin[p + 1]).
struct ConcatArgs {
  int count;
  long long outer, total, inner;
  long long begin[kConcatMaxInputs + 1];
  const float *inputs[kConcatMaxInputs];
};

/// Output element i of a Concat: which part, and the element of it.
MOERT_HD inline void concatSource(const ConcatArgs &args, int64_t i, int &part,
                                  int64_t &element) {
  int64_t row = args.total * args.inner;
  int64_t o = i / row, column = (i % row) / args.inner, k = i % args.inner;
  int p = 0;
  while (p + 1 < args.count && column >= args.begin[p + 1])
    ++p;
  int64_t width = args.begin[p + 1] - args.begin[p];
  part = p;
  element = (o * width + column - args.begin[p]) * args.inner + k;
}

/// Gather along an axis of size `dim`: data [outer, dim, block], indices
/// `count` values; output [outer, count, block].
struct GatherArgs {
  long long outer, dim, block, count;
};

/// The data element output element i reads, or -1 when its index is out of
/// [-dim, dim) (then `bad` is the index's position).
MOERT_HD inline int64_t gatherSource(const GatherArgs &args, int64_t index,
                                     int64_t i, int64_t &position) {
  int64_t o = i / (args.count * args.block);
  position = (i / args.block) % args.count;
  if (index < -args.dim || index >= args.dim)
    return -1;
  if (index < 0)
    index += args.dim;
  return (o * args.dim + index) * args.block + i % args.block;
}

//===----------------------------------------------------------------------===//
// Elementwise math (the CPU's elementwise.cpp, f32)
//===----------------------------------------------------------------------===//

enum class GenericBinary : int { Add, Sub, Mul, Div, Min, Max };
enum class GenericCompare : int {
  Equal,
  Less,
  LessOrEqual,
  Greater,
  GreaterOrEqual
};
enum class GenericUnary : int {
  Neg,
  Abs,
  Relu,
  Sign,
  Sqrt,
  Reciprocal,
  Exp,
  Log,
  Tanh,
  Erf,
  Sigmoid,
  Sin,
  Cos,
  Floor,
  Ceil
};

MOERT_HD inline float applyBinary(GenericBinary op, float a, float b) {
  switch (op) {
  case GenericBinary::Add:
    return a + b;
  case GenericBinary::Sub:
    return a - b;
  case GenericBinary::Mul:
    return a * b;
  case GenericBinary::Div:
    return a / b;
  case GenericBinary::Min:
    // NaN-propagating (numpy and onnxruntime), as the CPU's nanMin.
    return a != a || b != b ? NAN : (b < a ? b : a);
  case GenericBinary::Max:
    return a != a || b != b ? NAN : (a < b ? b : a);
  }
  return a;
}

MOERT_HD inline uint8_t applyCompare(GenericCompare op, float a, float b) {
  switch (op) {
  case GenericCompare::Equal:
    return a == b;
  case GenericCompare::Less:
    return a < b;
  case GenericCompare::LessOrEqual:
    return a <= b;
  case GenericCompare::Greater:
    return a > b;
  case GenericCompare::GreaterOrEqual:
    return a >= b;
  }
  return 0;
}

/// IEEE versions of the CPU's functions; Exp and Sigmoid use expf where the
/// CPU uses its fastExp (within 2 ulp).
MOERT_HD inline float applyUnary(GenericUnary op, float x) {
  switch (op) {
  case GenericUnary::Neg:
    return 0.0f - x; // The CPU's wrapSub(0, x): -0 becomes +0.
  case GenericUnary::Abs:
    return x < 0 ? 0.0f - x : x;
  case GenericUnary::Relu:
    return x < 0 ? 0.0f : x;
  case GenericUnary::Sign:
    return x > 0 ? 1.0f : x < 0 ? -1.0f : x;
  case GenericUnary::Sqrt:
    return sqrtf(x);
  case GenericUnary::Reciprocal:
    return 1.0f / x;
  case GenericUnary::Exp:
    return expf(x);
  case GenericUnary::Log:
    return logf(x);
  case GenericUnary::Tanh:
    return tanhf(x);
  case GenericUnary::Erf:
    return erff(x);
  case GenericUnary::Sigmoid:
    return 1.0f / (1.0f + expf(-x));
  case GenericUnary::Sin:
    return sinf(x);
  case GenericUnary::Cos:
    return cosf(x);
  case GenericUnary::Floor:
    return floorf(x);
  case GenericUnary::Ceil:
    return ceilf(x);
  }
  return x;
}

/// Cast of an f32 to an integer type (the CPU's convert: truncate, NaN to 0,
/// saturate).
template <typename To>
MOERT_HD inline To castFloatToInt(float x, To lo, To hi) {
  double value = x;
  if (value != value)
    return 0;
  if (value <= static_cast<double>(lo))
    return lo;
  if (value >= static_cast<double>(hi))
    return hi;
  return static_cast<To>(trunc(value));
}

/// Cast of an integer to f32 through double, as the CPU.
template <typename From> MOERT_HD inline float castIntToFloat(From x) {
  return static_cast<float>(static_cast<double>(x));
}

//===----------------------------------------------------------------------===//
// Reductions: one thread per output element
//===----------------------------------------------------------------------===//

enum class GenericReduce : int { Sum, Mean, Max, Min };

/// The CPU's ReducePlan in fixed arrays: kept dims (row-major over the
/// output) and reduced dims, each with its input stride.
struct ReduceArgs {
  int keptRank, reducedRank;
  long long keptDims[kStridedMaxRank], keptStrides[kStridedMaxRank];
  long long reducedDims[kStridedMaxRank], reducedStrides[kStridedMaxRank];
  long long reduceCount;
};

/// Output element o: the reduced elements in the CPU's order (row-major
/// over the reduced dims), accumulated in double; Max/Min propagate NaN.
MOERT_HD inline float reduceOutput(GenericReduce op, const ReduceArgs &args,
                                   const float *in, int64_t o) {
  int64_t base = 0, rest = o;
  for (int d = args.keptRank - 1; d >= 0; --d) {
    base += (rest % args.keptDims[d]) * args.keptStrides[d];
    rest /= args.keptDims[d];
  }
  double acc = op == GenericReduce::Max   ? -INFINITY
               : op == GenericReduce::Min ? INFINITY
                                          : 0.0;
  for (int64_t k = 0; k < args.reduceCount; ++k) {
    int64_t offset = base, left = k;
    for (int d = args.reducedRank - 1; d >= 0; --d) {
      offset += (left % args.reducedDims[d]) * args.reducedStrides[d];
      left /= args.reducedDims[d];
    }
    double x = in[offset];
    if (op == GenericReduce::Max)
      acc = acc != acc || x != x ? NAN : (acc < x ? x : acc);
    else if (op == GenericReduce::Min)
      acc = acc != acc || x != x ? NAN : (x < acc ? x : acc);
    else
      acc += x;
  }
  if (op == GenericReduce::Mean)
    return static_cast<float>(acc / static_cast<double>(args.reduceCount));
  return static_cast<float>(acc);
}

//===----------------------------------------------------------------------===//
// Row ops: Softmax, LayerNormalization, SimplifiedLayerNormalization
//===----------------------------------------------------------------------===//

/// A row of a row op: `n` elements at `base`, `base + stride`, ...
struct RowSpan {
  long long rows, n, inner;
};

/// Where row r starts (Softmax: rows are (outer, inner) pairs, elements
/// `inner` apart; the norms: inner = 1).
MOERT_HD inline int64_t rowBase(const RowSpan &span, int64_t r) {
  return (r / span.inner) * span.n * span.inner + r % span.inner;
}

/// Combines partials[0 .. count) (count a power of two) into partials[0]
/// by the kernels' tree: stride count/2, ..., 1, lane t taking t + stride.
template <typename T, typename Fn>
MOERT_HD inline void treeReduce(T *partials, int count, Fn combine) {
  for (int stride = count / 2; stride > 0; stride /= 2)
    for (int t = 0; t < stride; ++t)
      partials[t] = combine(partials[t], partials[t + stride]);
}

MOERT_HD inline float maxNanLast(float a, float b) {
  // std::max(max, x) of the CPU: a NaN x is ignored unless it comes first.
  return a < b ? b : a;
}

/// Softmax, pass 1: lane's max over its elements of the row at `p`.
MOERT_HD inline float softmaxPartialMax(const float *p, const RowSpan &span,
                                        int lane, int lanes) {
  float max = -INFINITY;
  for (int64_t j = lane; j < span.n; j += lanes)
    max = maxNanLast(max, p[j * span.inner]);
  return max;
}

/// Softmax, pass 2: lane's sum of exp(x - max) in double.
MOERT_HD inline double softmaxPartialSum(const float *p, const RowSpan &span,
                                         float max, int lane, int lanes) {
  double sum = 0;
  for (int64_t j = lane; j < span.n; j += lanes)
    sum += expf(p[j * span.inner] - max);
  return sum;
}

/// Softmax, pass 3: lane's outputs, exp(x - max) * (1 / sum).
MOERT_HD inline void softmaxWrite(const float *p, float *q, const RowSpan &span,
                                  float max, double sum, int lane, int lanes) {
  float scale = static_cast<float>(1.0 / sum);
  for (int64_t j = lane; j < span.n; j += lanes)
    q[j * span.inner] = expf(p[j * span.inner] - max) * scale;
}

/// Norms, pass 1 (LayerNormalization only): lane's sum of x in double.
MOERT_HD inline double normPartialSum(const float *p, int64_t n, int lane,
                                      int lanes) {
  double sum = 0;
  for (int64_t j = lane; j < n; j += lanes)
    sum += p[j];
  return sum;
}

/// Norms, pass 2: lane's sum of (x - mean)^2 in double (mean 0 for RMSNorm).
MOERT_HD inline double normPartialSquares(const float *p, int64_t n,
                                          double mean, int lane, int lanes) {
  double sum = 0;
  for (int64_t j = lane; j < n; j += lanes) {
    double d = p[j] - mean;
    sum += d * d;
  }
  return sum;
}

/// Norms: the float mean and inverse deviation of a row from its sums, as
/// the CPU (1 / sqrt(var + epsilon) in double).
MOERT_HD inline void normStats(double sum, double squares, int64_t n,
                               double epsilon, bool simplified, float &mean,
                               float &inv) {
  double m = simplified || n == 0 ? 0.0 : sum / n;
  double var = n ? squares / n : 0.0;
  mean = static_cast<float>(m);
  inv = static_cast<float>(1.0 / sqrt(var + epsilon));
}

/// Norms, pass 3: lane's outputs (x - mean) * inv * scale (+ bias); scale
/// and bias are read through `params` (operands 0 and 1 broadcast over the
/// normalised shape; no bias: `bias` null).
MOERT_HD inline void normWrite(const float *p, float *q, int64_t n, float mean,
                               float inv, const FusedArgs &params,
                               const float *scale, const float *bias, int lane,
                               int lanes) {
  for (int64_t j = lane; j < n; j += lanes) {
    float v = (p[j] - mean) * inv * scale[broadcastSource(params, 0, j)];
    q[j] = bias ? v + bias[broadcastSource(params, 1, j)] : v;
  }
}

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_GENERIC_LOGIC_H
