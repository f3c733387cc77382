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
// one.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/cublas.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_op.h"
#include "backends/cuda/expert_tiers.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/placement.h"
#include "exec/session_state.h"
#include "format/plan_file.h"
#include "kernels/common.h"
#include "moert/cuda.h"
#include "moert/nccl.h"

#include "absl/strings/str_cat.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>

namespace moert {

using cuda::CublasApi;
using cuda::cublasCheck;
using cuda::DeviceErrorRecord;
using cuda::DeviceOp;
using detail::KernelContext;
using detail::ScheduleInfo;
using detail::Shape;
using detail::StepInfo;
using detail::Tensor;
using detail::TensorInfo;

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

struct CudaSession::Impl : detail::SessionState {
  int gpu = 0;
  cudaDeviceProp props{};

  uint8_t *hostArena = nullptr;
  uint8_t *deviceArena = nullptr;
  uint8_t *deviceWeights = nullptr;
  /// Per tensor id: the weight's offset in deviceWeights.
  std::vector<uint64_t> weightOffsets;
  cudaStream_t stream = nullptr;
  const CublasApi *cublas = nullptr;
  cublasHandle_t blas = nullptr;
  cudaLibrary_t library = nullptr;
  /// Per step: its generated kernel, or null.
  std::vector<cudaKernel_t> kernels;
  /// Per step: its GPU implementation when it has no generated kernel, or
  /// null (the step then runs on the host).
  std::vector<const DeviceOp *> deviceOps;
  /// Scratch shared by the GPU steps (they run one after another on the
  /// stream), and the run's device error record.
  void *deviceScratch = nullptr;
  DeviceErrorRecord *deviceErrors = nullptr;

  /// The session's communicator when it is an NCCL one: the exchanges then
  /// run on the GPU, and every wait for the stream first waits for NCCL
  /// against its deadline (a dead peer aborts it instead of hanging the
  /// stream).
  NcclCommunicator *nccl = nullptr;

  /// Whether runs go through CUDA graphs: every step runs on the GPU, and
  /// no exchange waits for the host (docs/cuda.md, "CUDA graphs").
  bool graphable = false;
  /// A captured run, per binding of the symbols (the sizes fix every launch's
  /// grid), with the shapes its steps gave the tensors.
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    std::vector<Shape> shapes;
    /// Pinned copies of the host steps' values that GPU steps read (at
    /// hostUploadOffsets): the graph copies them up from here, and they stay
    /// valid because those values are the same for every run of its sizes.
    uint8_t *pinned = nullptr;
  };
  /// Host-step results that GPU steps read, and their offsets in a graph's
  /// pinned block of hostUploadBytes.
  std::map<int32_t, uint64_t> hostUploadOffsets;
  uint64_t hostUploadBytes = 0;
  Graph *capturingGraph = nullptr;
  std::map<std::vector<int64_t>, Graph> graphs;
  /// Why a run could not be captured (graphs are then off).
  std::string graphsRefused;
  /// Inside a capture; and whether the captured run needed the host.
  bool capturing = false, captureUnsafe = false;
  /// cuBLAS's workspace, set explicitly so that a captured cuBLAS call never
  /// allocates.
  void *blasWorkspace = nullptr;
  /// Distinct sizes captured at most; others run eagerly.
  static constexpr size_t kMaxGraphs = 32;

  /// Per tensor id: whether the host mirror / device slot holds its value.
  std::vector<uint8_t> onHost, onDevice;

  /// A device tensor that each run copies to pinned host memory after its
  /// step, for the MoE stats (a Router's indices, an Experts step's
  /// offsets): stream ordered, so no step waits, and read after the run.
  struct StatsCopy {
    int step;
    int32_t tensor;
    uint8_t *pinned;
  };
  std::vector<StatsCopy> statsCopies;
  absl::Status planStatsCopies();
  void countMoeLoads();
  /// Adds the GpuStep spans of the run's `timed` steps to the trace.
  void traceGpuSteps(const std::vector<bool> &timed);

  /// Per GPU step, the events around its last launch (stats only).
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;

  /// A tiered schedule's experts (docs/tiered-experts.md, "On the GPU").
  std::unique_ptr<cuda::DeviceExpertStore> deviceExperts;
  absl::Status createDeviceExperts(uint64_t budget,
                                   const std::string &prefetch);

  using SessionState::SessionState;
  ~Impl();

  uint8_t *devicePtr(int32_t id) const {
    const TensorInfo &info = schedule.tensors[id];
    return info.isWeight ? deviceWeights + weightOffsets[id]
                         : deviceArena + info.offset;
  }
  absl::Status uploadWeights();
  absl::Status loadKernels();
  absl::Status planDeviceOps();
  absl::Status toHost(const StepInfo &step);
  absl::Status toDevice(int32_t id, const StepInfo &step);
  absl::Status runOnDevice(const StepInfo &step, KernelContext &ctx);
  absl::Status checkDeviceErrors();
  /// Runs every step in order, eagerly.
  absl::Status runSteps(std::vector<bool> &timed);
  /// Runs the steps through the CUDA graph of the bound sizes (graphable).
  absl::Status runWithGraph(std::vector<bool> &timed);
  bool runsOnDevice(const StepInfo &step) const {
    return kernels[step.index] || deviceOps[step.index];
  }
};

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
