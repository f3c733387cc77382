//===- schedule_validation.cpp - Checking one schedule of a plan ----------===//
//
// The loader's checks of one schedule, trusting nothing in it: every
// tensor's dtype, shape and bytes (arena, weight section, paged expert),
// every step's arity, tensor ids and attributes (and the op's own rules,
// from the op registry), the collectives' pairing, the memory plan's
// lifetimes, and the tiers of a tiered schedule (tier_validation.h).
//
//===----------------------------------------------------------------------===//

#include "exec/ops.h"
#include "loader/tier_validation.h"
#include "loader/validation.h"

#include "absl/strings/str_format.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_set>

namespace moert::detail {
namespace {

absl::Status validateTensor(const Diag &diag, const fb::Tensor &tensor,
                            const Plan::Impl &impl, const Layout &layout,
                            uint64_t arenaSize, TensorInfo &info) {
  info.name = str(tensor.name());
  auto dtype = static_cast<DType>(tensor.dtype());
  if (dtypeSize(dtype) == 0)
    return diag.invalid("unknown dtype ", static_cast<int>(tensor.dtype()));
  info.dtype = dtype;
  const auto *dims = tensor.dims();
  size_t rank = dims ? dims->size() : 0;
  if (rank > static_cast<size_t>(kMaxRank))
    return diag.invalid("rank ", rank, " exceeds the maximum ", kMaxRank);
  info.rank = static_cast<int>(rank);
  // The FlatBuffers verifier checks a vector's length field, not that its
  // elements are aligned for their type: a crafted file can place the 8-byte
  // Dim structs at a 4-byte boundary, and reading them would be undefined.
  if (rank && reinterpret_cast<uintptr_t>(dims->Data()) % alignof(fb::Dim))
    return diag.invalid("dims are not aligned to ", alignof(fb::Dim), " bytes");
  int64_t maxElements = 1;
  for (size_t d = 0; d < rank; ++d) {
    const fb::Dim *dim = dims->Get(d);
    DimInfo &out = info.dims[d];
    out.bound = dim->bound();
    out.kind = dim->kind();
    out.symbol = -1;
    if (out.bound < 0 || static_cast<uint64_t>(out.bound) > kMaxDimBound)
      return diag.invalid("dim ", d, " has size or bound ", out.bound,
                          ", outside [0, 2^40]");
    switch (dim->kind()) {
    case fb::DimKind::Static:
    case fb::DimKind::Dynamic:
      break;
    case fb::DimKind::Symbolic: {
      int32_t symbol = dim->symbol();
      if (symbol < 0 || static_cast<size_t>(symbol) >= impl.symbols.size())
        return diag.invalid("dim ", d, " names symbol ", symbol, " but the ",
                            "program has ", impl.symbols.size(), " symbols");
      if (out.bound != impl.symbols[symbol].max)
        return diag.invalid("dim ", d, " has bound ", out.bound,
                            " but its symbol '", impl.symbols[symbol].name,
                            "' has max ", impl.symbols[symbol].max);
      out.symbol = symbol;
      break;
    }
    default:
      return diag.invalid("dim ", d, " has unknown kind ",
                          static_cast<int>(dim->kind()));
    }
    if (!detail::checkedMul(maxElements, out.bound, maxElements))
      return diag.invalid("element count of ", describeDims(info),
                          " overflows");
  }
  int64_t elementSize = static_cast<int64_t>(dtypeSize(dtype));
  int64_t maxBytes;
  if (!detail::checkedMul(maxElements, elementSize, maxBytes))
    return diag.invalid("byte size of ", describeDims(info), " overflows");
  info.offset = tensor.offset();
  info.size = tensor.size();
  if (info.offset % elementSize != 0)
    return diag.invalid("offset ", info.offset, " is not a multiple of the ",
                        elementSize, "-byte element size");
  if (const fb::ValueRange *range = tensor.value_range())
    if (range->lo() >= range->hi())
      return diag.invalid("value range [", range->lo(), ", ", range->hi(),
                          ") is empty");
  switch (tensor.storage()) {
  case fb::Storage::Arena:
    if (info.size < static_cast<uint64_t>(maxBytes))
      return diag.invalid("planned size ", info.size, " bytes is less than ",
                          maxBytes, " bytes needed by ", dtypeName(dtype), " ",
                          describeDims(info));
    if (overflowsAdd(info.offset, info.size, arenaSize))
      return diag.invalid("arena bytes [", info.offset, ", +", info.size,
                          ") exceed the arena size ", arenaSize);
    return absl::OkStatus();
  case fb::Storage::Weight: {
    info.isWeight = true;
    for (int d = 0; d < info.rank; ++d)
      if (info.dims[d].kind != fb::DimKind::Static)
        return diag.invalid("weights must have static shapes; dim ", d,
                            " is not");
    if (info.size != static_cast<uint64_t>(maxBytes))
      return diag.invalid("weight size ", info.size, " bytes differs from ",
                          maxBytes, " bytes of ", dtypeName(dtype), " ",
                          describeDims(info));
    uint32_t section = tensor.section();
    if (section >= layout.sections.size() ||
        layout.sections[section].kind !=
            static_cast<uint32_t>(SectionKind::Weights))
      return diag.invalid("section ", section, " is not a weight section");
    const detail::SectionEntry &entry = layout.sections[section];
    info.section = section;
    if (overflowsAdd(info.offset, info.size, entry.size))
      return diag.invalid("bytes [", info.offset, ", +", info.size,
                          ") exceed weight section ", section, " (", entry.size,
                          " bytes)");
    if (entry.flags & kSectionFlagPaged) {
      info.paged = true;
      info.fileOffset = entry.offset + info.offset;
      return absl::OkStatus();
    }
    info.weightData = impl.data + entry.offset + info.offset;
    return absl::OkStatus();
  }
  }
  return diag.invalid("unknown storage ", static_cast<int>(tensor.storage()));
}

/// Checks the step's arity, tensor ids (defined before use, produced once),
/// attribute table and op-specific rules; records producers and last uses.
absl::Status validateStep(const Diag &diag, ScheduleInfo &schedule,
                          const fb::Step &fbStep, int index, StepInfo &step) {
  step.fb = &fbStep;
  step.op = fbStep.op();
  step.index = index;
  step.name = str(fbStep.name());
  step.def = detail::findOp(step.op);
  if (!step.def)
    return diag.invalid("step ", index, " '", step.name, "': unknown op kind ",
                        static_cast<int>(step.op),
                        " (the plan needs a newer runtime)");
  const detail::OpDef &def = *step.def;
  step.label =
      absl::StrCat("step ", index, " '", step.name, "' (", def.name, ")");
  auto error = [&](const auto &...args) {
    return diag.invalid(step.label, ": ", args...);
  };
  size_t numTensors = schedule.tensors.size();
  if (const auto *ids = fbStep.inputs())
    step.inputs.assign(ids->begin(), ids->end());
  if (const auto *ids = fbStep.outputs())
    step.outputs.assign(ids->begin(), ids->end());
  int numInputs = static_cast<int>(step.inputs.size());
  int numOutputs = static_cast<int>(step.outputs.size());
  if (numInputs < def.minInputs || numInputs > def.maxInputs)
    return error("has ", numInputs, " inputs; expected ", def.minInputs,
                 def.maxInputs == detail::kVariadic
                     ? " or more"
                     : absl::StrCat(" to ", def.maxInputs));
  if (numOutputs < def.minOutputs || numOutputs > def.maxOutputs)
    return error("has ", numOutputs, " outputs; expected ", def.minOutputs,
                 def.maxOutputs == detail::kVariadic
                     ? " or more"
                     : absl::StrCat(" to ", def.maxOutputs));
  for (int i = 0; i < numInputs; ++i) {
    int32_t id = step.inputs[i];
    if (id == -1) {
      if (i >= 32 || !(def.optionalInputs & (1u << i)))
        return error("input ", i, " is required but omitted");
      continue;
    }
    if (id < 0 || static_cast<size_t>(id) >= numTensors)
      return error("input ", i, " names tensor ", id, " but the schedule has ",
                   numTensors);
    TensorInfo &tensor = schedule.tensors[id];
    if (!tensor.isWeight && !tensor.isGraphInput && tensor.producer < 0)
      return error("input ", i, " '", tensor.name,
                   "' is used before any step produces it");
  }
  for (int o = 0; o < numOutputs; ++o) {
    int32_t id = step.outputs[o];
    if (id < 0 || static_cast<size_t>(id) >= numTensors)
      return error("output ", o, " names tensor ", id, " but the schedule has ",
                   numTensors);
    TensorInfo &tensor = schedule.tensors[id];
    if (tensor.isWeight || tensor.isGraphInput || tensor.producer >= 0)
      return error("output ", o, " '", tensor.name, "' is ",
                   tensor.isWeight ? "a weight"
                   : tensor.isGraphInput
                       ? "a graph input"
                       : "already produced by an earlier step",
                   "; every output must be a fresh arena tensor");
    tensor.producer = index;
  }
  if (fbStep.attrs_type() != def.attrs)
    return error(
        "expects ",
        def.attrs == fb::Attrs::NONE
            ? std::string("no attributes")
            : absl::StrCat(fb::EnumNameAttrs(def.attrs), " attributes"),
        ", found ",
        fbStep.attrs_type() == fb::Attrs::NONE
            ? std::string("none")
            : absl::StrCat(fb::EnumNameAttrs(fbStep.attrs_type())));
  if (def.attrs != fb::Attrs::NONE && !fbStep.attrs())
    return error("attribute table is missing");
  MOERT_RETURN_IF_ERROR(
      diag.wrap(def.validate(detail::StepCheck(schedule, step))));
  for (int32_t id : step.inputs)
    if (id >= 0)
      schedule.tensors[id].lastUse = index;
  return absl::OkStatus();
}

/// Checks the collective steps against the whole schedule: their group size
/// is the plan's device count, and every AllToAllStart is completed by one
/// later AllToAllWait that names exactly the start's inputs then outputs,
/// with no step in between reading the rows still in flight.
absl::Status validateCollectives(const Diag &diag, ScheduleInfo &schedule,
                                 uint32_t deviceCount) {
  // The `received` tensor of each exchange in flight -> its start step.
  std::map<int32_t, int> inFlight;
  for (StepInfo &step : schedule.steps) {
    auto error = [&](const auto &...args) {
      return diag.invalid(step.label, ": ", args...);
    };
    int64_t devices = -1;
    if (step.op == fb::OpKind::AllToAll || step.op == fb::OpKind::AllToAllStart)
      devices = step.fb->attrs_as_CollectiveAttrs()->num_devices();
    if (devices >= 0 && devices != deviceCount)
      return error("exchanges with ", devices, " devices but the plan has ",
                   deviceCount);
    if (step.op == fb::OpKind::AllToAllWait) {
      int32_t received = step.inputs[step.inputs.size() - 2];
      auto it = inFlight.find(received);
      if (it == inFlight.end())
        return error("waits for '",
                     received >= 0 ? schedule.tensors[received].name : "",
                     "', which no earlier AllToAllStart is receiving");
      const StepInfo &start = schedule.steps[it->second];
      std::vector<int32_t> expected = start.inputs;
      expected.insert(expected.end(), start.outputs.begin(),
                      start.outputs.end());
      if (step.inputs != expected)
        return error("must name the inputs then the outputs of ", start.label,
                     " (", expected.size(), " tensors)");
      step.pairedStep = it->second;
      inFlight.erase(it);
      continue;
    }
    for (int32_t id : step.inputs)
      if (auto it = inFlight.find(id); it != inFlight.end())
        return error("reads '", schedule.tensors[id].name,
                     "' before the AllToAllWait of ",
                     schedule.steps[it->second].label);
    if (step.op == fb::OpKind::AllToAllStart)
      inFlight.emplace(step.outputs[0], step.index);
  }
  if (!inFlight.empty())
    return diag.invalid(schedule.steps[inFlight.begin()->second].label,
                        ": no AllToAllWait completes the exchange");
  return absl::OkStatus();
}

/// Checks the memory plan: two arena tensors that are live at the same time
/// never share bytes, except an in-place step output that takes exactly the
/// slot of an input read for the last time by that step.
absl::Status validateArena(const Diag &diag, const ScheduleInfo &schedule) {
  int numSteps = static_cast<int>(schedule.steps.size());
  auto lifetimeEnd = [&](const TensorInfo &t) {
    return t.isGraphOutput ? numSteps : std::max(t.lastUse, t.producer);
  };
  // Tensors that become live at step s (index s + 1; graph inputs at -1) and
  // tensors whose last step is s.
  std::vector<std::vector<uint32_t>> starts(numSteps + 1), ends(numSteps + 2);
  for (uint32_t id = 0; id < schedule.tensors.size(); ++id) {
    const TensorInfo &t = schedule.tensors[id];
    if (t.isWeight || t.size == 0 || (!t.isGraphInput && t.producer < 0))
      continue;
    int start = t.isGraphInput ? -1 : t.producer;
    starts[start + 1].push_back(id);
    ends[lifetimeEnd(t) + 1].push_back(id);
  }
  std::multimap<uint64_t, uint32_t> live;
  auto describe = [&](uint32_t id) {
    const TensorInfo &t = schedule.tensors[id];
    return absl::StrCat("tensor ", id, " '", t.name, "' (bytes [", t.offset,
                        ", ", t.offset + t.size, "), live from ",
                        t.isGraphInput ? std::string("the start")
                                       : absl::StrCat("step ", t.producer),
                        " to ",
                        t.isGraphOutput ? std::string("the end")
                                        : absl::StrCat("step ", lifetimeEnd(t)),
                        ")");
  };
  for (int s = -1; s < numSteps; ++s) {
    const StepInfo *step = s >= 0 ? &schedule.steps[s] : nullptr;
    for (uint32_t id : starts[s + 1]) {
      const TensorInfo &t = schedule.tensors[id];
      uint64_t end = t.offset + t.size;
      auto conflict = [&](uint32_t other) -> absl::Status {
        const TensorInfo &u = schedule.tensors[other];
        if (step && u.offset == t.offset && lifetimeEnd(u) == s &&
            step->outputs[0] == static_cast<int32_t>(id))
          for (size_t p = 0; p < step->inputs.size() && p < 32; ++p)
            if (step->inputs[p] == static_cast<int32_t>(other) &&
                (step->def->inPlaceInputs >> p & 1))
              return absl::OkStatus();
        return diag.invalid("memory plan overlaps live tensors: ",
                            describe(other), " and ", describe(id));
      };
      // Live intervals are disjoint but for in-place pairs at one offset, so
      // only the intervals starting in [offset, end) and those at the
      // greatest offset below can reach this one.
      auto it = live.lower_bound(t.offset);
      for (auto j = it; j != live.end() && j->first < end; ++j)
        MOERT_RETURN_IF_ERROR(conflict(j->second));
      if (it != live.begin()) {
        uint64_t below = std::prev(it)->first;
        for (auto j = live.lower_bound(below); j != it; ++j)
          if (below + schedule.tensors[j->second].size > t.offset)
            MOERT_RETURN_IF_ERROR(conflict(j->second));
      }
      live.emplace(t.offset, id);
    }
    for (uint32_t id : ends[s + 1]) {
      auto range = live.equal_range(schedule.tensors[id].offset);
      for (auto j = range.first; j != range.second; ++j)
        if (j->second == id) {
          live.erase(j);
          break;
        }
    }
  }
  return absl::OkStatus();
}

TensorDesc describeTensor(const Plan::Impl &impl, const fb::Tensor &tensor,
                          const TensorInfo &info) {
  TensorDesc desc;
  desc.name = std::string(info.name);
  desc.dtype = info.dtype;
  for (int d = 0; d < info.rank; ++d) {
    DimDesc dim;
    dim.bound = info.dims[d].bound;
    switch (info.dims[d].kind) {
    case fb::DimKind::Symbolic:
      dim.kind = DimDesc::Kind::Symbolic;
      dim.symbol = impl.symbols[info.dims[d].symbol].name;
      break;
    case fb::DimKind::Dynamic:
      dim.kind = DimDesc::Kind::Dynamic;
      break;
    default:
      dim.kind = DimDesc::Kind::Static;
      break;
    }
    desc.dims.push_back(std::move(dim));
  }
  if (const fb::ValueRange *range = tensor.value_range()) {
    desc.hasValueRange = true;
    desc.valueLo = range->lo();
    desc.valueHi = range->hi();
  }
  desc.replicated = tensor.replicated();
  return desc;
}

} // namespace

absl::Status validateSchedule(const Diag &diag, const Plan::Impl &impl,
                              const Layout &layout, const fb::Schedule &fbSched,
                              ScheduleInfo &schedule,
                              const ScheduleInfo *decode) {
  schedule.arenaSize = fbSched.arena_size();
  if (schedule.arenaSize > kMaxArenaSize)
    return diag.invalid("arena size ", schedule.arenaSize,
                        " bytes exceeds the limit of 2^48");
  const auto *tensors = fbSched.tensors();
  size_t numTensors = tensors ? tensors->size() : 0;
  if (numTensors > static_cast<size_t>(INT32_MAX))
    return diag.invalid("too many tensors");
  schedule.tensors.resize(numTensors);
  for (size_t id = 0; id < numTensors; ++id) {
    const fb::Tensor *tensor = tensors->Get(id);
    Diag tdiag = diag.nested(
        absl::StrCat("tensor ", id, " '", str(tensor->name()), "'"));
    MOERT_RETURN_IF_ERROR(validateTensor(tdiag, *tensor, impl, layout,
                                         schedule.arenaSize,
                                         schedule.tensors[id]));
  }

  // Graph inputs live in the arena and have unique, non-empty names.
  auto checkSignature = [&](const flatbuffers::Vector<uint32_t> *ids,
                            const char *what, std::vector<uint32_t> &out,
                            bool isInput) -> absl::Status {
    std::set<std::string> names;
    std::unordered_set<uint32_t> seen;
    size_t count = ids ? ids->size() : 0;
    for (size_t k = 0; k < count; ++k) {
      uint32_t id = ids->Get(k);
      if (id >= numTensors)
        return diag.invalid(what, " ", k, " names tensor ", id,
                            " but the schedule has ", numTensors);
      TensorInfo &info = schedule.tensors[id];
      if (info.name.empty())
        return diag.invalid(what, " ", k, " (tensor ", id, ") has no name");
      if (!names.insert(std::string(info.name)).second ||
          !seen.insert(id).second)
        return diag.invalid(what, " name '", info.name, "' appears twice");
      if (isInput) {
        if (info.isWeight)
          return diag.invalid(what, " '", info.name, "' is a weight");
        info.isGraphInput = true;
      } else {
        info.isGraphOutput = true;
      }
      out.push_back(id);
    }
    return absl::OkStatus();
  };
  MOERT_RETURN_IF_ERROR(
      checkSignature(fbSched.inputs(), "input", schedule.inputs, true));
  MOERT_RETURN_IF_ERROR(
      checkSignature(fbSched.outputs(), "output", schedule.outputs, false));

  const auto *steps = fbSched.steps();
  size_t numSteps = steps ? steps->size() : 0;
  if (numSteps > static_cast<size_t>(INT32_MAX) - 2)
    return diag.invalid("too many steps");
  schedule.steps.resize(numSteps);
  for (size_t s = 0; s < numSteps; ++s) {
    const fb::Step &step = *steps->Get(s);
    // The least format version that has what the step uses, with what it
    // uses, or 0 when the file's version has all of it.
    auto needs = [&]() -> std::pair<uint16_t, const char *> {
      const auto *router = step.attrs_as<fb::RouterAttrs>();
      const auto *ffn = step.attrs_as<fb::FfnAttrs>();
      const auto *attrs = step.attrs_as<fb::AttentionAttrs>();
      bool attention = step.op() == fb::OpKind::Attention;
      // An older writer could not have meant them: a 1.8 reader would
      // ignore the softcap, and refuse the sinks input by arity.
      bool sinks = attention && step.inputs() && step.inputs()->size() > 4;
      bool softcap = attention && attrs && attrs->softcap() != 0.0f;
      bool blockQuant =
          step.op() == fb::OpKind::MatMulNBits || (ffn && ffn->block_quant());
      const fb::BlockQuantAttrs *quant =
          ffn ? ffn->block_quant() : step.attrs_as<fb::BlockQuantAttrs>();
      bool int8Activations = quant && quant->int8_activations();
      // A Gather that widens its table (checked against the tensors'
      // declarations; validateStep checks the ids themselves).
      auto dtypeOf = [&](const flatbuffers::Vector<int32_t> *ids) {
        int32_t id = ids && ids->size() ? ids->Get(0) : -1;
        return id >= 0 && size_t(id) < schedule.tensors.size()
                   ? schedule.tensors[id].dtype
                   : DType::F32;
      };
      bool wideningGather = step.op() == fb::OpKind::Gather &&
                            dtypeOf(step.inputs()) != dtypeOf(step.outputs());
      const std::pair<uint16_t, const char *> features[] = {
          {wideningGather ? detail::kFormatVersionMinorWideningGather : 0,
           "is a Gather that widens its table"},
          {step.op() == fb::OpKind::GridSample
               ? detail::kFormatVersionMinorGridSample
               : 0,
           "is a GridSample step"},
          {step.op() == fb::OpKind::CausalConv
               ? detail::kFormatVersionMinorStatePrefill
               : 0,
           "is a CausalConv step"},
          {step.op() == fb::OpKind::Linear ? detail::kFormatVersionMinorLinear
                                           : 0,
           "is a Linear step"},
          {step.op() == fb::OpKind::SharedExpert && step.inputs() &&
                   step.inputs()->size() > 8
               ? detail::kFormatVersionMinorLinear
               : 0,
           "is a SharedExpert step with int8 scales"},
          {step.op() == fb::OpKind::Conv ? detail::kFormatVersionMinorVision
                                         : 0,
           "is a Conv step"},
          {int8Activations ? detail::kFormatVersionMinorInt8Activations : 0,
           "has int8 activations"},
          {blockQuant ? detail::kFormatVersionMinorBlockQuant : 0,
           "has block-quantized weights"},
          {attention ? detail::kFormatVersionMinorAttention : 0,
           "is an Attention step"},
          {router && router->normalize_kept_epsilon() != 0.0f
               ? detail::kFormatVersionMinorKeptNormalize
               : 0,
           "is a Router with normalize_kept"},
          {ffn && ffn->activation() == fb::Activation::ReluSquared
               ? detail::kFormatVersionMinorKeptNormalize
               : 0,
           "has the relu_squared activation"},
          {step.op() == fb::OpKind::GatedDeltaRule
               ? detail::kFormatVersionMinorGenai
               : 0,
           "is a GatedDeltaRule step"},
          {sinks ? detail::kFormatVersionMinorGenai : 0,
           "is an Attention step with a sinks input"},
          {softcap ? detail::kFormatVersionMinorGenai : 0,
           "is an Attention step with a softcap"}};
      for (const auto &feature : features)
        if (impl.versionMinor < feature.first)
          return feature;
      return {0, nullptr};
    };
    if (auto [minor, what] = needs(); what)
      return diag.invalid("step ", s, " ", what, ", which needs format ",
                          kFormatVersionMajor, ".", minor,
                          ", but the file is version ", impl.versionMajor, ".",
                          impl.versionMinor);
    MOERT_RETURN_IF_ERROR(validateStep(diag, schedule, step,
                                       static_cast<int>(s), schedule.steps[s]));
  }
  for (uint32_t id : schedule.outputs) {
    const TensorInfo &info = schedule.tensors[id];
    if (!info.isWeight && !info.isGraphInput && info.producer < 0)
      return diag.invalid("output '", info.name, "' is produced by no step");
  }
  MOERT_RETURN_IF_ERROR(
      validateCollectives(diag, schedule, impl.target.deviceCount));
  MOERT_RETURN_IF_ERROR(validateArena(diag, schedule));
  MOERT_RETURN_IF_ERROR(
      detail::validateTiers(diag, impl, fbSched, schedule, decode));

  for (uint32_t id : schedule.inputs)
    schedule.inputDescs.push_back(
        describeTensor(impl, *tensors->Get(id), schedule.tensors[id]));
  for (uint32_t id : schedule.outputs)
    schedule.outputDescs.push_back(
        describeTensor(impl, *tensors->Get(id), schedule.tensors[id]));
  return absl::OkStatus();
}

} // namespace moert::detail
