//===- thread_pool_test.cpp - The fork-join pool --------------------------===//

#include "exec/thread_pool.h"

#include "gtest/gtest.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace moert::detail {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 100, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> calls{0};
        pool.parallelFor(n, grain, [&](int64_t begin, int64_t end) {
          ++calls;
          EXPECT_LE(begin, end);
          for (int64_t i = begin; i < end; ++i)
            ++hits[i];
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " grain=" << grain;
        EXPECT_LE(calls.load(), threads);
      }
    }
  }
}

TEST(ThreadPool, ManyBackToBackJobs) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 2000; ++job)
    pool.parallelFor(64, 1,
                     [&](int64_t begin, int64_t end) { sum += end - begin; });
  EXPECT_EQ(sum.load(), 2000 * 64);
}

// Jobs of different functions and block counts back to back, some after a
// pause long enough for the workers to stop polling and sleep: every block
// runs the function of its own job, once.
TEST(ThreadPool, JobsNeverMixAcrossSleepsAndSpins) {
  ThreadPool pool(3);
  for (int job = 0; job < 400; ++job) {
    if (job % 50 == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    int64_t n = 1 + job % 17;
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> wrong{0};
    const int id = job;
    pool.parallelFor(n, 1, [&, id](int64_t begin, int64_t end) {
      if (id != job)
        ++wrong;
      for (int64_t i = begin; i < end; ++i)
        ++hits[i];
    });
    ASSERT_EQ(wrong.load(), 0);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(hits[i].load(), 1) << "job " << job << " index " << i;
  }
}

// A job whose blocks outlast the polling: the caller sleeps until the last
// block is done and still sees every block's writes.
TEST(ThreadPool, CallerWaitsForSlowBlocks) {
  ThreadPool pool(2);
  std::vector<int> out(2, 0);
  pool.parallelFor(2, 1, [&](int64_t begin, int64_t end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * (begin + 1)));
    for (int64_t i = begin; i < end; ++i)
      out[i] = static_cast<int>(i) + 1;
  });
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 2);
}

} // namespace
} // namespace moert::detail
