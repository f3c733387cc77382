//===- quant_vnni_test.cpp - The int4 x int8 VNNI kernel's two forms ------===//
//
// The AVX-512 VNNI kernel of int4 weights times int8 activations
// (kernels/quant_int4_vnni.cpp) reads weights row by row for a few rows of
// activations and unpacks tiles of weight rows for more (VnniForm). Both
// forms against the f64 reference of onnxruntime's int8 product on the
// dequantized weights, and against each other and each row alone bit for
// bit: odd row counts, columns that end inside a chunk of 128 and inside a
// block, output counts that leave partial register blocks and tiles, zero
// points, f16 scales, bias, and column ranges that start inside the matrix.
//
//===----------------------------------------------------------------------===//

#include "kernels/quant_gemm.h"
#include "quant_matrices.h"
#include "test_util.h"

#include <cstring>
#include <vector>

namespace moert::testing {
namespace {

using detail::BlockQuantMatrix;
using detail::VnniForm;

struct Shape {
  int64_t rows, cols, blockSize;
};

/// x [n, w.cols] times weight rows [r0, r0 + m) by projectInt4Vnni in
/// `form`, into c [n, ldc] prefilled with -7.
std::vector<float> vnniProduct(const BlockQuantMatrix &w,
                               const std::vector<float> &x, int64_t n,
                               int64_t r0, int64_t m, const float *bias,
                               int64_t ldc, VnniForm form) {
  detail::Int8Activations xq;
  detail::quantizeActivations(x.data(), n, w, xq);
  std::vector<float> c(n * ldc, -7.0f);
  detail::projectInt4Vnni(xq, n, w, r0, m, bias, c.data(), ldc, form);
  return c;
}

/// Whether two floats have the same bits (+0 and -0 apart).
bool sameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST(QuantVnni, TilesMatchF64AndTheRowKernel) {
  if (!detail::hasQuantVnni())
    GTEST_SKIP() << "no AVX-512 VNNI";
  const Shape shapes[] = {
      {7, 1024, 32}, {5, 1000, 32}, {8, 2897, 32},  {4, 95, 32},   {2, 32, 32},
      {10, 520, 64}, {3, 200, 64},  {7, 1000, 128}, {5, 300, 256},
  };
  uint32_t seed = 2100;
  for (const Shape &s : shapes)
    for (bool zeros : {false, true})
      for (bool half : {false, true})
        for (int64_t n : {1, 2, 3, 4, 5, 7, 9, 13, 17}) {
          Quantized q(s.rows, s.cols, 4, s.blockSize, zeros, half, seed++);
          BlockQuantMatrix w = q.matrix();
          w.int8Activations = true;
          std::vector<float> x = randomFloats(n * s.cols, seed++);
          // Blocks of very different magnitudes, and an all-zero block.
          for (size_t k = 0; k < x.size(); k += 7)
            x[k] *= k % 2 ? 1e3f : 1e-3f;
          std::fill(x.begin(), x.begin() + std::min(s.blockSize, s.cols), 0.f);
          std::vector<float> bias = randomFloats(s.rows, seed++);
          const float *b = zeros ? bias.data() : nullptr;
          const int64_t r0 = s.rows / 3, m = s.rows - r0, ldc = m + 2;
          SCOPED_TRACE(::testing::Message()
                       << s.rows << "x" << s.cols << " block " << s.blockSize
                       << " zeros " << zeros << " f16 " << half << " n " << n);
          std::vector<float> tiles =
              vnniProduct(w, x, n, r0, m, b, ldc, VnniForm::Tiles);
          expectInt8Product(q, x, n, r0, m, b, tiles, ldc);
          std::vector<float> rows =
              vnniProduct(w, x, n, r0, m, b, ldc, VnniForm::Rows);
          for (int64_t i = 0; i < n; ++i) {
            // Each row as it comes out alone.
            std::vector<float> xi(x.begin() + i * s.cols,
                                  x.begin() + (i + 1) * s.cols);
            std::vector<float> one =
                vnniProduct(w, xi, 1, r0, m, b, ldc, VnniForm::Rows);
            for (int64_t j = 0; j < ldc; ++j) {
              float t = tiles[i * ldc + j];
              ASSERT_TRUE(sameBits(t, rows[i * ldc + j]))
                  << "row " << i << " output " << j << ": " << t << " vs "
                  << rows[i * ldc + j];
              ASSERT_TRUE(sameBits(t, one[j]))
                  << "row " << i << " output " << j << ": " << t << " vs "
                  << one[j] << " alone";
            }
          }
        }
}

/// Enough weight rows for several tiles of unpacked rows and a partial
/// last one, at the widths of llama_bench's Mixtral (1024 and 2816 inputs).
TEST(QuantVnni, SeveralTilesMatchTheRowKernel) {
  if (!detail::hasQuantVnni())
    GTEST_SKIP() << "no AVX-512 VNNI";
  const Shape shapes[] = {{301, 1024, 32}, {101, 2816, 32}, {67, 2880, 64}};
  uint32_t seed = 2400;
  for (const Shape &s : shapes)
    for (bool zeros : {false, true}) {
      Quantized q(s.rows, s.cols, 4, s.blockSize, zeros, true, seed++);
      BlockQuantMatrix w = q.matrix();
      w.int8Activations = true;
      const int64_t n = 11;
      std::vector<float> x = randomFloats(n * s.cols, seed++);
      SCOPED_TRACE(::testing::Message()
                   << s.rows << "x" << s.cols << " zeros " << zeros);
      std::vector<float> tiles =
          vnniProduct(w, x, n, 0, s.rows, nullptr, s.rows, VnniForm::Tiles);
      std::vector<float> rows =
          vnniProduct(w, x, n, 0, s.rows, nullptr, s.rows, VnniForm::Rows);
      for (size_t k = 0; k < tiles.size(); ++k)
        ASSERT_TRUE(sameBits(tiles[k], rows[k]))
            << "row " << k / s.rows << " output " << k % s.rows;
      expectInt8Product(q, x, n, 0, s.rows, nullptr, tiles, s.rows);
    }
}

/// More rows of x than one block of them (about 512 KiB of prepared rows:
/// 124 at 2816 columns), so that the tiles are unpacked once per block.
TEST(QuantVnni, RowBlocksMatchTheRowKernel) {
  if (!detail::hasQuantVnni())
    GTEST_SKIP() << "no AVX-512 VNNI";
  Quantized q(10, 2816, 4, 32, true, true, 2600);
  BlockQuantMatrix w = q.matrix();
  w.int8Activations = true;
  const int64_t n = 253;
  std::vector<float> x = randomFloats(n * q.cols, 2601);
  std::vector<float> tiles =
      vnniProduct(w, x, n, 0, q.rows, nullptr, q.rows, VnniForm::Tiles);
  std::vector<float> rows =
      vnniProduct(w, x, n, 0, q.rows, nullptr, q.rows, VnniForm::Rows);
  for (size_t k = 0; k < tiles.size(); ++k)
    ASSERT_TRUE(sameBits(tiles[k], rows[k]))
        << "row " << k / q.rows << " output " << k % q.rows;
  expectInt8Product(q, x, n, 0, q.rows, nullptr, tiles, q.rows);
}

/// quantProject picks the VNNI kernel at every row count (Auto), so a row's
/// product does not depend on the batch around it, prompts included.
TEST(QuantVnni, QuantProjectRowsDoNotDependOnTheBatch) {
  if (!detail::hasQuantVnni())
    GTEST_SKIP() << "no AVX-512 VNNI";
  Quantized q(37, 700, 4, 32, true, true, 2500);
  BlockQuantMatrix w = q.matrix();
  w.int8Activations = true;
  const int64_t n = 2 * detail::kQuantStreamRows + 3;
  std::vector<float> x = randomFloats(n * q.cols, 2501);
  std::vector<float> all(n * q.rows);
  detail::quantProject(x.data(), n, w, 0, q.rows, nullptr, all.data(), q.rows);
  expectInt8Product(q, x, n, 0, q.rows, nullptr, all, q.rows);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> one(q.rows);
    detail::quantProject(x.data() + i * q.cols, 1, w, 0, q.rows, nullptr,
                         one.data(), q.rows);
    for (int64_t j = 0; j < q.rows; ++j)
      ASSERT_TRUE(sameBits(all[i * q.rows + j], one[j]))
          << "row " << i << " output " << j;
  }
}

/// A few rows quantized once (their VNNI layout made then, as the Experts
/// step quantizes a segment once for all its blocks of columns) and used by
/// the products of several column ranges: each range's outputs are the
/// whole product's, and the decode form's groups of four weight rows start
/// anywhere in the matrix.
TEST(QuantVnni, ColumnBlocksShareOneQuantization) {
  if (!detail::hasQuantVnni())
    GTEST_SKIP() << "no AVX-512 VNNI";
  Quantized q(45, 2816, 4, 32, false, true, 2700);
  BlockQuantMatrix w = q.matrix();
  w.int8Activations = true;
  for (int64_t n : {1, 2, 3}) {
    std::vector<float> x = randomFloats(n * q.cols, 2701 + n);
    detail::Int8Activations xq;
    detail::quantizeActivations(x.data(), n, w, xq);
    ASSERT_EQ(xq.vnniRows.rows, n);
    std::vector<float> whole(n * q.rows), blocks(n * q.rows, -7.0f);
    detail::quantProject(x.data(), n, w, 0, q.rows, nullptr, whole.data(),
                         q.rows);
    const int64_t bounds[] = {0, 3, 10, 17, 30, 44, 45};
    for (int b = 0; b + 1 < 7; ++b)
      detail::quantProject(x.data(), n, w, bounds[b], bounds[b + 1] - bounds[b],
                           nullptr, blocks.data() + bounds[b], q.rows,
                           detail::QuantKernel::Auto, &xq);
    for (size_t k = 0; k < whole.size(); ++k)
      ASSERT_TRUE(sameBits(whole[k], blocks[k]))
          << "n " << n << " row " << k / q.rows << " output " << k % q.rows;
    expectInt8Product(q, x, n, 0, q.rows, nullptr, whole, q.rows);
  }
}

} // namespace
} // namespace moert::testing
