//===- mrope_positions_test.cpp - The multimodal position rule ------------===//
//
// computePromptPositions and fillDecodePositions against positions worked
// out by hand from the rule (docs/multimodal.md, "Positions"), and the
// errors for prompts whose image tokens the images do not match.
//
//===----------------------------------------------------------------------===//

#include "generate/mrope_positions.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moert::detail {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int64_t kImage = 9;
const std::vector<PositionRow> kRows = {PositionRow::Sequence,
                                        PositionRow::Time, PositionRow::Height,
                                        PositionRow::Width};

// Tests that text alone takes 0..n-1 in every row and advances by one.
TEST(MropePositions, TextOnly) {
  auto got = computePromptPositions({1, 2, 3}, kImage, {}, 2, kRows);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->values, ElementsAre(0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2));
  EXPECT_EQ(got->delta, 0);
  std::vector<int64_t> next;
  fillDecodePositions(3, 1, got->delta, kRows, next);
  EXPECT_THAT(next, ElementsAre(3, 3, 3, 3));
}

// Tests an image of 1 x 4 x 6 patches (merge 2: 2 x 3 tokens) between text:
// the image takes start + (0, row, column); the text after it continues
// from the largest position plus one; decoding adds the difference.
TEST(MropePositions, OneImage) {
  std::vector<int64_t> ids = {1,      2,      kImage, kImage, kImage,
                              kImage, kImage, kImage, 5};
  auto got = computePromptPositions(ids, kImage, {{1, 4, 6}}, 2, kRows);
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<int64_t> seq = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int64_t> t = {0, 1, 2, 2, 2, 2, 2, 2, 5};
  std::vector<int64_t> h = {0, 1, 2, 2, 2, 3, 3, 3, 5};
  std::vector<int64_t> w = {0, 1, 2, 3, 4, 2, 3, 4, 5};
  std::vector<int64_t> want;
  for (const auto *row : {&seq, &t, &h, &w})
    want.insert(want.end(), row->begin(), row->end());
  EXPECT_THAT(got->values, ElementsAreArray(want));
  // The next position is 6 at sequence index 9.
  EXPECT_EQ(got->delta, -3);
  std::vector<int64_t> next;
  fillDecodePositions(9, 2, got->delta, kRows, next);
  EXPECT_THAT(next, ElementsAre(9, 10, 6, 7, 6, 7, 6, 7));
}

// Tests two images in one run of image tokens, and three rows only.
TEST(MropePositions, TwoImagesThreeRows) {
  std::vector<int64_t> ids = {kImage, kImage, kImage, 1};
  std::vector<PositionRow> rows = {PositionRow::Time, PositionRow::Height,
                                   PositionRow::Width};
  auto got =
      computePromptPositions(ids, kImage, {{1, 2, 2}, {1, 2, 4}}, 2, rows);
  ASSERT_TRUE(got.ok()) << got.status();
  // Image 0: one token at 0; image 1 (1 x 2 tokens) from 1; text at 3.
  EXPECT_THAT(got->values, ElementsAre(0, 1, 1, 3, 0, 1, 1, 3, 0, 1, 2, 3));
  EXPECT_EQ(got->delta, 0);
}

// Tests that image tokens without an image, an image without tokens, a run
// of another length and the grids the rule cannot place are refused.
TEST(MropePositions, Errors) {
  std::vector<int64_t> two = {1, kImage, kImage, 2};
  auto status = [&](const std::vector<int64_t> &ids,
                    std::vector<ImageGrid> grids) {
    return computePromptPositions(ids, kImage, grids, 2, kRows).status();
  };
  EXPECT_THAT(std::string(status(two, {}).message()),
              HasSubstr("need one more image than the 0 given"));
  EXPECT_THAT(std::string(status({1, 2}, {{1, 2, 2}}).message()),
              HasSubstr("1 images given but the prompt's image tokens"));
  EXPECT_THAT(std::string(status(two, {{1, 4, 4}}).message()),
              HasSubstr("takes 4 image tokens but the prompt's run at 1 has "
                        "2 left"));
  EXPECT_THAT(std::string(status(two, {{2, 2, 4}}).message()),
              HasSubstr("still images (t = 1) only"));
  EXPECT_THAT(std::string(status(two, {{1, 3, 4}}).message()),
              HasSubstr("not made of whole 2 x 2 merged patches"));
  // A grid whose token count overflows int64 is too large, not wrapped.
  int64_t huge = int64_t{1} << 62;
  EXPECT_THAT(std::string(status(two, {{1, huge, huge}}).message()),
              HasSubstr("the prompt's run at 1 has 2 left"));
}

} // namespace
} // namespace moert::detail
