//===- trace_json.cpp - moe-run --trace: Chrome trace-event JSON ----------===//
//
// The JSON object format of Chrome's trace events ("traceEvents",
// "displayTimeUnit"), which Perfetto and chrome://tracing open: a process
// per device (an MPI rank's device included), a thread per session on it
// ("host"; generation: "prefill", "decode") and one for the GPU stream of a
// CUDA session, a complete event ("ph": "X") per run enclosing one per
// executed step, and the CUDA session's launches, copies and syncs.
// Timestamps are microseconds from the earliest run's begin.
//
//===----------------------------------------------------------------------===//

#include "recording.h"
#include "stats_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <map>
#include <set>

namespace moe_run {

/// The shapes of `span` in `run`: "[5, 32]" per shape.
std::vector<std::string> spanShapes(const moert::TraceRun &run,
                                    const moert::TraceSpan &span) {
  std::vector<std::string> shapes;
  for (uint32_t i = span.shapesBegin; i < span.shapesEnd;) {
    int64_t rank = run.dims[i++];
    if (rank < 0 || rank > int64_t(span.shapesEnd - i))
      break;
    shapes.push_back(absl::StrCat(
        "[",
        absl::StrJoin(run.dims.begin() + i, run.dims.begin() + i + rank, ", "),
        "]"));
    i += static_cast<uint32_t>(rank);
  }
  return shapes;
}

/// "decode 3", "run 0"; "prefill" when it ran once (else per prompt).
std::string runLabel(const Track &track, const moert::TraceRun &run) {
  if (track.runName == "prefill" && track.recorder.runsSeen() == 1)
    return track.runName;
  return absl::StrCat(track.runName, " ", run.index);
}

/// traceStepNames for `track`, or the ops when the plan's schedule does not
/// match its steps.
std::vector<std::string> trackStepNames(const moert::Plan &plan,
                                        const Track &track) {
  std::vector<std::string> names =
      moert::traceStepNames(plan, track.device, track.prefill);
  if (names.size() != track.steps.size()) {
    names.clear();
    for (const moert::StepStats &step : track.steps)
      names.push_back(step.op.substr(0, step.op.find('@')));
  }
  return names;
}

namespace {

std::string micros(int64_t ns) { return absl::StrFormat("%.3f", ns / 1e3); }

class EventWriter {
public:
  explicit EventWriter(std::string &json) : json_(json) {}

  void metadata(const char *what, int pid, int tid, const std::string &key,
                const std::string &value) {
    next();
    absl::StrAppend(&json_, "{\"name\": \"", what, "\", \"ph\": \"M\", ",
                    "\"pid\": ", pid, ", \"tid\": ", tid, ", \"args\": {",
                    jsonString(key), ": ", value, "}}");
  }
  /// A complete event from `begin` to `end` (ns from the origin); `args` is
  /// the inside of a JSON object.
  void span(const std::string &name, const char *category, int pid, int tid,
            int64_t begin, int64_t end, const std::string &args) {
    next();
    absl::StrAppend(&json_, "{\"name\": ", jsonString(name), ", \"cat\": \"",
                    category, "\", \"ph\": \"X\", \"pid\": ", pid,
                    ", \"tid\": ", tid, ", \"ts\": ", micros(begin),
                    ", \"dur\": ", micros(std::max<int64_t>(end - begin, 0)),
                    ", \"args\": {", args, "}}");
  }

private:
  void next() {
    absl::StrAppend(&json_, first_ ? "\n    " : ",\n    ");
    first_ = false;
  }
  std::string &json_;
  bool first_ = true;
};

/// The GPU stream's thread of a session's thread.
constexpr int kGpuThread = 100;

} // namespace

std::string traceJson(const moert::Plan &plan, const std::vector<Track> &tracks,
                      const RunConfig &config) {
  int64_t origin = 0;
  std::vector<int64_t> offsets = trackOffsets(tracks, origin);
  uint64_t seen = 0, kept = 0;
  for (const Track &track : tracks) {
    seen = std::max(seen, track.recorder.runsSeen());
    kept = std::max<uint64_t>(kept, track.recorder.runs().size());
  }
  std::string json = absl::StrCat(
      "{\n  \"displayTimeUnit\": \"ms\",\n  \"otherData\": {\"plan\": ",
      jsonString(config.plan), ", \"backend\": ", jsonString(config.backend),
      ", \"devices\": ", config.devices, ", \"threads\": ", config.threads,
      ", \"runs\": ", seen, ", \"traced_runs\": ", kept,
      "},\n  \"traceEvents\": [");
  EventWriter events(json);
  std::set<int> processes;
  for (const Track &track : tracks) {
    if (processes.insert(track.device).second) {
      events.metadata("process_name", track.device, 0, "name",
                      jsonString(track.process));
      events.metadata("process_sort_index", track.device, 0, "sort_index",
                      absl::StrCat(track.device));
    }
    events.metadata("thread_name", track.device, track.thread, "name",
                    jsonString(track.threadName));
  }

  for (size_t t = 0; t < tracks.size(); ++t) {
    const Track &track = tracks[t];
    int pid = track.device;
    std::vector<std::string> names = trackStepNames(plan, track);
    const std::vector<moert::TensorDesc> &inputs =
        track.prefill ? plan.prefillInputs(track.device)
                      : plan.inputs(track.device);
    bool gpuNamed = false;
    auto at = [&](int64_t ns) { return ns + offsets[t] - origin; };
    for (const moert::TraceRun &run : track.recorder.runs()) {
      std::map<int32_t, const moert::TraceLoad *> loads;
      for (const moert::TraceLoad &load : run.loads)
        loads[load.step] = &load;
      int64_t end = run.endNs;
      for (const moert::TraceSpan &span : run.spans)
        if (span.kind != moert::TraceKind::GpuStep)
          end = std::max(end, span.endNs);
      std::vector<std::string> symbols;
      for (size_t i = 0; i < run.symbols.size() && i < plan.symbols().size();
           ++i)
        symbols.push_back(absl::StrCat(jsonString(plan.symbols()[i].name), ": ",
                                       run.symbols[i]));
      events.span(runLabel(track, run), "run", pid, track.thread,
                  at(run.beginNs), at(end),
                  absl::StrCat("\"run\": ", run.index, ", \"symbols\": {",
                               absl::StrJoin(symbols, ", "), "}"));
      for (const moert::TraceSpan &span : run.spans) {
        bool ofStep = span.step >= 0 && size_t(span.step) < track.steps.size();
        std::string args = absl::StrCat("\"run\": ", run.index);
        std::string name = moert::traceKindName(span.kind);
        std::vector<std::string> shapes = spanShapes(run, span);
        if (ofStep) {
          const moert::StepStats &step = track.steps[span.step];
          absl::StrAppend(&args, ", \"step\": ", span.step,
                          ", \"name\": ", jsonString(step.name),
                          ", \"op\": ", jsonString(step.op));
        }
        const char *category = "cuda";
        int tid = track.thread;
        switch (span.kind) {
        case moert::TraceKind::Step:
        case moert::TraceKind::GpuStep: {
          if (!ofStep)
            continue;
          name = names[span.step];
          category = isExchangeOp(track.steps[span.step].op) ? "comm"
                     : name.rfind("layer ", 0) == 0          ? "moe"
                                                             : "step";
          std::vector<std::string> quoted;
          for (const std::string &shape : shapes)
            quoted.push_back(jsonString(shape));
          absl::StrAppend(&args, ", \"outputs\": [",
                          absl::StrJoin(quoted, ", "), "]");
          auto load = loads.find(span.step);
          if (load != loads.end())
            absl::StrAppend(&args, ", \"tokens_per_expert\": [",
                            absl::StrJoin(load->second->expertLoad, ", "),
                            "], \"dropped\": ", load->second->dropped);
          if (span.kind == moert::TraceKind::GpuStep) {
            tid = kGpuThread + track.thread;
            if (!gpuNamed)
              events.metadata("thread_name", pid, tid, "name",
                              jsonString("GPU stream (placed at the first "
                                         "launch)"));
            gpuNamed = true;
          }
          break;
        }
        case moert::TraceKind::StageInputs: {
          category = "copy";
          std::vector<std::string> named;
          for (size_t i = 0; i < shapes.size() && i < inputs.size(); ++i)
            named.push_back(absl::StrCat(jsonString(inputs[i].name), ": ",
                                         jsonString(shapes[i])));
          absl::StrAppend(&args, ", \"inputs\": {", absl::StrJoin(named, ", "),
                          "}");
          break;
        }
        case moert::TraceKind::Launch:
          if (ofStep)
            name = absl::StrCat("launch ", names[span.step]);
          break;
        case moert::TraceKind::CopyToHost:
          if (!ofStep)
            name = "copy outputs to host";
          break;
        default:
          break;
        }
        events.span(name, category, pid, tid, at(span.beginNs), at(span.endNs),
                    args);
      }
    }
  }
  absl::StrAppend(&json, "\n  ]\n}\n");
  return json;
}

} // namespace moe_run
