//===- QuantOps.cpp - moe.block_quantized_constant ------------------------===//

#include "dialects/moe/QuantOps.h"
#include "compiler/onnx/Quantization.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <cstring>
#include <vector>

using namespace mlir;
using namespace moec::moe;

namespace moec::moe {

std::optional<ArrayRef<char>> getElementBytes(ElementsAttr attr,
                                              std::vector<char> &storage) {
  auto type = cast<ShapedType>(attr.getType());
  int64_t width = llvm::divideCeil(type.getElementTypeBitWidth(), 8);
  std::optional<int64_t> size = llvm::checkedMul(type.getNumElements(), width);
  if (!size)
    return std::nullopt;
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob || int64_t(blob->getData().size()) != *size)
      return std::nullopt;
    return blob->getData();
  }
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return std::nullopt;
  ArrayRef<char> raw = dense.getRawData();
  if (!dense.isSplat())
    return int64_t(raw.size()) == *size ? std::optional(raw) : std::nullopt;
  if (int64_t(raw.size()) != width)
    return std::nullopt;
  storage.resize(size_t(*size));
  for (int64_t i = 0; i < type.getNumElements(); ++i)
    std::memcpy(storage.data() + i * width, raw.data(), size_t(width));
  return ArrayRef<char>(storage);
}

} // namespace moec::moe

SmallVector<int64_t> BlockQuantizedConstantOp::getStoredShape() {
  SmallVector<int64_t> shape(getType().getShape());
  if (getTransposed() && shape.size() == 2)
    std::swap(shape[0], shape[1]);
  return shape;
}

int64_t BlockQuantizedConstantOp::getNumMatrices() {
  int64_t count = 1;
  for (int64_t dim : ArrayRef<int64_t>(getStoredShape()).drop_back(2))
    count *= dim;
  return count;
}

int64_t BlockQuantizedConstantOp::getRows() {
  SmallVector<int64_t> shape = getStoredShape();
  return shape[shape.size() - 2];
}

int64_t BlockQuantizedConstantOp::getCols() { return getStoredShape().back(); }

int64_t BlockQuantizedConstantOp::getNumBlocks() {
  return llvm::divideCeil(getCols(), int64_t(getBlockSize()));
}

int64_t BlockQuantizedConstantOp::getRowBytes() {
  return getNumBlocks() * int64_t(getBlockSize()) * int64_t(getBits()) / 8;
}

int64_t BlockQuantizedConstantOp::getZeroPointRowBytes() {
  return quant::getPackedBytes(getNumBlocks(), int(getBits()));
}

LogicalResult BlockQuantizedConstantOp::verify() {
  int64_t bits = getBits(), blockSize = getBlockSize();
  if (bits != 4 && bits != 8)
    return emitOpError("expects bits 4 or 8, got ") << bits;
  if (blockSize > (int64_t(1) << 30) || blockSize * bits % 8 != 0)
    return emitOpError("expects a block_size in [1, 2^30] whose codes fill "
                       "whole bytes, got ")
           << blockSize;
  RankedTensorType type = getType();
  if (!type.hasStaticShape() || type.getRank() < 2)
    return emitOpError("expects a static result of rank 2 or more, got ")
           << type;
  if (getTransposed() && type.getRank() != 2)
    return emitOpError("expects a rank-2 result when transposed, got ") << type;
  if (llvm::any_of(type.getShape(), [](int64_t dim) { return dim < 1; }))
    return emitOpError("expects non-empty dimensions, got ") << type;
  // Every count below is a product of dims of the static result, and the
  // attributes' element counts must equal them: check each for overflow.
  std::optional<int64_t> matrices = int64_t(1);
  SmallVector<int64_t> stored = getStoredShape();
  for (int64_t dim : ArrayRef<int64_t>(stored).drop_back(2))
    matrices = matrices ? llvm::checkedMul(*matrices, dim) : std::nullopt;
  std::optional<int64_t> rows =
      matrices ? llvm::checkedMul(*matrices, getRows()) : std::nullopt;
  int64_t blocks = getNumBlocks();
  std::optional<int64_t> codeBytes = llvm::checkedMul(blocks, blockSize);
  auto check = [&](StringRef name, Attribute attr, Type element,
                   std::optional<int64_t> perRow,
                   Type other = Type()) -> LogicalResult {
    auto elements = cast<ElementsAttr>(attr);
    auto shaped = cast<ShapedType>(elements.getType());
    std::optional<int64_t> expected =
        rows && perRow ? llvm::checkedMul(*rows, *perRow) : std::nullopt;
    if (shaped.getElementType() != element &&
        (!other || shaped.getElementType() != other))
      return emitOpError("expects ")
             << name << " of element type " << element << ", got " << shaped;
    if (!expected || !shaped.hasStaticShape() ||
        shaped.getNumElements() != *expected)
      return emitOpError("expects ")
             << name << " to hold "
             << (expected ? std::to_string(*expected) : "too many")
             << " elements for " << type << ", got " << shaped;
    return success();
  };
  Builder b(getContext());
  Type u8 = b.getIntegerType(8, /*isSigned=*/false);
  if (failed(check("codes", getCodes(), u8,
                   codeBytes ? std::optional(*codeBytes * bits / 8)
                             : std::nullopt)) ||
      failed(
          check("scales", getScales(), b.getF32Type(), blocks, b.getF16Type())))
    return failure();
  if (std::optional<ElementsAttr> zeroPoints = getZeroPoints())
    return check("zero_points", *zeroPoints, u8, getZeroPointRowBytes());
  return success();
}

LogicalResult BlockQuantizedConstantOp::dequantize(float *out) {
  std::vector<char> codeStorage, scaleStorage, zeroStorage;
  std::optional<ArrayRef<char>> codes =
      getElementBytes(getCodes(), codeStorage);
  std::optional<ArrayRef<char>> scales =
      getElementBytes(getScales(), scaleStorage);
  std::optional<ArrayRef<char>> zeroPoints;
  if (getZeroPoints())
    zeroPoints = getElementBytes(*getZeroPoints(), zeroStorage);
  if (!codes || !scales || (getZeroPoints() && !zeroPoints))
    return emitOpError("holds data that cannot be read");
  std::vector<float> scaleValues;
  if (cast<ShapedType>(getScales().getType()).getElementType().isF16()) {
    scaleValues.resize(scales->size() / sizeof(uint16_t));
    for (size_t i = 0; i < scaleValues.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, scales->data() + i * sizeof(bits), sizeof(bits));
      llvm::APFloat half(llvm::APFloat::IEEEhalf(), llvm::APInt(16, bits));
      bool lost;
      half.convert(llvm::APFloat::IEEEsingle(),
                   llvm::APFloat::rmNearestTiesToEven, &lost);
      scaleValues[i] = half.convertToFloat();
    }
  } else {
    scaleValues.resize(scales->size() / sizeof(float));
    std::memcpy(scaleValues.data(), scales->data(), scales->size());
  }
  const int64_t rows = getRows(), cols = getCols(), blocks = getNumBlocks();
  for (int64_t m = 0, e = getNumMatrices(); m < e; ++m) {
    quant::BlockQuantizedMatrix matrix;
    matrix.rows = rows;
    matrix.cols = cols;
    matrix.bits = int(getBits());
    matrix.blockSize = int64_t(getBlockSize());
    matrix.codes = reinterpret_cast<const uint8_t *>(codes->data()) +
                   m * rows * getRowBytes();
    matrix.codeRowStride = getRowBytes() * 8 / matrix.bits;
    matrix.scales = scaleValues.data() + m * rows * blocks;
    if (zeroPoints) {
      matrix.packedZeroPoints =
          reinterpret_cast<const uint8_t *>(zeroPoints->data()) +
          m * rows * getZeroPointRowBytes();
      matrix.zeroPointRowStride = getZeroPointRowBytes() * 8 / matrix.bits;
    }
    quant::dequantizeBlocks(matrix, out + m * rows * cols, getTransposed());
  }
  return success();
}
