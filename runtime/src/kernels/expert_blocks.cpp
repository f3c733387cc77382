//===- expert_blocks.cpp - The expert networks, block by block ------------===//
//
// Expert networks run over only the rows each expert received, with the
// weights in their exported layout and biases fused. The work of all experts
// is cut into blocks that any pool thread takes (runRound), so that experts
// run concurrently and each weight block is read once, by one thread; the
// kind of block is chosen per expert at run time from the rows it received:
//
//  * Few rows (decoding, up to streamedRows, a cost model in
//    kernels/expert_gemm.cpp): the step is bound by reading the active
//    experts' weights once. Blocks are weight-streaming products
//    (kernels/stream.h): column blocks for [out, K] weights; for [K, out]
//    weights, ranges of weight rows whose partial products are summed
//    afterwards (each range is one sequential stream).
//  * More rows (prefill): column blocks as single-threaded GEMMs (oneDNN:
//    sgemm, kernels/matmul.cpp, or for bf16 and int8 weights on CPUs with
//    AVX512-BF16 a cached bf16 matmul primitive on AMX,
//    kernels/expert_gemm.h), with the activation applied per block.
//
// The matrices (w1, w3, w2) may be bf16 or f16 (`moec compile
// --weight-dtype`; biases stay f32): the streaming products widen them to
// f32 in registers as they read them (half the bytes), and a GEMM block
// either multiplies them in bf16 (bf16 and int8 on AVX512-BF16 CPUs, the
// activations rounded to bf16) or widens its K x columns weights into the
// thread's scratch first (then does rows multiply-adds per widened
// element). Accumulation is f32 throughout.
//
// The measurements behind these choices are in bench/README.md ("Kernel
// measurements behind the CPU kernels' design").
//
//===----------------------------------------------------------------------===//

#include "kernels/expert_gemm.h"
#include "kernels/moe_internal.h"
#include "kernels/tiles.h"

#include <algorithm>
#include <atomic>

namespace moert::detail {
namespace {

/// Weight rows per block of a split: 128 rows of 2816 outputs are 1.4 MiB
/// (measured slightly faster than 64 at 1 and 16 tokens).
constexpr int64_t kPartRows = 128;

/// c[n, m] (leading dimension ldc) = x[n, K] @ W[:, c0 : c0 + m] (*
/// scale[c0 : c0 + m] for int8 W) + bias[c0 : c0 + m], for a matrix W of
/// storage `type` with `out` outputs stored as [K, out] (`inOut`) or [out,
/// K]. Up to streamedRows rows of [out, K] weights stream them ([K, out]
/// weights with few rows are split along K by runRound instead), and up to
/// tiledRows rows multiply them in register tiles (kernels/tiles.h);
/// otherwise
/// bf16 and int8 weights run a bf16 matmul block where the CPU has
/// AVX512-BF16 (kernels/expert_gemm.h), and the rest an sgemm whose
/// transpose flag is the layout and whose C operand is the bias: f32
/// weights are never copied, 16-bit and int8 ones are widened block by
/// block into the thread's scratch (K x m floats) for the GEMM, which then
/// does n multiply-adds per widened element; int8 products are scaled
/// afterwards, as the streaming kernels scale theirs.
void project(const float *x, int64_t n, int64_t K, const void *w,
             StreamWeights type, int64_t out, bool inOut, int64_t c0, int64_t m,
             const float *scale, const float *bias, float *c, int64_t ldc) {
  if (!inOut && n <= streamedRows(type, inOut))
    return streamProject(x, n, K, w, type, c0, m, scale, bias, c, ldc);
  if (!inOut && n <= tiledRows(type))
    return tileProject(x, n, K, w, type, c0, m, scale, bias, c, ldc);
  if ((type == StreamWeights::F32 || blockGemmFor(type) == BlockGemm::Bf16) &&
      matmulBlock(x, n, K, w, type, out, inOut, c0, m, scale, bias, c, ldc))
    return;
  bool biasFirst = bias && !scale;
  if (biasFirst)
    for (int64_t r = 0; r < n; ++r)
      std::copy(bias + c0, bias + c0 + m, c + r * ldc);
  if (type == StreamWeights::F32) {
    const float *wf = static_cast<const float *>(w);
    sgemm(false, !inOut, n, m, K, 1.0f, x, K, inOut ? wf + c0 : wf + c0 * K,
          inOut ? out : K, biasFirst ? 1.0f : 0.0f, c, ldc);
    return;
  }
  const auto *bytes = static_cast<const uint8_t *>(w);
  const int64_t size = type == StreamWeights::I8 ? 1 : 2;
  float *block = scratch<float>(Scratch::Weights, K * m);
  if (inOut) {
    for (int64_t k = 0; k < K; ++k)
      widenWeights(bytes + (k * out + c0) * size, type, m, block + k * m);
  } else {
    widenWeights(bytes + c0 * K * size, type, m * K, block);
  }
  sgemm(false, !inOut, n, m, K, 1.0f, x, K, block, inOut ? m : K,
        biasFirst ? 1.0f : 0.0f, c, ldc);
  if (scale)
    for (int64_t r = 0; r < n; ++r) {
      float *cr = c + r * ldc;
      for (int64_t j = 0; j < m; ++j)
        cr[j] =
            bias ? cr[j] * scale[c0 + j] + bias[c0 + j] : cr[j] * scale[c0 + j];
    }
}

/// project() of expert e's matrix in `slot` (`out` outputs of K inputs,
/// stored as f.weightType, or block-quantized) for x [n, K] and the output
/// columns [c0, c0 + m), with the bias in `bias`; `xq` is x quantized for
/// the slot's matrix, or null (block-quantized weights with int8
/// activations).
void projectSlot(const Ffn &f, Slot slot, int64_t e, const float *x, int64_t n,
                 int64_t K, int64_t out, int64_t c0, int64_t m,
                 const float *bias, float *c, int64_t ldc,
                 const Int8Activations *xq = nullptr) {
  if (f.blockQuant)
    return quantProject(x, n, f.matrix(slot, e), c0, m, bias, c, ldc,
                        QuantKernel::Auto, xq);
  project(x, n, K, f.weight(slot, e), f.weightType, out, f.inOut, c0, m,
          f.scale(slot, e), bias, c, ldc);
}

/// a[r, i] = act(g[r, i * step]) for rows [r0, r1) and i in [0, m)
/// (non-gated; `a` may be `g`).
template <typename Fn>
void activateRows(int64_t r0, int64_t r1, int64_t m, const float *g,
                  int64_t ldg, float *a, int64_t lda, Fn fn) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *gr = g + r * ldg;
    float *ar = a + r * lda;
    for (int64_t i = 0; i < m; ++i)
      ar[i] = fn(gr[i]);
  }
}

/// a[r, i] = act(g[r, i * step], u[r, i * step]) (gated).
template <typename Fn>
void gateRows(int64_t r0, int64_t r1, int64_t m, const float *g, const float *u,
              int64_t ld, int64_t step, float *a, int64_t lda, Fn fn) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *gr = g + r * ld, *ur = u + r * ld;
    float *ar = a + r * lda;
    for (int64_t i = 0; i < m; ++i)
      ar[i] = fn(gr[i * step], ur[i * step]);
  }
}

/// The activation of rows [r0, r1): from the first projection's output
/// (g, and u for gated activations, each with leading dimension ld and
/// element step `step`) into a[r, 0 : m]. Compiled also for AVX-512 and
/// AVX2 (chosen at load): the loops vectorise 16 or 8 lanes wide.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void activate(const Ffn &f, int64_t r0, int64_t r1, int64_t m, const float *g,
              const float *u, int64_t ld, int64_t step, float *a, int64_t lda) {
  auto relu = [](float x) { return x < 0 ? 0.0f : x; };
  auto silu = [](float x) { return x * sigmoid(x); };
  auto identity = [](float x) { return x; };
  auto glu = [&](auto act) {
    gateRows(r0, r1, m, g, u, ld, step, a, lda,
             [act](float gate, float up) { return act(gate) * up; });
  };
  switch (f.activation) {
  case fb::Activation::Relu:
    return activateRows(r0, r1, m, g, ld, a, lda, relu);
  case fb::Activation::ReluSquared:
    return activateRows(r0, r1, m, g, ld, a, lda,
                        [&](float x) { return relu(x) * relu(x); });
  case fb::Activation::Gelu:
    return activateRows(r0, r1, m, g, ld, a, lda, gelu);
  case fb::Activation::GeluTanh:
    return activateRows(r0, r1, m, g, ld, a, lda, geluTanh);
  case fb::Activation::Silu:
    return activateRows(r0, r1, m, g, ld, a, lda, silu);
  case fb::Activation::Identity:
    return activateRows(r0, r1, m, g, ld, a, lda, identity);
  case fb::Activation::SiluGlu:
    return glu(silu);
  case fb::Activation::GeluGlu:
    return glu(gelu);
  case fb::Activation::GeluTanhGlu:
    return glu(geluTanh);
  case fb::Activation::ClampedSwiglu: {
    float alpha = f.alpha, beta = f.beta;
    // limit 0: no clamping.
    float limit =
        f.limit > 0 ? f.limit : std::numeric_limits<float>::infinity();
    return gateRows(r0, r1, m, g, u, ld, step, a, lda,
                    [=](float gate, float up) {
                      gate = std::min(gate, limit);
                      up = std::max(std::min(up, limit), -limit);
                      return gate * sigmoid(alpha * gate) * (up + beta);
                    });
  }
  }
}

/// Expert `e`'s first projection and activation for rows x[n, H] and the
/// intermediate columns [f0, f0 + m): writes a[n, m] (leading dimension
/// lda). `xq` is x quantized for w1 and w3, or null.
void firstLayer(const Ffn &f, int64_t e, const float *x, int64_t n, int64_t f0,
                int64_t m, float *a, int64_t lda, const Int8Activations *xq) {
  const int64_t H = f.sizes.hidden, F = f.sizes.inter, W1 = f.sizes.w1Out;
  const float *b1 = f.at(kB1, e);
  const float *g = a, *u = nullptr;
  int64_t ld = lda, step = 1;
  if (!f.gated) {
    projectSlot(f, kW1, e, x, n, H, W1, f0, m, b1, a, lda, xq);
  } else {
    float *buffer = scratch<float>(Scratch::Task, 2 * n * m);
    if (f.fused && f.interleaved) {
      // Gate and up alternate: one GEMM over outputs [2 f0, 2 (f0 + m)).
      projectSlot(f, kW1, e, x, n, H, W1, 2 * f0, 2 * m, b1, buffer, 2 * m, xq);
      g = buffer;
      u = buffer + 1;
      ld = 2 * m;
      step = 2;
    } else {
      // Gate and up from w1's two halves, or from w1 and w3.
      projectSlot(f, kW1, e, x, n, H, W1, f0, m, b1, buffer, m, xq);
      if (f.fused)
        projectSlot(f, kW1, e, x, n, H, W1, F + f0, m, b1, buffer + n * m, m,
                    xq);
      else
        projectSlot(f, kW3, e, x, n, H, F, f0, m, f.at(kB3, e), buffer + n * m,
                    m, xq);
      g = buffer;
      u = buffer + n * m;
      ld = m;
    }
  }
  activate(f, 0, n, m, g, u, ld, step, a, lda);
}

/// Columns per block of a narrow expert ([out, K] weights): 128 outputs of
/// 1024 inputs are 512 KiB of contiguous weights; the k active experts of a
/// decoding step still make several blocks per thread.
constexpr int64_t kBlockColumns = 128;
/// Columns per block of a wide expert: a single-threaded GEMM whose B
/// operand (the block of weights) OpenBLAS packs once for all the rows.
constexpr int64_t kWideBlockColumns = 256;
/// Rows per segment of a wide expert, and rows per round: keep the
/// activations of a round (rows x F) and each GEMM's A operand bounded while
/// the GEMMs stay large enough for full throughput.
constexpr int64_t kWideChunkRows = 256;
constexpr int64_t kRoundRows = 1024;

/// Calls fn(i) for every i in [0, n) on the pool's threads, each taking the
/// next item when done with the last: items differ in cost (rows per expert).
template <typename Fn> void forEachItem(ThreadPool &pool, int64_t n, Fn fn) {
  std::atomic<int64_t> next{0};
  pool.parallelFor(std::min<int64_t>(pool.size(), n), 1, [&](int64_t, int64_t) {
    for (int64_t i; (i = next.fetch_add(1)) < n;)
      fn(i);
  });
}

/// Rows [row, row + rows) of expert `expert`, with their activations at
/// `aOffset` of a round's buffer.
struct Segment {
  int64_t expert, row, rows, aOffset;
};

/// c[r, :cols] = bias[:cols] + sum over p < count of parts[p][r, :cols]
/// for r < n, where parts[p] = parts + p * n * cols; with `scale` (int8
/// weights) the sum is scaled per column before the bias is added.
void sumParts(const float *parts, int64_t count, int64_t n, int64_t cols,
              const float *scale, const float *bias, float *c, int64_t ldc) {
  for (int64_t r = 0; r < n; ++r) {
    float *cr = c + r * ldc;
    if (bias && !scale)
      std::copy(bias, bias + cols, cr);
    else
      std::fill(cr, cr + cols, 0.0f);
    for (int64_t p = 0; p < count; ++p) {
      const float *pr = parts + (p * n + r) * cols;
      for (int64_t j = 0; j < cols; ++j)
        cr[j] += pr[j];
    }
    if (scale)
      for (int64_t j = 0; j < cols; ++j)
        cr[j] = bias ? cr[j] * scale[j] + bias[j] : cr[j] * scale[j];
  }
}

/// Runs the segments of one round: a phase of blocks of the first
/// projection and activation of every segment, then (it needs all F
/// activations of a row) a phase of blocks of the second projection.
/// Every block is one item for any thread: the experts run concurrently,
/// and each weight block is read once by one thread. A block is a column
/// block (a weight-streaming product or a single-threaded GEMM, with the
/// activation applied while the block's outputs are in cache), or for
/// split segments (streamedRows) a range of weight rows whose partial products
/// a third and a fourth phase sum, activate and write out.
void runRound(ThreadPool &pool, const Ffn &f, const float *x,
              const std::vector<Segment> &segments, int64_t aSize, float *y) {
  const int64_t H = f.sizes.hidden, F = f.sizes.inter, W1 = f.sizes.w1Out;
  const int64_t up = f.present[kW3] ? F : 0; // w3's outputs.
  struct Block {
    int64_t segment;
    Slot slot;         // The weights of a split block, else kNumSlots.
    int64_t col, cols; // Columns, or weight rows of a split block.
  };
  std::vector<Block> first, second;
  std::vector<int64_t> split, partOffset;
  int64_t partSize = 0;
  for (int64_t s = 0; s < static_cast<int64_t>(segments.size()); ++s) {
    int64_t n = segments[s].rows;
    partOffset.push_back(partSize);
    if (f.inOut && n <= streamedRows(f.weightType, true)) {
      split.push_back(s);
      for (int64_t k = 0; k < H; k += kPartRows) {
        first.push_back({s, kW1, k, std::min(kPartRows, H - k)});
        if (up)
          first.push_back({s, kW3, k, std::min(kPartRows, H - k)});
      }
      for (int64_t k = 0; k < F; k += kPartRows)
        second.push_back({s, kW2, k, std::min(kPartRows, F - k)});
      int64_t parts1 = (H + kPartRows - 1) / kPartRows;
      int64_t parts2 = (F + kPartRows - 1) / kPartRows;
      partSize += std::max(parts1 * n * (W1 + up), parts2 * n * H);
      continue;
    }
    bool narrow =
        !f.inOut && n <= (f.blockQuant ? kQuantStreamRows
                                       : streamedRows(f.weightType, false));
    int64_t width = narrow ? kBlockColumns : kWideBlockColumns;
    for (int64_t c = 0; c < F; c += width)
      first.push_back({s, kNumSlots, c, std::min(width, F - c)});
    for (int64_t c = 0; c < H; c += width)
      second.push_back({s, kNumSlots, c, std::min(width, H - c)});
  }
  float *a = scratch<float>(Scratch::Step, aSize);
  float *partials = scratch<float>(Scratch::Partial, partSize);
  // Block-quantized experts with int8 activations: each segment's rows
  // quantized once per layer for all of its column blocks (w1 and w3 share
  // their columns, hence their quantization).
  const bool int8 = f.blockQuant && f.quant[kW1].int8Activations;
  std::vector<Int8Activations> xq(int8 ? segments.size() : 0),
      aq(int8 ? segments.size() : 0);
  int64_t roundRows = 0;
  for (const Segment &s : segments)
    roundRows += s.rows;
  auto quantizeSegments = [&](std::vector<Int8Activations> &q, Slot slot,
                              const float *in, int64_t K, bool rounds) {
    auto one = [&](int64_t i) {
      const Segment &s = segments[i];
      quantizeActivations(rounds ? in + s.aOffset : in + s.row * K, s.rows,
                          f.matrix(slot, s.expert), q[i]);
    };
    // A decoding step's few rows: on this thread, sparing the pool a phase.
    if (roundRows <= 2 * kQuantStreamRows) {
      for (int64_t i = 0; i < static_cast<int64_t>(q.size()); ++i)
        one(i);
      return;
    }
    forEachItem(pool, static_cast<int64_t>(q.size()), one);
  };
  quantizeSegments(xq, kW1, x, H, false);
  // The partial product of split block b of weights [K, out] into its slot
  // of the segment's partials (w3's after all of w1's).
  auto partial = [&](const Block &b, const float *input, int64_t K, int64_t out,
                     int64_t base) {
    const Segment &s = segments[b.segment];
    float *c = partials + partOffset[b.segment] + base +
               b.col / kPartRows * s.rows * out;
    streamRowRange(input, s.rows, K, f.weight(b.slot, s.expert), f.weightType,
                   out, b.col, b.col + b.cols, c);
  };

  forEachItem(pool, static_cast<int64_t>(first.size()), [&](int64_t i) {
    const Block &b = first[i];
    const Segment &s = segments[b.segment];
    const float *xs = x + s.row * H;
    if (b.slot == kW1)
      partial(b, xs, H, W1, 0);
    else if (b.slot == kW3)
      partial(b, xs, H, F, (H + kPartRows - 1) / kPartRows * s.rows * W1);
    else
      firstLayer(f, s.expert, xs, s.rows, b.col, b.cols, a + s.aOffset + b.col,
                 F, int8 ? &xq[b.segment] : nullptr);
  });
  forEachItem(pool, static_cast<int64_t>(split.size()), [&](int64_t i) {
    const Segment &s = segments[split[i]];
    int64_t n = s.rows, parts = (H + kPartRows - 1) / kPartRows;
    const float *p = partials + partOffset[split[i]];
    float *sum = scratch<float>(Scratch::Task, n * (W1 + up));
    sumParts(p, parts, n, W1, f.scale(kW1, s.expert), f.at(kB1, s.expert), sum,
             W1);
    if (up)
      sumParts(p + parts * n * W1, parts, n, F, f.scale(kW3, s.expert),
               f.at(kB3, s.expert), sum + n * W1, F);
    // Gate and up as firstLayer lays them out (ld W1 = F when there is w3).
    const float *u = !f.gated        ? nullptr
                     : up            ? sum + n * W1
                     : f.interleaved ? sum + 1
                                     : sum + F;
    activate(f, 0, n, F, sum, u, W1, f.interleaved ? 2 : 1, a + s.aOffset, F);
  });
  quantizeSegments(aq, kW2, a, F, true);
  forEachItem(pool, static_cast<int64_t>(second.size()), [&](int64_t i) {
    const Block &b = second[i];
    const Segment &s = segments[b.segment];
    if (b.slot == kW2)
      partial(b, a + s.aOffset, F, H, 0);
    else
      projectSlot(f, kW2, s.expert, a + s.aOffset, s.rows, F, H, b.col, b.cols,
                  f.at(kB2, s.expert), y + s.row * H + b.col, H,
                  int8 ? &aq[b.segment] : nullptr);
  });
  forEachItem(pool, static_cast<int64_t>(split.size()), [&](int64_t i) {
    const Segment &s = segments[split[i]];
    sumParts(partials + partOffset[split[i]], (F + kPartRows - 1) / kPartRows,
             s.rows, H, f.scale(kW2, s.expert), f.at(kB2, s.expert),
             y + s.row * H, H);
  });
}

} // namespace

/// Runs expert e's network on its rows x[offsets[e], offsets[e+1]) into the
/// same rows of y, for every expert (or those of `only`, ascending): experts
/// are cut into segments of at most kWideChunkRows rows, and segments
/// grouped into rounds of about kRoundRows rows.
void runExperts(ThreadPool &pool, const Ffn &f, const float *x,
                const int64_t *offsets, float *y,
                const std::vector<uint32_t> *only) {
  const int64_t E = f.sizes.experts, F = f.sizes.inter;
  std::vector<Segment> round;
  int64_t rows = 0;
  std::vector<int64_t> experts;
  if (only)
    experts.assign(only->begin(), only->end());
  else
    for (int64_t e = 0; e < E; ++e)
      experts.push_back(e);
  for (int64_t e : experts)
    for (int64_t r = offsets[e]; r < offsets[e + 1]; r += kWideChunkRows) {
      int64_t n = std::min(kWideChunkRows, offsets[e + 1] - r);
      if (rows && rows + n > kRoundRows) {
        runRound(pool, f, x, round, rows * F, y);
        round.clear();
        rows = 0;
      }
      round.push_back({e, r, n, rows * F});
      rows += n;
    }
  if (rows)
    runRound(pool, f, x, round, rows * F, y);
}
} // namespace moert::detail
