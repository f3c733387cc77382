//===- session_state.h - What every backend's session keeps ----*- C++ -*-===//
//
// The backend-independent half of a session: the run-time tensors of one
// device schedule, the staged graph inputs, the symbol values bound from
// them and the per-step statistics. `Session` (CPU) and `CudaSession` derive
// their state from it, so that input checking, symbol binding, output views
// and statistics mean the same on every backend; `SessionBase` (moert.h)
// exposes it.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_SESSION_STATE_H
#define MOERT_SRC_SESSION_STATE_H

#include "exec/ops.h"
#include "moert/trace.h"
#include "tiers/expert_store.h"

#include <chrono>
#include <functional>

namespace moert::detail {

/// The worker count of a session: `requested`, or the hardware concurrency
/// when it is not positive.
int sessionThreads(int requested);

/// Checks that `plan` targets `backend` (else fails with "<plan>: the plan
/// targets the <other> backend; <hint>"), that `device` names one of its
/// schedules and that the schedule's activation arena fits in the machine's
/// memory (else the error says which compile bound to lower).
absl::Status checkSessionPlan(const Plan &plan, Backend backend,
                              absl::string_view hint, int device);

/// Whether `op` exchanges rows between devices (AllToAll, AllToAllStart,
/// AllToAllWait): it needs the session's communicator, its time is
/// communication in the stats, and on the GPU it runs only over NCCL.
bool isExchange(fb::OpKind op);

/// Checks a session's communicator (null: none) against the plan's devices
/// and the session's `device`; without one, fails at the first exchange step
/// of the device's schedule.
absl::Status checkSessionCommunicator(const Plan &plan, int device,
                                      const Communicator *comm);

/// Allocates a 64-byte aligned host arena of `size` bytes (at least one);
/// null on failure. Free it with std::free.
uint8_t *allocateHostArena(uint64_t size);

/// `time` in TraceRecorder's nanoseconds.
inline int64_t traceNanos(std::chrono::steady_clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             time.time_since_epoch())
      .count();
}

struct SessionState {
  SessionState(const Plan::Impl &plan, const ScheduleInfo &schedule,
               int threads, bool collectStats);

  /// Points every tensor at its data (a weight at its bytes in the plan with
  /// its declared shape, an activation at its offset in `arena`) and sizes
  /// the per-input and per-step state.
  void initTensors(uint8_t *arena);

  /// Checks and copies the value of graph input `name` (Session::setInput).
  absl::Status setInput(absl::string_view name, DType dtype,
                        const std::vector<int64_t> &shape, const void *data,
                        size_t bytes);
  /// Checks a value for graph input `index` as setInput does; its shape.
  absl::StatusOr<Shape> checkInput(int index, absl::string_view name,
                                   DType dtype,
                                   const std::vector<int64_t> &shape,
                                   size_t bytes) const;
  /// Makes graph input `name` read `data` (shape `shape`, the input's dtype)
  /// in place instead of a copy, from the next run on, until the next
  /// setInput of it. `data` must stay valid and unchanged until then.
  absl::Status bindInput(absl::string_view name,
                         const std::vector<int64_t> &shape, const void *data);
  /// Makes the steps write graph output `name` into `data` (at least
  /// `capacity` bytes, no less than the output's planned size) instead of
  /// the arena, from the next run on; null restores the arena. The output
  /// must be produced by a step.
  absl::Status bindOutput(absl::string_view name, void *data, size_t capacity);
  /// Keeps the cache pair `input` -> `output` (graph input and output of
  /// the schedule) in place in `data`, `capacity` bytes laid out with
  /// `pitch` positions along `axis`: the input is a cache view of shape
  /// `shape` (its first shape[axis] positions), and the output, the same
  /// memory, gets only the new positions (kv_cache_in_place.h). Fails unless
  /// cacheInPlaceBlocker() allows the pair or when the memory is too small.
  /// Until the next setInput/bindInput of the input or bindOutput of the
  /// output.
  absl::Status bindCache(absl::string_view input, absl::string_view output,
                         const std::vector<int64_t> &shape, void *data,
                         size_t capacity, int axis, int64_t pitch);
  /// Binds every symbol to the size the inputs give it; fails when an input
  /// is not set or two inputs disagree.
  absl::Status bindSymbols();
  /// Copies the staged inputs into their tensors (their arena slots may have
  /// been reused by the previous run), points bound inputs and outputs at
  /// their memory.
  void stageInputs();
  /// The context of `step` over this state's tensors, counting MoE routing
  /// when stats are collected.
  KernelContext context(const StepInfo &step);

  /// The view of graph output `name` after a successful run.
  absl::StatusOr<TensorData> output(absl::string_view name) const;
  /// One entry per step; `op` is the step's op name followed by `opSuffix`
  /// (empty, or set per step by a backend that runs steps in several places).
  std::vector<StepStats> stepStats() const;
  /// The exchanges' traffic, with the step seconds split into exchange
  /// (communication) and compute time.
  CommStats commStats() const;
  void resetStats();

  /// Attaches `recorder` (SessionBase::setTrace); ignored without
  /// collectStats, whose clock reads the step spans reuse.
  void setTrace(TraceRecorder *recorder);
  /// The trace hooks, called only while `trace` is set: the run begins at
  /// `beginNs`, before its inputs were staged (a StageInputs span up to now,
  /// with the inputs' shapes); a span of `step` with its outputs' shapes; the
  /// run ends, with each MoE step's routing of the run.
  void traceBeginRun(int64_t beginNs);
  void traceStep(const StepInfo &step, TraceKind kind, int64_t beginNs,
                 int64_t endNs);
  void traceEndRun();

  const Plan::Impl &plan;
  const ScheduleInfo &schedule;
  ThreadPool pool;
  /// Run-time state of every tensor of the schedule, indexed by id.
  std::vector<Tensor> tensors;
  /// Values of the graph inputs, copied into the arena at the start of each
  /// run (the memory plan may reuse an input's slot after its last use).
  struct Staged {
    bool set = false;
    Shape shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Staged> staged;
  /// Per graph input / output: the caller's memory it is bound to (null:
  /// the arena slot).
  std::vector<const uint8_t *> boundInputs;
  std::vector<uint8_t *> boundOutputs;
  /// Per graph input / output bound by bindCache: its cache axis and pitch
  /// (axis -1: none).
  struct CacheView {
    int axis = -1;
    int64_t pitch = 0;
  };
  std::vector<CacheView> inputViews;
  std::vector<CacheView> outputViews;
  /// Per graph input: the output and axis bindCache proved it may be
  /// appended to in place (output -1: none yet). The schedule does not
  /// change, so a decode step does not scan it again.
  struct ProvenCache {
    int output = -1;
    int axis = -1;
  };
  std::vector<ProvenCache> provenCaches;
  uint8_t *arena = nullptr;
  std::vector<int64_t> symbolValues;
  bool collectStats;
  bool hasRun = false;
  /// Per step: calls and seconds since the last reset, its MoE counters and
  /// the suffix of its op name in stepStats().
  std::vector<uint64_t> calls;
  std::vector<double> seconds;
  std::vector<MoeCounters> moeCounters;
  std::vector<const char *> opSuffix;
  /// The attached trace recorder (null: none), and the MoE counters when its
  /// last run ended: a run's own routing is what they grew by.
  TraceRecorder *trace = nullptr;
  std::vector<MoeCounters> traceBase;
  /// The collective steps' communicator and traffic (multi-device plans).
  CollectiveState collectives;
  /// Tiered plans: the paged experts (createExpertStore), perhaps shared
  /// with another session of the device (shareExpertStore), and this
  /// session's view of them.
  std::shared_ptr<ExpertStore> experts;
  int expertView = 0;
  /// Tiered plans on a backend with an expert store of its own (the CUDA
  /// session's, cuda/expert_tiers.h): its per-layer counters, which
  /// stepStats reports and resetStats clears, and its description for
  /// expertCacheStats; null without one.
  std::vector<ExpertCacheCounters> *backendPaging = nullptr;
  std::function<ExpertCacheStats()> describeBackendExperts;
  /// Its measureExpertReadBandwidth.
  std::function<absl::StatusOr<double>(uint64_t)> probeBackendBandwidth;

  /// Tiered schedules: makes `experts`, for `deviceMemory` bytes (0: the
  /// plan's tiers) read the `read` way, reading ahead as `prefetch` says
  /// ("none", "next-layer"), its cache following `cache` (SessionOptions::
  /// expertCache). Fails for a `deviceMemory` on a plan that is not tiered.
  absl::Status createExpertStore(int device, uint64_t deviceMemory,
                                 const std::string &read,
                                 const std::string &prefetch = "",
                                 const std::string &cache = "");
  /// Uses `store` (another session's, whose schedule pages the same
  /// experts: a generation plan's decode) instead of a store of its own.
  absl::Status shareExpertStore(std::shared_ptr<ExpertStore> store);
};

} // namespace moert::detail

#endif // MOERT_SRC_SESSION_STATE_H
