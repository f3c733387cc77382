//===- ElementwiseOps.cpp - elementwise op imports ------------------------===//
//
// Arithmetic, comparison, logic, unary math and activation ops. Their
// versions from opset 13 to 21 only widen the accepted element types, so
// every version imports generically; each list holds the versions in effect
// at some opset from 13 on (onnx/defs/math, logical and tensor Changelog).
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OpImport.h"

using namespace moec::onnx_import;

void moec::onnx_import::populateElementwiseImports(OpImportTable &table) {
  // Binary arithmetic with multidirectional broadcasting.
  table.onOpGeneric("Add", {13, 14});
  table.onOpGeneric("Sub", {13, 14});
  table.onOpGeneric("Mul", {13, 14});
  table.onOpGeneric("Div", {13, 14});
  table.onOpGeneric("Pow", {13, 15});
  table.onOpGeneric("Mod", {13});

  // Variadic elementwise.
  table.onOpGeneric("Max", {13});
  table.onOpGeneric("Min", {13});
  table.onOpGeneric("Sum", {13});

  // Comparison and logic.
  table.onOpGeneric("Equal", {13, 19});
  table.onOpGeneric("Less", {13});
  table.onOpGeneric("LessOrEqual", {12, 16});
  table.onOpGeneric("Greater", {13});
  table.onOpGeneric("GreaterOrEqual", {12, 16});
  table.onOpGeneric("And", {7});
  table.onOpGeneric("Or", {7});
  table.onOpGeneric("Not", {1});
  table.onOpGeneric("Where", {9, 16});

  // Unary math.
  table.onOpGeneric("Neg", {13});
  table.onOpGeneric("Abs", {13});
  table.onOpGeneric("Exp", {13});
  table.onOpGeneric("Log", {13});
  table.onOpGeneric("Sqrt", {13});
  table.onOpGeneric("Reciprocal", {13});
  table.onOpGeneric("Tanh", {13});
  table.onOpGeneric("Erf", {13});
  table.onOpGeneric("Sin", {7});
  table.onOpGeneric("Cos", {7});
  table.onOpGeneric("Floor", {13});
  table.onOpGeneric("Ceil", {13});
  table.onOpGeneric("Sign", {13});
  table.onOpGeneric("Clip", {13});

  // Activations.
  table.onOpGeneric("Sigmoid", {13});
  table.onOpGeneric("Relu", {13, 14});
  table.onOpGeneric("Softplus", {1});
  table.onOpGeneric("Gelu", {20});
}
