//===- moe-stream-bench.cpp - Decode products against the memory bus ------===//
//
//   moe-stream-bench N K [THREADS [TYPE [X_ROWS [KERNEL [COPIES]]]]]
//
// Times the product of X_ROWS rows (default 1: decode) of f32 activations
// with an N x K weight matrix stored [N, K] as TYPE (f32, bf16, f16 or int8
// with a scale per row), as the Linear step and the experts' streamed
// blocks run it: streamProject (kernels/stream.h) over THREADS threads, each
// taking one contiguous block of weight rows. KERNEL picks the code:
// `auto` (what the runtime runs on this CPU), `8lanes` (the 8-lane kernels
// whatever the CPU), or `sgemm` (f32 only: oneDNN's sgemm of the [K, N]
// matrix, what a MatMul step runs, split by columns as parallelSgemm splits
// a few rows). Enough copies of the matrix are cycled through (about 256
// MiB, or COPIES) that every product reads its weights from memory. Each
// round measures the read bandwidth (a max-reduce over 512 MiB on the same
// threads) and then the product; the best of each over the rounds is
// printed, with the product's rate of weight bytes as a share of the
// bandwidth.
//
//===----------------------------------------------------------------------===//

#include "../read_bandwidth.h"
#include "kernels/common.h"
#include "kernels/stream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using moert::detail::StreamWeights;
using moert::detail::ThreadPool;

using moec::bench::readBandwidth;
using moec::bench::seconds;

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s N K [THREADS [f32|bf16|f16|int8 [X_ROWS "
                 "[auto|8lanes|sgemm [COPIES]]]]]\n",
                 argv[0]);
    return 2;
  }
  const int64_t N = std::atoll(argv[1]), K = std::atoll(argv[2]);
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const std::string typeName = argc > 4 ? argv[4] : "f32";
  const int64_t xRows = argc > 5 ? std::atoll(argv[5]) : 1;
  const std::string kernel = argc > 6 ? argv[6] : "auto";
  StreamWeights type = typeName == "bf16"   ? StreamWeights::BF16
                       : typeName == "f16"  ? StreamWeights::F16
                       : typeName == "int8" ? StreamWeights::I8
                                            : StreamWeights::F32;
  if (kernel == "sgemm" && type != StreamWeights::F32) {
    std::fprintf(stderr, "sgemm multiplies f32 weights only\n");
    return 2;
  }
  const size_t width = type == StreamWeights::F32  ? 4
                       : type == StreamWeights::I8 ? 1
                                                   : 2;
  const double matrixBytes = double(N) * double(K) * double(width) +
                             (type == StreamWeights::I8 ? 4.0 * N : 0.0);
  const int copies =
      argc > 7
          ? std::max(1, std::atoi(argv[7]))
          : std::max(2, static_cast<int>(double(256 << 20) / matrixBytes) + 1);

  // Random bytes: f32 and 16-bit values from random floats, int8 any byte.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<std::vector<uint8_t>> weights(copies);
  for (auto &w : weights) {
    w.resize(size_t(N) * K * width);
    for (size_t i = 0; i < w.size(); i += 4) {
      float v = uniform(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (type == StreamWeights::BF16 || type == StreamWeights::F16)
        bits = (bits >> 16) & 0x3bff; // finite, moderate halves
      std::memcpy(w.data() + i, &bits, std::min<size_t>(4, w.size() - i));
    }
  }
  std::vector<float> scales(N, 0.01f), x(xRows * K), y(xRows * N);
  for (float &v : x)
    v = uniform(rng);
  std::vector<float> words((512 << 20) / 4, 1.0f);

  ThreadPool pool(threads);
  const int64_t per = (N + threads - 1) / threads;
  const int64_t grain = (per + 15) / 16 * 16;
  double bandwidth = 0, product = 0;
  for (int round = 0; round < 5; ++round) {
    bandwidth = std::max(bandwidth, readBandwidth(pool, words));
    const int reps = std::max(copies * 2, 64);
    double start = seconds();
    for (int rep = 0; rep < reps; ++rep) {
      const uint8_t *w = weights[rep % copies].data();
      pool.parallelFor(N, grain, [&](int64_t j0, int64_t j1) {
        if (kernel == "sgemm")
          // The [K, N] matrix's columns [j0, j1), as parallelSgemm.
          moert::detail::sgemm(false, false, xRows, j1 - j0, K, 1.0f, x.data(),
                               K, reinterpret_cast<const float *>(w) + j0, N,
                               0.0f, y.data() + j0, N);
        else if (kernel == "8lanes")
          moert::detail::streamProject8Lanes(
              x.data(), xRows, K, w, type, j0, j1 - j0,
              type == StreamWeights::I8 ? scales.data() : nullptr, nullptr,
              y.data() + j0, N);
        else
          moert::detail::streamProject(x.data(), xRows, K, w, type, j0, j1 - j0,
                                       type == StreamWeights::I8 ? scales.data()
                                                                 : nullptr,
                                       nullptr, y.data() + j0, N);
      });
    }
    product = std::max(product, matrixBytes * reps / (seconds() - start) / 1e9);
  }
  std::printf("%s %s: %lld x %lld, %lld row(s), %d thread(s): %.2f GB/s of "
              "weights, read bandwidth %.2f GB/s, %.0f%%\n",
              kernel.c_str(), typeName.c_str(), (long long)N, (long long)K,
              (long long)xRows, threads, product, bandwidth,
              100.0 * product / bandwidth);
  return 0;
}
