//===- quant_int4_vnni.cpp - int4 x int8 products with AVX-512 VNNI -------===//
//
// The integer product of quantProject for 4-bit codes with activations
// quantized to int8 (accuracy_level 4, the default of onnxruntime-genai's
// int4 exports), on CPUs with AVX-512 VNNI. At one row of activations the
// AVX2 kernel spends about ten instructions on each 16 code bytes
// (unpacking, sign tricks for maddubs, widening adds), so it is bound by
// its instructions, not by memory. Here a 64-byte load holds 128 codes,
// and two vpdpbusd multiply them by the activations and add four products
// into each 32-bit lane:
//
// - The activations are laid out once per call per 128 columns as the
//   codes' nibbles come out of a register: the even columns of the four
//   groups of 32 (the low nibbles of the 64 bytes), then the odd ones (the
//   high nibbles). Lane l then holds the products of group l / 4.
// - vpdpbusd multiplies unsigned by signed bytes: the codes q (0..15) are
//   the unsigned operand and the activation codes a the signed one. The
//   zero point leaves the loop as an integer: per lane, sum (q - z) a =
//   sum q a - z sum a, with the lanes' sums of a made once per call. Each
//   lane is an exact integer, converted and scaled by its block's two
//   scales; the lanes of a block are added in f32 (as the AVX2 kernel adds
//   its lanes).
// - Blocks of 32 or 64 columns put four or two blocks in 128 columns (the
//   lanes' scales and zero points are permuted into place); multiples of
//   128 one block. Other block sizes take the AVX2 kernel.
//
// Decode (one row of activations) reads four weight rows at a time: their
// chunks interleaved, the activations' loads shared, each row's sums the
// same as alone, and each row's codes prefetched 8 KiB ahead (the product is
// bound by the latency of memory, not by the instructions, once the four
// rows' chains overlap). The activations' layout is made once per
// quantization (Int8Activations::vnniRows), not once per block of columns.
//
// Prompts (VnniForm::Tiles, from kVnniTileRows rows): reading and unpacking
// each weight row once per four rows of activations would cost as much as
// the products, so tiles of weight rows are unpacked once for all rows: the
// codes minus their zero points as signed bytes and, per lane, -128 times
// their sum, so that vpdpbusd on the activation codes plus 128 (unsigned)
// gives the same exact integers sum a (q - z) with no zero-point term per
// row. Each 4 x 3 block of outputs sums in registers over the columns, with
// the scales and the accumulation of the row kernel; the next tile's codes
// and scales are prefetched while a tile computes, and rows of activations
// go in blocks that stay in L2 (long prompts).
//
// Every row of activations is computed alike whatever the row count and
// form, so rows are batch-invariant, as with the other int4 kernels.
//
//===----------------------------------------------------------------------===//

#include "kernels/quant_gemm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#define MOERT_INT4_VNNI 1
#define MOERT_TARGET_VNNI                                                      \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c")))
#else
#define MOERT_INT4_VNNI 0
#endif

namespace moert::detail {

#if MOERT_INT4_VNNI

namespace {

/// Columns per step of the kernel: the 128 codes of one 64-byte load.
constexpr int64_t kChunk = 128;

/// The block (counted from the chunk's first) of lane l's group, for blocks
/// of `blockSize` columns (32, 64 or a multiple of 128).
inline int laneBlock(int lane, int64_t blockSize) {
  return blockSize >= kChunk ? 0 : (lane / 4) * 32 / int(blockSize);
}

void prepare(const Int8Activations &xq, int64_t n, VnniRowLayout &p) {
  const int64_t rowCodes = xq.rowCodes();
  p.rows = n;
  p.chunks = (rowCodes + kChunk - 1) / kChunk;
  p.codes.assign(size_t(n * p.chunks * kChunk), 0);
  p.laneSums.assign(size_t(n * p.chunks * 16), 0);
  p.laneScales.assign(size_t(n * p.chunks * 16), 0.0f);
  p.firstBlock.resize(size_t(p.chunks));
  for (int64_t c = 0; c < p.chunks; ++c)
    p.firstBlock[size_t(c)] = c * kChunk / xq.blockSize;
  for (int64_t i = 0; i < n; ++i) {
    // xq's row, nibble-ordered: per 32 columns, 16 even then 16 odd.
    const int8_t *in = xq.codes.data() + i * rowCodes;
    const float *scales = xq.scales.data() + i * xq.blocks;
    for (int64_t c = 0; c < p.chunks; ++c) {
      int8_t *out = p.codes.data() + (i * p.chunks + c) * kChunk;
      for (int g = 0; g < 4; ++g) {
        const int64_t at = c * kChunk + g * 32;
        if (at >= rowCodes)
          break;
        std::memcpy(out + g * 16, in + at, 16);
        std::memcpy(out + 64 + g * 16, in + at + 16, 16);
      }
      int32_t *sums = p.laneSums.data() + (i * p.chunks + c) * 16;
      float *laneScales = p.laneScales.data() + (i * p.chunks + c) * 16;
      const int64_t first = c * kChunk / xq.blockSize;
      for (int l = 0; l < 16; ++l) {
        int32_t sum = 0;
        for (int t = 0; t < 4; ++t)
          sum += out[4 * l + t] + out[64 + 4 * l + t];
        sums[l] = sum;
        const int64_t b = first + laneBlock(l, xq.blockSize);
        laneScales[l] = b < xq.blocks ? scales[b] : 0.0f;
      }
    }
  }
}

/// The blocks of 128 columns: how many (1, 2 or 4) and the permutation
/// that gives each lane its block's entry.
struct ChunkBlocks {
  int64_t perChunk, blocks;
  __m512i index;
  __m512i shifts; // 4 * laneBlock, for the zero points' nibbles

  MOERT_TARGET_VNNI explicit ChunkBlocks(const BlockQuantMatrix &w)
      : perChunk(w.blockSize >= kChunk ? 1 : kChunk / w.blockSize),
        blocks(w.blocks()) {
    const int64_t blockSize = w.blockSize;
    alignas(64) int32_t idx[16], sh[16];
    for (int l = 0; l < 16; ++l) {
      idx[l] = laneBlock(l, blockSize);
      sh[l] = 4 * idx[l];
    }
    index = _mm512_load_si512(idx);
    shifts = _mm512_load_si512(sh);
  }
};

/// One weight row's data and what the kernel needs of its shape.
struct VnniRow {
  const uint8_t *codes;
  const float *scales;    // f32 scales, or null
  const uint16_t *halves; // f16 scales, or null
  const uint8_t *zeros;   // packed zero points, or null (8)
  int64_t blocks, bytes;

  VnniRow(const BlockQuantMatrix &w, int64_t r)
      : codes(w.rowCodes(r)), scales(w.halfScales ? nullptr : w.rowScales(r)),
        halves(w.halfScales ? w.rowHalfScales(r) : nullptr),
        zeros(w.rowZeroPoints(r)), blocks(w.blocks()),
        bytes(w.blocks() * w.blockSize / 2) {}
};

/// Per lane, the weight scale of its block, for the blocks from `first`.
template <bool Half>
MOERT_TARGET_VNNI __attribute__((always_inline)) inline __m512
weightScales(const VnniRow &row, int64_t first, const ChunkBlocks &cb) {
  __m512 s;
  if (first + 4 <= row.blocks) {
    // Plain loads of four: a masked load that misses the cache is slower.
    if constexpr (Half)
      s = _mm512_cvtph_ps(_mm256_castsi128_si256(_mm_loadl_epi64(
          reinterpret_cast<const __m128i *>(row.halves + first))));
    else
      s = _mm512_castps128_ps512(_mm_loadu_ps(row.scales + first));
  } else {
    const int64_t count = std::min(cb.perChunk, row.blocks - first);
    const __mmask16 mask = __mmask16((1u << count) - 1);
    if constexpr (Half)
      s = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row.halves + first));
    else
      s = _mm512_maskz_loadu_ps(mask, row.scales + first);
  }
  return _mm512_permutexvar_ps(cb.index, s);
}

/// Per lane, the zero point of its block, for the blocks from `first`.
MOERT_TARGET_VNNI __attribute__((always_inline)) inline __m512i
zeroPoints(const VnniRow &row, int64_t first, const ChunkBlocks &cb) {
  // The nibbles of blocks first .. first + 3 are within two bytes from
  // byte first / 2 (first is even unless one block spans the chunk).
  const int64_t bytes = (row.blocks + 1) / 2, at = first / 2;
  uint32_t packed = row.zeros[at];
  if (at + 1 < bytes)
    packed |= uint32_t(row.zeros[at + 1]) << 8;
  packed >>= 4 * (first & 1);
  return _mm512_and_si512(
      _mm512_srlv_epi32(_mm512_set1_epi32(int32_t(packed)), cb.shifts),
      _mm512_set1_epi32(0x0F));
}

/// out[i] = row i0 + i of the activations times weight row `row`, i < NR.
template <int NR, bool Half, bool Zeros>
MOERT_TARGET_VNNI void rowsVnni(const VnniRowLayout &xp, int64_t i0,
                                const VnniRow &row, const ChunkBlocks &cb,
                                float out[NR]) {
  const uint8_t *codes = row.codes;
  const int64_t chunks = xp.chunks, stride = chunks * kChunk,
                laneStride = chunks * 16;
  const int64_t *firstBlock = xp.firstBlock.data();
  const int8_t *a = xp.codes.data() + i0 * stride;
  const int32_t *sums = xp.laneSums.data() + i0 * laneStride;
  const float *sx = xp.laneScales.data() + i0 * laneStride;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512 acc[NR];
  for (int i = 0; i < NR; ++i)
    acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t left = row.bytes - c * 64;
    __m512i v;
    if (left >= 64) {
      _mm_prefetch(reinterpret_cast<const char *>(codes + c * 64 + 4096),
                   _MM_HINT_T0);
      v = _mm512_loadu_si512(codes + c * 64);
    } else {
      v = _mm512_maskz_loadu_epi8(~__mmask64(0) >> (64 - left), codes + c * 64);
    }
    const __m512i lo = _mm512_and_si512(v, nibble);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
    const int64_t first = firstBlock[c];
    const __m512 sw = weightScales<Half>(row, first, cb);
    for (int i = 0; i < NR; ++i) {
      const int8_t *ai = a + i * stride + c * kChunk;
      __m512i dot = _mm512_dpbusd_epi32(
          _mm512_setzero_si512(), lo,
          _mm512_loadu_si512(reinterpret_cast<const void *>(ai)));
      dot = _mm512_dpbusd_epi32(
          dot, hi, _mm512_loadu_si512(reinterpret_cast<const void *>(ai + 64)));
      // sum (q - z) a, exact.
      const __m512i sa = _mm512_loadu_si512(sums + i * laneStride + c * 16);
      if constexpr (Zeros)
        dot = _mm512_sub_epi32(
            dot, _mm512_mullo_epi32(zeroPoints(row, first, cb), sa));
      else
        dot = _mm512_sub_epi32(dot, _mm512_slli_epi32(sa, 3));
      const __m512 scale =
          _mm512_mul_ps(sw, _mm512_loadu_ps(sx + i * laneStride + c * 16));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[i]);
    }
  }
  for (int i = 0; i < NR; ++i)
    out[i] = _mm512_reduce_add_ps(acc[i]);
}

/// How far ahead of the codes weightRowsVnni prefetches (bench/README.md,
/// "int4 decode, four weight rows at a time" and "Prefetching the weight
/// rows as one stream").
constexpr int64_t kDecodePrefetchBytes = 8192;

/// rowsVnni<1> for the NW weight rows at `rows` at once (one row of
/// activations, decode): each weight row's sums are rowsVnni's, step for
/// step, but the activations' loads and the shift of their sums are shared,
/// and NW independent chains of chunks keep the vector units busy where one
/// row's chain of fmadds waits on its latency.
template <int NW, bool Half, bool Zeros>
MOERT_TARGET_VNNI void weightRowsVnni(const VnniRowLayout &xp,
                                      const VnniRow *rows,
                                      const ChunkBlocks &cb, float out[NW]) {
  const int64_t chunks = xp.chunks;
  const int64_t *firstBlock = xp.firstBlock.data();
  const int8_t *a = xp.codes.data();
  const int32_t *sums = xp.laneSums.data();
  const float *sx = xp.laneScales.data();
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const int64_t bytes = rows[0].bytes;
  // The NW weight rows are consecutive: their codes, and their scales, are
  // prefetched as one stream each, kDecodePrefetchBytes of codes ahead and
  // the same share of the scales. (Each row's own stream prefetched ahead
  // of it read long rows at half the bandwidth: four streams of codes and
  // four of scales, the scales not prefetched.)
  const int64_t scaleBytes = Half ? 2 : 4,
                blockSize = 2 * bytes / rows[0].blocks;
  const char *codeStream =
      reinterpret_cast<const char *>(rows[0].codes) + kDecodePrefetchBytes;
  const char *scaleStream =
      (Half ? reinterpret_cast<const char *>(rows[0].halves)
            : reinterpret_cast<const char *>(rows[0].scales)) +
      kDecodePrefetchBytes * 2 * scaleBytes / blockSize;
  const int64_t scaleStep = NW * 64 * 2 * scaleBytes / blockSize;
  __m512 acc[NW];
  for (int j = 0; j < NW; ++j)
    acc[j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t left = bytes - c * 64;
    const __m512i alo =
        _mm512_loadu_si512(reinterpret_cast<const void *>(a + c * kChunk));
    const __m512i ahi =
        _mm512_loadu_si512(reinterpret_cast<const void *>(a + c * kChunk + 64));
    const __m512i sa = _mm512_loadu_si512(sums + c * 16);
    const __m512i sa8 = _mm512_slli_epi32(sa, 3);
    const __m512 sxc = _mm512_loadu_ps(sx + c * 16);
    const int64_t first = firstBlock[c];
    if (left >= 64) {
      for (int j = 0; j < NW; ++j)
        _mm_prefetch(codeStream + (c * NW + j) * 64, _MM_HINT_T0);
      _mm_prefetch(scaleStream + c * scaleStep, _MM_HINT_T0);
    }
    for (int j = 0; j < NW; ++j) {
      const uint8_t *codes = rows[j].codes;
      __m512i v;
      if (left >= 64) {
        v = _mm512_loadu_si512(codes + c * 64);
      } else {
        v = _mm512_maskz_loadu_epi8(~__mmask64(0) >> (64 - left),
                                    codes + c * 64);
      }
      const __m512i lo = _mm512_and_si512(v, nibble);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
      const __m512 sw = weightScales<Half>(rows[j], first, cb);
      __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo);
      dot = _mm512_dpbusd_epi32(dot, hi, ahi);
      if constexpr (Zeros)
        dot = _mm512_sub_epi32(
            dot, _mm512_mullo_epi32(zeroPoints(rows[j], first, cb), sa));
      else
        dot = _mm512_sub_epi32(dot, sa8);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sw, sxc),
                               acc[j]);
    }
  }
  for (int j = 0; j < NW; ++j)
    out[j] = _mm512_reduce_add_ps(acc[j]);
}

/// Weight rows per weightRowsVnni call.
constexpr int kDecodeWeightRows = 4;

/// One row of activations times weight rows [r0, r0 + m): kDecodeWeightRows
/// at a time, the rest one by one, each row's sum the same either way.
void projectDecodeRows(const VnniRowLayout &xp, const BlockQuantMatrix &w,
                       const ChunkBlocks &cb, int64_t r0, int64_t m,
                       const float *bias, float *c) {
  const bool half = w.halfScales, zeros = w.zeroPoints != nullptr;
  auto run = [&](auto nw, const VnniRow *rows, float *out) {
    constexpr int NW = decltype(nw)::value;
    if (half)
      zeros ? weightRowsVnni<NW, true, true>(xp, rows, cb, out)
            : weightRowsVnni<NW, true, false>(xp, rows, cb, out);
    else
      zeros ? weightRowsVnni<NW, false, true>(xp, rows, cb, out)
            : weightRowsVnni<NW, false, false>(xp, rows, cb, out);
  };
  for (int64_t j = 0; j < m;) {
    const int64_t count = std::min<int64_t>(kDecodeWeightRows, m - j);
    VnniRow rows[kDecodeWeightRows] = {VnniRow(w, r0 + j),
                                       VnniRow(w, r0 + j + (count > 1)),
                                       VnniRow(w, r0 + j + 2 * (count > 2)),
                                       VnniRow(w, r0 + j + 3 * (count > 3))};
    float out[kDecodeWeightRows];
    if (count == kDecodeWeightRows)
      run(std::integral_constant<int, kDecodeWeightRows>(), rows, out);
    else
      for (int64_t t = 0; t < count; ++t)
        run(std::integral_constant<int, 1>(), rows + t, out + t);
    for (int64_t t = 0; t < count; ++t)
      c[j + t] = out[t] + (bias ? bias[r0 + j + t] : 0.0f);
    j += count;
  }
}

/// rowsVnni for the row's scales and zero points.
template <int NR>
void rowsOf(const VnniRowLayout &xp, int64_t i0, const VnniRow &row,
            const ChunkBlocks &cb, float out[NR]) {
  if (row.halves)
    return row.zeros ? rowsVnni<NR, true, true>(xp, i0, row, cb, out)
                     : rowsVnni<NR, true, false>(xp, i0, row, cb, out);
  return row.zeros ? rowsVnni<NR, false, true>(xp, i0, row, cb, out)
                   : rowsVnni<NR, false, false>(xp, i0, row, cb, out);
}

/// The products of rowsOf, for projectInGroups.
struct VnniRows {
  const VnniRowLayout &xp;
  const BlockQuantMatrix &w;
  const ChunkBlocks &cb;
  template <int NR> void run(int64_t r, int64_t i, float *out) const {
    rowsOf<NR>(xp, i, VnniRow(w, r), cb, out);
  }
};

/// One row of activations' 128 columns for the several-rows kernel: the
/// codes plus 128 as unsigned bytes, in rowsVnni's order, and per lane the
/// activation scale.
struct alignas(64) ActivationChunk {
  uint8_t codes[kChunk];
  float scales[16];
};

/// One weight row's 128 columns unpacked for the several-rows kernel: the
/// codes minus their zero points as signed bytes (the low nibbles, then
/// the high ones), per lane -128 times the sum of its eight, and per lane
/// its block's weight scale as rowsVnni permutes it.
struct alignas(64) WeightChunk {
  int8_t lo[64], hi[64];
  int32_t offsets[16];
  float scales[16];
};

/// The rows of xq in the layout of ActivationChunk ([rows, chunks]), each
/// lane's scale as prepare gives it.
MOERT_TARGET_VNNI void prepareTiles(const Int8Activations &xq, int64_t n,
                                    int64_t chunks, const ChunkBlocks &cb,
                                    std::vector<ActivationChunk> &a) {
  a.resize(size_t(n * chunks));
  const int64_t rowCodes = xq.rowCodes();
  const __m128i flip = _mm_set1_epi8(char(0x80));
  for (int64_t i = 0; i < n; ++i) {
    const int8_t *in = xq.codes.data() + i * rowCodes;
    const float *scales = xq.scales.data() + i * xq.blocks;
    for (int64_t c = 0; c < chunks; ++c) {
      ActivationChunk &out = a[size_t(i * chunks + c)];
      for (int g = 0; g < 4; ++g) {
        // xq's 32 columns are nibble-ordered: 16 even, then 16 odd.
        const int64_t at = c * kChunk + g * 32;
        __m128i even = _mm_setzero_si128(), odd = _mm_setzero_si128();
        if (at < rowCodes) {
          even = _mm_loadu_si128(reinterpret_cast<const __m128i *>(in + at));
          odd =
              _mm_loadu_si128(reinterpret_cast<const __m128i *>(in + at + 16));
        }
        _mm_store_si128(reinterpret_cast<__m128i *>(out.codes + g * 16),
                        _mm_xor_si128(even, flip));
        _mm_store_si128(reinterpret_cast<__m128i *>(out.codes + 64 + g * 16),
                        _mm_xor_si128(odd, flip));
      }
      // Lanes past the last block get scale 0.
      const int64_t first = c * kChunk / xq.blockSize;
      const int64_t count = std::min<int64_t>(4, xq.blocks - first);
      const __m512 s =
          _mm512_maskz_loadu_ps(__mmask16((1u << count) - 1), scales + first);
      _mm512_store_ps(out.scales, _mm512_permutexvar_ps(cb.index, s));
    }
  }
}

/// Weight rows [r0, r0 + count) into `out` ([count, chunks]).
template <bool Half, bool Zeros>
MOERT_TARGET_VNNI void unpackRows(const BlockQuantMatrix &w, int64_t r0,
                                  int64_t count, int64_t chunks,
                                  const ChunkBlocks &cb, WeightChunk *out) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t r = 0; r < count; ++r) {
    const VnniRow row(w, r0 + r);
    for (int64_t c = 0; c < chunks; ++c) {
      WeightChunk &o = out[r * chunks + c];
      const int64_t left = row.bytes - c * 64;
      _mm_prefetch(reinterpret_cast<const char *>(row.codes + c * 64 + 4096),
                   _MM_HINT_T0);
      // Past the row's codes, q = 0: its -z meets activation code 0 (128
      // here), which the lane's offset takes back out.
      const __m512i v =
          left >= 64 ? _mm512_loadu_si512(row.codes + c * 64)
                     : _mm512_maskz_loadu_epi8(~__mmask64(0) >> (64 - left),
                                               row.codes + c * 64);
      const int64_t first = c * kChunk / w.blockSize;
      __m512i z;
      if constexpr (Zeros)
        z = _mm512_mullo_epi32(zeroPoints(row, first, cb),
                               _mm512_set1_epi32(0x01010101));
      else
        z = _mm512_set1_epi8(8);
      const __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, nibble), z);
      const __m512i hi =
          _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), nibble), z);
      const __m512i sum = _mm512_dpbusd_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, lo), ones, hi);
      _mm512_store_si512(o.lo, lo);
      _mm512_store_si512(o.hi, hi);
      _mm512_store_si512(
          o.offsets,
          _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7)));
      _mm512_store_ps(o.scales, weightScales<Half>(row, first, cb));
    }
  }
}

/// out[i * NC + j] = row i of `a` times weight row j of `w` (each [rows,
/// chunks]), i < NR, j < NC: rowsVnni's sums. Per lane, (a + 128) (q - z)
/// summed by vpdpbusd onto -128 sum (q - z) is sum a (q - z), the integer
/// rowsVnni makes; its scale and accumulation are rowsVnni's.
template <int NR, int NC>
MOERT_TARGET_VNNI void tileBlock(const ActivationChunk *a, const WeightChunk *w,
                                 int64_t chunks, float *out) {
  __m512 acc[NR][NC];
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NC; ++j)
      acc[i][j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    __m512i alo[NR], ahi[NR];
    __m512 sx[NR];
    for (int i = 0; i < NR; ++i) {
      const ActivationChunk &ac = a[i * chunks + c];
      alo[i] = _mm512_load_si512(ac.codes);
      ahi[i] = _mm512_load_si512(ac.codes + 64);
      sx[i] = _mm512_load_ps(ac.scales);
    }
    for (int j = 0; j < NC; ++j) {
      const WeightChunk &wc = w[j * chunks + c];
      const __m512i offsets = _mm512_load_si512(wc.offsets);
      const __m512i lo = _mm512_load_si512(wc.lo);
      const __m512i hi = _mm512_load_si512(wc.hi);
      const __m512 sw = _mm512_load_ps(wc.scales);
      for (int i = 0; i < NR; ++i) {
        __m512i dot = _mm512_dpbusd_epi32(offsets, alo[i], lo);
        dot = _mm512_dpbusd_epi32(dot, ahi[i], hi);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                    _mm512_mul_ps(sw, sx[i]), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NC; ++j)
      out[i * NC + j] = _mm512_reduce_add_ps(acc[i][j]);
}

/// Rows of activations and weight rows per tileBlock.
constexpr int kTileRows = 4, kTileCols = 3;

using TileBlockFn = void (*)(const ActivationChunk *, const WeightChunk *,
                             int64_t, float *);

template <int NR>
constexpr TileBlockFn kTileBlocksOf[kTileCols] = {
    tileBlock<NR, 1>, tileBlock<NR, 2>, tileBlock<NR, 3>};

/// tileBlock<NR, NC> for NR, NC from 1.
TileBlockFn tileBlockFor(int64_t nr, int64_t nc) {
  static constexpr const TileBlockFn *table[kTileRows] = {
      kTileBlocksOf<1>, kTileBlocksOf<2>, kTileBlocksOf<3>, kTileBlocksOf<4>};
  return table[nr - 1][nc - 1];
}

/// Prefetches into L2 the codes, scales and zero points of weight rows
/// [row, row + count) of w, in `steps` calls of step(): unpacking them
/// from memory would stall on the loads of both codes and scales.
class TilePrefetch {
public:
  TilePrefetch(const BlockQuantMatrix &w, int64_t row, int64_t count,
               int64_t steps) {
    if (count <= 0)
      return;
    const int64_t scaleBytes = w.halfScales ? 2 : 4;
    add(w.codes + row * w.rowBytes(), count * w.rowBytes());
    add(static_cast<const char *>(w.scales) + row * w.blocks() * scaleBytes,
        count * w.blocks() * scaleBytes);
    if (w.zeroPoints)
      add(w.zeroPoints + row * w.zeroPointRowBytes(),
          count * w.zeroPointRowBytes());
    int64_t lines = 0;
    for (int p = 0; p < parts_; ++p)
      lines += lines_[p];
    perStep_ = (lines + steps - 1) / steps;
  }

  /// Prefetches the next few lines.
  void step() {
    for (int64_t k = 0; k < perStep_ && part_ < parts_; ++k) {
      _mm_prefetch(starts_[part_] + 64 * line_, _MM_HINT_T1);
      if (++line_ == lines_[part_]) {
        line_ = 0;
        ++part_;
      }
    }
  }

private:
  void add(const void *start, int64_t bytes) {
    starts_[parts_] = static_cast<const char *>(start);
    lines_[parts_++] = (bytes + 63) / 64;
  }

  const char *starts_[3] = {};
  int64_t lines_[3] = {};
  int parts_ = 0, part_ = 0;
  int64_t line_ = 0, perStep_ = 0;
};

/// projectInt4Vnni by tiles of weight rows unpacked once for all of xq's n
/// rows, each block of kTileRows x kTileCols outputs summed in registers.
void projectTiles(const Int8Activations &xq, int64_t n,
                  const BlockQuantMatrix &w, const ChunkBlocks &cb, int64_t r0,
                  int64_t m, const float *bias, float *c, int64_t ldc) {
  thread_local std::vector<ActivationChunk> a;
  thread_local std::vector<WeightChunk> tile;
  const int64_t chunks = (xq.rowCodes() + kChunk - 1) / kChunk;
  prepareTiles(xq, n, chunks, cb, a);
  // About 32 KiB of unpacked weights, in L1 while every group of rows of x
  // passes over them: small tiles leave only the first one's data to come
  // from memory unprefetched.
  const int64_t tileRows = std::min<int64_t>(
      m, std::max<int64_t>(kTileCols, (32 << 10) / (chunks * 256) / kTileCols *
                                          kTileCols));
  tile.resize(size_t(tileRows * chunks));
  // Rows of x in blocks of about 512 KiB of their chunks, L2-resident while
  // the tiles pass over them (each block unpacks the weights again).
  const int64_t rowBlock = std::max<int64_t>(
      kTileRows, (512 << 10) / (chunks * int64_t(sizeof(ActivationChunk))) /
                     kTileRows * kTileRows);
  const bool half = w.halfScales, zeros = w.zeroPoints != nullptr;
  for (int64_t i0 = 0; i0 < n; i0 += rowBlock) {
    const int64_t i1 = std::min(n, i0 + rowBlock);
    for (int64_t j0 = 0; j0 < m; j0 += tileRows) {
      const int64_t rows = std::min(tileRows, m - j0);
      WeightChunk *t = tile.data();
      if (half)
        zeros ? unpackRows<true, true>(w, r0 + j0, rows, chunks, cb, t)
              : unpackRows<true, false>(w, r0 + j0, rows, chunks, cb, t);
      else
        zeros ? unpackRows<false, true>(w, r0 + j0, rows, chunks, cb, t)
              : unpackRows<false, false>(w, r0 + j0, rows, chunks, cb, t);
      // The next tile's data, fetched into L2 while this tile computes.
      TilePrefetch next(w, r0 + j0 + rows, std::min(tileRows, m - j0 - rows),
                        (i1 - i0 + kTileRows - 1) / kTileRows *
                            ((rows + kTileCols - 1) / kTileCols));
      for (int64_t i = i0; i < i1; i += kTileRows) {
        const int64_t nr = std::min<int64_t>(kTileRows, i1 - i);
        for (int64_t j = 0; j < rows; j += kTileCols) {
          const int64_t nc = std::min<int64_t>(kTileCols, rows - j);
          next.step();
          float out[kTileRows * kTileCols];
          tileBlockFor(nr, nc)(a.data() + i * chunks, t + j * chunks, chunks,
                               out);
          for (int64_t u = 0; u < nc; ++u) {
            const int64_t col = j0 + j + u;
            const float add = bias ? bias[r0 + col] : 0.0f;
            for (int64_t v = 0; v < nr; ++v)
              c[(i + v) * ldc + col] = out[v * nc + u] + add;
          }
        }
      }
    }
  }
}

} // namespace

bool hasQuantVnni() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

void layOutVnniRows(const Int8Activations &xq, VnniRowLayout &out) {
  prepare(xq, xq.rows, out);
}

bool vnniShape(const BlockQuantMatrix &w) {
  return w.bits == 4 &&
         (w.blockSize == 32 || w.blockSize == 64 || w.blockSize % kChunk == 0);
}

void projectInt4Vnni(const Int8Activations &xq, int64_t n,
                     const BlockQuantMatrix &w, int64_t r0, int64_t m,
                     const float *bias, float *c, int64_t ldc, VnniForm form) {
  const ChunkBlocks cb(w);
  if (form == VnniForm::Tiles || (form == VnniForm::Auto && n >= kVnniTileRows))
    return projectTiles(xq, n, w, cb, r0, m, bias, c, ldc);
  thread_local VnniRowLayout local;
  const VnniRowLayout *xp = &xq.vnniRows;
  if (xp->rows != n) {
    prepare(xq, n, local);
    xp = &local;
  }
  if (n == 1)
    return projectDecodeRows(*xp, w, cb, r0, m, bias, c);
  projectInGroups(VnniRows{*xp, w, cb}, n, r0, m, bias, c, ldc);
}

#else

bool hasQuantVnni() { return false; }

void layOutVnniRows(const Int8Activations &, VnniRowLayout &) {}

bool vnniShape(const BlockQuantMatrix &) { return false; }

void projectInt4Vnni(const Int8Activations &, int64_t, const BlockQuantMatrix &,
                     int64_t, int64_t, const float *, float *, int64_t,
                     VnniForm) {}

#endif // MOERT_INT4_VNNI

} // namespace moert::detail
