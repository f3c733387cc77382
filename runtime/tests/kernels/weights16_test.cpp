//===- weights16_test.cpp - 16-bit expert weights
//----------------------------===//
//
// bf16 and f16 expert matrices (`moec compile --weight-dtype`): the rounding
// the plan writer applies, the exact widening of the streaming kernels, and
// Experts / SharedExpert steps whose 16-bit weights must give exactly what the
// same steps give with f32 weights holding the rounded values (one semantics:
// the kernels widen, then compute in f32 as before).
//
//===----------------------------------------------------------------------===//

#include "exec/tensor.h"
#include "kernels/expert_gemm.h"
#include "kernels/stream.h"
#include "kernels/tiles.h"
#include "test_util.h"

#include "format/plan_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace moert::testing {
namespace {

using fb::OpKind;

uint32_t bitsOf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

float fromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// `values` rounded to `dtype` (BF16 or F16) and widened back: the f32
/// values a 16-bit weight holds.
std::vector<float> rounded(DType dtype, const std::vector<float> &values) {
  std::vector<uint16_t> narrow(values.size());
  detail::narrowFloats(dtype, values.data(), values.size(), narrow.data());
  std::vector<float> out(values.size());
  detail::widenFloats(dtype, narrow.data(), narrow.size(), out.data());
  return out;
}

/// `values` as a 16-bit Value of `dtype`.
Value narrowed(DType dtype, std::vector<int64_t> shape,
               const std::vector<float> &values) {
  std::vector<uint16_t> narrow(values.size());
  detail::narrowFloats(dtype, values.data(), values.size(), narrow.data());
  return Value::of(dtype, std::move(shape), narrow);
}

detail::StreamWeights streamType(DType dtype) {
  return dtype == DType::BF16 ? detail::StreamWeights::BF16
                              : detail::StreamWeights::F16;
}

//===----------------------------------------------------------------------===//
// Rounding (tensor.h, used by the plan writer and Cast)
//===----------------------------------------------------------------------===//

TEST(Float16, NarrowingRoundsToNearestEven) {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and
  // 1 + 2^-7 and goes to the even 1; 1 + 3 * 2^-8 goes up to 1 + 2^-6.
  EXPECT_EQ(detail::floatToBfloat(1.0f), 0x3f80);
  EXPECT_EQ(detail::floatToBfloat(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(detail::floatToBfloat(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(detail::floatToBfloat(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(detail::floatToBfloat(-2.0f), 0xc000);
  // f16: 11 significant bits, the same rule.
  EXPECT_EQ(detail::floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(detail::floatToHalf(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(detail::floatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);
  // Subnormal halves, and values below half the smallest one.
  EXPECT_EQ(detail::floatToHalf(0x1p-24f), 0x0001);
  EXPECT_EQ(detail::floatToHalf(0x1p-25f), 0x0000);
  EXPECT_EQ(detail::floatToHalf(-0x1p-25f), 0x8000);
  EXPECT_EQ(detail::floatToHalf(3 * 0x1p-25f), 0x0002);
}

TEST(Float16, NarrowingKeepsInfinitiesAndNaNsAndOverflowsF16ToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(detail::floatToBfloat(inf), 0x7f80);
  EXPECT_EQ(detail::floatToBfloat(-inf), 0xff80);
  EXPECT_TRUE(std::isnan(detail::bfloatToFloat(detail::floatToBfloat(NAN))));
  // A NaN whose payload sits in the dropped bits stays a NaN.
  EXPECT_TRUE(std::isnan(
      detail::bfloatToFloat(detail::floatToBfloat(fromBits(0x7f800001)))));
  // The largest finite bf16 rounds up to infinity past its halfway point.
  EXPECT_EQ(detail::floatToBfloat(std::numeric_limits<float>::max()), 0x7f80);

  EXPECT_EQ(detail::floatToHalf(inf), 0x7c00);
  EXPECT_EQ(detail::floatToHalf(-inf), 0xfc00);
  EXPECT_TRUE(std::isnan(detail::halfToFloat(detail::floatToHalf(NAN))));
  EXPECT_TRUE(std::isnan(
      detail::halfToFloat(detail::floatToHalf(fromBits(0x7f800001)))));
  // 65504 is the largest half; 65520 is halfway to 65536 and overflows.
  EXPECT_EQ(detail::floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(detail::floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(detail::floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(detail::floatToHalf(-1e10f), 0xfc00);
}

TEST(Float16, EveryBitPatternRoundTrips) {
  // Widening is exact, so narrowing a widened value gives its bits back
  // (NaNs: a NaN).
  for (uint32_t h = 0; h < 0x10000; ++h) {
    auto bits = static_cast<uint16_t>(h);
    float half = detail::halfToFloat(bits),
          bfloat = detail::bfloatToFloat(bits);
    if (std::isnan(half))
      EXPECT_TRUE(std::isnan(detail::halfToFloat(detail::floatToHalf(half))));
    else
      EXPECT_EQ(detail::floatToHalf(half), bits) << h;
    if (std::isnan(bfloat))
      EXPECT_TRUE(
          std::isnan(detail::bfloatToFloat(detail::floatToBfloat(bfloat))));
    else
      EXPECT_EQ(detail::floatToBfloat(bfloat), bits) << h;
  }
}

//===----------------------------------------------------------------------===//
// Streaming kernels (kernels/stream.h)
//===----------------------------------------------------------------------===//

TEST(Stream, WideningIsExactForEveryBitPattern) {
  // The vector path (8 at a time) and the scalar tail, against tensor.h's
  // scalar conversions, bit for bit (NaNs: NaN).
  std::vector<uint16_t> all(0x10000 + 3);
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<uint16_t>(i);
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtypeName(dtype));
    std::vector<float> scalar(all.size());
    detail::widenFloats(dtype, all.data(), all.size(), scalar.data());
    // What this CPU runs (F16C where it has it), and the integer form.
    for (bool portable : {false, true}) {
      SCOPED_TRACE(portable ? "portable" : "this CPU's");
      std::vector<float> vector(all.size());
      (portable ? detail::widenWeightsPortable : detail::widenWeights)(
          all.data(), streamType(dtype), all.size(), vector.data());
      for (size_t i = 0; i < all.size(); ++i) {
        // A signalling NaN may come out quieted (F16C's conversion does).
        if (std::isnan(scalar[i]))
          ASSERT_TRUE(std::isnan(vector[i])) << "bits " << all[i];
        else
          ASSERT_EQ(bitsOf(vector[i]), bitsOf(scalar[i])) << "bits " << all[i];
      }
    }
  }
}

/// Expects `got` to equal `want` within a few ulps of the values' scale.
void expectUlps(const std::vector<float> &got, const std::vector<float> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6f * (1 + std::fabs(want[i]))) << i;
}

TEST(Stream, SixteenBitProductsEqualTheF32ProductsOfTheWidenedWeights) {
  // The same products as the f32 kernels over the widened values, in the
  // same order. K and the outputs are not multiples of the vector width:
  // the compiler may fuse the scalar tails' multiply-adds differently once a
  // conversion sits between them (an ulp or two); 5 rows make row tiles of
  // 2 and 1.
  const int64_t n = 5, K = 37, out = 29, ldx = 40;
  std::vector<float> x = randomFloats(n * ldx, 41);
  std::vector<float> w = randomFloats(out * K, 42);
  std::vector<float> bias = randomFloats(out, 43);
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtypeName(dtype));
    std::vector<uint16_t> w16(w.size());
    detail::narrowFloats(dtype, w.data(), w.size(), w16.data());
    std::vector<float> wide = rounded(dtype, w);

    // [out, K]: columns [3, 24).
    std::vector<float> got(n * out, -1), want(n * out, -1);
    detail::streamProject(x.data(), n, K, w16.data(), streamType(dtype), 3, 21,
                          nullptr, bias.data(), got.data(), out);
    detail::streamProject(x.data(), n, K, wide.data(),
                          detail::StreamWeights::F32, 3, 21, nullptr,
                          bias.data(), want.data(), out);
    expectUlps(got, want);

    // [K, out]: weight rows [4, 33) of a [K, out] matrix, rows of x with a
    // leading dimension.
    std::vector<float> part(n * out), wantPart(n * out);
    detail::streamRowRange(x.data(), n, ldx, w16.data(), streamType(dtype), out,
                           4, 33, part.data());
    detail::streamRowRange(x.data(), n, ldx, wide.data(),
                           detail::StreamWeights::F32, out, 4, 33,
                           wantPart.data());
    expectUlps(part, wantPart);
  }
}

//===----------------------------------------------------------------------===//
// Experts and SharedExpert
//===----------------------------------------------------------------------===//

/// A SwiGLU expert network with biases (or without w3: an interleaved fused
/// gate/up) and its step inputs with the matrices as `dtype`.
struct Net {
  int64_t E, H, F;
  bool inOut, separateUp;
  std::vector<float> w1, b1, w3, b2, w2;

  Net(int64_t E, int64_t H, int64_t F, bool inOut, bool separateUp)
      : E(E), H(H), F(F), inOut(inOut), separateUp(separateUp) {
    int64_t w1Out = separateUp ? F : 2 * F;
    w1 = scaled(randomFloats(E * H * w1Out, 51), H);
    b1 = randomFloats(E * w1Out, 52);
    if (separateUp)
      w3 = scaled(randomFloats(E * H * F, 53), H);
    w2 = scaled(randomFloats(E * F * H, 54), F);
    b2 = randomFloats(E * H, 55);
  }

  static std::vector<float> scaled(std::vector<float> w, int64_t fanIn) {
    for (float &v : w)
      v /= std::sqrt(static_cast<float>(fanIn));
    return w;
  }

  fb::AttrsUnion attributes() const {
    fb::FfnAttrsT a;
    a.activation = fb::Activation::SiluGlu;
    a.weight_layout = inOut ? fb::WeightLayout::InOut : fb::WeightLayout::OutIn;
    a.glu_layout =
        separateUp ? fb::GluLayout::None : fb::GluLayout::Interleaved;
    return attrs(a);
  }

  std::vector<int64_t> matrix(int64_t in, int64_t out, bool lead) const {
    return ffnMatrixShape(E, lead, inOut, in, out);
  }
  std::vector<int64_t> vector(int64_t size, bool lead) const {
    return ffnVectorShape(E, lead, size);
  }

  /// w1, b1, w3, b3, w2, b2: matrices as `dtype` (F32: the values rounded
  /// to `rounding` and kept f32), biases f32.
  std::vector<std::optional<Value>> inputs(DType dtype, DType rounding,
                                           bool lead) const {
    int64_t w1Out = separateUp ? F : 2 * F;
    auto weight = [&](const std::vector<float> &w,
                      std::vector<int64_t> shape) -> std::optional<Value> {
      if (w.empty())
        return std::nullopt;
      if (dtype == DType::F32)
        return f32(std::move(shape), rounded(rounding, w));
      return narrowed(dtype, std::move(shape), w);
    };
    return {weight(w1, matrix(H, w1Out, lead)), f32(vector(w1Out, lead), b1),
            weight(w3, matrix(H, F, lead)),     std::nullopt,
            weight(w2, matrix(F, H, lead)),     f32(vector(H, lead), b2)};
  }
};

/// Runs Experts over `rows` rows split over 4 experts (uneven: one expert
/// gets none) with matrices as `dtype`.
Value runExperts(const Net &net, int64_t rows, DType dtype, DType rounding) {
  std::vector<int64_t> offsets = {0, rows / 2, rows / 2, rows - rows / 8, rows};
  std::vector<std::optional<Value>> inputs = {
      f32({rows, net.H}, randomFloats(rows * net.H, 61)),
      i64({net.E + 1}, offsets)};
  for (auto &w : net.inputs(dtype, rounding, /*lead=*/true))
    inputs.push_back(std::move(w));
  return run1(OpKind::Experts, inputs, {DType::F32, {rows, net.H}},
              net.attributes());
}

TEST(Experts, SixteenBitWeightsEqualF32WeightsHoldingTheRoundedValues) {
  // Every kind of block: up to 16 rows per expert stream [out, K] weights
  // (column blocks) and up to 8 split [K, out] weights along K (row
  // ranges); more rows run GEMMs on widened weight blocks; 600 rows make
  // segments of 256 rows and several rounds. H = 64, F = 96 are not
  // multiples of the blocks. The widening blocks: the bf16 matmul blocks
  // round the activations too (expert_gemm_test.cpp).
  WidenedBlocks widened;
  for (bool inOut : {false, true})
    for (bool separateUp : {true, false}) {
      Net net(4, 64, 96, inOut, separateUp);
      for (DType dtype : {DType::BF16, DType::F16})
        for (int64_t rows : {1, 3, 6, 8, 20, 80, 600}) {
          SCOPED_TRACE(absl::StrCat(inOut ? "in_out " : "out_in ",
                                    separateUp ? "w3 " : "fused ",
                                    dtypeName(dtype), ", ", rows, " rows"));
          Value got = runExperts(net, rows, dtype, dtype);
          Value want = runExperts(net, rows, DType::F32, dtype);
          ASSERT_EQ(got.shape, want.shape);
          std::vector<float> a = got.as<float>(), b = want.as<float>();
          // GEMM blocks multiply the same widened values (oneDNN may
          // order the sums differently for another leading dimension: a
          // few ulps).
          for (size_t i = 0; i < a.size(); ++i)
            ASSERT_NEAR(a[i], b[i], 1e-6f * (1 + std::fabs(b[i]))) << i;
          if (rows <= std::min(detail::streamedRows(streamType(dtype), inOut),
                               detail::streamedRows(detail::StreamWeights::F32,
                                                    inOut)) &&
              (inOut || !detail::hasF32Tiles())) {
            // Streamed blocks without scalar tails, on the same kernels of
            // both types (8-lane tiles, or where the CPU has AVX-512 the
            // 16-lane rows for [K, out] weights; [out, K] f32 weights there
            // take the register tiles' order): bit for bit.
            EXPECT_EQ(a, b);
          }
        }
    }
}

TEST(SharedExpert, SixteenBitWeightsEqualF32WeightsHoldingTheRoundedValues) {
  Net net(1, 48, 40, /*inOut=*/false, /*separateUp=*/true);
  WidenedBlocks widened;
  for (DType dtype : {DType::BF16, DType::F16})
    for (int64_t rows : {1, 3, 40}) {
      SCOPED_TRACE(absl::StrCat(dtypeName(dtype), ", ", rows, " rows"));
      auto run = [&](DType type) {
        std::vector<std::optional<Value>> inputs = {
            f32({rows, net.H}, randomFloats(rows * net.H, 71))};
        for (auto &w : net.inputs(type, dtype, /*lead=*/false))
          inputs.push_back(std::move(w));
        return run1(OpKind::SharedExpert, inputs, {DType::F32, {rows, net.H}},
                    net.attributes())
            .as<float>();
      };
      std::vector<float> got = run(dtype), want = run(DType::F32);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-6f * (1 + std::fabs(want[i]))) << i;
    }
}

/// The status of an Experts step of `net` (4 experts, H = 16) over two
/// tokens with the given weight inputs: the load-time checks' verdict.
absl::Status runTwoTokens(const Net &net,
                          std::vector<std::optional<Value>> weights) {
  std::vector<std::optional<Value>> inputs = {f32({2, 16}, randomFloats(32, 1)),
                                              i64({5}, {0, 1, 2, 2, 2})};
  for (auto &w : weights)
    inputs.push_back(std::move(w));
  return runStep(OpKind::Experts, inputs, {{DType::F32, {2, 16}}},
                 net.attributes())
      .status();
}

TEST(Experts, MatricesOfDifferentDtypesAreALoadError) {
  Net net(4, 16, 8, /*inOut=*/false, /*separateUp=*/true);
  std::vector<std::optional<Value>> weights =
      net.inputs(DType::BF16, DType::BF16, /*lead=*/true);
  // w3 as f16, w1 and w2 bf16.
  weights[2] = narrowed(DType::F16, net.matrix(16, 8, true), net.w3);
  EXPECT_THAT(runTwoTokens(net, std::move(weights)),
              StatusHas("w3 is f16 but w1 is bf16; w1, w3 and w2 must have "
                        "one dtype (f32, f16, bf16 or i8)"));

  // w2 f32 with 16-bit w1 and w3.
  weights = net.inputs(DType::F16, DType::F16, /*lead=*/true);
  weights[4] = f32(net.matrix(8, 16, true), net.w2);
  EXPECT_THAT(runTwoTokens(net, std::move(weights)),
              StatusHas("w2 is f32 but w1 is f16"));
}

TEST(Experts, SixteenBitBiasesAreALoadError) {
  Net net(4, 16, 8, /*inOut=*/false, /*separateUp=*/true);
  std::vector<std::optional<Value>> weights =
      net.inputs(DType::BF16, DType::BF16, /*lead=*/true);
  weights[1] = narrowed(DType::BF16, net.vector(8, true), net.b1);
  EXPECT_THAT(runTwoTokens(net, std::move(weights)), StatusHas("bf16"));
}

//===----------------------------------------------------------------------===//
// Plan writer
//===----------------------------------------------------------------------===//

/// Writes a plan whose one weight is `pieces` of `shape` narrowed to `dtype`
/// (F32: as they are), its [E, rows, cols] matrices transposed when
/// `transpose`, cast to f32 by its only step, and returns that output.
absl::StatusOr<std::vector<float>>
castNarrowedWeight(DType dtype, const std::vector<WeightPiece> &pieces,
                   std::vector<int64_t> shape, bool transpose = false) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int32_t w = dtype == DType::F32
                  ? s.addWeightPieces("w", dtype, shape, pieces)
                  : s.addNarrowedWeightPieces("w", dtype, shape, pieces);
  if (transpose) {
    s.transposeExpertMatrices(w);
    if (shape.size() == 3)
      std::swap(shape[1], shape[2]);
  }
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  int32_t y = s.addTensor("y", DType::F32,
                          std::vector<PlanDim>(shape.begin(), shape.end()));
  s.addOutput(y);
  fb::CastAttrsT cast;
  cast.to = fb::DType::F32;
  s.addStep(OpKind::Cast, "cast", {w}, {y}, attrs(cast));
  MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.serialize());
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                         Plan::loadFromMemory(bytes.data(), bytes.size()));
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                         Session::create(*plan, SessionOptions()));
  MOERT_RETURN_IF_ERROR(session->run());
  MOERT_ASSIGN_OR_RETURN(TensorData out, session->output("y"));
  const auto *values = static_cast<const float *>(out.data);
  return std::vector<float>(values, values + count);
}

TEST(PlanWriter, NarrowedPiecesAreRoundedWhileWriting) {
  // Two pieces, the second longer than the writer's conversion buffer and
  // unaligned, and a piece of zeros in between (an expert a model pruned).
  std::vector<float> first = randomFloats(100, 81);
  std::vector<float> second = randomFloats(20000, 82);
  second[5] = NAN;
  second[6] = std::numeric_limits<float>::infinity();
  second[7] = 1e6f; // f16 overflow.
  // The bytes of `second` one byte past an aligned address.
  std::vector<uint8_t> unaligned(second.size() * 4 + 1);
  std::memcpy(unaligned.data() + 1, second.data(), second.size() * 4);
  std::vector<WeightPiece> pieces = {{first.data(), first.size() * 4},
                                     {nullptr, 32 * 4},
                                     {unaligned.data() + 1, second.size() * 4}};
  std::vector<float> all = first;
  all.resize(all.size() + 32, 0.0f);
  all.insert(all.end(), second.begin(), second.end());
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtypeName(dtype));
    absl::StatusOr<std::vector<float>> got =
        castNarrowedWeight(dtype, pieces, {static_cast<int64_t>(all.size())});
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<float> want = rounded(dtype, all);
    ASSERT_EQ(got->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i]))
        EXPECT_TRUE(std::isnan((*got)[i])) << i;
      else
        EXPECT_EQ((*got)[i], want[i]) << i;
    }
    EXPECT_EQ((*got)[100 + 32 + 7], dtype == DType::F16
                                        ? std::numeric_limits<float>::infinity()
                                        : want[100 + 32 + 7]);
  }
}

TEST(PlanWriter, NarrowingOtherThanToSixteenBitsIsAnError) {
  std::vector<float> values(8, 1.0f);
  absl::StatusOr<std::vector<float>> got =
      castNarrowedWeight(DType::I32, {{values.data(), 32}}, {8});
  EXPECT_THAT(got.status(), StatusHas("can be narrowed to f16 or bf16"));
  got = castNarrowedWeight(DType::BF16, {{values.data(), 30}}, {8});
  EXPECT_THAT(got.status(), StatusHas("which are not f32 values"));
}

TEST(PlanWriter, TransposedExpertMatricesAreWrittenPerExpert) {
  // Three experts of [5, 7] matrices in pieces that do not follow them: a
  // piece of zeros from inside expert 0 into expert 1, and an unaligned
  // piece with the rest.
  const int64_t E = 3, R = 5, C = 7;
  std::vector<float> all = randomFloats(E * R * C, 91);
  std::fill(all.begin() + 20, all.begin() + 55, 0.0f);
  std::vector<uint8_t> unaligned((all.size() - 55) * 4 + 1);
  std::memcpy(unaligned.data() + 1, all.data() + 55, unaligned.size() - 1);
  std::vector<WeightPiece> pieces = {
      {all.data(), 20 * 4},
      {nullptr, 35 * 4},
      {unaligned.data() + 1, unaligned.size() - 1}};
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtypeName(dtype));
    absl::StatusOr<std::vector<float>> got =
        castNarrowedWeight(dtype, pieces, {E, R, C}, /*transpose=*/true);
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<float> want = dtype == DType::F32 ? all : rounded(dtype, all);
    ASSERT_EQ(got->size(), want.size());
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c)
          EXPECT_EQ((*got)[(e * C + c) * R + r], want[(e * R + r) * C + c])
              << e << " " << r << " " << c;
  }
  std::vector<float> flat(8, 1.0f);
  EXPECT_THAT(
      castNarrowedWeight(DType::F32, {{flat.data(), 32}}, {8}, true).status(),
      StatusHas("weight 'w' cannot be written transposed: it is not [E, "
                "rows, cols]"));
}

} // namespace
} // namespace moert::testing
