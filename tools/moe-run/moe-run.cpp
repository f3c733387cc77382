//===- moe-run.cpp - Run a moec plan on the CPU or GPUs -------------------===//
//
//   moe-run PLAN [--input NAME=FILE.npy ...] [--output-dir DIR] [--threads N]
//                [--tokens N] [--dim SYMBOL=N] [--seed N] [--save-inputs DIR]
//                [--bench N] [--duration SECONDS] [--warmup N]
//                [--stats FILE.json] [--compare MODEL.onnx] [--backend
//                cpu|cuda]
//                [--cuda-graphs on|off] [--devices N] [--comm host|nccl]
//                [--comm-timeout SECONDS]
//   mpirun -np N moe-run PLAN [options]
//   moe-run GEN.plan --prompt-ids 3,14,15 [--max-new-tokens N]
//                [--temperature T] [--top-k K] [--top-p P] [--seed S]
//                [--stream] [--stop-id ID] [--output-dir DIR]
//   moe-run GEN.plan --bench N --prompt-tokens P --max-new-tokens G
//                [--warmup W]
//
// The options and the modes they apply to are in options.h, the checks
// before the work starts in preflight.h, the generation benchmark in
// generate_bench.h.
//
// Inputs not given with --input are generated (generated_inputs.h); runs
// are timed with --bench / --duration (bench_stats.h). With --output-dir
// every output is written as DIR/NAME.npy (characters outside
// [A-Za-z0-9._-] in NAME become '_').
//
//===----------------------------------------------------------------------===//

#include "bench_stats.h"
#include "expert_cache_report.h"
#include "format/file_io.h"
#include "format/version.h"
#include "generate.h"
#include "generated_inputs.h"
#include "group_session.h"
#include "moert/cuda.h"
#include "moert/moert.h"
#include "moert/nccl.h"
#include "moert/npy.h"
#include "moert/stats.h"
#include "options.h"
#include "preflight.h"
#include "recording.h"
#include "stats_json.h"
#include "tools/VerifyTool.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <set>
#include <type_traits>

namespace {

using moe_run::Options;

using moe_run::jsonString;

/// The stats' "memory" (peak resident and virtual bytes of this process,
/// how the plan is held)
/// and, for a tiered plan, "expert_cache": the budget, the cache, the hot
/// set, the read mode and the plan file's read bandwidth measured after the
/// runs (buffered preads of up to 256 MiB of its paged experts, through the
/// page cache when the file is cached, else from the disk). Also printed.
template <typename SessionT>
absl::Status appendMemory(std::string &json, const moert::Plan &plan,
                          SessionT &session) {
  moe_run::appendProcessMemory(json, plan);
  if constexpr (std::is_base_of_v<moert::SessionBase, SessionT>)
    return moe_run::reportExpertCache(json, plan, session,
                                      {{"", session.stepStats()}}, stdout);
  return absl::OkStatus();
}

template <typename SessionT>
absl::Status writeStats(const std::string &path, const Options &options,
                        const moert::Plan &plan, SessionT &session,
                        const moe_run::RunTimes &times,
                        const std::map<std::string, int64_t> &sizes) {
  moe_run::Summary runs = times.runs();
  std::string json = absl::StrCat(
      "{\n  \"plan\": ", jsonString(options.plan),
      ",\n  \"threads\": ", session.threads(), ",\n  \"runs\": ", runs.count,
      ",\n  \"median_ms\": ", absl::StrFormat("%.6f", runs.p50));
  moe_run::appendTimingJson(json, times, sizes);
  std::vector<moert::StepStats> stats = session.stepStats();
  std::vector<moe_run::Summary> perRun = times.steps();
  moe_run::appendSteps(json, "steps", stats, &perRun);
  // A multi-device run's layers come with its devices.
  MOERT_RETURN_IF_ERROR(moe_run::appendDevices(json, plan, stats, session));
  MOERT_RETURN_IF_ERROR(appendMemory(json, plan, session));
  absl::StrAppend(&json, "\n}\n");
  if (!moe_run::reports(session))
    return absl::OkStatus();
  return moert::writeFile(path, json.data(), json.size());
}

template <typename SessionT>
absl::Status runSession(const Options &options, const moert::Plan &plan,
                        SessionT &session);

/// What --trace and --report-html record, and the run they describe.
moe_run::Recording recordingFor(const Options &options,
                                const moert::Plan &plan) {
  moe_run::RunConfig config;
  config.plan = options.plan;
  config.backend = options.device.backend;
  config.devices = plan.numDevices();
  config.seed = options.inputs.seed;
  config.warmup = options.timing.warmupRuns();
  config.bench = options.timing.bench;
  config.duration = options.timing.duration;
  config.inputFiles = options.inputs.given;
  return moe_run::Recording(options.outputs.trace, options.outputs.reportHtml,
                            std::move(config));
}

/// Under MPI a rank checksums only its own schedule's weight shards.
moert::LoadOptions loadOptions(const Options &options) {
  moert::LoadOptions load;
  load.device = moert::mpiRank();
  load.weightPages = options.device.weightPages;
  return load;
}

/// Runs a plan's device schedules: all in this process (--devices), or this
/// MPI rank's one. Under MPI every rank generates the same seeded inputs and
/// keeps its share; rank 0 gathers and writes the outputs and stats.
/// Checks that --devices (or the MPI world) runs the plan's device count.
absl::Status checkDeviceCount(const Options &options, const moert::Plan &plan,
                              bool mpi) {
  int devices = plan.numDevices();
  if (mpi && options.device.devices > 0)
    return absl::InvalidArgumentError(
        "--devices runs the devices in-process; under mpirun each rank is "
        "one device (drop --devices)");
  if (!mpi && options.device.devices != devices)
    return absl::InvalidArgumentError(
        options.device.devices == 0
            ? absl::StrCat(options.plan, ": the plan has ",
                           moe_run::plural(devices, "device schedule",
                                           "device schedules"),
                           "; run it with --devices ", devices,
                           " or mpirun -np ", devices)
            : absl::StrCat(options.plan, ": --devices ", options.device.devices,
                           " but the plan has ",
                           moe_run::plural(devices, "device schedule",
                                           "device schedules"),
                           "; run it with --devices ", devices));
  return absl::OkStatus();
}

absl::Status runDevices(const Options &options, const moert::Plan &plan,
                        bool mpi) {
  MOERT_RETURN_IF_ERROR(checkDeviceCount(options, plan, mpi));
  moert::DeviceGroupOptions groupOptions;
  groupOptions.threadsPerDevice = options.device.threads;
  groupOptions.comm.timeoutSeconds = options.device.commTimeout;
  groupOptions.backend = options.device.backend == "cuda" ? moert::Backend::Cuda
                                                          : moert::Backend::Cpu;
  groupOptions.commKind = options.device.comm;
  groupOptions.deviceMemory = options.tiers.deviceMemory;
  groupOptions.expertRead = options.tiers.expertRead;
  groupOptions.expertPrefetch = options.tiers.prefetch;
  groupOptions.expertCache = options.tiers.cache;
  std::unique_ptr<moert::DeviceGroup> group;
  if (mpi) {
    MOERT_ASSIGN_OR_RETURN(group,
                           moert::DeviceGroup::createMpi(plan, groupOptions));
  } else {
    MOERT_ASSIGN_OR_RETURN(group,
                           moert::DeviceGroup::create(plan, groupOptions));
  }
  if (options.device.backend == "cuda")
    for (const std::string &where : group->localDescriptions())
      std::printf("moe-run: cuda backend, %s\n", where.c_str());
  const char *exchange = options.device.comm == moert::CommKind::Nccl ? "nccl"
                         : mpi                                        ? "mpi"
                               : "in-process";
  moe_run::GroupSession session(std::move(group), exchange);
  return runSession(options, plan, session);
}

/// --placement: where each step of each device schedule would run.
absl::Status printPlacement(const Options &options) {
  moert::LoadOptions load = loadOptions(options);
  load.weightPages = moert::LoadOptions::WeightPages::Mapped;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Plan> plan,
                         moert::Plan::load(options.plan, load));
  bool nccl = options.device.comm == moert::CommKind::Nccl;
  for (int d = 0; d < plan->numDevices(); ++d) {
    MOERT_ASSIGN_OR_RETURN(moert::CudaPlacement placement,
                           moert::cudaPlacement(*plan, d, nccl));
    size_t onGpu = 0;
    std::printf("moe-run: placement of %s, device %d:\n", options.plan.c_str(),
                d);
    for (size_t i = 0; i < placement.steps.size(); ++i) {
      onGpu += placement.onGpu[i];
      std::printf("  %s: %s\n", placement.steps[i].c_str(),
                  placement.onGpu[i] ? "gpu" : "host");
    }
    std::printf("moe-run: device %d: %zu of %zu steps on the GPU; CUDA "
                "graphs: %s\n",
                d, onGpu, placement.steps.size(),
                placement.graphs && options.device.cudaGraphs ? "yes" : "no");
  }
  return absl::OkStatus();
}

/// Warns once (rank 0 under MPI) when the devices on this host times their
/// threads exceed the cores this process may run on. The runtime's default
/// threads share the cores out among the devices, so only --threads, or
/// more devices than cores, can exceed them.
void warnOversubscription(const Options &options, const moert::Plan &plan,
                          bool multi, bool mpi) {
  int devices = 1;
  if (mpi) {
    // Ranks on this host, as Open MPI tells each of them.
    const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int64_t ranks = 0;
    if (local && absl::SimpleAtoi(local, &ranks) && ranks > 0)
      devices = static_cast<int>(ranks);
  } else if (multi) {
    devices = plan.numDevices();
  }
  int cores = moe_run::availableCores();
  int threads = options.device.threads;
  if (threads <= 0) {
    if (devices <= cores)
      return;
    threads = 1;
  }
  if (moert::mpiRank() > 0)
    return;
  if (std::string warning = moe_run::oversubscription(devices, threads, cores);
      !warning.empty())
    std::fprintf(stderr, "moe-run: warning: %s\n", warning.c_str());
}

absl::Status runMain(const Options &options) {
  if (options.device.placement)
    return printPlacement(options);
  // Rank 0 writes the outputs: it checks their paths before the plan loads.
  if (moert::mpiRank() <= 0)
    MOERT_RETURN_IF_ERROR(moe_run::checkOutputPaths(options.outputs));
  // Without a GPU, say so before anything else.
  if (options.device.backend == "cuda")
    MOERT_RETURN_IF_ERROR(moert::cudaDeviceCount().status());
  // A rank loads its own schedule: first check that there is one per rank,
  // whatever the world size (the load without checksums reads no weights).
  if (int ranks = moert::mpiWorldSize(); ranks > 0) {
    moert::LoadOptions peek;
    peek.verifyWeightChecksums = false;
    peek.weightPages = moert::LoadOptions::WeightPages::Mapped;
    MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Plan> plan,
                           moert::Plan::load(options.plan, peek));
    if (plan->numDevices() != ranks)
      return absl::InvalidArgumentError(absl::StrCat(
          options.plan, ": mpirun started ",
          moe_run::plural(ranks, "rank", "ranks"), " but the plan has ",
          moe_run::plural(plan->numDevices(), "device schedule",
                          "device schedules"),
          "; run it with mpirun -np ", plan->numDevices()));
  }
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Plan> plan,
                         moert::Plan::load(options.plan, loadOptions(options)));
  if (options.generate.active) {
    moe_run::GenerationRun run;
    run.threads = options.device.threads;
    run.seed = options.inputs.seed;
    run.outputDir = options.outputs.outputDir;
    run.planPath = options.plan;
    run.statsPath = options.outputs.stats;
    run.mpi = moert::launchedByMpi();
    run.group = run.mpi || options.device.devices > 0 || plan->numDevices() > 1;
    run.commTimeout = options.device.commTimeout;
    run.deviceMemory = options.tiers.deviceMemory;
    run.expertRead = options.tiers.expertRead;
    run.expertPrefetch = options.tiers.prefetch;
    run.expertCache = options.tiers.cache;
    run.bench = options.timing.bench;
    run.warmup = options.timing.warmupRuns();
    if (run.group)
      MOERT_RETURN_IF_ERROR(checkDeviceCount(options, *plan, run.mpi));
    warnOversubscription(options, *plan, run.group, run.mpi);
    moe_run::Recording recording = recordingFor(options, *plan);
    return moe_run::runGeneration(*plan, options.generate, run, recording);
  }
  if (plan->generation())
    std::fprintf(stderr,
                 "moe-run: note: %s is a generation plan; without "
                 "--prompt-ids this runs one forward pass of its decode "
                 "schedule\n",
                 options.plan.c_str());
  bool mpi = moert::launchedByMpi();
  bool multi = mpi || options.device.devices > 0 || plan->numDevices() > 1;
  if (options.inputs.tokens >= 0 && moe_run::tokenAxis(*plan).empty())
    return absl::InvalidArgumentError(absl::StrCat(
        options.plan, ": --tokens ", options.inputs.tokens,
        ": the plan's inputs have no symbolic dim to size (their shapes are "
        "fixed)"));
  for (const auto &[name, value] : options.inputs.dims) {
    bool known = false;
    for (const moert::SymbolDesc &s : plan->symbols())
      known |= s.name == name;
    if (!known)
      return absl::InvalidArgumentError(absl::StrCat(
          options.plan, ": --dim ", name, "=", value,
          ": the plan has no symbol '", name, "' (",
          plan->symbols().empty()
              ? std::string("it has no symbolic dims")
              : absl::StrCat("its symbols: ",
                             absl::StrJoin(plan->symbols(), ", ",
                                           [](std::string *out,
                                              const moert::SymbolDesc &symbol) {
                                             absl::StrAppend(out, symbol.name);
                                           })),
          ")"));
  }
  if (multi)
    MOERT_RETURN_IF_ERROR(checkDeviceCount(options, *plan, mpi));
  warnOversubscription(options, *plan, multi, mpi);
  if (multi)
    return runDevices(options, *plan, mpi);
  if (options.device.comm == moert::CommKind::Nccl)
    return absl::InvalidArgumentError(
        absl::StrCat("--comm nccl exchanges between the devices of a "
                     "multi-device plan; ",
                     options.plan, " has one device schedule"));
  if (options.device.backend == "cuda") {
    moert::CudaSessionOptions cudaOptions;
    cudaOptions.threads = options.device.threads;
    cudaOptions.useGraphs = options.device.cudaGraphs;
    cudaOptions.deviceMemory = options.tiers.deviceMemory;
    cudaOptions.expertPrefetch = options.tiers.prefetch;
    MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::CudaSession> session,
                           moert::CudaSession::create(*plan, cudaOptions));
    std::printf("moe-run: cuda backend on %s, CUDA graphs %s\n",
                session->deviceDescription().c_str(),
                session->usesGraphs() ? "on" : "off");
    absl::Status ran = runSession(options, *plan, *session);
    if (std::string refused = session->graphsRefused(); !refused.empty())
      std::fprintf(stderr,
                   "moe-run: note: the driver refused to capture a CUDA "
                   "graph (%s); the runs went eagerly\n",
                   refused.c_str());
    return ran;
  }
  moert::SessionOptions sessionOptions;
  sessionOptions.threads = options.device.threads;
  sessionOptions.deviceMemory = options.tiers.deviceMemory;
  sessionOptions.expertRead = options.tiers.expertRead;
  sessionOptions.expertPrefetch = options.tiers.prefetch;
  sessionOptions.expertCache = options.tiers.cache;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Session> session,
                         moert::Session::create(*plan, sessionOptions));
  return runSession(options, *plan, *session);
}

/// Sets the inputs, runs (and times) the plan and writes the outputs.
template <typename SessionT>
absl::Status runSession(const Options &options, const moert::Plan &plan,
                        SessionT &session) {
  // Before the warm-up: the sessions clear their recorders with their stats.
  moe_run::Recording recording = recordingFor(options, plan);
  moe_run::attachRecording(recording, session);
  bool reports = moe_run::reports(session);
  std::vector<std::string> notes;
  MOERT_ASSIGN_OR_RETURN(std::vector<moe_run::RunInput> inputs,
                         moe_run::prepareInputs(plan, options.inputs, notes));
  if (reports) {
    for (const std::string &note : notes)
      std::fprintf(stderr, "moe-run: note: %s\n", note.c_str());
    for (const moe_run::RunInput &input : inputs)
      if (!input.description.empty())
        std::fprintf(stderr, "moe-run: %s\n", input.description.c_str());
    if (!options.outputs.saveInputs.empty())
      MOERT_RETURN_IF_ERROR(
          moe_run::saveInputs(options.outputs.saveInputs, inputs));
  }
  for (const moe_run::RunInput &input : inputs) {
    absl::Status status =
        session.setInput(input.name, input.array.dtype, input.array.shape,
                         input.array.data.data(), input.array.data.size());
    if (!status.ok())
      return input.path.empty()
                 ? status
                 : absl::Status(status.code(), absl::StrCat(input.path, ": ",
                                                            status.message()));
  }
  std::map<std::string, int64_t> sizes = moe_run::symbolSizes(plan, inputs);
  inputs.clear();

  // The warm-up runs, then the timed runs: --bench N of them, or for as long
  // as --duration, or (neither) the one run that computes the outputs.
  using Clock = std::chrono::steady_clock;
  int warmup = options.timing.warmupRuns();
  for (int i = 0; i < warmup; ++i)
    MOERT_RETURN_IF_ERROR(session.run());
  session.resetStats();
  moe_run::RunTimes times(warmup);
  Clock::time_point begin = Clock::now();
  int minRuns = std::max(options.timing.bench, 1);
  // --duration stops at --bench's limit of runs too.
  constexpr int kMaxRuns = 1000000;
  for (int i = 0;; ++i) {
    double elapsed =
        std::chrono::duration<double>(Clock::now() - begin).count();
    if (i >= minRuns && (elapsed >= options.timing.duration || i >= kMaxRuns))
      break;
    if (options.timing.freshInputs && options.timing.timed()) {
      // Untimed: each run routes tokens of its own (seed + 1 + run).
      moe_run::InputOptions fresh = options.inputs;
      fresh.seed = options.inputs.seed + 1 + i;
      std::vector<std::string> freshNotes;
      MOERT_ASSIGN_OR_RETURN(std::vector<moe_run::RunInput> next,
                             moe_run::prepareInputs(plan, fresh, freshNotes));
      for (const moe_run::RunInput &input : next)
        if (input.path.empty())
          MOERT_RETURN_IF_ERROR(session.setInput(
              input.name, input.array.dtype, input.array.shape,
              input.array.data.data(), input.array.data.size()));
    }
    Clock::time_point start = Clock::now();
    MOERT_RETURN_IF_ERROR(session.run());
    double ms =
        std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    times.add(ms, session.stepStats());
  }
  if (reports)
    std::fputs(moe_run::timingText(times, session.threads(), sizes).c_str(),
               stdout);

  if (!options.outputs.outputDir.empty() && reports)
    MOERT_RETURN_IF_ERROR(moe_run::makeDirectory(options.outputs.outputDir));
  std::set<std::string> files;
  for (const moert::TensorDesc &desc : plan.outputs()) {
    // Collective under MPI: every rank takes part.
    MOERT_ASSIGN_OR_RETURN(moert::TensorData data, session.output(desc.name));
    if (!reports)
      continue;
    std::string shape = absl::StrJoin(data.shape, ", ");
    if (options.outputs.outputDir.empty()) {
      std::printf("output %s: %s [%s]\n", desc.name.c_str(),
                  moert::dtypeName(data.dtype), shape.c_str());
      continue;
    }
    std::string file = moe_run::fileNameFor(desc.name);
    if (!files.insert(file).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs '", desc.name, "' and another map to the file ", file));
    std::string path =
        (std::filesystem::path(options.outputs.outputDir) / file).string();
    MOERT_RETURN_IF_ERROR(
        moert::npy::write(path, data.dtype, data.shape, data.data, data.bytes));
    std::printf("output %s: %s [%s] -> %s\n", desc.name.c_str(),
                moert::dtypeName(data.dtype), shape.c_str(), path.c_str());
  }
  if (!options.outputs.stats.empty())
    MOERT_RETURN_IF_ERROR(writeStats(options.outputs.stats, options, plan,
                                     session, times, sizes));
  return moe_run::finishRecording(recording, plan, session);
}

/// Whether this process runs as one MPI rank (set once MPI is up).
bool runningUnderMpi = false;

/// Ends the process after an error no caller handled: one error line, exit
/// status 1 (under MPI, ending every rank), never an abort.
[[noreturn]] void exitWithError(const std::string &message) {
  std::fprintf(stderr, "moe-run: error: %s\n", message.c_str());
  std::fflush(stderr);
  if (runningUnderMpi)
    moert::mpiAbort(1);
  std::_Exit(1);
}

/// What an exception that reached the top says.
std::string describeException(std::exception_ptr exception) {
  try {
    std::rethrow_exception(exception);
  } catch (const std::bad_alloc &) {
    return "out of memory";
  } catch (const std::exception &e) {
    return absl::StrCat("internal error: ", e.what());
  } catch (...) {
    return "internal error: unknown exception";
  }
}

int runTool(int argc, char **argv) {
  Options options;
  std::string problem = moe_run::parseArgs(argc, argv, options);
  if (problem == "help") {
    std::fputs(moe_run::kUsage, stdout);
    return 0;
  }
  if (problem == "version") {
    std::printf("%s\n", moert::getVersionLine("moe-run").c_str());
    return 0;
  }
  if (!problem.empty()) {
    std::fprintf(stderr, "moe-run: error: %s\nrun 'moe-run --help' for usage\n",
                 problem.c_str());
    return 2;
  }
  if (options.text.active())
    return moec::execSiblingTool(
        "moe-run", "moe-serve", "MOE_SERVE", moe_run::textGenerateArgs(options),
        "text generation",
        "it needs moe-serve (tools/moe-serve, Python with tokenizers and "
        "jinja2): run scripts/setup.sh, or set MOE_SERVE to its path");
  if (!options.compare.empty()) {
    if (absl::Status status = moe_run::checkOutputPaths(options.outputs);
        !status.ok()) {
      std::fprintf(stderr, "moe-run: error: %s\n",
                   std::string(status.message()).c_str());
      return 1;
    }
    std::vector<std::string> args = {options.compare, "--plan", options.plan};
    for (const auto &[name, path] : options.inputs.given)
      args.insert(args.end(), {"--input", name + "=" + path});
    if (options.inputs.tokens >= 0)
      args.insert(args.end(),
                  {"--tokens", std::to_string(options.inputs.tokens)});
    for (const auto &[symbol, size] : options.inputs.dims)
      args.insert(args.end(), {"--dim", absl::StrCat(symbol, "=", size)});
    args.insert(args.end(), {"--seed", std::to_string(options.inputs.seed)});
    if (!options.outputs.saveInputs.empty())
      args.insert(args.end(), {"--save-inputs", options.outputs.saveInputs});
    if (options.device.threads)
      args.insert(args.end(),
                  {"--threads", std::to_string(options.device.threads)});
    return moec::execVerifyTool("moe-run", args);
  }
  // Without a GPU every rank fails alike: say so before MPI starts, so that
  // the job ends as a plain exit 1 rather than an MPI abort.
  if (options.device.backend == "cuda" && !options.device.placement)
    if (absl::Status status = moert::cudaDeviceCount().status(); !status.ok()) {
      std::fprintf(stderr, "moe-run: error: %s\n",
                   std::string(status.message()).c_str());
      return 1;
    }
  // Under mpirun every rank is one device of the plan.
  bool mpi = moert::launchedByMpi() && moert::mpiSupported();
  if (mpi) {
    if (absl::Status status = moert::mpiInit(&argc, &argv); !status.ok()) {
      std::fprintf(stderr, "moe-run: error: %s\n",
                   std::string(status.message()).c_str());
      return 1;
    }
    runningUnderMpi = true;
  }
  absl::Status status = runMain(options);
  if (!status.ok()) {
    std::fprintf(stderr, "moe-run: error: %s\n",
                 std::string(status.message()).c_str());
    std::fflush(stderr);
    // A rank that fails alone would leave the others waiting: end them all.
    if (mpi)
      moert::mpiAbort(1);
    return 1;
  }
  moert::mpiFinalize();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // An exception escaping a worker thread ends in std::terminate.
  std::set_terminate([] {
    std::exception_ptr exception = std::current_exception();
    exitWithError(exception ? describeException(exception)
                            : "internal error: terminate called");
  });
  try {
    return runTool(argc, argv);
  } catch (...) {
    exitWithError(describeException(std::current_exception()));
  }
}
