//===- ContribOps.cpp - onnxruntime contrib op imports --------------------===//
//
// com.microsoft is imported for its fused MoE op, whose sparse ops are built
// by importContribMoE (ContribMoE.cpp), and for the int4/int8 ops
// MatMulNBits, GatherBlockQuantized and QMoE (ContribQuant.cpp).
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/ContribMoE.h"
#include "compiler/onnx/ContribQuant.h"
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
  // The int4/int8 ops of onnxruntime-genai's CPU models (ContribQuant.cpp).
  table.onOp("MatMulNBits", 1, "A, B, scales, zero_points?, g_idx?, bias?",
             importMatMulNBits, StringRef("moe.mat_mul"), kMicrosoftDomain);
  table.onOp("GatherBlockQuantized", 1, "data, indices, scales, zero_points?",
             importGatherBlockQuantized, StringRef("moe.gather"),
             kMicrosoftDomain);
  // QMoE's inputs as its newest schema has them (1.23 has the first 11;
  // fc1/fc2_scales were required there): later ones are refused by name.
  table.onOp("QMoE", 1,
             "input, router_probs, fc1_experts_weights, fc1_scales?, "
             "fc1_experts_bias?, fc2_experts_weights, fc2_scales?, "
             "fc2_experts_bias?, fc3_experts_weights?, fc3_scales?, "
             "fc3_experts_bias?, fc1_zero_points?, fc2_zero_points?, "
             "fc3_zero_points?, router_weights?, fc1_global_scale?, "
             "fc2_global_scale?, fc1_act_scale?, fc2_act_scale?, "
             "fc1_act_block_scale?, fc2_act_block_scale?",
             importQMoE, StringRef("moe.experts"), kMicrosoftDomain);
}
