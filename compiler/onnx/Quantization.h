//===- Quantization.h - onnxruntime's block-quantized weights ---*- C++ -*-===//
//
// The int4/int8 weight formats of onnxruntime's contrib ops (MatMulNBits,
// GatherBlockQuantized, QMoE) and their dequantization, one function per
// format, as the ops define it:
//
//     w = (code - zero_point) * scale
//
// computed in f32: for integer zero points `code - zero_point` is exact and
// the product is the one rounding (what onnxruntime's GatherBlockQuantized
// kernel computes); a float zero point is subtracted in f32 first. Codes are
// unsigned and packed into bytes low bits first (the first 4-bit code in the
// low nibble). The importer dequantizes constant weights with these at import
// time; the runtime's quantized kernels will use them as their reference, so
// this header and Quantization.cpp are plain C++17 (no MLIR, no LLVM).
//
// Sizes are the caller's to validate (the importer checks every count against
// the attributes); the functions trust them and read exactly the bytes each
// struct's comments give.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_QUANTIZATION_H
#define MOEC_COMPILER_ONNX_QUANTIZATION_H

#include <algorithm>
#include <cstdint>

namespace moec::quant {

/// Returns the number of bytes `count` codes of `bits` bits pack into (bits is
/// 2, 4 or 8; a partly filled last byte counts).
inline int64_t getPackedBytes(int64_t count, int bits) {
  return (count * bits + 7) / 8;
}

/// Returns code `index` of the codes packed in `data`, `bits` bits each (2, 4
/// or 8), low bits first.
inline unsigned getPackedCode(const uint8_t *data, int bits, int64_t index) {
  int64_t perByte = 8 / bits;
  unsigned shift = unsigned(index % perByte) * unsigned(bits);
  return (unsigned(data[index / perByte]) >> shift) & ((1u << bits) - 1u);
}

/// A block-quantized matrix of `rows` x `cols` weights: each row is split
/// into blocks of `blockSize` columns (the last one may be shorter) that share
/// a scale and a zero point. The common shape of the formats below.
struct BlockQuantizedMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  /// Bits per code: 2, 4 or 8.
  int bits = 4;
  /// Columns per block; `cols` (or more) for one scale per row.
  int64_t blockSize = 0;
  /// The codes, packed; code (r, c) is code `r * codeRowStride + c`.
  const uint8_t *codes = nullptr;
  /// Codes from one row to the next (at least `cols`: rows may be padded).
  int64_t codeRowStride = 0;
  /// [rows, blocksPerRow] scales, row-major.
  const float *scales = nullptr;
  /// Zero points packed like the codes, or null: zero point (r, b) is code
  /// `r * zeroPointRowStride + b` of them.
  const uint8_t *packedZeroPoints = nullptr;
  int64_t zeroPointRowStride = 0;
  /// [rows, blocksPerRow] float zero points, or null. Without either kind
  /// every zero point is 2^(bits - 1).
  const float *floatZeroPoints = nullptr;

  /// Returns the number of blocks of a row.
  int64_t getBlocksPerRow() const {
    return blockSize >= cols ? 1 : (cols + blockSize - 1) / blockSize;
  }
};

/// Dequantizes `matrix` into `out`: weight (r, c) at `out[r * cols + c]`, or
/// at `out[c * rows + r]` when `transposed`. `out` holds rows * cols floats.
/// Inline: the moe dialect's moe.block_quantized_constant uses it too.
inline void dequantizeBlocks(const BlockQuantizedMatrix &matrix, float *out,
                             bool transposed) {
  // An empty matrix may come with no scales at all.
  if (matrix.rows == 0 || matrix.cols == 0)
    return;
  const int64_t blocksPerRow = matrix.getBlocksPerRow();
  const int64_t blockSize = std::min<int64_t>(matrix.blockSize, matrix.cols);
  const int defaultZeroPoint = 1 << (matrix.bits - 1);
  for (int64_t r = 0; r < matrix.rows; ++r) {
    for (int64_t b = 0; b < blocksPerRow; ++b) {
      const int64_t block = r * blocksPerRow + b;
      const float scale = matrix.scales[block];
      // An integer zero point is subtracted exactly, before the one rounding
      // of the product; a float one is subtracted in f32, as onnxruntime does.
      int zeroPoint = defaultZeroPoint;
      if (matrix.packedZeroPoints)
        zeroPoint = int(getPackedCode(matrix.packedZeroPoints, matrix.bits,
                                      r * matrix.zeroPointRowStride + b));
      const int64_t begin = b * blockSize;
      const int64_t end = std::min<int64_t>(begin + blockSize, matrix.cols);
      for (int64_t c = begin; c < end; ++c) {
        int code = int(getPackedCode(matrix.codes, matrix.bits,
                                     r * matrix.codeRowStride + c));
        float value =
            matrix.floatZeroPoints
                ? (float(code) - matrix.floatZeroPoints[block]) * scale
                : float(code - zeroPoint) * scale;
        out[transposed ? c * matrix.rows + r : r * matrix.cols + c] = value;
      }
    }
  }
}

/// The weight `B` of com.microsoft.MatMulNBits: an [N, K] matrix (one row per
/// output feature) quantized in blocks of `blockSize` along K.
struct MatMulNBitsWeight {
  int64_t k = 0;
  int64_t n = 0;
  /// 2, 4 or 8.
  int bits = 4;
  /// A power of 2, at least 16.
  int64_t blockSize = 0;
  /// [N, kBlocks, blockSize * bits / 8] bytes, kBlocks = ceil(K / blockSize):
  /// each row padded to a whole number of blocks.
  const uint8_t *b = nullptr;
  /// [N, kBlocks] scales.
  const float *scales = nullptr;
  /// [N, ceil(kBlocks * bits / 8)] bytes of packed zero points, or null.
  const uint8_t *packedZeroPoints = nullptr;
  /// [N, kBlocks] float zero points, or null (neither: 2^(bits - 1)).
  const float *floatZeroPoints = nullptr;

  /// Returns kBlocks, the number of blocks of a row.
  int64_t getBlocksPerRow() const { return (k + blockSize - 1) / blockSize; }
};

/// Dequantizes MatMulNBits's B into the [K, N] matrix that `Y = A @ W + bias`
/// multiplies by: weight (n, k) at `out[k * N + n]` (K * N floats).
void dequantizeMatMulNBits(const MatMulNBitsWeight &weight, float *out);

/// The `data` of com.microsoft.GatherBlockQuantized with uint8 data: a [rows,
/// cols] table (rows: the product of every dimension but the last), quantized
/// in blocks of `blockSize` along the last dimension.
struct GatherBlockQuantizedData {
  int64_t rows = 0;
  /// The logical last dimension: 8 / bits codes per byte of the data's.
  int64_t cols = 0;
  /// 4 or 8.
  int bits = 4;
  int64_t blockSize = 0;
  /// [rows, cols * bits / 8] bytes.
  const uint8_t *data = nullptr;
  /// [rows, ceil(cols / blockSize)] scales.
  const float *scales = nullptr;
  /// [rows, ceil(ceil(cols / blockSize) * bits / 8)] bytes of packed zero
  /// points, or null (2^(bits - 1)). Each row is padded to whole bytes, as
  /// the shape the op checks says (onnxruntime 1.23's CPU kernel reads them
  /// unpadded, which differs where a row has an odd number of 4-bit blocks).
  const uint8_t *zeroPoints = nullptr;
};

/// Dequantizes GatherBlockQuantized's data into the [rows, cols] table:
/// weight (r, c) at `out[r * cols + c]`.
void dequantizeGatherBlockQuantized(const GatherBlockQuantizedData &data,
                                    float *out);

/// One expert weight input of com.microsoft.QMoE (`fc1_experts_weights`, ...):
/// `experts` [rows, cols] matrices, one row per output feature, quantized per
/// row or in blocks of `blockSize` along the row.
struct QMoEWeight {
  int64_t experts = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  /// 4 or 8 (expert_weight_bits).
  int bits = 4;
  /// 0 for one scale per row, else a power of 2 that divides `cols`.
  int64_t blockSize = 0;
  /// [experts, rows, cols * bits / 8] bytes.
  const uint8_t *weights = nullptr;
  /// [experts, rows] scales, or [experts, rows, cols / blockSize].
  const float *scales = nullptr;
  /// Packed zero points, or null (2^(bits - 1)): [experts, ceil(rows * bits /
  /// 8)] bytes with one per row, or [experts, rows, ceil(cols / blockSize *
  /// bits / 8)] with blocks.
  const uint8_t *zeroPoints = nullptr;
};

/// Dequantizes a QMoE expert weight into [experts, rows, cols]: weight (e, r,
/// c) at `out[(e * rows + r) * cols + c]`.
void dequantizeQMoE(const QMoEWeight &weight, float *out);

/// Returns the E2M1 (FP4) value of a 4-bit code: bit 3 the sign, bits 0-2 an
/// index into 0, 0.5, 1, 1.5, 2, 3, 4, 6 (OCP Microscaling; transformers'
/// FP4_VALUES).
inline float getE2M1Value(unsigned code) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f,
                                           2.0f, 3.0f, 4.0f, 6.0f};
  float magnitude = kMagnitudes[code & 7u];
  return code & 8u ? -magnitude : magnitude;
}

/// The E8M0 exponent that means NaN; every other byte s is 2^(s - 127).
constexpr unsigned kE8M0NaN = 255;

/// One MXFP4 expert weight input of com.microsoft.QMoE with quant_type fp4
/// (what onnxruntime-genai's builder writes from gpt-oss's checkpoint
/// tensors): `experts` [rows, cols] matrices (one row per output feature) of
/// E2M1 codes in blocks of 32 along the row, each block with an E8M0 scale,
/// times a per-expert global scale.
struct Mxfp4Weight {
  int64_t experts = 0;
  /// N (a multiple of 2) and K (a multiple of 32).
  int64_t rows = 0;
  int64_t cols = 0;
  /// [experts, cols, rows / 2] bytes, N-packed (column-major per expert):
  /// byte (e, k, j) holds code (e, 2j, k) in its low nibble and (e, 2j + 1,
  /// k) in its high one.
  const uint8_t *weights = nullptr;
  /// [experts, rows, cols / 32] E8M0 exponents, none kE8M0NaN.
  const uint8_t *scales = nullptr;
  /// [experts] global scales, or null for 1.
  const float *globalScales = nullptr;
};

/// Dequantizes an MXFP4 weight into [experts, rows, cols]: weight (e, r, c)
/// = E2M1(code) * 2^(s - 127) * global[e] at `out[(e * rows + r) * cols +
/// c]`. The product of the code and the block scale is exact in f32 (a
/// 2-bit significand scaled by a power of two; subnormal below 2^-126, inf
/// above the f32 range, which the caller checks for); the global scale is
/// the one rounding (none for a power of two).
void dequantizeMxfp4(const Mxfp4Weight &weight, float *out);

} // namespace moec::quant

#endif // MOEC_COMPILER_ONNX_QUANTIZATION_H
