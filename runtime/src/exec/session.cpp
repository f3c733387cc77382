//===- session.cpp - Executing a schedule on the CPU ----------------------===//

#include "exec/session_state.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace moert {

using detail::KernelContext;
using detail::ScheduleInfo;
using detail::StepInfo;

namespace {

/// A test hook: MOERT_FAULT_INJECT=DEVICE:STEP:exit|stall makes device DEVICE
/// exit (silently stop; under MPI, end the process) or stall (sleep past the
/// communicators' timeout) before its step STEP, so that tests can check that
/// the other devices fail cleanly within the timeout.
struct FaultInjection {
  int device = -1;
  int64_t step = -1;
  bool stall = false;

  static FaultInjection fromEnvironment() {
    FaultInjection fault;
    const char *spec = std::getenv("MOERT_FAULT_INJECT");
    if (!spec)
      return fault;
    std::vector<std::string> parts = absl::StrSplit(spec, ':');
    int device;
    int64_t step;
    if (parts.size() == 3 && absl::SimpleAtoi(parts[0], &device) &&
        absl::SimpleAtoi(parts[1], &step) &&
        (parts[2] == "exit" || parts[2] == "stall")) {
      fault.device = device;
      fault.step = step;
      fault.stall = parts[2] == "stall";
    } else {
      std::fprintf(stderr,
                   "moert: ignoring MOERT_FAULT_INJECT='%s' (expected "
                   "DEVICE:STEP:exit|stall)\n",
                   spec);
    }
    return fault;
  }

  /// Acts before `step` of `device`; returns the device's error.
  absl::Status inject(int device, const StepInfo &step,
                      const Communicator *comm) const {
    bool mpi = comm && std::string_view(comm->backend()) == "mpi";
    std::fprintf(stderr, "moert: fault injection: device %d %s before %s\n",
                 device, stall ? "stalls" : "exits", step.label.c_str());
    std::fflush(stderr);
    if (mpi && !stall)
      std::_Exit(3);
    if (stall) {
      // Until the others have given up (an MPI rank is killed by their abort).
      double seconds = comm ? comm->timeoutSeconds() + 2 : 0;
      auto end = std::chrono::steady_clock::now() +
                 std::chrono::duration<double>(seconds);
      while (mpi || std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    absl::Status status = absl::AbortedError(
        absl::StrCat("fault injected (MOERT_FAULT_INJECT): device ", device,
                     stall ? " stalled" : " exited", " before ", step.label));
    // Tells DeviceGroup not to warn the other devices: they must notice.
    if (!stall)
      status.SetPayload(kFaultExitPayload, absl::Cord("1"));
    return status;
  }
};
} // namespace

struct Session::Impl : detail::SessionState {
  uint8_t *arena = nullptr;
  int device = 0;
  FaultInjection fault;

  using SessionState::SessionState;
  ~Impl() { std::free(arena); }
};

Session::Session(std::unique_ptr<Impl> impl)
    : SessionBase(*impl), impl_(std::move(impl)) {}
Session::~Session() = default;

absl::StatusOr<std::unique_ptr<Session>>
Session::create(const Plan &plan, const SessionOptions &options) {
  MOERT_RETURN_IF_ERROR(detail::checkSessionPlan(
      plan, Backend::Cpu,
      "the CPU backend runs cpu plans; run it on a GPU with moe-run "
      "--backend cuda (moert::CudaSession)",
      options.device));
  return create(plan, options, plan.impl().schedules[options.device]);
}

absl::StatusOr<std::unique_ptr<Session>>
Session::create(const Plan &plan, const SessionOptions &options,
                const ScheduleInfo &schedule, const Session *sharesExperts) {
  const Plan::Impl &planImpl = plan.impl();
  MOERT_RETURN_IF_ERROR(detail::checkSessionPlan(
      plan, Backend::Cpu,
      "the CPU backend runs cpu plans; run it on a GPU with moe-run "
      "--backend cuda (moert::CudaSession)",
      options.device));
  int threads = detail::sessionThreads(options.threads);
  MOERT_RETURN_IF_ERROR(detail::checkSessionCommunicator(plan, options.device,
                                                         options.communicator));
  auto impl =
      std::make_unique<Impl>(planImpl, schedule, threads, options.collectStats);

  impl->arena = detail::allocateHostArena(schedule.arenaSize);
  if (!impl->arena)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the activation arena of ",
                     schedule.arenaSize, " bytes"));
  impl->initTensors(impl->arena);
  if (sharesExperts && sharesExperts->impl_->experts &&
      schedule.tiers.present) {
    MOERT_RETURN_IF_ERROR(
        impl->shareExpertStore(sharesExperts->impl_->experts));
  } else {
    MOERT_RETURN_IF_ERROR(impl->createExpertStore(
        options.device, options.deviceMemory, options.expertRead,
        options.expertPrefetch, options.expertCache));
  }
  impl->collectives.comm = options.communicator;
  impl->device = options.device;
  impl->fault = FaultInjection::fromEnvironment();
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

absl::Status Session::run() {
  Impl &s = *impl_;
  s.hasRun = false;
  MOERT_RETURN_IF_ERROR(s.bindSymbols());
  int64_t traceBegin = s.trace ? TraceRecorder::now() : 0;
  if (s.experts)
    s.experts->beginRun(s.expertView);
  s.stageInputs();
  if (s.trace)
    s.traceBeginRun(traceBegin);
  using Clock = std::chrono::steady_clock;
  for (const StepInfo &step : s.schedule.steps) {
    KernelContext ctx = s.context(step);
    if (step.index == s.fault.step && s.device == s.fault.device)
      return s.fault.inject(s.device, step, s.collectives.comm);
    if (s.experts)
      s.experts->beforeStep(step.index, s.tensors.data());
    Clock::time_point start;
    if (s.collectStats)
      start = Clock::now();
    if (absl::Status status = step.def->kernel(ctx); !status.ok()) {
      if (s.experts)
        s.experts->cancelPrefetch();
      return status;
    }
    if (s.experts)
      s.experts->afterStep(step.index, s.tensors.data(), s.pool);
    if (s.collectStats) {
      Clock::time_point end = Clock::now();
      s.seconds[step.index] +=
          std::chrono::duration<double>(end - start).count();
      ++s.calls[step.index];
      if (s.trace)
        s.traceStep(step, TraceKind::Step, detail::traceNanos(start),
                    detail::traceNanos(end));
    }
  }
  if (s.trace)
    s.traceEndRun();
  s.hasRun = true;
  return absl::OkStatus();
}

CommStats Session::commStats() const { return impl_->commStats(); }

} // namespace moert
