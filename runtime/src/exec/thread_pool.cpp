//===- thread_pool.cpp - A small fork-join thread pool --------------------===//

#include "exec/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace moert::detail {

struct ThreadPool::State {
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable done;
  std::vector<std::thread> workers;
  bool stop = false;
  // The job of the current generation.
  uint64_t generation = 0;
  Thunk thunk = nullptr;
  void *fn = nullptr;
  int64_t n = 0;
  int64_t blocks = 0;
  std::atomic<int64_t> next{0};
  int64_t finished = 0;
  // Workers between taking a job and reporting back. A new job is only set
  // up when this is zero, so that no late worker claims a block of the next
  // job with the previous job's function.
  int active = 0;

  /// Runs blocks of the job (thunk, fn, n, count) until none is left; returns
  /// how many it ran.
  int64_t work(Thunk thunk, void *fn, int64_t n, int64_t count) {
    int64_t ran = 0;
    for (int64_t block = next.fetch_add(1); block < count;
         block = next.fetch_add(1)) {
      thunk(fn, n * block / count, n * (block + 1) / count);
      ++ran;
    }
    return ran;
  }
};

ThreadPool::ThreadPool(int threads)
    : threads_(threads < 1 ? 1 : threads), state_(std::make_unique<State>()) {
  State &s = *state_;
  for (int i = 1; i < threads_; ++i) {
    // When the system refuses more threads, run with those it gave.
    try {
      s.workers.emplace_back([&s] {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lock(s.mutex);
        while (true) {
          s.wake.wait(lock, [&] { return s.stop || s.generation != seen; });
          if (s.stop)
            return;
          seen = s.generation;
          ++s.active;
          Thunk thunk = s.thunk;
          void *fn = s.fn;
          int64_t n = s.n, blocks = s.blocks;
          lock.unlock();
          int64_t ran = s.work(thunk, fn, n, blocks);
          lock.lock();
          s.finished += ran;
          --s.active;
          s.done.notify_all();
        }
      });
    } catch (const std::system_error &) {
      break;
    }
  }
  threads_ = 1 + static_cast<int>(s.workers.size());
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->wake.notify_all();
  for (std::thread &worker : state_->workers)
    worker.join();
}

void ThreadPool::run(int64_t n, int64_t blocks, Thunk thunk, void *fn) {
  State &s = *state_;
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.done.wait(lock, [&] { return s.active == 0; });
    s.thunk = thunk;
    s.fn = fn;
    s.n = n;
    s.blocks = blocks;
    s.next.store(0);
    s.finished = 0;
    ++s.generation;
  }
  s.wake.notify_all();
  int64_t ran = s.work(thunk, fn, n, blocks);
  std::unique_lock<std::mutex> lock(s.mutex);
  s.finished += ran;
  s.done.wait(lock, [&] { return s.finished == s.blocks; });
}

} // namespace moert::detail
