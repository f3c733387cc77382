//===- recording.cpp - moe-run's --trace and --report-html ----------------===//

#include "recording.h"

#include "expert_cache_report.h"
#include "format/byte_image.h"
#include "format/file_io.h"
#include "group_session.h"
#include "moert/comm.h"
#include "moert/generator.h"
#include "moert/group_generator.h"

#include "absl/strings/str_cat.h"

#include <limits>
#include <unistd.h>

namespace moe_run {
namespace {

using moert::detail::ByteReader;
using moert::detail::ByteWriter;

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0)
    return "";
  return name;
}

std::vector<uint8_t> serializeTrack(const Track &track) {
  ByteWriter out;
  out.word(static_cast<uint64_t>(track.device));
  out.word(static_cast<uint64_t>(track.thread));
  out.word(track.prefill);
  out.text(track.process);
  out.text(track.threadName);
  out.text(track.runName);
  out.text(track.host);
  out.word(track.steps.size());
  for (const moert::StepStats &step : track.steps) {
    out.text(step.name);
    out.text(step.op);
    out.word(step.calls);
    out.real(step.totalSeconds);
    out.words(step.expertLoad);
    out.word(step.droppedAssignments);
    // A tiered step's expert cache counters, for the report's hit rates.
    out.word(step.tiered);
    out.word(step.cache.hits);
    out.word(step.cache.misses);
    out.real(step.cache.waitSeconds);
  }
  std::vector<uint8_t> trace = moert::serializeTrace(track.recorder);
  out.text(std::string(trace.begin(), trace.end()));
  return out.take();
}

absl::StatusOr<Track> deserializeTrack(const std::vector<uint8_t> &in) {
  ByteReader read(in.data(), in.size());
  Track track;
  track.device = static_cast<int>(read.word());
  track.thread = static_cast<int>(read.word());
  track.prefill = read.word() != 0;
  track.process = read.text();
  track.threadName = read.text();
  track.runName = read.text();
  track.host = read.text();
  uint64_t steps = read.word();
  // Each step takes at least ten words.
  if (steps > in.size() / 80)
    return absl::DataLossError("a gathered recording is malformed");
  for (uint64_t i = 0; read.ok() && i < steps; ++i) {
    moert::StepStats step;
    step.name = read.text();
    step.op = read.text();
    step.calls = read.word();
    step.totalSeconds = read.real();
    step.expertLoad = read.words<uint64_t>();
    step.droppedAssignments = read.word();
    step.tiered = read.word() != 0;
    step.cache.hits = read.word();
    step.cache.misses = read.word();
    step.cache.waitSeconds = read.real();
    track.steps.push_back(std::move(step));
  }
  std::string trace = read.text();
  if (!read.ok() || !read.done())
    return absl::DataLossError("a gathered recording is malformed");
  MOERT_ASSIGN_OR_RETURN(
      track.recorder,
      moert::deserializeTrace(reinterpret_cast<const uint8_t *>(trace.data()),
                              trace.size()));
  return track;
}

/// The end of the first exchange step of `track`'s run `index`, or -1.
int64_t firstExchangeEnd(const Track &track, uint64_t index) {
  for (const moert::TraceRun &run : track.recorder.runs()) {
    if (run.index != index)
      continue;
    for (const moert::TraceSpan &span : run.spans)
      if (span.kind == moert::TraceKind::Step && span.step >= 0 &&
          size_t(span.step) < track.steps.size() &&
          isExchangeOp(track.steps[span.step].op))
        return span.endNs;
  }
  return -1;
}

} // namespace

bool isExchangeOp(const std::string &op) {
  return op.rfind("AllToAll", 0) == 0;
}

std::vector<int64_t> trackOffsets(const std::vector<Track> &tracks,
                                  int64_t &origin) {
  std::vector<int64_t> offsets(tracks.size(), 0);
  for (size_t t = 1; t < tracks.size(); ++t) {
    if (tracks[t].host == tracks[0].host || tracks[0].recorder.runs().empty())
      continue;
    // Another host's steady clock has another epoch: every device leaves an
    // exchange together (within its latency), so the first one's end marks
    // the same instant on both clocks.
    uint64_t index = tracks[0].recorder.runs().front().index;
    int64_t mine = firstExchangeEnd(tracks[t], index);
    int64_t first = firstExchangeEnd(tracks[0], index);
    if (mine >= 0 && first >= 0)
      offsets[t] = first - mine;
  }
  origin = std::numeric_limits<int64_t>::max();
  for (size_t t = 0; t < tracks.size(); ++t)
    for (const moert::TraceRun &run : tracks[t].recorder.runs())
      origin = std::min(origin, run.beginNs + offsets[t]);
  if (origin == std::numeric_limits<int64_t>::max())
    origin = 0;
  return offsets;
}

void Recording::attach(moert::SessionBase &session, Track track) {
  if (!active())
    return;
  auto owned = std::make_unique<Track>(std::move(track));
  session.setTrace(&owned->recorder);
  sessions_.push_back(&session);
  tracks_.push_back(std::move(owned));
}

absl::Status Recording::finish(const moert::Plan &plan, Gather gather,
                               void *context) {
  if (!active())
    return absl::OkStatus();
  std::vector<std::vector<uint8_t>> mine;
  std::string host = hostName();
  for (size_t i = 0; i < tracks_.size(); ++i) {
    sessions_[i]->setTrace(nullptr);
    tracks_[i]->steps = sessions_[i]->stepStats();
    tracks_[i]->host = host;
    mine.push_back(serializeTrack(*tracks_[i]));
  }
  MOERT_ASSIGN_OR_RETURN(std::vector<std::vector<uint8_t>> all,
                         gather(context, std::move(mine)));
  if (all.empty())
    return absl::OkStatus(); // Not the reporting rank.
  config_.memory.peakRssBytes = processStatusBytes("VmHWM");
  std::vector<Track> tracks;
  for (const std::vector<uint8_t> &blob : all) {
    MOERT_ASSIGN_OR_RETURN(Track track, deserializeTrack(blob));
    tracks.push_back(std::move(track));
  }
  if (!tracePath_.empty()) {
    std::string json = traceJson(plan, tracks, config_);
    MOERT_RETURN_IF_ERROR(
        moert::writeFile(tracePath_, json.data(), json.size()));
  }
  if (!reportPath_.empty()) {
    std::string html = reportHtml(plan, tracks, config_);
    MOERT_RETURN_IF_ERROR(
        moert::writeFile(reportPath_, html.data(), html.size()));
  }
  return absl::OkStatus();
}

void attachRecording(Recording &recording, moert::SessionBase &session) {
  recording.config().threads = session.threads();
  Track track;
  track.process = absl::StrCat("device 0: ", recording.config().backend);
  track.threadName = "host";
  recording.attach(session, std::move(track));
}

/// Attaches `recording` to one device's generator: "prefill" and "decode"
/// threads of `process`, or one "generation" thread.
static void attachGenerator(Recording &recording, moert::Generator &generator,
                            int device, std::string process) {
  moert::Session &prefill = generator.prefillSession();
  moert::Session &decode = generator.decodeSession();
  Track track;
  track.device = device;
  track.process = std::move(process);
  if (&prefill == &decode) {
    track.threadName = "generation";
    track.runName = "step";
    recording.attach(decode, std::move(track));
    return;
  }
  Track first = track;
  first.threadName = first.runName = "prefill";
  first.prefill = true;
  recording.attach(prefill, std::move(first));
  track.thread = 1;
  track.threadName = track.runName = "decode";
  recording.attach(decode, std::move(track));
}

void attachRecording(Recording &recording, moert::Generator &generator) {
  RunConfig &config = recording.config();
  config.generation = true;
  config.threads = generator.decodeSession().threads();
  attachGenerator(recording, generator, 0, "device 0: cpu");
}

void attachRecording(Recording &recording, moert::GroupGenerator &group) {
  RunConfig &config = recording.config();
  config.generation = true;
  config.exchange = moert::mpiRank() >= 0 ? "mpi" : "in-process";
  std::vector<moert::Generator *> generators = group.localGenerators();
  config.threads = generators[0]->decodeSession().threads();
  const std::vector<int> &devices = group.localDevices();
  // Under MPI this process runs its rank's device only.
  int rank = moert::mpiRank();
  for (size_t i = 0; i < generators.size(); ++i)
    attachGenerator(
        recording, *generators[i], devices[i],
        absl::StrCat("device ", devices[i], ": cpu",
                     rank >= 0 ? absl::StrCat(" (rank ", rank, ")") : ""));
}

void attachRecording(Recording &recording, GroupSession &session) {
  moert::DeviceGroup &group = session.group();
  recording.config().threads = session.threads();
  recording.config().exchange = session.exchange();
  std::vector<moert::SessionBase *> sessions = group.localSessions();
  std::vector<std::string> where = group.localDescriptions();
  // Under MPI this process runs its rank's device only.
  int rank = moert::mpiRank();
  for (size_t i = 0; i < sessions.size(); ++i) {
    Track track;
    track.device = rank >= 0 ? rank : static_cast<int>(i);
    track.process = where[i];
    if (rank >= 0)
      absl::StrAppend(&track.process, " (rank ", rank, ")");
    track.threadName = "host";
    recording.attach(*sessions[i], std::move(track));
  }
}

absl::Status finishRecording(Recording &recording, const moert::Plan &plan,
                             moert::SessionBase &session) {
  recording.config().memory.expertCache = session.expertCacheStats();
  return recording.finish(
      plan,
      [](void *, std::vector<std::vector<uint8_t>> mine)
          -> absl::StatusOr<std::vector<std::vector<uint8_t>>> { return mine; },
      nullptr);
}

absl::Status finishRecording(Recording &recording, const moert::Plan &plan,
                             GroupSession &session) {
  std::vector<moert::SessionBase *> local = session.group().localSessions();
  if (!local.empty())
    recording.config().memory.expertCache = local[0]->expertCacheStats();
  return recording.finish(
      plan,
      [](void *context, std::vector<std::vector<uint8_t>> mine) {
        return static_cast<moert::DeviceGroup *>(context)->gather(
            std::move(mine), "gather of the trace");
      },
      &session.group());
}

/// Takes a generator's KV cache bytes and, when no generation was added,
/// its last generation's times.
static void takeGeneration(RunConfig &config, uint64_t cacheBytes,
                           const moert::GenerationTimes &last) {
  config.memory.kvCacheBytes = cacheBytes;
  if (config.generations.empty() && last.promptTokens > 0) {
    config.generations.push_back(last);
    config.lastGenerationOnly = true;
  }
}

absl::Status finishRecording(Recording &recording, const moert::Plan &plan,
                             moert::Generator &generator) {
  takeGeneration(recording.config(), generator.cacheBytes(), generator.times());
  return finishRecording(recording, plan, generator.decodeSession());
}

absl::Status finishRecording(Recording &recording, const moert::Plan &plan,
                             moert::GroupGenerator &group) {
  takeGeneration(recording.config(), group.cacheBytes(), group.times());
  std::vector<moert::Generator *> local = group.localGenerators();
  if (!local.empty())
    recording.config().memory.expertCache =
        local[0]->decodeSession().expertCacheStats();
  return recording.finish(
      plan,
      [](void *context, std::vector<std::vector<uint8_t>> mine) {
        return static_cast<moert::GroupGenerator *>(context)->gather(
            std::move(mine), "gather of the trace");
      },
      &group);
}

} // namespace moe_run
