//===- vision_bindings.cpp - Images of a multimodal plan for Python -------===//
//
// What moert.load_images, Plan.multimodal and Generator.generate(images=)
// share: Python's paths or encoded bytes in, moert::NamedTensor out, and
// back as numpy arrays. moe-serve decodes a request's data URIs with them
// and reads the grids to place each image's tokens (docs/serving.md).
//
//===----------------------------------------------------------------------===//

#include "vision_bindings.h"
#include "numpy_interop.h"

#include "absl/strings/str_cat.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>

namespace py = pybind11;

absl::StatusOr<std::vector<moert::NamedTensor>>
loadPyImages(const moert::MultimodalDesc &mm, py::handle images,
             std::vector<moert::ImageTileCanvas> *canvases) {
  if (py::isinstance<py::str>(images) || py::isinstance<py::bytes>(images) ||
      !py::isinstance<py::sequence>(images)) {
    PyErr_SetString(PyExc_TypeError,
                    "images must be a list of paths or of encoded image "
                    "bytes");
    throw py::error_already_set();
  }
  py::module_ os = py::module_::import("os");
  std::vector<std::string> paths;
  // The bytes stay alive (and unmoved) in `buffers` while they are read.
  std::vector<py::buffer_info> buffers;
  std::vector<moert::EncodedImage> encoded;
  size_t k = 0;
  for (py::handle item : images) {
    if (py::isinstance<py::str>(item) || py::hasattr(item, "__fspath__")) {
      paths.push_back(py::str(os.attr("fspath")(item)));
    } else if (PyObject_CheckBuffer(item.ptr())) {
      buffers.push_back(py::reinterpret_borrow<py::buffer>(item).request());
      const py::buffer_info &b = buffers.back();
      encoded.push_back({absl::StrCat("image ", k),
                         static_cast<const uint8_t *>(b.ptr),
                         static_cast<size_t>(b.size * b.itemsize)});
    } else {
      PyErr_SetString(
          PyExc_TypeError,
          absl::StrCat("image ", k, " is a ",
                       std::string(py::str(item.get_type().attr("__name__"))),
                       "; give a path or the encoded bytes")
              .c_str());
      throw py::error_already_set();
    }
    ++k;
  }
  if (!paths.empty() && !encoded.empty())
    return absl::InvalidArgumentError(
        "images: give every image as a path or every image as bytes");
  if (!encoded.empty())
    return moert::loadEncodedImages(mm, encoded, canvases);
  return moert::loadImages(mm, paths, canvases);
}

py::object toNumpy(const moert::NamedTensor &tensor) {
  std::vector<py::ssize_t> shape(tensor.shape.begin(), tensor.shape.end());
  if (tensor.dtype == moert::DType::I64) {
    py::array_t<int64_t> out(shape);
    std::memcpy(out.mutable_data(), tensor.bytes.data(), tensor.bytes.size());
    return std::move(out);
  }
  py::array_t<float> out(shape);
  std::memcpy(out.mutable_data(), tensor.bytes.data(), tensor.bytes.size());
  return std::move(out);
}

py::dict multimodalInfo(const moert::MultimodalDesc &mm) {
  py::dict out;
  out["image_token_id"] = mm.imageTokenId;
  out["spatial_merge_size"] = mm.spatialMergeSize;
  out["image_grid"] = mm.imageGrid;
  out["max_images"] = mm.maxImages;
  out["vision_inputs"] = mm.givenInputs;
  out["image_processor"] = mm.hasImageProcessor;
  out["tile_size"] = mm.hasImageProcessor && mm.imageProcessor.llama4Tiles
                         ? mm.imageProcessor.patchSize
                         : int64_t{0};
  return out;
}

PyVisionInputs collectVisionInputs(const moert::Plan &plan, py::object vision,
                                   py::object images) {
  PyVisionInputs result;
  // A multimodal plan's vision inputs: name -> C-contiguous array, whose
  // dtype and shape the generator checks against the plan.
  if (!vision.is_none()) {
    if (!py::isinstance<py::dict>(vision))
      raise(PyExc_TypeError, "vision must be a dict of name -> numpy array");
    for (auto item : vision.cast<py::dict>()) {
      std::string name = py::str(item.first);
      std::string what = absl::StrCat("vision input '", name, "'");
      if (!py::isinstance<py::array>(item.second))
        raise(PyExc_TypeError, absl::StrCat(what, " is not a numpy.ndarray"));
      py::array array = py::reinterpret_borrow<py::array>(item.second);
      std::optional<moert::DType> dtype;
      for (moert::DType d :
           {moert::DType::F32, moert::DType::I64, moert::DType::I32,
            moert::DType::Bool, moert::DType::I8})
        if (array.dtype().equal(numpyDtype(d, what)))
          dtype = d;
      if (!dtype)
        raise(PyExc_TypeError,
              absl::StrCat(what, " has dtype ",
                           std::string(py::str(array.dtype())),
                           "; vision inputs are float32, int64, int32, "
                           "bool or int8"));
      if (!isPlain(array, *dtype))
        raise(PyExc_ValueError,
              absl::StrCat(what, " is not a C-contiguous, aligned array; "
                                 "pass numpy.ascontiguousarray() of it"));
      std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
      result.inputs.emplace_back(name,
                                 moert::TensorData{*dtype, shape, array.data(),
                                                   bytesOf(array, *dtype)});
      result.held.push_back(array);
    }
  }
  // Image files, preprocessed by the plan's image processor.
  if (!images.is_none()) {
    const moert::MultimodalDesc *mm = plan.multimodal();
    if (!mm)
      raise(PyExc_ValueError, "images need a multimodal plan");
    auto got = loadPyImages(*mm, images);
    check(got.status());
    result.loaded = *std::move(got);
    for (const moert::NamedTensor &t : result.loaded) {
      for (const auto &given : result.inputs)
        if (given.first == t.name)
          raise(PyExc_ValueError,
                absl::StrCat("vision input '", t.name,
                             "' is also what images gives; give one"));
      result.inputs.emplace_back(t.name, t.view());
    }
  }
  return result;
}
