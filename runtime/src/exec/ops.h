//===- ops.h - Step operations: validation rules and kernels ----*- C++ -*-===//
//
// Every OpKind of the schema has an OpDef: its arity, attribute table, a
// load-time validator (dtypes, ranks, attribute values of the declared
// tensors) and a run-time kernel (output shapes from the actual input shapes,
// then the computation). Kernel files register their ops here.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_OPS_H
#define MOERT_SRC_OPS_H

#include "exec/tensor.h"
#include "exec/thread_pool.h"
#include "loader/plan_impl.h"
#include "moert/comm.h"

#include "absl/strings/str_cat.h"

namespace moert::detail {

class ExpertWeights;

/// What the load-time and run-time views of a step share: its arity, its
/// attributes and diagnostics prefixed with the step's label.
class StepView {
public:
  explicit StepView(const StepInfo &step) : step_(step) {}

  const StepInfo &step() const { return step_; }
  int numInputs() const { return static_cast<int>(step_.inputs.size()); }
  int numOutputs() const { return static_cast<int>(step_.outputs.size()); }
  /// Input `i` exists and is not omitted.
  bool has(int i) const { return i < numInputs() && step_.inputs[i] >= 0; }
  template <typename T> const T *attrs() const {
    return step_.fb->attrs_as<T>();
  }

  template <typename... Args> absl::Status error(const Args &...args) const {
    return absl::InvalidArgumentError(absl::StrCat(step_.label, ": ", args...));
  }
  /// An ONNX axis (negative counts from the back) normalised to [0, rank).
  absl::StatusOr<int> axis(int64_t raw, int rank) const {
    int axis;
    if (normalizeAxis(raw, rank, axis))
      return axis;
    return error("axis ", raw, " is out of range for rank ", rank);
  }

protected:
  const StepInfo &step_;
};

/// Load-time view of one step over its declared tensors.
class StepCheck : public StepView {
public:
  StepCheck(const ScheduleInfo &schedule, const StepInfo &step)
      : StepView(step), schedule_(schedule) {}

  const TensorInfo &in(int i) const {
    return schedule_.tensors[step_.inputs[i]];
  }
  const TensorInfo &out(int i) const {
    return schedule_.tensors[step_.outputs[i]];
  }

  /// Input `i` (if present) has a dtype in `allowed`.
  absl::Status inType(int i, DTypeSet allowed) const;
  /// Output `i` has a dtype in `allowed`.
  absl::Status outType(int i, DTypeSet allowed) const;
  /// Output `o` has the dtype of input `i`.
  absl::Status outMatchesIn(int o, int i) const;
  /// Inputs `a` and `b` (if present) have the same dtype.
  absl::Status sameInTypes(int a, int b) const;
  /// Input `i` (if present) is declared with rank `rank`.
  absl::Status inRank(int i, int rank) const;
  /// Input `i` (if present) is declared with a rank in [0, 1] and at most
  /// one element (a scalar operand such as TopK's k).
  absl::Status inScalar(int i) const;
  /// Output `o` is declared with rank `rank`.
  absl::Status outRank(int o, int rank) const;

private:
  const ScheduleInfo &schedule_;
};

/// The declared shape of a tensor for diagnostics: "[<=32, 8]".
std::string declaredShape(const TensorInfo &info);

/// Counters of one MoE step (Router, Experts), kept by the session while it
/// collects stats and summed over runs.
struct MoeCounters {
  /// Assignments each expert received.
  std::vector<uint64_t> expertLoad;
  /// Assignments dropped because their expert was at capacity.
  uint64_t dropped = 0;
};

/// What the collective steps of a session share: the device's communicator,
/// the exchanges in flight (by the index of their AllToAllStart step) and
/// the traffic counters.
struct CollectiveState {
  Communicator *comm = nullptr;
  std::vector<ExchangeId> inFlight;
  CommStats stats;
};

/// Run-time view of one step over the actual tensors.
class KernelContext : public StepView {
public:
  KernelContext(const StepInfo &step, const ScheduleInfo &schedule,
                Tensor *tensors, const int64_t *symbolValues, ThreadPool &pool)
      : StepView(step), schedule_(schedule), tensors_(tensors),
        symbolValues_(symbolValues), pool_(pool) {}

  const Tensor &in(int i) const { return tensors_[step_.inputs[i]]; }
  ThreadPool &pool() const { return pool_; }
  /// The step's MoE counters while the session collects stats, else null.
  MoeCounters *moeCounters() const { return moeCounters_; }
  void setMoeCounters(MoeCounters *counters) { moeCounters_ = counters; }
  /// The session's collective state (multi-device sessions), else null.
  CollectiveState *collectives() const { return collectives_; }
  void setCollectives(CollectiveState *state) { collectives_ = state; }
  /// A tiered Experts step: where its paged weights come from (the tier
  /// store) and its layer there; else null and -1.
  ExpertWeights *expertWeights() const { return expertWeights_; }
  int tierLayer() const { return tierLayer_; }
  void setExpertWeights(ExpertWeights *weights, int layer) {
    expertWeights_ = weights;
    tierLayer_ = layer;
  }

  /// Gives output `o` the shape `shape` after checking it against the plan:
  /// same rank, static dims equal, symbolic dims equal to their symbol's
  /// value, dynamic dims within their bound. Returns the output tensor, whose
  /// data is its planned arena slot.
  absl::StatusOr<Tensor *> allocate(int o, const Shape &shape);
  /// The plan's declaration of output `o`.
  const TensorInfo &declared(int o) const {
    return schedule_.tensors[step_.outputs[o]];
  }
  /// The planned size of dimension `d` of output `o`: its symbol's value
  /// when symbolic, else its static size or bound.
  int64_t plannedDim(int o, int d) const {
    const DimInfo &dim = schedule_.tensors[step_.outputs[o]].dims[d];
    return dim.kind == fb::DimKind::Symbolic ? symbolValues_[dim.symbol]
                                             : dim.bound;
  }

private:
  const ScheduleInfo &schedule_;
  Tensor *tensors_;
  const int64_t *symbolValues_;
  ThreadPool &pool_;
  MoeCounters *moeCounters_ = nullptr;
  CollectiveState *collectives_ = nullptr;
  ExpertWeights *expertWeights_ = nullptr;
  int tierLayer_ = -1;
};

using ValidateFn = absl::Status (*)(const StepCheck &);
using KernelFn = absl::Status (*)(KernelContext &);

/// Marks a variadic maximum arity.
inline constexpr int kVariadic = 1 << 20;
/// `OpDef::inPlaceInputs` values.
inline constexpr uint32_t kInPlaceFirst = 1;
inline constexpr uint32_t kInPlaceAny = ~0u;

struct OpDef {
  const char *name = nullptr;
  int minInputs = 0;
  int maxInputs = 0;
  int minOutputs = 1;
  int maxOutputs = 1;
  /// Bit i set: input i may be omitted (id -1).
  uint32_t optionalInputs = 0;
  /// The attribute table the op requires (NONE: the op takes none).
  fb::Attrs attrs = fb::Attrs::NONE;
  /// Bit i set: output 0 may occupy exactly the arena slot of input i when
  /// this step reads it for the last time (in-place elementwise ops, views).
  uint32_t inPlaceInputs = 0;
  ValidateFn validate = nullptr;
  KernelFn kernel = nullptr;

  /// Chainable setters for the registration tables, as in
  /// `r.add(kind, makeOp(...).withOutputs(2).withOptionalInputs(0b10))`.
  OpDef &withOutputs(int count) {
    minOutputs = maxOutputs = count;
    return *this;
  }
  OpDef &withOptionalInputs(uint32_t mask) {
    optionalInputs = mask;
    return *this;
  }
  OpDef &withInPlaceInputs(uint32_t mask) {
    inPlaceInputs = mask;
    return *this;
  }
};

/// The definition of `kind`, or nullptr for a value this runtime lacks.
const OpDef *findOp(fb::OpKind kind);

/// Fills the registry; each kernel file defines one.
class OpRegistry {
public:
  void add(fb::OpKind kind, const OpDef &def);
  const OpDef *find(fb::OpKind kind) const;

private:
  OpDef defs_[static_cast<int>(fb::OpKind::MAX) + 1];
};

void registerElementwiseOps(OpRegistry &registry);
void registerFusedOps(OpRegistry &registry);
void registerMatMulOps(OpRegistry &registry);
void registerConvOps(OpRegistry &registry);
void registerGridSampleOps(OpRegistry &registry);
void registerReductionOps(OpRegistry &registry);
void registerNormalizationOps(OpRegistry &registry);
void registerShapeOps(OpRegistry &registry);
void registerIndexingOps(OpRegistry &registry);
void registerMoeOps(OpRegistry &registry);
void registerCollectiveOps(OpRegistry &registry);
void registerAttentionOps(OpRegistry &registry);
void registerLinearAttentionOps(OpRegistry &registry);
void registerCausalConvOps(OpRegistry &registry);
void registerQuantOps(OpRegistry &registry);
void registerLinearOps(OpRegistry &registry);

} // namespace moert::detail

#endif // MOERT_SRC_OPS_H
