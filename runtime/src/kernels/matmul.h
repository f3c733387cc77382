//===- matmul.h - Shapes shared by the MatMul and Gemm backends -*- C++ -*-===//
//
// The run-time shape logic of MatMul (numpy matmul) and Gemm (ONNX Gemm)
// that the CPU kernels (matmul.cpp, OpenBLAS) and the GPU ops
// (cuda/moe_routing.cpp, cuBLAS) share: the checks, the output shape and its
// allocation, so that both backends agree on every shape and message.
// Defined in matmul.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_MATMUL_H
#define MOERT_SRC_KERNELS_MATMUL_H

#include "kernels/common.h"

#include <climits>

namespace moert::detail {

/// BLAS (OpenBLAS and cuBLAS alike) takes 32-bit sizes.
inline bool fitsBlas(int64_t value) { return value <= INT32_MAX; }

/// A MatMul step resolved against its operands: `batch` matrix products of
/// [m, k] x [k, n], the operands' batch dimensions (rank-1 operands count as
/// a row of A or a column of B, with none) broadcast to `batch`.
struct MatMulShapes {
  int64_t m = 0, n = 0, k = 0;
  Shape batchA, batchB, batch;
  /// The allocated output.
  Tensor *out = nullptr;
};

/// Checks MatMul's operands, allocates its output and checks that the
/// matrix sizes fit BLAS.
absl::StatusOr<MatMulShapes> planMatMul(KernelContext &ctx);

/// A Gemm step resolved against its operands: Y [m, n] = alpha op(A) op(B)
/// + beta C with the inner size k.
struct GemmShapes {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  /// The allocated output.
  Tensor *out = nullptr;
  /// Whether C is added: it is present and beta is not 0. Its shape then
  /// broadcasts to [m, n] (checked).
  bool addsC = false;
};

/// Checks Gemm's operands, allocates its output, checks that the matrix
/// sizes fit BLAS and that C (when added) broadcasts to the output.
absl::StatusOr<GemmShapes> planGemm(KernelContext &ctx);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_MATMUL_H
