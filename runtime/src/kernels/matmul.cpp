//===- matmul.cpp - MatMul, Gemm and Einsum through oneDNN ----------------===//
//
// Every GEMM of the CPU backend goes through `sgemm`: oneDNN's sgemm, whose
// JIT kernels are picked from the CPUID of the machine that runs (AVX2,
// AVX-512, ...), so that one binary is fast on every x86-64 CPU. OpenBLAS,
// used before, picks its kernels from a table of known CPU models and falls
// back to its SSE3 kernels on a CPU newer than its table, several times
// slower than oneDNN (bench/README.md, "GEMM backend").
//
// oneDNN runs on the calling thread: the runtime's own pool splits the work
// (parallelSgemm, and the expert blocks of expert_blocks.cpp), so no second
// set of threads competes for the cores.
//
//===----------------------------------------------------------------------===//

#include "kernels/matmul.h"
#include "exec/thread_pool.h"
#include "kernels/batch_invariant.h"
#include "kernels/tiles.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

// Debian's oneDNN uses the OpenMP runtime (libgomp) for its threads; each
// thread that calls it sets its own OpenMP thread count to 1 (an OpenMP
// per-thread setting), so that oneDNN never starts a team of its own.
extern "C" void omp_set_num_threads(int);

namespace moert::detail {

namespace {

/// The product without a library, for what oneDNN refuses: only arguments
/// the callers never pass (they check the sizes), so it is a safety net that
/// keeps results right rather than a path that runs.
void referenceSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float beta, float *c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += (transA ? a[p * lda + i] : a[i * lda + p]) *
               (transB ? b[j * ldb + p] : b[p * ldb + j]);
      float &out = c[i * ldc + j];
      out = alpha * sum + (beta == 0 ? 0.0f : beta * out);
    }
}

} // namespace

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0 || alpha == 0) {
    // The result is beta * C (and C may hold NaNs from the arena when beta
    // is 0, which must not reach the output).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  if (batchInvariant())
    return invariantSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta,
                          c, ldc);
  static thread_local bool serial = (omp_set_num_threads(1), true);
  (void)serial;
  if (dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, alpha, a, lda,
                 b, ldb, beta, c, ldc) != dnnl_success)
    referenceSgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c,
                   ldc);
}

void prepareGemm() {
  static std::once_flag once;
  std::call_once(once, [] {
    float a[16] = {}, b[16] = {}, c[16];
    sgemm(false, false, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f, c, 4);
  });
}

/// Below this many multiply-adds a product runs on one thread: splitting
/// it costs more than it saves (a wake-up is a few microseconds).
constexpr int64_t kParallelGemmWork = 1 << 18;
/// Column blocks of a split by columns are multiples of this (one cache
/// line of C and of B's columns).
constexpr int64_t kColumnQuantum = 16;

void parallelSgemm(ThreadPool &pool, bool transA, bool transB, int64_t m,
                   int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc) {
  int64_t threads = pool.size();
  if (threads == 1 || m * n * k < kParallelGemmWork)
    return sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // Rows of C when each thread gets a few (B is then read by every thread,
  // from the shared cache); otherwise blocks of columns, so that a few rows
  // against a large B (decoding) read each part of B once.
  if (m >= 4 * threads) {
    pool.parallelFor(m, (m + threads - 1) / threads,
                     [&](int64_t r0, int64_t r1) {
                       sgemm(transA, transB, r1 - r0, n, k, alpha,
                             transA ? a + r0 : a + r0 * lda, lda, b, ldb, beta,
                             c + r0 * ldc, ldc);
                     });
    return;
  }
  int64_t blocks = (n + kColumnQuantum - 1) / kColumnQuantum;
  pool.parallelFor(
      blocks, (blocks + threads - 1) / threads, [&](int64_t b0, int64_t b1) {
        int64_t c0 = b0 * kColumnQuantum;
        int64_t c1 = std::min(n, b1 * kColumnQuantum);
        sgemm(transA, transB, m, c1 - c0, k, alpha, a, lda,
              transB ? b + c0 * ldb : b + c0, ldb, beta, c + c0, ldc);
      });
}

absl::StatusOr<MatMulShapes> planMatMul(KernelContext &ctx) {
  const Shape &shapeA = ctx.in(0).shape, &shapeB = ctx.in(1).shape;
  if (shapeA.rank == 0 || shapeB.rank == 0)
    return ctx.error("operands must have rank >= 1");
  // Rank-1 operands become a row (A) or a column (B), removed afterwards.
  Shape sa = shapeA, sb = shapeB;
  if (sa.rank == 1)
    sa = Shape{1, sa[0]};
  if (sb.rank == 1)
    sb = Shape{sb[0], 1};
  MatMulShapes p;
  p.m = sa[sa.rank - 2];
  p.k = sa[sa.rank - 1];
  p.n = sb[sb.rank - 1];
  if (sb[sb.rank - 2] != p.k)
    return ctx.error("inner dimensions differ: ", shapeA.str(), " x ",
                     shapeB.str());
  p.batchA.rank = sa.rank - 2;
  p.batchB.rank = sb.rank - 2;
  std::copy(sa.dims, sa.dims + p.batchA.rank, p.batchA.dims);
  std::copy(sb.dims, sb.dims + p.batchB.rank, p.batchB.dims);
  const Shape *batches[] = {&p.batchA, &p.batchB};
  MOERT_RETURN_IF_ERROR(broadcastOrError(ctx, batches, 2, p.batch));
  Shape shape = p.batch;
  if (shapeA.rank > 1)
    shape.push(p.m);
  if (shapeB.rank > 1)
    shape.push(p.n);
  if (shape.rank > kMaxRank)
    return ctx.error("result rank exceeds ", kMaxRank);
  MOERT_ASSIGN_OR_RETURN(p.out, ctx.allocate(0, shape));
  if (!fitsBlas(p.m) || !fitsBlas(p.n) || !fitsBlas(p.k))
    return ctx.error("matrix dimensions exceed 2^31");
  return p;
}

absl::StatusOr<GemmShapes> planGemm(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::GemmAttrs>();
  const Shape &shapeA = ctx.in(0).shape, &shapeB = ctx.in(1).shape;
  GemmShapes g;
  g.transA = attrs->trans_a();
  g.transB = attrs->trans_b();
  g.m = g.transA ? shapeA[1] : shapeA[0];
  g.k = g.transA ? shapeA[0] : shapeA[1];
  int64_t kb = g.transB ? shapeB[1] : shapeB[0];
  g.n = g.transB ? shapeB[0] : shapeB[1];
  if (g.k != kb)
    return ctx.error("inner dimensions differ: ", shapeA.str(),
                     g.transA ? "^T" : "", " x ", shapeB.str(),
                     g.transB ? "^T" : "");
  MOERT_ASSIGN_OR_RETURN(g.out, ctx.allocate(0, Shape{g.m, g.n}));
  if (!fitsBlas(g.m) || !fitsBlas(g.n) || !fitsBlas(g.k))
    return ctx.error("matrix dimensions exceed 2^31");
  g.addsC = ctx.has(2) && attrs->beta() != 0;
  if (g.addsC) {
    // Y starts as C broadcast to [M, N] (unidirectional).
    const Shape &shapeC = ctx.in(2).shape;
    Shape target;
    const Shape *shapes[] = {&g.out->shape, &shapeC};
    if (!broadcastShapes(shapes, 2, target) || target != g.out->shape)
      return ctx.error("C of shape ", shapeC.str(), " does not broadcast to ",
                       g.out->shape.str());
  }
  return g;
}

namespace {

//===----------------------------------------------------------------------===//
// MatMul (numpy matmul semantics)
//===----------------------------------------------------------------------===//

absl::Status matmulKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(MatMulShapes p, planMatMul(ctx));
  int64_t m = p.m, n = p.n, k = p.k;
  const float *pa = ctx.in(0).as<const float>();
  const float *pb = ctx.in(1).as<const float>();
  float *pc = p.out->as<float>();
  int64_t count = p.batch.numel();
  if (p.batchB.numel() == 1 && p.batchA.numel() == count &&
      fitsBlas(count * m)) {
    // B is one matrix: fold A's batch into its rows, one call.
    parallelSgemm(ctx.pool(), false, false, count * m, n, k, 1.0f, pa, k, pb, n,
                  0.0f, pc, n);
    return absl::OkStatus();
  }
  // The matrices' offsets, then either one product after another, each
  // split over the threads, or (small products: attention's per-head ones)
  // whole products shared out among the threads.
  const Shape *batches[] = {&p.batchA, &p.batchB};
  BroadcastLoop loop(p.batch, batches, 2);
  std::vector<int64_t> offsetsA(count), offsetsB(count);
  loop.forEachRun(0, count, [&](int64_t o, const int64_t *offs, int64_t len) {
    int64_t strideA = loop.innerStride(0), strideB = loop.innerStride(1);
    for (int64_t i = 0; i < len; ++i) {
      offsetsA[o + i] = (offs[0] + i * strideA) * m * k;
      offsetsB[o + i] = (offs[1] + i * strideB) * k * n;
    }
  });
  auto product = [&](int64_t i, auto &&gemm) {
    gemm(false, false, m, n, k, 1.0f, pa + offsetsA[i], k, pb + offsetsB[i], n,
         0.0f, pc + i * m * n, n);
  };
  if (m * n * k >= kParallelGemmWork) {
    for (int64_t i = 0; i < count; ++i)
      product(i, [&](auto... args) { parallelSgemm(ctx.pool(), args...); });
    return absl::OkStatus();
  }
  int64_t grain = std::max<int64_t>(1, kParallelGemmWork / (m * n * k + 1));
  ctx.pool().parallelFor(count, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      product(i, [](auto... args) { sgemm(args...); });
  });
  return absl::OkStatus();
}

absl::Status validateMatMul(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.sameInTypes(0, 1));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  int ra = check.in(0).rank, rb = check.in(1).rank;
  if (ra == 0 || rb == 0)
    return check.error("operands must have rank >= 1");
  int batch = std::max(ra, 2) - 2;
  batch = std::max(batch, std::max(rb, 2) - 2);
  return check.outRank(0, batch + (ra > 1) + (rb > 1));
}

//===----------------------------------------------------------------------===//
// Gemm
//===----------------------------------------------------------------------===//

/// A Gemm of a few rows by B^T, B an f32 [N, K] matrix (torch's export of
/// an nn.Linear of 2-D inputs: routers), with alpha 1 and no C or a bias
/// row C [N] with beta 1, through the register tiles (kernels/tiles.h),
/// split by columns over the threads: a row's result then does not depend
/// on the rows beside it, so a router scores a sequence decoding in a batch
/// of up to kInvariantRowsF32 as it scores it alone. Returns false, having done
/// nothing, for any other Gemm (and for K = 0, whose result is C alone).
bool tiledGemm(KernelContext &ctx, const GemmShapes &g,
               const fb::GemmAttrs *attrs) {
  if (g.transA || !g.transB || attrs->alpha() != 1.0f || g.k == 0 ||
      !hasF32Tiles() || g.m > tiledRows(StreamWeights::F32))
    return false;
  const Tensor &a = ctx.in(0), &b = ctx.in(1);
  if (a.dtype != DType::F32 || b.dtype != DType::F32)
    return false;
  const float *bias = nullptr;
  if (g.addsC) {
    const Tensor &c = ctx.in(2);
    bool row = c.dtype == DType::F32 &&
               ((c.shape.rank == 1 && c.shape[0] == g.n) ||
                (c.shape.rank == 2 && c.shape[0] == 1 && c.shape[1] == g.n));
    if (attrs->beta() != 1.0f || !row)
      return false;
    bias = c.as<const float>();
  }
  const float *x = a.as<const float>();
  float *y = g.out->as<float>();
  auto columns = [&](int64_t j0, int64_t j1) {
    tileProject(x, g.m, g.k, b.data, StreamWeights::F32, j0, j1 - j0, nullptr,
                bias, y + j0, g.n);
  };
  const int64_t threads = ctx.pool().size();
  if (threads == 1 || g.m * g.n * g.k < kParallelGemmWork) {
    columns(0, g.n);
    return true;
  }
  int64_t per = (g.n + threads - 1) / threads;
  ctx.pool().parallelFor(
      g.n, (per + kColumnQuantum - 1) / kColumnQuantum * kColumnQuantum,
      columns);
  return true;
}

absl::Status gemmKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::GemmAttrs>();
  const Tensor &a = ctx.in(0);
  const Tensor &b = ctx.in(1);
  MOERT_ASSIGN_OR_RETURN(GemmShapes g, planGemm(ctx));
  if (tiledGemm(ctx, g, attrs))
    return absl::OkStatus();
  Tensor *out = g.out;
  float beta = 0;
  if (g.addsC) {
    // Y starts as C broadcast to [M, N].
    const Tensor &c = ctx.in(2);
    const Shape *cs[] = {&c.shape};
    BroadcastLoop loop(out->shape, cs, 1);
    const float *pc = c.as<const float>();
    float *py = out->as<float>();
    int64_t stride = loop.innerStride(0);
    loop.forEachRun(0, out->numel(),
                    [&](int64_t o, const int64_t *offs, int64_t len) {
                      for (int64_t i = 0; i < len; ++i)
                        py[o + i] = pc[offs[0] + i * stride];
                    });
    beta = attrs->beta();
  }
  parallelSgemm(ctx.pool(), g.transA, g.transB, g.m, g.n, g.k, attrs->alpha(),
                a.as<const float>(), a.shape[1], b.as<const float>(),
                b.shape[1], beta, out->as<float>(), g.n);
  return absl::OkStatus();
}

absl::Status validateGemm(const StepCheck &check) {
  for (int i = 0; i < 3; ++i)
    MOERT_RETURN_IF_ERROR(check.inType(i, kFloatTypes));
  MOERT_RETURN_IF_ERROR(check.inRank(0, 2));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 2));
  if (check.has(2) && check.in(2).rank > 2)
    return check.error("C has rank ", check.in(2).rank, "; expected <= 2");
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, 2);
}

//===----------------------------------------------------------------------===//
// Einsum
//===----------------------------------------------------------------------===//

/// Labels: 'a'-'z' are 0-25, 'A'-'Z' 26-51, ellipsis dims 52 and up (right
/// aligned across operands, so that they broadcast like numpy's).
constexpr int kEllipsisBase = 52;

struct EinsumSpec {
  std::vector<std::vector<int>> inputs;
  std::vector<int> output;
};

int labelOf(char c) {
  if (c >= 'a' && c <= 'z')
    return c - 'a';
  if (c >= 'A' && c <= 'Z')
    return 26 + (c - 'A');
  return -1;
}

/// Parses `equation` for operands of the given ranks. Returns an error
/// message, empty on success.
std::string parseEinsum(absl::string_view equation,
                        const std::vector<int> &ranks, EinsumSpec &spec) {
  std::string eq;
  for (char c : equation)
    if (c != ' ')
      eq.push_back(c);
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  // Split the terms; each is letters with at most one "...".
  std::vector<std::string> terms;
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (terms.size() != ranks.size())
    return absl::StrCat("equation has ", terms.size(), " operand terms for ",
                        ranks.size(), " inputs");
  struct Term {
    std::vector<int> before, after;
    bool ellipsis = false;
  };
  auto parseTerm = [](const std::string &text, Term &term) -> bool {
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 3, "...") == 0) {
        if (term.ellipsis)
          return false;
        term.ellipsis = true;
        i += 2;
        continue;
      }
      int label = labelOf(text[i]);
      if (label < 0)
        return false;
      (term.ellipsis ? term.after : term.before).push_back(label);
    }
    return true;
  };
  std::vector<Term> parsed(terms.size());
  int ellipsisRank = 0;
  for (size_t t = 0; t < terms.size(); ++t) {
    Term &term = parsed[t];
    if (!parseTerm(terms[t], term))
      return absl::StrCat("operand term '", terms[t], "' is malformed");
    int named = static_cast<int>(term.before.size() + term.after.size());
    if (term.ellipsis ? ranks[t] < named : ranks[t] != named)
      return absl::StrCat("operand term '", terms[t], "' does not match ",
                          "input ", t, " of rank ", ranks[t]);
    if (term.ellipsis)
      ellipsisRank = std::max(ellipsisRank, ranks[t] - named);
  }
  spec.inputs.assign(terms.size(), {});
  int counts[kEllipsisBase] = {};
  for (size_t t = 0; t < terms.size(); ++t) {
    const Term &term = parsed[t];
    std::vector<int> &labels = spec.inputs[t];
    labels = term.before;
    if (term.ellipsis) {
      int own =
          ranks[t] - static_cast<int>(term.before.size() + term.after.size());
      for (int j = 0; j < own; ++j)
        labels.push_back(kEllipsisBase + ellipsisRank - own + j);
    }
    labels.insert(labels.end(), term.after.begin(), term.after.end());
    for (int label : labels)
      if (label < kEllipsisBase)
        ++counts[label];
  }
  spec.output.clear();
  if (arrow == std::string::npos) {
    // Implicit output: ellipsis dims, then labels seen once, in ASCII order
    // ('A' < 'a').
    for (int j = 0; j < ellipsisRank; ++j)
      spec.output.push_back(kEllipsisBase + j);
    for (int label = 26; label < kEllipsisBase; ++label)
      if (counts[label] == 1)
        spec.output.push_back(label);
    for (int label = 0; label < 26; ++label)
      if (counts[label] == 1)
        spec.output.push_back(label);
    return "";
  }
  Term out;
  std::string rhs = eq.substr(arrow + 2);
  if (!parseTerm(rhs, out))
    return absl::StrCat("output term '", rhs, "' is malformed");
  spec.output = out.before;
  if (out.ellipsis)
    for (int j = 0; j < ellipsisRank; ++j)
      spec.output.push_back(kEllipsisBase + j);
  spec.output.insert(spec.output.end(), out.after.begin(), out.after.end());
  bool seen[kEllipsisBase] = {};
  for (int label : spec.output) {
    if (label >= kEllipsisBase)
      continue;
    if (seen[label] || counts[label] == 0)
      return absl::StrCat("output label '", rhs, "' repeats a label or names ",
                          "one that no operand has");
    seen[label] = true;
  }
  if (!out.ellipsis && ellipsisRank > 0)
    return "the output must keep the ellipsis dimensions";
  return "";
}

/// An operand as a strided view over labels (repeated labels: diagonal).
struct View {
  const float *data = nullptr;
  std::map<int, int64_t> strides;
};

/// Copies `view` into `dst`, contiguous with dims `order` (labels the view
/// lacks get stride 0, i.e. broadcast).
void pack(const View &view, const std::vector<int> &order,
          const std::map<int, int64_t> &sizes, float *dst) {
  int rank = static_cast<int>(order.size());
  std::vector<int64_t> dims(rank), strides(rank), index(rank, 0);
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    dims[d] = sizes.at(order[d]);
    auto it = view.strides.find(order[d]);
    strides[d] = it == view.strides.end() ? 0 : it->second;
    total *= dims[d];
  }
  if (total == 0)
    return;
  int64_t inner = rank ? dims[rank - 1] : 1;
  int64_t innerStride = rank ? strides[rank - 1] : 0;
  for (int64_t done = 0; done < total; done += inner) {
    int64_t offset = 0;
    for (int d = 0; d + 1 < rank; ++d)
      offset += index[d] * strides[d];
    for (int64_t i = 0; i < inner; ++i)
      *dst++ = view.data[offset + i * innerStride];
    for (int d = rank - 2; d >= 0; --d) {
      if (++index[d] < dims[d])
        break;
      index[d] = 0;
    }
  }
}

absl::Status einsumKernel(KernelContext &ctx) {
  int numInputs = ctx.numInputs();
  std::vector<int> ranks(numInputs);
  for (int i = 0; i < numInputs; ++i)
    ranks[i] = ctx.in(i).shape.rank;
  EinsumSpec spec;
  std::string problem = parseEinsum(
      ctx.attrs<fb::EinsumAttrs>()->equation()->c_str(), ranks, spec);
  if (!problem.empty())
    return ctx.error(problem);

  // Label sizes; a size of 1 broadcasts against a larger one.
  std::map<int, int64_t> sizes;
  std::vector<View> views(numInputs);
  for (int i = 0; i < numInputs; ++i) {
    const Tensor &t = ctx.in(i);
    int64_t strides[kMaxRank];
    contiguousStrides(t.shape, strides);
    views[i].data = t.as<const float>();
    for (int d = 0; d < t.shape.rank; ++d) {
      int label = spec.inputs[i][d];
      int64_t size = t.shape[d];
      auto [it, fresh] = sizes.emplace(label, size);
      if (!fresh && it->second != size) {
        if (it->second != 1 && size != 1)
          return ctx.error("label sizes disagree: ", it->second, " vs ", size,
                           " (input ", i, " dim ", d, ")");
        it->second = std::max(it->second, size);
      }
      if (size != 1)
        views[i].strides[label] += strides[d];
      else
        views[i].strides.emplace(label, 0);
    }
  }
  Shape shape;
  for (int label : spec.output)
    shape.push(sizes.at(label));
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));

  // Contract left to right; each step keeps the labels still needed.
  std::vector<std::vector<float>> buffers;
  View acc = views[0];
  for (int i = 1; i < numInputs; ++i) {
    std::vector<bool> needed(kEllipsisBase + kMaxRank * 2, false);
    for (int label : spec.output)
      needed[label] = true;
    for (int j = i + 1; j < numInputs; ++j)
      for (int label : spec.inputs[j])
        needed[label] = true;
    std::vector<int> batch, rows, cols, inner;
    const View &rhs = views[i];
    for (const auto &[label, stride] : acc.strides) {
      bool inRhs = rhs.strides.count(label) > 0;
      if (needed[label])
        (inRhs ? batch : rows).push_back(label);
      else
        inner.push_back(label);
    }
    for (const auto &[label, stride] : rhs.strides)
      if (!acc.strides.count(label))
        (needed[label] ? cols : inner).push_back(label);
    auto product = [&](const std::vector<int> &labels) {
      int64_t n = 1;
      for (int label : labels)
        n *= sizes.at(label);
      return n;
    };
    int64_t nb = product(batch), m = product(rows), n = product(cols),
            k = product(inner);
    if (!fitsBlas(m) || !fitsBlas(n) || !fitsBlas(k))
      return ctx.error("contraction dimensions exceed 2^31");
    std::vector<float> packedA(nb * m * k), packedB(nb * k * n);
    std::vector<int> orderA = batch, orderB = batch;
    orderA.insert(orderA.end(), rows.begin(), rows.end());
    orderA.insert(orderA.end(), inner.begin(), inner.end());
    orderB.insert(orderB.end(), inner.begin(), inner.end());
    orderB.insert(orderB.end(), cols.begin(), cols.end());
    pack(acc, orderA, sizes, packedA.data());
    pack(rhs, orderB, sizes, packedB.data());
    std::vector<float> result(nb * m * n);
    for (int64_t b = 0; b < nb; ++b)
      parallelSgemm(ctx.pool(), false, false, m, n, k, 1.0f,
                    packedA.data() + b * m * k, k, packedB.data() + b * k * n,
                    n, 0.0f, result.data() + b * m * n, n);
    buffers.push_back(std::move(result));
    // The result is contiguous over batch, rows, cols.
    View next;
    next.data = buffers.back().data();
    std::vector<int> order = batch;
    order.insert(order.end(), rows.begin(), rows.end());
    order.insert(order.end(), cols.begin(), cols.end());
    int64_t stride = 1;
    for (int d = static_cast<int>(order.size()) - 1; d >= 0; --d) {
      next.strides[order[d]] = sizes.at(order[d]) == 1 ? 0 : stride;
      stride *= sizes.at(order[d]);
    }
    acc = std::move(next);
  }

  // Sum the labels the output drops, then lay out in output order.
  std::vector<int> dropped;
  for (const auto &[label, stride] : acc.strides)
    if (std::find(spec.output.begin(), spec.output.end(), label) ==
        spec.output.end())
      dropped.push_back(label);
  std::vector<int> order = spec.output;
  order.insert(order.end(), dropped.begin(), dropped.end());
  int64_t reduce = 1;
  for (int label : dropped)
    reduce *= sizes.at(label);
  float *dst = out->as<float>();
  int64_t count = out->numel();
  if (reduce == 1) {
    pack(acc, order, sizes, dst);
    return absl::OkStatus();
  }
  std::vector<float> expanded(count * reduce);
  pack(acc, order, sizes, expanded.data());
  for (int64_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int64_t r = 0; r < reduce; ++r)
      sum += expanded[i * reduce + r];
    dst[i] = static_cast<float>(sum);
  }
  return absl::OkStatus();
}

absl::Status validateEinsum(const StepCheck &check) {
  std::vector<int> ranks;
  for (int i = 0; i < check.numInputs(); ++i) {
    MOERT_RETURN_IF_ERROR(check.inType(i, kFloatTypes));
    ranks.push_back(check.in(i).rank);
  }
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  EinsumSpec spec;
  std::string problem = parseEinsum(
      check.attrs<fb::EinsumAttrs>()->equation()->c_str(), ranks, spec);
  if (!problem.empty())
    return check.error("equation '",
                       check.attrs<fb::EinsumAttrs>()->equation()->c_str(),
                       "': ", problem);
  return check.outRank(0, static_cast<int>(spec.output.size()));
}

} // namespace

void registerMatMulOps(OpRegistry &r) {
  r.add(fb::OpKind::MatMul,
        makeOp("MatMul", 2, 2, validateMatMul, matmulKernel));
  OpDef gemm =
      makeOp("Gemm", 2, 3, validateGemm, gemmKernel, fb::Attrs::GemmAttrs);
  gemm.optionalInputs = 0b100;
  r.add(fb::OpKind::Gemm, gemm);
  r.add(fb::OpKind::Einsum, makeOp("Einsum", 1, kVariadic, validateEinsum,
                                   einsumKernel, fb::Attrs::EinsumAttrs));
}

} // namespace moert::detail
