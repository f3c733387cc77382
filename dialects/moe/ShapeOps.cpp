//===- ShapeOps.cpp - result types of the shape-manipulating ops ---------===//
//
// Result type inference and verifiers of the graph ops that rearrange
// elements without computing on them: Reshape, Flatten, Transpose, Squeeze,
// Unsqueeze, Concat, Stack, Split, Slice, Expand, Tile and Trilu. As in
// GraphOps.cpp, inference checks everything it relies on and fails with a
// diagnostic instead of asserting.
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace moec::moe;

static constexpr int64_t kDynamic = ShapedType::kDynamic;

LogicalResult ReshapeOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getData(), "data");
  if (failed(type))
    return failure();
  int64_t allowZero = toSigned(adaptor.getAllowzero());
  if (failed(checkFlag(location, "allowzero", allowZero)))
    return failure();
  auto shapeType = dyn_cast<RankedTensorType>(adaptor.getShape().getType());
  if (!shapeType || shapeType.getRank() != 1)
    return emitOptionalError(location, "operand 'shape' must be a 1-D tensor");
  std::optional<SmallVector<ShapeEntry>> entries =
      getShapeEntries(adaptor.getShape());
  if (!entries)
    return emitOptionalError(
        location, "operand 'shape' must have a static number of elements");
  ArrayRef<int64_t> input = type->getShape();
  SmallVector<int64_t> shape;
  std::optional<size_t> inferred;
  // Input dimensions not yet matched by an output entry, to solve for -1
  // symbolically: Reshape(x : ?x4x16, [dim(x, 0), -1]) gives ?x64.
  SmallVector<ShapeEntry> unmatched;
  int64_t inputStatic = 1;
  for (auto [i, size] : llvm::enumerate(input)) {
    if (ShapedType::isDynamic(size))
      unmatched.push_back(ShapeEntry::ofDim(adaptor.getData(), i));
    else
      inputStatic *= size;
  }
  int64_t outputStatic = 1;
  bool outputUnknown = false;
  for (auto [i, entry] : llvm::enumerate(*entries)) {
    ShapeEntry resolved = entry;
    if (entry.isConstant() && *entry.constant == 0 && !allowZero) {
      if (i >= input.size())
        return emitOptionalError(location, "shape entry ", i,
                                 " is 0 (copy) but the input has rank ",
                                 input.size());
      resolved = ShapeEntry::ofDim(adaptor.getData(), i);
    }
    if (resolved.isConstant() && *resolved.constant == -1) {
      if (inferred)
        return emitOptionalError(location, "shape has more than one -1 entry");
      inferred = i;
      shape.push_back(kDynamic);
      continue;
    }
    if (resolved.isConstant() && *resolved.constant < 0)
      return emitOptionalError(location, "shape entry ", i, " is ",
                               *resolved.constant,
                               " (expected -1, 0 or a positive size)");
    shape.push_back(resolved.getSize());
    if (!ShapedType::isDynamic(shape.back())) {
      if (llvm::MulOverflow(outputStatic, shape.back(), outputStatic))
        return emitOptionalError(location, "shape ", formatShape(shape),
                                 " has more than 2^63 elements");
      continue;
    }
    auto *it = llvm::find_if(
        unmatched, [&](const ShapeEntry &e) { return e.isSameAs(resolved); });
    if (it != unmatched.end())
      unmatched.erase(it);
    else
      outputUnknown = true;
  }
  if (inferred && unmatched.empty() && !outputUnknown && outputStatic != 0) {
    if (inputStatic % outputStatic != 0)
      return emitOptionalError(location, "cannot reshape ", *type, " into ",
                               formatShape(shape), ": ", inputStatic,
                               " elements do not divide by ", outputStatic);
    shape[*inferred] = inputStatic / outputStatic;
  } else if (!inferred && type->hasStaticShape() &&
             llvm::none_of(shape, ShapedType::isDynamic) &&
             inputStatic != outputStatic) {
    return emitOptionalError(location, "cannot reshape ", *type, " into ",
                             formatShape(shape), ": element counts ",
                             inputStatic, " and ", outputStatic, " differ");
  }
  types.push_back(RankedTensorType::get(shape, type->getElementType()));
  return success();
}

/// `a * b` as mulDims gives it, or an error at `location` when both are
/// static and the product does not fit in int64 (a corrupt model's sizes).
static FailureOr<int64_t> multiplySizes(std::optional<Location> location,
                                        int64_t a, int64_t b) {
  int64_t product;
  if (!ShapedType::isDynamic(a) && !ShapedType::isDynamic(b) &&
      llvm::MulOverflow(a, b, product))
    return emitOptionalError(location, "the result's size ", a, " x ", b,
                             " does not fit in int64");
  return mulDims(a, b);
}

LogicalResult FlattenOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  // Flatten's axis is in [-rank, rank]: it may equal the rank (everything
  // in the first dimension), and negative values count from the back.
  int64_t rank = type->getRank();
  int64_t axis = toSigned(adaptor.getAxis());
  if (axis < -rank || axis > rank)
    return emitOptionalError(location, "axis ", axis,
                             " is out of range for rank ", rank, " (expected [",
                             -rank, ", ", rank, "])");
  if (axis < 0)
    axis += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i) {
    int64_t &product = i < axis ? outer : inner;
    FailureOr<int64_t> size =
        multiplySizes(location, product, type->getDimSize(i));
    if (failed(size))
      return failure();
    product = *size;
  }
  types.push_back(
      RankedTensorType::get({outer, inner}, type->getElementType()));
  return success();
}

SmallVector<int64_t> TransposeOp::getPermutation() {
  if (std::optional<ArrayRef<int64_t>> perm = getPerm())
    return SmallVector<int64_t>(*perm);
  return llvm::to_vector(
      llvm::reverse(llvm::seq<int64_t>(0, getData().getType().getRank())));
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getData(), "data");
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  SmallVector<int64_t> perm;
  if (std::optional<ArrayRef<int64_t>> attr = adaptor.getPerm())
    perm.assign(attr->begin(), attr->end());
  else
    perm = llvm::to_vector(llvm::reverse(llvm::seq<int64_t>(0, rank)));
  if (static_cast<int64_t>(perm.size()) != rank)
    return emitOptionalError(location, "'perm' has ", perm.size(),
                             " entries but the input has rank ", rank);
  SmallVector<bool> seen(rank, false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return emitOptionalError(location, "'perm' [", perm,
                               "] is not a permutation of [0, ", rank, ")");
    seen[p] = true;
    shape.push_back(type->getDimSize(p));
  }
  types.push_back(RankedTensorType::get(shape, type->getElementType()));
  return success();
}

namespace {

/// Normalises constant `axes` against `rank`, rejecting repeats.
FailureOr<SmallVector<int64_t>> normalizeAxes(std::optional<Location> loc,
                                              ArrayRef<int64_t> axes,
                                              int64_t rank) {
  SmallVector<int64_t> result;
  for (int64_t axis : axes) {
    FailureOr<int64_t> normalized = normalizeAxis(loc, "axis", axis, rank);
    if (failed(normalized))
      return failure();
    if (llvm::is_contained(result, *normalized))
      return emitOptionalError(loc, "axis ", axis, " is repeated in 'axes'");
    result.push_back(*normalized);
  }
  return result;
}

/// The static length of 1-D operand `value`, or an error.
FailureOr<int64_t> getVectorLength(std::optional<Location> loc, Value value,
                                   StringRef name) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || type.getRank() != 1)
    return emitOptionalError(loc, "operand '", name,
                             "' must be a 1-D tensor, got ", value.getType());
  if (type.isDynamicDim(0))
    return emitOptionalError(loc, "operand '", name,
                             "' must be a constant or have a static length");
  return type.getDimSize(0);
}

/// The number of axes in the `axes` operand of Squeeze and Unsqueeze: a
/// scalar is one axis (as onnxruntime reads it), a 1-D tensor its length;
/// other ranks are an error.
FailureOr<int64_t> getAxesCount(std::optional<Location> loc, Value axes) {
  auto type = dyn_cast<RankedTensorType>(axes.getType());
  if (type && type.getRank() == 0)
    return 1;
  if (type && type.getRank() > 1)
    return emitOptionalError(loc,
                             "operand 'axes' must be a scalar or a 1-D "
                             "tensor, got ",
                             axes.getType());
  return getVectorLength(loc, axes, "axes");
}

} // namespace

LogicalResult SqueezeOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getData(), "data");
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  SmallVector<int64_t> shape;
  FailureOr<int64_t> count =
      adaptor.getAxes() ? getAxesCount(location, adaptor.getAxes()) : 0;
  if (failed(count))
    return failure();
  if (!adaptor.getAxes()) {
    // Dynamic dimensions are assumed not to be 1: a token count that can be
    // 1 must not disappear from the rank.
    for (int64_t size : type->getShape())
      if (size != 1)
        shape.push_back(size);
  } else if (auto axes = getConstantInts(adaptor.getAxes())) {
    FailureOr<SmallVector<int64_t>> normalized =
        normalizeAxes(location, *axes, rank);
    if (failed(normalized))
      return failure();
    for (int64_t i = 0; i < rank; ++i) {
      int64_t size = type->getDimSize(i);
      if (!llvm::is_contained(*normalized, i)) {
        shape.push_back(size);
        continue;
      }
      if (size != 1 && !ShapedType::isDynamic(size))
        return emitOptionalError(location, "cannot squeeze dimension ", i,
                                 " of size ", size);
    }
  } else {
    if (*count > rank)
      return emitOptionalError(location, "cannot squeeze ", *count,
                               " dimensions of a rank-", rank, " tensor");
    shape.assign(rank - *count, kDynamic);
  }
  types.push_back(RankedTensorType::get(shape, type->getElementType()));
  return success();
}

LogicalResult UnsqueezeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getData(), "data");
  if (failed(type))
    return failure();
  FailureOr<int64_t> count = getAxesCount(location, adaptor.getAxes());
  if (failed(count))
    return failure();
  std::optional<SmallVector<int64_t>> axes = getConstantInts(adaptor.getAxes());
  if (!axes) {
    types.push_back(RankedTensorType::get(
        SmallVector<int64_t>(type->getRank() + *count, kDynamic),
        type->getElementType()));
    return success();
  }
  int64_t rank = type->getRank() + axes->size();
  FailureOr<SmallVector<int64_t>> normalized =
      normalizeAxes(location, *axes, rank);
  if (failed(normalized))
    return failure();
  SmallVector<int64_t> shape;
  auto input = type->getShape().begin();
  for (int64_t i = 0; i < rank; ++i)
    shape.push_back(llvm::is_contained(*normalized, i) ? 1 : *input++);
  types.push_back(RankedTensorType::get(shape, type->getElementType()));
  return success();
}

/// The ranked type of the first of the variadic `inputs` of a concatenation
/// or stack, which need at least one.
static FailureOr<RankedTensorType>
getFirstInputType(std::optional<Location> location, ValueRange inputs) {
  if (inputs.empty())
    return emitOptionalError(location, "requires at least one input");
  return getRankedType(location, inputs.front(), "inputs");
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  ValueRange inputs = adaptor.getInputs();
  FailureOr<RankedTensorType> first = getFirstInputType(location, inputs);
  if (failed(first))
    return failure();
  if (!adaptor.getAxisAttr())
    return emitOptionalError(location, "requires attribute 'axis'");
  int64_t rank = first->getRank();
  FailureOr<int64_t> axis =
      normalizeAxis(location, "axis", adaptor.getAxisAttr().getInt(), rank);
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(first->getShape());
  for (auto [i, input] : llvm::enumerate(inputs.drop_front())) {
    FailureOr<RankedTensorType> type = getRankedType(location, input, "inputs");
    if (failed(type))
      return failure();
    if (type->getRank() != rank ||
        type->getElementType() != first->getElementType())
      return emitOptionalError(location, "input ", i + 1, " has type ", *type,
                               " but input 0 has ", *first,
                               " (expected the same rank and element type)");
    for (int64_t d = 0; d < rank; ++d) {
      int64_t size = type->getDimSize(d);
      if (d == *axis) {
        shape[d] =
            ShapedType::isDynamic(shape[d]) || ShapedType::isDynamic(size)
                ? kDynamic
                : shape[d] + size;
      } else if (ShapedType::isDynamic(shape[d])) {
        shape[d] = size;
      } else if (!ShapedType::isDynamic(size) && size != shape[d]) {
        return emitOptionalError(location, "input ", i + 1, " has size ", size,
                                 " in dimension ", d, " but input 0 has ",
                                 shape[d]);
      }
    }
  }
  types.push_back(RankedTensorType::get(shape, first->getElementType()));
  return success();
}

LogicalResult StackOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  ValueRange inputs = adaptor.getInputs();
  FailureOr<RankedTensorType> first = getFirstInputType(location, inputs);
  if (failed(first))
    return failure();
  // One type for every input: each becomes one slice of the result.
  for (auto [i, input] : llvm::enumerate(inputs.drop_front()))
    if (input.getType() != *first)
      return emitOptionalError(location, "input ", i + 1, " has type ",
                               input.getType(), " but input 0 has ", *first,
                               " (stacked inputs must have one type)");
  SmallVector<int64_t> shape{static_cast<int64_t>(inputs.size())};
  llvm::append_range(shape, first->getShape());
  types.push_back(RankedTensorType::get(shape, first->getElementType()));
  return success();
}

bool StackOp::isWeight() {
  return llvm::all_of(getInputs(), [](Value input) {
    return input.getDefiningOp<ConstantOp>() != nullptr;
  });
}

/// The most results a split may have; a model's Split has one output per
/// part, each named, so real ones are far below this.
static constexpr int64_t kMaxSplitResults = 1 << 16;

LogicalResult SplitOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  FailureOr<int64_t> axis = normalizeAxis(
      location, "axis", toSigned(adaptor.getAxis()), type->getRank());
  if (failed(axis))
    return failure();
  int64_t size = type->getDimSize(*axis);
  SmallVector<int64_t> sizes;
  if (adaptor.getSplit()) {
    if (adaptor.getNumOutputsAttr())
      return emitOptionalError(
          location, "'split' and 'num_outputs' must not both be given");
    if (auto split = getConstantInts(adaptor.getSplit())) {
      int64_t total = 0;
      for (int64_t part : *split) {
        if (part < 0)
          return emitOptionalError(location, "split size ", part,
                                   " is negative");
        total += part;
      }
      if (!ShapedType::isDynamic(size) && total != size)
        return emitOptionalError(location, "split sizes [", *split,
                                 "] add up to ", total, " but dimension ",
                                 *axis, " has size ", size);
      sizes = std::move(*split);
    } else {
      FailureOr<int64_t> count =
          getVectorLength(location, adaptor.getSplit(), "split");
      if (failed(count))
        return failure();
      if (*count > kMaxSplitResults)
        return emitOptionalError(location, "cannot split into ", *count,
                                 " parts; at most ", kMaxSplitResults,
                                 " are supported");
      sizes.assign(*count, kDynamic);
    }
  } else if (IntegerAttr numOutputs = adaptor.getNumOutputsAttr()) {
    int64_t n = numOutputs.getInt();
    if (n < 1)
      return emitOptionalError(location, "'num_outputs' must be positive, got ",
                               n);
    // The result types are built before the op: a count from the model
    // must not size them unchecked.
    if (n > kMaxSplitResults)
      return emitOptionalError(location, "'num_outputs' ", n,
                               " is more than the ", kMaxSplitResults,
                               " results supported");
    if (ShapedType::isDynamic(size)) {
      sizes.assign(n, kDynamic);
    } else {
      // ONNX: equal parts of ceil(size / n), the last one smaller.
      int64_t part = llvm::divideCeil(size, n);
      if (part * (n - 1) > size)
        return emitOptionalError(location, "cannot split size ", size, " into ",
                                 n, " parts");
      sizes.assign(n, part);
      sizes.back() = size - part * (n - 1);
    }
  } else {
    return emitOptionalError(
        location, "requires a 'split' operand or a 'num_outputs' attribute "
                  "to know the number of results");
  }
  for (int64_t part : sizes) {
    SmallVector<int64_t> shape(type->getShape());
    shape[*axis] = part;
    types.push_back(RankedTensorType::get(shape, type->getElementType()));
  }
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getData(), "data");
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  SmallVector<std::pair<Value, StringRef>> params = {
      {adaptor.getStarts(), "starts"}, {adaptor.getEnds(), "ends"}};
  if (adaptor.getAxes())
    params.push_back({adaptor.getAxes(), "axes"});
  if (adaptor.getSteps())
    params.push_back({adaptor.getSteps(), "steps"});
  int64_t length = kDynamic;
  for (auto [value, name] : params) {
    auto paramType = dyn_cast<RankedTensorType>(value.getType());
    if (!paramType || paramType.getRank() != 1)
      return emitOptionalError(location, "operand '", name,
                               "' must be a 1-D tensor, got ", value.getType());
    int64_t size = paramType.getDimSize(0);
    if (ShapedType::isDynamic(size))
      continue;
    if (!ShapedType::isDynamic(length) && size != length)
      return emitOptionalError(location, "operand '", name, "' has ", size,
                               " elements but '", params.front().second,
                               "' has ", length);
    length = size;
  }
  SmallVector<int64_t> shape(type->getShape());
  std::optional<SmallVector<int64_t>> axes;
  if (adaptor.getAxes()) {
    axes = getConstantInts(adaptor.getAxes());
  } else if (!ShapedType::isDynamic(length)) {
    if (length > rank)
      return emitOptionalError(location, "slicing ", length,
                               " dimensions of a rank-", rank, " tensor");
    axes = llvm::to_vector(llvm::seq<int64_t>(0, length));
  }
  if (!axes) {
    // Any dimension may be sliced.
    types.push_back(RankedTensorType::get(SmallVector<int64_t>(rank, kDynamic),
                                          type->getElementType()));
    return success();
  }
  FailureOr<SmallVector<int64_t>> normalized =
      normalizeAxes(location, *axes, rank);
  if (failed(normalized))
    return failure();
  // Starts and ends are often sizes of other tensors (`x[:, :seq]`), so they
  // are read as shape entries: constants, or static dimension sizes.
  auto getKnownValues =
      [](Value value) -> std::optional<SmallVector<std::optional<int64_t>>> {
    std::optional<SmallVector<ShapeEntry>> entries = getShapeEntries(value);
    if (!entries)
      return std::nullopt;
    SmallVector<std::optional<int64_t>> values;
    for (const ShapeEntry &entry : *entries) {
      if (entry.isConstant())
        values.push_back(entry.constant);
      else if (entry.isDim() && !ShapedType::isDynamic(entry.getSize()))
        values.push_back(entry.getSize());
      else
        values.push_back(std::nullopt);
    }
    return values;
  };
  auto starts = getKnownValues(adaptor.getStarts());
  auto ends = getKnownValues(adaptor.getEnds());
  std::optional<SmallVector<int64_t>> steps;
  if (adaptor.getSteps())
    steps = getConstantInts(adaptor.getSteps());
  else
    steps = SmallVector<int64_t>(normalized->size(), 1);
  if (steps && llvm::is_contained(*steps, 0))
    return emitOptionalError(location, "slice steps must not be 0");
  for (auto [i, axis] : llvm::enumerate(*normalized)) {
    int64_t size = type->getDimSize(axis);
    if (!starts || !ends || !steps || ShapedType::isDynamic(size) ||
        i >= starts->size() || i >= ends->size() || !(*starts)[i] ||
        !(*ends)[i]) {
      shape[axis] = kDynamic;
      continue;
    }
    shape[axis] =
        getSliceRange(size, *(*starts)[i], *(*ends)[i], (*steps)[i]).second;
  }
  types.push_back(RankedTensorType::get(shape, type->getElementType()));
  return success();
}

LogicalResult ExpandOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  FailureOr<SmallVector<int64_t>> target =
      getShapeSizes(location, adaptor.getShape(), "shape");
  if (failed(target))
    return failure();
  SmallVector<int64_t> shape;
  if (failed(broadcastShapes(location, type->getShape(), *target, shape)))
    return failure();
  types.push_back(RankedTensorType::get(shape, type->getElementType()));
  return success();
}

LogicalResult TileOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  FailureOr<SmallVector<int64_t>> repeats =
      getShapeSizes(location, adaptor.getRepeats(), "repeats");
  if (failed(repeats))
    return failure();
  if (static_cast<int64_t>(repeats->size()) != type->getRank())
    return emitOptionalError(location, "'repeats' has ", repeats->size(),
                             " elements but the input has rank ",
                             type->getRank());
  SmallVector<int64_t> shape;
  for (auto [size, repeat] : llvm::zip(type->getShape(), *repeats)) {
    FailureOr<int64_t> tiled = multiplySizes(location, size, repeat);
    if (failed(tiled))
      return failure();
    shape.push_back(repeat == 1 ? size : *tiled);
  }
  types.push_back(RankedTensorType::get(shape, type->getElementType()));
  return success();
}

LogicalResult TriluOp::verify() {
  if (failed(verifyFlag(*this, "upper", toSigned(getUpper()))))
    return failure();
  if (getInput().getType().getRank() < 2)
    return emitOpError("requires an input of rank >= 2, got ")
           << getInput().getType();
  if (Value k = getK(); k && cast<RankedTensorType>(k.getType()).getRank() != 0)
    return emitOpError("operand 'k' must be a scalar, got ") << k.getType();
  return success();
}
