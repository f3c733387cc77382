//===- PlanEmitter.h - moe dialect to plan.bin ------------------*- C++ -*-===//
//
// The last stage of the compiler: serialises a planned function (bounds from
// moe-bound-shapes, arena offsets from moe-plan-memory) into the runtime's
// plan format through the runtime's plan writer. The schema belongs to the
// runtime; this file only maps ops and attributes onto it.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PLAN_PLANEMITTER_H
#define MOEC_COMPILER_PLAN_PLANEMITTER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/DenseSet.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace moert {
class PlanWriter;
} // namespace moert

namespace moec::plan {

/// Completes a plan after every step is emitted and before it is written:
/// the CUDA target (compiler/cuda) adds its kernels here. Reports its own
/// errors.
using PlanFinalizer = std::function<mlir::LogicalResult(moert::PlanWriter &)>;

/// How the plan stores the matrices of the expert networks (w1, w3, w2 of
/// moe.experts and moe.shared_expert) and the dense matrices
/// (getNarrowableDenseWeights, compiler/plan/DenseWeights.h): as in the
/// model (f32), or narrowed to bf16 / f16 while the plan is written (`moec
/// compile --weight-dtype`), or quantized to int8 with an f32 scale per
/// expert and output channel. Biases and every other tensor keep their
/// type.
enum class ExpertWeightType { F32, BF16, F16, I8 };

/// "f32", "bf16", "f16", "int8".
llvm::StringRef stringifyExpertWeightType(ExpertWeightType type);

/// Bytes per element of an expert matrix stored as `type`.
int64_t getExpertWeightElementBytes(ExpertWeightType type);

/// The expert matrices of `func` that `type` narrows (none for F32): the f32
/// w1, w3 and w2 of every moe.experts and moe.shared_expert whose matrices
/// are all weights (constants, stacks of constants, shards) that nothing
/// but such matrix operands reads. An op
/// with one matrix that cannot be narrowed keeps all of its matrices f32,
/// so that its three matrices always share one type (the runtime requires
/// it).
llvm::DenseSet<mlir::Value> getNarrowableExpertWeights(mlir::func::FuncOp func,
                                                       ExpertWeightType type);

/// The [E, in, out] matrices of the routed experts (moe.experts with the
/// in_out layout) that the plan stores transposed, [E, out, in], with the
/// out_in layout in their steps: on the CPU a column block of an [out, in]
/// matrix is one contiguous range, where an [in, out] one is a row slice per
/// input (a page each for wide layers), which the GEMM blocks read 1.5x
/// slower. The same stored weights as getNarrowableExpertWeights finds.
llvm::DenseSet<mlir::Value>
getTransposableExpertWeights(mlir::func::FuncOp func);

/// Tiered expert weights (`moec compile --device-memory`,
/// docs/tiered-experts.md): the routed experts' weights go into a paged
/// section per device and each schedule is tiered for the budget.
struct TierOptions {
  /// The memory budget of each device in bytes; 0: no tiers.
  uint64_t deviceMemory = 0;
  /// Per MoE layer (the moe.experts ops of a single-device plan in program
  /// order), each expert's expected load: a routing profile. Empty: the
  /// experts' index order.
  std::vector<std::vector<double>> loads;
  /// The plan's read-ahead policy (`moec compile --prefetch`): "none",
  /// "next-layer" or "next-micro-batch".
  std::string prefetch = "none";
};

/// Writes the plan of `func` to `path`. Every unsupported op, type or missing
/// planning attribute is reported as an error located at the op.
mlir::LogicalResult
emitPlan(mlir::func::FuncOp func, llvm::StringRef path,
         const PlanFinalizer &finalize = {},
         ExpertWeightType expertWeights = ExpertWeightType::F32);

/// The functions of `module` that become the plan's schedules, in device
/// order: those carrying `moe.device = d` (expert parallelism,
/// moe-insert-all-to-all), else @main alone. Reports malformed sets.
mlir::FailureOr<llvm::SmallVector<mlir::func::FuncOp>>
getDeviceFunctions(mlir::ModuleOp module);

/// Writes the plan of `module`: one schedule per device function
/// (getDeviceFunctions). Dense weights that several devices read are stored
/// once; each device's expert shards are its own.
mlir::LogicalResult
emitPlan(mlir::ModuleOp module, llvm::StringRef path,
         const PlanFinalizer &finalize = {},
         ExpertWeightType expertWeights = ExpertWeightType::F32,
         const TierOptions &tiers = {});

struct GenerationSignature;

/// Writes the generation plan (docs/plan-format.md, "Generation plans") of
/// the planned `decode` module and, unless null, `prefill` module: the
/// decode schedule, the prefill schedule (which shares the decode's weights
/// byte for byte) and `signature`'s cache pairs and names. With `tiers`,
/// the decode schedule's routed experts are tiered and the prefill
/// schedule pages the same experts (one expert cache serves both).
mlir::LogicalResult
emitGenerationPlan(mlir::ModuleOp decode, mlir::ModuleOp prefill,
                   const GenerationSignature &signature, llvm::StringRef path,
                   const PlanFinalizer &finalize = {},
                   ExpertWeightType expertWeights = ExpertWeightType::F32,
                   const TierOptions &tiers = {});

struct StageGraph;
struct MultimodalSignature;

/// Writes the multimodal generation plan (docs/plan-format.md, "Multimodal
/// plans") of the planned `decode` module and `stages` (each planned, with
/// its feeds): the decode schedule, one schedule per stage, the generation
/// table of `signature` and the Multimodal table of `multimodal`. Weights
/// with the same bytes are stored once, whichever graphs hold them. An
/// expert-parallel plan has the decode schedule and the Prefill stage of
/// every device, the other stages once; with `tiers`, the Prefill stage
/// pages the decode schedule's tiered experts.
mlir::LogicalResult
emitMultimodalPlan(mlir::ModuleOp decode, llvm::ArrayRef<StageGraph> stages,
                   const GenerationSignature &signature,
                   const MultimodalSignature &multimodal, llvm::StringRef path,
                   const PlanFinalizer &finalize = {},
                   ExpertWeightType expertWeights = ExpertWeightType::F32,
                   const TierOptions &tiers = {});

/// Like emitPlan of a module, into `bytes` instead of a file (the fuzz
/// targets, test/fuzz).
mlir::LogicalResult
emitPlanToBuffer(mlir::ModuleOp module, std::vector<uint8_t> &bytes,
                 const PlanFinalizer &finalize = {},
                 ExpertWeightType expertWeights = ExpertWeightType::F32);

} // namespace moec::plan

#endif // MOEC_COMPILER_PLAN_PLANEMITTER_H
