//===- Model.h - a parsed and validated ONNX model --------------*- C++ -*-===//
//
// Loading reads the protobuf and checks everything the importer relies on
// before any IR is built: IR version and opsets, names defined before use, an
// acyclic graph, and initializers whose declared shape matches their data.
// Models are untrusted input: every failure is one diagnostic naming the file
// and the part of it at fault, never an assertion.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_MODEL_H
#define MOEC_COMPILER_ONNX_MODEL_H

#include "mlir/IR/Location.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringMap.h"

#include "onnx/onnx_pb.h"

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace moec::onnx_import {

/// How deeply subgraphs (the branches of If) may nest. Models are untrusted:
/// validation and import recurse once per level, so the depth is bounded
/// (exporters nest a few levels at most).
constexpr int kMaxSubgraphDepth = 16;

/// How messages name ONNX's default domain (spelled "" or "ai.onnx").
constexpr llvm::StringLiteral kDefaultDomainName = "ai.onnx";
/// onnxruntime's contrib domain, imported only for its MoE op.
constexpr llvm::StringLiteral kMicrosoftDomain = "com.microsoft";
/// The default-domain opsets moec imports; older ones from
/// kMinUpgradableOpset (OpsetUpgrade.h) are upgraded to kMinOpset first.
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 24;
/// The ONNX IR versions moec reads (3 came with opset 7, 7 with opset 13).
constexpr int64_t kMinIrVersion = 3;
constexpr int64_t kMaxIrVersion = 13;

/// Returns `domain` with the default domain spelled "" however the model
/// spells it.
llvm::StringRef normalizeDomain(llvm::StringRef domain);

/// Returns how messages name `domain` ("ai.onnx" for the default domain).
llvm::StringRef getDomainDisplayName(llvm::StringRef domain);

/// Returns the static size of `dim`: its dim_value, or the number a dim_param
/// spells when it is all digits (transformers' exporter names static sizes
/// '32'), or nullopt for a symbolic or unknown dimension. A digit dim_param
/// too large for 64 bits is -1 (validation refuses it).
std::optional<int64_t>
getStaticDimSize(const onnx::TensorShapeProto::Dimension &dim);

/// What validation learned about one subgraph: a GRAPH attribute of a node
/// (If's then_branch and else_branch, Loop's body).
struct SubgraphInfo {
  /// How locations place the subgraph, appended to its nodes' names:
  /// " in then_branch of node 'if' (If)"; nested subgraphs chain these.
  std::string context;
  /// Indices of the subgraph's nodes in a topological order.
  std::vector<int> nodeOrder;
};

/// Returns the subgraphs `node` holds (its GRAPH and GRAPHS attributes), each
/// with the name of its attribute.
llvm::SmallVector<std::pair<llvm::StringRef, const onnx::GraphProto *>>
getSubgraphs(const onnx::NodeProto &node);

/// A parsed ONNX model whose structure has been validated.
struct OnnxModel {
  OnnxModel(llvm::StringRef path, mlir::Location loc) : path(path), loc(loc) {}

  /// The model file as the user named it (what diagnostics print).
  std::string path;
  /// The real path of the directory holding the model; external data must
  /// resolve inside it. Empty for a model read from memory (no external
  /// data).
  std::string directory;
  /// Location of the model file as a whole.
  mlir::Location loc;
  /// The parsed model. Shared: dense_resource weights that reference its
  /// inline raw_data keep it alive for as long as the IR needs them.
  std::shared_ptr<const onnx::ModelProto> proto;
  /// Opset version by normalised domain.
  llvm::StringMap<int64_t> opsets;
  /// The default-domain opset the file declared, when moec upgraded it to
  /// kMinOpset on import (OpsetUpgrade.h); 0 when the file was not upgraded.
  int64_t originalOpset = 0;
  /// Indices of the graph's nodes in a topological order (the file's own
  /// order where it already is one).
  std::vector<int> nodeOrder;
  /// Every subgraph of the model, nested ones included. Each reads names of
  /// its own and of its enclosing graphs; none of its names is visible
  /// outside it.
  std::unordered_map<const onnx::GraphProto *, SubgraphInfo> subgraphs;

  const onnx::GraphProto &getGraph() const { return proto->graph(); }

  /// Returns the topological order of the nodes of `graph`, the main graph
  /// or one of its subgraphs.
  const std::vector<int> &getNodeOrder(const onnx::GraphProto &graph) const;

  /// Returns the opset version the model imports for `domain`, 0 if none.
  int64_t getOpsetVersion(llvm::StringRef domain) const;

  /// Returns the location of node `index`: the file wrapped in
  /// "node 'name' (OpType)" (or "node #index (OpType)" for unnamed nodes).
  mlir::Location getNodeLoc(int index) const;

  /// Returns the location of node `index` of `graph` (the main graph or a
  /// subgraph): like getNodeLoc, followed by the subgraph's context
  /// ("node 'relu' (Relu) in then_branch of node 'if' (If)").
  mlir::Location getNodeLoc(const onnx::GraphProto &graph, int index) const;

  /// Returns how getNodeLoc names node `index` of `graph`, without the file.
  std::string describeNode(const onnx::GraphProto &graph, int index) const;

  /// Returns the location of `what` (for example "initializer 'w'").
  mlir::Location getSubjectLoc(const llvm::Twine &what) const;
};

/// Reads the ONNX model at `path` and validates it. Reports one error through
/// the context's diagnostics and returns failure if the file cannot be read,
/// is not a valid ONNX model, or is one moec cannot take in: IR version or
/// opsets out of range, unknown domains, undefined or duplicate names, cycles,
/// malformed initializers or external data outside the model's directory.
/// Whether each op is supported is not checked here (`moec check` reports it).
mlir::FailureOr<std::unique_ptr<OnnxModel>>
loadOnnxModel(mlir::MLIRContext *context, llvm::StringRef path);

/// Like loadOnnxModel, from the serialized model `bytes` (not copied: they
/// must outlive the call only); `name` stands for the file in diagnostics.
/// Such a model has no directory, so external data is refused.
mlir::FailureOr<std::unique_ptr<OnnxModel>>
loadOnnxModelFromBuffer(mlir::MLIRContext *context, llvm::StringRef bytes,
                        llvm::StringRef name);

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_MODEL_H
