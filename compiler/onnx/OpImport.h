//===- OpImport.h - per-op import handlers ----------------------*- C++ -*-===//
//
// How each ONNX op becomes IR. Handlers are registered in a table keyed by
// (domain, op type, since-version), in the style of torch-mlir's `onOp`: a
// node is imported by the entry with the greatest since-version not above
// the model's opset for the node's domain. Most ops use the generic handler,
// which creates `moe.<snake_case op type>` from the node's inputs and
// attributes; specific handlers upgrade older opsets to the newest form
// before calling it, or build something else (Constant, Identity, MoE).
// Handlers are grouped by op family, one file per family.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_OPIMPORT_H
#define MOEC_COMPILER_ONNX_OPIMPORT_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/LLVM.h"

#include <string>
#include <vector>

namespace onnx {
class NodeProto;
class TensorProto;
} // namespace onnx

namespace moec::onnx_import {

class GraphImporter;
class NodeImporter;

/// Imports one node; reports one error at the node on failure.
using OpImportFn = mlir::LogicalResult (*)(NodeImporter &node);

/// One formal input of an op version, as the ONNX schema declares it. Every
/// node is checked against its entry's inputs before any handler runs, so
/// handlers and op inference never see a required operand missing.
struct OpInput {
  enum class Kind {
    /// Must be given a non-empty name.
    Required,
    /// May be left out (an empty name, or fewer inputs).
    Optional,
    /// The last input only: one or more non-empty names.
    Variadic,
  };
  /// The schema's name of the input ("A", "data_0").
  std::string name;
  Kind kind = Kind::Required;
};

/// How one version of one ONNX op is imported.
struct OpImport {
  /// Normalised domain ("" for ai.onnx).
  std::string domain;
  std::string opType;
  /// The op version this entry imports; it applies up to the next
  /// registered version of the op.
  int64_t sinceVersion;
  /// The op version's inputs in ONNX order.
  std::vector<OpInput> inputs;
  /// The dialect op the node becomes; empty when the handler creates no op.
  std::string targetOp;
  OpImportFn fn;
};

/// Spells `inputs` as the table registers them: "A, B, C?" (`?` optional,
/// `...` variadic).
std::string formatInputs(llvm::ArrayRef<OpInput> inputs);

/// The table of every op version moec imports.
class OpImportTable {
public:
  /// Returns the table, filled on first use.
  static const OpImportTable &get();

  /// Registers `fn` for ONNX `opType` of `domain` at op version `since`,
  /// whose ONNX inputs are `inputs`: names separated by ", ", each followed
  /// by `?` if optional or `...` if variadic (the last only), as in
  /// "A, B, C?" or "inputs..." (test/Import/op-table.test checks them
  /// against ONNX's schemas). `targetOp` defaults to `moe.` followed by the
  /// op type in snake_case.
  void onOp(llvm::StringRef opType, int64_t since, llvm::StringRef inputs,
            OpImportFn fn,
            std::optional<llvm::StringRef> targetOp = std::nullopt,
            llvm::StringRef domain = "");

  /// Registers the generic handler for every version in `versions`, all of
  /// which have `inputs`.
  void onOpGeneric(llvm::StringRef opType, llvm::ArrayRef<int64_t> versions,
                   llvm::StringRef inputs);

  /// Returns the entry importing `opType` of `domain` in a model importing
  /// that domain at `opset`, or null if moec has none.
  const OpImport *lookup(llvm::StringRef domain, llvm::StringRef opType,
                         int64_t opset) const;

  /// Returns the entry registered after `entry` for the same op, or null.
  const OpImport *getNextVersion(const OpImport &entry) const;

  /// Every entry, sorted by domain, op type and version.
  llvm::ArrayRef<OpImport> getEntries() const { return entries; }

private:
  std::vector<OpImport> entries;
};

/// Returns true if `entry`'s target op is registered in `context` (an entry
/// without a target is always available).
bool isAvailable(const OpImport &entry, mlir::MLIRContext *context);

/// Returns the operand counts `name` accepts by its ODS traits: {N, N} for
/// N fixed operands, {N, UINT_MAX} for N required ones among optional or
/// variadic ones.
std::pair<unsigned, unsigned>
getOperandCountRange(mlir::RegisteredOperationName name);

/// The state of importing one node, handed to its handler.
class NodeImporter {
public:
  NodeImporter(GraphImporter &graph, const onnx::NodeProto &node,
               mlir::Location loc, const OpImport &import);

  /// Checks the node's inputs against its entry's, then reads its operands
  /// and converts its attributes.
  mlir::LogicalResult initialize();

  const onnx::NodeProto &getNode() const { return node; }
  /// Returns how many outputs the node names (empty names included).
  int getNumOutputs() const;
  mlir::Location getLoc() const { return loc; }
  const OpImport &getImport() const { return import; }
  mlir::MLIRContext *getContext() const { return loc->getContext(); }
  mlir::OpBuilder &getBuilder();
  /// The importer of the graph holding the node (for handlers that import
  /// subgraphs).
  GraphImporter &getGraphImporter() { return graph; }

  /// The node's operands by ONNX input position, null where an optional
  /// input is absent. Handlers may rewrite them before `createOp`.
  llvm::SmallVectorImpl<mlir::Value> &getOperands() { return operands; }

  /// The node's attributes converted by the dialect's conventions (INT ->
  /// I64Attr, FLOAT -> F32Attr, INTS -> DenseI64ArrayAttr, FLOATS ->
  /// DenseF32ArrayAttr, STRING -> StrAttr, TENSOR -> ElementsAttr). Handlers
  /// may rewrite them before `createOp`.
  mlir::NamedAttrList &getAttributes() { return attributes; }

  /// Returns the ONNX type name of attribute `name` ("INTS"), or "" if the
  /// node has no such attribute.
  std::string getAttributeTypeName(llvm::StringRef name) const;

  /// Emits an error at the node.
  mlir::InFlightDiagnostic emitError() const;
  /// Emits an error about the node's attribute `name`.
  mlir::InFlightDiagnostic emitAttributeError(llvm::StringRef name) const;

  /// Creates `opName` from the operands and attributes, infers its result
  /// types, verifies it and binds its results to the node's outputs.
  mlir::LogicalResult createOp(llvm::StringRef opName);

  /// Binds `values` to the node's outputs in order.
  mlir::LogicalResult setResults(mlir::ValueRange values);

  /// Creates a `moe.constant` holding `values` as a 1-D i64 tensor.
  mlir::Value createI64Constant(llvm::ArrayRef<int64_t> values);

  /// Converts `tensor` (an attribute of this node) to an elements attribute;
  /// weights become dense_resource blobs named after `resourceName`.
  mlir::FailureOr<mlir::ElementsAttr>
  readTensor(const onnx::TensorProto &tensor, llvm::StringRef attrName,
             llvm::StringRef resourceName);

private:
  mlir::LogicalResult checkInputs() const;
  mlir::FailureOr<mlir::Attribute> convertAttribute(int index);
  mlir::Operation *createOperation(mlir::OperationName name,
                                   unsigned numResults,
                                   mlir::Operation *propertiesFrom);
  mlir::LogicalResult setAttributes(mlir::Operation *op);

  GraphImporter &graph;
  const onnx::NodeProto &node;
  mlir::Location loc;
  const OpImport &import;
  llvm::SmallVector<mlir::Value> operands;
  mlir::NamedAttrList attributes;
};

/// The generic handler: `createOp` of the entry's target op.
mlir::LogicalResult importGeneric(NodeImporter &node);

/// Registration of each op family's handlers.
void populateElementwiseImports(OpImportTable &table);
void populateNeuralNetImports(OpImportTable &table);
void populateShapeImports(OpImportTable &table);
void populateIndexingImports(OpImportTable &table);
void populateReductionImports(OpImportTable &table);
void populateTensorImports(OpImportTable &table);
void populateContribImports(OpImportTable &table);
void populateContribAttentionImports(OpImportTable &table);
void populateContribMultiHeadAttentionImports(OpImportTable &table);
void populateContribRecurrentImports(OpImportTable &table);
void populateControlFlowImports(OpImportTable &table);

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_OPIMPORT_H
