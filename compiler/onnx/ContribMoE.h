//===- ContribMoE.h - com.microsoft.MoE import ------------------*- C++ -*-===//
//
// The contract between the generic ONNX importer and the handler that turns
// onnxruntime's fused com.microsoft.MoE contrib op into the dialect's sparse
// ops (router, dispatch, experts, combine).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_CONTRIBMOE_H
#define MOEC_COMPILER_ONNX_CONTRIBMOE_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/Value.h"
#include "mlir/Support/LLVM.h"

namespace moec::onnx_import {

/// Imports one com.microsoft.MoE node. `operands` holds the node's inputs in
/// ONNX order, a null Value where an optional input is absent; `attributes`
/// holds its attributes converted by the dialect's conventions (INT -> I64Attr,
/// FLOAT -> F32Attr, STRING -> StrAttr, ...). On success returns the node's
/// outputs; on a malformed node emits one error at `loc` and returns failure.
mlir::FailureOr<llvm::SmallVector<mlir::Value>>
importContribMoE(mlir::OpBuilder &builder, mlir::Location loc,
                 llvm::ArrayRef<mlir::Value> operands,
                 mlir::DictionaryAttr attributes);

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_CONTRIBMOE_H
