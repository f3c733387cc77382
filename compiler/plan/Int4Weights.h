//===- Int4Weights.h - --weight-dtype int4 ----------------------*- C++ -*-===//
//
// `moec compile --weight-dtype int4` quantizes the routed experts' matrices
// and the dense matrices (the ones --weight-dtype int8 narrows) to 4-bit
// codes in blocks of 32 along each output channel's inputs, with one scale
// per block (f16 where every scale of the matrix is a normal f16, as q4_0
// stores them; else f32) and the zero point 8, the form onnxruntime's
// MatMulNBits and QMoE store. The rewritten weights are
// moe.block_quantized_constant ops, so the plan keeps them packed and runs them
// through the same steps and kernels as an int4 onnxruntime-genai export.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PLAN_INT4WEIGHTS_H
#define MOEC_COMPILER_PLAN_INT4WEIGHTS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <cstdint>
#include <vector>

namespace moec::plan {

/// How --weight-dtype int4 stores and multiplies its matrices.
struct Int4Options {
  /// Columns (inputs) per block.
  int64_t blockSize = 32;
  /// Products quantize their activations to int8 per block and multiply
  /// integers (onnxruntime's accuracy_level 4; llama.cpp's q4_0 x q8_0),
  /// instead of computing in f32.
  bool int8Activations = false;
};

/// Quantizes `values` (`rows` rows of `cols`) row by row in blocks of
/// `blockSize` columns, as llama.cpp's q4_0 does: a block's scale is its
/// element of largest magnitude m divided by -8, rounded by `roundScale`
/// (to the precision the scales are stored in), and each code is
/// round(w / scale) + 8 (ties to even) clamped to [0, 15], so that m is
/// code 0 (exactly when the scale needed no rounding); an all-zero block
/// has scale 0. `codes` gets rows x ceil(cols / blockSize) * blockSize / 2
/// bytes, two codes each, the lower column in the low nibble (padding
/// columns code 8); `scales` rows x blocks.
void quantizeInt4Rows(const float *values, int64_t rows, int64_t cols,
                      int64_t blockSize, float (*roundScale)(float),
                      std::vector<uint8_t> &codes, std::vector<float> &scales);

/// What quantizeWeightsToInt4 rewrote (in the first module's functions,
/// which a generation plan's other modules mirror).
struct Int4Summary {
  int64_t denseMatrices = 0;
  int64_t expertNetworks = 0;
};

/// Replaces, in every function of `modules`, the matrices --weight-dtype
/// int4 quantizes by moe.block_quantized_constant ops of the same f32 type:
/// the right operands of moe.mat_mul that getNarrowableDenseWeights gives
/// (stored [N, K], transposed), and the matrices of each moe.experts whose
/// matrices are all narrowable (stored [E, out, in]; an in_out op becomes
/// out_in). Shared experts, routers, norms, biases and embedding tables
/// stay f32. Equal matrices of several modules (a prefill and a decode)
/// get equal bytes, so the plan stores them once. Reports its own errors.
mlir::FailureOr<Int4Summary>
quantizeWeightsToInt4(llvm::ArrayRef<mlir::ModuleOp> modules,
                      const Int4Options &options);

/// Marks every moe.block_quantized_constant of `modules` (a model's own
/// block-quantized weights: MatMulNBits, QMoE) int8_activations, as if
/// every such node had accuracy_level 4: the products that read them
/// packed quantize their activations to int8 per block and multiply
/// integers (`moec compile --int8-activations` without --weight-dtype
/// int4). Returns how many the first module has.
int64_t markInt8Activations(llvm::ArrayRef<mlir::ModuleOp> modules);

} // namespace moec::plan

#endif // MOEC_COMPILER_PLAN_INT4WEIGHTS_H
