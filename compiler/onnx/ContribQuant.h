//===- ContribQuant.h - onnxruntime's int4/int8 contrib ops -----*- C++ -*-===//
//
// The handlers of the quantized com.microsoft ops that onnxruntime-genai's
// model builder writes for int4 CPU models; ContribOps.cpp registers them.
// Each keeps the node's constant weights block-quantized
// (moe.block_quantized_constant) where the runtime reads them packed, else
// dequantizes them at import (Quantization.h) into an f32 moe.constant, and
// builds the float ops on them.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_CONTRIBQUANT_H
#define MOEC_COMPILER_ONNX_CONTRIBQUANT_H

#include "compiler/onnx/OpImport.h"

namespace moec::onnx_import {

/// Imports com.microsoft.MatMulNBits: `moe.mat_mul` of A by the [K, N]
/// weight (block-quantized, or f32 for float zero points), then `moe.add` of
/// the bias where there is one.
mlir::LogicalResult importMatMulNBits(NodeImporter &node);

/// Imports com.microsoft.GatherBlockQuantized with uint8 data: `moe.gather`
/// along axis 0 of the dequantized table.
mlir::LogicalResult importGatherBlockQuantized(NodeImporter &node);

/// Imports com.microsoft.QMoE with integer weights: the expert weights are
/// [E, out, in] block-quantized constants (f32 for per-row zero points) and the
/// node is imported as com.microsoft.MoE on them (importContribMoE).
mlir::LogicalResult importQMoE(NodeImporter &node);

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_CONTRIBQUANT_H
