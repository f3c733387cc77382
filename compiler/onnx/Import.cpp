//===- Import.cpp - the ONNX frontend's entry points ----------------------===//

#include "compiler/onnx/Import.h"

#include "compiler/onnx/GraphImporter.h"
#include "compiler/onnx/Model.h"
#include "compiler/onnx/OpImport.h"

#include "dialects/moe/MoeDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <functional>
#include <map>

using namespace mlir;
using namespace moec::onnx_import;

/// Loads the dialects whose ops the import tables name, so that their
/// availability can be looked up.
static void loadDialects(MLIRContext *context) {
  context->loadDialect<moec::moe::MoeDialect, func::FuncDialect>();
}

FailureOr<ModelCoverage> moec::onnx_import::checkOnnxModel(MLIRContext *context,
                                                           StringRef path) {
  loadDialects(context);
  FailureOr<std::unique_ptr<OnnxModel>> model = loadOnnxModel(context, path);
  if (failed(model))
    return failure();
  const OpImportTable &table = OpImportTable::get();
  ModelCoverage coverage;
  coverage.irVersion = (*model)->proto->ir_version();
  for (const onnx::OperatorSetIdProto &opset : (*model)->proto->opset_import())
    coverage.opsets.emplace_back(
        getDomainDisplayName(normalizeDomain(opset.domain())).str(),
        opset.version());
  std::map<std::pair<std::string, std::string>, OpCoverage> ops;
  // The nodes of subgraphs (If's branches) count like the main graph's:
  // each must be imported too.
  std::function<void(const onnx::GraphProto &)> count =
      [&](const onnx::GraphProto &graph) {
        for (const onnx::NodeProto &node : graph.node()) {
          StringRef domain = normalizeDomain(node.domain());
          OpCoverage &op = ops[{domain.str(), node.op_type()}];
          if (!op.numNodes++) {
            op.domain = getDomainDisplayName(domain).str();
            op.opType = node.op_type();
            op.opset = (*model)->getOpsetVersion(domain);
            if (const OpImport *entry =
                    table.lookup(domain, op.opType, op.opset)) {
              op.sinceVersion = entry->sinceVersion;
              op.supported = isAvailable(*entry, context);
            }
          }
          ++coverage.numNodes;
          for (auto [name, subgraph] : getSubgraphs(node))
            count(*subgraph);
        }
      };
  count((*model)->getGraph());
  for (auto &entry : ops)
    coverage.ops.push_back(std::move(entry.second));
  return coverage;
}

std::vector<SupportedOp>
moec::onnx_import::getSupportedOps(MLIRContext *context) {
  loadDialects(context);
  const OpImportTable &table = OpImportTable::get();
  std::vector<SupportedOp> ops;
  for (const OpImport &entry : table.getEntries()) {
    SupportedOp op;
    op.domain = getDomainDisplayName(entry.domain).str();
    op.opType = entry.opType;
    op.sinceVersion = entry.sinceVersion;
    const OpImport *next = table.getNextVersion(entry);
    // Contrib domains have no opset bounds of their own.
    bool isDefault = entry.domain.empty();
    op.firstOpset = isDefault ? std::max(entry.sinceVersion, kMinOpset)
                              : entry.sinceVersion;
    op.lastOpset =
        next ? next->sinceVersion - 1 : (isDefault ? kMaxOpset : INT64_MAX);
    op.targetOp = entry.targetOp;
    op.available = isAvailable(entry, context);
    op.inputs = formatInputs(entry.inputs);
    if (std::optional<RegisteredOperationName> name =
            RegisteredOperationName::lookup(entry.targetOp, context))
      op.targetMinOperands = getOperandCountRange(*name).first;
    ops.push_back(std::move(op));
  }
  return ops;
}

OwningOpRef<ModuleOp>
moec::onnx_import::importOnnxModel(MLIRContext *context, StringRef path,
                                   const ImportOptions &options) {
  loadDialects(context);
  FailureOr<std::unique_ptr<OnnxModel>> model = loadOnnxModel(context, path);
  if (failed(model))
    return nullptr;
  return GraphImporter(**model, context, options).import();
}

OwningOpRef<ModuleOp>
moec::onnx_import::importOnnxModelFromBuffer(MLIRContext *context,
                                             StringRef bytes, StringRef name) {
  loadDialects(context);
  FailureOr<std::unique_ptr<OnnxModel>> model =
      loadOnnxModelFromBuffer(context, bytes, name);
  if (failed(model))
    return nullptr;
  return GraphImporter(**model, context).import();
}
