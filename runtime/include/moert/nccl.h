//===- nccl.h - The NCCL communicator between GPUs --------------*- C++ -*-===//
//
// A Communicator (moert/comm.h) whose exchanges run on the GPUs through NCCL:
// one communicator per GPU, bootstrapped in-process (one thread per GPU) or
// across MPI ranks (rank 0's ncclUniqueId broadcast with MPI). libnccl is
// opened with dlopen on first use, so that the runtime builds and starts
// without it; everything that needs it fails with one message saying what
// was missing.
//
// Exchanges are stream-ordered on a communication stream of their own: an
// exchange waits (cudaStreamWaitEvent) for the work that the compute stream
// had queued when it started, and `wait` makes the compute stream wait for
// its completion, so neither stream blocks the host. The one host
// synchronisation per exchange is the count exchange (exchangeCounts): NCCL
// takes the byte counts of ncclSend/ncclRecv from the host, so the int64
// counts travel through the GPUs and are copied back before the rows can be
// sent. While the host waits (for the counts, `synchronize`, or NCCL's
// non-blocking calls) it polls cudaEventQuery and ncclCommGetAsyncError until
// the communicator's deadline; then it aborts the communicator
// (ncclCommAbort) and fails with an error naming the exchange, so that a dead
// or stalled peer never hangs the others. Every error names the NCCL or CUDA
// call, its error string, and the exchange.
//
// The buffers of an ExchangeSpec may be device or host memory: host buffers
// (the collective steps that still run on the host) are staged through device
// buffers the communicator owns. `gather` (outputs and stats, once per run)
// goes through the host communicator it was bootstrapped with.
//
// docs/cuda.md, "Multi-GPU".
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_NCCL_H
#define MOERT_NCCL_H

#include "moert/comm.h"

#include <string>

namespace moert {

/// The libnccl that loadNccl opened.
struct NcclLibraryInfo {
  /// The name or path it was opened by.
  std::string path;
  /// ncclGetVersion's code (22809 for 2.28.9) and its text ("2.28.9").
  int versionCode = 0;
  std::string version;
};

/// Opens libnccl and binds every entry point the communicator calls, once per
/// process: `path` when it is not empty (tried alone), else $MOERT_NCCL, else
/// the toolkit's library found at configure time, then libnccl.so.2 and
/// libnccl.so on the loader's path. Fails with one message that names every
/// attempt, or the missing entry points.
absl::StatusOr<NcclLibraryInfo> loadNccl(const std::string &path = "");

/// "2.28.9" for NCCL's version code 22809 (and the pre-2.9 scheme, 2708 ->
/// "2.7.8").
std::string ncclVersionString(int code);

/// The error of a failed NCCL call: "<where>: <call> failed: <name>: <text>"
/// plus NCCL's last error message when it has one, e.g. "dispatch exchange
/// of layer 0: ncclGroupEnd failed: ncclRemoteError: remote process exited
/// or there was a network error (peer 3 closed the connection)".
absl::Status ncclError(absl::string_view where, const char *call, int result,
                       const char *text, const char *lastError);

/// How the devices of a group exchange rows: through the host (in-process
/// memcpy or MPI over host buffers) or through NCCL between the GPUs.
enum class CommKind { Host, Nccl };
/// Parses "host" or "nccl" (moe-run --comm).
absl::StatusOr<CommKind> parseCommKind(absl::string_view text);

struct NcclOptions {
  /// How long one blocking wait polls before it aborts the communicator.
  double timeoutSeconds = 60;
  /// The libnccl to open (loadNccl's `path`).
  std::string library;
};

/// One GPU's endpoint of an NCCL group.
class NcclCommunicator : public Communicator {
public:
  /// The CUDA device the endpoint runs on.
  virtual int gpu() const = 0;
  /// Orders later exchanges after the work of `stream` (a cudaStream_t on
  /// this GPU, null for the legacy default stream), and makes `wait` order
  /// that stream after the exchange.
  virtual void setComputeStream(void *stream) = 0;
  /// Blocks until every exchange issued so far has completed, polling
  /// against the deadline; aborts the communicator on a timeout or an NCCL
  /// error and fails naming `what`.
  virtual absl::Status synchronize(absl::string_view what) = 0;
};

/// The endpoints of an in-process group, one per entry of `gpus` (distinct
/// CUDA devices: NCCL runs one rank per GPU), initialised together
/// (ncclGroupStart, ncclCommInitRankConfig per GPU, ncclGroupEnd). `hosts`
/// (the group's host communicators, one per GPU, same order) serve `gather`
/// and are told of an abort; not owned.
absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>>
createNcclGroup(const std::vector<int> &gpus,
                const std::vector<Communicator *> &hosts,
                const NcclOptions &options = {});

/// This MPI rank's endpoint on `gpu`: rank 0 makes the ncclUniqueId and
/// broadcasts it (mpiBroadcast), then every rank joins. `host` (this rank's
/// MPI communicator) serves `gather`; not owned.
absl::StatusOr<std::unique_ptr<NcclCommunicator>>
createNcclCommunicatorMpi(Communicator &host, int gpu,
                          const NcclOptions &options = {});

} // namespace moert

#endif // MOERT_NCCL_H
