//===- DenseWeights.h - Narrowed dense matrices in a plan -------*- C++ -*-===//
//
// `moec compile --weight-dtype bf16|f16|int8` narrows every large matrix,
// not only the experts': the constant right operands of MatMuls (attention
// projections, dense MLPs, the output layer) are stored transposed, [N, K],
// as bf16, f16 or int8 with an f32 scale per output channel, and their
// MatMul steps become Linear steps (docs/plan-format.md, format 1.16).
// Routers stay f32, and so does whatever `--keep-f32` names.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PLAN_DENSEWEIGHTS_H
#define MOEC_COMPILER_PLAN_DENSEWEIGHTS_H

#include "compiler/plan/PlanEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"

#include <string>

namespace moec::plan {

/// Matrices with fewer elements stay f32: they save nothing measurable.
inline constexpr int64_t kMinNarrowedDenseElements = 1024;

/// The dense matrices of `func` that `type` narrows (none for F32): f32
/// rank-2 constants of at least kMinNarrowedDenseElements that nothing but
/// the right operand of f32 moe.mat_mul ops reads, unless a product of
/// theirs feeds a router (a moe.router, or a TopK through ops that only
/// reshape or score values) or they are marked kept (keepDenseWeightsWide).
llvm::DenseSet<mlir::Value> getNarrowableDenseWeights(mlir::func::FuncOp func,
                                                      ExpertWeightType type);

/// The dense matrices of `func` that the plan stores transposed, [N, K],
/// for the Linear step: those getNarrowableDenseWeights narrows, and in an
/// f32 plan the same matrices kept f32, whose rows the CPU then reads in
/// memory order (kernels/tiles.h) where a decode step through sgemm read
/// [K, N] at three quarters of the read bandwidth (bench/README.md, "f32
/// dense matrices as Linear steps"). None where --keep-f32 or the CUDA
/// target (keepDenseWeightsWide) marks them kept.
llvm::DenseSet<mlir::Value> getLinearDenseWeights(mlir::func::FuncOp func,
                                                  ExpertWeightType type);

/// The embedding tables of `func` that `type` narrows (bf16 and f16 only):
/// f32 rank-2 constants of at least kMinNarrowedDenseElements that only
/// Gathers along axis 0 read, unless marked kept. The plan stores them
/// narrowed and their Gathers widen the rows they read to f32 (format
/// 1.19).
llvm::DenseSet<mlir::Value> getNarrowableEmbeddings(mlir::func::FuncOp func,
                                                    ExpertWeightType type);

/// Every matrix `type` narrows: the expert matrices
/// (getNarrowableExpertWeights), the dense ones and the embeddings.
llvm::DenseSet<mlir::Value> getNarrowableWeights(mlir::func::FuncOp func,
                                                 ExpertWeightType type);

/// Marks the dense matrices and embedding tables of `modules` that stay f32
/// (`moec compile --keep-f32`): those whose ONNX initializer name, whose
/// reading MatMul or Gather node's name, or the name of a graph output such
/// a product is (`logits`) contains one of `names`, or every one when `all`
/// (the CUDA target, which has no Linear step nor widening Gather). Fails,
/// naming it, on a name that matches no dense matrix.
mlir::LogicalResult keepDenseWeightsWide(llvm::ArrayRef<mlir::ModuleOp> modules,
                                         llvm::ArrayRef<std::string> names,
                                         bool all);

} // namespace moec::plan

#endif // MOEC_COMPILER_PLAN_DENSEWEIGHTS_H
