//===- NeuralNetOps.cpp - matmul, softmax and normalisation imports -------===//
//
// Ops whose versions from opset 13 to 21 keep their inputs and attributes
// (Conv 22 only adds types); GridSample 16, 20 (new names for the modes,
// N-D inputs, which moe.grid_sample refuses) and 22 (types);
// SimplifiedLayerNormalization (RMSNorm) is onnxruntime's, registered in the
// default domain at version 1 and exported by HF/optimum for Llama-style
// models.
//
// LpNormalization (opset 1; 22 only adds types) divides `input` by its L1
// or L2 norm along `axis` (default -1, p default 2): the norm is the sum of
// absolute values (p 1) or the square root of the sum of squares (p 2),
// and a slice whose norm is 0 becomes zeros, as onnxruntime's kernel does
// (the spec leaves 0 / 0 open). Other p are refused.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OpEmitter.h"
#include "compiler/onnx/OpImport.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace moec::onnx_import;

static LogicalResult importLpNormalization(NodeImporter &node) {
  int64_t axis = -1, p = 2;
  for (const NamedAttribute &attr : node.getAttributes()) {
    StringRef name = attr.getName().getValue();
    auto value = dyn_cast<IntegerAttr>(attr.getValue());
    if (name != "axis" && name != "p")
      return node.emitAttributeError(name)
             << "is not an attribute of LpNormalization";
    if (!value)
      return node.emitAttributeError(name)
             << "has the wrong type (" << node.getAttributeTypeName(name)
             << "); expected INT";
    (name == "axis" ? axis : p) = value.getInt();
  }
  if (p != 1 && p != 2)
    return node.emitAttributeError("p") << "must be 1 or 2, got " << p;
  Value x = node.getOperands()[0];
  auto type = dyn_cast<RankedTensorType>(x.getType());
  if (!type || !isa<FloatType>(type.getElementType()))
    return node.emitError()
           << "input must be a ranked float tensor, got " << x.getType();
  int64_t rank = type.getRank();
  if (axis < -rank || axis >= rank)
    return node.emitAttributeError("axis")
           << "is " << axis << ", outside [" << -rank << ", " << rank
           << ") for an input of rank " << rank;

  OpEmitter ops(node.getBuilder(), node.getLoc());
  Value norm =
      ops.emit(p == 1 ? "moe.reduce_l1" : "moe.reduce_l2",
               {x, ops.i64Vector({axis})}, {ops.i64Attr("keepdims", 1)});
  Value zero = ops.f32Scalar(0.0f);
  if (!type.getElementType().isF32())
    zero = ops.castTo(zero, type.getElementType());
  Value y = ops.emit("moe.where", {ops.binary("moe.equal", norm, zero), zero,
                                   ops.binary("moe.div", x, norm)});
  if (ops.failed())
    return failure();
  return node.setResults({y});
}

void moec::onnx_import::populateNeuralNetImports(OpImportTable &table) {
  table.onOp("LpNormalization", 1, "input", importLpNormalization,
             StringRef(""));
  table.onOp("LpNormalization", 22, "input", importLpNormalization,
             StringRef(""));
  table.onOpGeneric("MatMul", {13}, "A, B");
  table.onOpGeneric("Gemm", {13}, "A, B, C?");
  table.onOpGeneric("Conv", {11, 22}, "X, W, B?");
  table.onOpGeneric("GridSample", {16, 20, 22}, "X, grid");
  table.onOpGeneric("Einsum", {12}, "Inputs...");
  table.onOpGeneric("Softmax", {13}, "input");
  table.onOpGeneric("LogSoftmax", {13}, "input");
  table.onOpGeneric("LayerNormalization", {17}, "X, Scale, B?");
  table.onOpGeneric("SimplifiedLayerNormalization", {1}, "X, scale");
}
