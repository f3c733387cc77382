//===- image_processor.cpp - Pixel patches from image files ---------------===//
//
// moert::loadImages and loadEncodedImages (moert/vision.h): PNG (libpng)
// and JPEG (libjpeg) files or bytes decoded to 8-bit RGB, then the Qwen2-VL
// family's image processor rule as docs/multimodal.md ("Images") documents it,
// with the plan's ImageProcessor fields (from the model's
// preprocessor_config.json):
//
// * smart resize: each side to the nearest multiple of f = patch_size *
//   spatial merge (ties to even), then scaled down (floor) or up (ceil) by
//   the same factor so that the pixel count lies in [min_pixels,
//   max_pixels]; a resize is bicubic (a = -0.5, antialiased when shrinking)
//   with PIL's separable, fixed-point 8-bit passes, horizontal first;
// * rescale: f32(u8 * rescale_factor) in double; normalise: (x - mean[c]) /
//   std[c] in f32;
// * patchify: the merge blocks in raster order, in each its patches in
//   raster order, each patch (channel, temporal copy, row, column).
//
//===----------------------------------------------------------------------===//

#include "generate/grid_rule.h"
#include "generate/image_tiles.h"
#include "moert/vision.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <tuple>

#ifdef MOERT_HAVE_PNG
#include <png.h>
#endif
#ifdef MOERT_HAVE_JPEG
#include <csetjmp>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#endif

namespace moert {
namespace {

using detail::Rgb;

/// Largest image file read, and largest decoded image (pixels, side).
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 28;
constexpr uint64_t kMaxPixels = uint64_t{1} << 26;
constexpr uint32_t kMaxSide = uint32_t{1} << 15;

absl::Status bad(const std::string &path, const std::string &what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status checkSize(const std::string &path, uint64_t width,
                       uint64_t height) {
  if (width < 1 || height < 1 || width > kMaxSide || height > kMaxSide ||
      width * height > kMaxPixels)
    return bad(path, absl::StrCat("image of ", width, " x ", height,
                                  " pixels is too large (at most ", kMaxSide,
                                  " a side and ", kMaxPixels, " pixels)"));
  return absl::OkStatus();
}

#ifdef MOERT_HAVE_PNG
absl::StatusOr<Rgb> decodePng(const std::string &path, const uint8_t *data,
                              size_t size, const char *kind) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size))
    return bad(
        path, absl::StrCat("not a valid PNG ", kind, " (", image.message, ")"));
  absl::Status sized = checkSize(path, image.width, image.height);
  if (!sized.ok()) {
    png_image_free(&image);
    return sized;
  }
  image.format = PNG_FORMAT_RGBA;
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, rgba.data(), 0, nullptr))
    return bad(
        path, absl::StrCat("not a valid PNG ", kind, " (", image.message, ")"));
  // transformers' convert_rgb: alpha composited onto white.
  Rgb rgb{image.width, image.height, {}};
  rgb.pixels.resize(static_cast<size_t>(rgb.width) * rgb.height * 3);
  for (size_t i = 0, n = rgb.pixels.size() / 3; i < n; ++i) {
    unsigned alpha = rgba[4 * i + 3];
    for (int c = 0; c < 3; ++c)
      rgb.pixels[3 * i + c] = static_cast<uint8_t>(
          (rgba[4 * i + c] * alpha + 255 * (255 - alpha) + 127) / 255);
  }
  return rgb;
}
#endif

#ifdef MOERT_HAVE_JPEG
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void onJpegError(j_common_ptr info) {
  auto *error = reinterpret_cast<JpegError *>(info->err);
  (*info->err->format_message)(info, error->message);
  std::longjmp(error->jump, 1);
}

absl::StatusOr<Rgb> decodeJpeg(const std::string &path, const uint8_t *data,
                               size_t size, const char *kind) {
  jpeg_decompress_struct info;
  JpegError error;
  info.err = jpeg_std_error(&error.mgr);
  error.mgr.error_exit = onJpegError;
  error.mgr.output_message = [](j_common_ptr) {};
  Rgb rgb;
  absl::Status sized;
  if (setjmp(error.jump)) {
    jpeg_destroy_decompress(&info);
    return bad(path, absl::StrCat("not a valid JPEG ", kind, " (",
                                  error.message, ")"));
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, data, static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  sized = checkSize(path, info.image_width, info.image_height);
  if (!sized.ok()) {
    jpeg_destroy_decompress(&info);
    return sized;
  }
  info.out_color_space = JCS_RGB;
  jpeg_start_decompress(&info);
  rgb.width = info.output_width;
  rgb.height = info.output_height;
  rgb.pixels.resize(static_cast<size_t>(rgb.width) * rgb.height * 3);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = rgb.pixels.data() +
                   static_cast<size_t>(info.output_scanline) * rgb.width * 3;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return rgb;
}
#endif

/// The image bytes (PNG or JPEG, by their signature) as 8-bit RGB; `name`
/// (a path, or how the caller names an image in memory) heads each error,
/// which calls the bytes a `kind` ("file" or "image").
absl::StatusOr<Rgb> decode(const std::string &name, const uint8_t *data,
                           size_t size, const char *kind) {
  if (size > kMaxFileBytes)
    return bad(name,
               absl::StrCat("image of ", size, " bytes is too large (at most ",
                            kMaxFileBytes, ")"));
  static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 8 && std::memcmp(data, png, 8) == 0) {
#ifdef MOERT_HAVE_PNG
    return decodePng(name, data, size, kind);
#else
    return bad(name, "a PNG image, but this runtime was built without "
                     "libpng (scripts/setup.sh installs libpng-dev)");
#endif
  }
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
#ifdef MOERT_HAVE_JPEG
    return decodeJpeg(name, data, size, kind);
#else
    return bad(name, "a JPEG image, but this runtime was built without "
                     "libjpeg (scripts/setup.sh installs libjpeg62-turbo-dev)");
#endif
  }
  return bad(name,
             absl::StrCat(size ? "" : "empty: ", "not a PNG or JPEG ", kind));
}

/// The file at `path`, whole.
absl::StatusOr<std::vector<uint8_t>> readFile(const std::string &path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file)
    return bad(path, "cannot open the image file");
  std::streamoff length = file.tellg();
  if (length < 0 || static_cast<uint64_t>(length) > kMaxFileBytes)
    return bad(path, absl::StrCat("image file of ", length,
                                  " bytes is too large (at most ",
                                  kMaxFileBytes, ")"));
  std::vector<uint8_t> bytes(static_cast<size_t>(length));
  file.seekg(0);
  if (!file.read(reinterpret_cast<char *>(bytes.data()), length))
    return bad(path, "cannot read the image file");
  return bytes;
}

// --------------------------------------------------------------------------
// Resize: PIL's bicubic (a = -0.5) resampling of 8-bit images.
// --------------------------------------------------------------------------

constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic(double x) {
  const double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0)
    return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0)
    return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

/// PIL's bicubic taps, at 22 bits.
detail::ResampleTaps computeTaps(int64_t in, int64_t out) {
  double scale = static_cast<double>(in) / out;
  double filterScale = std::max(scale, 1.0);
  double support = 2.0 * filterScale;
  detail::ResampleTaps taps;
  taps.precision = kPrecisionBits;
  for (int64_t i = 0; i < out; ++i) {
    double center = (i + 0.5) * scale;
    int64_t lo =
        std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t hi =
        std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    std::vector<double> k;
    double sum = 0;
    for (int64_t x = lo; x < hi; ++x) {
      double w = bicubic((x - center + 0.5) / filterScale);
      k.push_back(w);
      sum += w;
    }
    std::vector<int32_t> fixed;
    for (double w : k) {
      if (sum != 0)
        w /= sum;
      double s = w * (1 << kPrecisionBits);
      fixed.push_back(static_cast<int32_t>(w < 0 ? s - 0.5 : s + 0.5));
    }
    taps.first.push_back(lo);
    taps.weights.push_back(std::move(fixed));
  }
  return taps;
}

/// PIL's bicubic resize: the horizontal pass, then the vertical one.
Rgb resize(const Rgb &in, int64_t width, int64_t height) {
  return detail::resizeSeparable(in, width, height, computeTaps);
}

/// transformers' smart_resize: the size a (height, width) image becomes.
/// GLM-4V's (`frames` > 0) first scales a side under `factor` up to it
/// (both sides by one factor, truncated) and bounds the pixels of `frames`
/// frames; Qwen2-VL's (`frames` 0) neither.
absl::StatusOr<std::pair<int64_t, int64_t>>
smartResize(const std::string &path, int64_t height, int64_t width,
            int64_t factor, int64_t minPixels, int64_t maxPixels,
            int64_t frames) {
  if (frames > 0 && (height < factor || width < factor)) {
    double scale = std::max(static_cast<double>(factor) / height,
                            static_cast<double>(factor) / width);
    height = static_cast<int64_t>(height * scale);
    width = static_cast<int64_t>(width * scale);
  }
  int64_t count = std::max<int64_t>(frames, 1);
  if (static_cast<double>(std::max(height, width)) / std::min(height, width) >
      200)
    return bad(path, absl::StrCat("image of ", width, " x ", height,
                                  " pixels has an aspect ratio over 200"));
  // Python's round(): ties to even (the default rounding mode).
  int64_t h = static_cast<int64_t>(
                  std::nearbyint(static_cast<double>(height) / factor)) *
              factor;
  int64_t w = static_cast<int64_t>(
                  std::nearbyint(static_cast<double>(width) / factor)) *
              factor;
  if (count * h * w > maxPixels) {
    double beta =
        std::sqrt(static_cast<double>(count * height * width) / maxPixels);
    h = std::max(factor,
                 static_cast<int64_t>(std::floor(height / beta / factor)) *
                     factor);
    w = std::max(factor,
                 static_cast<int64_t>(std::floor(width / beta / factor)) *
                     factor);
  } else if (count * h * w < minPixels) {
    double beta = std::sqrt(static_cast<double>(minPixels) /
                            static_cast<double>(count * height * width));
    h = static_cast<int64_t>(std::ceil(height * beta / factor)) * factor;
    w = static_cast<int64_t>(std::ceil(width * beta / factor)) * factor;
  }
  return std::make_pair(h, w);
}

/// Llama 4's tiles of `count` images, f32 [tiles, 3, S, S], the images'
/// tiles in order (image_tiles.cpp); each image's canvas to `canvases`
/// where given.
absl::StatusOr<std::vector<NamedTensor>>
tiles(const ImageProcessorDesc &proc, size_t count,
      const std::function<absl::StatusOr<Rgb>(size_t)> &decodeImage,
      std::vector<ImageTileCanvas> *canvases) {
  int64_t s = proc.patchSize, total = 0;
  std::vector<float> values;
  for (size_t k = 0; k < count; ++k) {
    MOERT_ASSIGN_OR_RETURN(Rgb image, decodeImage(k));
    ImageTileCanvas canvas = detail::appendImageTiles(proc, image, values);
    total += canvas.tiles();
    if (canvases)
      canvases->push_back(canvas);
  }
  NamedTensor pixels{proc.pixelInput, DType::F32, {total, 3, s, s}, {}};
  pixels.bytes.assign(reinterpret_cast<const uint8_t *>(values.data()),
                      reinterpret_cast<const uint8_t *>(values.data()) +
                          values.size() * 4);
  std::vector<NamedTensor> out;
  out.push_back(std::move(pixels));
  return out;
}

/// The pixel patches and grids of `count` images, image k decoded by
/// `decodeImage(k)` and named `nameOf(k)` in errors; Llama 4's canvases
/// to `canvases` where given.
absl::StatusOr<std::vector<NamedTensor>>
preprocess(const MultimodalDesc &mm, size_t count,
           const std::function<absl::StatusOr<Rgb>(size_t)> &decodeImage,
           const std::function<std::string(size_t)> &nameOf,
           std::vector<ImageTileCanvas> *canvases) {
  if (canvases)
    canvases->clear();
  if (!mm.hasImageProcessor)
    return absl::InvalidArgumentError(
        "the plan has no image processor: compile it from a folder with the "
        "model's preprocessor_config.json, or give --vision-input");
  const ImageProcessorDesc &proc = mm.imageProcessor;
  if (proc.llama4Tiles)
    return tiles(proc, count, decodeImage, canvases);
  int64_t patch = proc.patchSize, temporal = proc.temporalPatchSize;
  int64_t merge = mm.spatialMergeSize;
  int64_t width = 3 * temporal * patch * patch;
  NamedTensor pixels{proc.pixelInput, DType::F32, {0, width}, {}};
  NamedTensor grid{mm.imageGrid, DType::I64, {0, 3}, {}};
  std::vector<float> values;
  std::vector<int64_t> grids;
  for (size_t k = 0; k < count; ++k) {
    std::string path = nameOf(k);
    MOERT_ASSIGN_OR_RETURN(Rgb image, decodeImage(k));
    int64_t h = image.height, w = image.width;
    if (proc.doResize) {
      MOERT_ASSIGN_OR_RETURN(auto size,
                             smartResize(path, h, w, patch * merge,
                                         proc.minPixels, proc.maxPixels,
                                         proc.glm4vResize ? temporal : 0));
      std::tie(h, w) = size;
      if (h != image.height || w != image.width)
        image = resize(image, w, h);
    } else if (h % (patch * merge) || w % (patch * merge)) {
      return bad(path, absl::StrCat("image of ", w, " x ", h,
                                    " pixels: without do_resize both sides "
                                    "must be multiples of patch_size * "
                                    "merge_size = ",
                                    patch * merge));
    }
    // Rescaled and normalised planes, channel-major.
    std::vector<float> planes(3 * h * w);
    for (int c = 0; c < 3; ++c) {
      float mean = proc.doNormalize ? static_cast<float>(proc.imageMean[c]) : 0;
      float std = proc.doNormalize ? static_cast<float>(proc.imageStd[c]) : 1;
      for (int64_t i = 0; i < h * w; ++i) {
        uint8_t v = image.pixels[3 * i + c];
        float x = proc.doRescale ? static_cast<float>(v * proc.rescaleFactor)
                                 : static_cast<float>(v);
        planes[c * h * w + i] = proc.doNormalize ? (x - mean) / std : x;
      }
    }
    int64_t gh = h / patch, gw = w / patch;
    size_t start = values.size();
    values.resize(start + static_cast<size_t>(gh * gw * width));
    float *out = values.data() + start;
    for (int64_t bh = 0; bh < gh / merge; ++bh)
      for (int64_t bw = 0; bw < gw / merge; ++bw)
        for (int64_t mh = 0; mh < merge; ++mh)
          for (int64_t mw = 0; mw < merge; ++mw)
            for (int c = 0; c < 3; ++c)
              for (int64_t t = 0; t < temporal; ++t)
                for (int64_t ph = 0; ph < patch; ++ph)
                  for (int64_t pw = 0; pw < patch; ++pw) {
                    int64_t y = (bh * merge + mh) * patch + ph;
                    int64_t x = (bw * merge + mw) * patch + pw;
                    *out++ = planes[(c * h + y) * w + x];
                  }
    grids.insert(grids.end(), {1, gh, gw});
  }
  pixels.shape[0] = static_cast<int64_t>(values.size()) / width;
  pixels.bytes.assign(reinterpret_cast<const uint8_t *>(values.data()),
                      reinterpret_cast<const uint8_t *>(values.data()) +
                          values.size() * 4);
  grid.shape[0] = static_cast<int64_t>(count);
  grid.bytes.assign(reinterpret_cast<const uint8_t *>(grids.data()),
                    reinterpret_cast<const uint8_t *>(grids.data()) +
                        grids.size() * 8);
  std::vector<NamedTensor> out;
  out.push_back(std::move(pixels));
  out.push_back(std::move(grid));
  return out;
}

} // namespace

absl::StatusOr<std::vector<NamedTensor>>
loadImages(const MultimodalDesc &mm, const std::vector<std::string> &paths,
           std::vector<ImageTileCanvas> *canvases) {
  return preprocess(
      mm, paths.size(),
      [&](size_t k) -> absl::StatusOr<Rgb> {
        MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFile(paths[k]));
        return decode(paths[k], bytes.data(), bytes.size(), "file");
      },
      [&](size_t k) { return paths[k]; }, canvases);
}

absl::StatusOr<std::vector<NamedTensor>>
loadEncodedImages(const MultimodalDesc &mm,
                  const std::vector<EncodedImage> &images,
                  std::vector<ImageTileCanvas> *canvases) {
  for (const EncodedImage &image : images)
    if (!image.data && image.size)
      return absl::InvalidArgumentError(
          absl::StrCat(image.name, ": the image's data is null"));
  return preprocess(
      mm, images.size(),
      [&](size_t k) {
        return decode(images[k].name, images[k].data, images[k].size, "image");
      },
      [&](size_t k) { return images[k].name; }, canvases);
}

} // namespace moert
