//===- GraphOpsSupport.h - graph op implementation helpers ------*- C++ -*-===//
//
// Shape and constant helpers shared by GraphOps*.cpp: axis normalisation,
// broadcasting, reading constant operands, and the symbolic view of integer
// shape vectors that type inference and folding look through.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECTS_MOE_GRAPHOPSSUPPORT_H
#define MOEC_DIALECTS_MOE_GRAPHOPSSUPPORT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Value.h"
#include "mlir/Support/LLVM.h"

#include <optional>
#include <string>

namespace moec::moe {

/// Folding never materialises a non-splat constant with more elements than
/// this: shape arithmetic is tiny, and a multi-GB weight must never be copied
/// by the compiler.
constexpr int64_t kMaxFoldElements = 1024;

/// Resolves a possibly negative `axis` against `rank` into [0, rank), or
/// emits "<what> <axis> is out of range for rank <rank>" and fails.
mlir::FailureOr<int64_t> normalizeAxis(std::optional<mlir::Location> loc,
                                       llvm::StringRef what, int64_t axis,
                                       int64_t rank);

/// The type of operand `name` as a ranked tensor. Inference runs before the
/// op is verified (the importer builds ops from it), so it cannot assume the
/// operand constraints hold.
mlir::FailureOr<mlir::RankedTensorType>
getRankedType(std::optional<mlir::Location> loc, mlir::Value value,
              llvm::StringRef name);

/// Formats a shape for diagnostics as "[?, 64]".
std::string formatShape(llvm::ArrayRef<int64_t> shape);

/// Numpy-broadcasts `lhs` and `rhs` into `result`. A dynamic size broadcasts
/// against a static one to the static one unless that is 1.
mlir::LogicalResult broadcastShapes(std::optional<mlir::Location> loc,
                                    llvm::ArrayRef<int64_t> lhs,
                                    llvm::ArrayRef<int64_t> rhs,
                                    llvm::SmallVectorImpl<int64_t> &result);

/// The elements of `attr` when it is a DenseElementsAttr small enough to
/// compute with (a splat, or at most kMaxFoldElements elements); null for
/// anything else, in particular `dense_resource` weights.
mlir::DenseElementsAttr getFoldableElements(mlir::Attribute attr);

/// The elements of an integer tensor `value` defined by a foldable constant,
/// as int64 (sign- or zero-extended by the element type).
std::optional<llvm::SmallVector<int64_t>> getConstantInts(mlir::Value value);

/// Like getConstantInts for a value holding exactly one element.
std::optional<int64_t> getConstantInt(mlir::Value value);

/// Reads the int64 elements of a foldable integer attribute.
std::optional<llvm::SmallVector<int64_t>> getInts(mlir::Attribute attr);

/// One element of an integer shape vector as inference sees it: a known
/// constant, the (possibly dynamic) size of dimension `dim` of `source`, or
/// unknown.
struct ShapeEntry {
  std::optional<int64_t> constant;
  mlir::Value source;
  int64_t dim = -1;

  static ShapeEntry ofConstant(int64_t value) { return {value, {}, -1}; }
  static ShapeEntry ofDim(mlir::Value source, int64_t dim);
  static ShapeEntry unknown() { return {}; }

  bool isConstant() const { return constant.has_value(); }
  bool isDim() const { return static_cast<bool>(source); }
  /// The size this entry denotes as a dimension: the constant, the static
  /// size of the source dimension, or ShapedType::kDynamic.
  int64_t getSize() const;
  /// True when both entries provably denote the same value.
  bool isSameAs(const ShapeEntry &other) const;
};

/// The elements of a 0-D or statically sized 1-D integer tensor, looking
/// through moe.constant, moe.dim, moe.shape, moe.size, moe.concat, moe.gather
/// and moe.slice with constant indices, rank changes of vectors, integer casts,
/// moe.where with a constant condition and scalar add/sub/mul/div. Elements it
/// cannot see through are unknown; fails only when the element count is not
/// static.
std::optional<llvm::SmallVector<ShapeEntry>> getShapeEntries(mlir::Value value);

/// The sizes a shape-vector operand asks for (ShapeEntry::getSize of each
/// element, so a constant -1 stays -1 and unknown elements are dynamic), or
/// nullopt when its element count is not static.
std::optional<llvm::SmallVector<int64_t>>
getShapeOperandSizes(mlir::Value shape);

/// The elements ONNX Slice takes along a dimension of static size `dim`:
/// returns the first index and the count, indices advancing by `step`
/// (non-zero). Negative `start`/`end` count from the back; both are clamped.
std::pair<int64_t, int64_t> getSliceRange(int64_t dim, int64_t start,
                                          int64_t end, int64_t step);

/// Checks that the 0/1 flag attribute `name` is 0 or 1.
mlir::LogicalResult verifyFlag(mlir::Operation *op, llvm::StringRef name,
                               int64_t value);

/// Checks, during inference, that the 0/1 flag attribute `name` is 0 or 1.
mlir::LogicalResult checkFlag(std::optional<mlir::Location> loc,
                              llvm::StringRef name, int64_t value);

/// The sizes a 1-D shape operand (ConstantOfShape, Expand, Tile) asks for;
/// fails when its length is not static or a known entry is negative.
mlir::FailureOr<llvm::SmallVector<int64_t>>
getShapeSizes(std::optional<mlir::Location> loc, mlir::Value shape,
              llvm::StringRef name);

/// Product of the sizes `a` and `b` where either may be dynamic.
int64_t mulDims(int64_t a, int64_t b);

/// Reads an I64 attribute through its (possibly defaulted) adaptor getter;
/// ODS returns them unsigned.
inline int64_t toSigned(uint64_t value) { return static_cast<int64_t>(value); }

/// The type of a typed attribute, or null.
inline mlir::Type getAttrType(mlir::Attribute attr) {
  auto typed = llvm::dyn_cast_or_null<mlir::TypedAttr>(attr);
  return typed ? typed.getType() : mlir::Type();
}

/// Folding: `value` when it can replace a result of type `type` as is.
mlir::OpFoldResult ifSameType(mlir::Value value, mlir::Type type);

/// Folding: the 0-D/1-D integer `result` as a constant when inference sees
/// through all of its elements (dims of static sizes, constants, shape
/// arithmetic); null otherwise.
mlir::Attribute foldShapeVector(mlir::Value result);

/// Builds the i64 constant holding `values` with `type`'s shape.
mlir::DenseElementsAttr getI64Elements(mlir::ShapedType type,
                                       llvm::ArrayRef<int64_t> values);

} // namespace moec::moe

#endif // MOEC_DIALECTS_MOE_GRAPHOPSSUPPORT_H
