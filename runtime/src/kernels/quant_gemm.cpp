//===- quant_gemm.cpp - Products with block-quantized weights -------------===//
//
// Few rows (decoding): each weight row is read once, its codes converted to
// f32 in registers and multiplied with every row of x; a block's sum of
// x_k (q_k - z) is scaled once by the block's scale. More rows (prefill):
// tiles of weight rows are dequantized exactly into the thread's scratch and
// multiplied by sgemm, so that prefill computes with the very f32 weights of
// the dequantized model. The AVX2+FMA kernels (chosen by CPUID) cover 4-bit
// codes in blocks of a multiple of 32 (kernels/quant_int4.cpp, with an
// AVX-512 form) and 8-bit codes in blocks of a multiple of 8; anything else,
// and the ragged tail of an 8-bit row, runs the portable code.
//
// Int8 activations (onnxruntime's accuracy_level 4): each row of x is
// quantized per block once; with AVX-512 VNNI, 4-bit codes run its integer
// kernel at any number of rows (kernels/quant_int4_vnni.cpp); otherwise few
// rows run the integer kernels, more rows the sgemm path on the activation
// codes times their scales.
// The AVX2 ones multiply a block's codes minus its zero point (|q - z| <=
// 15 as int8 for 4-bit codes, int16 for 8-bit ones) by the activation codes
// with maddubs (the sign moved to the activations) or madd, sum the int32
// lanes per block and add them, scaled by the f32 product of the two
// scales, into eight f32 lanes; the portable kernel gives the same integers.
//
//===----------------------------------------------------------------------===//

#include "kernels/quant_gemm.h"

#include "exec/tensor.h"
#include "kernels/common.h"
#include "kernels/expert_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined
// operands), wrongly.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#define MOERT_QUANT_AVX2 1
#define MOERT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define MOERT_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#else
#define MOERT_QUANT_AVX2 0
#endif

namespace moert::detail {

namespace {

/// One row of a matrix with its sizes worked out once: the kernels read a
/// block's scale and zero point with no division.
struct Row {
  const uint8_t *codes;
  const float *scales;    // f32 scales, or null
  const uint16_t *halves; // f16 scales, or null
  const uint8_t *zeros;   // packed zero points, or null
  int bits, defaultZero;
  int64_t blockBytes;

  Row(const BlockQuantMatrix &w, int64_t r)
      : codes(w.rowCodes(r)), scales(w.rowScales(r)),
        halves(w.rowHalfScales(r)), zeros(w.rowZeroPoints(r)), bits(w.bits),
        defaultZero(1 << (w.bits - 1)), blockBytes(w.blockBytes()) {}
  float scale(int64_t b) const {
    return scales ? scales[b] : halfToFloat(halves[b]);
  }
  int zero(int64_t b) const {
    if (!zeros)
      return defaultZero;
    return bits == 8 ? zeros[b] : (zeros[b >> 1] >> ((b & 1) * 4)) & 0xF;
  }
  const uint8_t *block(int64_t b) const { return codes + b * blockBytes; }
};

/// Code `c` of a row's codes.
inline int codeAt(const uint8_t *row, int bits, int64_t c) {
  if (bits == 8)
    return row[c];
  return (row[c / 2] >> ((c % 2) * 4)) & 0xF;
}

/// The codes of columns [c0, c1) of block b of row r minus the block's zero
/// point, exact in int, into q.
void blockCodes(const Row &row, int64_t c0, int64_t c1, int z, int *q) {
  for (int64_t c = c0; c < c1; ++c)
    q[c - c0] = codeAt(row.codes, row.bits, c) - z;
}

/// The per-block sums of the portable kernel: c[i, j] for rows i < n of x
/// and weight rows [r0, r0 + m).
void projectPortable(const float *x, int64_t n, const BlockQuantMatrix &w,
                     int64_t r0, int64_t m, const float *bias, float *c,
                     int64_t ldc) {
  const int64_t K = w.cols, blocks = w.blocks();
  constexpr int64_t kChunk = 64;
  int q[kChunk];
  std::vector<float> total(n), part(n);
  for (int64_t j = 0; j < m; ++j) {
    int64_t r = r0 + j;
    Row row(w, r);
    std::fill(total.begin(), total.end(), 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t begin = b * w.blockSize, end = std::min(K, begin + w.blockSize);
      int z = row.zero(b);
      std::fill(part.begin(), part.end(), 0.0f);
      for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
        int64_t c1 = std::min(end, c0 + kChunk);
        blockCodes(row, c0, c1, z, q);
        for (int64_t i = 0; i < n; ++i) {
          const float *xi = x + i * K;
          float s = part[i];
          for (int64_t k = c0; k < c1; ++k)
            s += xi[k] * static_cast<float>(q[k - c0]);
          part[i] = s;
        }
      }
      float scale = row.scale(b);
      for (int64_t i = 0; i < n; ++i)
        total[i] += part[i] * scale;
    }
    for (int64_t i = 0; i < n; ++i)
      c[i * ldc + j] = bias ? total[i] + bias[r] : total[i];
  }
}

/// Whether activations quantized for w keep each 32 columns of a block in
/// the order of the 4-bit codes' nibbles.
bool nibbleOrderFor(const BlockQuantMatrix &w) {
  return w.bits == 4 && w.blockSize % 32 == 0;
}

/// Where column c of a row goes among the row's activation codes.
inline int64_t int8Position(int64_t c, bool nibbleOrder) {
  return nibbleOrder ? (c & ~int64_t{31}) + ((c & 1) << 4) + ((c & 31) >> 1)
                     : c;
}

/// One activation code: x * inverse rounded half to even, saturated to
/// int8 as packing does (|x * inverse| <= 127 unless x is not finite).
inline int8_t int8Code(float x, float inverse) {
  float q = std::nearbyint(x * inverse);
  return static_cast<int8_t>(std::clamp(q, -128.0f, 127.0f));
}

/// The scale of a block whose largest magnitude is amax, and its inverse.
inline void int8Scale(float amax, float &scale, float &inverse) {
  scale = amax / 127.0f;
  inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
}

/// Columns [c0, c1) of row x into codes (the row's codes) with `inverse`.
void quantizeColumns(const float *x, int64_t c0, int64_t c1, float inverse,
                     bool nibbleOrder, int8_t *codes) {
  for (int64_t k = c0; k < c1; ++k)
    codes[int8Position(k, nibbleOrder)] = int8Code(x[k], inverse);
}

void quantizeRowPortable(const float *x, int64_t K, const Int8Activations &q,
                         int8_t *codes, float *scales) {
  for (int64_t b = 0; b < q.blocks; ++b) {
    int64_t begin = b * q.blockSize, end = std::min(K, begin + q.blockSize);
    float amax = 0.0f;
    for (int64_t k = begin; k < end; ++k)
      amax = std::max(amax, std::fabs(x[k]));
    float inverse;
    int8Scale(amax, scales[b], inverse);
    quantizeColumns(x, begin, end, inverse, q.nibbleOrder, codes);
  }
}

/// out [n, K] = each activation code of xq times its block's scale.
void dequantizeActivations(const Int8Activations &xq, int64_t n, int64_t K,
                           std::vector<float> &out) {
  if (out.size() < static_cast<size_t>(n * K))
    out.resize(n * K);
  for (int64_t i = 0; i < n; ++i) {
    const int8_t *a = xq.codes.data() + i * xq.rowCodes();
    const float *sa = xq.scales.data() + i * xq.blocks;
    for (int64_t k = 0; k < K; ++k)
      out[i * K + k] =
          float(a[int8Position(k, xq.nibbleOrder)]) * sa[k / xq.blockSize];
  }
}

/// c[i, j] of the int8 products for rows [0, n) of xq, weight rows [r0,
/// r0 + m): per block the exact integer sum, then f32.
void projectInt8Portable(const Int8Activations &xq, int64_t n,
                         const BlockQuantMatrix &w, int64_t r0, int64_t m,
                         const float *bias, float *c, int64_t ldc) {
  const int64_t K = w.cols, blocks = w.blocks();
  for (int64_t j = 0; j < m; ++j) {
    int64_t r = r0 + j;
    Row row(w, r);
    for (int64_t i = 0; i < n; ++i) {
      const int8_t *a = xq.codes.data() + i * xq.rowCodes();
      const float *sa = xq.scales.data() + i * blocks;
      float total = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        int64_t begin = b * w.blockSize, end = std::min(K, begin + w.blockSize);
        int z = row.zero(b);
        const uint8_t *p = row.block(b);
        int32_t dot = 0;
        for (int64_t k = begin; k < end; ++k)
          dot += int32_t(a[int8Position(k, xq.nibbleOrder)]) *
                 (codeAt(p, w.bits, k - begin) - z);
        total += static_cast<float>(dot) * (sa[b] * row.scale(b));
      }
      c[i * ldc + j] = bias ? total + bias[r] : total;
    }
  }
}

#if MOERT_QUANT_AVX2

MOERT_TARGET_AVX2 inline float horizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// The 32 4-bit codes of 16 bytes, in column order, minus zero point z, as
/// four vectors of 8 floats (exact: |q - z| <= 15).
MOERT_TARGET_AVX2 inline void unpack4(const uint8_t *p, __m128i z,
                                      __m256 v[4]) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
  __m128i lo = _mm_and_si128(bytes, mask);
  __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  // Code 2i is byte i's low nibble, code 2i + 1 its high one.
  __m128i first = _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), z);
  __m128i second = _mm_sub_epi8(_mm_unpackhi_epi8(lo, hi), z);
  v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(first));
  v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(first, 8)));
  v[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(second));
  v[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(second, 8)));
}

/// 8 8-bit codes minus zero point z as 8 floats (exact).
MOERT_TARGET_AVX2 inline __m256 unpack8(const uint8_t *p, __m256i z) {
  __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(bytes), z));
}

/// c[i, j] for NR rows of x (leading dimension K) and weight row r of 8-bit
/// codes: the vector part over whole groups of 8 codes of each block, the
/// ragged rest scalar, in the portable kernel's per-block form. (4-bit codes
/// run projectInt4.)
template <int NR>
MOERT_TARGET_AVX2 void projectRowAvx2(const float *x, int64_t K,
                                      const BlockQuantMatrix &w, int64_t r,
                                      int64_t blocks, float out[NR]) {
  const Row row(w, r);
  __m256 total[NR];
  float tail[NR];
  for (int i = 0; i < NR; ++i) {
    total[i] = _mm256_setzero_ps();
    tail[i] = 0.0f;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t begin = b * w.blockSize;
    int64_t valid = std::min(w.blockSize, K - begin);
    int64_t whole = valid / 8 * 8;
    int z = row.zero(b);
    const uint8_t *p = row.block(b);
    __m256 part[NR];
    for (int i = 0; i < NR; ++i)
      part[i] = _mm256_setzero_ps();
    __m256i zv = _mm256_set1_epi32(z);
    for (int64_t k = 0; k < whole; k += 8) {
      __m256 v = unpack8(p + k, zv);
      for (int i = 0; i < NR; ++i)
        part[i] =
            _mm256_fmadd_ps(_mm256_loadu_ps(x + i * K + begin + k), v, part[i]);
    }
    float scale = row.scale(b);
    __m256 sv = _mm256_set1_ps(scale);
    for (int i = 0; i < NR; ++i)
      total[i] = _mm256_fmadd_ps(part[i], sv, total[i]);
    if (whole < valid) {
      for (int i = 0; i < NR; ++i) {
        const float *xi = x + i * K + begin;
        float s = 0.0f;
        for (int64_t k = whole; k < valid; ++k)
          s += xi[k] * static_cast<float>(codeAt(p, w.bits, k) - z);
        tail[i] += s * scale;
      }
    }
  }
  for (int i = 0; i < NR; ++i)
    out[i] = horizontalSum(total[i]) + tail[i];
}

/// The f32 products of projectRowAvx2.
struct F32RowsAvx2 {
  const float *x;
  const BlockQuantMatrix &w;
  template <int NR> void run(int64_t r, int64_t i, float *out) const {
    projectRowAvx2<NR>(x + i * w.cols, w.cols, w, r, w.blocks(), out);
  }
};

/// dequantizeRows for 4-bit codes in blocks of a multiple of 32.
MOERT_TARGET_AVX2 void dequantize4Avx2(const BlockQuantMatrix &w, int64_t r0,
                                       int64_t count, float *out) {
  const int64_t K = w.cols, blocks = w.blocks();
  for (int64_t i = 0; i < count; ++i) {
    const Row row(w, r0 + i);
    float *o = out + i * K;
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t begin = b * w.blockSize;
      int64_t valid = std::min(w.blockSize, K - begin);
      int64_t whole = valid / 32 * 32;
      int z = row.zero(b);
      float scale = row.scale(b);
      __m256 sv = _mm256_set1_ps(scale);
      __m128i zv = _mm_set1_epi8(static_cast<char>(z));
      const uint8_t *p = row.block(b);
      for (int64_t k = 0; k < whole; k += 32) {
        __m256 v[4];
        unpack4(p + k / 2, zv, v);
        for (int g = 0; g < 4; ++g)
          _mm256_storeu_ps(o + begin + k + 8 * g, _mm256_mul_ps(v[g], sv));
      }
      for (int64_t k = whole; k < valid; ++k)
        o[begin + k] = static_cast<float>(codeAt(p, 4, k) - z) * scale;
    }
  }
}

/// dequantize4Avx2 with AVX-512: 32 codes a step, widened to 16-bit lanes
/// (byte b as lo + 256 hi after one shift, mask and or: the codes in column
/// order), then to 16 floats at a time.
MOERT_TARGET_AVX512 void dequantize4Avx512(const BlockQuantMatrix &w,
                                           int64_t r0, int64_t count,
                                           float *out) {
  const int64_t K = w.cols, blocks = w.blocks();
  const __m256i mask = _mm256_set1_epi16(0x0F);
  for (int64_t i = 0; i < count; ++i) {
    const Row row(w, r0 + i);
    float *o = out + i * K;
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t begin = b * w.blockSize;
      int64_t valid = std::min(w.blockSize, K - begin);
      int64_t whole = valid / 32 * 32;
      int z = row.zero(b);
      float scale = row.scale(b);
      const __m512 sv = _mm512_set1_ps(scale);
      const __m256i zv = _mm256_set1_epi8(static_cast<char>(z));
      const uint8_t *p = row.block(b);
      for (int64_t k = 0; k < whole; k += 32) {
        __m256i v = _mm256_cvtepu8_epi16(
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + k / 2)));
        v = _mm256_or_si256(_mm256_and_si256(v, mask),
                            _mm256_slli_epi16(_mm256_srli_epi16(v, 4), 8));
        v = _mm256_sub_epi8(v, zv);
        const __m512 first =
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v)));
        const __m512 second = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1)));
        _mm512_storeu_ps(o + begin + k, _mm512_mul_ps(first, sv));
        _mm512_storeu_ps(o + begin + k + 16, _mm512_mul_ps(second, sv));
      }
      for (int64_t k = whole; k < valid; ++k)
        o[begin + k] = static_cast<float>(codeAt(p, 4, k) - z) * scale;
    }
  }
}

bool avx2Shape(const BlockQuantMatrix &w) {
  return (w.bits == 4 && w.blockSize % 32 == 0) ||
         (w.bits == 8 && w.blockSize % 8 == 0);
}

/// quantizeRowPortable with AVX2: the same maxima, products and roundings
/// eight columns at a time.
MOERT_TARGET_AVX2 void quantizeRowAvx2(const float *x, int64_t K,
                                       const Int8Activations &q, int8_t *codes,
                                       float *scales) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  // Packing leaves the dwords of four vectors interleaved across lanes.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  // Per 16 bytes: the even ones, then the odd ones.
  const __m256i nibbles =
      _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0,
                       2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int64_t b = 0; b < q.blocks; ++b) {
    int64_t begin = b * q.blockSize, end = std::min(K, begin + q.blockSize);
    __m256 vmax = _mm256_setzero_ps();
    int64_t k = begin;
    for (; k + 8 <= end; k += 8)
      vmax =
          _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + k), magnitude));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax),
                           _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float amax = _mm_cvtss_f32(m4);
    for (; k < end; ++k)
      amax = std::max(amax, std::fabs(x[k]));
    float inverse;
    int8Scale(amax, scales[b], inverse);
    const __m256 inv = _mm256_set1_ps(inverse);
    k = begin;
    for (; k + 32 <= end; k += 32) {
      __m256i v[4];
      for (int g = 0; g < 4; ++g)
        v[g] = _mm256_cvtps_epi32(
            _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * g), inv),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]),
                                          _mm256_packs_epi32(v[2], v[3]));
      packed = _mm256_permutevar8x32_epi32(packed, order);
      if (q.nibbleOrder)
        packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(packed, nibbles),
                                          _MM_SHUFFLE(3, 1, 2, 0));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(codes + k), packed);
    }
    quantizeColumns(x, k, end, inverse, q.nibbleOrder, codes);
  }
}

/// The int8 products of NR rows of xq (from row i0) with weight row `row`:
/// Bits 4, codes in blocks of a multiple of 32 (nibble-ordered activations;
/// q - z fits int8), or Bits 8, blocks of a multiple of 16 (q - z in
/// [-255, 255], widened to int16).
template <int NR, int Bits>
MOERT_TARGET_AVX2 void int8Rows(const Int8Activations &xq, int64_t i0,
                                const Row &row, int64_t blocks,
                                int64_t blockSize, float out[NR]) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t stride = xq.rowCodes();
  const int8_t *a0 = xq.codes.data() + i0 * stride;
  const float *sa = xq.scales.data() + i0 * blocks;
  __m256 acc[NR];
  for (int i = 0; i < NR; ++i)
    acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int z = row.zero(b);
    const uint8_t *p = row.block(b);
    const int8_t *ab = a0 + b * blockSize;
    __m256i dot[NR];
    for (int i = 0; i < NR; ++i)
      dot[i] = _mm256_setzero_si256();
    if constexpr (Bits == 4) {
      const __m256i zv = _mm256_set1_epi8(static_cast<char>(z));
      for (int64_t g = 0; g < blockSize; g += 32) {
        __m128i bytes =
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + g / 2));
        // Low nibbles (even columns), then high ones (odd columns), minus z.
        __m256i w = _mm256_sub_epi8(
            _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes),
                             mask),
            zv);
        __m256i magnitude = _mm256_sign_epi8(w, w);
        for (int i = 0; i < NR; ++i) {
          __m256i a = _mm256_loadu_si256(
              reinterpret_cast<const __m256i *>(ab + i * stride + g));
          __m256i pairs =
              _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(a, w));
          dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(pairs, ones));
        }
      }
    } else {
      const __m256i zv = _mm256_set1_epi16(static_cast<int16_t>(z));
      for (int64_t g = 0; g < blockSize; g += 16) {
        __m256i w =
            _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(
                                 reinterpret_cast<const __m128i *>(p + g))),
                             zv);
        for (int i = 0; i < NR; ++i) {
          __m256i a = _mm256_cvtepi8_epi16(_mm_loadu_si128(
              reinterpret_cast<const __m128i *>(ab + i * stride + g)));
          dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(w, a));
        }
      }
    }
    float sb = row.scale(b);
    for (int i = 0; i < NR; ++i)
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i]),
                               _mm256_set1_ps(sa[i * blocks + b] * sb), acc[i]);
  }
  for (int i = 0; i < NR; ++i)
    out[i] = horizontalSum(acc[i]);
}

/// The int8 products of int8Rows. Blocks reach past the matrix's columns,
/// into the padding of the codes, where the activation codes are zero.
struct Int8RowsAvx2 {
  const Int8Activations &xq;
  const BlockQuantMatrix &w;
  template <int NR> void run(int64_t r, int64_t i, float *out) const {
    const int64_t blocks = w.blocks();
    const Row row(w, r);
    if (w.bits == 4)
      int8Rows<NR, 4>(xq, i, row, blocks, w.blockSize, out);
    else
      int8Rows<NR, 8>(xq, i, row, blocks, w.blockSize, out);
  }
};

bool int8Avx2Shape(const BlockQuantMatrix &w) {
  return (w.bits == 4 && w.blockSize % 32 == 0) ||
         (w.bits == 8 && w.blockSize % 16 == 0);
}

#endif // MOERT_QUANT_AVX2

} // namespace

bool hasQuantAvx2() {
#if MOERT_QUANT_AVX2
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

void dequantizeRows(const BlockQuantMatrix &w, int64_t r0, int64_t count,
                    float *out) {
#if MOERT_QUANT_AVX2
  if (w.bits == 4 && w.blockSize % 32 == 0 && hasQuantAvx512())
    return dequantize4Avx512(w, r0, count, out);
  if (w.bits == 4 && w.blockSize % 32 == 0 && hasQuantAvx2())
    return dequantize4Avx2(w, r0, count, out);
#endif
  const int64_t K = w.cols, blocks = w.blocks();
  for (int64_t i = 0; i < count; ++i) {
    const Row row(w, r0 + i);
    for (int64_t b = 0; b < blocks; ++b) {
      int z = row.zero(b);
      float scale = row.scale(b);
      const uint8_t *p = row.block(b);
      int64_t begin = b * w.blockSize, end = std::min(K, begin + w.blockSize);
      for (int64_t k = begin; k < end; ++k)
        out[i * K + k] =
            static_cast<float>(codeAt(p, w.bits, k - begin) - z) * scale;
    }
  }
}

void quantizeActivations(const float *x, int64_t n, const BlockQuantMatrix &w,
                         Int8Activations &out, QuantKernel kernel) {
  out.rows = n;
  out.blocks = w.blocks();
  out.blockSize = w.blockSize;
  out.nibbleOrder = nibbleOrderFor(w);
  const int64_t K = w.cols, stride = out.rowCodes();
  out.codes.assign(size_t(n * stride), 0);
  out.scales.resize(size_t(n * out.blocks));
  for (int64_t i = 0; i < n; ++i) {
    int8_t *codes = out.codes.data() + i * stride;
    float *scales = out.scales.data() + i * out.blocks;
#if MOERT_QUANT_AVX2
    if (kernel != QuantKernel::Portable && hasQuantAvx2()) {
      quantizeRowAvx2(x + i * K, K, out, codes, scales);
      continue;
    }
#endif
    quantizeRowPortable(x + i * K, K, out, codes, scales);
  }
  out.vnniRows.rows = 0;
#if MOERT_QUANT_AVX2
  // Laid out once here, not once per block of columns that reads them.
  if ((kernel == QuantKernel::Auto || kernel == QuantKernel::Avx512) &&
      n < kVnniTileRows && vnniShape(w) && hasQuantVnni())
    layOutVnniRows(out, out.vnniRows);
#endif
}

void quantProject(const float *x, int64_t n, const BlockQuantMatrix &w,
                  int64_t r0, int64_t m, const float *bias, float *c,
                  int64_t ldc, QuantKernel kernel, const Int8Activations *xq) {
  if (n <= 0 || m <= 0)
    return;
  if (w.int8Activations) {
    thread_local Int8Activations local;
    if (!xq) {
      quantizeActivations(x, n, w, local, kernel);
      xq = &local;
    }
#if MOERT_QUANT_AVX2
    // Any number of rows: the VNNI kernel computes every row alike.
    if ((kernel == QuantKernel::Auto || kernel == QuantKernel::Avx512) &&
        vnniShape(w) && hasQuantVnni())
      return projectInt4Vnni(*xq, n, w, r0, m, bias, c, ldc);
#endif
    if (n <= kQuantStreamRows || kernel != QuantKernel::Auto) {
#if MOERT_QUANT_AVX2
      if (kernel != QuantKernel::Portable && int8Avx2Shape(w) && hasQuantAvx2())
        return projectInGroups(Int8RowsAvx2{*xq, w}, n, r0, m, bias, c, ldc);
#endif
      return projectInt8Portable(*xq, n, w, r0, m, bias, c, ldc);
    }
    // More rows: the activation codes times their scales (each product one
    // rounding) by the dequantized weights through sgemm below, the integer
    // products reassociated.
    thread_local std::vector<float> dequantized;
    dequantizeActivations(*xq, n, w.cols, dequantized);
    x = dequantized.data();
  }
  if (n > kQuantStreamRows && kernel == QuantKernel::Auto) {
    // Tiles of 16 to 128 weight rows, about 1 MiB as floats: wide enough
    // for sgemm to run at full speed.
    const int64_t K = w.cols;
    const int64_t tileRows = std::min<int64_t>(
        m, std::clamp<int64_t>((256 << 10) / std::max<int64_t>(K, 1), 16, 128));

    thread_local std::vector<float> tile;
    if (tile.size() < static_cast<size_t>(tileRows * K))
      tile.resize(tileRows * K);
    for (int64_t j = 0; j < m; j += tileRows) {
      int64_t rows = std::min(tileRows, m - j);
      dequantizeRows(w, r0 + j, rows, tile.data());
      // oneDNN's f32 matmul where it has brgemm kernels for the CPU (as the
      // Linear step's widened blocks), else sgemm.
      if (matmulBlock(x, n, K, tile.data(), StreamWeights::F32, rows,
                      /*inOut=*/false, 0, rows, nullptr,
                      bias ? bias + r0 + j : nullptr, c + j, ldc))
        continue;
      if (bias)
        for (int64_t i = 0; i < n; ++i)
          std::copy(bias + r0 + j, bias + r0 + j + rows, c + i * ldc + j);
      sgemm(false, true, n, rows, K, 1.0f, x, K, tile.data(), K,
            bias ? 1.0f : 0.0f, c + j, ldc);
    }
    return;
  }
#if MOERT_QUANT_AVX2
  if (kernel != QuantKernel::Portable && avx2Shape(w) && hasQuantAvx2()) {
    if (w.bits == 4 && kernel != QuantKernel::Avx2 && hasQuantAvx512() &&
        int4ChunkShape(w))
      return projectInt4Chunks(x, n, w, r0, m, bias, c, ldc);
    if (w.bits == 4)
      return projectInt4(x, n, w, r0, m, bias, c, ldc,
                         kernel != QuantKernel::Avx2 && hasQuantAvx512());
    return projectInGroups(F32RowsAvx2{x, w}, n, r0, m, bias, c, ldc);
  }
#endif
  projectPortable(x, n, w, r0, m, bias, c, ldc);
}

} // namespace moert::detail
