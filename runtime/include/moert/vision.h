//===- vision.h - Vision inputs from images and grids -----------*- C++ -*-===//
//
// What a multimodal plan (format 1.22) computes for its vision stages
// besides running them (docs/multimodal.md): the grid rule's inputs
// (segment bounds, patch positions, interpolation taps) from the images'
// patch grids, and the pixel patches and grids of image files by the
// model's image processor rule.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_VISION_H
#define MOERT_VISION_H

#include "moert/generator.h"
#include "moert/moert.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moert {

/// A tensor that owns its bytes, under a graph input's name.
struct NamedTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  /// A view for VisionInputs; valid while this tensor lives.
  TensorData view() const { return {dtype, shape, bytes.data(), bytes.size()}; }
};

/// Where Llama 4's tile rule (docs/multimodal.md, "Llama 4's tiles") put
/// an image: a canvas of rows x cols tiles, then, where there are several,
/// the whole image as one more (the global tile). Llama4Processor lays out
/// the image's prompt tokens by it.
struct ImageTileCanvas {
  int64_t rows = 1, cols = 1;
  /// The image's tiles, the global one included.
  int64_t tiles() const { return rows * cols > 1 ? rows * cols + 1 : 1; }
};

/// The grid rule's inputs of every Vision stage of `mm` (the Grid* feeds)
/// for the images whose (t, h, w) patch grids `grid` holds, i64 [images, 3]:
/// one tensor per fed input, in stage and feed order. Fails, naming the
/// image, for a grid the rule cannot place (a size below 1, h or w not a
/// multiple of the spatial merge, more patches than 2^31).
absl::StatusOr<std::vector<NamedTensor>>
computeGridInputs(const MultimodalDesc &mm, const TensorData &grid);

/// Decodes the PNG or JPEG files `paths` (in the prompt's image order) and
/// preprocesses them by the plan's image processor (Qwen2-VL's rule:
/// smart resize, rescale, normalise, temporal repeat, patchify): the pixel
/// patches f32 [p, F] under the processor's pixel input and the grids i64
/// [images, 3] under the plan's image grid. Fails with one message naming
/// the file for a plan without an image processor, an unreadable,
/// truncated or unsupported file, an image larger than 2^26 pixels (or a
/// side over 2^15), or an aspect ratio over 200; also when this runtime
/// was built without the decoder the file needs (libpng, libjpeg).
///
/// Where the processor is Llama 4's (tiles), the pixel values are the
/// images' tiles f32 [tiles, 3, S, S] and `canvases`, when given, gets each
/// image's canvas (what its prompt's tokens are laid out by); it is left
/// empty for other processors.
absl::StatusOr<std::vector<NamedTensor>>
loadImages(const MultimodalDesc &mm, const std::vector<std::string> &paths,
           std::vector<ImageTileCanvas> *canvases = nullptr);

/// A PNG or JPEG image's encoded bytes in memory (valid while it is
/// loaded), and the name its errors give it.
struct EncodedImage {
  std::string name;
  const uint8_t *data = nullptr;
  size_t size = 0;
};

/// loadImages over images in memory instead of files (a server's data
/// URIs, the C API's buffers): the same rule and errors, each naming the
/// image by its `name`; empty or null data is an error too.
absl::StatusOr<std::vector<NamedTensor>>
loadEncodedImages(const MultimodalDesc &mm,
                  const std::vector<EncodedImage> &images,
                  std::vector<ImageTileCanvas> *canvases = nullptr);

/// `tensors` as VisionInputs (views valid while `tensors` lives).
VisionInputs asVisionInputs(const std::vector<NamedTensor> &tensors);

} // namespace moert

#endif // MOERT_VISION_H
