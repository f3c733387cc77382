//===- StepAttributes.cpp - Plan step kinds and attributes ---------------===//
//
// The step serialiser's map from an op to the runtime's step kind and
// attributes (WeightStorage.h).
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/WeightStorage.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
namespace fb = moert::fb;

namespace moec::plan {
namespace {

fb::AttrsUnion axisAttrs(int64_t axis) {
  fb::AxisAttrsT attrs;
  attrs.axis = axis;
  return moert::attrs(std::move(attrs));
}

fb::AttrsUnion normAttrs(int64_t axis, float epsilon) {
  fb::NormAttrsT attrs;
  attrs.axis = axis;
  attrs.epsilon = epsilon;
  return moert::attrs(std::move(attrs));
}

template <typename OpT> fb::AttrsUnion reduceAttrs(OpT op) {
  fb::ReduceAttrsT attrs;
  attrs.keepdims = op.getKeepdims() != 0;
  attrs.noop_with_empty_axes = op.getNoopWithEmptyAxes() != 0;
  return moert::attrs(std::move(attrs));
}

FailureOr<fb::ScatterReduction> getReduction(Operation *op, StringRef name) {
  auto reduction = llvm::StringSwitch<std::optional<fb::ScatterReduction>>(name)
                       .Case("none", fb::ScatterReduction::None)
                       .Case("add", fb::ScatterReduction::Add)
                       .Case("mul", fb::ScatterReduction::Mul)
                       .Case("max", fb::ScatterReduction::Max)
                       .Case("min", fb::ScatterReduction::Min)
                       .Default(std::nullopt);
  if (!reduction)
    return op->emitError("unknown reduction '") << name << "'";
  return *reduction;
}

fb::AttrsUnion getRouterAttrs(moe::RouterOp op) {
  fb::RouterAttrsT attrs;
  attrs.score_function = op.getScoreFunction() == moe::ScoreFunction::Sigmoid
                             ? fb::ScoreFunction::Sigmoid
                             : fb::ScoreFunction::Softmax;
  attrs.top_k = op.getTopKAttr().getInt();
  attrs.score_after_topk = op.getScoreAfterTopk();
  attrs.normalize = op.getNormalize();
  attrs.routed_scaling_factor =
      op.getRoutedScalingFactorAttr().getValue().convertToFloat();
  attrs.n_group = op.getNGroupAttr().getInt();
  attrs.topk_group = op.getTopkGroupAttr().getInt();
  // The plan spells "no capacity" as 0.
  if (IntegerAttr capacity = op.getCapacityAttr())
    attrs.capacity = capacity.getInt();
  if (FloatAttr kept = op.getNormalizeKeptAttr())
    attrs.normalize_kept_epsilon = kept.getValue().convertToFloat();
  return moert::attrs(std::move(attrs));
}

fb::Activation getActivation(moe::Activation activation) {
  switch (activation) {
  case moe::Activation::Relu:
    return fb::Activation::Relu;
  case moe::Activation::Gelu:
    return fb::Activation::Gelu;
  case moe::Activation::GeluTanh:
    return fb::Activation::GeluTanh;
  case moe::Activation::Silu:
    return fb::Activation::Silu;
  case moe::Activation::Identity:
    return fb::Activation::Identity;
  case moe::Activation::SiluGlu:
    return fb::Activation::SiluGlu;
  case moe::Activation::GeluGlu:
    return fb::Activation::GeluGlu;
  case moe::Activation::GeluTanhGlu:
    return fb::Activation::GeluTanhGlu;
  case moe::Activation::ClampedSwiglu:
    return fb::Activation::ClampedSwiglu;
  case moe::Activation::ReluSquared:
    return fb::Activation::ReluSquared;
  }
  llvm_unreachable("unknown activation");
}

/// The expert network of moe.experts and moe.shared_expert.
/// `outIn`: the matrices are written transposed to [out, in].
template <typename OpT> fb::AttrsUnion getFfnAttrs(OpT op, bool outIn) {
  fb::FfnAttrsT attrs;
  attrs.activation = getActivation(op.getActivation());
  attrs.weight_layout =
      op.getWeightLayout() == moe::WeightLayout::InOut && !outIn
          ? fb::WeightLayout::InOut
          : fb::WeightLayout::OutIn;
  if (std::optional<moe::GluLayout> glu = op.getGluLayout())
    attrs.glu_layout = *glu == moe::GluLayout::Interleaved
                           ? fb::GluLayout::Interleaved
                           : fb::GluLayout::Concatenated;
  if (FloatAttr alpha = op.getAlphaAttr())
    attrs.alpha = alpha.getValue().convertToFloat();
  if (FloatAttr beta = op.getBetaAttr())
    attrs.beta = beta.getValue().convertToFloat();
  // The plan spells "no clamping" as limit 0.
  if (FloatAttr limit = op.getLimitAttr())
    attrs.limit = limit.getValue().convertToFloat();
  return moert::attrs(std::move(attrs));
}

FailureOr<fb::AttrsUnion> getConstantOfShapeAttrs(moe::ConstantOfShapeOp op) {
  fb::ConstantOfShapeAttrsT attrs;
  Type elementType = op.getType().getElementType();
  std::optional<moert::DType> dtype = getDType(elementType);
  if (!dtype)
    return op.emitError("constant_of_shape of element type ")
           << elementType << " has no runtime representation";
  attrs.dtype = static_cast<fb::DType>(*dtype);
  if (auto value = op.getValueAttr()) {
    auto dense = dyn_cast<DenseElementsAttr>(value);
    if (!dense || dense.getNumElements() != 1)
      return op.emitError("constant_of_shape value must be one element");
    if (isa<FloatType>(elementType))
      attrs.float_value =
          (*dense.getValues<APFloat>().begin()).convertToFloat();
    else
      attrs.int_value = (*dense.getValues<APInt>().begin()).getSExtValue();
  }
  return moert::attrs(std::move(attrs));
}

std::optional<fb::ExprOp> getExprOp(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::optional<fb::ExprOp>>(op)
      .Case([](moe::AddOp) { return fb::ExprOp::Add; })
      .Case([](moe::SubOp) { return fb::ExprOp::Sub; })
      .Case([](moe::MulOp) { return fb::ExprOp::Mul; })
      .Case([](moe::DivOp) { return fb::ExprOp::Div; })
      .Case([](moe::PowOp) { return fb::ExprOp::Pow; })
      .Case([](moe::MaxOp) { return fb::ExprOp::Max; })
      .Case([](moe::MinOp) { return fb::ExprOp::Min; })
      .Case([](moe::NegOp) { return fb::ExprOp::Neg; })
      .Case([](moe::AbsOp) { return fb::ExprOp::Abs; })
      .Case([](moe::ExpOp) { return fb::ExprOp::Exp; })
      .Case([](moe::LogOp) { return fb::ExprOp::Log; })
      .Case([](moe::SqrtOp) { return fb::ExprOp::Sqrt; })
      .Case([](moe::ReciprocalOp) { return fb::ExprOp::Reciprocal; })
      .Case([](moe::TanhOp) { return fb::ExprOp::Tanh; })
      .Case([](moe::ErfOp) { return fb::ExprOp::Erf; })
      .Case([](moe::SigmoidOp) { return fb::ExprOp::Sigmoid; })
      .Case([](moe::ReluOp) { return fb::ExprOp::Relu; })
      .Case([](moe::GeluOp op) {
        return op.getApproximate() == "tanh" ? fb::ExprOp::GeluTanh
                                             : fb::ExprOp::Gelu;
      })
      .Case([](moe::SinOp) { return fb::ExprOp::Sin; })
      .Case([](moe::CosOp) { return fb::ExprOp::Cos; })
      .Case([](moe::FloorOp) { return fb::ExprOp::Floor; })
      .Case([](moe::CeilOp) { return fb::ExprOp::Ceil; })
      .Case([](moe::SoftplusOp) { return fb::ExprOp::Softplus; })
      .Default([](Operation *) { return std::nullopt; });
}

/// Translates a fused region into a register program: one register per
/// body value, inputs first.
FailureOr<fb::AttrsUnion> getProgram(moe::FusedElementwiseOp op) {
  fb::FusedElementwiseAttrsT attrs;
  llvm::DenseMap<Value, uint8_t> registers;
  Block &body = op.getBody().front();
  auto allocate = [&](Value value) -> FailureOr<uint8_t> {
    if (registers.size() >= 255)
      return op.emitError("fused region needs more than 255 registers");
    uint8_t reg = registers.size();
    registers[value] = reg;
    return reg;
  };
  for (BlockArgument arg : body.getArguments()) {
    FailureOr<uint8_t> reg = allocate(arg);
    if (failed(reg))
      return failure();
    attrs.program.emplace_back(fb::ExprOp::Input, *reg,
                               static_cast<uint8_t>(arg.getArgNumber()), 0,
                               0.0f);
  }
  for (Operation &inner : body.without_terminator()) {
    if (auto constant = dyn_cast<moe::ConstantOp>(inner)) {
      auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!dense || !dense.isSplat() || !dense.getElementType().isF32())
        return inner.emitError("fused constants must be f32 splats");
      FailureOr<uint8_t> reg = allocate(constant.getResult());
      if (failed(reg))
        return failure();
      attrs.program.emplace_back(
          fb::ExprOp::Const, *reg, 0, 0,
          dense.getSplatValue<APFloat>().convertToFloat());
      continue;
    }
    std::optional<fb::ExprOp> expr = getExprOp(&inner);
    if (!expr)
      return inner.emitError("op cannot be part of a fused program");
    uint8_t a = registers.lookup(inner.getOperand(0));
    uint8_t b =
        inner.getNumOperands() > 1 ? registers.lookup(inner.getOperand(1)) : 0;
    FailureOr<uint8_t> reg = allocate(inner.getResult(0));
    if (failed(reg))
      return failure();
    attrs.program.emplace_back(*expr, *reg, a, b, 0.0f);
  }
  attrs.num_registers = registers.size();
  for (Value value : body.getTerminator()->getOperands())
    attrs.results.push_back(registers.lookup(value));
  return moert::attrs(std::move(attrs));
}

} // namespace

std::optional<fb::OpKind> getStepKind(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::optional<fb::OpKind>>(op)
      .Case([](moe::AddOp) { return fb::OpKind::Add; })
      .Case([](moe::SubOp) { return fb::OpKind::Sub; })
      .Case([](moe::MulOp) { return fb::OpKind::Mul; })
      .Case([](moe::DivOp) { return fb::OpKind::Div; })
      .Case([](moe::PowOp) { return fb::OpKind::Pow; })
      .Case([](moe::ModOp) { return fb::OpKind::Mod; })
      .Case([](moe::MinOp) { return fb::OpKind::Min; })
      .Case([](moe::MaxOp) { return fb::OpKind::Max; })
      .Case([](moe::SumOp) { return fb::OpKind::Sum; })
      .Case([](moe::SqrtOp) { return fb::OpKind::Sqrt; })
      .Case([](moe::ReciprocalOp) { return fb::OpKind::Reciprocal; })
      .Case([](moe::NegOp) { return fb::OpKind::Neg; })
      .Case([](moe::AbsOp) { return fb::OpKind::Abs; })
      .Case([](moe::ExpOp) { return fb::OpKind::Exp; })
      .Case([](moe::LogOp) { return fb::OpKind::Log; })
      .Case([](moe::TanhOp) { return fb::OpKind::Tanh; })
      .Case([](moe::ErfOp) { return fb::OpKind::Erf; })
      .Case([](moe::SigmoidOp) { return fb::OpKind::Sigmoid; })
      .Case([](moe::ReluOp) { return fb::OpKind::Relu; })
      .Case([](moe::SignOp) { return fb::OpKind::Sign; })
      .Case([](moe::GeluOp) { return fb::OpKind::Gelu; })
      .Case([](moe::SinOp) { return fb::OpKind::Sin; })
      .Case([](moe::CosOp) { return fb::OpKind::Cos; })
      .Case([](moe::FloorOp) { return fb::OpKind::Floor; })
      .Case([](moe::CeilOp) { return fb::OpKind::Ceil; })
      .Case([](moe::SoftplusOp) { return fb::OpKind::Softplus; })
      .Case([](moe::EqualOp) { return fb::OpKind::Equal; })
      .Case([](moe::LessOp) { return fb::OpKind::Less; })
      .Case([](moe::LessOrEqualOp) { return fb::OpKind::LessOrEqual; })
      .Case([](moe::GreaterOp) { return fb::OpKind::Greater; })
      .Case([](moe::GreaterOrEqualOp) { return fb::OpKind::GreaterOrEqual; })
      .Case([](moe::NotOp) { return fb::OpKind::Not; })
      .Case([](moe::AndOp) { return fb::OpKind::And; })
      .Case([](moe::OrOp) { return fb::OpKind::Or; })
      .Case([](moe::WhereOp) { return fb::OpKind::Where; })
      .Case([](moe::ClipOp) { return fb::OpKind::Clip; })
      .Case([](moe::CastOp) { return fb::OpKind::Cast; })
      .Case([](moe::CastLikeOp) { return fb::OpKind::CastLike; })
      .Case([](moe::SoftmaxOp) { return fb::OpKind::Softmax; })
      .Case([](moe::LogSoftmaxOp) { return fb::OpKind::LogSoftmax; })
      .Case([](moe::MatMulOp) { return fb::OpKind::MatMul; })
      .Case([](moe::GemmOp) { return fb::OpKind::Gemm; })
      .Case([](moe::EinsumOp) { return fb::OpKind::Einsum; })
      .Case([](moe::TopKOp) { return fb::OpKind::TopK; })
      .Case([](moe::ArgMaxOp) { return fb::OpKind::ArgMax; })
      .Case([](moe::ReduceSumOp) { return fb::OpKind::ReduceSum; })
      .Case([](moe::ReduceMeanOp) { return fb::OpKind::ReduceMean; })
      .Case([](moe::ReduceMaxOp) { return fb::OpKind::ReduceMax; })
      .Case([](moe::ReduceMinOp) { return fb::OpKind::ReduceMin; })
      .Case([](moe::ReduceProdOp) { return fb::OpKind::ReduceProd; })
      .Case([](moe::ReduceL1Op) { return fb::OpKind::ReduceL1; })
      .Case([](moe::ReduceL2Op) { return fb::OpKind::ReduceL2; })
      .Case([](moe::ReduceSumSquareOp) { return fb::OpKind::ReduceSumSquare; })
      .Case([](moe::ReduceLogSumOp) { return fb::OpKind::ReduceLogSum; })
      .Case([](moe::ReduceLogSumExpOp) { return fb::OpKind::ReduceLogSumExp; })
      .Case([](moe::IsNaNOp) { return fb::OpKind::IsNaN; })
      .Case([](moe::CumSumOp) { return fb::OpKind::CumSum; })
      .Case([](moe::ReshapeOp) { return fb::OpKind::Reshape; })
      .Case([](moe::FlattenOp) { return fb::OpKind::Flatten; })
      .Case([](moe::TransposeOp) { return fb::OpKind::Transpose; })
      .Case([](moe::SqueezeOp) { return fb::OpKind::Squeeze; })
      .Case([](moe::UnsqueezeOp) { return fb::OpKind::Unsqueeze; })
      .Case([](moe::ConcatOp) { return fb::OpKind::Concat; })
      .Case([](moe::SplitOp) { return fb::OpKind::Split; })
      .Case([](moe::SliceOp) { return fb::OpKind::Slice; })
      .Case([](moe::GatherOp) { return fb::OpKind::Gather; })
      .Case([](moe::GatherElementsOp) { return fb::OpKind::GatherElements; })
      .Case([](moe::GatherNDOp) { return fb::OpKind::GatherND; })
      .Case([](moe::ScatterElementsOp) { return fb::OpKind::ScatterElements; })
      .Case([](moe::ScatterNDOp) { return fb::OpKind::ScatterND; })
      .Case([](moe::OneHotOp) { return fb::OpKind::OneHot; })
      .Case([](moe::NonZeroOp) { return fb::OpKind::NonZero; })
      .Case([](moe::ExpandOp) { return fb::OpKind::Expand; })
      .Case([](moe::TileOp) { return fb::OpKind::Tile; })
      .Case([](moe::ShapeOp) { return fb::OpKind::Shape; })
      .Case([](moe::DimOp) { return fb::OpKind::Dim; })
      .Case([](moe::SizeOp) { return fb::OpKind::Size; })
      .Case([](moe::ConstantOfShapeOp) { return fb::OpKind::ConstantOfShape; })
      .Case([](moe::IdentityOp) { return fb::OpKind::Identity; })
      .Case([](moe::RangeOp) { return fb::OpKind::Range; })
      .Case([](moe::TriluOp) { return fb::OpKind::Trilu; })
      .Case([](moe::LayerNormalizationOp) {
        return fb::OpKind::LayerNormalization;
      })
      .Case([](moe::SimplifiedLayerNormalizationOp) {
        return fb::OpKind::SimplifiedLayerNormalization;
      })
      .Case(
          [](moe::FusedElementwiseOp) { return fb::OpKind::FusedElementwise; })
      .Case([](moe::RouterOp) { return fb::OpKind::Router; })
      .Case([](moe::DispatchOp) { return fb::OpKind::Dispatch; })
      .Case([](moe::ExpertsOp) { return fb::OpKind::Experts; })
      .Case([](moe::SharedExpertOp) { return fb::OpKind::SharedExpert; })
      .Case([](moe::CombineOp) { return fb::OpKind::Combine; })
      .Case([](moe::AssignSlotsOp) { return fb::OpKind::AssignSlots; })
      .Case([](moe::AllToAllOp) { return fb::OpKind::AllToAll; })
      .Case([](moe::AllToAllStartOp) { return fb::OpKind::AllToAllStart; })
      .Case([](moe::AllToAllWaitOp) { return fb::OpKind::AllToAllWait; })
      .Case([](moe::RegroupOp) { return fb::OpKind::Regroup; })
      .Case([](moe::UngroupOp) { return fb::OpKind::Ungroup; })
      .Case([](moe::AttentionOp) { return fb::OpKind::Attention; })
      .Case([](moe::GatedDeltaRuleOp) { return fb::OpKind::GatedDeltaRule; })
      .Default([](Operation *) { return std::nullopt; });
}

FailureOr<fb::AttrsUnion> getStepAttrs(Operation *op, bool outIn) {
  using Result = FailureOr<fb::AttrsUnion>;
  auto none = [](Operation *) -> Result { return fb::AttrsUnion(); };
  return llvm::TypeSwitch<Operation *, Result>(op)
      .Case<moe::SoftmaxOp, moe::LogSoftmaxOp>([](auto op) -> Result {
        return axisAttrs(op.getAxisAttr().getInt());
      })
      .Case<moe::FlattenOp, moe::GatherOp, moe::GatherElementsOp,
            moe::OneHotOp>([](auto op) -> Result {
        return axisAttrs(op.getAxisAttr().getInt());
      })
      .Case([](moe::ConcatOp op) -> Result {
        return axisAttrs(op.getAxisAttr().getInt());
      })
      .Case([](moe::GemmOp op) -> Result {
        fb::GemmAttrsT attrs;
        attrs.alpha = op.getAlpha().convertToFloat();
        attrs.beta = op.getBeta().convertToFloat();
        attrs.trans_a = op.getTransA() != 0;
        attrs.trans_b = op.getTransB() != 0;
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::EinsumOp op) -> Result {
        fb::EinsumAttrsT attrs;
        attrs.equation = op.getEquation().str();
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::TopKOp op) -> Result {
        fb::TopKAttrsT attrs;
        attrs.axis = op.getAxisAttr().getInt();
        attrs.largest = op.getLargest() != 0;
        attrs.sorted = op.getSorted() != 0;
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::ArgMaxOp op) -> Result {
        fb::ArgMaxAttrsT attrs;
        attrs.axis = op.getAxisAttr().getInt();
        attrs.keepdims = op.getKeepdims() != 0;
        attrs.select_last_index = op.getSelectLastIndex() != 0;
        return moert::attrs(std::move(attrs));
      })
      .Case<moe::ReduceSumOp, moe::ReduceMeanOp, moe::ReduceMaxOp,
            moe::ReduceMinOp, moe::ReduceProdOp, moe::ReduceL1Op,
            moe::ReduceL2Op, moe::ReduceSumSquareOp, moe::ReduceLogSumOp,
            moe::ReduceLogSumExpOp>(
          [](auto op) -> Result { return reduceAttrs(op); })
      .Case([](moe::CumSumOp op) -> Result {
        fb::CumSumAttrsT attrs;
        attrs.exclusive = op.getExclusive() != 0;
        attrs.reverse = op.getReverse() != 0;
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::ReshapeOp op) -> Result {
        fb::ReshapeAttrsT attrs;
        attrs.allowzero = op.getAllowzero() != 0;
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::TransposeOp op) -> Result {
        fb::TransposeAttrsT attrs;
        if (auto perm = op.getPermAttr())
          attrs.perm.assign(perm.asArrayRef().begin(), perm.asArrayRef().end());
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::SplitOp op) -> Result {
        fb::SplitAttrsT attrs;
        attrs.axis = op.getAxisAttr().getInt();
        if (auto count = op.getNumOutputsAttr())
          attrs.num_outputs = count.getInt();
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::GatherNDOp op) -> Result {
        fb::GatherNDAttrsT attrs;
        attrs.batch_dims = op.getBatchDimsAttr().getInt();
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::ScatterElementsOp op) -> Result {
        FailureOr<fb::ScatterReduction> reduction =
            getReduction(op, op.getReduction());
        if (failed(reduction))
          return failure();
        fb::ScatterAttrsT attrs;
        attrs.axis = op.getAxisAttr().getInt();
        attrs.reduction = *reduction;
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::ScatterNDOp op) -> Result {
        FailureOr<fb::ScatterReduction> reduction =
            getReduction(op, op.getReduction());
        if (failed(reduction))
          return failure();
        fb::ScatterAttrsT attrs;
        attrs.reduction = *reduction;
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::CastOp op) -> Result {
        std::optional<moert::DType> to = getDType(op.getTo());
        if (!to)
          return op.emitError("cast to ")
                 << op.getTo() << " has no runtime representation";
        fb::CastAttrsT attrs;
        attrs.to = static_cast<fb::DType>(*to);
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::TriluOp op) -> Result {
        fb::TriluAttrsT attrs;
        attrs.upper = op.getUpper() != 0;
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::ModOp op) -> Result {
        fb::ModAttrsT attrs;
        attrs.fmod = op.getFmod() != 0;
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::LayerNormalizationOp op) -> Result {
        return normAttrs(op.getAxisAttr().getInt(),
                         op.getEpsilon().convertToFloat());
      })
      .Case([](moe::SimplifiedLayerNormalizationOp op) -> Result {
        return normAttrs(op.getAxisAttr().getInt(),
                         op.getEpsilon().convertToFloat());
      })
      .Case([](moe::GeluOp op) -> Result {
        fb::GeluAttrsT attrs;
        attrs.approximate = op.getApproximate() == "tanh"
                                ? fb::GeluApproximation::Tanh
                                : fb::GeluApproximation::None;
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::ConstantOfShapeOp op) -> Result {
        return getConstantOfShapeAttrs(op);
      })
      .Case([](moe::ShapeOp op) -> Result {
        fb::ShapeAttrsT attrs;
        attrs.start = op.getStartAttr().getInt();
        if (auto end = op.getEndAttr())
          attrs.end = end.getInt();
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::DimOp op) -> Result {
        return axisAttrs(op.getIndexAttr().getInt());
      })
      .Case([](moe::FusedElementwiseOp op) -> Result { return getProgram(op); })
      .Case([](moe::RouterOp op) -> Result { return getRouterAttrs(op); })
      .Case([](moe::AttentionOp op) -> Result {
        fb::AttentionAttrsT attrs;
        attrs.scale = op.getScale().convertToFloat();
        attrs.softcap = op.getSoftcap().convertToFloat();
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::GatedDeltaRuleOp op) -> Result {
        fb::GatedDeltaRuleAttrsT attrs;
        attrs.scale = op.getScale().convertToFloat();
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::DispatchOp op) -> Result {
        fb::DispatchAttrsT attrs;
        attrs.num_experts = op.getNumExpertsAttr().getInt();
        return moert::attrs(std::move(attrs));
      })
      .Case<moe::ExpertsOp, moe::SharedExpertOp>(
          [outIn](auto op) -> Result { return getFfnAttrs(op, outIn); })
      .Case([](moe::AssignSlotsOp op) -> Result {
        fb::SlotAttrsT attrs;
        ArrayRef<int64_t> offsets = op.getExpertSlotOffsets();
        ArrayRef<int64_t> slots = op.getExpertSlots();
        attrs.expert_slot_offsets.assign(offsets.begin(), offsets.end());
        attrs.expert_slots.assign(slots.begin(), slots.end());
        return moert::attrs(std::move(attrs));
      })
      .Case<moe::AllToAllOp, moe::AllToAllStartOp>([](auto op) -> Result {
        fb::CollectiveAttrsT attrs;
        attrs.num_devices = op.getNumDevicesAttr().getInt();
        return moert::attrs(std::move(attrs));
      })
      .Case([](moe::RegroupOp op) -> Result {
        fb::RegroupAttrsT attrs;
        attrs.num_sources = op.getNumSourcesAttr().getInt();
        attrs.num_slots = op.getNumSlotsAttr().getInt();
        return moert::attrs(std::move(attrs));
      })
      .Default(none);
}

} // namespace moec::plan
