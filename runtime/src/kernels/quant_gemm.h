//===- quant_gemm.h - Products with block-quantized weights -----*- C++ -*-===//
//
// Products of f32 activations with int4/int8 weights kept in onnxruntime's
// block-quantized layout (com.microsoft MatMulNBits and QMoE), in f32 or,
// where the model allows it (onnxruntime's accuracy_level 4), with the
// activations quantized to int8 per block: a [rows, cols]
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

#include "exec/ops.h"

#include <algorithm>
#include <cstdint>
#include <vector>

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
  /// Whether products quantize the activations to int8 per block and
  /// multiply integers (quantizeActivations), as onnxruntime does for
  /// accuracy_level 4; otherwise they compute in f32.
  bool int8Activations = false;

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

  /// Row r's codes, scales (f32, or null with f16 scales), f16 scales (or
  /// null) and packed zero points (or null).
  const uint8_t *rowCodes(int64_t r) const { return codes + r * rowBytes(); }
  const float *rowScales(int64_t r) const {
    return halfScales ? nullptr
                      : static_cast<const float *>(scales) + r * blocks();
  }
  const uint16_t *rowHalfScales(int64_t r) const {
    return halfScales ? static_cast<const uint16_t *>(scales) + r * blocks()
                      : nullptr;
  }
  const uint8_t *rowZeroPoints(int64_t r) const {
    return zeroPoints ? zeroPoints + r * zeroPointRowBytes() : nullptr;
  }
};

/// out[i, c] = W[r0 + i, c] for i < count, c < cols: the exact f32 weights,
/// each the one rounding of (code - zero) * scale.
void dequantizeRows(const BlockQuantMatrix &w, int64_t r0, int64_t count,
                    float *out);

/// Which kernel quantProject and quantizeActivations run.
/// (Avx512 is the AVX-512 form of 4-bit f32 products; other products run
/// their AVX2 kernel under it.)
enum class QuantKernel { Auto, Portable, Avx2, Avx512 };

/// Rows of activations quantized to int8 per block of a matrix's columns,
/// as onnxruntime's MLAS quantizes A for accuracy_level 4: per row and
/// block, scale = amax / 127 and code = round-half-even(x * (127 / amax))
/// in f32 (codes and scale 0 for an all-zero block).
/// Int8 activations as the AVX-512 VNNI row kernel reads them
/// (quant_int4_vnni.cpp), per row and 128 columns: the codes in the order
/// the nibbles of a 64-byte load come out of a register (the even columns of
/// four groups of 32, then the odd ones), and per 32-bit lane the sum of the
/// eight codes it multiplies and its block's activation scale.
struct VnniRowLayout {
  int64_t rows = 0, chunks = 0;
  std::vector<int8_t> codes;     // [rows, chunks * 128]
  std::vector<int32_t> laneSums; // [rows, chunks * 16]
  std::vector<float> laneScales; // [rows, chunks * 16]
  /// Per chunk, the block of its first column (no division in the loop).
  std::vector<int64_t> firstBlock;
};

struct Int8Activations {
  int64_t rows = 0, blocks = 0, blockSize = 0;
  /// 4-bit weights in blocks of a multiple of 32: within each 32 columns of
  /// a block, the codes of the even columns come first, then the odd ones
  /// (the order of the low and high nibbles of 16 code bytes).
  bool nibbleOrder = false;
  /// [rows, blocks * blockSize]: zero past the matrix's columns.
  std::vector<int8_t> codes;
  /// [rows, blocks].
  std::vector<float> scales;
  /// The same codes for the VNNI row kernel, made by quantizeActivations
  /// where that kernel takes the product (a few rows, a vnniShape matrix),
  /// so that the products of every block of columns share them; empty
  /// (rows 0) otherwise.
  VnniRowLayout vnniRows;

  int64_t rowCodes() const { return blocks * blockSize; }
};

/// Quantizes x [n, w.cols] into `out` for products with `w` (every kernel
/// gives the same codes and scales).
void quantizeActivations(const float *x, int64_t n, const BlockQuantMatrix &w,
                         Int8Activations &out,
                         QuantKernel kernel = QuantKernel::Auto);

/// Whether this CPU runs the AVX2+FMA kernels (the int8 products' included).
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
/// accumulation; 4-bit codes in blocks of a multiple of 32 on AVX2 sum
/// s * sum x q and s * z * sum x apart, see projectInt4); more rows
/// dequantize tiles exactly and run sgemm.
/// With w.int8Activations, x is quantized (or `xq` is x quantized for w by
/// quantizeActivations): up to kQuantStreamRows rows (or any with a kernel
/// named, or any on the VNNI kernel, projectInt4Vnni) sum per block the
/// exact integer products of the activation codes with q - z, scaled by the
/// f32 product of the two blocks' scales; more rows multiply the codes times
/// their scales by the dequantized weights through sgemm, the same sums
/// reassociated (f32 roundings apart).
void quantProject(const float *x, int64_t n, const BlockQuantMatrix &w,
                  int64_t r0, int64_t m, const float *bias, float *c,
                  int64_t ldc, QuantKernel kernel = QuantKernel::Auto,
                  const Int8Activations *xq = nullptr);

/// Whether this CPU runs the AVX-512 form of the int4 f32 product.
bool hasQuantAvx512();

/// quantProject's f32 product on the calling thread for 4-bit codes in
/// blocks of a multiple of 32, with AVX2+FMA (only where hasQuantAvx2()),
/// or AVX-512 when `wide` (only where hasQuantAvx512()): per block
/// s * sum x q, less s * z * sum x summed over the blocks, the same sum
/// reassociated (kernels/quant_int4.cpp).
void projectInt4(const float *x, int64_t n, const BlockQuantMatrix &w,
                 int64_t r0, int64_t m, const float *bias, float *c,
                 int64_t ldc, bool wide);

/// Whether projectInt4Chunks takes `w`: 4-bit codes in blocks of 32, 64 or
/// a multiple of 128 columns.
bool int4ChunkShape(const BlockQuantMatrix &w);

/// quantProject's f32 product on the calling thread for 4-bit codes of an
/// int4ChunkShape, with AVX-512 (only where hasQuantAvx512()): per 32-bit
/// lane of 64 code bytes the sum of its eight products less its zero
/// point's share, scaled by its block's scale (kernels/quant_int4_avx512.cpp).
void projectInt4Chunks(const float *x, int64_t n, const BlockQuantMatrix &w,
                       int64_t r0, int64_t m, const float *bias, float *c,
                       int64_t ldc);

/// Whether this CPU runs the AVX-512 VNNI form of the int8 product with
/// 4-bit codes (kernels/quant_int4_vnni.cpp).
bool hasQuantVnni();

/// Whether projectInt4Vnni takes `w`: 4-bit codes in blocks of 32, 64 or a
/// multiple of 128 columns.
bool vnniShape(const BlockQuantMatrix &w);

/// How projectInt4Vnni reads the weights: each weight row once per four
/// rows of x (Rows), or tiles of weight rows unpacked once for all of x's
/// rows (Tiles); Auto takes Tiles from kVnniTileRows rows. Both give the
/// same results.
enum class VnniForm { Auto, Rows, Tiles };

/// Rows of x from which projectInt4Vnni unpacks tiles of weight rows.
inline constexpr int64_t kVnniTileRows = 4;

/// xq's rows laid out for the VNNI row kernel into `out`.
void layOutVnniRows(const Int8Activations &xq, VnniRowLayout &out);

/// quantProject's integer product on the calling thread for activations xq
/// (rows [0, n)) and 4-bit codes of a vnniShape, with AVX-512 VNNI (only
/// where hasQuantVnni()): per 32-bit lane, sum (q - z) a exact, scaled by
/// its block's two scales, the lanes added in f32; every row of x alike,
/// whatever their number and `form`.
void projectInt4Vnni(const Int8Activations &xq, int64_t n,
                     const BlockQuantMatrix &w, int64_t r0, int64_t m,
                     const float *bias, float *c, int64_t ldc,
                     VnniForm form = VnniForm::Auto);

/// c[i, j] = rows.run<NR>(r, i) + bias[r] for rows i < n of x and weight
/// rows r = r0 + j, j < m: rows of x four at a time, so that the weight row
/// stays in L1 across them.
template <typename Rows>
inline void projectInGroups(const Rows &rows, int64_t n, int64_t r0, int64_t m,
                            const float *bias, float *c, int64_t ldc) {
  for (int64_t j = 0; j < m; ++j) {
    int64_t r = r0 + j;
    float add = bias ? bias[r] : 0.0f;
    for (int64_t i = 0; i < n;) {
      float out[4];
      int64_t count = std::min<int64_t>(4, n - i);
      switch (count) {
      case 4:
        rows.template run<4>(r, i, out);
        break;
      case 3:
        rows.template run<3>(r, i, out);
        break;
      case 2:
        rows.template run<2>(r, i, out);
        break;
      default:
        rows.template run<1>(r, i, out);
        break;
      }
      for (int64_t t = 0; t < count; ++t)
        c[(i + t) * ldc + j] = out[t] + add;
      i += count;
    }
  }
}

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
