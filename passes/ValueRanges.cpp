//===- ValueRanges.cpp - integer value ranges of tensors ------------------===//
//
// Interval arithmetic over the integer ops of the moe dialect, plus totals:
// the bound of a non-negative tensor's sum, which survives the ops that
// only move, select or add up elements (slices, reshapes, reductions,
// scatter-adds) and is created by the ops that count (OneHot, comparisons).
// Every rule is an over-approximation of ONNX semantics for any run-time
// input whose dynamic sizes are within their bounds; an op without a rule
// leaves its results unknown. Arithmetic that would overflow int64 also
// leaves the result unknown.
//
//===----------------------------------------------------------------------===//

#include "passes/ValueRanges.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/FormatVariadic.h"

#include <limits>

using namespace mlir;
using namespace moec;

namespace {

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

/// The element count of a value of the bounded clone (an upper bound of its
/// run-time count), if its type is static.
std::optional<int64_t> getCount(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape())
    return std::nullopt;
  return type.getNumElements();
}

/// Whether the analysis tracks `value`: integer (and boolean) tensors, and
/// float tensors (see getExactLimit).
bool isTracked(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && (type.getElementType().isIntOrIndex() ||
                  isa<FloatType>(type.getElementType()));
}

bool isFloat(Value value) {
  return isa<FloatType>(getElementTypeOrSelf(value.getType()));
}

/// Float tensors are tracked only while every element is an integer that
/// the type holds exactly (|x| <= 2^(mantissa + 1)): exporters count in
/// floats (torch.histc), and on such values float additions are exact, so
/// integer interval arithmetic holds for them. Every rule that produces a
/// float range keeps integers integers; the rest (Div, Mod, Sqrt, ...)
/// leave float results unknown.
int64_t getExactLimit(Type type) {
  auto floatType = cast<FloatType>(getElementTypeOrSelf(type));
  unsigned digits = floatType.getFPMantissaWidth();
  return digits >= 62 ? kUnbounded : int64_t(1) << digits;
}

/// The range a value of integer type `type` can hold at all.
std::pair<int64_t, int64_t> getTypeRange(Type type) {
  auto integer = dyn_cast<IntegerType>(getElementTypeOrSelf(type));
  if (!integer || integer.getWidth() >= 64)
    return {std::numeric_limits<int64_t>::min(), kUnbounded};
  unsigned width = integer.getWidth();
  if (width == 1 || integer.isUnsigned())
    return {0, (int64_t(1) << width) - 1};
  return {-(int64_t(1) << (width - 1)), (int64_t(1) << (width - 1)) - 1};
}

/// n * value for n >= 0 elements, saturating to the side of value's sign:
/// the extreme sum of up to n elements each at most (or at least) value.
std::optional<int64_t> scale(int64_t n, int64_t value) {
  return llvm::checkedMul(n, value);
}

/// Trunc-division corner values (ONNX integer Div truncates toward zero).
std::optional<std::pair<int64_t, int64_t>> divide(const IntRange &a,
                                                  const IntRange &b) {
  if (b.min <= 0 && b.max >= 0)
    return std::nullopt;
  int64_t lo = kUnbounded, hi = std::numeric_limits<int64_t>::min();
  for (int64_t x : {a.min, a.max})
    for (int64_t y : {b.min, b.max}) {
      if (x == std::numeric_limits<int64_t>::min() && y == -1)
        return std::nullopt;
      lo = std::min(lo, x / y);
      hi = std::max(hi, x / y);
    }
  // Between the corners trunc division is monotone in each operand (b keeps
  // one sign), and |x / y| <= |x| for |y| >= 1 includes zero crossings.
  if (a.min <= 0 && a.max >= 0) {
    lo = std::min<int64_t>(lo, 0);
    hi = std::max<int64_t>(hi, 0);
  }
  return std::make_pair(lo, hi);
}

/// The elements of a foldable float constant when every one is an integer
/// within int64.
std::optional<SmallVector<int64_t>> getIntegralFloats(Attribute attr) {
  DenseElementsAttr elements = moe::getFoldableElements(attr);
  // As moe::getInts: a folded ConstantOfShape can be a splat of 2^40
  // elements, which must not be expanded into a vector.
  if (!elements || !isa<FloatType>(elements.getElementType()) ||
      elements.getNumElements() > moe::kMaxFoldElements)
    return std::nullopt;
  SmallVector<int64_t> values;
  for (const APFloat &value : elements.getValues<APFloat>()) {
    if (!value.isInteger() || value.isInfinity() || value.isNaN())
      return std::nullopt;
    double number = value.convertToDouble();
    if (std::abs(number) > 1e18)
      return std::nullopt;
    values.push_back(static_cast<int64_t>(number));
  }
  return values;
}

std::string describe(const IntRange &range) {
  return llvm::formatv("[{0}, {1}]", range.min, range.max).str();
}

} // namespace

const IntRange *ValueRanges::lookup(Value value) const {
  auto it = ranges.find(value);
  return it == ranges.end() ? nullptr : &it->second;
}

void ValueRanges::set(Value value, int64_t min, int64_t max,
                      std::optional<int64_t> total, std::string why) {
  if (!isTracked(value) || min > max)
    return;
  if (isFloat(value)) {
    int64_t limit = getExactLimit(value.getType());
    if (min < -limit || max > limit)
      return;
  }
  auto [typeMin, typeMax] = getTypeRange(value.getType());
  min = std::max(min, typeMin);
  max = std::min(max, typeMax);
  IntRange range{min, max, kUnbounded, std::move(why)};
  if (min >= 0) {
    if (std::optional<int64_t> count = getCount(value))
      if (std::optional<int64_t> all = scale(*count, max))
        range.total = *all;
    if (total)
      range.total = std::min(range.total, std::max<int64_t>(*total, 0));
  }
  ranges[value] = std::move(range);
}

std::optional<std::pair<Value, int64_t>>
ValueRanges::getElementOf(Value value) const {
  auto it = elementOf.find(value);
  if (it == elementOf.end())
    return std::nullopt;
  return it->second;
}

/// Order facts, which the segment lengths of a grouped matmul need: they
/// add up to the last end minus the first start only when the ends do not
/// decrease.
void ValueRanges::visitOrder(Operation *original, Operation *op) {
  auto isVector = [](Value value) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    return type && type.getRank() == 1 && type.hasStaticShape();
  };
  auto isOneElement = [](Value value) {
    std::optional<int64_t> count = getCount(value);
    return count && *count == 1;
  };
  if (auto cumsum = dyn_cast<moe::CumSumOp>(op)) {
    const IntRange *x = lookup(cumsum.getX());
    if (x && x->isNonNegative() && isVector(cumsum.getX()) &&
        cumsum.getReverse() == 0)
      nonDecreasing.insert(cumsum.getResult());
    return;
  }
  if (auto cast = dyn_cast<moe::CastOp>(op)) {
    // Widening or exact casts are monotone: the range check in visit()
    // already required the values to fit the target.
    if (lookup(cast.getResult()) && nonDecreasing.contains(cast.getInput()))
      nonDecreasing.insert(cast.getResult());
    if (auto element = getElementOf(cast.getInput()))
      if (lookup(cast.getResult()))
        elementOf[cast.getResult()] = *element;
    return;
  }
  if (auto split = dyn_cast<moe::SplitOp>(op)) {
    // Output i starts at the sum of the static sizes before it (in the
    // original IR, so that no bound is taken for a size).
    int64_t axis = static_cast<int64_t>(split.getAxis());
    if (!isVector(split.getInput()) || (axis != 0 && axis != -1))
      return;
    int64_t offset = 0;
    for (auto [declared, result] : llvm::zip(
             cast<moe::SplitOp>(original).getOutputs(), split.getOutputs())) {
      auto type = cast<RankedTensorType>(declared.getType());
      if (!type.hasStaticShape())
        return;
      if (type.getNumElements() == 1)
        elementOf[result] = {split.getInput(), offset};
      offset += type.getNumElements();
    }
    return;
  }
  if (auto gather = dyn_cast<moe::GatherOp>(op)) {
    std::optional<int64_t> index = moe::getConstantInt(gather.getIndices());
    auto type = dyn_cast<RankedTensorType>(
        cast<moe::GatherOp>(original).getData().getType());
    if (!index || !type || type.getRank() != 1 || !type.hasStaticShape())
      return;
    int64_t size = type.getDimSize(0);
    if (*index < -size || *index >= size)
      return;
    elementOf[gather.getResult()] = {gather.getData(),
                                     *index < 0 ? *index + size : *index};
    return;
  }
  if (isa<moe::SqueezeOp, moe::UnsqueezeOp, moe::ReshapeOp, moe::FlattenOp,
          moe::IdentityOp>(op)) {
    if (isOneElement(op->getResult(0)))
      if (auto element = getElementOf(op->getOperand(0)))
        elementOf[op->getResult(0)] = *element;
    return;
  }
}

void ValueRanges::visit(Operation *original, Operation *op) {
  visitRanges(original, op);
  visitOrder(original, op);
}

void ValueRanges::visitRanges(Operation *original, Operation *op) {
  auto get = [&](Value value) { return lookup(value); };
  auto copyFrom = [&](Value result, Value source, bool keepsTotal) {
    if (const IntRange *range = get(source))
      set(result, range->min, range->max,
          keepsTotal && range->isNonNegative()
              ? std::optional<int64_t>(range->total)
              : std::nullopt,
          range->why);
  };

  // Booleans: 0 or 1, whatever computed them.
  for (Value result : op->getResults())
    if (auto type = dyn_cast<RankedTensorType>(result.getType()))
      if (type.getElementType().isInteger(1))
        set(result, 0, 1, std::nullopt, "a boolean");

  if (auto constant = dyn_cast<moe::ConstantOp>(op)) {
    std::optional<SmallVector<int64_t>> values =
        isFloat(constant.getResult())
            ? getIntegralFloats(constant.getValueAttr())
            : moe::getConstantInts(constant.getResult());
    if (!values || values->empty())
      return;
    int64_t min = *llvm::min_element(*values),
            max = *llvm::max_element(*values);
    std::optional<int64_t> total = 0;
    for (int64_t value : *values)
      total = total ? llvm::checkedAdd(*total, value) : std::nullopt;
    set(constant.getResult(), min, max, total, "a constant");
    return;
  }
  if (auto dim = dyn_cast<moe::DimOp>(op)) {
    auto declared =
        cast<RankedTensorType>(cast<moe::DimOp>(original).getInput().getType());
    auto bounded = cast<RankedTensorType>(dim.getInput().getType());
    int64_t index = dim.getIndex();
    if (index < 0 || index >= bounded.getRank())
      return;
    int64_t size = bounded.getDimSize(index);
    bool exact = !declared.isDynamicDim(index);
    set(dim.getResult(), exact ? size : 0, size, std::nullopt,
        llvm::formatv("a dimension of at most {0}", size).str());
    return;
  }
  if (auto shape = dyn_cast<moe::ShapeOp>(op)) {
    auto declared = cast<RankedTensorType>(
        cast<moe::ShapeOp>(original).getData().getType());
    auto bounded = cast<RankedTensorType>(shape.getData().getType());
    int64_t rank = bounded.getRank();
    int64_t start = shape.getStart(), end = shape.getEnd().value_or(rank);
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
    if (start >= end)
      return;
    int64_t min = kUnbounded, max = 0, total = 0;
    for (int64_t d = start; d < end; ++d) {
      min = std::min(min, declared.isDynamicDim(d) ? 0 : bounded.getDimSize(d));
      max = std::max(max, bounded.getDimSize(d));
      total += bounded.getDimSize(d);
    }
    set(shape.getResult(), min, max, total, "dimensions of a tensor");
    return;
  }
  if (auto size = dyn_cast<moe::SizeOp>(op)) {
    if (std::optional<int64_t> count = getCount(size.getData()))
      set(size.getResult(), 0, *count, std::nullopt,
          llvm::formatv("an element count of at most {0}", *count).str());
    return;
  }

  // Ops that move or select elements: the range stays; the total too where
  // each element is taken at most once.
  if (isa<moe::ReshapeOp, moe::FlattenOp, moe::SqueezeOp, moe::UnsqueezeOp,
          moe::IdentityOp, moe::TransposeOp, moe::SliceOp>(op)) {
    copyFrom(op->getResult(0), op->getOperand(0), /*keepsTotal=*/true);
    return;
  }
  if (auto split = dyn_cast<moe::SplitOp>(op)) {
    for (Value result : split.getOutputs())
      copyFrom(result, split.getInput(), /*keepsTotal=*/true);
    return;
  }
  if (isa<moe::GatherOp, moe::GatherElementsOp, moe::GatherNDOp, moe::ExpandOp,
          moe::TileOp, moe::ReduceMaxOp, moe::ReduceMinOp>(op)) {
    copyFrom(op->getResult(0), op->getOperand(0), /*keepsTotal=*/false);
    return;
  }
  if (auto topk = dyn_cast<moe::TopKOp>(op)) {
    // k distinct positions of the input.
    copyFrom(topk.getValues(), topk.getInput(), /*keepsTotal=*/true);
    auto type = cast<RankedTensorType>(topk.getInput().getType());
    int64_t axis = static_cast<int64_t>(topk.getAxis());
    axis = axis < 0 ? axis + type.getRank() : axis;
    if (axis >= 0 && axis < type.getRank())
      set(topk.getIndices(), 0, std::max<int64_t>(0, type.getDimSize(axis) - 1),
          std::nullopt, "top-k indices");
    return;
  }
  if (auto argmax = dyn_cast<moe::ArgMaxOp>(op)) {
    auto type = cast<RankedTensorType>(argmax.getData().getType());
    int64_t axis = static_cast<int64_t>(argmax.getAxis());
    axis = axis < 0 ? axis + type.getRank() : axis;
    if (axis >= 0 && axis < type.getRank())
      set(argmax.getResult(), 0,
          std::max<int64_t>(0, type.getDimSize(axis) - 1), std::nullopt,
          "arg-max indices");
    return;
  }
  if (auto nonZero = dyn_cast<moe::NonZeroOp>(op)) {
    auto type = cast<RankedTensorType>(nonZero.getX().getType());
    int64_t largest = 1;
    for (int64_t size : type.getShape())
      largest = std::max(largest, size);
    set(nonZero.getResult(), 0, largest - 1, std::nullopt, "non-zero indices");
    return;
  }
  if (auto concat = dyn_cast<moe::ConcatOp>(op)) {
    int64_t min = kUnbounded, max = std::numeric_limits<int64_t>::min();
    std::optional<int64_t> total = 0;
    for (Value input : concat.getInputs()) {
      const IntRange *range = get(input);
      if (!range)
        return;
      min = std::min(min, range->min);
      max = std::max(max, range->max);
      total = total && range->isNonNegative()
                  ? llvm::checkedAdd(*total, range->total)
                  : std::nullopt;
    }
    set(concat.getResult(), min, max, total, "a concatenation");
    return;
  }
  if (auto cast = dyn_cast<moe::CastOp>(op)) {
    // Integer to integer; saturation or wrap-around to a narrower type is
    // caught by set() clamping to the target type only when nothing is cut.
    // Float to integer truncates toward zero, which keeps an integer
    // interval; integer to float is exact within the type's limit (set()
    // checks it).
    const IntRange *range = get(cast.getInput());
    if (!range)
      return;
    auto [typeMin, typeMax] = getTypeRange(cast.getResult().getType());
    if (cast.getResult().getType().getElementType().isInteger(1))
      return; // any non-zero becomes 1: set above
    if (range->min < typeMin || range->max > typeMax)
      return;
    copyFrom(cast.getResult(), cast.getInput(), /*keepsTotal=*/true);
    return;
  }
  if (auto where = dyn_cast<moe::WhereOp>(op)) {
    const IntRange *a = get(where.getX()), *b = get(where.getY());
    if (a && b)
      set(where.getResult(), std::min(a->min, b->min), std::max(a->max, b->max),
          std::nullopt, "a selection");
    return;
  }
  if (auto constant = dyn_cast<moe::ConstantOfShapeOp>(op)) {
    if (!constant.getValueAttr())
      return;
    // A float fill counts too where it is integral (routing maps of ones).
    std::optional<SmallVector<int64_t>> value =
        isFloat(constant.getResult())
            ? getIntegralFloats(constant.getValueAttr())
            : moe::getInts(constant.getValueAttr());
    if (value && value->size() == 1)
      set(constant.getResult(), value->front(), value->front(), std::nullopt,
          "a filled tensor");
    return;
  }

  // Arithmetic.
  if (isa<moe::AddOp, moe::SubOp, moe::MulOp, moe::DivOp, moe::MinOp,
          moe::MaxOp, moe::SumOp>(op)) {
    SmallVector<const IntRange *> in;
    for (Value operand : op->getOperands())
      if (!(in.emplace_back(get(operand))))
        return;
    if (in.empty())
      return;
    int64_t min = in[0]->min, max = in[0]->max;
    for (const IntRange *next : ArrayRef(in).drop_front()) {
      std::optional<int64_t> lo, hi;
      if (isa<moe::AddOp, moe::SumOp>(op)) {
        lo = llvm::checkedAdd(min, next->min);
        hi = llvm::checkedAdd(max, next->max);
      } else if (isa<moe::SubOp>(op)) {
        lo = llvm::checkedSub(min, next->max);
        hi = llvm::checkedSub(max, next->min);
      } else if (isa<moe::MulOp>(op)) {
        lo = kUnbounded;
        hi = std::numeric_limits<int64_t>::min();
        for (int64_t x : {min, max})
          for (int64_t y : {next->min, next->max}) {
            std::optional<int64_t> p = llvm::checkedMul(x, y);
            if (!p)
              return;
            lo = std::min(*lo, *p);
            hi = std::max(*hi, *p);
          }
      } else if (isa<moe::DivOp>(op)) {
        if (isFloat(op->getResult(0)))
          return;
        auto quotient = divide(IntRange{min, max, 0, ""}, *next);
        if (!quotient)
          return;
        std::tie(lo, hi) = *quotient;
      } else if (isa<moe::MinOp>(op)) {
        lo = std::min(min, next->min);
        hi = std::min(max, next->max);
      } else {
        lo = std::max(min, next->min);
        hi = std::max(max, next->max);
      }
      if (!lo || !hi)
        return;
      min = *lo;
      max = *hi;
    }
    std::string why =
        llvm::formatv("arithmetic on {0}", describe(*in[0])).str();
    set(op->getResult(0), min, max, std::nullopt, why);
    return;
  }
  if (auto neg = dyn_cast<moe::NegOp>(op)) {
    if (const IntRange *a = get(neg.getInput()))
      if (a->min != std::numeric_limits<int64_t>::min())
        set(neg.getResult(), -a->max, -a->min, std::nullopt, "a negation");
    return;
  }
  if (auto abs = dyn_cast<moe::AbsOp>(op)) {
    if (const IntRange *a = get(abs.getInput()))
      if (a->min != std::numeric_limits<int64_t>::min()) {
        int64_t hi = std::max(-a->min, a->max);
        int64_t lo = a->min >= 0 ? a->min : (a->max <= 0 ? -a->max : 0);
        set(abs.getResult(), lo, hi, std::nullopt, "an absolute value");
      }
    return;
  }
  if (auto relu = dyn_cast<moe::ReluOp>(op)) {
    if (const IntRange *a = get(relu.getInput()))
      set(relu.getResult(), std::max<int64_t>(a->min, 0),
          std::max<int64_t>(a->max, 0), std::nullopt, "a relu");
    return;
  }
  if (auto clip = dyn_cast<moe::ClipOp>(op)) {
    // Without a range of the input (an index computed in floats, say), the
    // bounds alone bound the result, for integer results.
    const IntRange *a = get(clip.getInput());
    IntRange any{std::numeric_limits<int64_t>::min(), kUnbounded, 0, ""};
    if (!a && (isFloat(clip.getResult()) || !clip.getMin() || !clip.getMax()))
      return;
    if (!a)
      a = &any;
    int64_t lo = a->min, hi = a->max;
    if (clip.getMin()) {
      const IntRange *m = get(clip.getMin());
      if (!m)
        return;
      lo = std::max(lo, m->min);
      hi = std::max(hi, m->max);
    }
    if (clip.getMax()) {
      const IntRange *m = get(clip.getMax());
      if (!m)
        return;
      lo = std::min(lo, m->min);
      hi = std::min(hi, m->max);
    }
    set(clip.getResult(), lo, hi, std::nullopt,
        llvm::formatv("clipped to [{0}, {1}]", lo, hi).str());
    return;
  }
  if (auto mod = dyn_cast<moe::ModOp>(op)) {
    const IntRange *a = get(mod.getLhs()), *b = get(mod.getRhs());
    if (!a || !b || b->min <= 0 || isFloat(mod.getResult()))
      return;
    // A positive divisor: Python-style mod is in [0, b), C-style fmod has
    // the dividend's sign; either way |result| < b.max.
    if (a->isNonNegative() || mod.getFmod() == 0)
      set(mod.getResult(), 0, b->max - 1, std::nullopt, "a remainder");
    else
      set(mod.getResult(), 1 - b->max, b->max - 1, std::nullopt, "a remainder");
    return;
  }

  // Ops that count: these create the totals.
  if (auto oneHot = dyn_cast<moe::OneHotOp>(op)) {
    Attribute valuesAttr;
    std::optional<SmallVector<int64_t>> values;
    if (matchPattern(oneHot.getValues(), m_Constant(&valuesAttr)))
      values = isFloat(oneHot.getValues()) ? getIntegralFloats(valuesAttr)
                                           : moe::getInts(valuesAttr);
    std::optional<int64_t> indices = getCount(oneHot.getIndices());
    if (!values || values->size() != 2 || !indices)
      return;
    int64_t off = (*values)[0], on = (*values)[1];
    // Each index sets at most one element of its row to `on` (none when out
    // of range); with off = 0 the whole tensor sums to at most indices * on.
    std::optional<int64_t> total;
    if (off == 0 && on >= 0)
      total = scale(*indices, on);
    set(oneHot.getResult(), std::min(off, on), std::max(off, on), total,
        llvm::formatv("a one-hot of {0} indices", *indices).str());
    return;
  }
  if (isa<moe::ReduceSumOp>(op)) {
    auto reduce = cast<moe::ReduceSumOp>(op);
    const IntRange *a = get(reduce.getData());
    std::optional<int64_t> in = getCount(reduce.getData());
    std::optional<int64_t> out = getCount(reduce.getResult());
    if (!a || !in || !out)
      return;
    // Each output sums at most `in` elements (its group; a group is never
    // larger than the whole input), and together they sum every element
    // once, so the total carries over.
    int64_t group = *out > 0 ? *in : 0;
    std::optional<int64_t> lo = a->min >= 0 ? 0 : scale(group, a->min);
    std::optional<int64_t> hi = a->max <= 0 ? 0 : scale(group, a->max);
    if (!lo || !hi)
      return;
    int64_t max = *hi;
    std::optional<int64_t> total;
    if (a->isNonNegative()) {
      max = std::min(max, a->total);
      total = a->total;
    }
    set(reduce.getResult(), *lo, max, total,
        a->isNonNegative()
            ? llvm::formatv("a sum of values totalling at most {0}", a->total)
                  .str()
            : "a sum");
    return;
  }
  if (auto cumsum = dyn_cast<moe::CumSumOp>(op)) {
    const IntRange *a = get(cumsum.getX());
    auto type = cast<RankedTensorType>(cumsum.getX().getType());
    std::optional<int64_t> axis = moe::getConstantInt(cumsum.getAxis());
    if (!a || !axis || type.getRank() == 0)
      return;
    int64_t d = *axis < 0 ? *axis + type.getRank() : *axis;
    if (d < 0 || d >= type.getRank())
      return;
    int64_t n = type.getDimSize(d);
    // A prefix of non-negative counts is at most their total.
    std::optional<int64_t> lo = a->min >= 0 ? 0 : scale(n, a->min);
    std::optional<int64_t> hi = a->max <= 0 ? 0 : scale(n, a->max);
    if (!lo || !hi)
      return;
    int64_t max = a->isNonNegative() ? std::min(*hi, a->total) : *hi;
    set(cumsum.getResult(), *lo, max, std::nullopt,
        a->isNonNegative()
            ? llvm::formatv("a cumulative sum of counts totalling at most {0}",
                            a->total)
                  .str()
            : "a cumulative sum");
    return;
  }
  if (isa<moe::ScatterElementsOp, moe::ScatterNDOp>(op)) {
    Value data = op->getOperand(0), updates = op->getOperand(2);
    StringRef reduction = op->getAttrOfType<StringAttr>("reduction").getValue();
    const IntRange *d = get(data), *u = get(updates);
    std::optional<int64_t> n = getCount(updates);
    if (!d || !u || !n)
      return;
    bool nonNegative = d->isNonNegative() && u->isNonNegative();
    std::optional<int64_t> total =
        nonNegative ? llvm::checkedAdd(d->total, u->total) : std::nullopt;
    if (reduction == "none") {
      set(op->getResult(0), std::min(d->min, u->min), std::max(d->max, u->max),
          total, "a scatter");
    } else if (reduction == "add") {
      // An element is its data plus the updates sent to it: at most all of
      // them.
      std::optional<int64_t> down = u->min >= 0 ? 0 : scale(*n, u->min);
      std::optional<int64_t> up =
          u->max <= 0 ? 0
                      : (u->isNonNegative() ? std::optional<int64_t>(u->total)
                                            : scale(*n, u->max));
      if (!down || !up)
        return;
      std::optional<int64_t> lo = llvm::checkedAdd(d->min, *down);
      std::optional<int64_t> hi = llvm::checkedAdd(d->max, *up);
      if (!lo || !hi)
        return;
      set(op->getResult(0), *lo, *hi, total,
          nonNegative ? llvm::formatv("a scatter-add of counts totalling at "
                                      "most {0}",
                                      u->total)
                            .str()
                      : "a scatter-add");
    } else if (reduction == "max") {
      set(op->getResult(0), d->min, std::max(d->max, u->max), std::nullopt,
          "a scatter-max");
    } else if (reduction == "min") {
      set(op->getResult(0), std::min(d->min, u->min), d->max, std::nullopt,
          "a scatter-min");
    }
    return;
  }
  if (auto range = dyn_cast<moe::RangeOp>(op)) {
    const IntRange *start = get(range.getStart()),
                   *limit = get(range.getLimit());
    if (start && limit)
      set(range.getResult(), std::min(start->min, limit->min),
          std::max(start->max, limit->max), std::nullopt, "a range");
    return;
  }
}
