//===- ReductionOps.cpp - reduction op imports ----------------------------===//
//
// ReduceSum takes its axes as an input from 13 on; the other reductions
// (Mean, Max, Min, Prod, L1, L2, SumSquare, LogSum, LogSumExp) followed at
// 18 (ReduceMax and ReduceMin-20 only added bool). Their
// version-13 nodes carry `axes` as an attribute and are upgraded to the
// input form. `noop_with_empty_axes`, new with the input, defaults to the
// old behaviour (no axes reduce everything).
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OpImport.h"

using namespace mlir;
using namespace moec::onnx_import;

/// Moves a version-13 reduction's `axes` attribute to its `axes` input.
static LogicalResult importReduceWithAxesAttribute(NodeImporter &node) {
  // The node has its one input (checked against the table's "data").
  SmallVectorImpl<Value> &operands = node.getOperands();
  if (Attribute axes = node.getAttributes().erase("axes")) {
    auto values = dyn_cast<DenseI64ArrayAttr>(axes);
    if (!values)
      return node.emitAttributeError("axes")
             << "has the wrong type (" << node.getAttributeTypeName("axes")
             << "); expected INTS";
    // No axes and an empty list both reduce over every dimension.
    if (!values.empty())
      operands.push_back(node.createI64Constant(values.asArrayRef()));
  }
  return importGeneric(node);
}

void moec::onnx_import::populateReductionImports(OpImportTable &table) {
  table.onOpGeneric("ReduceSum", {13}, "data, axes?");
  table.onOp("ReduceMean", 13, "data", importReduceWithAxesAttribute);
  table.onOpGeneric("ReduceMean", {18}, "data, axes?");
  for (StringRef op : {"ReduceMax", "ReduceMin"}) {
    table.onOp(op, 13, "data", importReduceWithAxesAttribute);
    table.onOpGeneric(op, {18, 20}, "data, axes?");
  }
  for (StringRef op : {"ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                       "ReduceLogSum", "ReduceLogSumExp"}) {
    table.onOp(op, 13, "data", importReduceWithAxesAttribute);
    table.onOpGeneric(op, {18}, "data, axes?");
  }
}
