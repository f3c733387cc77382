//===- image_tiles.h - Llama 4's image tiles ---------------------*- C++
//-*-===//
//
// Llama 4's image processor rule (docs/multimodal.md, "Llama 4's tiles";
// image_tiles.cpp says it in full): an 8-bit RGB image to the pixel values
// of its tiles, f32 [tiles, 3, S, S].
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_GENERATE_IMAGE_TILES_H
#define MOERT_SRC_GENERATE_IMAGE_TILES_H

#include "moert/moert.h"
#include "moert/vision.h"

#include <cstdint>
#include <vector>

namespace moert::detail {

/// An 8-bit RGB image, rows of width * 3 bytes.
struct Rgb {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;
};

/// Where an image of height x width goes: its canvas of tiles and the size
/// it is resized to inside it (top left, the rest padded).
struct TileCanvas {
  int64_t canvasHeight = 0, canvasWidth = 0;
  int64_t height = 0, width = 0;
};

/// The canvas and resized size of a height x width image for tiles of
/// side `tile`, at most `maxTiles` of them.
TileCanvas chooseTileCanvas(int64_t height, int64_t width, int64_t tile,
                            int64_t maxTiles, bool toMaxCanvas);

/// One axis of a resize: per output sample its first input sample and
/// fixed-point weights of `precision` bits.
struct ResampleTaps {
  std::vector<int64_t> first;
  std::vector<std::vector<int32_t>> weights;
  int precision = 0;
};

/// The taps of an axis of `in` samples resized to `out`.
using ResampleTapsFn = ResampleTaps (*)(int64_t in, int64_t out);

/// A separable 8-bit resize by `taps`: each output the rounded, clamped
/// integer sum of its taps; the horizontal pass, then the vertical one
/// (PIL's and torch's order), each only where the size changes.
Rgb resizeSeparable(const Rgb &in, int64_t width, int64_t height,
                    ResampleTapsFn taps);

/// torch's antialiased bilinear resize of an 8-bit image (its int16
/// fixed-point passes, width first).
Rgb resizeBilinear(const Rgb &in, int64_t width, int64_t height);

/// Appends the image's tiles, f32 [tiles, 3, S, S] with S =
/// `proc.patchSize`, to `out` (the canvas's tiles in raster order, then the
/// whole image as a global tile where there are several); returns the
/// canvas.
ImageTileCanvas appendImageTiles(const ImageProcessorDesc &proc,
                                 const Rgb &image, std::vector<float> &out);

} // namespace moert::detail

#endif // MOERT_SRC_GENERATE_IMAGE_TILES_H
