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

/// How a generation graph's attention is imported (docs/serving.md,
/// "Builder exports"). The defaults import every op as the model states it.
struct ImportOptions {
  /// GroupQueryAttention without a position_ids input rotates at the
  /// positions of a graph input `position_ids` (i64 [batch, sequence],
  /// added to the graph) instead of seqlens_k + 1 - S + i. The two agree
  /// whenever the caller gives each row its past length plus its index,
  /// with an attention mask of ones, as moec's generators do. Graphs that
  /// already have an input of that name keep the computed positions.
  bool positionInput = false;
  /// GroupQueryAttention as a first prompt runs it: no past (past_key and
  /// past_value are read as empty), the presents are the new keys and
  /// values, and the mask is causal over the rows (within the local window)
  /// as their count alone gives it. Implies positionInput. A node this form
  /// cannot express (a sliding-window cache, non-causal attention, an
  /// attention bias, positions that cannot come from an input) is an error.
  bool firstPrompt = false;
  /// Every FLOAT16 tensor imports as f32: weights (widened exactly, held in
  /// memory of their own at twice their bytes), graph inputs and outputs,
  /// Cast targets. The plan computes in f32 what the graph computes in
  /// f16, as onnxruntime's CPU kernels mostly do inside an op; only the
  /// roundings to f16 between ops are gone. For onnxruntime-genai's fp16
  /// exports, whose contrib ops moec imports in f32 only.
  bool widenFloat16 = false;
};

/// The unit attribute an import with ImportOptions::positionInput sets on
/// the module when it added the `position_ids` input.
constexpr llvm::StringLiteral kPositionsFromInputAttr =
    "moe.positions_from_input";

/// Loads, validates and imports the model at `path` into a module holding
/// `func.func @main`. Needs the moe and func dialects registered in
/// `context`. Returns null after reporting one error on failure. With
/// `options` that add a position input, graph inputs nothing reads any
/// more (the attention mask, the pasts of a first prompt) are removed.
mlir::OwningOpRef<mlir::ModuleOp>
importOnnxModel(mlir::MLIRContext *context, llvm::StringRef path,
                const ImportOptions &options = {});

/// Like importOnnxModel, from the serialized model `bytes` held in memory
/// (the fuzz targets, test/fuzz); `name` stands for the file in
/// diagnostics. External data is refused: it has no directory to resolve
/// against.
mlir::OwningOpRef<mlir::ModuleOp>
importOnnxModelFromBuffer(mlir::MLIRContext *context, llvm::StringRef bytes,
                          llvm::StringRef name);

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_IMPORT_H
