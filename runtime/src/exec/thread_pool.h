//===- thread_pool.h - A small fork-join thread pool ------------*- C++ -*-===//
//
// Kernels split their work with `parallelFor`; the calling thread takes part.
// Idle workers poll for the next job for a while (MOERT_SPIN_US, default 200
// microseconds) before they sleep on a condition variable: a decode step is
// dozens of jobs microseconds apart, and a worker woken through the kernel
// arrived after the caller had taken most of each job (docs/architecture.md,
// "Threads").
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_THREAD_POOL_H
#define MOERT_SRC_THREAD_POOL_H

#include <cstdint>
#include <memory>
#include <type_traits>

namespace moert::detail {

class ThreadPool {
public:
  /// A pool of `threads` threads in total, the caller included (>= 1).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return threads_; }

  /// Calls `fn(begin, end)` on disjoint ranges covering [0, n), each of at
  /// least `grain` items (but the last), in parallel; returns when all are
  /// done. Must not be called from inside `fn`.
  template <typename Fn> void parallelFor(int64_t n, int64_t grain, Fn &&fn) {
    if (n <= 0)
      return;
    if (grain < 1)
      grain = 1;
    int64_t blocks = (n + grain - 1) / grain;
    if (blocks > threads_)
      blocks = threads_;
    if (blocks <= 1) {
      fn(int64_t{0}, n);
      return;
    }
    // Fn is a reference type when fn is an lvalue: the thunk calls the
    // function object itself.
    using Callable = std::remove_reference_t<Fn>;
    run(n, blocks, &thunk<Callable>,
        const_cast<void *>(static_cast<const void *>(std::addressof(fn))));
  }

private:
  using Thunk = void (*)(void *, int64_t, int64_t);
  template <typename Fn> static void thunk(void *fn, int64_t b, int64_t e) {
    (*static_cast<Fn *>(fn))(b, e);
  }
  void run(int64_t n, int64_t blocks, Thunk thunk, void *fn);

  struct State;
  int threads_;
  std::unique_ptr<State> state_;
};

} // namespace moert::detail

#endif // MOERT_SRC_THREAD_POOL_H
