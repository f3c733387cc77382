//===- ContribQuant.cpp - onnxruntime's int4/int8 contrib ops -------------===//
//
// The quantized com.microsoft ops of onnxruntime-genai's int4 CPU models, as
// onnxruntime's contrib op schemas define them (1.23); QMoE is in
// ContribQMoE.cpp, what they share in QuantNode.h. Quantized weights stay
// packed: they become moe.block_quantized_constant ops (the node's own codes,
// scales and integer zero points), which the plan stores as they are and the
// runtime's kernels read (compiler/onnx/README.md, "Quantized weights"); where
// the runtime has no kernel for a form, the weights are dequantized exactly at
// import (Quantization.h) into f32 moe.constant weights instead:
//
//  * MatMulNBits -> moe.mat_mul by the [K, N] transpose of B (+ moe.add of
//    the bias); f32 for float zero points. accuracy_level 4 marks the packed
//    weight int8_activations (the runtime quantizes A per block, as
//    onnxruntime does); any other level computes in f32. g_idx is accepted
//    where it is the identity grouping.
//  * GatherBlockQuantized with uint8 data -> moe.gather along axis 0 of the
//    dequantized f32 table.
//
// Activations and scales are float32 (the builder's CPU models): moec's
// float ops take one element type. Every size is checked against the
// attributes before anything is built (the file is untrusted).
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/ContribQuant.h"

#include "compiler/onnx/QuantNode.h"
#include "compiler/onnx/Quantization.h"

#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

#include <vector>

using namespace mlir;
using namespace moec;
using namespace moec::onnx_import;

//===----------------------------------------------------------------------===//
// MatMulNBits
//===----------------------------------------------------------------------===//

namespace {
enum MatMulNBitsInput : unsigned { kA, kB, kScales, kZeroPoints, kGIdx, kBias };
} // namespace

LogicalResult moec::onnx_import::importMatMulNBits(NodeImporter &node) {
  QuantNode q(node);
  if (failed(q.checkAttributeNames(
          {"K", "N", "bits", "block_size", "accuracy_level"})))
    return failure();
  FailureOr<int64_t> k = q.readInt("K", std::nullopt);
  FailureOr<int64_t> n = succeeded(k) ? q.readInt("N", std::nullopt) : k;
  FailureOr<int64_t> bits = succeeded(n) ? q.readInt("bits", 4) : n;
  FailureOr<int64_t> blockSize =
      succeeded(bits) ? q.readInt("block_size", std::nullopt) : bits;
  // accuracy_level 4 lets onnxruntime quantize A to int8 per block: moec
  // does so too where the weight stays packed; any other value means f32.
  FailureOr<int64_t> accuracyLevel =
      succeeded(blockSize) ? q.readInt("accuracy_level", 0) : blockSize;
  if (failed(accuracyLevel))
    return failure();
  if (*k < 1)
    return q.emitAttributeError("K") << "must be positive, got " << *k;
  if (*n < 1)
    return q.emitAttributeError("N") << "must be positive, got " << *n;
  if (failed(q.checkBits("bits", *bits)) ||
      failed(q.checkBlockSize("block_size", *blockSize)))
    return failure();

  Value a = q.operand(kA);
  auto aType = dyn_cast<RankedTensorType>(a.getType());
  if (!aType || !aType.getElementType().isF32() || aType.getRank() < 1)
    return q.emitInputError(kA)
           << "must be a float32 tensor of rank 1 or more (moec imports "
              "MatMulNBits with float32 activations), got "
           << a.getType();
  int64_t aK = aType.getShape().back();
  if (!ShapedType::isDynamic(aK) && aK != *k)
    return q.emitInputError(kA) << "has type " << aType
                                << ", whose last dimension is not K = " << *k;

  // B's shape is compared dimension by dimension, so that no product of
  // untrusted sizes is formed before the data vouched for it.
  const int64_t blocks = llvm::divideCeil(*k, *blockSize);
  const int64_t blobSize = *blockSize / 8 * *bits;
  const int64_t zeroPointBytes = quant::getPackedBytes(blocks, int(*bits));
  auto shapes = [&](int64_t columns) {
    SmallVector<SmallVector<int64_t>> allowed = {{*n, columns}};
    // The 1-D form onnxruntime keeps for older models.
    if (std::optional<int64_t> flat = llvm::checkedMul(*n, columns))
      allowed.push_back({*flat});
    return allowed;
  };
  FailureOr<ConstantInput> b = q.readConstant(kB, {ElementKind::UInt8});
  if (failed(b) ||
      failed(q.checkShape(kB, *b, {{*n, blocks, blobSize}},
                          "[N, k_blocks, blob_size] with k_blocks = "
                          "ceil(K / block_size), blob_size = block_size * "
                          "bits / 8")))
    return failure();
  FailureOr<ConstantInput> scales =
      q.readConstant(kScales, {ElementKind::Float32});
  if (failed(scales) ||
      failed(q.checkShape(kScales, *scales, shapes(blocks), "[N, k_blocks]")))
    return failure();

  std::optional<ConstantInput> zeroPoints;
  if (q.operand(kZeroPoints)) {
    FailureOr<ConstantInput> read =
        q.readConstant(kZeroPoints, {ElementKind::UInt8, ElementKind::Float32});
    if (failed(read))
      return failure();
    bool packed = read->type.getElementType().isUnsignedInteger(8);
    if (failed(q.checkShape(kZeroPoints, *read,
                            shapes(packed ? zeroPointBytes : blocks),
                            packed ? "uint8: [N, ceil(k_blocks * bits / 8)]"
                                   : "float32: [N, k_blocks]")))
      return failure();
    zeroPoints = std::move(*read);
  }
  bool packedZeroPoints =
      zeroPoints && zeroPoints->type.getElementType().isUnsignedInteger(8);

  if (q.operand(kGIdx)) {
    FailureOr<ConstantInput> gIdx = q.readConstant(kGIdx, {ElementKind::Int32});
    if (failed(gIdx) ||
        failed(q.checkShape(
            kGIdx, *gIdx,
            {{*k}, {llvm::checkedMul(blocks, *blockSize).value_or(*k)}},
            "[K] or [k_blocks * block_size]")))
      return failure();
    std::vector<int32_t> groups = gIdx->getElements<int32_t>();
    for (auto [i, group] : llvm::enumerate(groups))
      if (int64_t(group) != int64_t(i) / *blockSize)
        return q.emitInputError(kGIdx)
               << "maps column " << i << " to block " << group
               << "; only the identity grouping g_idx[k] = k / block_size "
                  "is supported (reordered act-order groups are not)";
    if (packedZeroPoints)
      return q.emitInputError(kGIdx)
             << "is given with uint8 zero points, which onnxruntime 1.23's CPU "
                "kernel ignores when g_idx is present; the spec applies "
                "them, so the model's meaning is ambiguous";
  }

  Value bias = q.operand(kBias);
  if (bias) {
    auto biasType = dyn_cast<RankedTensorType>(bias.getType());
    if (!biasType || !biasType.getElementType().isF32() ||
        biasType.getRank() != 1 ||
        (!ShapedType::isDynamic(biasType.getDimSize(0)) &&
         biasType.getDimSize(0) != *n))
      return q.emitInputError(kBias)
             << "must be a float32 tensor of shape [N] = [" << *n << "], got "
             << bias.getType();
  }

  std::vector<float> scaleValues = scales->getElements<float>();
  std::vector<float> floatZeroPoints;
  if (zeroPoints && !packedZeroPoints)
    floatZeroPoints = zeroPoints->getElements<float>();
  quant::MatMulNBitsWeight weight;
  weight.k = *k;
  weight.n = *n;
  weight.bits = int(*bits);
  weight.blockSize = *blockSize;
  weight.b = b->getUInt8();
  weight.scales = scaleValues.data();
  if (packedZeroPoints)
    weight.packedZeroPoints = zeroPoints->getUInt8();
  else if (zeroPoints)
    weight.floatZeroPoints = floatZeroPoints.data();
  // Kept packed unless the zero points are floats (the runtime's kernels
  // subtract integer zero points).
  FailureOr<Value> w =
      zeroPoints && !packedZeroPoints
          ? q.createWeight(
                {*k, *n}, kB,
                [&](float *out) { quant::dequantizeMatMulNBits(weight, out); })
          : q.createQuantizedWeight(
                {*k, *n}, kB, kScales, zeroPoints ? unsigned(kZeroPoints) : ~0u,
                *bits, *blockSize, /*transposed=*/true, *accuracyLevel);
  if (failed(w))
    return failure();

  SmallVector<int64_t> outShape(aType.getShape().drop_back());
  outShape.push_back(*n);
  auto outType = RankedTensorType::get(outShape, aType.getElementType());
  OpBuilder &builder = node.getBuilder();
  SmallVector<Operation *> created = {w->getDefiningOp()};
  Value result =
      moe::MatMulOp::create(builder, node.getLoc(), outType, a, *w).getResult();
  created.push_back(result.getDefiningOp());
  if (bias) {
    result = moe::AddOp::create(builder, node.getLoc(), outType, result, bias)
                 .getResult();
    created.push_back(result.getDefiningOp());
  }
  return q.finish(created, result);
}

//===----------------------------------------------------------------------===//
// GatherBlockQuantized
//===----------------------------------------------------------------------===//

namespace {
enum GatherBlockQuantizedInput : unsigned {
  kData,
  kIndices,
  kDataScales,
  kDataZeroPoints
};

/// Checks that axis attribute `name` (negative: from the back) is axis
/// `expected` of data of rank `rank`, as onnxruntime requires of uint8 data.
LogicalResult checkAxis(const QuantNode &q, StringRef name, int64_t axis,
                        int64_t rank, int64_t expected, const Twine &what) {
  if (axis < -rank || axis >= rank)
    return q.emitAttributeError(name)
           << "must be in [" << -rank << ", " << rank - 1 << "] for data of "
           << "rank " << rank << ", got " << axis;
  if ((axis < 0 ? axis + rank : axis) != expected)
    return q.emitAttributeError(name)
           << "must be " << what << " for uint8 data, got " << axis;
  return success();
}
} // namespace

LogicalResult
moec::onnx_import::importGatherBlockQuantized(NodeImporter &node) {
  QuantNode q(node);
  if (failed(q.checkAttributeNames(
          {"bits", "block_size", "gather_axis", "quantize_axis"})))
    return failure();
  FailureOr<int64_t> bits = q.readInt("bits", 4);
  FailureOr<int64_t> blockSize =
      succeeded(bits) ? q.readInt("block_size", 128) : bits;
  FailureOr<int64_t> gatherAxis =
      succeeded(blockSize) ? q.readInt("gather_axis", 0) : blockSize;
  FailureOr<int64_t> quantizeAxis =
      succeeded(gatherAxis) ? q.readInt("quantize_axis", 1) : gatherAxis;
  if (failed(quantizeAxis) || failed(q.checkBits("bits", *bits)) ||
      failed(q.checkBlockSize("block_size", *blockSize)))
    return failure();

  FailureOr<ConstantInput> data = q.readConstant(kData, {ElementKind::UInt8});
  if (failed(data))
    return failure();
  ArrayRef<int64_t> dataShape = data->type.getShape();
  int64_t rank = data->type.getRank();
  if (rank < 2)
    return q.emitInputError(kData)
           << "must have rank 2 or more (gathered along axis 0, quantized "
              "along the last), got "
           << data->type;
  if (failed(checkAxis(q, "gather_axis", *gatherAxis, rank, 0, "0")) ||
      failed(checkAxis(q, "quantize_axis", *quantizeAxis, rank, rank - 1,
                       "the last axis (" + Twine(rank - 1) + ")")))
    return failure();

  // Each byte of the last dimension packs 8 / bits codes, low bits first.
  const int64_t codesPerByte = 8 / *bits;
  const int64_t cols = dataShape.back() * codesPerByte;
  const int64_t blocks = llvm::divideCeil(cols, *blockSize);
  const int64_t rows =
      data->type.getNumElements() / std::max<int64_t>(dataShape.back(), 1);
  SmallVector<int64_t> prefix(dataShape.drop_back());
  auto withLast = [&](int64_t last) {
    SmallVector<int64_t> shape(prefix);
    shape.push_back(last);
    return shape;
  };

  FailureOr<ConstantInput> scales =
      q.readConstant(kDataScales, {ElementKind::Float32});
  if (failed(scales) ||
      failed(q.checkShape(kDataScales, *scales, {withLast(blocks)},
                          "data's shape with the last dimension "
                          "ceil(last * 8 / bits / block_size)")))
    return failure();
  std::optional<ConstantInput> zeroPoints;
  if (q.operand(kDataZeroPoints)) {
    FailureOr<ConstantInput> read =
        q.readConstant(kDataZeroPoints, {ElementKind::UInt8});
    if (failed(read) ||
        failed(
            q.checkShape(kDataZeroPoints, *read,
                         {withLast(quant::getPackedBytes(blocks, int(*bits)))},
                         "scales' shape with the last dimension packed: "
                         "ceil(blocks * bits / 8)")))
      return failure();
    zeroPoints = std::move(*read);
  }

  Value indices = q.operand(kIndices);
  auto indicesType = dyn_cast<RankedTensorType>(indices.getType());
  if (!indicesType || !indicesType.getElementType().isSignlessInteger() ||
      (indicesType.getElementTypeBitWidth() != 32 &&
       indicesType.getElementTypeBitWidth() != 64))
    return q.emitInputError(kIndices)
           << "must be a ranked int32 or int64 tensor, got "
           << indices.getType();

  std::vector<float> scaleValues = scales->getElements<float>();
  quant::GatherBlockQuantizedData table;
  table.rows = rows;
  table.cols = cols;
  table.bits = int(*bits);
  table.blockSize = *blockSize;
  table.data = data->getUInt8();
  table.scales = scaleValues.data();
  table.zeroPoints = zeroPoints ? zeroPoints->getUInt8() : nullptr;
  FailureOr<Value> w = q.createWeight(withLast(cols), kData, [&](float *out) {
    quant::dequantizeGatherBlockQuantized(table, out);
  });
  if (failed(w))
    return failure();

  SmallVector<int64_t> outShape(indicesType.getShape());
  llvm::append_range(outShape, ArrayRef<int64_t>(withLast(cols)).drop_front());
  auto outType =
      RankedTensorType::get(outShape, node.getBuilder().getF32Type());
  Value result =
      moe::GatherOp::create(node.getBuilder(), node.getLoc(), outType, *w,
                            indices, node.getBuilder().getI64IntegerAttr(0))
          .getResult();
  return q.finish({w->getDefiningOp(), result.getDefiningOp()}, result);
}
