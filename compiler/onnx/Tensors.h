//===- Tensors.h - ONNX tensors to elements attributes ----------*- C++ -*-===//
//
// Initializers and tensor attributes become ElementsAttrs. Small tensors (the
// shapes, axes and indices that canonicalisation folds) are copied into dense
// elements; weights become dense_resource blobs that reference the model's
// memory: inline raw_data inside the parsed protobuf, external data inside a
// memory-mapped file. The blob's deleter holds a share of that memory, so
// importing a model copies none of its weights.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_TENSORS_H
#define MOEC_COMPILER_ONNX_TENSORS_H

#include "mlir/IR/BuiltinAttributeInterfaces.h"
#include "mlir/IR/Location.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringMap.h"

#include <memory>
#include <optional>
#include <string>

namespace llvm {
class MemoryBuffer;
} // namespace llvm

namespace onnx {
class TensorProto;
} // namespace onnx

namespace moec::onnx_import {

struct OnnxModel;

/// Tensors with more elements than this are imported as dense_resource
/// weights; smaller ones as dense elements that folders can read.
constexpr int64_t kMaxDenseElements = 64;

/// Returns the name of ONNX TensorProto data type `dataType` ("FLOAT16").
std::string getDataTypeName(int32_t dataType);

/// Returns the size in bytes of one element of ONNX data type `dataType`, or
/// 0 when moec does not support the type.
int64_t getDataTypeSize(int32_t dataType);

/// Returns the element type of ONNX data type `dataType`, or a null type when
/// moec does not support it (strings, complex numbers, 8- and 4-bit floats).
/// With `widenFloat16`, FLOAT16 is f32 (ImportOptions::widenFloat16).
mlir::Type convertDataType(mlir::MLIRContext *context, int32_t dataType,
                           bool widenFloat16 = false);

/// Returns the byte size of a tensor of `shape` with `elementSize`-byte
/// elements, counting dynamic dimensions as 1, or std::nullopt if it does
/// not fit in 64 bits (a malicious file can declare such dims).
std::optional<int64_t> getStaticByteSize(llvm::ArrayRef<int64_t> shape,
                                         int64_t elementSize);

/// Reads the tensors of one model; maps each external data file once.
class TensorReader {
public:
  explicit TensorReader(const OnnxModel &model);
  ~TensorReader();

  /// FLOAT16 tensors read as f32 of the same values (exact): see
  /// ImportOptions::widenFloat16.
  void setWidenFloat16(bool widen) { widenFloat16 = widen; }
  /// Whether a FLOAT16 tensor was read as f32.
  bool hasWidenedFloat16() const { return widenedFloat16; }

  /// Checks everything about `tensor` that can be checked without reading its
  /// data: element type, dimensions, that the data holds exactly the declared
  /// number of bytes, and that external data lies inside the model's
  /// directory and within its file. Reports one error at `loc` on failure.
  mlir::LogicalResult validate(const onnx::TensorProto &tensor,
                               mlir::Location loc);

  /// Converts `tensor` to an elements attribute; weights become a
  /// dense_resource blob named after `resourceName` that references the
  /// model's memory. Reports one error at `loc` on failure.
  mlir::FailureOr<mlir::ElementsAttr> read(const onnx::TensorProto &tensor,
                                           mlir::Location loc,
                                           llvm::StringRef resourceName);

private:
  struct Layout;
  mlir::FailureOr<Layout> getLayout(const onnx::TensorProto &tensor,
                                    mlir::Location loc);
  mlir::FailureOr<std::string> resolveExternalFile(llvm::StringRef location,
                                                   mlir::Location loc);
  mlir::FailureOr<std::shared_ptr<llvm::MemoryBuffer>>
  mapFile(llvm::StringRef path, mlir::Location loc);

  const OnnxModel &model;
  llvm::StringMap<std::shared_ptr<llvm::MemoryBuffer>> mappedFiles;
  bool widenFloat16 = false;
  bool widenedFloat16 = false;
};

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_TENSORS_H
