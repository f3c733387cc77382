//===- expert_gemm_test.cpp - oneDNN matmul blocks of the experts ---------===//
//
// matmulBlock (kernels/expert_gemm.h) against an f64 reference, for f32,
// bf16 and int8 weights in both layouts, row counts across the buckets
// (padded rows), column offsets, biases and int8 scales; the bf16 rounding
// of the activations; and Experts steps on the bf16 path against the same
// steps on the widening fallback. A CPU without AVX512-BF16 skips the bf16
// cases with the reason (the fallback is then what the other tests run); one
// where oneDNN has no f32 brgemm skips the f32 case. The streaming products
// of 1 to 9 rows (kernels/stream.h) and the register tiles of 1 to 33 rows
// (kernels/tiles.h) against the same reference, each row equal to its
// product alone.
//
//===----------------------------------------------------------------------===//

#include "exec/tensor.h"
#include "kernels/expert_gemm.h"
#include "kernels/stream.h"
#include "kernels/tiles.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <utility>

namespace moert::testing {
namespace {

using detail::StreamWeights;

float bf16Value(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

/// x rounded to bf16 and back.
std::vector<float> roundedToBf16(const std::vector<float> &x) {
  std::vector<uint16_t> bits(x.size());
  detail::roundToBf16(x.data(), x.size(), bits.data());
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = bf16Value(bits[i]);
  return out;
}

TEST(ExpertGemm, RoundsToNearestEven) {
  auto of = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  std::vector<float> in = {1.0f,
                           of(0x3f808000), // halfway, even below: down
                           of(0x3f818000), // halfway, odd below: up
                           of(0x3f808001), // above halfway: up
                           -of(0x3f818000),
                           std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           of(0x7f800001)}; // a signalling NaN stays NaN
  std::vector<uint16_t> out(in.size());
  detail::roundToBf16(in.data(), in.size(), out.data());
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[1], 0x3f80);
  EXPECT_EQ(out[2], 0x3f82);
  EXPECT_EQ(out[3], 0x3f81);
  EXPECT_EQ(out[4], 0xbf82);
  EXPECT_EQ(out[5], 0x7f80);
  EXPECT_TRUE(std::isnan(bf16Value(out[6])));
  EXPECT_TRUE(std::isnan(bf16Value(out[7])));
}

/// One case of a block: the weights of `type` ([out, K] or [K, out]) as
/// bytes, and as the f32 values they hold.
struct Weights {
  std::vector<uint8_t> bytes;
  std::vector<float> values; // In the same layout.
};

Weights makeWeights(StreamWeights type, int64_t count, uint32_t seed) {
  std::vector<float> v = randomFloats(count, seed);
  Weights w;
  if (type == StreamWeights::F32) {
    w.bytes.resize(count * 4);
    std::memcpy(w.bytes.data(), v.data(), count * 4);
    w.values = v;
  } else if (type == StreamWeights::BF16) {
    std::vector<uint16_t> bits(count);
    detail::roundToBf16(v.data(), count, bits.data());
    w.bytes.resize(count * 2);
    std::memcpy(w.bytes.data(), bits.data(), count * 2);
    for (uint16_t b : bits)
      w.values.push_back(bf16Value(b));
  } else if (type == StreamWeights::F16) {
    w.bytes.resize(count * 2);
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h = detail::floatToHalf(v[i]);
      std::memcpy(&w.bytes[i * 2], &h, 2);
      w.values.push_back(detail::halfToFloat(h));
    }
  } else {
    w.bytes.resize(count);
    for (int64_t i = 0; i < count; ++i) {
      auto q = static_cast<int8_t>(std::lround(v[i] * 127));
      std::memcpy(&w.bytes[i], &q, 1);
      w.values.push_back(q);
    }
  }
  return w;
}

const char *typeName(StreamWeights type) {
  return type == StreamWeights::F32    ? "f32"
         : type == StreamWeights::BF16 ? "bf16"
         : type == StreamWeights::F16  ? "f16"
                                       : "int8";
}

/// Whether oneDNN runs f32 blocks on this CPU (brgemm kernels, AVX-512):
/// matmulBlock declines them elsewhere.
bool hasF32Blocks() {
  std::vector<float> x(4 * 8, 1.0f), c(4 * 8), w(8 * 8, 1.0f);
  return detail::matmulBlock(x.data(), 4, 8, w.data(), StreamWeights::F32, 8,
                             false, 0, 8, nullptr, nullptr, c.data(), 8);
}

/// Checks matmulBlock over every row count, layout, bias and scale for
/// weights of `type` against the f64 product of the values the kernel
/// multiplies: the activations rounded to bf16 (f32: as they are).
void checkBlocks(StreamWeights type) {
  const int64_t K = 200, out = 300, c0 = 37, m = 150, ldc = 170;
  for (bool inOut : {false, true}) {
    Weights w = makeWeights(type, K * out, inOut ? 5 : 6);
    std::vector<float> bias = randomFloats(out, 7),
                       scale = randomFloats(out, 8);
    for (float &s : scale)
      s = 0.01f + std::fabs(s) * 0.01f;
    for (int64_t n : {1, 3, 16, 17, 64, 250}) {
      SCOPED_TRACE(
          absl::StrCat(typeName(type), inOut ? " in_out " : " out_in ", n));
      std::vector<float> x = randomFloats(n * K, 9 + n);
      std::vector<float> used =
          type == StreamWeights::F32 ? x : roundedToBf16(x);
      for (bool withBias : {false, true}) {
        const float *s = type == StreamWeights::I8 ? scale.data() : nullptr;
        const float *b = withBias ? bias.data() : nullptr;
        std::vector<float> c(n * ldc, -7.0f);
        bool ran = detail::matmulBlock(x.data(), n, K, w.bytes.data(), type,
                                       out, inOut, c0, m, s, b, c.data(), ldc);
        // oneDNN 2.6's f32 matmul of a strided [K, out] block is not brgemm
        // but its sgemm: declined, with nothing written (the caller runs
        // sgemm). Every other block runs.
        if (!ran && type == StreamWeights::F32 && inOut) {
          ASSERT_EQ(c, std::vector<float>(n * ldc, -7.0f));
          continue;
        }
        ASSERT_TRUE(ran);
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t j = 0; j < m; ++j) {
            double sum = 0, magnitude = 0;
            for (int64_t k = 0; k < K; ++k) {
              double wv = inOut ? w.values[k * out + c0 + j]
                                : w.values[(c0 + j) * K + k];
              sum += double(used[r * K + k]) * wv;
              magnitude += std::fabs(double(used[r * K + k]) * wv);
            }
            double sc = s ? s[c0 + j] : 1.0, bv = b ? b[c0 + j] : 0.0;
            double want = sum * sc + bv;
            // f32 accumulation over K terms.
            double bound = 1e-5 * (magnitude * sc + std::fabs(bv) + 1e-3);
            ASSERT_NEAR(c[r * ldc + j], want, bound) << r << ", " << j;
          }
          // Columns outside the block are untouched.
          for (int64_t j = m; j < ldc; ++j)
            ASSERT_EQ(c[r * ldc + j], -7.0f);
        }
      }
    }
  }
}

TEST(ExpertGemm, Bf16BlocksMatchTheReferenceOfBf16Activations) {
  if (!detail::hasBf16Matmul())
    GTEST_SKIP() << "this CPU has no AVX512-BF16: bf16 blocks widen to f32 "
                    "(the fallback the other tests run)";
  checkBlocks(StreamWeights::BF16);
}

TEST(ExpertGemm, F32BlocksMatchTheReference) {
  if (!hasF32Blocks())
    GTEST_SKIP() << "oneDNN has no f32 brgemm matmul on this CPU: f32 blocks "
                    "run sgemm (Experts.SgemmBlocksWhereOneDnnHasNoF32Brgemm)";
  checkBlocks(StreamWeights::F32);
}

TEST(ExpertGemm, Int8BlocksMatchTheReferenceOfBf16Activations) {
  if (!detail::hasBf16Matmul())
    GTEST_SKIP() << "this CPU has no AVX512-BF16: int8 blocks widen to f32 "
                    "(the fallback the other tests run)";
  checkBlocks(StreamWeights::I8);
}

TEST(ExpertGemm, FallbackIsChosenWhereBf16IsOff) {
  // f32 and f16 never take the bf16 path; with bf16 off (as on a CPU
  // without it) neither do bf16 and int8, and matmulBlock declines them, as
  // it declines f32 with f32 blocks off (as on a CPU without brgemm).
  EXPECT_EQ(detail::blockGemmFor(StreamWeights::F16), detail::BlockGemm::Widen);
  EXPECT_EQ(detail::blockGemmFor(StreamWeights::F32), detail::BlockGemm::Widen);
  {
    SgemmBlocks sgemm;
    EXPECT_FALSE(hasF32Blocks());
    std::vector<float> x(4 * 8, 1.0f), c(4 * 8, -1.0f), w(8 * 8, 1.0f);
    EXPECT_FALSE(detail::matmulBlock(x.data(), 4, 8, w.data(),
                                     StreamWeights::F32, 8, false, 0, 8,
                                     nullptr, nullptr, c.data(), 8));
    EXPECT_EQ(c, std::vector<float>(4 * 8, -1.0f));
  }
  {
    WidenedBlocks widened;
    EXPECT_FALSE(detail::hasBf16Matmul());
    EXPECT_EQ(detail::blockGemmFor(StreamWeights::BF16),
              detail::BlockGemm::Widen);
    EXPECT_EQ(detail::blockGemmFor(StreamWeights::I8),
              detail::BlockGemm::Widen);
    std::vector<float> x(4 * 8, 1.0f), c(4 * 8, -1.0f);
    std::vector<uint16_t> w(8 * 8, 0x3f80);
    EXPECT_FALSE(detail::matmulBlock(x.data(), 4, 8, w.data(),
                                     StreamWeights::BF16, 8, false, 0, 8,
                                     nullptr, nullptr, c.data(), 8));
    EXPECT_EQ(c, std::vector<float>(4 * 8, -1.0f));
  }
  EXPECT_EQ(detail::blockGemmFor(StreamWeights::BF16),
            detail::hasBf16Matmul() ? detail::BlockGemm::Bf16
                                    : detail::BlockGemm::Widen);
}

TEST(ExpertGemm, ConcurrentBlocksOfOneShapeAgree) {
  // The pool's threads run blocks of one cached primitive at once, each
  // with its own scratchpad and buffers.
  if (!detail::hasBf16Matmul())
    GTEST_SKIP() << "this CPU has no AVX512-BF16: no bf16 matmul blocks";
  const int64_t n = 48, K = 256, out = 256;
  StreamWeights type = StreamWeights::BF16;
  Weights w = makeWeights(type, K * out, 11);
  std::vector<float> x = randomFloats(n * K, 12);
  std::vector<float> want(n * out);
  ASSERT_TRUE(detail::matmulBlock(x.data(), n, K, w.bytes.data(), type, out,
                                  false, 0, out, nullptr, nullptr, want.data(),
                                  out));
  std::vector<std::vector<float>> got(4, std::vector<float>(n * out));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i)
        detail::matmulBlock(x.data(), n, K, w.bytes.data(), type, out, false, 0,
                            out, nullptr, nullptr, got[t].data(), out);
    });
  for (std::thread &t : threads)
    t.join();
  for (const auto &g : got)
    EXPECT_EQ(g, want);
}

TEST(Avx512Stream, ProductsMatchTheReferenceAndTheEightLaneKernels) {
  // Every weight type, 1 to 5 rows (pairs and a single row), K = 70 and 134
  // (four 16-lane chunks at a time, single chunks and a scalar tail),
  // columns [5, 5 + 19), with and without bias and int8 scales.
  if (!detail::hasAvx512Streams())
    GTEST_SKIP() << "this CPU has no AVX-512: streamProject runs the 8-lane "
                    "kernels (the other tests)";
  const int64_t out = 40, c0 = 5, m = 19, ldc = 30;
  for (int64_t K : {70, 134})
    for (StreamWeights type : {StreamWeights::F32, StreamWeights::BF16,
                               StreamWeights::F16, StreamWeights::I8}) {
      Weights w = makeWeights(type, out * K, 21);
      std::vector<float> bias = randomFloats(out, 22),
                         scale = randomFloats(out, 23);
      const float *s = type == StreamWeights::I8 ? scale.data() : nullptr;
      for (int64_t n = 1; n <= 5; ++n)
        for (const float *b : {static_cast<const float *>(nullptr),
                               static_cast<const float *>(bias.data())}) {
          SCOPED_TRACE(
              absl::StrCat(typeName(type), " K ", K, " ", n, b ? " bias" : ""));
          std::vector<float> x = randomFloats(n * K, 24 + n);
          std::vector<float> got(n * ldc, -3.0f), lanes8(n * ldc, -3.0f);
          detail::streamProjectAvx512(x.data(), n, K, w.bytes.data(), type, c0,
                                      m, s, b, got.data(), ldc);
          detail::streamProject8Lanes(x.data(), n, K, w.bytes.data(), type, c0,
                                      m, s, b, lanes8.data(), ldc);
          for (int64_t r = 0; r < n; ++r)
            for (int64_t j = 0; j < ldc; ++j) {
              float g = got[r * ldc + j];
              if (j >= m) {
                ASSERT_EQ(g, -3.0f);
                continue;
              }
              double sum = 0, magnitude = 0;
              for (int64_t k = 0; k < K; ++k) {
                double term = double(x[r * K + k]) * w.values[(c0 + j) * K + k];
                sum += term;
                magnitude += std::fabs(term);
              }
              double sc = s ? s[c0 + j] : 1.0, bv = b ? b[c0 + j] : 0.0;
              double bound = 1e-6 * (magnitude * std::fabs(sc) + std::fabs(bv));
              ASSERT_NEAR(g, sum * sc + bv, bound) << r << ", " << j;
              ASSERT_NEAR(g, lanes8[r * ldc + j], 2 * bound) << r << ", " << j;
            }
        }
    }
}

/// The f64 sum of x[0, :] times weight row j of w ([out, K] values) and the
/// sum of the terms' magnitudes.
std::pair<double, double> rowProduct(const float *x, const Weights &w,
                                     int64_t j, int64_t K) {
  double sum = 0, magnitude = 0;
  for (int64_t k = 0; k < K; ++k) {
    double term = double(x[k]) * w.values[j * K + k];
    sum += term;
    magnitude += std::fabs(term);
  }
  return {sum, magnitude};
}

/// Checks product(x [n, K], w, type, columns [c0, c0 + m), scale s, bias
/// b) into c [n, ldc]: each row equal, bit for bit, to the product of that
/// row alone (`rowsAlone`), or else to the product of x with its rows rotated
/// by one (each row's sums then do not depend on the rows beside it);
/// columns past m untouched; each output within 1e-6 of its terms'
/// magnitude of the f64 product of `used` (x as the kernel multiplies it)
/// and w's values.
template <typename Product>
void checkRowsAlone(Product product, const std::vector<float> &x,
                    const std::vector<float> &used, int64_t n, int64_t K,
                    const Weights &w, StreamWeights type, int64_t c0, int64_t m,
                    const float *s, const float *b, int64_t ldc,
                    bool rowsAlone = true) {
  std::vector<float> got(n * ldc, -3.0f);
  product(x.data(), n, K, w.bytes.data(), type, c0, m, s, b, got.data(), ldc);
  std::vector<float> rotated(x.size()), others(n * ldc, -3.0f);
  std::rotate_copy(x.begin(), x.begin() + K, x.end(), rotated.begin());
  if (!rowsAlone)
    product(rotated.data(), n, K, w.bytes.data(), type, c0, m, s, b,
            others.data(), ldc);
  for (int64_t r = 0; r < n; ++r) {
    std::vector<float> alone(ldc, -3.0f);
    if (rowsAlone)
      product(x.data() + r * K, 1, K, w.bytes.data(), type, c0, m, s, b,
              alone.data(), ldc);
    else
      std::copy_n(others.data() + (r + n - 1) % n * ldc, ldc, alone.data());
    for (int64_t j = 0; j < ldc; ++j) {
      float g = got[r * ldc + j];
      ASSERT_EQ(g, alone[j]) << r << ", " << j;
      if (j >= m) {
        ASSERT_EQ(g, -3.0f);
        continue;
      }
      auto [sum, magnitude] = rowProduct(used.data() + r * K, w, c0 + j, K);
      double sc = s ? s[c0 + j] : 1.0, bv = b ? b[c0 + j] : 0.0;
      double bound = 1e-6 * (magnitude * std::fabs(sc) + std::fabs(bv));
      ASSERT_NEAR(g, sum * sc + bv, bound) << r << ", " << j;
    }
  }
}

TEST(Stream, OneToNineRowsMatchTheReferenceAndEachRowAlone) {
  // streamProject as the experts' column blocks and the Linear step run it,
  // every weight type, 1 to 9 rows (9: two slabs of 8), K = 70 (a scalar
  // tail), 1000 (past 6 rows x does not fit in L1 beside a weight row: the
  // blocked path) and 3001 (blocked from 3 rows), columns [5, 5 + 19) (not
  // a multiple of the 16 rows of a block), with and without bias and int8
  // scales. Each row equals the product of that row alone, bit for bit.
  const int64_t out = 40, c0 = 5, m = 19, ldc = 30;
  for (int64_t K : {70, 1000, 3001})
    for (StreamWeights type : {StreamWeights::F32, StreamWeights::BF16,
                               StreamWeights::F16, StreamWeights::I8}) {
      Weights w = makeWeights(type, out * K, 31);
      std::vector<float> bias = randomFloats(out, 32),
                         scale = randomFloats(out, 33);
      const float *s = type == StreamWeights::I8 ? scale.data() : nullptr;
      for (int64_t n = 1; n <= 9; ++n) {
        const float *b = n % 2 ? bias.data() : nullptr;
        SCOPED_TRACE(
            absl::StrCat(typeName(type), " K ", K, " ", n, b ? " bias" : ""));
        std::vector<float> x = randomFloats(n * K, 34 + n);
        checkRowsAlone(detail::streamProject, x, x, n, K, w, type, c0, m, s, b,
                       ldc);
      }
    }
}

TEST(Tiles, ProductsMatchTheReferenceAndEachRowAlone) {
  // tileProject as the experts' column blocks run it between the streaming
  // and the GEMM blocks: f32, bf16 and int8 weights, K = 70 (less than one
  // step: a masked tail), 1000 (a tail after full steps) and 3001 (three
  // chunks of K), 150 columns from column 5 (several panels of weight rows,
  // an odd last tile), 1 to 33 rows (tiles of 4 or 8 rows and the rest; for
  // f32 below 32 KiB of x one weight row at a time), with and without bias
  // and int8 scales, against the f64 product of the values the kernel
  // multiplies (x as it is for f32, rounded to bf16 otherwise). Each row
  // equals the product of that row alone, bit for bit, and columns outside
  // the block are untouched; f32 rows also equal streamProject's product of
  // the row alone (one order of summation for every count of rows) up to
  // kInvariantRowsF32 rows. Past it (wide f32 tiles), each row equals the
  // same row among the others rotated.
  const int64_t out = 160, c0 = 5, m = 150, ldc = 170;
  int ran = 0;
  EXPECT_EQ(detail::tiledRows(StreamWeights::F16), 0);
  for (StreamWeights type :
       {StreamWeights::F32, StreamWeights::BF16, StreamWeights::I8}) {
    if (detail::tiledRows(type) == 0)
      continue;
    ++ran;
    const bool f32 = type == StreamWeights::F32;
    for (int64_t K : {70, 1000, 3001}) {
      Weights w = makeWeights(type, out * K, 41);
      std::vector<float> bias = randomFloats(out, 42),
                         scale = randomFloats(out, 43);
      const float *s = type == StreamWeights::I8 ? scale.data() : nullptr;
      for (int64_t n : {1, 2, 5, 8, 9, 16, 17, 33}) {
        const float *b = n % 2 ? bias.data() : nullptr;
        SCOPED_TRACE(
            absl::StrCat(typeName(type), " K ", K, " ", n, b ? " bias" : ""));
        std::vector<float> x = randomFloats(n * K, 44 + n);
        const bool wide = f32 && n > detail::kInvariantRowsF32;
        checkRowsAlone(detail::tileProject, x, f32 ? x : roundedToBf16(x), n, K,
                       w, type, c0, m, s, b, ldc, /*rowsAlone=*/!wide);
        if (!f32 || wide)
          continue;
        std::vector<float> tiled(n * ldc), streamed(ldc);
        detail::tileProject(x.data(), n, K, w.bytes.data(), type, c0, m, s, b,
                            tiled.data(), ldc);
        for (int64_t r = 0; r < n; ++r) {
          detail::streamProject(x.data() + r * K, 1, K, w.bytes.data(), type,
                                c0, m, s, b, streamed.data(), ldc);
          for (int64_t j = 0; j < m; ++j)
            ASSERT_EQ(tiled[r * ldc + j], streamed[j]) << r << ", " << j;
        }
      }
    }
  }
  if (ran == 0)
    GTEST_SKIP() << "this CPU has no AVX-512: no register tiles (the "
                    "experts' blocks run oneDNN's GEMMs or sgemm)";
}

TEST(Stream, RowRangesOfOneToEightRowsMatchTheReference) {
  // streamRowRange as the experts' split blocks run it ([K, out] weights),
  // every weight type, 1 to 8 rows of x with a leading dimension past K,
  // weight rows [5, 66) (neither end a multiple of 4 or 8), 37 and 300
  // outputs (vector columns and a scalar tail). Each row equals the
  // partial product of that row alone, bit for bit.
  const int64_t K = 70, k0 = 5, k1 = 66, ldx = K + 3;
  for (int64_t out : {37, 300})
    for (StreamWeights type : {StreamWeights::F32, StreamWeights::BF16,
                               StreamWeights::F16, StreamWeights::I8}) {
      Weights w = makeWeights(type, K * out, 41);
      for (int64_t n = 1; n <= 8; ++n) {
        SCOPED_TRACE(absl::StrCat(typeName(type), " out ", out, " ", n));
        std::vector<float> x = randomFloats(n * ldx, 42 + n);
        std::vector<float> got(n * out, -3.0f);
        detail::streamRowRange(x.data(), n, ldx, w.bytes.data(), type, out, k0,
                               k1, got.data());
        for (int64_t r = 0; r < n; ++r) {
          std::vector<float> alone(out, -3.0f);
          detail::streamRowRange(x.data() + r * ldx, 1, ldx, w.bytes.data(),
                                 type, out, k0, k1, alone.data());
          for (int64_t j = 0; j < out; ++j) {
            float g = got[r * out + j];
            ASSERT_EQ(g, alone[j]) << r << ", " << j;
            double sum = 0, magnitude = 0;
            for (int64_t k = k0; k < k1; ++k) {
              double term = double(x[r * ldx + k]) * w.values[k * out + j];
              sum += term;
              magnitude += std::fabs(term);
            }
            ASSERT_NEAR(g, sum, 1e-6 * magnitude) << r << ", " << j;
          }
        }
      }
    }
}

TEST(ExpertGemm, DecodingStreamsOnEveryCpu) {
  // One row reads each weight once at memory speed: it always streams, and
  // more rows than the crossover run GEMMs.
  for (StreamWeights type : {StreamWeights::F32, StreamWeights::BF16,
                             StreamWeights::F16, StreamWeights::I8})
    for (bool inOut : {false, true}) {
      int64_t rows = detail::streamedRows(type, inOut);
      EXPECT_GE(rows, 1);
      EXPECT_LE(rows, 16);
    }
}

} // namespace
} // namespace moert::testing
