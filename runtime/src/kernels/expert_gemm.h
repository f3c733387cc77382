//===- expert_gemm.h - oneDNN matmul blocks of the experts ------*- C++ -*-===//
//
// The GEMM blocks of the experts (kernels/expert_blocks.cpp) on oneDNN's
// matmul primitive, one primitive per block shape, created once and cached.
// With bf16 weights, and with int8 weights widened to bf16 (exact: every
// int8 is a bf16), the activations are rounded to bf16 per block and the
// products run on AMX or AVX512-BF16 with f32 accumulation, where the CPU
// has them (chosen by CPUID when the process runs). f32 weights in the
// [out, in] layout run oneDNN's f32 brgemm matmul where oneDNN has one for
// this CPU (AVX-512), else sgemm. The weights are read in their plan
// layout, [out, in] or [in, out], through strides: nothing is packed or
// transposed, so a tiered step's paged experts (expert_store.h) take the same
// path. Defined in expert_gemm.cpp, with the measurements behind the
// choices.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_EXPERT_GEMM_H
#define MOERT_SRC_KERNELS_EXPERT_GEMM_H

#include "kernels/stream.h"

#include <cstdint>

namespace moert::detail {

/// How a GEMM block multiplies 16-bit and int8 weights.
enum class BlockGemm {
  /// Widened to f32 into scratch, then oneDNN's sgemm (any x86-64).
  Widen,
  /// bf16 matmul: bf16 weights as stored, int8 widened to bf16, activations
  /// rounded to bf16 (needs AVX512-BF16 or AMX).
  Bf16,
};

/// Whether this CPU runs oneDNN's bf16 matmul natively: AVX512-BF16 (or
/// AMX, which comes with it). Elsewhere oneDNN would emulate it, slower
/// than widening.
bool hasBf16Matmul();

/// With false, hasBf16Matmul() answers false from then on (until called
/// with true): tests run the widening fallback on a CPU that has bf16.
void allowBf16Matmul(bool allowed);

/// With false, matmulBlock declines f32 weights from then on (until called
/// with true): tests run the sgemm path on a CPU with f32 brgemm kernels.
void allowF32Matmul(bool allowed);

/// The block kind that 16-bit and int8 weights of `type` use on this CPU
/// (f16 always widens: rounding f16 to bf16 would lose bits).
BlockGemm blockGemmFor(StreamWeights type);

/// Rows per expert up to which the experts' blocks stream their weights
/// (kernels/stream.h) rather than run GEMMs, for weights of `type` in the
/// `inOut` ([K, out], split along K) or [out, K] (column blocks) layout, on
/// this CPU: the cost model of expert_gemm.cpp. 0 in batch-invariant mode
/// (kernels/batch_invariant.h), where no row count streams.
int64_t streamedRows(StreamWeights type, bool inOut);

/// c[n, m] (leading dimension ldc) = x[n, K] @ W[:, c0 : c0 + m] (*
/// scale[c0 : c0 + m] for int8) (+ bias[c0 : c0 + m] when not null) for W
/// with `out` outputs stored as [K, out] (`inOut`) or [out, K] of bf16 or
/// int8 (widened into the thread's scratch, K x m), through a cached oneDNN
/// bf16 matmul (x rounded to bf16, f32 accumulation), or of f32 through an
/// f32 matmul where oneDNN has brgemm kernels for it on this CPU. Returns
/// false, having written nothing, for f16, for bf16 and int8 where
/// blockGemmFor(type) is not `BlockGemm::Bf16`, for f32 where oneDNN's f32
/// matmul is not brgemm, or when oneDNN refuses the shape (the caller then
/// runs its sgemm path).
bool matmulBlock(const float *x, int64_t n, int64_t K, const void *w,
                 StreamWeights type, int64_t out, bool inOut, int64_t c0,
                 int64_t m, const float *scale, const float *bias, float *c,
                 int64_t ldc);

/// Rounds f32 to bf16, to nearest even (NaN stays NaN), the conversion the
/// bf16 blocks apply to their activations.
void roundToBf16(const float *in, int64_t count, uint16_t *out);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_EXPERT_GEMM_H
