//===- GraphOps.cpp - ONNX-semantics graph ops ----------------------------===//
//
// Result type inference and verifiers of the graph ops. Inference runs before
// an op is verified (the importer builds ops from its result), so it checks
// everything it relies on and fails with a diagnostic instead of asserting.
// Folders and canonicalisation patterns are in GraphOpsFold.cpp, the shape
// manipulating ops in ShapeOps.cpp.
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
