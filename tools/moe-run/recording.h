//===- recording.h - moe-run's --trace and --report-html --------*- C++ -*-===//
//
// Records the runs of moe-run's sessions (moert::TraceRecorder, one per
// session) and, once the runs are done, writes them as a Chrome trace-event
// file (--trace, trace_json.cpp) and as a self-contained HTML report
// (--report-html, report_html.cpp). A recorder is attached before the first
// run; the sessions clear it with their stats (after the warm-up of --bench),
// so that the trace and the report hold the runs that --stats describes, the
// last moert::TraceRecorder::kDefaultMaxRuns of them.
//
// Under MPI every rank records its own device and rank 0 gathers the
// recordings (DeviceGroup::gather) and writes one file: a track per rank.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_RECORDING_H
#define MOE_RUN_RECORDING_H

#include "moert/generator.h"
#include "moert/moert.h"
#include "moert/trace.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moert {
class Generator;
class GroupGenerator;
} // namespace moert

namespace moe_run {

class GroupSession;

/// What the report's memory section shows besides the plan's own sizes,
/// taken once the runs are done.
struct RunMemory {
  /// This process's peak resident set (VmHWM of /proc/self/status); 0 when
  /// unknown.
  uint64_t peakRssBytes = 0;
  /// Generation: the bytes of the KV caches one device's generator holds.
  uint64_t kvCacheBytes = 0;
  /// A tiered plan: device 0's expert cache (`tiered` false otherwise).
  moert::ExpertCacheStats expertCache;
};

/// The run's configuration, as the report shows it.
struct RunConfig {
  std::string plan;
  /// "cpu" or "cuda".
  std::string backend;
  /// How the devices exchange rows: "in-process", "mpi", "nccl"; empty for
  /// a single device.
  std::string exchange;
  int threads = 0;
  int devices = 1;
  uint64_t seed = 0;
  int warmup = 0;
  /// --bench N; 0 for a single run.
  int bench = 0;
  /// --duration SECONDS; 0 unless given.
  double duration = 0;
  /// The inputs given as files (NAME, FILE); the others are generated.
  std::vector<std::pair<std::string, std::string>> inputFiles;
  /// Generation (--prompt-ids): the prompt's and the new tokens' counts.
  bool generation = false;
  int64_t promptTokens = 0;
  int64_t newTokens = 0;
  /// The times of the generations the report describes, as the generator
  /// measured them (Recording::addGeneration). When none was added,
  /// finishRecording takes the generator's last one and sets
  /// `lastGenerationOnly`.
  std::vector<moert::GenerationTimes> generations;
  bool lastGenerationOnly = false;
  RunMemory memory;
};

/// One recorded session: a track of the trace.
struct Track {
  /// The device whose schedule the session ran: the trace's process.
  int device = 0;
  /// The session's thread within it (generation: 0 prefill, 1 decode), and
  /// whether it ran the device's prefill schedule.
  int thread = 0;
  bool prefill = false;
  /// "device 0: cpu", and the thread's name ("host", "prefill", "decode").
  std::string process;
  std::string threadName;
  /// What its runs are called: "run" (run 0, run 1, ...), "decode".
  std::string runName = "run";
  /// The host the session ran on (ranks on other hosts are aligned in time
  /// by their first exchange).
  std::string host;
  /// The session's step statistics (names, ops, totals over the runs).
  std::vector<moert::StepStats> steps;
  moert::TraceRecorder recorder;
};

/// The recorders of this process's sessions and what to write.
class Recording {
public:
  Recording(std::string tracePath, std::string reportPath, RunConfig config)
      : tracePath_(std::move(tracePath)), reportPath_(std::move(reportPath)),
        config_(std::move(config)) {}

  /// Whether --trace or --report-html was given; nothing is recorded else.
  bool active() const { return !tracePath_.empty() || !reportPath_.empty(); }
  RunConfig &config() { return config_; }
  /// Records the times of one timed generation (each prompt, each
  /// repetition) for the report's TTFT and tokens per second.
  void addGeneration(const moert::GenerationTimes &times) {
    config_.generations.push_back(times);
  }

  /// Attaches a recorder to `session` (when active). `track` names it; its
  /// steps and host are filled in by finish().
  void attach(moert::SessionBase &session, Track track);

  /// Takes each session's step statistics, gathers the tracks at the
  /// reporting process with `gather` (the identity but under MPI) and there
  /// writes the trace and the report. Collective under MPI.
  using Gather = absl::StatusOr<std::vector<std::vector<uint8_t>>> (*)(
      void *context, std::vector<std::vector<uint8_t>> mine);
  absl::Status finish(const moert::Plan &plan, Gather gather, void *context);

private:
  std::string tracePath_, reportPath_;
  RunConfig config_;
  std::vector<moert::SessionBase *> sessions_;
  std::vector<std::unique_ptr<Track>> tracks_;
};

/// Attaches `recording` to a single session of device 0, or to every local
/// device of a group.
void attachRecording(Recording &recording, moert::SessionBase &session);
void attachRecording(Recording &recording, GroupSession &session);
/// Attaches `recording` to a generator's sessions: "prefill" and "decode"
/// threads of device 0, or one "generation" thread when the decode
/// schedule runs the prompt too.
void attachRecording(Recording &recording, moert::Generator &generator);
/// The same for every local device of an expert-parallel generator.
void attachRecording(Recording &recording, moert::GroupGenerator &group);
/// Recording::finish for a single session, or gathering over the group.
absl::Status finishRecording(Recording &recording, const moert::Plan &plan,
                             moert::SessionBase &session);
absl::Status finishRecording(Recording &recording, const moert::Plan &plan,
                             GroupSession &session);
absl::Status finishRecording(Recording &recording, const moert::Plan &plan,
                             moert::Generator &generator);
absl::Status finishRecording(Recording &recording, const moert::Plan &plan,
                             moert::GroupGenerator &group);

/// The trace-event JSON (Chrome's JSON object format, which Perfetto and
/// chrome://tracing open) of `tracks`.
std::string traceJson(const moert::Plan &plan, const std::vector<Track> &tracks,
                      const RunConfig &config);
/// The self-contained HTML report of `tracks` (report_html.cpp).
std::string reportHtml(const moert::Plan &plan,
                       const std::vector<Track> &tracks,
                       const RunConfig &config);

/// What the report calls symbol `index` of `plan`: for a generation plan
/// "prompt tokens" (the prefill schedule's token axis) or "past length"
/// (the decode schedule's cache axis); for a symbol the compiler named
/// ("s53", "prefill.s70") the input dimension it sizes ("input_ids axis
/// 1"); else the model's own name ("batch", "seq").
std::string symbolLabel(const moert::Plan &plan, size_t index);

/// Whether `op` (StepStats::op, maybe with the CUDA backend's "@where"
/// suffix) exchanges rows between devices.
bool isExchangeOp(const std::string &op);
/// The shapes of `span` in `run`, "[5, 32]" each.
std::vector<std::string> spanShapes(const moert::TraceRun &run,
                                    const moert::TraceSpan &span);
/// "run 3", "decode 7", "prefill": what the trace calls `run` of `track`.
std::string runLabel(const Track &track, const moert::TraceRun &run);
/// moert::traceStepNames for `track`'s schedule, or the steps' ops when the
/// plan's schedule does not match its steps.
std::vector<std::string> trackStepNames(const moert::Plan &plan,
                                        const Track &track);

/// Each track's clock offset in nanoseconds (added to its times) and the
/// common origin: the earliest run's begin. Tracks on another host than the
/// first track's are aligned at the end of their first exchange step.
std::vector<int64_t> trackOffsets(const std::vector<Track> &tracks,
                                  int64_t &origin);

} // namespace moe_run

#endif // MOE_RUN_RECORDING_H
