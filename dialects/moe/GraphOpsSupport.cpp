//===- GraphOpsSupport.cpp - helpers of the graph op implementation -------===//
//
// Broadcasting, axes, constant operands, the symbolic view of shape vectors,
// and the inference hooks shared by op families (GraphOpsCommon.h).
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace moec::moe;

//===----------------------------------------------------------------------===//
// Axes, broadcasting, constants
//===----------------------------------------------------------------------===//

FailureOr<int64_t> moec::moe::normalizeAxis(std::optional<Location> loc,
                                            StringRef what, int64_t axis,
                                            int64_t rank) {
  if (axis < -rank || axis >= rank)
    return emitOptionalError(loc, what, " ", axis, " is out of range for rank ",
                             rank, " (expected [", -rank, ", ", rank, "))");
  return axis < 0 ? axis + rank : axis;
}

FailureOr<RankedTensorType>
moec::moe::getRankedType(std::optional<Location> loc, Value value,
                         StringRef name) {
  if (!value)
    return emitOptionalError(loc, "operand '", name, "' is missing");
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type)
    return emitOptionalError(loc, "operand '", name,
                             "' must be a ranked tensor, got ",
                             value.getType());
  return type;
}

std::string moec::moe::formatShape(ArrayRef<int64_t> shape) {
  std::string result = "[";
  for (auto [i, size] : llvm::enumerate(shape)) {
    if (i)
      result += ", ";
    result += ShapedType::isDynamic(size) ? "?" : std::to_string(size);
  }
  return result + "]";
}

LogicalResult moec::moe::broadcastShapes(std::optional<Location> loc,
                                         ArrayRef<int64_t> lhs,
                                         ArrayRef<int64_t> rhs,
                                         SmallVectorImpl<int64_t> &result) {
  size_t rank = std::max(lhs.size(), rhs.size());
  result.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t a = i < rank - lhs.size() ? 1 : lhs[i - (rank - lhs.size())];
    int64_t b = i < rank - rhs.size() ? 1 : rhs[i - (rank - rhs.size())];
    if (a == 1) {
      result[i] = b;
    } else if (b == 1 || a == b) {
      result[i] = a;
    } else if (ShapedType::isDynamic(a)) {
      result[i] = b;
    } else if (ShapedType::isDynamic(b)) {
      result[i] = a;
    } else {
      return emitOptionalError(loc, "shapes ", formatShape(lhs), " and ",
                               formatShape(rhs),
                               " are not broadcastable: sizes ", a, " and ", b,
                               " differ in dimension ", i);
    }
  }
  return success();
}

DenseElementsAttr moec::moe::getFoldableElements(Attribute attr) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense || (!dense.isSplat() && dense.getNumElements() > kMaxFoldElements))
    return {};
  return dense;
}

std::optional<SmallVector<int64_t>> moec::moe::getInts(Attribute attr) {
  DenseElementsAttr dense = getFoldableElements(attr);
  if (!dense || dense.getNumElements() > kMaxFoldElements)
    return std::nullopt;
  auto intType = dyn_cast<IntegerType>(dense.getElementType());
  if (!intType || intType.getWidth() > 64)
    return std::nullopt;
  bool isUnsigned = intType.isUnsigned() || intType.getWidth() == 1;
  SmallVector<int64_t> values;
  values.reserve(dense.getNumElements());
  for (const APInt &value : dense.getValues<APInt>())
    values.push_back(isUnsigned ? static_cast<int64_t>(value.getZExtValue())
                                : value.getSExtValue());
  return values;
}

std::optional<SmallVector<int64_t>> moec::moe::getConstantInts(Value value) {
  Attribute attr;
  if (!value || !matchPattern(value, m_Constant(&attr)))
    return std::nullopt;
  return getInts(attr);
}

std::optional<int64_t> moec::moe::getConstantInt(Value value) {
  std::optional<SmallVector<int64_t>> values = getConstantInts(value);
  if (!values || values->size() != 1)
    return std::nullopt;
  return values->front();
}

DenseElementsAttr moec::moe::getI64Elements(ShapedType type,
                                            ArrayRef<int64_t> values) {
  auto i64Type = RankedTensorType::get(type.getShape(),
                                       IntegerType::get(type.getContext(), 64));
  return DenseElementsAttr::get(i64Type, values);
}

std::pair<int64_t, int64_t> moec::moe::getSliceRange(int64_t dim, int64_t start,
                                                     int64_t end,
                                                     int64_t step) {
  // Clamp before adding `dim` so INT64_MIN/INT64_MAX sentinels cannot overflow.
  start = std::clamp(start, -dim, dim);
  end = std::clamp(end, -dim - 1, dim);
  if (start < 0)
    start += dim;
  if (end < 0)
    end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return {start, end > start ? llvm::divideCeil(end - start, step) : 0};
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  return {start, start > end ? llvm::divideCeil(start - end, -step) : 0};
}

LogicalResult moec::moe::verifyFlag(Operation *op, StringRef name,
                                    int64_t value) {
  if (value != 0 && value != 1)
    return op->emitOpError("attribute '")
           << name << "' must be 0 or 1, got " << value;
  return success();
}

LogicalResult moec::moe::checkFlag(std::optional<Location> loc, StringRef name,
                                   int64_t value) {
  if (value != 0 && value != 1)
    return emitOptionalError(loc, "attribute '", name, "' must be 0 or 1, got ",
                             value);
  return success();
}

FailureOr<SmallVector<int64_t>>
moec::moe::getShapeSizes(std::optional<Location> loc, Value shape,
                         StringRef name) {
  auto type = dyn_cast<RankedTensorType>(shape.getType());
  if (!type || type.getRank() != 1)
    return emitOptionalError(loc, "operand '", name,
                             "' must be a 1-D tensor, got ", shape.getType());
  std::optional<SmallVector<int64_t>> sizes = getShapeOperandSizes(shape);
  if (!sizes)
    return emitOptionalError(
        loc, "operand '", name,
        "' must have a static number of elements to give a ranked result");
  for (int64_t size : *sizes)
    if (size < 0 && !ShapedType::isDynamic(size))
      return emitOptionalError(loc, "operand '", name, "' has negative entry ",
                               size);
  return *sizes;
}

int64_t moec::moe::mulDims(int64_t a, int64_t b) {
  if (a == 0 || b == 0)
    return 0;
  int64_t product;
  // A product past int64 is no size either (callers that can report it
  // check first, multiplySizes in ShapeOps.cpp).
  if (ShapedType::isDynamic(a) || ShapedType::isDynamic(b) ||
      llvm::MulOverflow(a, b, product))
    return ShapedType::kDynamic;
  return product;
}

bool moec::moe::areCompatibleTypes(TypeRange lhs, TypeRange rhs) {
  if (lhs.size() != rhs.size())
    return false;
  for (auto [a, b] : llvm::zip(lhs, rhs)) {
    auto ta = dyn_cast<RankedTensorType>(a);
    auto tb = dyn_cast<RankedTensorType>(b);
    if (!ta || !tb) {
      if (a != b)
        return false;
      continue;
    }
    if (ta.getElementType() != tb.getElementType() ||
        failed(verifyCompatibleShape(ta.getShape(), tb.getShape())))
      return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Symbolic shape vectors
//===----------------------------------------------------------------------===//

namespace {

/// Shape vectors are built by short chains; deeper ones are not worth the
/// compile time and could otherwise recurse without bound.
constexpr unsigned kMaxLookThroughDepth = 32;

std::optional<SmallVector<ShapeEntry>> getEntries(Value value, unsigned depth);

/// Dimension `dim` of `source`, traced back through ops that pass it through
/// unchanged, so that dimensions of different values compare equal: the token
/// dimension of Reshape(x, [dim(x, 0), 4, 4]) is dim(x, 0).
ShapeEntry resolveDim(Value source, int64_t dim, unsigned depth) {
  auto type = cast<RankedTensorType>(source.getType());
  if (!type.isDynamicDim(dim))
    return ShapeEntry::ofConstant(type.getDimSize(dim));
  Operation *def = source.getDefiningOp();
  if (!def || depth > kMaxLookThroughDepth)
    return {std::nullopt, source, dim};
  // Ops whose dynamic result dimensions are their first operand's.
  if (def->hasTrait<moec::moe::OpTrait::SameShapeAsFirst>()) {
    auto input = cast<RankedTensorType>(def->getOperand(0).getType());
    if (input.getRank() != type.getRank())
      return {std::nullopt, source, dim};
    return resolveDim(def->getOperand(0), dim, depth + 1);
  }
  std::optional<ShapeEntry> traced =
      TypeSwitch<Operation *, std::optional<ShapeEntry>>(def)
          .Case([&](TransposeOp op) -> std::optional<ShapeEntry> {
            SmallVector<int64_t> perm = op.getPermutation();
            if (static_cast<int64_t>(perm.size()) != type.getRank() ||
                perm[dim] < 0 || perm[dim] >= type.getRank())
              return std::nullopt;
            return resolveDim(op.getData(), perm[dim], depth + 1);
          })
          .Case([&](ReshapeOp op) -> std::optional<ShapeEntry> {
            auto entries = getEntries(op.getShape(), depth + 1);
            if (!entries ||
                static_cast<int64_t>(entries->size()) != type.getRank())
              return std::nullopt;
            const ShapeEntry &entry = (*entries)[dim];
            if (entry.isDim() || (entry.isConstant() && *entry.constant > 0))
              return entry;
            if (entry.isConstant() && *entry.constant == 0 &&
                !op.getAllowzero() && dim < op.getData().getType().getRank())
              return resolveDim(op.getData(), dim, depth + 1);
            return std::nullopt;
          })
          .Default([](Operation *) { return std::nullopt; });
  return traced.value_or(ShapeEntry{std::nullopt, source, dim});
}

} // namespace

ShapeEntry ShapeEntry::ofDim(Value source, int64_t dim) {
  return resolveDim(source, dim, 0);
}

int64_t ShapeEntry::getSize() const {
  if (constant)
    return *constant;
  if (source)
    return cast<RankedTensorType>(source.getType()).getDimSize(dim);
  return ShapedType::kDynamic;
}

bool ShapeEntry::isSameAs(const ShapeEntry &other) const {
  if (constant || other.constant)
    return constant == other.constant;
  return source && source == other.source && dim == other.dim;
}

namespace {

using Entries = SmallVector<ShapeEntry>;

/// Broadcasts two entry vectors (lengths 1 or `size`) through `fn`.
std::optional<Entries> combineEntries(
    Value lhs, Value rhs, int64_t size, unsigned depth,
    llvm::function_ref<ShapeEntry(const ShapeEntry &, const ShapeEntry &)> fn) {
  std::optional<Entries> a = getEntries(lhs, depth + 1);
  std::optional<Entries> b = getEntries(rhs, depth + 1);
  if (!a || !b)
    return std::nullopt;
  auto lengthOk = [&](const Entries &e) {
    return static_cast<int64_t>(e.size()) == size || e.size() == 1;
  };
  if (!lengthOk(*a) || !lengthOk(*b))
    return std::nullopt;
  Entries result;
  for (int64_t i = 0; i < size; ++i)
    result.push_back(
        fn((*a)[a->size() == 1 ? 0 : i], (*b)[b->size() == 1 ? 0 : i]));
  return result;
}

/// Integer arithmetic on entries: folds constants and the identities that
/// keep a symbolic dimension (x + 0, x - 0, x * 1, x / 1).
ShapeEntry applyArithmetic(Operation *op, const ShapeEntry &a,
                           const ShapeEntry &b) {
  int64_t result = 0;
  if (a.isConstant() && b.isConstant()) {
    int64_t x = *a.constant, y = *b.constant;
    bool overflow =
        TypeSwitch<Operation *, bool>(op)
            .Case([&](AddOp) { return llvm::AddOverflow(x, y, result); })
            .Case([&](SubOp) { return llvm::SubOverflow(x, y, result); })
            .Case([&](MulOp) { return llvm::MulOverflow(x, y, result); })
            .Case([&](DivOp) {
              if (y == 0 || (x == INT64_MIN && y == -1))
                return true;
              result = x / y;
              return false;
            })
            .Default([](Operation *) { return true; });
    return overflow ? ShapeEntry::unknown() : ShapeEntry::ofConstant(result);
  }
  auto isConst = [](const ShapeEntry &e, int64_t v) {
    return e.isConstant() && *e.constant == v;
  };
  if (isa<AddOp>(op) && isConst(a, 0))
    return b;
  if (isa<AddOp, SubOp>(op) && isConst(b, 0))
    return a;
  if (isa<MulOp>(op) && isConst(a, 1))
    return b;
  if (isa<MulOp, DivOp>(op) && isConst(b, 1))
    return a;
  if (isa<MulOp>(op) && (isConst(a, 0) || isConst(b, 0)))
    return ShapeEntry::ofConstant(0);
  return ShapeEntry::unknown();
}

std::optional<Entries> lookThrough(Operation *def, int64_t size,
                                   unsigned depth) {
  return TypeSwitch<Operation *, std::optional<Entries>>(def)
      .Case([&](DimOp op) -> std::optional<Entries> {
        int64_t rank = op.getInput().getType().getRank();
        int64_t index = op.getIndexAttr().getInt();
        if (index < 0 || index >= rank)
          return std::nullopt;
        return Entries{ShapeEntry::ofDim(op.getInput(), index)};
      })
      .Case([&](ShapeOp op) {
        auto [start, end] = op.getDimRange();
        Entries entries;
        for (int64_t i = start; i < end; ++i)
          entries.push_back(ShapeEntry::ofDim(op.getData(), i));
        return entries;
      })
      .Case([&](SizeOp op) -> std::optional<Entries> {
        auto type = op.getData().getType();
        if (!type.hasStaticShape())
          return std::nullopt;
        return Entries{ShapeEntry::ofConstant(type.getNumElements())};
      })
      .Case([&](ConcatOp op) -> std::optional<Entries> {
        Entries entries;
        for (Value input : op.getInputs()) {
          std::optional<Entries> part = getEntries(input, depth + 1);
          if (!part)
            return std::nullopt;
          llvm::append_range(entries, *part);
        }
        return entries;
      })
      .Case<UnsqueezeOp, SqueezeOp, ReshapeOp, IdentityOp>([&](Operation *op) {
        // Row-major order is unchanged by a rank change.
        return getEntries(op->getOperand(0), depth + 1);
      })
      .Case([&](CastOp op) -> std::optional<Entries> {
        auto from =
            dyn_cast<IntegerType>(op.getInput().getType().getElementType());
        auto to = dyn_cast<IntegerType>(op.getTo());
        // Widening or equal-width integer casts keep shape values intact.
        if (!from || !to || to.getWidth() < std::min(from.getWidth(), 32u))
          return std::nullopt;
        return getEntries(op.getInput(), depth + 1);
      })
      .Case([&](GatherOp op) -> std::optional<Entries> {
        std::optional<Entries> data = getEntries(op.getData(), depth + 1);
        std::optional<SmallVector<int64_t>> indices =
            getConstantInts(op.getIndices());
        if (!data || !indices || op.getData().getType().getRank() != 1)
          return std::nullopt;
        int64_t n = data->size();
        Entries entries;
        for (int64_t index : *indices) {
          if (index < -n || index >= n)
            return std::nullopt;
          entries.push_back((*data)[index < 0 ? index + n : index]);
        }
        return entries;
      })
      .Case([&](SliceOp op) -> std::optional<Entries> {
        std::optional<Entries> data = getEntries(op.getData(), depth + 1);
        auto starts = getConstantInts(op.getStarts());
        auto ends = getConstantInts(op.getEnds());
        if (!data || !starts || !ends || starts->size() != 1 ||
            ends->size() != 1 || op.getData().getType().getRank() != 1)
          return std::nullopt;
        if (op.getAxes()) {
          auto axes = getConstantInts(op.getAxes());
          if (!axes || axes->size() != 1 || (*axes)[0] < -1 || (*axes)[0] > 0)
            return std::nullopt;
        }
        int64_t step = 1;
        if (op.getSteps()) {
          std::optional<int64_t> constStep = getConstantInt(op.getSteps());
          if (!constStep || *constStep == 0)
            return std::nullopt;
          step = *constStep;
        }
        auto [first, count] =
            getSliceRange(data->size(), (*starts)[0], (*ends)[0], step);
        Entries entries;
        for (int64_t i = 0; i < count; ++i)
          entries.push_back((*data)[first + i * step]);
        return entries;
      })
      .Case<AddOp, SubOp, MulOp, DivOp>([&](Operation *op) {
        return combineEntries(op->getOperand(0), op->getOperand(1), size, depth,
                              [&](const ShapeEntry &a, const ShapeEntry &b) {
                                return applyArithmetic(op, a, b);
                              });
      })
      .Case([&](WhereOp op) -> std::optional<Entries> {
        std::optional<SmallVector<int64_t>> cond =
            getConstantInts(op.getCondition());
        if (!cond ||
            (cond->size() != 1 && static_cast<int64_t>(cond->size()) != size))
          return std::nullopt;
        int64_t i = 0;
        return combineEntries(op.getX(), op.getY(), size, depth,
                              [&](const ShapeEntry &x, const ShapeEntry &y) {
                                bool pick = (*cond)[cond->size() == 1 ? 0 : i];
                                ++i;
                                return pick ? x : y;
                              });
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<Entries> getEntries(Value value, unsigned depth) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || !isa<IntegerType>(type.getElementType()) || type.getRank() > 1)
    return std::nullopt;
  int64_t size = type.getRank() == 0 ? 1 : type.getDimSize(0);
  if (ShapedType::isDynamic(size) || size > kMaxFoldElements)
    return std::nullopt;
  if (std::optional<SmallVector<int64_t>> ints = getConstantInts(value)) {
    Entries entries;
    for (int64_t v : *ints)
      entries.push_back(ShapeEntry::ofConstant(v));
    return entries;
  }
  Entries unknown(size, ShapeEntry::unknown());
  Operation *def = value.getDefiningOp();
  if (!def || depth > kMaxLookThroughDepth)
    return unknown;
  std::optional<Entries> entries = lookThrough(def, size, depth);
  if (!entries || static_cast<int64_t>(entries->size()) != size)
    return unknown;
  return entries;
}

} // namespace

std::optional<SmallVector<ShapeEntry>> moec::moe::getShapeEntries(Value value) {
  return getEntries(value, 0);
}

std::optional<SmallVector<int64_t>>
moec::moe::getShapeOperandSizes(Value shape) {
  std::optional<Entries> entries = getShapeEntries(shape);
  if (!entries)
    return std::nullopt;
  return llvm::map_to_vector(*entries,
                             [](const ShapeEntry &e) { return e.getSize(); });
}

//===----------------------------------------------------------------------===//
// Family inference hooks (GraphOpsCommon.h)
//===----------------------------------------------------------------------===//

namespace {

/// Broadcasts the shapes of `operands`.
LogicalResult broadcastOperands(std::optional<Location> loc,
                                ValueRange operands,
                                SmallVectorImpl<int64_t> &shape) {
  shape.clear();
  for (Value operand : operands) {
    auto type = dyn_cast<RankedTensorType>(operand.getType());
    if (!type)
      return emitOptionalError(loc, "expected ranked tensor operands, got ",
                               operand.getType());
    SmallVector<int64_t> next;
    if (failed(broadcastShapes(loc, shape, type.getShape(), next)))
      return failure();
    shape = std::move(next);
  }
  return success();
}

/// The element type shared by all `operands`.
FailureOr<Type> getCommonElementType(std::optional<Location> loc,
                                     ValueRange operands) {
  if (operands.empty())
    return emitOptionalError(loc, "expected at least one operand");
  Type element = getElementTypeOrSelf(operands.front().getType());
  for (Value operand : operands.drop_front())
    if (getElementTypeOrSelf(operand.getType()) != element)
      return emitOptionalError(
          loc, "operands have different element types: ", element, " and ",
          getElementTypeOrSelf(operand.getType()));
  return element;
}

} // namespace

LogicalResult moec::moe::inferSameAsFirst(std::optional<Location> loc,
                                          ValueRange operands,
                                          SmallVectorImpl<Type> &types) {
  if (operands.empty())
    return emitOptionalError(loc, "expected at least one operand");
  types.push_back(operands.front().getType());
  return success();
}

namespace {

/// Broadcasts `operands` into a tensor of the element type they share with
/// `typed` (the ones that must agree), or of i1 for predicates.
LogicalResult inferBroadcastOf(std::optional<Location> loc, ValueRange operands,
                               ValueRange typed, bool predicate,
                               SmallVectorImpl<Type> &types) {
  FailureOr<Type> element = getCommonElementType(loc, typed);
  SmallVector<int64_t> shape;
  if (failed(element) || failed(broadcastOperands(loc, operands, shape)))
    return failure();
  Type result =
      predicate ? IntegerType::get((*element).getContext(), 1) : *element;
  types.push_back(RankedTensorType::get(shape, result));
  return success();
}

} // namespace

LogicalResult moec::moe::inferBroadcast(std::optional<Location> loc,
                                        ValueRange operands,
                                        SmallVectorImpl<Type> &types) {
  return inferBroadcastOf(loc, operands, operands, /*predicate=*/false, types);
}

LogicalResult moec::moe::inferBroadcastFirstType(std::optional<Location> loc,
                                                 ValueRange operands,
                                                 SmallVectorImpl<Type> &types) {
  return inferBroadcastOf(loc, operands, operands.take_front(),
                          /*predicate=*/false, types);
}

LogicalResult moec::moe::inferBroadcastPredicate(std::optional<Location> loc,
                                                 ValueRange operands,
                                                 SmallVectorImpl<Type> &types) {
  return inferBroadcastOf(loc, operands, operands, /*predicate=*/true, types);
}

LogicalResult moec::moe::inferWhere(std::optional<Location> loc,
                                    ValueRange operands,
                                    SmallVectorImpl<Type> &types) {
  if (operands.size() != 3)
    return emitOptionalError(loc, "expected 3 operands");
  // The condition is i1; x and y share the result's element type.
  return inferBroadcastOf(loc, operands, operands.drop_front(),
                          /*predicate=*/false, types);
}

LogicalResult moec::moe::inferReduction(std::optional<Location> loc, Value data,
                                        Value axes, int64_t keepdims,
                                        int64_t noopWithEmptyAxes,
                                        SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> dataType = getRankedType(loc, data, "data");
  if (failed(dataType))
    return failure();
  RankedTensorType type = *dataType;
  int64_t rank = type.getRank();
  SmallVector<bool> reduced(rank, false);
  std::optional<SmallVector<int64_t>> constAxes;
  if (axes) {
    auto axesType = dyn_cast<RankedTensorType>(axes.getType());
    if (!axesType || axesType.getRank() != 1)
      return emitOptionalError(loc, "'axes' must be a 1-D tensor, got ",
                               axes.getType());
    constAxes = getConstantInts(axes);
    if (!constAxes) {
      // Which dimensions are reduced is only known at run time.
      int64_t count = axesType.getDimSize(0);
      if (keepdims) {
        types.push_back(RankedTensorType::get(
            SmallVector<int64_t>(rank, ShapedType::kDynamic),
            type.getElementType()));
        return success();
      }
      if (ShapedType::isDynamic(count) || count == 0 || count > rank)
        return emitOptionalError(
            loc, "cannot infer the result rank: 'axes' is not a constant, ",
            "has no static non-zero length up to the rank, and keepdims = 0");
      types.push_back(RankedTensorType::get(
          SmallVector<int64_t>(rank - count, ShapedType::kDynamic),
          type.getElementType()));
      return success();
    }
  }
  if (!constAxes || constAxes->empty()) {
    if (noopWithEmptyAxes) {
      types.push_back(type);
      return success();
    }
    reduced.assign(rank, true);
  }
  for (int64_t axis : constAxes.value_or(SmallVector<int64_t>())) {
    FailureOr<int64_t> normalized = normalizeAxis(loc, "axis", axis, rank);
    if (failed(normalized))
      return failure();
    if (reduced[*normalized])
      return emitOptionalError(loc, "axis ", axis, " is repeated in 'axes'");
    reduced[*normalized] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[i])
      shape.push_back(type.getDimSize(i));
    else if (keepdims)
      shape.push_back(1);
  }
  types.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

LogicalResult moec::moe::verifyReduction(Operation *op, int64_t keepdims,
                                         int64_t noopWithEmptyAxes) {
  if (failed(verifyFlag(op, "keepdims", keepdims)) ||
      failed(verifyFlag(op, "noop_with_empty_axes", noopWithEmptyAxes)))
    return failure();
  return success();
}

LogicalResult moec::moe::verifyAxis(Operation *op, StringRef name, int64_t axis,
                                    int64_t rank) {
  if (axis < -rank || axis >= rank)
    return op->emitOpError("attribute '")
           << name << "' = " << axis << " is out of range for rank " << rank
           << " (expected [" << -rank << ", " << rank << "))";
  return success();
}
