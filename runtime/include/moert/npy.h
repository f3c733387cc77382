//===- npy.h - Reading and writing NumPy .npy files -------------*- C++ -*-===//
//
// Library `moert_npy`: the .npy format (versions 1.0-3.0), little-endian,
// C order, dtypes f4, f2, i8, i4 and b1. Reading is strict: a malformed
// header, an unsupported dtype, Fortran order or a size that does not match
// the shape is an error naming the file, never a crash.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_NPY_H
#define MOERT_NPY_H

#include "moert/moert.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moert::npy {

struct Array {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

/// Reads the file at `path`.
absl::StatusOr<Array> read(const std::string &path);
/// Parses .npy bytes; `source` names them in errors.
absl::StatusOr<Array> parse(const uint8_t *bytes, size_t size,
                            const std::string &source);

/// The .npy encoding (version 1.0) of an array; `bytes` must match the shape.
std::vector<uint8_t> serialize(DType dtype, const std::vector<int64_t> &shape,
                               const void *data, size_t bytes);
/// Writes `serialize(...)` to `path`.
absl::Status write(const std::string &path, DType dtype,
                   const std::vector<int64_t> &shape, const void *data,
                   size_t bytes);

} // namespace moert::npy

#endif // MOERT_NPY_H
