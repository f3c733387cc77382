//===- quant_int4.cpp - f32 products with packed int4 weights -------------===//
//
// The AVX2+FMA kernel of quantProject for 4-bit codes in blocks of a
// multiple of 32 with f32 activations (the decode path of
// onnxruntime-genai's int4 exports), and its AVX-512 form for the block
// sizes quant_int4_avx512.cpp does not take (not 32, 64 or a multiple of
// 128). At one row of
// activations the product is bound by the instructions that turn codes
// into f32 as much as by memory, so the work per code is cut to the least
// the formula allows:
//
// - The zero point leaves the loop: per block, s * sum x (q - z) =
//   s * sum x q - s * z * sum x, with the activations' block sums computed
//   once per call and the last term summed per weight row after the loop.
// - A code byte holds two codes, lo (even column) and hi (odd column).
//   Zero-extended to a 32-bit lane, the byte is v = lo + 16 hi; with the
//   activations laid out per byte as A = x_even - x_odd / 16 and
//   B = x_odd / 16 (exact scaling by a power of two), A lo + B v =
//   x_even lo + x_odd hi. So a byte costs one mask and two conversions, no
//   shift and no unpacking; the layout is made once per call, for every
//   weight row.
// - Two running sums per row, so that one block's scaling does not wait
//   on the previous block's.
// - A software prefetch a few cache lines ahead of the codes.
//
// Rounding: both rearrangements are exact algebra but round terms of up to
// about |x| s (q + z) instead of |x| s |q - z|, so the error bound follows
// sum |x| s (q + z) (runtime/tests/kernels/quant_gemm_test.cpp). Padding
// codes past the matrix's columns meet activations of zero.
//
//===----------------------------------------------------------------------===//

#include "kernels/quant_gemm.h"

#include "format/float16.h"

#include <algorithm>
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
#define MOERT_INT4_AVX2 1
#define MOERT_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MOERT_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#else
#define MOERT_INT4_AVX2 0
#endif

namespace moert::detail {

#if MOERT_INT4_AVX2

namespace {

/// Rows of x in the kernel's layout: per row, per 32 columns (16 code
/// bytes), A of bytes 0-15, then B of bytes 0-15 (zero past the matrix's
/// columns), and per block the sum of x.
struct Int4Activations {
  int64_t rows = 0, blocks = 0, stride = 0;
  std::vector<float> lanes, sums;
};

MOERT_TARGET_AVX2 inline float horizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// A and B of one code byte's columns (x_odd / 16 is exact).
inline void byteLanes(float even, float odd, float &a, float &b) {
  b = odd * 0.0625f;
  a = even - b;
}

/// x [n, w.cols] into p.
MOERT_TARGET_AVX2 void prepare(const float *x, int64_t n,
                               const BlockQuantMatrix &w, Int4Activations &p) {
  const int64_t K = w.cols, blockSize = w.blockSize;
  p.rows = n;
  p.blocks = w.blocks();
  p.stride = p.blocks * blockSize;
  p.lanes.resize(size_t(n * p.stride));
  p.sums.resize(size_t(n * p.blocks));
  const __m256 sixteenth = _mm256_set1_ps(0.0625f);
  for (int64_t i = 0; i < n; ++i) {
    const float *xi = x + i * K;
    float *lanes = p.lanes.data() + i * p.stride;
    float *sums = p.sums.data() + i * p.blocks;
    for (int64_t b = 0; b < p.blocks; ++b) {
      const int64_t begin = b * blockSize;
      const int64_t valid = std::min(blockSize, K - begin);
      __m256 sum = _mm256_setzero_ps();
      int64_t c = 0;
      for (; c + 16 <= valid; c += 16) {
        __m256 lo = _mm256_loadu_ps(xi + begin + c);
        __m256 hi = _mm256_loadu_ps(xi + begin + c + 8);
        sum = _mm256_add_ps(sum, _mm256_add_ps(lo, hi));
        // Even and odd columns, each in column order.
        __m256 even = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
        __m256 odd = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
        __m256 bv = _mm256_mul_ps(odd, sixteenth);
        // Bytes 0-7 or 8-15 of the group of 32 columns.
        float *group = lanes + begin + (c & ~int64_t{31}) + (c & 16) / 2;
        _mm256_storeu_ps(group, _mm256_sub_ps(even, bv));
        _mm256_storeu_ps(group + 16, bv);
      }
      float total = horizontalSum(sum);
      // The ragged end of the last block, zero past the columns.
      for (; c < blockSize; c += 16)
        for (int j = 0; j < 8; ++j) {
          int64_t e = c + 2 * j;
          float even = e < valid ? xi[begin + e] : 0.0f;
          float odd = e + 1 < valid ? xi[begin + e + 1] : 0.0f;
          total += even + odd;
          float *group = lanes + begin + (c & ~int64_t{31}) + (c & 16) / 2;
          byteLanes(even, odd, group[j], group[16 + j]);
        }
      sums[b] = total;
    }
  }
}

/// Bytes ahead of the codes being read that the kernel prefetches.
constexpr int64_t kPrefetchBytes = 1024;

/// part[i] += 32 columns of rows i < NR of the activations (`lanes`, rows
/// `stride` apart) times the codes of 16 bytes at p, without zero point.
template <int NR>
MOERT_TARGET_AVX2 inline void group(const uint8_t *p, const float *lanes,
                                    int64_t stride, __m256 part[NR]) {
  const __m256i mask = _mm256_set1_epi32(0x0F);
  __m256i v0 = _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
  __m256i v1 = _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p + 8)));
  __m256 lo0 = _mm256_cvtepi32_ps(_mm256_and_si256(v0, mask));
  __m256 byte0 = _mm256_cvtepi32_ps(v0);
  __m256 lo1 = _mm256_cvtepi32_ps(_mm256_and_si256(v1, mask));
  __m256 byte1 = _mm256_cvtepi32_ps(v1);
  for (int i = 0; i < NR; ++i) {
    const float *a = lanes + i * stride;
    part[i] = _mm256_fmadd_ps(_mm256_loadu_ps(a), lo0, part[i]);
    part[i] = _mm256_fmadd_ps(_mm256_loadu_ps(a + 16), byte0, part[i]);
    part[i] = _mm256_fmadd_ps(_mm256_loadu_ps(a + 8), lo1, part[i]);
    part[i] = _mm256_fmadd_ps(_mm256_loadu_ps(a + 24), byte1, part[i]);
  }
}

/// One weight row's codes, scales and zero points.
struct Int4Row {
  const uint8_t *codes;
  const float *scales;    // f32 scales, or null
  const uint16_t *halves; // f16 scales, or null
  const uint8_t *zeros;   // packed zero points, or null (8)

  Int4Row(const BlockQuantMatrix &w, int64_t r)
      : codes(w.rowCodes(r)), scales(w.rowScales(r)),
        halves(w.rowHalfScales(r)), zeros(w.rowZeroPoints(r)) {}
  /// The scales of blocks [b, b + 8).
  MOERT_TARGET_AVX2 __m256 scales8(int64_t b) const {
    return scales ? _mm256_loadu_ps(scales + b)
                  : _mm256_cvtph_ps(_mm_loadu_si128(
                        reinterpret_cast<const __m128i *>(halves + b)));
  }
  /// The zero points of blocks [b, b + 8), b even.
  MOERT_TARGET_AVX2 __m256 zeros8(int64_t b) const {
    if (!zeros)
      return _mm256_set1_ps(8.0f);
    int32_t packed;
    std::memcpy(&packed, zeros + b / 2, 4);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    return _mm256_cvtepi32_ps(
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(packed), shifts),
                         _mm256_set1_epi32(0x0F)));
  }
  float scalar(int64_t b) const {
    return scales ? scales[b] : halfToFloat(halves[b]);
  }
  int zero(int64_t b) const {
    return zeros ? (zeros[b >> 1] >> ((b & 1) * 4)) & 0xF : 8;
  }
};

/// total[i] += the scaled sum over block b of x q for rows i < NR of the
/// activations (`lanes` at the row's first), in `groups` groups of 32
/// columns (one when Single).
template <int NR, bool Half, bool Single>
MOERT_TARGET_AVX2 __attribute__((always_inline)) inline void
addBlock(const Int4Row &row, const float *lanes, int64_t stride, int64_t b,
         int64_t groups, __m256 total[NR]) {
  __m256 part[NR];
  for (int i = 0; i < NR; ++i)
    part[i] = _mm256_setzero_ps();
  if constexpr (Single) {
    group<NR>(row.codes + b * 16, lanes + b * 32, stride, part);
  } else {
    for (int64_t g = b * groups; g < (b + 1) * groups; ++g)
      group<NR>(row.codes + g * 16, lanes + g * 32, stride, part);
  }
  __m256 s = Half ? _mm256_set1_ps(halfToFloat(row.halves[b]))
                  : _mm256_broadcast_ss(row.scales + b);
  for (int i = 0; i < NR; ++i)
    total[i] = _mm256_fmadd_ps(part[i], s, total[i]);
}

/// shift[i] = the zero points' share of row i0 + i, sum over blocks of
/// s z sum(x), eight blocks at a time.
template <int NR>
MOERT_TARGET_AVX2 void zeroShift(const Int4Activations &xp, int64_t i0,
                                 const Int4Row &row, float shift[NR]) {
  const int64_t blocks = xp.blocks;
  const float *sums = xp.sums.data() + i0 * blocks;
  __m256 acc[NR];
  for (int i = 0; i < NR; ++i)
    acc[i] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= blocks; b += 8) {
    __m256 sz = _mm256_mul_ps(row.scales8(b), row.zeros8(b));
    for (int i = 0; i < NR; ++i)
      acc[i] =
          _mm256_fmadd_ps(sz, _mm256_loadu_ps(sums + i * blocks + b), acc[i]);
  }
  for (int i = 0; i < NR; ++i)
    shift[i] = horizontalSum(acc[i]);
  for (; b < blocks; ++b) {
    float sz = row.scalar(b) * float(row.zero(b));
    for (int i = 0; i < NR; ++i)
      shift[i] += sz * sums[i * blocks + b];
  }
}

/// out[i] = sum over the columns of x row i0 + i times W row `row`, for
/// i < NR: per block the scaled sum of x q, less the zero points' share.
template <int NR, bool Half, bool Single>
MOERT_TARGET_AVX2 void rows(const Int4Activations &xp, int64_t i0,
                            const Int4Row &row, int64_t groups, float out[NR]) {
  const int64_t blocks = xp.blocks, stride = xp.stride;
  const float *lanes = xp.lanes.data() + i0 * stride;
  // Two running sums, of even and odd blocks.
  __m256 even[NR], odd[NR];
  for (int i = 0; i < NR; ++i)
    even[i] = odd[i] = _mm256_setzero_ps();
  const int64_t blockBytes = groups * 16;
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    _mm_prefetch(reinterpret_cast<const char *>(row.codes + b * blockBytes +
                                                kPrefetchBytes),
                 _MM_HINT_T0);
    addBlock<NR, Half, Single>(row, lanes, stride, b, groups, even);
    addBlock<NR, Half, Single>(row, lanes, stride, b + 1, groups, odd);
  }
  if (b < blocks)
    addBlock<NR, Half, Single>(row, lanes, stride, b, groups, even);
  float shift[NR];
  zeroShift<NR>(xp, i0, row, shift);
  for (int i = 0; i < NR; ++i)
    out[i] = horizontalSum(_mm256_add_ps(even[i], odd[i])) - shift[i];
}

/// The AVX-512 form of addBlock: a group's 16 bytes in one register.
template <int NR, bool Half, bool Single>
MOERT_TARGET_AVX512 __attribute__((always_inline)) inline void
addBlock512(const Int4Row &row, const float *lanes, int64_t stride, int64_t b,
            int64_t groups, __m512 total[NR]) {
  __m512 part[NR];
  for (int i = 0; i < NR; ++i)
    part[i] = _mm512_setzero_ps();
  for (int64_t g = b * groups; g < (b + 1) * groups; ++g) {
    __m512i v = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(row.codes + g * 16)));
    __m512 lo =
        _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x0F)));
    __m512 byte = _mm512_cvtepi32_ps(v);
    for (int i = 0; i < NR; ++i) {
      const float *a = lanes + i * stride + g * 32;
      part[i] = _mm512_fmadd_ps(_mm512_loadu_ps(a), lo, part[i]);
      part[i] = _mm512_fmadd_ps(_mm512_loadu_ps(a + 16), byte, part[i]);
    }
    if constexpr (Single)
      break;
  }
  __m512 s = _mm512_set1_ps(Half ? halfToFloat(row.halves[b]) : row.scales[b]);
  for (int i = 0; i < NR; ++i)
    total[i] = _mm512_fmadd_ps(part[i], s, total[i]);
}

/// The AVX-512 form of rows: the same two running sums per row.
template <int NR, bool Half, bool Single>
MOERT_TARGET_AVX512 void rows512(const Int4Activations &xp, int64_t i0,
                                 const Int4Row &row, int64_t groups,
                                 float out[NR]) {
  const int64_t blocks = xp.blocks, stride = xp.stride;
  const float *lanes = xp.lanes.data() + i0 * stride;
  __m512 even[NR], odd[NR];
  for (int i = 0; i < NR; ++i)
    even[i] = odd[i] = _mm512_setzero_ps();
  const int64_t blockBytes = groups * 16;
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    _mm_prefetch(reinterpret_cast<const char *>(row.codes + b * blockBytes +
                                                kPrefetchBytes),
                 _MM_HINT_T0);
    addBlock512<NR, Half, Single>(row, lanes, stride, b, groups, even);
    addBlock512<NR, Half, Single>(row, lanes, stride, b + 1, groups, odd);
  }
  if (b < blocks)
    addBlock512<NR, Half, Single>(row, lanes, stride, b, groups, even);
  float shift[NR];
  zeroShift<NR>(xp, i0, row, shift);
  for (int i = 0; i < NR; ++i) {
    __m512 sum = _mm512_add_ps(even[i], odd[i]);
    // The upper 256 bits onto the lower.
    sum = _mm512_add_ps(sum, _mm512_shuffle_f32x4(sum, sum, 0x4E));
    out[i] = horizontalSum(_mm512_castps512_ps256(sum)) - shift[i];
  }
}

/// rows<NR> (or rows512 when `wide`) for the matrix's scales and block
/// size. Either form computes each row of x alike at every NR, so that a
/// row's products do not depend on how many rows share the call.
template <int NR>
void rowsOf(const Int4Activations &xp, int64_t i0, const Int4Row &row,
            int64_t groups, bool wide, float out[NR]) {
  const bool half = row.halves, single = groups == 1;
  if (wide) {
    if (half)
      return single ? rows512<NR, true, true>(xp, i0, row, 1, out)
                    : rows512<NR, true, false>(xp, i0, row, groups, out);
    return single ? rows512<NR, false, true>(xp, i0, row, 1, out)
                  : rows512<NR, false, false>(xp, i0, row, groups, out);
  }
  if (half)
    return single ? rows<NR, true, true>(xp, i0, row, 1, out)
                  : rows<NR, true, false>(xp, i0, row, groups, out);
  return single ? rows<NR, false, true>(xp, i0, row, 1, out)
                : rows<NR, false, false>(xp, i0, row, groups, out);
}

/// The products of rowsOf, for projectInGroups.
struct Int4Rows {
  const Int4Activations &xp;
  const BlockQuantMatrix &w;
  int64_t groups;
  bool wide;
  template <int NR> void run(int64_t r, int64_t i, float *out) const {
    rowsOf<NR>(xp, i, Int4Row(w, r), groups, wide, out);
  }
};

} // namespace

bool hasQuantAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && hasQuantAvx2();
  return has;
}

void projectInt4(const float *x, int64_t n, const BlockQuantMatrix &w,
                 int64_t r0, int64_t m, const float *bias, float *c,
                 int64_t ldc, bool wide) {
  thread_local Int4Activations xp;
  prepare(x, n, w, xp);
  projectInGroups(Int4Rows{xp, w, w.blockSize / 32, wide}, n, r0, m, bias, c,
                  ldc);
}

#else

bool hasQuantAvx512() { return false; }

void projectInt4(const float *, int64_t, const BlockQuantMatrix &, int64_t,
                 int64_t, const float *, float *, int64_t, bool) {}

#endif // MOERT_INT4_AVX2

} // namespace moert::detail
