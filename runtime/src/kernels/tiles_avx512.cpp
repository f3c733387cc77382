//===- tiles_avx512.cpp - Register-tiled products on AVX-512 --------------===//
//
// tileProject (kernels/tiles.h): panels of about 128 KiB of weight rows;
// within a panel, chunk by chunk of K, tiles of two weight rows by up to
// eight rows of activations (for f32 four; past kInvariantRowsF32 rows,
// four weight rows by six in panels of 512 KiB), each summing its 16-lane
// vectors over the chunk in registers (f32 FMAs into two running vectors,
// or one for the wide tiles; AVX512-BF16 dot products of bf16 pairs into
// one) before one horizontal sum per output. The first pass over the panel
// (every pass, for the wide tiles) prefetches the next panel, spread over its
// steps; the later passes read the panel from L2. f32 products whose
// activations fit in L1 take the weight rows one at a time instead, in memory
// order, each prefetched ahead (rowsInOrder): the same tiles and so the same
// sums.
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

/// Inputs per chunk of K: a tile's 8 rows of x over one chunk are 16 KiB of
/// L1; 1024 was faster than 2048 (bench/README.md, "Register tiles for the
/// prompt's experts").
constexpr int64_t kChunkInputs = 1024;
/// Bytes of weight rows per panel: in L2 (with the next panel, prefetched)
/// for the panel's later passes; 128 KiB was faster than 32, 64 and 256 at
/// K = 1024 and 2816 (bench/README.md, "Register tiles for the prompt's
/// experts"), except for the wide f32 tiles (F32WideTiles).
constexpr int64_t kPanelBytes = 128 << 10;
/// Up to this many rows tileProject ran faster than oneDNN's matmul blocks
/// (bench/README.md, "Register tiles for the prompt's experts").
constexpr int64_t kMostTiledRows = 40;
/// Up to this many bytes of x (all its rows) tileProject takes the weight
/// rows one at a time in memory order rather than by panels (rowsInOrder):
/// x's chunks then stay in L1 from one weight row to the next.
constexpr int64_t kInOrderInputBytes = 32 << 10;
/// How far ahead on each weight row rowsInOrder prefetches (at 2 rows of x,
/// K = 2816: 86% of the read bandwidth, against 74% with none).
constexpr int64_t kRowAhead = 4096;
/// f32 FMAs have half the bf16 dot products' arithmetic: oneDNN's blocks
/// overtake the (wide) f32 tiles sooner, past about 48 rows at K = 1024 and
/// 2816 (bench/README.md, "Wide f32 tiles for a prompt's experts").
constexpr int64_t kMostTiledRowsF32 = 48;

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

/// A buffer of the calling thread for `bytes` of inputs, aligned to cache
/// lines: unaligned rows split most of the tiles' loads over two lines.
void *alignedInputs(int64_t bytes) {
  struct alignas(64) Line {
    char bytes[64];
  };
  static thread_local std::vector<Line> lines;
  lines.resize((bytes + 63) / 64);
  return lines.data();
}

/// x[0, count) rounded to bf16 into the calling thread's aligned buffer.
uint16_t *roundedInputs(const float *x, int64_t count) {
  auto *out = static_cast<uint16_t *>(alignedInputs(count * 2));
  roundToBf16(x, count, out);
  return out;
}

/// x[0, count) copied into the calling thread's aligned buffer.
float *alignedCopy(const float *x, int64_t count) {
  auto *out = static_cast<float *>(alignedInputs(count * 4));
  std::copy(x, x + count, out);
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

/// How a kind of tiles tiles: `Split` running vectors per output (over
/// alternate steps), `Weights` weight rows by `Rows` rows of x per tile,
/// panels of `Panel` bytes of weight rows, and whether the next panel's
/// prefetch is spread over every pass of a panel (`SpreadAhead`) or the
/// first.
template <int Split, int Weights, int Rows, int64_t Panel = kPanelBytes,
          bool SpreadAhead = false>
struct Tiling {
  static constexpr int kSplit = Split;
  static constexpr int kWeights = Weights;
  static constexpr int kRows = Rows;
  static constexpr int64_t kPanel = Panel;
  static constexpr bool kSpreadAhead = SpreadAhead;
};

/// f32 weights: 16 inputs a step, FMAs with x as it is. Two running vectors
/// per output, alternate steps (one row of x then has two chains of FMAs
/// per weight row); tiles of 2 weight rows by 4 rows of x, 2 x 4 x 2
/// running vectors, half of the registers.
template <typename Tiles = Tiling<2, 2, 4>> struct F32Products : Tiles {
  using Weight = float;
  using Input = float;
  static constexpr int64_t kStep = 16;
  static MOERT_TILES_BF16 inline __m512 weights(const float *w, int64_t left) {
    return left >= kStep
               ? _mm512_loadu_ps(w)
               : _mm512_maskz_loadu_ps(__mmask16((1u << left) - 1), w);
  }
  static MOERT_TILES_BF16 inline __m512 inputs(const float *x, int64_t left) {
    return weights(x, left);
  }
  static MOERT_TILES_BF16 inline __m512 product(__m512 acc, __m512 x,
                                                __m512 w) {
    return _mm512_fmadd_ps(x, w, acc);
  }
};

using F32Tiles = F32Products<>;

/// f32 weights for more than kInvariantRowsF32 rows of x: one running vector
/// per output and tiles of 4 weight rows by 6 rows of x, 24 running vectors
/// fed by 10 loads a step, where F32Tiles' two running vectors per output
/// allow 8 sums fed by 6. Panels of 512 KiB, whose successor is prefetched
/// over the passes of every group of rows of x, not the first alone
/// (measured against oneDNN's blocks in bench/README.md, "Wide f32 tiles
/// for a prompt's experts").
using F32WideTiles = F32Products<Tiling<1, 4, 6, (512 << 10), true>>;

/// bf16 inputs, 32 a step (a 64-byte vector), which AVX512-BF16 multiplies
/// in pairs; tiles of 2 weight rows by 8 rows of x, 16 running vectors.
struct Bf16Products : Tiling<1, 2, 8> {
  using Input = uint16_t;
  static constexpr int64_t kStep = 32;
  static MOERT_TILES_BF16 inline __m512 inputs(const uint16_t *x,
                                               int64_t left) {
    return bf16Pairs(x, left);
  }
  static MOERT_TILES_BF16 inline __m512 product(__m512 acc, __m512 x,
                                                __m512 w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
  }
};

/// bf16 weights, as stored.
struct Bf16Tiles : Bf16Products {
  using Weight = uint16_t;
  static MOERT_TILES_BF16 inline __m512 weights(const uint16_t *w,
                                                int64_t left) {
    return bf16Pairs(w, left);
  }
};

/// int8 weights, widened to bf16 (exact) in registers.
struct I8Tiles : Bf16Products {
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

/// One step of tile(): T::kStep inputs at k (the last step masked to
/// `left`).
template <typename T, int J, int R>
MOERT_TILES_BF16 inline __attribute__((always_inline)) void
step(const typename T::Input *x, const typename T::Weight *w, int64_t ld,
     int64_t k, int64_t left, __m512 (&acc)[J][R]) {
  __m512 wv[J];
#pragma GCC unroll 16
  for (int a = 0; a < J; ++a)
    wv[a] = T::weights(w + a * ld + k, left);
#pragma GCC unroll 16
  for (int b = 0; b < R; ++b) {
    __m512 xv = T::inputs(x + b * ld + k, left);
#pragma GCC unroll 16
    for (int a = 0; a < J; ++a)
      acc[a][b] = T::product(acc[a][b], xv, wv[a]);
  }
}

/// How tile() reads ahead: not at all, one stream of `lines` cache lines a
/// step (panels: the next panel), or each weight row `rowAhead` bytes ahead
/// of its step (rowsInOrder).
enum class Ahead { None, Stream, Rows };

/// Reads ahead of step k of tile() as A says.
template <typename T, int J, Ahead A>
MOERT_TILES_BF16 inline __attribute__((always_inline)) void
readAhead(const typename T::Weight *w, int64_t ld, int64_t k,
          const char *&prefetch, int64_t lines, int64_t rowAhead) {
  if constexpr (A == Ahead::Stream) {
    for (int64_t l = 0; l < lines; ++l)
      _mm_prefetch(prefetch + l * 64, _MM_HINT_T0);
    prefetch += lines * 64;
  } else if constexpr (A == Ahead::Rows) {
#pragma GCC unroll 16
    for (int a = 0; a < J; ++a)
      _mm_prefetch(reinterpret_cast<const char *>(w + a * ld + k) + rowAhead,
                   _MM_HINT_T0);
  }
}

/// The steps of tile() over the first `len` inputs: step s adds into
/// acc[s % T::kSplit], the last one masked to the inputs left.
template <typename T, int J, int R, Ahead A>
MOERT_TILES_BF16 inline __attribute__((always_inline)) void
steps(const typename T::Input *x, const typename T::Weight *w, int64_t ld,
      int64_t len, const char *prefetch, int64_t lines, int64_t rowAhead,
      __m512 (&acc)[T::kSplit][J][R]) {
  constexpr int64_t kStep = T::kStep;
  constexpr int U = T::kSplit;
  const int64_t full = len / kStep * kStep;
  int64_t k = 0;
  for (; k + U * kStep <= full; k += U * kStep)
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      readAhead<T, J, A>(w, ld, k + u * kStep, prefetch, lines, rowAhead);
      step<T, J, R>(x, w, ld, k + u * kStep, kStep, acc[u]);
    }
  if constexpr (U > 1) {
    int u = 0;
    for (; k < full; k += kStep, ++u)
      step<T, J, R>(x, w, ld, k, kStep, acc[u]);
    if (k < len)
      step<T, J, R>(x, w, ld, k, len - k, acc[u]);
  } else if (k < len) {
    step<T, J, R>(x, w, ld, k, len - k, acc[0]);
  }
}

/// The J x R sums of weight rows w[a * ld ...] and input rows x[b * ld ...]
/// over their first `len` inputs into sums[a * R + b]: T::kSplit running
/// vectors each (summed in order), then a horizontal sum. `prefetch` (or
/// null) is read ahead, `lines` cache lines a step, or else each weight row
/// `rowAhead` bytes ahead where that is not 0. Not inlined: each tile shape
/// keeps its running vectors in registers as a function of its own.
template <typename T, int J, int R>
MOERT_TILES_BF16 __attribute__((noinline)) void
tile(const typename T::Input *x, const typename T::Weight *w, int64_t ld,
     int64_t len, const char *prefetch, int64_t lines, int64_t rowAhead,
     float *sums) {
  constexpr int U = T::kSplit;
  __m512 acc[U][J][R];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u)
#pragma GCC unroll 16
    for (int a = 0; a < J; ++a)
#pragma GCC unroll 16
      for (int b = 0; b < R; ++b)
        acc[u][a][b] = _mm512_setzero_ps();
  if (prefetch)
    steps<T, J, R, Ahead::Stream>(x, w, ld, len, prefetch, lines, 0, acc);
  else if (rowAhead > 0)
    steps<T, J, R, Ahead::Rows>(x, w, ld, len, nullptr, 0, rowAhead, acc);
  else
    steps<T, J, R, Ahead::None>(x, w, ld, len, nullptr, 0, 0, acc);
#pragma GCC unroll 16
  for (int a = 0; a < J; ++a)
#pragma GCC unroll 16
    for (int b = 0; b < R; ++b) {
      __m512 total = acc[0][a][b];
#pragma GCC unroll 4
      for (int u = 1; u < U; ++u)
        total = _mm512_add_ps(total, acc[u][a][b]);
      sums[a * R + b] = sum16(total);
    }
}

/// tile() for j weight rows (1 to J) and r rows of x (1 to R).
template <typename T, int J, int R>
MOERT_TILES_BF16 inline __attribute__((always_inline)) void
anyTile(int j, int64_t r, const typename T::Input *x,
        const typename T::Weight *w, int64_t ld, int64_t len,
        const char *prefetch, int64_t lines, int64_t rowAhead, float *sums) {
  if constexpr (J > 1)
    if (j < J)
      return anyTile<T, J - 1, R>(j, r, x, w, ld, len, prefetch, lines,
                                  rowAhead, sums);
  if constexpr (R > 1)
    if (r < R)
      return anyTile<T, J, R - 1>(j, r, x, w, ld, len, prefetch, lines,
                                  rowAhead, sums);
  tile<T, J, R>(x, w, ld, len, prefetch, lines, rowAhead, sums);
}

/// The scale and bias of outputs [j0, j1) of rows [0, n) of c.
inline void scaleAndBias(int64_t n, int64_t j0, int64_t j1, const float *scale,
                         const float *bias, float *c, int64_t ldc) {
  if (scale || bias)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = j0; j < j1; ++j) {
        float &out = c[i * ldc + j];
        if (scale)
          out *= scale[j];
        if (bias)
          out += bias[j];
      }
}

/// tileProject on inputs already in T's input type (x [n, K]): panel by
/// panel of weight rows (T::kPanel bytes), chunk by chunk of K (a tile's rows
/// of x over one chunk stay in L1 while the panel's tiles pass; the panel stays
/// in L2 across the chunks), each chunk's sums added to c, then the scale and
/// bias.
template <typename T>
MOERT_TILES_BF16 inline __attribute__((always_inline)) void
panels(const typename T::Input *x, int64_t n, int64_t K,
       const typename T::Weight *w, int64_t m, const float *scale,
       const float *bias, float *c, int64_t ldc) {
  constexpr int J = T::kWeights, R = T::kRows;
  constexpr int64_t kStep = T::kStep;
  const int64_t steps = (K + kStep - 1) / kStep;
  const int64_t rowBytes = K * int64_t(sizeof(typename T::Weight));
  float sums[J * R];
  const int64_t panelRows = std::max<int64_t>(J, T::kPanel / rowBytes / J * J);
  for (int64_t p0 = 0; p0 < m; p0 += panelRows) {
    const int64_t rows = std::min(panelRows, m - p0);
    // The next panel's lines, spread over the steps of the tiles of the
    // first rows of x.
    const int64_t nextRows = std::min(panelRows, m - p0 - rows);
    const int64_t tiles = (rows + J - 1) / J;
    // T::kSpreadAhead: over the passes of every group of rows of x.
    const int64_t passes = T::kSpreadAhead ? (n + R - 1) / R : 1;
    const int64_t lines =
        (nextRows * rowBytes / 64 + passes * tiles * steps - 1) /
        (passes * tiles * steps);
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
                           r0 == 0 || T::kSpreadAhead ? ahead : nullptr, lines,
                           0, sums);
          if ((r0 == 0 || T::kSpreadAhead) && ahead)
            ahead += tileLines;
          for (int a = 0; a < jr; ++a)
            for (int64_t b = 0; b < r; ++b) {
              float &out = c[(r0 + b) * ldc + j + a];
              out = k0 == 0 ? sums[a * r + b] : out + sums[a * r + b];
            }
        }
      }
    }
    scaleAndBias(n, p0, p0 + rows, scale, bias, c, ldc);
  }
}

/// panels()'s sums for at most T::kRows rows of x, one weight row at a
/// time in memory order, each prefetched kRowAhead bytes ahead: so few rows
/// of x hide neither a panel's prefetch into L1 nor two streams of weight
/// rows (bench/README.md, "f32 tiles in one order for every count of rows").
template <typename T>
MOERT_TILES_BF16 inline __attribute__((always_inline)) void
rowsInOrder(const typename T::Input *x, int64_t n, int64_t K,
            const typename T::Weight *w, int64_t m, const float *scale,
            const float *bias, float *c, int64_t ldc) {
  constexpr int R = T::kRows;
  float sums[R];
  for (int64_t j = 0; j < m; ++j)
    for (int64_t k0 = 0; k0 < K; k0 += kChunkInputs) {
      const int64_t len = std::min(kChunkInputs, K - k0);
      // The weight row's chunk is read from memory by the first tile, from
      // L1 by the others.
      for (int64_t r0 = 0; r0 < n; r0 += R) {
        const int64_t r = std::min<int64_t>(R, n - r0);
        anyTile<T, 1, R>(1, r, x + r0 * K + k0, w + j * K + k0, K, len, nullptr,
                         0, r0 == 0 ? kRowAhead : 0, sums);
        for (int64_t b = 0; b < r; ++b) {
          float &out = c[(r0 + b) * ldc + j];
          out = k0 == 0 ? sums[b] : out + sums[b];
        }
      }
    }
  scaleAndBias(n, 0, m, scale, bias, c, ldc);
}

// The f32 tiles share the bf16 target so that the templates inline into
// them; they use no bf16 instruction, and run on any AVX-512 CPU. Past
// kInvariantRowsF32 rows the wide tiles by panels. Up to it the weight rows
// in memory order while x is at most two rows or fits in L1, else by
// panels: the same tiles, so the same sums.
MOERT_TILES_BF16 void tilesF32(const float *x, int64_t n, int64_t K,
                               const float *w, int64_t m, const float *scale,
                               const float *bias, float *c, int64_t ldc) {
  if (n > kInvariantRowsF32)
    return panels<F32WideTiles>(x, n, K, w, m, scale, bias, c, ldc);
  if (n <= 2 || n * K * int64_t(sizeof(float)) <= kInOrderInputBytes)
    return rowsInOrder<F32Tiles>(x, n, K, w, m, scale, bias, c, ldc);
  panels<F32Tiles>(x, n, K, w, m, scale, bias, c, ldc);
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

bool hasF32Tiles() { return MOERT_TILES_X86 && hasAvx512Streams(); }

int64_t tiledRows(StreamWeights type) {
  if (batchInvariant() || !MOERT_TILES_X86)
    return 0;
  switch (type) {
  case StreamWeights::F32:
    return hasF32Tiles() ? kMostTiledRowsF32 : 0;
  case StreamWeights::BF16:
  case StreamWeights::I8:
    return hasBf16Matmul() ? kMostTiledRows : 0;
  case StreamWeights::F16:
    return 0;
  }
  return 0;
}

void tileProject(const float *x, int64_t n, int64_t K, const void *w,
                 StreamWeights type, int64_t c0, int64_t m, const float *scale,
                 const float *bias, float *c, int64_t ldc) {
  if (n == 0 || m == 0)
    return;
#if MOERT_TILES_X86
  const float *s = scale ? scale + c0 : nullptr;
  const float *b = bias ? bias + c0 : nullptr;
  if (type == StreamWeights::F32 && hasF32Tiles())
    return tilesF32(alignedCopy(x, n * K), n, K,
                    static_cast<const float *>(w) + c0 * K, m, s, b, c, ldc);
  if (type == StreamWeights::BF16)
    return panelsBf16(roundedInputs(x, n * K), n, K,
                      static_cast<const uint16_t *>(w) + c0 * K, m, s, b, c,
                      ldc);
  if (type == StreamWeights::I8)
    return panelsI8(roundedInputs(x, n * K), n, K,
                    static_cast<const int8_t *>(w) + c0 * K, m, s, b, c, ldc);
#endif
  // No tiles for this type here (tiledRows is 0): the streaming product
  // (whose f32 [out, K] products on AVX-512 are these tiles).
  if (type == StreamWeights::F32)
    return streamProject8Lanes(x, n, K, w, type, c0, m, scale, bias, c, ldc);
  streamProject(x, n, K, w, type, c0, m, scale, bias, c, ldc);
}

} // namespace moert::detail
