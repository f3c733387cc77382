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
  table.onOpGeneric("Add", {13, 14}, "A, B");
  table.onOpGeneric("Sub", {13, 14}, "A, B");
  table.onOpGeneric("Mul", {13, 14}, "A, B");
  table.onOpGeneric("Div", {13, 14}, "A, B");
  table.onOpGeneric("Pow", {13, 15}, "X, Y");
  table.onOpGeneric("Mod", {13}, "A, B");

  // Variadic elementwise.
  table.onOpGeneric("Max", {13}, "data_0...");
  table.onOpGeneric("Min", {13}, "data_0...");
  table.onOpGeneric("Sum", {13}, "data_0...");

  // Comparison and logic.
  table.onOpGeneric("Equal", {13, 19}, "A, B");
  table.onOpGeneric("Less", {13}, "A, B");
  table.onOpGeneric("LessOrEqual", {12, 16}, "A, B");
  table.onOpGeneric("Greater", {13}, "A, B");
  table.onOpGeneric("GreaterOrEqual", {12, 16}, "A, B");
  table.onOpGeneric("And", {7}, "A, B");
  table.onOpGeneric("Or", {7}, "A, B");
  table.onOpGeneric("Not", {1}, "X");
  table.onOpGeneric("Where", {9, 16}, "condition, X, Y");
  // IsNaN-20 only added the float8 types.
  for (int64_t version : {13, 20})
    table.onOp("IsNaN", version, "X", importGeneric,
               llvm::StringRef("moe.is_nan"));

  // Unary math.
  table.onOpGeneric("Neg", {13}, "X");
  table.onOpGeneric("Abs", {13}, "X");
  table.onOpGeneric("Exp", {13}, "input");
  table.onOpGeneric("Log", {13}, "input");
  table.onOpGeneric("Sqrt", {13}, "X");
  table.onOpGeneric("Reciprocal", {13}, "X");
  table.onOpGeneric("Tanh", {13}, "input");
  table.onOpGeneric("Erf", {13}, "input");
  table.onOpGeneric("Sin", {7, 22}, "input");
  table.onOpGeneric("Cos", {7, 22}, "input");
  table.onOpGeneric("Floor", {13}, "X");
  table.onOpGeneric("Ceil", {13}, "X");
  table.onOpGeneric("Sign", {13}, "input");
  table.onOpGeneric("Clip", {13}, "input, min?, max?");

  // Activations.
  table.onOpGeneric("Sigmoid", {13}, "X");
  table.onOpGeneric("Relu", {13, 14}, "X");
  table.onOpGeneric("Softplus", {1, 22}, "X");
  table.onOpGeneric("Gelu", {20}, "X");
}
