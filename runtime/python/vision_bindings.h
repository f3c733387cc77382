//===- vision_bindings.h - Images of a multimodal plan ----------*- C++ -*-===//

#ifndef MOERT_PYTHON_VISION_BINDINGS_H
#define MOERT_PYTHON_VISION_BINDINGS_H

#include "moert/vision.h"

#include "absl/status/statusor.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <vector>

/// The pixel patches and grids of `images`, a sequence of PNG or JPEG files
/// (str or os.PathLike) or of their encoded bytes (bytes, bytearray or
/// another buffer; named "image K" in errors), all of one kind, by the
/// plan's image processor (moert::loadImages, moert::loadEncodedImages).
/// Raises TypeError for another kind of item. Llama 4's processor gives
/// each image's canvas to `canvases` where given.
absl::StatusOr<std::vector<moert::NamedTensor>>
loadPyImages(const moert::MultimodalDesc &mm, pybind11::handle images,
             std::vector<moert::ImageTileCanvas> *canvases = nullptr);

/// `tensor` (f32 or i64) as a numpy array of its own.
pybind11::object toNumpy(const moert::NamedTensor &tensor);

/// A multimodal plan's description for Python (Plan.multimodal): a dict of
/// image_token_id, spatial_merge_size, image_grid, max_images,
/// vision_inputs, image_processor (whether it takes images) and tile_size
/// (Llama 4's processor's tile side; 0 for other processors).
pybind11::dict multimodalInfo(const moert::MultimodalDesc &mm);

/// Generator.generate's vision inputs as one moert::VisionInputs, with the
/// arrays and images it views (valid while this lives).
struct PyVisionInputs {
  std::vector<pybind11::array> held;
  std::vector<moert::NamedTensor> loaded;
  moert::VisionInputs inputs;
};

/// `vision` (None, or a dict of name -> C-contiguous numpy array of float32,
/// int64, int32, bool or int8) and `images` (None, or what loadPyImages
/// takes, preprocessed by `plan`'s image processor) as PyVisionInputs.
/// Raises TypeError or ValueError naming a bad input, or an input that both
/// give.
PyVisionInputs collectVisionInputs(const moert::Plan &plan,
                                   pybind11::object vision,
                                   pybind11::object images);

#endif // MOERT_PYTHON_VISION_BINDINGS_H
