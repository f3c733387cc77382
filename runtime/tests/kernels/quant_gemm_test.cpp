//===- quant_gemm_test.cpp - Block-quantized products against f64 ---------===//
//
// The int4/int8 kernels (kernels/quant_gemm.h) and the MatMulNBits and
// block-quantized Experts steps against an f64 reference on the weights
// dequantized by the formula, on random shapes with ragged K tails and odd N.
//
//===----------------------------------------------------------------------===//

#include "expert_network.h"
#include "format/plan_writer.h"
#include "kernels/quant_gemm.h"
#include "plan_bytes.h"
#include "quant_matrices.h"
#include "test_util.h"

#include "absl/strings/str_cat.h"

#include <cmath>
#include <random>

namespace moert::testing {
namespace {

using detail::BlockQuantMatrix;
using detail::QuantKernel;

/// Checks c [n, m] (leading dimension ldc) = x W[r0 : r0 + m]^T (+ bias)
/// against f64 sums of the dequantized weights, within a bound of f32
/// accumulation: a few ulps of the sum of |x w| per term, or with `spread`,
/// of the sum of |x| s (|q - z| + spread): the int4 kernels sum x q and
/// z sum(x) apart and split each code byte's two products into terms up to
/// 16 times a code (kernels/quant_int4.cpp), whose roundings scale with
/// |x| s (q + z) rather than with |x w|.
void expectProduct(const Quantized &q, const std::vector<float> &x, int64_t n,
                   int64_t r0, int64_t m, const float *bias,
                   const std::vector<float> &c, int64_t ldc,
                   double spread = 0.0) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double sum = bias ? bias[r0 + j] : 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < q.cols; ++k) {
        double term = double(x[i * q.cols + k]) * q.weight(r0 + j, k);
        sum += term;
        magnitude += std::fabs(term) +
                     spread * std::fabs(x[i * q.cols + k]) *
                         q.scales[(r0 + j) * q.blocks() + k / q.blockSize];
      }
      double bound = 4.0 * double(q.cols + 8) * 0x1p-24 * magnitude + 1e-30;
      ASSERT_NEAR(c[i * ldc + j], sum, bound) << "row " << i << " output " << j;
    }
}

struct Case {
  int64_t rows, cols;
  int bits;
  int64_t blockSize;
};

const Case kShapes[] = {
    {7, 64, 4, 32},  {33, 100, 4, 32}, {5, 31, 4, 32},   {19, 288, 4, 32},
    {3, 96, 4, 64},  {9, 130, 4, 128}, {11, 48, 4, 16},  {1, 2880, 4, 32},
    {13, 72, 8, 32}, {6, 37, 8, 16},   {17, 200, 8, 64}, {4, 33, 8, 8},
};

TEST(QuantGemm, DequantizeRowsIsTheFormula) {
  uint32_t seed = 1;
  for (const Case &s : kShapes)
    for (bool zeros : {false, true}) {
      Quantized q(s.rows, s.cols, s.bits, s.blockSize, zeros, false, seed++);
      std::vector<float> out(s.rows * s.cols);
      detail::dequantizeRows(q.matrix(), 0, s.rows, out.data());
      for (int64_t r = 0; r < s.rows; ++r)
        for (int64_t c = 0; c < s.cols; ++c)
          ASSERT_EQ(out[r * s.cols + c], q.weight(r, c))
              << s.rows << "x" << s.cols << " bits " << s.bits << " at " << r
              << ", " << c;
    }
}

/// The kernels that quantProject can run here.
std::vector<QuantKernel> quantKernels() {
  std::vector<QuantKernel> kernels = {QuantKernel::Portable, QuantKernel::Auto};
  if (detail::hasQuantAvx2())
    kernels.push_back(QuantKernel::Avx2);
  if (detail::hasQuantAvx512())
    kernels.push_back(QuantKernel::Avx512);
  return kernels;
}

TEST(QuantGemm, ProductsMatchF64) {
  std::vector<QuantKernel> kernels = quantKernels();
  uint32_t seed = 100;
  for (const Case &s : kShapes)
    for (bool zeros : {false, true})
      for (bool half : {false, true})
        for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 21}) {
          Quantized q(s.rows, s.cols, s.bits, s.blockSize, zeros, half, seed++);
          std::vector<float> x = randomFloats(n * s.cols, seed++);
          std::vector<float> bias = randomFloats(s.rows, seed++);
          // A block of rows from the middle, written at a column offset.
          int64_t r0 = s.rows / 3, m = s.rows - r0, ldc = m + 3;
          for (QuantKernel kernel : kernels) {
            SCOPED_TRACE(::testing::Message()
                         << s.rows << "x" << s.cols << " bits " << s.bits
                         << " block " << s.blockSize << " zeros " << zeros
                         << " f16 " << half << " n " << n << " kernel "
                         << int(kernel));
            std::vector<float> c(n * ldc, -7.0f);
            detail::quantProject(x.data(), n, q.matrix(), r0, m,
                                 zeros ? bias.data() : nullptr, c.data(), ldc,
                                 kernel);
            expectProduct(q, x, n, r0, m, zeros ? bias.data() : nullptr, c,
                          ldc);
            // Columns past m are not written.
            for (int64_t i = 0; i < n; ++i)
              for (int64_t j = m; j < ldc; ++j)
                ASSERT_EQ(c[i * ldc + j], -7.0f);
          }
        }
}

/// The int4 f32 kernels (kernels/quant_int4.cpp: the zero points summed
/// apart, the activations laid out per code byte) on the shapes they take,
/// 4-bit codes in blocks of a multiple of 32, and 8-bit codes through the
/// same calls: columns not a multiple of the block, blocks with and without
/// a multiple of eight per row (the zero points' share is summed eight
/// blocks at a time), every count of activation rows up to the streamed
/// limit (rows of x go four at a time), any zero points, f16 scales, and
/// activations of mixed magnitudes (large and tiny, where the kernels'
/// rounding follows |x| s (q + z), see expectProduct), and more than one
/// tile of weight rows with single rows left over (quant_int4_avx512.cpp).
TEST(QuantGemm, Int4KernelsMatchF64) {
  const Case shapes[] = {
      {5, 2880, 4, 32}, {3, 2897, 4, 32}, {7, 95, 4, 32},    {2, 32, 4, 32},
      {4, 17, 4, 32},   {6, 520, 4, 64},  {3, 1000, 4, 128}, {5, 300, 4, 96},
      {3, 263, 4, 32},  {4, 2897, 8, 32}, {3, 263, 8, 16},   {71, 300, 4, 32},
  };
  uint32_t seed = 900;
  for (const Case &s : shapes)
    for (bool zeros : {false, true})
      for (bool half : {false, true})
        for (int64_t n = 1; n <= detail::kQuantStreamRows; ++n) {
          Quantized q(s.rows, s.cols, s.bits, s.blockSize, zeros, half, seed++);
          std::vector<float> x = randomFloats(n * s.cols, seed++);
          // Some activations far from the others' magnitude.
          for (size_t k = 0; k < x.size(); k += 7)
            x[k] *= k % 2 ? 1e4f : 1e-4f;
          std::vector<float> bias = randomFloats(s.rows, seed++);
          for (QuantKernel kernel : quantKernels()) {
            SCOPED_TRACE(::testing::Message()
                         << s.rows << "x" << s.cols << " bits " << s.bits
                         << " block " << s.blockSize << " zeros " << zeros
                         << " f16 " << half << " n " << n << " kernel "
                         << int(kernel));
            const int64_t ldc = s.rows + 1;
            std::vector<float> c(n * ldc, -7.0f);
            detail::quantProject(x.data(), n, q.matrix(), 0, s.rows,
                                 half ? bias.data() : nullptr, c.data(), ldc,
                                 kernel);
            expectProduct(q, x, n, 0, s.rows, half ? bias.data() : nullptr, c,
                          ldc, 32.0);
            for (int64_t i = 0; i < n; ++i)
              ASSERT_EQ(c[i * ldc + s.rows], -7.0f);
          }
        }
}

/// Up to the streamed limit, each row of x gets the same products whether
/// alone or with other rows (the int4 kernels compute every row alike), so
/// that a sequence decodes the same solo and in a batch.
TEST(QuantGemm, Int4RowsDoNotDependOnTheirNeighbours) {
  const Case shapes[] = {{9, 2880, 4, 32}, {5, 263, 4, 64}, {38, 300, 4, 32}};
  uint32_t seed = 1300;
  for (const Case &s : shapes)
    for (bool zeros : {false, true})
      for (bool int8 : {false, true}) {
        Quantized q(s.rows, s.cols, s.bits, s.blockSize, zeros, false, seed++);
        BlockQuantMatrix w = q.matrix();
        w.int8Activations = int8;
        const int64_t n = detail::kQuantStreamRows;
        std::vector<float> x = randomFloats(n * s.cols, seed++);
        for (QuantKernel kernel : quantKernels()) {
          if (kernel == QuantKernel::Portable)
            continue;
          SCOPED_TRACE(::testing::Message()
                       << s.rows << "x" << s.cols << " zeros " << zeros
                       << " int8 " << int8 << " kernel " << int(kernel));
          std::vector<float> all(n * s.rows), one(s.rows);
          detail::quantProject(x.data(), n, w, 0, s.rows, nullptr, all.data(),
                               s.rows, kernel);
          for (int64_t i = 0; i < n; ++i) {
            detail::quantProject(x.data() + i * s.cols, 1, w, 0, s.rows,
                                 nullptr, one.data(), s.rows, kernel);
            for (int64_t j = 0; j < s.rows; ++j)
              ASSERT_EQ(all[i * s.rows + j], one[j])
                  << "row " << i << " output " << j;
          }
        }
      }
}

TEST(QuantGemm, Int8ActivationsAreOnnxruntimes) {
  uint32_t seed = 300;
  for (const Case &s : kShapes)
    for (int64_t n : {1, 3}) {
      Quantized q(s.rows, s.cols, s.bits, s.blockSize, false, false, seed++);
      std::vector<float> x = randomFloats(n * s.cols, seed++);
      // An all-zero block: scale 0, codes 0.
      std::fill(x.begin(), x.begin() + std::min(s.blockSize, s.cols), 0.0f);
      // 4-bit blocks of a multiple of 32: the even columns of each 32 first.
      bool nibbleOrder = s.bits == 4 && s.blockSize % 32 == 0;
      for (QuantKernel kernel : quantKernels()) {
        SCOPED_TRACE(::testing::Message()
                     << s.cols << " columns, bits " << s.bits << " block "
                     << s.blockSize << " kernel " << int(kernel));
        detail::Int8Activations xq;
        detail::quantizeActivations(x.data(), n, q.matrix(), xq, kernel);
        ASSERT_EQ(xq.rows, n);
        ASSERT_EQ(xq.blocks, q.blocks());
        ASSERT_EQ(xq.nibbleOrder, nibbleOrder);
        ASSERT_EQ(int64_t(xq.codes.size()), n * q.blocks() * s.blockSize);
        std::vector<int> codes;
        std::vector<float> scales;
        for (int64_t i = 0; i < n; ++i) {
          quantizeLikeOnnxruntime(x.data() + i * s.cols, s.cols, s.blockSize,
                                  codes, scales);
          const int8_t *row = xq.codes.data() + i * xq.rowCodes();
          for (int64_t b = 0; b < q.blocks(); ++b)
            ASSERT_EQ(xq.scales[i * q.blocks() + b], scales[b])
                << "block " << b;
          for (int64_t c = 0; c < xq.rowCodes(); ++c) {
            int64_t at =
                nibbleOrder ? c / 32 * 32 + c % 2 * 16 + c % 32 / 2 : c;
            ASSERT_EQ(row[at], c < s.cols ? codes[c] : 0) << "column " << c;
          }
        }
      }
    }
}

TEST(QuantGemm, Int8ProductsMatchF64) {
  uint32_t seed = 700;
  for (const Case &s : kShapes)
    for (bool zeros : {false, true})
      for (bool half : {false, true})
        for (int64_t n : {1, 2, 3, 4, 5, 9, 21}) {
          Quantized q(s.rows, s.cols, s.bits, s.blockSize, zeros, half, seed++);
          BlockQuantMatrix w = q.matrix();
          w.int8Activations = true;
          std::vector<float> x = randomFloats(n * s.cols, seed++);
          std::vector<float> bias = randomFloats(s.rows, seed++);
          int64_t r0 = s.rows / 3, m = s.rows - r0, ldc = m + 3;
          detail::Int8Activations given;
          detail::quantizeActivations(x.data(), n, w, given);
          for (QuantKernel kernel : quantKernels())
            for (bool quantized : {false, true}) {
              SCOPED_TRACE(::testing::Message()
                           << s.rows << "x" << s.cols << " bits " << s.bits
                           << " block " << s.blockSize << " zeros " << zeros
                           << " f16 " << half << " n " << n << " kernel "
                           << int(kernel) << " quantized " << quantized);
              std::vector<float> c(n * ldc, -7.0f);
              detail::quantProject(x.data(), n, w, r0, m,
                                   zeros ? bias.data() : nullptr, c.data(), ldc,
                                   kernel, quantized ? &given : nullptr);
              expectInt8Product(
                  q, x, n, r0, m, zeros ? bias.data() : nullptr, c, ldc,
                  kernel == QuantKernel::Auto && n > detail::kQuantStreamRows);
              for (int64_t i = 0; i < n; ++i)
                for (int64_t j = m; j < ldc; ++j)
                  ASSERT_EQ(c[i * ldc + j], -7.0f);
            }
        }
}

/// The AVX-512 VNNI kernel (kernels/quant_int4_vnni.cpp) on the shapes it
/// takes: blocks of 32 and 64 (four and two blocks per 128 columns, their
/// scales and zero points permuted to the lanes) and multiples of 128,
/// columns ending inside a chunk of 128 and inside a block, every row count
/// up to the streamed limit (rows go four at a time). Where the CPU has no
/// VNNI, Avx512 runs the AVX2 kernel and this checks that.
TEST(QuantGemm, Int4VnniMatchesF64) {
  const Case shapes[] = {
      {5, 2880, 4, 32}, {3, 2897, 4, 32}, {7, 95, 4, 32},    {2, 32, 4, 32},
      {6, 520, 4, 64},  {4, 200, 4, 64},  {3, 1000, 4, 128}, {3, 300, 4, 256},
  };
  uint32_t seed = 1500;
  for (const Case &s : shapes)
    for (bool zeros : {false, true})
      for (bool half : {false, true})
        for (int64_t n = 1; n <= detail::kQuantStreamRows; ++n) {
          Quantized q(s.rows, s.cols, s.bits, s.blockSize, zeros, half, seed++);
          BlockQuantMatrix w = q.matrix();
          w.int8Activations = true;
          std::vector<float> x = randomFloats(n * s.cols, seed++);
          for (size_t k = 0; k < x.size(); k += 7)
            x[k] *= k % 2 ? 1e3f : 1e-3f;
          std::vector<float> bias = randomFloats(s.rows, seed++);
          for (QuantKernel kernel : {QuantKernel::Auto, QuantKernel::Avx512}) {
            if (kernel == QuantKernel::Avx512 && !detail::hasQuantAvx512())
              continue;
            SCOPED_TRACE(::testing::Message()
                         << s.rows << "x" << s.cols << " block " << s.blockSize
                         << " zeros " << zeros << " f16 " << half << " n " << n
                         << " kernel " << int(kernel));
            const int64_t ldc = s.rows + 1;
            std::vector<float> c(n * ldc, -7.0f);
            detail::quantProject(x.data(), n, w, 0, s.rows,
                                 zeros ? bias.data() : nullptr, c.data(), ldc,
                                 kernel);
            expectInt8Product(q, x, n, 0, s.rows, zeros ? bias.data() : nullptr,
                              c, ldc);
            for (int64_t i = 0; i < n; ++i)
              ASSERT_EQ(c[i * ldc + s.rows], -7.0f);
          }
        }
}

/// A plan of one MatMulNBits step over weights of q on a [1, rows, k] input
/// (with int8 activations when `int8`).
absl::StatusOr<std::vector<uint8_t>> matMulNBitsPlan(const Quantized &q,
                                                     int64_t rows, int64_t k,
                                                     bool int8 = false) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int32_t in =
      s.addTensor("a", DType::F32, {PlanDim(1), PlanDim(rows), PlanDim(k)});
  s.addInput(in);
  int32_t codes = s.addWeight("codes", DType::I8, {q.rows, q.rowBytes()},
                              q.codes.data(), q.codes.size());
  int32_t scales = q.halfScales
                       ? s.addWeight("scales", DType::F16, {q.rows, q.blocks()},
                                     q.halves.data(), q.halves.size() * 2)
                       : s.addWeight("scales", DType::F32, {q.rows, q.blocks()},
                                     q.scales.data(), q.scales.size() * 4);
  std::vector<int32_t> inputs = {in, codes, scales};
  if (q.zeroPoints)
    inputs.push_back(s.addWeight("zeros", DType::I8, {q.rows, q.zeroBytes()},
                                 q.zeros.data(), q.zeros.size()));
  int32_t out = s.addTensor("y", DType::F32,
                            {PlanDim(1), PlanDim(rows), PlanDim(q.rows)});
  s.addOutput(out);
  fb::BlockQuantAttrsT table;
  table.bits = int32_t(q.bits);
  table.block_size = q.blockSize;
  table.k = k;
  table.int8_activations = int8;
  fb::AttrsUnion attrs;
  attrs.Set(std::move(table));
  s.addStep(fb::OpKind::MatMulNBits, "mm", inputs, {out}, std::move(attrs));
  return writer.serialize();
}

/// Runs matMulNBitsPlan on `a`.
absl::StatusOr<std::vector<float>>
runMatMulNBits(const Quantized &q, const std::vector<float> &a, int64_t rows,
               int threads, int64_t k, bool int8 = false) {
  MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                         matMulNBitsPlan(q, rows, k, int8));
  std::unique_ptr<Plan> plan;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                         openSession(bytes, threads, plan));
  MOERT_RETURN_IF_ERROR(
      session->setInput("a", DType::F32, {1, rows, k}, a.data(), a.size() * 4));
  MOERT_RETURN_IF_ERROR(session->run());
  MOERT_ASSIGN_OR_RETURN(Value y, outputValue(*session, "y"));
  return y.as<float>();
}

TEST(MatMulNBits, StepMatchesF64) {
  uint32_t seed = 500;
  for (bool int8 : {false, true})
    for (const Case &s : {Case{37, 100, 4, 32}, Case{64, 256, 4, 32},
                          Case{21, 72, 8, 16}, Case{9, 2880, 4, 128}})
      for (int64_t rows : {1, 3, 40})
        for (int threads : {1, 3}) {
          SCOPED_TRACE(::testing::Message()
                       << s.rows << "x" << s.cols << " rows " << rows
                       << " threads " << threads << " int8 " << int8);
          Quantized q(s.rows, s.cols, s.bits, s.blockSize, rows != 3,
                      rows == 40, seed++);
          std::vector<float> a = randomFloats(rows * s.cols, seed++);
          absl::StatusOr<std::vector<float>> y =
              runMatMulNBits(q, a, rows, threads, s.cols, int8);
          ASSERT_TRUE(y.ok()) << y.status();
          if (int8)
            expectInt8Product(q, a, rows, 0, s.rows, nullptr, *y, s.rows,
                              rows > detail::kQuantStreamRows);
          else
            expectProduct(q, a, rows, 0, s.rows, nullptr, *y, s.rows);
        }
}

TEST(MatMulNBits, Int8ActivationsNeedFormat112) {
  Quantized q(8, 64, 4, 32, false, false, 3);
  absl::StatusOr<std::vector<uint8_t>> bytes =
      matMulNBitsPlan(q, 1, 64, /*int8=*/true);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(),
            detail::kFormatVersionMinorInt8Activations);
  std::vector<uint8_t> older =
      rewrite(*bytes, [](detail::FileHeader &header, auto &) {
        header.versionMinor = detail::kFormatVersionMinorBlockQuant;
      });
  EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
              StatusHas("step 0 has int8 activations, which needs format "
                        "1.12, but the file is version 1.11"));
}

TEST(MatMulNBits, RefusesMismatchedWeights) {
  Quantized q(8, 64, 4, 32, true, false, 9);
  std::vector<float> a = randomFloats(64, 1);
  // K = 100 needs 4 blocks of 16 bytes a row; the codes have 2.
  absl::StatusOr<std::vector<float>> y = runMatMulNBits(q, a, 1, 1, 100);
  EXPECT_THAT(y.status(), StatusHas("codes is declared [8, 32]; expected "
                                    "[8, 64]"));
}

TEST(MatMulNBits, NeedsFormat111) {
  Quantized q(8, 64, 4, 32, false, false, 3);
  absl::StatusOr<std::vector<uint8_t>> bytes = matMulNBitsPlan(q, 1, 64);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), detail::kFormatVersionMinorBlockQuant);
  std::vector<uint8_t> older =
      rewrite(*bytes, [](detail::FileHeader &header, auto &) {
        header.versionMinor = detail::kFormatVersionMinorKeptNormalize;
      });
  EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
              StatusHas("step 0 has block-quantized weights, which needs "
                        "format 1.11, but the file is version 1.10"));
}

/// A matrix [E, out, in] of `net` (out_in) quantized in blocks along `in`
/// with zero points: its codes, scales and zero points as Experts' inputs,
/// and the matrix replaced by its dequantized values (the reference's).
struct PackedMatrix {
  std::vector<uint8_t> codes, zeros;
  std::vector<float> scales;
  std::vector<int64_t> codeShape, scaleShape, zeroShape;
};
PackedMatrix pack(std::vector<float> &w, int64_t E, int64_t out, int64_t in,
                  int bits, int64_t blockSize, bool zeroPoints) {
  Quantized shape(1, in, bits, blockSize, false, false, 0);
  int64_t blocks = shape.blocks(), rowBytes = shape.rowBytes(),
          zeroBytes = shape.zeroBytes();
  int maxCode = (1 << bits) - 1;
  PackedMatrix p;
  p.codes.assign(E * out * rowBytes, 0);
  p.scales.assign(E * out * blocks, 0.0f);
  if (zeroPoints)
    p.zeros.assign(E * out * zeroBytes, 0);
  for (int64_t r = 0; r < E * out; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t begin = b * blockSize, end = std::min(in, begin + blockSize);
      float lo = 0, hi = 0;
      for (int64_t c = begin; c < end; ++c) {
        lo = std::min(lo, w[r * in + c]);
        hi = std::max(hi, w[r * in + c]);
      }
      float scale = (hi - lo) / float(maxCode);
      int zero = zeroPoints ? int(std::lround(-lo / scale)) : 1 << (bits - 1);
      zero = std::clamp(zero, 0, maxCode);
      p.scales[r * blocks + b] = scale;
      if (zeroPoints)
        p.zeros[r * zeroBytes + b * bits / 8] |=
            uint8_t(zero << (bits == 4 ? 4 * (b % 2) : 0));
      for (int64_t c = begin; c < end; ++c) {
        int code = int(std::lround(w[r * in + c] / scale)) + zero;
        code = std::clamp(code, 0, maxCode);
        int64_t i = c - begin;
        uint8_t *block =
            p.codes.data() + r * rowBytes + b * blockSize * bits / 8;
        if (bits == 8)
          block[i] = uint8_t(code);
        else
          block[i / 2] |= uint8_t(code << (4 * (i % 2)));
        w[r * in + c] = float(code - zero) * scale;
      }
    }
  p.codeShape = {E, out, rowBytes};
  p.scaleShape = {E, out, blocks};
  p.zeroShape = {E, out, zeroBytes};
  return p;
}

TEST(BlockQuantExperts, MatchF64OnTheDequantizedWeights) {
  uint32_t seed = 900;
  for (int bits : {4, 8})
    for (bool zeroPoints : {false, true})
      for (bool int8 : {false, true})
        for (Network net : everyNetwork()) {
          if (net.inOut)
            continue;
          SCOPED_TRACE(::testing::Message()
                       << "bits " << bits << " zeros " << zeroPoints
                       << " int8 activations " << int8 << " activation "
                       << int(net.activation));
          // Int8 activations: the reference quantizes each matrix's input.
          net.int8Block = int8 ? 32 : 0;
          // H = 80 with blocks of 32: a ragged last block of w1 and w3.
          net.init(/*experts=*/4, /*hidden=*/80, /*inter=*/48, seed++);
          PackedMatrix packed[3];
          std::vector<float> *matrices[3] = {&net.w1, &net.w3, &net.w2};
          const int64_t outs[3] = {net.w1Out(), net.F, net.H},
                        ins[3] = {net.H, net.H, net.F};
          for (int m = 0; m < 3; ++m)
            if (!matrices[m]->empty())
              packed[m] = pack(*matrices[m], net.E, outs[m], ins[m], bits, 32,
                               zeroPoints);
          for (std::vector<int64_t> rows :
               {std::vector<int64_t>{1, 0, 2, 1}, {3, 20, 0, 9}}) {
            std::vector<int64_t> offsets = {0};
            for (int64_t n : rows)
              offsets.push_back(offsets.back() + n);
            int64_t N = offsets.back();
            std::vector<float> x = randomFloats(N * net.H, seed++);
            PlanWriter writer;
            ScheduleBuilder &s = writer.schedule();
            ExpertsSignature sig = addExpertsSignature(s, N, net.H, net.E);
            std::vector<int32_t> inputs = {sig.tokens, sig.offsets};
            auto weight = [&](const char *name, DType dtype,
                              const std::vector<int64_t> &shape,
                              const void *data, size_t bytes) {
              return s.addWeight(name, dtype, shape, data, bytes);
            };
            std::vector<float> *biases[3] = {&net.b1, &net.b3, &net.b2};
            for (int m : {0, 1, 2}) {
              // Slots in order w1, b1, w3, b3, w2, b2.
              const PackedMatrix &p = packed[m];
              inputs.push_back(p.codes.empty()
                                   ? -1
                                   : weight("w", DType::I8, p.codeShape,
                                            p.codes.data(), p.codes.size()));
              const std::vector<float> &b = *biases[m];
              inputs.push_back(b.empty()
                                   ? -1
                                   : weight("b", DType::F32,
                                            {net.E, int64_t(b.size()) / net.E},
                                            b.data(), b.size() * 4));
            }
            for (int m : {0, 1, 2})
              inputs.push_back(packed[m].codes.empty()
                                   ? -1
                                   : weight("s", DType::F32,
                                            packed[m].scaleShape,
                                            packed[m].scales.data(),
                                            packed[m].scales.size() * 4));
            for (int m : {0, 1, 2})
              inputs.push_back(!zeroPoints || packed[m].codes.empty()
                                   ? -1
                                   : weight("z", DType::I8, packed[m].zeroShape,
                                            packed[m].zeros.data(),
                                            packed[m].zeros.size()));
            fb::FfnAttrsT attrs;
            attrs.activation = net.activation;
            attrs.weight_layout = fb::WeightLayout::OutIn;
            attrs.glu_layout = net.glu;
            attrs.alpha = net.alpha;
            attrs.beta = net.beta;
            attrs.limit = net.limit;
            attrs.block_quant = std::make_unique<fb::BlockQuantAttrsT>();
            attrs.block_quant->bits = bits;
            attrs.block_quant->block_size = 32;
            attrs.block_quant->int8_activations = int8;
            fb::AttrsUnion u;
            u.Set(std::move(attrs));
            s.addStep(fb::OpKind::Experts, "experts", inputs, {sig.out},
                      std::move(u));
            absl::StatusOr<Value> y = runExpertsPlan(writer, net.H, x, offsets);
            ASSERT_TRUE(y.ok()) << y.status();
            std::vector<float> expected(N * net.H);
            for (int64_t e = 0; e < net.E; ++e)
              for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
                std::vector<double> want = net.apply(e, x.data() + r * net.H);
                std::copy(want.begin(), want.end(),
                          expected.begin() + r * net.H);
              }
            expectNear(*y, {N, net.H}, expected, 1e-4f);
          }
        }
}

/// The load status of a one-step Experts plan over a 4-bit network (H 64,
/// F 32, E 2, fused SwiGLU) with `edit` applied to its inputs and attributes.
absl::Status loadEditedExperts(
    const std::function<void(std::vector<int32_t> &, ScheduleBuilder &,
                             fb::FfnAttrsT &)> &edit) {
  Network net;
  net.separateUp = false;
  net.glu = fb::GluLayout::Interleaved;
  net.init(/*experts=*/2, /*hidden=*/64, /*inter=*/32, 77);
  PackedMatrix w1 = pack(net.w1, net.E, net.w1Out(), net.H, 4, 32, true);
  PackedMatrix w2 = pack(net.w2, net.E, net.H, net.F, 4, 32, true);
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  ExpertsSignature sig = addExpertsSignature(s, 4, net.H, net.E);
  auto add = [&](const std::vector<int64_t> &shape, DType dtype,
                 const void *data, size_t bytes) {
    return s.addWeight("w", dtype, shape, data, bytes);
  };
  std::vector<int32_t> inputs = {
      sig.tokens,
      sig.offsets,
      add(w1.codeShape, DType::I8, w1.codes.data(), w1.codes.size()),
      -1,
      -1,
      -1,
      add(w2.codeShape, DType::I8, w2.codes.data(), w2.codes.size()),
      -1,
      add(w1.scaleShape, DType::F32, w1.scales.data(), w1.scales.size() * 4),
      -1,
      add(w2.scaleShape, DType::F32, w2.scales.data(), w2.scales.size() * 4),
      add(w1.zeroShape, DType::I8, w1.zeros.data(), w1.zeros.size()),
      -1,
      add(w2.zeroShape, DType::I8, w2.zeros.data(), w2.zeros.size())};
  fb::FfnAttrsT attrs;
  attrs.activation = net.activation;
  attrs.weight_layout = fb::WeightLayout::OutIn;
  attrs.glu_layout = net.glu;
  attrs.block_quant = std::make_unique<fb::BlockQuantAttrsT>();
  attrs.block_quant->bits = 4;
  attrs.block_quant->block_size = 32;
  edit(inputs, s, attrs);
  fb::AttrsUnion u;
  u.Set(std::move(attrs));
  s.addStep(fb::OpKind::Experts, "experts", inputs, {sig.out}, std::move(u));
  MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.serialize());
  return Plan::loadFromMemory(bytes.data(), bytes.size()).status();
}

TEST(BlockQuantExperts, LoaderChecksEveryInput) {
  using Inputs = std::vector<int32_t>;
  // The unedited plan loads.
  EXPECT_TRUE(
      loadEditedExperts([](Inputs &, ScheduleBuilder &, fb::FfnAttrsT &) {
      }).ok());
  EXPECT_THAT(
      loadEditedExperts([](Inputs &, ScheduleBuilder &, fb::FfnAttrsT &a) {
        a.weight_layout = fb::WeightLayout::InOut;
      }),
      StatusHas("block-quantized matrices need the out_in layout"));
  EXPECT_THAT(loadEditedExperts([](Inputs &in, ScheduleBuilder &,
                                   fb::FfnAttrsT &) { in[8] = -1; }),
              StatusHas("s1 is missing: w1 is block-quantized and needs its "
                        "block scales"));
  EXPECT_THAT(
      loadEditedExperts([](Inputs &, ScheduleBuilder &, fb::FfnAttrsT &a) {
        a.block_quant->block_size = 64;
      }),
      // The codes' bytes match (one block of 64 or two of 32); the scales
      // do not.
      StatusHas("s1 is declared [2, 64, 2]; expected [2, 64, 1] for 64 rows "
                "of 64 4-bit weights in blocks of 64"));
  EXPECT_THAT(
      loadEditedExperts([](Inputs &, ScheduleBuilder &, fb::FfnAttrsT &a) {
        a.block_quant->bits = 3;
      }),
      StatusHas("bits must be 4 or 8, got 3"));
  // Zero points without block_quant, and block_quant's codes as int8
  // per-channel matrices.
  EXPECT_THAT(
      loadEditedExperts([](Inputs &, ScheduleBuilder &, fb::FfnAttrsT &a) {
        a.block_quant.reset();
      }),
      StatusHas("zero points (input 11) need block-quantized "
                "matrices (block_quant)"));
}

} // namespace
} // namespace moert::testing
