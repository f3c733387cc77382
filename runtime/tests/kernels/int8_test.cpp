//===- int8_test.cpp - int8 expert weights --------------------------------===//
//
// int8 expert matrices (`moec compile --weight-dtype int8`): the streaming
// kernels' int8 products, Experts steps with int8 weights against the f64
// reference of the dequantized network (every activation, layout and kind of
// block), the plan writer's per-channel quantization, and the load-time
// checks of int8 weights and their scales.
//
//===----------------------------------------------------------------------===//

#include "expert_network.h"
#include "kernels/expert_gemm.h"
#include "kernels/stream.h"

#include "format/plan_writer.h"

#include "absl/strings/str_cat.h"
#include "plan_bytes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

namespace moert::testing {
namespace {

using fb::OpKind;

/// `count` int8 values over the whole range, seeded.
std::vector<int8_t> randomInt8(size_t count, uint32_t seed) {
  std::vector<float> r = randomFloats(count, seed);
  std::vector<int8_t> q(count);
  for (size_t i = 0; i < count; ++i)
    q[i] = static_cast<int8_t>(std::lround(r[i] * 127));
  return q;
}

//===----------------------------------------------------------------------===//
// Streaming kernels
//===----------------------------------------------------------------------===//

TEST(Int8Stream, ProductsAreTheF32ProductsOfTheValuesScaledPerColumn) {
  // K and the outputs are not multiples of the vector width; 5 rows make
  // row tiles of 2 and 1. The int8 values convert exactly, so the sums are
  // the f32 kernels' over the same values; the scale multiplies each sum.
  const int64_t n = 5, K = 37, out = 29, ldx = 40;
  std::vector<float> x = randomFloats(n * ldx, 41);
  std::vector<int8_t> q = randomInt8(out * K, 42);
  std::vector<float> asFloats(q.begin(), q.end());
  std::vector<float> scale = randomFloats(out, 43),
                     bias = randomFloats(out, 44);

  // [out, K]: columns [3, 24), with and without a bias.
  for (const float *b : {static_cast<const float *>(bias.data()),
                         static_cast<const float *>(nullptr)}) {
    std::vector<float> got(n * out, -1), unscaled(n * out, -1);
    detail::streamProject(x.data(), n, K, q.data(), detail::StreamWeights::I8,
                          3, 21, scale.data(), b, got.data(), out);
    detail::streamProject(x.data(), n, K, asFloats.data(),
                          detail::StreamWeights::F32, 3, 21, nullptr, nullptr,
                          unscaled.data(), out);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < 21; ++j) {
        float want = unscaled[r * out + j] * scale[3 + j] + (b ? b[3 + j] : 0);
        EXPECT_NEAR(got[r * out + j], want, 1e-5f * (1 + std::fabs(want)));
      }
  }

  // [K, out]: weight rows [4, 33), unscaled partial products.
  std::vector<float> part(n * out), wantPart(n * out);
  detail::streamRowRange(x.data(), n, ldx, q.data(), detail::StreamWeights::I8,
                         out, 4, 33, part.data());
  detail::streamRowRange(x.data(), n, ldx, asFloats.data(),
                         detail::StreamWeights::F32, out, 4, 33,
                         wantPart.data());
  for (size_t i = 0; i < part.size(); ++i)
    EXPECT_NEAR(part[i], wantPart[i], 1e-5f * (1 + std::fabs(wantPart[i])));

  // Widening for the GEMM blocks: exact, every value.
  std::vector<int8_t> all(256 + 3);
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<int8_t>(i);
  // What this CPU runs (AVX2 where it has it), and the portable form.
  for (auto widen : {detail::widenWeights, detail::widenWeightsPortable}) {
    std::vector<float> wide(all.size());
    widen(all.data(), detail::StreamWeights::I8, all.size(), wide.data());
    for (size_t i = 0; i < all.size(); ++i)
      ASSERT_EQ(wide[i], float(all[i])) << i;
  }
}

//===----------------------------------------------------------------------===//
// Experts
//===----------------------------------------------------------------------===//

/// Runs `check(tolerance)` on the widening GEMM blocks (tolerance 1e-4:
/// f32 products of the widened values), then, where the CPU has
/// AVX512-BF16, on the bf16 matmul blocks, whose activations are rounded to
/// bf16 (a relative error of 2^-9 per element, about 1e-3 on these sums).
template <typename Fn> void onBothGemmPaths(Fn check) {
  {
    SCOPED_TRACE("widened f32 blocks");
    WidenedBlocks widened;
    check(1e-4f);
  }
  if (!detail::hasBf16Matmul()) {
    std::printf("skipped the bf16 matmul blocks: this CPU has no "
                "AVX512-BF16\n");
    return;
  }
  SCOPED_TRACE("bf16 matmul blocks");
  check(5e-3f);
}

TEST(Int8Experts, EveryActivationLayoutAndPackingFewRowsPerExpert) {
  // Streamed column blocks ([out, K]) and row splits ([K, out]), and GEMM
  // blocks where the crossover (streamedRows) is below 3 rows.
  onBothGemmPaths([](float tolerance) {
    for (Network net : everyNetwork()) {
      SCOPED_TRACE(describe(net));
      net.init(/*experts=*/5, /*hidden=*/12, /*inter=*/20, 11);
      net.quantize();
      checkExperts(net, {1, 0, 3, 0, 2}, /*padding=*/2, 12, /*threads=*/2,
                   /*inPlace=*/false, tolerance);
    }
  });
}

TEST(Int8Experts, EveryActivationLayoutAndPackingManyRowsPerExpert) {
  // GEMMs over widened blocks, scaled afterwards; segments and rounds.
  onBothGemmPaths([](float tolerance) {
    for (Network net : everyNetwork()) {
      SCOPED_TRACE(describe(net));
      net.init(/*experts=*/4, /*hidden=*/16, /*inter=*/24, 13);
      net.quantize();
      checkExperts(net, {40, 300, 0, 5}, /*padding=*/0, 14, /*threads=*/3,
                   /*inPlace=*/false, tolerance);
    }
  });
}

TEST(Int8Experts, RowSplitsAndColumnBlocksOfLargerExperts) {
  // Several split blocks of 128 weight rows and a short last one, several
  // column blocks with a remainder, next to GEMM-sized experts.
  onBothGemmPaths([](float tolerance) {
    for (bool inOut : {false, true}) {
      Network net;
      net.inOut = inOut;
      net.biases = true;
      net.init(/*experts=*/4, /*hidden=*/150, /*inter=*/300, 21);
      net.quantize();
      checkExperts(net, {1, 8, 0, 30}, /*padding=*/1, 22, /*threads=*/3,
                   /*inPlace=*/false, tolerance);
    }
  });
}

/// The status of an Experts step of a small int8 network with `edit`
/// applied to its weight inputs (w1, b1, w3, b3, w2, b2, s1, s3, s2).
absl::Status runEdited(
    const std::function<void(std::vector<std::optional<Value>> &)> &edit) {
  Network net;
  net.init(/*experts=*/2, /*hidden=*/4, /*inter=*/6, 31);
  net.quantize();
  std::vector<std::optional<Value>> weights = net.weightInputs(true);
  edit(weights);
  std::vector<std::optional<Value>> inputs = {f32({2, 4}, randomFloats(8, 1)),
                                              i64({3}, {0, 1, 2})};
  for (auto &w : weights)
    inputs.push_back(std::move(w));
  return runStep(OpKind::Experts, inputs, {{DType::F32, {2, 4}}},
                 net.attributes())
      .status();
}

TEST(Int8Experts, ScalesAreCheckedAtLoad) {
  EXPECT_TRUE(runEdited([](auto &) {}).ok());
  EXPECT_THAT(runEdited([](auto &w) { w[6].reset(); }),
              StatusHas("s1 is missing: w1 is i8 and needs its per-channel "
                        "scales"));
  EXPECT_THAT(runEdited([](auto &w) {
                w[8] = f32({2, 3}, {1, 1, 1, 1, 1, 1});
              }),
              StatusHas("s2 has shape [2, 3]; expected [2, 4] ([E, H], a "
                        "scale per output channel)"));
  EXPECT_THAT(runEdited([](auto &w) {
                w[6] = Value::of(DType::I8, {2, 6}, std::vector<int8_t>(12));
              }),
              StatusHas("i8"));
  // f32 matrices with scales.
  EXPECT_THAT(runEdited([](auto &w) {
                for (int m : {0, 2, 4})
                  w[m] = f32(w[m]->shape,
                             std::vector<float>(w[m]->bytes.size(), 0.5f));
              }),
              StatusHas("s1 is given but w1 is not i8"));
  // int8 and f32 matrices mixed.
  EXPECT_THAT(runEdited([](auto &w) {
                w[4] = f32(w[4]->shape,
                           std::vector<float>(w[4]->bytes.size(), 0.5f));
              }),
              StatusHas("w2 is f32 but w1 is i8"));
}

TEST(Int8SharedExpert, MatchesTheDequantizedNetwork) {
  // A shared expert's int8 matrices (format 1.16) with their scales [out]
  // as inputs 8 to 10, after the (absent) gate: every layout and activation,
  // streamed (1 row) and GEMM (3 and 40 rows) paths.
  onBothGemmPaths([](float tolerance) {
    for (Network net : everyNetwork()) {
      SCOPED_TRACE(describe(net));
      net.init(/*experts=*/1, /*hidden=*/12, /*inter=*/20, 41);
      net.quantize();
      std::vector<std::optional<Value>> weights = net.weightInputs(false);
      for (int64_t rows : {1, 3, 40}) {
        SCOPED_TRACE(::testing::Message() << rows << " rows");
        std::vector<float> x = randomFloats(rows * net.H, 42 + rows);
        std::vector<std::optional<Value>> inputs = {f32({rows, net.H}, x)};
        for (int i = 0; i < 6; ++i)
          inputs.push_back(weights[i]);
        inputs.push_back(std::nullopt); // gate
        for (int i = 6; i < 9; ++i)
          inputs.push_back(weights[i]);
        Value y = run1(OpKind::SharedExpert, inputs,
                       {DType::F32, {rows, net.H}}, net.attributes());
        std::vector<float> got = y.as<float>();
        for (int64_t row = 0; row < rows; ++row) {
          std::vector<double> want = net.apply(0, x.data() + row * net.H);
          double scale = 1;
          for (double v : want)
            scale = std::max(scale, std::fabs(v));
          for (int64_t h = 0; h < net.H; ++h)
            ASSERT_NEAR(got[row * net.H + h], want[h], tolerance * scale)
                << row << ", " << h;
        }
      }
    }
  });
}

TEST(Int8SharedExpert, ScalesAreCheckedAtLoad) {
  Network net;
  net.init(/*experts=*/1, /*hidden=*/4, /*inter=*/6, 41);
  net.quantize();
  std::vector<std::optional<Value>> weights = net.weightInputs(false);
  auto run = [&](std::vector<std::optional<Value>> scales) {
    std::vector<std::optional<Value>> inputs = {
        f32({2, 4}, randomFloats(8, 1))};
    for (int i = 0; i < 6; ++i)
      inputs.push_back(weights[i]);
    inputs.push_back(std::nullopt);
    for (auto &v : scales)
      inputs.push_back(std::move(v));
    return runStep(OpKind::SharedExpert, inputs, {{DType::F32, {2, 4}}},
                   net.attributes())
        .status();
  };
  EXPECT_THAT(run({}), StatusHas("s1 is missing: w1 is i8"));
  std::vector<std::optional<Value>> wrong = {weights[6], weights[7],
                                             weights[8]};
  wrong[0] = f32({1, wrong[0]->shape[0]}, wrong[0]->as<float>());
  EXPECT_THAT(run(wrong), StatusHas("s1 has rank 2; expected 1 ([out])"));
}

TEST(Int8SharedExpert, ScalesNeedFormat116) {
  // A 1.15 reader would refuse the step's arity: the plan says 1.16.
  Network net;
  net.init(/*experts=*/1, /*hidden=*/4, /*inter=*/6, 41);
  net.quantize();
  std::vector<std::optional<Value>> weights = net.weightInputs(false);
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  std::vector<int32_t> ins = {
      s.addTensor("x", DType::F32, {PlanDim(2), PlanDim(4)})};
  s.addInput(ins[0]);
  for (size_t i = 0; i < weights.size(); ++i) {
    if (i == 6)
      ins.push_back(-1); // gate
    if (!weights[i]) {
      ins.push_back(-1);
      continue;
    }
    const Value &w = *weights[i];
    ins.push_back(s.addWeight(absl::StrCat("w", i), w.dtype, w.shape,
                              w.bytes.data(), w.bytes.size()));
  }
  int32_t y = s.addTensor("y", DType::F32, {PlanDim(2), PlanDim(4)});
  s.addOutput(y);
  s.addStep(OpKind::SharedExpert, "shared", ins, {y}, net.attributes());
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GE((*plan)->versionMinor(), detail::kFormatVersionMinorLinear);
  std::vector<uint8_t> older =
      rewrite(*bytes, [](detail::FileHeader &header, auto &) {
        header.versionMinor = detail::kFormatVersionMinorBatchWindows;
      });
  EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
              StatusHas("is a SharedExpert step with int8 scales, which needs "
                        "format 1.16, but the file is version 1.15"));
}

//===----------------------------------------------------------------------===//
// Plan writer
//===----------------------------------------------------------------------===//

/// Runs an Experts step whose f32 matrices (of `net`, before quantize()) the
/// plan writer quantizes, as pieces of one expert each (expert 1 of w2 an
/// absent expert: zeros), over rows `x` with `offsets`.
/// With `transpose`, the [in, out] matrices of `net` (inOut) are written
/// transposed (ScheduleBuilder::transposeExpertMatrices) and the step reads
/// them as [out, in].
absl::StatusOr<Value> runWriterQuantized(const Network &net,
                                         const std::vector<float> &x,
                                         const std::vector<int64_t> &offsets,
                                         bool transpose = false) {
  int64_t N = x.size() / net.H;
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  auto [tokens, offs, out] = addExpertsSignature(s, N, net.H, net.E);
  std::vector<int32_t> inputs = {tokens, offs};
  std::vector<int32_t> scales;
  int channelDim = net.inOut ? 2 : 1;
  auto matrix = [&](const std::vector<float> &w, std::vector<int64_t> shape,
                    const char *name, bool zeroSecond) {
    if (w.empty()) {
      inputs.push_back(-1);
      scales.push_back(-1);
      return;
    }
    size_t per = w.size() / net.E;
    std::vector<WeightPiece> pieces;
    for (int64_t e = 0; e < net.E; ++e)
      pieces.push_back({zeroSecond && e == 1 ? nullptr : w.data() + e * per,
                        per * sizeof(float)});
    int32_t scale = -1;
    inputs.push_back(
        s.addQuantizedWeightPieces(name, shape, pieces, channelDim, scale));
    if (transpose)
      s.transposeExpertMatrices(inputs.back());
    scales.push_back(scale);
  };
  auto vector = [&](const std::vector<float> &b, int64_t size,
                    const char *name) {
    inputs.push_back(b.empty() ? -1
                               : s.addWeight(name, DType::F32, {net.E, size},
                                             b.data(), b.size() * 4));
  };
  matrix(net.w1, net.matrixShape(net.H, net.w1Out(), true), "w1", false);
  vector(net.b1, net.w1Out(), "b1");
  matrix(net.w3, net.matrixShape(net.H, net.F, true), "w3", false);
  vector(net.b3, net.F, "b3");
  matrix(net.w2, net.matrixShape(net.F, net.H, true), "w2", true);
  vector(net.b2, net.H, "b2");
  inputs.insert(inputs.end(), scales.begin(), scales.end());
  Network stored = net;
  stored.inOut = net.inOut && !transpose;
  s.addStep(OpKind::Experts, "experts", inputs, {out}, stored.attributes());
  return runExpertsPlan(writer, net.H, x, offsets);
}

TEST(Int8PlanWriter, QuantizesPerExpertAndOutputChannelInBothLayouts) {
  // The writer's int8 weights and scales give the network that the test's
  // own quantization (the documented rule) gives, in both layouts, with an
  // absent expert's zeros (scale 0). On the widening blocks, exact up to
  // f32 sums (expert_gemm_test.cpp covers the bf16 ones).
  WidenedBlocks widened;
  for (int layout = 0; layout < 3; ++layout)
    for (bool separateUp : {true, false}) {
      // out_in, in_out, and in_out written transposed to out_in.
      bool inOut = layout > 0, transpose = layout == 2;
      SCOPED_TRACE(absl::StrCat(inOut ? "in_out" : "out_in",
                                transpose ? " transposed" : "",
                                separateUp ? " w3" : " fused"));
      Network net;
      net.inOut = inOut;
      net.separateUp = separateUp;
      if (!separateUp)
        net.glu = fb::GluLayout::Interleaved;
      net.biases = true;
      net.init(/*experts=*/3, /*hidden=*/20, /*inter=*/12, 51);
      std::vector<int64_t> offsets = {0, 2, 30, 33};
      std::vector<float> x = randomFloats(33 * net.H, 52);
      absl::StatusOr<Value> got =
          runWriterQuantized(net, x, offsets, transpose);
      ASSERT_TRUE(got.ok()) << got.status();
      Network reference = net;
      std::fill(reference.w2.begin() + net.F * net.H,
                reference.w2.begin() + 2 * net.F * net.H, 0.0f);
      reference.quantize();
      std::vector<float> expected(x.size());
      for (int64_t e = 0; e < net.E; ++e)
        for (int64_t row = offsets[e]; row < offsets[e + 1]; ++row) {
          std::vector<double> y = reference.apply(e, x.data() + row * net.H);
          std::copy(y.begin(), y.end(), expected.begin() + row * net.H);
        }
      expectNear(*got, {33, net.H}, expected, 1e-4f);
    }
}

TEST(Int8PlanWriter, NonFiniteWeightsAreAnError) {
  Network net;
  net.init(/*experts=*/2, /*hidden=*/4, /*inter=*/6, 61);
  net.w2[5] = std::numeric_limits<float>::infinity();
  absl::StatusOr<Value> got =
      runWriterQuantized(net, randomFloats(8, 1), {0, 1, 2});
  EXPECT_THAT(got.status(), StatusHas("weight 'w2' cannot be quantized to "
                                      "int8: element 5 is inf"));
}

} // namespace
} // namespace moert::testing
