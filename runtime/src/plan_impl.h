//===- plan_impl.h - The validated in-memory form of a plan -----*- C++ -*-===//
//
// What the loader produces: per schedule, decoded tensor and step tables that
// the session executes without re-checking the FlatBuffer. Every index and
// offset in here has been validated against the file.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_PLAN_IMPL_H
#define MOERT_SRC_PLAN_IMPL_H

#include "moert/moert.h"
#include "moert/plan_generated.h"

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
  /// `section`.
  const uint8_t *weightData = nullptr;
  uint32_t section = 0;
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

struct ScheduleInfo {
  std::vector<TensorInfo> tensors;
  std::vector<uint32_t> inputs;
  std::vector<uint32_t> outputs;
  std::vector<StepInfo> steps;
  uint64_t arenaSize = 0;
  std::vector<TensorDesc> inputDescs;
  std::vector<TensorDesc> outputDescs;
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
  uint8_t *ownedCopy = nullptr;

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

  ~Impl();
};

} // namespace moert

#endif // MOERT_SRC_PLAN_IMPL_H
