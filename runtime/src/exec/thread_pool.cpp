//===- thread_pool.cpp - A small fork-join thread pool --------------------===//
//
// A job is published by bumping `generation`; its blocks are claimed from
// `next`, whose high half is the generation the claim belongs to, so that a
// worker that saw an old job can never run a block of a newer one with the
// old job's function. Workers and the caller spin for a while before they
// sleep (docs/architecture.md, "Threads").
//
//===----------------------------------------------------------------------===//

#include "exec/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace moert::detail {

namespace {

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// How long an idle thread polls for the next job before it sleeps:
/// MOERT_SPIN_US microseconds (default 200; 0 sleeps at once, as a pool on
/// shared cores may prefer).
std::chrono::microseconds spinTime() {
  static const std::chrono::microseconds time = [] {
    const char *value = std::getenv("MOERT_SPIN_US");
    if (!value || !*value)
      return std::chrono::microseconds(200);
    char *end = nullptr;
    long us = std::strtol(value, &end, 10);
    if (*end != '\0' || us < 0)
      return std::chrono::microseconds(200);
    return std::chrono::microseconds(std::min(us, 100000L));
  }();
  return time;
}

/// Polls `ready` for up to spinTime(); returns whether it became true.
template <typename Ready> bool spinUntil(Ready &&ready) {
  if (ready())
    return true;
  auto limit = spinTime();
  if (limit.count() == 0)
    return false;
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      cpuRelax();
      if (ready())
        return true;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return ready();
  }
}

constexpr int kBlockBits = 32;
constexpr uint64_t kBlockMask = (uint64_t{1} << kBlockBits) - 1;

} // namespace

struct ThreadPool::State {
  std::vector<std::thread> workers;
  std::atomic<bool> stop{false};
  // The job: written by the caller before `generation` is bumped; read by
  // workers, who only act on it after claiming a block of the same
  // generation (Claim).
  std::atomic<uint64_t> generation{0};
  std::atomic<Thunk> thunk{nullptr};
  std::atomic<void *> fn{nullptr};
  std::atomic<int64_t> n{0};
  std::atomic<int64_t> blocks{0};
  // (generation << 32) | next block.
  std::atomic<uint64_t> next{0};
  // Blocks of the current job run to the end.
  std::atomic<int64_t> finished{0};

  // Sleeping: workers wait on `wake` for a new generation, the caller on
  // `done` for the last block; `sleepers` and `callerSleeps` say whether a
  // notify is needed (checked after the state change, under seq_cst, so that
  // a sleeper either sees the change or is notified).
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable done;
  std::atomic<int> sleepers{0};
  std::atomic<bool> callerSleeps{false};

  /// Claims the next block of job `gen` with `count` blocks: its index, or -1
  /// when the job has none left or is no longer current.
  int64_t claim(uint64_t gen, int64_t count) {
    uint64_t current = next.load(std::memory_order_acquire);
    while (true) {
      if ((current >> kBlockBits) != (gen & kBlockMask))
        return -1;
      int64_t block = static_cast<int64_t>(current & kBlockMask);
      if (block >= count)
        return -1;
      if (next.compare_exchange_weak(current, current + 1,
                                     std::memory_order_acq_rel))
        return block;
    }
  }

  /// Runs blocks of job `gen` until none is left.
  void work(uint64_t gen) {
    // The fields may already be the next job's when job `gen` is over; then
    // no claim below succeeds, and they are never used.
    Thunk job = thunk.load(std::memory_order_relaxed);
    void *jobFn = fn.load(std::memory_order_relaxed);
    int64_t size = n.load(std::memory_order_relaxed);
    int64_t count = blocks.load(std::memory_order_relaxed);
    for (int64_t block = claim(gen, count); block >= 0;
         block = claim(gen, count)) {
      job(jobFn, size * block / count, size * (block + 1) / count);
      if (finished.fetch_add(1) + 1 == count && callerSleeps.load()) {
        std::lock_guard<std::mutex> lock(mutex);
        done.notify_all();
      }
    }
  }

  void workerLoop() {
    uint64_t seen = 0;
    while (true) {
      auto fresh = [&] {
        return stop.load(std::memory_order_relaxed) ||
               generation.load(std::memory_order_acquire) != seen;
      };
      if (!spinUntil(fresh)) {
        std::unique_lock<std::mutex> lock(mutex);
        sleepers.fetch_add(1);
        wake.wait(lock,
                  [&] { return stop.load() || generation.load() != seen; });
        sleepers.fetch_sub(1);
      }
      if (stop.load())
        return;
      seen = generation.load(std::memory_order_acquire);
      work(seen);
    }
  }
};

ThreadPool::ThreadPool(int threads)
    : threads_(threads < 1 ? 1 : threads), state_(std::make_unique<State>()) {
  State &s = *state_;
  for (int i = 1; i < threads_; ++i) {
    // When the system refuses more threads, run with those it gave.
    try {
      s.workers.emplace_back([&s] { s.workerLoop(); });
    } catch (const std::system_error &) {
      break;
    }
  }
  threads_ = 1 + static_cast<int>(s.workers.size());
}

ThreadPool::~ThreadPool() {
  State &s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stop.store(true);
  }
  s.wake.notify_all();
  for (std::thread &worker : s.workers)
    worker.join();
}

void ThreadPool::run(int64_t n, int64_t blocks, Thunk thunk, void *fn) {
  State &s = *state_;
  // The previous job is over (every block finished), so no worker runs its
  // function any more; one that has not noticed it yet only fails to claim.
  uint64_t gen = s.generation.load(std::memory_order_relaxed) + 1;
  s.thunk.store(thunk, std::memory_order_relaxed);
  s.fn.store(fn, std::memory_order_relaxed);
  s.n.store(n, std::memory_order_relaxed);
  s.blocks.store(blocks, std::memory_order_relaxed);
  s.finished.store(0, std::memory_order_relaxed);
  s.next.store((gen & kBlockMask) << kBlockBits, std::memory_order_release);
  s.generation.store(gen); // seq_cst: ordered before the sleepers check
  if (s.sleepers.load() > 0) {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.wake.notify_all();
  }
  s.work(gen);
  auto allDone = [&] { return s.finished.load() == blocks; };
  if (spinUntil(allDone))
    return;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.callerSleeps.store(true);
  s.done.wait(lock, allDone);
  s.callerSleeps.store(false);
}

} // namespace moert::detail
