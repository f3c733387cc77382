//===- ContribOps.cpp - onnxruntime contrib op imports --------------------===//
//
// com.microsoft is imported for its fused MoE op only; the sparse ops it
// becomes are built by importContribMoE (ContribMoE.cpp).
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/ContribMoE.h"
#include "compiler/onnx/Model.h"
#include "compiler/onnx/OpImport.h"

using namespace mlir;
using namespace moec::onnx_import;

static LogicalResult importMoE(NodeImporter &node) {
  FailureOr<SmallVector<Value>> results =
      importContribMoE(node.getBuilder(), node.getLoc(), node.getOperands(),
                       node.getAttributes().getDictionary(node.getContext()));
  if (failed(results))
    return failure();
  return node.setResults(*results);
}

void moec::onnx_import::populateContribImports(OpImportTable &table) {
  table.onOp("MoE", 1,
             "input, router_probs, fc1_experts_weights, fc1_experts_bias?, "
             "fc2_experts_weights, fc2_experts_bias?, fc3_experts_weights?, "
             "fc3_experts_bias?",
             importMoE, StringRef("moe.experts"), kMicrosoftDomain);
}
