//===- Quantization.cpp - onnxruntime's block-quantized weights -----------===//

#include "compiler/onnx/Quantization.h"

#include <algorithm>
#include <cmath>

using namespace moec::quant;

void moec::quant::dequantizeMatMulNBits(const MatMulNBitsWeight &weight,
                                        float *out) {
  const int64_t blocksPerRow = weight.getBlocksPerRow();
  const int64_t codesPerByte = 8 / weight.bits;
  BlockQuantizedMatrix matrix;
  matrix.rows = weight.n;
  matrix.cols = weight.k;
  matrix.bits = weight.bits;
  matrix.blockSize = weight.blockSize;
  matrix.codes = weight.b;
  // Rows are padded to whole blocks: the codes past K are never read.
  matrix.codeRowStride = blocksPerRow * weight.blockSize;
  matrix.scales = weight.scales;
  matrix.packedZeroPoints = weight.packedZeroPoints;
  matrix.zeroPointRowStride =
      getPackedBytes(blocksPerRow, weight.bits) * codesPerByte;
  matrix.floatZeroPoints = weight.floatZeroPoints;
  dequantizeBlocks(matrix, out, /*transposed=*/true);
}

void moec::quant::dequantizeGatherBlockQuantized(
    const GatherBlockQuantizedData &data, float *out) {
  BlockQuantizedMatrix matrix;
  matrix.rows = data.rows;
  matrix.cols = data.cols;
  matrix.bits = data.bits;
  matrix.blockSize = data.blockSize;
  matrix.codes = data.data;
  matrix.codeRowStride = data.cols;
  matrix.scales = data.scales;
  matrix.packedZeroPoints = data.zeroPoints;
  matrix.zeroPointRowStride =
      getPackedBytes(matrix.getBlocksPerRow(), data.bits) * (8 / data.bits);
  dequantizeBlocks(matrix, out, /*transposed=*/false);
}

void moec::quant::dequantizeQMoE(const QMoEWeight &weight, float *out) {
  const bool perRow = weight.blockSize == 0;
  const int64_t blocksPerRow = perRow ? 1 : weight.cols / weight.blockSize;
  const int64_t codesPerByte = 8 / weight.bits;
  // Per row the zero points of an expert are packed along its rows (one code
  // per row); with blocks, along each row's blocks, each row padded to bytes.
  const int64_t zeroPointRowBytes =
      perRow ? 0 : getPackedBytes(blocksPerRow, weight.bits);
  const int64_t zeroPointExpertBytes =
      perRow ? getPackedBytes(weight.rows, weight.bits)
             : weight.rows * zeroPointRowBytes;
  const int64_t weightExpertBytes =
      weight.rows * getPackedBytes(weight.cols, weight.bits);
  for (int64_t e = 0; e < weight.experts; ++e) {
    BlockQuantizedMatrix matrix;
    matrix.rows = weight.rows;
    matrix.cols = weight.cols;
    matrix.bits = weight.bits;
    matrix.blockSize = perRow ? weight.cols : weight.blockSize;
    matrix.codes = weight.weights + e * weightExpertBytes;
    matrix.codeRowStride = weight.cols;
    matrix.scales = weight.scales + e * weight.rows * blocksPerRow;
    if (weight.zeroPoints) {
      matrix.packedZeroPoints = weight.zeroPoints + e * zeroPointExpertBytes;
      matrix.zeroPointRowStride = perRow ? 1 : zeroPointRowBytes * codesPerByte;
    }
    dequantizeBlocks(matrix, out + e * weight.rows * weight.cols,
                     /*transposed=*/false);
  }
}

void moec::quant::dequantizeMxfp4(const Mxfp4Weight &weight, float *out) {
  const int64_t rows = weight.rows, cols = weight.cols;
  const int64_t blocksPerRow = cols / 32, bytesPerCol = rows / 2;
  for (int64_t e = 0; e < weight.experts; ++e) {
    const uint8_t *codes = weight.weights + e * cols * bytesPerCol;
    const uint8_t *scales = weight.scales + e * rows * blocksPerRow;
    const float global = weight.globalScales ? weight.globalScales[e] : 1.0f;
    float *matrix = out + e * rows * cols;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        uint8_t byte = codes[c * bytesPerCol + r / 2];
        unsigned code = r % 2 ? byte >> 4 : byte & 0xFu;
        int exponent = int(scales[r * blocksPerRow + c / 32]) - 127;
        matrix[r * cols + c] =
            std::ldexp(getE2M1Value(code), exponent) * global;
      }
  }
}
