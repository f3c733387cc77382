//===- PlanStepAttrs.cpp - the attributes of each op's plan step ----------===//
//
// `getPlanStepAttrs` of the ops declared with `Moe_PlanStepWithAttrs`
// (dialects/moe/MoePlanStep.td): each fills its step's table of the plan
// schema (runtime/format/plan.fbs) from the op's attributes. The plan
// emitter calls them through PlanStepOpInterface.
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/MoeOps.h"
#include "dialects/moe/MoeVisionOps.h"

#include "format/plan_generated.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
namespace fb = moert::fb;

#include "dialects/moe/MoePlanStep.cpp.inc"

namespace moec::moe {

std::optional<fb::DType> getPlanDType(Type type) {
  if (type.isF32())
    return fb::DType::F32;
  if (type.isF16())
    return fb::DType::F16;
  if (type.isBF16())
    return fb::DType::BF16;
  if (type.isSignlessInteger(64))
    return fb::DType::I64;
  if (type.isSignlessInteger(32))
    return fb::DType::I32;
  if (type.isSignlessInteger(1))
    return fb::DType::Bool;
  return std::nullopt;
}

namespace {

/// Sets `table` as the step's attributes.
template <typename T> LogicalResult set(fb::AttrsUnion &attrs, T table) {
  attrs.Set(std::move(table));
  return success();
}

FailureOr<fb::ScatterReduction> getScatterReduction(Operation *op,
                                                    StringRef name) {
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

LogicalResult setNormAttrs(fb::AttrsUnion &attrs, int64_t axis, float epsilon) {
  fb::NormAttrsT table;
  table.axis = axis;
  table.epsilon = epsilon;
  return set(attrs, std::move(table));
}

fb::Activation getActivation(Activation activation) {
  switch (activation) {
  case Activation::Relu:
    return fb::Activation::Relu;
  case Activation::Gelu:
    return fb::Activation::Gelu;
  case Activation::GeluTanh:
    return fb::Activation::GeluTanh;
  case Activation::Silu:
    return fb::Activation::Silu;
  case Activation::Identity:
    return fb::Activation::Identity;
  case Activation::SiluGlu:
    return fb::Activation::SiluGlu;
  case Activation::GeluGlu:
    return fb::Activation::GeluGlu;
  case Activation::GeluTanhGlu:
    return fb::Activation::GeluTanhGlu;
  case Activation::ClampedSwiglu:
    return fb::Activation::ClampedSwiglu;
  case Activation::ReluSquared:
    return fb::Activation::ReluSquared;
  }
  llvm_unreachable("unknown activation");
}

/// The expert network of moe.experts and moe.shared_expert, in the op's
/// weight layout (the plan emitter switches it to out_in for the matrices
/// it stores transposed).
template <typename OpT>
LogicalResult setFfnAttrs(fb::AttrsUnion &attrs, OpT op) {
  fb::FfnAttrsT table;
  table.activation = getActivation(op.getActivation());
  table.weight_layout = op.getWeightLayout() == WeightLayout::InOut
                            ? fb::WeightLayout::InOut
                            : fb::WeightLayout::OutIn;
  if (std::optional<GluLayout> glu = op.getGluLayout())
    table.glu_layout = *glu == GluLayout::Interleaved
                           ? fb::GluLayout::Interleaved
                           : fb::GluLayout::Concatenated;
  if (FloatAttr alpha = op.getAlphaAttr())
    table.alpha = alpha.getValue().convertToFloat();
  if (FloatAttr beta = op.getBetaAttr())
    table.beta = beta.getValue().convertToFloat();
  // The plan spells "no clamping" as limit 0.
  if (FloatAttr limit = op.getLimitAttr())
    table.limit = limit.getValue().convertToFloat();
  return set(attrs, std::move(table));
}

template <typename OpT>
LogicalResult setCollectiveAttrs(fb::AttrsUnion &attrs, OpT op) {
  fb::CollectiveAttrsT table;
  table.num_devices = op.getNumDevicesAttr().getInt();
  return set(attrs, std::move(table));
}

/// The instruction of the fused programs that computes `op` (an op with a
/// plan step whose kind names an `ExprOp` too), if there is one.
std::optional<fb::ExprOp> getExprOp(Operation *op) {
  auto step = dyn_cast<PlanStepOpInterface>(op);
  if (!step)
    return std::nullopt;
  if (auto gelu = dyn_cast<GeluOp>(op); gelu && gelu.getApproximate() == "tanh")
    return fb::ExprOp::GeluTanh;
  StringRef kind = step.getPlanStepKind();
  for (fb::ExprOp expr : fb::EnumValuesExprOp())
    if (expr != fb::ExprOp::Input && expr != fb::ExprOp::Const &&
        kind == fb::EnumNameExprOp(expr))
      return expr;
  return std::nullopt;
}

} // namespace

LogicalResult setAxisStepAttrs(fb::AttrsUnion &attrs, int64_t axis) {
  fb::AxisAttrsT table;
  table.axis = axis;
  return set(attrs, std::move(table));
}

LogicalResult setReduceStepAttrs(fb::AttrsUnion &attrs, bool keepdims,
                                 bool noopWithEmptyAxes) {
  fb::ReduceAttrsT table;
  table.keepdims = keepdims;
  table.noop_with_empty_axes = noopWithEmptyAxes;
  return set(attrs, std::move(table));
}

//===----------------------------------------------------------------------===//
// Graph ops
//===----------------------------------------------------------------------===//

LogicalResult FlattenOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setAxisStepAttrs(attrs, getAxisAttr().getInt());
}

LogicalResult GatherOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setAxisStepAttrs(attrs, getAxisAttr().getInt());
}

LogicalResult GatherElementsOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setAxisStepAttrs(attrs, getAxisAttr().getInt());
}

LogicalResult OneHotOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setAxisStepAttrs(attrs, getAxisAttr().getInt());
}

LogicalResult ConcatOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setAxisStepAttrs(attrs, getAxisAttr().getInt());
}

LogicalResult DimOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setAxisStepAttrs(attrs, getIndexAttr().getInt());
}

LogicalResult GemmOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::GemmAttrsT table;
  table.alpha = getAlpha().convertToFloat();
  table.beta = getBeta().convertToFloat();
  table.trans_a = getTransA() != 0;
  table.trans_b = getTransB() != 0;
  return set(attrs, std::move(table));
}

/// The runtime's Conv is f32 only: another element type is refused here,
/// naming the node.
LogicalResult ConvOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  Type element = getX().getType().getElementType();
  if (!element.isF32())
    return emitError("Conv on ")
           << element << " is not supported (the runtime's Conv is f32)";
  fb::ConvAttrsT table;
  auto assign = [](std::optional<ArrayRef<int64_t>> list,
                   std::vector<int64_t> &out) {
    if (list)
      out.assign(list->begin(), list->end());
  };
  assign(getStrides(), table.strides);
  assign(getPads(), table.pads);
  assign(getDilations(), table.dilations);
  table.group = getGroup();
  table.auto_pad = llvm::StringSwitch<fb::AutoPad>(getAutoPad())
                       .Case("VALID", fb::AutoPad::Valid)
                       .Case("SAME_UPPER", fb::AutoPad::SameUpper)
                       .Case("SAME_LOWER", fb::AutoPad::SameLower)
                       .Default(fb::AutoPad::Explicit);
  return set(attrs, std::move(table));
}

/// The runtime's GridSample is f32 only, as Conv.
LogicalResult GridSampleOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  Type element = getX().getType().getElementType();
  if (!element.isF32())
    return emitError("GridSample on ")
           << element << " is not supported (the runtime's GridSample is f32)";
  fb::GridSampleAttrsT table;
  table.mode = llvm::StringSwitch<fb::GridSampleMode>(getMode())
                   .Case("nearest", fb::GridSampleMode::Nearest)
                   .Case("cubic", fb::GridSampleMode::Cubic)
                   .Case("bicubic", fb::GridSampleMode::Cubic)
                   .Default(fb::GridSampleMode::Linear);
  table.padding_mode =
      llvm::StringSwitch<fb::GridSamplePadding>(getPaddingMode())
          .Case("border", fb::GridSamplePadding::Border)
          .Case("reflection", fb::GridSamplePadding::Reflection)
          .Default(fb::GridSamplePadding::Zeros);
  table.align_corners = getAlignCorners() != 0;
  return set(attrs, std::move(table));
}

LogicalResult EinsumOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::EinsumAttrsT table;
  table.equation = getEquation().str();
  return set(attrs, std::move(table));
}

LogicalResult TopKOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::TopKAttrsT table;
  table.axis = getAxisAttr().getInt();
  table.largest = getLargest() != 0;
  table.sorted = getSorted() != 0;
  return set(attrs, std::move(table));
}

LogicalResult ArgMaxOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::ArgMaxAttrsT table;
  table.axis = getAxisAttr().getInt();
  table.keepdims = getKeepdims() != 0;
  table.select_last_index = getSelectLastIndex() != 0;
  return set(attrs, std::move(table));
}

LogicalResult CumSumOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::CumSumAttrsT table;
  table.exclusive = getExclusive() != 0;
  table.reverse = getReverse() != 0;
  return set(attrs, std::move(table));
}

LogicalResult ReshapeOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::ReshapeAttrsT table;
  table.allowzero = getAllowzero() != 0;
  return set(attrs, std::move(table));
}

LogicalResult TransposeOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::TransposeAttrsT table;
  if (auto perm = getPermAttr())
    table.perm.assign(perm.asArrayRef().begin(), perm.asArrayRef().end());
  return set(attrs, std::move(table));
}

LogicalResult SplitOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::SplitAttrsT table;
  table.axis = getAxisAttr().getInt();
  if (auto count = getNumOutputsAttr())
    table.num_outputs = count.getInt();
  return set(attrs, std::move(table));
}

LogicalResult GatherNDOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::GatherNDAttrsT table;
  table.batch_dims = getBatchDimsAttr().getInt();
  return set(attrs, std::move(table));
}

LogicalResult ScatterElementsOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  FailureOr<fb::ScatterReduction> reduction =
      getScatterReduction(*this, getReduction());
  if (failed(reduction))
    return failure();
  fb::ScatterAttrsT table;
  table.axis = getAxisAttr().getInt();
  table.reduction = *reduction;
  return set(attrs, std::move(table));
}

LogicalResult ScatterNDOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  FailureOr<fb::ScatterReduction> reduction =
      getScatterReduction(*this, getReduction());
  if (failed(reduction))
    return failure();
  fb::ScatterAttrsT table;
  table.reduction = *reduction;
  return set(attrs, std::move(table));
}

LogicalResult CastOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  std::optional<fb::DType> to = getPlanDType(getTo());
  if (!to)
    return emitError("cast to ") << getTo() << " has no runtime representation";
  fb::CastAttrsT table;
  table.to = *to;
  return set(attrs, std::move(table));
}

LogicalResult TriluOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::TriluAttrsT table;
  table.upper = getUpper() != 0;
  return set(attrs, std::move(table));
}

LogicalResult ModOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::ModAttrsT table;
  table.fmod = getFmod() != 0;
  return set(attrs, std::move(table));
}

LogicalResult LayerNormalizationOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setNormAttrs(attrs, getAxisAttr().getInt(),
                      getEpsilon().convertToFloat());
}

LogicalResult
SimplifiedLayerNormalizationOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setNormAttrs(attrs, getAxisAttr().getInt(),
                      getEpsilon().convertToFloat());
}

LogicalResult GeluOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::GeluAttrsT table;
  table.approximate = getApproximate() == "tanh" ? fb::GeluApproximation::Tanh
                                                 : fb::GeluApproximation::None;
  return set(attrs, std::move(table));
}

LogicalResult ConstantOfShapeOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::ConstantOfShapeAttrsT table;
  Type elementType = getType().getElementType();
  std::optional<fb::DType> dtype = getPlanDType(elementType);
  if (!dtype)
    return emitError("constant_of_shape of element type ")
           << elementType << " has no runtime representation";
  table.dtype = *dtype;
  if (auto value = getValueAttr()) {
    auto dense = dyn_cast<DenseElementsAttr>(value);
    if (!dense || dense.getNumElements() != 1)
      return emitError("constant_of_shape value must be one element");
    if (isa<FloatType>(elementType))
      table.float_value =
          (*dense.getValues<APFloat>().begin()).convertToFloat();
    else
      table.int_value = (*dense.getValues<APInt>().begin()).getSExtValue();
  }
  return set(attrs, std::move(table));
}

LogicalResult ShapeOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::ShapeAttrsT table;
  table.start = getStartAttr().getInt();
  if (auto end = getEndAttr())
    table.end = end.getInt();
  return set(attrs, std::move(table));
}

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

/// Translates the fused region into a register program: one register per
/// body value, inputs first.
LogicalResult FusedElementwiseOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::FusedElementwiseAttrsT table;
  llvm::DenseMap<Value, uint8_t> registers;
  Block &body = getBody().front();
  auto allocate = [&](Value value) -> FailureOr<uint8_t> {
    if (registers.size() >= 255)
      return emitError("fused region needs more than 255 registers");
    uint8_t reg = registers.size();
    registers[value] = reg;
    return reg;
  };
  for (BlockArgument arg : body.getArguments()) {
    FailureOr<uint8_t> reg = allocate(arg);
    if (failed(reg))
      return failure();
    table.program.emplace_back(fb::ExprOp::Input, *reg,
                               static_cast<uint8_t>(arg.getArgNumber()), 0,
                               0.0f);
  }
  for (Operation &inner : body.without_terminator()) {
    if (auto constant = dyn_cast<ConstantOp>(inner)) {
      auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!dense || !dense.isSplat() || !dense.getElementType().isF32())
        return inner.emitError("fused constants must be f32 splats");
      FailureOr<uint8_t> reg = allocate(constant.getResult());
      if (failed(reg))
        return failure();
      table.program.emplace_back(
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
    table.program.emplace_back(*expr, *reg, a, b, 0.0f);
  }
  table.num_registers = registers.size();
  for (Value value : body.getTerminator()->getOperands())
    table.results.push_back(registers.lookup(value));
  return set(attrs, std::move(table));
}

LogicalResult AttentionOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::AttentionAttrsT table;
  table.scale = getScale().convertToFloat();
  table.softcap = getSoftcap().convertToFloat();
  return set(attrs, std::move(table));
}

LogicalResult GatedDeltaRuleOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::GatedDeltaRuleAttrsT table;
  table.scale = getScale().convertToFloat();
  return set(attrs, std::move(table));
}

LogicalResult CausalConvOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::CausalConvAttrsT table;
  table.silu = getSilu();
  return set(attrs, std::move(table));
}

//===----------------------------------------------------------------------===//
// Sparse ops
//===----------------------------------------------------------------------===//

LogicalResult RouterOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::RouterAttrsT table;
  table.score_function = getScoreFunction() == ScoreFunction::Sigmoid
                             ? fb::ScoreFunction::Sigmoid
                             : fb::ScoreFunction::Softmax;
  table.top_k = getTopKAttr().getInt();
  table.score_after_topk = getScoreAfterTopk();
  table.normalize = getNormalize();
  table.routed_scaling_factor =
      getRoutedScalingFactorAttr().getValue().convertToFloat();
  table.n_group = getNGroupAttr().getInt();
  table.topk_group = getTopkGroupAttr().getInt();
  // The plan spells "no capacity" as 0.
  if (IntegerAttr capacity = getCapacityAttr())
    table.capacity = capacity.getInt();
  if (FloatAttr kept = getNormalizeKeptAttr())
    table.normalize_kept_epsilon = kept.getValue().convertToFloat();
  return set(attrs, std::move(table));
}

LogicalResult DispatchOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::DispatchAttrsT table;
  table.num_experts = getNumExpertsAttr().getInt();
  return set(attrs, std::move(table));
}

LogicalResult ExpertsOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setFfnAttrs(attrs, *this);
}

LogicalResult SharedExpertOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setFfnAttrs(attrs, *this);
}

LogicalResult AssignSlotsOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::SlotAttrsT table;
  ArrayRef<int64_t> offsets = getExpertSlotOffsets();
  ArrayRef<int64_t> slots = getExpertSlots();
  table.expert_slot_offsets.assign(offsets.begin(), offsets.end());
  table.expert_slots.assign(slots.begin(), slots.end());
  return set(attrs, std::move(table));
}

LogicalResult AllToAllOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setCollectiveAttrs(attrs, *this);
}

LogicalResult AllToAllStartOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  return setCollectiveAttrs(attrs, *this);
}

LogicalResult RegroupOp::getPlanStepAttrs(fb::AttrsUnion &attrs) {
  fb::RegroupAttrsT table;
  table.num_sources = getNumSourcesAttr().getInt();
  table.num_slots = getNumSlotsAttr().getInt();
  return set(attrs, std::move(table));
}

} // namespace moec::moe
