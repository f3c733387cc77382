//===- numpy_interop.cpp - Errors and numpy arrays for the bindings -------===//

#include "numpy_interop.h"

#include "absl/strings/str_cat.h"

namespace py = pybind11;

PyObject *&errorType() {
  static PyObject *type = nullptr;
  return type;
}

/// Raises `type` with `message`.
[[noreturn]] void raise(PyObject *type, const std::string &message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

/// Raises the Python form of a failed `status`: a wrong argument becomes
/// ValueError (or KeyError for an unknown name, TypeError for a dtype), the
/// rest moert.Error.
[[noreturn]] void raiseStatus(const absl::Status &status) {
  std::string message(status.message());
  switch (status.code()) {
  case absl::StatusCode::kNotFound:
    raise(PyExc_KeyError, message);
  case absl::StatusCode::kInvalidArgument:
  case absl::StatusCode::kOutOfRange:
  case absl::StatusCode::kFailedPrecondition:
    raise(PyExc_ValueError, message);
  default:
    raise(errorType(), message);
  }
}

void check(const absl::Status &status) {
  if (!status.ok())
    raiseStatus(status);
}

/// The numpy dtype of `dtype`; bf16 has none, and a tensor of it cannot
/// cross (`what` names it).
py::dtype numpyDtype(moert::DType dtype, const std::string &what) {
  switch (dtype) {
  case moert::DType::F32:
    return py::dtype::of<float>();
  case moert::DType::F16:
    return py::dtype("float16");
  case moert::DType::I64:
    return py::dtype::of<int64_t>();
  case moert::DType::I32:
    return py::dtype::of<int32_t>();
  case moert::DType::Bool:
    return py::dtype::of<bool>();
  case moert::DType::I8:
    return py::dtype::of<int8_t>();
  case moert::DType::BF16:
    break;
  }
  raise(PyExc_TypeError,
        absl::StrCat(what, " has dtype ", moert::dtypeName(dtype),
                     ", which numpy has no type for"));
}

// Sizes come from moert's dtypes, never from pybind11's itemsize() or
// nbytes(): Debian's pybind11 (2.10) reads them from the dtype struct of
// numpy 1, whose layout numpy 2 changed. The array struct itself (data,
// shape, strides, flags) is the same in both.

/// Whether the runtime may read `array`'s memory (of `dtype` elements) as it
/// is: C-contiguous and aligned to its element size.
bool isPlain(const py::array &array, moert::DType dtype) {
  return (array.flags() & py::array::c_style) &&
         reinterpret_cast<uintptr_t>(array.data()) % moert::dtypeSize(dtype) ==
             0;
}

/// Bytes of `array` of `dtype` elements.
size_t bytesOf(const py::array &array, moert::DType dtype) {
  size_t bytes = moert::dtypeSize(dtype);
  for (py::ssize_t d = 0; d < array.ndim(); ++d)
    bytes *= static_cast<size_t>(array.shape(d));
  return bytes;
}

/// The C-order strides of `shape` for `dtype` elements.
std::vector<py::ssize_t> stridesOf(const std::vector<py::ssize_t> &shape,
                                   moert::DType dtype) {
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(moert::dtypeSize(dtype));
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}
