//===- tiles.h - Register-tiled products for a few dozen rows ---*- C++ -*-===//
//
// A prompt sends each expert a few dozen rows (64 tokens top-2 of 8 experts
// are 16 rows an expert). A GEMM library packs its weight operand for such
// a product and then has few rows to spread that cost over; the streaming
// kernels (kernels/stream.h) use each loaded weight vector for at most four
// rows and are bound by loading activations. These kernels keep a tile of
// output sums in registers (two weight rows by eight rows of activations
// for bf16 and int8 weights, multiplied as bf16 dot products; for f32, two
// by four rows with two running sums each, or four by six with one): each
// loaded weight vector feeds several sums and each activation vector two, read
// straight from the weights' [out, K] layout with no packing.
//
// f32 weights: up to kInvariantRowsF32 rows, each output is summed in one
// order that depends on K alone (per chunk of 1024 inputs, two running
// vectors over alternate 16-lane steps, added, summed across lanes, the
// chunks' sums added in turn), and on AVX-512 streamProject's f32 products
// are these tiles one weight row at a time: a row's sums are the same
// whether it is alone, streams with a few others or shares a tile
// (bench/README.md, "f32 tiles in one order for every count of rows"), so
// a sequence decoding in a batch of up to 8 gets the products it gets
// alone. More rows (a prompt's experts) take wider tiles with one running
// vector per output: their sums depend on K and not on the other rows, but
// differ from the sums of fewer rows. The experts, the Linear step and
// Gemms by a transposed matrix (kernels/matmul.cpp) take the f32 tiles up
// to tiledRows rows.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_TILES_H
#define MOERT_SRC_KERNELS_TILES_H

#include "kernels/stream.h"

#include <cstdint>

namespace moert::detail {

/// Up to this many rows of x, tileProject's f32 sums are streamProject's sums
/// of each row alone.
inline constexpr int64_t kInvariantRowsF32 = 8;

/// Whether this CPU runs tileProject for f32 weights (AVX-512 F, BW and VL;
/// x86-64 builds with GCC only), whatever tiledRows says.
bool hasF32Tiles();

/// The most rows of activations for which tileProject multiplies weights of
/// `type` on this CPU rather than a GEMM, 0 where it does not: f16 weights,
/// CPUs without AVX-512 (and AVX512-BF16 for bf16 and int8 weights), and
/// batch-invariant mode (kernels/batch_invariant.h).
int64_t tiledRows(StreamWeights type);

/// c[n, m] (leading dimension ldc) = (x[n, K] @ W[:, c0 : c0 + m]) (*
/// scale[c0 : c0 + m] when `scale` is not null) (+ bias[c0 : c0 + m] when
/// `bias` is not null), for W stored as [out, K] of element type `type`,
/// as streamProject: f32 weights multiply x as it is; bf16 and int8 weights
/// (int8 widened to bf16, which is exact) multiply x rounded to bf16, with
/// f32 sums, as the bf16 matmul blocks (kernels/expert_gemm.h) do. Each
/// c[r, j] is summed in an order that depends on K alone (for f32, also on
/// whether n is more than kInvariantRowsF32), not on the other rows or on
/// m. f32 where hasF32Tiles(), bf16 and int8 where
/// tiledRows(type) > 0 (else the streaming product); any n.
void tileProject(const float *x, int64_t n, int64_t K, const void *w,
                 StreamWeights type, int64_t c0, int64_t m, const float *scale,
                 const float *bias, float *c, int64_t ldc);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_TILES_H
