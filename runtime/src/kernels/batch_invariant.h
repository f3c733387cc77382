//===- batch_invariant.h - Products that ignore the other rows -*- C++ -*-===//
//
// Continuous batching runs the rows of several sequences through one step,
// and the GEMM libraries choose their blocking (and so their summation
// order) from the row count: a sequence's logits in a batch then differ from
// its logits alone by a few ulps times the model's gain (docs/serving.md).
// In batch-invariant mode every product computes each output element from
// its own row alone, in one fixed order, so that the rows of a step never
// change each other's bits. Defined in batch_invariant.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_BATCH_INVARIANT_H
#define MOERT_SRC_KERNELS_BATCH_INVARIANT_H

#include <cstdint>

namespace moert::detail {

/// Whether the process runs in batch-invariant mode: MOERT_BATCH_INVARIANT
/// set to 1 in the environment when the first product runs. The mode sends
/// every f32 product through invariantSgemm and keeps the expert kernels
/// off their row-count-dependent paths (weight streaming, splits along K,
/// oneDNN matmul blocks); block-quantized weights (int4/int8 MatMulNBits
/// and QMoE) keep their kernels.
bool batchInvariant();

/// sgemm (kernels/common.h) whose element C[i, j] = alpha * s + beta *
/// C[i, j] takes s from row i of op(A) and column j of op(B) alone, in an
/// order set by k only: ascending over k for B as stored ([k, n]); eight
/// interleaved partial sums added in a fixed tree for transposed B ([n, k]).
/// So the value of an element does not depend on m, n, the other rows or
/// the blocking.
void invariantSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float beta, float *c, int64_t ldc);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_BATCH_INVARIANT_H
