//===- stream.h - Weight-streaming products for few rows --------*- C++ -*-===//
//
// A product of a few activation rows with a large weight matrix is bound by
// reading the weights: each weight element is used once per row. These
// kernels read each weight element exactly once, straight from its exported
// layout, with no packing, no allocation and no threads of their own, so the
// experts' column blocks can be sized for streaming and spread over the
// session's pool. (OpenBLAS starts its own threads above a fixed size, which
// capped such blocks at 16 columns and, at H = 1024 and F = 2816, sent more
// than 5 rows to threaded GEMMs; bench/README.md has the measurements.)
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_STREAM_H
#define MOERT_SRC_KERNELS_STREAM_H

#include <cstdint>

namespace moert::detail {

/// The storage of a weight matrix that the streaming products read: f32, or
/// 16-bit floats (bf16, f16) widened to f32 as they are loaded, so that a
/// 16-bit matrix costs half the memory traffic, or int8 (converted to f32
/// as loaded, a quarter of the traffic) whose products are scaled per output
/// column afterwards. Products accumulate in f32.
enum class StreamWeights { F32, BF16, F16, I8 };

/// c[n, m] (leading dimension ldc) = (x[n, K] @ W[:, c0 : c0 + m]) (*
/// scale[c0 : c0 + m] when `scale` is not null) (+ bias[c0 : c0 + m] when
/// `bias` is not null), for a matrix W stored as [out, K] (the `outIn`
/// layout: the block is m contiguous weight rows) of element type `type`.
/// Reads each element of the block once from memory (the rows of x reuse it
/// from registers and cache); meant for blocks of about a cache's size and a
/// few rows.
void streamProject(const float *x, int64_t n, int64_t K, const void *w,
                   StreamWeights type, int64_t c0, int64_t m,
                   const float *scale, const float *bias, float *c,
                   int64_t ldc);

/// streamProject on 16-lane AVX-512 FMAs, one weight row at a time in
/// memory order, which streamProject runs where hasAvx512Streams() (builds
/// without the AVX-512 entry points run the 8-lane kernels); declared for
/// the tests, which compare both. Only where hasAvx512Streams().
void streamProjectAvx512(const float *x, int64_t n, int64_t K, const void *w,
                         StreamWeights type, int64_t c0, int64_t m,
                         const float *scale, const float *bias, float *c,
                         int64_t ldc);

/// Whether this CPU runs streamProjectAvx512 (AVX-512 F, BW and VL; x86-64
/// builds with GCC only).
bool hasAvx512Streams();

/// streamProject on the 8-lane kernels whatever the CPU (the tests' other
/// side of streamProjectAvx512).
void streamProject8Lanes(const float *x, int64_t n, int64_t K, const void *w,
                         StreamWeights type, int64_t c0, int64_t m,
                         const float *scale, const float *bias, float *c,
                         int64_t ldc);

/// c[n, out] = x[:, k0 : k1] @ W[k0 : k1, :] for x [n, ldx] and W [K, out]
/// (the `inOut` layout) of element type `type`: a partial product over a
/// contiguous range of the weight rows, which it reads as one sequential
/// stream. Sums of such partials over a split of K give the product; meant
/// for a few rows (c is the accumulator, in cache).
void streamRowRange(const float *x, int64_t n, int64_t ldx, const void *w,
                    StreamWeights type, int64_t out, int64_t k0, int64_t k1,
                    float *c);

/// out[i] = W[i] as f32 for i < count: widens 16-bit and int8 weights
/// (vectorised, exact; int8 unscaled) for the products that read f32 blocks
/// (the GEMMs).
void widenWeights(const void *w, StreamWeights type, int64_t count, float *out);

/// widenWeights as a CPU without F16C and AVX2 runs it (integer vector
/// operations for f16 and int8; the other types as widenWeights), so that
/// tests cover that path on any machine.
void widenWeightsPortable(const void *w, StreamWeights type, int64_t count,
                          float *out);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_STREAM_H
