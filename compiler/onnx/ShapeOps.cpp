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

void moec::onnx_import::populateShapeImports(OpImportTable &table) {
  table.onOpGeneric("Reshape", {13, 14, 19, 21});
  table.onOpGeneric("Transpose", {13, 21});
  table.onOpGeneric("Squeeze", {13, 21});
  table.onOpGeneric("Unsqueeze", {13, 21});
  table.onOpGeneric("Flatten", {13, 21});
  table.onOpGeneric("Concat", {13});
  table.onOp("Split", 13, importSplit13);
  table.onOpGeneric("Split", {18});
  table.onOpGeneric("Slice", {13});
  table.onOpGeneric("Expand", {13});
  table.onOpGeneric("Tile", {13});
  table.onOpGeneric("Trilu", {14});
  table.onOpGeneric("Shape", {13, 15, 19, 21});
  table.onOpGeneric("Size", {13, 19, 21});
  table.onOpGeneric("Range", {11});
  table.onOpGeneric("ConstantOfShape", {9, 20, 21});
}
