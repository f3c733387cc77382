//===- stream.h - Weight-streaming products for few rows --------*- C++ -*-===//
//
// A product of a few activation rows with a large weight matrix is bound by
// reading the weights: each weight element is used once per row. These
// kernels read each weight element exactly once, straight from its exported
// layout, with no packing, no allocation and no threads of their own, so the
// experts' column blocks can be sized for streaming and spread over the
// session's pool. (OpenBLAS starts its own threads above a fixed size, which
// capped such blocks at 16 columns and, at H = 1024 and F = 2816, sent more
// than 5 rows to threaded GEMMs; moe.cpp has the measurements.)
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_STREAM_H
#define MOERT_SRC_KERNELS_STREAM_H

#include <cstdint>

namespace moert::detail {

/// c[n, m] (leading dimension ldc) = x[n, K] @ W[:, c0 : c0 + m] (+ bias[c0 :
/// c0 + m] when `bias` is not null), for a matrix W stored as [out, K] (the
/// `outIn` layout: the block is m contiguous weight rows). Reads each element
/// of the block once from memory (the rows of x reuse it from registers and
/// cache); meant for blocks of about a cache's size and a few rows.
void streamProject(const float *x, int64_t n, int64_t K, const float *w,
                   int64_t c0, int64_t m, const float *bias, float *c,
                   int64_t ldc);

/// c[n, out] = x[:, k0 : k1] @ W[k0 : k1, :] for x [n, ldx] and W [K, out]
/// (the `inOut` layout): a partial product over a contiguous range of the
/// weight rows, which it reads as one sequential stream. Sums of such
/// partials over a split of K give the product; meant for a few rows
/// (c is the accumulator, in cache).
void streamRowRange(const float *x, int64_t n, int64_t ldx, const float *w,
                    int64_t out, int64_t k0, int64_t k1, float *c);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_STREAM_H
