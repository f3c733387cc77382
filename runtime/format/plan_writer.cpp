//===- plan_writer.cpp - Building moec plan files -------------------------===//
//
// The builder API of moert/format/plan_writer.h: symbols, schedules,
// tensors, weights (referenced, copied, narrowed, quantized, transposed,
// shared), steps and tier requests, recorded in PlanWriter::Impl
// (plan_writer_impl.h); plan_emit.cpp writes the file.
//
//===----------------------------------------------------------------------===//

#include "format/plan_writer_impl.h"

#include "format/plan_stream.h"

#include "format/plan_file.h"
#include "format/tier_assignment.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

namespace moert {

namespace {

int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return -1;
  return n;
}

} // namespace

PlanWriter::PlanWriter(TargetRequirements target, std::string producer)
    : impl_(std::make_unique<Impl>()) {
  impl_->target = target;
  impl_->program.producer = std::move(producer);
  uint32_t devices = target.deviceCount ? target.deviceCount : 1;
  impl_->devices = devices;
  impl_->sources.resize(devices);
  for (uint32_t d = 0; d < devices; ++d) {
    impl_->program.schedules.push_back(std::make_unique<fb::ScheduleT>());
    impl_->scheduleTables.push_back(impl_->program.schedules.back().get());
    impl_->builders.push_back(std::unique_ptr<ScheduleBuilder>(
        new ScheduleBuilder(*this, *impl_->program.schedules.back())));
  }
  if (target.deviceCount == 0)
    impl_->fail(absl::InvalidArgumentError("device count must be at least 1"));
}

PlanWriter::~PlanWriter() = default;

int PlanWriter::addSymbol(std::string name, int64_t min, int64_t max) {
  if (min < 0 || min > max)
    impl_->fail(absl::InvalidArgumentError(absl::StrCat(
        "symbol '", name, "' has an invalid range [", min, ", ", max, "]")));
  auto symbol = std::make_unique<fb::SymbolT>();
  symbol->name = std::move(name);
  symbol->min = min;
  symbol->max = max;
  impl_->program.symbols.push_back(std::move(symbol));
  return static_cast<int>(impl_->program.symbols.size()) - 1;
}

int PlanWriter::addWeightSection(bool paged) {
  impl_->sections.emplace_back();
  impl_->sections.back().paged = paged;
  return static_cast<int>(impl_->sections.size()) - 1;
}

ScheduleBuilder &PlanWriter::schedule(int device) {
  if (device < 0 || static_cast<size_t>(device) >= impl_->builders.size()) {
    impl_->fail(absl::InvalidArgumentError(
        absl::StrCat("schedule ", device, " does not exist")));
    device = 0;
  }
  return *impl_->builders[device];
}

int PlanWriter::numSchedules() const {
  return static_cast<int>(impl_->devices);
}

fb::GenerationT &PlanWriter::generation() {
  if (!impl_->program.generation)
    impl_->program.generation = std::make_unique<fb::GenerationT>();
  return *impl_->program.generation;
}

void PlanWriter::setProvenance(const ProvenanceDesc &provenance) {
  auto table = std::make_unique<fb::ProvenanceT>();
  table->compiler_version = provenance.compilerVersion;
  table->git_commit = provenance.gitCommit;
  table->model_file = provenance.modelFile;
  table->model_sha256 = provenance.modelSha256;
  table->prefill_file = provenance.prefillFile;
  table->prefill_sha256 = provenance.prefillSha256;
  for (const auto &[name, value] : provenance.flags) {
    auto flag = std::make_unique<fb::CompileFlagT>();
    flag->name = name;
    flag->value = value;
    table->flags.push_back(std::move(flag));
  }
  impl_->program.provenance = std::move(table);
}

fb::MultimodalT &PlanWriter::multimodal() {
  generation();
  if (!impl_->program.multimodal)
    impl_->program.multimodal = std::make_unique<fb::MultimodalT>();
  return *impl_->program.multimodal;
}

ScheduleBuilder &PlanWriter::addStage(std::string name, fb::StageRole role,
                                      bool everyDevice) {
  fb::MultimodalT &table = multimodal();
  // A stage's builders follow the device schedules: no prefill schedule
  // takes their slots.
  if (!generation().prefill_schedules.empty())
    impl_->fail(absl::InvalidArgumentError(
        "a multimodal plan has stages, not prefill schedules"));
  auto stage = std::make_unique<fb::StageT>();
  stage->name = std::move(name);
  stage->role = role;
  stage->schedule = std::make_unique<fb::ScheduleT>();
  uint32_t devices = everyDevice ? impl_->devices : 1;
  for (uint32_t d = 1; d < devices; ++d)
    stage->other_device_schedules.push_back(std::make_unique<fb::ScheduleT>());
  std::vector<size_t> &indices = impl_->stageBuilders.emplace_back();
  for (uint32_t d = 0; d < devices; ++d) {
    fb::ScheduleT &table =
        d ? *stage->other_device_schedules[d - 1] : *stage->schedule;
    indices.push_back(impl_->builders.size());
    impl_->scheduleTables.push_back(&table);
    impl_->sources.emplace_back();
    impl_->builders.push_back(
        std::unique_ptr<ScheduleBuilder>(new ScheduleBuilder(*this, table)));
  }
  table.stages.push_back(std::move(stage));
  return *impl_->builders[indices.front()];
}

ScheduleBuilder &PlanWriter::stageSchedule(size_t stage, int device) {
  if (stage >= impl_->stageBuilders.size() || device < 0 ||
      static_cast<size_t>(device) >= impl_->stageBuilders[stage].size()) {
    impl_->fail(absl::InvalidArgumentError(
        absl::StrCat("stage ", stage, " has no schedule of device ", device)));
    return *impl_->builders.front();
  }
  return *impl_->builders[impl_->stageBuilders[stage][device]];
}

ScheduleBuilder &PlanWriter::prefillSchedule(int device) {
  if (impl_->program.multimodal)
    impl_->fail(absl::InvalidArgumentError(
        "a multimodal plan has stages, not prefill schedules"));
  if (device < 0 || static_cast<uint32_t>(device) >= impl_->devices) {
    impl_->fail(absl::InvalidArgumentError(
        absl::StrCat("prefill schedule ", device, " does not exist")));
    device = 0;
  }
  fb::GenerationT &gen = generation();
  // Created in device order on first use; every device gets one.
  while (gen.prefill_schedules.size() <= static_cast<size_t>(device)) {
    gen.prefill_schedules.push_back(std::make_unique<fb::ScheduleT>());
    impl_->scheduleTables.push_back(gen.prefill_schedules.back().get());
    impl_->sources.emplace_back();
    impl_->builders.push_back(std::unique_ptr<ScheduleBuilder>(
        new ScheduleBuilder(*this, *gen.prefill_schedules.back())));
  }
  return *impl_->builders[impl_->devices + device];
}

int ScheduleBuilder::index() const {
  const std::vector<std::unique_ptr<ScheduleBuilder>> &all =
      writer_.impl_->builders;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].get() == this)
      return static_cast<int>(i);
  return -1;
}

int32_t ScheduleBuilder::addTensor(std::string name, DType dtype,
                                   std::vector<PlanDim> dims, uint64_t offset,
                                   uint64_t size) {
  PlanWriter::Impl &w = *writer_.impl_;
  auto tensor = std::make_unique<fb::TensorT>();
  int64_t elements = 1;
  bool overflow = false;
  for (const PlanDim &dim : dims) {
    fb::Dim out;
    switch (dim.kind) {
    case DimDesc::Kind::Static:
      out = fb::Dim(dim.bound, -1, fb::DimKind::Static);
      break;
    case DimDesc::Kind::Dynamic:
      out = fb::Dim(dim.bound, -1, fb::DimKind::Dynamic);
      break;
    case DimDesc::Kind::Symbolic: {
      if (dim.symbolIndex < 0 ||
          static_cast<size_t>(dim.symbolIndex) >= w.program.symbols.size()) {
        w.fail(absl::InvalidArgumentError(absl::StrCat(
            "tensor '", name, "' names unknown symbol ", dim.symbolIndex)));
        break;
      }
      out = fb::Dim(w.program.symbols[dim.symbolIndex]->max, dim.symbolIndex,
                    fb::DimKind::Symbolic);
      break;
    }
    }
    overflow |= out.bound() < 0 ||
                __builtin_mul_overflow(elements, out.bound(), &elements);
    tensor->dims.push_back(out);
  }
  uint64_t bytes = 0;
  overflow |= __builtin_mul_overflow(static_cast<uint64_t>(elements),
                                     dtypeSize(dtype), &bytes);
  if (overflow)
    w.fail(absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has an invalid or huge shape")));
  if (size == kAuto)
    size = bytes;
  if (offset == kAuto) {
    offset = detail::alignTo(autoEnd_, kTensorAlignment);
    autoEnd_ = offset + size;
  } else {
    autoEnd_ = std::max(autoEnd_, offset + size);
  }
  tensor->name = std::move(name);
  tensor->dtype = static_cast<fb::DType>(dtype);
  tensor->storage = fb::Storage::Arena;
  tensor->offset = offset;
  tensor->size = size;
  schedule_.tensors.push_back(std::move(tensor));
  return static_cast<int32_t>(schedule_.tensors.size()) - 1;
}

int32_t ScheduleBuilder::addWeightImpl(std::string name, DType dtype,
                                       std::vector<int64_t> shape,
                                       const void *data, size_t bytes,
                                       int section, bool copy) {
  PlanWriter::Impl &w = *writer_.impl_;
  int64_t elements = elementCount(shape);
  if (elements < 0 || static_cast<uint64_t>(elements) * dtypeSize(dtype) !=
                          static_cast<uint64_t>(bytes))
    w.fail(absl::InvalidArgumentError(absl::StrCat(
        "weight '", name, "' has ", bytes, " bytes, which does not match its ",
        dtypeName(dtype), " shape")));
  if (section < 0) {
    if (w.defaultSection < 0)
      w.defaultSection = writer_.addWeightSection();
    section = w.defaultSection;
  }
  if (static_cast<size_t>(section) >= w.sections.size()) {
    w.fail(absl::InvalidArgumentError(absl::StrCat(
        "weight '", name, "' names unknown weight section ", section)));
    section = 0;
    if (w.sections.empty())
      writer_.addWeightSection();
  }
  auto tensor = std::make_unique<fb::TensorT>();
  for (int64_t d : shape)
    tensor->dims.push_back(fb::Dim(d, -1, fb::DimKind::Static));
  tensor->name = std::move(name);
  tensor->dtype = static_cast<fb::DType>(dtype);
  tensor->storage = fb::Storage::Weight;
  WeightSection &target = w.sections[section];
  uint64_t offset = detail::alignTo(target.size, kTensorAlignment);
  tensor->offset = offset;
  tensor->size = bytes;
  // Section indices in the file count the program section first.
  tensor->section = static_cast<uint32_t>(section) + 1;
  target.size = offset + bytes;
  schedule_.tensors.push_back(std::move(tensor));
  int32_t id = static_cast<int32_t>(schedule_.tensors.size()) - 1;
  int device = index();
  target.weights.push_back({device, id, offset});
  WeightSource &source = w.sources[device][id];
  source.bytes = bytes;
  if (copy) {
    const auto *p = static_cast<const uint8_t *>(data);
    source.copy.assign(p, p + bytes);
  } else {
    source.pieces.push_back({data, bytes});
  }
  return id;
}

int32_t ScheduleBuilder::addWeightPieces(std::string name, DType dtype,
                                         std::vector<int64_t> shape,
                                         std::vector<WeightPiece> pieces,
                                         int section) {
  size_t bytes = 0;
  for (const WeightPiece &piece : pieces)
    bytes += piece.bytes;
  int32_t id = addWeightImpl(std::move(name), dtype, std::move(shape), nullptr,
                             bytes, section, /*copy=*/false);
  int device = index();
  writer_.impl_->sources[device][id].pieces = std::move(pieces);
  return id;
}

int32_t ScheduleBuilder::addNarrowedWeightPieces(
    std::string name, DType dtype, std::vector<int64_t> shape,
    std::vector<WeightPiece> pieces, int section) {
  PlanWriter::Impl &w = *writer_.impl_;
  if (dtype != DType::F16 && dtype != DType::BF16)
    w.fail(absl::InvalidArgumentError(
        absl::StrCat("weight '", name, "' can be narrowed to f16 or bf16, not ",
                     dtypeName(dtype))));
  size_t bytes = 0;
  for (const WeightPiece &piece : pieces) {
    if (piece.bytes % sizeof(float) != 0)
      w.fail(absl::InvalidArgumentError(
          absl::StrCat("weight '", name, "' has a piece of ", piece.bytes,
                       " bytes, which are not f32 values")));
    bytes += piece.bytes / sizeof(float) * sizeof(uint16_t);
  }
  int32_t id = addWeightImpl(std::move(name), dtype, std::move(shape), nullptr,
                             bytes, section, /*copy=*/false);
  int device = index();
  WeightSource &source = w.sources[device][id];
  source.pieces = std::move(pieces);
  source.narrowTo = dtype;
  return id;
}

int32_t ScheduleBuilder::addQuantizedWeightPieces(
    std::string name, std::vector<int64_t> shape,
    std::vector<WeightPiece> pieces, int channelDim, int32_t &scales,
    int section) {
  PlanWriter::Impl &w = *writer_.impl_;
  scales = -1;
  auto refuse = [&](std::string why) {
    w.fail(absl::InvalidArgumentError(absl::StrCat(
        "weight '", name, "' cannot be quantized to int8: ", why)));
    return -1;
  };
  if ((shape.size() != 2 && shape.size() != 3) ||
      (channelDim != 1 && channelDim != 2))
    return refuse("int8 weights are [E, rows, cols] or [rows, cols] with "
                  "channels along the rows (1) or the columns (2)");
  // A [rows, cols] matrix is one expert's.
  bool matrix = shape.size() == 2;
  Quantization quantization;
  quantization.rows = shape[shape.size() - 2];
  quantization.cols = shape[shape.size() - 1];
  quantization.channelDim = channelDim;
  int64_t total = elementCount(shape);
  if (total <= 0)
    return refuse("it has no elements");
  int64_t experts = matrix ? 1 : shape[0];
  std::vector<float> maxAbs(experts * quantization.channels(), 0.0f);
  int64_t element = 0;
  for (const WeightPiece &piece : pieces) {
    if (piece.bytes % sizeof(float) != 0)
      return refuse(absl::StrCat("a piece of ", piece.bytes,
                                 " bytes does not hold f32 values"));
    int64_t count = piece.bytes / sizeof(float);
    if (element + count > total)
      return refuse("its pieces hold more values than its shape");
    const auto *bytes = static_cast<const uint8_t *>(piece.data);
    Quantization::Walk walk(quantization, element);
    for (int64_t i = 0; piece.data && i < count; ++i, walk.next()) {
      float value;
      std::memcpy(&value, bytes + i * sizeof(float), sizeof value);
      if (!std::isfinite(value))
        return refuse(absl::StrCat("element ", element + i, " is ", value));
      float &m = maxAbs[walk.channel()];
      m = std::max(m, std::fabs(value));
    }
    // The pieces are read again when the plan is written: a mapped model's
    // pages need not stay until then.
    if (piece.data)
      detail::releasePages(piece.data, piece.bytes);
    element += count;
  }
  if (element != total)
    return refuse("its pieces hold fewer values than its shape");
  quantization.scales.resize(maxAbs.size());
  for (size_t c = 0; c < maxAbs.size(); ++c)
    quantization.scales[c] = maxAbs[c] / 127.0f;
  int32_t id = addWeightImpl(name, DType::I8, shape, nullptr, total, section,
                             /*copy=*/false);
  int device = 0;
  while (w.builders[device].get() != this)
    ++device;
  WeightSource &source = w.sources[device][id];
  source.pieces = std::move(pieces);
  source.narrowTo = DType::I8;
  std::vector<int64_t> scaleShape = {experts, quantization.channels()};
  if (matrix)
    scaleShape.erase(scaleShape.begin());
  scales = addWeight(name + ".scales", DType::F32, scaleShape,
                     quantization.scales.data(),
                     quantization.scales.size() * sizeof(float), section);
  w.sources[device][id].quantization = std::move(quantization);
  return id;
}

void ScheduleBuilder::transposeExpertMatrices(int32_t id) {
  PlanWriter::Impl &w = *writer_.impl_;
  int device = index();
  auto it = w.sources[device].find(id);
  fb::TensorT &t = tensor(id);
  auto refuse = [&](const char *why) {
    w.fail(absl::InvalidArgumentError(absl::StrCat(
        "weight '", t.name, "' cannot be written transposed: ", why)));
  };
  if (it == w.sources[device].end() || it->second.pieces.empty())
    return refuse("it is not a weight of f32 pieces");
  WeightSource &source = it->second;
  if ((t.dims.size() != 2 && t.dims.size() != 3) || source.transposeRows)
    return refuse("it is not [E, rows, cols] or [rows, cols], or is "
                  "transposed already");
  for (const WeightPiece &piece : source.pieces)
    if (piece.bytes % sizeof(float))
      return refuse("a piece does not hold f32 values");
  size_t rows = t.dims.size() - 2;
  source.transposeRows = t.dims[rows].bound();
  source.transposeCols = t.dims[rows + 1].bound();
  std::swap(t.dims[rows], t.dims[rows + 1]);
  // int8: the scales, [E, channels], stay; the channels move to the other
  // dimension of the written matrices.
  if (source.narrowTo == DType::I8) {
    std::swap(source.quantization.rows, source.quantization.cols);
    source.quantization.channelDim = 3 - source.quantization.channelDim;
  }
}

int32_t ScheduleBuilder::addWeight(std::string name, DType dtype,
                                   std::vector<int64_t> shape, const void *data,
                                   size_t bytes, int section) {
  return addWeightImpl(std::move(name), dtype, std::move(shape), data, bytes,
                       section, /*copy=*/true);
}

int32_t ScheduleBuilder::addWeightRef(std::string name, DType dtype,
                                      std::vector<int64_t> shape,
                                      const void *data, size_t bytes,
                                      int section) {
  return addWeightImpl(std::move(name), dtype, std::move(shape), data, bytes,
                       section, /*copy=*/false);
}

int32_t ScheduleBuilder::addSharedWeight(std::string name, int ownerDevice,
                                         int32_t ownerTensor) {
  PlanWriter::Impl &w = *writer_.impl_;
  auto tensor = std::make_unique<fb::TensorT>();
  tensor->name = std::move(name);
  if (ownerDevice < 0 || static_cast<size_t>(ownerDevice) >= w.builders.size())
    w.fail(absl::InvalidArgumentError(
        absl::StrCat("shared weight '", tensor->name, "' names schedule ",
                     ownerDevice, ", which does not exist")));
  else if (!w.sources[ownerDevice].count(ownerTensor))
    w.fail(absl::InvalidArgumentError(absl::StrCat(
        "shared weight '", tensor->name, "' names tensor ", ownerTensor,
        " of schedule ", ownerDevice, ", which is not a weight")));
  else {
    // Only the entry is copied; the section placement stays the owner's, so
    // the bytes are written once.
    const fb::TensorT &owner =
        *w.scheduleTables[ownerDevice]->tensors[ownerTensor];
    tensor->dtype = owner.dtype;
    tensor->dims = owner.dims;
    tensor->storage = fb::Storage::Weight;
    tensor->offset = owner.offset;
    tensor->size = owner.size;
    tensor->section = owner.section;
  }
  schedule_.tensors.push_back(std::move(tensor));
  return static_cast<int32_t>(schedule_.tensors.size()) - 1;
}

fb::TensorT &ScheduleBuilder::tensor(int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= schedule_.tensors.size()) {
    writer_.impl_->fail(absl::InvalidArgumentError(
        absl::StrCat("tensor id ", id, " does not exist")));
    static fb::TensorT scratch;
    scratch = fb::TensorT();
    return scratch;
  }
  return *schedule_.tensors[id];
}

size_t ScheduleBuilder::numTensors() const { return schedule_.tensors.size(); }

void ScheduleBuilder::addInput(int32_t id) {
  tensor(id);
  schedule_.inputs.push_back(static_cast<uint32_t>(id));
}

void ScheduleBuilder::addOutput(int32_t id) {
  tensor(id);
  schedule_.outputs.push_back(static_cast<uint32_t>(id));
}

void ScheduleBuilder::setValueRange(int32_t id, int64_t lo, int64_t hi) {
  tensor(id).value_range = std::make_unique<fb::ValueRange>(lo, hi);
}

int ScheduleBuilder::addStep(fb::OpKind op, std::string name,
                             std::vector<int32_t> inputs,
                             std::vector<int32_t> outputs,
                             fb::AttrsUnion attrs) {
  auto step = std::make_unique<fb::StepT>();
  step->op = op;
  step->name = std::move(name);
  step->inputs = std::move(inputs);
  step->outputs = std::move(outputs);
  step->attrs = std::move(attrs);
  schedule_.steps.push_back(std::move(step));
  return static_cast<int>(schedule_.steps.size()) - 1;
}

fb::StepT &ScheduleBuilder::step(int index) {
  if (index < 0 || static_cast<size_t>(index) >= schedule_.steps.size()) {
    writer_.impl_->fail(absl::InvalidArgumentError(
        absl::StrCat("step ", index, " does not exist")));
    // A placeholder keeps the caller's reference valid until `write` fails.
    static fb::StepT scratch;
    scratch = fb::StepT();
    return scratch;
  }
  return *schedule_.steps[index];
}

size_t ScheduleBuilder::numSteps() const { return schedule_.steps.size(); }

void PlanWriter::setCudaModule(uint32_t arch, std::string ptx,
                               std::vector<std::string> kernels) {
  if (ptx.empty() || ptx.find('\0') != std::string::npos)
    impl_->fail(absl::InvalidArgumentError(
        "the CUDA module's PTX must be non-empty text without NUL bytes"));
  impl_->target.backend = Backend::Cuda;
  impl_->target.cudaArch = arch;
  auto module = std::make_unique<fb::CudaModuleT>();
  module->arch = arch;
  module->ptx = std::move(ptx);
  module->kernels = std::move(kernels);
  impl_->program.cuda_module = std::move(module);
}

void ScheduleBuilder::setExpertTiers(uint64_t budget,
                                     std::vector<TierLayer> layers,
                                     fb::TierPrefetch prefetch) {
  PlanWriter::Impl &w = *writer_.impl_;
  size_t at = static_cast<size_t>(index());
  if (w.tierRequests.size() <= at)
    w.tierRequests.resize(at + 1);
  w.tierRequests[at] = {true, budget, std::move(layers), prefetch};
}

absl::Status PlanWriter::Impl::assignTiers() {
  tierCrcs.assign(builders.size(), {});
  pagedWeights.assign(builders.size(), {});
  for (size_t b = 0; b < tierRequests.size(); ++b) {
    const TierRequest &request = tierRequests[b];
    if (!request.set)
      continue;
    fb::ScheduleT &table = *scheduleTables[b];
    auto fail = [&](const auto &...args) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule ", b, ": expert tiers: ", args...));
    };
    if (b >= devices)
      return fail("only device schedules are tiered");
    if (request.layers.empty())
      return fail("no layers to tier");
    auto isPaged = [&](const fb::TensorT &t) {
      return t.storage == fb::Storage::Weight && t.section >= 1 &&
             t.section - 1 < sections.size() && sections[t.section - 1].paged;
    };
    std::vector<detail::TierLayerShape> shapes;
    std::vector<std::vector<double>> loads;
    std::vector<std::vector<uint32_t>> &crcs = tierCrcs[b];
    std::set<int> steps;
    for (size_t l = 0; l < request.layers.size(); ++l) {
      const ScheduleBuilder::TierLayer &layer = request.layers[l];
      if (layer.step < 0 ||
          static_cast<size_t>(layer.step) >= table.steps.size() ||
          table.steps[layer.step]->op != fb::OpKind::Experts ||
          !steps.insert(layer.step).second)
        return fail("layer ", l, " names step ", layer.step,
                    ", which is no Experts step (or is named twice)");
      const fb::StepT &step = *table.steps[layer.step];
      if (step.inputs.size() < 3 || step.inputs[2] < 0 ||
          static_cast<size_t>(step.inputs[2]) >= table.tensors.size())
        return fail("step ", layer.step, " has no w1");
      const fb::TensorT &w1 = *table.tensors[step.inputs[2]];
      if (w1.dims.empty() || w1.dims[0].bound() <= 0)
        return fail("step ", layer.step, "'s w1 has no experts");
      uint64_t experts = static_cast<uint64_t>(w1.dims[0].bound());
      std::vector<size_t> paged;
      for (size_t i = 2; i < step.inputs.size(); ++i) {
        int32_t id = step.inputs[i];
        if (id >= 0 && static_cast<size_t>(id) < table.tensors.size() &&
            isPaged(*table.tensors[id]))
          paged.push_back(i);
      }
      if (paged.empty())
        return fail("step ", layer.step, " has no weights in a paged section");
      // A later micro-batch's step reads the same paged weights, at the
      // same inputs, and no others.
      for (int more : layer.moreSteps) {
        if (more < 0 || static_cast<size_t>(more) >= table.steps.size() ||
            table.steps[more]->op != fb::OpKind::Experts ||
            !steps.insert(more).second)
          return fail("layer ", l, " names step ", more,
                      ", which is no Experts step (or is named twice)");
        const fb::StepT &other = *table.steps[more];
        for (size_t i = 2;
             i < std::max(step.inputs.size(), other.inputs.size()); ++i) {
          int32_t a = i < step.inputs.size() ? step.inputs[i] : -1;
          int32_t b = i < other.inputs.size() ? other.inputs[i] : -1;
          bool aPaged = std::find(paged.begin(), paged.end(), i) != paged.end();
          bool bPaged = b >= 0 &&
                        static_cast<size_t>(b) < table.tensors.size() &&
                        isPaged(*table.tensors[b]);
          if ((aPaged || bPaged) && a != b)
            return fail("step ", more, " of layer ", l, " does not read step ",
                        layer.step, "'s paged weights at the same inputs");
        }
      }
      uint64_t expertBytes = 0;
      for (size_t p = 0; p < paged.size(); ++p) {
        int32_t id = step.inputs[paged[p]];
        const fb::TensorT &t = *table.tensors[id];
        if (t.dims.empty() ||
            t.dims[0].bound() != static_cast<int64_t>(experts) ||
            t.size % experts)
          return fail("paged weight '", t.name, "' of step ", layer.step,
                      " does not have the step's ", experts, " experts first");
        if (!sources[b].count(id) || pagedWeights[b].count(id))
          return fail("paged weight '", t.name,
                      "' is shared with another step or schedule");
        pagedWeights[b][id] = {l, p, paged.size(), t.size / experts};
        expertBytes += t.size / experts;
      }
      if (layer.loads.size() && layer.loads.size() != experts)
        return fail("layer ", l, " has ", layer.loads.size(), " loads for its ",
                    experts, " experts");
      shapes.push_back({static_cast<uint32_t>(experts), expertBytes});
      loads.push_back(layer.loads);
      crcs.emplace_back(experts * paged.size(), 0);
    }
    // Resident: the schedule's weights outside paged sections, each range
    // of bytes once; a generation plan's device holds its prefill
    // schedule's too, which pages the same experts.
    std::set<std::pair<uint32_t, uint64_t>> seen;
    uint64_t resident = 0;
    uint32_t topK = 0;
    std::vector<const fb::ScheduleT *> holders{&table};
    if (program.generation && b < program.generation->prefill_schedules.size())
      holders.push_back(program.generation->prefill_schedules[b].get());
    for (const fb::ScheduleT *holder : holders)
      for (const auto &t : holder->tensors)
        if (t->storage == fb::Storage::Weight && !isPaged(*t) &&
            seen.insert({t->section, t->offset}).second)
          resident += t->size;
    for (const auto &step : table.steps)
      if (const fb::RouterAttrsT *router = step->attrs.AsRouterAttrs())
        topK = std::max<uint32_t>(topK, static_cast<uint32_t>(router->top_k));
    std::vector<std::vector<uint32_t>> ranks =
        detail::rankExperts(shapes, loads);
    uint64_t window = detail::coldWindow(shapes, topK ? topK : 2);
    // Reading a layer ahead wants room for a second layer's experts beside
    // the computing one's: fewer hot experts where the budget allows it, as
    // the runtime re-tiers a plan read ahead that was not tiered for it.
    absl::StatusOr<detail::TierAssignment> assignment =
        request.prefetch != fb::TierPrefetch::None
            ? detail::assignTiers(request.budget, resident, shapes, ranks,
                                  2 * window)
            : absl::StatusOr<detail::TierAssignment>(absl::UnknownError(""));
    if (!assignment.ok())
      assignment =
          detail::assignTiers(request.budget, resident, shapes, ranks, window);
    if (!assignment.ok())
      return fail(assignment.status().message());
    if (static_cast<uint8_t>(request.prefetch) >
        static_cast<uint8_t>(fb::TierPrefetch::MAX))
      return fail("prefetch ", static_cast<int>(request.prefetch),
                  " is no TierPrefetch");
    auto tiers = std::make_unique<fb::ExpertTiersT>();
    tiers->budget = request.budget;
    tiers->hot_count = assignment->hotCount;
    tiers->prefetch = request.prefetch;
    for (size_t l = 0; l < request.layers.size(); ++l) {
      auto layer = std::make_unique<fb::TierLayerT>();
      layer->step = static_cast<uint32_t>(request.layers[l].step);
      for (int more : request.layers[l].moreSteps)
        layer->more_steps.push_back(static_cast<uint32_t>(more));
      layer->rank = ranks[l];
      layer->crc = crcs[l]; // Zeros until the weights are written.
      tiers->layers.push_back(std::move(layer));
    }
    table.tiers = std::move(tiers);
  }
  return absl::OkStatus();
}

void ScheduleBuilder::setArenaSize(uint64_t bytes) {
  arenaSize_ = bytes;
  arenaSizeSet_ = true;
}

} // namespace moert
