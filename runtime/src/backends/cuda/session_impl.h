//===- session_impl.h - The CUDA session's state ----------------*- C++ -*-===//
//
// Private to the CUDA session: its state (CudaSession::Impl), shared by
// session.cpp (creation, weight upload, host and device copies, one step on
// the GPU) and session_run.cpp (a whole run: eagerly or through a CUDA
// graph, the MoE stats and the trace).
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_BACKENDS_CUDA_SESSION_IMPL_H
#define MOERT_SRC_BACKENDS_CUDA_SESSION_IMPL_H

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

} // namespace moert

#endif // MOERT_SRC_BACKENDS_CUDA_SESSION_IMPL_H
