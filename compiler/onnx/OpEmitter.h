//===- OpEmitter.h - building graph ops from handlers -----------*- C++ -*-===//
//
// Handlers that expand one node into several graph ops (the contrib ops of
// onnxruntime-genai's exports) build them through OpEmitter, which infers
// and verifies each op as the node importer does.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_OPEMITTER_H
#define MOEC_COMPILER_ONNX_OPEMITTER_H

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace moec::onnx_import {

/// Builds graph ops by name, inferring their result types and verifying
/// them as the node importer does, so that an input of the wrong shape is an
/// error at the node rather than an assertion. After the first failure every
/// later op is skipped (its operands are null) and `failed()` is true.
class OpEmitter {
public:
  OpEmitter(mlir::OpBuilder &builder, mlir::Location loc)
      : builder(builder), loc(loc) {}

  bool failed() const { return hasFailed; }

  /// Creates `name` on `operands` with `attrs`; `segments` sets the operand
  /// segments of an op with optional operands. Returns its results, or an
  /// empty vector after a failure.
  llvm::SmallVector<mlir::Value>
  emitAll(llvm::StringRef name, llvm::ArrayRef<mlir::Value> operands,
          llvm::ArrayRef<mlir::NamedAttribute> attrs = {},
          llvm::ArrayRef<int32_t> segments = {});

  /// The first result of emitAll.
  mlir::Value emit(llvm::StringRef name, llvm::ArrayRef<mlir::Value> operands,
                   llvm::ArrayRef<mlir::NamedAttribute> attrs = {},
                   llvm::ArrayRef<int32_t> segments = {}) {
    llvm::SmallVector<mlir::Value> results =
        emitAll(name, operands, attrs, segments);
    return results.empty() ? mlir::Value() : results.front();
  }

  mlir::NamedAttribute attr(llvm::StringRef name, mlir::Attribute value) {
    return builder.getNamedAttr(name, value);
  }
  mlir::NamedAttribute i64Attr(llvm::StringRef name, int64_t value) {
    return attr(name, builder.getI64IntegerAttr(value));
  }

  /// A constant tensor of `shape` holding `values` (i64).
  mlir::Value i64(llvm::ArrayRef<int64_t> values,
                  llvm::ArrayRef<int64_t> shape) {
    auto type = mlir::RankedTensorType::get(shape, builder.getI64Type());
    return moe::ConstantOp::create(builder, loc, type,
                                   mlir::DenseElementsAttr::get(type, values));
  }
  mlir::Value i64Vector(llvm::ArrayRef<int64_t> values) {
    return i64(values, {int64_t(values.size())});
  }
  mlir::Value i64Scalar(int64_t value) { return i64({value}, {}); }
  mlir::Value f32Scalar(float value) {
    auto type = mlir::RankedTensorType::get({}, builder.getF32Type());
    return moe::ConstantOp::create(builder, loc, type,
                                   mlir::DenseElementsAttr::get(type, value));
  }

  mlir::Value binary(llvm::StringRef name, mlir::Value lhs, mlir::Value rhs) {
    return emit(name, {lhs, rhs});
  }
  mlir::Value slice(mlir::Value data, int64_t start, int64_t end,
                    int64_t axis) {
    return emit("moe.slice",
                {data, i64Vector({start}), i64Vector({end}), i64Vector({axis})},
                {}, {1, 1, 1, 1, 0});
  }
  mlir::Value reshape(mlir::Value data, llvm::ArrayRef<int64_t> shape) {
    return emit("moe.reshape", {data, i64Vector(shape)});
  }
  mlir::Value transpose(mlir::Value data, llvm::ArrayRef<int64_t> perm) {
    return emit("moe.transpose", {data},
                {attr("perm", builder.getDenseI64ArrayAttr(perm))});
  }
  mlir::Value unsqueeze(mlir::Value data, llvm::ArrayRef<int64_t> axes) {
    return emit("moe.unsqueeze", {data, i64Vector(axes)});
  }
  mlir::Value concat(llvm::ArrayRef<mlir::Value> inputs, int64_t axis) {
    return emit("moe.concat", inputs, {i64Attr("axis", axis)});
  }
  mlir::Value castTo(mlir::Value input, mlir::Type elementType) {
    return emit("moe.cast", {input},
                {attr("to", mlir::TypeAttr::get(elementType))});
  }
  mlir::Value dim(mlir::Value input, int64_t index) {
    return emit("moe.dim", {input}, {i64Attr("index", index)});
  }

private:
  mlir::OpBuilder &builder;
  mlir::Location loc;
  bool hasFailed = false;
};

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_OPEMITTER_H
