//===- quant_matmul.cpp - The MatMulNBits step ----------------------------===//
//
// y [..., N] = a [..., K] W^T for a block-quantized W [N, K] kept packed
// (docs/plan-format.md, format 1.11): every row of a is one row of the
// product, and the pool's threads take blocks of W's rows, so that each
// weight byte is read by one thread (kernels/quant_gemm.h).
//
//===----------------------------------------------------------------------===//

#include "exec/ops.h"
#include "kernels/common.h"
#include "kernels/quant_gemm.h"

#include <algorithm>

namespace moert::detail {

absl::Status validateBlockQuant(const StepView &view,
                                const fb::BlockQuantAttrs &attrs) {
  int bits = attrs.bits();
  int64_t blockSize = attrs.block_size();
  if (bits != 4 && bits != 8)
    return view.error("bits must be 4 or 8, got ", bits);
  if (blockSize < 1 || blockSize > (int64_t{1} << 30) ||
      blockSize * bits % 8 != 0)
    return view.error("block_size ", blockSize,
                      " must be in [1, 2^30] and hold whole bytes of ", bits,
                      "-bit codes");
  return absl::OkStatus();
}

absl::Status checkBlockQuantWeights(const StepView &view,
                                    const TensorInfo *const infos[3],
                                    const char *const names[3], int lead,
                                    const int64_t outer[], int64_t rows,
                                    int64_t cols, int bits, int64_t blockSize) {
  BlockQuantMatrix shape =
      BlockQuantMatrix::ofShape(rows, cols, bits, blockSize);
  const int64_t last[] = {shape.rowBytes(), shape.blocks(),
                          shape.zeroPointRowBytes()};
  for (int t = 0; t < 3; ++t) {
    const TensorInfo *info = infos[t];
    if (!info)
      continue;
    bool scales = t == 1;
    if (scales ? info->dtype != DType::F32 && info->dtype != DType::F16
               : info->dtype != DType::I8)
      return view.error(names[t], " is ", dtypeName(info->dtype), "; expected ",
                        scales ? "f32 or f16" : "i8 (raw bytes)");
    if (!info->isWeight)
      return view.error(names[t], " must be a weight");
    std::string expected = "[";
    for (int d = 0; d < lead; ++d)
      absl::StrAppend(&expected, outer[d], ", ");
    absl::StrAppend(&expected, rows, ", ", last[t], "]");
    bool match = info->rank == lead + 2;
    for (int d = 0; match && d < lead + 2; ++d) {
      int64_t want = d < lead ? outer[d] : d == lead ? rows : last[t];
      match = info->dims[d].kind == fb::DimKind::Static &&
              info->dims[d].bound == want;
    }
    if (!match)
      return view.error(names[t], " is declared ", declaredShape(*info),
                        "; expected ", expected, " for ", rows, " rows of ",
                        cols, " ", bits, "-bit weights in blocks of ",
                        blockSize);
  }
  return absl::OkStatus();
}

BlockQuantMatrix blockQuantMatrix(const Tensor &codes, const Tensor &scales,
                                  const Tensor *zeroPoints, int64_t rows,
                                  int64_t cols, int bits, int64_t blockSize) {
  BlockQuantMatrix w = BlockQuantMatrix::ofShape(rows, cols, bits, blockSize);
  w.codes = codes.as<const uint8_t>();
  w.scales = scales.data;
  w.halfScales = scales.dtype == DType::F16;
  w.zeroPoints = zeroPoints ? zeroPoints->as<const uint8_t>() : nullptr;
  return w;
}

namespace {

constexpr int kA = 0, kCodes = 1, kScales = 2, kZeroPoints = 3;

absl::Status validateMatMulNBits(const StepCheck &check) {
  const auto *attrs = check.attrs<fb::BlockQuantAttrs>();
  MOERT_RETURN_IF_ERROR(validateBlockQuant(check, *attrs));
  int64_t k = attrs->k();
  if (k < 1 || k > INT32_MAX)
    return check.error("k ", k, " must be in [1, 2^31)");
  MOERT_RETURN_IF_ERROR(check.inType(kA, bit(DType::F32)));
  if (check.in(kA).rank < 1)
    return check.error("a must have rank >= 1");
  const DimInfo &last = check.in(kA).dims[check.in(kA).rank - 1];
  if (last.kind == fb::DimKind::Static && last.bound != k)
    return check.error("a is declared ", declaredShape(check.in(kA)),
                       "; its last dimension must be k = ", k);
  const TensorInfo &codes = check.in(kCodes);
  if (codes.rank != 2 || codes.dims[0].kind != fb::DimKind::Static)
    return check.error("codes must be a static [N, bytes] weight, is ",
                       declaredShape(codes));
  int64_t n = codes.dims[0].bound;
  if (n < 1 || n > INT32_MAX)
    return check.error("N ", n, " must be in [1, 2^31)");
  const TensorInfo *infos[3] = {&codes, &check.in(kScales),
                                check.has(kZeroPoints) ? &check.in(kZeroPoints)
                                                       : nullptr};
  const char *names[3] = {"codes", "scales", "zero_points"};
  MOERT_RETURN_IF_ERROR(checkBlockQuantWeights(check, infos, names, 0, nullptr,
                                               n, k, attrs->bits(),
                                               attrs->block_size()));
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::F32)));
  return check.outRank(0, check.in(kA).rank);
}

absl::Status matMulNBitsKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::BlockQuantAttrs>();
  const Tensor &a = ctx.in(kA);
  const int64_t K = attrs->k();
  if (a.shape[a.shape.rank - 1] != K)
    return ctx.error("a has shape ", a.shape.str(), "; expected [..., ", K,
                     "]");
  const Tensor &codes = ctx.in(kCodes);
  const int64_t N = codes.shape[0];
  BlockQuantMatrix w =
      blockQuantMatrix(codes, ctx.in(kScales),
                       ctx.has(kZeroPoints) ? &ctx.in(kZeroPoints) : nullptr, N,
                       K, attrs->bits(), attrs->block_size());
  w.int8Activations = attrs->int8_activations();
  Shape shape = a.shape;
  shape.dims[shape.rank - 1] = N;
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  const int64_t M = a.shape.numel() / K;
  const float *x = a.as<const float>();
  float *y = out->as<float>();
  if (M == 0)
    return absl::OkStatus();
  // Int8 activations: quantized once, for every thread.
  Int8Activations xq;
  if (w.int8Activations)
    quantizeActivations(x, M, w, xq);
  // Blocks of weight rows: small enough to share out among the threads,
  // large enough that a GEMM tile amortises its packing.
  const int64_t threads = ctx.pool().size();
  const int64_t block = M <= kQuantStreamRows ? 16 : 64;
  const int64_t grain =
      std::max<int64_t>(block, (N + threads * 4 - 1) / (threads * 4));
  ctx.pool().parallelFor(N, grain, [&](int64_t j0, int64_t j1) {
    quantProject(x, M, w, j0, j1 - j0, nullptr, y + j0, N, QuantKernel::Auto,
                 w.int8Activations ? &xq : nullptr);
  });
  return absl::OkStatus();
}

} // namespace

void registerQuantOps(OpRegistry &r) {
  r.add(fb::OpKind::MatMulNBits,
        makeOp("MatMulNBits", 3, 4, validateMatMulNBits, matMulNBitsKernel,
               fb::Attrs::BlockQuantAttrs)
            .withOptionalInputs(0b1000));
}

} // namespace moert::detail
