//===- in_process.cpp - Devices as threads of one process -----------------===//
//
// The N endpoints share one table of collectives in flight, keyed by sequence
// number. A device posts its part (counts by value, send buffers by pointer)
// and waits on a condition variable, with a deadline, until the parts it needs
// are posted. Data moves with one memcpy from the sender's buffer into the
// receiver's: the sender's `wait` returns only after every receiver copied
// its part, so that its buffer stays valid until then.
//
//===----------------------------------------------------------------------===//

#include "multidevice/comm_util.h"

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

namespace moert {
namespace {

enum class OpKind { Counts, Data, Gather };

const char *opKindName(OpKind kind) {
  switch (kind) {
  case OpKind::Counts:
    return "a count exchange";
  case OpKind::Data:
    return "a data exchange";
  case OpKind::Gather:
    return "a gather";
  }
  return "?";
}

/// One collective in flight.
struct Op {
  OpKind kind;
  int n;
  /// The collective's sequence number, its key in Group::ops.
  uint64_t seq;
  std::vector<char> posted;
  /// Counts: row src holds what src sends to each device.
  std::vector<int64_t> counts;
  /// Data: each source's send buffer and layout.
  std::vector<const uint8_t *> send;
  std::vector<std::vector<size_t>> sendBytes, sendOffsets;
  /// Data: receivers that finished copying from each source.
  std::vector<int> readers;
  /// Gather: each device's blob.
  std::vector<std::vector<uint8_t>> blobs;
  /// Devices finished with the op; it is erased when all are.
  int finished = 0;

  Op(OpKind kind, int n, uint64_t seq)
      : kind(kind), n(n), seq(seq), posted(n, 0), send(n), sendBytes(n),
        sendOffsets(n), readers(n, 0) {
    if (kind == OpKind::Counts)
      counts.assign(size_t(n) * n, 0);
    if (kind == OpKind::Gather)
      blobs.resize(n);
  }
};

struct Group {
  int n;
  double timeout;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<uint64_t, Op> ops;
  bool failed = false;
  absl::Status failure;

  Group(int n, double timeout) : n(n), timeout(timeout) {}
};

class InProcessCommunicator final : public Communicator {
public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->n; }
  const char *backend() const override { return "in-process"; }
  double timeoutSeconds() const override { return group_->timeout; }

  absl::Status exchangeCounts(const int64_t *send, int64_t *recv,
                              absl::string_view what) override {
    Group &g = *group_;
    std::unique_lock<std::mutex> lock(g.mutex);
    MOERT_ASSIGN_OR_RETURN(Op * op, post(lock, OpKind::Counts, what));
    std::copy(send, send + g.n, op->counts.begin() + size_t(rank_) * g.n);
    g.changed.notify_all();
    MOERT_RETURN_IF_ERROR(awaitPosted(lock, *op, what));
    for (int p = 0; p < g.n; ++p)
      recv[p] = op->counts[size_t(p) * g.n + rank_];
    finish(*op);
    return absl::OkStatus();
  }

  absl::StatusOr<ExchangeId> start(ExchangeSpec spec,
                                   absl::string_view what) override {
    Group &g = *group_;
    MOERT_RETURN_IF_ERROR(comm::checkSpec(spec, g.n, what));
    std::unique_lock<std::mutex> lock(g.mutex);
    MOERT_ASSIGN_OR_RETURN(Op * op, post(lock, OpKind::Data, what));
    op->send[rank_] = static_cast<const uint8_t *>(spec.send);
    op->sendBytes[rank_] = spec.sendBytes;
    op->sendOffsets[rank_] = spec.sendOffsets;
    g.changed.notify_all();
    pending_[op->seq] = Pending{std::move(spec), std::string(what)};
    return op->seq;
  }

  absl::Status wait(ExchangeId id) override {
    Group &g = *group_;
    auto it = pending_.find(id);
    if (it == pending_.end())
      return comm::notInFlight(id);
    Pending pending = std::move(it->second);
    pending_.erase(it);
    const std::string &what = pending.what;
    std::unique_lock<std::mutex> lock(g.mutex);
    Op &op = g.ops.at(id);
    MOERT_RETURN_IF_ERROR(awaitPosted(lock, op, what));
    // The sources' buffers stay valid until this device counts itself among
    // their readers, so the copies need no lock.
    for (int p = 0; p < g.n; ++p)
      if (op.sendBytes[p][rank_] != pending.spec.recvBytes[p])
        return absl::InternalError(
            absl::StrCat(what, ": device ", p, " sends ",
                         op.sendBytes[p][rank_], " bytes to device ", rank_,
                         ", which expects ", pending.spec.recvBytes[p]));
    lock.unlock();
    auto *recv = static_cast<uint8_t *>(pending.spec.recv);
    for (int p = 0; p < g.n; ++p)
      if (size_t bytes = pending.spec.recvBytes[p])
        std::memcpy(recv + pending.spec.recvOffsets[p],
                    op.send[p] + op.sendOffsets[p][rank_], bytes);
    lock.lock();
    for (int p = 0; p < g.n; ++p)
      ++op.readers[p];
    g.changed.notify_all();
    // This device's send buffer is free once every device has read it.
    bool done = g.changed.wait_until(lock, comm::deadline(g.timeout), [&] {
      return g.failed || op.readers[rank_] == g.n;
    });
    if (g.failed)
      return g.failure;
    if (!done)
      return comm::timeoutError(what, g.timeout, rank_, "in-process",
                                "to read this device's rows");
    finish(op);
    return absl::OkStatus();
  }

  absl::Status gather(const std::vector<uint8_t> &mine,
                      std::vector<std::vector<uint8_t>> &all,
                      absl::string_view what) override {
    Group &g = *group_;
    std::unique_lock<std::mutex> lock(g.mutex);
    MOERT_ASSIGN_OR_RETURN(Op * op, post(lock, OpKind::Gather, what));
    op->blobs[rank_] = mine;
    g.changed.notify_all();
    all.clear();
    if (rank_ == 0) {
      MOERT_RETURN_IF_ERROR(awaitPosted(lock, *op, what));
      all = std::move(op->blobs);
      op->blobs.assign(g.n, {});
    }
    finish(*op);
    return absl::OkStatus();
  }

  void abort(const absl::Status &reason) override {
    Group &g = *group_;
    std::lock_guard<std::mutex> lock(g.mutex);
    if (!g.failed) {
      g.failed = true;
      g.failure = absl::Status(
          reason.code(),
          absl::StrCat("device ", rank_, " failed: ", reason.message()));
    }
    g.changed.notify_all();
  }

private:
  struct Pending {
    ExchangeSpec spec;
    std::string what;
  };

  /// Marks this device's part of its next collective posted, creating the
  /// op when this device is the first to reach it.
  absl::StatusOr<Op *> post(std::unique_lock<std::mutex> &, OpKind kind,
                            absl::string_view what) {
    Group &g = *group_;
    uint64_t seq = nextSeq_++;
    if (g.failed)
      return g.failure;
    Op &op = g.ops.try_emplace(seq, kind, g.n, seq).first->second;
    if (op.kind != kind)
      return absl::InternalError(
          absl::StrCat(what, ": device ", rank_, " is at ", opKindName(kind),
                       " where another device is at ", opKindName(op.kind),
                       " (the devices run schedules that do not match)"));
    op.posted[rank_] = 1;
    return &op;
  }

  /// Waits until every device posted its part of `op`.
  absl::Status awaitPosted(std::unique_lock<std::mutex> &lock, Op &op,
                           absl::string_view what) {
    Group &g = *group_;
    auto all = [&] {
      return std::all_of(op.posted.begin(), op.posted.end(),
                         [](char p) { return p != 0; });
    };
    bool done = g.changed.wait_until(lock, comm::deadline(g.timeout),
                                     [&] { return g.failed || all(); });
    if (g.failed)
      return g.failure;
    if (!done) {
      std::vector<int> missing;
      for (int p = 0; p < g.n; ++p)
        if (!op.posted[p])
          missing.push_back(p);
      return comm::timeoutError(what, g.timeout, rank_, "in-process",
                                comm::describeDevices(missing, op.seq));
    }
    return absl::OkStatus();
  }

  /// Counts this device done with `op`; the last one erases it.
  void finish(Op &op) {
    if (++op.finished == group_->n)
      group_->ops.erase(uint64_t(op.seq)); // A copy: erase destroys `op`.
  }

  std::shared_ptr<Group> group_;
  int rank_;
  uint64_t nextSeq_ = 0;
  std::map<uint64_t, Pending> pending_;
};

} // namespace

std::vector<std::unique_ptr<Communicator>>
createInProcessGroup(int devices, const CommOptions &options) {
  auto group = std::make_shared<Group>(devices, options.timeoutSeconds);
  std::vector<std::unique_ptr<Communicator>> endpoints;
  for (int d = 0; d < devices; ++d)
    endpoints.push_back(std::make_unique<InProcessCommunicator>(group, d));
  return endpoints;
}

} // namespace moert
