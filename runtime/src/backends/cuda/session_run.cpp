//===- session_run.cpp - Running a schedule on a CUDA device --------------===//
//
// CudaSession::run: the steps eagerly in order, each on the GPU or on the
// host with the copies between them, or, when every step runs on the GPU,
// replayed from the CUDA graph captured for the bound sizes; then the MoE
// stats from the copies the run queued and the trace of the GPU steps
// (docs/cuda.md, "CUDA graphs").
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/session_impl.h"

namespace moert {

absl::Status CudaSession::Impl::runSteps(std::vector<bool> &timed) {
  using Clock = std::chrono::steady_clock;
  for (const StepInfo &step : schedule.steps) {
    KernelContext ctx = context(step);
    bool device = runsOnDevice(step);
    if (device) {
      int64_t launchBegin = trace ? TraceRecorder::now() : 0;
      // External records while the stream is being captured: there a plain
      // cudaEventRecord only marks a dependency inside the capture (no graph
      // node), and the event is then unusable (cudaEventElapsedTime fails
      // with cudaErrorCapturedEvent); an external record becomes a node that
      // every replay records. Outside a capture the external flag is invalid
      // (cuEventRecordWithFlags), so eager runs record plainly.
      unsigned recordFlags =
          capturing ? cudaEventRecordExternal : cudaEventRecordDefault;
      auto [start, stop] = events[step.index];
      if (start)
        MOERT_CUDA(cudaEventRecordWithFlags(start, stream, recordFlags),
                   step.label);
      MOERT_RETURN_IF_ERROR(runOnDevice(step, ctx));
      if (stop)
        MOERT_CUDA(cudaEventRecordWithFlags(stop, stream, recordFlags),
                   step.label);
      for (const StatsCopy &copy : statsCopies)
        if (copy.step == step.index)
          MOERT_CUDA(cudaMemcpyAsync(copy.pinned, devicePtr(copy.tensor),
                                     tensors[copy.tensor].bytes(),
                                     cudaMemcpyDeviceToHost, stream),
                     step.label);
      timed[step.index] = start != nullptr;
      if (trace)
        traceStep(step, TraceKind::Launch, launchBegin, TraceRecorder::now());
    } else {
      MOERT_RETURN_IF_ERROR(toHost(step));
      Clock::time_point begin = Clock::now();
      MOERT_RETURN_IF_ERROR(step.def->kernel(ctx));
      if (collectStats) {
        Clock::time_point end = Clock::now();
        seconds[step.index] +=
            std::chrono::duration<double>(end - begin).count();
        if (trace)
          traceStep(step, TraceKind::Step, detail::traceNanos(begin),
                    detail::traceNanos(end));
      }
    }
    for (int32_t id : step.outputs) {
      onHost[id] = !device;
      onDevice[id] = device;
    }
  }
  return absl::OkStatus();
}

absl::Status CudaSession::Impl::planStatsCopies() {
  if (!collectStats)
    return absl::OkStatus();
  for (const StepInfo &step : schedule.steps) {
    if (!deviceOps[step.index])
      continue;
    int32_t tensor = -1;
    if (step.op == fb::OpKind::Router)
      tensor = step.outputs[1];
    else if (step.op == fb::OpKind::Experts)
      tensor = step.inputs[1];
    if (tensor < 0)
      continue;
    StatsCopy copy{step.index, tensor, nullptr};
    MOERT_CUDA(
        cudaMallocHost(reinterpret_cast<void **>(&copy.pinned),
                       std::max<uint64_t>(schedule.tensors[tensor].size, 1)),
        step.label);
    statsCopies.push_back(copy);
  }
  return absl::OkStatus();
}

void CudaSession::Impl::countMoeLoads() {
  for (const StatsCopy &copy : statsCopies) {
    const StepInfo &step = schedule.steps[copy.step];
    const Tensor &tensor = tensors[copy.tensor];
    const auto *values = reinterpret_cast<const int64_t *>(copy.pinned);
    detail::MoeCounters &counters = moeCounters[copy.step];
    if (step.op == fb::OpKind::Router) {
      // indices [.., k] of experts in [0, E), or -1 when dropped.
      const Shape &logits = tensors[step.inputs[0]].shape;
      int64_t experts = logits[logits.rank - 1];
      counters.expertLoad.resize(experts, 0);
      for (int64_t i = 0; i < tensor.numel(); ++i) {
        if (values[i] >= 0 && values[i] < experts)
          ++counters.expertLoad[values[i]];
        else
          ++counters.dropped;
      }
    } else {
      // offsets [E + 1], checked by the step's kernels.
      int64_t experts = tensor.numel() - 1;
      counters.expertLoad.resize(std::max<int64_t>(experts, 0), 0);
      for (int64_t e = 0; e < experts; ++e)
        counters.expertLoad[e] += uint64_t(values[e + 1] - values[e]);
    }
  }
}

void CudaSession::Impl::traceGpuSteps(const std::vector<bool> &timed) {
  size_t first = 0;
  while (first < timed.size() && !timed[first])
    ++first;
  if (first == timed.size())
    return;
  // The GPU clock on the host's: the first timed step started when the
  // graph that holds it was launched, or else when its own launch began
  // (the GPU cannot start it earlier; it starts then when the stream is
  // idle, which it is at the start of a run).
  int64_t anchor = -1;
  for (const TraceSpan &span : trace->runs().back().spans)
    if (span.kind == TraceKind::GraphLaunch ||
        (anchor < 0 && span.kind == TraceKind::Launch &&
         span.step == static_cast<int32_t>(first)))
      anchor = span.beginNs;
  if (anchor < 0)
    return;
  cudaEvent_t origin = events[first].first;
  for (const StepInfo &step : schedule.steps) {
    if (!timed[step.index])
      continue;
    float begin = 0, end = 0;
    if (cudaEventElapsedTime(&begin, origin, events[step.index].first) !=
            cudaSuccess ||
        cudaEventElapsedTime(&end, origin, events[step.index].second) !=
            cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    traceStep(step, TraceKind::GpuStep, anchor + int64_t(double(begin) * 1e6),
              anchor + int64_t(double(end) * 1e6));
  }
}

absl::Status CudaSession::Impl::runWithGraph(std::vector<bool> &timed) {
  // The graph holds the steps only: the inputs go up before it (they come
  // from pageable host memory, which a graph cannot copy from).
  for (uint32_t id : schedule.inputs)
    MOERT_RETURN_IF_ERROR(toDevice(id, schedule.steps.front()));
  auto found = graphs.find(symbolValues);
  if (found != graphs.end() && found->second.exec) {
    Graph &graph = found->second;
    int64_t traceBegin = trace ? TraceRecorder::now() : 0;
    MOERT_CUDA(cudaGraphLaunch(graph.exec, stream), "launching the CUDA graph");
    if (trace)
      trace->addSpan(TraceKind::GraphLaunch, -1, traceBegin,
                     TraceRecorder::now());
    for (size_t id = 0; id < tensors.size(); ++id)
      if (!schedule.tensors[id].isWeight)
        tensors[id].shape = graph.shapes[id];
    // Host steps do not run in a replay: their values depend only on the
    // sizes (graphable), and the captured launches hold what they gave.
    for (const StepInfo &step : schedule.steps) {
      bool device = runsOnDevice(step);
      timed[step.index] = events[step.index].first != nullptr;
      for (int32_t id : step.outputs) {
        onHost[id] = !device;
        onDevice[id] = device;
      }
    }
    return absl::OkStatus();
  }
  // The first run with these sizes runs eagerly (cuBLAS and the modules
  // finish their lazy set-up outside any capture); the second is captured
  // and then launched; later ones replay it.
  if (found == graphs.end()) {
    if (graphs.size() < kMaxGraphs)
      graphs.emplace(symbolValues, Graph());
    return runSteps(timed);
  }
  Graph &graph = found->second;
  if (hostUploadBytes && !graph.pinned)
    MOERT_CUDA(cudaMallocHost(reinterpret_cast<void **>(&graph.pinned),
                              hostUploadBytes),
               "allocating the CUDA graph's host values");
  capturingGraph = &graph;
  MOERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
             "capturing the CUDA graph");
  capturing = true;
  captureUnsafe = false;
  absl::Status steps = runSteps(timed);
  capturing = false;
  cudaGraph_t captured = nullptr;
  cudaError_t ended = cudaStreamEndCapture(stream, &captured);
  cudaError_t made = cudaErrorUnknown;
  if (steps.ok() && ended == cudaSuccess && !captureUnsafe)
    made = cudaGraphInstantiate(&graph.exec, captured, 0);
  if (captured)
    cudaGraphDestroy(captured);
  if (!steps.ok() || captureUnsafe || ended != cudaSuccess ||
      made != cudaSuccess) {
    // The steps enqueue fine eagerly (the first run with these sizes did,
    // and a graphable schedule's host steps depend on the sizes only), so a
    // step that fails inside the capture was refused by it (a call the
    // capture forbids, a capture the driver invalidated): not the run's
    // failure. This session runs eagerly from now on, starting with this run
    // (nothing of the capture executed); a genuine error fails that run.
    (void)cudaGetLastError();
    graphable = false;
    graphsRefused =
        captureUnsafe ? "a GPU step reads a value that a host step computed"
        : !steps.ok() ? absl::StrCat("a step failed inside the capture: ",
                                     steps.message())
                      : cudaGetErrorString(ended != cudaSuccess ? ended : made);
    graph.exec = nullptr;
    for (size_t id = 0; id < tensors.size(); ++id)
      if (!schedule.tensors[id].isWeight)
        onHost[id] = onDevice[id] = 0;
    for (uint32_t id : schedule.inputs)
      onHost[id] = onDevice[id] = 1;
    std::fill(timed.begin(), timed.end(), false);
    return runSteps(timed);
  }
  graph.shapes.resize(tensors.size());
  for (size_t id = 0; id < tensors.size(); ++id)
    graph.shapes[id] = tensors[id].shape;
  int64_t traceBegin = trace ? TraceRecorder::now() : 0;
  MOERT_CUDA(cudaGraphLaunch(graph.exec, stream), "launching the CUDA graph");
  if (trace)
    trace->addSpan(TraceKind::GraphLaunch, -1, traceBegin,
                   TraceRecorder::now());
  return absl::OkStatus();
}

absl::Status CudaSession::run() {
  Impl &s = *impl_;
  s.hasRun = false;
  MOERT_RETURN_IF_ERROR(s.bindSymbols());
  int64_t traceBegin = s.trace ? TraceRecorder::now() : 0;
  MOERT_CUDA(cudaSetDevice(s.gpu), "selecting the CUDA device");
  // A failed call of an earlier run (or of the caller) leaves its error as
  // the thread's last error, which the next launch's cudaGetLastError check
  // would report as its own; a sticky error still fails the next call.
  (void)cudaGetLastError();
  for (size_t id = 0; id < s.tensors.size(); ++id)
    if (!s.schedule.tensors[id].isWeight)
      s.onHost[id] = s.onDevice[id] = 0;
  s.stageInputs();
  for (uint32_t id : s.schedule.inputs)
    s.onHost[id] = 1;
  if (s.trace)
    s.traceBeginRun(traceBegin);
  MOERT_CUDA(
      cudaMemsetAsync(s.deviceErrors, 0, sizeof(DeviceErrorRecord), s.stream),
      "clearing the device error record");
  std::vector<bool> timed(s.schedule.steps.size(), false);
  MOERT_RETURN_IF_ERROR(s.graphable ? s.runWithGraph(timed)
                                    : s.runSteps(timed));
  if (s.collectStats)
    for (const StepInfo &step : s.schedule.steps)
      ++s.calls[step.index];
  int64_t copyBegin = s.trace ? TraceRecorder::now() : 0;
  for (uint32_t id : s.schedule.outputs)
    if (!s.onHost[id]) {
      MOERT_CUDA(cudaMemcpyAsync(s.tensors[id].data, s.devicePtr(id),
                                 s.tensors[id].bytes(), cudaMemcpyDeviceToHost,
                                 s.stream),
                 absl::StrCat("copying output '", s.schedule.tensors[id].name,
                              "' to the host"));
      s.onHost[id] = 1;
    }
  int64_t syncBegin = s.trace ? TraceRecorder::now() : 0;
  if (s.trace)
    s.trace->addSpan(TraceKind::CopyToHost, -1, copyBegin, syncBegin);
  if (s.nccl)
    MOERT_RETURN_IF_ERROR(s.nccl->synchronize("finishing the run"));
  MOERT_CUDA(cudaStreamSynchronize(s.stream), "finishing the run");
  if (s.trace)
    s.trace->addSpan(TraceKind::Sync, -1, syncBegin, TraceRecorder::now());
  MOERT_RETURN_IF_ERROR(s.checkDeviceErrors());
  if (s.deviceExperts)
    MOERT_RETURN_IF_ERROR(s.deviceExperts->finishRun());
  s.countMoeLoads();
  for (const StepInfo &step : s.schedule.steps)
    if (timed[step.index]) {
      float ms = 0;
      MOERT_CUDA(cudaEventElapsedTime(&ms, s.events[step.index].first,
                                      s.events[step.index].second),
                 step.label);
      s.seconds[step.index] += ms * 1e-3;
    }
  if (s.trace) {
    s.traceGpuSteps(timed);
    s.traceEndRun();
  }
  s.hasRun = true;
  return absl::OkStatus();
}

bool CudaSession::usesGraphs() const { return impl_->graphable; }

std::string CudaSession::graphsRefused() const { return impl_->graphsRefused; }

} // namespace moert
