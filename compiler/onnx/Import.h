//===- Import.h - the ONNX frontend's entry points --------------*- C++ -*-===//
//
// What tools use of the ONNX frontend: a coverage check (`moec check`), the
// list of supported ops (`moec ops`) and the import of a model into a module
// of the `moe` dialect. Nothing here exposes protobuf types.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_IMPORT_H
#define MOEC_COMPILER_ONNX_IMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"

#include <string>
#include <utility>
#include <vector>

namespace moec::onnx_import {

/// The nodes of one (domain, op type) in a model and whether moec imports
/// them at the model's opset.
struct OpCoverage {
  /// "ai.onnx" for the default domain.
  std::string domain;
  std::string opType;
  /// The model's opset for `domain`.
  int64_t opset = 0;
  /// The op version that opset selects among those moec imports; 0 if none.
  int64_t sinceVersion = 0;
  int64_t numNodes = 0;
  bool supported = false;
};

/// What `moec check` reports about a model.
struct ModelCoverage {
  int64_t irVersion = 0;
  /// (domain, version) as the model imports them.
  std::vector<std::pair<std::string, int64_t>> opsets;
  int64_t numNodes = 0;
  /// Sorted by domain, then op type.
  std::vector<OpCoverage> ops;
};

/// Loads and validates the model at `path` and reports, for every op type it
/// uses, whether moec imports it. Fails (with one error through the context's
/// diagnostics) only if the model is invalid.
mlir::FailureOr<ModelCoverage> checkOnnxModel(mlir::MLIRContext *context,
                                              llvm::StringRef path);

/// One version of one op moec imports.
struct SupportedOp {
  std::string domain;
  std::string opType;
  /// The op version.
  int64_t sinceVersion = 0;
  /// The opsets of `domain` moec imports that select this version:
  /// [firstOpset, lastOpset]; lastOpset is INT64_MAX where the domain has no
  /// upper bound.
  int64_t firstOpset = 0;
  int64_t lastOpset = 0;
  /// The dialect op it becomes ("" when it becomes none, as Identity).
  std::string targetOp;
  /// Whether the target op is registered in the context.
  bool available = false;
  /// The ONNX inputs as the table records them: "A, B, C?" (`?` optional,
  /// `...` variadic).
  std::string inputs;
  /// How many operands the target op requires (by its ODS definition); -1
  /// when there is no target op or it is not available.
  int64_t targetMinOperands = -1;
};

/// Every op version moec imports, sorted by domain, op type and version.
std::vector<SupportedOp> getSupportedOps(mlir::MLIRContext *context);

/// Loads, validates and imports the model at `path` into a module holding
/// `func.func @main`. Needs the moe and func dialects registered in
/// `context`. Returns null after reporting one error on failure.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxModel(mlir::MLIRContext *context,
                                                  llvm::StringRef path);

/// Like importOnnxModel, from the serialized model `bytes` held in memory
/// (the fuzz targets, test/fuzz); `name` stands for the file in
/// diagnostics. External data is refused: it has no directory to resolve
/// against.
mlir::OwningOpRef<mlir::ModuleOp>
importOnnxModelFromBuffer(mlir::MLIRContext *context, llvm::StringRef bytes,
                          llvm::StringRef name);

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_IMPORT_H
