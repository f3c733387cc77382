//===- moe-quant-bench.cpp - Block-quantized decode products --------------===//
//
//   moe-quant-bench ROWS COLS [THREADS [BITS [BLOCK [ZERO_POINTS [X_ROWS
//                   [KERNEL [COPIES]]]]]]]
//
// Times quantProject (kernels/quant_gemm.h) on a random ROWS x COLS matrix
// of BITS-bit codes in blocks of BLOCK with f32 scales (and packed zero
// points when ZERO_POINTS is 1), times X_ROWS rows of f32 activations (1:
// decode), on THREADS threads split as the MatMulNBits step splits them,
// with KERNEL (auto, portable, avx2 or avx512) where the kernels take one;
// vnni-rows and vnni-tiles name the two forms of the AVX-512 VNNI kernel
// (with +int8: VnniForm in kernels/quant_gemm.h). KERNEL+int8 quantizes the
// activations to int8 per block as accuracy_level 4 asks
// (BlockQuantMatrix::int8Activations). Enough copies of the matrix are cycled
// through that every product reads its weights from memory, not from cache (or
// COPIES of them: 1 measures the kernel's speed from cache). Each round
// measures the read bandwidth (a max-reduce over 512 MiB on the same threads)
// and then the product; the best of each over the rounds is printed, with the
// product's rate of weight bytes (codes, scales, zero points) as a share of the
// bandwidth, and the rates in multiply-adds and per CPU second (the rate with
// the cores to itself, which other processes' load does not dilute).
//
//===----------------------------------------------------------------------===//

#include "../read_bandwidth.h"
#include "kernels/quant_gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include <vector>

using moert::detail::BlockQuantMatrix;
using moert::detail::ThreadPool;

using moec::bench::cpuSeconds;
using moec::bench::readBandwidth;
using moec::bench::seconds;

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s ROWS COLS [THREADS [BITS [BLOCK "
                 "[ZERO_POINTS [X_ROWS [KERNEL [COPIES]]]]]]]\n",
                 argv[0]);
    return 2;
  }
  const int64_t rows = std::atoll(argv[1]), cols = std::atoll(argv[2]);
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const int bits = argc > 4 ? std::atoi(argv[4]) : 4;
  const int64_t blockSize = argc > 5 ? std::atoll(argv[5]) : 32;
  const bool zeroPoints = argc > 6 && std::atoi(argv[6]) != 0;
  const int64_t xRows = argc > 7 ? std::atoll(argv[7]) : 1;
  std::string name = argc > 8 ? argv[8] : "auto";
  const std::string label = name;
  const bool int8 = name.size() > 5 && name.substr(name.size() - 5) == "+int8";
  if (int8)
    name.resize(name.size() - 5);
  using moert::detail::QuantKernel;
  using moert::detail::VnniForm;
  const QuantKernel kernel = name == "portable" ? QuantKernel::Portable
                             : name == "avx2"   ? QuantKernel::Avx2
                             : name == "avx512" ? QuantKernel::Avx512
                                                : QuantKernel::Auto;
  // vnni-rows, vnni-tiles: the VNNI kernel's two forms (int8 only).
  const VnniForm form = name == "vnni-rows"    ? VnniForm::Rows
                        : name == "vnni-tiles" ? VnniForm::Tiles
                                               : VnniForm::Auto;
  if (form != VnniForm::Auto && (!int8 || !moert::detail::hasQuantVnni())) {
    std::fprintf(stderr, "%s needs +int8 and a CPU with AVX-512 VNNI\n",
                 name.c_str());
    return 2;
  }

  BlockQuantMatrix shape =
      BlockQuantMatrix::ofShape(rows, cols, bits, blockSize);
  const int64_t codeBytes = rows * shape.rowBytes();
  const int64_t scaleCount = rows * shape.blocks();
  const int64_t zeroBytes = zeroPoints ? rows * shape.zeroPointRowBytes() : 0;
  const double matrixBytes =
      double(codeBytes) + 4.0 * double(scaleCount) + double(zeroBytes);
  const int copies =
      argc > 9
          ? std::max(1, std::atoi(argv[9]))
          : std::max(2, static_cast<int>(double(256 << 20) / matrixBytes) + 1);

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), act(-1.f, 1.f);
  std::vector<std::vector<uint8_t>> codes(copies), zeros(copies);
  std::vector<std::vector<float>> scales(copies);
  std::vector<BlockQuantMatrix> matrices;
  for (int c = 0; c < copies; ++c) {
    // Random bytes eight at a time (the codes are most of the setup).
    codes[c].resize(codeBytes);
    for (int64_t i = 0; i < codeBytes; i += 8) {
      uint64_t bits = (uint64_t(rng()) << 32) | rng();
      std::memcpy(codes[c].data() + i, &bits,
                  size_t(std::min<int64_t>(8, codeBytes - i)));
    }
    scales[c].resize(scaleCount);
    for (float &s : scales[c])
      s = scale(rng);
    zeros[c].resize(zeroBytes);
    for (uint8_t &b : zeros[c])
      b = static_cast<uint8_t>(rng());
    BlockQuantMatrix w = shape;
    w.int8Activations = int8;
    w.codes = codes[c].data();
    w.scales = scales[c].data();
    w.zeroPoints = zeroPoints ? zeros[c].data() : nullptr;
    matrices.push_back(w);
  }
  std::vector<float> x(xRows * cols), y(xRows * rows);
  for (float &v : x)
    v = act(rng);
  std::vector<float> words((512 << 20) / 4, 1.0f);

  ThreadPool pool(threads);
  // As the MatMulNBits step shares out weight rows.
  const int64_t grain =
      std::max<int64_t>(16, (rows + threads * 4 - 1) / (threads * 4));
  double bandwidth = 0, product = 0, perCpu = 0;
  for (int round = 0; round < 5; ++round) {
    bandwidth = std::max(bandwidth, readBandwidth(pool, words));
    const int reps = std::max(copies * 2, 64);
    double start = seconds(), cpuStart = cpuSeconds();
    for (int rep = 0; rep < reps; ++rep) {
      const BlockQuantMatrix &w = matrices[rep % copies];
      pool.parallelFor(rows, grain, [&](int64_t j0, int64_t j1) {
        if (form == VnniForm::Auto)
          return moert::detail::quantProject(x.data(), xRows, w, j0, j1 - j0,
                                             nullptr, y.data() + j0, rows,
                                             kernel);
        thread_local moert::detail::Int8Activations xq;
        moert::detail::quantizeActivations(x.data(), xRows, w, xq);
        moert::detail::projectInt4Vnni(xq, xRows, w, j0, j1 - j0, nullptr,
                                       y.data() + j0, rows, form);
      });
    }
    product = std::max(product, matrixBytes * reps / (seconds() - start) / 1e9);
    perCpu = std::max(perCpu, matrixBytes * reps * threads /
                                  (cpuSeconds() - cpuStart) / 1e9);
  }
  // Multiply-adds per second: weights per byte times rows of x; per CPU
  // second (THREADS times the process's CPU time), which the load of other
  // processes does not dilute.
  const double macs = double(rows * cols) / matrixBytes * xRows;
  std::printf("%s: %lld x %lld int%d block %lld%s, %lld row(s), %d thread(s): "
              "%.2f GB/s of weights (%.1f G multiply-adds/s; per CPU second "
              "%.2f GB/s, %.1f G), read bandwidth %.2f GB/s, %.0f%%\n",
              label.c_str(), (long long)rows, (long long)cols, bits,
              (long long)blockSize, zeroPoints ? " zero points" : "",
              (long long)xRows, threads, product, product * macs, perCpu,
              perCpu * macs, bandwidth, 100.0 * product / bandwidth);
  return 0;
}
