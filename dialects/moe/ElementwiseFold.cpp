//===- ElementwiseFold.cpp - constant folding of elementwise ops ----------===//
//
// Folds elementwise graph ops (unary, binary, comparison, logical and
// variadic) whose operands are small constants or splats, and the algebraic
// identities exporters leave (x * 1, x + 0, ...). As in GraphOpsFold.cpp,
// only splats and constants of at most kMaxFoldElements elements fold, so
// weights are never read or copied.
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/APSInt.h"

#include <cmath>

using namespace mlir;
using namespace moec::moe;

namespace {

//===----------------------------------------------------------------------===//
// Elementwise constant folding
//===----------------------------------------------------------------------===//

/// Computes one result element from the operands' elements (IntegerAttr or
/// FloatAttr); returns null to abandon the fold (division by zero, NaN to
/// integer, ...).
using ElementFn = llvm::function_ref<Attribute(ArrayRef<Attribute>)>;

/// Applies `fn` elementwise with numpy broadcasting to constant `operands`,
/// producing a constant of `resultType` (which must be static). All-splat
/// operands give a splat, whatever its size.
Attribute foldElementwise(ArrayRef<Attribute> operands, Type resultType,
                          ElementFn fn) {
  auto type = dyn_cast<RankedTensorType>(resultType);
  if (!type || !type.hasStaticShape())
    return {};
  SmallVector<DenseElementsAttr> inputs;
  for (Attribute operand : operands) {
    DenseElementsAttr dense = getFoldableElements(operand);
    if (!dense)
      return {};
    inputs.push_back(dense);
  }
  if (llvm::all_of(inputs, [](DenseElementsAttr d) { return d.isSplat(); })) {
    SmallVector<Attribute> elements =
        llvm::map_to_vector(inputs, [](DenseElementsAttr d) {
          return d.getSplatValue<Attribute>();
        });
    Attribute result = fn(elements);
    if (!result)
      return {};
    return DenseElementsAttr::get(type, result);
  }
  if (type.getNumElements() > kMaxFoldElements)
    return {};
  SmallVector<SmallVector<Attribute>> values;
  for (DenseElementsAttr input : inputs) {
    if (input.isSplat())
      values.push_back({input.getSplatValue<Attribute>()});
    else
      values.push_back(llvm::to_vector(input.getValues<Attribute>()));
  }
  ArrayRef<int64_t> shape = type.getShape();
  int64_t rank = shape.size();
  SmallVector<int64_t> index(rank, 0);
  SmallVector<Attribute> results, elements(inputs.size());
  for (int64_t linear = 0, e = type.getNumElements(); linear < e; ++linear) {
    for (auto [i, input] : llvm::enumerate(inputs)) {
      if (input.isSplat()) {
        elements[i] = values[i][0];
        continue;
      }
      // Right-aligned broadcasting: size-1 dimensions repeat element 0.
      ArrayRef<int64_t> inShape = input.getType().getShape();
      int64_t offset = rank - inShape.size(), flat = 0;
      for (int64_t d = 0, n = inShape.size(); d < n; ++d)
        flat = flat * inShape[d] + (inShape[d] == 1 ? 0 : index[d + offset]);
      elements[i] = values[i][flat];
    }
    Attribute result = fn(elements);
    if (!result)
      return {};
    results.push_back(result);
    for (int64_t d = rank - 1; d >= 0 && ++index[d] == shape[d]; --d)
      index[d] = 0;
  }
  return DenseElementsAttr::get(type, results);
}

bool isUnsignedElement(Type type) {
  return type.isUnsignedInteger() || type.isInteger(1);
}

/// Element functions over integers (with the type's signedness) and floats.
using IntFn = llvm::function_ref<std::optional<APInt>(ArrayRef<APInt>, bool)>;
using FloatFn = llvm::function_ref<std::optional<APFloat>(ArrayRef<APFloat>)>;

/// Folds an op whose operands and result share one element type.
Attribute foldArithmetic(ArrayRef<Attribute> operands, Type resultType,
                         IntFn intFn, FloatFn floatFn) {
  Type element = getElementTypeOrSelf(resultType);
  bool isUnsigned = isUnsignedElement(element);
  return foldElementwise(
      operands, resultType, [&](ArrayRef<Attribute> xs) -> Attribute {
        if (isa<IntegerType>(element)) {
          SmallVector<APInt> ints;
          for (Attribute x : xs) {
            auto attr = dyn_cast<IntegerAttr>(x);
            if (!attr || attr.getType() != element)
              return {};
            ints.push_back(attr.getValue());
          }
          std::optional<APInt> result =
              intFn ? intFn(ints, isUnsigned) : std::nullopt;
          return result ? IntegerAttr::get(element, *result) : Attribute();
        }
        if (isa<FloatType>(element)) {
          SmallVector<APFloat> floats;
          for (Attribute x : xs) {
            auto attr = dyn_cast<FloatAttr>(x);
            if (!attr || attr.getType() != element)
              return {};
            floats.push_back(attr.getValue());
          }
          std::optional<APFloat> result =
              floatFn ? floatFn(floats) : std::nullopt;
          return result ? FloatAttr::get(element, *result) : Attribute();
        }
        return {};
      });
}

/// Applies a double-precision function to a float and rounds back.
std::optional<APFloat> viaDouble(const APFloat &x,
                                 llvm::function_ref<double(double)> fn) {
  double result = fn(x.convertToDouble());
  if (std::isnan(result) && !x.isNaN())
    return std::nullopt;
  APFloat value(result);
  bool losesInfo;
  value.convert(x.getSemantics(), APFloat::rmNearestTiesToEven, &losesInfo);
  return value;
}

/// Folds a float-only unary op through a double-precision function.
Attribute foldFloatUnary(Attribute operand, Type resultType,
                         llvm::function_ref<double(double)> fn) {
  return foldArithmetic(operand, resultType, nullptr, [&](ArrayRef<APFloat> x) {
    return viaDouble(x[0], fn);
  });
}

/// Folds a reduction of N operands by a binary element function.
Attribute foldVariadic(
    ArrayRef<Attribute> operands, Type resultType,
    llvm::function_ref<APInt(const APInt &, const APInt &, bool)> intFn,
    llvm::function_ref<APFloat(const APFloat &, const APFloat &)> floatFn) {
  return foldArithmetic(
      operands, resultType,
      [&](ArrayRef<APInt> xs, bool isUnsigned) -> std::optional<APInt> {
        APInt acc = xs[0];
        for (const APInt &x : xs.drop_front())
          acc = intFn(acc, x, isUnsigned);
        return acc;
      },
      [&](ArrayRef<APFloat> xs) -> std::optional<APFloat> {
        APFloat acc = xs[0];
        for (const APFloat &x : xs.drop_front())
          acc = floatFn(acc, x);
        return acc;
      });
}

/// Three-way comparison of two elements of one type; nullopt when unordered.
std::optional<int> compareElements(Attribute lhs, Attribute rhs) {
  if (auto a = dyn_cast<IntegerAttr>(lhs)) {
    auto b = dyn_cast<IntegerAttr>(rhs);
    if (!b || a.getType() != b.getType())
      return std::nullopt;
    bool isUnsigned = isUnsignedElement(a.getType());
    llvm::APSInt x(a.getValue(), isUnsigned), y(b.getValue(), isUnsigned);
    return x < y ? -1 : (x == y ? 0 : 1);
  }
  auto a = dyn_cast<FloatAttr>(lhs);
  auto b = dyn_cast<FloatAttr>(rhs);
  if (!a || !b)
    return std::nullopt;
  switch (a.getValue().compare(b.getValue())) {
  case APFloat::cmpLessThan:
    return -1;
  case APFloat::cmpEqual:
    return 0;
  case APFloat::cmpGreaterThan:
    return 1;
  case APFloat::cmpUnordered:
    return std::nullopt;
  }
  return std::nullopt;
}

/// Folds a comparison into an i1 constant; `accept` maps the three-way
/// result to the predicate (unordered floats compare false).
Attribute foldCompare(ArrayRef<Attribute> operands, Type resultType,
                      llvm::function_ref<bool(int)> accept) {
  Type i1 = getElementTypeOrSelf(resultType);
  return foldElementwise(
      operands, resultType, [&](ArrayRef<Attribute> xs) -> Attribute {
        if (getAttrType(xs[0]) != getAttrType(xs[1]))
          return {};
        std::optional<int> order = compareElements(xs[0], xs[1]);
        bool value = order ? accept(*order) : false;
        return IntegerAttr::get(i1, APInt(1, value));
      });
}

/// Converts one element to `to` as ONNX Cast does; null when the value has
/// no defined conversion (NaN or out-of-range float to integer).
Attribute castElement(Attribute element, Type to) {
  if (auto attr = dyn_cast<IntegerAttr>(element)) {
    bool isUnsigned = isUnsignedElement(attr.getType());
    const APInt &value = attr.getValue();
    if (auto intType = dyn_cast<IntegerType>(to)) {
      if (intType.getWidth() == 1)
        return IntegerAttr::get(to, APInt(1, !value.isZero()));
      return IntegerAttr::get(to, isUnsigned
                                      ? value.zextOrTrunc(intType.getWidth())
                                      : value.sextOrTrunc(intType.getWidth()));
    }
    auto floatType = dyn_cast<FloatType>(to);
    if (!floatType)
      return {};
    APFloat result(floatType.getFloatSemantics());
    result.convertFromAPInt(value, !isUnsigned, APFloat::rmNearestTiesToEven);
    return FloatAttr::get(to, result);
  }
  auto attr = dyn_cast<FloatAttr>(element);
  if (!attr)
    return {};
  APFloat value = attr.getValue();
  if (auto intType = dyn_cast<IntegerType>(to)) {
    if (intType.getWidth() == 1)
      return IntegerAttr::get(to, APInt(1, !value.isZero()));
    llvm::APSInt result(intType.getWidth(), intType.isUnsigned());
    bool isExact;
    if (value.convertToInteger(result, APFloat::rmTowardZero, &isExact) &
        APFloat::opInvalidOp)
      return {};
    return IntegerAttr::get(to, result);
  }
  auto floatType = dyn_cast<FloatType>(to);
  if (!floatType)
    return {};
  bool losesInfo;
  value.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                &losesInfo);
  return FloatAttr::get(to, value);
}

/// True when `attr` is a constant whose every element equals `value`.
bool isSplatOf(Attribute attr, double value) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense || !dense.isSplat())
    return false;
  if (auto i = dyn_cast<IntegerAttr>(dense.getSplatValue<Attribute>()))
    return i.getValue().getSExtValue() == static_cast<int64_t>(value);
  if (auto f = dyn_cast<FloatAttr>(dense.getSplatValue<Attribute>()))
    return f.getValueAsDouble() == value;
  return false;
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise unary ops
//===----------------------------------------------------------------------===//

OpFoldResult NegOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      adaptor.getInput(), getType(),
      [](ArrayRef<APInt> x, bool) -> std::optional<APInt> { return -x[0]; },
      [](ArrayRef<APFloat> x) -> std::optional<APFloat> { return -x[0]; });
}

OpFoldResult AbsOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      adaptor.getInput(), getType(),
      [](ArrayRef<APInt> x, bool isUnsigned) -> std::optional<APInt> {
        return isUnsigned ? x[0] : x[0].abs();
      },
      [](ArrayRef<APFloat> x) -> std::optional<APFloat> {
        return llvm::abs(x[0]);
      });
}

OpFoldResult SignOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      adaptor.getInput(), getType(),
      [](ArrayRef<APInt> x, bool isUnsigned) -> std::optional<APInt> {
        APInt sign(x[0].getBitWidth(), 0);
        if (isUnsigned ? !x[0].isZero() : x[0].isStrictlyPositive())
          sign = 1;
        else if (!isUnsigned && x[0].isNegative())
          sign = APInt::getAllOnes(x[0].getBitWidth());
        return sign;
      },
      [](ArrayRef<APFloat> x) -> std::optional<APFloat> {
        if (x[0].isNaN() || x[0].isZero())
          return x[0];
        APFloat one(x[0].getSemantics(), 1);
        if (x[0].isNegative())
          one.changeSign();
        return one;
      });
}

OpFoldResult ReluOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      adaptor.getInput(), getType(),
      [](ArrayRef<APInt> x, bool) -> std::optional<APInt> {
        return x[0].isNegative() ? APInt::getZero(x[0].getBitWidth()) : x[0];
      },
      [](ArrayRef<APFloat> x) -> std::optional<APFloat> {
        return x[0].isNegative() ? APFloat::getZero(x[0].getSemantics()) : x[0];
      });
}

OpFoldResult NotOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      adaptor.getInput(), getType(),
      [](ArrayRef<APInt> x, bool) -> std::optional<APInt> { return ~x[0]; },
      nullptr);
}

OpFoldResult FloorOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(adaptor.getInput(), getType(), nullptr,
                        [](ArrayRef<APFloat> x) -> std::optional<APFloat> {
                          APFloat r = x[0];
                          r.roundToIntegral(APFloat::rmTowardNegative);
                          return r;
                        });
}

OpFoldResult CeilOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(adaptor.getInput(), getType(), nullptr,
                        [](ArrayRef<APFloat> x) -> std::optional<APFloat> {
                          APFloat r = x[0];
                          r.roundToIntegral(APFloat::rmTowardPositive);
                          return r;
                        });
}

OpFoldResult SqrtOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), getType(),
                        [](double x) { return std::sqrt(x); });
}

OpFoldResult ReciprocalOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), getType(),
                        [](double x) { return 1.0 / x; });
}

OpFoldResult ExpOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), getType(),
                        [](double x) { return std::exp(x); });
}

OpFoldResult LogOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), getType(),
                        [](double x) { return std::log(x); });
}

OpFoldResult TanhOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), getType(),
                        [](double x) { return std::tanh(x); });
}

OpFoldResult ErfOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), getType(),
                        [](double x) { return std::erf(x); });
}

OpFoldResult SigmoidOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), getType(),
                        [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
}

OpFoldResult SinOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), getType(),
                        [](double x) { return std::sin(x); });
}

OpFoldResult CosOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), getType(),
                        [](double x) { return std::cos(x); });
}

OpFoldResult SoftplusOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(adaptor.getInput(), getType(),
                        [](double x) { return std::log1p(std::exp(x)); });
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult same = ifSameType(getInput(), getType()))
    return same;
  Type to = getType().getElementType();
  if (Attribute folded = foldElementwise(
          adaptor.getInput(), getType(),
          [&](ArrayRef<Attribute> x) { return castElement(x[0], to); }))
    return folded;
  return foldShapeVector(getResult());
}

namespace {

/// CastLike(x, t) is Cast(x) to t's element type.
struct CastLikeToCast : OpRewritePattern<CastLikeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CastLikeOp op,
                                PatternRewriter &rewriter) const override {
    auto cast = CastOp::create(
        rewriter, op.getLoc(), op.getType(), op.getInput(),
        TypeAttr::get(op.getType().getElementType()), op.getSaturateAttr());
    rewriter.replaceOp(op, cast);
    return success();
  }
};

} // namespace

void CastLikeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                             MLIRContext *context) {
  results.add<CastLikeToCast>(context);
}

//===----------------------------------------------------------------------===//
// Elementwise binary, comparison, logical and variadic ops
//===----------------------------------------------------------------------===//

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  // x + 0 is exact for integers only (-0.0 + 0.0 is +0.0).
  if (isa<IntegerType>(getType().getElementType())) {
    if (isSplatOf(adaptor.getRhs(), 0))
      if (OpFoldResult same = ifSameType(getLhs(), getType()))
        return same;
    if (isSplatOf(adaptor.getLhs(), 0))
      if (OpFoldResult same = ifSameType(getRhs(), getType()))
        return same;
  }
  if (Attribute folded = foldArithmetic(
          {adaptor.getLhs(), adaptor.getRhs()}, getType(),
          [](ArrayRef<APInt> x, bool) -> std::optional<APInt> {
            return x[0] + x[1];
          },
          [](ArrayRef<APFloat> x) -> std::optional<APFloat> {
            return x[0] + x[1];
          }))
    return folded;
  return foldShapeVector(getResult());
}

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  if (isa<IntegerType>(getType().getElementType()) &&
      isSplatOf(adaptor.getRhs(), 0))
    if (OpFoldResult same = ifSameType(getLhs(), getType()))
      return same;
  if (Attribute folded = foldArithmetic(
          {adaptor.getLhs(), adaptor.getRhs()}, getType(),
          [](ArrayRef<APInt> x, bool) -> std::optional<APInt> {
            return x[0] - x[1];
          },
          [](ArrayRef<APFloat> x) -> std::optional<APFloat> {
            return x[0] - x[1];
          }))
    return folded;
  return foldShapeVector(getResult());
}

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  if (isSplatOf(adaptor.getRhs(), 1))
    if (OpFoldResult same = ifSameType(getLhs(), getType()))
      return same;
  if (isSplatOf(adaptor.getLhs(), 1))
    if (OpFoldResult same = ifSameType(getRhs(), getType()))
      return same;
  if (Attribute folded = foldArithmetic(
          {adaptor.getLhs(), adaptor.getRhs()}, getType(),
          [](ArrayRef<APInt> x, bool) -> std::optional<APInt> {
            return x[0] * x[1];
          },
          [](ArrayRef<APFloat> x) -> std::optional<APFloat> {
            return x[0] * x[1];
          }))
    return folded;
  return foldShapeVector(getResult());
}

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  if (isSplatOf(adaptor.getRhs(), 1))
    if (OpFoldResult same = ifSameType(getLhs(), getType()))
      return same;
  if (Attribute folded = foldArithmetic(
          {adaptor.getLhs(), adaptor.getRhs()}, getType(),
          [](ArrayRef<APInt> x, bool isUnsigned) -> std::optional<APInt> {
            if (x[1].isZero())
              return std::nullopt;
            if (isUnsigned)
              return x[0].udiv(x[1]);
            bool overflow;
            APInt result = x[0].sdiv_ov(x[1], overflow);
            if (overflow)
              return std::nullopt;
            return result;
          },
          [](ArrayRef<APFloat> x) -> std::optional<APFloat> {
            return x[0] / x[1];
          }))
    return folded;
  return foldShapeVector(getResult());
}

OpFoldResult ModOp::fold(FoldAdaptor adaptor) {
  bool cStyle = getFmod() == 1;
  return foldArithmetic(
      {adaptor.getLhs(), adaptor.getRhs()}, getType(),
      [&](ArrayRef<APInt> x, bool isUnsigned) -> std::optional<APInt> {
        if (x[1].isZero())
          return std::nullopt;
        if (isUnsigned)
          return x[0].urem(x[1]);
        if (x[0].isMinSignedValue() && x[1].isAllOnes())
          return APInt::getZero(x[0].getBitWidth());
        APInt rem = x[0].srem(x[1]);
        // Python-style remainder takes the divisor's sign.
        if (!cStyle && !rem.isZero() && rem.isNegative() != x[1].isNegative())
          rem += x[1];
        return rem;
      },
      [](ArrayRef<APFloat> x) -> std::optional<APFloat> {
        APFloat rem = x[0];
        rem.mod(x[1]);
        return rem;
      });
}

OpFoldResult PowOp::fold(FoldAdaptor adaptor) {
  Type element = getType().getElementType();
  return foldElementwise(
      {adaptor.getBase(), adaptor.getExponent()}, getType(),
      [&](ArrayRef<Attribute> x) -> Attribute {
        auto asDouble = [](Attribute a) -> std::optional<double> {
          if (auto f = dyn_cast<FloatAttr>(a))
            return f.getValueAsDouble();
          if (auto i = dyn_cast<IntegerAttr>(a))
            return isUnsignedElement(i.getType())
                       ? static_cast<double>(i.getValue().getZExtValue())
                       : static_cast<double>(i.getValue().getSExtValue());
          return std::nullopt;
        };
        std::optional<double> base = asDouble(x[0]);
        std::optional<double> exponent = asDouble(x[1]);
        if (!base || !exponent)
          return {};
        if (auto intType = dyn_cast<IntegerType>(element)) {
          // Integer powers: exact by repeated squaring, wrapping like the
          // runtime; negative exponents have no integer result.
          if (*exponent < 0 || *exponent != std::floor(*exponent) ||
              *exponent > 64)
            return {};
          APInt acc(intType.getWidth(), 1);
          APInt b = cast<IntegerAttr>(x[0]).getValue();
          for (uint64_t e = static_cast<uint64_t>(*exponent); e; e >>= 1) {
            if (e & 1)
              acc *= b;
            b *= b;
          }
          return IntegerAttr::get(element, acc);
        }
        return castElement(FloatAttr::get(Float64Type::get(getContext()),
                                          std::pow(*base, *exponent)),
                           element);
      });
}

namespace {

APInt minInt(const APInt &a, const APInt &b, bool isUnsigned) {
  return (isUnsigned ? a.ult(b) : a.slt(b)) ? a : b;
}
APInt maxInt(const APInt &a, const APInt &b, bool isUnsigned) {
  return (isUnsigned ? a.ugt(b) : a.sgt(b)) ? a : b;
}

} // namespace

OpFoldResult SumOp::fold(FoldAdaptor adaptor) {
  if (getInputs().size() == 1)
    return ifSameType(getInputs().front(), getType());
  return foldVariadic(
      adaptor.getInputs(), getType(),
      [](const APInt &a, const APInt &b, bool) { return a + b; },
      [](const APFloat &a, const APFloat &b) { return a + b; });
}

OpFoldResult MinOp::fold(FoldAdaptor adaptor) {
  if (getInputs().size() == 1)
    return ifSameType(getInputs().front(), getType());
  return foldVariadic(
      adaptor.getInputs(), getType(), minInt,
      [](const APFloat &a, const APFloat &b) { return llvm::minimum(a, b); });
}

OpFoldResult MaxOp::fold(FoldAdaptor adaptor) {
  if (getInputs().size() == 1)
    return ifSameType(getInputs().front(), getType());
  return foldVariadic(
      adaptor.getInputs(), getType(), maxInt,
      [](const APFloat &a, const APFloat &b) { return llvm::maximum(a, b); });
}

namespace {

/// Equal on shape vectors without constants on both sides: a size is never
/// negative, so comparing it with -1 is false (the `Where(Equal(shape, -1),
/// ...)` pattern of Reshape/Expand exports), and a dimension equals itself.
Attribute foldEqualOfShapes(EqualOp op) {
  auto type = op.getType();
  if (!type.hasStaticShape() || type.getRank() > 1)
    return {};
  auto lhs = getShapeEntries(op.getLhs());
  auto rhs = getShapeEntries(op.getRhs());
  if (!lhs || !rhs)
    return {};
  int64_t size = type.getNumElements();
  SmallVector<bool> values;
  for (int64_t i = 0; i < size; ++i) {
    const ShapeEntry &a = (*lhs)[lhs->size() == 1 ? 0 : i];
    const ShapeEntry &b = (*rhs)[rhs->size() == 1 ? 0 : i];
    if (a.isSameAs(b)) {
      values.push_back(true);
    } else if (a.isConstant() && b.isConstant()) {
      values.push_back(false);
    } else if ((a.isDim() && b.isConstant() && *b.constant < 0) ||
               (b.isDim() && a.isConstant() && *a.constant < 0)) {
      values.push_back(false);
    } else {
      return {};
    }
  }
  return DenseElementsAttr::get(type, values);
}

} // namespace

OpFoldResult EqualOp::fold(FoldAdaptor adaptor) {
  if (Attribute folded =
          foldCompare({adaptor.getLhs(), adaptor.getRhs()}, getType(),
                      [](int order) { return order == 0; }))
    return folded;
  return foldEqualOfShapes(*this);
}

OpFoldResult LessOp::fold(FoldAdaptor adaptor) {
  return foldCompare({adaptor.getLhs(), adaptor.getRhs()}, getType(),
                     [](int order) { return order < 0; });
}

OpFoldResult LessOrEqualOp::fold(FoldAdaptor adaptor) {
  return foldCompare({adaptor.getLhs(), adaptor.getRhs()}, getType(),
                     [](int order) { return order <= 0; });
}

OpFoldResult GreaterOp::fold(FoldAdaptor adaptor) {
  return foldCompare({adaptor.getLhs(), adaptor.getRhs()}, getType(),
                     [](int order) { return order > 0; });
}

OpFoldResult GreaterOrEqualOp::fold(FoldAdaptor adaptor) {
  return foldCompare({adaptor.getLhs(), adaptor.getRhs()}, getType(),
                     [](int order) { return order >= 0; });
}

OpFoldResult AndOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      {adaptor.getLhs(), adaptor.getRhs()}, getType(),
      [](ArrayRef<APInt> x, bool) -> std::optional<APInt> {
        return x[0] & x[1];
      },
      nullptr);
}

OpFoldResult OrOp::fold(FoldAdaptor adaptor) {
  return foldArithmetic(
      {adaptor.getLhs(), adaptor.getRhs()}, getType(),
      [](ArrayRef<APInt> x, bool) -> std::optional<APInt> {
        return x[0] | x[1];
      },
      nullptr);
}

OpFoldResult WhereOp::fold(FoldAdaptor adaptor) {
  if (auto cond = dyn_cast_or_null<DenseElementsAttr>(adaptor.getCondition());
      cond && cond.isSplat()) {
    Value picked = cond.getSplatValue<bool>() ? getX() : getY();
    if (OpFoldResult same = ifSameType(picked, getType()))
      return same;
  }
  if (Attribute folded = foldElementwise(
          {adaptor.getCondition(), adaptor.getX(), adaptor.getY()}, getType(),
          [](ArrayRef<Attribute> x) -> Attribute {
            auto cond = dyn_cast<IntegerAttr>(x[0]);
            if (!cond)
              return {};
            return cond.getValue().isZero() ? x[2] : x[1];
          }))
    return folded;
  return foldShapeVector(getResult());
}
