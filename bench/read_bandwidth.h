//===- read_bandwidth.h - The read bandwidth the benches compare with -----===//
//
// What moe-quant-bench and moe-stream-bench measure a decode product's
// weight rate against: a max-reduce over a buffer larger than the caches,
// on the same pool of threads.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_BENCH_READ_BANDWIDTH_H
#define MOEC_BENCH_READ_BANDWIDTH_H

#include "exec/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace moec::bench {

using moert::detail::ThreadPool;

inline double seconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The process's CPU seconds (all its threads): with the pool's threads
/// busy for a whole product, CPU seconds over THREADS is its time on the
/// cores, which other processes' load does not stretch as it stretches
/// wall time (memory contention still counts).
inline double cpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

/// The largest of words [b, e) (a multiple of 8 apart), at the speed of
/// reading them.
#if defined(__x86_64__)
__attribute__((target("avx2"))) inline float maxOf(const float *p, int64_t b,
                                                   int64_t e) {
  __m256 m[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  for (int64_t i = b; i + 32 <= e; i += 32)
    for (int k = 0; k < 4; ++k)
      m[k] = _mm256_max_ps(m[k], _mm256_loadu_ps(p + i + 8 * k));
  float out[8];
  _mm256_storeu_ps(
      out, _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])));
  return *std::max_element(out, out + 8);
}
#else
inline float maxOf(const float *p, int64_t b, int64_t e) {
  float m = 0;
  for (int64_t i = b; i < e; ++i)
    m = p[i] > m ? p[i] : m;
  return m;
}
#endif

/// GB/s of a max-reduce over `values` on the pool's threads.
inline double readBandwidth(ThreadPool &pool,
                            const std::vector<float> &values) {
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t part = (n / pool.size() + 31) / 32 * 32;
  std::vector<float> maxima(pool.size(), 0.0f);
  double start = seconds();
  pool.parallelFor(n, part, [&](int64_t b, int64_t e) {
    maxima[b / part] = maxOf(values.data(), b, e);
  });
  double time = seconds() - start;
  if (*std::max_element(maxima.begin(), maxima.end()) != 1.0f)
    std::printf("unexpected maximum\n");
  return double(n) * 4 / time / 1e9;
}

} // namespace moec::bench

#endif // MOEC_BENCH_READ_BANDWIDTH_H
