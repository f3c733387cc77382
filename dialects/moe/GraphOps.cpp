//===- GraphOps.cpp - ONNX-semantics graph ops ----------------------------===//
//
// Result type inference and verifiers of the graph ops. Inference runs before
// an op is verified (the importer builds ops from its result), so it checks
// everything it relies on and fails with a diagnostic instead of asserting.
// Folders and canonicalisation patterns are in GraphOpsFold.cpp.
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
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace moec::moe;

namespace {

constexpr int64_t kDynamic = ShapedType::kDynamic;

/// Reads an I64 attribute through its (possibly defaulted) adaptor getter;
/// ODS returns them unsigned.
int64_t toSigned(uint64_t value) { return static_cast<int64_t>(value); }

/// Product of `a` and `b` where either may be dynamic.
int64_t mulDims(int64_t a, int64_t b) {
  if (a == 0 || b == 0)
    return 0;
  if (ShapedType::isDynamic(a) || ShapedType::isDynamic(b))
    return kDynamic;
  return a * b;
}

/// The element type ONNX `stash_type` names.
FailureOr<Type> getStashType(std::optional<Location> loc, MLIRContext *context,
                             int64_t stashType) {
  switch (stashType) {
  case 1:
    return Type(Float32Type::get(context));
  case 10:
    return Type(Float16Type::get(context));
  case 11:
    return Type(Float64Type::get(context));
  case 16:
    return Type(BFloat16Type::get(context));
  default:
    return emitOptionalError(loc, "'stash_type' ", stashType,
                             " is not a float type (expected 1, 10, 11 or 16)");
  }
}

/// Checks that `value`, when present, has `element` as element type.
LogicalResult checkElementType(std::optional<Location> loc, Value value,
                               StringRef name, Type element) {
  if (value && getElementTypeOrSelf(value.getType()) != element)
    return emitOptionalError(loc, "operand '", name, "' has element type ",
                             getElementTypeOrSelf(value.getType()),
                             " but the input has ", element);
  return success();
}

/// Checks that the i64 attribute `name` is 0 or 1 during inference.
LogicalResult checkFlag(std::optional<Location> loc, StringRef name,
                        int64_t value) {
  if (value != 0 && value != 1)
    return emitOptionalError(loc, "attribute '", name, "' must be 0 or 1, got ",
                             value);
  return success();
}

/// The sizes a 1-D shape operand (ConstantOfShape, Expand, Tile) asks for;
/// fails when its length is not static or a known entry is negative.
FailureOr<SmallVector<int64_t>> getShapeSizes(std::optional<Location> loc,
                                              Value shape, StringRef name) {
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

/// Normalises ONNX Shape's start/end for a tensor of `rank`.
std::pair<int64_t, int64_t> getShapeRange(int64_t rank, int64_t start,
                                          std::optional<int64_t> end) {
  auto clampIndex = [rank](int64_t index) {
    if (index < 0)
      index += rank;
    return std::clamp<int64_t>(index, 0, rank);
  };
  int64_t first = clampIndex(start);
  int64_t last = end ? clampIndex(*end) : rank;
  return {first, std::max(first, last)};
}

} // namespace

//===----------------------------------------------------------------------===//
// Constants and shape values
//===----------------------------------------------------------------------===//

LogicalResult
ConstantOp::inferReturnTypes(MLIRContext *, std::optional<Location> location,
                             ValueRange, DictionaryAttr attributes,
                             OpaqueProperties properties, RegionRange,
                             SmallVectorImpl<Type> &inferredReturnTypes) {
  Adaptor adaptor(ValueRange(), attributes, properties, {});
  if (!adaptor.getValueAttr())
    return emitOptionalError(location, "requires attribute 'value'");
  inferredReturnTypes.push_back(adaptor.getValueAttr().getType());
  return success();
}

LogicalResult DimOp::inferReturnTypes(MLIRContext *context,
                                      std::optional<Location> location,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  if (!adaptor.getIndexAttr())
    return emitOptionalError(location, "requires attribute 'index'");
  int64_t index = adaptor.getIndexAttr().getInt();
  if (index < 0 || index >= type->getRank())
    return emitOptionalError(location, "dimension index ", index,
                             " is out of range for a tensor of rank ",
                             type->getRank());
  types.push_back(RankedTensorType::get({}, IntegerType::get(context, 64)));
  return success();
}

std::pair<int64_t, int64_t> ShapeOp::getDimRange() {
  std::optional<int64_t> end;
  if (getEndAttr())
    end = getEndAttr().getInt();
  return getShapeRange(getData().getType().getRank(), toSigned(getStart()),
                       end);
}

LogicalResult ShapeOp::inferReturnTypes(MLIRContext *context,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getData(), "data");
  if (failed(type))
    return failure();
  std::optional<int64_t> end;
  if (adaptor.getEndAttr())
    end = adaptor.getEndAttr().getInt();
  auto [first, last] =
      getShapeRange(type->getRank(), toSigned(adaptor.getStart()), end);
  types.push_back(
      RankedTensorType::get({last - first}, IntegerType::get(context, 64)));
  return success();
}

LogicalResult SizeOp::inferReturnTypes(MLIRContext *context,
                                       std::optional<Location>, Adaptor,
                                       SmallVectorImpl<Type> &types) {
  types.push_back(RankedTensorType::get({}, IntegerType::get(context, 64)));
  return success();
}

LogicalResult ConstantOfShapeOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  Type element = Float32Type::get(context);
  if (ElementsAttr value = adaptor.getValueAttr()) {
    if (value.getNumElements() != 1)
      return emitOptionalError(location,
                               "attribute 'value' must hold one element, got ",
                               value.getType());
    element = value.getElementType();
  }
  FailureOr<SmallVector<int64_t>> shape =
      getShapeSizes(location, adaptor.getInput(), "input");
  if (failed(shape))
    return failure();
  types.push_back(RankedTensorType::get(*shape, element));
  return success();
}

LogicalResult RangeOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  Type element = getElementTypeOrSelf(adaptor.getStart().getType());
  std::pair<Value, StringRef> scalars[] = {{adaptor.getStart(), "start"},
                                           {adaptor.getLimit(), "limit"},
                                           {adaptor.getDelta(), "delta"}};
  for (auto [value, name] : scalars) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || type.getNumElements() != 1)
      return emitOptionalError(location, "operand '", name,
                               "' must be a scalar, got ", value.getType());
    if (failed(checkElementType(location, value, name, element)))
      return failure();
  }
  int64_t count = kDynamic;
  auto start = getConstantInt(adaptor.getStart());
  auto limit = getConstantInt(adaptor.getLimit());
  auto delta = getConstantInt(adaptor.getDelta());
  if (delta && *delta == 0)
    return emitOptionalError(location, "'delta' must not be zero");
  if (start && limit && delta) {
    // Compute in double: limit - start can overflow int64 for sentinels.
    double n =
        std::ceil((static_cast<double>(*limit) - static_cast<double>(*start)) /
                  static_cast<double>(*delta));
    if (n > static_cast<double>(std::numeric_limits<int32_t>::max()))
      return emitOptionalError(location, "range of ", n,
                               " elements is too large");
    count = std::max<int64_t>(0, static_cast<int64_t>(n));
  }
  types.push_back(RankedTensorType::get({count}, element));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise ops with attributes
//===----------------------------------------------------------------------===//

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("attribute 'approximate' must be \"none\" or \"tanh\", "
                       "got \"")
           << getApproximate() << "\"";
  return success();
}

LogicalResult CastOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  if (!adaptor.getToAttr())
    return emitOptionalError(location, "requires attribute 'to'");
  types.push_back(type->clone(adaptor.getToAttr().getValue()));
  return success();
}

LogicalResult CastLikeOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> location,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  types.push_back(
      type->clone(getElementTypeOrSelf(adaptor.getTargetType().getType())));
  return success();
}

LogicalResult ModOp::verify() {
  if (failed(verifyFlag(*this, "fmod", toSigned(getFmod()))))
    return failure();
  if (isa<FloatType>(getType().getElementType()) && getFmod() != 1)
    return emitOpError("requires 'fmod' = 1 for floating-point operands");
  return success();
}

LogicalResult ClipOp::verify() {
  Type element = getInput().getType().getElementType();
  std::pair<Value, StringRef> bounds[] = {{getMin(), "min"}, {getMax(), "max"}};
  for (auto [bound, name] : bounds) {
    if (!bound)
      continue;
    auto type = cast<RankedTensorType>(bound.getType());
    if (type.getElementType() != element)
      return emitOpError("bound '")
             << name << "' has element type " << type.getElementType()
             << " but the input has " << element;
    if (type.getRank() > 1 || type.getNumElements() != 1)
      return emitOpError("bound '")
             << name << "' must be a scalar, got " << type;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions, normalisation and indexing along an axis
//===----------------------------------------------------------------------===//

LogicalResult IsNaNOp::inferReturnTypes(MLIRContext *context,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getInput(), "input");
  if (failed(type))
    return failure();
  types.push_back(
      RankedTensorType::get(type->getShape(), IntegerType::get(context, 1)));
  return success();
}

LogicalResult ArgMaxOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getData(), "data");
  if (failed(type))
    return failure();
  FailureOr<int64_t> axis = normalizeAxis(
      location, "axis", toSigned(adaptor.getAxis()), type->getRank());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(type->getShape());
  if (adaptor.getKeepdims())
    shape[*axis] = 1;
  else
    shape.erase(shape.begin() + *axis);
  types.push_back(RankedTensorType::get(shape, IntegerType::get(context, 64)));
  return success();
}

LogicalResult ArgMaxOp::verify() {
  if (failed(verifyFlag(*this, "keepdims", toSigned(getKeepdims()))) ||
      failed(verifyFlag(*this, "select_last_index",
                        toSigned(getSelectLastIndex()))))
    return failure();
  return success();
}

LogicalResult CumSumOp::verify() {
  if (failed(verifyFlag(*this, "exclusive", toSigned(getExclusive()))) ||
      failed(verifyFlag(*this, "reverse", toSigned(getReverse()))))
    return failure();
  auto axisType = getAxis().getType();
  if (axisType.getRank() > 1 || axisType.getNumElements() != 1)
    return emitOpError("operand 'axis' must be a scalar, got ") << axisType;
  if (std::optional<int64_t> axis = getConstantInt(getAxis()))
    return verifyAxis(*this, "axis", *axis, getX().getType().getRank());
  return success();
}

LogicalResult TopKOp::inferReturnTypes(MLIRContext *context,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getInput(), "input");
  FailureOr<RankedTensorType> kType =
      getRankedType(location, adaptor.getK(), "k");
  if (failed(type) || failed(kType))
    return failure();
  if (kType->getRank() != 1 || kType->getDimSize(0) != 1)
    return emitOptionalError(
        location, "operand 'k' must be a 1-element 1-D tensor, got ", *kType);
  FailureOr<int64_t> axis = normalizeAxis(
      location, "axis", toSigned(adaptor.getAxis()), type->getRank());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(type->getShape());
  shape[*axis] = kDynamic;
  if (std::optional<int64_t> k = getConstantInt(adaptor.getK())) {
    int64_t size = type->getDimSize(*axis);
    if (*k < 0 || (!ShapedType::isDynamic(size) && *k > size))
      return emitOptionalError(location, "k = ", *k,
                               " is out of range for axis size ", size);
    shape[*axis] = *k;
  }
  types.push_back(RankedTensorType::get(shape, type->getElementType()));
  types.push_back(RankedTensorType::get(shape, IntegerType::get(context, 64)));
  return success();
}

LogicalResult TopKOp::verify() {
  if (failed(verifyFlag(*this, "largest", toSigned(getLargest()))) ||
      failed(verifyFlag(*this, "sorted", toSigned(getSorted()))))
    return failure();
  return success();
}

namespace {

/// Shared by the layer normalisations: checks the normalised dimensions'
/// operands and pushes the type of the per-row statistics.
LogicalResult inferNormalization(std::optional<Location> location, Value x,
                                 ArrayRef<std::pair<Value, StringRef>> params,
                                 int64_t axisAttr, int64_t stashType,
                                 SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type = getRankedType(location, x, "x");
  if (failed(type))
    return failure();
  FailureOr<int64_t> axis =
      normalizeAxis(location, "axis", axisAttr, type->getRank());
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> normalized = type->getShape().drop_front(*axis);
  for (auto [value, name] : params) {
    if (!value)
      continue;
    if (failed(checkElementType(location, value, name, type->getElementType())))
      return failure();
    FailureOr<RankedTensorType> paramType =
        getRankedType(location, value, name);
    if (failed(paramType))
      return failure();
    ArrayRef<int64_t> paramShape = paramType->getShape();
    SmallVector<int64_t> broadcast;
    if (paramShape.size() > normalized.size() ||
        failed(
            broadcastShapes(std::nullopt, paramShape, normalized, broadcast)) ||
        failed(verifyCompatibleShape(broadcast, normalized)))
      return emitOptionalError(location, "operand '", name, "' of shape ",
                               formatShape(paramShape),
                               " does not broadcast to the normalised shape ",
                               formatShape(normalized));
  }
  FailureOr<Type> stash = getStashType(location, type->getContext(), stashType);
  if (failed(stash))
    return failure();
  SmallVector<int64_t> statShape(type->getShape());
  std::fill(statShape.begin() + *axis, statShape.end(), 1);
  types.push_back(*type);
  types.push_back(RankedTensorType::get(statShape, *stash));
  return success();
}

} // namespace

LogicalResult LayerNormalizationOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  if (failed(inferNormalization(
          location, adaptor.getX(),
          {{adaptor.getScale(), "scale"}, {adaptor.getBias(), "bias"}},
          toSigned(adaptor.getAxis()), toSigned(adaptor.getStashType()),
          types)))
    return failure();
  // Mean and InvStdDev share one type.
  types.push_back(types.back());
  return success();
}

LogicalResult SimplifiedLayerNormalizationOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  return inferNormalization(
      location, adaptor.getX(), {{adaptor.getScale(), "scale"}},
      toSigned(adaptor.getAxis()), toSigned(adaptor.getStashType()), types);
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> aType =
      getRankedType(location, adaptor.getA(), "a");
  FailureOr<RankedTensorType> bType =
      getRankedType(location, adaptor.getB(), "b");
  if (failed(aType) || failed(bType))
    return failure();
  if (failed(checkElementType(location, adaptor.getB(), "b",
                              aType->getElementType())))
    return failure();
  if (aType->getRank() == 0 || bType->getRank() == 0)
    return emitOptionalError(location, "operands must have rank >= 1");
  // Numpy promotion of vectors to matrices.
  SmallVector<int64_t> a(aType->getShape()), b(bType->getShape());
  if (a.size() == 1)
    a.insert(a.begin(), 1);
  if (b.size() == 1)
    b.push_back(1);
  int64_t ka = a.back(), kb = b[b.size() - 2];
  if (!ShapedType::isDynamic(ka) && !ShapedType::isDynamic(kb) && ka != kb)
    return emitOptionalError(location, "contracting dimensions differ: ",
                             formatShape(aType->getShape()), " x ",
                             formatShape(bType->getShape()));
  SmallVector<int64_t> shape;
  if (failed(broadcastShapes(location, ArrayRef(a).drop_back(2),
                             ArrayRef(b).drop_back(2), shape)))
    return failure();
  if (aType->getRank() > 1)
    shape.push_back(a[a.size() - 2]);
  if (bType->getRank() > 1)
    shape.push_back(b.back());
  types.push_back(RankedTensorType::get(shape, aType->getElementType()));
  return success();
}

LogicalResult GemmOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> aType =
      getRankedType(location, adaptor.getA(), "a");
  FailureOr<RankedTensorType> bType =
      getRankedType(location, adaptor.getB(), "b");
  if (failed(aType) || failed(bType))
    return failure();
  int64_t transA = toSigned(adaptor.getTransA());
  int64_t transB = toSigned(adaptor.getTransB());
  if (failed(checkFlag(location, "transA", transA)) ||
      failed(checkFlag(location, "transB", transB)))
    return failure();
  if (aType->getRank() != 2 || bType->getRank() != 2)
    return emitOptionalError(location, "operands 'a' and 'b' must be 2-D, got ",
                             *aType, " and ", *bType);
  Type element = aType->getElementType();
  if (failed(checkElementType(location, adaptor.getB(), "b", element)) ||
      failed(checkElementType(location, adaptor.getC(), "c", element)))
    return failure();
  int64_t m = aType->getDimSize(transA), ka = aType->getDimSize(1 - transA);
  int64_t kb = bType->getDimSize(transB), n = bType->getDimSize(1 - transB);
  if (!ShapedType::isDynamic(ka) && !ShapedType::isDynamic(kb) && ka != kb)
    return emitOptionalError(location, "contracting dimensions differ: ", ka,
                             " and ", kb);
  SmallVector<int64_t> shape = {m, n};
  if (Value c = adaptor.getC()) {
    FailureOr<RankedTensorType> cType = getRankedType(location, c, "c");
    if (failed(cType))
      return failure();
    ArrayRef<int64_t> cShape = cType->getShape();
    SmallVector<int64_t> broadcast;
    if (cShape.size() > 2 ||
        failed(broadcastShapes(std::nullopt, cShape, shape, broadcast)) ||
        failed(verifyCompatibleShape(broadcast, shape)))
      return emitOptionalError(location, "operand 'c' of shape ",
                               formatShape(cShape), " does not broadcast to ",
                               formatShape(shape));
  }
  types.push_back(RankedTensorType::get(shape, element));
  return success();
}

namespace {

/// One side of an einsum equation: its letters with the position of `...`.
struct EinsumTerm {
  SmallVector<char> letters;
  std::optional<size_t> ellipsis;
};

FailureOr<EinsumTerm> parseEinsumTerm(std::optional<Location> loc,
                                      StringRef term) {
  EinsumTerm result;
  for (size_t i = 0; i < term.size(); ++i) {
    char c = term[i];
    if (llvm::isAlpha(c)) {
      result.letters.push_back(c);
      continue;
    }
    if (c == '.' && term.substr(i).starts_with("...") && !result.ellipsis) {
      result.ellipsis = result.letters.size();
      i += 2;
      continue;
    }
    return emitOptionalError(loc, "einsum term '", term, "' is malformed at '",
                             term.substr(i),
                             "': expected letters and at most one '...'");
  }
  return result;
}

} // namespace

LogicalResult EinsumOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  if (!adaptor.getEquationAttr())
    return emitOptionalError(location, "requires attribute 'equation'");
  std::string equation;
  for (char c : adaptor.getEquation())
    if (c != ' ')
      equation.push_back(c);
  auto [lhs, rhs] = StringRef(equation).split("->");
  bool explicitOutput = StringRef(equation).contains("->");
  if (explicitOutput && rhs.contains("->"))
    return emitOptionalError(location, "einsum equation '",
                             adaptor.getEquation(), "' has more than one '->'");
  SmallVector<StringRef> terms;
  lhs.split(terms, ',');
  ValueRange inputs = adaptor.getInputs();
  if (terms.size() != inputs.size())
    return emitOptionalError(location, "einsum equation '",
                             adaptor.getEquation(), "' has ", terms.size(),
                             " input terms but the op has ", inputs.size(),
                             " operands");
  llvm::SmallDenseMap<char, int64_t> sizes;
  llvm::SmallDenseMap<char, int> counts;
  SmallVector<int64_t> ellipsisShape;
  bool anyEllipsis = false;
  Type element;
  for (auto [term, input] : llvm::zip(terms, inputs)) {
    FailureOr<EinsumTerm> parsed = parseEinsumTerm(location, term);
    FailureOr<RankedTensorType> type = getRankedType(location, input, "inputs");
    if (failed(parsed) || failed(type))
      return failure();
    if (!element)
      element = type->getElementType();
    else if (failed(checkElementType(location, input, "inputs", element)))
      return failure();
    int64_t rank = type->getRank();
    int64_t numLetters = parsed->letters.size();
    if (parsed->ellipsis ? rank < numLetters : rank != numLetters)
      return emitOptionalError(location, "einsum term '", term, "' has ",
                               numLetters, " letters but its operand has rank ",
                               rank);
    int64_t ellipsisRank = rank - numLetters;
    size_t start = parsed->ellipsis.value_or(numLetters);
    ArrayRef<int64_t> shape = type->getShape();
    if (parsed->ellipsis) {
      anyEllipsis = true;
      SmallVector<int64_t> merged;
      if (failed(broadcastShapes(location, ellipsisShape,
                                 shape.slice(start, ellipsisRank), merged)))
        return failure();
      ellipsisShape = std::move(merged);
    }
    for (auto [i, letter] : llvm::enumerate(parsed->letters)) {
      int64_t size = shape[i < start ? i : i + ellipsisRank];
      ++counts[letter];
      auto [it, inserted] = sizes.try_emplace(letter, size);
      if (inserted || size == it->second || ShapedType::isDynamic(size))
        continue;
      if (!ShapedType::isDynamic(it->second))
        return emitOptionalError(location, "einsum letter '",
                                 StringRef(&letter, 1), "' has sizes ",
                                 it->second, " and ", size);
      it->second = size;
    }
  }
  EinsumTerm output;
  if (explicitOutput) {
    FailureOr<EinsumTerm> parsed = parseEinsumTerm(location, rhs);
    if (failed(parsed))
      return failure();
    output = *parsed;
    llvm::SmallSet<char, 16> seen;
    for (char letter : output.letters) {
      if (!sizes.count(letter))
        return emitOptionalError(location, "einsum output letter '",
                                 StringRef(&letter, 1),
                                 "' does not appear in any input");
      if (!seen.insert(letter).second)
        return emitOptionalError(location, "einsum output letter '",
                                 StringRef(&letter, 1), "' is repeated");
    }
  } else {
    // Implicit mode: broadcast dimensions, then the letters used exactly once
    // in alphabetical order.
    if (anyEllipsis)
      output.ellipsis = 0;
    for (auto [letter, count] : counts)
      if (count == 1)
        output.letters.push_back(letter);
    llvm::sort(output.letters);
  }
  SmallVector<int64_t> shape;
  for (auto [i, letter] : llvm::enumerate(output.letters)) {
    if (output.ellipsis && *output.ellipsis == i)
      llvm::append_range(shape, ellipsisShape);
    shape.push_back(sizes[letter]);
  }
  if (output.ellipsis && *output.ellipsis == output.letters.size())
    llvm::append_range(shape, ellipsisShape);
  types.push_back(RankedTensorType::get(shape, element));
  return success();
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

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
    product = mulDims(product, type->getDimSize(i));
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
  for (auto [size, repeat] : llvm::zip(type->getShape(), *repeats))
    shape.push_back(repeat == 1 ? size : mulDims(size, repeat));
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

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getData(), "data");
  FailureOr<RankedTensorType> indices =
      getRankedType(location, adaptor.getIndices(), "indices");
  if (failed(type) || failed(indices))
    return failure();
  FailureOr<int64_t> axis = normalizeAxis(
      location, "axis", toSigned(adaptor.getAxis()), type->getRank());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(type->getShape().take_front(*axis));
  llvm::append_range(shape, indices->getShape());
  llvm::append_range(shape, type->getShape().drop_front(*axis + 1));
  types.push_back(RankedTensorType::get(shape, type->getElementType()));
  return success();
}

LogicalResult GatherElementsOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getData(), "data");
  FailureOr<RankedTensorType> indices =
      getRankedType(location, adaptor.getIndices(), "indices");
  if (failed(type) || failed(indices))
    return failure();
  if (indices->getRank() != type->getRank())
    return emitOptionalError(location, "'indices' has rank ",
                             indices->getRank(), " but 'data' has rank ",
                             type->getRank());
  if (failed(normalizeAxis(location, "axis", toSigned(adaptor.getAxis()),
                           type->getRank())))
    return failure();
  types.push_back(indices->clone(type->getElementType()));
  return success();
}

LogicalResult GatherNDOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> location,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getData(), "data");
  FailureOr<RankedTensorType> indices =
      getRankedType(location, adaptor.getIndices(), "indices");
  if (failed(type) || failed(indices))
    return failure();
  int64_t batchDims = toSigned(adaptor.getBatchDims());
  int64_t rank = type->getRank(), indicesRank = indices->getRank();
  if (indicesRank < 1 || batchDims < 0 ||
      batchDims >= std::min(rank, indicesRank))
    return emitOptionalError(location, "'batch_dims' = ", batchDims,
                             " must be in [0, min(rank(data) = ", rank,
                             ", rank(indices) = ", indicesRank, "))");
  int64_t depth = indices->getShape().back();
  if (ShapedType::isDynamic(depth))
    return emitOptionalError(location,
                             "the last dimension of 'indices' must be static");
  if (depth < 1 || depth > rank - batchDims)
    return emitOptionalError(location, "index tuples of length ", depth,
                             " cannot index ", rank - batchDims,
                             " non-batch dimensions");
  SmallVector<int64_t> shape(indices->getShape().drop_back());
  llvm::append_range(shape, type->getShape().drop_front(batchDims + depth));
  types.push_back(RankedTensorType::get(shape, type->getElementType()));
  return success();
}

namespace {

/// Checks the reduction attribute of the scatter ops.
LogicalResult verifyScatterReduction(Operation *op, StringRef reduction) {
  if (!llvm::is_contained({"none", "add", "mul", "max", "min"}, reduction))
    return op->emitOpError("attribute 'reduction' must be one of none, add, "
                           "mul, max, min; got \"")
           << reduction << "\"";
  return success();
}

/// Checks that `updates` has `data`'s element type.
LogicalResult verifyUpdatesType(Operation *op, Value data, Value updates) {
  Type expected = getElementTypeOrSelf(data.getType());
  if (getElementTypeOrSelf(updates.getType()) != expected)
    return op->emitOpError("'updates' has element type ")
           << getElementTypeOrSelf(updates.getType()) << " but 'data' has "
           << expected;
  return success();
}

} // namespace

LogicalResult ScatterElementsOp::verify() {
  if (failed(verifyScatterReduction(*this, getReduction())) ||
      failed(verifyUpdatesType(*this, getData(), getUpdates())))
    return failure();
  auto dataType = getData().getType();
  auto indicesType = getIndices().getType();
  if (indicesType.getRank() != dataType.getRank())
    return emitOpError("'indices' has rank ")
           << indicesType.getRank() << " but 'data' has rank "
           << dataType.getRank();
  if (failed(verifyCompatibleShape(indicesType.getShape(),
                                   getUpdates().getType().getShape())))
    return emitOpError("'indices' ")
           << indicesType << " and 'updates' " << getUpdates().getType()
           << " must have the same shape";
  return verifyAxis(*this, "axis", toSigned(getAxis()), dataType.getRank());
}

LogicalResult ScatterNDOp::verify() {
  if (failed(verifyScatterReduction(*this, getReduction())) ||
      failed(verifyUpdatesType(*this, getData(), getUpdates())))
    return failure();
  auto dataType = getData().getType();
  auto indicesType = getIndices().getType();
  if (indicesType.getRank() < 1)
    return emitOpError("'indices' must have rank >= 1");
  int64_t depth = indicesType.getShape().back();
  if (ShapedType::isDynamic(depth))
    return success();
  if (depth > dataType.getRank())
    return emitOpError("index tuples of length ")
           << depth << " cannot index a rank-" << dataType.getRank()
           << " tensor";
  SmallVector<int64_t> expected(indicesType.getShape().drop_back());
  llvm::append_range(expected, dataType.getShape().drop_front(depth));
  if (failed(
          verifyCompatibleShape(expected, getUpdates().getType().getShape())))
    return emitOpError("'updates' has shape ")
           << formatShape(getUpdates().getType().getShape()) << " but expected "
           << formatShape(expected);
  return success();
}

LogicalResult OneHotOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> indices =
      getRankedType(location, adaptor.getIndices(), "indices");
  FailureOr<RankedTensorType> depthType =
      getRankedType(location, adaptor.getDepth(), "depth");
  FailureOr<RankedTensorType> values =
      getRankedType(location, adaptor.getValues(), "values");
  if (failed(indices) || failed(depthType) || failed(values))
    return failure();
  if (depthType->getRank() > 1 || depthType->getNumElements() != 1)
    return emitOptionalError(location, "operand 'depth' must be a scalar, got ",
                             *depthType);
  if (values->getRank() != 1 || values->getDimSize(0) != 2)
    return emitOptionalError(location,
                             "operand 'values' must be a 2-element 1-D "
                             "tensor [off, on], got ",
                             *values);
  FailureOr<int64_t> axis = normalizeAxis(
      location, "axis", toSigned(adaptor.getAxis()), indices->getRank() + 1);
  if (failed(axis))
    return failure();
  int64_t depth = kDynamic;
  Attribute attr;
  if (matchPattern(adaptor.getDepth(), m_Constant(&attr))) {
    // ONNX allows a float depth; it is truncated to an integer.
    DenseElementsAttr dense = getFoldableElements(attr);
    if (dense && isa<FloatType>(dense.getElementType()))
      depth = static_cast<int64_t>(
          (*dense.getValues<APFloat>().begin()).convertToDouble());
    else if (std::optional<SmallVector<int64_t>> ints = getInts(attr))
      depth = ints->front();
    if (!ShapedType::isDynamic(depth) && depth < 1)
      return emitOptionalError(location, "'depth' must be positive, got ",
                               depth);
  }
  SmallVector<int64_t> shape(indices->getShape());
  shape.insert(shape.begin() + *axis, depth);
  types.push_back(RankedTensorType::get(shape, values->getElementType()));
  return success();
}

LogicalResult NonZeroOp::inferReturnTypes(MLIRContext *context,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> type =
      getRankedType(location, adaptor.getX(), "x");
  if (failed(type))
    return failure();
  // The count is data-dependent; a static-shaped input bounds it.
  types.push_back(RankedTensorType::get({type->getRank(), kDynamic},
                                        IntegerType::get(context, 64)));
  return success();
}
