//===- moe.cpp - Router, Dispatch, Experts, SharedExpert, Combine ---------===//
//
// The sparse Mixture-of-Experts steps, with the semantics of the moe dialect's
// ops of the same names (dialects/moe/MoeSparseOps.td, docs/plan-format.md):
//
//   Router -> Dispatch -> Experts -> Combine      (+ SharedExpert)
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

#include "kernels/moe.h"
#include "backends/cuda/routing_logic.h"
#include "exec/expert_weights.h"
#include "kernels/expert_gemm.h"
#include "kernels/quant_gemm.h"
#include "kernels/stream.h"

#include <algorithm>
#include <atomic>
#include <vector>

namespace moert::detail {
namespace {

/// Reusable per-thread scratch: grows to the largest request of its slot and
/// is kept across steps and runs, so that no step allocates once warm. A
/// pointer stays valid until the same thread asks the same slot again.
enum class Scratch { Step, Task, Aux, Partial, Weights, Count };
template <typename T> T *scratch(Scratch slot, size_t count) {
  thread_local std::vector<T> buffers[static_cast<int>(Scratch::Count)];
  std::vector<T> &buffer = buffers[static_cast<int>(slot)];
  if (buffer.size() < count)
    buffer.resize(count);
  return buffer.data();
}

/// The declared static size of dimension `d` of `info`, or -1.
int64_t staticDim(const TensorInfo &info, int d) {
  return d < info.rank && info.dims[d].kind == fb::DimKind::Static
             ? info.dims[d].bound
             : -1;
}

/// The declared shape of `info` when every dimension is static.
bool staticShape(const TensorInfo &info, Shape &shape) {
  shape = Shape();
  for (int d = 0; d < info.rank; ++d) {
    if (info.dims[d].kind != fb::DimKind::Static)
      return false;
    shape.push(info.dims[d].bound);
  }
  return true;
}

/// Adds the expert loads of one step execution to the session's counters
/// (when it collects them).
void countLoads(const KernelContext &ctx, int64_t numExperts,
                const int64_t *load, int64_t dropped) {
  MoeCounters *counters = ctx.moeCounters();
  if (!counters)
    return;
  if (counters->expertLoad.size() != static_cast<size_t>(numExperts))
    counters->expertLoad.assign(numExperts, 0);
  for (int64_t e = 0; e < numExperts; ++e)
    counters->expertLoad[e] += static_cast<uint64_t>(load[e]);
  counters->dropped += static_cast<uint64_t>(dropped);
}

//===----------------------------------------------------------------------===//
// Router
//===----------------------------------------------------------------------===//

/// Ranking of selection scores: larger first, NaN above every number (as
/// TopK ranks it). Equal scores keep the order in which they were offered.
inline bool ranksAbove(float a, float b) { return a > b || (a != a && b == b); }

/// Keeps the `k` best of the candidates offered in increasing index order:
/// `ids`/`values` hold `count` entries sorted best first. A candidate equal to
/// a kept one ranks below it, so ties go to the lower index.
inline void offer(float value, int64_t id, int64_t k, int64_t &count,
                  float *values, int64_t *ids) {
  if (count == k && !ranksAbove(value, values[k - 1]))
    return;
  int64_t pos = count < k ? count++ : k - 1;
  for (; pos > 0 && ranksAbove(value, values[pos - 1]); --pos) {
    values[pos] = values[pos - 1];
    ids[pos] = ids[pos - 1];
  }
  values[pos] = value;
  ids[pos] = id;
}

/// The router's attributes, read once per step.
struct RouterParams {
  int64_t experts;
  int64_t topK;
  bool sigmoid;
  bool afterTopK;
  bool normalize;
  float scale;
  int64_t groups;
  int64_t keptGroups;
};

/// Per-task scratch of the router.
struct RouterScratch {
  float *scores, *biased, *groupScores, *chosen; // [E], [E], [groups], [k]
  int64_t *keptGroups;                           // [groups]
  uint8_t *eligible;                             // [E]
};

/// Routes one token: logits `l` [E] -> weights `w` [k] and indices `idx`
/// [k].
void routeToken(const RouterParams &p, const float *l, const float *bias,
                const RouterScratch &work, float *w, int64_t *idx) {
  const int64_t E = p.experts, k = p.topK;
  // 1. Scores (with after_topk the logits themselves; the softmax over the
  //    chosen k comes in step 5).
  float *s = work.scores;
  if (p.afterTopK) {
    std::copy(l, l + E, s);
  } else if (p.sigmoid) {
    for (int64_t e = 0; e < E; ++e)
      s[e] = sigmoid(l[e]);
  } else {
    softmaxRow(l, s, E);
  }
  // 2. Selection scores: the bias steers the choice, never the weights.
  const float *c = s;
  if (bias) {
    float *biased = work.biased;
    for (int64_t e = 0; e < E; ++e)
      biased[e] = s[e] + bias[e];
    c = biased;
  }
  // 3. Grouped selection: a group scores by the sum of its two best experts;
  //    only the experts of the best `keptGroups` groups stay eligible.
  bool grouped = p.groups > 1;
  if (grouped) {
    int64_t size = E / p.groups;
    uint8_t *eligible = work.eligible;
    int64_t kept = 0;
    for (int64_t g = 0; g < p.groups; ++g) {
      float best[2];
      int64_t bestIds[2], count = 0;
      for (int64_t e = g * size; e < (g + 1) * size; ++e)
        offer(c[e], e, 2, count, best, bestIds);
      offer(best[0] + best[1], g, p.keptGroups, kept, work.groupScores,
            work.keptGroups);
    }
    std::fill(eligible, eligible + E, 0);
    for (int64_t i = 0; i < kept; ++i) {
      int64_t g = work.keptGroups[i];
      std::fill(eligible + g * size, eligible + (g + 1) * size, 1);
    }
  }
  // 4. The k best eligible experts, best first, ties to the lower index.
  int64_t count = 0;
  for (int64_t e = 0; e < E; ++e)
    if (!grouped || work.eligible[e])
      offer(c[e], e, k, count, work.chosen, idx);
  // 5-7. Weights from the unbiased scores, softmax over the k, renormalised,
  //      scaled.
  for (int64_t j = 0; j < k; ++j)
    w[j] = s[idx[j]];
  if (p.afterTopK) {
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < k; ++j)
      max = std::max(max, w[j]);
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      w[j] = fastExp(w[j] - max);
      sum += w[j];
    }
    for (int64_t j = 0; j < k; ++j)
      w[j] = static_cast<float>(w[j] / sum);
  }
  if (p.normalize) {
    double sum = 0;
    for (int64_t j = 0; j < k; ++j)
      sum += w[j];
    for (int64_t j = 0; j < k; ++j)
      w[j] = static_cast<float>(w[j] / (sum + 1e-20));
  }
  if (p.scale != 1.0f)
    for (int64_t j = 0; j < k; ++j)
      w[j] *= p.scale;
}

absl::Status routerKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::RouterAttrs>();
  const Tensor &logits = ctx.in(0);
  int rank = logits.shape.rank;
  RouterParams p;
  MOERT_ASSIGN_OR_RETURN(Shape shape, readRouter(ctx, p));
  const float *bias = ctx.has(1) ? ctx.in(1).as<const float>() : nullptr;
  MOERT_ASSIGN_OR_RETURN(Tensor * weights, ctx.allocate(0, shape));
  MOERT_ASSIGN_OR_RETURN(Tensor * indices, ctx.allocate(1, shape));
  const int64_t E = p.experts, k = p.topK;
  int64_t tokens = logits.shape.span(0, rank - 1);
  const float *l = logits.as<const float>();
  float *w = weights->as<float>();
  int64_t *idx = indices->as<int64_t>();

  // One fused pass over the tokens.
  ctx.pool().parallelFor(
      tokens, std::max<int64_t>(1, kElementwiseGrain / (8 * E)),
      [&](int64_t begin, int64_t end) {
        RouterScratch work;
        work.scores = scratch<float>(Scratch::Task, 2 * E + p.groups + k);
        work.biased = work.scores + E;
        work.groupScores = work.biased + E;
        work.chosen = work.groupScores + p.groups;
        work.keptGroups = scratch<int64_t>(Scratch::Task, p.groups);
        work.eligible = scratch<uint8_t>(Scratch::Task, E);
        for (int64_t t = begin; t < end; ++t)
          routeToken(p, l + t * E, bias, work, w + t * k, idx + t * k);
      });

  // Capacity, per sequence: first choices in token order, then second
  // choices, and so on; an assignment to a full expert becomes -1. The loads
  // are counted here too, for the stats.
  int64_t capacity = attrs->capacity();
  float keptEpsilon = attrs->normalize_kept_epsilon();
  MoeCounters *counters = ctx.moeCounters();
  if (capacity == 0 && !counters)
    return absl::OkStatus();
  int64_t sequences = rank == 3 ? logits.shape[0] : 1;
  int64_t length = sequences ? tokens / sequences : 0;
  int64_t *load = scratch<int64_t>(Scratch::Step, 2 * E);
  int64_t *total = load + E;
  std::fill(total, total + E, 0);
  int64_t dropped = 0;
  for (int64_t b = 0; b < sequences; ++b) {
    std::fill(load, load + E, 0);
    int64_t *seq = idx + b * length * k;
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t = 0; t < length; ++t) {
        int64_t &e = seq[t * k + j];
        if (capacity && load[e] >= capacity) {
          e = -1;
          ++dropped;
        } else {
          ++load[e];
        }
      }
    for (int64_t e = 0; e < E; ++e)
      total[e] += load[e];
  }
  // GShard renormalises over the choices capacity kept (the shared helper
  // of the CUDA kernels, so both backends divide alike).
  if (keptEpsilon > 0)
    for (int64_t t = 0; t < tokens; ++t)
      cuda::normalizeKept(w + t * k, idx + t * k, k, keptEpsilon);
  countLoads(ctx, E, total, dropped);
  return absl::OkStatus();
}

absl::Status validateRouter(const StepCheck &check) {
  const auto *attrs = check.attrs<fb::RouterAttrs>();
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.outType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.outType(1, bit(DType::I64)));
  int rank = check.in(0).rank;
  if (rank != 2 && rank != 3)
    return check.error("logits have rank ", rank,
                       "; expected 2 ([T, E]) or 3 ([B, S, E])");
  MOERT_RETURN_IF_ERROR(check.outRank(0, rank));
  MOERT_RETURN_IF_ERROR(check.outRank(1, rank));
  int64_t experts = staticDim(check.in(0), rank - 1);
  if (experts < 1)
    return check.error("logits are declared ", declaredShape(check.in(0)),
                       "; the expert count (last dimension) must be static "
                       "and positive");
  if (check.has(1) &&
      (check.in(1).rank != 1 || staticDim(check.in(1), 0) != experts))
    return check.error("bias is declared ", declaredShape(check.in(1)),
                       "; expected [", experts, "]");
  if (attrs->score_function() != fb::ScoreFunction::Softmax &&
      attrs->score_function() != fb::ScoreFunction::Sigmoid)
    return check.error("unknown score function ",
                       static_cast<int>(attrs->score_function()));
  int64_t k = attrs->top_k();
  if (k < 1 || k > experts)
    return check.error("top_k ", k, " is not in [1, ", experts, "]");
  for (int o = 0; o < 2; ++o)
    if (staticDim(check.out(o), rank - 1) != k)
      return check.error("output ", o, " is declared ",
                         declaredShape(check.out(o)), "; its last dimension ",
                         "must be top_k = ", k);
  int64_t groups = attrs->n_group(), kept = attrs->topk_group();
  if (groups < 1 || experts % groups != 0)
    return check.error("n_group ", groups, " does not divide the ", experts,
                       " experts");
  if (kept < 1 || kept > groups)
    return check.error("topk_group ", kept, " is not in [1, ", groups, "]");
  if (groups > 1 && experts / groups < 2)
    return check.error("groups of 1 expert; a group scores by its best two");
  if (groups > 1 && kept * (experts / groups) < k)
    return check.error("the ", kept, " kept groups of ", experts / groups,
                       " experts hold fewer than top_k = ", k);
  if (attrs->score_after_topk() &&
      (attrs->score_function() != fb::ScoreFunction::Softmax ||
       attrs->normalize()))
    return check.error("score_after_topk needs softmax scores and no "
                       "normalize");
  float scale = attrs->routed_scaling_factor();
  if (!(scale > 0) || !std::isfinite(scale))
    return check.error("routed_scaling_factor ", scale,
                       " must be positive and finite");
  if (attrs->capacity() < 0)
    return check.error("capacity ", attrs->capacity(),
                       " is negative (0 means unlimited)");
  float keptEpsilon = attrs->normalize_kept_epsilon();
  if (keptEpsilon != 0.0f &&
      (!(keptEpsilon > 0) || !std::isfinite(keptEpsilon) ||
       attrs->capacity() == 0 || attrs->normalize() || scale != 1.0f))
    return check.error("normalize_kept_epsilon ", keptEpsilon,
                       " must be positive and finite, with a capacity, ",
                       "without normalize and with scale 1");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

absl::Status dispatchKernel(KernelContext &ctx) {
  const Tensor &tokens = ctx.in(0);
  const Tensor &indices = ctx.in(1);
  int64_t E = ctx.attrs<fb::DispatchAttrs>()->num_experts();
  int64_t T = tokens.shape[0], H = tokens.shape[1], k = indices.shape[1];
  MOERT_RETURN_IF_ERROR(checkDispatchShapes(ctx));
  int64_t rows = T * k;
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, Shape{rows, H}));
  MOERT_ASSIGN_OR_RETURN(Tensor * offsetsOut, ctx.allocate(1, Shape{E + 1}));
  MOERT_ASSIGN_OR_RETURN(Tensor * sourceOut, ctx.allocate(2, Shape{rows}));
  const int64_t *idx = indices.as<const int64_t>();
  int64_t *offsets = offsetsOut->as<int64_t>();
  int64_t *source = sourceOut->as<int64_t>();

  // Counting sort by expert, stable in assignment order (t, then j).
  std::fill(offsets, offsets + E + 1, 0);
  for (int64_t a = 0; a < rows; ++a) {
    int64_t e = idx[a];
    if (e < -1 || e >= E)
      return ctx.error("expert index ", e, " at position ", a,
                       " is out of range [-1, ", E, ")");
    if (e >= 0)
      ++offsets[e + 1];
  }
  for (int64_t e = 0; e < E; ++e)
    offsets[e + 1] += offsets[e];
  int64_t *cursor = scratch<int64_t>(Scratch::Step, E);
  std::copy(offsets, offsets + E, cursor);
  for (int64_t a = 0; a < rows; ++a)
    if (idx[a] >= 0)
      source[cursor[idx[a]]++] = a;
  std::fill(source + offsets[E], source + rows, -1);

  // The row copies, in parallel; padding rows are zeroed.
  const float *x = tokens.as<const float>();
  float *y = out->as<float>();
  ctx.pool().parallelFor(rows, rowGrain(H), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (source[r] >= 0)
        std::copy(x + source[r] / k * H, x + (source[r] / k + 1) * H,
                  y + r * H);
      else
        std::fill(y + r * H, y + (r + 1) * H, 0.0f);
    }
  });
  return absl::OkStatus();
}

absl::Status validateDispatch(const StepCheck &check) {
  int64_t E = check.attrs<fb::DispatchAttrs>()->num_experts();
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(0, 2));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 2));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  MOERT_RETURN_IF_ERROR(check.outType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.outType(2, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.outRank(0, 2));
  MOERT_RETURN_IF_ERROR(check.outRank(1, 1));
  MOERT_RETURN_IF_ERROR(check.outRank(2, 1));
  if (E < 1)
    return check.error("num_experts ", E, " must be positive");
  // (Compared as dim - 1: E comes from the file and may be huge.)
  if (staticDim(check.out(1), 0) - 1 != E)
    return check.error("offsets are declared ", declaredShape(check.out(1)),
                       "; expected [", E + 1, "] (num_experts + 1)");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Expert networks (Experts and SharedExpert)
//===----------------------------------------------------------------------===//

/// The weights of an expert network, in input order from the step's first
/// weight input.
enum Slot { kW1, kB1, kW3, kB3, kW2, kB2, kNumSlots };
constexpr const char *kSlotNames[kNumSlots] = {"w1", "b1", "w3",
                                               "b3", "w2", "b2"};
/// The matrices that int8 storage scales, and the names of their scales
/// (Experts' inputs 8, 9 and 10: one f32 per expert and output channel).
constexpr Slot kScaledSlots[] = {kW1, kW3, kW2};
constexpr const char *kScaleNames[] = {"s1", "s3", "s2"};
/// Experts' first scale input.
constexpr int kFirstScale = 8;

bool isGated(fb::Activation activation) {
  return activation >= fb::Activation::SiluGlu &&
         activation <= fb::Activation::ClampedSwiglu;
}

/// Checks the shapes of an expert network's weights (`shapes[slot]`, null
/// when absent) against its layout and derives its sizes. `lead` is 1 when
/// every weight has a leading expert dimension; rows have `hidden` elements.
absl::Status resolveFfn(const StepView &view, const fb::FfnAttrs &attrs,
                        const Shape *const shapes[kNumSlots], int lead,
                        int64_t hidden, FfnSizes &sizes,
                        const Shape *const scaleShapes[3] = nullptr) {
  bool inOut = attrs.weight_layout() == fb::WeightLayout::InOut;
  const Shape &w1 = *shapes[kW1];
  sizes = ffnSizes(attrs, w1.dims, lead, shapes[kW3] != nullptr, hidden);
  int64_t in = w1[lead + (inOut ? 0 : 1)];
  bool fused = isGated(attrs.activation()) && !shapes[kW3];
  if (lead && sizes.experts < 1)
    return view.error("w1 of shape ", w1.str(), " has no experts");
  if (in != hidden)
    return view.error("w1 of shape ", w1.str(), " takes rows of ", in,
                      " elements; the tokens have ", hidden);
  if (fused && sizes.w1Out % 2)
    return view.error("w1 of shape ", w1.str(),
                      " must have an even output size (gate and up halves)");
  if (sizes.w1Out > INT32_MAX || hidden > INT32_MAX)
    return view.error("weight dimensions exceed 2^31");

  auto matrix = [&](int64_t rows, int64_t cols) {
    Shape shape;
    if (lead)
      shape.push(sizes.experts);
    shape.push(inOut ? rows : cols);
    shape.push(inOut ? cols : rows);
    return shape;
  };
  auto vector = [&](int64_t size) {
    Shape shape;
    if (lead)
      shape.push(sizes.experts);
    shape.push(size);
    return shape;
  };
  const char *e = lead ? "E, " : "";
  const char *layout = inOut ? "in_out" : "out_in";
  struct Expected {
    Slot slot;
    Shape shape;
    std::string meaning;
  } expected[] = {
      {kB1, vector(sizes.w1Out), absl::StrCat("[", e, fused ? "2F" : "F", "]")},
      {kW3, matrix(hidden, sizes.inter),
       absl::StrCat("[", e, inOut ? "H, F" : "F, H", "] with layout ", layout)},
      {kB3, vector(sizes.inter), absl::StrCat("[", e, "F]")},
      {kW2, matrix(sizes.inter, hidden),
       absl::StrCat("[", e, inOut ? "F, H" : "H, F", "] with layout ", layout)},
      {kB2, vector(hidden), absl::StrCat("[", e, "H]")},
  };
  for (const Expected &want : expected) {
    const Shape *actual = shapes[want.slot];
    if (actual && *actual != want.shape)
      return view.error(kSlotNames[want.slot], " has shape ", actual->str(),
                        "; expected ", want.shape.str(), " (", want.meaning,
                        ")");
  }
  // One scale per expert and output channel of each int8 matrix.
  const int64_t outputs[] = {sizes.w1Out, sizes.inter, hidden};
  const char *meanings[] = {fused ? "2F" : "F", "F", "H"};
  for (int m = 0; scaleShapes && m < 3; ++m)
    if (const Shape *actual = scaleShapes[m];
        actual && *actual != vector(outputs[m]))
      return view.error(kScaleNames[m], " has shape ", actual->str(),
                        "; expected ", vector(outputs[m]).str(), " ([", e,
                        meanings[m], "], a scale per output channel)");
  return absl::OkStatus();
}

/// Experts' first zero point input (z1, z3, z2: format 1.11).
constexpr int kFirstZeroPoint = 11;

/// The sizes of an Experts step's block-quantized matrices (format 1.11)
/// from its tokens' hidden size H and w1's and w3's rows: w1 [E, W1, H],
/// w3 [E, F, H], w2 [E, H, F], all out_in.
struct BlockQuantSizes {
  int64_t experts, hidden, w1Out, inter;
};
BlockQuantSizes blockQuantSizes(const fb::FfnAttrs &attrs, int64_t experts,
                                int64_t hidden, int64_t w1Rows, bool hasW3) {
  bool fused = isGated(attrs.activation()) && !hasW3;
  return {experts, hidden, w1Rows, fused ? w1Rows / 2 : w1Rows};
}

/// Load-time checks of an Experts step whose matrices are block-quantized
/// (FfnAttrs.block_quant): the out_in layout, and per matrix its codes,
/// block scales and optional zero points, all static weights whose shapes
/// follow from the tokens' hidden size and w1's rows.
absl::Status validateBlockQuantFfn(const StepCheck &check, int first,
                                   int scales) {
  const auto *attrs = check.attrs<fb::FfnAttrs>();
  const fb::BlockQuantAttrs &quant = *attrs->block_quant();
  MOERT_RETURN_IF_ERROR(validateBlockQuant(check, quant));
  if (attrs->weight_layout() != fb::WeightLayout::OutIn)
    return check.error("block-quantized matrices need the out_in layout");
  const TensorInfo &w1 = check.in(first + kW1);
  int64_t hidden = staticDim(check.in(0), 1);
  int64_t experts = staticDim(w1, 0), w1Rows = staticDim(w1, 1);
  if (hidden < 1 || experts < 1 || w1Rows < 1 || hidden > INT32_MAX ||
      w1Rows > INT32_MAX)
    return check.error("block-quantized matrices need static sizes: tokens ",
                       declaredShape(check.in(0)), ", w1 ", declaredShape(w1));
  bool hasW3 = check.has(first + kW3);
  if (isGated(attrs->activation()) && !hasW3 && w1Rows % 2)
    return check.error("w1 of ", w1Rows,
                       " rows must have an even output size (gate and up "
                       "halves)");
  BlockQuantSizes sizes =
      blockQuantSizes(*attrs, experts, hidden, w1Rows, hasW3);
  const int64_t rows[] = {sizes.w1Out, sizes.inter, sizes.hidden};
  const int64_t cols[] = {sizes.hidden, sizes.hidden, sizes.inter};
  for (int m = 0; m < 3; ++m) {
    int matrix = first + kScaledSlots[m];
    if (!check.has(matrix)) {
      if (check.has(scales + m) || check.has(kFirstZeroPoint + m))
        return check.error(kScaleNames[m], " or its zero points are given but ",
                           kSlotNames[kScaledSlots[m]], " is absent");
      continue;
    }
    if (!check.has(scales + m))
      return check.error(kScaleNames[m],
                         " is missing: ", kSlotNames[kScaledSlots[m]],
                         " is block-quantized and needs its block scales");
    const TensorInfo *infos[3] = {&check.in(matrix), &check.in(scales + m),
                                  check.has(kFirstZeroPoint + m)
                                      ? &check.in(kFirstZeroPoint + m)
                                      : nullptr};
    std::string names[3] = {
        kSlotNames[kScaledSlots[m]], kScaleNames[m],
        absl::StrCat(kSlotNames[kScaledSlots[m]], "'s zero points")};
    const char *cnames[3] = {names[0].c_str(), names[1].c_str(),
                             names[2].c_str()};
    const int64_t outer[] = {experts};
    MOERT_RETURN_IF_ERROR(checkBlockQuantWeights(check, infos, cnames, 1, outer,
                                                 rows[m], cols[m], quant.bits(),
                                                 quant.block_size()));
  }
  for (int slot : {kB1, kB3, kB2}) {
    const int64_t size[] = {0, sizes.w1Out, 0, sizes.inter, 0, sizes.hidden};
    int i = first + slot;
    if (!check.has(i))
      continue;
    const TensorInfo &bias = check.in(i);
    if (bias.rank != 2 || staticDim(bias, 0) != experts ||
        staticDim(bias, 1) != size[slot])
      return check.error(kSlotNames[slot], " is declared ", declaredShape(bias),
                         "; expected [", experts, ", ", size[slot], "]");
  }
  return absl::OkStatus();
}

/// Load-time checks of an expert network: dtypes, ranks, attributes, and
/// the shapes when they are declared static. `scales` is the first scale
/// input of a step that may hold int8 matrices (Experts), else -1.
absl::Status validateFfn(const StepCheck &check, int first, int lead,
                         int scales = -1) {
  const auto *attrs = check.attrs<fb::FfnAttrs>();
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inRank(0, 2));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  MOERT_RETURN_IF_ERROR(check.outRank(0, 2));
  for (int slot = 0; slot < kNumSlots; ++slot) {
    int i = first + slot;
    bool isBias = slot == kB1 || slot == kB3 || slot == kB2;
    // Matrices may be 16-bit floats (read as f32); biases are f32.
    MOERT_RETURN_IF_ERROR(check.inType(i, isBias        ? kFloatTypes
                                          : scales >= 0 ? kExpertWeightTypes
                                                        : kWeightTypes));
    if (check.has(i) && check.in(i).rank != lead + (isBias ? 1 : 2))
      return check.error(kSlotNames[slot], " has rank ", check.in(i).rank,
                         "; expected ", lead + (isBias ? 1 : 2));
  }

  bool blockQuant = scales >= 0 && attrs->block_quant();
  if (scales < 0 && attrs->block_quant())
    return check.error("block-quantized matrices are for Experts steps only");
  for (int m = 0; scales >= 0 && !blockQuant && m < 3; ++m)
    if (check.has(kFirstZeroPoint + m))
      return check.error("zero points (input ", kFirstZeroPoint + m,
                         ") need block-quantized matrices (block_quant)");
  // One storage for all matrices: a kernel reads them the same way.
  DType w1Type = check.in(first + kW1).dtype;
  for (Slot slot : {kW3, kW2})
    if (check.has(first + slot) && check.in(first + slot).dtype != w1Type)
      return check.error(kSlotNames[slot], " is ",
                         dtypeName(check.in(first + slot).dtype), " but w1 is ",
                         dtypeName(w1Type),
                         "; w1, w3 and w2 must have one dtype (f32, f16, "
                         "bf16 or i8)");
  if (scales >= 0 && !blockQuant) {
    // int8 matrices come with their scales, [E, out] f32 (shapes below).
    bool quantized = w1Type == DType::I8;
    for (int m = 0; m < 3; ++m) {
      int i = scales + m;
      bool hasMatrix = check.has(first + kScaledSlots[m]);
      MOERT_RETURN_IF_ERROR(check.inType(i, kFloatTypes));
      if (check.has(i) != (quantized && hasMatrix))
        return check.error(
            kScaleNames[m], check.has(i) ? " is given but " : " is missing: ",
            kSlotNames[kScaledSlots[m]],
            check.has(i) ? (hasMatrix ? " is not i8" : " is absent")
                         : " is i8 and needs its per-channel scales");
      if (check.has(i) && check.in(i).rank != 2)
        return check.error(kScaleNames[m], " has rank ", check.in(i).rank,
                           "; expected 2 ([E, out])");
    }
  }

  fb::Activation activation = attrs->activation();
  if (activation > fb::Activation::MAX)
    return check.error("unknown activation ", static_cast<int>(activation));
  if (attrs->weight_layout() > fb::WeightLayout::MAX)
    return check.error("unknown weight layout ",
                       static_cast<int>(attrs->weight_layout()));
  if (attrs->glu_layout() > fb::GluLayout::MAX)
    return check.error("unknown glu layout ",
                       static_cast<int>(attrs->glu_layout()));
  bool gated = isGated(activation);
  bool hasW3 = check.has(first + kW3);
  if (hasW3 && !gated)
    return check.error("w3 needs a gated activation, not ",
                       fb::EnumNameActivation(activation));
  if (check.has(first + kB3) && !hasW3)
    return check.error("b3 needs w3");
  bool fused = gated && !hasW3;
  if (fused != (attrs->glu_layout() != fb::GluLayout::None))
    return check.error(fused ? "a fused gate/up projection (a gated "
                               "activation without w3) needs a glu layout"
                             : "a glu layout applies only to a fused gate/up "
                               "projection (a gated activation without w3)");
  float alpha = attrs->alpha(), beta = attrs->beta(), limit = attrs->limit();
  if (activation == fb::Activation::ClampedSwiglu) {
    if (!std::isfinite(alpha) || !std::isfinite(beta) ||
        !std::isfinite(limit) || limit < 0)
      return check.error("clamped_swiglu needs finite alpha and beta and a "
                         "finite non-negative limit (0: none)");
  } else if (alpha != 1.0f || beta != 0.0f || limit != 0.0f) {
    return check.error("alpha, beta and limit apply only to clamped_swiglu");
  }

  if (blockQuant)
    return validateBlockQuantFfn(check, first, scales);
  Shape storage[kNumSlots], scaleStorage[3];
  const Shape *shapes[kNumSlots] = {}, *scaleShapes[3] = {};
  for (int slot = 0; slot < kNumSlots; ++slot)
    if (check.has(first + slot)) {
      if (!staticShape(check.in(first + slot), storage[slot]))
        return absl::OkStatus(); // Checked at run time.
      shapes[slot] = &storage[slot];
    }
  for (int m = 0; scales >= 0 && m < 3; ++m)
    if (check.has(scales + m)) {
      if (!staticShape(check.in(scales + m), scaleStorage[m]))
        return absl::OkStatus();
      scaleShapes[m] = &scaleStorage[m];
    }
  int64_t hidden = staticDim(check.in(0), 1);
  if (hidden < 0)
    return absl::OkStatus();
  FfnSizes sizes;
  return resolveFfn(check, *attrs, shapes, lead, hidden, sizes, scaleShapes);
}

/// An expert network resolved against the actual tensors of a step.
struct Ffn {
  fb::Activation activation;
  bool inOut, gated, fused, interleaved;
  float alpha, beta, limit;
  FfnSizes sizes;
  /// The storage of w1, w3 and w2 (biases are f32).
  StreamWeights weightType = StreamWeights::F32;
  /// Whether the step has the input of each slot.
  bool present[kNumSlots] = {};
  const uint8_t *data[kNumSlots] = {};
  /// Bytes from one expert's weights to the next's.
  int64_t stride[kNumSlots] = {};
  /// A tiered step's paged inputs: each expert's bytes, from the expert
  /// store (docs/tiered-experts.md); null for an input that is mapped.
  const uint8_t *const *paged[kNumSlots] = {};
  const uint8_t *const *pagedScales[kNumSlots] = {};

  /// Expert `e`'s bias in `slot`, or null when absent.
  const float *at(Slot slot, int64_t e) const {
    return reinterpret_cast<const float *>(weight(slot, e));
  }
  /// Expert `e`'s matrix (of weightType) or bias in `slot`, or null.
  const void *weight(Slot slot, int64_t e) const {
    if (paged[slot])
      return paged[slot][e];
    return data[slot] ? data[slot] + e * stride[slot] : nullptr;
  }
  /// Block-quantized matrices (format 1.11): per matrix slot, its shape
  /// and codes, block scales and zero points of expert 0, and the bytes
  /// from one expert's scales and zero points to the next's.
  bool blockQuant = false;
  BlockQuantMatrix quant[kNumSlots];
  int64_t quantScaleStride[kNumSlots] = {};
  int64_t quantZeroStride[kNumSlots] = {};
  /// Expert `e`'s block-quantized matrix in `slot`.
  BlockQuantMatrix matrix(Slot slot, int64_t e) const {
    BlockQuantMatrix w = quant[slot];
    w.codes = static_cast<const uint8_t *>(weight(slot, e));
    w.scales =
        static_cast<const uint8_t *>(w.scales) + e * quantScaleStride[slot];
    if (w.zeroPoints)
      w.zeroPoints += e * quantZeroStride[slot];
    return w;
  }
  /// Per int8 matrix slot, its scales [E, out] (null for float matrices).
  const float *scales[kNumSlots] = {};
  int64_t scaleStride[kNumSlots] = {};
  /// Expert `e`'s output-channel scales of the matrix in `slot`, or null.
  const float *scale(Slot slot, int64_t e) const {
    if (pagedScales[slot])
      return reinterpret_cast<const float *>(pagedScales[slot][e]);
    return scales[slot] ? scales[slot] + e * scaleStride[slot] : nullptr;
  }
};

/// The streaming kernels' name for a matrix dtype the loader accepted.
StreamWeights streamWeights(DType dtype) {
  return dtype == DType::BF16  ? StreamWeights::BF16
         : dtype == DType::F16 ? StreamWeights::F16
         : dtype == DType::I8  ? StreamWeights::I8
                               : StreamWeights::F32;
}

/// The attributes of an expert network into `ffn`.
void readFfnAttrs(const fb::FfnAttrs &attrs, Ffn &ffn) {
  ffn.activation = attrs.activation();
  ffn.inOut = attrs.weight_layout() == fb::WeightLayout::InOut;
  ffn.gated = isGated(ffn.activation);
  ffn.fused = ffn.gated && !ffn.present[kW3];
  ffn.interleaved = attrs.glu_layout() == fb::GluLayout::Interleaved;
  ffn.alpha = attrs.alpha();
  ffn.beta = attrs.beta();
  ffn.limit = attrs.limit();
}

/// resolveFfn of an Experts step with block-quantized matrices, whose
/// shapes the loader checked (validateBlockQuantFfn): the sizes follow
/// from the tokens' hidden size and w1's rows.
absl::Status resolveBlockQuantFfn(const KernelContext &ctx, int first,
                                  int scales, int64_t hidden,
                                  const fb::BlockQuantAttrs &quant, Ffn &ffn) {
  const auto *attrs = ctx.attrs<fb::FfnAttrs>();
  const Shape &w1 = ctx.in(first + kW1).shape;
  BlockQuantSizes sizes =
      blockQuantSizes(*attrs, w1[0], hidden, w1[1], ffn.present[kW3]);
  ffn.sizes.experts = sizes.experts;
  ffn.sizes.hidden = sizes.hidden;
  ffn.sizes.w1Out = sizes.w1Out;
  ffn.sizes.inter = sizes.inter;
  ffn.blockQuant = true;
  const int64_t rows[] = {sizes.w1Out, sizes.inter, sizes.hidden};
  const int64_t cols[] = {sizes.hidden, sizes.hidden, sizes.inter};
  for (int m = 0; m < 3; ++m) {
    Slot slot = kScaledSlots[m];
    if (!ffn.present[slot])
      continue;
    const Tensor &codes = ctx.in(first + slot);
    const Tensor &scale = ctx.in(scales + m);
    const Tensor *zeros =
        ctx.has(kFirstZeroPoint + m) ? &ctx.in(kFirstZeroPoint + m) : nullptr;
    ffn.quant[slot] = blockQuantMatrix(codes, scale, zeros, rows[m], cols[m],
                                       quant.bits(), quant.block_size());
    ffn.quant[slot].int8Activations = quant.int8_activations();
    ffn.quantScaleStride[slot] =
        scale.shape.span(1, scale.shape.rank) * dtypeSize(scale.dtype);
    ffn.quantZeroStride[slot] =
        zeros ? zeros->shape.span(1, zeros->shape.rank) : 0;
  }
  readFfnAttrs(*attrs, ffn);
  return absl::OkStatus();
}

absl::Status resolveFfn(const KernelContext &ctx, int first, int lead,
                        int64_t hidden, Ffn &ffn, int scales = -1) {
  const auto *attrs = ctx.attrs<fb::FfnAttrs>();
  const Shape *shapes[kNumSlots] = {};
  for (int slot = 0; slot < kNumSlots; ++slot)
    if (ctx.has(first + slot)) {
      const Tensor &t = ctx.in(first + slot);
      shapes[slot] = &t.shape;
      ffn.present[slot] = true;
      ffn.data[slot] = t.data;
      ffn.stride[slot] =
          lead ? t.shape.span(1, t.shape.rank) * dtypeSize(t.dtype) : 0;
    }
  ffn.weightType = streamWeights(ctx.in(first + kW1).dtype);
  if (const fb::BlockQuantAttrs *quant = attrs->block_quant();
      quant && scales >= 0)
    return resolveBlockQuantFfn(ctx, first, scales, hidden, *quant, ffn);
  const Shape *scaleShapes[3] = {};
  for (int m = 0; scales >= 0 && m < 3; ++m)
    if (ctx.has(scales + m)) {
      const Tensor &t = ctx.in(scales + m);
      scaleShapes[m] = &t.shape;
      ffn.scales[kScaledSlots[m]] = t.as<const float>();
      ffn.scaleStride[kScaledSlots[m]] = t.shape[t.shape.rank - 1];
    }
  MOERT_RETURN_IF_ERROR(
      resolveFfn(ctx, *attrs, shapes, lead, hidden, ffn.sizes, scaleShapes));
  readFfnAttrs(*attrs, ffn);
  return absl::OkStatus();
}

/// Weight rows per block of a split: 128 rows of 2816 outputs are 1.4 MiB
/// (measured slightly faster than 64 at 1 and 16 tokens).
constexpr int64_t kPartRows = 128;

/// c[n, m] (leading dimension ldc) = x[n, K] @ W[:, c0 : c0 + m] (*
/// scale[c0 : c0 + m] for int8 W) + bias[c0 : c0 + m], for a matrix W of
/// storage `type` with `out` outputs stored as [K, out] (`inOut`) or [out,
/// K]. Up to streamedRows rows of [out, K] weights stream them ([K, out]
/// weights with few rows are split along K by runRound instead); otherwise
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
/// columns [c0, c0 + m), with the bias in `bias`.
void projectSlot(const Ffn &f, Slot slot, int64_t e, const float *x, int64_t n,
                 int64_t K, int64_t out, int64_t c0, int64_t m,
                 const float *bias, float *c, int64_t ldc) {
  if (f.blockQuant)
    return quantProject(x, n, f.matrix(slot, e), c0, m, bias, c, ldc);
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
/// element step `step`) into a[r, 0 : m].
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
/// lda).
void firstLayer(const Ffn &f, int64_t e, const float *x, int64_t n, int64_t f0,
                int64_t m, float *a, int64_t lda) {
  const int64_t H = f.sizes.hidden, F = f.sizes.inter, W1 = f.sizes.w1Out;
  const float *b1 = f.at(kB1, e);
  const float *g = a, *u = nullptr;
  int64_t ld = lda, step = 1;
  if (!f.gated) {
    projectSlot(f, kW1, e, x, n, H, W1, f0, m, b1, a, lda);
  } else {
    float *buffer = scratch<float>(Scratch::Task, 2 * n * m);
    if (f.fused && f.interleaved) {
      // Gate and up alternate: one GEMM over outputs [2 f0, 2 (f0 + m)).
      projectSlot(f, kW1, e, x, n, H, W1, 2 * f0, 2 * m, b1, buffer, 2 * m);
      g = buffer;
      u = buffer + 1;
      ld = 2 * m;
      step = 2;
    } else {
      // Gate and up from w1's two halves, or from w1 and w3.
      projectSlot(f, kW1, e, x, n, H, W1, f0, m, b1, buffer, m);
      if (f.fused)
        projectSlot(f, kW1, e, x, n, H, W1, F + f0, m, b1, buffer + n * m, m);
      else
        projectSlot(f, kW3, e, x, n, H, F, f0, m, f.at(kB3, e), buffer + n * m,
                    m);
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
                 F);
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
  forEachItem(pool, static_cast<int64_t>(second.size()), [&](int64_t i) {
    const Block &b = second[i];
    const Segment &s = segments[b.segment];
    if (b.slot == kW2)
      partial(b, a + s.aOffset, F, H, 0);
    else
      projectSlot(f, kW2, s.expert, a + s.aOffset, s.rows, F, H, b.col, b.cols,
                  f.at(kB2, s.expert), y + s.row * H + b.col, H);
  });
  forEachItem(pool, static_cast<int64_t>(split.size()), [&](int64_t i) {
    const Segment &s = segments[split[i]];
    sumParts(partials + partOffset[split[i]], (F + kPartRows - 1) / kPartRows,
             s.rows, H, f.scale(kW2, s.expert), f.at(kB2, s.expert),
             y + s.row * H, H);
  });
}

/// Runs expert e's network on its rows x[offsets[e], offsets[e+1]) into the
/// same rows of y, for every expert (or those of `only`, ascending): experts
/// are cut into segments of at most kWideChunkRows rows, and segments
/// grouped into rounds of about kRoundRows rows.
void runExperts(ThreadPool &pool, const Ffn &f, const float *x,
                const int64_t *offsets, float *y,
                const std::vector<uint32_t> *only = nullptr) {
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

absl::Status expertsKernel(KernelContext &ctx) {
  const Tensor &tokens = ctx.in(0);
  const Tensor &offsetsIn = ctx.in(1);
  int64_t N = tokens.shape[0], H = tokens.shape[1];
  Ffn f;
  MOERT_RETURN_IF_ERROR(resolveFfn(ctx, 2, /*lead=*/1, H, f, kFirstScale));
  int64_t E = f.sizes.experts;
  MOERT_RETURN_IF_ERROR(checkExpertOffsets(ctx, offsetsIn.shape, E));
  const int64_t *offsets = offsetsIn.as<const int64_t>();
  if (offsets[0] != 0)
    return ctx.error("offsets[0] is ", offsets[0], "; expected 0");
  for (int64_t e = 0; e < E; ++e)
    if (offsets[e + 1] < offsets[e] || offsets[e + 1] > N)
      return ctx.error("offsets[", e + 1, "] = ", offsets[e + 1],
                       " is not in [offsets[", e, "] = ", offsets[e], ", ", N,
                       "] (the rows)");
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, tokens.shape));
  float *y = out->as<float>();
  if (ctx.expertWeights() && f.blockQuant)
    return ctx.error("a tiered Experts step cannot page block-quantized "
                     "matrices");
  if (ExpertWeights *store = ctx.expertWeights()) {
    // A tiered step: the experts with rows are made present (read when
    // missing) as many at a time as the cache holds, each batch computed
    // before the next is read. Each expert writes only its own rows.
    uint32_t layer = static_cast<uint32_t>(ctx.tierLayer());
    for (int slot = 0; slot < kNumSlots; ++slot)
      f.paged[slot] = store->pointers(layer, 2 + slot);
    for (int m = 0; m < 3; ++m)
      f.pagedScales[kScaledSlots[m]] = store->pointers(layer, kFirstScale + m);
    std::vector<uint32_t> pending, batch;
    for (int64_t e = 0; e < E; ++e)
      if (offsets[e + 1] > offsets[e])
        pending.push_back(static_cast<uint32_t>(e));
    while (!pending.empty()) {
      MOERT_RETURN_IF_ERROR(
          store->acquire(layer, pending, batch, ctx.pool(), ctx.step().label));
      std::sort(batch.begin(), batch.end());
      runExperts(ctx.pool(), f, tokens.as<const float>(), offsets, y, &batch);
      store->release(layer, batch);
    }
  } else {
    runExperts(ctx.pool(), f, tokens.as<const float>(), offsets, y);
  }
  std::fill(y + offsets[E] * H, y + N * H, 0.0f);

  if (ctx.moeCounters()) {
    int64_t *load = scratch<int64_t>(Scratch::Step, E);
    for (int64_t e = 0; e < E; ++e)
      load[e] = offsets[e + 1] - offsets[e];
    countLoads(ctx, E, load, 0);
  }
  return absl::OkStatus();
}

absl::Status validateExperts(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  MOERT_RETURN_IF_ERROR(validateFfn(check, 2, /*lead=*/1, kFirstScale));
  int64_t experts = staticDim(check.in(2), 0);
  int64_t offsets = staticDim(check.in(1), 0);
  if (experts >= 0 && offsets >= 0 && offsets != experts + 1)
    return check.error("offsets are declared ", declaredShape(check.in(1)),
                       "; expected [", experts + 1, "] for ", experts,
                       " experts");
  return absl::OkStatus();
}

absl::Status sharedExpertKernel(KernelContext &ctx) {
  const Tensor &tokens = ctx.in(0);
  int64_t T = tokens.shape[0], H = tokens.shape[1];
  Ffn f;
  MOERT_RETURN_IF_ERROR(resolveFfn(ctx, 1, /*lead=*/0, H, f));
  const float *x = tokens.as<const float>();
  // The gate's per-token factor, computed before the output is written.
  float *gate = nullptr;
  if (ctx.has(7)) {
    const Tensor &g = ctx.in(7);
    MOERT_RETURN_IF_ERROR(checkSharedGate(ctx, g.shape, H));
    gate = scratch<float>(Scratch::Aux, T);
    const float *gv = g.as<const float>();
    ctx.pool().parallelFor(T, rowGrain(H), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        double dot = 0;
        for (int64_t h = 0; h < H; ++h)
          dot += double(x[t * H + h]) * gv[h];
        gate[t] = sigmoid(static_cast<float>(dot));
      }
    });
  }
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, tokens.shape));
  float *y = out->as<float>();
  int64_t offsets[2] = {0, T};
  runExperts(ctx.pool(), f, x, offsets, y);
  if (gate)
    ctx.pool().parallelFor(T, rowGrain(H), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        for (int64_t h = 0; h < H; ++h)
          y[t * H + h] *= gate[t];
    });
  return absl::OkStatus();
}

absl::Status validateSharedExpert(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(7, kFloatTypes));
  if (check.has(7) && check.in(7).rank != 1 && check.in(7).rank != 2)
    return check.error("gate has rank ", check.in(7).rank,
                       "; expected 1 ([H]) or 2 ([H, 1] or [1, H])");
  return validateFfn(check, 1, /*lead=*/0);
}

//===----------------------------------------------------------------------===//
// Combine
//===----------------------------------------------------------------------===//

absl::Status combineKernel(KernelContext &ctx) {
  const Tensor &outputs = ctx.in(0);
  const Tensor &sourceIn = ctx.in(1);
  const Tensor &weightsIn = ctx.in(2);
  int64_t N = outputs.shape[0], H = outputs.shape[1];
  int64_t T = weightsIn.shape[0], k = weightsIn.shape[1];
  MOERT_RETURN_IF_ERROR(checkCombineShapes(ctx));
  const float *passthrough = ctx.has(3) ? ctx.in(3).as<const float>() : nullptr;
  const int64_t *indices = ctx.has(4) ? ctx.in(4).as<const int64_t>() : nullptr;
  // The inverse of `source`: the row of each assignment, or -1.
  int64_t *row = scratch<int64_t>(Scratch::Step, T * k);
  std::fill(row, row + T * k, -1);
  const int64_t *source = sourceIn.as<const int64_t>();
  for (int64_t r = 0; r < N; ++r) {
    int64_t a = source[r];
    if (a == -1)
      continue;
    if (a < 0 || a >= T * k)
      return ctx.error("source[", r, "] = ", a, " is out of range [-1, ", T * k,
                       ")");
    if (row[a] >= 0)
      return ctx.error("source[", r, "] repeats assignment ", a, " of source[",
                       row[a], "]");
    row[a] = r;
  }
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, Shape{T, H}));
  const float *y = outputs.as<const float>();
  const float *w = weightsIn.as<const float>();
  float *o = out->as<float>();
  // Each token sums its k contributions in order: no races, deterministic.
  ctx.pool().parallelFor(T, rowGrain(k * H), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float *ot = o + t * H;
      std::fill(ot, ot + H, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        float wj = w[t * k + j];
        if (int64_t r = row[t * k + j]; r >= 0)
          for (int64_t h = 0; h < H; ++h)
            ot[h] += wj * y[r * H + h];
        if (indices && indices[t * k + j] == -1)
          for (int64_t h = 0; h < H; ++h)
            ot[h] += wj * passthrough[t * H + h];
      }
    }
  });
  return absl::OkStatus();
}

absl::Status validateCombine(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inType(2, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(3, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inType(4, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(0, 2));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  MOERT_RETURN_IF_ERROR(check.inRank(2, 2));
  MOERT_RETURN_IF_ERROR(check.inRank(3, 2));
  MOERT_RETURN_IF_ERROR(check.inRank(4, 2));
  if (check.has(3) != check.has(4))
    return check.error("passthrough and indices must be given together");
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, 2);
}

} // namespace

absl::Status checkDispatchShapes(const KernelContext &ctx) {
  const Shape &tokens = ctx.in(0).shape;
  const Shape &indices = ctx.in(1).shape;
  if (indices[0] != tokens[0])
    return ctx.error("indices of shape ", indices.str(),
                     " do not match tokens of shape ", tokens.str());
  return absl::OkStatus();
}

absl::Status checkCombineShapes(const KernelContext &ctx) {
  const Shape &outputs = ctx.in(0).shape;
  const Shape &weights = ctx.in(2).shape;
  int64_t N = outputs[0], H = outputs[1];
  int64_t T = weights[0], k = weights[1];
  if (ctx.in(1).shape != Shape{N})
    return ctx.error("source has shape ", ctx.in(1).shape.str(), "; expected [",
                     N, "] (a row of the expert outputs)");
  if (ctx.has(3) != ctx.has(4))
    return ctx.error("passthrough and indices must be given together");
  if (ctx.has(3) &&
      (ctx.in(3).shape != Shape{T, H} || ctx.in(4).shape != Shape{T, k}))
    return ctx.error("passthrough of shape ", ctx.in(3).shape.str(),
                     " and indices of shape ", ctx.in(4).shape.str(),
                     " do not match [", T, ", ", H, "] and [", T, ", ", k, "]");
  return absl::OkStatus();
}

FfnSizes ffnSizes(const fb::FfnAttrs &attrs, const int64_t *w1, int lead,
                  bool hasW3, int64_t hidden) {
  bool inOut = attrs.weight_layout() == fb::WeightLayout::InOut;
  FfnSizes sizes;
  sizes.experts = lead ? w1[0] : 1;
  sizes.hidden = hidden;
  sizes.w1Out = w1[lead + (inOut ? 1 : 0)];
  bool fused = isGated(attrs.activation()) && !hasW3;
  sizes.inter = fused ? sizes.w1Out / 2 : sizes.w1Out;
  return sizes;
}

absl::Status checkExpertOffsets(const KernelContext &ctx, const Shape &offsets,
                                int64_t experts) {
  if (offsets != Shape{experts + 1})
    return ctx.error("offsets have shape ", offsets.str(), "; expected [",
                     experts + 1, "] for ", experts, " experts");
  return absl::OkStatus();
}

absl::Status checkSharedGate(const KernelContext &ctx, const Shape &gate,
                             int64_t hidden) {
  if (gate.numel() != hidden ||
      !(gate.rank == 1 || gate[0] == 1 || gate[1] == 1))
    return ctx.error("gate has shape ", gate.str(), "; expected [", hidden,
                     "], [", hidden, ", 1] or [1, ", hidden, "]");
  return absl::OkStatus();
}

void registerMoeOps(OpRegistry &r) {
  r.add(fb::OpKind::Router, makeOp("Router", 1, 2, validateRouter, routerKernel,
                                   fb::Attrs::RouterAttrs)
                                .withOptionalInputs(0b10)
                                .withOutputs(2));

  r.add(fb::OpKind::Dispatch, makeOp("Dispatch", 2, 2, validateDispatch,
                                     dispatchKernel, fb::Attrs::DispatchAttrs)
                                  .withOutputs(3));

  // tokens, offsets, w1, b1?, w3?, b3?, w2, b2?, s1?, s3?, s2?, z1?, z3?,
  // z2?
  // Each expert reads its rows before writing the same rows.
  r.add(fb::OpKind::Experts, makeOp("Experts", 7, 14, validateExperts,
                                    expertsKernel, fb::Attrs::FfnAttrs)
                                 .withOptionalInputs(0b11111110111000)
                                 .withInPlaceInputs(kInPlaceFirst));

  // tokens, w1, b1?, w3?, b3?, w2, b2?, gate?
  r.add(fb::OpKind::SharedExpert,
        makeOp("SharedExpert", 6, 8, validateSharedExpert, sharedExpertKernel,
               fb::Attrs::FfnAttrs)
            .withOptionalInputs(0b11011100));

  // expert_outputs, source, weights, passthrough?, indices?
  r.add(fb::OpKind::Combine,
        makeOp("Combine", 3, 5, validateCombine, combineKernel)
            .withOptionalInputs(0b11000));
}

} // namespace moert::detail
