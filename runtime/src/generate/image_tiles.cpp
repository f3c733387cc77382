//===- image_tiles.cpp - Llama 4's image tiles ----------------------------===//
//
// transformers' Llama4ImageProcessor as a rule (docs/multimodal.md, "Llama
// 4's tiles"), with the plan's ImageProcessor fields: S = patch_size (the
// tile's side), max_tiles, resize_to_max_canvas.
//
// * canvas: the candidates are every r x c tiles with r * c <= max_tiles,
//   in the processor's order (counts from max_tiles down, each count's
//   factor pairs by ascending r, grouped by aspect ratio in first-seen
//   order); each scales the image by min(S r / h, S c / w) in f32; the pick
//   is the least scale >= 1 (the largest with resize_to_max_canvas), else
//   the largest, and among equal scales the least area, then the first;
// * resize: into the canvas without distortion, never upscaled past S a
//   side (unless resize_to_max_canvas), the scale computed in f32 where the
//   canvas's side bounds it (torch tensors) and in double where the
//   image's does (Python numbers), floored; torch's antialiased bilinear
//   resize of 8-bit images (int16 weights at the precision the largest
//   weight allows, width first);
// * pad with zeros to the canvas (right and bottom); rescale and normalise
//   in bfloat16, each operation rounded: bf16(bf16(bf16(x * rescale) -
//   bf16(mean)) / bf16(std));
// * split into S x S tiles in raster order; where there are several, the
//   whole image resized (distorted) to S x S is the last tile.
//
//===----------------------------------------------------------------------===//

#include "generate/image_tiles.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

namespace moert::detail {
namespace {

/// torch's bilinear taps: int16 weights at the most bits the largest
/// allows.
ResampleTaps bilinearTaps(int64_t in, int64_t out) {
  double scale = static_cast<double>(in) / out;
  double support = scale >= 1 ? scale : 1.0;
  double invScale = scale >= 1 ? 1.0 / scale : 1.0;
  std::vector<std::vector<double>> real(out);
  ResampleTaps axis;
  double largest = 0;
  for (int64_t i = 0; i < out; ++i) {
    double center = scale * (i + 0.5);
    int64_t lo =
        std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t hi =
        std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    double total = 0;
    for (int64_t j = 0; j < hi - lo; ++j) {
      double w =
          std::max(0.0, 1.0 - std::fabs((j + lo - center + 0.5) * invScale));
      real[i].push_back(w);
      total += w;
    }
    if (total != 0)
      for (double &w : real[i]) {
        w /= total;
        largest = std::max(largest, w);
      }
    axis.first.push_back(lo);
  }
  // The most bits under which the largest weight still fits int16.
  while (axis.precision < 22 &&
         static_cast<int>(0.5 + largest * (1 << (axis.precision + 1))) <
             (1 << 15))
    ++axis.precision;
  for (const std::vector<double> &row : real) {
    std::vector<int32_t> fixed;
    for (double w : row) {
      double v = w * (1 << axis.precision);
      fixed.push_back(static_cast<int32_t>(v < 0 ? v - 0.5 : v + 0.5));
    }
    axis.weights.push_back(std::move(fixed));
  }
  return axis;
}

/// One pass along an axis: `lines` lines of `size` samples `step` pixels
/// apart, lines `stride` apart, into `outSize` samples written alike
/// (`outStride` between lines).
void applyTaps(ResampleTapsFn taps, const uint8_t *in, int64_t size,
               int64_t step, int64_t stride, int64_t lines, int64_t outSize,
               uint8_t *out, int64_t outStride) {
  ResampleTaps axis = taps(size, outSize);
  for (int64_t line = 0; line < lines; ++line)
    for (int64_t i = 0; i < outSize; ++i)
      for (int c = 0; c < 3; ++c) {
        int64_t sum = int64_t{1} << (axis.precision - 1);
        const std::vector<int32_t> &k = axis.weights[i];
        for (size_t j = 0; j < k.size(); ++j)
          sum +=
              int64_t{
                  in[(line * stride + (axis.first[i] + j) * step) * 3 + c]} *
              k[j];
        out[(line * outStride + i * step) * 3 + c] = static_cast<uint8_t>(
            std::clamp<int64_t>(sum >> axis.precision, 0, 255));
      }
}

/// f32 rounded to bfloat16 (to nearest, ties to even), as f32.
float bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

/// Value `v` of channel `c`, rescaled and normalised as the processor does
/// (in bfloat16 where it does both).
float normalise(const ImageProcessorDesc &proc, int c, uint8_t v) {
  bool both = proc.doRescale && proc.doNormalize;
  float x = static_cast<float>(v);
  if (proc.doRescale) {
    x = x * static_cast<float>(proc.rescaleFactor);
    if (both)
      x = bf16(x);
  }
  if (proc.doNormalize) {
    float mean = static_cast<float>(proc.imageMean[c]);
    float std = static_cast<float>(proc.imageStd[c]);
    x = both ? bf16(bf16(x - bf16(mean)) / bf16(std)) : (x - mean) / std;
  }
  return x;
}

} // namespace

TileCanvas chooseTileCanvas(int64_t height, int64_t width, int64_t tile,
                            int64_t maxTiles, bool toMaxCanvas) {
  // The candidates in the processor's order.
  std::vector<std::pair<int64_t, int64_t>> order;
  std::map<std::pair<int64_t, int64_t>,
           std::vector<std::pair<int64_t, int64_t>>>
      groups;
  for (int64_t count = maxTiles; count >= 1; --count)
    for (int64_t rows = 1; rows <= count; ++rows) {
      if (count % rows)
        continue;
      int64_t cols = count / rows, g = std::gcd(rows, cols);
      auto [it, added] = groups.try_emplace({rows / g, cols / g});
      if (added)
        order.push_back(it->first);
      it->second.push_back({rows, cols});
    }
  auto scaleOf = [&](std::pair<int64_t, int64_t> c) {
    return std::min(static_cast<float>(c.first * tile) / height,
                    static_cast<float>(c.second * tile) / width);
  };
  bool up = false;
  float pick = 0;
  for (const auto &ratio : order)
    for (const auto &c : groups[ratio]) {
      float s = scaleOf(c);
      if (s >= 1 && (!up || (toMaxCanvas ? s > pick : s < pick)))
        pick = s, up = true;
      else if (!up && s > pick)
        pick = s;
    }
  std::pair<int64_t, int64_t> best{0, 0};
  for (const auto &ratio : order)
    for (const auto &c : groups[ratio])
      if (scaleOf(c) == pick &&
          (!best.first || c.first * c.second < best.first * best.second))
        best = c;
  TileCanvas out;
  out.canvasHeight = best.first * tile;
  out.canvasWidth = best.second * tile;
  // The target: the canvas's side (f32 arithmetic) or, where the image
  // fits under it, the image's side up to the tile (double).
  int64_t th = out.canvasHeight, tw = out.canvasWidth;
  bool f32h = true, f32w = true;
  if (!toMaxCanvas) {
    f32h = th < std::max(height, tile);
    f32w = tw < std::max(width, tile);
    th = std::min(std::max(height, tile), th);
    tw = std::min(std::max(width, tile), tw);
  }
  double sw = f32w ? static_cast<double>(static_cast<float>(tw) /
                                         static_cast<float>(width))
                   : static_cast<double>(tw) / width;
  double sh = f32h ? static_cast<double>(static_cast<float>(th) /
                                         static_cast<float>(height))
                   : static_cast<double>(th) / height;
  bool widthBound = (f32w || f32h)
                        ? static_cast<float>(sw) < static_cast<float>(sh)
                        : sw < sh;
  auto scaled = [](int64_t side, double s, bool f32) {
    return static_cast<int64_t>(
        f32 ? std::floor(static_cast<float>(side) * static_cast<float>(s))
            : std::floor(side * s));
  };
  if (widthBound) {
    out.height = std::min(scaled(height, sw, f32w), th);
    out.width = tw;
  } else {
    out.height = th;
    out.width = std::min(scaled(width, sh, f32h), tw);
  }
  out.height = std::max<int64_t>(out.height, 1);
  out.width = std::max<int64_t>(out.width, 1);
  return out;
}

Rgb resizeSeparable(const Rgb &in, int64_t width, int64_t height,
                    ResampleTapsFn taps) {
  Rgb cur = in;
  if (width != cur.width) {
    Rgb out{width, cur.height, std::vector<uint8_t>(width * cur.height * 3)};
    applyTaps(taps, cur.pixels.data(), cur.width, 1, cur.width, cur.height,
              width, out.pixels.data(), width);
    cur = std::move(out);
  }
  if (height != cur.height) {
    Rgb out{cur.width, height, std::vector<uint8_t>(cur.width * height * 3)};
    applyTaps(taps, cur.pixels.data(), cur.height, cur.width, 1, cur.width,
              height, out.pixels.data(), 1);
    cur = std::move(out);
  }
  return cur;
}

Rgb resizeBilinear(const Rgb &in, int64_t width, int64_t height) {
  return resizeSeparable(in, width, height, bilinearTaps);
}

ImageTileCanvas appendImageTiles(const ImageProcessorDesc &proc,
                                 const Rgb &image, std::vector<float> &out) {
  int64_t s = proc.patchSize;
  TileCanvas canvas = chooseTileCanvas(image.height, image.width, s,
                                       proc.maxTiles, proc.resizeToMaxCanvas);
  Rgb resized = resizeBilinear(image, canvas.width, canvas.height);
  int64_t rows = canvas.canvasHeight / s, cols = canvas.canvasWidth / s;
  // The tiles in raster order; the padding is 0 before normalising.
  for (int64_t tr = 0; tr < rows; ++tr)
    for (int64_t tc = 0; tc < cols; ++tc)
      for (int c = 0; c < 3; ++c)
        for (int64_t y = tr * s; y < (tr + 1) * s; ++y)
          for (int64_t x = tc * s; x < (tc + 1) * s; ++x) {
            uint8_t v = y < resized.height && x < resized.width
                            ? resized.pixels[(y * resized.width + x) * 3 + c]
                            : 0;
            out.push_back(normalise(proc, c, v));
          }
  if (rows * cols == 1)
    return {rows, cols};
  Rgb global = resizeBilinear(image, s, s);
  for (int c = 0; c < 3; ++c)
    for (int64_t i = 0; i < s * s; ++i)
      out.push_back(normalise(proc, c, global.pixels[i * 3 + c]));
  return {rows, cols};
}

} // namespace moert::detail
