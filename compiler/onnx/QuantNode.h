//===- QuantNode.h - reading a quantized contrib node -----------*- C++ -*-===//
//
// What the importers of onnxruntime's quantized com.microsoft ops share
// (ContribQuant.cpp, ContribQMoE.cpp): a node's constant inputs, read and
// checked against the element types and shapes its schema allows, and the
// weights built from them, with errors that name the node and the input or
// attribute.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_QUANTNODE_H
#define MOEC_COMPILER_ONNX_QUANTNODE_H

#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/Model.h"
#include "compiler/onnx/OpImport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace moec::onnx_import {

/// The data of one constant input, in the model's byte order.
struct ConstantInput {
  mlir::RankedTensorType type;
  /// The bytes, exactly the tensor's size; `storage` where a splat was
  /// expanded.
  llvm::ArrayRef<char> view;
  std::vector<char> storage;

  llvm::ArrayRef<char> getBytes() const {
    return storage.empty() ? view : llvm::ArrayRef<char>(storage);
  }
  const uint8_t *getUInt8() const {
    return reinterpret_cast<const uint8_t *>(getBytes().data());
  }
  /// Copies the elements of an f32 or i32 tensor (a copy: a constant's bytes
  /// carry no alignment promise beyond their own).
  template <typename T> std::vector<T> getElements() const {
    llvm::ArrayRef<char> bytes = getBytes();
    std::vector<T> elements(bytes.size() / sizeof(T));
    if (!elements.empty())
      std::memcpy(elements.data(), bytes.data(), elements.size() * sizeof(T));
    return elements;
  }
};

/// Formats a shape as "[2, 3]" for messages.
std::string formatShape(llvm::ArrayRef<int64_t> shape);

/// The element types quantized ops take, by the names messages give them.
enum class ElementKind { UInt8, Float32, Int32, E8M0 };
inline constexpr llvm::StringLiteral kElementKindNames[] = {
    "uint8", "float32", "int32", "float8e8m0"};

/// Whether `type` is an element type of `kind`.
bool hasElementKind(mlir::Type type, ElementKind kind);

/// Returns the moe.constant whose bytes `value` holds in row-major order: a
/// constant, or one reshaped (Reshape, Flatten, Squeeze, Unsqueeze, Identity:
/// onnxruntime-genai's builder feeds a tied lm_head's MatMulNBits weight to
/// GatherBlockQuantized through a Reshape); null otherwise.
moe::ConstantOp getConstantData(mlir::Value value);

/// One node of a quantized op being imported: its inputs and attributes, read
/// and checked with errors that name the node and the input or attribute.
class QuantNode {
public:
  QuantNode(NodeImporter &node) : node(node) {}

  mlir::Value operand(unsigned input) const {
    auto &operands = node.getOperands();
    return input < operands.size() ? operands[input] : mlir::Value();
  }
  llvm::StringRef getInputName(unsigned input) const {
    return node.getImport().inputs[input].name;
  }
  std::string getOpName() const {
    return (kMicrosoftDomain + "." + node.getImport().opType).str();
  }
  mlir::InFlightDiagnostic emitInputError(unsigned input) const {
    return mlir::emitError(
        getSubjectLoc(node.getLoc(), "input '" + getInputName(input) + "'"));
  }
  mlir::InFlightDiagnostic emitAttributeError(llvm::StringRef name) const {
    return node.emitAttributeError(name);
  }

  /// Refuses any attribute not in `known` (onnxruntime refuses them too).
  mlir::LogicalResult
  checkAttributeNames(llvm::ArrayRef<llvm::StringRef> known) const {
    for (mlir::NamedAttribute attr : node.getAttributes())
      if (!llvm::is_contained(known, attr.getName().getValue()))
        return emitAttributeError(attr.getName().getValue())
               << "is not an attribute of " << getOpName();
    return mlir::success();
  }
  /// Reads INT attribute `name`, `defaultValue` when absent (required when
  /// there is none).
  mlir::FailureOr<int64_t> readInt(llvm::StringRef name,
                                   std::optional<int64_t> defaultValue) const {
    mlir::Attribute attr = node.getAttributes().get(name);
    if (!attr && defaultValue)
      return *defaultValue;
    if (!attr)
      return emitAttributeError(name) << "is required";
    auto value = llvm::dyn_cast<mlir::IntegerAttr>(attr);
    if (!value)
      return emitAttributeError(name) << "must be an INT";
    return value.getInt();
  }
  /// Checks block size attribute `name`: a power of 2, at least 16.
  mlir::LogicalResult checkBlockSize(llvm::StringRef name,
                                     int64_t value) const {
    if (value >= 16 && llvm::isPowerOf2_64(uint64_t(value)))
      return mlir::success();
    return emitAttributeError(name)
           << "must be a power of 2 and at least 16, got " << value;
  }
  /// Checks bits attribute `name`: 4 or 8 (the widths moec imports).
  mlir::LogicalResult checkBits(llvm::StringRef name, int64_t value) const {
    if (value == 4 || value == 8)
      return mlir::success();
    return emitAttributeError(name)
           << "must be 4 or 8 (moec imports 4- and 8-bit weights), got "
           << value;
  }

  /// Reads constant input `input` of one of the element `kinds`.
  mlir::FailureOr<ConstantInput>
  readConstant(unsigned input, llvm::ArrayRef<ElementKind> kinds) const;
  /// Checks that constant input `input` has one of the `allowed` shapes.
  mlir::LogicalResult
  checkShape(unsigned input, const ConstantInput &constant,
             llvm::ArrayRef<llvm::SmallVector<int64_t>> allowed,
             llvm::StringRef meaning) const;

  /// Creates an f32 moe.constant of `shape` whose elements `fill` writes,
  /// named after input `fromInput` (the quantized weight).
  mlir::FailureOr<mlir::Value>
  createWeight(llvm::ArrayRef<int64_t> shape, unsigned fromInput,
               llvm::function_ref<void(float *)> fill);

  /// Creates a moe.block_quantized_constant of the f32 `shape` over the
  /// constants of inputs `codes`, `scales` and `zeroPoints` (packed uint8;
  /// ~0u: none), `bits`-bit codes in blocks of `blockSize`, the transpose of
  /// the stored matrix when `transposed`, whose products may use int8
  /// activations when `accuracyLevel` is 4 (onnxruntime's meaning).
  mlir::FailureOr<mlir::Value>
  createQuantizedWeight(llvm::ArrayRef<int64_t> shape, unsigned codes,
                        unsigned scales, unsigned zeroPoints, int64_t bits,
                        int64_t blockSize, bool transposed,
                        int64_t accuracyLevel);

  /// Verifies `created` (in order) and binds `result` to the node's output;
  /// on failure erases them, leaving no half-built IR.
  mlir::LogicalResult finish(llvm::ArrayRef<mlir::Operation *> created,
                             mlir::Value result);

  NodeImporter &node;
};

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_QUANTNODE_H
