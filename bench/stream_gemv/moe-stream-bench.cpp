//===- moe-stream-bench.cpp - Decode products against the memory bus ------===//
//
//   moe-stream-bench N K [THREADS [TYPE [ROWS [KERNEL [COPIES [LAYOUT]]]]]]
//
// Times the product of ROWS rows (default 1: decode; a comma list such as
// 1,2,4,8 prints one line per count) of f32 activations with an N x K
// weight matrix stored as TYPE (f32, bf16, f16 or int8 with a scale per
// output), as the Linear step and the experts' blocks run it. LAYOUT is
// `outin` (default: stored [N, K]) or `inout` (stored [K, N], as the
// experts of some exports). KERNEL picks the code:
//  * `auto`: what the experts' streamed blocks run on this CPU. [N, K]:
//    streamProject (kernels/stream.h) over THREADS threads, each taking one
//    contiguous block of weight rows; [K, N]: streamRowRange over ranges of
//    128 weight rows, each into its own partial product (the experts' split
//    blocks, without the final sum).
//  * `8lanes`: the 8-lane streaming kernels whatever the CPU ([N, K] only).
//  * `gemm`: what the experts run above the crossover (streamedRows):
//    column blocks of 256 outputs through matmulBlock (oneDNN's matmul:
//    bf16 for bf16 and int8 where the CPU has AVX512-BF16, f32 where oneDNN
//    has brgemm), else the widened block through sgemm.
//  * `tiles`: column blocks of 256 outputs through tileProject
//    (kernels/tiles.h), the register tiles that the experts run between the
//    streaming and the GEMM blocks ([N, K] only).
//  * `sgemm`: f32 only: oneDNN's sgemm of the [K, N] matrix, what a MatMul
//    step runs, split by columns as parallelSgemm splits a few rows.
// Enough copies of the matrix are cycled through (about 256 MiB, or COPIES
// when not 0) that every product reads its weights from memory, each copy
// in transparent huge pages where the kernel grants them (moe-run's plans
// are, by default). Each round
// measures the read bandwidth (a max-reduce over 512 MiB on the same
// threads) and then the product; the best of each over the rounds is
// printed, with the product's rate of weight bytes as a share of the
// bandwidth, and its rate per CPU second (times THREADS: the rate the
// cores reach while they run it, which a loaded machine's scheduling does
// not dilute).
//
//===----------------------------------------------------------------------===//

#include "../read_bandwidth.h"
#include "kernels/common.h"
#include "kernels/expert_gemm.h"
#include "kernels/stream.h"
#include "kernels/tiles.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <sys/mman.h>
#include <time.h>
#include <vector>

using moert::detail::StreamWeights;
using moert::detail::ThreadPool;

using moec::bench::cpuSeconds;
using moec::bench::readBandwidth;
using moec::bench::seconds;

namespace {
/// Bytes aligned to 2 MiB, advised into transparent huge pages.
class HugeBuffer {
public:
  HugeBuffer() = default;
  HugeBuffer(const HugeBuffer &) = delete;
  HugeBuffer &operator=(const HugeBuffer &) = delete;
  ~HugeBuffer() { std::free(data_); }
  void allocate(size_t size) {
    constexpr size_t kHuge = 2 << 20;
    const size_t rounded = (size + kHuge - 1) / kHuge * kHuge;
    size_ = size;
    data_ = static_cast<uint8_t *>(std::aligned_alloc(kHuge, rounded));
    if (!data_) {
      std::fprintf(stderr, "out of memory\n");
      std::exit(1);
    }
    madvise(data_, rounded, MADV_HUGEPAGE);
  }
  uint8_t *data() { return data_; }
  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }

private:
  uint8_t *data_ = nullptr;
  size_t size_ = 0;
};

/// Columns per GEMM block, as the experts' wide blocks.
constexpr int64_t kGemmColumns = 256;
/// Weight rows per [K, N] streamed block, as the experts' split blocks.
constexpr int64_t kPartRows = 128;

std::vector<int64_t> rowCounts(const char *list) {
  std::vector<int64_t> rows;
  for (const char *p = list; *p;) {
    rows.push_back(std::max<int64_t>(1, std::atoll(p)));
    while (*p && *p != ',')
      ++p;
    if (*p == ',')
      ++p;
  }
  return rows;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s N K [THREADS [f32|bf16|f16|int8 [ROWS[,ROWS...] "
                 "[auto|8lanes|gemm|tiles|sgemm [COPIES [outin|inout]]]]]]\n",
                 argv[0]);
    return 2;
  }
  const int64_t N = std::atoll(argv[1]), K = std::atoll(argv[2]);
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const std::string typeName = argc > 4 ? argv[4] : "f32";
  const std::vector<int64_t> rowList = rowCounts(argc > 5 ? argv[5] : "1");
  const std::string kernel = argc > 6 ? argv[6] : "auto";
  const bool inOut = argc > 8 && std::string(argv[8]) == "inout";
  StreamWeights type = typeName == "bf16"   ? StreamWeights::BF16
                       : typeName == "f16"  ? StreamWeights::F16
                       : typeName == "int8" ? StreamWeights::I8
                                            : StreamWeights::F32;
  if (kernel == "tiles" && moert::detail::tiledRows(type) == 0) {
    std::fprintf(stderr, "this CPU has no register tiles for %s weights\n",
                 typeName.c_str());
    return 2;
  }
  if (kernel == "sgemm" && type != StreamWeights::F32) {
    std::fprintf(stderr, "sgemm multiplies f32 weights only\n");
    return 2;
  }
  if ((kernel == "8lanes" || kernel == "tiles") && inOut) {
    std::fprintf(stderr, "%s is for the [N, K] layout\n", kernel.c_str());
    return 2;
  }
  const size_t width = type == StreamWeights::F32  ? 4
                       : type == StreamWeights::I8 ? 1
                                                   : 2;
  const double matrixBytes = double(N) * double(K) * double(width) +
                             (type == StreamWeights::I8 ? 4.0 * N : 0.0);
  const int copyArg = argc > 7 ? std::atoi(argv[7]) : 0;
  const int copies =
      copyArg > 0
          ? copyArg
          : std::max(2, static_cast<int>(double(256 << 20) / matrixBytes) + 1);

  // Random bytes: f32 and 16-bit values from random floats, int8 any byte.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  // Each copy in transparent huge pages where the kernel grants them, as
  // moe-run holds a plan's weights (--weight-pages auto).
  std::vector<HugeBuffer> weights(copies);
  for (auto &w : weights) {
    w.allocate(size_t(N) * K * width);
    for (size_t i = 0; i < w.size(); i += 4) {
      float v = uniform(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (type == StreamWeights::BF16 || type == StreamWeights::F16)
        bits = (bits >> 16) & 0x3bff; // finite, moderate halves
      std::memcpy(w.data() + i, &bits, std::min<size_t>(4, w.size() - i));
    }
  }
  const int64_t maxRows = *std::max_element(rowList.begin(), rowList.end());
  std::vector<float> scales(N, 0.01f), x(maxRows * K), y(maxRows * N);
  for (float &v : x)
    v = uniform(rng);
  std::vector<float> words((512 << 20) / 4, 1.0f);
  const float *scale = type == StreamWeights::I8 ? scales.data() : nullptr;

  ThreadPool pool(threads);
  const int64_t per = (N + threads - 1) / threads;
  const int64_t grain = (per + 15) / 16 * 16;
  const int64_t parts = (K + kPartRows - 1) / kPartRows;
  std::vector<float> partials(inOut ? parts * maxRows * N : 0);
  std::vector<std::vector<float>> widened(threads);
  // One product of xRows rows with weights w.
  auto product = [&](const uint8_t *w, int64_t xRows) {
    if (kernel == "tiles") {
      int64_t blocks = (N + kGemmColumns - 1) / kGemmColumns;
      pool.parallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          int64_t c0 = b * kGemmColumns, m = std::min(kGemmColumns, N - c0);
          moert::detail::tileProject(x.data(), xRows, K, w, type, c0, m, scale,
                                     nullptr, y.data() + c0, N);
        }
      });
      return;
    }
    if (kernel == "gemm") {
      int64_t blocks = (N + kGemmColumns - 1) / kGemmColumns;
      pool.parallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          int64_t c0 = b * kGemmColumns, m = std::min(kGemmColumns, N - c0);
          if (moert::detail::matmulBlock(x.data(), xRows, K, w, type, N, inOut,
                                         c0, m, scale, nullptr, y.data() + c0,
                                         N))
            continue;
          // The sgemm fallback: f32 in place, else widened, then scaled.
          const float *block =
              reinterpret_cast<const float *>(w) + (inOut ? c0 : c0 * K);
          int64_t ldb = inOut ? N : K;
          if (type != StreamWeights::F32) {
            thread_local std::vector<float> wide;
            wide.resize(K * m);
            if (inOut)
              for (int64_t k = 0; k < K; ++k)
                moert::detail::widenWeights(w + (k * N + c0) * width, type, m,
                                            wide.data() + k * m);
            else
              moert::detail::widenWeights(w + c0 * K * width, type, m * K,
                                          wide.data());
            block = wide.data();
            ldb = inOut ? m : K;
          }
          moert::detail::sgemm(false, !inOut, xRows, m, K, 1.0f, x.data(), K,
                               block, ldb, 0.0f, y.data() + c0, N);
          if (scale)
            for (int64_t r = 0; r < xRows; ++r)
              for (int64_t j = 0; j < m; ++j)
                y[r * N + c0 + j] *= scale[c0 + j];
        }
      });
      return;
    }
    if (inOut) {
      pool.parallelFor(parts, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p)
          moert::detail::streamRowRange(x.data(), xRows, K, w, type, N,
                                        p * kPartRows,
                                        std::min(K, (p + 1) * kPartRows),
                                        partials.data() + p * xRows * N);
      });
      return;
    }
    pool.parallelFor(N, grain, [&](int64_t j0, int64_t j1) {
      if (kernel == "sgemm")
        // The [K, N] matrix's columns [j0, j1), as parallelSgemm.
        moert::detail::sgemm(false, false, xRows, j1 - j0, K, 1.0f, x.data(), K,
                             reinterpret_cast<const float *>(w) + j0, N, 0.0f,
                             y.data() + j0, N);
      else if (kernel == "8lanes")
        moert::detail::streamProject8Lanes(x.data(), xRows, K, w, type, j0,
                                           j1 - j0, scale, nullptr,
                                           y.data() + j0, N);
      else
        moert::detail::streamProject(x.data(), xRows, K, w, type, j0, j1 - j0,
                                     scale, nullptr, y.data() + j0, N);
    });
  };
  for (int64_t xRows : rowList) {
    double bandwidth = 0, rate = 0, cpuRate = 0;
    for (int round = 0; round < 5; ++round) {
      bandwidth = std::max(bandwidth, readBandwidth(pool, words));
      const int reps = std::max(copies * 2, 64);
      double start = seconds(), cpuStart = cpuSeconds();
      for (int rep = 0; rep < reps; ++rep)
        product(weights[rep % copies].data(), xRows);
      rate = std::max(rate, matrixBytes * reps / (seconds() - start) / 1e9);
      cpuRate = std::max(cpuRate, matrixBytes * reps * threads /
                                      (cpuSeconds() - cpuStart) / 1e9);
    }
    std::printf("%s %s %s: %lld x %lld, %lld row(s), %d thread(s): %.2f GB/s "
                "of weights (%.2f per CPU second), read bandwidth %.2f GB/s, "
                "%.0f%%\n",
                kernel.c_str(), typeName.c_str(), inOut ? "[K, N]" : "[N, K]",
                (long long)N, (long long)K, (long long)xRows, threads, rate,
                cpuRate, bandwidth, 100.0 * rate / bandwidth);
    std::fflush(stdout);
  }
  return 0;
}
