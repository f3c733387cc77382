//===- session.cpp - Executing a schedule on a CUDA device ----------------===//
//
// The CUDA session (moert/cuda.h). Tensors keep one slot in a host mirror of
// the arena and one in the device arena, at the plan's offsets, with a flag
// per tensor for where its current value is. A step with a GPU
// implementation (today: the compiler-generated fused elementwise kernels)
// runs on the compute stream and leaves its outputs on the device; any other
// step runs the CPU kernel on the host mirror after its device-resident
// inputs were copied back. The memory plan guarantees that live tensors
// never share bytes, so the copies of one tensor never clobber another live
// one. A whole run (eager, or replayed from a CUDA graph) is
// session_run.cpp's; the state both share is session_impl.h.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/session_impl.h"

namespace moert {
namespace {

#define MOERT_CUBLAS(call, where)                                              \
  MOERT_RETURN_IF_ERROR(cublasCheck((call), #call, (where)))

/// Weight uploads go through two pinned buffers of this size, so that
/// filling one overlaps the copy out of the other.
constexpr size_t kStagingBytes = size_t(32) << 20;
/// Device placement of each weight: 256 bytes, the alignment cudaMalloc
/// gives and vectorised loads want.
constexpr uint64_t kDeviceAlignment = 256;

} // namespace

bool cudaBackendBuilt() { return true; }

absl::StatusOr<int> cudaDeviceCount() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError(); // Clears the sticky error for later calls.
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: ", cudaGetErrorString(error)));
  }
  if (count == 0)
    return absl::FailedPreconditionError(
        "no CUDA device: the driver reports none");
  return count;
}

CudaSession::Impl::~Impl() {
  // Teardown cannot report errors; a failing call here leaves nothing to
  // recover.
  cudaSetDevice(gpu);
  for (auto &[sizes, graph] : graphs) {
    if (graph.exec)
      cudaGraphExecDestroy(graph.exec);
    cudaFreeHost(graph.pinned);
  }
  for (auto &[start, stop] : events) {
    if (start)
      cudaEventDestroy(start);
    if (stop)
      cudaEventDestroy(stop);
  }
  if (library)
    cudaLibraryUnload(library);
  if (blas)
    cublas->destroy(blas);
  if (stream)
    cudaStreamDestroy(stream);
  cudaFree(deviceScratch);
  cudaFree(deviceErrors);
  cudaFree(blasWorkspace);
  for (const StatsCopy &copy : statsCopies)
    cudaFreeHost(copy.pinned);
  cudaFree(deviceWeights);
  cudaFree(deviceArena);
  std::free(hostArena);
}

absl::Status CudaSession::Impl::uploadWeights() {
  // Several tensor entries may name the same bytes (a shared weight): each
  // distinct (address, size) is uploaded once. The size is part of the key:
  // an empty weight may share its address with the next one.
  std::map<std::pair<const uint8_t *, uint64_t>, uint64_t> placed;
  std::vector<std::pair<const uint8_t *, uint64_t>> uploads;
  uint64_t total = 0;
  weightOffsets.assign(schedule.tensors.size(), 0);
  for (size_t id = 0; id < schedule.tensors.size(); ++id) {
    const TensorInfo &info = schedule.tensors[id];
    // Paged experts are the tiered store's (createDeviceExperts).
    if (!info.isWeight || info.paged)
      continue;
    auto [it, inserted] =
        placed.emplace(std::pair(info.weightData, info.size), total);
    if (inserted) {
      uploads.emplace_back(info.weightData, info.size);
      total = detail::alignTo(total + info.size, kDeviceAlignment);
    }
    weightOffsets[id] = it->second;
  }
  if (total == 0)
    return absl::OkStatus();
  MOERT_CUDA(cudaMalloc(reinterpret_cast<void **>(&deviceWeights), total),
             absl::StrCat("allocating ", total, " bytes of weights"));

  uint8_t *staging = nullptr;
  MOERT_CUDA(
      cudaMallocHost(reinterpret_cast<void **>(&staging), 2 * kStagingBytes),
      "allocating the pinned weight staging buffers");
  cudaEvent_t done[2] = {nullptr, nullptr};
  // Frees the staging resources on every path out.
  struct Cleanup {
    uint8_t *&staging;
    cudaEvent_t *done;
    ~Cleanup() {
      for (int b = 0; b < 2; ++b)
        if (done[b])
          cudaEventDestroy(done[b]);
      cudaFreeHost(staging);
    }
  } cleanup{staging, done};
  for (int b = 0; b < 2; ++b)
    MOERT_CUDA(cudaEventCreateWithFlags(&done[b], cudaEventDisableTiming),
               "uploading weights");
  int buffer = 0;
  bool used[2] = {false, false};
  for (const auto &[source, size] : uploads) {
    uint64_t offset = placed[{source, size}];
    for (uint64_t at = 0; at < size; at += kStagingBytes) {
      size_t chunk =
          static_cast<size_t>(std::min<uint64_t>(kStagingBytes, size - at));
      uint8_t *slot = staging + buffer * kStagingBytes;
      // The buffer's previous copy must have left it before it is refilled.
      if (used[buffer])
        MOERT_CUDA(cudaEventSynchronize(done[buffer]), "uploading weights");
      std::memcpy(slot, source + at, chunk);
      MOERT_CUDA(cudaMemcpyAsync(deviceWeights + offset + at, slot, chunk,
                                 cudaMemcpyHostToDevice, stream),
                 "uploading weights");
      MOERT_CUDA(cudaEventRecord(done[buffer], stream), "uploading weights");
      used[buffer] = true;
      buffer ^= 1;
    }
  }
  MOERT_CUDA(cudaStreamSynchronize(stream), "uploading weights");
  return absl::OkStatus();
}

/// The program FlatBuffer of a loaded plan. The loader verified the header,
/// the section table and the buffer, so this only locates it again.
static const fb::Program *programOf(const Plan::Impl &plan) {
  detail::FileHeader header = detail::decodeHeader(plan.data);
  for (uint32_t s = 0; s < header.sectionCount; ++s) {
    detail::SectionEntry entry = detail::decodeSection(
        plan.data + header.sectionTableOffset + s * kSectionEntrySize);
    if (entry.kind == static_cast<uint32_t>(SectionKind::Program))
      return fb::GetProgram(plan.data + entry.offset);
  }
  return nullptr;
}

absl::Status CudaSession::Impl::loadKernels() {
  kernels.assign(schedule.steps.size(), nullptr);
  const fb::Program *program = programOf(plan);
  const fb::CudaModule *module = program ? program->cuda_module() : nullptr;
  auto invalid = [&](const auto &...why) {
    return absl::InvalidArgumentError(
        absl::StrCat(plan.source, ": CUDA module: ", why...));
  };
  if (!module) {
    for (const StepInfo &step : schedule.steps)
      if (step.fb->kernel() && step.fb->kernel()->size())
        return invalid(step.label, " names a kernel, but there is no module");
    return absl::OkStatus();
  }
  const flatbuffers::String *ptx = module->ptx();
  // The driver reads the PTX as a C string: it must end at its size.
  if (ptx->size() == 0 || std::strlen(ptx->c_str()) != ptx->size())
    return invalid("the PTX is empty or contains a NUL byte");
  if (module->arch() != plan.target.cudaArch)
    return invalid("arch ", module->arch(), " differs from the header's ",
                   plan.target.cudaArch);
  std::map<std::string_view, int> names;
  for (flatbuffers::uoffset_t k = 0; k < module->kernels()->size(); ++k) {
    const flatbuffers::String *name = module->kernels()->Get(k);
    if (!names.emplace(name->string_view(), k).second)
      return invalid("kernel '", name->c_str(), "' is listed twice");
  }
  std::string where = absl::StrCat("loading the CUDA module of ", plan.source);
  MOERT_CUDA(cudaLibraryLoadData(&library, ptx->c_str(), nullptr, nullptr, 0,
                                 nullptr, nullptr, 0),
             where);
  for (const StepInfo &step : schedule.steps) {
    const flatbuffers::String *name = step.fb->kernel();
    if (!name || name->size() == 0)
      continue;
    if (step.op != fb::OpKind::FusedElementwise)
      return invalid(step.label, " names kernel '", name->c_str(),
                     "'; only FusedElementwise steps run generated kernels");
    if (!names.count(name->string_view()))
      return invalid(step.label, " names kernel '", name->c_str(),
                     "', which the module does not list");
    MOERT_CUDA(
        cudaLibraryGetKernel(&kernels[step.index], library, name->c_str()),
        step.label);
  }
  return absl::OkStatus();
}

absl::Status CudaSession::Impl::planDeviceOps() {
  uint64_t scratch = 0;
  deviceOps = cuda::chooseDeviceOps(schedule, nccl != nullptr);
  for (const StepInfo &step : schedule.steps) {
    if (kernels[step.index])
      deviceOps[step.index] = nullptr;
    const DeviceOp *op = deviceOps[step.index];
    if (op && op->scratchBytes)
      scratch = std::max(scratch, op->scratchBytes(step, schedule));
  }
  if (scratch)
    MOERT_CUDA(cudaMalloc(&deviceScratch, detail::alignTo(scratch, 256)),
               absl::StrCat("allocating ", scratch, " bytes of scratch"));
  MOERT_CUDA(cudaMalloc(reinterpret_cast<void **>(&deviceErrors),
                        sizeof(DeviceErrorRecord)),
             "allocating the device error record");
  return absl::OkStatus();
}

absl::Status
CudaSession::Impl::createDeviceExperts(uint64_t budget,
                                       const std::string &prefetch) {
  // Every step that reads paged experts must be a GPU step: the host
  // kernels read them through the CPU backend's store, which this session
  // does not have.
  for (const detail::TierLayerInfo &layer : schedule.tiers.layers) {
    std::vector<int32_t> steps = layer.moreSteps;
    steps.push_back(layer.step);
    for (int32_t index : steps) {
      const StepInfo &step = schedule.steps[index];
      if (!deviceOps[index] || step.op != fb::OpKind::Experts)
        return absl::UnimplementedError(absl::StrCat(
            plan.source, ": ", step.label,
            " is tiered but does not run on the GPU (its weights are not "
            "f32, bf16 or f16, or its shapes not static): run the plan on "
            "the cpu backend"));
    }
    for (const detail::PagedInput &input : layer.inputs)
      if (input.input < 2 || input.input >= 2 + cuda::kExpertSlots)
        return absl::UnimplementedError(
            absl::StrCat(plan.source, ": ", schedule.steps[layer.step].label,
                         ": paged input ", input.input,
                         " is no weight the GPU experts read (w1 .. b2)"));
  }
  MOERT_ASSIGN_OR_RETURN(
      detail::ExpertPrefetch ahead,
      detail::parseExpertPrefetch(prefetch, schedule.tiers.prefetch));
  MOERT_ASSIGN_OR_RETURN(deviceExperts, cuda::DeviceExpertStore::create(
                                            plan, schedule, budget, ahead));
  backendPaging = &deviceExperts->paging();
  describeBackendExperts = [store = deviceExperts.get()] {
    return store->describe();
  };
  probeBackendBandwidth = [store = deviceExperts.get()](uint64_t bytes) {
    return store->probeBandwidth(bytes);
  };
  return absl::OkStatus();
}

absl::Status CudaSession::Impl::checkDeviceErrors() {
  DeviceErrorRecord record{};
  MOERT_CUDA(
      cudaMemcpy(&record, deviceErrors, sizeof record, cudaMemcpyDeviceToHost),
      "reading the device error record");
  if (record.code == 0)
    return absl::OkStatus();
  if (record.step < 0 || record.step >= int(schedule.steps.size()) ||
      !deviceOps[record.step] || !deviceOps[record.step]->describeError)
    return absl::InternalError(absl::StrCat("a GPU kernel recorded error ",
                                            record.code, " for step ",
                                            record.step));
  const StepInfo &step = schedule.steps[record.step];
  return absl::InvalidArgumentError(absl::StrCat(
      step.label, ": ", deviceOps[record.step]->describeError(record)));
}

absl::Status CudaSession::Impl::toDevice(int32_t id, const StepInfo &step) {
  if (onDevice[id])
    return absl::OkStatus();
  if (capturing) {
    // A host step's result (graphable: it depends on the sizes only): the
    // graph copies it up from its own pinned snapshot, which no later run
    // rewrites. Anything else would be replayed from host memory that the
    // replay's host steps never refill: the capture is then discarded and
    // the session runs eagerly.
    auto slot = hostUploadOffsets.find(id);
    if (slot == hostUploadOffsets.end() || !capturingGraph->pinned) {
      captureUnsafe = true;
      return absl::OkStatus();
    }
    uint8_t *snapshot = capturingGraph->pinned + slot->second;
    std::memcpy(snapshot, tensors[id].data, tensors[id].bytes());
    MOERT_CUDA(cudaMemcpyAsync(devicePtr(id), snapshot, tensors[id].bytes(),
                               cudaMemcpyHostToDevice, stream),
               step.label);
    onDevice[id] = 1;
    return absl::OkStatus();
  }
  int64_t traceBegin = trace ? TraceRecorder::now() : 0;
  MOERT_CUDA(cudaMemcpyAsync(devicePtr(id), tensors[id].data,
                             tensors[id].bytes(), cudaMemcpyHostToDevice,
                             stream),
             step.label);
  if (trace)
    trace->addSpan(TraceKind::CopyToDevice, static_cast<int32_t>(step.index),
                   traceBegin, TraceRecorder::now());
  onDevice[id] = 1;
  return absl::OkStatus();
}

} // namespace moert

namespace moert::cuda {

/// What a DeviceStep reaches of the session.
class DeviceStepHost {
public:
  explicit DeviceStepHost(CudaSession::Impl &session) : s(session) {}
  CudaSession::Impl &s;
};

absl::StatusOr<const void *> DeviceStep::input(int i) {
  if (!ctx.has(i))
    return nullptr;
  int32_t id = step.inputs[i];
  MOERT_RETURN_IF_ERROR(host_.s.toDevice(id, step));
  return host_.s.devicePtr(id);
}

void *DeviceStep::output(int o) { return host_.s.devicePtr(step.outputs[o]); }

int32_t DeviceStep::tierLayer() const {
  const detail::TierInfo &tiers = host_.s.schedule.tiers;
  if (!host_.s.deviceExperts || tiers.layerOfStep.empty())
    return -1;
  return tiers.layerOfStep[step.index];
}

bool DeviceStep::isPaged(int i) const {
  int32_t layer = tierLayer();
  return layer >= 0 && host_.s.deviceExperts->isPaged(layer, i);
}

absl::Status DeviceStep::runTiered(const ExpertLaunch &launch) {
  CudaSession::Impl &s = host_.s;
  int32_t layer = tierLayer();
  // Pre-gating reads the layer's router input on the host: its copy back
  // is enqueued here and complete when runLayer has its offsets.
  const float *gate = nullptr;
  int64_t elements = 0;
  if (int32_t id = s.deviceExperts->gateTokensOf(layer);
      id >= 0 && s.tensors[id].dtype == DType::F32) {
    detail::Tensor &tokens = s.tensors[id];
    if (!s.onHost[id]) {
      MOERT_CUDA(cudaMemcpyAsync(tokens.data, s.devicePtr(id), tokens.bytes(),
                                 cudaMemcpyDeviceToHost, s.stream),
                 step.label);
      s.onHost[id] = 1;
    }
    gate = tokens.as<const float>();
    elements = tokens.numel();
  }
  return s.deviceExperts->runLayer(layer, launch, s.stream, step.label, gate,
                                   elements, s.pool);
}

cudaStream_t DeviceStep::stream() const { return host_.s.stream; }
const cudaDeviceProp &DeviceStep::props() const { return host_.s.props; }
void *DeviceStep::scratch() const { return host_.s.deviceScratch; }
DeviceErrorRecord *DeviceStep::errors() const { return host_.s.deviceErrors; }
absl::StatusOr<cublasContext *> DeviceStep::blas() { return host_.s.blas; }
const CublasApi &DeviceStep::cublas() const { return *host_.s.cublas; }

absl::Status DeviceStep::check(cudaError_t error, const char *call) const {
  return cudaCheck(error, call, step.label);
}

} // namespace moert::cuda

namespace moert {

absl::Status CudaSession::Impl::toHost(const StepInfo &step) {
  if (cuda::readsShapesOnly(step.op))
    return absl::OkStatus();
  int64_t traceBegin = trace ? TraceRecorder::now() : 0;
  bool copied = false;
  for (int32_t id : step.inputs) {
    if (id < 0 || onHost[id])
      continue;
    if (capturing) {
      // Cannot happen for a graphable schedule (its host steps read only
      // shape-derived values); the capture is discarded if it does.
      captureUnsafe = true;
      return absl::FailedPreconditionError(absl::StrCat(
          step.label, ": reads a GPU value on the host inside a capture"));
    }
    const Tensor &tensor = tensors[id];
    MOERT_CUDA(cudaMemcpyAsync(tensor.data, devicePtr(id), tensor.bytes(),
                               cudaMemcpyDeviceToHost, stream),
               step.label);
    onHost[id] = 1;
    copied = true;
  }
  if (!copied)
    return absl::OkStatus();
  if (nccl)
    MOERT_RETURN_IF_ERROR(nccl->synchronize(step.label));
  MOERT_CUDA(cudaStreamSynchronize(stream), step.label);
  if (trace)
    trace->addSpan(TraceKind::CopyToHost, static_cast<int32_t>(step.index),
                   traceBegin, TraceRecorder::now());
  // The host is in step with the GPU here anyway: a data error of an
  // earlier GPU step is reported now, before a host step reads its results.
  return checkDeviceErrors();
}

absl::Status CudaSession::Impl::runOnDevice(const StepInfo &step,
                                            KernelContext &ctx) {
  if (const DeviceOp *op = deviceOps[step.index]) {
    cuda::DeviceStepHost host(*this);
    cuda::DeviceStep deviceStep(host, step, ctx);
    return op->run(deviceStep);
  }
  // The output shape and its check against the plan, as on the CPU.
  int count = ctx.numInputs();
  const Shape *shapes[cuda::kFusedMaxOperands];
  for (int i = 0; i < count; ++i)
    shapes[i] = &ctx.in(i).shape;
  Shape shape;
  MOERT_RETURN_IF_ERROR(detail::broadcastOrError(ctx, shapes, count, shape));
  for (int o = 0; o < ctx.numOutputs(); ++o)
    MOERT_RETURN_IF_ERROR(ctx.allocate(o, shape).status());

  cuda::FusedArgs args;
  absl::Status planned = cuda::planFusedArgs(shape, shapes, count, args);
  if (!planned.ok())
    return ctx.error(planned.message());
  for (int i = 0; i < count; ++i) {
    int32_t id = step.inputs[i];
    MOERT_RETURN_IF_ERROR(toDevice(id, step));
    args.inputs[i] = reinterpret_cast<const float *>(devicePtr(id));
  }
  for (int o = 0; o < ctx.numOutputs(); ++o)
    args.outputs[o] = reinterpret_cast<float *>(devicePtr(step.outputs[o]));
  if (args.numel > 0) {
    unsigned grid = cuda::gridSize(args.numel, cuda::kFusedBlockSize,
                                   props.multiProcessorCount);
    void *params[] = {&args};
    MOERT_CUDA(cudaLaunchKernel(
                   reinterpret_cast<const void *>(kernels[step.index]),
                   dim3(grid), dim3(cuda::kFusedBlockSize), params, 0, stream),
               step.label);
  }
  return absl::OkStatus();
}

CudaSession::CudaSession(std::unique_ptr<Impl> impl)
    : SessionBase(*impl), impl_(std::move(impl)) {}
CudaSession::~CudaSession() = default;

absl::StatusOr<std::unique_ptr<CudaSession>>
CudaSession::create(const Plan &plan, const CudaSessionOptions &options) {
  const Plan::Impl &planImpl = plan.impl();
  MOERT_RETURN_IF_ERROR(detail::checkSessionPlan(
      plan, Backend::Cuda, "compile it with 'moec compile --target cuda'",
      options.device));
  const ScheduleInfo &schedule = planImpl.schedules[options.device];
  if (options.deviceMemory && !schedule.tiers.present)
    return absl::FailedPreconditionError(absl::StrCat(
        planImpl.source,
        ": a device memory budget needs a tiered plan, whose expert weights "
        "are laid out for paging: compile it with moec compile "
        "--device-memory BYTES"));
  // The exchanges of a multi-device schedule go through the group's
  // communicator: on the host as on the CPU backend, or over NCCL.
  MOERT_RETURN_IF_ERROR(detail::checkSessionCommunicator(plan, options.device,
                                                         options.communicator));
  MOERT_ASSIGN_OR_RETURN(int gpus, cudaDeviceCount());
  if (options.gpu < 0 || options.gpu >= gpus)
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", options.gpu, " is not in [0, ", gpus, ")"));

  int threads = detail::sessionThreads(options.threads);
  auto impl =
      std::make_unique<Impl>(planImpl, schedule, threads, options.collectStats);
  Impl &s = *impl;
  s.gpu = options.gpu;
  s.collectives.comm = options.communicator;
  if (options.communicator &&
      std::string_view(options.communicator->backend()) == "nccl")
    s.nccl = static_cast<NcclCommunicator *>(options.communicator);

  MOERT_CUDA(cudaSetDevice(s.gpu), "selecting the CUDA device");
  MOERT_CUDA(cudaGetDeviceProperties(&s.props, s.gpu),
             "querying the CUDA device");
  uint32_t capability = s.props.major * 10 + s.props.minor;
  if (capability < planImpl.target.cudaArch)
    return absl::FailedPreconditionError(absl::StrCat(
        planImpl.source, ": the plan needs sm_", planImpl.target.cudaArch,
        "; CUDA device ", s.gpu, " (", s.props.name, ") is sm_", capability));
  MOERT_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking),
             "creating the compute stream");
  MOERT_ASSIGN_OR_RETURN(s.cublas, cuda::loadCublas());
  MOERT_CUBLAS(s.cublas->create(&s.blas), "creating the cuBLAS handle");
  MOERT_CUBLAS(s.cublas->setStream(s.blas, s.stream),
               "creating the cuBLAS handle");
  // 32 MiB, what cuBLAS asks for on Hopper; its own default would be
  // allocated on first use, which a captured call must not do.
  constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;
  MOERT_CUDA(cudaMalloc(&s.blasWorkspace, kBlasWorkspaceBytes),
             "allocating the cuBLAS workspace");
  MOERT_CUBLAS(
      s.cublas->setWorkspace(s.blas, s.blasWorkspace, kBlasWorkspaceBytes),
      "setting the cuBLAS workspace");

  s.hostArena = detail::allocateHostArena(schedule.arenaSize);
  if (!s.hostArena)
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate the host arena of ", schedule.arenaSize, " bytes"));
  size_t arenaBytes =
      detail::alignTo(std::max<uint64_t>(schedule.arenaSize, 1), 64);
  MOERT_CUDA(
      cudaMalloc(reinterpret_cast<void **>(&s.deviceArena), arenaBytes),
      absl::StrCat("allocating the device arena of ", arenaBytes, " bytes"));
  MOERT_RETURN_IF_ERROR(s.uploadWeights());
  MOERT_RETURN_IF_ERROR(s.loadKernels());
  MOERT_RETURN_IF_ERROR(s.planDeviceOps());
  MOERT_RETURN_IF_ERROR(s.planStatsCopies());
  if (schedule.tiers.present)
    MOERT_RETURN_IF_ERROR(
        s.createDeviceExperts(options.deviceMemory, options.expertPrefetch));

  s.initTensors(s.hostArena);
  s.onHost.assign(schedule.tensors.size(), 0);
  s.onDevice.assign(schedule.tensors.size(), 0);
  for (size_t id = 0; id < schedule.tensors.size(); ++id)
    if (schedule.tensors[id].isWeight)
      s.onHost[id] = s.onDevice[id] = 1;
  std::vector<bool> onGpu(schedule.steps.size());
  for (const StepInfo &step : schedule.steps) {
    onGpu[step.index] = s.runsOnDevice(step);
    s.opSuffix[step.index] = onGpu[step.index] ? "@cuda" : "@host";
  }
  // A tiered step waits for its routing on the host: no graphs.
  s.graphable = options.useGraphs && !schedule.steps.empty() && !s.nccl &&
                !s.deviceExperts &&
                cuda::hostStepsReadOnlySizes(
                    schedule, onGpu, &s.hostUploadOffsets, &s.hostUploadBytes);
  s.events.assign(schedule.steps.size(), {nullptr, nullptr});
  if (s.collectStats)
    for (const StepInfo &step : schedule.steps)
      if (s.runsOnDevice(step)) {
        MOERT_CUDA(cudaEventCreate(&s.events[step.index].first), step.label);
        MOERT_CUDA(cudaEventCreate(&s.events[step.index].second), step.label);
      }
  return std::unique_ptr<CudaSession>(new CudaSession(std::move(impl)));
}

std::string CudaSession::deviceDescription() const {
  const cudaDeviceProp &p = impl_->props;
  return absl::StrCat(p.name, " (sm_", p.major * 10 + p.minor, ", ",
                      p.multiProcessorCount, " SMs)");
}

CommStats CudaSession::commStats() const { return impl_->commStats(); }

} // namespace moert
