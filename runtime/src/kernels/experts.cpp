//===- experts.cpp - The Experts and SharedExpert steps -------------------===//
//
// The CPU kernels of the expert networks (the moe dialect's Experts and
// SharedExpert, dialects/moe/MoeSparseOps.td, docs/plan-format.md): the
// load-time checks of their weights (f32, 16-bit, int8 with per-channel
// scales, block-quantized), their resolution against a step's tensors into
// an Ffn, and the kernels, which hand the Ffn to the block scheduler
// (expert_blocks.cpp). A tiered Experts step reads its experts' weights
// through the session's ExpertWeights, a batch at a time.
//
//===----------------------------------------------------------------------===//

#include "exec/expert_weights.h"
#include "kernels/moe_internal.h"

#include <algorithm>

namespace moert::detail {
namespace {

constexpr const char *kSlotNames[kNumSlots] = {"w1", "b1", "w3",
                                               "b3", "w2", "b2"};
/// The matrices that int8 storage scales, and the names of their scales
/// (inputs 8, 9 and 10 of Experts and, format 1.16, SharedExpert: one f32
/// per expert and output channel).
constexpr Slot kScaledSlots[] = {kW1, kW3, kW2};
constexpr const char *kScaleNames[] = {"s1", "s3", "s2"};
/// The first scale input of Experts and SharedExpert.
constexpr int kFirstScale = 8;

bool isGated(fb::Activation activation) {
  return activation >= fb::Activation::SiluGlu &&
         activation <= fb::Activation::ClampedSwiglu;
}

/// Checks the shapes of an expert network's weights (`shapes[slot]`, null
/// when absent) against its layout and derives its sizes. `lead` is 1 when
/// every weight has a leading expert dimension; rows have `hidden` elements.
absl::Status resolveFfn(const StepView &view, const fb::FfnAttrs &attrs,
                        const Shape *const shapes[kNumSlots], int lead,
                        int64_t hidden, FfnSizes &sizes,
                        const Shape *const scaleShapes[3] = nullptr) {
  bool inOut = attrs.weight_layout() == fb::WeightLayout::InOut;
  const Shape &w1 = *shapes[kW1];
  sizes = ffnSizes(attrs, w1.dims, lead, shapes[kW3] != nullptr, hidden);
  int64_t in = w1[lead + (inOut ? 0 : 1)];
  bool fused = isGated(attrs.activation()) && !shapes[kW3];
  if (lead && sizes.experts < 1)
    return view.error("w1 of shape ", w1.str(), " has no experts");
  if (in != hidden)
    return view.error("w1 of shape ", w1.str(), " takes rows of ", in,
                      " elements; the tokens have ", hidden);
  if (fused && sizes.w1Out % 2)
    return view.error("w1 of shape ", w1.str(),
                      " must have an even output size (gate and up halves)");
  if (sizes.w1Out > INT32_MAX || hidden > INT32_MAX)
    return view.error("weight dimensions exceed 2^31");

  auto matrix = [&](int64_t rows, int64_t cols) {
    Shape shape;
    if (lead)
      shape.push(sizes.experts);
    shape.push(inOut ? rows : cols);
    shape.push(inOut ? cols : rows);
    return shape;
  };
  auto vector = [&](int64_t size) {
    Shape shape;
    if (lead)
      shape.push(sizes.experts);
    shape.push(size);
    return shape;
  };
  const char *e = lead ? "E, " : "";
  const char *layout = inOut ? "in_out" : "out_in";
  struct Expected {
    Slot slot;
    Shape shape;
    std::string meaning;
  } expected[] = {
      {kB1, vector(sizes.w1Out), absl::StrCat("[", e, fused ? "2F" : "F", "]")},
      {kW3, matrix(hidden, sizes.inter),
       absl::StrCat("[", e, inOut ? "H, F" : "F, H", "] with layout ", layout)},
      {kB3, vector(sizes.inter), absl::StrCat("[", e, "F]")},
      {kW2, matrix(sizes.inter, hidden),
       absl::StrCat("[", e, inOut ? "F, H" : "H, F", "] with layout ", layout)},
      {kB2, vector(hidden), absl::StrCat("[", e, "H]")},
  };
  for (const Expected &want : expected) {
    const Shape *actual = shapes[want.slot];
    if (actual && *actual != want.shape)
      return view.error(kSlotNames[want.slot], " has shape ", actual->str(),
                        "; expected ", want.shape.str(), " (", want.meaning,
                        ")");
  }
  // One scale per expert and output channel of each int8 matrix.
  const int64_t outputs[] = {sizes.w1Out, sizes.inter, hidden};
  const char *meanings[] = {fused ? "2F" : "F", "F", "H"};
  for (int m = 0; scaleShapes && m < 3; ++m)
    if (const Shape *actual = scaleShapes[m];
        actual && *actual != vector(outputs[m]))
      return view.error(kScaleNames[m], " has shape ", actual->str(),
                        "; expected ", vector(outputs[m]).str(), " ([", e,
                        meanings[m], "], a scale per output channel)");
  return absl::OkStatus();
}

/// Experts' first zero point input (z1, z3, z2: format 1.11).
constexpr int kFirstZeroPoint = 11;

/// The sizes of an Experts step's block-quantized matrices (format 1.11)
/// from its tokens' hidden size H and w1's and w3's rows: w1 [E, W1, H],
/// w3 [E, F, H], w2 [E, H, F], all out_in.
struct BlockQuantSizes {
  int64_t experts, hidden, w1Out, inter;
};
BlockQuantSizes blockQuantSizes(const fb::FfnAttrs &attrs, int64_t experts,
                                int64_t hidden, int64_t w1Rows, bool hasW3) {
  bool fused = isGated(attrs.activation()) && !hasW3;
  return {experts, hidden, w1Rows, fused ? w1Rows / 2 : w1Rows};
}

/// Load-time checks of an Experts step whose matrices are block-quantized
/// (FfnAttrs.block_quant): the out_in layout, and per matrix its codes,
/// block scales and optional zero points, all static weights whose shapes
/// follow from the tokens' hidden size and w1's rows.
absl::Status validateBlockQuantFfn(const StepCheck &check, int first,
                                   int scales) {
  const auto *attrs = check.attrs<fb::FfnAttrs>();
  const fb::BlockQuantAttrs &quant = *attrs->block_quant();
  MOERT_RETURN_IF_ERROR(validateBlockQuant(check, quant));
  if (attrs->weight_layout() != fb::WeightLayout::OutIn)
    return check.error("block-quantized matrices need the out_in layout");
  const TensorInfo &w1 = check.in(first + kW1);
  int64_t hidden = staticDim(check.in(0), 1);
  int64_t experts = staticDim(w1, 0), w1Rows = staticDim(w1, 1);
  if (hidden < 1 || experts < 1 || w1Rows < 1 || hidden > INT32_MAX ||
      w1Rows > INT32_MAX)
    return check.error("block-quantized matrices need static sizes: tokens ",
                       declaredShape(check.in(0)), ", w1 ", declaredShape(w1));
  bool hasW3 = check.has(first + kW3);
  if (isGated(attrs->activation()) && !hasW3 && w1Rows % 2)
    return check.error("w1 of ", w1Rows,
                       " rows must have an even output size (gate and up "
                       "halves)");
  BlockQuantSizes sizes =
      blockQuantSizes(*attrs, experts, hidden, w1Rows, hasW3);
  const int64_t rows[] = {sizes.w1Out, sizes.inter, sizes.hidden};
  const int64_t cols[] = {sizes.hidden, sizes.hidden, sizes.inter};
  for (int m = 0; m < 3; ++m) {
    int matrix = first + kScaledSlots[m];
    if (!check.has(matrix)) {
      if (check.has(scales + m) || check.has(kFirstZeroPoint + m))
        return check.error(kScaleNames[m], " or its zero points are given but ",
                           kSlotNames[kScaledSlots[m]], " is absent");
      continue;
    }
    if (!check.has(scales + m))
      return check.error(kScaleNames[m],
                         " is missing: ", kSlotNames[kScaledSlots[m]],
                         " is block-quantized and needs its block scales");
    const TensorInfo *infos[3] = {&check.in(matrix), &check.in(scales + m),
                                  check.has(kFirstZeroPoint + m)
                                      ? &check.in(kFirstZeroPoint + m)
                                      : nullptr};
    std::string names[3] = {
        kSlotNames[kScaledSlots[m]], kScaleNames[m],
        absl::StrCat(kSlotNames[kScaledSlots[m]], "'s zero points")};
    const char *cnames[3] = {names[0].c_str(), names[1].c_str(),
                             names[2].c_str()};
    const int64_t outer[] = {experts};
    MOERT_RETURN_IF_ERROR(checkBlockQuantWeights(check, infos, cnames, 1, outer,
                                                 rows[m], cols[m], quant.bits(),
                                                 quant.block_size()));
  }
  for (int slot : {kB1, kB3, kB2}) {
    const int64_t size[] = {0, sizes.w1Out, 0, sizes.inter, 0, sizes.hidden};
    int i = first + slot;
    if (!check.has(i))
      continue;
    const TensorInfo &bias = check.in(i);
    if (bias.rank != 2 || staticDim(bias, 0) != experts ||
        staticDim(bias, 1) != size[slot])
      return check.error(kSlotNames[slot], " is declared ", declaredShape(bias),
                         "; expected [", experts, ", ", size[slot], "]");
  }
  return absl::OkStatus();
}

/// Load-time checks of an expert network: dtypes, ranks, attributes, and
/// the shapes when they are declared static. `scales` is the first scale
/// input of a step that may hold int8 matrices (Experts, SharedExpert), else
/// -1.
absl::Status validateFfn(const StepCheck &check, int first, int lead,
                         int scales = -1) {
  const auto *attrs = check.attrs<fb::FfnAttrs>();
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inRank(0, 2));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  MOERT_RETURN_IF_ERROR(check.outRank(0, 2));
  for (int slot = 0; slot < kNumSlots; ++slot) {
    int i = first + slot;
    bool isBias = slot == kB1 || slot == kB3 || slot == kB2;
    // Matrices may be 16-bit floats (read as f32); biases are f32.
    MOERT_RETURN_IF_ERROR(check.inType(i, isBias        ? kFloatTypes
                                          : scales >= 0 ? kExpertWeightTypes
                                                        : kWeightTypes));
    if (check.has(i) && check.in(i).rank != lead + (isBias ? 1 : 2))
      return check.error(kSlotNames[slot], " has rank ", check.in(i).rank,
                         "; expected ", lead + (isBias ? 1 : 2));
  }

  bool blockQuant = scales >= 0 && attrs->block_quant();
  if (scales < 0 && attrs->block_quant())
    return check.error("block-quantized matrices are for Experts steps only");
  for (int m = 0; scales >= 0 && !blockQuant && m < 3; ++m)
    if (check.has(kFirstZeroPoint + m))
      return check.error("zero points (input ", kFirstZeroPoint + m,
                         ") need block-quantized matrices (block_quant)");
  // One storage for all matrices: a kernel reads them the same way.
  DType w1Type = check.in(first + kW1).dtype;
  for (Slot slot : {kW3, kW2})
    if (check.has(first + slot) && check.in(first + slot).dtype != w1Type)
      return check.error(kSlotNames[slot], " is ",
                         dtypeName(check.in(first + slot).dtype), " but w1 is ",
                         dtypeName(w1Type),
                         "; w1, w3 and w2 must have one dtype (f32, f16, "
                         "bf16 or i8)");
  if (scales >= 0 && !blockQuant) {
    // int8 matrices come with their scales, [E, out] f32 (shapes below).
    bool quantized = w1Type == DType::I8;
    for (int m = 0; m < 3; ++m) {
      int i = scales + m;
      bool hasMatrix = check.has(first + kScaledSlots[m]);
      MOERT_RETURN_IF_ERROR(check.inType(i, kFloatTypes));
      if (check.has(i) != (quantized && hasMatrix))
        return check.error(
            kScaleNames[m], check.has(i) ? " is given but " : " is missing: ",
            kSlotNames[kScaledSlots[m]],
            check.has(i) ? (hasMatrix ? " is not i8" : " is absent")
                         : " is i8 and needs its per-channel scales");
      if (check.has(i) && check.in(i).rank != lead + 1)
        return check.error(kScaleNames[m], " has rank ", check.in(i).rank,
                           "; expected ", lead + 1,
                           lead ? " ([E, out])" : " ([out])");
    }
  }

  fb::Activation activation = attrs->activation();
  if (activation > fb::Activation::MAX)
    return check.error("unknown activation ", static_cast<int>(activation));
  if (attrs->weight_layout() > fb::WeightLayout::MAX)
    return check.error("unknown weight layout ",
                       static_cast<int>(attrs->weight_layout()));
  if (attrs->glu_layout() > fb::GluLayout::MAX)
    return check.error("unknown glu layout ",
                       static_cast<int>(attrs->glu_layout()));
  bool gated = isGated(activation);
  bool hasW3 = check.has(first + kW3);
  if (hasW3 && !gated)
    return check.error("w3 needs a gated activation, not ",
                       fb::EnumNameActivation(activation));
  if (check.has(first + kB3) && !hasW3)
    return check.error("b3 needs w3");
  bool fused = gated && !hasW3;
  if (fused != (attrs->glu_layout() != fb::GluLayout::None))
    return check.error(fused ? "a fused gate/up projection (a gated "
                               "activation without w3) needs a glu layout"
                             : "a glu layout applies only to a fused gate/up "
                               "projection (a gated activation without w3)");
  float alpha = attrs->alpha(), beta = attrs->beta(), limit = attrs->limit();
  if (activation == fb::Activation::ClampedSwiglu) {
    if (!std::isfinite(alpha) || !std::isfinite(beta) ||
        !std::isfinite(limit) || limit < 0)
      return check.error("clamped_swiglu needs finite alpha and beta and a "
                         "finite non-negative limit (0: none)");
  } else if (alpha != 1.0f || beta != 0.0f || limit != 0.0f) {
    return check.error("alpha, beta and limit apply only to clamped_swiglu");
  }

  if (blockQuant)
    return validateBlockQuantFfn(check, first, scales);
  Shape storage[kNumSlots], scaleStorage[3];
  const Shape *shapes[kNumSlots] = {}, *scaleShapes[3] = {};
  for (int slot = 0; slot < kNumSlots; ++slot)
    if (check.has(first + slot)) {
      if (!staticShape(check.in(first + slot), storage[slot]))
        return absl::OkStatus(); // Checked at run time.
      shapes[slot] = &storage[slot];
    }
  for (int m = 0; scales >= 0 && m < 3; ++m)
    if (check.has(scales + m)) {
      if (!staticShape(check.in(scales + m), scaleStorage[m]))
        return absl::OkStatus();
      scaleShapes[m] = &scaleStorage[m];
    }
  int64_t hidden = staticDim(check.in(0), 1);
  if (hidden < 0)
    return absl::OkStatus();
  FfnSizes sizes;
  return resolveFfn(check, *attrs, shapes, lead, hidden, sizes, scaleShapes);
}

/// The streaming kernels' name for a matrix dtype the loader accepted.
StreamWeights streamWeights(DType dtype) {
  return dtype == DType::BF16  ? StreamWeights::BF16
         : dtype == DType::F16 ? StreamWeights::F16
         : dtype == DType::I8  ? StreamWeights::I8
                               : StreamWeights::F32;
}

/// The attributes of an expert network into `ffn`.
void readFfnAttrs(const fb::FfnAttrs &attrs, Ffn &ffn) {
  ffn.activation = attrs.activation();
  ffn.inOut = attrs.weight_layout() == fb::WeightLayout::InOut;
  ffn.gated = isGated(ffn.activation);
  ffn.fused = ffn.gated && !ffn.present[kW3];
  ffn.interleaved = attrs.glu_layout() == fb::GluLayout::Interleaved;
  ffn.alpha = attrs.alpha();
  ffn.beta = attrs.beta();
  ffn.limit = attrs.limit();
}

/// resolveFfn of an Experts step with block-quantized matrices, whose
/// shapes the loader checked (validateBlockQuantFfn): the sizes follow
/// from the tokens' hidden size and w1's rows.
absl::Status resolveBlockQuantFfn(const KernelContext &ctx, int first,
                                  int scales, int64_t hidden,
                                  const fb::BlockQuantAttrs &quant, Ffn &ffn) {
  const auto *attrs = ctx.attrs<fb::FfnAttrs>();
  const Shape &w1 = ctx.in(first + kW1).shape;
  BlockQuantSizes sizes =
      blockQuantSizes(*attrs, w1[0], hidden, w1[1], ffn.present[kW3]);
  ffn.sizes.experts = sizes.experts;
  ffn.sizes.hidden = sizes.hidden;
  ffn.sizes.w1Out = sizes.w1Out;
  ffn.sizes.inter = sizes.inter;
  ffn.blockQuant = true;
  const int64_t rows[] = {sizes.w1Out, sizes.inter, sizes.hidden};
  const int64_t cols[] = {sizes.hidden, sizes.hidden, sizes.inter};
  for (int m = 0; m < 3; ++m) {
    Slot slot = kScaledSlots[m];
    if (!ffn.present[slot])
      continue;
    const Tensor &codes = ctx.in(first + slot);
    const Tensor &scale = ctx.in(scales + m);
    const Tensor *zeros =
        ctx.has(kFirstZeroPoint + m) ? &ctx.in(kFirstZeroPoint + m) : nullptr;
    ffn.quant[slot] = blockQuantMatrix(codes, scale, zeros, rows[m], cols[m],
                                       quant.bits(), quant.block_size());
    ffn.quant[slot].int8Activations = quant.int8_activations();
    ffn.quantScaleStride[slot] =
        scale.shape.span(1, scale.shape.rank) * dtypeSize(scale.dtype);
    ffn.quantZeroStride[slot] =
        zeros ? zeros->shape.span(1, zeros->shape.rank) : 0;
  }
  readFfnAttrs(*attrs, ffn);
  return absl::OkStatus();
}

absl::Status resolveFfn(const KernelContext &ctx, int first, int lead,
                        int64_t hidden, Ffn &ffn, int scales = -1) {
  const auto *attrs = ctx.attrs<fb::FfnAttrs>();
  const Shape *shapes[kNumSlots] = {};
  for (int slot = 0; slot < kNumSlots; ++slot)
    if (ctx.has(first + slot)) {
      const Tensor &t = ctx.in(first + slot);
      shapes[slot] = &t.shape;
      ffn.present[slot] = true;
      ffn.data[slot] = t.data;
      ffn.stride[slot] =
          lead ? t.shape.span(1, t.shape.rank) * dtypeSize(t.dtype) : 0;
    }
  ffn.weightType = streamWeights(ctx.in(first + kW1).dtype);
  if (const fb::BlockQuantAttrs *quant = attrs->block_quant();
      quant && scales >= 0)
    return resolveBlockQuantFfn(ctx, first, scales, hidden, *quant, ffn);
  const Shape *scaleShapes[3] = {};
  for (int m = 0; scales >= 0 && m < 3; ++m)
    if (ctx.has(scales + m)) {
      const Tensor &t = ctx.in(scales + m);
      scaleShapes[m] = &t.shape;
      ffn.scales[kScaledSlots[m]] = t.as<const float>();
      ffn.scaleStride[kScaledSlots[m]] = t.shape[t.shape.rank - 1];
    }
  MOERT_RETURN_IF_ERROR(
      resolveFfn(ctx, *attrs, shapes, lead, hidden, ffn.sizes, scaleShapes));
  readFfnAttrs(*attrs, ffn);
  return absl::OkStatus();
}

absl::Status expertsKernel(KernelContext &ctx) {
  const Tensor &tokens = ctx.in(0);
  const Tensor &offsetsIn = ctx.in(1);
  int64_t N = tokens.shape[0], H = tokens.shape[1];
  Ffn f;
  MOERT_RETURN_IF_ERROR(resolveFfn(ctx, 2, /*lead=*/1, H, f, kFirstScale));
  int64_t E = f.sizes.experts;
  MOERT_RETURN_IF_ERROR(checkExpertOffsets(ctx, offsetsIn.shape, E));
  const int64_t *offsets = offsetsIn.as<const int64_t>();
  if (offsets[0] != 0)
    return ctx.error("offsets[0] is ", offsets[0], "; expected 0");
  for (int64_t e = 0; e < E; ++e)
    if (offsets[e + 1] < offsets[e] || offsets[e + 1] > N)
      return ctx.error("offsets[", e + 1, "] = ", offsets[e + 1],
                       " is not in [offsets[", e, "] = ", offsets[e], ", ", N,
                       "] (the rows)");
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, tokens.shape));
  float *y = out->as<float>();
  if (ctx.expertWeights() && f.blockQuant)
    return ctx.error("a tiered Experts step cannot page block-quantized "
                     "matrices");
  if (ExpertWeights *store = ctx.expertWeights()) {
    // A tiered step: the experts with rows are made present (read when
    // missing) as many at a time as the cache holds, each batch computed
    // before the next is read. Each expert writes only its own rows.
    uint32_t layer = static_cast<uint32_t>(ctx.tierLayer());
    for (int slot = 0; slot < kNumSlots; ++slot)
      f.paged[slot] = store->pointers(layer, 2 + slot);
    for (int m = 0; m < 3; ++m)
      f.pagedScales[kScaledSlots[m]] = store->pointers(layer, kFirstScale + m);
    std::vector<uint32_t> pending, batch;
    for (int64_t e = 0; e < E; ++e)
      if (offsets[e + 1] > offsets[e])
        pending.push_back(static_cast<uint32_t>(e));
    while (!pending.empty()) {
      MOERT_RETURN_IF_ERROR(
          store->acquire(layer, pending, batch, ctx.pool(), ctx.step().label));
      std::sort(batch.begin(), batch.end());
      runExperts(ctx.pool(), f, tokens.as<const float>(), offsets, y, &batch);
      store->release(layer, batch);
    }
  } else {
    runExperts(ctx.pool(), f, tokens.as<const float>(), offsets, y);
  }
  std::fill(y + offsets[E] * H, y + N * H, 0.0f);

  if (ctx.moeCounters()) {
    int64_t *load = scratch<int64_t>(Scratch::Step, E);
    for (int64_t e = 0; e < E; ++e)
      load[e] = offsets[e + 1] - offsets[e];
    countLoads(ctx, E, load, 0);
  }
  return absl::OkStatus();
}

absl::Status validateExperts(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  MOERT_RETURN_IF_ERROR(validateFfn(check, 2, /*lead=*/1, kFirstScale));
  int64_t experts = staticDim(check.in(2), 0);
  int64_t offsets = staticDim(check.in(1), 0);
  if (experts >= 0 && offsets >= 0 && offsets != experts + 1)
    return check.error("offsets are declared ", declaredShape(check.in(1)),
                       "; expected [", experts + 1, "] for ", experts,
                       " experts");
  return absl::OkStatus();
}

absl::Status sharedExpertKernel(KernelContext &ctx) {
  const Tensor &tokens = ctx.in(0);
  int64_t T = tokens.shape[0], H = tokens.shape[1];
  Ffn f;
  MOERT_RETURN_IF_ERROR(resolveFfn(ctx, 1, /*lead=*/0, H, f, kFirstScale));
  const float *x = tokens.as<const float>();
  // The gate's per-token factor, computed before the output is written.
  float *gate = nullptr;
  if (ctx.has(7)) {
    const Tensor &g = ctx.in(7);
    MOERT_RETURN_IF_ERROR(checkSharedGate(ctx, g.shape, H));
    gate = scratch<float>(Scratch::Aux, T);
    const float *gv = g.as<const float>();
    ctx.pool().parallelFor(T, rowGrain(H), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        double dot = 0;
        for (int64_t h = 0; h < H; ++h)
          dot += double(x[t * H + h]) * gv[h];
        gate[t] = sigmoid(static_cast<float>(dot));
      }
    });
  }
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, tokens.shape));
  float *y = out->as<float>();
  int64_t offsets[2] = {0, T};
  runExperts(ctx.pool(), f, x, offsets, y);
  if (gate)
    ctx.pool().parallelFor(T, rowGrain(H), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        for (int64_t h = 0; h < H; ++h)
          y[t * H + h] *= gate[t];
    });
  return absl::OkStatus();
}

absl::Status validateSharedExpert(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(7, kFloatTypes));
  if (check.has(7) && check.in(7).rank != 1 && check.in(7).rank != 2)
    return check.error("gate has rank ", check.in(7).rank,
                       "; expected 1 ([H]) or 2 ([H, 1] or [1, H])");
  if (check.attrs<fb::FfnAttrs>()->block_quant())
    return check.error("block-quantized matrices are for Experts steps only");
  return validateFfn(check, 1, /*lead=*/0, kFirstScale);
}

} // namespace

FfnSizes ffnSizes(const fb::FfnAttrs &attrs, const int64_t *w1, int lead,
                  bool hasW3, int64_t hidden) {
  bool inOut = attrs.weight_layout() == fb::WeightLayout::InOut;
  FfnSizes sizes;
  sizes.experts = lead ? w1[0] : 1;
  sizes.hidden = hidden;
  sizes.w1Out = w1[lead + (inOut ? 1 : 0)];
  bool fused = isGated(attrs.activation()) && !hasW3;
  sizes.inter = fused ? sizes.w1Out / 2 : sizes.w1Out;
  return sizes;
}

absl::Status checkExpertOffsets(const KernelContext &ctx, const Shape &offsets,
                                int64_t experts) {
  if (offsets != Shape{experts + 1})
    return ctx.error("offsets have shape ", offsets.str(), "; expected [",
                     experts + 1, "] for ", experts, " experts");
  return absl::OkStatus();
}

absl::Status checkSharedGate(const KernelContext &ctx, const Shape &gate,
                             int64_t hidden) {
  if (gate.numel() != hidden ||
      !(gate.rank == 1 || gate[0] == 1 || gate[1] == 1))
    return ctx.error("gate has shape ", gate.str(), "; expected [", hidden,
                     "], [", hidden, ", 1] or [1, ", hidden, "]");
  return absl::OkStatus();
}

void registerExpertOps(OpRegistry &r) {
  // tokens, offsets, w1, b1?, w3?, b3?, w2, b2?, s1?, s3?, s2?, z1?, z3?,
  // z2?
  // Each expert reads its rows before writing the same rows.
  r.add(fb::OpKind::Experts, makeOp("Experts", 7, 14, validateExperts,
                                    expertsKernel, fb::Attrs::FfnAttrs)
                                 .withOptionalInputs(0b11111110111000)
                                 .withInPlaceInputs(kInPlaceFirst));

  // tokens, w1, b1?, w3?, b3?, w2, b2?, gate?, s1?, s3?, s2?
  r.add(fb::OpKind::SharedExpert,
        makeOp("SharedExpert", 6, 11, validateSharedExpert, sharedExpertKernel,
               fb::Attrs::FfnAttrs)
            .withOptionalInputs(0b11111011100));
}

} // namespace moert::detail
