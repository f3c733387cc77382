//===- ContribMoE.cpp - com.microsoft.MoE import --------------------------===//
//
// Maps onnxruntime 1.23's fused com.microsoft.MoE contrib op onto the sparse
// ops: router -> dispatch -> experts -> combine. The semantics followed are
// those of onnxruntime 1.23.2 (its schema and CPU kernel, checked against the
// runtime itself by test/lib/gen_contrib_moe.py):
//
//  * `router_probs` [T, E] holds router logits: the op takes a softmax over
//    the E experts, keeps the top `k`, and with `normalize_routing_weights`
//    divides the k probabilities by their sum.
//  * Weights are [num_experts, out, in] (`layout out_in`): fc1 is
//    [E, fusion * F, H], fc2 [E, H, F], fc3 [E, F, H]; biases are [E, out].
//    Releases before 1.23 used [E, in, out]; such models are rejected with a
//    message saying so, since 1.23's own kernels disagree on them.
//  * activation_type relu, silu and identity map to themselves, gelu to
//    `gelu_tanh` (onnxruntime's gelu is the tanh approximation), and swiglu to
//    `silu_glu` when activation_alpha = 1, activation_beta = 0 and no
//    swiglu_limit is given, else to `clamped_swiglu`:
//    min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(l, +-limit) +
//    beta). swiglu_fusion 1 packs gate and linear interleaved in fc1 (gate at
//    even outputs), 2 concatenated (gate first), 0 takes the linear part from
//    fc3.
//  * activation_type geglu (Gemma-4's experts; onnxruntime's CUDA kernel
//    only, its CPU kernel refuses it) maps to `gelu_tanh_glu`:
//    gelu_tanh(g) * l, the tanh-approximated GELU on the gate half. It needs
//    a fused fc1 (swiglu_fusion 1 interleaved with the gate at even outputs,
//    or 2 concatenated with the gate first) and no fc3; activation_alpha,
//    activation_beta and swiglu_limit do not affect it.
//  * fc3 with activation_type silu or gelu is onnxruntime's older gated form
//    act(fc1(x)) * fc3(x) (its CUDA kernel; the CPU kernel has no fc3).
//  * activation_alpha, activation_beta and swiglu_limit only affect swiglu,
//    swiglu_fusion only swiglu and geglu; onnxruntime ignores them for other
//    activations, and so does the import.
//  * A 3-D input [B, S, H] is flattened to [B*S, H] rows and the result
//    reshaped back to the input's shape.
//
// Routing ties are the one difference: for exactly equal probabilities
// onnxruntime's CPU kernel prefers the higher expert index, moe.router the
// lower one (ONNX TopK's rule).
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/ContribMoE.h"

#include "compiler/onnx/Diagnostics.h"
#include "dialects/moe/LayerForm.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <cmath>
#include <optional>
#include <string>

using namespace mlir;
using namespace moec;
using namespace moec::onnx_import;

namespace {

/// The inputs of com.microsoft.MoE in ONNX order.
enum MoEInput : unsigned {
  kInput,
  kRouterProbs,
  kFc1Weights,
  kFc1Bias,
  kFc2Weights,
  kFc2Bias,
  kFc3Weights,
  kFc3Bias,
  kNumInputs
};

constexpr llvm::StringLiteral kInputNames[kNumInputs] = {"input",
                                                         "router_probs",
                                                         "fc1_experts_weights",
                                                         "fc1_experts_bias",
                                                         "fc2_experts_weights",
                                                         "fc2_experts_bias",
                                                         "fc3_experts_weights",
                                                         "fc3_experts_bias"};

constexpr int64_t kDynamic = ShapedType::kDynamic;

/// The node's attributes, with onnxruntime's defaults.
struct MoEAttributes {
  int64_t k = 1;
  std::string activationType = "relu";
  bool normalizeRoutingWeights = false;
  int64_t swigluFusion = 0;
  float activationAlpha = 1.0f;
  float activationBeta = 0.0f;
  std::optional<float> swigluLimit;
};

/// Imports one node; see the file comment for the mapping.
class ContribMoEImporter {
public:
  ContribMoEImporter(OpBuilder &builder, Location loc, ArrayRef<Value> operands,
                     DictionaryAttr attributes)
      : builder(builder), loc(loc), operands(operands), attributes(attributes) {
  }

  FailureOr<SmallVector<Value>> import();

private:
  InFlightDiagnostic emitInputError(unsigned input) const {
    return emitError(
        getSubjectLoc(loc, "input '" + kInputNames[input].str() + "'"));
  }
  InFlightDiagnostic emitAttributeError(StringRef name) const {
    return emitError(getSubjectLoc(loc, "attribute '" + name + "'"));
  }

  Value operand(unsigned input) const {
    return input < operands.size() ? operands[input] : Value();
  }
  RankedTensorType type(unsigned input) const {
    return cast<RankedTensorType>(operand(input).getType());
  }

  LogicalResult readAttributes();
  LogicalResult checkOperandTypes();
  LogicalResult checkShapes();
  LogicalResult checkShape(unsigned input, ArrayRef<int64_t> expected,
                           StringRef meaning);
  FailureOr<Value> build();

  OpBuilder &builder;
  Location loc;
  ArrayRef<Value> operands;
  DictionaryAttr attributes;
  MoEAttributes attrs;

  // Derived while checking.
  /// The activation activation_type names, before gating by fc3.
  std::optional<moe::Activation> activation;
  bool isSwiglu = false;
  /// geglu: gelu_tanh(gate) * linear, both halves in a fused fc1.
  bool isGeglu = false;
  /// fc1 holds gate and linear halves (swiglu with swiglu_fusion 1 or 2).
  bool fusedGate = false;
  int64_t numExperts = kDynamic;
  int64_t hiddenSize = kDynamic;
  int64_t interSize = kDynamic;
};

LogicalResult ContribMoEImporter::readAttributes() {
  for (NamedAttribute attr : attributes) {
    StringRef name = attr.getName().getValue();
    auto readInt = [&](int64_t &out) -> LogicalResult {
      auto value = dyn_cast<IntegerAttr>(attr.getValue());
      if (!value)
        return emitAttributeError(name) << "must be an INT";
      out = value.getInt();
      return success();
    };
    auto readFlag = [&](bool &out) -> LogicalResult {
      int64_t value = 0;
      if (failed(readInt(value)))
        return failure();
      if (value != 0 && value != 1)
        return emitAttributeError(name) << "must be 0 or 1, got " << value;
      out = value == 1;
      return success();
    };
    auto readFloat = [&](float &out) -> LogicalResult {
      auto value = dyn_cast<FloatAttr>(attr.getValue());
      if (!value)
        return emitAttributeError(name) << "must be a FLOAT";
      out = static_cast<float>(value.getValueAsDouble());
      if (!std::isfinite(out))
        return emitAttributeError(name) << "must be finite, got " << out;
      return success();
    };

    if (name == "k") {
      if (failed(readInt(attrs.k)))
        return failure();
      if (attrs.k < 1)
        return emitAttributeError(name)
               << "must be at least 1, got " << attrs.k;
    } else if (name == "activation_type") {
      auto value = dyn_cast<StringAttr>(attr.getValue());
      if (!value)
        return emitAttributeError(name) << "must be a STRING";
      attrs.activationType = value.getValue().str();
    } else if (name == "normalize_routing_weights") {
      if (failed(readFlag(attrs.normalizeRoutingWeights)))
        return failure();
    } else if (name == "use_sparse_mixer") {
      bool sparseMixer = false;
      if (failed(readFlag(sparseMixer)))
        return failure();
      if (sparseMixer)
        return emitAttributeError(name)
               << "1 asks for Phi-3.5-MoE's SparseMixer routing, which is not "
                  "supported";
    } else if (name == "swiglu_fusion") {
      if (failed(readInt(attrs.swigluFusion)))
        return failure();
      if (attrs.swigluFusion < 0 || attrs.swigluFusion > 2)
        return emitAttributeError(name)
               << "must be 0 (fc1 and fc3), 1 (interleaved) or 2 "
                  "(concatenated), got "
               << attrs.swigluFusion;
    } else if (name == "swiglu_limit") {
      float limit = 0.0f;
      if (failed(readFloat(limit)))
        return failure();
      if (!(limit > 0.0f))
        return emitAttributeError(name) << "must be positive, got " << limit;
      attrs.swigluLimit = limit;
    } else if (name == "activation_alpha") {
      if (failed(readFloat(attrs.activationAlpha)))
        return failure();
    } else if (name == "activation_beta") {
      if (failed(readFloat(attrs.activationBeta)))
        return failure();
    } else {
      return emitAttributeError(name)
             << "is not an attribute of com.microsoft.MoE";
    }
  }

  // onnxruntime's gelu is the tanh approximation; swiglu starts as plain
  // SwiGLU and becomes clamped_swiglu when its parameters say so.
  activation =
      llvm::StringSwitch<std::optional<moe::Activation>>(attrs.activationType)
          .Case("relu", moe::Activation::Relu)
          .Case("gelu", moe::Activation::GeluTanh)
          .Case("silu", moe::Activation::Silu)
          .Case("identity", moe::Activation::Identity)
          .Case("swiglu", moe::Activation::SiluGlu)
          .Case("geglu", moe::Activation::GeluTanhGlu)
          .Default(std::nullopt);
  if (!activation)
    return emitAttributeError("activation_type")
           << "must be relu, gelu, silu, identity, swiglu or geglu, got '"
           << attrs.activationType << "'";
  isSwiglu = *activation == moe::Activation::SiluGlu;
  isGeglu = *activation == moe::Activation::GeluTanhGlu;
  if (isGeglu && attrs.swigluFusion == 0)
    return emitAttributeError("swiglu_fusion")
           << "must be 1 (interleaved) or 2 (concatenated) with "
              "activation_type "
              "'geglu', got 0 (geglu takes both halves from a fused fc1)";
  return success();
}

LogicalResult ContribMoEImporter::checkOperandTypes() {
  if (operands.size() > kNumInputs)
    return emitError(loc) << "has " << operands.size()
                          << " inputs; com.microsoft.MoE takes at most "
                          << kNumInputs;
  for (unsigned input : {kInput, kRouterProbs, kFc1Weights, kFc2Weights})
    if (!operand(input))
      return emitInputError(input) << "is required";

  // All inputs share onnxruntime's type T: float, float16 or bfloat16.
  Type elementType;
  if (auto inputType = dyn_cast<RankedTensorType>(operand(kInput).getType()))
    elementType = inputType.getElementType();
  if (!elementType || !isa<Float32Type, Float16Type, BFloat16Type>(elementType))
    return emitInputError(kInput)
           << "must be a ranked float, float16 or bfloat16 tensor, got "
           << operand(kInput).getType();
  int64_t expectedRanks[kNumInputs] = {-1, 2, 3, 2, 3, 2, 3, 2};
  for (unsigned input = 0; input < kNumInputs; ++input) {
    Value value = operand(input);
    if (!value)
      continue;
    auto tensorType = dyn_cast<RankedTensorType>(value.getType());
    if (!tensorType || tensorType.getElementType() != elementType)
      return emitInputError(input)
             << "must be a ranked tensor of the element type of 'input' ("
             << elementType << "), got " << value.getType();
    int64_t rank = tensorType.getRank();
    bool rankOk =
        input == kInput ? rank == 2 || rank == 3 : rank == expectedRanks[input];
    if (!rankOk)
      return emitInputError(input)
             << "must have rank "
             << (input == kInput ? std::string("2 or 3")
                                 : std::to_string(expectedRanks[input]))
             << ", got " << value.getType();
  }
  if (operand(kFc3Bias) && !operand(kFc3Weights))
    return emitInputError(kFc3Bias) << "needs fc3_experts_weights";
  return success();
}

LogicalResult ContribMoEImporter::checkShape(unsigned input,
                                             ArrayRef<int64_t> expected,
                                             StringRef meaning) {
  Value value = operand(input);
  if (!value)
    return success();
  RankedTensorType actual = type(input);
  auto wanted = RankedTensorType::get(expected, actual.getElementType());
  if (succeeded(verifyCompatibleShape(actual, wanted)))
    return success();
  return emitInputError(input) << "has type " << actual << ", expected "
                               << wanted << " (" << meaning << ")";
}

LogicalResult ContribMoEImporter::checkShapes() {
  RankedTensorType inputType = type(kInput);
  RankedTensorType routerType = type(kRouterProbs);
  numExperts = routerType.getDimSize(1);
  if (ShapedType::isDynamic(numExperts))
    return emitInputError(kRouterProbs)
           << "must have a static number of experts (dimension 1), got "
           << routerType;
  if (attrs.k > numExperts)
    return emitAttributeError("k") << attrs.k << " exceeds the " << numExperts
                                   << " experts of router_probs";

  // The router has one row per token of the (possibly 3-D) input.
  int64_t numRows = inputType.getDimSize(0);
  if (inputType.getRank() == 3) {
    std::optional<int64_t> product =
        inputType.hasStaticShape()
            ? llvm::checkedMul(numRows, inputType.getDimSize(1))
            : std::nullopt;
    numRows = product.value_or(kDynamic);
  }
  if (failed(checkShape(kRouterProbs, {numRows, numExperts},
                        "[num_tokens, num_experts]")))
    return failure();

  hiddenSize = inputType.getShape().back();
  if (ShapedType::isDynamic(hiddenSize))
    hiddenSize = type(kFc2Weights).getDimSize(1);
  interSize = type(kFc2Weights).getDimSize(2);

  // Gate and linear halves: fused into fc1, or fc1 and fc3.
  if (isGeglu) {
    fusedGate = true;
    if (operand(kFc3Weights))
      return emitInputError(kFc3Weights)
             << "must be absent with activation_type 'geglu' (fc1 holds both "
                "halves of the GEGLU)";
  } else if (isSwiglu) {
    fusedGate = attrs.swigluFusion != 0;
    if (fusedGate && operand(kFc3Weights))
      return emitInputError(kFc3Weights)
             << "must be absent with swiglu_fusion = " << attrs.swigluFusion
             << " (fc1 holds both halves of the SwiGLU)";
    if (!fusedGate && !operand(kFc3Weights))
      return emitInputError(kFc3Weights)
             << "is required for swiglu with swiglu_fusion = 0 (it holds the "
                "linear half of the SwiGLU)";
  } else if (operand(kFc3Weights) && attrs.activationType != "silu" &&
             attrs.activationType != "gelu") {
    return emitInputError(kFc3Weights)
           << "gates activation_type '" << attrs.activationType
           << "', which moec does not support (only silu, gelu and swiglu "
              "take a gated form)";
  }

  // Releases before 1.23 stored weights as [E, in, out]; 1.23 treats such
  // shapes inconsistently across its kernels, so they are not guessed at.
  ArrayRef<int64_t> fc2Shape = type(kFc2Weights).getShape();
  if (!ShapedType::isDynamic(hiddenSize) &&
      !ShapedType::isDynamic(fc2Shape[1]) && fc2Shape[1] != hiddenSize &&
      fc2Shape[2] == hiddenSize)
    return emitInputError(kFc2Weights)
           << "has type " << type(kFc2Weights)
           << ", the [num_experts, inter_size, hidden_size] layout of "
              "onnxruntime before 1.23; 1.23 takes fc2 as [num_experts, "
              "hidden_size, inter_size] and fc1/fc3 as [num_experts, "
              "inter_size, hidden_size]";

  int64_t fc1Rows = fusedGate && !ShapedType::isDynamic(interSize)
                        ? 2 * interSize
                        : interSize;
  StringRef fc1Meaning = fusedGate
                             ? "[num_experts, 2 * inter_size, hidden_size]"
                             : "[num_experts, inter_size, hidden_size]";
  StringRef fc1BiasMeaning =
      fusedGate ? "[num_experts, 2 * inter_size]" : "[num_experts, inter_size]";
  if (failed(checkShape(kFc1Weights, {numExperts, fc1Rows, hiddenSize},
                        fc1Meaning)) ||
      failed(checkShape(kFc1Bias, {numExperts, fc1Rows}, fc1BiasMeaning)) ||
      failed(checkShape(kFc2Weights, {numExperts, hiddenSize, interSize},
                        "[num_experts, hidden_size, inter_size]")) ||
      failed(checkShape(kFc2Bias, {numExperts, hiddenSize},
                        "[num_experts, hidden_size]")) ||
      failed(checkShape(kFc3Weights, {numExperts, interSize, hiddenSize},
                        "[num_experts, inter_size, hidden_size]")) ||
      failed(checkShape(kFc3Bias, {numExperts, interSize},
                        "[num_experts, inter_size]")))
    return failure();
  return success();
}

FailureOr<Value> ContribMoEImporter::build() {
  MLIRContext *context = builder.getContext();
  SmallVector<Operation *> created;
  auto track = [&](Operation *op) {
    created.push_back(op);
    return op;
  };

  // Tokens as rows: [B, S, H] -> [B*S, H].
  Value input = operand(kInput);
  Value rows = input;
  if (type(kInput).getRank() == 3)
    rows = track(moe::FlattenOp::create(builder, loc, input, /*axis=*/2))
               ->getResult(0);

  auto router = cast<moe::RouterOp>(track(moe::RouterOp::create(
      builder, loc, operand(kRouterProbs), /*bias=*/Value(),
      moe::ScoreFunction::Softmax, attrs.k, /*score_after_topk=*/false,
      attrs.normalizeRoutingWeights, llvm::APFloat(1.0f), /*n_group=*/1,
      /*topk_group=*/1, /*capacity=*/IntegerAttr(),
      /*normalize_kept=*/FloatAttr())));
  auto dispatch = cast<moe::DispatchOp>(track(moe::DispatchOp::create(
      builder, loc, rows, router.getIndices(), numExperts)));

  moe::Activation expertActivation = *activation;
  if (!isSwiglu && operand(kFc3Weights))
    expertActivation = expertActivation == moe::Activation::Silu
                           ? moe::Activation::SiluGlu
                           : moe::Activation::GeluTanhGlu;
  FloatAttr alpha, beta, limit;
  if (isSwiglu && (attrs.activationAlpha != 1.0f ||
                   attrs.activationBeta != 0.0f || attrs.swigluLimit)) {
    expertActivation = moe::Activation::ClampedSwiglu;
    alpha = builder.getF32FloatAttr(attrs.activationAlpha);
    beta = builder.getF32FloatAttr(attrs.activationBeta);
    if (attrs.swigluLimit)
      limit = builder.getF32FloatAttr(*attrs.swigluLimit);
  }
  moe::GluLayoutAttr gluLayout;
  if (fusedGate)
    gluLayout = moe::GluLayoutAttr::get(
        context, attrs.swigluFusion == 1 ? moe::GluLayout::Interleaved
                                         : moe::GluLayout::Concatenated);

  auto experts = cast<moe::ExpertsOp>(track(moe::ExpertsOp::create(
      builder, loc, dispatch.getRows(), dispatch.getOffsets(),
      operand(kFc1Weights), operand(kFc1Bias), operand(kFc3Weights),
      operand(kFc3Bias), operand(kFc2Weights), operand(kFc2Bias),
      moe::ActivationAttr::get(context, expertActivation),
      moe::WeightLayoutAttr::get(context, moe::WeightLayout::OutIn), gluLayout,
      alpha, beta, limit)));
  moe::setLayerForm(experts, "com.microsoft.MoE");
  Value output = track(moe::CombineOp::create(
                           builder, loc, experts.getOutput(),
                           dispatch.getSource(), router.getWeights(),
                           /*passthrough=*/Value(), /*indices=*/Value()))
                     ->getResult(0);

  // Back to the input's shape; allowzero keeps an empty batch exact.
  if (type(kInput).getRank() == 3) {
    Value shape = track(moe::ShapeOp::create(builder, loc, input,
                                             builder.getI64IntegerAttr(0),
                                             /*end=*/IntegerAttr()))
                      ->getResult(0);
    output = track(moe::ReshapeOp::create(builder, loc, input.getType(), output,
                                          shape, /*allowzero=*/1))
                 ->getResult(0);
  }

  // The ops' verifiers back up the checks above; a failure is reported at
  // the node and leaves no half-built IR behind.
  if (llvm::any_of(created,
                   [](Operation *op) { return failed(mlir::verify(op)); })) {
    for (Operation *op : llvm::reverse(created))
      op->erase();
    return failure();
  }
  return output;
}

FailureOr<SmallVector<Value>> ContribMoEImporter::import() {
  if (failed(readAttributes()) || failed(checkOperandTypes()) ||
      failed(checkShapes()))
    return failure();
  FailureOr<Value> output = build();
  if (failed(output))
    return failure();
  return SmallVector<Value>{*output};
}

} // namespace

FailureOr<SmallVector<Value>>
moec::onnx_import::importContribMoE(OpBuilder &builder, Location loc,
                                    ArrayRef<Value> operands,
                                    DictionaryAttr attributes) {
  return ContribMoEImporter(builder, loc, operands, attributes).import();
}
