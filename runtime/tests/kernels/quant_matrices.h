//===- quant_matrices.h - Random block-quantized matrices -------*- C++ -*-===//
//
// A random block-quantized matrix with its storage and the formula of its
// weights, and the check of an int8-activation product against onnxruntime's
// arithmetic in f64: shared by the tests of the block-quantized kernels
// (quant_gemm_test.cpp, quant_vnni_test.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TESTS_KERNELS_QUANT_MATRICES_H
#define MOERT_TESTS_KERNELS_QUANT_MATRICES_H

#include "expert_network.h"
#include "kernels/quant_gemm.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace moert::testing {

/// A random block-quantized matrix with its storage.
struct Quantized {
  int64_t rows, cols, bits, blockSize;
  bool zeroPoints, halfScales;
  std::vector<uint8_t> codes, zeros;
  std::vector<float> scales;
  std::vector<uint16_t> halves;

  int64_t blocks() const { return (cols + blockSize - 1) / blockSize; }
  int64_t rowBytes() const { return blocks() * blockSize * bits / 8; }
  int64_t zeroBytes() const { return (blocks() * bits + 7) / 8; }

  Quantized(int64_t rows, int64_t cols, int bits, int64_t blockSize,
            bool zeroPoints, bool halfScales, uint32_t seed)
      : rows(rows), cols(cols), bits(bits), blockSize(blockSize),
        zeroPoints(zeroPoints), halfScales(halfScales) {
    std::mt19937 rng(seed);
    codes.resize(rows * rowBytes());
    for (uint8_t &b : codes)
      b = static_cast<uint8_t>(rng());
    if (zeroPoints) {
      zeros.resize(rows * zeroBytes());
      for (uint8_t &b : zeros)
        b = static_cast<uint8_t>(rng());
    }
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    scales.resize(rows * blocks());
    for (float &s : scales) {
      s = scale(rng);
      if (halfScales) {
        // Scales exactly representable in f16 (10 mantissa bits).
        int e;
        float m = std::frexp(s, &e);
        s = std::ldexp(std::round(m * 2048.0f) / 2048.0f, e);
      }
    }
    for (float s : scales) {
      uint32_t bitsOf;
      std::memcpy(&bitsOf, &s, 4);
      int exponent = int((bitsOf >> 23) & 0xFF) - 127 + 15;
      uint16_t h =
          static_cast<uint16_t>((exponent << 10) | ((bitsOf >> 13) & 0x3FF));
      halves.push_back(h);
    }
  }

  detail::BlockQuantMatrix matrix() const {
    detail::BlockQuantMatrix w;
    w.rows = rows;
    w.cols = cols;
    w.bits = int(bits);
    w.blockSize = blockSize;
    w.codes = codes.data();
    w.scales = halfScales ? static_cast<const void *>(halves.data())
                          : static_cast<const void *>(scales.data());
    w.halfScales = halfScales;
    w.zeroPoints = zeroPoints ? zeros.data() : nullptr;
    return w;
  }

  /// code - zero of W[r, c], written out independently of the kernels.
  int level(int64_t r, int64_t c) const {
    int64_t b = c / blockSize, i = c % blockSize;
    const uint8_t *block =
        codes.data() + r * rowBytes() + b * blockSize * bits / 8;
    int code = bits == 8 ? block[i] : (block[i / 2] >> (4 * (i % 2))) & 15;
    int zero = 1 << (bits - 1);
    if (zeroPoints) {
      const uint8_t *z = zeros.data() + r * zeroBytes();
      zero = bits == 8 ? z[b] : (z[b / 2] >> (4 * (b % 2))) & 15;
    }
    return code - zero;
  }
  /// W[r, c] by the formula.
  float weight(int64_t r, int64_t c) const {
    return float(level(r, c)) * scales[r * blocks() + c / blockSize];
  }
};

/// Checks c [n, m] (leading dimension ldc) = x W[r0 : r0 + m]^T (+ bias)
/// against onnxruntime's int8 product: x's rows quantized per block
/// (quantizeLikeOnnxruntime), per block the exact integer sum of activation
/// codes times code - zero, scaled by the f32 product of the two scales, summed
/// in f64; within a few ulps per block of the sum of the terms' magnitudes (f32
/// accumulation of partial sums), or per column where `perColumn` (sgemm on the
/// activations' codes times their scales). The f32 product differs by about 1%
/// of the output (the activations' rounding).
inline void expectInt8Product(const Quantized &q, const std::vector<float> &x,
                              int64_t n, int64_t r0, int64_t m,
                              const float *bias, const std::vector<float> &c,
                              int64_t ldc, bool perColumn = false) {
  std::vector<int> codes;
  std::vector<float> scales;
  for (int64_t i = 0; i < n; ++i) {
    quantizeLikeOnnxruntime(x.data() + i * q.cols, q.cols, q.blockSize, codes,
                            scales);
    for (int64_t j = 0; j < m; ++j) {
      int64_t r = r0 + j;
      double sum = bias ? bias[r] : 0.0;
      double magnitude = std::fabs(sum);
      for (int64_t b = 0; b < q.blocks(); ++b) {
        int64_t dot = 0, size = 0;
        for (int64_t k = b * q.blockSize;
             k < std::min(q.cols, (b + 1) * q.blockSize); ++k) {
          dot += int64_t(codes[k]) * q.level(r, k);
          size += std::abs(int64_t(codes[k]) * q.level(r, k));
        }
        float scale = scales[b] * q.scales[r * q.blocks() + b];
        sum += double(dot) * scale;
        // Kernels may round partial sums of the block (lanes) apart.
        magnitude += double(size) * std::fabs(scale);
      }
      double terms = double(perColumn ? q.cols : q.blocks()) + 8;
      double bound = 4.0 * terms * 0x1p-24 * magnitude + 1e-30;
      ASSERT_NEAR(c[i * ldc + j], sum, bound) << "row " << i << " output " << j;
    }
  }
}

} // namespace moert::testing

#endif // MOERT_TESTS_KERNELS_QUANT_MATRICES_H
