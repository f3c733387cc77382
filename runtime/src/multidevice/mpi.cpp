//===- mpi.cpp - One device per MPI rank ----------------------------------===//
//
// Counts travel point to point (MPI_Isend/MPI_Irecv of one int64 per peer),
// so that a timeout can name the peers whose counts never came; rows travel
// with MPI_Ialltoallv. Every request is polled with MPI_Test against the
// communicator's deadline instead of a blocking wait: a dead or stalled rank
// makes the others fail within the timeout instead of hanging in MPI.
// Only the thread that runs the session calls MPI (MPI_THREAD_FUNNELED).
//
//===----------------------------------------------------------------------===//

#include "multidevice/comm_util.h"

// The C API only: the deprecated C++ bindings need their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <thread>

namespace moert {
namespace {

bool initialisedHere = false;

/// Tags of point-to-point messages cycle through [0, 32767], the range every
/// MPI implementation supports; messages of one pair never overtake.
int tagFor(uint64_t seq) { return static_cast<int>(seq % 32768); }

absl::Status mpiError(absl::string_view what, const char *call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return absl::InternalError(
      absl::StrCat(what, ": ", call, " failed: ", std::string(text, length)));
}

/// Converts a byte count to MPI's int.
absl::Status toInt(size_t value, int &out, absl::string_view what) {
  if (value > static_cast<size_t>(INT_MAX))
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": ", value, " bytes exceed MPI's per-peer limit of 2^31 - 1"));
  out = static_cast<int>(value);
  return absl::OkStatus();
}

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(MPI_Comm comm, int rank, int size, double timeout)
      : comm_(comm), rank_(rank), size_(size), timeout_(timeout) {}
  ~MpiCommunicator() override {
    // Requests still in flight belong to a failed run; the process ends.
    // After MPI_Finalize (a Python generator that outlives mpi_finalize())
    // MPI has already released the communicator.
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (pending_.empty() && !finalised)
      MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backend() const override { return "mpi"; }
  double timeoutSeconds() const override { return timeout_; }

  absl::Status exchangeCounts(const int64_t *send, int64_t *recv,
                              absl::string_view what) override {
    uint64_t seq = nextSeq_++;
    int tag = tagFor(seq);
    std::vector<MPI_Request> requests(2 * size_, MPI_REQUEST_NULL);
    for (int p = 0; p < size_; ++p) {
      if (int rc =
              MPI_Irecv(recv + p, 1, MPI_INT64_T, p, tag, comm_, &requests[p]))
        return mpiError(what, "MPI_Irecv", rc);
      if (int rc = MPI_Isend(send + p, 1, MPI_INT64_T, p, tag, comm_,
                             &requests[size_ + p]))
        return mpiError(what, "MPI_Isend", rc);
    }
    absl::Status status = poll(requests.data(), 2 * size_, what);
    if (absl::IsDeadlineExceeded(status)) {
      std::vector<int> missing;
      for (int p = 0; p < size_; ++p) {
        int done = 0;
        MPI_Test(&requests[p], &done, MPI_STATUS_IGNORE);
        if (!done)
          missing.push_back(p);
      }
      if (!missing.empty())
        return comm::timeoutError(what, timeout_, rank_, "mpi",
                                  comm::describeDevices(missing, seq));
    }
    return status;
  }

  absl::StatusOr<ExchangeId> start(ExchangeSpec spec,
                                   absl::string_view what) override {
    MOERT_RETURN_IF_ERROR(comm::checkSpec(spec, size_, what));
    uint64_t seq = nextSeq_++;
    Pending &p = pending_[seq];
    p.what = std::string(what);
    p.sendCounts.resize(size_);
    p.sendDispls.resize(size_);
    p.recvCounts.resize(size_);
    p.recvDispls.resize(size_);
    for (int d = 0; d < size_; ++d) {
      MOERT_RETURN_IF_ERROR(toInt(spec.sendBytes[d], p.sendCounts[d], what));
      MOERT_RETURN_IF_ERROR(toInt(spec.sendOffsets[d], p.sendDispls[d], what));
      MOERT_RETURN_IF_ERROR(toInt(spec.recvBytes[d], p.recvCounts[d], what));
      MOERT_RETURN_IF_ERROR(toInt(spec.recvOffsets[d], p.recvDispls[d], what));
      if (d != rank_ && (spec.sendBytes[d] || spec.recvBytes[d]))
        p.peers.push_back(d);
    }
    if (int rc =
            MPI_Ialltoallv(spec.send, p.sendCounts.data(), p.sendDispls.data(),
                           MPI_BYTE, spec.recv, p.recvCounts.data(),
                           p.recvDispls.data(), MPI_BYTE, comm_, &p.request)) {
      pending_.erase(seq);
      return mpiError(what, "MPI_Ialltoallv", rc);
    }
    return seq;
  }

  absl::Status wait(ExchangeId id) override {
    auto it = pending_.find(id);
    if (it == pending_.end())
      return comm::notInFlight(id);
    Pending &p = it->second;
    absl::Status status = poll(&p.request, 1, p.what);
    if (absl::IsDeadlineExceeded(status)) {
      std::string peers = p.peers.empty() ? std::string("the other devices")
                                          : comm::describeDevices(p.peers, id);
      return comm::timeoutError(p.what, timeout_, rank_, "mpi",
                                absl::StrCat("the row exchange with ", peers));
    }
    if (status.ok())
      pending_.erase(it);
    return status;
  }

  absl::Status gather(const std::vector<uint8_t> &mine,
                      std::vector<std::vector<uint8_t>> &all,
                      absl::string_view what) override {
    uint64_t seq = nextSeq_++;
    uint64_t myBytes = mine.size();
    std::vector<uint64_t> sizes(rank_ == 0 ? size_ : 0);
    MPI_Request request;
    if (int rc = MPI_Igather(&myBytes, 1, MPI_UINT64_T, sizes.data(), 1,
                             MPI_UINT64_T, 0, comm_, &request))
      return mpiError(what, "MPI_Igather", rc);
    absl::Status status = poll(&request, 1, what);
    if (absl::IsDeadlineExceeded(status))
      return comm::timeoutError(what, timeout_, rank_, "mpi",
                                absl::StrCat("collective #", seq));
    MOERT_RETURN_IF_ERROR(status);
    int sendCount;
    MOERT_RETURN_IF_ERROR(toInt(mine.size(), sendCount, what));
    std::vector<int> counts(sizes.size()), displs(sizes.size());
    std::vector<uint8_t> buffer;
    size_t total = 0;
    for (size_t d = 0; d < sizes.size(); ++d) {
      MOERT_RETURN_IF_ERROR(toInt(sizes[d], counts[d], what));
      MOERT_RETURN_IF_ERROR(toInt(total, displs[d], what));
      total += sizes[d];
    }
    buffer.resize(std::max<size_t>(total, 1));
    if (int rc = MPI_Igatherv(mine.data(), sendCount, MPI_BYTE, buffer.data(),
                              counts.data(), displs.data(), MPI_BYTE, 0, comm_,
                              &request))
      return mpiError(what, "MPI_Igatherv", rc);
    status = poll(&request, 1, what);
    if (absl::IsDeadlineExceeded(status))
      return comm::timeoutError(what, timeout_, rank_, "mpi",
                                absl::StrCat("collective #", seq));
    MOERT_RETURN_IF_ERROR(status);
    all.clear();
    for (size_t d = 0; d < sizes.size(); ++d)
      all.emplace_back(buffer.begin() + displs[d],
                       buffer.begin() + displs[d] + counts[d]);
    return absl::OkStatus();
  }

  void abort(const absl::Status &) override { MPI_Abort(MPI_COMM_WORLD, 1); }

private:
  struct Pending {
    std::string what;
    MPI_Request request = MPI_REQUEST_NULL;
    /// MPI reads the count arrays until the exchange completes.
    std::vector<int> sendCounts, sendDispls, recvCounts, recvDispls;
    std::vector<int> peers;
  };

  /// Tests `requests` until all complete or the deadline passes, backing
  /// off from spinning to 1 ms sleeps so that oversubscribed ranks share
  /// the cores.
  absl::Status poll(MPI_Request *requests, int count, absl::string_view what) {
    comm::Clock::time_point end = comm::deadline(timeout_);
    int spins = 0;
    while (true) {
      int done = 0;
      if (int rc = MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE))
        return mpiError(what, "MPI_Testall", rc);
      if (done)
        return absl::OkStatus();
      if (comm::Clock::now() >= end)
        return absl::DeadlineExceededError(what);
      if (++spins < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(
            std::chrono::microseconds(std::min(1000, 10 * (spins - 63))));
    }
  }

  MPI_Comm comm_;
  int rank_, size_;
  double timeout_;
  uint64_t nextSeq_ = 0;
  std::map<ExchangeId, Pending> pending_;
};

} // namespace

bool mpiSupported() { return true; }

absl::Status mpiInit(int *argc, char ***argv) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised)
    return absl::OkStatus();
  int provided = 0;
  if (int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided))
    return mpiError("MPI", "MPI_Init_thread", rc);
  initialisedHere = true;
  // Errors come back as codes that the callers turn into statuses.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return absl::OkStatus();
}

int mpiRank() {
  int initialised = 0, rank = -1;
  MPI_Initialized(&initialised);
  if (initialised)
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpiWorldSize() {
  int initialised = 0, size = -1;
  MPI_Initialized(&initialised);
  if (initialised)
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

void mpiFinalize() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (initialisedHere && !finalised)
    MPI_Finalize();
}

void mpiAbort(int code) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised)
    MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

absl::Status mpiBroadcast(void *data, size_t bytes, double timeoutSeconds,
                          absl::string_view what) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised)
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": MPI is not initialised"));
  int count;
  MOERT_RETURN_IF_ERROR(toInt(bytes, count, what));
  MPI_Request request;
  if (int rc = MPI_Ibcast(data, count, MPI_BYTE, 0, MPI_COMM_WORLD, &request))
    return mpiError(what, "MPI_Ibcast", rc);
  // Polled like the exchanges, so that a rank that never arrives is a
  // timeout rather than a hang.
  comm::Clock::time_point end = comm::deadline(timeoutSeconds);
  while (true) {
    int done = 0;
    if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE))
      return mpiError(what, "MPI_Test", rc);
    if (done)
      return absl::OkStatus();
    if (comm::Clock::now() >= end)
      return comm::timeoutError(what, timeoutSeconds, mpiRank(), "mpi",
                                "the broadcast from device 0");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

absl::StatusOr<std::unique_ptr<Communicator>>
createMpiCommunicator(const CommOptions &options) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised)
    return absl::FailedPreconditionError("MPI is not initialised");
  MPI_Comm comm;
  if (int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm))
    return mpiError("MPI", "MPI_Comm_dup", rc);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(comm, rank, size, options.timeoutSeconds));
}

} // namespace moert
