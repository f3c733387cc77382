//===- elementwise.cpp - Elementwise kernels with numpy broadcasting ------===//
//
// Arithmetic, math functions, comparisons, logic, Where, Clip and Cast.
//
//===----------------------------------------------------------------------===//

#include "kernels/common.h"

#include <atomic>

namespace moert::detail {
namespace {

//===----------------------------------------------------------------------===//
// Loops
//===----------------------------------------------------------------------===//

/// out = fn(a, b) over the broadcast of inputs `ia` and `ib` (shapes already
/// broadcast into `out`). `out` may be one of the inputs (in place).
template <typename A, typename B, typename Out, typename Fn>
void binaryLoop(ThreadPool &pool, const Tensor &a, const Tensor &b, Tensor &out,
                Fn fn) {
  const Shape *shapes[] = {&a.shape, &b.shape};
  BroadcastLoop loop(out.shape, shapes, 2);
  const A *pa = a.as<const A>();
  const B *pb = b.as<const B>();
  Out *po = out.as<Out>();
  int64_t sa = loop.innerStride(0), sb = loop.innerStride(1);
  pool.parallelFor(
      out.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
        loop.forEachRun(begin, end,
                        [&](int64_t o, const int64_t *offs, int64_t n) {
                          const A *x = pa + offs[0];
                          const B *y = pb + offs[1];
                          Out *z = po + o;
                          if (sa == 1 && sb == 1) {
                            for (int64_t i = 0; i < n; ++i)
                              z[i] = fn(x[i], y[i]);
                          } else if (sa == 0 && sb == 1) {
                            A xv = *x;
                            for (int64_t i = 0; i < n; ++i)
                              z[i] = fn(xv, y[i]);
                          } else if (sa == 1 && sb == 0) {
                            B yv = *y;
                            for (int64_t i = 0; i < n; ++i)
                              z[i] = fn(x[i], yv);
                          } else {
                            for (int64_t i = 0; i < n; ++i)
                              z[i] = fn(x[i * sa], y[i * sb]);
                          }
                        });
      });
}

template <typename In, typename Out, typename Fn>
void unaryLoop(ThreadPool &pool, const Tensor &in, Tensor &out, Fn fn) {
  const In *x = in.as<const In>();
  Out *y = out.as<Out>();
  pool.parallelFor(in.numel(), kElementwiseGrain,
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = begin; i < end; ++i)
                       y[i] = fn(x[i]);
                   });
}

/// Allocates output 0 with the broadcast shape of all present inputs.
absl::StatusOr<Tensor *> allocateBroadcast(KernelContext &ctx) {
  const Shape *shapes[BroadcastLoop::kMaxOperands];
  int count = 0;
  for (int i = 0; i < ctx.numInputs() && count < BroadcastLoop::kMaxOperands;
       ++i)
    if (ctx.has(i))
      shapes[count++] = &ctx.in(i).shape;
  Shape shape;
  MOERT_RETURN_IF_ERROR(broadcastOrError(ctx, shapes, count, shape));
  return ctx.allocate(0, shape);
}

//===----------------------------------------------------------------------===//
// Binary arithmetic: Add Sub Mul Div Mod Pow, variadic Min Max Sum
//===----------------------------------------------------------------------===//

enum class Arith { Add, Sub, Mul, Div, Min, Max };

template <Arith kOp, typename T> T arith(T a, T b) {
  switch (kOp) {
  case Arith::Add:
    return wrapAdd(a, b);
  case Arith::Sub:
    return wrapSub(a, b);
  case Arith::Mul:
    return wrapMul(a, b);
  case Arith::Div:
    return a / b; // Integer divisors are checked by the caller.
  case Arith::Min:
    return nanMin(a, b);
  case Arith::Max:
    return nanMax(a, b);
  }
  return a;
}

/// Integer division: zero divisors and INT_MIN / -1 are errors, the quotient
/// truncates (C and onnxruntime).
template <typename T> absl::Status intDivide(KernelContext &ctx, Tensor &out) {
  std::atomic<bool> byZero{false};
  binaryLoop<T, T, T>(ctx.pool(), ctx.in(0), ctx.in(1), out, [&](T a, T b) {
    if (b == 0) {
      byZero.store(true, std::memory_order_relaxed);
      return T(0);
    }
    if (b == -1)
      return wrapSub(T(0), a);
    return static_cast<T>(a / b);
  });
  if (byZero.load())
    return ctx.error("integer division by zero");
  return absl::OkStatus();
}

template <Arith kOp> absl::Status arithKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, allocateBroadcast(ctx));
  absl::Status status;
  dispatchNumeric(out->dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kOp == Arith::Div && std::is_integral_v<T>) {
      status = intDivide<T>(ctx, *out);
    } else {
      // Variadic ops (commutative) fold left: out = in0 op in1, then
      // out = out op in_k. An input that `out` overwrites in place is
      // folded first, before anything is written.
      int n = ctx.numInputs();
      if (n == 1) {
        copyBytes(out->data, ctx.in(0).data, out->bytes());
        return;
      }
      std::vector<int> order(n);
      for (int i = 0; i < n; ++i)
        order[i] = i;
      for (int i = 2; i < n; ++i)
        if (ctx.in(i).data == out->data)
          std::swap(order[0], order[i]);
      const Tensor *acc = &ctx.in(order[0]);
      for (int i = 1; i < n; ++i) {
        // A lambda, not the function's pointer: the loop inlines and
        // vectorises it (through the pointer every element was a call).
        binaryLoop<T, T, T>(ctx.pool(), *acc, ctx.in(order[i]), *out,
                            [](T a, T b) { return arith<kOp, T>(a, b); });
        acc = out;
      }
    }
  });
  return status;
}

absl::Status modKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, allocateBroadcast(ctx));
  bool fmod = ctx.attrs<fb::ModAttrs>()->fmod();
  absl::Status status;
  dispatchNumeric(out->dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      binaryLoop<T, T, T>(ctx.pool(), ctx.in(0), ctx.in(1), *out,
                          [](T a, T b) { return std::fmod(a, b); });
    } else {
      std::atomic<bool> byZero{false};
      binaryLoop<T, T, T>(ctx.pool(), ctx.in(0), ctx.in(1), *out,
                          [&](T a, T b) {
                            if (b == 0) {
                              byZero.store(true, std::memory_order_relaxed);
                              return T(0);
                            }
                            if (b == -1)
                              return T(0);
                            T r = static_cast<T>(a % b);
                            // fmod=0: the result takes the divisor's sign.
                            if (!fmod && r != 0 && ((r < 0) != (b < 0)))
                              r = static_cast<T>(r + b);
                            return r;
                          });
      if (byZero.load())
        status = ctx.error("integer modulo by zero");
    }
  });
  return status;
}

absl::Status validateMod(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kNumericTypes));
  MOERT_RETURN_IF_ERROR(check.sameInTypes(0, 1));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  if (check.in(0).dtype == DType::F32 && !check.attrs<fb::ModAttrs>()->fmod())
    return check.error("fmod must be 1 for floating-point inputs");
  return checkBroadcastRank(check);
}

absl::Status powKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, allocateBroadcast(ctx));
  dispatchNumeric(out->dtype, [&](auto base) {
    using T = decltype(base);
    dispatchNumeric(ctx.in(1).dtype, [&](auto exponent) {
      using E = decltype(exponent);
      binaryLoop<T, E, T>(ctx.pool(), ctx.in(0), ctx.in(1), *out, [](T a, E b) {
        if constexpr (std::is_same_v<T, float> && std::is_same_v<E, float>)
          return std::pow(a, b);
        else
          return saturateCast<T>(
              std::pow(static_cast<double>(a), static_cast<double>(b)));
      });
    });
  });
  return absl::OkStatus();
}

absl::Status validatePow(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kNumericTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, kNumericTypes));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return checkBroadcastRank(check);
}

/// All inputs share one numeric dtype with the output.
absl::Status validateArith(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kNumericTypes));
  for (int i = 1; i < check.numInputs(); ++i)
    MOERT_RETURN_IF_ERROR(check.sameInTypes(0, i));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return checkBroadcastRank(check);
}

//===----------------------------------------------------------------------===//
// Unary math
//===----------------------------------------------------------------------===//

enum class Unary {
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
  Ceil,
  Softplus,
  Neg,
  Abs,
  Relu,
  Sign
};

template <Unary kOp, typename T> T unary(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (kOp) {
    case Unary::Sqrt:
      return std::sqrt(x);
    case Unary::Reciprocal:
      return T(1) / x;
    case Unary::Exp:
      return fastExp(x);
    case Unary::Log:
      return std::log(x);
    case Unary::Tanh:
      return std::tanh(x);
    case Unary::Erf:
      return fastErf(x);
    case Unary::Sigmoid:
      return sigmoid(x);
    case Unary::Sin:
      return std::sin(x);
    case Unary::Cos:
      return std::cos(x);
    case Unary::Floor:
      return std::floor(x);
    case Unary::Ceil:
      return std::ceil(x);
    case Unary::Softplus:
      return softplus(x);
    default:
      break;
    }
  }
  switch (kOp) {
  case Unary::Neg:
    return wrapSub(T(0), x);
  case Unary::Abs:
    return x < 0 ? wrapSub(T(0), x) : x;
  case Unary::Relu:
    return x < 0 ? T(0) : x;
  case Unary::Sign:
    // x != x keeps NaN as NaN (ONNX leaves it to the float semantics).
    return x > 0 ? T(1) : x < 0 ? T(-1) : x;
  default:
    return x;
  }
}

template <Unary kOp> absl::Status unaryKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, ctx.in(0).shape));
  dispatchNumeric(out->dtype, [&](auto tag) {
    using T = decltype(tag);
    unaryLoop<T, T>(ctx.pool(), ctx.in(0), *out,
                    [](T x) { return unary<kOp, T>(x); });
  });
  return absl::OkStatus();
}

template <DTypeSet kTypes> absl::Status validateUnary(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kTypes));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, check.in(0).rank);
}

/// y = GELU(x) over n elements, tanh's approximation or erf's; compiled
/// for AVX-512 and AVX2 too (a vision encoder's MLPs spend a tenth of its
/// time here).
MOERT_MATH_CLONES void geluRange(const float *x, float *y, int64_t n,
                                 bool tanh) {
  if (tanh)
    for (int64_t i = 0; i < n; ++i)
      y[i] = geluTanh(x[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      y[i] = gelu(x[i]);
}

absl::Status geluKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, ctx.in(0).shape));
  bool tanh =
      ctx.attrs<fb::GeluAttrs>()->approximate() == fb::GeluApproximation::Tanh;
  const float *x = ctx.in(0).as<const float>();
  float *y = out->as<float>();
  ctx.pool().parallelFor(out->numel(), kElementwiseGrain,
                         [&](int64_t begin, int64_t end) {
                           geluRange(x + begin, y + begin, end - begin, tanh);
                         });
  return absl::OkStatus();
}

absl::Status validateGelu(const StepCheck &check) {
  auto approximate = check.attrs<fb::GeluAttrs>()->approximate();
  if (approximate != fb::GeluApproximation::None &&
      approximate != fb::GeluApproximation::Tanh)
    return check.error("unknown approximate value ",
                       static_cast<int>(approximate));
  return validateUnary<kFloatTypes>(check);
}

//===----------------------------------------------------------------------===//
// Comparison and logic
//===----------------------------------------------------------------------===//

enum class Compare { Equal, Less, LessOrEqual, Greater, GreaterOrEqual };

template <Compare kOp> absl::Status compareKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, allocateBroadcast(ctx));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    binaryLoop<T, T, uint8_t>(ctx.pool(), ctx.in(0), ctx.in(1), *out,
                              [](T a, T b) -> uint8_t {
                                switch (kOp) {
                                case Compare::Equal:
                                  return a == b;
                                case Compare::Less:
                                  return a < b;
                                case Compare::LessOrEqual:
                                  return a <= b;
                                case Compare::Greater:
                                  return a > b;
                                case Compare::GreaterOrEqual:
                                  return a >= b;
                                }
                                return 0;
                              });
  };
  if (ctx.in(0).dtype == DType::Bool)
    run(uint8_t{});
  else
    dispatchNumeric(ctx.in(0).dtype, run);
  return absl::OkStatus();
}

template <DTypeSet kTypes>
absl::Status validateCompare(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kTypes));
  MOERT_RETURN_IF_ERROR(check.sameInTypes(0, 1));
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::Bool)));
  return checkBroadcastRank(check);
}

template <bool kAnd> absl::Status logicKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, allocateBroadcast(ctx));
  binaryLoop<uint8_t, uint8_t, uint8_t>(
      ctx.pool(), ctx.in(0), ctx.in(1), *out, [](uint8_t a, uint8_t b) {
        return static_cast<uint8_t>(kAnd ? (a && b) : (a || b));
      });
  return absl::OkStatus();
}

absl::Status notKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, ctx.in(0).shape));
  unaryLoop<uint8_t, uint8_t>(ctx.pool(), ctx.in(0), *out,
                              [](uint8_t x) -> uint8_t { return !x; });
  return absl::OkStatus();
}

absl::Status isNaNKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, ctx.in(0).shape));
  unaryLoop<float, uint8_t>(ctx.pool(), ctx.in(0), *out,
                            [](float x) -> uint8_t { return std::isnan(x); });
  return absl::OkStatus();
}

absl::Status validateIsNaN(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::Bool)));
  return check.outRank(0, check.in(0).rank);
}

absl::Status validateLogic(const StepCheck &check) {
  for (int i = 0; i < check.numInputs(); ++i)
    MOERT_RETURN_IF_ERROR(check.inType(i, bit(DType::Bool)));
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::Bool)));
  return checkBroadcastRank(check);
}

//===----------------------------------------------------------------------===//
// Where, Clip
//===----------------------------------------------------------------------===//

absl::Status whereKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(Tensor * out, allocateBroadcast(ctx));
  const Shape *shapes[] = {&ctx.in(0).shape, &ctx.in(1).shape,
                           &ctx.in(2).shape};
  BroadcastLoop loop(out->shape, shapes, 3);
  const uint8_t *cond = ctx.in(0).as<const uint8_t>();
  dispatchBySize(out->dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = ctx.in(1).as<const T>();
    const T *y = ctx.in(2).as<const T>();
    T *z = out->as<T>();
    int64_t sc = loop.innerStride(0), sx = loop.innerStride(1),
            sy = loop.innerStride(2);
    ctx.pool().parallelFor(
        out->numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
          loop.forEachRun(
              begin, end, [&](int64_t o, const int64_t *offs, int64_t n) {
                for (int64_t i = 0; i < n; ++i)
                  z[o + i] = cond[offs[0] + i * sc] ? x[offs[1] + i * sx]
                                                    : y[offs[2] + i * sy];
              });
        });
  });
  return absl::OkStatus();
}

absl::Status validateWhere(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, bit(DType::Bool)));
  MOERT_RETURN_IF_ERROR(check.sameInTypes(1, 2));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 1));
  return checkBroadcastRank(check);
}

absl::Status clipKernel(KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  for (int i = 1; i < 3; ++i)
    if (ctx.has(i) && ctx.in(i).numel() != 1)
      return ctx.error(i == 1 ? "min" : "max", " must have one element; it ",
                       "has shape ", ctx.in(i).shape.str());
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, in.shape));
  dispatchNumeric(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    T lo = ctx.has(1) ? ctx.in(1).as<const T>()[0]
                      : std::numeric_limits<T>::lowest();
    T hi =
        ctx.has(2) ? ctx.in(2).as<const T>()[0] : std::numeric_limits<T>::max();
    unaryLoop<T, T>(ctx.pool(), in, *out, [lo, hi](T x) {
      if constexpr (std::is_floating_point_v<T>)
        if (std::isnan(x))
          return x;
      return x < lo ? (lo < hi ? lo : hi) : (x > hi ? hi : x);
    });
  });
  return absl::OkStatus();
}

absl::Status validateClip(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kNumericTypes));
  MOERT_RETURN_IF_ERROR(check.sameInTypes(0, 1));
  MOERT_RETURN_IF_ERROR(check.sameInTypes(0, 2));
  MOERT_RETURN_IF_ERROR(check.inScalar(1));
  MOERT_RETURN_IF_ERROR(check.inScalar(2));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, check.in(0).rank);
}

//===----------------------------------------------------------------------===//
// Cast, CastLike
//===----------------------------------------------------------------------===//

/// Storage tags of the 16-bit float formats.
struct Half {
  uint16_t bits;
};
struct BFloat {
  uint16_t bits;
};

// The 16-bit float conversions are tensor.h's (shared with the expert
// kernels and the plan writer).

/// Values pass through double, except integer-to-integer casts (exact,
/// wrapping like C++ and onnxruntime) and those from or to bool.
template <typename From> double toDouble(From x) {
  if constexpr (std::is_same_v<From, Half>)
    return halfToFloat(x.bits);
  else if constexpr (std::is_same_v<From, BFloat>)
    return bfloatToFloat(x.bits);
  else
    return static_cast<double>(x);
}

template <typename To, typename From> To convert(From x) {
  if constexpr (std::is_integral_v<To> && std::is_integral_v<From>) {
    if constexpr (std::is_same_v<To, uint8_t>)
      return x != 0;
    else
      return static_cast<To>(x);
  } else if constexpr (std::is_same_v<To, uint8_t>) {
    return toDouble(x) != 0;
  } else if constexpr (std::is_same_v<To, Half>) {
    return Half{floatToHalf(static_cast<float>(toDouble(x)))};
  } else if constexpr (std::is_same_v<To, BFloat>) {
    return BFloat{floatToBfloat(static_cast<float>(toDouble(x)))};
  } else if constexpr (std::is_same_v<To, float>) {
    if constexpr (std::is_same_v<From, float>)
      return x;
    else
      return static_cast<float>(toDouble(x));
  } else {
    double value = toDouble(x);
    if constexpr (std::is_floating_point_v<From> ||
                  std::is_same_v<From, Half> || std::is_same_v<From, BFloat>)
      value = std::trunc(value);
    return saturateCast<To>(value);
  }
}

template <typename Fn> void dispatchStorage(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::F32:
    fn(float{});
    break;
  case DType::F16:
    fn(Half{});
    break;
  case DType::BF16:
    fn(BFloat{});
    break;
  case DType::I64:
    fn(int64_t{});
    break;
  case DType::I32:
    fn(int32_t{});
    break;
  case DType::Bool:
    fn(uint8_t{});
    break;
  case DType::I8: // Refused when the plan loads (refuseInt8Cast).
    break;
  }
}

absl::Status castKernel(KernelContext &ctx) {
  const Tensor &in = ctx.in(0);
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, in.shape));
  if (in.dtype == out->dtype) {
    copyBytes(out->data, in.data, in.bytes());
    return absl::OkStatus();
  }
  dispatchStorage(in.dtype, [&](auto from) {
    dispatchStorage(out->dtype, [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      unaryLoop<From, To>(ctx.pool(), in, *out, convert<To, From>);
    });
  });
  return absl::OkStatus();
}

/// int8 tensors are quantized expert weights, read by the Experts steps
/// alone: a cast from or to int8 has no kernel.
absl::Status refuseInt8Cast(const StepCheck &check, DType from, DType to) {
  if (from == DType::I8 || to == DType::I8)
    return check.error("casts ", dtypeName(from), " to ", dtypeName(to),
                       "; int8 tensors are expert weights, never cast");
  return absl::OkStatus();
}

absl::Status validateCast(const StepCheck &check) {
  DType to = static_cast<DType>(check.attrs<fb::CastAttrs>()->to());
  if (dtypeSize(to) == 0)
    return check.error("unknown target dtype ", static_cast<int>(to));
  MOERT_RETURN_IF_ERROR(refuseInt8Cast(check, check.in(0).dtype, to));
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(to)));
  return check.outRank(0, check.in(0).rank);
}

absl::Status validateCastLike(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(
      refuseInt8Cast(check, check.in(0).dtype, check.in(1).dtype));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 1));
  return check.outRank(0, check.in(0).rank);
}

} // namespace

void registerElementwiseOps(OpRegistry &r) {
  auto binary = [&](fb::OpKind kind, const char *name, ValidateFn validate,
                    KernelFn kernel) {
    OpDef def = makeOp(name, 2, 2, validate, kernel);
    def.inPlaceInputs = kInPlaceAny;
    r.add(kind, def);
  };
  binary(fb::OpKind::Add, "Add", validateArith, arithKernel<Arith::Add>);
  binary(fb::OpKind::Sub, "Sub", validateArith, arithKernel<Arith::Sub>);
  binary(fb::OpKind::Mul, "Mul", validateArith, arithKernel<Arith::Mul>);
  binary(fb::OpKind::Div, "Div", validateArith, arithKernel<Arith::Div>);
  binary(fb::OpKind::Pow, "Pow", validatePow, powKernel);
  OpDef mod = makeOp("Mod", 2, 2, validateMod, modKernel, fb::Attrs::ModAttrs);
  mod.inPlaceInputs = kInPlaceAny;
  r.add(fb::OpKind::Mod, mod);
  auto variadic = [&](fb::OpKind kind, const char *name, KernelFn kernel) {
    OpDef def = makeOp(name, 1, kVariadic, validateArith, kernel);
    def.inPlaceInputs = kInPlaceAny;
    r.add(kind, def);
  };
  variadic(fb::OpKind::Min, "Min", arithKernel<Arith::Min>);
  variadic(fb::OpKind::Max, "Max", arithKernel<Arith::Max>);
  variadic(fb::OpKind::Sum, "Sum", arithKernel<Arith::Add>);

  auto unaryOp = [&](fb::OpKind kind, const char *name, ValidateFn validate,
                     KernelFn kernel) {
    OpDef def = makeOp(name, 1, 1, validate, kernel);
    def.inPlaceInputs = kInPlaceAny;
    r.add(kind, def);
  };
  constexpr DTypeSet kF = kFloatTypes;
  unaryOp(fb::OpKind::Sqrt, "Sqrt", validateUnary<kF>,
          unaryKernel<Unary::Sqrt>);
  unaryOp(fb::OpKind::Reciprocal, "Reciprocal", validateUnary<kF>,
          unaryKernel<Unary::Reciprocal>);
  unaryOp(fb::OpKind::Exp, "Exp", validateUnary<kF>, unaryKernel<Unary::Exp>);
  unaryOp(fb::OpKind::Log, "Log", validateUnary<kF>, unaryKernel<Unary::Log>);
  unaryOp(fb::OpKind::Tanh, "Tanh", validateUnary<kF>,
          unaryKernel<Unary::Tanh>);
  unaryOp(fb::OpKind::Erf, "Erf", validateUnary<kF>, unaryKernel<Unary::Erf>);
  unaryOp(fb::OpKind::Sigmoid, "Sigmoid", validateUnary<kF>,
          unaryKernel<Unary::Sigmoid>);
  unaryOp(fb::OpKind::Sin, "Sin", validateUnary<kF>, unaryKernel<Unary::Sin>);
  unaryOp(fb::OpKind::Cos, "Cos", validateUnary<kF>, unaryKernel<Unary::Cos>);
  unaryOp(fb::OpKind::Floor, "Floor", validateUnary<kF>,
          unaryKernel<Unary::Floor>);
  unaryOp(fb::OpKind::Ceil, "Ceil", validateUnary<kF>,
          unaryKernel<Unary::Ceil>);
  unaryOp(fb::OpKind::Softplus, "Softplus", validateUnary<kF>,
          unaryKernel<Unary::Softplus>);
  constexpr DTypeSet kN = kNumericTypes;
  unaryOp(fb::OpKind::Neg, "Neg", validateUnary<kN>, unaryKernel<Unary::Neg>);
  unaryOp(fb::OpKind::Abs, "Abs", validateUnary<kN>, unaryKernel<Unary::Abs>);
  unaryOp(fb::OpKind::Relu, "Relu", validateUnary<kN>,
          unaryKernel<Unary::Relu>);
  unaryOp(fb::OpKind::Sign, "Sign", validateUnary<kN>,
          unaryKernel<Unary::Sign>);
  OpDef geluDef =
      makeOp("Gelu", 1, 1, validateGelu, geluKernel, fb::Attrs::GeluAttrs);
  geluDef.inPlaceInputs = kInPlaceAny;
  r.add(fb::OpKind::Gelu, geluDef);

  constexpr DTypeSet kEq = kNumericTypes | bit(DType::Bool);
  r.add(fb::OpKind::Equal, makeOp("Equal", 2, 2, validateCompare<kEq>,
                                  compareKernel<Compare::Equal>));
  r.add(fb::OpKind::Less, makeOp("Less", 2, 2, validateCompare<kN>,
                                 compareKernel<Compare::Less>));
  r.add(fb::OpKind::LessOrEqual,
        makeOp("LessOrEqual", 2, 2, validateCompare<kN>,
               compareKernel<Compare::LessOrEqual>));
  r.add(fb::OpKind::Greater, makeOp("Greater", 2, 2, validateCompare<kN>,
                                    compareKernel<Compare::Greater>));
  r.add(fb::OpKind::GreaterOrEqual,
        makeOp("GreaterOrEqual", 2, 2, validateCompare<kN>,
               compareKernel<Compare::GreaterOrEqual>));
  binary(fb::OpKind::And, "And", validateLogic, logicKernel<true>);
  binary(fb::OpKind::Or, "Or", validateLogic, logicKernel<false>);
  unaryOp(fb::OpKind::Not, "Not", validateLogic, notKernel);
  r.add(fb::OpKind::IsNaN, makeOp("IsNaN", 1, 1, validateIsNaN, isNaNKernel));

  OpDef where = makeOp("Where", 3, 3, validateWhere, whereKernel);
  where.inPlaceInputs = kInPlaceAny;
  r.add(fb::OpKind::Where, where);
  OpDef clip = makeOp("Clip", 1, 3, validateClip, clipKernel);
  clip.optionalInputs = 0b110;
  clip.inPlaceInputs = kInPlaceAny;
  r.add(fb::OpKind::Clip, clip);
  r.add(fb::OpKind::Cast,
        makeOp("Cast", 1, 1, validateCast, castKernel, fb::Attrs::CastAttrs));
  r.add(fb::OpKind::CastLike,
        makeOp("CastLike", 2, 2, validateCastLike, castKernel));
}

} // namespace moert::detail
