//===- tiles_avx512.cpp - Register-tiled products on AVX-512 --------------===//
//
// tileProject (kernels/tiles.h): panels of about 128 KiB of weight rows;
// within a panel, chunk by chunk of K, tiles of two weight rows by up to
// eight rows of activations, each summing its 16-lane vectors over the
// chunk in registers (AVX512-BF16 dot products of bf16 pairs) before one
// horizontal sum per output. The first pass over the panel
// prefetches the next panel, spread over its steps; the later passes read
// the panel from L2.
//
//===----------------------------------------------------------------------===//

#include "kernels/tiles.h"

#include "kernels/batch_invariant.h"
#include "kernels/expert_gemm.h"

#include <algorithm>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#if !defined(__clang__)
// GCC 12's intrinsics start from _mm*_undefined_*(), which -Wuninitialized
// reports at every use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#define MOERT_TILES_X86 1
#define MOERT_TILES_BF16                                                       \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define MOERT_TILES_X86 0
#endif

namespace moert::detail {
namespace {

/// Weight rows and rows of activations per tile: 16 running vectors, half
/// of the registers.
constexpr int kTileWeights = 2, kTileRows = 8;
/// Inputs per step: a 64-byte vector of bf16, which AVX512-BF16 multiplies
/// in pairs.
constexpr int64_t kStep = 32;
/// Inputs per chunk of K: a tile's 8 rows of x over one chunk are 16 KiB of
/// L1; 1024 was faster than 2048 (bench/README.md, "Register tiles for the
/// prompt's experts").
constexpr int64_t kChunkInputs = 1024;
/// Bytes of weight rows per panel: in L2 (with the next panel, prefetched)
/// for the panel's later passes; 128 KiB was faster than 32, 64 and 256 at
/// K = 1024 and 2816 (bench/README.md, "Register tiles for the prompt's
/// experts").
constexpr int64_t kPanelBytes = 128 << 10;
/// Up to this many rows tileProject ran faster than oneDNN's matmul blocks
/// (bench/README.md, "Register tiles for the prompt's experts").
constexpr int64_t kMostTiledRows = 40;

#if MOERT_TILES_X86
/// The sum of v's 16 lanes: halves, then quarters, ... (in registers: a
/// copy through memory here kept a tile's running vectors on the stack).
MOERT_TILES_BF16 inline float sum16(__m512 v) {
  __m512 halves = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  __m256 eight = _mm512_castps512_ps256(halves);
  __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight),
                           _mm256_extractf128_ps(eight, 1));
  __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

/// x[0, count) rounded to bf16 into the calling thread's buffer, aligned to
/// cache lines: unaligned rows split most of the tiles' loads over two
/// lines.
uint16_t *roundedInputs(const float *x, int64_t count) {
  struct alignas(64) Line {
    uint16_t halves[32];
  };
  static thread_local std::vector<Line> lines;
  lines.resize((count + 31) / 32);
  uint16_t *out = lines.data()->halves;
  roundToBf16(x, count, out);
  return out;
}

/// 32 bf16 of x or w, the last step's tail zeros.
MOERT_TILES_BF16 inline __m512 bf16Pairs(const uint16_t *p, int64_t left) {
  __m512i v =
      left >= 32
          ? _mm512_loadu_si512(p)
          : _mm512_maskz_loadu_epi16(__mmask32((uint64_t(1) << left) - 1), p);
  return _mm512_castsi512_ps(v);
}

/// bf16 weights, as stored.
struct Bf16Tiles {
  using Weight = uint16_t;
  static MOERT_TILES_BF16 inline __m512 weights(const uint16_t *w,
                                                int64_t left) {
    return bf16Pairs(w, left);
  }
};

/// int8 weights, widened to bf16 (exact) in registers.
struct I8Tiles {
  using Weight = int8_t;
  static MOERT_TILES_BF16 inline __m512 weights(const int8_t *w, int64_t left) {
    __m256i q =
        left >= 32
            ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w))
            : _mm256_maskz_loadu_epi8(__mmask32((uint64_t(1) << left) - 1), w);
    __m512 lo =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
    __m512 hi = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
    // Lanes in memory order: the low 16 bf16 from `lo`.
    return _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
};

/// One step of tile(): kStep inputs at k (the last step masked to `left`).
template <typename T, int J, int R>
MOERT_TILES_BF16 inline __attribute__((always_inline)) void
step(const uint16_t *x, const typename T::Weight *w, int64_t ld, int64_t k,
     int64_t left, __m512 (&acc)[J][R]) {
  __m512 wv[J];
#pragma GCC unroll 16
  for (int a = 0; a < J; ++a)
    wv[a] = T::weights(w + a * ld + k, left);
#pragma GCC unroll 16
  for (int b = 0; b < R; ++b) {
    __m512 xv = bf16Pairs(x + b * ld + k, left);
#pragma GCC unroll 16
    for (int a = 0; a < J; ++a)
      acc[a][b] = _mm512_dpbf16_ps(acc[a][b], (__m512bh)xv, (__m512bh)wv[a]);
  }
}

/// The J x R sums of weight rows w[a * ld ...] and input rows x[b * ld ...]
/// over their first `len` inputs into sums[a * R + b]; `prefetch` (or null)
/// is read ahead, `lines` cache lines a step. Not inlined: each tile shape
/// keeps its running vectors in registers as a function of its own.
template <typename T, int J, int R>
MOERT_TILES_BF16 __attribute__((noinline)) void
tile(const uint16_t *x, const typename T::Weight *w, int64_t ld, int64_t len,
     const char *prefetch, int64_t lines, float *sums) {
  __m512 acc[J][R];
#pragma GCC unroll 16
  for (int a = 0; a < J; ++a)
#pragma GCC unroll 16
    for (int b = 0; b < R; ++b)
      acc[a][b] = _mm512_setzero_ps();
  const int64_t full = len / kStep * kStep;
  int64_t k = 0;
  if (prefetch)
    for (; k < full; k += kStep) {
      for (int64_t l = 0; l < lines; ++l)
        _mm_prefetch(prefetch + l * 64, _MM_HINT_T0);
      prefetch += lines * 64;
      step<T, J, R>(x, w, ld, k, kStep, acc);
    }
  for (; k < full; k += kStep)
    step<T, J, R>(x, w, ld, k, kStep, acc);
  if (k < len)
    step<T, J, R>(x, w, ld, k, len - k, acc);
#pragma GCC unroll 16
  for (int a = 0; a < J; ++a)
#pragma GCC unroll 16
    for (int b = 0; b < R; ++b)
      sums[a * R + b] = sum16(acc[a][b]);
}

/// tile() for j weight rows (1 to J) and r rows of x (1 to R).
template <typename T, int J, int R>
MOERT_TILES_BF16 inline __attribute__((always_inline)) void
anyTile(int j, int64_t r, const uint16_t *x, const typename T::Weight *w,
        int64_t ld, int64_t len, const char *prefetch, int64_t lines,
        float *sums) {
  if constexpr (J > 1)
    if (j < J)
      return anyTile<T, J - 1, R>(j, r, x, w, ld, len, prefetch, lines, sums);
  if constexpr (R > 1)
    if (r < R)
      return anyTile<T, J, R - 1>(j, r, x, w, ld, len, prefetch, lines, sums);
  tile<T, J, R>(x, w, ld, len, prefetch, lines, sums);
}

/// tileProject on inputs already in T's input type (x [n, K]): panel by
/// panel of weight rows, chunk by chunk of K (a tile's rows of x over one
/// chunk stay in L1 while the panel's tiles pass; the panel stays in L2
/// across the chunks), each chunk's sums added to c, then the scale and
/// bias.
template <typename T>
MOERT_TILES_BF16 inline __attribute__((always_inline)) void
panels(const uint16_t *x, int64_t n, int64_t K, const typename T::Weight *w,
       int64_t m, const float *scale, const float *bias, float *c,
       int64_t ldc) {
  constexpr int J = kTileWeights, R = kTileRows;
  const int64_t steps = (K + kStep - 1) / kStep;
  const int64_t rowBytes = K * int64_t(sizeof(typename T::Weight));
  float sums[J * R];
  const int64_t panelRows =
      std::max<int64_t>(J, kPanelBytes / rowBytes / J * J);
  for (int64_t p0 = 0; p0 < m; p0 += panelRows) {
    const int64_t rows = std::min(panelRows, m - p0);
    // The next panel's lines, spread over the steps of the tiles of the
    // first rows of x.
    const int64_t nextRows = std::min(panelRows, m - p0 - rows);
    const int64_t tiles = (rows + J - 1) / J;
    const int64_t lines =
        (nextRows * rowBytes / 64 + tiles * steps - 1) / (tiles * steps);
    const char *ahead =
        lines > 0 ? reinterpret_cast<const char *>(w + (p0 + rows) * K)
                  : nullptr;
    for (int64_t k0 = 0; k0 < K; k0 += kChunkInputs) {
      const int64_t len = std::min(kChunkInputs, K - k0);
      const int64_t tileLines = (len + kStep - 1) / kStep * lines * 64;
      for (int64_t r0 = 0; r0 < n; r0 += R) {
        const int64_t r = std::min<int64_t>(R, n - r0);
        for (int64_t j = p0; j < p0 + rows; j += J) {
          const int jr = std::min<int64_t>(J, p0 + rows - j);
          anyTile<T, J, R>(jr, r, x + r0 * K + k0, w + j * K + k0, K, len,
                           r0 == 0 ? ahead : nullptr, lines, sums);
          if (r0 == 0 && ahead)
            ahead += tileLines;
          for (int a = 0; a < jr; ++a)
            for (int64_t b = 0; b < r; ++b) {
              float &out = c[(r0 + b) * ldc + j + a];
              out = k0 == 0 ? sums[a * r + b] : out + sums[a * r + b];
            }
        }
      }
    }
    if (scale || bias)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = p0; j < p0 + rows; ++j) {
          float &out = c[i * ldc + j];
          if (scale)
            out *= scale[j];
          if (bias)
            out += bias[j];
        }
  }
}

MOERT_TILES_BF16 void panelsBf16(const uint16_t *x, int64_t n, int64_t K,
                                 const uint16_t *w, int64_t m,
                                 const float *scale, const float *bias,
                                 float *c, int64_t ldc) {
  panels<Bf16Tiles>(x, n, K, w, m, scale, bias, c, ldc);
}

MOERT_TILES_BF16 void panelsI8(const uint16_t *x, int64_t n, int64_t K,
                               const int8_t *w, int64_t m, const float *scale,
                               const float *bias, float *c, int64_t ldc) {
  panels<I8Tiles>(x, n, K, w, m, scale, bias, c, ldc);
}
#endif

} // namespace

int64_t tiledRows(StreamWeights type) {
  if (batchInvariant() || !MOERT_TILES_X86)
    return 0;
  return (type == StreamWeights::BF16 || type == StreamWeights::I8) &&
                 hasBf16Matmul()
             ? kMostTiledRows
             : 0;
}

void tileProject(const float *x, int64_t n, int64_t K, const void *w,
                 StreamWeights type, int64_t c0, int64_t m, const float *scale,
                 const float *bias, float *c, int64_t ldc) {
  if (n == 0 || m == 0)
    return;
#if MOERT_TILES_X86
  const float *s = scale ? scale + c0 : nullptr;
  const float *b = bias ? bias + c0 : nullptr;
  if (type == StreamWeights::BF16)
    return panelsBf16(roundedInputs(x, n * K), n, K,
                      static_cast<const uint16_t *>(w) + c0 * K, m, s, b, c,
                      ldc);
  if (type == StreamWeights::I8)
    return panelsI8(roundedInputs(x, n * K), n, K,
                    static_cast<const int8_t *>(w) + c0 * K, m, s, b, c, ldc);
#endif
  // No tiles for this type here (tiledRows is 0): the streaming product.
  streamProject(x, n, K, w, type, c0, m, scale, bias, c, ldc);
}

} // namespace moert::detail
