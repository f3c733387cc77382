//===- GraphOps.cpp - ONNX-semantics graph ops ----------------------------===//
//
// Type inference, verifiers and folders of the graph ops.
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace moec::moe;

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange, DictionaryAttr,
    OpaqueProperties properties, RegionRange,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  Adaptor adaptor(ValueRange(), DictionaryAttr(), properties, {});
  inferredReturnTypes.push_back(adaptor.getValue().getType());
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// DimOp
//===----------------------------------------------------------------------===//

LogicalResult DimOp::inferReturnTypes(MLIRContext *context,
                                      std::optional<Location>, ValueRange,
                                      DictionaryAttr, OpaqueProperties,
                                      RegionRange,
                                      SmallVectorImpl<Type> &inferred) {
  inferred.push_back(
      RankedTensorType::get({1}, IntegerType::get(context, 64)));
  return success();
}

LogicalResult DimOp::verify() {
  int64_t rank = getInput().getType().getRank();
  int64_t index = getIndexAttr().getInt();
  if (index < 0 || index >= rank)
    return emitOpError("dimension index ")
           << index << " is out of range for a tensor of rank " << rank;
  return success();
}

OpFoldResult DimOp::fold(FoldAdaptor) {
  auto type = getInput().getType();
  int64_t index = getIndexAttr().getInt();
  if (index < 0 || index >= type.getRank() || type.isDynamicDim(index))
    return {};
  return DenseElementsAttr::get(getType(),
                                ArrayRef<int64_t>(type.getDimSize(index)));
}
