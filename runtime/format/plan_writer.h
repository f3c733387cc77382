//===- plan_writer.h - Building moec plan files -----------------*- C++ -*-===//
//
// The plan writer (library `moert_plan_writer`, pure C++, no LLVM): what the
// compiler's plan emission and the runtime's tests use to write plan files.
// It lays out the header, section table, program FlatBuffer and 4096-aligned
// weight sections, and computes every checksum. Typical use:
//
//   moert::PlanWriter writer({moert::Backend::Cpu, /*deviceCount=*/1});
//   int tokens = writer.addSymbol("T", 1, 512);
//   moert::ScheduleBuilder &s = writer.schedule(0);
//   int32_t x = s.addTensor("x", moert::DType::F32,
//                           {moert::PlanDim::symbol(tokens), 64});
//   int32_t w = s.addWeightRef("w", moert::DType::F32, {64, 64}, data, bytes);
//   int32_t y = s.addTensor("y", moert::DType::F32,
//                           {moert::PlanDim::symbol(tokens), 64});
//   s.addInput(x);
//   s.addStep(moert::fb::OpKind::MatMul, "proj", {x, w}, {y});
//   s.addOutput(y);
//   MOERT_RETURN_IF_ERROR(writer.write("plan.bin"));
//
// Attributes are the FlatBuffers object-API tables of runtime/format/plan.fbs
// (moert::fb::GemmAttrsT, ...), passed through `moert::attrs(...)`. The
// writer records the first misuse (bad symbol, weight size mismatch, ...) and
// reports it from `write`; the loader validates everything else.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_PLAN_WRITER_H
#define MOERT_PLAN_WRITER_H

#include "format/format.h"
#include "format/plan_generated.h"
#include "moert/moert.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moert {

/// A dimension as written into a plan.
struct PlanDim {
  DimDesc::Kind kind = DimDesc::Kind::Static;
  /// The size (Static) or largest size (Dynamic); filled in from the symbol's
  /// max for Symbolic.
  int64_t bound = 0;
  int symbolIndex = -1;

  PlanDim(int64_t size) : bound(size) {}
  static PlanDim symbol(int index) {
    PlanDim dim(0);
    dim.kind = DimDesc::Kind::Symbolic;
    dim.symbolIndex = index;
    return dim;
  }
  static PlanDim dynamic(int64_t bound) {
    PlanDim dim(bound);
    dim.kind = DimDesc::Kind::Dynamic;
    return dim;
  }
};

/// A part of a weight's bytes, referenced until the plan is written; null
/// `data` stands for `bytes` zero bytes.
struct WeightPiece {
  const void *data = nullptr;
  size_t bytes = 0;
};

/// Wraps an object-API attribute table (fb::AxisAttrsT, ...) for `addStep`.
template <typename T> fb::AttrsUnion attrs(T table) {
  fb::AttrsUnion u;
  u.Set(std::move(table));
  return u;
}

class PlanWriter;

/// Builds the schedule of one device.
class ScheduleBuilder {
public:
  /// Lets `addTensor` choose: offset after every earlier arena tensor (no
  /// reuse), size of the bounded shape.
  static constexpr uint64_t kAuto = ~uint64_t{0};

  /// Adds an arena tensor and returns its id. Explicit offsets and sizes are
  /// the compiler's memory plan; the loader checks that live tensors never
  /// share bytes.
  int32_t addTensor(std::string name, DType dtype, std::vector<PlanDim> dims,
                    uint64_t offset = kAuto, uint64_t size = kAuto);
  /// Adds a weight, copying `bytes` bytes from `data` into weight section
  /// `section` (-1: the default section, created on first use).
  int32_t addWeight(std::string name, DType dtype, std::vector<int64_t> shape,
                    const void *data, size_t bytes, int section = -1);
  /// Like addWeight without a copy: `data` is read by `write`/`serialize`
  /// and must stay valid until then (a memory-mapped model file, say).
  int32_t addWeightRef(std::string name, DType dtype,
                       std::vector<int64_t> shape, const void *data,
                       size_t bytes, int section = -1);
  /// Like addWeightRef for a weight whose bytes are `pieces` concatenated
  /// (per-expert weights stacked into one), gathered while writing.
  int32_t addWeightPieces(std::string name, DType dtype,
                          std::vector<int64_t> shape,
                          std::vector<WeightPiece> pieces, int section = -1);
  /// Like addWeightPieces for a weight stored as `dtype` (F16 or BF16) whose
  /// `pieces` hold f32 values (a piece's `bytes` counts f32 bytes): each
  /// value is rounded to nearest even while the plan is written, a few
  /// kilobytes at a time, so no converted copy of the weight is ever held.
  int32_t addNarrowedWeightPieces(std::string name, DType dtype,
                                  std::vector<int64_t> shape,
                                  std::vector<WeightPiece> pieces,
                                  int section = -1);
  /// Like addNarrowedWeightPieces for int8 storage (`moec compile
  /// --weight-dtype int8`): `shape` is [E, rows, cols] (or [rows, cols], one
  /// matrix), and the output channels of each expert's matrix lie along its
  /// rows (`channelDim` 1, an [out, in] matrix) or columns (2, [in, out]).
  /// Each channel is
  /// quantized symmetrically, scale = max |w| / 127 and q = w / scale rounded
  /// to nearest even, clamped to [-127, 127] (all zeros: scale 0). The scales
  /// are computed here (one pass over the pieces) and added as the f32
  /// weight `scales` ([E, channels], or [channels] for one matrix, named
  /// NAME.scales); the int8 values are
  /// converted while the plan is written. Non-finite values fail the writer.
  int32_t addQuantizedWeightPieces(std::string name, std::vector<int64_t> shape,
                                   std::vector<WeightPiece> pieces,
                                   int channelDim, int32_t &scales,
                                   int section = -1);
  /// Makes weight `id` (added from f32 pieces holding [E, rows, cols]
  /// matrices or one [rows, cols] matrix, as they are or narrowed or
  /// quantized) be written with each matrix transposed: its shape becomes
  /// [E, cols, rows] or [cols, rows] (an int8 weight's scales stay, its
  /// channels now along the other dimension). Lets the compiler store [in,
  /// out] matrices as [out, in], the layout whose column blocks are
  /// contiguous.
  void transposeExpertMatrices(int32_t id);
  /// Adds a weight that is the weight `ownerTensor` of schedule
  /// `ownerDevice`'s (a schedule index(): N + d is device d's prefill
  /// schedule in a plan of N devices): both tensor entries name the same
  /// bytes, which the file holds once (a dense weight that every device of a
  /// multi-device plan reads, a weight the prefill and decode schedules of a
  /// generation plan share). `name` may differ from the owner's.
  int32_t addSharedWeight(std::string name, int ownerDevice,
                          int32_t ownerTensor);
  /// Declares graph inputs and outputs, in signature order.
  void addInput(int32_t tensor);
  void addOutput(int32_t tensor);
  /// Advises tools that generate integer values for `tensor` (a graph input)
  /// to draw them from [lo, hi), e.g. [0, vocab) for token ids.
  void setValueRange(int32_t tensor, int64_t lo, int64_t hi);
  /// Appends a step; -1 in `inputs` omits an optional input. Returns its index.
  int addStep(fb::OpKind op, std::string name, std::vector<int32_t> inputs,
              std::vector<int32_t> outputs, fb::AttrsUnion attrs = {});
  /// Sets the arena size; by default the end of the last arena tensor.
  void setArenaSize(uint64_t bytes);

  /// One MoE layer to tier: an Experts step whose weight inputs lie in paged
  /// weight sections (addWeightSection(true)), with each expert's expected
  /// load (a routing profile's tokens; empty: the experts' index order).
  struct TierLayer {
    int step = -1;
    std::vector<double> loads;
    /// The layer's other Experts steps (later micro-batches), reading the
    /// same paged weights at the same inputs (format 1.7).
    std::vector<int> moreSteps = {};
  };
  /// Makes the schedule tiered (format 1.5, docs/tiered-experts.md): its
  /// experts are ranked by load and the hottest that fit in `budget` bytes
  /// (with the resident weights, the arena and the cold experts' cache)
  /// are hot. Each expert's checksum per paged input is computed while the
  /// plan is written. Call after the steps are added; the assignment's
  /// errors (a budget too small, a layer that is no tiered Experts step)
  /// are reported by `write`. `prefetch` is the sessions' read-ahead policy
  /// unless they choose one (format 1.8); with one, the cold cache keeps
  /// room for a second layer's experts where the budget allows.
  void setExpertTiers(uint64_t budget, std::vector<TierLayer> layers,
                      fb::TierPrefetch prefetch = fb::TierPrefetch::None);

  /// The tensor table entry (object API), for edits the helpers lack.
  fb::TensorT &tensor(int32_t id);
  size_t numTensors() const;
  /// The step entry `index` (object API), e.g. to name its CUDA kernel.
  fb::StepT &step(int index);
  size_t numSteps() const;
  /// This schedule's index for addSharedWeight: its device for a device
  /// schedule, the device count plus its device for a prefill schedule, the
  /// device count plus its stage for a multimodal stage's.
  int index() const;

private:
  friend class PlanWriter;
  ScheduleBuilder(PlanWriter &writer, fb::ScheduleT &schedule)
      : writer_(writer), schedule_(schedule) {}
  int32_t addWeightImpl(std::string name, DType dtype,
                        std::vector<int64_t> shape, const void *data,
                        size_t bytes, int section, bool copy);

  PlanWriter &writer_;
  fb::ScheduleT &schedule_;
  uint64_t autoEnd_ = 0;
  uint64_t arenaSize_ = 0;
  bool arenaSizeSet_ = false;
};

class PlanWriter {
public:
  explicit PlanWriter(TargetRequirements target = {},
                      std::string producer = "moert");
  ~PlanWriter();
  PlanWriter(const PlanWriter &) = delete;
  PlanWriter &operator=(const PlanWriter &) = delete;

  /// Declares a symbolic dimension size in [min, max]; returns its index.
  int addSymbol(std::string name, int64_t min, int64_t max);
  /// Adds a weight section (e.g. one shard per device); returns its index
  /// for `addWeight`. A `paged` section (the expert weights of a tiered
  /// schedule, setExpertTiers) is written after every other section, and
  /// the runtime reads it per expert instead of mapping it.
  int addWeightSection(bool paged = false);
  /// The schedule of `device` (< target.deviceCount).
  ScheduleBuilder &schedule(int device = 0);
  /// The number of schedules (the target's device count).
  int numSchedules() const;
  /// Makes the plan a generation plan (format 1.3, docs/plan-format.md):
  /// its cache pairs, names and max_seq are the caller's to fill in.
  fb::GenerationT &generation();
  /// The prefill schedule of `device` in a generation plan (created, with
  /// those of the lower devices, on first use).
  ScheduleBuilder &prefillSchedule(int device = 0);
  /// Makes the generation plan multimodal (format 1.17, docs/plan-format.md
  /// "Multimodal plans"): the caller fills in the table's names and feeds.
  fb::MultimodalT &multimodal();
  /// Appends a stage to the multimodal table and returns its schedule's
  /// builder (device 0's; a multimodal plan has no prefill schedules). With
  /// `everyDevice` (the Prefill stage of an expert-parallel plan), the stage
  /// has one schedule per device (stageSchedule).
  ScheduleBuilder &addStage(std::string name, fb::StageRole role,
                            bool everyDevice = false);
  /// The schedule of `device` of multimodal stage `stage` (addStage's).
  ScheduleBuilder &stageSchedule(size_t stage, int device);
  /// Records where the plan came from (the plan's provenance table; the
  /// loader checks what moec inspect later prints).
  void setProvenance(const ProvenanceDesc &provenance);
  /// Makes the plan a CUDA plan for compute capability `arch` (90: sm_90)
  /// that carries the compiler-generated `ptx` defining `kernels`
  /// (docs/cuda.md); steps name their kernel through `step(i).kernel`.
  void setCudaModule(uint32_t arch, std::string ptx,
                     std::vector<std::string> kernels);

  /// Writes the plan file, streaming weights from their sources.
  absl::Status write(const std::string &path);
  /// Makes `write` overwrite an existing file in place, then cut it to the
  /// plan's size, instead of emptying it first: a scratch file written
  /// again and again (in memory, say) keeps its pages. Nothing may map the
  /// file while it is written. A write that fails leaves the file.
  void setOverwriteInPlace(bool inPlace = true);
  /// The plan file's bytes.
  absl::StatusOr<std::vector<uint8_t>> serialize();

  struct Impl;

private:
  friend class ScheduleBuilder;
  std::unique_ptr<Impl> impl_;
};

} // namespace moert

#endif // MOERT_PLAN_WRITER_H
