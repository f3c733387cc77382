//===- numpy_interop.h - Errors and numpy arrays ----------------*- C++ -*-===//
//
// What the bindings' files share: how a runtime failure becomes a Python
// exception, and how a numpy array is read in place (zero copy) or refused.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_PYTHON_NUMPY_INTEROP_H
#define MOERT_PYTHON_NUMPY_INTEROP_H

#include "moert/moert.h"

#include "absl/status/status.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

/// `moert.Error`, the exception of every runtime failure that is not a
/// wrong argument (a plan that fails validation, a run that fails); set
/// when the module is imported.
PyObject *&errorType();

/// Raises `type` with `message`.
[[noreturn]] void raise(PyObject *type, const std::string &message);

/// Raises the Python form of a failed `status`: a wrong argument becomes
/// ValueError (or KeyError for an unknown name, TypeError for a dtype), the
/// rest moert.Error.
[[noreturn]] void raiseStatus(const absl::Status &status);

/// raiseStatus when `status` failed.
void check(const absl::Status &status);

/// The numpy dtype of `dtype`; bf16 has none, and a tensor of it cannot
/// cross (`what` names it).
pybind11::dtype numpyDtype(moert::DType dtype, const std::string &what);

/// Whether the runtime may read `array`'s memory (of `dtype` elements) as it
/// is: C-contiguous and aligned to its element size.
bool isPlain(const pybind11::array &array, moert::DType dtype);

/// Bytes of `array` of `dtype` elements.
size_t bytesOf(const pybind11::array &array, moert::DType dtype);

/// The C-order strides of `shape` for `dtype` elements.
std::vector<pybind11::ssize_t>
stridesOf(const std::vector<pybind11::ssize_t> &shape, moert::DType dtype);

#endif // MOERT_PYTHON_NUMPY_INTEROP_H
