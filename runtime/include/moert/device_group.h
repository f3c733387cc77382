//===- device_group.h - Running a multi-device plan -------------*- C++ -*-===//
//
// A DeviceGroup runs every schedule of an expert-parallel plan: either all of
// them in this process (one session and one thread per device, over an
// in-process communicator) or this MPI rank's one. It applies the plan's
// data-parallel rule (docs/expert-parallelism.md): an input whose dim 0 is
// symbolic is split along dim 0 into contiguous near-equal parts (device d
// gets rows [floor(B*d/N), floor(B*(d+1)/N)); when dim 0 is a batch (another
// dim is symbolic), a device whose share is empty gets a copy of row 0 as
// padding, whose outputs are dropped); other inputs
// are replicated. Outputs whose dim 0 is symbolic are concatenated in device
// order; other outputs are device 0's. Each device's schedule runs on the CPU
// or, with DeviceGroupOptions::backend = Backend::Cuda, on a GPU.
//
//   MOERT_ASSIGN_OR_RETURN(auto group, moert::DeviceGroup::create(*plan, {}));
//   MOERT_RETURN_IF_ERROR(group->setInput("x", DType::F32, {B, H}, x, bytes));
//   MOERT_RETURN_IF_ERROR(group->run());
//   MOERT_ASSIGN_OR_RETURN(moert::HostTensor y, group->output("y"));
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_DEVICE_GROUP_H
#define MOERT_DEVICE_GROUP_H

#include "moert/comm.h"
#include "moert/moert.h"
#include "moert/nccl.h"
#include "moert/stats.h"

#include <string>
#include <string_view>

namespace moert {

/// A tensor value owned by the host.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

/// What one device did over the runs since the last reset.
struct DeviceStats {
  int device = 0;
  CommStats comm;
  /// Rows the device's Experts steps computed (its experts' tokens).
  uint64_t expertRows = 0;
  /// The MoE layers of the device's schedule (moert/stats.h).
  std::vector<MoeLayerStats> moeLayers;
};

struct DeviceGroupOptions {
  /// Where each device's schedule runs: Backend::Cpu (moert::Session) or
  /// Backend::Cuda (moert::CudaSession on CUDA device groupGpu(...); the
  /// collective steps then run on the host, docs/cuda.md "Multi-GPU").
  Backend backend = Backend::Cpu;
  /// Kernel threads of each device's session, or of the steps it runs on
  /// the host (0: all cores / devices).
  int threadsPerDevice = 0;
  bool collectStats = true;
  CommOptions comm;
  /// How the devices exchange rows: through the host communicators, or
  /// through NCCL between the GPUs (needs Backend::Cuda and one GPU per
  /// device; moert/nccl.h). The host communicators still gather the outputs.
  CommKind commKind = CommKind::Host;
  /// Tiered plans (SessionOptions, docs/tiered-experts.md): the memory
  /// budget of each device, replacing the plan's tiers of its shard (0: the
  /// plan's own; Backend::Cuda too, CudaSessionOptions), and on Backend::Cpu
  /// how cold experts are read and prefetch.
  uint64_t deviceMemory = 0;
  std::string expertRead = "pread";
  std::string expertPrefetch = "";
  /// SessionOptions::expertCache.
  std::string expertCache = "static";
};

class DeviceGroup {
public:
  /// Runs all `plan.numDevices()` schedules in this process.
  static absl::StatusOr<std::unique_ptr<DeviceGroup>>
  create(const Plan &plan, const DeviceGroupOptions &options = {});
  /// Runs the schedule of this MPI rank (after mpiInit); the world size must
  /// be the plan's device count. Every call below is collective over the
  /// ranks, which must make the same calls in the same order.
  static absl::StatusOr<std::unique_ptr<DeviceGroup>>
  createMpi(const Plan &plan, const DeviceGroupOptions &options = {});

  ~DeviceGroup();
  DeviceGroup(const DeviceGroup &) = delete;
  DeviceGroup &operator=(const DeviceGroup &) = delete;

  /// Sets graph input `name` from its whole value (every device's share).
  absl::Status setInput(std::string_view name, DType dtype,
                        const std::vector<int64_t> &shape, const void *data,
                        size_t bytes);
  /// Runs every local device. When one fails, the others fail promptly too
  /// (or time out); the error lists each failed device's error, first
  /// failure first.
  absl::Status run();
  /// The whole value of graph output `name` after a successful run; under
  /// MPI, valid on rank 0 only (other ranks get an empty tensor).
  absl::StatusOr<HostTensor> output(std::string_view name);
  /// Devices whose share of the last split input was empty and that ran a
  /// padding row instead (a copy of row 0; its routed assignments show in
  /// the MoE stats, its outputs are left out). 0 when every device has rows.
  int paddingRows() const;
  /// Every device's stats, in device order (rank 0 only under MPI).
  absl::StatusOr<std::vector<DeviceStats>> deviceStats();
  void resetStats();
  /// Rank 0's view of one byte image per device, `mine` holding this
  /// process's local devices' in localSessions() order: in-process all of
  /// them as given, under MPI gathered from every rank (other ranks get an
  /// empty vector). Collective under MPI; `what` names it in errors.
  absl::StatusOr<std::vector<std::vector<uint8_t>>>
  gather(std::vector<std::vector<uint8_t>> mine, std::string_view what);

  int numDevices() const;
  /// Whether this process reports results: always in-process, rank 0 under
  /// MPI.
  bool isRoot() const;
  /// The sessions this process runs (all devices, or this rank's one).
  std::vector<SessionBase *> localSessions() const;
  /// Per local device, where it runs: "device 1: cpu", or "device 1: CUDA
  /// device 1, NVIDIA H200 (sm_90, 132 SMs)".
  std::vector<std::string> localDescriptions() const;

  struct Impl;

private:
  explicit DeviceGroup(std::unique_ptr<Impl> impl);
  /// create (mpi false) and createMpi.
  static absl::StatusOr<std::unique_ptr<DeviceGroup>>
  createGroup(const Plan &plan, const DeviceGroupOptions &options, bool mpi);
  std::unique_ptr<Impl> impl_;
};

/// The CUDA device ordinal of a group member: its host-local MPI rank
/// (`localRank` >= 0, from mpiLocalRank()) or else its device index, modulo
/// the `visibleGpus` of this process (several members may share a GPU).
int groupGpu(int device, int localRank, int visibleGpus);

/// This MPI rank's endpoint (after mpiInit) of a group running `plan`;
/// fails when the world size is not the plan's device count.
absl::StatusOr<std::unique_ptr<Communicator>>
createPlanMpiCommunicator(const Plan &plan, const CommOptions &options = {});

/// The devices this process runs of a group running `plan`, with their
/// endpoints: every device in process, or (`mpi`) this rank's alone
/// (createPlanMpiCommunicator).
struct GroupEndpoints {
  std::vector<int> devices;
  std::vector<std::unique_ptr<Communicator>> comms;
};
absl::StatusOr<GroupEndpoints> createGroupEndpoints(const Plan &plan, bool mpi,
                                                    const CommOptions &options);

/// What device `device` did in `session` (a session of one of its
/// schedules) since its stats were reset, with the traffic `comm` of its
/// collective steps; the MoE layers are grouped when the session ran the
/// device's (decode) schedule.
DeviceStats getDeviceStats(const Plan &plan, const SessionBase &session,
                           const CommStats &comm, int device);
/// A byte image of `stats` for gathering them from other MPI ranks, and its
/// inverse (which fails on malformed bytes).
std::vector<uint8_t> serializeDeviceStats(const DeviceStats &stats);
absl::StatusOr<DeviceStats>
deserializeDeviceStats(const std::vector<uint8_t> &bytes);

/// Whether `desc` is split along dim 0 across devices (its dim 0 is
/// symbolic and it is not replicated).
bool splitsAcrossDevices(const TensorDesc &desc);

} // namespace moert

#endif // MOERT_DEVICE_GROUP_H
