//===- quant_int4_avx512.cpp - f32 products with int4 weights, AVX-512 ----===//
//
// The AVX-512 kernel of quantProject for 4-bit codes with f32 activations
// in blocks of 32, 64 or a multiple of 128 columns (the QMoE experts of
// onnxruntime-genai's int4 exports, which carry no accuracy_level, so both
// runtimes keep their activations f32). quant_int4.cpp's AVX-512 form
// reads 16 code bytes and 128 bytes of activations per block of 32 codes,
// for every weight row: at one row of activations it was bound by those
// loads and by three fmadds per block, near 20 GB/s of weights from cache
// and from memory alike. Here:
//
// - The codes are read 64 bytes (128 columns) at a time as sixteen 32-bit
//   lanes; lane l holds code bytes 4l .. 4l + 3, all in group l / 4 of 32
//   columns. Byte k of every lane comes out with one shift. As in
//   quant_int4.cpp, a byte v = lo + 16 hi is multiplied whole (converted)
//   and as lo (looked up in a table of 0 .. 15 by vpermps, which reads only
//   the lane's low four bits) by A = x_even - x_odd / 16 and
//   B = x_odd / 16, so that A lo + B v = x_even lo + x_odd hi; the
//   activations are laid out once per call to match (a transposition of
//   each 128 columns). Eight fmadds make a chunk's sixteen lane sums.
// - The zero point leaves the loop per lane: each lane's sum starts from
//   -z times the sum of its eight columns' activations (laid out with the
//   activations for the default zero point, 8; multiplied per chunk by the
//   lanes' zero points where the matrix has them).
// - One fmadd per chunk scales the sixteen lanes by their blocks' scales
//   (four blocks of 32, two of 64, or one), permuted into place.
// - Four weight rows at a time share each chunk's activations, loaded into
//   registers once; rows of activations go one at a time over tiles of 32
//   weight rows (which stay in L2 for the next row), so that every output
//   is the same sequence of operations whatever the number of rows of
//   either (batch-invariant, and the same on every run).
// - The four rows' codes, and their scales, are prefetched as one stream
//   each, 16 KiB of codes ahead: four streams of codes and four of scales
//   left to the hardware read long rows at half the bandwidth.
//
// Rounding: the terms are those of quant_int4.cpp (up to |x| s (q + z), see
// its header), added per lane before scaling.
//
//===----------------------------------------------------------------------===//

#include "kernels/quant_gemm.h"

#include "format/float16.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#define MOERT_INT4_CHUNKS 1
#define MOERT_TARGET_CHUNKS __attribute__((target("avx512f,avx2,fma,f16c")))
#else
#define MOERT_INT4_CHUNKS 0
#endif

namespace moert::detail {

#if MOERT_INT4_CHUNKS

namespace {

/// Columns per chunk: the 128 codes of one 64-byte load.
constexpr int64_t kChunk = 128;
/// Floats per chunk of the activations' layout: A and B of the four bytes
/// of each lane, then the lanes' zero-point terms.
constexpr int64_t kChunkFloats = 9 * 16;

/// Rows of x laid out per chunk: for byte k < 4, A_k then B_k (16 lanes
/// each), then per lane -8 times (default zero points) or the sum of (the
/// matrix has zero points) its eight columns' activations; zero past the
/// matrix's columns.
struct ChunkActivations {
  int64_t rows = 0, chunks = 0;
  std::vector<float> lanes; // [rows, chunks, kChunkFloats]
};

/// The permutations of transposeChunk's three stages (permutex2var
/// indices), one per value of the bit each stage moves into the register
/// index.
struct TransposeIndices {
  __m512i stage[3][2];

  MOERT_TARGET_CHUNKS TransposeIndices() {
    alignas(64) int32_t idx[16];
    for (int s = 0; s < 3; ++s)
      for (int bit = 0; bit < 2; ++bit) {
        for (int lane = 0; lane < 16; ++lane) {
          // Lane bits after stage s: stage 0 (8 j2 + 4 j1 + 2 r1 + r0) from
          // 8 r0 + j; stage 1 (8 j2 + 4 r2 + 2 r1 + r0) from 8 j2 + 4 j1 +
          // 2 r1 + r0; stage 2 (8 r3 + 4 r2 + 2 r1 + r0) from 8 j2 + 4 r2 +
          // 2 r1 + r0; the moved bit selects the source register.
          const int hi = lane >> 3 & 1, mid = lane >> 2 & 1, r1 = lane >> 1 & 1,
                    r0 = lane & 1;
          if (s == 0)
            idx[lane] = 16 * r1 + 8 * r0 + 4 * hi + 2 * mid + bit;
          else if (s == 1)
            idx[lane] = 16 * mid + 8 * hi + 4 * bit + 2 * r1 + r0;
          else
            idx[lane] = 16 * hi + 8 * bit + 4 * mid + 2 * r1 + r0;
        }
        stage[s][bit] = _mm512_load_si512(idx);
      }
  }
};

/// e[j][r] = x[8 r + j] for the 128 floats at x: each lane's eight
/// columns, column by column (three stages of two-register permutations,
/// each moving one bit of the row into the register index).
MOERT_TARGET_CHUNKS __attribute__((always_inline)) inline void
transposeChunk(const float *x, const TransposeIndices &t, __m512 e[8]) {
  __m512 a[8], b[8];
  for (int m = 0; m < 8; ++m)
    a[m] = _mm512_loadu_ps(x + 16 * m);
  // Registers by (r3 r2 r1) -> (r3 r2 j0) -> (r3 j1 j0) -> (j2 j1 j0).
  for (int p = 0; p < 4; ++p)
    for (int j0 = 0; j0 < 2; ++j0)
      b[2 * p + j0] =
          _mm512_permutex2var_ps(a[2 * p], t.stage[0][j0], a[2 * p + 1]);
  for (int r3 = 0; r3 < 2; ++r3)
    for (int j1 = 0; j1 < 2; ++j1)
      for (int j0 = 0; j0 < 2; ++j0)
        a[4 * r3 + 2 * j1 + j0] = _mm512_permutex2var_ps(
            b[4 * r3 + j0], t.stage[1][j1], b[4 * r3 + 2 + j0]);
  for (int j2 = 0; j2 < 2; ++j2)
    for (int j1 = 0; j1 < 2; ++j1)
      for (int j0 = 0; j0 < 2; ++j0)
        e[4 * j2 + 2 * j1 + j0] = _mm512_permutex2var_ps(
            a[2 * j1 + j0], t.stage[2][j2], a[4 + 2 * j1 + j0]);
}

/// x [n, w.cols] into p.
MOERT_TARGET_CHUNKS void prepareChunks(const float *x, int64_t n,
                                       const BlockQuantMatrix &w,
                                       ChunkActivations &p) {
  static const TransposeIndices t;
  const int64_t K = w.cols;
  p.rows = n;
  p.chunks = (w.rowBytes() + 63) / 64;
  p.lanes.resize(size_t(n * p.chunks * kChunkFloats));
  const __m512 zero = _mm512_set1_ps(w.zeroPoints ? 1.0f : -8.0f);
  const __m512 sixteenth = _mm512_set1_ps(0.0625f);
  alignas(64) float tail[kChunk];
  for (int64_t i = 0; i < n; ++i) {
    const float *xi = x + i * K;
    for (int64_t c = 0; c < p.chunks; ++c) {
      float *out = p.lanes.data() + (i * p.chunks + c) * kChunkFloats;
      const float *in = xi + c * kChunk;
      if (c * kChunk + kChunk > K) {
        // The ragged end: zero past the columns.
        const int64_t valid = std::max<int64_t>(0, K - c * kChunk);
        std::fill(std::copy(in, in + valid, tail), tail + kChunk, 0.0f);
        in = tail;
      }
      __m512 e[8];
      transposeChunk(in, t, e);
      // Code byte k of lane l: columns 8 l + 2 k (even) and 8 l + 2 k + 1.
      __m512 sum = _mm512_setzero_ps();
      for (int k = 0; k < 4; ++k) {
        const __m512 even = e[2 * k], odd = e[2 * k + 1];
        _mm512_storeu_ps(out + 32 * k, _mm512_fnmadd_ps(odd, sixteenth, even));
        _mm512_storeu_ps(out + 32 * k + 16, _mm512_mul_ps(odd, sixteenth));
        sum = _mm512_add_ps(sum, _mm512_add_ps(even, odd));
      }
      _mm512_storeu_ps(out + 128, _mm512_mul_ps(zero, sum));
    }
  }
}

/// What the kernel needs of the matrix's block shape: per lane, the block
/// (counted from the chunk's first) and the zero points' shift.
struct ChunkShape {
  int64_t perChunk; // blocks starting in a chunk: 4, 2 or 1
  int64_t perBlock; // chunks per block: 1, or blockSize / 128
  __m512i index, shifts;

  MOERT_TARGET_CHUNKS explicit ChunkShape(const BlockQuantMatrix &w)
      : perChunk(w.blockSize >= kChunk ? 1 : kChunk / w.blockSize),
        perBlock(w.blockSize >= kChunk ? w.blockSize / kChunk : 1) {
    alignas(64) int32_t idx[16], sh[16];
    for (int l = 0; l < 16; ++l) {
      idx[l] = w.blockSize >= kChunk ? 0 : (l / 4) * 32 / int(w.blockSize);
      sh[l] = 4 * idx[l];
    }
    index = _mm512_load_si512(idx);
    shifts = _mm512_load_si512(sh);
  }
};

/// One weight row's codes, scales and zero points.
struct ChunkRow {
  const uint8_t *codes;
  const float *scales;    // f32 scales, or null
  const uint16_t *halves; // f16 scales, or null
  const uint8_t *zeros;   // packed zero points, or null (8)
  int64_t blocks, bytes, blockSize;

  ChunkRow(const BlockQuantMatrix &w, int64_t r)
      : codes(w.rowCodes(r)), scales(w.rowScales(r)),
        halves(w.rowHalfScales(r)), zeros(w.rowZeroPoints(r)),
        blocks(w.blocks()), bytes(w.rowBytes()), blockSize(w.blockSize) {}

  /// Per lane, the scale of its block, for the chunk whose first block is
  /// `first`.
  template <bool Half>
  MOERT_TARGET_CHUNKS __attribute__((always_inline)) inline __m512
  laneScales(int64_t first, const ChunkShape &cs) const {
    __m512 s;
    if (first + 4 <= blocks) {
      if constexpr (Half)
        s = _mm512_cvtph_ps(_mm256_castsi128_si256(_mm_loadl_epi64(
            reinterpret_cast<const __m128i *>(halves + first))));
      else
        s = _mm512_castps128_ps512(_mm_loadu_ps(scales + first));
    } else {
      // The last chunk: its blocks past the row's get scale 0.
      const int64_t count = std::min(cs.perChunk, blocks - first);
      if constexpr (Half) {
        alignas(16) uint16_t h[8] = {};
        std::memcpy(h, halves + first, size_t(count) * 2);
        s = _mm512_cvtph_ps(_mm256_castsi128_si256(
            _mm_load_si128(reinterpret_cast<const __m128i *>(h))));
      } else {
        s = _mm512_maskz_loadu_ps(__mmask16((1u << count) - 1), scales + first);
      }
    }
    return _mm512_permutexvar_ps(cs.index, s);
  }

  /// Per lane, minus the zero point of its block, for the chunk whose first
  /// block is `first`.
  MOERT_TARGET_CHUNKS __attribute__((always_inline)) inline __m512
  laneZeros(int64_t first, const ChunkShape &cs) const {
    // The nibbles of blocks first .. first + 3 are within two bytes from
    // byte first / 2.
    const int64_t bytes = (blocks + 1) / 2, at = first / 2;
    uint32_t packed = zeros[at];
    if (at + 1 < bytes)
      packed |= uint32_t(zeros[at + 1]) << 8;
    packed >>= 4 * (first & 1);
    const __m512i z = _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_set1_epi32(int32_t(packed)), cs.shifts),
        _mm512_set1_epi32(0x0F));
    return _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtepi32_ps(z));
  }
};

/// Bytes ahead of the codes being read that the kernel prefetches (and the
/// same share of the scales).
constexpr int64_t kChunkPrefetch = 16384;

/// The codes of row `row`'s chunk c as sixteen 32-bit lanes (zero past the
/// row's bytes).
MOERT_TARGET_CHUNKS __attribute__((always_inline)) inline __m512i
chunkCodes(const ChunkRow &row, int64_t c) {
  const int64_t left = row.bytes - c * 64;
  if (left >= 64)
    return _mm512_loadu_si512(row.codes + c * 64);
  return _mm512_maskz_loadu_epi32(__mmask16((1u << (left / 4)) - 1),
                                  row.codes + c * 64);
}

/// out[j] = row i of the activations times weight row rows[j], j < NW: per
/// chunk the activations are loaded once for the NW weight rows. Each
/// output is the same sequence of operations whatever NW.
template <int NW, bool Half, bool Zeros>
MOERT_TARGET_CHUNKS void chunkRows(const ChunkActivations &xp, int64_t i,
                                   const ChunkRow *rows, const ChunkShape &cs,
                                   float *out) {
  const int64_t chunks = xp.chunks;
  const float *lanes = xp.lanes.data() + i * chunks * kChunkFloats;
  const __m512i byte = _mm512_set1_epi32(0xFF);
  // Low nibbles by table: vpermps reads the low four bits of each lane.
  const __m512 iota =
      _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // The weight rows are consecutive: their codes and scales are prefetched
  // as one stream each, kChunkPrefetch bytes of codes ahead.
  const int64_t scaleBytes = Half ? 2 : 4;
  const char *codeStream =
      reinterpret_cast<const char *>(rows[0].codes) + kChunkPrefetch;
  const char *scaleStream =
      (Half ? reinterpret_cast<const char *>(rows[0].halves)
            : reinterpret_cast<const char *>(rows[0].scales)) +
      kChunkPrefetch * 2 * scaleBytes / rows[0].blockSize;
  const int64_t scaleStep = NW * 64 * 2 * scaleBytes / rows[0].blockSize;
  __m512 acc[NW];
  for (int j = 0; j < NW; ++j)
    acc[j] = _mm512_setzero_ps();
  int64_t first = 0, within = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    if (rows[0].bytes - c * 64 >= 64) {
      for (int j = 0; j < NW; ++j)
        _mm_prefetch(codeStream + (c * NW + j) * 64, _MM_HINT_T0);
      _mm_prefetch(scaleStream + c * scaleStep, _MM_HINT_T0);
    }
    __m512 x[9];
    for (int k = 0; k < 9; ++k)
      x[k] = _mm512_loadu_ps(lanes + c * kChunkFloats + 16 * k);
    for (int j = 0; j < NW; ++j) {
      const ChunkRow &row = rows[j];
      const __m512i v = chunkCodes(row, c);
      const __m512i t1 = _mm512_srli_epi32(v, 8);
      const __m512i t2 = _mm512_srli_epi32(v, 16);
      const __m512i t3 = _mm512_srli_epi32(v, 24);
      const __m512 scale = row.template laneScales<Half>(first, cs);
      // Two chains of four: the low nibbles' and the bytes'.
      __m512 p0 = x[8];
      if constexpr (Zeros)
        p0 = _mm512_mul_ps(p0, row.laneZeros(first, cs));
      __m512 p1 =
          _mm512_mul_ps(x[1], _mm512_cvtepi32_ps(_mm512_and_si512(v, byte)));
      p0 = _mm512_fmadd_ps(x[0], _mm512_permutexvar_ps(v, iota), p0);
      p1 = _mm512_fmadd_ps(x[3], _mm512_cvtepi32_ps(_mm512_and_si512(t1, byte)),
                           p1);
      p0 = _mm512_fmadd_ps(x[2], _mm512_permutexvar_ps(t1, iota), p0);
      p1 = _mm512_fmadd_ps(x[5], _mm512_cvtepi32_ps(_mm512_and_si512(t2, byte)),
                           p1);
      p0 = _mm512_fmadd_ps(x[4], _mm512_permutexvar_ps(t2, iota), p0);
      p1 = _mm512_fmadd_ps(x[7], _mm512_cvtepi32_ps(t3), p1);
      p0 = _mm512_fmadd_ps(x[6], _mm512_permutexvar_ps(t3, iota), p0);
      acc[j] = _mm512_fmadd_ps(_mm512_add_ps(p0, p1), scale, acc[j]);
    }
    // The next chunk's first block, with no division in the loop.
    if (++within == cs.perBlock) {
      within = 0;
      first += cs.perChunk;
    }
  }
  for (int j = 0; j < NW; ++j)
    out[j] = _mm512_reduce_add_ps(acc[j]);
}

/// chunkRows for the matrix's scales and zero points.
template <int NW>
void chunkRowsOf(const ChunkActivations &xp, int64_t i, const ChunkRow *rows,
                 const ChunkShape &cs, float *out) {
  if (rows[0].halves)
    return rows[0].zeros ? chunkRows<NW, true, true>(xp, i, rows, cs, out)
                         : chunkRows<NW, true, false>(xp, i, rows, cs, out);
  return rows[0].zeros ? chunkRows<NW, false, true>(xp, i, rows, cs, out)
                       : chunkRows<NW, false, false>(xp, i, rows, cs, out);
}

/// Weight rows per chunkRows call.
constexpr int kWeightRows = 4;
/// Weight rows that every row of x passes over before the next ones: 46
/// KiB of codes at 2880 columns, read from memory by the first row of x
/// and from L2 by the others.
constexpr int64_t kTileRows = 32;

/// Row i of x times weight rows [r0, r0 + m) into c[0, m): kWeightRows at a
/// time, the rest one by one, each output the same either way.
void projectRow(const ChunkActivations &xp, int64_t i,
                const BlockQuantMatrix &w, const ChunkShape &cs, int64_t r0,
                int64_t m, const float *bias, float *c) {
  for (int64_t j = 0; j < m;) {
    float out[kWeightRows];
    int64_t count = 1;
    if (m - j >= kWeightRows) {
      const ChunkRow rows[kWeightRows] = {
          ChunkRow(w, r0 + j), ChunkRow(w, r0 + j + 1), ChunkRow(w, r0 + j + 2),
          ChunkRow(w, r0 + j + 3)};
      chunkRowsOf<kWeightRows>(xp, i, rows, cs, out);
      count = kWeightRows;
    } else {
      const ChunkRow row(w, r0 + j);
      chunkRowsOf<1>(xp, i, &row, cs, out);
    }
    for (int64_t t = 0; t < count; ++t)
      c[j + t] = out[t] + (bias ? bias[r0 + j + t] : 0.0f);
    j += count;
  }
}

} // namespace

bool int4ChunkShape(const BlockQuantMatrix &w) {
  return w.bits == 4 &&
         (w.blockSize == 32 || w.blockSize == 64 || w.blockSize % kChunk == 0);
}

void projectInt4Chunks(const float *x, int64_t n, const BlockQuantMatrix &w,
                       int64_t r0, int64_t m, const float *bias, float *c,
                       int64_t ldc) {
  thread_local ChunkActivations xp;
  prepareChunks(x, n, w, xp);
  const ChunkShape cs(w);
  // Tiles of weight rows, each passed by every row of x in turn: a row's
  // products do not depend on the other rows.
  for (int64_t j = 0; j < m; j += kTileRows)
    for (int64_t i = 0; i < n; ++i)
      projectRow(xp, i, w, cs, r0 + j, std::min(kTileRows, m - j), bias,
                 c + i * ldc + j);
}

#else

bool int4ChunkShape(const BlockQuantMatrix &) { return false; }

void projectInt4Chunks(const float *, int64_t, const BlockQuantMatrix &,
                       int64_t, int64_t, const float *, float *, int64_t) {}

#endif // MOERT_INT4_CHUNKS

} // namespace moert::detail
