//===- GraphImporter.h - ONNX graph to a func.func --------------*- C++ -*-===//
//
// Owns the context's builder and the module being built: graph inputs become
// the arguments of `func.func @main`, nodes are imported in topological order
// through the op table, graph outputs are returned.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_GRAPHIMPORTER_H
#define MOEC_COMPILER_ONNX_GRAPHIMPORTER_H

#include "compiler/onnx/Model.h"
#include "compiler/onnx/OpImport.h"
#include "compiler/onnx/Tensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace moec::onnx_import {

/// Imports one validated model into a new module.
class GraphImporter {
public:
  GraphImporter(const OnnxModel &model, mlir::MLIRContext *context);

  /// Builds the module; reports one error and returns null on failure.
  mlir::OwningOpRef<mlir::ModuleOp> import();

  const OnnxModel &getModel() const { return model; }
  mlir::OpBuilder &getBuilder() { return builder; }
  TensorReader &getTensors() { return tensors; }

  /// Returns the value named `name`, importing it first if it is an
  /// initializer not used before.
  mlir::FailureOr<mlir::Value> lookupValue(llvm::StringRef name);

  /// Binds `name` to `value`.
  void mapValue(llvm::StringRef name, mlir::Value value);

private:
  mlir::LogicalResult checkSupport();
  mlir::LogicalResult importSignature(mlir::ModuleOp module);
  mlir::LogicalResult importNode(int index);
  mlir::LogicalResult importOutputs();
  mlir::DictionaryAttr getValueInfoAttrs(const onnx::ValueInfoProto &value);

  const OnnxModel &model;
  mlir::MLIRContext *context;
  mlir::OpBuilder builder;
  TensorReader tensors;
  const OpImportTable &table;
  mlir::func::FuncOp func;
  llvm::StringMap<mlir::Value> values;
  llvm::StringMap<const onnx::TensorProto *> initializers;
};

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_GRAPHIMPORTER_H
