//===- reduction.cpp - Reductions, ArgMax, CumSum, Softmax, TopK ----------===//

#include "kernels/common.h"
#include "kernels/shape_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace moert::detail {
namespace {

/// A tensor seen as [outer, n, inner] around one axis.
struct AxisSplit {
  int64_t outer, n, inner;
};

AxisSplit splitAt(const Shape &shape, int axis) {
  return {shape.span(0, axis), shape[axis], shape.span(axis + 1, shape.rank)};
}

//===----------------------------------------------------------------------===//
// ReduceSum / ReduceMean / ReduceMax / ReduceMin
//===----------------------------------------------------------------------===//

enum class Reduce {
  Sum,
  Mean,
  Max,
  Min,
  Prod,
  L1,
  L2,
  SumSquare,
  LogSum,
  LogSumExp
};

/// The reductions defined on floats only (the plan's validation refuses
/// other element types for them).
constexpr bool isFloatOnly(Reduce op) {
  return op == Reduce::L2 || op == Reduce::LogSum || op == Reduce::LogSumExp;
}

ReducePlan planReduce(const Shape &in, const bool *reduced, bool keepdims) {
  ReducePlan plan;
  int64_t strides[kMaxRank];
  contiguousStrides(in, strides);
  int lastKind = -1;
  for (int d = 0; d < in.rank; ++d) {
    if (reduced[d]) {
      if (keepdims)
        plan.outShape.push(1);
      plan.reduceCount *= in[d];
    } else {
      plan.outShape.push(in[d]);
    }
    if (in[d] == 1)
      continue;
    auto &dims = reduced[d] ? plan.redDims : plan.keptDims;
    auto &strs = reduced[d] ? plan.redStrides : plan.keptStrides;
    int kind = reduced[d];
    if (kind == lastKind && !dims.empty() &&
        strs.back() == strides[d] * in[d]) {
      dims.back() *= in[d];
      strs.back() = strides[d];
    } else {
      dims.push_back(in[d]);
      strs.push_back(strides[d]);
    }
    lastKind = kind;
  }
  return plan;
}

template <Reduce kOp, typename T>
void reduceLoop(ThreadPool &pool, const ReducePlan &plan, const T *in, T *out) {
  int64_t count = plan.outShape.numel();
  int nk = static_cast<int>(plan.keptDims.size());
  int nr = static_cast<int>(plan.redDims.size());
  int64_t inner = nr ? plan.redDims[nr - 1] : 1;
  int64_t innerStride = nr ? plan.redStrides[nr - 1] : 0;
  int64_t rows = plan.reduceCount / std::max<int64_t>(inner, 1);
  constexpr bool kFloat = std::is_floating_point_v<T>;
  using Acc = std::conditional_t<kFloat, double, T>;
  pool.parallelFor(
      count, rowGrain(plan.reduceCount), [&](int64_t begin, int64_t end) {
        std::vector<int64_t> index(std::max(nr, 1), 0);
        for (int64_t o = begin; o < end; ++o) {
          int64_t base = 0, rest = o;
          for (int d = nk - 1; d >= 0; --d) {
            base += (rest % plan.keptDims[d]) * plan.keptStrides[d];
            rest /= plan.keptDims[d];
          }
          // Calls fn on every element reduced into output `o`.
          auto forEach = [&](auto &&fn) {
            std::fill(index.begin(), index.end(), 0);
            for (int64_t row = 0; row < rows && inner > 0; ++row) {
              int64_t offset = base;
              for (int d = 0; d + 1 < nr; ++d)
                offset += index[d] * plan.redStrides[d];
              const T *p = in + offset;
              for (int64_t i = 0; i < inner; ++i)
                fn(p[i * innerStride]);
              for (int d = nr - 2; d >= 0; --d) {
                if (++index[d] < plan.redDims[d])
                  break;
                index[d] = 0;
              }
            }
          };
          Acc acc = 0;
          if constexpr (kOp == Reduce::Max || kOp == Reduce::LogSumExp)
            acc = kFloat ? -std::numeric_limits<T>::infinity()
                         : std::numeric_limits<T>::lowest();
          else if constexpr (kOp == Reduce::Min)
            acc = kFloat ? std::numeric_limits<T>::infinity()
                         : std::numeric_limits<T>::max();
          else if constexpr (kOp == Reduce::Prod)
            acc = 1;
          if constexpr (kOp == Reduce::LogSumExp && kFloat) {
            // max + log(sum(exp(x - max))), as onnxruntime computes it; an
            // infinite max shifts by 0 so that inf and all -inf stay exact.
            double max = acc;
            forEach([&](T x) { max = nanMax<double>(max, x); });
            double shift = std::isinf(max) ? 0.0 : max;
            double sum = 0;
            forEach([&](T x) { sum += std::exp(double(x) - shift); });
            out[o] = static_cast<T>(std::log(sum) + shift);
            continue;
          }
          forEach([&](T x) {
            if constexpr (kOp == Reduce::Max)
              acc = nanMax<Acc>(acc, x);
            else if constexpr (kOp == Reduce::Min)
              acc = nanMin<Acc>(acc, x);
            else if constexpr (kOp == Reduce::Prod)
              acc = wrapMul<Acc>(acc, x);
            else if constexpr (kOp == Reduce::L1)
              acc = wrapAdd<Acc>(acc, x < 0 ? wrapSub<Acc>(0, x) : Acc(x));
            else if constexpr (kOp == Reduce::L2 || kOp == Reduce::SumSquare)
              acc = wrapAdd<Acc>(acc, wrapMul<Acc>(x, x));
            else
              acc = wrapAdd<Acc>(acc, x);
          });
          if constexpr (kOp == Reduce::Mean) {
            if constexpr (kFloat)
              out[o] =
                  static_cast<T>(acc / static_cast<double>(plan.reduceCount));
            else
              out[o] = plan.reduceCount ? static_cast<T>(acc / plan.reduceCount)
                                        : T(0);
          } else if constexpr (kOp == Reduce::L2 && kFloat) {
            out[o] = static_cast<T>(std::sqrt(acc));
          } else if constexpr (kOp == Reduce::LogSum && kFloat) {
            out[o] = static_cast<T>(std::log(acc));
          } else {
            out[o] = static_cast<T>(acc);
          }
        }
      });
}

template <Reduce kOp> absl::Status reduceKernel(KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(ReducePlan plan, reducePlan(ctx));
  if (plan.copy) {
    MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, in.shape));
    copyBytes(out->data, in.data, in.bytes());
    return absl::OkStatus();
  }
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, plan.outShape));
  dispatchNumeric(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!isFloatOnly(kOp) || std::is_floating_point_v<T>)
      reduceLoop<kOp, T>(ctx.pool(), plan, in.as<const T>(), out->as<T>());
  });
  return absl::OkStatus();
}

template <DTypeSet kTypes> absl::Status validateReduce(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, kIndexTypes));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  int rank = check.in(0).rank;
  int outRank = check.out(0).rank;
  if (check.attrs<fb::ReduceAttrs>()->keepdims() ? outRank != rank
                                                 : outRank > rank)
    return check.error("output rank ", outRank, " does not fit input rank ",
                       rank);
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// ArgMax
//===----------------------------------------------------------------------===//

/// Strict weak order with NaN above everything (like numpy's sort).
template <typename T> bool lessNanLast(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a))
      return false;
    if (std::isnan(b))
      return true;
  }
  return a < b;
}

absl::Status argMaxKernel(KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  int axis = 0;
  MOERT_ASSIGN_OR_RETURN(Shape shape, argMaxShape(ctx, axis));
  AxisSplit s = splitAt(in.shape, axis);
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  bool last = ctx.attrs<fb::ArgMaxAttrs>()->select_last_index();
  int64_t *result = out->as<int64_t>();
  dispatchNumeric(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = in.as<const T>();
    ctx.pool().parallelFor(
        s.outer * s.inner, rowGrain(s.n), [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const T *p = x + (r / s.inner) * s.n * s.inner + r % s.inner;
            int64_t best = 0;
            for (int64_t i = 1; i < s.n; ++i) {
              T v = p[i * s.inner], b = p[best * s.inner];
              if (lessNanLast(b, v) || (last && !lessNanLast(v, b)))
                best = i;
            }
            result[r] = best;
          }
        });
  });
  return absl::OkStatus();
}

absl::Status validateArgMax(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kNumericTypes));
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::I64)));
  const auto *attrs = check.attrs<fb::ArgMaxAttrs>();
  int rank = check.in(0).rank;
  MOERT_RETURN_IF_ERROR(check.axis(attrs->axis(), rank).status());
  return check.outRank(0, attrs->keepdims() ? rank : rank - 1);
}

//===----------------------------------------------------------------------===//
// CumSum
//===----------------------------------------------------------------------===//

absl::Status cumSumKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::CumSumAttrs>();
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(int64_t rawAxis, scalarInput(ctx, 1, "axis"));
  MOERT_ASSIGN_OR_RETURN(int axis, ctx.axis(rawAxis, in.shape.rank));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, in.shape));
  AxisSplit s = splitAt(in.shape, axis);
  bool exclusive = attrs->exclusive(), reverse = attrs->reverse();
  dispatchNumeric(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = in.as<const T>();
    T *y = out->as<T>();
    ctx.pool().parallelFor(
        s.outer * s.inner, rowGrain(s.n), [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            int64_t base = (r / s.inner) * s.n * s.inner + r % s.inner;
            T acc = 0;
            for (int64_t j = 0; j < s.n; ++j) {
              int64_t i = reverse ? s.n - 1 - j : j;
              T v = x[base + i * s.inner];
              if (exclusive) {
                y[base + i * s.inner] = acc;
                acc = wrapAdd(acc, v);
              } else {
                acc = wrapAdd(acc, v);
                y[base + i * s.inner] = acc;
              }
            }
          }
        });
  });
  return absl::OkStatus();
}

absl::Status validateCumSum(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kNumericTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, kIndexTypes));
  MOERT_RETURN_IF_ERROR(check.inScalar(1));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, check.in(0).rank);
}

//===----------------------------------------------------------------------===//
// Softmax / LogSoftmax
//===----------------------------------------------------------------------===//

template <bool kLog> absl::Status softmaxKernel(KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(
      int axis, ctx.axis(ctx.attrs<fb::AxisAttrs>()->axis(), in.shape.rank));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, in.shape));
  AxisSplit s = splitAt(in.shape, axis);
  const float *x = in.as<const float>();
  float *y = out->as<float>();
  ctx.pool().parallelFor(
      s.outer * s.inner, rowGrain(s.n), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          int64_t base = (r / s.inner) * s.n * s.inner + r % s.inner;
          const float *p = x + base;
          float *q = y + base;
          int64_t st = s.inner;
          float max = -std::numeric_limits<float>::infinity();
          for (int64_t i = 0; i < s.n; ++i)
            max = std::max(max, p[i * st]);
          // Exponentials go through a small buffer so that the exp loop
          // vectorises while the sum still accumulates in double.
          double sum = 0;
          float buffer[256];
          for (int64_t begin = 0; begin < s.n; begin += 256) {
            int64_t len = std::min<int64_t>(256, s.n - begin);
            const float *src = p + begin * st;
            for (int64_t i = 0; i < len; ++i)
              buffer[i] = fastExp(src[i * st] - max);
            for (int64_t i = 0; i < len; ++i)
              sum += buffer[i];
            if (!kLog)
              for (int64_t i = 0; i < len; ++i)
                q[(begin + i) * st] = buffer[i];
          }
          if (kLog) {
            float logSum = static_cast<float>(std::log(sum));
            for (int64_t i = 0; i < s.n; ++i)
              q[i * st] = p[i * st] - max - logSum;
          } else {
            float scale = static_cast<float>(1.0 / sum);
            for (int64_t i = 0; i < s.n; ++i)
              q[i * st] *= scale;
          }
        }
      });
  return absl::OkStatus();
}

absl::Status validateSoftmax(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  int rank = check.in(0).rank;
  MOERT_RETURN_IF_ERROR(
      check.axis(check.attrs<fb::AxisAttrs>()->axis(), rank).status());
  return check.outRank(0, rank);
}

//===----------------------------------------------------------------------===//
// TopK
//===----------------------------------------------------------------------===//

/// The k best of `order`'s n entries in the unsorted order that onnxruntime
/// returns, in order[0, k): a heap whose root is the worst kept entry,
/// built bottom up over the first k entries (entry j at position k - 1 - j)
/// and fed the others in index order (one replaces the root only when it
/// ranks before it), read out in heap order; or std::nth_element at k - 1
/// over the entries in index order. `before` is a strict total order, so
/// both are functions of the values alone.
template <typename Before>
void selectUnsorted(std::vector<int64_t> &order, int64_t k,
                    const Before &before) {
  int64_t n = order.size();
  std::iota(order.begin(), order.end(), 0);
  if (k <= 1 || !topKUsesHeap(k, n)) {
    if (k > 0)
      std::nth_element(order.begin(), order.begin() + (k - 1), order.end(),
                       before);
    return;
  }
  int64_t *heap = order.data();
  // Moves heap[i] down below every entry that ranks after it.
  auto siftDown = [&](int64_t i) {
    while (true) {
      int64_t worst = i;
      for (int64_t child : {2 * i + 1, 2 * i + 2})
        if (child < k && before(heap[worst], heap[child]))
          worst = child;
      if (worst == i)
        return;
      std::swap(heap[i], heap[worst]);
      i = worst;
    }
  };
  for (int64_t j = 0; j < k; ++j) {
    heap[k - 1 - j] = j;
    siftDown(k - 1 - j);
  }
  for (int64_t j = k; j < n; ++j)
    if (before(j, heap[0])) {
      heap[0] = j;
      siftDown(0);
    }
}

absl::Status topKKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::TopKAttrs>();
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(TopKPlan plan, topKPlan(ctx));
  AxisSplit s{plan.outer, plan.n, plan.inner};
  int64_t k = plan.k;
  MOERT_ASSIGN_OR_RETURN(Tensor * values, ctx.allocate(0, plan.shape));
  MOERT_ASSIGN_OR_RETURN(Tensor * indices, ctx.allocate(1, plan.shape));
  bool largest = attrs->largest(), sorted = attrs->sorted();
  int64_t *idx = indices->as<int64_t>();
  dispatchNumeric(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = in.as<const T>();
    T *v = values->as<T>();
    ctx.pool().parallelFor(
        s.outer * s.inner, rowGrain(s.n), [&](int64_t begin, int64_t end) {
          std::vector<int64_t> order(s.n);
          for (int64_t r = begin; r < end; ++r) {
            int64_t outer = r / s.inner, inner = r % s.inner;
            const T *p = x + outer * s.n * s.inner + inner;
            // Ties keep the lower index first (ONNX); NaN ranks above all.
            auto before = [&](int64_t a, int64_t b) {
              T va = p[a * s.inner], vb = p[b * s.inner];
              if (largest ? lessNanLast(vb, va) : lessNanLast(va, vb))
                return true;
              if (largest ? lessNanLast(va, vb) : lessNanLast(vb, va))
                return false;
              return a < b;
            };
            if (sorted) {
              std::iota(order.begin(), order.end(), 0);
              std::partial_sort(order.begin(), order.begin() + k, order.end(),
                                before);
            } else {
              selectUnsorted(order, k, before);
            }
            int64_t base = outer * k * s.inner + inner;
            for (int64_t j = 0; j < k; ++j) {
              v[base + j * s.inner] = p[order[j] * s.inner];
              idx[base + j * s.inner] = order[j];
            }
          }
        });
  });
  return absl::OkStatus();
}

absl::Status validateTopK(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kNumericTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inScalar(1));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  MOERT_RETURN_IF_ERROR(check.outType(1, bit(DType::I64)));
  int rank = check.in(0).rank;
  MOERT_RETURN_IF_ERROR(
      check.axis(check.attrs<fb::TopKAttrs>()->axis(), rank).status());
  MOERT_RETURN_IF_ERROR(check.outRank(0, rank));
  return check.outRank(1, rank);
}

} // namespace

bool topKUsesHeap(int64_t k, int64_t n) {
  return k < 4 ||
         std::log2(static_cast<double>(k)) / std::log2(static_cast<double>(n)) <
             0.725;
}

absl::StatusOr<Shape> argMaxShape(const KernelContext &ctx, int &axis) {
  const auto *attrs = ctx.attrs<fb::ArgMaxAttrs>();
  const Shape &in = ctx.in(0).shape;
  MOERT_ASSIGN_OR_RETURN(axis, ctx.axis(attrs->axis(), in.rank));
  if (in[axis] == 0)
    return ctx.error("cannot take ArgMax over an empty axis");
  Shape shape;
  for (int d = 0; d < in.rank; ++d)
    if (d != axis)
      shape.push(in[d]);
    else if (attrs->keepdims())
      shape.push(1);
  return shape;
}

absl::StatusOr<TopKPlan> topKPlan(const KernelContext &ctx) {
  const Shape &in = ctx.in(0).shape;
  TopKPlan plan;
  MOERT_ASSIGN_OR_RETURN(plan.axis,
                         ctx.axis(ctx.attrs<fb::TopKAttrs>()->axis(), in.rank));
  MOERT_ASSIGN_OR_RETURN(plan.k, scalarInput(ctx, 1, "K"));
  AxisSplit s = splitAt(in, plan.axis);
  if (plan.k < 0 || plan.k > s.n)
    return ctx.error("K = ", plan.k, " is not in [0, ", s.n, "] (axis ",
                     plan.axis, " of ", in.str(), ")");
  plan.outer = s.outer;
  plan.n = s.n;
  plan.inner = s.inner;
  plan.shape = in;
  plan.shape[plan.axis] = plan.k;
  return plan;
}

absl::StatusOr<ReducePlan> reducePlan(const KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::ReduceAttrs>();
  const Tensor &in = ctx.in(0);
  std::vector<int64_t> axes;
  MOERT_RETURN_IF_ERROR(listInput(ctx, 1, "axes", axes));
  MOERT_RETURN_IF_ERROR(normalizeAxes(ctx, axes, in.shape.rank, "axis"));
  if (axes.empty() && attrs->noop_with_empty_axes()) {
    ReducePlan plan;
    plan.outShape = in.shape;
    plan.copy = true;
    return plan;
  }
  bool reduced[kMaxRank] = {};
  for (int d = 0; d < in.shape.rank; ++d)
    reduced[d] = axes.empty();
  for (int64_t axis : axes)
    reduced[axis] = true;
  return planReduce(in.shape, reduced, attrs->keepdims());
}

void registerReductionOps(OpRegistry &r) {
  auto reduce = [&](fb::OpKind kind, const char *name, KernelFn kernel,
                    ValidateFn validate = validateReduce<kNumericTypes>) {
    OpDef def = makeOp(name, 1, 2, validate, kernel, fb::Attrs::ReduceAttrs);
    def.optionalInputs = 0b10;
    r.add(kind, def);
  };
  reduce(fb::OpKind::ReduceSum, "ReduceSum", reduceKernel<Reduce::Sum>);
  reduce(fb::OpKind::ReduceMean, "ReduceMean", reduceKernel<Reduce::Mean>);
  reduce(fb::OpKind::ReduceMax, "ReduceMax", reduceKernel<Reduce::Max>);
  reduce(fb::OpKind::ReduceMin, "ReduceMin", reduceKernel<Reduce::Min>);
  reduce(fb::OpKind::ReduceProd, "ReduceProd", reduceKernel<Reduce::Prod>);
  reduce(fb::OpKind::ReduceL1, "ReduceL1", reduceKernel<Reduce::L1>);
  reduce(fb::OpKind::ReduceSumSquare, "ReduceSumSquare",
         reduceKernel<Reduce::SumSquare>);
  constexpr ValidateFn kFloatOnly = validateReduce<kFloatTypes>;
  reduce(fb::OpKind::ReduceL2, "ReduceL2", reduceKernel<Reduce::L2>,
         kFloatOnly);
  reduce(fb::OpKind::ReduceLogSum, "ReduceLogSum", reduceKernel<Reduce::LogSum>,
         kFloatOnly);
  reduce(fb::OpKind::ReduceLogSumExp, "ReduceLogSumExp",
         reduceKernel<Reduce::LogSumExp>, kFloatOnly);
  r.add(fb::OpKind::ArgMax, makeOp("ArgMax", 1, 1, validateArgMax, argMaxKernel,
                                   fb::Attrs::ArgMaxAttrs));
  r.add(fb::OpKind::CumSum, makeOp("CumSum", 2, 2, validateCumSum, cumSumKernel,
                                   fb::Attrs::CumSumAttrs));
  OpDef softmax = makeOp("Softmax", 1, 1, validateSoftmax, softmaxKernel<false>,
                         fb::Attrs::AxisAttrs);
  softmax.inPlaceInputs = kInPlaceFirst;
  r.add(fb::OpKind::Softmax, softmax);
  OpDef logSoftmax = makeOp("LogSoftmax", 1, 1, validateSoftmax,
                            softmaxKernel<true>, fb::Attrs::AxisAttrs);
  logSoftmax.inPlaceInputs = kInPlaceFirst;
  r.add(fb::OpKind::LogSoftmax, logSoftmax);
  OpDef topK =
      makeOp("TopK", 2, 2, validateTopK, topKKernel, fb::Attrs::TopKAttrs);
  topK.minOutputs = topK.maxOutputs = 2;
  r.add(fb::OpKind::TopK, topK);
}

} // namespace moert::detail
