//===- experts.cpp - Experts and SharedExpert on the GPU ------------------===//
//
// The host part of the expert network steps: which steps the GPU takes
// (dtypes, static weight shapes), their scratch from the plan's bounds, and
// per run the shape checks of the CPU kernel (shared: kernels/moe.h) and one
// call of launchExpertFfn. Only what the host knows is read here: the shapes;
// the per-expert offsets stay on the device and are checked by the kernels.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/device_op.h"
#include "backends/cuda/expert_kernels.h"
#include "kernels/moe.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace moert::cuda {
namespace {

using detail::KernelContext;
using detail::ScheduleInfo;
using detail::Shape;
using detail::StepInfo;
using detail::TensorInfo;

static_assert(int(fb::Activation::ClampedSwiglu) == kActClampedSwiglu &&
                  int(fb::Activation::SiluGlu) == kActSiluGlu &&
                  int(fb::Activation::Identity) == kActIdentity &&
                  int(fb::Activation::Relu) == kActRelu &&
                  int(fb::Activation::ReluSquared) == kActReluSquared,
              "ExpertActivation must mirror fb::Activation");
static_assert(int(fb::GluLayout::Interleaved) == kGluInterleaved &&
                  int(fb::GluLayout::Concatenated) == kGluConcatenated,
              "ExpertGlu must mirror fb::GluLayout");

/// Input slots of the network's weights, from the step's first weight input.
enum Slot {
  kW1 = kSlotW1,
  kB1 = kSlotB1,
  kW3 = kSlotW3,
  kB3 = kSlotB3,
  kW2 = kSlotW2,
  kB2 = kSlotB2,
  kNumSlots = kExpertSlots
};

/// Where a step's weights start, and whether they have an expert dimension.
struct Form {
  int first, lead;
};
Form formOf(fb::OpKind op) {
  return op == fb::OpKind::Experts ? Form{2, 1} : Form{1, 0};
}

bool isStatic(const TensorInfo &info) {
  for (int d = 0; d < info.rank; ++d)
    if (info.dims[d].kind != fb::DimKind::Static)
      return false;
  return true;
}

/// The sizes of a network from its w1 shape (dims) and attributes.
ExpertFfn ffnOf(const fb::FfnAttrs &attrs, const int64_t *w1, int lead,
                bool hasW3, int64_t hidden) {
  ExpertFfn f;
  f.activation = static_cast<int>(attrs.activation());
  f.glu = static_cast<int>(attrs.glu_layout());
  f.inOut = attrs.weight_layout() == fb::WeightLayout::InOut;
  f.hasW3 = hasW3;
  f.alpha = attrs.alpha();
  f.beta = attrs.beta();
  f.limit = attrs.limit();
  // The sizes as the CPU kernel derives them (kernels/experts.cpp).
  detail::FfnSizes sizes = detail::ffnSizes(attrs, w1, lead, hasW3, hidden);
  f.experts = sizes.experts;
  f.hidden = sizes.hidden;
  f.w1Out = sizes.w1Out;
  f.inter = sizes.inter;
  return f;
}

/// The GPU takes a step whose tokens and biases are f32, whose w1, w3 and w2
/// share one of f32, bf16, f16, and whose weights and hidden size are static
/// (then the load-time validation checked every weight shape, and the
/// scratch bound is exact).
bool acceptsFfn(const StepInfo &step, const ScheduleInfo &schedule) {
  Form form = formOf(step.op);
  auto info = [&](int i) -> const TensorInfo * {
    return i < int(step.inputs.size()) && step.inputs[i] >= 0
               ? &schedule.tensors[step.inputs[i]]
               : nullptr;
  };
  const TensorInfo *tokens = info(0);
  const TensorInfo &out = schedule.tensors[step.outputs[0]];
  if (!tokens || tokens->dtype != DType::F32 || out.dtype != DType::F32 ||
      tokens->rank != 2 || tokens->dims[1].kind != fb::DimKind::Static)
    return false;
  DType weightType = info(form.first + kW1)->dtype;
  if (weightType != DType::F32 && weightType != DType::BF16 &&
      weightType != DType::F16)
    return false;
  for (int slot = 0; slot < kNumSlots; ++slot) {
    const TensorInfo *w = info(form.first + slot);
    if (!w)
      continue;
    bool isBias = slot == kB1 || slot == kB3 || slot == kB2;
    if (!isStatic(*w) || w->dtype != (isBias ? DType::F32 : weightType))
      return false;
  }
  if (step.op == fb::OpKind::SharedExpert && info(7) &&
      info(7)->dtype != DType::F32)
    return false;
  // The tile prefixes are int32: far beyond any plan's rows and experts.
  const TensorInfo &w1 = *info(form.first + kW1);
  if (tokens->dims[0].bound >= (int64_t(1) << 30) ||
      (form.lead && w1.dims[0].bound >= (int64_t(1) << 20)))
    return false;
  // Blocks of units or columns are the grid's y dimension (< 65536).
  int64_t dims[kMaxRank] = {};
  for (int d = 0; d < w1.rank; ++d)
    dims[d] = w1.dims[d].bound;
  ExpertFfn f = ffnOf(*step.fb->attrs_as<fb::FfnAttrs>(), dims, form.lead,
                      info(form.first + kW3) != nullptr, tokens->dims[1].bound);
  int64_t widest = std::max(f.hidden, 2 * f.inter);
  return widest / kTileCols < 65535 &&
         widest / narrowUnitsPerBlock(f.inOut) < 65535;
}

uint64_t ffnScratchBytes(const StepInfo &step, const ScheduleInfo &schedule) {
  Form form = formOf(step.op);
  const TensorInfo &tokens = schedule.tensors[step.inputs[0]];
  const TensorInfo &w1 = schedule.tensors[step.inputs[form.first + kW1]];
  int64_t dims[kMaxRank] = {};
  for (int d = 0; d < w1.rank; ++d)
    dims[d] = w1.dims[d].bound;
  bool hasW3 = step.inputs[form.first + kW3] >= 0;
  ExpertFfn f = ffnOf(*step.fb->attrs_as<fb::FfnAttrs>(), dims, form.lead,
                      hasW3, tokens.dims[1].bound);
  return expertScratch(f.experts, tokens.dims[0].bound, f.inter).bytes;
}

absl::Status runFfn(DeviceStep &s) {
  KernelContext &ctx = s.ctx;
  Form form = formOf(s.step.op);
  const Shape &tokens = ctx.in(0).shape;
  const Shape &w1 = ctx.in(form.first + kW1).shape;
  ExpertFfn f = ffnOf(*ctx.attrs<fb::FfnAttrs>(), w1.dims, form.lead,
                      ctx.has(form.first + kW3), tokens[1]);
  if (s.step.op == fb::OpKind::Experts)
    MOERT_RETURN_IF_ERROR(
        detail::checkExpertOffsets(ctx, ctx.in(1).shape, f.experts));
  if (s.step.op == fb::OpKind::SharedExpert && ctx.has(7))
    MOERT_RETURN_IF_ERROR(
        detail::checkSharedGate(ctx, ctx.in(7).shape, f.hidden));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, tokens).status());

  ExpertLaunch launch;
  launch.ffn = f;
  DType weightType = ctx.in(form.first + kW1).dtype;
  launch.weightType = weightType == DType::BF16  ? kWeightBf16
                      : weightType == DType::F16 ? kWeightF16
                                                 : kWeightF32;
  const void *addresses[kNumSlots];
  for (int slot = 0; slot < kNumSlots; ++slot) {
    // A tiered step's paged weights are in the expert store.
    if (s.isPaged(form.first + slot)) {
      addresses[slot] = nullptr;
      continue;
    }
    MOERT_ASSIGN_OR_RETURN(addresses[slot], s.input(form.first + slot));
  }
  launch.w1 = addresses[kW1];
  launch.w3 = addresses[kW3];
  launch.w2 = addresses[kW2];
  launch.b1 = static_cast<const float *>(addresses[kB1]);
  launch.b3 = static_cast<const float *>(addresses[kB3]);
  launch.b2 = static_cast<const float *>(addresses[kB2]);
  MOERT_ASSIGN_OR_RETURN(const void *x, s.input(0));
  launch.x = static_cast<const float *>(x);
  launch.rows = tokens[0];
  if (s.step.op == fb::OpKind::Experts) {
    MOERT_ASSIGN_OR_RETURN(const void *offsets, s.input(1));
    launch.offsets = static_cast<const int64_t *>(offsets);
  } else {
    MOERT_ASSIGN_OR_RETURN(const void *gate, s.input(7));
    launch.gate = static_cast<const float *>(gate);
  }
  launch.y = static_cast<float *>(s.output(0));
  launch.scratch = s.scratch();
  launch.errors = s.errors();
  launch.step = s.step.index;
  if (s.tierLayer() >= 0)
    return s.runTiered(launch);
  return s.check(launchExpertFfn(launch, s.stream()), "launchExpertFfn");
}

std::string describeFfnError(const DeviceErrorRecord &record) {
  if (record.code == kExpertErrorFirstOffset)
    return absl::StrCat("offsets[0] is ", record.b, "; expected 0");
  if (record.code == kExpertErrorOffset)
    return absl::StrCat("offsets[", record.a, "] = ", record.b,
                        " is below offsets[", record.a - 1,
                        "] or beyond the rows");
  return absl::StrCat("expert kernel error ", record.code);
}

constexpr DeviceOp kFfnOp = {acceptsFfn, runFfn, ffnScratchBytes,
                             describeFfnError};

} // namespace

const DeviceOp *expertDeviceOp(fb::OpKind op) {
  if (op == fb::OpKind::Experts || op == fb::OpKind::SharedExpert)
    return &kFfnOp;
  return nullptr;
}

} // namespace moert::cuda
