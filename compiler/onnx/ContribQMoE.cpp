//===- ContribQMoE.cpp - onnxruntime's quantized MoE contrib op -----------===//
//
// com.microsoft.QMoE of onnxruntime-genai's int4 CPU models, as onnxruntime's
// contrib op schema defines it (1.23, plus its later inputs and attributes),
// on what the quantized contrib ops share (QuantNode.h):
//
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
// Activations and scales are float32 (the builder's CPU models). Every size
// is checked against the attributes before anything is built (the file is
// untrusted).
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/ContribQuant.h"

#include "compiler/onnx/ContribMoE.h"
#include "compiler/onnx/QuantNode.h"
#include "compiler/onnx/Quantization.h"
#include "dialects/moe/LayerForm.h"

#include <cmath>
#include <vector>

using namespace mlir;
using namespace moec;
using namespace moec::onnx_import;

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
