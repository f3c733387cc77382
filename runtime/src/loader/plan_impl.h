//===- plan_impl.h - The validated in-memory form of a plan -----*- C++ -*-===//
//
// What the loader produces: per schedule, decoded tensor and step tables that
// the session executes without re-checking the FlatBuffer. Every index and
// offset in here has been validated against the file.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_PLAN_IMPL_H
#define MOERT_SRC_PLAN_IMPL_H

#include "format/format.h"
#include "format/plan_generated.h"
#include "moert/moert.h"

#include "absl/strings/string_view.h"
#include <string>
#include <vector>

namespace moert::detail {

struct OpDef;

struct DimInfo {
  int64_t bound = 0;
  fb::DimKind kind = fb::DimKind::Static;
  int32_t symbol = -1;
};

struct TensorInfo {
  absl::string_view name;
  DType dtype = DType::F32;
  int rank = 0;
  DimInfo dims[kMaxRank];
  bool isWeight = false;
  /// Arena offset (arena tensors).
  uint64_t offset = 0;
  /// Planned maximum bytes (arena) or exact bytes (weights).
  uint64_t size = 0;
  /// The bytes of a weight inside the loaded file, in weight section
  /// `section`; null for a weight in a paged section (tiered plans), which
  /// is never mapped: its bytes lie at `fileOffset` of the file.
  const uint8_t *weightData = nullptr;
  uint32_t section = 0;
  bool paged = false;
  uint64_t fileOffset = 0;
  bool isGraphInput = false;
  bool isGraphOutput = false;
  /// Index of the producing step; -1 for graph inputs and weights.
  int32_t producer = -1;
  /// Index of the last step reading the tensor; -1 when none does.
  int32_t lastUse = -1;
};

struct StepInfo {
  const fb::Step *fb = nullptr;
  fb::OpKind op = fb::OpKind::Invalid;
  const OpDef *def = nullptr;
  int index = 0;
  absl::string_view name;
  /// Tensor ids; -1 for an omitted optional input.
  std::vector<int32_t> inputs;
  std::vector<int32_t> outputs;
  /// "step 3 'mlp/up' (MatMul)", the prefix of every diagnostic.
  std::string label;
  /// AllToAllWait: the index of its AllToAllStart step.
  int32_t pairedStep = -1;
};

/// Describes a declared shape for diagnostics: "[4, <=128]".
std::string describeDims(const TensorInfo &info);

/// A paged weight input of a tiered layer: expert e's bytes are
/// [fileOffset + e * expertBytes, +expertBytes) of the file.
struct PagedInput {
  /// The input's position among the Experts step's inputs, and its tensor.
  int input = 0;
  int32_t tensor = -1;
  uint32_t section = 0;
  uint64_t fileOffset = 0;
  uint64_t expertBytes = 0;
};

/// One tiered MoE layer (an Experts step with paged inputs), validated.
struct TierLayerInfo {
  int32_t step = -1;
  /// The layer's other Experts steps (later micro-batches; format 1.7),
  /// reading the same paged tensors at the same inputs.
  std::vector<int32_t> moreSteps;
  uint32_t experts = 0;
  std::vector<PagedInput> inputs;
  /// The sum of the inputs' expertBytes.
  uint64_t expertBytes = 0;
  /// Per expert its rank; per expert and input its CRC-32 (expert-major).
  std::vector<uint32_t> rank;
  std::vector<uint32_t> crc;
};

/// A schedule's expert tiers (`Schedule.tiers`, format 1.5).
struct TierInfo {
  bool present = false;
  uint64_t budget = 0;
  uint32_t hotCount = 0;
  uint32_t totalExperts = 0;
  std::vector<TierLayerInfo> layers;
  /// Per step: its index in `layers`, or -1.
  std::vector<int32_t> layerOfStep;
  /// The schedule's weights outside paged sections (each range once).
  uint64_t residentBytes = 0;
  /// The largest top_k of the schedule's Router steps (2 when none).
  uint32_t topK = 2;
  /// The plan's read-ahead policy (format 1.8), sessions' default.
  fb::TierPrefetch prefetch = fb::TierPrefetch::None;
};

struct ScheduleInfo {
  std::vector<TensorInfo> tensors;
  std::vector<uint32_t> inputs;
  std::vector<uint32_t> outputs;
  std::vector<StepInfo> steps;
  uint64_t arenaSize = 0;
  std::vector<TensorDesc> inputDescs;
  std::vector<TensorDesc> outputDescs;
  TierInfo tiers;
};

} // namespace moert::detail

namespace moert {

struct Plan::Impl {
  /// The file path, or "<memory>": the prefix of load diagnostics.
  std::string source;
  /// The plan bytes: an mmapped file or an owned aligned copy.
  const uint8_t *data = nullptr;
  size_t size = 0;
  void *mapping = nullptr;
  size_t mappingSize = 0;
  /// Whether `mapping` is an anonymous copy in huge pages (LoadOptions::
  /// weightPages), not the file's mapping.
  bool onHugePages = false;
  uint8_t *ownedCopy = nullptr;
  /// The mapped bytes [0, mappedSize) of `data`: the whole file, or (a
  /// tiered plan) up to its first paged section, whose bytes readBytes
  /// reads from `fd` (-1 for a plan in memory: then all of `data`).
  size_t mappedSize = 0;
  int fd = -1;

  /// Reads `size` bytes at `offset` of the plan (inside it) into `out`.
  absl::Status readBytes(uint64_t offset, void *out, size_t size) const;

  TargetRequirements target;
  uint16_t versionMajor = 0;
  uint16_t versionMinor = 0;
  std::string producer;
  ProvenanceDesc provenance;
  std::vector<SymbolDesc> symbols;
  std::vector<detail::ScheduleInfo> schedules;
  /// Generation plans: the prefill schedule of each device (or none) and
  /// the cache pairs.
  std::vector<detail::ScheduleInfo> prefillSchedules;
  bool isGeneration = false;
  GenerationDesc generation;
  /// Multimodal plans (format 1.16): each stage's schedule, in stage order
  /// (an expert-parallel plan's Prefill stage: device 0's).
  std::vector<detail::ScheduleInfo> stageSchedules;
  /// An expert-parallel multimodal plan (1.27): its Prefill stage's
  /// schedules of devices 1 to N-1.
  std::vector<detail::ScheduleInfo> prefillStageSchedules;
  /// The schedule of multimodal stage `stage` that device `device` runs.
  const detail::ScheduleInfo &stageSchedule(size_t stage, int device) const {
    return device > 0 && static_cast<int>(stage) == multimodal.prefillStage
               ? prefillStageSchedules[device - 1]
               : stageSchedules[stage];
  }
  /// The schedule of `device`, or with `prompt` what runs a prompt there:
  /// its prefill schedule or a multimodal plan's Prefill stage. Null for no
  /// such device or prompt schedule.
  const detail::ScheduleInfo *deviceSchedule(int device, bool prompt) const {
    if (device < 0 || static_cast<size_t>(device) >= schedules.size())
      return nullptr;
    if (!prompt)
      return &schedules[device];
    if (isMultimodal)
      return &stageSchedule(multimodal.prefillStage, device);
    return prefillSchedules.empty() ? nullptr : &prefillSchedules[device];
  }
  bool isMultimodal = false;
  MultimodalDesc multimodal;

  ~Impl();
};

} // namespace moert

#endif // MOERT_SRC_PLAN_IMPL_H
