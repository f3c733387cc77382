//===- NeuralNetOps.cpp - matmul, softmax and normalisation imports -------===//
//
// Ops whose versions from opset 13 to 21 keep their inputs and attributes;
// SimplifiedLayerNormalization (RMSNorm) is onnxruntime's, registered in the
// default domain at version 1 and exported by HF/optimum for Llama-style
// models.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OpImport.h"

using namespace moec::onnx_import;

void moec::onnx_import::populateNeuralNetImports(OpImportTable &table) {
  table.onOpGeneric("MatMul", {13}, "A, B");
  table.onOpGeneric("Gemm", {13}, "A, B, C?");
  table.onOpGeneric("Einsum", {12}, "Inputs...");
  table.onOpGeneric("Softmax", {13}, "input");
  table.onOpGeneric("LogSoftmax", {13}, "input");
  table.onOpGeneric("LayerNormalization", {17}, "X, Scale, B?");
  table.onOpGeneric("SimplifiedLayerNormalization", {1}, "X, scale");
}
