//===- QuantNode.cpp - reading a quantized contrib node -------------------===//

#include "compiler/onnx/QuantNode.h"

#include "compiler/onnx/Tensors.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;

namespace moec::onnx_import {

std::string formatShape(ArrayRef<int64_t> shape) {
  return "[" +
         llvm::join(llvm::map_range(
                        shape, [](int64_t d) { return std::to_string(d); }),
                    ", ") +
         "]";
}

bool hasElementKind(Type type, ElementKind kind) {
  if (kind == ElementKind::UInt8)
    return type.isUnsignedInteger(8);
  if (kind == ElementKind::E8M0)
    return isa<Float8E8M0FNUType>(type);
  return kind == ElementKind::Float32 ? type.isF32()
                                      : type.isSignlessInteger(32);
}

moe::ConstantOp getConstantData(Value value) {
  while (Operation *op = value.getDefiningOp()) {
    if (auto constant = dyn_cast<moe::ConstantOp>(op))
      return constant;
    if (!isa<moe::ReshapeOp, moe::FlattenOp, moe::SqueezeOp, moe::UnsqueezeOp,
             moe::IdentityOp>(op))
      return {};
    value = op->getOperand(0);
  }
  return {};
}

FailureOr<ConstantInput>
QuantNode::readConstant(unsigned input, ArrayRef<ElementKind> kinds) const {
  Value value = operand(input);
  auto type = cast<RankedTensorType>(value.getType());
  if (!llvm::any_of(kinds, [&](ElementKind kind) {
        return hasElementKind(type.getElementType(), kind);
      })) {
    InFlightDiagnostic diag = emitInputError(input) << "must be a ";
    llvm::interleave(
        kinds, diag,
        [&](ElementKind kind) { diag << kElementKindNames[int(kind)]; },
        " or ");
    return diag << " tensor, got " << type;
  }
  moe::ConstantOp constant = getConstantData(value);
  if (!constant)
    return emitInputError(input)
           << "must be a constant (an initializer or a Constant node, "
              "reshaped or not): moec dequantizes the weights of "
           << getOpName() << " at import, and this one is computed";
  if (!type.hasStaticShape() ||
      constant.getType().getNumElements() != type.getNumElements())
    return emitInputError(input)
           << "has type " << type << ", a reshape of the constant of type "
           << constant.getType() << " that moec cannot size";

  ConstantInput result;
  result.type = type;
  std::optional<int64_t> size = getStaticByteSize(
      type.getShape(), llvm::divideCeil(type.getElementTypeBitWidth(), 8));
  Attribute attr = constant.getValue();
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (blob && size && int64_t(blob->getData().size()) == *size)
      result.view = blob->getData();
  } else if (auto dense = dyn_cast<DenseElementsAttr>(attr); dense && size) {
    ArrayRef<char> raw = dense.getRawData();
    if (!dense.isSplat()) {
      if (int64_t(raw.size()) == *size)
        result.view = raw;
    } else if (!raw.empty()) {
      result.storage.reserve(*size);
      for (int64_t i = 0, e = type.getNumElements(); i < e; ++i)
        result.storage.insert(result.storage.end(), raw.begin(), raw.end());
    }
  }
  if (result.getBytes().empty() && size && *size != 0)
    return emitInputError(input) << "holds no data moec can read";
  return result;
}

LogicalResult QuantNode::checkShape(unsigned input,
                                    const ConstantInput &constant,
                                    ArrayRef<SmallVector<int64_t>> allowed,
                                    StringRef meaning) const {
  ArrayRef<int64_t> shape = constant.type.getShape();
  if (llvm::any_of(allowed, [&](ArrayRef<int64_t> expected) {
        return shape == expected;
      }))
    return success();
  InFlightDiagnostic diag = emitInputError(input)
                            << "has shape " << formatShape(shape)
                            << ", expected ";
  llvm::interleave(
      allowed, diag,
      [&](ArrayRef<int64_t> expected) { diag << formatShape(expected); },
      " or ");
  return diag << " (" << meaning << ")";
}

FailureOr<Value> QuantNode::createWeight(ArrayRef<int64_t> shape,
                                         unsigned fromInput,
                                         function_ref<void(float *)> fill) {
  OpBuilder &builder = node.getBuilder();
  auto type = RankedTensorType::get(shape, builder.getF32Type());
  std::optional<int64_t> bytes = getStaticByteSize(shape, sizeof(float));
  if (!bytes)
    return emitInputError(fromInput)
           << "dequantizes to " << formatShape(shape)
           << " floats, a size that overflows 64 bits";
  ElementsAttr value;
  if (type.getNumElements() <= kMaxDenseElements) {
    // Small enough for folders, like a small initializer.
    std::vector<float> values(type.getNumElements());
    fill(values.data());
    value = DenseElementsAttr::get(type, ArrayRef<float>(values));
  } else {
    AsmResourceBlob blob =
        HeapAsmResourceBlob::allocate(size_t(*bytes), alignof(float));
    fill(reinterpret_cast<float *>(blob.getMutableData().data()));
    value = DenseResourceElementsAttr::get(
        type, node.getNode().input(int(fromInput)) + "_dequantized",
        std::move(blob));
  }
  return moe::ConstantOp::create(builder, node.getLoc(), value).getResult();
}

FailureOr<Value>
QuantNode::createQuantizedWeight(ArrayRef<int64_t> shape, unsigned codes,
                                 unsigned scales, unsigned zeroPoints,
                                 int64_t bits, int64_t blockSize,
                                 bool transposed, int64_t accuracyLevel) {
  OpBuilder &builder = node.getBuilder();
  auto type = RankedTensorType::get(shape, builder.getF32Type());
  // The constants were read (readConstant) before: they exist.
  auto data = [&](unsigned input) {
    return cast<ElementsAttr>(getConstantData(operand(input)).getValue());
  };
  ElementsAttr zeroPointData =
      zeroPoints == ~0u ? ElementsAttr() : data(zeroPoints);
  auto op = moe::BlockQuantizedConstantOp::create(
      builder, node.getLoc(), type, builder.getI64IntegerAttr(bits),
      builder.getI64IntegerAttr(blockSize),
      transposed ? builder.getUnitAttr() : UnitAttr(), data(codes),
      data(scales), zeroPointData,
      accuracyLevel == 4 ? builder.getUnitAttr() : UnitAttr());
  if (failed(mlir::verify(op))) {
    op->erase();
    return emitInputError(codes) << "cannot be kept block-quantized";
  }
  return op.getResult();
}

LogicalResult QuantNode::finish(ArrayRef<Operation *> created, Value result) {
  // The ops' verifiers (and their type inference) back up the checks above.
  if (llvm::any_of(created,
                   [](Operation *op) { return failed(mlir::verify(op)); })) {
    for (Operation *op : llvm::reverse(created))
      op->erase();
    return failure();
  }
  return node.setResults(result);
}

} // namespace moec::onnx_import
