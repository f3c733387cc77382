//===- session_state.cpp - What every backend's session keeps -------------===//

#include "exec/session_state.h"
#include "exec/kv_cache_in_place.h"
#include "format/file_io.h"
#include "format/plan_file.h"

#include "absl/strings/str_join.h"

#include <cstdlib>
#include <cstring>
#include <thread>

namespace moert {
namespace detail {
namespace {

/// Index into `descs` of `name`, or -1.
int find(const std::vector<TensorDesc> &descs, absl::string_view name) {
  for (size_t i = 0; i < descs.size(); ++i)
    if (descs[i].name == name)
      return static_cast<int>(i);
  return -1;
}

/// "'a', 'b'": the names of `descs` for diagnostics.
std::string names(const std::vector<TensorDesc> &descs) {
  return absl::StrJoin(descs, ", ", [](std::string *out, const TensorDesc &d) {
    absl::StrAppend(out, "'", d.name, "'");
  });
}

/// Fails when device `device`'s activation arena is larger than the
/// machine's memory: allocating it would fail, or succeed (overcommit) and
/// end the process when the pages are touched. The message says which
/// compile bounds to lower, from the symbols of the schedule's inputs.
absl::Status checkArenaFits(const Plan::Impl &impl, int device) {
  const ScheduleInfo &schedule = impl.schedules[device];
  uint64_t memory = physicalMemoryBytes();
  if (memory == 0 || schedule.arenaSize <= memory)
    return absl::OkStatus();
  // A symbol named "<input>.<dim>" is an unnamed dimension, bounded by
  // --max-tokens; the others are ONNX dim_params, bounded by --bound NAME
  // (or --max-tokens when none was given).
  std::vector<std::string> bounds;
  std::vector<bool> seen(impl.symbols.size(), false);
  for (const TensorDesc &desc : schedule.inputDescs)
    for (size_t d = 0; d < desc.dims.size(); ++d) {
      const DimDesc &dim = desc.dims[d];
      if (dim.kind != DimDesc::Kind::Symbolic)
        continue;
      for (size_t i = 0; i < impl.symbols.size(); ++i) {
        const SymbolDesc &symbol = impl.symbols[i];
        if (symbol.name != dim.symbol || seen[i])
          continue;
        seen[i] = true;
        if (symbol.name == absl::StrCat(desc.name, ".", d))
          bounds.push_back(absl::StrCat("--max-tokens (input '", desc.name,
                                        "' dim ", d, ", now ", symbol.max,
                                        ")"));
        else
          bounds.push_back(absl::StrCat("--bound ", symbol.name, "=N (now ",
                                        symbol.max, ")"));
      }
    }
  std::string whose =
      impl.schedules.size() > 1 ? absl::StrCat(" of device ", device) : "";
  return absl::ResourceExhaustedError(absl::StrCat(
      impl.source, ": the activation arena", whose, " is ", schedule.arenaSize,
      " bytes, more than this machine's memory (", memory,
      " bytes); compile the plan for fewer tokens",
      bounds.empty() ? "" : ": lower ", absl::StrJoin(bounds, " or ")));
}

} // namespace

int sessionThreads(int requested) {
  if (requested > 0)
    return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

absl::Status checkSessionPlan(const Plan &plan, Backend backend,
                              absl::string_view hint, int device) {
  const Plan::Impl &impl = plan.impl();
  if (impl.target.backend != backend)
    return absl::FailedPreconditionError(
        absl::StrCat(impl.source, ": the plan targets the ",
                     backendName(impl.target.backend), " backend; ", hint));
  if (device < 0 || device >= plan.numDevices())
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, " is not in [0, ", plan.numDevices(), ")"));
  return checkArenaFits(impl, device);
}

bool isExchange(fb::OpKind op) {
  return op == fb::OpKind::AllToAll || op == fb::OpKind::AllToAllStart ||
         op == fb::OpKind::AllToAllWait;
}

absl::Status checkSessionCommunicator(const Plan &plan, int device,
                                      const Communicator *comm) {
  if (comm) {
    if (comm->size() != plan.numDevices() || comm->rank() != device)
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", comm->backend(), " communicator is device ", comm->rank(),
          " of ", comm->size(), " but the session runs device ", device,
          " of the plan's ", plan.numDevices()));
    return absl::OkStatus();
  }
  const Plan::Impl &impl = plan.impl();
  for (const StepInfo &step : impl.schedules[device].steps)
    if (isExchange(step.op))
      return absl::FailedPreconditionError(
          absl::StrCat(impl.source, ": schedule ", device, " ", step.label,
                       " exchanges rows between devices; the session needs a "
                       "communicator (moe-run --devices N, or mpirun)"));
  return absl::OkStatus();
}

uint8_t *allocateHostArena(uint64_t size) {
  size_t bytes = alignTo(std::max<uint64_t>(size, 1), 64);
  return static_cast<uint8_t *>(std::aligned_alloc(64, bytes));
}

SessionState::SessionState(const Plan::Impl &plan, const ScheduleInfo &schedule,
                           int threads, bool collectStats)
    : plan(plan), schedule(schedule), pool(threads),
      collectStats(collectStats) {}

void SessionState::initTensors(uint8_t *arena) {
  tensors.resize(schedule.tensors.size());
  for (size_t id = 0; id < schedule.tensors.size(); ++id) {
    const TensorInfo &info = schedule.tensors[id];
    Tensor &tensor = tensors[id];
    tensor.dtype = info.dtype;
    if (info.isWeight) {
      tensor.data = const_cast<uint8_t *>(info.weightData);
      tensor.shape.rank = info.rank;
      for (int d = 0; d < info.rank; ++d)
        tensor.shape[d] = info.dims[d].bound;
    } else {
      tensor.data = arena + info.offset;
    }
  }
  this->arena = arena;
  size_t steps = schedule.steps.size();
  staged.resize(schedule.inputs.size());
  boundInputs.assign(schedule.inputs.size(), nullptr);
  boundOutputs.assign(schedule.outputs.size(), nullptr);
  inputViews.assign(schedule.inputs.size(), CacheView());
  outputViews.assign(schedule.outputs.size(), CacheView());
  provenCaches.assign(schedule.inputs.size(), ProvenCache());
  symbolValues.assign(plan.symbols.size(), -1);
  calls.assign(steps, 0);
  seconds.assign(steps, 0);
  moeCounters.resize(steps);
  opSuffix.assign(steps, "");
  collectives.inFlight.assign(steps, 0);
}

absl::Status SessionState::setInput(absl::string_view name, DType dtype,
                                    const std::vector<int64_t> &shape,
                                    const void *data, size_t bytes) {
  int index = find(schedule.inputDescs, name);
  if (index < 0)
    return absl::NotFoundError(
        absl::StrCat("unknown input '", name,
                     "'; the plan's inputs are: ", names(schedule.inputDescs)));
  MOERT_ASSIGN_OR_RETURN(Shape actual,
                         checkInput(index, name, dtype, shape, bytes));
  Staged &input = staged[index];
  input.shape = actual;
  input.bytes.assign(static_cast<const uint8_t *>(data),
                     static_cast<const uint8_t *>(data) + bytes);
  input.set = true;
  boundInputs[index] = nullptr;
  inputViews[index] = CacheView();
  hasRun = false;
  return absl::OkStatus();
}

absl::Status SessionState::bindInput(absl::string_view name,
                                     const std::vector<int64_t> &shape,
                                     const void *data) {
  int index = find(schedule.inputDescs, name);
  if (index < 0)
    return absl::NotFoundError(
        absl::StrCat("unknown input '", name,
                     "'; the plan's inputs are: ", names(schedule.inputDescs)));
  const TensorInfo &info = schedule.tensors[schedule.inputs[index]];
  int64_t numel = 1;
  for (int64_t size : shape)
    numel *= size < 0 ? 0 : size;
  MOERT_ASSIGN_OR_RETURN(
      Shape actual,
      checkInput(index, name, info.dtype, shape,
                 static_cast<size_t>(numel) * dtypeSize(info.dtype)));
  Staged &input = staged[index];
  input.shape = actual;
  input.bytes.clear();
  input.set = true;
  boundInputs[index] = static_cast<const uint8_t *>(data);
  inputViews[index] = CacheView();
  hasRun = false;
  return absl::OkStatus();
}

absl::Status SessionState::bindOutput(absl::string_view name, void *data,
                                      size_t capacity) {
  int index = find(schedule.outputDescs, name);
  if (index < 0)
    return absl::NotFoundError(absl::StrCat(
        "unknown output '", name,
        "'; the plan's outputs are: ", names(schedule.outputDescs)));
  const TensorInfo &info = schedule.tensors[schedule.outputs[index]];
  if (data && (info.producer < 0 || info.isGraphInput))
    return absl::InvalidArgumentError(absl::StrCat(
        "output '", name, "' is not computed by a step; it cannot be bound"));
  if (data && capacity < info.size)
    return absl::InvalidArgumentError(
        absl::StrCat("output '", name, "' is planned for up to ", info.size,
                     " bytes; the bound buffer has ", capacity));
  boundOutputs[index] = static_cast<uint8_t *>(data);
  outputViews[index] = CacheView();
  hasRun = false;
  return absl::OkStatus();
}

absl::Status SessionState::bindCache(absl::string_view input,
                                     absl::string_view output,
                                     const std::vector<int64_t> &shape,
                                     void *data, size_t capacity, int axis,
                                     int64_t pitch) {
  int in = find(schedule.inputDescs, input);
  int out = find(schedule.outputDescs, output);
  if (in < 0 || out < 0)
    return absl::NotFoundError(
        absl::StrCat("unknown cache pair '", input, "' -> '", output, "'"));
  ProvenCache &proven = provenCaches[in];
  if (proven.output != out || proven.axis != axis) {
    std::string blocker = cacheInPlaceBlocker(schedule, schedule.inputs[in],
                                              schedule.outputs[out], axis);
    if (!blocker.empty())
      return absl::FailedPreconditionError(
          absl::StrCat("the cache '", input, "' -> '", output,
                       "' cannot be written in place: ", blocker));
    proven = {out, axis};
  }
  if (axis < 0 || axis >= static_cast<int>(shape.size()) || shape[axis] > pitch)
    return absl::InvalidArgumentError(
        absl::StrCat("cache '", input, "': its past along axis ", axis,
                     " does not fit in ", pitch, " positions"));
  uint64_t elements = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    elements *=
        static_cast<uint64_t>(static_cast<int>(d) == axis ? pitch : shape[d]);
  if (capacity < elements * sizeof(float))
    return absl::InvalidArgumentError(absl::StrCat(
        "cache '", input, "' needs ", elements * sizeof(float), " bytes at ",
        pitch, " positions; the buffer has ", capacity));
  MOERT_RETURN_IF_ERROR(bindInput(input, shape, data));
  inputViews[in] = {axis, pitch};
  boundOutputs[out] = static_cast<uint8_t *>(data);
  outputViews[out] = {axis, pitch};
  return absl::OkStatus();
}

absl::StatusOr<Shape>
SessionState::checkInput(int index, absl::string_view name, DType dtype,
                         const std::vector<int64_t> &shape,
                         size_t bytes) const {
  const TensorInfo &info = schedule.tensors[schedule.inputs[index]];
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
    const DimInfo &dim = info.dims[d];
    int64_t size = shape[d];
    actual.push(size);
    if (dim.kind == fb::DimKind::Static && size != dim.bound)
      return error("dim ", d, " is ", size, "; the plan expects ", dim.bound);
    if (size < 0 || size > dim.bound)
      return error(
          "dim ", d, " is ", size, "; the plan allows [",
          dim.kind == fb::DimKind::Symbolic ? plan.symbols[dim.symbol].min : 0,
          ", ", dim.bound, "]",
          dim.kind == fb::DimKind::Symbolic
              ? absl::StrCat(" for symbol '", plan.symbols[dim.symbol].name,
                             "'")
              : std::string());
    // A device of a multi-device plan gets a share of the batch, possibly
    // empty; DeviceGroup checks the whole batch against the minimum.
    if (dim.kind == fb::DimKind::Symbolic && plan.schedules.size() == 1 &&
        size < plan.symbols[dim.symbol].min)
      return error("dim ", d, " is ", size, "; symbol '",
                   plan.symbols[dim.symbol].name, "' is at least ",
                   plan.symbols[dim.symbol].min);
    numel *= size;
  }
  size_t expected = static_cast<size_t>(numel) * dtypeSize(dtype);
  if (bytes != expected)
    return error("has ", bytes, " bytes; shape ", actual.str(), " of ",
                 dtypeName(dtype), " needs ", expected);
  return actual;
}

absl::Status SessionState::bindSymbols() {
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

void SessionState::stageInputs() {
  for (size_t k = 0; k < schedule.inputs.size(); ++k) {
    Tensor &tensor = tensors[schedule.inputs[k]];
    tensor.shape = staged[k].shape;
    tensor.cacheAxis = inputViews[k].axis;
    tensor.cachePitch = inputViews[k].pitch;
    if (boundInputs[k]) {
      tensor.data = const_cast<uint8_t *>(boundInputs[k]);
      continue;
    }
    tensor.data = arena + schedule.tensors[schedule.inputs[k]].offset;
    if (!staged[k].bytes.empty())
      std::memcpy(tensor.data, staged[k].bytes.data(), staged[k].bytes.size());
  }
  for (size_t k = 0; k < schedule.outputs.size(); ++k) {
    uint32_t id = schedule.outputs[k];
    const TensorInfo &info = schedule.tensors[id];
    if (info.producer >= 0 && !info.isGraphInput) {
      tensors[id].data =
          boundOutputs[k] ? boundOutputs[k] : arena + info.offset;
      tensors[id].cacheAxis = outputViews[k].axis;
      tensors[id].cachePitch = outputViews[k].pitch;
    }
  }
}

KernelContext SessionState::context(const StepInfo &step) {
  KernelContext ctx(step, schedule, tensors.data(), symbolValues.data(), pool);
  if (collectStats)
    ctx.setMoeCounters(&moeCounters[step.index]);
  ctx.setCollectives(&collectives);
  if (experts && schedule.tiers.layerOfStep[step.index] >= 0)
    ctx.setExpertWeights(experts.get(), schedule.tiers.layerOfStep[step.index]);
  return ctx;
}

absl::Status SessionState::createExpertStore(int device, uint64_t deviceMemory,
                                             const std::string &read,
                                             const std::string &prefetch,
                                             const std::string &cache) {
  MOERT_ASSIGN_OR_RETURN(ExpertReadMode mode, parseExpertReadMode(read));
  MOERT_ASSIGN_OR_RETURN(ExpertCachePolicy policy,
                         parseExpertCachePolicy(cache));
  MOERT_ASSIGN_OR_RETURN(
      ExpertPrefetch ahead,
      parseExpertPrefetch(prefetch, schedule.tiers.prefetch));
  if (!schedule.tiers.present) {
    if (deviceMemory)
      return absl::FailedPreconditionError(absl::StrCat(
          plan.source,
          ": a device memory budget needs a tiered plan, whose expert weights "
          "are laid out for paging: compile it with moec compile "
          "--device-memory BYTES"));
    return absl::OkStatus();
  }
  MOERT_ASSIGN_OR_RETURN(experts, ExpertStore::create(plan, schedule, device,
                                                      deviceMemory, mode, pool,
                                                      ahead, policy));
  return absl::OkStatus();
}

absl::Status
SessionState::shareExpertStore(std::shared_ptr<ExpertStore> store) {
  MOERT_ASSIGN_OR_RETURN(expertView, store->attach(schedule));
  experts = std::move(store);
  return absl::OkStatus();
}

absl::StatusOr<TensorData> SessionState::output(absl::string_view name) const {
  int index = find(schedule.outputDescs, name);
  if (index < 0)
    return absl::NotFoundError(absl::StrCat(
        "unknown output '", name,
        "'; the plan's outputs are: ", names(schedule.outputDescs)));
  if (!hasRun)
    return absl::FailedPreconditionError(
        absl::StrCat("output '", name, "' is read before a successful run"));
  const Tensor &tensor = tensors[schedule.outputs[index]];
  if (tensor.isCacheView())
    return absl::FailedPreconditionError(
        absl::StrCat("output '", name,
                     "' is a KV cache written in place (pitched, not "
                     "contiguous); the Generator owns it"));
  TensorData out;
  out.dtype = tensor.dtype;
  out.shape.assign(tensor.shape.dims, tensor.shape.dims + tensor.shape.rank);
  out.data = tensor.data;
  out.bytes = tensor.bytes();
  return out;
}

CommStats SessionState::commStats() const {
  CommStats stats = collectives.stats;
  for (const StepInfo &step : schedule.steps)
    (isExchange(step.op) ? stats.commSeconds : stats.computeSeconds) +=
        seconds[step.index];
  return stats;
}

std::vector<StepStats> SessionState::stepStats() const {
  std::vector<StepStats> stats;
  for (const StepInfo &step : schedule.steps) {
    StepStats entry;
    entry.name = std::string(step.name);
    entry.op = absl::StrCat(step.def->name, opSuffix[step.index]);
    entry.calls = calls[step.index];
    entry.totalSeconds = seconds[step.index];
    entry.expertLoad = moeCounters[step.index].expertLoad;
    entry.droppedAssignments = moeCounters[step.index].dropped;
    if (int32_t layer = schedule.tiers.layerOfStep.empty()
                            ? -1
                            : schedule.tiers.layerOfStep[step.index];
        (experts || backendPaging) && layer >= 0) {
      entry.tiered = true;
      // A layer of several steps (micro-batches) has one set of counters:
      // its first step carries them, so that the layer's sum counts once.
      if (schedule.tiers.layers[layer].step == step.index)
        entry.cache = experts ? experts->paging(expertView)[layer]
                              : (*backendPaging)[layer];
    }
    stats.push_back(std::move(entry));
  }
  return stats;
}

void SessionState::resetStats() {
  collectives.stats = CommStats();
  std::fill(calls.begin(), calls.end(), 0);
  std::fill(seconds.begin(), seconds.end(), 0);
  std::fill(moeCounters.begin(), moeCounters.end(), MoeCounters());
  if (experts)
    experts->resetPaging(expertView);
  if (backendPaging)
    std::fill(backendPaging->begin(), backendPaging->end(),
              ExpertCacheCounters());
  // The trace holds the runs the stats do.
  if (trace) {
    trace->clear();
    traceBase = moeCounters;
  }
}

void SessionState::setTrace(TraceRecorder *recorder) {
  trace = collectStats ? recorder : nullptr;
  traceBase = moeCounters;
}

void SessionState::traceBeginRun(int64_t beginNs) {
  trace->beginRun(beginNs, symbolValues);
  trace->addSpan(TraceKind::StageInputs, -1, beginNs, TraceRecorder::now());
  for (uint32_t id : schedule.inputs)
    trace->addShape(tensors[id].shape.dims, tensors[id].shape.rank);
}

void SessionState::traceStep(const StepInfo &step, TraceKind kind,
                             int64_t beginNs, int64_t endNs) {
  trace->addSpan(kind, static_cast<int32_t>(step.index), beginNs, endNs);
  for (int32_t id : step.outputs)
    if (id >= 0)
      trace->addShape(tensors[id].shape.dims, tensors[id].shape.rank);
}

void SessionState::traceEndRun() {
  for (const StepInfo &step : schedule.steps) {
    const MoeCounters &now = moeCounters[step.index];
    if (now.expertLoad.empty())
      continue;
    MoeCounters &base = traceBase[step.index];
    std::vector<uint64_t> grown = now.expertLoad;
    for (size_t e = 0; e < grown.size() && e < base.expertLoad.size(); ++e)
      grown[e] -= base.expertLoad[e];
    trace->addLoad(static_cast<int32_t>(step.index), std::move(grown),
                   now.dropped - base.dropped);
    base = now;
  }
  trace->endRun(TraceRecorder::now());
}

} // namespace detail

// SessionBase (moert.h): the shared half of every backend's session.

absl::Status SessionBase::setInput(std::string_view name, DType dtype,
                                   const std::vector<int64_t> &shape,
                                   const void *data, size_t bytes) {
  return state_.setInput(absl::string_view(name.data(), name.size()), dtype,
                         shape, data, bytes);
}

absl::Status SessionBase::bindInput(std::string_view name, DType dtype,
                                    const std::vector<int64_t> &shape,
                                    const void *data, size_t bytes) {
  absl::string_view key(name.data(), name.size());
  int index = detail::find(state_.schedule.inputDescs, key);
  // Unknown names get bindInput's message; known ones the dtype and size
  // checks of setInput before the binding.
  if (index >= 0)
    MOERT_RETURN_IF_ERROR(
        state_.checkInput(index, key, dtype, shape, bytes).status());
  return state_.bindInput(key, shape, data);
}

absl::Status SessionBase::bindOutput(std::string_view name, void *data,
                                     size_t capacity) {
  return state_.bindOutput(absl::string_view(name.data(), name.size()), data,
                           capacity);
}

absl::StatusOr<size_t>
SessionBase::outputCapacity(std::string_view name) const {
  const detail::ScheduleInfo &schedule = state_.schedule;
  absl::string_view key(name.data(), name.size());
  int index = detail::find(schedule.outputDescs, key);
  if (index < 0)
    return absl::NotFoundError(absl::StrCat(
        "unknown output '", key,
        "'; the plan's outputs are: ", detail::names(schedule.outputDescs)));
  const detail::TensorInfo &info = schedule.tensors[schedule.outputs[index]];
  if (info.producer < 0 || info.isGraphInput)
    return 0;
  return static_cast<size_t>(info.size);
}

absl::StatusOr<TensorData> SessionBase::output(std::string_view name) const {
  return state_.output(absl::string_view(name.data(), name.size()));
}

std::vector<StepStats> SessionBase::stepStats() const {
  return state_.stepStats();
}

void SessionBase::resetStats() { state_.resetStats(); }

void SessionBase::setTrace(TraceRecorder *recorder) {
  state_.setTrace(recorder);
}

int SessionBase::threads() const { return state_.pool.size(); }

ExpertCacheStats SessionBase::expertCacheStats() const {
  ExpertCacheStats out;
  const detail::ExpertStore *store = state_.experts.get();
  if (!store && state_.describeBackendExperts)
    return state_.describeBackendExperts();
  if (!store)
    return out;
  out.tiered = true;
  out.budget = store->budget();
  out.capacityBytes = store->cache().capacity();
  out.usedBytes = store->cache().used();
  out.hotExperts = store->hotExperts();
  out.hotBytes = store->hotBytes();
  out.residentBytes = store->tiers().residentBytes;
  out.arenaBytes = state_.schedule.arenaSize;
  out.readMode = detail::expertReadModeName(store->mode());
  out.prefetch = detail::expertPrefetchName(store->prefetch());
  out.policy = detail::expertCachePolicyName(store->policy());
  return out;
}

absl::StatusOr<double>
SessionBase::measureExpertReadBandwidth(uint64_t maxBytes) {
  if (!state_.experts && state_.probeBackendBandwidth)
    return state_.probeBackendBandwidth(maxBytes);
  if (!state_.experts)
    return 0.0;
  return state_.experts->probeBandwidth(state_.pool, maxBytes);
}

} // namespace moert
