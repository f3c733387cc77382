//===- linear.cpp - The Linear step ---------------------------------------===//
//
// y [..., N] = a [..., K] W^T for a weight W [N, K] stored f32, bf16, f16 or
// int8 with a scale per row (docs/plan-format.md, format 1.16): what `moec
// compile --weight-dtype` makes of a MatMul by a constant matrix. Every row
// of a is one row of the product. A few rows (decoding, and the decode
// steps of a batch of a few sequences) read each weight once through the
// streaming kernels (kernels/stream.h) or the register tiles
// (kernels/tiles.h), the pool's threads taking contiguous blocks of W's
// rows; more rows (a prompt) widen blocks of
// W's rows to f32 and multiply them, each block once for all the rows, with
// oneDNN's f32 matmul where it has brgemm kernels for the CPU
// (kernels/expert_gemm.h), else sgemm. The activations stay f32 throughout.
//
//===----------------------------------------------------------------------===//

#include "exec/ops.h"
#include "exec/thread_pool.h"
#include "kernels/common.h"
#include "kernels/expert_gemm.h"
#include "kernels/stream.h"
#include "kernels/tiles.h"

#include <algorithm>
#include <vector>

namespace moert::detail {
namespace {

constexpr int kA = 0, kW = 1, kScales = 2;

/// Weight rows widened per GEMM block (256: the GEMM packs the activations
/// once per block, which cost 28% of a 64-token prompt at 64).
constexpr int64_t kWidenedRows = 256;
/// Column blocks of the streamed product are multiples of this (a cache
/// line of the output).
constexpr int64_t kColumnQuantum = 16;

StreamWeights streamWeights(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return StreamWeights::BF16;
  case DType::F16:
    return StreamWeights::F16;
  case DType::I8:
    return StreamWeights::I8;
  default:
    return StreamWeights::F32;
  }
}

absl::Status validateLinear(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(kA, bit(DType::F32)));
  const TensorInfo &a = check.in(kA);
  if (a.rank < 1)
    return check.error("a must have rank >= 1");
  const TensorInfo &w = check.in(kW);
  if (!w.isWeight)
    return check.error("w must be a weight");
  if (w.dtype != DType::F32 && w.dtype != DType::BF16 &&
      w.dtype != DType::F16 && w.dtype != DType::I8)
    return check.error("w is ", dtypeName(w.dtype),
                       "; expected f32, bf16, f16 or i8");
  if (w.rank != 2 || w.dims[0].kind != fb::DimKind::Static ||
      w.dims[1].kind != fb::DimKind::Static)
    return check.error("w must be a static [N, K] weight, is ",
                       declaredShape(w));
  int64_t n = w.dims[0].bound, k = w.dims[1].bound;
  if (n < 1 || k < 1 || n > INT32_MAX || k > INT32_MAX)
    return check.error("w is declared ", declaredShape(w),
                       "; N and K must be in [1, 2^31)");
  const DimInfo &last = a.dims[a.rank - 1];
  if (last.kind == fb::DimKind::Static && last.bound != k)
    return check.error("a is declared ", declaredShape(a),
                       "; its last dimension must be K = ", k, " (w is ",
                       declaredShape(w), ")");
  bool quantized = w.dtype == DType::I8;
  if (quantized != check.has(kScales))
    return check.error(quantized ? "w is i8 and needs its scales [N]"
                                 : "scales are for i8 weights; w is ",
                       quantized ? "" : dtypeName(w.dtype));
  if (quantized) {
    const TensorInfo &scales = check.in(kScales);
    if (!scales.isWeight || scales.dtype != DType::F32 || scales.rank != 1 ||
        scales.dims[0].kind != fb::DimKind::Static || scales.dims[0].bound != n)
      return check.error("scales must be an f32 weight [", n, "], is ",
                         dtypeName(scales.dtype), " ", declaredShape(scales));
  }
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::F32)));
  return check.outRank(0, a.rank);
}

/// Runs body(j0, j1) on one contiguous block of the N weight rows per
/// thread of `pool` (multiples of kColumnQuantum): each weight byte is read
/// once, by one thread.
template <typename Body>
void forThreadBlocks(ThreadPool &pool, int64_t N, Body body) {
  const int64_t threads = pool.size();
  int64_t per = (N + threads - 1) / threads;
  int64_t grain = (per + kColumnQuantum - 1) / kColumnQuantum * kColumnQuantum;
  pool.parallelFor(N, grain, body);
}

absl::Status linearKernel(KernelContext &ctx) {
  const Tensor &a = ctx.in(kA);
  const Tensor &w = ctx.in(kW);
  const int64_t N = w.shape[0], K = w.shape[1];
  if (a.shape[a.shape.rank - 1] != K)
    return ctx.error("a has shape ", a.shape.str(), "; expected [..., ", K,
                     "]");
  Shape shape = a.shape;
  shape.dims[shape.rank - 1] = N;
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  const int64_t M = a.shape.numel() / K;
  if (M == 0)
    return absl::OkStatus();
  const float *x = a.as<const float>();
  float *y = out->as<float>();
  const StreamWeights type = streamWeights(w.dtype);
  const auto *bytes = static_cast<const uint8_t *>(w.data);
  const size_t width = dtypeSize(w.dtype);
  const float *scales =
      ctx.has(kScales) ? ctx.in(kScales).as<const float>() : nullptr;
  const int64_t threads = ctx.pool().size();
  // The experts' crossovers for [out, K] weights: up to 4 to 8 rows (by
  // weight type, where the CPU has AVX-512) the streaming kernels, then for
  // f32 weights the register tiles up to tiledRows (up to 8 rows, a batch
  // of sequences decoding, their sums are the streaming ones; the narrow
  // types' tiles round x to bf16, which this step does not); none in
  // batch-invariant mode.
  const bool streams = M <= streamedRows(type, /*inOut=*/false);
  if (streams || (type == StreamWeights::F32 && M <= tiledRows(type))) {
    // One contiguous block of weight rows per thread: each weight byte is
    // read once, by one thread.
    auto *product = streams ? streamProject : tileProject;
    forThreadBlocks(ctx.pool(), N, [&](int64_t j0, int64_t j1) {
      product(x, M, K, bytes, type, j0, j1 - j0, scales, nullptr, y + j0, N);
    });
    return absl::OkStatus();
  }
  // f32 weights need no widening: oneDNN's f32 matmul reads each thread's
  // block of weight rows as it is (24% faster than sgemm of the transposed
  // weights on a 64-token prompt), else sgemm.
  if (type == StreamWeights::F32) {
    const auto *w32 = reinterpret_cast<const float *>(bytes);
    forThreadBlocks(ctx.pool(), N, [&](int64_t j0, int64_t j1) {
      if (!matmulBlock(x, M, K, w32, type, N, /*inOut=*/false, j0, j1 - j0,
                       nullptr, nullptr, y + j0, N))
        sgemm(false, true, M, j1 - j0, K, 1.0f, x, K, w32 + j0 * K, K, 0.0f,
              y + j0, N);
    });
    return absl::OkStatus();
  }
  int64_t blocks = (N + kWidenedRows - 1) / kWidenedRows;
  ctx.pool().parallelFor(
      blocks, (blocks + threads - 1) / threads, [&](int64_t b0, int64_t b1) {
        thread_local std::vector<float> widened;
        widened.resize(kWidenedRows * K);
        for (int64_t b = b0; b < b1; ++b) {
          int64_t j0 = b * kWidenedRows;
          int64_t rows = std::min(kWidenedRows, N - j0);
          widenWeights(bytes + j0 * K * width, type, rows * K, widened.data());
          // The widened [rows, K] block through oneDNN's f32 matmul (5-15%
          // faster than sgemm on a 64-token prompt), else sgemm.
          if (!matmulBlock(x, M, K, widened.data(), StreamWeights::F32, rows,
                           /*inOut=*/false, 0, rows, nullptr, nullptr, y + j0,
                           N))
            sgemm(false, true, M, rows, K, 1.0f, x, K, widened.data(), K, 0.0f,
                  y + j0, N);
          if (scales)
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < rows; ++j)
                y[i * N + j0 + j] *= scales[j0 + j];
        }
      });
  return absl::OkStatus();
}

} // namespace

void registerLinearOps(OpRegistry &r) {
  r.add(fb::OpKind::Linear, makeOp("Linear", 2, 3, validateLinear, linearKernel)
                                .withOptionalInputs(0b100));
}

} // namespace moert::detail
