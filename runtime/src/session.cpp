//===- session.cpp - Executing a schedule on the CPU ----------------------===//

#include "ops.h"
#include "plan_file.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace moert {

using detail::KernelContext;
using detail::ScheduleInfo;
using detail::Shape;
using detail::StepInfo;
using detail::Tensor;
using detail::TensorInfo;

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

/// Steps whose time is communication.
bool isCollective(fb::OpKind op) {
  return op == fb::OpKind::AllToAll || op == fb::OpKind::AllToAllStart ||
         op == fb::OpKind::AllToAllWait;
}
} // namespace

struct Session::Impl {
  const Plan::Impl &plan;
  const ScheduleInfo &schedule;
  detail::ThreadPool pool;
  uint8_t *arena = nullptr;
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
  std::vector<int64_t> symbolValues;
  bool collectStats;
  bool hasRun = false;
  std::vector<uint64_t> calls;
  std::vector<double> seconds;
  std::vector<detail::MoeCounters> moeCounters;
  detail::CollectiveState collectives;
  int device = 0;
  FaultInjection fault;

  Impl(const Plan::Impl &plan, const ScheduleInfo &schedule, int threads,
       bool collectStats)
      : plan(plan), schedule(schedule), pool(threads),
        collectStats(collectStats) {}
  ~Impl() { std::free(arena); }

  /// Index into schedule.inputs (or outputs) of `name`, or -1.
  static int find(const std::vector<TensorDesc> &descs,
                  absl::string_view name) {
    for (size_t i = 0; i < descs.size(); ++i)
      if (descs[i].name == name)
        return static_cast<int>(i);
    return -1;
  }
  static std::string names(const std::vector<TensorDesc> &descs) {
    return absl::StrJoin(descs, ", ",
                         [](std::string *out, const TensorDesc &d) {
                           absl::StrAppend(out, "'", d.name, "'");
                         });
  }
  absl::Status bindSymbols();
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

absl::StatusOr<std::unique_ptr<Session>>
Session::create(const Plan &plan, const SessionOptions &options) {
  const Plan::Impl &planImpl = plan.impl();
  if (planImpl.target.backend != Backend::Cpu)
    return absl::FailedPreconditionError(
        absl::StrCat(planImpl.source, ": the plan targets the ",
                     backendName(planImpl.target.backend),
                     " backend; this runtime executes cpu plans only"));
  if (options.device < 0 || options.device >= plan.numDevices())
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", options.device, " is not in [0, ", plan.numDevices(), ")"));
  int threads = options.threads;
  if (threads <= 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  const ScheduleInfo &schedule = planImpl.schedules[options.device];
  if (Communicator *comm = options.communicator) {
    if (comm->size() != plan.numDevices() || comm->rank() != options.device)
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", comm->backend(), " communicator is device ", comm->rank(),
          " of ", comm->size(), " but the session runs device ", options.device,
          " of the plan's ", plan.numDevices()));
  } else {
    for (const StepInfo &step : schedule.steps)
      if (isCollective(step.op))
        return absl::FailedPreconditionError(absl::StrCat(
            planImpl.source, ": schedule ", options.device, " ", step.label,
            " exchanges rows between devices; the session needs a "
            "communicator (moe-run --devices N, or mpirun)"));
  }
  auto impl =
      std::make_unique<Impl>(planImpl, schedule, threads, options.collectStats);
  detail::configureBlasThreads(threads);

  size_t arenaBytes =
      detail::alignTo(std::max<uint64_t>(schedule.arenaSize, 1), 64);
  impl->arena = static_cast<uint8_t *>(std::aligned_alloc(64, arenaBytes));
  if (!impl->arena)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the activation arena of ",
                     schedule.arenaSize, " bytes"));
  impl->tensors.resize(schedule.tensors.size());
  for (size_t id = 0; id < schedule.tensors.size(); ++id) {
    const TensorInfo &info = schedule.tensors[id];
    Tensor &tensor = impl->tensors[id];
    tensor.dtype = info.dtype;
    if (info.isWeight) {
      tensor.data = const_cast<uint8_t *>(info.weightData);
      tensor.shape.rank = info.rank;
      for (int d = 0; d < info.rank; ++d)
        tensor.shape[d] = info.dims[d].bound;
    } else {
      tensor.data = impl->arena + info.offset;
    }
  }
  impl->staged.resize(schedule.inputs.size());
  impl->symbolValues.assign(planImpl.symbols.size(), -1);
  impl->calls.assign(schedule.steps.size(), 0);
  impl->seconds.assign(schedule.steps.size(), 0);
  impl->moeCounters.resize(schedule.steps.size());
  impl->collectives.comm = options.communicator;
  impl->device = options.device;
  impl->fault = FaultInjection::fromEnvironment();
  impl->collectives.inFlight.assign(schedule.steps.size(), 0);
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

int Session::threads() const { return impl_->pool.size(); }

absl::Status Session::setInput(std::string_view stdName, DType dtype,
                               const std::vector<int64_t> &shape,
                               const void *data, size_t bytes) {
  absl::string_view name(stdName.data(), stdName.size());
  Impl &s = *impl_;
  int index = Impl::find(s.schedule.inputDescs, name);
  if (index < 0)
    return absl::NotFoundError(absl::StrCat(
        "unknown input '", name,
        "'; the plan's inputs are: ", Impl::names(s.schedule.inputDescs)));
  const TensorInfo &info = s.schedule.tensors[s.schedule.inputs[index]];
  auto error = [&](const auto &...args) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "': ", args...));
  };
  if (dtype != info.dtype)
    return error("has dtype ", dtypeName(dtype), "; the plan expects ",
                 dtypeName(info.dtype));
  if (static_cast<int>(shape.size()) != info.rank)
    return error("has rank ", shape.size(), "; the plan expects ", info.rank);
  Shape actual;
  int64_t numel = 1;
  for (int d = 0; d < info.rank; ++d) {
    const detail::DimInfo &dim = info.dims[d];
    int64_t size = shape[d];
    actual.push(size);
    if (dim.kind == fb::DimKind::Static && size != dim.bound)
      return error("dim ", d, " is ", size, "; the plan expects ", dim.bound);
    if (size < 0 || size > dim.bound)
      return error("dim ", d, " is ", size, "; the plan allows [",
                   dim.kind == fb::DimKind::Symbolic
                       ? s.plan.symbols[dim.symbol].min
                       : 0,
                   ", ", dim.bound, "]",
                   dim.kind == fb::DimKind::Symbolic
                       ? absl::StrCat(" for symbol '",
                                      s.plan.symbols[dim.symbol].name, "'")
                       : std::string());
    // A device of a multi-device plan gets a share of the batch, possibly
    // empty; DeviceGroup checks the whole batch against the minimum.
    if (dim.kind == fb::DimKind::Symbolic && s.plan.schedules.size() == 1 &&
        size < s.plan.symbols[dim.symbol].min)
      return error("dim ", d, " is ", size, "; symbol '",
                   s.plan.symbols[dim.symbol].name, "' is at least ",
                   s.plan.symbols[dim.symbol].min);
    numel *= size;
  }
  size_t expected = static_cast<size_t>(numel) * dtypeSize(dtype);
  if (bytes != expected)
    return error("has ", bytes, " bytes; shape ", actual.str(), " of ",
                 dtypeName(dtype), " needs ", expected);
  Impl::Staged &staged = s.staged[index];
  staged.shape = actual;
  staged.bytes.assign(static_cast<const uint8_t *>(data),
                      static_cast<const uint8_t *>(data) + bytes);
  staged.set = true;
  s.hasRun = false;
  return absl::OkStatus();
}

absl::Status Session::Impl::bindSymbols() {
  std::fill(symbolValues.begin(), symbolValues.end(), -1);
  std::vector<int> firstInput(symbolValues.size(), -1);
  for (size_t k = 0; k < schedule.inputs.size(); ++k) {
    const TensorInfo &info = schedule.tensors[schedule.inputs[k]];
    if (!staged[k].set)
      return absl::FailedPreconditionError(
          absl::StrCat("input '", info.name, "' is not set"));
    for (int d = 0; d < info.rank; ++d) {
      if (info.dims[d].kind != fb::DimKind::Symbolic)
        continue;
      int32_t symbol = info.dims[d].symbol;
      int64_t value = staged[k].shape[d];
      if (symbolValues[symbol] < 0) {
        symbolValues[symbol] = value;
        firstInput[symbol] = static_cast<int>(k);
      } else if (symbolValues[symbol] != value) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inputs '", schedule.inputDescs[firstInput[symbol]].name, "' and '",
            info.name, "' disagree on symbol '", plan.symbols[symbol].name,
            "' (", symbolValues[symbol], " vs ", value, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Session::run() {
  Impl &s = *impl_;
  s.hasRun = false;
  MOERT_RETURN_IF_ERROR(s.bindSymbols());
  for (size_t k = 0; k < s.schedule.inputs.size(); ++k) {
    Tensor &tensor = s.tensors[s.schedule.inputs[k]];
    tensor.shape = s.staged[k].shape;
    if (!s.staged[k].bytes.empty())
      std::memcpy(tensor.data, s.staged[k].bytes.data(),
                  s.staged[k].bytes.size());
  }
  using Clock = std::chrono::steady_clock;
  for (const StepInfo &step : s.schedule.steps) {
    KernelContext ctx(step, s.schedule, s.tensors.data(), s.symbolValues.data(),
                      s.pool);
    if (s.collectStats)
      ctx.setMoeCounters(&s.moeCounters[step.index]);
    ctx.setCollectives(&s.collectives);
    if (step.index == s.fault.step && s.device == s.fault.device)
      return s.fault.inject(s.device, step, s.collectives.comm);
    Clock::time_point start;
    if (s.collectStats)
      start = Clock::now();
    MOERT_RETURN_IF_ERROR(step.def->kernel(ctx));
    if (s.collectStats) {
      s.seconds[step.index] +=
          std::chrono::duration<double>(Clock::now() - start).count();
      ++s.calls[step.index];
    }
  }
  s.hasRun = true;
  return absl::OkStatus();
}

absl::StatusOr<TensorData> Session::output(std::string_view stdName) const {
  absl::string_view name(stdName.data(), stdName.size());
  const Impl &s = *impl_;
  int index = Impl::find(s.schedule.outputDescs, name);
  if (index < 0)
    return absl::NotFoundError(absl::StrCat(
        "unknown output '", name,
        "'; the plan's outputs are: ", Impl::names(s.schedule.outputDescs)));
  if (!s.hasRun)
    return absl::FailedPreconditionError(
        absl::StrCat("output '", name, "' is read before a successful run"));
  const Tensor &tensor = s.tensors[s.schedule.outputs[index]];
  TensorData out;
  out.dtype = tensor.dtype;
  out.shape.assign(tensor.shape.dims, tensor.shape.dims + tensor.shape.rank);
  out.data = tensor.data;
  out.bytes = tensor.bytes();
  return out;
}

std::vector<StepStats> Session::stepStats() const {
  const Impl &s = *impl_;
  std::vector<StepStats> stats;
  for (const StepInfo &step : s.schedule.steps) {
    StepStats entry;
    entry.name = std::string(step.name);
    entry.op = step.def->name;
    entry.calls = s.calls[step.index];
    entry.totalSeconds = s.seconds[step.index];
    entry.expertLoad = s.moeCounters[step.index].expertLoad;
    entry.droppedAssignments = s.moeCounters[step.index].dropped;
    stats.push_back(std::move(entry));
  }
  return stats;
}

CommStats Session::commStats() const {
  const Impl &s = *impl_;
  CommStats stats = s.collectives.stats;
  for (const StepInfo &step : s.schedule.steps)
    (isCollective(step.op) ? stats.commSeconds : stats.computeSeconds) +=
        s.seconds[step.index];
  return stats;
}

void Session::resetStats() {
  impl_->collectives.stats = CommStats();
  std::fill(impl_->calls.begin(), impl_->calls.end(), 0);
  std::fill(impl_->seconds.begin(), impl_->seconds.end(), 0);
  std::fill(impl_->moeCounters.begin(), impl_->moeCounters.end(),
            detail::MoeCounters());
}

} // namespace moert
