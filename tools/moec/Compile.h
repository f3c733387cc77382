//===- Compile.h - moec compile ---------------------------------*- C++ -*-===//
//
// The compile flow of `moec compile`: a model (or a generation pair, or an
// onnxruntime-genai builder folder) through the pipeline to a plan or IR,
// from options that Options.h has already read and verify() checks first.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_MOEC_COMPILE_H
#define MOEC_TOOLS_MOEC_COMPILE_H

#include "Options.h"
#include "compiler/plan/PlanEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"

#include <memory>

namespace moert {
class Plan;
} // namespace moert

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace moec {

struct MultimodalFolder;

/// Loads moec's dialects into `context`, whose diagnostics then print as
/// `<file>: error: <subject>: <message>`.
void configureContext(mlir::MLIRContext &context);

/// Runs `moec compile` with `flags`: resolves a builder folder, reports the
/// first usage error of the flags, then compiles; returns the exit code.
int runCompile(CompileFlags flags);

/// Compiles a vision-language export folder (`moec compile DIR --max-seq
/// S`, MultimodalCompile.cpp) into one multimodal plan; `flags` verified,
/// their model the decode graph and their prefill the language model.
int runMultimodalCompile(const CompileFlags &flags,
                         const MultimodalFolder &folder);

// What the compile flows share (Compile.cpp).

/// A finalizer that records the plan's provenance, then runs `next` (if
/// any); fails, with the error printed, when a model file cannot be hashed.
mlir::FailureOr<plan::PlanFinalizer>
recordProvenance(const CompileFlags &flags, plan::PlanFinalizer next = {});

/// Checks each device's planned activation arena: larger than a plan can
/// hold is an error; larger than this machine's memory (moe-run refuses such
/// a plan here) a warning. Both name the bounds of the inputs' dynamic
/// dimensions that size it.
mlir::LogicalResult checkArenaSize(mlir::ModuleOp module,
                                   const CompileFlags &flags);

/// The tiers of --device-memory (`bytes`, 0: none), with the loads of
/// --routing-profile read against `module`'s MoE layers.
mlir::FailureOr<plan::TierOptions> getTierOptions(mlir::ModuleOp module,
                                                  const CompileFlags &flags,
                                                  uint64_t bytes);
/// Prints (--verbose) and reports (--report, with `extra`'s entries) the
/// tiers of `plan`, the plan just written, read back from it; a --prefetch
/// that reads nothing ahead is an error.
mlir::LogicalResult reportTiers(mlir::ModuleOp module,
                                const CompileFlags &flags,
                                const moert::Plan &plan,
                                const llvm::StringMap<int64_t> &opsBefore,
                                plan::ExpertWeightType expertWeights,
                                llvm::json::Object extra = {});
/// Loads the plan just written as moe-run will (its checksums aside), so
/// that a graph the runtime cannot run (an op on a dtype it has no kernel
/// for, ...) is one error now, naming the step (the model's node), rather
/// than a plan that every moe-run refuses. The loader's checks are the one
/// statement of what the runtime supports; the file is removed on failure.
mlir::FailureOr<std::unique_ptr<moert::Plan>>
loadWrittenPlan(mlir::ModuleOp module, const std::string &outputPath);

} // namespace moec

#endif // MOEC_TOOLS_MOEC_COMPILE_H
