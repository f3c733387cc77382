//===- ContribQuant.cpp - onnxruntime's int4/int8 contrib ops -------------===//
//
// The quantized com.microsoft ops of onnxruntime-genai's int4 CPU models, as
// onnxruntime's contrib op schemas define them (1.23, plus QMoE's later
// inputs and attributes). Quantized weights stay packed: they become
// moe.block_quantized_constant ops (the node's own codes, scales and integer
// zero points), which the plan stores as they are and the runtime's kernels
// read (compiler/onnx/README.md, "Quantized weights"); where the runtime has
// no kernel for a form, the weights are dequantized exactly at import
// (Quantization.h) into f32 moe.constant weights instead:
//
//  * MatMulNBits -> moe.mat_mul by the [K, N] transpose of B (+ moe.add of
//    the bias); f32 for float zero points. accuracy_level 4 marks the packed
//    weight int8_activations (the runtime quantizes A per block, as
//    onnxruntime does); any other level computes in f32. g_idx is accepted
//    where it is the identity grouping.
//  * GatherBlockQuantized with uint8 data -> moe.gather along axis 0 of the
//    dequantized f32 table.
//  * QMoE with quant_type fp4 (MXFP4: E2M1 codes packed along the rows,
//    [E, K, N / 2] as onnxruntime-genai's builder writes them, E8M0 block
//    scales of 32 and per-expert global scales) is dequantized exactly into
//    [E, N, K] (Quantization.h, dequantizeMxfp4), then imported like integer
//    weights; an E8M0 NaN scale or a weight past f32's range is an error.
//  * QMoE with integer weights -> com.microsoft.MoE's import
//    (importContribMoE) on the [E, N, K] weights, so routing, activations
//    and the checks of the expert shapes are MoE's; f32 for per-row weights
//    with zero points.
//
// Activations and scales are float32 (the builder's CPU models): moec's
// float ops take one element type. Every size is checked against the
// attributes before anything is built (the file is untrusted).
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/ContribQuant.h"

#include "compiler/onnx/ContribMoE.h"
#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/Model.h"
#include "compiler/onnx/Quantization.h"
#include "compiler/onnx/Tensors.h"
#include "dialects/moe/LayerForm.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace mlir;
using namespace moec;
using namespace moec::onnx_import;

namespace {

/// The data of one constant input, in the model's byte order.
struct ConstantInput {
  RankedTensorType type;
  /// The bytes, exactly the tensor's size; `storage` where a splat was
  /// expanded.
  ArrayRef<char> view;
  std::vector<char> storage;

  ArrayRef<char> getBytes() const {
    return storage.empty() ? view : ArrayRef<char>(storage);
  }
  const uint8_t *getUInt8() const {
    return reinterpret_cast<const uint8_t *>(getBytes().data());
  }
  /// Copies the elements of an f32 or i32 tensor (a copy: a constant's bytes
  /// carry no alignment promise beyond their own).
  template <typename T> std::vector<T> getElements() const {
    ArrayRef<char> bytes = getBytes();
    std::vector<T> elements(bytes.size() / sizeof(T));
    if (!elements.empty())
      std::memcpy(elements.data(), bytes.data(), elements.size() * sizeof(T));
    return elements;
  }
};

/// Formats a shape as "[2, 3]" for messages.
std::string formatShape(ArrayRef<int64_t> shape) {
  return "[" +
         llvm::join(llvm::map_range(
                        shape, [](int64_t d) { return std::to_string(d); }),
                    ", ") +
         "]";
}

/// The element types quantized ops take, by the names messages give them.
enum class ElementKind { UInt8, Float32, Int32, E8M0 };
constexpr StringLiteral kElementKindNames[] = {"uint8", "float32", "int32",
                                               "float8e8m0"};

bool hasElementKind(Type type, ElementKind kind) {
  if (kind == ElementKind::UInt8)
    return type.isUnsignedInteger(8);
  if (kind == ElementKind::E8M0)
    return isa<Float8E8M0FNUType>(type);
  return kind == ElementKind::Float32 ? type.isF32()
                                      : type.isSignlessInteger(32);
}

/// Returns the moe.constant whose bytes `value` holds in row-major order: a
/// constant, or one reshaped (Reshape, Flatten, Squeeze, Unsqueeze, Identity:
/// onnxruntime-genai's builder feeds a tied lm_head's MatMulNBits weight to
/// GatherBlockQuantized through a Reshape); null otherwise.
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

/// One node of a quantized op being imported: its inputs and attributes, read
/// and checked with errors that name the node and the input or attribute.
class QuantNode {
public:
  QuantNode(NodeImporter &node) : node(node) {}

  Value operand(unsigned input) const {
    auto &operands = node.getOperands();
    return input < operands.size() ? operands[input] : Value();
  }
  StringRef getInputName(unsigned input) const {
    return node.getImport().inputs[input].name;
  }
  std::string getOpName() const {
    return (kMicrosoftDomain + "." + node.getImport().opType).str();
  }
  InFlightDiagnostic emitInputError(unsigned input) const {
    return emitError(
        getSubjectLoc(node.getLoc(), "input '" + getInputName(input) + "'"));
  }
  InFlightDiagnostic emitAttributeError(StringRef name) const {
    return node.emitAttributeError(name);
  }

  /// Refuses any attribute not in `known` (onnxruntime refuses them too).
  LogicalResult checkAttributeNames(ArrayRef<StringRef> known) const {
    for (NamedAttribute attr : node.getAttributes())
      if (!llvm::is_contained(known, attr.getName().getValue()))
        return emitAttributeError(attr.getName().getValue())
               << "is not an attribute of " << getOpName();
    return success();
  }
  /// Reads INT attribute `name`, `defaultValue` when absent (required when
  /// there is none).
  FailureOr<int64_t> readInt(StringRef name,
                             std::optional<int64_t> defaultValue) const {
    Attribute attr = node.getAttributes().get(name);
    if (!attr && defaultValue)
      return *defaultValue;
    if (!attr)
      return emitAttributeError(name) << "is required";
    auto value = dyn_cast<IntegerAttr>(attr);
    if (!value)
      return emitAttributeError(name) << "must be an INT";
    return value.getInt();
  }
  /// Checks block size attribute `name`: a power of 2, at least 16.
  LogicalResult checkBlockSize(StringRef name, int64_t value) const {
    if (value >= 16 && llvm::isPowerOf2_64(uint64_t(value)))
      return success();
    return emitAttributeError(name)
           << "must be a power of 2 and at least 16, got " << value;
  }
  /// Checks bits attribute `name`: 4 or 8 (the widths moec imports).
  LogicalResult checkBits(StringRef name, int64_t value) const {
    if (value == 4 || value == 8)
      return success();
    return emitAttributeError(name)
           << "must be 4 or 8 (moec imports 4- and 8-bit weights), got "
           << value;
  }

  /// Reads constant input `input` of one of the element `kinds`.
  FailureOr<ConstantInput> readConstant(unsigned input,
                                        ArrayRef<ElementKind> kinds) const;
  /// Checks that constant input `input` has one of the `allowed` shapes.
  LogicalResult checkShape(unsigned input, const ConstantInput &constant,
                           ArrayRef<SmallVector<int64_t>> allowed,
                           StringRef meaning) const;

  /// Creates an f32 moe.constant of `shape` whose elements `fill` writes,
  /// named after input `fromInput` (the quantized weight).
  FailureOr<Value> createWeight(ArrayRef<int64_t> shape, unsigned fromInput,
                                function_ref<void(float *)> fill);

  /// Creates a moe.block_quantized_constant of the f32 `shape` over the
  /// constants of inputs `codes`, `scales` and `zeroPoints` (packed uint8;
  /// ~0u: none), `bits`-bit codes in blocks of `blockSize`, the transpose of
  /// the stored matrix when `transposed`, whose products may use int8
  /// activations when `accuracyLevel` is 4 (onnxruntime's meaning).
  FailureOr<Value> createQuantizedWeight(ArrayRef<int64_t> shape,
                                         unsigned codes, unsigned scales,
                                         unsigned zeroPoints, int64_t bits,
                                         int64_t blockSize, bool transposed,
                                         int64_t accuracyLevel);

  /// Verifies `created` (in order) and binds `result` to the node's output;
  /// on failure erases them, leaving no half-built IR.
  LogicalResult finish(ArrayRef<Operation *> created, Value result);

  NodeImporter &node;
};

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

//===----------------------------------------------------------------------===//
// MatMulNBits
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// QMoE
//===----------------------------------------------------------------------===//

namespace {
enum QMoEInput : unsigned {
  kInput,
  kRouterProbs,
  kFc1Weights,
  kFc1Scales,
  kFc1Bias,
  kFc2Weights,
  kFc2Scales,
  kFc2Bias,
  kFc3Weights,
  kFc3Scales,
  kFc3Bias,
  kFc1ZeroPoints,
  kFc2ZeroPoints,
  kFc3ZeroPoints,
  kRouterWeights,
  /// The first of the global and activation scales of the fp4/fp8 modes.
  kFirstFloatModeInput,
  kFc1GlobalScale = kFirstFloatModeInput,
  kFc2GlobalScale,
  /// The first of the activation scales of the fp8 activation modes.
  kFirstActivationScale,
};

/// The attributes importContribMoE reads.
constexpr StringLiteral kMoEAttributes[] = {"k",
                                            "activation_type",
                                            "normalize_routing_weights",
                                            "use_sparse_mixer",
                                            "swiglu_fusion",
                                            "swiglu_limit",
                                            "activation_alpha",
                                            "activation_beta"};
/// The attributes of QMoE's quantization.
constexpr StringLiteral kQuantAttributes[] = {
    "expert_weight_bits", "block_size", "quant_type", "weights_prepacked",
    "accuracy_level"};

/// One expert projection of a QMoE node: its inputs.
struct QMoEProjection {
  unsigned weights, scales, zeroPoints;
};

/// Dequantizes one projection into an f32 [E, N, K] constant; null where the
/// projection (fc3) is absent. Packed weights of `accuracyLevel` 4 allow
/// int8 activations.
FailureOr<Value> importProjection(QuantNode &q, QMoEProjection fc, int64_t bits,
                                  int64_t blockSize, int64_t accuracyLevel) {
  if (!q.operand(fc.weights)) {
    for (unsigned input : {fc.scales, fc.zeroPoints})
      if (q.operand(input))
        return q.emitInputError(input)
               << "needs " << q.getInputName(fc.weights);
    return Value();
  }
  if (!q.operand(fc.scales))
    return q.emitInputError(fc.scales)
           << "is required for integer weights (quant_type 'int')";
  FailureOr<ConstantInput> weights =
      q.readConstant(fc.weights, {ElementKind::UInt8});
  if (failed(weights))
    return failure();
  if (weights->type.getRank() != 3)
    return q.emitInputError(fc.weights)
           << "must have rank 3 ([num_experts, rows, columns * bits / 8]), "
              "got "
           << weights->type;
  ArrayRef<int64_t> shape = weights->type.getShape();
  const int64_t experts = shape[0], rows = shape[1];
  const int64_t cols = shape[2] * (8 / bits);
  if (blockSize && cols % blockSize != 0)
    return q.emitInputError(fc.weights)
           << "has " << cols << " columns, which block_size " << blockSize
           << " does not divide (QMoE requires hidden_size and inter_size to "
              "be multiples of block_size)";
  const int64_t blocks = blockSize ? cols / blockSize : 1;

  FailureOr<ConstantInput> scales =
      q.readConstant(fc.scales, {ElementKind::Float32});
  if (failed(scales))
    return failure();
  if (blockSize
          ? failed(q.checkShape(fc.scales, *scales, {{experts, rows, blocks}},
                                "[num_experts, rows, columns / "
                                "block_size] with block_size"))
          : failed(q.checkShape(fc.scales, *scales, {{experts, rows}},
                                "[num_experts, rows] without "
                                "block_size")))
    return failure();
  std::optional<ConstantInput> zeroPoints;
  if (q.operand(fc.zeroPoints)) {
    FailureOr<ConstantInput> read =
        q.readConstant(fc.zeroPoints, {ElementKind::UInt8});
    if (failed(read))
      return failure();
    // Per row the zero points pack along the rows; with blocks, along each
    // row's blocks.
    if (blockSize
            ? failed(q.checkShape(
                  fc.zeroPoints, *read,
                  {{experts, rows, quant::getPackedBytes(blocks, int(bits))}},
                  "[num_experts, rows, ceil(columns / block_size * "
                  "bits / 8)] with block_size"))
            : failed(q.checkShape(
                  fc.zeroPoints, *read,
                  {{experts, quant::getPackedBytes(rows, int(bits))}},
                  "[num_experts, ceil(rows * bits / 8)] without "
                  "block_size")))
      return failure();
    zeroPoints = std::move(*read);
  }

  // Kept packed: blocks, or one block per row without zero points (a row's
  // zero points pack along the rows, which the kernels do not read).
  if (blockSize || !zeroPoints)
    return q.createQuantizedWeight({experts, rows, cols}, fc.weights, fc.scales,
                                   zeroPoints ? fc.zeroPoints : ~0u, bits,
                                   blockSize ? blockSize : cols,
                                   /*transposed=*/false, accuracyLevel);
  std::vector<float> scaleValues = scales->getElements<float>();
  quant::QMoEWeight weight;
  weight.experts = experts;
  weight.rows = rows;
  weight.cols = cols;
  weight.bits = int(bits);
  weight.blockSize = blockSize;
  weight.weights = weights->getUInt8();
  weight.scales = scaleValues.data();
  weight.zeroPoints = zeroPoints ? zeroPoints->getUInt8() : nullptr;
  return q.createWeight({experts, rows, cols}, fc.weights, [&](float *out) {
    quant::dequantizeQMoE(weight, out);
  });
}

/// Dequantizes one projection of quant_type fp4 (MXFP4) into an f32 [E, N,
/// K] constant: codes [E, K, N / 2] packed along the rows, E8M0 scales [E,
/// N, K / 32], global scales [E] (input `globalScale`). The projection is
/// present (importProjection handles absent ones alike).
FailureOr<Value> importMxfp4Projection(QuantNode &q, QMoEProjection fc,
                                       unsigned globalScale) {
  if (q.operand(fc.zeroPoints))
    return q.emitInputError(fc.zeroPoints)
           << "must be absent with quant_type 'fp4' (E2M1 codes have no zero "
              "point)";
  for (unsigned input : {fc.scales, globalScale})
    if (!q.operand(input))
      return q.emitInputError(input)
             << "is required with quant_type 'fp4' (MXFP4 weights scale by "
                "E8M0 blocks of 32 and a global scale per expert)";
  FailureOr<ConstantInput> weights =
      q.readConstant(fc.weights, {ElementKind::UInt8});
  if (failed(weights))
    return failure();
  // The scales give the sizes: [E, N, K / 32].
  FailureOr<ConstantInput> scales =
      q.readConstant(fc.scales, {ElementKind::E8M0});
  if (failed(scales))
    return failure();
  ArrayRef<int64_t> scaleShape = scales->type.getShape();
  if (scaleShape.size() != 3 || scaleShape[1] % 2 != 0)
    return q.emitInputError(fc.scales)
           << "has shape " << formatShape(scaleShape)
           << ", expected [num_experts, rows, columns / 32] E8M0 block "
              "scales with an even number of rows";
  const int64_t experts = scaleShape[0], rows = scaleShape[1],
                cols = 32 * scaleShape[2];
  if (failed(q.checkShape(fc.weights, *weights, {{experts, cols, rows / 2}},
                          "[num_experts, columns, rows / 2]: E2M1 codes "
                          "packed along the rows, onnxruntime-genai's layout, "
                          "for the [num_experts, rows, columns / 32] scales")))
    return failure();
  FailureOr<ConstantInput> global =
      q.readConstant(globalScale, {ElementKind::Float32});
  if (failed(global) || failed(q.checkShape(globalScale, *global, {{experts}},
                                            "[num_experts] global scales")))
    return failure();
  ArrayRef<char> scaleBytes = scales->getBytes();
  if (const char *nan = llvm::find(scaleBytes, char(quant::kE8M0NaN));
      nan != scaleBytes.end())
    return q.emitInputError(fc.scales)
           << "holds the E8M0 NaN (255) at element " << nan - scaleBytes.data();

  std::vector<float> globalValues = global->getElements<float>();
  quant::Mxfp4Weight weight;
  weight.experts = experts;
  weight.rows = rows;
  weight.cols = cols;
  weight.weights = weights->getUInt8();
  weight.scales = scales->getUInt8();
  weight.globalScales = globalValues.data();
  std::vector<float> values(size_t(experts * rows * cols));
  quant::dequantizeMxfp4(weight, values.data());
  if (auto bad =
          llvm::find_if(values, [](float v) { return !std::isfinite(v); });
      bad != values.end())
    return q.emitInputError(fc.weights)
           << "dequantizes to " << *bad << " at element "
           << bad - values.begin() << " ([" << experts << ", " << rows << ", "
           << cols << "]): its E8M0 or global scale leaves float32's range";
  return q.createWeight({experts, rows, cols}, fc.weights, [&](float *out) {
    std::copy(values.begin(), values.end(), out);
  });
}

/// Returns the moe.experts that importContribMoE built for `output`.
moe::ExpertsOp getExperts(Value output) {
  if (auto reshape = output.getDefiningOp<moe::ReshapeOp>())
    output = reshape->getOperand(0);
  auto combine = output.getDefiningOp<moe::CombineOp>();
  return combine ? combine->getOperand(0).getDefiningOp<moe::ExpertsOp>()
                 : moe::ExpertsOp();
}
} // namespace

LogicalResult moec::onnx_import::importQMoE(NodeImporter &node) {
  QuantNode q(node);
  SmallVector<StringRef> known(std::begin(kMoEAttributes),
                               std::end(kMoEAttributes));
  known.append(std::begin(kQuantAttributes), std::end(kQuantAttributes));
  if (failed(q.checkAttributeNames(known)))
    return failure();
  FailureOr<int64_t> bits = q.readInt("expert_weight_bits", 4);
  // Absent or 0: one scale per row (no blocks).
  FailureOr<int64_t> blockSize =
      succeeded(bits) ? q.readInt("block_size", 0) : bits;
  // -1 (the default) leaves the layout to the execution provider, which on
  // CPU reads the raw initializers; 1 asks for a prepacked layout.
  FailureOr<int64_t> prepacked =
      succeeded(blockSize) ? q.readInt("weights_prepacked", -1) : blockSize;
  // accuracy_level 4 lets onnxruntime use int8 activations (1.23's schema
  // has no such attribute; later versions quantize the activations of
  // experts with block_size per block for it, those with one scale per row
  // stay f32): moec does the same for packed weights.
  FailureOr<int64_t> accuracyLevel =
      succeeded(prepacked) ? q.readInt("accuracy_level", 0) : prepacked;
  if (failed(accuracyLevel) ||
      failed(q.checkBits("expert_weight_bits", *bits)) ||
      (*blockSize != 0 && failed(q.checkBlockSize("block_size", *blockSize))))
    return failure();
  bool fp4 = false;
  if (Attribute quantType = node.getAttributes().get("quant_type")) {
    auto name = dyn_cast<StringAttr>(quantType);
    if (!name)
      return q.emitAttributeError("quant_type") << "must be a STRING";
    fp4 = name.getValue() == "fp4";
    if (name.getValue() != "int" && !fp4)
      return q.emitAttributeError("quant_type")
             << "must be 'int' or 'fp4' (moec imports integer and MXFP4 "
                "weights), got '"
             << name.getValue() << "'";
  }
  // MXFP4 is 4-bit codes in blocks of 32 whatever the attributes say;
  // weights_prepacked does not apply to it.
  if (fp4 && *bits != 4)
    return q.emitAttributeError("expert_weight_bits")
           << "must be 4 with quant_type 'fp4', got " << *bits;
  if (fp4 && *blockSize != 0 && *blockSize != 32)
    return q.emitAttributeError("block_size")
           << "must be 32 (or absent) with quant_type 'fp4', got "
           << *blockSize;
  if (fp4 && q.operand(kFc3Weights))
    return q.emitInputError(kFc3Weights)
           << "is not supported with quant_type 'fp4' (QMoE has no fc3 global "
              "scale)";
  if (!fp4 && *prepacked != -1 && *prepacked != 0)
    return q.emitAttributeError("weights_prepacked")
           << "must be 0 or -1 (raw [num_experts, rows, columns * bits / 8] "
              "weights), got "
           << *prepacked;

  if (q.operand(kRouterWeights))
    return q.emitInputError(kRouterWeights)
           << "is not supported: moec routes by router_probs alone (no "
              "separate weights for aggregation)";
  for (unsigned input = fp4 ? kFirstActivationScale : kFirstFloatModeInput,
                e = node.getImport().inputs.size();
       input < e; ++input)
    if (q.operand(input))
      return q.emitInputError(input)
             << (fp4 ? "belongs to the fp8 activation modes, which moec does "
                       "not import"
                     : "belongs to the fp4/fp8 quant_types (quant_type is "
                       "'int')");
  Value input = q.operand(kInput);
  auto inputType = dyn_cast<RankedTensorType>(input.getType());
  if (!inputType || !inputType.getElementType().isF32())
    return q.emitInputError(kInput)
           << "must be a float32 tensor (moec imports QMoE with float32 "
              "activations), got "
           << input.getType();

  // On failure the dequantized weights are erased: no half-built IR.
  SmallVector<Value> weights;
  auto eraseWeights = [&] {
    for (Value weight : weights)
      if (weight && weight.use_empty())
        weight.getDefiningOp()->erase();
    return failure();
  };
  for (QMoEProjection fc :
       {QMoEProjection{kFc1Weights, kFc1Scales, kFc1ZeroPoints},
        QMoEProjection{kFc2Weights, kFc2Scales, kFc2ZeroPoints},
        QMoEProjection{kFc3Weights, kFc3Scales, kFc3ZeroPoints}}) {
    FailureOr<Value> weight =
        fp4 && q.operand(fc.weights)
            ? importMxfp4Projection(q, fc,
                                    fc.weights == kFc1Weights ? kFc1GlobalScale
                                                              : kFc2GlobalScale)
            : importProjection(q, fc, *bits, *blockSize,
                               *blockSize ? *accuracyLevel : 0);
    if (failed(weight))
      return eraseWeights();
    weights.push_back(*weight);
  }

  // The MoE node on the dequantized weights, with MoE's attributes.
  SmallVector<Value> operands = {
      input,      q.operand(kRouterProbs), weights[0], q.operand(kFc1Bias),
      weights[1], q.operand(kFc2Bias),     weights[2], q.operand(kFc3Bias)};
  NamedAttrList attributes;
  for (NamedAttribute attr : node.getAttributes())
    if (llvm::is_contained(kMoEAttributes, attr.getName().getValue()))
      attributes.push_back(attr);
  FailureOr<SmallVector<Value>> results =
      importContribMoE(node.getBuilder(), node.getLoc(), operands,
                       attributes.getDictionary(node.getContext()));
  if (failed(results))
    return eraseWeights();
  if (moe::ExpertsOp experts = getExperts(results->front()))
    moe::setLayerForm(experts, "com.microsoft.QMoE");
  return node.setResults(*results);
}
