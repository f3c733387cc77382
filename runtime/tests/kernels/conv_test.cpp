//===- conv_test.cpp - Conv against a direct f64 convolution --------------===//

#include "format/plan_writer.h"
#include "plan_bytes.h"
#include "test_util.h"

#include <algorithm>

namespace moert::testing {
namespace {

using fb::OpKind;

/// A Conv case: shapes and attributes as ONNX's, with explicit begin and end
/// pads per spatial axis.
struct ConvCase {
  std::vector<int64_t> x, w;
  std::vector<int64_t> strides, dilations, padBegin, padEnd;
  int64_t group = 1;
  bool bias = false;
};

/// The output sizes of `c`.
std::vector<int64_t> outputShape(const ConvCase &c) {
  std::vector<int64_t> shape{c.x[0], c.w[0]};
  for (size_t i = 0; i + 2 < c.x.size(); ++i) {
    int64_t extent = c.dilations[i] * (c.w[2 + i] - 1) + 1;
    shape.push_back(
        (c.x[2 + i] + c.padBegin[i] + c.padEnd[i] - extent) / c.strides[i] + 1);
  }
  return shape;
}

/// The convolution by its definition, in f64: every output element sums
/// over its group's channels and the kernel positions inside the input.
std::vector<float> referenceConv(const ConvCase &c, const std::vector<float> &x,
                                 const std::vector<float> &w,
                                 const std::vector<float> &b) {
  std::vector<int64_t> out = outputShape(c);
  int spatial = static_cast<int>(c.x.size()) - 2;
  int64_t outSize = 1, inSize = 1, kSize = 1;
  for (int i = 0; i < spatial; ++i) {
    outSize *= out[2 + i];
    inSize *= c.x[2 + i];
    kSize *= c.w[2 + i];
  }
  int64_t cg = c.w[1], mg = c.w[0] / c.group;
  std::vector<float> y;
  for (int64_t n = 0; n < c.x[0]; ++n)
    for (int64_t m = 0; m < c.w[0]; ++m)
      for (int64_t o = 0; o < outSize; ++o) {
        std::vector<int64_t> pos(spatial);
        for (int i = spatial - 1, rest = static_cast<int>(o); i >= 0; --i) {
          pos[i] = rest % out[2 + i];
          rest /= static_cast<int>(out[2 + i]);
        }
        double sum = c.bias ? b[m] : 0.0;
        for (int64_t ci = 0; ci < cg; ++ci) {
          int64_t channel = (m / mg) * cg + ci;
          for (int64_t k = 0; k < kSize; ++k) {
            int64_t rest = k, xOffset = 0, wOffset = 0;
            bool inside = true;
            std::vector<int64_t> kp(spatial);
            for (int i = spatial - 1; i >= 0; --i) {
              kp[i] = rest % c.w[2 + i];
              rest /= c.w[2 + i];
            }
            for (int i = 0; i < spatial; ++i) {
              int64_t at = pos[i] * c.strides[i] - c.padBegin[i] +
                           kp[i] * c.dilations[i];
              inside = inside && at >= 0 && at < c.x[2 + i];
              xOffset = xOffset * c.x[2 + i] + at;
              wOffset = wOffset * c.w[2 + i] + kp[i];
            }
            if (inside)
              sum += double(x[(n * c.x[1] + channel) * inSize + xOffset]) *
                     w[(m * cg + ci) * kSize + wOffset];
          }
        }
        y.push_back(static_cast<float>(sum));
      }
  return y;
}

fb::AttrsUnion convAttrs(const ConvCase &c) {
  fb::ConvAttrsT a;
  a.strides = c.strides;
  a.dilations = c.dilations;
  a.pads = c.padBegin;
  a.pads.insert(a.pads.end(), c.padEnd.begin(), c.padEnd.end());
  a.group = c.group;
  return attrs(a);
}

void expectMatchesReference(const ConvCase &c, fb::AttrsUnion attributes,
                            int threads = 2) {
  int64_t xCount = numelOf(c.x), wCount = numelOf(c.w);
  std::vector<float> x = randomFloats(xCount, 41), w = randomFloats(wCount, 42),
                     b = randomFloats(c.w[0], 43);
  std::vector<std::optional<Value>> inputs{f32(c.x, x), f32(c.w, w)};
  if (c.bias)
    inputs.push_back(f32({c.w[0]}, b));
  std::vector<int64_t> shape = outputShape(c);
  Value y = run1(OpKind::Conv, inputs, {DType::F32, dimsOf(shape)},
                 std::move(attributes), threads);
  expectNear(y, shape, referenceConv(c, x, w, b), 1e-5f);
}

TEST(Conv, PatchEmbedding3dReadsEachPatchWhole) {
  // Qwen-VL's patch embedding: [patches, 3, 2, 8, 8] by a kernel of the
  // same extent, stride = kernel, one output position per patch.
  ConvCase c{{5, 3, 2, 8, 8}, {16, 3, 2, 8, 8}, {2, 8, 8},
             {1, 1, 1},       {0, 0, 0},        {0, 0, 0}};
  expectMatchesReference(c, convAttrs(c));
  c.bias = true;
  expectMatchesReference(c, convAttrs(c), 1);
}

TEST(Conv, PatchEmbedding2dTilesTheImage) {
  // A ViT/Llama 4 patch embedding: a 12x8 image in 4x4 patches, no bias.
  ConvCase c{{2, 3, 12, 8}, {6, 3, 4, 4}, {4, 4}, {1, 1}, {0, 0}, {0, 0}};
  expectMatchesReference(c, convAttrs(c));
}

TEST(Conv, PaddedStridedDilatedGrouped2d) {
  ConvCase c{{2, 4, 7, 6}, {6, 2, 3, 2}, {2, 1}, {1, 2},
             {1, 0},       {2, 1},       2,      true};
  expectMatchesReference(c, convAttrs(c));
}

TEST(Conv, DepthwiseOneDimensional) {
  ConvCase c{{3, 4, 9}, {4, 1, 3}, {1}, {1}, {1}, {1}, 4, true};
  expectMatchesReference(c, convAttrs(c));
}

TEST(Conv, ThreeDimensionalWithOverlap) {
  ConvCase c{{1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {1, 2, 1}, {1, 1, 2},
             {0, 1, 1},       {1, 0, 1},       1,         true};
  expectMatchesReference(c, convAttrs(c));
}

TEST(Conv, DefaultsAreStrideOneNoPadding) {
  ConvCase c{{1, 2, 5, 5}, {3, 2, 3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}};
  fb::ConvAttrsT a;
  expectMatchesReference(c, attrs(a));
}

TEST(Conv, AutoPadSameUpperAndLower) {
  // Input 7, kernel 4, stride 2: 4 outputs, 3 pads in all; the odd one goes
  // to the end (SAME_UPPER) or the beginning (SAME_LOWER).
  for (auto [mode, begin, end] : {std::tuple{fb::AutoPad::SameUpper, 1, 2},
                                  std::tuple{fb::AutoPad::SameLower, 2, 1}}) {
    ConvCase c{{2, 3, 7}, {2, 3, 4}, {2}, {1}, {begin}, {end}};
    fb::ConvAttrsT a;
    a.strides = {2};
    a.auto_pad = mode;
    expectMatchesReference(c, attrs(a));
  }
  ConvCase valid{{2, 3, 7}, {2, 3, 4}, {2}, {1}, {0}, {0}};
  fb::ConvAttrsT a;
  a.strides = {2};
  a.pads = {5, 5};
  a.auto_pad = fb::AutoPad::Valid;
  expectMatchesReference(valid, attrs(a));
}

TEST(Conv, ChannelsThatDoNotMatchTheWeightAreAnError) {
  fb::ConvAttrsT a;
  auto r = runStep(
      OpKind::Conv,
      {f32({1, 3, 4}, randomFloats(12, 1)), f32({2, 2, 2}, randomFloats(8, 2))},
      {{DType::F32, {1, 2, 3}}}, attrs(a));
  EXPECT_THAT(r.status(), StatusHas("3 channels"));
}

TEST(Conv, KernelLargerThanThePaddedInputIsAnError) {
  fb::ConvAttrsT a;
  auto r =
      runStep(OpKind::Conv, {f32({1, 1, 2}, {1, 2}), f32({1, 1, 3}, {1, 1, 1})},
              {{DType::F32, {1, 1, 1}}}, attrs(a));
  EXPECT_THAT(r.status(), StatusHas("kernel spans 3"));
}

TEST(Conv, NeedsFormat114) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int32_t x = s.addTensor("x", DType::F32, dimsOf({1, 2, 4}));
  int32_t w = s.addTensor("w", DType::F32, dimsOf({3, 2, 2}));
  int32_t y = s.addTensor("y", DType::F32, dimsOf({1, 3, 3}));
  s.addInput(x);
  s.addInput(w);
  s.addOutput(y);
  fb::ConvAttrsT a;
  s.addStep(OpKind::Conv, "conv", {x, w}, {y}, attrs(a));
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), detail::kFormatVersionMinorVision);
  std::vector<uint8_t> older =
      rewrite(*bytes, [](detail::FileHeader &header, auto &) {
        header.versionMinor = detail::kFormatVersionMinorBatchRows;
      });
  EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
              StatusHas("step 0 is a Conv step, which needs format 1.14, but "
                        "the file is version 1.13"));
}

} // namespace
} // namespace moert::testing
