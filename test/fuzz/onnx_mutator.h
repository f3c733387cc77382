//===- onnx_mutator.h - structure-aware mutations of ONNX models -*- C++
//-*-===//
//
// The custom mutator of fuzz_onnx_import: most byte-level mutations of a
// serialized ModelProto break the protobuf encoding, and the importer then
// rejects the model at its first check. This mutator instead parses the
// model, makes one edit through protobuf reflection (a scalar field, a dim,
// an attribute, a value name, a repeated element deleted, duplicated or
// swapped, an initializer's dims with or without its data) and serializes
// it again, so that most mutants are valid protobuf and reach the validator,
// the importer and the passes.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TEST_FUZZ_ONNX_MUTATOR_H
#define MOEC_TEST_FUZZ_ONNX_MUTATOR_H

#include <cstddef>
#include <cstdint>

namespace moec::fuzz {

/// Mutates the serialized model in `data` (`size` bytes, room for
/// `maxSize`) in place and returns its new size, at most `maxSize`. Inputs
/// that do not parse as an onnx::ModelProto, and a tenth of those that do,
/// get libFuzzer's byte-level mutation instead. Deterministic in `seed`.
size_t mutateOnnxModel(uint8_t *data, size_t size, size_t maxSize,
                       unsigned seed);

/// Crosses two serialized models: copies nodes, initializers or value infos
/// of `data2` into the model of `data1`, writing the result to `out` (room
/// for `maxOutSize`). Returns its size, 0 when either does not parse.
size_t crossOverOnnxModels(const uint8_t *data1, size_t size1,
                           const uint8_t *data2, size_t size2, uint8_t *out,
                           size_t maxOutSize, unsigned seed);

} // namespace moec::fuzz

#endif // MOEC_TEST_FUZZ_ONNX_MUTATOR_H
