//===- trace.h - Recording what each run of a session did ------*- C++ -*-===//
//
// A TraceRecorder attached to a session (SessionBase::setTrace) receives one
// span per executed step of every run, from the same clock reads that time
// the steps for stepStats(), plus what the step produced (output shapes) and
// its MoE routing (assignments per expert of that run). The CUDA session adds
// its host-side work (launches, copies, synchronisations) and, after each
// run, the GPU steps' times between their events. moe-run's --trace and
// --report-html are built on it:
//
//   moert::TraceRecorder recorder;
//   session->setTrace(&recorder);
//   MOERT_RETURN_IF_ERROR(session->run());
//   for (const moert::TraceRun &run : recorder.runs())
//     for (const moert::TraceSpan &span : run.spans) ...
//
// Nothing is recorded, and nothing costs, while no recorder is attached.
// Times are std::chrono::steady_clock nanoseconds since its epoch, so that
// the recorders of the devices of one process share an origin.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TRACE_H
#define MOERT_TRACE_H

#include "moert/moert.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace moert {

/// What a span measured.
enum class TraceKind : uint8_t {
  /// A step's kernel on the host: every step of a CPU session, the host
  /// steps of a CUDA session.
  Step = 0,
  /// Copying the staged graph inputs into their tensors (once per run).
  StageInputs = 1,
  /// CUDA: enqueuing a GPU step's work on the stream (host time; its inputs'
  /// uploads are nested CopyToDevice spans).
  Launch = 2,
  /// CUDA: enqueuing the upload of a tensor to the device.
  CopyToDevice = 3,
  /// CUDA: copying a host step's device-resident inputs (step >= 0) or the
  /// outputs (step -1) back, with the wait for the stream when it waits.
  CopyToHost = 4,
  /// CUDA: waiting for the stream (and NCCL) at the end of a run.
  Sync = 5,
  /// CUDA: launching a captured CUDA graph of the whole run.
  GraphLaunch = 6,
  /// CUDA: a GPU step between its start and stop events. The GPU clock is
  /// placed on the host's by the first timed step of the run, which is taken
  /// to start when its launch began (the GPU cannot start it earlier).
  GpuStep = 7,
};

/// "step", "stage inputs", "launch", "copy to device", "copy to host",
/// "sync", "graph launch", "gpu step".
const char *traceKindName(TraceKind kind);

/// One span of a run.
struct TraceSpan {
  TraceKind kind = TraceKind::Step;
  /// The step's index in its schedule; -1 for a span of no step.
  int32_t step = -1;
  int64_t beginNs = 0;
  int64_t endNs = 0;
  /// Step spans: the shapes of the step's outputs, each as its rank
  /// followed by its dims, in TraceRun::dims[shapesBegin, shapesEnd).
  /// StageInputs: the graph inputs' shapes, likewise.
  uint32_t shapesBegin = 0;
  uint32_t shapesEnd = 0;
};

/// The MoE routing of one step in one run (Router and Experts steps): what
/// StepStats::expertLoad and droppedAssignments grew by in the run.
struct TraceLoad {
  int32_t step = -1;
  std::vector<uint64_t> expertLoad;
  uint64_t dropped = 0;
};

/// One run of a session.
struct TraceRun {
  /// Runs recorded before this one since the recorder was last cleared.
  uint64_t index = 0;
  int64_t beginNs = 0;
  /// 0 while the run is going on or when it failed.
  int64_t endNs = 0;
  /// The values of the plan's symbols (Plan::symbols(), -1: unbound).
  std::vector<int64_t> symbols;
  std::vector<TraceSpan> spans;
  std::vector<int64_t> dims;
  std::vector<TraceLoad> loads;
};

/// The runs of one session, the last `maxRuns` of them. Written by the
/// session's thread only; read it between runs.
class TraceRecorder {
public:
  /// How many runs a recorder keeps by default (moe-run's --trace).
  static constexpr size_t kDefaultMaxRuns = 100;

  explicit TraceRecorder(size_t maxRuns = kDefaultMaxRuns);

  /// The kept runs, oldest first.
  const std::deque<TraceRun> &runs() const { return runs_; }
  /// Runs begun since the last clear (kept or not).
  uint64_t runsSeen() const { return runsSeen_; }
  size_t maxRuns() const { return maxRuns_; }
  /// Forgets every run (SessionBase::resetStats clears its recorder).
  void clear();

  /// steady_clock's now in nanoseconds.
  static int64_t now();

  /// For the sessions: starts a run (dropping the oldest kept one when
  /// full, whose buffers it reuses), adds spans to it, ends it.
  TraceRun &beginRun(int64_t beginNs, const std::vector<int64_t> &symbols);
  TraceSpan &addSpan(TraceKind kind, int32_t step, int64_t beginNs,
                     int64_t endNs);
  /// Appends one shape (rank, then dims) to the last span's shapes.
  void addShape(const int64_t *dims, int rank);
  void addLoad(int32_t step, std::vector<uint64_t> expertLoad,
               uint64_t dropped);
  void endRun(int64_t endNs);
  /// Whether a run is begun and not ended.
  bool inRun() const { return inRun_; }

private:
  friend absl::StatusOr<TraceRecorder> deserializeTrace(const uint8_t *,
                                                        size_t);
  size_t maxRuns_;
  uint64_t runsSeen_ = 0;
  bool inRun_ = false;
  std::deque<TraceRun> runs_;
};

/// What a trace calls each step of schedule `device` of `plan` (its prefill
/// schedule with `prefill`): the op ("MatMul"), or for a step of a MoE layer
/// (moert/stats.h) "layer L PART", L its index among the schedule's layers
/// and PART one of router, assign slots, dispatch, counts / dispatch /
/// combine all-to-all (with " start" and " wait" when split), regroup,
/// experts, ungroup, combine, shared expert; a part a layer has once per
/// micro-batch ends in " (micro-batch M)". Empty for no such schedule.
std::vector<std::string> traceStepNames(const Plan &plan, int device = 0,
                                        bool prefill = false);

/// A byte image of `recorder`'s kept runs, for gathering them from other MPI
/// ranks, and its inverse, which fails on malformed bytes (sizes are checked
/// against the bytes before anything is allocated).
std::vector<uint8_t> serializeTrace(const TraceRecorder &recorder);
absl::StatusOr<TraceRecorder> deserializeTrace(const uint8_t *data,
                                               size_t size);

} // namespace moert

#endif // MOERT_TRACE_H
