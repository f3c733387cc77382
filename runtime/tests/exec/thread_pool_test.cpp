//===- thread_pool_test.cpp - The fork-join pool --------------------------===//

#include "exec/thread_pool.h"

#include "gtest/gtest.h"

#include <atomic>
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

} // namespace
} // namespace moert::detail
