//===- plan_writer_impl.h - The plan writer's state -------------*- C++ -*-===//
//
// Private to the plan writer: what the builder API (plan_writer.cpp)
// records and the emitter (plan_emit.cpp) writes out: the program table,
// the weights' sources and sections, the tier requests.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_FORMAT_PLAN_WRITER_IMPL_H
#define MOERT_FORMAT_PLAN_WRITER_IMPL_H

#include "format/plan_writer.h"

#include <cstdint>
#include <map>
#include <vector>

namespace moert {
namespace detail {
/// Receives the file's bytes in order (plan_emit.cpp).
class Sink;
} // namespace detail

/// How an int8 weight [E, rows, cols] maps its elements to the scales of
/// its output channels: the rows (channelDim 1) or the columns (2) of each
/// expert's matrix.
struct Quantization {
  int64_t rows = 0, cols = 0;
  int channelDim = 1;
  /// [E, channels], computed when the weight is added.
  std::vector<float> scales;

  int64_t channels() const { return channelDim == 1 ? rows : cols; }
  /// The scale index of flat element `i`.
  int64_t channelOf(int64_t i) const {
    int64_t expert = i / (rows * cols), within = i % (rows * cols);
    return expert * channels() +
           (channelDim == 1 ? within / cols : within % cols);
  }

  /// The scale indices of consecutive elements from flat element `i`, one
  /// step at a time without a division per element.
  class Walk {
  public:
    Walk(const Quantization &q, int64_t i)
        : q_(q), expert_(i / (q.rows * q.cols)),
          row_(i % (q.rows * q.cols) / q.cols), col_(i % q.cols) {}
    int64_t channel() const {
      return expert_ * q_.channels() + (q_.channelDim == 1 ? row_ : col_);
    }
    void next() {
      if (++col_ < q_.cols)
        return;
      col_ = 0;
      if (++row_ < q_.rows)
        return;
      row_ = 0;
      ++expert_;
    }

  private:
    const Quantization &q_;
    int64_t expert_, row_, col_;
  };
};

/// Where a weight's bytes come from until the plan is written: `copy`, or
/// the referenced `pieces` in order; f32 pieces narrowed to `narrowTo` (F16
/// or BF16, or I8 quantized by `quantization`) when it is not F32.
struct WeightSource {
  std::vector<WeightPiece> pieces;
  std::vector<uint8_t> copy;
  size_t bytes = 0;
  DType narrowTo = DType::F32;
  Quantization quantization;
  /// The pieces hold f32 [E, transposeRows, transposeCols] matrices that
  /// are written transposed, [E, transposeCols, transposeRows]
  /// (transposeExpertMatrices); 0: as they are.
  int64_t transposeRows = 0, transposeCols = 0;
};

struct WeightSection {
  /// Read per expert by the runtime, never mapped (kSectionFlagPaged).
  bool paged = false;
  struct Placement {
    int device;
    int32_t tensor;
    uint64_t offset;
  };
  /// Each weight and where its bytes go, in placement order.
  std::vector<Placement> weights;
  uint64_t size = 0;
};

struct PlanWriter::Impl {
  TargetRequirements target;
  fb::ProgramT program;
  /// The device schedules first, then the prefill schedules of a generation
  /// plan (builder `devices + d` is device d's prefill), with their tables.
  std::vector<std::unique_ptr<ScheduleBuilder>> builders;
  std::vector<fb::ScheduleT *> scheduleTables;
  uint32_t devices = 1;
  /// Per multimodal stage, its schedules' builder indices by device (one,
  /// or every device's for an expert-parallel Prefill stage).
  std::vector<std::vector<size_t>> stageBuilders;
  std::vector<WeightSection> sections;
  /// Per schedule, per weight tensor id: its bytes.
  std::vector<std::map<int32_t, WeightSource>> sources;
  int defaultSection = -1;
  /// Per schedule: the tiers setExpertTiers asked for (none: budget 0 and
  /// no layers).
  struct TierRequest {
    bool set = false;
    uint64_t budget = 0;
    std::vector<ScheduleBuilder::TierLayer> layers;
    fb::TierPrefetch prefetch = fb::TierPrefetch::None;
  };
  std::vector<TierRequest> tierRequests;
  /// The first misuse of the builder API, reported by write/serialize.
  absl::Status firstError;

  /// A paged expert weight of a tiered layer: where its experts' checksums
  /// go (crcs of tiered layer `layer` of its schedule, paged input `input`
  /// of `inputs`) and its bytes per expert.
  struct PagedWeight {
    size_t layer;
    size_t input, inputs;
    uint64_t expertBytes;
  };
  /// Per schedule: the tiered layers' checksums (expert-major) and the
  /// paged weights by tensor id.
  std::vector<std::vector<std::vector<uint32_t>>> tierCrcs;
  std::vector<std::map<int32_t, PagedWeight>> pagedWeights;

  /// Fills `Schedule.tiers` of every schedule setExpertTiers was called on.
  absl::Status assignTiers();

  void fail(absl::Status status) {
    if (firstError.ok())
      firstError = std::move(status);
  }
  absl::Status emit(detail::Sink &sink);
  /// PlanWriter::setOverwriteInPlace.
  bool overwriteInPlace = false;
};

} // namespace moert

#endif // MOERT_FORMAT_PLAN_WRITER_IMPL_H
