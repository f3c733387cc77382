//===- trace.cpp - Recording what each run of a session did ---------------===//

#include "moert/trace.h"

#include "exec/ops.h"
#include "format/byte_image.h"
#include "observe/layer_stats.h"

#include "absl/strings/str_cat.h"

#include <chrono>
#include <map>

namespace moert {

using detail::ByteReader;
using detail::ByteWriter;
using detail::ScheduleInfo;
using detail::StepInfo;

namespace {

/// What exchange `step` (AllToAll or AllToAllStart) moves, by where its
/// rows come from: a Dispatch's (out to the experts), an Ungroup's or
/// Experts' (back to the combine), or else the slot counts that size them.
std::string exchangeRole(const ScheduleInfo &schedule, const StepInfo &step) {
  int32_t rows = step.inputs.empty() ? -1 : step.inputs[0];
  int32_t producer = rows >= 0 ? schedule.tensors[rows].producer : -1;
  fb::OpKind from =
      producer >= 0 ? schedule.steps[producer].op : fb::OpKind::Invalid;
  if (from == fb::OpKind::Dispatch)
    return "dispatch all-to-all";
  if (from == fb::OpKind::Ungroup || from == fb::OpKind::Experts)
    return "combine all-to-all";
  return "counts all-to-all";
}

/// The part of its MoE layer that `step` is.
std::string layerPart(const ScheduleInfo &schedule, const StepInfo &step) {
  switch (step.op) {
  case fb::OpKind::Router:
    return "router";
  case fb::OpKind::AssignSlots:
    return "assign slots";
  case fb::OpKind::Dispatch:
    return "dispatch";
  case fb::OpKind::Regroup:
    return "regroup";
  case fb::OpKind::Experts:
    return "experts";
  case fb::OpKind::Ungroup:
    return "ungroup";
  case fb::OpKind::Combine:
    return "combine";
  case fb::OpKind::SharedExpert:
    return "shared expert";
  case fb::OpKind::AllToAll:
    return exchangeRole(schedule, step);
  case fb::OpKind::AllToAllStart:
    return exchangeRole(schedule, step) + " start";
  case fb::OpKind::AllToAllWait:
    if (step.pairedStep >= 0 &&
        step.pairedStep < static_cast<int32_t>(schedule.steps.size()))
      return exchangeRole(schedule, schedule.steps[step.pairedStep]) + " wait";
    return "all-to-all wait";
  default:
    return step.def->name;
  }
}

} // namespace

std::vector<std::string> traceStepNames(const Plan &plan, int device,
                                        bool prefill) {
  const Plan::Impl &impl = plan.impl();
  const ScheduleInfo *found = impl.deviceSchedule(device, prefill);
  std::vector<std::string> names;
  if (!found)
    return names;
  const ScheduleInfo &schedule = *found;
  for (const StepInfo &step : schedule.steps)
    names.push_back(step.def->name);
  std::vector<MoeLayerStats> layers = detail::scheduleLayerStats(
      schedule, std::vector<StepStats>(schedule.steps.size()), device);
  for (size_t l = 0; l < layers.size(); ++l) {
    // A part that occurs more than once in a layer is one per micro-batch,
    // in schedule order.
    std::map<std::string, int> count, seen;
    for (int index : layers[l].steps)
      ++count[layerPart(schedule, schedule.steps[index])];
    for (int index : layers[l].steps) {
      std::string part = layerPart(schedule, schedule.steps[index]);
      names[index] = absl::StrCat("layer ", l, " ", part);
      if (count[part] > 1)
        absl::StrAppend(&names[index], " (micro-batch ", seen[part]++, ")");
    }
  }
  return names;
}

const char *traceKindName(TraceKind kind) {
  switch (kind) {
  case TraceKind::Step:
    return "step";
  case TraceKind::StageInputs:
    return "stage inputs";
  case TraceKind::Launch:
    return "launch";
  case TraceKind::CopyToDevice:
    return "copy to device";
  case TraceKind::CopyToHost:
    return "copy to host";
  case TraceKind::Sync:
    return "sync";
  case TraceKind::GraphLaunch:
    return "graph launch";
  case TraceKind::GpuStep:
    return "gpu step";
  }
  return "unknown";
}

TraceRecorder::TraceRecorder(size_t maxRuns)
    : maxRuns_(maxRuns ? maxRuns : 1) {}

void TraceRecorder::clear() {
  runs_.clear();
  runsSeen_ = 0;
  inRun_ = false;
}

int64_t TraceRecorder::now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TraceRun &TraceRecorder::beginRun(int64_t beginNs,
                                  const std::vector<int64_t> &symbols) {
  // A full recorder reuses its oldest run's buffers: after the first
  // maxRuns runs, recording allocates only when a run outgrows them.
  TraceRun run;
  if (runs_.size() >= maxRuns_) {
    run = std::move(runs_.front());
    runs_.pop_front();
  }
  run.index = runsSeen_++;
  run.beginNs = beginNs;
  run.endNs = 0;
  run.symbols = symbols;
  run.spans.clear();
  run.dims.clear();
  run.loads.clear();
  runs_.push_back(std::move(run));
  inRun_ = true;
  return runs_.back();
}

TraceSpan &TraceRecorder::addSpan(TraceKind kind, int32_t step, int64_t beginNs,
                                  int64_t endNs) {
  TraceRun &run = runs_.back();
  TraceSpan span;
  span.kind = kind;
  span.step = step;
  span.beginNs = beginNs;
  span.endNs = endNs;
  span.shapesBegin = span.shapesEnd = static_cast<uint32_t>(run.dims.size());
  run.spans.push_back(span);
  return run.spans.back();
}

void TraceRecorder::addShape(const int64_t *dims, int rank) {
  TraceRun &run = runs_.back();
  run.dims.push_back(rank);
  run.dims.insert(run.dims.end(), dims, dims + rank);
  run.spans.back().shapesEnd = static_cast<uint32_t>(run.dims.size());
}

void TraceRecorder::addLoad(int32_t step, std::vector<uint64_t> expertLoad,
                            uint64_t dropped) {
  runs_.back().loads.push_back({step, std::move(expertLoad), dropped});
}

void TraceRecorder::endRun(int64_t endNs) {
  runs_.back().endNs = endNs;
  inRun_ = false;
}

std::vector<uint8_t> serializeTrace(const TraceRecorder &recorder) {
  ByteWriter out;
  out.word(recorder.maxRuns());
  out.word(recorder.runsSeen());
  out.word(recorder.runs().size());
  for (const TraceRun &run : recorder.runs()) {
    out.word(run.index);
    out.word(static_cast<uint64_t>(run.beginNs));
    out.word(static_cast<uint64_t>(run.endNs));
    out.words(run.symbols);
    out.word(run.spans.size());
    for (const TraceSpan &span : run.spans) {
      out.word(static_cast<uint64_t>(span.kind));
      out.word(static_cast<uint64_t>(static_cast<int64_t>(span.step)));
      out.word(static_cast<uint64_t>(span.beginNs));
      out.word(static_cast<uint64_t>(span.endNs));
      out.word(span.shapesBegin);
      out.word(span.shapesEnd);
    }
    out.words(run.dims);
    out.word(run.loads.size());
    for (const TraceLoad &load : run.loads) {
      out.word(static_cast<uint64_t>(static_cast<int64_t>(load.step)));
      out.words(load.expertLoad);
      out.word(load.dropped);
    }
  }
  return out.take();
}

absl::StatusOr<TraceRecorder> deserializeTrace(const uint8_t *data,
                                               size_t size) {
  ByteReader in(data, size);
  // Every count is checked against the bytes a record of it needs at least,
  // so that a malformed count never sizes an allocation.
  bool malformed = false;
  auto count = [&](uint64_t wordsEach) -> uint64_t {
    uint64_t n = in.word();
    if (n <= size / (8 * wordsEach))
      return n;
    malformed = true;
    return 0;
  };
  uint64_t maxRuns = in.word();
  if (maxRuns > size)
    return absl::DataLossError("a gathered trace is malformed");
  TraceRecorder recorder(static_cast<size_t>(maxRuns));
  recorder.runsSeen_ = in.word();
  uint64_t runs = count(6);
  for (uint64_t r = 0; in.ok() && r < runs; ++r) {
    TraceRun run;
    run.index = in.word();
    run.beginNs = static_cast<int64_t>(in.word());
    run.endNs = static_cast<int64_t>(in.word());
    run.symbols = in.words<int64_t>();
    uint64_t spans = count(6);
    for (uint64_t i = 0; in.ok() && i < spans; ++i) {
      TraceSpan span;
      uint64_t kind = in.word();
      span.kind = static_cast<TraceKind>(kind);
      span.step = static_cast<int32_t>(static_cast<int64_t>(in.word()));
      span.beginNs = static_cast<int64_t>(in.word());
      span.endNs = static_cast<int64_t>(in.word());
      uint64_t begin = in.word(), end = in.word();
      if (kind > static_cast<uint64_t>(TraceKind::GpuStep) || begin > end ||
          end > size)
        return absl::DataLossError("a gathered trace is malformed");
      span.shapesBegin = static_cast<uint32_t>(begin);
      span.shapesEnd = static_cast<uint32_t>(end);
      run.spans.push_back(span);
    }
    run.dims = in.words<int64_t>();
    for (const TraceSpan &span : run.spans)
      if (span.shapesEnd > run.dims.size())
        return absl::DataLossError("a gathered trace is malformed");
    uint64_t loads = count(3);
    for (uint64_t i = 0; in.ok() && i < loads; ++i) {
      TraceLoad load;
      load.step = static_cast<int32_t>(static_cast<int64_t>(in.word()));
      load.expertLoad = in.words<uint64_t>();
      load.dropped = in.word();
      run.loads.push_back(std::move(load));
    }
    recorder.runs_.push_back(std::move(run));
  }
  if (malformed || !in.ok() || !in.done() ||
      recorder.runs_.size() > recorder.maxRuns_)
    return absl::DataLossError("a gathered trace is malformed");
  return recorder;
}

} // namespace moert
