//===- quant_gemm.h - Products with block-quantized weights -----*- C++ -*-===//
//
// Products of f32 activations with int4/int8 weights kept in onnxruntime's
// block-quantized layout (com.microsoft MatMulNBits and QMoE): a [rows, cols]
// matrix whose rows are split into blocks of `blockSize` columns sharing a
// scale and a zero point,
//
//     W[r, c] = (code(r, c) - zero(r, c / blockSize)) * scale(r, c / blockSize)
//
// with unsigned codes packed low bits first (the first 4-bit code of a byte
// in its low nibble). The MatMulNBits step (docs/plan-format.md) and the
// Experts step's block-quantized matrices read their weights through these.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_QUANT_GEMM_H
#define MOERT_SRC_KERNELS_QUANT_GEMM_H

#include "ops.h"

#include <cstdint>

namespace moert::detail {

/// A block-quantized [rows, cols] matrix (sizes validated by the loader).
struct BlockQuantMatrix {
  int64_t rows = 0, cols = 0;
  /// Bits per code: 4 or 8.
  int bits = 4;
  /// Columns per block; blockSize * bits is a multiple of 8 (whole bytes).
  int64_t blockSize = 32;
  /// [rows, blocks, blockSize * bits / 8] bytes: each row padded to whole
  /// blocks (the padding codes are never read).
  const uint8_t *codes = nullptr;
  /// [rows, blocks] scales: f32, or f16 bits when `halfScales`.
  const void *scales = nullptr;
  bool halfScales = false;
  /// [rows, ceil(blocks * bits / 8)] packed zero points, or null: every
  /// zero point is then 2^(bits - 1).
  const uint8_t *zeroPoints = nullptr;

  /// A matrix of this shape and format, with no data yet.
  static BlockQuantMatrix ofShape(int64_t rows, int64_t cols, int bits,
                                  int64_t blockSize) {
    BlockQuantMatrix w;
    w.rows = rows;
    w.cols = cols;
    w.bits = bits;
    w.blockSize = blockSize;
    return w;
  }
  /// Blocks per row: ceil(cols / blockSize).
  int64_t blocks() const { return (cols + blockSize - 1) / blockSize; }
  /// Bytes of one block's codes.
  int64_t blockBytes() const { return blockSize * bits / 8; }
  /// Bytes of one row's codes.
  int64_t rowBytes() const { return blocks() * blockBytes(); }
  /// Bytes of one row's zero points.
  int64_t zeroPointRowBytes() const { return (blocks() * bits + 7) / 8; }
};

/// out[i, c] = W[r0 + i, c] for i < count, c < cols: the exact f32 weights,
/// each the one rounding of (code - zero) * scale.
void dequantizeRows(const BlockQuantMatrix &w, int64_t r0, int64_t count,
                    float *out);

/// Which kernel quantProject runs.
enum class QuantKernel { Auto, Portable, Avx2 };

/// Whether this CPU runs the AVX2+FMA kernels.
bool hasQuantAvx2();

/// Rows of x up to which quantProject reads the weights once in registers
/// (above: dequantized blocks and sgemm).
inline constexpr int64_t kQuantStreamRows = 8;

/// c[i, j] (leading dimension ldc) = sum over k of x[i, k] W[r0 + j, k]
/// (+ bias[r0 + j]) for i < n, j < m: x [n, cols] times the transpose of
/// weight rows [r0, r0 + m). On the calling thread. Up to kQuantStreamRows
/// rows read each code once and compute per block s * sum_k x_k (q_k - z),
/// the dequantized product reassociated (the integer q - z is exact; the
/// rounding differs from the dequantized f32 product's by the order of f32
/// accumulation); more rows dequantize tiles exactly and run sgemm.
void quantProject(const float *x, int64_t n, const BlockQuantMatrix &w,
                  int64_t r0, int64_t m, const float *bias, float *c,
                  int64_t ldc, QuantKernel kernel = QuantKernel::Auto);

/// Checks a step's block-quantization attributes (bits, block_size).
absl::Status validateBlockQuant(const StepView &view,
                                const fb::BlockQuantAttrs &attrs);

/// Checks the declarations of a block-quantized matrix's codes, scales and
/// zero points (`infos`, named `names`; a null entry is absent): weights of
/// static shape [outer[0 .. lead), rows, last], last being the codes' row
/// bytes, the blocks, and the zero points' row bytes of `rows` x `cols`
/// `bits`-bit weights in blocks of `blockSize`; codes and zero points I8,
/// scales f32 or f16.
absl::Status checkBlockQuantWeights(const StepView &view,
                                    const TensorInfo *const infos[3],
                                    const char *const names[3], int lead,
                                    const int64_t outer[], int64_t rows,
                                    int64_t cols, int bits, int64_t blockSize);

/// The matrix of `rows` x `cols` weights whose codes, scales and zero points
/// (or null) are these tensors, checked by checkBlockQuantWeights.
BlockQuantMatrix blockQuantMatrix(const Tensor &codes, const Tensor &scales,
                                  const Tensor *zeroPoints, int64_t rows,
                                  int64_t cols, int bits, int64_t blockSize);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_QUANT_GEMM_H
