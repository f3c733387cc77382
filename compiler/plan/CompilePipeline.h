//===- CompilePipeline.h - from imported IR to a plan -----------*- C++ -*-===//
//
// The pass pipeline `moec compile` runs between the importer and the plan
// emitter, and the compile report (`moec compile --report`).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PLAN_COMPILEPIPELINE_H
#define MOEC_COMPILER_PLAN_COMPILEPIPELINE_H

#include "compiler/plan/PlanEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::plan {

struct CompileOptions {
  /// Upper bound of every dynamic graph input dimension.
  int64_t maxTokens = 256;
  /// NAME=N bounds of named (ONNX dim_param) input dimensions.
  std::vector<std::string> dimBounds;
  /// Expert parallelism (docs/expert-parallelism.md): the number of
  /// devices, a `moe-run --stats` JSON whose per-layer expert loads guide
  /// the placement (empty: balance parameter bytes), how many of the most
  /// loaded experts get a second slot, and the micro-batches per layer whose
  /// exchanges overlap the experts.
  int64_t devices = 1;
  std::string routingProfile;
  int64_t replicateHot = 0;
  int64_t microBatches = 1;
  /// Stop after simplification (for `--emit mlir`): no fusion, bounds or
  /// memory plan.
  bool simplifyOnly = false;
  /// Run moe-fuse-attention. Off for --target cuda: the CUDA backend has no
  /// Attention kernel, and the decomposed ops run on the GPU (in CUDA
  /// graphs) where an Attention step would run on the host.
  bool fuseAttention = true;
  /// Remark every detector's reason for each MoE candidate layer that stayed
  /// generic, not only the first (`moec compile --verbose`).
  bool allNearMisses = false;
  /// A generation pair's prefill graph: its token inputs (ids, positions),
  /// for moe-analyze-batch-rows's verdict on continuous batching; empty
  /// for other graphs.
  std::vector<std::string> batchRowInputs;
};

/// Adds the passes that take an imported module to a planned one:
/// canonicalisation and shape refinement, then (unless simplifyOnly) fusion,
/// shape bounds and the memory plan.
void buildCompilePipeline(mlir::OpPassManager &pm,
                          const CompileOptions &options);

/// Op counts of `module` by op name, for the report.
llvm::StringMap<int64_t> countOps(mlir::ModuleOp module);

/// Prints the detected MoE layers of a compiled `module` (router, experts
/// and shared experts of each) as a table to `os`, for `moec compile
/// --verbose`; the same fields are the report's "moe_layers". With a
/// narrowing `expertWeights`, a last line says which expert networks store
/// their matrices so.
void printMoeLayers(mlir::ModuleOp module, llvm::raw_ostream &os,
                    ExpertWeightType expertWeights = ExpertWeightType::F32);

/// One phrase for moec's summary line: "2 MoE layers (stacked)", "3 MoE
/// layers (2 stacked, 1 per-expert loop)", or that none was detected.
std::string summarizeMoeLayers(mlir::ModuleOp module);

/// Writes the compile report of a planned `module` as JSON to `path`:
/// memory plan (peak arena, naive sum of intermediates, weights), op counts
/// before (`opsBefore`) and after compilation, steps, and per MoE layer
/// the gate and expert configuration ("moe_layers"), and the storage of the
/// expert matrices ("expert_weight_dtype"; weight bytes count narrowed
/// matrices at their stored size).
/// `extra`'s entries are added to the report's top level.
mlir::LogicalResult
writeReport(mlir::ModuleOp module, const llvm::StringMap<int64_t> &opsBefore,
            llvm::StringRef path,
            ExpertWeightType expertWeights = ExpertWeightType::F32,
            llvm::json::Object extra = {});

/// Writes what `print` prints to `path` ("-": stdout), checking every write
/// and the close (where a full disk often shows first). A failure is one
/// error located at the file ("PATH: error: cannot write: No space left on
/// device") and leaves no partial file behind.
mlir::LogicalResult
writeOutputFile(mlir::MLIRContext *context, llvm::StringRef path,
                llvm::function_ref<void(llvm::raw_ostream &)> print);

} // namespace moec::plan

#endif // MOEC_COMPILER_PLAN_COMPILEPIPELINE_H
