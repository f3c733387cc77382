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
// Every row of activations is computed alike whatever the row count, so
// decode rows are batch-invariant, as with the other int4 kernels.
//
//===----------------------------------------------------------------------===//

#include "kernels/quant_gemm.h"

#include <algorithm>
#include <cstring>
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

/// Activations in the kernel's layout, per row and 128 columns: the codes
/// (even columns of the four groups of 32, then the odd ones), and per
/// 32-bit lane the sum of the eight codes it multiplies and its block's
/// activation scale.
struct VnniActivations {
  int64_t rows = 0, chunks = 0;
  std::vector<int8_t> codes;     // [rows, chunks * 128]
  std::vector<int32_t> laneSums; // [rows, chunks * 16]
  std::vector<float> laneScales; // [rows, chunks * 16]
  /// Per chunk, the block of its first column (no division in the loop).
  std::vector<int64_t> firstBlock;
};

/// The block (counted from the chunk's first) of lane l's group, for blocks
/// of `blockSize` columns (32, 64 or a multiple of 128).
inline int laneBlock(int lane, int64_t blockSize) {
  return blockSize >= kChunk ? 0 : (lane / 4) * 32 / int(blockSize);
}

void prepare(const Int8Activations &xq, int64_t n, VnniActivations &p) {
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
MOERT_TARGET_VNNI void rowsVnni(const VnniActivations &xp, int64_t i0,
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

/// rowsVnni for the row's scales and zero points.
template <int NR>
void rowsOf(const VnniActivations &xp, int64_t i0, const VnniRow &row,
            const ChunkBlocks &cb, float out[NR]) {
  if (row.halves)
    return row.zeros ? rowsVnni<NR, true, true>(xp, i0, row, cb, out)
                     : rowsVnni<NR, true, false>(xp, i0, row, cb, out);
  return row.zeros ? rowsVnni<NR, false, true>(xp, i0, row, cb, out)
                   : rowsVnni<NR, false, false>(xp, i0, row, cb, out);
}

/// The products of rowsOf, for projectInGroups.
struct VnniRows {
  const VnniActivations &xp;
  const BlockQuantMatrix &w;
  const ChunkBlocks &cb;
  template <int NR> void run(int64_t r, int64_t i, float *out) const {
    rowsOf<NR>(xp, i, VnniRow(w, r), cb, out);
  }
};

} // namespace

bool hasQuantVnni() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

bool vnniShape(const BlockQuantMatrix &w) {
  return w.bits == 4 &&
         (w.blockSize == 32 || w.blockSize == 64 || w.blockSize % kChunk == 0);
}

void projectInt4Vnni(const Int8Activations &xq, int64_t n,
                     const BlockQuantMatrix &w, int64_t r0, int64_t m,
                     const float *bias, float *c, int64_t ldc) {
  thread_local VnniActivations xp;
  prepare(xq, n, xp);
  const ChunkBlocks cb(w);
  projectInGroups(VnniRows{xp, w, cb}, n, r0, m, bias, c, ldc);
}

#else

bool hasQuantVnni() { return false; }

bool vnniShape(const BlockQuantMatrix &) { return false; }

void projectInt4Vnni(const Int8Activations &, int64_t, const BlockQuantMatrix &,
                     int64_t, int64_t, const float *, float *, int64_t) {}

#endif // MOERT_INT4_VNNI

} // namespace moert::detail
