//===- image_tiles_test.cpp - Llama 4's image tiles -----------------------===//
//
// The tile rule (generate/image_tiles.h) on cases whose values come from
// transformers 5.24's Llama4ImageProcessor and torchvision 0.29's resize
// (test/lib/vision_rules.py's llama4_preprocess, checked equal to them on
// 2,300 random images).
//
//===----------------------------------------------------------------------===//

#include "generate/image_tiles.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moert::detail {
namespace {

void expectCanvas(int64_t h, int64_t w, int64_t tile, int64_t maxTiles,
                  bool toMax, TileCanvas want) {
  TileCanvas got = chooseTileCanvas(h, w, tile, maxTiles, toMax);
  EXPECT_EQ(got.canvasHeight, want.canvasHeight) << h << " x " << w;
  EXPECT_EQ(got.canvasWidth, want.canvasWidth) << h << " x " << w;
  EXPECT_EQ(got.height, want.height) << h << " x " << w;
  EXPECT_EQ(got.width, want.width) << h << " x " << w;
}

TEST(ImageTiles, ChoosesTheProcessorsCanvas) {
  // Kept: one tile.
  expectCanvas(32, 32, 32, 4, false, {32, 32, 32, 32});
  // The least upscaling is the 1 x 3 canvas; a side is upscaled at most to
  // the tile, so the image is kept and padded.
  expectCanvas(20, 90, 32, 4, false, {32, 96, 20, 90});
  // Upscaled into 2 x 2 tiles.
  expectCanvas(70, 50, 32, 4, false, {64, 64, 64, 45});
  // A small image is upscaled to the tile.
  expectCanvas(10, 10, 32, 4, false, {32, 32, 32, 32});
  // No canvas upscales: the least downscaling.
  expectCanvas(7, 200, 32, 4, false, {32, 128, 4, 128});
  // The canvas's side in f32: 90 * f32(14 / 20) rounds to 63 in f32 (62
  // in double).
  expectCanvas(20, 90, 14, 9, false, {14, 70, 14, 63});
  // The largest canvas the image fits without distortion.
  expectCanvas(10, 10, 32, 4, true, {64, 64, 64, 64});
}

TEST(ImageTiles, ResizesAsTorch) {
  // torch's antialiased bilinear on uint8 (int16 weights): a ramp of 6
  // down to 4 and up to 9 columns.
  Rgb in{6, 1, {}};
  for (int x = 0; x < 6; ++x)
    for (int c = 0; c < 3; ++c)
      in.pixels.push_back(static_cast<uint8_t>(x * 50 + c));
  Rgb down = resizeBilinear(in, 4, 1);
  std::vector<uint8_t> want = {19,  20,  21,  89,  90,  91,
                               161, 162, 163, 231, 232, 233};
  EXPECT_EQ(down.pixels, want);
  Rgb up = resizeBilinear(in, 9, 1);
  ASSERT_EQ(up.pixels.size(), 27u);
  EXPECT_EQ(up.pixels[0], 0);
  EXPECT_EQ(up.pixels[26], 252);
}

TEST(ImageTiles, TilesPadsAndNormalisesInBfloat16) {
  ImageProcessorDesc proc;
  proc.patchSize = 2;
  proc.maxTiles = 2;
  proc.doResize = proc.doRescale = proc.doNormalize = true;
  proc.rescaleFactor = 1.0 / 255;
  proc.imageMean = {0.5, 0.5, 0.5};
  proc.imageStd = {0.5, 0.5, 0.5};
  // 2 x 3: a 1 x 2 canvas of 2 x 2 tiles, kept, one padded column, plus
  // the global tile.
  Rgb image{3, 2, std::vector<uint8_t>(18, 100)};
  std::vector<float> out;
  ImageTileCanvas canvas = appendImageTiles(proc, image, out);
  EXPECT_EQ(canvas.rows, 1);
  EXPECT_EQ(canvas.cols, 2);
  EXPECT_EQ(canvas.tiles(), 3);
  ASSERT_EQ(out.size(), 3u * 3 * 2 * 2);
  // bf16(bf16(bf16(100 / 255) - 0.5) / 0.5): 0.392156869 -> 0.392578125,
  // -0.107421875, -0.21484375.
  EXPECT_EQ(out[0], -0.21484375f);
  // Tile 1, channel 0: (0, 0) is the image's, (0, 1) padding: -1.
  EXPECT_EQ(out[12], -0.21484375f);
  EXPECT_EQ(out[13], -1.0f);
  // The global tile: the whole image squeezed to 2 x 2.
  EXPECT_EQ(out[24], -0.21484375f);
}

} // namespace
} // namespace moert::detail
