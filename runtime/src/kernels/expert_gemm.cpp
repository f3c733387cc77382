//===- expert_gemm.cpp - oneDNN matmul blocks of the experts --------------===//
//
// A primitive per block shape (rows rounded up to a bucket for bf16, exact
// for f32; K, columns, the weights' stride and layout), created on first use
// and kept for the process: rowBucket leaves at most 20 row counts per shape
// up to the 256 rows of a segment (f32: at most 256, each cheap to make), so
// the cache stays small, and a fixed row count lets oneDNN pick its brgemm
// kernels (AMX for bf16), which a run-time row dimension
// (DNNL_RUNTIME_DIM_VAL) does not in oneDNN 2.6.
//
// Weights are described by strides over the plan's storage, so no copy or
// reorder happens for bf16 (int8 widens a block to bf16, exact). A reordered
// ("packed", format_tag::any) copy would double the experts' memory (and
// bypass the expert cache's pages) for a small gain on f32 and a loss on
// bf16, so the plain layout stays.
//
// f32 blocks run oneDNN's f32 matmul where it picks brgemm kernels (AVX-512),
// at their exact row count (padding rows to a bucket, as bf16 does, lost the
// gain), on the plan's [out, in] weights through strides. oneDNN 2.6 runs a
// strided [K, out] f32 block as its sgemm, not brgemm: such blocks are
// declined (the caller's sgemm), as are f32 blocks on CPUs without AVX-512.
//
// The measurements behind these choices are in bench/README.md ("Kernel
// measurements behind the CPU kernels' design").
//
//===----------------------------------------------------------------------===//

#include "kernels/expert_gemm.h"
#include "kernels/batch_invariant.h"

#include <oneapi/dnnl/dnnl.hpp>

#if defined(__x86_64__)
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined
// operands), wrongly.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

extern "C" void omp_set_num_threads(int);

namespace moert::detail {
namespace {

using dnnl::memory;

dnnl::engine &cpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

/// A cached primitive's shape: rows (a bucket), inner size, columns, the
/// weights' stride and layout. Source and destination are dense.
struct Key {
  int64_t rows, K, m, ldw;
  bool inOut;
  /// f32 source and weights; else bf16.
  bool f32;
  bool operator<(const Key &o) const {
    return std::tie(rows, K, m, ldw, inOut, f32) <
           std::tie(o.rows, o.K, o.m, o.ldw, o.inOut, o.f32);
  }
};

struct Entry {
  dnnl::matmul primitive;
  memory::desc src, weights, dst, scratchpad;
};

/// The primitive of `key`, or null when oneDNN refuses it (remembered, so
/// that a refused shape is asked once).
const Entry *primitiveFor(const Key &key) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<Entry>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second.get();
  std::unique_ptr<Entry> entry;
  try {
    auto type = key.f32 ? memory::data_type::f32 : memory::data_type::bf16;
    memory::desc src({key.rows, key.K}, type, memory::format_tag::ab);
    memory::desc weights({key.K, key.m}, type,
                         key.inOut ? memory::dims{key.ldw, 1}
                                   : memory::dims{1, key.ldw});
    memory::desc dst({key.rows, key.m}, memory::data_type::f32,
                     memory::format_tag::ab);
    // The scratchpad is the caller's: the library's own one is shared by
    // all primitives (Debian builds oneDNN without
    // DNNL_ENABLE_CONCURRENT_EXEC), and the pool's threads run blocks
    // concurrently.
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr,
                                    cpuEngine());
    // f32 blocks pay only with oneDNN's brgemm kernels (AVX-512); its other
    // f32 matmuls are the sgemm the caller runs anyway.
    if (key.f32 && std::strncmp(pd.impl_info_str(), "brg", 3) != 0)
      return (cache[key] = nullptr).get();
    entry.reset(
        new Entry{dnnl::matmul(pd), src, weights, dst, pd.scratchpad_desc()});
  } catch (const dnnl::error &) {
    entry.reset();
  }
  return (cache[key] = std::move(entry)).get();
}

/// The rows a block of n rows runs as: powers of two up to 16, then
/// multiples of 16, so that a step's varying row counts share a few
/// primitives (creating one JITs its kernels, milliseconds each: one per
/// row count made a test of many experts 50x slower) for at most 15 padded
/// rows.
int64_t rowBucket(int64_t n) {
  if (n > 16)
    return (n + 15) / 16 * 16;
  int64_t rows = 1;
  while (rows < n)
    rows *= 2;
  return rows;
}

/// The thread's scratch of at least `count` elements.
template <typename T> T *threadBuffer(std::vector<T> &buffer, size_t count) {
  if (buffer.size() < count)
    buffer.resize(count);
  return buffer.data();
}

uint16_t bf16Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1)) >> 16);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define MOERT_AVX512_BF16                                                      \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
/// 16 at a time with vcvtneps2bf16 (round to nearest even, NaN kept as a
/// quiet NaN, as bf16Bits); only called where the CPU has AVX512-BF16 (the
/// bf16 blocks run nowhere else).
MOERT_AVX512_BF16 void roundToBf16Avx512(const float *in, int64_t count,
                                         uint16_t *out) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + i), (__m256i)h);
  }
  for (; i < count; ++i)
    out[i] = bf16Bits(in[i]);
}

/// int8 as bf16, 16 at a time: sign-extend, convert (exact), keep the top
/// half of each f32.
MOERT_AVX512_BF16 void widenI8ToBf16Avx512(const int8_t *in, int64_t count,
                                           uint16_t *out) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512i q = _mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i *>(in + i)));
    __m512i bits =
        _mm512_srli_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(q)), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + i),
                        _mm512_cvtepi32_epi16(bits));
  }
  for (; i < count; ++i) {
    float value = in[i];
    uint32_t wide;
    std::memcpy(&wide, &value, sizeof wide);
    out[i] = static_cast<uint16_t>(wide >> 16);
  }
}
#endif

/// int8 as bf16: the f32 of a small integer has only its top 16 bits set.
/// Called only for the bf16 blocks, so on x86-64 the CPU has AVX512-BF16.
void widenI8ToBf16(const int8_t *in, int64_t count, uint16_t *out) {
#if defined(__x86_64__) && defined(__GNUC__)
  return widenI8ToBf16Avx512(in, count, out);
#else
  for (int64_t i = 0; i < count; ++i) {
    float value = in[i];
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    out[i] = static_cast<uint16_t>(bits >> 16);
  }
#endif
}

} // namespace

namespace {
std::atomic<bool> bf16Allowed{true};
std::atomic<bool> f32Allowed{true};
} // namespace

void allowF32Matmul(bool allowed) { f32Allowed = allowed; }

bool hasBf16Matmul() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has && bf16Allowed.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void allowBf16Matmul(bool allowed) { bf16Allowed = allowed; }

BlockGemm blockGemmFor(StreamWeights type) {
  return (type == StreamWeights::BF16 || type == StreamWeights::I8) &&
                 hasBf16Matmul() && !batchInvariant()
             ? BlockGemm::Bf16
             : BlockGemm::Widen;
}

void roundToBf16(const float *in, int64_t count, uint16_t *out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (hasBf16Matmul())
    return roundToBf16Avx512(in, count, out);
#endif
  for (int64_t i = 0; i < count; ++i)
    out[i] = bf16Bits(in[i]);
}

// The crossover between streaming and GEMM blocks. The streaming kernels
// (stream.cpp) read each weight element once and do one FMA per row from
// registers: per weight element and row of an expert they cost about a
// fixed read s0 plus n times one multiply-add s1, where a GEMM block costs
// about g0 (the read, oneDNN's packing of the block, and for bf16 the copy
// into AMX's layout) plus n times g1, with g1 < s1. Streaming wins for n <
// (g0 - s0) / (s1 - g1). On AVX-512 the 16-lane kernels, with up to four
// rows per weight vector, were measured (moe-stream-bench, per CPU second,
// 1 thread) faster than the GEMM blocks up to 4 rows of f32 and bf16
// [out, K] weights, 6 of int8 and 8 of f16 (oneDNN has no f16 matmul here:
// f16 widens), and up to 8 rows of 16-bit and int8 [K, out] weights (4 of
// f32, where oneDNN's sgemm is level with them at 8). On CPUs
// without AVX-512 the GEMMs' FMAs are the streaming kernels' width, and the
// crossover is 16 rows for [out, K] weights and 8 for [K, out] ones (split
// along K: the partial products outgrow L1 past 8). The measurements are
// in bench/README.md ("Several rows per weight row", and "Kernel
// measurements behind the CPU kernels' design").
int64_t streamedRows(StreamWeights type, bool inOut) {
  // Whether rows stream depends on their count: batch-invariant mode runs
  // every count through the GEMM path.
  if (batchInvariant())
    return 0;
  constexpr int64_t kNarrowRows = 16, kSplitRows = 8;
  if (!hasAvx512Streams())
    return inOut ? kSplitRows : kNarrowRows;
  if (inOut)
    return type == StreamWeights::F32 ? 4 : kSplitRows;
  switch (type) {
  case StreamWeights::F32:
  case StreamWeights::BF16:
    return 4;
  case StreamWeights::I8:
    return 6;
  case StreamWeights::F16:
    return 8;
  }
  return 4;
}

bool matmulBlock(const float *x, int64_t n, int64_t K, const void *w,
                 StreamWeights type, int64_t out, bool inOut, int64_t c0,
                 int64_t m, const float *scale, const float *bias, float *c,
                 int64_t ldc) {
  if (n == 0 || m == 0)
    return true;
  if (batchInvariant())
    return false;
  const bool f32 = type == StreamWeights::F32;
  if (f32 ? !f32Allowed.load(std::memory_order_relaxed)
          : blockGemmFor(type) != BlockGemm::Bf16)
    return false;
  const auto *storage = static_cast<const uint8_t *>(w);
  static thread_local std::vector<uint16_t> wBuffer;
  const void *weights;
  int64_t ldw;
  if (f32) {
    weights = storage + (inOut ? c0 : c0 * K) * 4;
    ldw = inOut ? out : K;
  } else if (type == StreamWeights::I8) {
    // Widened block: [K, m] or [m, K], dense.
    uint16_t *block = threadBuffer(wBuffer, K * m);
    const auto *q = reinterpret_cast<const int8_t *>(storage);
    if (inOut)
      for (int64_t k = 0; k < K; ++k)
        widenI8ToBf16(q + k * out + c0, m, block + k * m);
    else
      widenI8ToBf16(q + c0 * K, m * K, block);
    weights = block;
    ldw = inOut ? m : K;
  } else {
    weights = storage + (inOut ? c0 : c0 * K) * 2;
    ldw = inOut ? out : K;
  }
  // f32 runs its exact row count: its brgemm primitives are cheap to make
  // (bf16's AMX ones are not), and padding 65 rows to 80 cost more than
  // brgemm gains over sgemm.
  const int64_t rows = f32 ? n : rowBucket(n);
  const Entry *entry = primitiveFor({rows, K, m, ldw, inOut, f32});
  if (!entry)
    return false;
  static thread_local bool serial = (omp_set_num_threads(1), true);
  (void)serial;
  // The source rows rounded to bf16 and padded with zeros to the bucket (f32
  // rows are read in place), and a dense destination the rows fit.
  static thread_local std::vector<uint16_t> xBf16;
  static thread_local std::vector<float> dense;
  static thread_local std::vector<uint8_t> scratchpad;
  const void *src = x;
  if (!f32) {
    uint16_t *rounded = threadBuffer(xBf16, rows * K);
    roundToBf16(x, n * K, rounded);
    std::fill(rounded + n * K, rounded + rows * K, uint16_t(0));
    src = rounded;
  }
  float *y = threadBuffer(dense, rows * m);
  static thread_local dnnl::stream stream(cpuEngine());
  dnnl::engine &engine = cpuEngine();
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(entry->src, engine, const_cast<void *>(src))},
      {DNNL_ARG_WEIGHTS,
       memory(entry->weights, engine, const_cast<void *>(weights))},
      {DNNL_ARG_DST, memory(entry->dst, engine, y)}};
  if (size_t bytes = entry->scratchpad.get_size())
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(entry->scratchpad, engine,
                                             threadBuffer(scratchpad, bytes)));
  entry->primitive.execute(stream, args);
  // Out to c: int8 sums scaled, then the bias.
  const float *s = scale ? scale + c0 : nullptr;
  const float *b = bias ? bias + c0 : nullptr;
  for (int64_t r = 0; r < n; ++r) {
    const float *yr = y + r * m;
    float *cr = c + r * ldc;
    if (s && b)
      for (int64_t j = 0; j < m; ++j)
        cr[j] = yr[j] * s[j] + b[j];
    else if (s)
      for (int64_t j = 0; j < m; ++j)
        cr[j] = yr[j] * s[j];
    else if (b)
      for (int64_t j = 0; j < m; ++j)
        cr[j] = yr[j] + b[j];
    else
      std::copy(yr, yr + m, cr);
  }
  return true;
}

} // namespace moert::detail
