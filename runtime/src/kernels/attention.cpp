//===- attention.cpp - Scaled dot-product attention -----------------------===//
//
// One task per (batch, head, block of queries): the block's scores against
// every key by one GEMM (sgemm, oneDNN), the soft cap applied and the mask
// added, the max-subtracted exponentials per row (with the head's sink),
// then the block's output by a second GEMM against the values, each row
// multiplied by the reciprocal of its exponentials' sum. The [B, H, Sq, Skv]
// scores never exist as a whole; a task holds its block's rows only.
//
//===----------------------------------------------------------------------===//

#include "kernels/attention.h"
#include "kernels/common.h"

#include <cmath>
#include <vector>

namespace moert::detail {

namespace {

/// Queries per task: enough rows for the GEMMs to reach their speed, few
/// enough that the scores of a block stay in cache for long prefixes.
constexpr int64_t kQueryBlock = 32;
/// Multiply-adds per task below which tasks are grouped (a thread wake-up
/// costs a few microseconds).
constexpr int64_t kTaskWork = 1 << 16;

/// Soft cap, mask and the softmax's exponentials of the m x keys scores `s`
/// of the query rows from `first` of batch b, head h, in place; each row's
/// reciprocal of the sum into `inverses`, which the caller multiplies into
/// the row's output (m x valueDim products where the probabilities would
/// take m x keys). Compiled for AVX-512 and AVX2 too: the exponentials are
/// most of an attention step's time over long rows (the vision encoders'
/// hundreds of patches).
MOERT_MATH_CLONES void exponentiateScores(const AttentionArgs &a, float *s,
                                          float *inverses, int64_t m, int64_t b,
                                          int64_t h, int64_t first) {
  const float *sink = a.sinks ? a.sinks + h : nullptr;
  for (int64_t i = 0; i < m; ++i) {
    float *row = s + i * a.keys;
    // Before the mask, as onnxruntime's GroupQueryAttention does, so
    // that -inf entries of the mask stay -inf.
    if (a.softcap > 0.0f)
      for (int64_t j = 0; j < a.keys; ++j)
        row[j] = a.softcap * std::tanh(row[j] / a.softcap);
    if (a.mask) {
      const float *mask = a.mask + b * a.maskStrides[0] + h * a.maskStrides[1] +
                          (first + i) * a.maskStrides[2];
      int64_t stride = a.maskStrides[3];
      for (int64_t j = 0; j < a.keys; ++j)
        row[j] += mask[j * stride];
    }
    inverses[i] = softmaxExponentials(row, row, a.keys, sink);
  }
}

} // namespace

void computeAttention(ThreadPool &pool, const AttentionArgs &a) {
  if (a.batch == 0 || a.heads == 0 || a.queries == 0 || a.valueDim == 0)
    return;
  int64_t blocks = (a.queries + kQueryBlock - 1) / kQueryBlock;
  int64_t tasks = a.batch * a.heads * blocks;
  int64_t group = a.heads / a.kvHeads;
  int64_t rows = std::min(a.queries, kQueryBlock);
  int64_t work = std::max<int64_t>(1, rows * std::max<int64_t>(a.keys, 1) *
                                          (a.headDim + a.valueDim));
  pool.parallelFor(
      tasks, std::max<int64_t>(1, kTaskWork / work),
      [&](int64_t begin, int64_t end) {
        std::vector<float> scores(
            static_cast<size_t>(rows * std::max<int64_t>(a.keys, 1)));
        float inverses[kQueryBlock];
        for (int64_t t = begin; t < end; ++t) {
          int64_t block = t % blocks;
          int64_t h = (t / blocks) % a.heads;
          int64_t b = t / blocks / a.heads;
          int64_t g = h / group;
          int64_t first = block * kQueryBlock;
          int64_t m = std::min(kQueryBlock, a.queries - first);
          const float *q = a.query + b * a.queryStrides[0] +
                           h * a.queryStrides[1] + first * a.queryStrides[2];
          const float *k = a.key + b * a.keyStrides[0] + g * a.keyStrides[1];
          const float *v =
              a.value + b * a.valueStrides[0] + g * a.valueStrides[1];
          float *out = a.output + b * a.outputStrides[0] +
                       h * a.outputStrides[1] + first * a.outputStrides[2];
          if (a.keys == 0) {
            // No keys: the decomposed graph's product of empty probabilities
            // with empty values, zeros.
            for (int64_t i = 0; i < m; ++i)
              std::fill_n(out + i * a.outputStrides[2], a.valueDim, 0.0f);
            continue;
          }
          float *s = scores.data();
          sgemm(false, true, m, a.keys, a.headDim, a.scale, q,
                a.queryStrides[2], k, a.keyStrides[2], 0.0f, s, a.keys);
          exponentiateScores(a, s, inverses, m, b, h, first);
          sgemm(false, false, m, a.valueDim, a.keys, 1.0f, s, a.keys, v,
                a.valueStrides[2], 0.0f, out, a.outputStrides[2]);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t d = 0; d < a.valueDim; ++d)
              out[i * a.outputStrides[2] + d] *= inverses[i];
        }
      });
}

namespace {

absl::Status validateAttention(const StepCheck &check) {
  for (int i = 0; i < 4; ++i) {
    MOERT_RETURN_IF_ERROR(check.inType(i, kFloatTypes));
    MOERT_RETURN_IF_ERROR(check.inRank(i, 4));
  }
  MOERT_RETURN_IF_ERROR(check.inType(4, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inRank(4, 1));
  float softcap = check.attrs<fb::AttentionAttrs>()->softcap();
  // NaN fails the comparison too; an infinite cap would compute inf * 0.
  if (!(softcap >= 0.0f) || std::isinf(softcap))
    return check.error("softcap ", softcap,
                       " is not a finite non-negative number (0: none)");
  MOERT_RETURN_IF_ERROR(check.outType(0, kFloatTypes));
  return check.outRank(0, 4);
}

/// Contiguous strides of the batch, head and row dimensions of `shape`.
void rowStrides(const Shape &shape, int64_t strides[3]) {
  strides[2] = shape[3];
  strides[1] = shape[2] * strides[2];
  strides[0] = shape[1] * strides[1];
}

/// The strides of a key or value, which may be a KV cache written in place
/// (kv_cache_in_place.h): its positions (dimension 2) then lie in rows of
/// cachePitch.
void operandStrides(const Tensor &t, int64_t strides[3]) {
  Shape layout = t.shape;
  if (t.isCacheView())
    layout[2] = t.cachePitch;
  rowStrides(layout, strides);
}

absl::Status attentionKernel(KernelContext &ctx) {
  const Tensor &q = ctx.in(0), &k = ctx.in(1), &v = ctx.in(2);
  const Shape &qs = q.shape, &ks = k.shape, &vs = v.shape;
  if (ks[3] != qs[3])
    return ctx.error("key ", ks.str(), " and query ", qs.str(),
                     " differ in head size");
  for (int d = 0; d < 3; ++d)
    if (vs[d] != ks[d])
      return ctx.error("value ", vs.str(), " and key ", ks.str(),
                       " differ in dimension ", d);
  if (ks[0] != 1 && ks[0] != qs[0])
    return ctx.error("key batch ", ks[0], " is neither 1 nor the query's ",
                     qs[0]);
  if (ks[1] == 0 || qs[1] % ks[1] != 0)
    return ctx.error("key/value heads ", ks[1],
                     " do not divide the query heads ", qs[1]);
  AttentionArgs args;
  args.batch = qs[0];
  args.heads = qs[1];
  args.queries = qs[2];
  args.headDim = qs[3];
  args.kvHeads = ks[1];
  args.keys = ks[2];
  args.valueDim = vs[3];
  args.scale = ctx.attrs<fb::AttentionAttrs>()->scale();
  args.softcap = ctx.attrs<fb::AttentionAttrs>()->softcap();
  args.query = q.as<const float>();
  rowStrides(qs, args.queryStrides);
  for (const Tensor *t : {&k, &v})
    if (t->isCacheView() && t->cacheAxis != 2)
      return ctx.error("a KV cache view along axis ", t->cacheAxis,
                       " is not keys or values by position");
  args.key = k.as<const float>();
  operandStrides(k, args.keyStrides);
  args.value = v.as<const float>();
  operandStrides(v, args.valueStrides);
  if (ks[0] == 1) {
    args.keyStrides[0] = 0;
    args.valueStrides[0] = 0;
  }
  if (ctx.has(3)) {
    const Tensor &mask = ctx.in(3);
    int64_t scores[4] = {qs[0], qs[1], qs[2], ks[2]};
    int64_t stride = 1;
    for (int d = 3; d >= 0; --d) {
      int64_t size = mask.shape[d];
      if (size != 1 && size != scores[d])
        return ctx.error("mask ", mask.shape.str(),
                         " does not broadcast to the scores [", scores[0], ", ",
                         scores[1], ", ", scores[2], ", ", scores[3], "]");
      args.maskStrides[d] = size == 1 ? 0 : stride;
      stride *= size;
    }
    args.mask = mask.as<const float>();
  }
  if (ctx.has(4)) {
    const Tensor &sinks = ctx.in(4);
    if (sinks.shape[0] != qs[1])
      return ctx.error("sinks ", sinks.shape.str(),
                       " do not have one logit per query head (", qs[1], ")");
    args.sinks = sinks.as<const float>();
  }
  Shape outShape = qs;
  outShape[3] = vs[3];
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, outShape));
  args.output = out->as<float>();
  rowStrides(outShape, args.outputStrides);
  computeAttention(ctx.pool(), args);
  return absl::OkStatus();
}

} // namespace

void registerAttentionOps(OpRegistry &r) {
  OpDef attention = makeOp("Attention", 3, 5, validateAttention,
                           attentionKernel, fb::Attrs::AttentionAttrs);
  // Inputs 3 (mask) and 4 (sinks, format 1.9).
  attention.optionalInputs = 0b11000;
  r.add(fb::OpKind::Attention, attention);
}

} // namespace moert::detail
