//===- QuantizedWeights.h - Block-quantized weights in a plan ---*- C++ -*-===//
//
// How the plan emitter stores moe.block_quantized_constant: packed (codes,
// scales, zero points as the model has them) where every reader is a step
// that reads them so (MatMulNBits for moe.mat_mul's right operand, Experts
// with FfnAttrs.block_quant for moe.experts' matrices), else as the exact
// f32 values.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PLAN_QUANTIZEDWEIGHTS_H
#define MOEC_COMPILER_PLAN_QUANTIZEDWEIGHTS_H

#include "dialects/moe/MoeOps.h"

#include "format/plan_writer.h"

#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/DenseMap.h"

#include <functional>
#include <vector>

namespace moec::plan {

/// The weight tensors of a packed block-quantized constant (zeroPoints -1:
/// none).
struct PackedWeight {
  int32_t codes = -1, scales = -1, zeroPoints = -1;
  int64_t bits = 0, blockSize = 0;
  /// Products quantize their activations to int8 (BlockQuantAttrs).
  bool int8Activations = false;
};

/// Whether the plan stores `op` packed: every use is the right operand of a
/// moe.mat_mul (a transposed rank-2 constant), or a matrix of a moe.experts
/// with the out_in layout whose matrices are all packed constants of one
/// bits, block_size and int8_activations.
bool canStayPacked(moe::BlockQuantizedConstantOp op);

/// Adds weight `key` (shared with an earlier schedule that holds it) with
/// the given name, dtype, shape and bytes; returns its tensor id.
using AddKeyedWeight = std::function<int32_t(
    mlir::Attribute key, std::string name, moert::DType dtype,
    std::vector<int64_t> shape, llvm::ArrayRef<char> bytes)>;

/// Emits `op`'s weights: packed into `packed` when canStayPacked, else the
/// exact f32 value into `f32Id`. Bytes that are not the model's own stay
/// alive in `constantBytes` until the plan is written.
mlir::LogicalResult
emitBlockQuantizedConstant(moe::BlockQuantizedConstantOp op,
                           const std::string &name, const AddKeyedWeight &add,
                           std::vector<std::vector<char>> &constantBytes,
                           std::optional<PackedWeight> &packed, int32_t &f32Id);

/// The step of `op` when it reads packed weights (`packed`, by value): a
/// moe.mat_mul becomes MatMulNBits (a, codes, scales, zero points?) and a
/// moe.experts gets its block scales and zero points after its eight
/// inputs (`inputs`, already collected with the codes as its matrices) and
/// FfnAttrs.block_quant. Returns false when `op` reads none.
bool rewritePackedStep(mlir::Operation *op,
                       const llvm::DenseMap<mlir::Value, PackedWeight> &packed,
                       moert::fb::OpKind &kind, std::vector<int32_t> &inputs,
                       moert::fb::AttrsUnion &attrs);

} // namespace moec::plan

#endif // MOEC_COMPILER_PLAN_QUANTIZEDWEIGHTS_H
