//===- ShapeOps.cpp - shape and layout op imports -------------------------===//
//
// Changes from opset 13 to 21 in this family: Reshape-14 added `allowzero`
// and Shape-15 `start`/`end`, both optional with the old behaviour as their
// default, so the older versions import generically; the other new versions
// only widen the element types. Split-18 added `num_outputs`, which
// Split-13 expresses through its output count instead; that one is upgraded.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OpImport.h"

using namespace mlir;
using namespace moec::onnx_import;

/// Split-13 without a `split` input splits into as many equal parts as the
/// node has outputs; Split-18 says so with `num_outputs`.
static LogicalResult importSplit13(NodeImporter &node) {
  SmallVectorImpl<Value> &operands = node.getOperands();
  bool hasSplit = operands.size() > 1 && operands[1];
  if (!hasSplit)
    node.getAttributes().set("num_outputs", node.getBuilder().getI64IntegerAttr(
                                                node.getNumOutputs()));
  return importGeneric(node);
}

/// Split-18's `num_outputs` says how many outputs the node has; a node
/// naming another count is inconsistent (onnxruntime refuses it), and the
/// parts' sizes depend on the count.
static LogicalResult importSplit18(NodeImporter &node) {
  auto numOutputs =
      dyn_cast_or_null<IntegerAttr>(node.getAttributes().get("num_outputs"));
  if (numOutputs && numOutputs.getInt() != node.getNumOutputs())
    return node.emitAttributeError("num_outputs")
           << "is " << numOutputs.getInt() << " but the node has "
           << node.getNumOutputs() << " outputs";
  return importGeneric(node);
}

void moec::onnx_import::populateShapeImports(OpImportTable &table) {
  table.onOpGeneric("Reshape", {13, 14, 19, 21, 23, 24}, "data, shape");
  table.onOpGeneric("Transpose", {13, 21, 23, 24}, "data");
  table.onOpGeneric("Squeeze", {13, 21, 23, 24}, "data, axes?");
  table.onOpGeneric("Unsqueeze", {13, 21, 23, 24}, "data, axes");
  table.onOpGeneric("Flatten", {13, 21, 23, 24}, "input");
  table.onOpGeneric("Concat", {13}, "inputs...");
  table.onOp("Split", 13, "input, split?", importSplit13);
  table.onOp("Split", 18, "input, split?", importSplit18);
  table.onOpGeneric("Slice", {13}, "data, starts, ends, axes?, steps?");
  table.onOpGeneric("Expand", {13}, "input, shape");
  table.onOpGeneric("Tile", {13}, "input, repeats");
  table.onOpGeneric("Trilu", {14}, "input, k?");
  table.onOpGeneric("Shape", {13, 15, 19, 21, 23, 24}, "data");
  table.onOpGeneric("Size", {13, 19, 21, 23, 24}, "data");
  table.onOpGeneric("Range", {11}, "start, limit, delta");
  table.onOpGeneric("ConstantOfShape", {9, 20, 21, 23, 24}, "input");
}
