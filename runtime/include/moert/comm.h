//===- comm.h - Communicators between the devices of a plan -----*- C++ -*-===//
//
// The interface through which the collective steps of an expert-parallel plan
// (AllToAll, AllToAllStart/Wait) exchange rows between devices, and its
// backends: in-process (N devices as N threads of one process) and MPI (one
// rank per device; only when the runtime was built with MPI). The interface
// speaks in byte buffers and counts so that a GPU backend (NCCL) fits behind
// it unchanged.
//
// Every call of one device pairs with the call of the same sequence number on
// every other device: all devices issue the same collectives in the same
// order (they run schedules of one plan). Every blocking call gives up after
// the communicator's timeout with an error naming the devices it waited for,
// so that a device that died or stalls never hangs the others.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_COMM_H
#define MOERT_COMM_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace moert {

struct CommOptions {
  /// How long one blocking call waits for the other devices, in seconds.
  double timeoutSeconds = 60;
};

/// One all-to-all-v of bytes as seen by one device: the bytes
/// [sendOffsets[p], sendOffsets[p] + sendBytes[p]) of `send` go to device p;
/// the bytes that device p sends to this one land at recv + recvOffsets[p]
/// and must number recvBytes[p] (known from a prior count exchange). Both
/// buffers must stay valid and untouched until `wait` returns.
struct ExchangeSpec {
  const void *send = nullptr;
  void *recv = nullptr;
  std::vector<size_t> sendBytes, sendOffsets;
  std::vector<size_t> recvBytes, recvOffsets;
};

/// An exchange begun by `Communicator::start`.
using ExchangeId = uint64_t;

/// One device's endpoint of a device group.
class Communicator {
public:
  // Defined here, not in a source file, so that the class has no key
  // function: its vtable and type info then come with every user (the
  // kernels reach it through a session, below the multidevice layer that
  // implements it).
  virtual ~Communicator() = default;

  /// This device, in [0, size()).
  virtual int rank() const = 0;
  /// The number of devices in the group.
  virtual int size() const = 0;
  /// "in-process" or "mpi".
  virtual const char *backend() const = 0;
  /// The timeout of blocking calls, in seconds.
  virtual double timeoutSeconds() const = 0;

  /// Sends send[p] to device p and receives recv[p] from every device p
  /// (size() entries each). Blocking. `what` names the exchange in errors.
  virtual absl::Status exchangeCounts(const int64_t *send, int64_t *recv,
                                      absl::string_view what) = 0;
  /// Begins an all-to-all-v of bytes; completes with `wait`.
  virtual absl::StatusOr<ExchangeId> start(ExchangeSpec spec,
                                           absl::string_view what) = 0;
  /// Completes exchange `id`: its data has arrived and this device's send
  /// buffer may be reused.
  virtual absl::Status wait(ExchangeId id) = 0;
  /// Gathers every device's `mine` at device 0 into `all` (indexed by
  /// device; left empty on other devices). Blocking.
  virtual absl::Status gather(const std::vector<uint8_t> &mine,
                              std::vector<std::vector<uint8_t>> &all,
                              absl::string_view what) = 0;
  /// Reports that this device failed with `reason`: every pending and later
  /// call of the other devices fails promptly with it (in-process), or the
  /// whole job ends (MPI). Never returns for MPI.
  virtual void abort(const absl::Status &reason) = 0;
};

/// N endpoints of one in-process group, for N threads of this process.
std::vector<std::unique_ptr<Communicator>>
createInProcessGroup(int devices, const CommOptions &options = {});

/// Whether this runtime was built with MPI.
bool mpiSupported();
/// Whether the process looks launched by mpirun (its environment names a
/// world size), without initialising MPI.
bool launchedByMpi();
/// This process's rank among the ranks on its host, as the launcher tells
/// it (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, MV2_COMM_WORLD_LOCAL_RANK,
/// SLURM_LOCALID, PMIX_LOCAL_RANK, in that order), or -1 when none does. It
/// picks the rank's GPU; MPI need not be initialised.
int mpiLocalRank();
/// Initialises MPI once per process (MPI_Init); later calls do nothing.
absl::Status mpiInit(int *argc, char ***argv);
/// This process's rank in MPI_COMM_WORLD, or -1 before mpiInit.
int mpiRank();
/// The number of ranks in MPI_COMM_WORLD, or -1 before mpiInit.
int mpiWorldSize();
/// Finalises MPI if mpiInit initialised it.
void mpiFinalize();
/// Ends every rank of the job (MPI_Abort) with `code`; exits this process
/// when MPI is not initialised. Never returns.
[[noreturn]] void mpiAbort(int code);
/// Broadcasts `bytes` bytes at `data` from rank 0 to every rank of
/// MPI_COMM_WORLD (after mpiInit), giving up after `timeoutSeconds` with an
/// error naming `what`. Bootstraps the NCCL communicator (its unique id).
absl::Status mpiBroadcast(void *data, size_t bytes, double timeoutSeconds,
                          absl::string_view what);
/// The endpoint of this rank over MPI_COMM_WORLD (after mpiInit).
absl::StatusOr<std::unique_ptr<Communicator>>
createMpiCommunicator(const CommOptions &options = {});

/// The status payload that marks a device's error as an injected exit
/// (MOERT_FAULT_INJECT, docs/cli.md): the device stops silently, so its
/// group is not told and the other devices must notice through timeouts.
inline constexpr char kFaultExitPayload[] = "type.moert/fault-exit";

/// Data parallelism over a leading dimension of `rows`: device d of `devices`
/// gets rows [first, second) = [floor(rows*d/N), floor(rows*(d+1)/N)).
inline std::pair<int64_t, int64_t> deviceRows(int64_t rows, int device,
                                              int devices) {
  return {rows * device / devices, rows * (device + 1) / devices};
}

} // namespace moert

#endif // MOERT_COMM_H
