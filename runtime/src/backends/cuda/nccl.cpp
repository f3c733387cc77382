//===- nccl.cpp - The NCCL communicator between GPUs ----------------------===//
//
// moert/nccl.h. Communicators are created non-blocking (ncclConfig_t
// blocking = 0): every NCCL call returns at once, possibly ncclInProgress,
// and the host polls ncclCommGetAsyncError against the deadline instead of
// blocking inside NCCL, so that a peer that never arrives (connection setup
// happens in the first ncclGroupEnd with it) times out and the communicator
// is aborted rather than hanging. All-to-all-v is one NCCL group of
// ncclSend/ncclRecv, one pair per peer with bytes to move (the device
// itself included: NCCL copies those locally).
//
//===----------------------------------------------------------------------===//

#include "moert/nccl.h"
#include "backends/cuda/cuda_check.h"
#include "multidevice/comm_util.h"

#include "absl/strings/str_join.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>

namespace moert {
namespace {

/// The NCCL entry points the communicator calls (nccl.h signatures).
struct NcclApi {
  ncclResult_t (*getVersion)(int *);
  ncclResult_t (*getUniqueId)(ncclUniqueId *);
  ncclResult_t (*commInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int,
                                     ncclConfig_t *);
  ncclResult_t (*commFinalize)(ncclComm_t);
  ncclResult_t (*commDestroy)(ncclComm_t);
  ncclResult_t (*commAbort)(ncclComm_t);
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t *);
  const char *(*getErrorString)(ncclResult_t);
  const char *(*getLastError)(ncclComm_t);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
  ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t);
  ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t);
};

/// The first version with non-blocking communicators (ncclConfig_t) and
/// ncclCommFinalize.
constexpr int kMinVersionCode = 21400;

struct Loaded {
  NcclApi api{};
  NcclLibraryInfo info;
  std::string failure;
};

/// Opens the first loadable of `names` and binds the API; the failure text
/// names every attempt or every missing symbol.
Loaded open(const std::vector<std::string> &names) {
  Loaded out;
  std::string errors;
  void *library = nullptr;
  for (const std::string &name : names) {
    library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library) {
      out.info.path = name;
      break;
    }
    const char *error = dlerror();
    absl::StrAppend(&errors, "; ", error ? error : name);
  }
  if (!library) {
    out.failure = absl::StrCat("cannot load NCCL", errors);
    return out;
  }
  std::vector<std::string> absent;
  auto bind = [&](auto &fn, const char *symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
        dlsym(library, symbol));
    if (!fn)
      absent.push_back(symbol);
  };
  NcclApi &api = out.api;
  bind(api.getVersion, "ncclGetVersion");
  bind(api.getUniqueId, "ncclGetUniqueId");
  bind(api.commInitRankConfig, "ncclCommInitRankConfig");
  bind(api.commFinalize, "ncclCommFinalize");
  bind(api.commDestroy, "ncclCommDestroy");
  bind(api.commAbort, "ncclCommAbort");
  bind(api.commGetAsyncError, "ncclCommGetAsyncError");
  bind(api.getErrorString, "ncclGetErrorString");
  bind(api.getLastError, "ncclGetLastError");
  bind(api.groupStart, "ncclGroupStart");
  bind(api.groupEnd, "ncclGroupEnd");
  bind(api.send, "ncclSend");
  bind(api.recv, "ncclRecv");
  if (!absent.empty()) {
    out.failure =
        absl::StrCat(out.info.path, " lacks ", absl::StrJoin(absent, ", "),
                     "; the NCCL communicator needs NCCL >= 2.14");
    return out;
  }
  int code = 0;
  if (ncclResult_t rc = api.getVersion(&code); rc != ncclSuccess) {
    out.failure = absl::StrCat(
        out.info.path, ": ncclGetVersion failed: ", api.getErrorString(rc));
    return out;
  }
  out.info.versionCode = code;
  out.info.version = ncclVersionString(code);
  if (code < kMinVersionCode)
    out.failure = absl::StrCat(out.info.path, " is NCCL ", out.info.version,
                               "; the NCCL communicator needs NCCL >= 2.14");
  return out;
}

/// loadNccl's cache: one entry per requested path ("" for the search).
absl::StatusOr<const Loaded *> loadApi(const std::string &path) {
  static std::mutex mutex;
  static std::map<std::string, Loaded> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(path);
  if (it == cache.end()) {
    std::vector<std::string> names;
    if (!path.empty()) {
      names.push_back(path);
    } else {
      if (const char *env = std::getenv("MOERT_NCCL"); env && *env)
        names.push_back(env);
#ifdef MOERT_NCCL_PATH
      names.push_back(MOERT_NCCL_PATH);
#endif
      names.push_back("libnccl.so.2");
      names.push_back("libnccl.so");
    }
    it = cache.emplace(path, open(names)).first;
  }
  if (!it->second.failure.empty())
    return absl::FailedPreconditionError(it->second.failure);
  return &it->second;
}

/// The config of every communicator: non-blocking, so that no NCCL call
/// blocks the host past the deadline.
ncclConfig_t nonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

/// A device (or pinned host) buffer that only grows.
struct Buffer {
  void *data = nullptr;
  size_t capacity = 0;
  bool pinned = false;
};

/// The communicators of one in-process group, destroyed together.
/// ncclCommFinalize completes only once the communicator is globally
/// quiescent (nccl.h), that is once every rank has finalized too, and the
/// endpoints of one process are destroyed one after another on one thread:
/// an endpoint that waited for its own finalize would wait for peers that
/// have not started theirs, until the deadline. So each endpoint only starts
/// its finalize and hands its communicator over; when the last endpoint goes,
/// every rank has started, and this waits for all of them and destroys them.
class GroupTeardown {
public:
  GroupTeardown(const NcclApi &api, double timeout)
      : api_(api), timeout_(timeout) {}

  /// Takes over `comm` (on CUDA device `gpu`): finalizing (its
  /// ncclCommFinalize was called and accepted), or null when the endpoint
  /// aborted its communicator or could not finalize it. The group cannot
  /// quiesce without every rank, so then every communicator is aborted.
  void adopt(ncclComm_t comm, int gpu, bool finalizing) {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_ |= !finalizing;
    if (comm)
      comms_.push_back({comm, gpu});
  }

  /// Records that a device of the group failed with `reason`: the other
  /// endpoints' waits end with it at their next poll instead of at their
  /// deadline (the host communicators tell their peers the same way).
  void markFailed(const absl::Status &reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!deviceFailed_.load()) {
      failure_ = reason;
      deviceFailed_.store(true);
    }
  }
  /// OK, or the failure another device of the group recorded.
  absl::Status groupFailure() {
    if (!deviceFailed_.load(std::memory_order_relaxed))
      return absl::OkStatus();
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }

  ~GroupTeardown() {
    // Teardown cannot report errors: a communicator that does not quiesce
    // by the deadline (or fails) is aborted instead of destroyed.
    comm::Clock::time_point end = comm::deadline(timeout_);
    for (const Adopted &c : comms_) {
      bool quiet = !failed_;
      while (quiet) {
        ncclResult_t state = ncclSuccess;
        if (api_.commGetAsyncError(c.comm, &state) != ncclSuccess ||
            (state != ncclSuccess && state != ncclInProgress) ||
            comm::Clock::now() >= end)
          quiet = false;
        else if (state == ncclSuccess)
          break;
        else
          std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      cudaSetDevice(c.gpu);
      if (quiet)
        api_.commDestroy(c.comm);
      else
        api_.commAbort(c.comm);
    }
  }

private:
  struct Adopted {
    ncclComm_t comm;
    int gpu;
  };
  const NcclApi &api_;
  double timeout_;
  std::mutex mutex_;
  std::vector<Adopted> comms_;
  bool failed_ = false;
  std::atomic<bool> deviceFailed_{false};
  absl::Status failure_;
};

class NcclEndpoint final : public NcclCommunicator {
public:
  /// `teardown`: the in-process group's (null under MPI, where each rank
  /// finalizes in its own process).
  NcclEndpoint(const NcclApi &api, ncclComm_t comm, int rank, int size, int gpu,
               double timeout, Communicator *host,
               std::shared_ptr<GroupTeardown> teardown = nullptr)
      : api_(api), comm_(comm), rank_(rank), size_(size), gpu_(gpu),
        timeout_(timeout), host_(host), teardown_(std::move(teardown)) {}

  ~NcclEndpoint() override {
    // Teardown cannot report errors: a failing call leaves nothing to
    // recover, and an aborted communicator owns nothing any more.
    cudaSetDevice(gpu_);
    // A communicator with exchanges in flight belongs to a failed run: it is
    // aborted, not flushed. awaitEnqueued aborts it on a failure too.
    bool clean = !aborted_ && pending_.empty();
    if (teardown_) {
      // In-process: start the finalize; the group's last endpoint waits.
      bool finalizing = false;
      if (clean) {
        ncclResult_t rc = api_.commFinalize(comm_);
        finalizing = rc == ncclSuccess || rc == ncclInProgress;
      }
      teardown_->adopt(aborted_ ? nullptr : comm_, gpu_, finalizing);
    } else if (clean) {
      ncclResult_t rc = api_.commFinalize(comm_);
      clean = (rc == ncclSuccess || rc == ncclInProgress) &&
              awaitEnqueued("finalizing the NCCL communicator").ok();
    }
    if (!aborted_ && !teardown_) {
      if (clean)
        api_.commDestroy(comm_);
      else
        api_.commAbort(comm_);
    }
    for (auto &[id, p] : pending_)
      if (p.done)
        cudaEventDestroy(p.done);
    for (cudaEvent_t event : freeEvents_)
      cudaEventDestroy(event);
    if (computeReady_)
      cudaEventDestroy(computeReady_);
    if (idle_)
      cudaEventDestroy(idle_);
    if (stream_)
      cudaStreamDestroy(stream_);
    for (Buffer &b : buffers_)
      b.pinned ? cudaFreeHost(b.data) : cudaFree(b.data);
    cudaFree(deviceCounts_);
    cudaFreeHost(hostCounts_);
  }

  /// Creates the communication stream and the count buffers.
  absl::Status init() {
    std::string where = absl::StrCat("NCCL communicator on CUDA device ", gpu_);
    MOERT_CUDA(cudaSetDevice(gpu_), where);
    MOERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
               where);
    MOERT_CUDA(cudaEventCreateWithFlags(&computeReady_, cudaEventDisableTiming),
               where);
    MOERT_CUDA(cudaEventCreateWithFlags(&idle_, cudaEventDisableTiming), where);
    size_t bytes = 2 * sizeof(int64_t) * size_t(size_);
    MOERT_CUDA(cudaMalloc(reinterpret_cast<void **>(&deviceCounts_), bytes),
               where);
    MOERT_CUDA(cudaMallocHost(reinterpret_cast<void **>(&hostCounts_), bytes),
               where);
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backend() const override { return "nccl"; }
  double timeoutSeconds() const override { return timeout_; }
  int gpu() const override { return gpu_; }
  void setComputeStream(void *stream) override {
    compute_ = static_cast<cudaStream_t>(stream);
    hasCompute_ = true;
  }

  absl::Status exchangeCounts(const int64_t *send, int64_t *recv,
                              absl::string_view what) override {
    MOERT_RETURN_IF_ERROR(usable(what));
    ++nextSeq_;
    MOERT_CUDA(cudaSetDevice(gpu_), what);
    size_t n = size_t(size_);
    std::memcpy(hostCounts_, send, n * sizeof(int64_t));
    MOERT_CUDA(cudaMemcpyAsync(deviceCounts_, hostCounts_, n * sizeof(int64_t),
                               cudaMemcpyHostToDevice, stream_),
               what);
    MOERT_RETURN_IF_ERROR(group(what, [&]() -> absl::Status {
      for (int p = 0; p < size_; ++p) {
        MOERT_RETURN_IF_ERROR(
            check(api_.send(deviceCounts_ + p, 1, ncclInt64, p, comm_, stream_),
                  "ncclSend", what));
        MOERT_RETURN_IF_ERROR(check(
            api_.recv(deviceCounts_ + n + p, 1, ncclInt64, p, comm_, stream_),
            "ncclRecv", what));
      }
      return absl::OkStatus();
    }));
    MOERT_CUDA(cudaMemcpyAsync(hostCounts_ + n, deviceCounts_ + n,
                               n * sizeof(int64_t), cudaMemcpyDeviceToHost,
                               stream_),
               what);
    // The one host synchronisation of an exchange: ncclSend/ncclRecv take
    // the row exchange's byte counts from the host.
    MOERT_RETURN_IF_ERROR(awaitIdle(what));
    std::memcpy(recv, hostCounts_ + n, n * sizeof(int64_t));
    return absl::OkStatus();
  }

  absl::StatusOr<ExchangeId> start(ExchangeSpec spec,
                                   absl::string_view what) override {
    MOERT_RETURN_IF_ERROR(comm::checkSpec(spec, size_, what));
    MOERT_RETURN_IF_ERROR(usable(what));
    MOERT_CUDA(cudaSetDevice(gpu_), what);
    ExchangeId id = nextSeq_++;
    Pending p;
    p.what = std::string(what);
    size_t sendTotal = 0, recvTotal = 0;
    for (int d = 0; d < size_; ++d) {
      sendTotal = std::max(sendTotal, spec.sendOffsets[d] + spec.sendBytes[d]);
      recvTotal = std::max(recvTotal, spec.recvOffsets[d] + spec.recvBytes[d]);
    }
    MOERT_ASSIGN_OR_RETURN(bool sendOnHost, isHost(spec.send, what));
    MOERT_ASSIGN_OR_RETURN(bool recvOnHost, isHost(spec.recv, what));
    // The exchange reads what the compute stream wrote before it started.
    if (hasCompute_) {
      MOERT_CUDA(cudaEventRecord(computeReady_, compute_), what);
      MOERT_CUDA(cudaStreamWaitEvent(stream_, computeReady_, 0), what);
    }
    const uint8_t *send = static_cast<const uint8_t *>(spec.send);
    uint8_t *recv = static_cast<uint8_t *>(spec.recv);
    if (sendOnHost && sendTotal) {
      MOERT_ASSIGN_OR_RETURN(p.stageSend, take(sendTotal, false, what));
      // A pageable source makes this copy synchronous; the host steps that
      // exchange through host buffers pay that, the device steps do not.
      MOERT_CUDA(cudaMemcpyAsync(buffers_[p.stageSend].data, send, sendTotal,
                                 cudaMemcpyHostToDevice, stream_),
                 what);
      send = static_cast<const uint8_t *>(buffers_[p.stageSend].data);
    }
    if (recvOnHost && recvTotal) {
      MOERT_ASSIGN_OR_RETURN(p.stageRecv, take(recvTotal, false, what));
      MOERT_ASSIGN_OR_RETURN(p.pinnedRecv, take(recvTotal, true, what));
      p.hostRecv = recv;
      p.recvTotal = recvTotal;
      recv = static_cast<uint8_t *>(buffers_[p.stageRecv].data);
    }
    MOERT_RETURN_IF_ERROR(group(what, [&]() -> absl::Status {
      for (int d = 0; d < size_; ++d) {
        if (spec.sendBytes[d])
          MOERT_RETURN_IF_ERROR(
              check(api_.send(send + spec.sendOffsets[d], spec.sendBytes[d],
                              ncclUint8, d, comm_, stream_),
                    "ncclSend", what));
        if (spec.recvBytes[d])
          MOERT_RETURN_IF_ERROR(
              check(api_.recv(recv + spec.recvOffsets[d], spec.recvBytes[d],
                              ncclUint8, d, comm_, stream_),
                    "ncclRecv", what));
      }
      return absl::OkStatus();
    }));
    if (p.hostRecv)
      MOERT_CUDA(cudaMemcpyAsync(buffers_[p.pinnedRecv].data, recv, recvTotal,
                                 cudaMemcpyDeviceToHost, stream_),
                 what);
    if (freeEvents_.empty()) {
      p.done = nullptr;
      MOERT_CUDA(cudaEventCreateWithFlags(&p.done, cudaEventDisableTiming),
                 what);
    } else {
      p.done = freeEvents_.back();
      freeEvents_.pop_back();
    }
    MOERT_CUDA(cudaEventRecord(p.done, stream_), what);
    pending_.emplace(id, std::move(p));
    return id;
  }

  absl::Status wait(ExchangeId id) override {
    auto it = pending_.find(id);
    if (it == pending_.end())
      return comm::notInFlight(id);
    Pending &p = it->second;
    MOERT_CUDA(cudaSetDevice(gpu_), p.what);
    if (p.hostRecv || !hasCompute_) {
      // The host reads the rows (or there is no stream to order): it waits.
      MOERT_RETURN_IF_ERROR(awaitEvent(p.done, p.what));
      if (p.hostRecv)
        std::memcpy(p.hostRecv, buffers_[p.pinnedRecv].data, p.recvTotal);
    } else {
      // Stream-ordered: the compute stream's later work waits on the GPU.
      MOERT_CUDA(cudaStreamWaitEvent(compute_, p.done, 0), p.what);
      MOERT_RETURN_IF_ERROR(asyncError(p.what));
    }
    for (int b : {p.stageSend, p.stageRecv, p.pinnedRecv})
      if (b >= 0)
        inUse_.erase(b);
    freeEvents_.push_back(p.done);
    pending_.erase(it);
    return absl::OkStatus();
  }

  absl::Status synchronize(absl::string_view what) override {
    MOERT_RETURN_IF_ERROR(usable(what));
    MOERT_CUDA(cudaSetDevice(gpu_), what);
    return awaitIdle(what);
  }

  absl::Status gather(const std::vector<uint8_t> &mine,
                      std::vector<std::vector<uint8_t>> &all,
                      absl::string_view what) override {
    if (!host_)
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the NCCL communicator has no host communicator "
                             "to gather through"));
    return host_->gather(mine, all, what);
  }

  void abort(const absl::Status &reason) override {
    if (teardown_)
      teardown_->markFailed(reason);
    abortNccl();
    if (host_)
      host_->abort(reason);
  }

private:
  struct Pending {
    std::string what;
    cudaEvent_t done = nullptr;
    /// Indices into buffers_, or -1.
    int stageSend = -1, stageRecv = -1, pinnedRecv = -1;
    uint8_t *hostRecv = nullptr;
    size_t recvTotal = 0;
  };

  absl::Status usable(absl::string_view what) const {
    if (aborted_)
      return absl::AbortedError(absl::StrCat(
          what, ": the NCCL communicator of device ", rank_,
          " was aborted after an earlier failure: ", failure_.message()));
    return absl::OkStatus();
  }

  void abortNccl() {
    if (aborted_)
      return;
    aborted_ = true;
    cudaSetDevice(gpu_);
    api_.commAbort(comm_);
  }

  /// Aborts the communicator and returns `error` (its state is unknown
  /// after a failure; the peers see the abort as a remote error).
  absl::Status fail(absl::Status error) {
    if (!aborted_) {
      failure_ = error;
      abortNccl();
    }
    return error;
  }

  absl::Status check(ncclResult_t rc, const char *call,
                     absl::string_view what) {
    if (rc == ncclSuccess || rc == ncclInProgress)
      return absl::OkStatus();
    return fail(ncclError(what, call, rc, api_.getErrorString(rc),
                          api_.getLastError(comm_)));
  }

  /// ncclCommGetAsyncError now: OK while the communicator is healthy (idle
  /// or still working), else the error after aborting.
  absl::Status asyncError(absl::string_view what) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = api_.commGetAsyncError(comm_, &state);
    if (rc != ncclSuccess)
      return fail(ncclError(what, "ncclCommGetAsyncError", rc,
                            api_.getErrorString(rc), api_.getLastError(comm_)));
    if (state != ncclSuccess && state != ncclInProgress)
      return fail(ncclError(what, "NCCL", state, api_.getErrorString(state),
                            api_.getLastError(comm_)));
    return absl::OkStatus();
  }

  /// Runs `issue` (ncclSend/ncclRecv calls) inside one NCCL group and waits
  /// until NCCL has enqueued it (a non-blocking group may still be
  /// connecting to its peers).
  template <typename Issue>
  absl::Status group(absl::string_view what, Issue issue) {
    MOERT_RETURN_IF_ERROR(check(api_.groupStart(), "ncclGroupStart", what));
    absl::Status issued = issue();
    // The group must be closed even when a call in it failed.
    ncclResult_t end = api_.groupEnd();
    MOERT_RETURN_IF_ERROR(issued);
    MOERT_RETURN_IF_ERROR(check(end, "ncclGroupEnd", what));
    return awaitEnqueued(what);
  }

  /// Polls until the communicator is no longer ncclInProgress.
  absl::Status awaitEnqueued(absl::string_view what) {
    comm::Clock::time_point end = comm::deadline(timeout_);
    for (int spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t rc = api_.commGetAsyncError(comm_, &state);
      if (rc != ncclSuccess)
        return fail(ncclError(what, "ncclCommGetAsyncError", rc,
                              api_.getErrorString(rc),
                              api_.getLastError(comm_)));
      if (state == ncclSuccess)
        return absl::OkStatus();
      if (state != ncclInProgress)
        return fail(ncclError(what, "NCCL", state, api_.getErrorString(state),
                              api_.getLastError(comm_)));
      MOERT_RETURN_IF_ERROR(peerFailure(what));
      if (comm::Clock::now() >= end)
        return fail(timedOut(what, "NCCL to connect to its peers"));
      backOff(spins);
    }
  }

  /// Polls `event` until it completed, NCCL reports an error, or the
  /// deadline passes.
  absl::Status awaitEvent(cudaEvent_t event, absl::string_view what) {
    comm::Clock::time_point end = comm::deadline(timeout_);
    for (int spins = 0;; ++spins) {
      cudaError_t query = cudaEventQuery(event);
      if (query == cudaSuccess)
        return asyncError(what);
      if (query != cudaErrorNotReady)
        return fail(cuda::cudaCheck(query, "cudaEventQuery", what));
      // cudaErrorNotReady is also left as the thread's last error: cleared,
      // or the next kernel launch's cudaGetLastError check (the session's
      // steps run on this thread) would report it as its own failure.
      (void)cudaGetLastError();
      MOERT_RETURN_IF_ERROR(asyncError(what));
      MOERT_RETURN_IF_ERROR(peerFailure(what));
      if (comm::Clock::now() >= end)
        return fail(timedOut(what, "the exchange on the GPU to complete"));
      backOff(spins);
    }
  }

  /// Waits for everything queued on the communication stream.
  absl::Status awaitIdle(absl::string_view what) {
    MOERT_CUDA(cudaEventRecord(idle_, stream_), what);
    return awaitEvent(idle_, what);
  }

  /// In-process: fails (aborting this communicator) once another device of
  /// the group has failed, whose exchanges will then never complete.
  absl::Status peerFailure(absl::string_view what) {
    if (!teardown_)
      return absl::OkStatus();
    absl::Status failure = teardown_->groupFailure();
    if (failure.ok())
      return absl::OkStatus();
    return fail(absl::AbortedError(
        absl::StrCat(what, ": device ", rank_,
                     " (nccl) stopped: another device of the group failed: ",
                     failure.message())));
  }

  absl::Status timedOut(absl::string_view what, absl::string_view waitedFor) {
    return comm::timeoutError(
        what, timeout_, rank_, "nccl",
        absl::StrCat(waitedFor, " (CUDA device ", gpu_,
                     "); the NCCL communicator was aborted"));
  }

  /// Spins briefly, then sleeps up to 1 ms, so that waiting ranks leave the
  /// cores to the others.
  static void backOff(int spins) {
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(
          std::chrono::microseconds(std::min(1000, 10 * (spins - 63))));
  }

  absl::StatusOr<bool> isHost(const void *pointer, absl::string_view what) {
    if (!pointer)
      return true;
    cudaPointerAttributes attributes{};
    MOERT_CUDA(cudaPointerGetAttributes(&attributes, pointer), what);
    return attributes.type != cudaMemoryTypeDevice &&
           attributes.type != cudaMemoryTypeManaged;
  }

  /// A free buffer of at least `bytes` (device, or pinned host memory),
  /// marked in use until the exchange that took it is waited for.
  absl::StatusOr<int> take(size_t bytes, bool pinned, absl::string_view what) {
    int best = -1;
    for (int b = 0; b < int(buffers_.size()); ++b)
      if (buffers_[b].pinned == pinned && !inUse_.count(b) &&
          (best < 0 || buffers_[b].capacity > buffers_[best].capacity))
        best = b;
    if (best < 0) {
      buffers_.push_back(Buffer{nullptr, 0, pinned});
      best = int(buffers_.size()) - 1;
    }
    Buffer &buffer = buffers_[best];
    if (buffer.capacity < bytes) {
      // Growing frees the old buffer: wait until no queued copy uses it.
      if (buffer.data) {
        MOERT_RETURN_IF_ERROR(awaitIdle(what));
        MOERT_CUDA(pinned ? cudaFreeHost(buffer.data) : cudaFree(buffer.data),
                   what);
        buffer.data = nullptr;
        buffer.capacity = 0;
      }
      MOERT_CUDA(pinned ? cudaMallocHost(&buffer.data, bytes)
                        : cudaMalloc(&buffer.data, bytes),
                 what);
      buffer.capacity = bytes;
    }
    inUse_.insert(best);
    return best;
  }

  const NcclApi &api_;
  ncclComm_t comm_;
  int rank_, size_, gpu_;
  double timeout_;
  Communicator *host_;
  /// Released after the destructor's body has freed this endpoint's CUDA
  /// resources; the last endpoint of an in-process group to release it
  /// destroys every communicator of the group.
  std::shared_ptr<GroupTeardown> teardown_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;
  bool hasCompute_ = false;
  /// Recorded on the compute stream when an exchange starts.
  cudaEvent_t computeReady_ = nullptr;
  /// Recorded on the communication stream to wait for all of it.
  cudaEvent_t idle_ = nullptr;
  int64_t *deviceCounts_ = nullptr;
  int64_t *hostCounts_ = nullptr;
  std::vector<Buffer> buffers_;
  std::set<int> inUse_;
  std::vector<cudaEvent_t> freeEvents_;
  std::map<ExchangeId, Pending> pending_;
  uint64_t nextSeq_ = 0;
  bool aborted_ = false;
  absl::Status failure_;
};

/// Polls a communicator being created until it is ready; aborts it on an
/// error or at the deadline.
absl::Status awaitInit(const NcclApi &api, ncclComm_t comm, int rank,
                       double timeout, absl::string_view what) {
  comm::Clock::time_point end = comm::deadline(timeout);
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = api.commGetAsyncError(comm, &state);
    if (rc == ncclSuccess && state == ncclSuccess)
      return absl::OkStatus();
    if (rc != ncclSuccess || state != ncclInProgress) {
      ncclResult_t bad = rc != ncclSuccess ? rc : state;
      absl::Status error =
          ncclError(what, "ncclCommInitRankConfig", bad,
                    api.getErrorString(bad), api.getLastError(comm));
      api.commAbort(comm);
      return error;
    }
    if (comm::Clock::now() >= end) {
      api.commAbort(comm);
      return comm::timeoutError(what, timeout, rank, "nccl",
                                "the other devices to join the communicator");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

} // namespace

absl::StatusOr<NcclLibraryInfo> loadNccl(const std::string &path) {
  MOERT_ASSIGN_OR_RETURN(const Loaded *loaded, loadApi(path));
  return loaded->info;
}

absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>>
createNcclGroup(const std::vector<int> &gpus,
                const std::vector<Communicator *> &hosts,
                const NcclOptions &options) {
  MOERT_ASSIGN_OR_RETURN(const Loaded *loaded, loadApi(options.library));
  const NcclApi &api = loaded->api;
  int n = static_cast<int>(gpus.size());
  if (hosts.size() != gpus.size())
    return absl::InternalError("createNcclGroup: one host communicator per "
                               "GPU is needed");
  if (std::set<int>(gpus.begin(), gpus.end()).size() != gpus.size())
    return absl::InvalidArgumentError(absl::StrCat(
        "the NCCL communicator needs one CUDA device per device of the plan, "
        "but the ",
        n, " devices map to CUDA devices ", absl::StrJoin(gpus, ", "),
        "; make more GPUs visible or use --comm host"));
  const char *what = "creating the in-process NCCL communicator";
  ncclUniqueId id;
  if (ncclResult_t rc = api.getUniqueId(&id); rc != ncclSuccess)
    return ncclError(what, "ncclGetUniqueId", rc, api.getErrorString(rc),
                     nullptr);
  std::vector<ncclComm_t> comms(n, nullptr);
  ncclConfig_t config = nonBlockingConfig();
  // One thread initialises every rank: the calls must form one group.
  if (ncclResult_t rc = api.groupStart(); rc != ncclSuccess)
    return ncclError(what, "ncclGroupStart", rc, api.getErrorString(rc),
                     nullptr);
  absl::Status status;
  for (int d = 0; d < n && status.ok(); ++d) {
    status = cuda::cudaCheck(cudaSetDevice(gpus[d]), "cudaSetDevice", what);
    if (!status.ok())
      break;
    ncclResult_t rc = api.commInitRankConfig(&comms[d], n, id, d, &config);
    if (rc != ncclSuccess && rc != ncclInProgress)
      status = ncclError(absl::StrCat(what, " (device ", d, ")"),
                         "ncclCommInitRankConfig", rc, api.getErrorString(rc),
                         nullptr);
  }
  ncclResult_t end = api.groupEnd();
  if (status.ok() && end != ncclSuccess && end != ncclInProgress)
    status =
        ncclError(what, "ncclGroupEnd", end, api.getErrorString(end), nullptr);
  for (int d = 0; d < n && status.ok(); ++d)
    status = awaitInit(api, comms[d], d, options.timeoutSeconds,
                       absl::StrCat(what, " (device ", d, ")"));
  if (!status.ok()) {
    for (ncclComm_t comm : comms)
      if (comm)
        api.commAbort(comm);
    return status;
  }
  // Every endpoint owns its communicator before any can fail: a failed
  // init then destroys all of them together (GroupTeardown).
  auto teardown = std::make_shared<GroupTeardown>(api, options.timeoutSeconds);
  std::vector<std::unique_ptr<NcclEndpoint>> endpoints;
  for (int d = 0; d < n; ++d)
    endpoints.push_back(std::make_unique<NcclEndpoint>(
        api, comms[d], d, n, gpus[d], options.timeoutSeconds, hosts[d],
        teardown));
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (auto &endpoint : endpoints) {
    MOERT_RETURN_IF_ERROR(endpoint->init());
    out.push_back(std::move(endpoint));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>>
createNcclCommunicatorMpi(Communicator &host, int gpu,
                          const NcclOptions &options) {
  MOERT_ASSIGN_OR_RETURN(const Loaded *loaded, loadApi(options.library));
  const NcclApi &api = loaded->api;
  int rank = host.rank(), size = host.size();
  std::string what =
      absl::StrCat("creating the NCCL communicator of MPI rank ", rank);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank == 0)
    if (ncclResult_t rc = api.getUniqueId(&id); rc != ncclSuccess)
      return ncclError(what, "ncclGetUniqueId", rc, api.getErrorString(rc),
                       nullptr);
  MOERT_RETURN_IF_ERROR(mpiBroadcast(&id, sizeof id, options.timeoutSeconds,
                                     "broadcasting the NCCL unique id"));
  MOERT_CUDA(cudaSetDevice(gpu), what);
  ncclConfig_t config = nonBlockingConfig();
  ncclComm_t comm = nullptr;
  ncclResult_t rc = api.commInitRankConfig(&comm, size, id, rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress)
    return ncclError(what, "ncclCommInitRankConfig", rc, api.getErrorString(rc),
                     nullptr);
  MOERT_RETURN_IF_ERROR(
      awaitInit(api, comm, rank, options.timeoutSeconds, what));
  auto endpoint = std::make_unique<NcclEndpoint>(api, comm, rank, size, gpu,
                                                 options.timeoutSeconds, &host);
  MOERT_RETURN_IF_ERROR(endpoint->init());
  return std::unique_ptr<NcclCommunicator>(std::move(endpoint));
}

} // namespace moert
