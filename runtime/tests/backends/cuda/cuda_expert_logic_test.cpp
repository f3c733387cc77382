//===- cuda_expert_logic_test.cpp - Expert GEMM kernels' logic ------------===//
//
// Runs the per-thread logic of the Experts / SharedExpert kernels
// (cuda/expert_logic.h) on the host over every block and thread index of
// each launch, in the kernels' order (schedule, first projection in narrow
// and wide tiles, padding, second projection), and compares the result with
// the CPU backend running the same step through a plan. bf16 weights take
// the tensor-core wide tiles: their slices are staged by every thread and
// each warp's MMAs are emulated fragment by fragment (emulateMma, a
// 16x16x16 product in float from the staged bf16 bits), with the kernel's
// offsets, pitches and skips. Also the tile schedule on its edge cases, the
// 16-bit weight decoding, bf16 rounding, the hi/lo activation split and its
// error bound. Built with or without the CUDA backend: nothing here needs a
// GPU.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/expert_logic.h"
#include "test_util.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>

namespace moert::testing {
namespace {

using namespace moert::cuda;
using fb::OpKind;

//===----------------------------------------------------------------------===//
// 16-bit weights
//===----------------------------------------------------------------------===//

Bf16 toBf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u += 0x7fffu + ((u >> 16) & 1u); // Round to nearest even.
  return Bf16{uint16_t(u >> 16)};
}
F16 toF16(float v) {
  _Float16 h = static_cast<_Float16>(v);
  F16 bits;
  std::memcpy(&bits.bits, &h, 2);
  return bits;
}

TEST(ExpertLogic, F16DecodesEveryBitPatternLikeTheCompiler) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    uint16_t raw = uint16_t(bits);
    _Float16 h;
    std::memcpy(&h, &raw, 2);
    float expected = static_cast<float>(h);
    float actual = weightToFloat(F16{raw});
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << std::hex << bits;
      continue;
    }
    uint32_t a, e;
    std::memcpy(&a, &actual, 4);
    std::memcpy(&e, &expected, 4);
    ASSERT_EQ(a, e) << "f16 bits 0x" << std::hex << bits; // -0 included.
  }
}

TEST(ExpertLogic, Bf16DecodesToTheUpperHalfOfAFloat) {
  EXPECT_EQ(weightToFloat(Bf16{0x3f80}), 1.0f);
  EXPECT_EQ(weightToFloat(Bf16{0xc000}), -2.0f);
  EXPECT_EQ(weightToFloat(Bf16{0x0001}), std::ldexp(1.0f, -133)); // Subnormal.
  EXPECT_TRUE(std::isinf(weightToFloat(Bf16{0xff80})));
  EXPECT_TRUE(std::isnan(weightToFloat(Bf16{0x7fc1})));
  for (float v : randomFloats(1000, 3))
    EXPECT_NEAR(weightToFloat(toBf16(v)), v, std::fabs(v) / 256);
}

/// bf16 rounding to nearest even, computed independently in double: the
/// value with 8 significant bits nearest to v (ties to even) at v's binary
/// exponent, or at the subnormal scale 2^-133.
double referenceBf16(float v) {
  double d = v;
  if (d == 0)
    return d;
  int exponent = std::max(std::ilogb(d), -126);
  double scale = std::ldexp(1.0, 7 - exponent);
  return std::nearbyint(d * scale) / scale; // The default mode: ties to even.
}

TEST(ExpertLogic, RoundToBf16IsRoundToNearestEven) {
  std::vector<float> values = randomFloats(20000, 50);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = std::ldexp(values[i], int(i % 250) - 125); // Every binade.
  // Ties: halfway between two bf16 values, both parities; subnormals.
  for (float tie : {1.00390625f, 1.01171875f, -3.0078125f, 1e-40f, -1e-39f,
                    std::ldexp(1.0f, -149), 0.0f, -0.0f, 65280.5f})
    values.push_back(tie);
  for (float v : values) {
    double expected = referenceBf16(v);
    if (std::fabs(expected) > 3.3895313892515355e38) // Beyond the largest bf16.
      continue;
    EXPECT_EQ(weightToFloat(Bf16{roundToBf16(v)}), expected) << v;
  }
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(weightToFloat(Bf16{roundToBf16(inf)}), inf);
  EXPECT_EQ(weightToFloat(Bf16{roundToBf16(-inf)}), -inf);
  // NaN payloads only in the low bits would truncate to infinity.
  uint32_t quietLow = 0x7f800001u;
  float nan;
  std::memcpy(&nan, &quietLow, 4);
  EXPECT_TRUE(std::isnan(weightToFloat(Bf16{roundToBf16(nan)})));
  EXPECT_TRUE(std::isinf(weightToFloat(Bf16{roundToBf16(3.4e38f)})));
}

TEST(ExpertLogic, SplitActivationResidualIsWithinTwoToTheMinus16) {
  std::vector<float> values = randomFloats(50000, 51);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = std::ldexp(values[i], int(i % 254) - 126);
  for (float v :
       {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
        3.39e38f, std::numeric_limits<float>::min(),
        std::numeric_limits<float>::denorm_min(), 1e-42f, 0.0f, -0.0f,
        1.0f + std::ldexp(1.0f, -23)})
    values.push_back(v);
  double worst = 0;
  for (float v : values) {
    SplitActivation split = splitActivation(v);
    double hi = weightToFloat(Bf16{split.hi});
    double lo = weightToFloat(Bf16{split.lo});
    ASSERT_TRUE(std::isfinite(hi) && std::isfinite(lo)) << v;
    double residual = std::fabs(double(v) - hi - lo);
    // Half the smallest bf16 subnormal bounds the residual of tiny values.
    ASSERT_LE(residual, std::max(std::ldexp(std::fabs(double(v)), -16),
                                 std::ldexp(1.0, -134)))
        << v;
    if (std::fabs(v) > 1e-30f)
      worst = std::max(worst, residual / std::fabs(double(v)));
  }
  // The bound is nearly reached: the split keeps 16 bits, not more.
  EXPECT_GT(worst, std::ldexp(1.0, -18));
  // Infinities and NaN go whole into hi, so that lo adds no NaN.
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(weightToFloat(Bf16{splitActivation(-inf).hi}), -inf);
  EXPECT_EQ(splitActivation(-inf).lo, 0);
  EXPECT_TRUE(std::isnan(weightToFloat(Bf16{splitActivation(NAN).hi})));
  EXPECT_EQ(splitActivation(NAN).lo, 0);
}

TEST(ExpertLogic, EmulatedMmaReadsBothOperandLayouts) {
  // A 16x16x16 product from pitched shared-memory operands, B row- and
  // column-major, against a double-precision product of the same values.
  std::vector<float> av = randomFloats(kMmaShape * kMmaLdA, 52);
  std::vector<float> bv = randomFloats(kMmaShape * kMmaLdBRows, 53);
  std::vector<uint16_t> a, b;
  for (float v : av)
    a.push_back(roundToBf16(v));
  for (float v : bv)
    b.push_back(roundToBf16(v));
  for (bool rowMajorB : {true, false}) {
    int ldb = rowMajorB ? kMmaLdBRows : kMmaLdBCols;
    float acc[kMmaShape][kMmaShape];
    for (auto &row : acc)
      for (float &v : row)
        v = 0.5f;
    emulateMma(a.data(), kMmaLdA, b.data(), rowMajorB, ldb, acc);
    for (int m = 0; m < kMmaShape; ++m)
      for (int n = 0; n < kMmaShape; ++n) {
        double expected = 0.5;
        for (int k = 0; k < kMmaShape; ++k)
          expected +=
              double(weightToFloat(Bf16{a[m * kMmaLdA + k]})) *
              weightToFloat(Bf16{rowMajorB ? b[k * ldb + n] : b[n * ldb + k]});
        EXPECT_NEAR(acc[m][n], expected, 1e-5) << m << ", " << n;
      }
  }
}

//===----------------------------------------------------------------------===//
// The tile schedule
//===----------------------------------------------------------------------===//

/// The exclusive prefix of the tile counts, as the schedule kernel writes it.
std::vector<int32_t> prefixOf(const int64_t *offsets, int64_t E, int64_t N,
                              int regime,
                              const void *const *present = nullptr) {
  std::vector<int32_t> prefix(E + 1, 0);
  for (int64_t e = 0; e < E; ++e)
    prefix[e + 1] =
        prefix[e] + int32_t(tileCount(offsets, N, e, regime, present));
  return prefix;
}

/// Every row of every expert is in exactly one tile of the regime its row
/// count selects, tiles past the count run nothing, and the count is within
/// the grid bound.
void checkSchedule(const std::vector<int64_t> &rows, int64_t padding) {
  SCOPED_TRACE(::testing::PrintToString(rows));
  int64_t E = rows.size();
  std::vector<int64_t> offsets = {0};
  for (int64_t n : rows)
    offsets.push_back(offsets.back() + n);
  int64_t N = offsets.back() + padding;
  for (int64_t e = 0; e <= E; ++e)
    ASSERT_TRUE(offsetValid(offsets.data(), N, e));
  std::vector<int> covered(N, 0);
  for (int regime : {kRegimeNarrow, kRegimeWide}) {
    std::vector<int32_t> prefix = prefixOf(offsets.data(), E, N, regime);
    int64_t bound = maxTiles(N, E, regime);
    ASSERT_LE(prefix[E], bound);
    for (int64_t tile = 0; tile < bound + 3; ++tile) {
      ExpertTile t =
          findTile(prefix.data(), E, offsets.data(), N, regime, tile);
      if (tile >= prefix[E]) {
        EXPECT_EQ(t.expert, -1);
        continue;
      }
      ASSERT_GE(t.expert, 0);
      ASSERT_LT(t.expert, E);
      int64_t n = rows[t.expert];
      EXPECT_EQ(regime == kRegimeNarrow, n <= kNarrowRows);
      EXPECT_GT(t.rows, 0);
      EXPECT_LE(t.rows, rowsPerTile(regime));
      EXPECT_GE(t.row, offsets[t.expert]);
      EXPECT_LE(t.row + t.rows, offsets[t.expert + 1]);
      for (int64_t r = t.row; r < t.row + t.rows; ++r)
        ++covered[r];
    }
  }
  for (int64_t r = 0; r < N; ++r)
    EXPECT_EQ(covered[r], r < offsets[E] ? 1 : 0) << "row " << r;
  EXPECT_EQ(paddingBegin(offsets.data(), E, N), offsets[E]);
}

TEST(ExpertLogic, TileScheduleEdgeCases) {
  checkSchedule({0, 500, 0, 0}, 3);       // All rows to one expert.
  checkSchedule({0, 0, 0}, 0);            // Zero rows.
  checkSchedule({0, 0, 0}, 5);            // Only padding.
  checkSchedule({65, 64, 63, 129}, 0);    // Not multiples of the tile.
  checkSchedule({8, 9, 1, 0, 7, 128}, 2); // Around the narrow bound.
  checkSchedule({1}, 0);
  std::vector<int64_t> many(300, 0);
  for (size_t e = 0; e < many.size(); e += 7)
    many[e] = e % 3 ? 2 : 70;
  checkSchedule(many, 4);
  // Every expert one row: as many narrow tiles as experts.
  checkSchedule(std::vector<int64_t>(37, 1), 0);
}

TEST(ExpertLogic, SharedExpertScheduleIsOneGroupOfAllRows) {
  for (int64_t N : {0, 1, 8, 9, 64, 65, 300}) {
    std::vector<int32_t> narrow = prefixOf(nullptr, 1, N, kRegimeNarrow);
    std::vector<int32_t> wide = prefixOf(nullptr, 1, N, kRegimeWide);
    int64_t covered = 0;
    for (int64_t tile = 0; tile < maxTiles(N, 1, kRegimeNarrow); ++tile)
      covered +=
          findTile(narrow.data(), 1, nullptr, N, kRegimeNarrow, tile).rows;
    for (int64_t tile = 0; tile < maxTiles(N, 1, kRegimeWide); ++tile)
      covered += findTile(wide.data(), 1, nullptr, N, kRegimeWide, tile).rows;
    EXPECT_EQ(covered, N) << N;
    EXPECT_EQ(paddingBegin(nullptr, 1, N), N);
  }
}

TEST(ExpertLogic, OffsetsOutOfOrderOrBeyondTheRowsAreFound) {
  std::vector<int64_t> offsets = {0, 3, 2, 6};
  EXPECT_TRUE(offsetValid(offsets.data(), 5, 1));
  EXPECT_FALSE(offsetValid(offsets.data(), 5, 2)); // Decreases.
  EXPECT_FALSE(offsetValid(offsets.data(), 5, 3)); // Beyond 5 rows.
  std::vector<int64_t> first = {1, 2};
  EXPECT_FALSE(offsetValid(first.data(), 5, 0));
  // Bad padding bounds are clamped (no kernel writes outside the rows).
  EXPECT_EQ(paddingBegin(offsets.data(), 3, 5), 5);
  std::vector<int64_t> negative = {0, -4};
  EXPECT_EQ(paddingBegin(negative.data(), 1, 5), 0);
}

//===----------------------------------------------------------------------===//
// Launch emulation against the CPU backend
//===----------------------------------------------------------------------===//

/// An expert network's form and weights (f32 values; the weights of a
/// 16-bit case are those values rounded, so that both backends see the same
/// numbers).
struct Net {
  ExpertFfn f;
  bool biases = false;
  std::vector<float> w1, b1, w3, b3, w2, b2;

  bool gated() const { return isGatedActivation(f.activation); }

  void init(int64_t E, int64_t H, int64_t F, uint32_t seed, int type) {
    f.experts = E;
    f.hidden = H;
    f.inter = F;
    f.w1Out = gated() && !f.hasW3 ? 2 * F : F;
    w1 = randomFloats(E * H * f.w1Out, seed);
    w2 = randomFloats(E * F * H, seed + 1);
    w3 = f.hasW3 ? randomFloats(E * H * F, seed + 2) : std::vector<float>();
    // 1/sqrt(fan-in), like trained weights: outputs stay near 1.
    for (auto [w, fanIn] : {std::pair{&w1, H}, {&w3, H}, {&w2, F}})
      for (float &v : *w) {
        v /= std::sqrt(float(fanIn));
        if (type == kWeightBf16)
          v = weightToFloat(toBf16(v));
        else if (type == kWeightF16)
          v = static_cast<float>(static_cast<_Float16>(v));
      }
    b1 = b3 = b2 = {};
    if (biases) {
      b1 = randomFloats(E * f.w1Out, seed + 3);
      b2 = randomFloats(E * H, seed + 4);
      if (f.hasW3)
        b3 = randomFloats(E * F, seed + 5);
    }
  }

  fb::AttrsUnion attributes() const {
    fb::FfnAttrsT a;
    a.activation = static_cast<fb::Activation>(f.activation);
    a.weight_layout =
        f.inOut ? fb::WeightLayout::InOut : fb::WeightLayout::OutIn;
    a.glu_layout = static_cast<fb::GluLayout>(f.glu);
    a.alpha = f.alpha;
    a.beta = f.beta;
    a.limit = f.limit;
    return attrs(a);
  }

  /// w1, b1, w3, b3, w2, b2 as f32 step inputs.
  std::vector<std::optional<Value>> inputs(bool lead) const {
    auto matrix = [&](const std::vector<float> &v, int64_t in, int64_t out) {
      std::vector<int64_t> shape;
      if (lead)
        shape.push_back(f.experts);
      shape.push_back(f.inOut ? in : out);
      shape.push_back(f.inOut ? out : in);
      return v.empty() ? std::optional<Value>() : f32(shape, v);
    };
    auto vector = [&](const std::vector<float> &v) {
      std::vector<int64_t> shape;
      if (lead)
        shape.push_back(f.experts);
      shape.push_back(int64_t(v.size()) / f.experts);
      return v.empty() ? std::optional<Value>() : f32(shape, v);
    };
    return {matrix(w1, f.hidden, f.w1Out), vector(b1),
            matrix(w3, f.hidden, f.inter), vector(b3),
            matrix(w2, f.inter, f.hidden), vector(b2)};
  }
};

/// Every activation in both layouts, with and without biases, and for gated
/// ones w3 and both fused gate/up packings.
std::vector<Net> everyForm() {
  std::vector<Net> nets;
  for (int a = kActRelu; a <= kActReluSquared; ++a)
    for (bool inOut : {false, true})
      for (bool biases : {false, true}) {
        Net net;
        net.f.activation = a;
        net.f.inOut = inOut;
        net.biases = biases;
        if (a == kActClampedSwiglu) {
          net.f.alpha = 1.702f;
          net.f.beta = 1.0f;
          net.f.limit = biases ? 0.6f : 0.0f; // With and without clamping.
        }
        if (!net.gated()) {
          nets.push_back(net);
          continue;
        }
        net.f.hasW3 = true;
        nets.push_back(net);
        net.f.hasW3 = false;
        for (int glu : {kGluConcatenated, kGluInterleaved}) {
          net.f.glu = glu;
          nets.push_back(net);
        }
      }
  return nets;
}

std::string describe(const Net &net, int type) {
  return absl::StrCat(
      fb::EnumNameActivation(static_cast<fb::Activation>(net.f.activation)),
      net.f.inOut ? " in_out" : " out_in", net.biases ? " biases" : "",
      net.f.hasW3 ? " w3" : "", net.f.glu ? " glu " : "",
      net.f.glu ? fb::EnumNameGluLayout(static_cast<fb::GluLayout>(net.f.glu))
                : "",
      type == kWeightBf16  ? " bf16"
      : type == kWeightF16 ? " f16"
                           : " f32");
}

/// A weight array of type W holding `values` (which are representable).
template <typename W> std::vector<W> typed(const std::vector<float> &values) {
  std::vector<W> out;
  for (float v : values) {
    if constexpr (std::is_same_v<W, Bf16>)
      out.push_back(toBf16(v));
    else if constexpr (std::is_same_v<W, F16>)
      out.push_back(toF16(v));
    else
      out.push_back(v);
  }
  return out;
}

/// Calls fn(tile) for every live tile of a launch in `regime`: the grid.x
/// blocks, as the kernels map them to tiles (blocks past the tiles exit).
template <typename Fn>
void forEachTile(const std::vector<int32_t> &prefix, const int64_t *offsets,
                 int64_t N, const ExpertFfn &f, int regime, Fn fn) {
  for (int64_t bx = 0; bx < maxTiles(N, f.experts, regime); ++bx) {
    ExpertTile tile =
        findTile(prefix.data(), f.experts, offsets, N, regime, bx);
    if (tile.expert >= 0)
      fn(tile);
  }
}

/// One narrow launch: every tile (grid.x) and unit block (grid.y), each
/// thread's partial sums, then each thread's share of the epilogue.
template <typename MakeProjection>
void emulateNarrow(const std::vector<int32_t> &prefix, const int64_t *offsets,
                   int64_t N, const ExpertFfn &f, int64_t units,
                   MakeProjection make) {
  int64_t blocks =
      (units + narrowUnitsPerBlock(f.inOut) - 1) / narrowUnitsPerBlock(f.inOut);
  forEachTile(prefix, offsets, N, f, kRegimeNarrow, [&](ExpertTile tile) {
    auto [p, a, lda] = make(tile);
    for (int64_t by = 0; by < blocks; ++by) {
      float partials[kNarrowThreads][2 * kNarrowRows];
      for (int t = 0; t < kNarrowThreads; ++t)
        narrowPartial(p, a, lda, tile.rows, by, t, partials[t]);
      for (int t = 0; t < kNarrowThreads; ++t)
        narrowFinish(p, tile.rows, by, t, partials);
    }
  });
}

/// One wide launch: per tile and column block, the k slices loaded and
/// multiplied by all 256 threads between the barriers, then the epilogue.
template <typename MakeProjection>
void emulateWide(const std::vector<int32_t> &prefix, const int64_t *offsets,
                 int64_t N, const ExpertFfn &f, int64_t columns,
                 MakeProjection make) {
  int64_t blocks = (columns + kTileCols - 1) / kTileCols;
  forEachTile(prefix, offsets, N, f, kRegimeWide, [&](ExpertTile tile) {
    auto [p, a, lda] = make(tile);
    for (int64_t by = 0; by < blocks; ++by) {
      float acc[kTileThreads][kMicro][kMicro] = {}; // Per thread.
      float as[kTileDepth][kWideRows], bs[kTileDepth][kTileCols];
      for (int64_t k0 = 0; k0 < p.depth(); k0 += kTileDepth) {
        for (int t = 0; t < kTileThreads; ++t) {
          loadTileA(a, lda, tile.rows, p.depth(), k0, t, as);
          loadTileB(p, k0, by * kTileCols, t, bs);
        }
        for (int t = 0; t < kTileThreads; ++t)
          multiplyTile(as, bs, t, acc[t]);
      }
      for (int t = 0; t < kTileThreads; ++t)
        storeTile(p, tile.rows, by * kTileCols, t, acc[t]);
    }
  });
}

/// One tensor-core wide launch (bf16 weights): per tile and column block,
/// shared memory poisoned with NaN, every thread's share of the column
/// starts, then per slice every thread's staging
/// and every warp's MMAs fragment by fragment in the kernel's order (per
/// 16-deep step: live fragment rows, both column fragments, hi then lo),
/// with the kernel's offsets and pitches; then the accumulators stored as
/// wmma::store_matrix_sync stores them and every thread's epilogue.
template <typename MakeProjection>
void emulateWideMma(const std::vector<int32_t> &prefix, const int64_t *offsets,
                    int64_t N, const ExpertFfn &f, int64_t columns,
                    MakeProjection make) {
  using Accumulators =
      float[kMmaWarpFragments][kMmaWarpFragments][kMmaShape][kMmaShape];
  auto shared = std::make_unique<MmaShared>();
  int64_t blocks = (columns + kMmaCols - 1) / kMmaCols;
  forEachTile(prefix, offsets, N, f, kRegimeWide, [&](ExpertTile tile) {
    auto [p, a, lda] = make(tile);
    bool inOut = p.f.inOut;
    for (int64_t by = 0; by < blocks; ++by) {
      int64_t j0 = by * kMmaCols;
      std::memset(shared.get(), 0xff, sizeof(MmaShared));     // NaN everywhere.
      auto acc = std::make_unique<Accumulators[]>(kMmaWarps); // Zeroed.
      for (int t = 0; t < kMmaThreads; ++t)
        mmaColumnStarts(p, j0, t, shared->stage.columns);
      for (int64_t k0 = 0; k0 < p.depth(); k0 += kMmaDepth) {
        for (int t = 0; t < kMmaThreads; ++t) {
          stageSplitActivations(a, lda, tile.rows, p.depth(), k0, t,
                                shared->stage.aHi, shared->stage.aLo);
          stageStoredWeights(shared->stage.columns, p.inputStride(), inOut,
                             p.depth(), k0, t, shared->stage.b);
        }
        for (int warp = 0; warp < kMmaWarps; ++warp) {
          if (!mmaRowsLive(mmaFragmentRow(warp, 0), tile.rows))
            continue;
          for (int k = 0; k < kMmaDepth; k += kMmaShape)
            for (int fi = 0; fi < kMmaWarpFragments; ++fi) {
              int row = mmaFragmentRow(warp, fi);
              if (!mmaRowsLive(row, tile.rows))
                continue;
              for (int fj = 0; fj < kMmaWarpFragments; ++fj) {
                const uint16_t *b =
                    shared->stage.b +
                    mmaBOffset(inOut, k, mmaFragmentCol(warp, fj));
                for (const uint16_t *half :
                     {shared->stage.aHi, shared->stage.aLo})
                  emulateMma(half + mmaAOffset(row, k), kMmaLdA, b, inOut,
                             mmaBPitch(inOut), acc[warp][fi][fj]);
              }
            }
        }
      }
      for (int warp = 0; warp < kMmaWarps; ++warp)
        for (int fi = 0; fi < kMmaWarpFragments; ++fi)
          for (int fj = 0; fj < kMmaWarpFragments; ++fj)
            for (int m = 0; m < kMmaShape; ++m)
              for (int n = 0; n < kMmaShape; ++n)
                shared->c[mmaCOffset(mmaFragmentRow(warp, fi) + m,
                                     mmaFragmentCol(warp, fj) + n)] =
                    acc[warp][fi][fj][m][n];
      for (int t = 0; t < kMmaThreads; ++t)
        mmaEpilogue(p, tile.rows, j0, t, shared->c);
    }
  });
}

/// The wide launch the kernels run for weight type W: tensor cores for
/// bf16, the SIMT tile otherwise.
template <typename W, typename MakeProjection>
void emulateWideOf(const std::vector<int32_t> &prefix, const int64_t *offsets,
                   int64_t N, const ExpertFfn &f, int64_t columns,
                   MakeProjection make) {
  if constexpr (std::is_same_v<W, Bf16>)
    emulateWideMma(prefix, offsets, N, f, columns, make);
  else
    emulateWide(prefix, offsets, N, f, columns, make);
}

/// The step's launches in order, on the host, once per round of `rounds`
/// (each an ExpertLaunch::present array; none: one launch of every expert).
/// Unwritten outputs stay NaN.
template <typename W>
std::vector<float>
emulateStep(const ExpertFfn &f, const ExpertWeights<W> &w, std::vector<float> x,
            int64_t N, const int64_t *offsets, const float *gate, bool inPlace,
            const std::vector<std::vector<const void *>> &rounds = {}) {
  const int64_t E = f.experts, H = f.hidden, F = f.inter;
  for (int64_t e = 0; e <= E; ++e)
    EXPECT_TRUE(offsetValid(offsets, N, e));
  std::vector<float> factors(N);
  if (gate)
    for (int64_t t = 0; t < N; ++t) {
      float sum = 0;
      for (int lane = 0; lane < 32; ++lane)
        sum += gatePartial(x.data() + t * H, gate, H, lane);
      factors[t] = expertSigmoid(sum);
    }
  std::vector<float> act(N * F, NAN);
  std::vector<float> separate(inPlace ? 0 : N * H, NAN);
  // In place: the output is the tokens' buffer.
  float *y = inPlace ? x.data() : separate.data();
  auto first = [&](const ExpertTile &tile) {
    return std::tuple(
        FirstProjection<W>{f, w, tile.expert, tile.row, act.data()},
        x.data() + tile.row * H, H);
  };
  auto second = [&](const ExpertTile &tile) {
    return std::tuple(SecondProjection<W>{f, w, tile.expert, tile.row,
                                          gate ? factors.data() : nullptr, y},
                      act.data() + tile.row * F, F);
  };
  int parts = isGatedActivation(f.activation) ? 2 : 1;
  std::vector<const void *const *> launches;
  for (const std::vector<const void *> &round : rounds)
    launches.push_back(round.data());
  if (launches.empty())
    launches.push_back(nullptr);
  for (const void *const *present : launches) {
    std::vector<int32_t> narrow =
        prefixOf(offsets, E, N, kRegimeNarrow, present);
    std::vector<int32_t> wide = prefixOf(offsets, E, N, kRegimeWide, present);
    emulateNarrow(narrow, offsets, N, f, F, first);
    emulateWideOf<W>(wide, offsets, N, f, F * parts, first);
    for (int64_t i = paddingBegin(offsets, E, N) * H; i < N * H; ++i)
      y[i] = 0.0f;
    emulateNarrow(narrow, offsets, N, f, H, second);
    emulateWideOf<W>(wide, offsets, N, f, H, second);
  }
  return inPlace ? x : separate;
}

template <typename W>
ExpertWeights<W> weightsOf(const Net &net, std::vector<W> storage[3]) {
  storage[0] = typed<W>(net.w1);
  storage[1] = typed<W>(net.w3);
  storage[2] = typed<W>(net.w2);
  ExpertWeights<W> w;
  w.w1 = storage[0].data();
  w.w3 = net.w3.empty() ? nullptr : storage[1].data();
  w.w2 = storage[2].data();
  w.b1 = net.b1.empty() ? nullptr : net.b1.data();
  w.b3 = net.b3.empty() ? nullptr : net.b3.data();
  w.b2 = net.b2.empty() ? nullptr : net.b2.data();
  return w;
}

/// How close the emulated kernels come to the CPU backend: bf16 weights to
/// 1e-5 relative (the tensor-core tiles' hi/lo split adds at most 2^-16 of
/// each product's magnitude); f32 and f16 keep the SIMT tiles' 1e-4.
template <typename W> float tolerance() {
  return std::is_same_v<W, Bf16> ? 1e-5f : 1e-4f;
}

/// The per-expert table (ExpertWeights::table) of `contiguous`'s weights,
/// each expert's block copied into a buffer of its own in `blocks`,
/// poisoned around it: a tiered step's weights, with no contiguous array.
template <typename W>
std::vector<const void *>
tieredTable(const ExpertFfn &f, const ExpertWeights<W> &contiguous,
            std::vector<std::vector<uint8_t>> &blocks) {
  int64_t E = f.experts, H = f.hidden;
  // Per slot, its contiguous array and elements per expert.
  std::pair<const void *, int64_t> slots[kExpertSlots] = {
      {contiguous.w1, H * f.w1Out}, {contiguous.b1, f.w1Out},
      {contiguous.w3, H * f.inter}, {contiguous.b3, f.inter},
      {contiguous.w2, f.inter * H}, {contiguous.b2, H}};
  std::vector<const void *> table(kExpertSlots * E, nullptr);
  for (int s = 0; s < kExpertSlots; ++s) {
    if (!slots[s].first)
      continue;
    size_t bytes = slots[s].second * (s % 2 ? sizeof(float) : sizeof(W));
    for (int64_t e = 0; e < E; ++e) {
      std::vector<uint8_t> &block = blocks.emplace_back(bytes + 128, 0xff);
      std::memcpy(block.data() + 64,
                  static_cast<const uint8_t *>(slots[s].first) + e * bytes,
                  bytes);
      table[s * E + e] = block.data() + 64;
    }
  }
  return table;
}

/// Emulates an Experts step with `rows[e]` rows for expert e (and `padding`
/// rows after them) and compares it with the CPU backend's. With `rounds`
/// (sets of experts present at once, together each expert once) it is a
/// tiered step: every weight comes through the per-expert table, one launch
/// per round.
template <typename W>
void checkExperts(const Net &net, const std::vector<int64_t> &rows,
                  int64_t padding, uint32_t seed, bool inPlace = false,
                  const std::vector<std::vector<int>> &rounds = {}) {
  std::vector<int64_t> offsets = {0};
  for (int64_t n : rows)
    offsets.push_back(offsets.back() + n);
  int64_t N = offsets.back() + padding, H = net.f.hidden, E = net.f.experts;
  std::vector<float> x = randomFloats(N * H, seed);
  std::vector<std::optional<Value>> inputs = {f32({N, H}, x),
                                              i64({E + 1}, offsets)};
  for (auto &w : net.inputs(/*lead=*/true))
    inputs.push_back(std::move(w));
  auto cpu = runStep(OpKind::Experts, inputs, {{DType::F32, {N, H}}},
                     net.attributes());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::vector<W> storage[3];
  ExpertWeights<W> w = weightsOf<W>(net, storage);
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<const void *> table;
  std::vector<std::vector<const void *>> present;
  if (!rounds.empty()) {
    table = tieredTable(net.f, w, blocks);
    w = ExpertWeights<W>();
    w.table = table.data();
    w.experts = E;
    for (const std::vector<int> &round : rounds) {
      std::vector<const void *> &mask = present.emplace_back(E, nullptr);
      for (int e : round)
        mask[e] = table[kSlotW1 * E + e];
    }
  }
  std::vector<float> gpu =
      emulateStep(net.f, w, x, N, offsets.data(), nullptr, inPlace, present);
  expectNear(f32({N, H}, gpu), {N, H}, (*cpu)[0].as<float>(), tolerance<W>());
}

template <typename W> void checkEveryForm(int type) {
  uint32_t seed = 100;
  for (Net net : everyForm()) {
    SCOPED_TRACE(describe(net, type));
    // E = 1: one expert with many rows (wide tiles and a partial one).
    net.init(1, 24, 40, ++seed, type);
    checkExperts<W>(net, {70}, 1, ++seed);
    // E = 4: narrow and wide experts, an empty one, padding.
    net.init(4, 20, 36, ++seed, type);
    checkExperts<W>(net, {3, 0, 75, 9}, 2, ++seed);
    // E = 16: decoding-sized groups, most experts empty.
    net.init(16, 16, 24, ++seed, type);
    checkExperts<W>(net, {0, 1, 0, 0, 8, 0, 0, 2, 0, 0, 0, 0, 0, 5, 0, 0}, 3,
                    ++seed);
  }
}

TEST(ExpertLogic, EmulatedExpertsMatchTheCpuBackendF32) {
  checkEveryForm<float>(kWeightF32);
}
TEST(ExpertLogic, EmulatedExpertsMatchTheCpuBackendBf16) {
  checkEveryForm<Bf16>(kWeightBf16);
}
TEST(ExpertLogic, EmulatedExpertsMatchTheCpuBackendF16) {
  checkEveryForm<F16>(kWeightF16);
}

TEST(ExpertLogic, EmulatedExpertsLargerThanATileInEveryDimension) {
  // Hidden and intermediate sizes beyond one 64-column tile and not
  // multiples of 16 or 64; more than one narrow unit block.
  for (bool inOut : {false, true}) {
    Net net;
    net.f.inOut = inOut;
    net.f.glu = kGluInterleaved;
    net.biases = true;
    net.init(3, 150, 100, 7, kWeightF32);
    checkExperts<float>(net, {130, 5, 0}, 1, 8);
  }
}

TEST(ExpertLogic, EmulatedTensorCoreTilesAtEveryEdge) {
  // bf16 weights, wide tiles on the tensor cores: depth and columns beyond
  // one slice and one 128-column block and not multiples of 16, tiles of
  // 64, 40 (a dead warp row's second fragment), 20 (only the first warp
  // row) and 2 rows, both layouts and every gate/up packing.
  for (bool inOut : {false, true})
    for (int packing = 0; packing < 3; ++packing) {
      Net net;
      net.f.inOut = inOut;
      net.f.hasW3 = packing == 0;
      net.f.glu = packing == 1   ? kGluConcatenated
                  : packing == 2 ? kGluInterleaved
                                 : kGluNone;
      net.biases = packing != 1;
      SCOPED_TRACE(describe(net, kWeightBf16));
      net.init(5, 150, 100, 60 + packing, kWeightBf16);
      checkExperts<Bf16>(net, {130, 5, 0, 20, 40}, 1, 70 + packing);
    }
  // A non-gated activation: one part per unit, 150-wide second projection.
  Net relu;
  relu.f.activation = kActRelu;
  relu.f.inOut = true;
  relu.init(2, 150, 200, 80, kWeightBf16);
  checkExperts<Bf16>(relu, {17, 64}, 3, 81, /*inPlace=*/true);
}

TEST(ExpertLogic, TensorCoreSumsAreWithinTheDocumentedBound) {
  // The raw sums of a tensor-core tile (a second projection without bias
  // or gate stores them as they are), activations over 40 binades, against
  // double precision: |sum - exact| <= (2^-16 + 2K 2^-24) sum_k |w_k a_k|
  // (the split's residual, then fp32 accumulation of 2K terms). Where one
  // term dominates a sum, the split's residual is not averaged out: up to
  // 2^-16 of the sum.
  ExpertFfn f;
  f.experts = 1;
  f.inter = 200; // K, the depth.
  f.hidden = 130;
  f.inOut = false;
  std::vector<float> wv = randomFloats(f.inter * f.hidden, 90);
  std::vector<Bf16> w2;
  for (float v : wv)
    w2.push_back(Bf16{roundToBf16(v)});
  int64_t N = 64;
  std::vector<float> act = randomFloats(N * f.inter, 91);
  for (size_t i = 0; i < act.size(); ++i)
    act[i] = std::ldexp(act[i], int(i * 7 % 41) - 20);
  ExpertWeights<Bf16> w;
  w.w2 = w2.data();
  std::vector<float> y(N * f.hidden, NAN);
  std::vector<int32_t> wide = prefixOf(nullptr, 1, N, kRegimeWide);
  emulateWideMma(wide, nullptr, N, f, f.hidden, [&](const ExpertTile &t) {
    return std::tuple(
        SecondProjection<Bf16>{f, w, t.expert, t.row, nullptr, y.data()},
        act.data() + t.row * f.inter, f.inter);
  });
  double worst = 0, worstHiOnly = 0;
  for (int64_t r = 0; r < N; ++r)
    for (int64_t h = 0; h < f.hidden; ++h) {
      double exact = 0, magnitude = 0, hiOnly = 0;
      for (int64_t k = 0; k < f.inter; ++k) {
        float a = act[r * f.inter + k];
        double weight = weightToFloat(w2[h * f.inter + k]);
        exact += double(a) * weight;
        magnitude += std::fabs(double(a) * weight);
        hiOnly += weightToFloat(Bf16{splitActivation(a).hi}) * weight;
      }
      double bound =
          (std::ldexp(1.0, -16) + 2 * f.inter * std::ldexp(1.0, -24)) *
          magnitude;
      double error = std::fabs(y[r * f.hidden + h] - exact);
      ASSERT_LE(error, bound) << r << ", " << h;
      worst = std::max(worst, error / magnitude);
      worstHiOnly =
          std::max(worstHiOnly, std::fabs(hiOnly - exact) / magnitude);
    }
  // Within the split's own term: the accumulation adds little.
  EXPECT_LT(worst, std::ldexp(1.0, -16));
  // The data tell the split from rounding the activations to bf16 once,
  // which is beyond the bound here.
  EXPECT_GT(worstHiOnly, 4 * std::ldexp(1.0, -16));
}

TEST(ExpertLogic, TieredExpertsRunThroughTheTableInRounds) {
  uint32_t seed = 400;
  for (Net net : everyForm()) {
    SCOPED_TRACE(describe(net, kWeightF32));
    net.init(6, 20, 36, ++seed, kWeightF32);
    std::vector<int64_t> rows = {3, 0, 75, 9, 1, 12};
    // One round of all, rounds of two, one expert a round (in place).
    checkExperts<float>(net, rows, 2, ++seed, false, {{0, 1, 2, 3, 4, 5}});
    checkExperts<float>(net, rows, 2, ++seed, false, {{2, 5}, {0, 3}, {1, 4}});
    checkExperts<float>(net, rows, 0, ++seed, true,
                        {{5}, {4}, {3}, {2}, {1}, {0}});
  }
  Net net;
  net.f.hasW3 = true;
  net.biases = true;
  net.init(4, 24, 40, ++seed, kWeightBf16);
  checkExperts<Bf16>(net, {70, 2, 0, 9}, 1, ++seed, true, {{0, 3}, {1, 2}});
  net.init(4, 24, 40, ++seed, kWeightF16);
  checkExperts<F16>(net, {70, 2, 0, 9}, 1, ++seed, false, {{1, 2}, {3, 0}});
}

TEST(ExpertLogic, EmulatedExpertsInPlaceAndWithOnlyPadding) {
  Net net;
  net.f.hasW3 = true;
  net.biases = true;
  net.init(4, 16, 24, 9, kWeightF32);
  checkExperts<float>(net, {3, 70, 0, 20}, 5, 10, /*inPlace=*/true);
  checkExperts<float>(net, {0, 0, 0, 0}, 4, 11);
  checkExperts<float>(net, {0, 0, 1, 0}, 0, 12);
}

/// Emulates a SharedExpert step on T tokens against the CPU backend.
template <typename W>
void checkShared(const Net &net, int64_t T, const std::vector<float> *gate,
                 std::vector<int64_t> gateShape, uint32_t seed) {
  int64_t H = net.f.hidden;
  std::vector<float> x = randomFloats(T * H, seed);
  std::vector<std::optional<Value>> inputs = {f32({T, H}, x)};
  for (auto &w : net.inputs(/*lead=*/false))
    inputs.push_back(std::move(w));
  inputs.push_back(gate ? std::optional<Value>(f32(gateShape, *gate))
                        : std::nullopt);
  auto cpu = runStep(OpKind::SharedExpert, inputs, {{DType::F32, {T, H}}},
                     net.attributes());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::vector<W> storage[3];
  ExpertWeights<W> w = weightsOf<W>(net, storage);
  std::vector<float> gpu = emulateStep(net.f, w, x, T, nullptr,
                                       gate ? gate->data() : nullptr, false);
  expectNear(f32({T, H}, gpu), {T, H}, (*cpu)[0].as<float>(), tolerance<W>());
}

TEST(ExpertLogic, EmulatedSharedExpertMatchesTheCpuBackend) {
  Net qwen; // SwiGLU with w3, out_in, sigmoid-gated.
  qwen.f.hasW3 = true;
  qwen.init(1, 16, 40, 23, kWeightBf16);
  std::vector<float> gate = randomFloats(16, 24);
  checkShared<Bf16>(qwen, 1, &gate, {1, 16}, 25);
  checkShared<Bf16>(qwen, 100, &gate, {16, 1}, 26);
  checkShared<Bf16>(qwen, 8, &gate, {16}, 27);
  Net deepseek; // Fused concatenated gate/up, in_out, biases, no gate.
  deepseek.f.glu = kGluConcatenated;
  deepseek.f.inOut = true;
  deepseek.biases = true;
  deepseek.init(1, 16, 24, 28, kWeightF16);
  checkShared<F16>(deepseek, 1, nullptr, {}, 29);
  checkShared<F16>(deepseek, 70, nullptr, {}, 30);
  checkShared<F16>(deepseek, 0, nullptr, {}, 31);
}

TEST(ExpertLogic, ReferenceElementIsTheDotProductOfItsColumns) {
  // The per-element reference agrees with the tiled path (both from the
  // same weight loads): one expert, wide tiles.
  Net net;
  net.f.activation = kActGeluTanhGlu;
  net.f.glu = kGluInterleaved;
  net.biases = true;
  net.init(2, 20, 12, 40, kWeightF32);
  std::vector<float> storage[3];
  ExpertWeights<float> w = weightsOf<float>(net, storage);
  int64_t N = 30;
  std::vector<float> x = randomFloats(N * 20, 41);
  std::vector<int64_t> offsets = {0, 0, N};
  std::vector<float> act(N * 12, NAN);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t u = 0; u < 12; ++u)
      referenceElement(FirstProjection<float>{net.f, w, 1, 0, act.data()},
                       x.data(), 20, r, u);
  std::vector<int32_t> wide = prefixOf(offsets.data(), 2, N, kRegimeWide);
  std::vector<float> tiled(N * 12, NAN);
  emulateWide(wide, offsets.data(), N, net.f, 24, [&](const ExpertTile &t) {
    return std::tuple(
        FirstProjection<float>{net.f, w, t.expert, t.row, tiled.data()},
        x.data() + t.row * 20, int64_t(20));
  });
  expectNear(f32({N, 12}, tiled), {N, 12}, act, 1e-5f);
}

} // namespace
} // namespace moert::testing
