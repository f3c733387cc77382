//===- GraphImporter.h - ONNX graph to a func.func --------------*- C++ -*-===//
//
// Owns the context's builder and the module being built: graph inputs become
// the arguments of `func.func @main`, nodes are imported in topological order
// through the op table, graph outputs are returned. Subgraphs (the branches
// of If, ControlFlowOps.cpp) are imported into the same block, each in a
// scope of names of its own that can read every enclosing scope's.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_GRAPHIMPORTER_H
#define MOEC_COMPILER_ONNX_GRAPHIMPORTER_H

#include "compiler/onnx/Import.h"
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
  GraphImporter(const OnnxModel &model, mlir::MLIRContext *context,
                const ImportOptions &options = {});

  /// Builds the module; reports one error and returns null on failure.
  mlir::OwningOpRef<mlir::ModuleOp> import();

  const OnnxModel &getModel() const { return model; }
  mlir::OpBuilder &getBuilder() { return builder; }
  TensorReader &getTensors() { return tensors; }
  const ImportOptions &getOptions() const { return options; }

  /// The graph input `position_ids` that ImportOptions::positionInput adds:
  /// i64 [batch, sequence] with the dimensions (and their names) of the
  /// token ids, the i64 rank-2 input named input_ids (else the first i64
  /// rank-2 input). Added at the first call; null when the graph already
  /// has an input of that name or no token ids input.
  mlir::Value getPositionInput();

  /// ImportOptions::firstPrompt: `value` carries the token rows along
  /// `axis` (a present cache, which ONNX names by the total length); a
  /// graph output it becomes takes the token ids' dimension name there.
  void markTokenRows(mlir::Value value, int64_t axis) {
    tokenRowAxes[value] = axis;
  }

  /// Returns the value named `name` in the innermost scope that defines it,
  /// importing it first if it is an initializer not used before.
  mlir::FailureOr<mlir::Value> lookupValue(llvm::StringRef name);

  /// Binds `name` to `value` in the innermost scope.
  void mapValue(llvm::StringRef name, mlir::Value value);

  /// Imports the nodes of `subgraph` (validated, without inputs: a branch of
  /// If) at the builder's insertion point, in a scope of its own, and sets
  /// `outputs` to the values of its outputs. None of its names stays visible
  /// afterwards.
  mlir::LogicalResult
  importSubgraph(const onnx::GraphProto &subgraph,
                 llvm::SmallVectorImpl<mlir::Value> &outputs);

private:
  /// The names of one graph being imported: the main graph or a subgraph.
  struct Scope {
    /// How locations place the graph (SubgraphInfo::context; "" for the
    /// main graph).
    std::string context;
    llvm::StringMap<mlir::Value> values;
    llvm::StringMap<const onnx::TensorProto *> initializers;
  };

  void pushScope(const onnx::GraphProto &graph);
  mlir::LogicalResult checkSupport(const onnx::GraphProto &graph);
  mlir::LogicalResult importSignature(mlir::ModuleOp module);
  mlir::LogicalResult importNode(const onnx::GraphProto &graph, int index);
  mlir::LogicalResult importOutputs();
  /// Checks `value` against the type `declared` gives it (where it gives
  /// one); `loc` names the output.
  mlir::LogicalResult checkDeclaredType(const onnx::ValueInfoProto &declared,
                                        mlir::Value value, mlir::Location loc);
  mlir::DictionaryAttr getValueInfoAttrs(const onnx::ValueInfoProto &value);
  /// `attrs` (an output's) with dimension `axis` named like the token ids'
  /// last one (markTokenRows).
  mlir::DictionaryAttr renameRowsDim(mlir::DictionaryAttr attrs, int64_t axis);
  /// With a position input: removes the ops nothing reads and then the
  /// graph inputs nothing reads.
  void removeUnreadInputs();
  /// Whether a graph input or output is FLOAT16, or a weight read was.
  bool hasFloat16Signature() const;

  const OnnxModel &model;
  mlir::MLIRContext *context;
  mlir::OpBuilder builder;
  TensorReader tensors;
  const OpImportTable &table;
  ImportOptions options;
  mlir::func::FuncOp func;
  /// getPositionInput's input, once added.
  mlir::Value positionInput;
  /// markTokenRows's values.
  llvm::DenseMap<mlir::Value, int64_t> tokenRowAxes;
  /// The main graph's scope first, then one per subgraph being imported.
  std::vector<Scope> scopes;
};

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_GRAPHIMPORTER_H
