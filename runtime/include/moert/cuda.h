//===- cuda.h - The CUDA backend of the moec runtime ------------*- C++ -*-===//
//
// Executes one device schedule of a plan compiled with
// `moec compile --target cuda` on an NVIDIA GPU (docs/cuda.md). The session
// owns one device arena (a single cudaMalloc for the plan's activations), the
// weights (uploaded once through pinned staging), a compute stream and a
// cuBLAS handle. Steps with a GPU implementation run on the stream; the
// others run on the host through the CPU kernels, with their operands moved
// as needed, so that every plan runs and the CPU backend stays the
// reference. Every CUDA error names the call and the step. A schedule of a
// multi-device plan runs with its device group's communicator: the collective
// steps (AssignSlots, AllToAll, AllToAllStart/Wait, Regroup, Ungroup) run on
// the host through the CPU kernels, like any step without a GPU
// implementation (docs/cuda.md, "Multi-GPU").
//
// A runtime built without CUDA (MOERT_CUDA=OFF) keeps this interface; its
// functions then fail with a message that says so.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_CUDA_H
#define MOERT_CUDA_H

#include "moert/comm.h"
#include "moert/moert.h"

namespace moert {

/// Whether this runtime was built with the CUDA backend.
bool cudaBackendBuilt();

/// The number of usable CUDA devices; fails with "no CUDA device: <reason>"
/// when there is none (no driver, no GPU, ...).
absl::StatusOr<int> cudaDeviceCount();

struct CudaSessionOptions {
  /// The device schedule to execute.
  int device = 0;
  /// The CUDA device ordinal to run it on.
  int gpu = 0;
  /// Worker threads of the steps that run on the host; 0: all cores.
  int threads = 0;
  /// Record per-step times (CUDA events on the GPU, a clock on the host).
  bool collectStats = true;
  /// This device's endpoint of the device group, needed by multi-device
  /// plans (their collective steps); its rank must be `device` and its size
  /// the plan's device count. Not owned; must outlive the session.
  Communicator *communicator = nullptr;
  /// Replay runs as CUDA graphs, one per distinct binding of the plan's
  /// symbols, when every step runs on the GPU (docs/cuda.md).
  bool useGraphs = true;
  /// Tiered plans (docs/tiered-experts.md, "On the GPU"): the device memory
  /// budget in bytes that replaces the plan's tiers (0: the plan's own).
  /// Hot experts stay in device memory, cold ones in pinned host memory,
  /// copied into a bounded device cache as the routing selects them. Runs
  /// of a tiered plan do not use graphs.
  uint64_t deviceMemory = 0;
  /// Tiered plans: "none" or "next-layer" (pre-gating: the next layer's
  /// router evaluated on this layer's router input on the host, its picks
  /// copied ahead); empty: the plan's own (next-micro-batch is refused).
  std::string expertPrefetch = "";
};

/// Where a CudaSession runs the steps of one device schedule, decided from
/// the plan alone (no GPU needed): moe-run --placement prints it.
struct CudaPlacement {
  /// Per step: its label, "step 3 'mlp/up' (MatMul)".
  std::vector<std::string> steps;
  /// Per step: on the GPU (a generated kernel or a GPU implementation that
  /// accepts the step), else on the host.
  std::vector<bool> onGpu;
  /// Whether runs replay CUDA graphs (with useGraphs): the host steps
  /// compute from sizes and weights only.
  bool graphs = false;
};

/// The placement of schedule `device` of `plan`, with exchanges over NCCL
/// (`nccl`) or the host.
absl::StatusOr<CudaPlacement> cudaPlacement(const Plan &plan, int device,
                                            bool nccl = false);

/// Executes one device schedule of a CUDA plan; inputs, outputs and stats
/// as `Session` (SessionBase), except that each step's `op` in stepStats()
/// is suffixed with "@cuda" or "@host" by where the step ran.
class CudaSession : public SessionBase {
public:
  /// Selects the GPU, checks its compute capability against the plan's,
  /// allocates the arena, uploads the weights and loads the plan's kernels.
  static absl::StatusOr<std::unique_ptr<CudaSession>>
  create(const Plan &plan, const CudaSessionOptions &options = {});

  ~CudaSession();

  /// Runs every step and copies the graph outputs back to the host.
  absl::Status run();
  /// Whether runs go through CUDA graphs (useGraphs, and every step of the
  /// schedule runs on the GPU).
  bool usesGraphs() const;
  /// Empty, or why the driver refused to capture a run; the session then
  /// runs eagerly.
  std::string graphsRefused() const;
  /// "NVIDIA H200 (sm_90, 132 SMs)".
  std::string deviceDescription() const;
  /// Traffic and communication time of the collective steps (as
  /// Session::commStats).
  CommStats commStats() const;

  struct Impl;

private:
  explicit CudaSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace moert

#endif // MOERT_CUDA_H
