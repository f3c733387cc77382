//===- grid_rule_test.cpp - The multimodal grid rule ----------------------===//
//
// computeGridTensors against values worked out by hand from the rule
// (docs/multimodal.md, "Vision inputs from the grid"), and its errors for
// grids it cannot place.
//
//===----------------------------------------------------------------------===//

#include "generate/grid_rule.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <numeric>

namespace moert::detail {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Tests a 1 x 2 x 4 grid with merge 2: the patches come in merge blocks, and
// a 3 x 3 table is sampled bilinearly with aligned corners (row 1 of 2 maps
// to table row 2; column 1 of 4 to 2/3 between columns 0 and 1).
TEST(GridRule, BilinearAlignedCorners) {
  GridRuleDesc rule{3, false, true};
  auto got = computeGridTensors(rule, 2, {{1, 2, 4}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->patches, 8);
  EXPECT_EQ(got->taps, 4);
  EXPECT_THAT(got->segments, ElementsAre(0, 8));
  EXPECT_THAT(got->positions,
              ElementsAre(0, 0, 0, 1, 1, 0, 1, 1, 0, 2, 0, 3, 1, 2, 1, 3));
  // Patch 3 is (1, 1): rows (2, 2) with weights (1, 0), columns (0, 1)
  // with weights (1/3, 2/3) in f32.
  std::vector<int64_t> indices(got->indices.begin() + 12,
                               got->indices.begin() + 16);
  EXPECT_THAT(indices, ElementsAre(6, 7, 6, 7));
  float column = 1.0f * 2.0f / 3.0f;
  std::vector<float> weights(got->weights.begin() + 12,
                             got->weights.begin() + 16);
  EXPECT_THAT(weights, ElementsAre(1.0f - column, column, 0.0f, 0.0f));
}

// Tests that bicubic taps are 16 a patch whose weights sum to one, and that
// each frame of a video-like grid is its own segment with the same
// positions.
TEST(GridRule, BicubicAndFrames) {
  GridRuleDesc rule{4, true, false};
  auto got = computeGridTensors(rule, 2, {{2, 2, 2}, {1, 4, 2}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->taps, 16);
  EXPECT_THAT(got->segments, ElementsAre(0, 4, 8, 16));
  ASSERT_EQ(got->positions.size(), 32u);
  EXPECT_TRUE(std::equal(got->positions.begin(), got->positions.begin() + 8,
                         got->positions.begin() + 8));
  for (int64_t p = 0; p < got->patches; ++p) {
    float sum = std::accumulate(got->weights.begin() + 16 * p,
                                got->weights.begin() + 16 * (p + 1), 0.0f);
    EXPECT_NEAR(sum, 1.0f, 1e-5f) << "patch " << p;
  }
  for (int64_t index : got->indices)
    EXPECT_TRUE(index >= 0 && index < 16) << index;
}

// Tests that a rule without a table gives positions and segments only.
TEST(GridRule, NoTable) {
  auto got = computeGridTensors({}, 1, {{1, 1, 3}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->taps, 0);
  EXPECT_TRUE(got->indices.empty());
  EXPECT_THAT(got->positions, ElementsAre(0, 0, 0, 1, 0, 2));
}

// Tests the refused grids: a side that is no multiple of the merge, an
// empty one, and more patches than fit the segment bounds.
TEST(GridRule, Errors) {
  GridRuleDesc rule{8, false, true};
  EXPECT_THAT(computeGridTensors(rule, 2, {{1, 3, 4}}).status().message(),
              HasSubstr("image 0 has grid 1 x 3 x 4; the grid rule needs t, "
                        "h, w >= 1 and h, w multiples of the spatial merge 2"));
  EXPECT_FALSE(computeGridTensors(rule, 2, {{0, 2, 2}}).ok());
  EXPECT_THAT(
      computeGridTensors(rule, 2, {{1, 2, 2}, {1 << 20, 1 << 10, 1 << 10}})
          .status()
          .message(),
      HasSubstr("image 1 has grid 1048576 x 1024 x 1024: more patches than "
                "2147483648"));
}

} // namespace
} // namespace moert::detail
