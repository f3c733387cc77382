//===- expert_logic.h - Per-thread logic of the expert GEMMs ----*- C++ -*-===//
//
// What one thread of the Experts / SharedExpert kernels (expert_kernels.cu)
// computes, as MOERT_HD functions that the unit test
// (runtime/tests/backends/cuda/cuda_expert_logic_test.cpp) runs on the host
// over every block and thread index of each launch, against the CPU backend.
//
// The step runs two projections per expert row tile: the first (w1, and w3
// or the up half of a fused w1) with the activation and biases applied as
// its epilogue, into an [N, F] intermediate in scratch; the second (w2) with
// b2 and the shared expert's gate factor, into the output. A projection is
// described by its *units* (outputs: intermediate columns f, or hidden
// columns h) and its *parts* per unit (2 for gated activations: gate and up,
// which the epilogue combines; else 1); virtual GEMM column j is part
// j % parts of unit j / parts, so that the gate and up of one unit are always
// adjacent and meet in the same thread.
//
// Which expert and rows a block works on comes from the device offsets
// alone: a tile count per expert (tileCount), an exclusive prefix of those
// counts (built on the device), and a binary search of that prefix by the
// block's tile index (findTile). Experts with up to kNarrowRows rows
// (decoding) run "narrow" tiles, bound by reading the weights once; larger
// ones run "wide" tiles of kWideRows rows as shared-memory tiled GEMMs: on
// the tensor cores for bf16 weights (the activations split into two bf16
// terms, see "Wide tiles on tensor cores"), in fp32 SIMT otherwise.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_EXPERT_LOGIC_H
#define MOERT_SRC_CUDA_EXPERT_LOGIC_H

#include "backends/cuda/hd.h"

#include <math.h>
#include <stdint.h>
#ifndef __CUDA_ARCH__
#include <cstring>
#endif

namespace moert::cuda {

//===----------------------------------------------------------------------===//
// The expert network
//===----------------------------------------------------------------------===//

/// fb::Activation's values (experts.cpp checks that they agree).
enum ExpertActivation : int {
  kActRelu = 0,
  kActGelu,
  kActGeluTanh,
  kActSilu,
  kActIdentity,
  kActSiluGlu,
  kActGeluGlu,
  kActGeluTanhGlu,
  kActClampedSwiglu,
  kActReluSquared,
};
/// fb::GluLayout's values.
enum ExpertGlu : int { kGluNone = 0, kGluConcatenated, kGluInterleaved };

/// The weight element types; a weight of type Bf16 or F16 holds the raw
/// 16-bit values of the plan.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
enum ExpertWeightType : int { kWeightF32 = 0, kWeightBf16, kWeightF16 };

/// Sizes and attributes of an expert network (plain data, a kernel
/// parameter).
struct ExpertFfn {
  int activation = kActSiluGlu;
  int glu = kGluNone;
  bool inOut = false; ///< Weights [E, in, out]; else [E, out, in].
  bool hasW3 = false;
  float alpha = 1, beta = 0, limit = 0;
  int64_t experts = 1; ///< E (1 for a shared expert).
  int64_t hidden = 0;  ///< H.
  int64_t inter = 0;   ///< F.
  int64_t w1Out = 0;   ///< F, or 2F for a fused gate/up w1.
};

/// The weight inputs of an expert network step, in the step's input order
/// from its first weight (w1): the rows of an ExpertWeights table.
enum ExpertSlot : int {
  kSlotW1 = 0,
  kSlotB1,
  kSlotW3,
  kSlotB3,
  kSlotW2,
  kSlotB2,
  kExpertSlots
};

/// The device (or, in the test, host) addresses of an expert network's
/// weights; absent biases and w3 are null.
///
/// A tiered step (docs/tiered-experts.md) has no contiguous copy of its
/// paged weights: `table` ([kExpertSlots][experts] addresses) gives expert
/// e's block of slot s at table[s * experts + e] (the expert's [in, out] or
/// [out, in] matrix, or its bias row), null where the slot is not paged
/// (then the contiguous array above) or the expert is not present. Only
/// present experts run (ExpertLaunch::present).
template <typename W> struct ExpertWeights {
  const W *w1 = nullptr, *w3 = nullptr, *w2 = nullptr;
  const float *b1 = nullptr, *b3 = nullptr, *b2 = nullptr;
  const void *const *table = nullptr;
  int64_t experts = 0;

  /// Expert e's block of slot `slot` (`size` elements per expert), from
  /// the table or from `base`; null when neither has it.
  template <typename T>
  MOERT_HD const T *block(const T *base, int slot, int64_t e,
                          int64_t size) const {
    if (table && table[slot * experts + e])
      return static_cast<const T *>(table[slot * experts + e]);
    return base ? base + e * size : nullptr;
  }
};

MOERT_HD inline float floatFromBits(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

MOERT_HD inline float weightToFloat(float w) { return w; }
/// bfloat16 is the upper half of a float.
MOERT_HD inline float weightToFloat(Bf16 w) {
  return floatFromBits(uint32_t(w.bits) << 16);
}
/// IEEE binary16: every value, subnormals, infinities and NaN payloads
/// included, is exact in float.
MOERT_HD inline float weightToFloat(F16 w) {
  uint32_t sign = uint32_t(w.bits & 0x8000u) << 16;
  uint32_t exponent = (w.bits >> 10) & 0x1fu;
  uint32_t mantissa = w.bits & 0x3ffu;
  if (exponent == 0x1f)
    return floatFromBits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24.
    float magnitude = float(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  // Rebias the exponent from 15 to 127.
  return floatFromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

MOERT_HD inline bool isGatedActivation(int activation) {
  return activation >= kActSiluGlu && activation <= kActClampedSwiglu;
}

/// Where output column o of expert e's matrix with `in` inputs and `out`
/// outputs, stored [E, in, out] (inOut) or [E, out, in], starts; its input i
/// is then at i * columnStride(inOut, out).
template <typename W>
MOERT_HD const W *columnStart(const W *w, bool inOut, int64_t e, int64_t in,
                              int64_t out, int64_t o) {
  const W *matrix = w + e * in * out;
  return inOut ? matrix + o : matrix + o * in;
}
MOERT_HD inline int64_t columnStride(bool inOut, int64_t out) {
  return inOut ? out : 1;
}
/// Element (i, o) of that matrix as a float.
template <typename W>
MOERT_HD float loadWeight(const W *w, bool inOut, int64_t e, int64_t in,
                          int64_t out, int64_t i, int64_t o) {
  const W *matrix = w + e * in * out;
  return weightToFloat(inOut ? matrix[i * out + o] : matrix[o * in + i]);
}

/// Where part `part` (0: gate or the only part, 1: up) of intermediate unit
/// `unit` comes from: a column of w3 or of w1.
struct FirstColumn {
  bool fromW3;
  int64_t column;
};
MOERT_HD inline FirstColumn firstColumn(const ExpertFfn &f, int64_t unit,
                                        int part) {
  if (!isGatedActivation(f.activation))
    return {false, unit};
  if (f.hasW3)
    return {part == 1, unit};
  if (f.glu == kGluInterleaved)
    return {false, 2 * unit + part};
  return {false, part * f.inter + unit}; // Concatenated halves.
}

/// The activation of one element (non-gated activations, and the gate side
/// of gated ones), with the CPU kernels' formulas.
MOERT_HD inline float expertSigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}
MOERT_HD inline float expertUnary(int activation, float x) {
  switch (activation) {
  case kActRelu:
    return x < 0 ? 0.0f : x;
  case kActReluSquared:
    return x < 0 ? 0.0f : x * x;
  case kActGelu:
  case kActGeluGlu:
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  case kActGeluTanh:
  case kActGeluTanhGlu: {
    const float alpha = 0.79788456080286536f; // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(alpha * (x + 0.044715f * x * x * x)));
  }
  case kActSilu:
  case kActSiluGlu:
    return x * expertSigmoid(x);
  default:
    return x;
  }
}

/// The intermediate value of a unit from its biased GEMM outputs: v0 (the
/// only part, or the gate) and v1 (the up part of gated activations).
MOERT_HD inline float firstOutput(const ExpertFfn &f, float v0, float v1) {
  if (!isGatedActivation(f.activation))
    return expertUnary(f.activation, v0);
  if (f.activation == kActClampedSwiglu) {
    // limit 0: no clamping. The comparisons keep a NaN operand, as
    // std::min / std::max do on the CPU.
    float limit = f.limit > 0 ? f.limit : floatFromBits(0x7f800000u);
    float gate = limit < v0 ? limit : v0;
    float up = limit < v1 ? limit : v1;
    up = up < -limit ? -limit : up;
    return gate * expertSigmoid(f.alpha * gate) * (up + f.beta);
  }
  return expertUnary(f.activation, v0) * v1;
}

//===----------------------------------------------------------------------===//
// The two projections
//===----------------------------------------------------------------------===//

/// The first projection of expert `expert` for rows [row0, row0 + rows):
/// act[row, unit] = firstOutput(x . w1[:, gate col] + b1, x . up col + b).
template <typename W> struct FirstProjection {
  ExpertFfn f;
  ExpertWeights<W> w;
  int64_t expert, row0;
  float *act; ///< [N, F].

  MOERT_HD int parts() const { return isGatedActivation(f.activation) ? 2 : 1; }
  MOERT_HD int64_t units() const { return f.inter; }
  /// The reduction length.
  MOERT_HD int64_t depth() const { return f.hidden; }
  /// Where virtual column j's weights start (as stored); its input k is at
  /// k * inputStride(). (w3, when present, has w1's F columns.)
  MOERT_HD const W *columnStart(int64_t j) const {
    FirstColumn c = firstColumn(f, j / parts(), int(j % parts()));
    return c.fromW3 ? moert::cuda::columnStart(w3(), f.inOut, 0, f.hidden,
                                               f.inter, c.column)
                    : moert::cuda::columnStart(w1(), f.inOut, 0, f.hidden,
                                               f.w1Out, c.column);
  }
  /// This expert's w1 and w3 matrices.
  MOERT_HD const W *w1() const {
    return w.block(w.w1, kSlotW1, expert, f.hidden * f.w1Out);
  }
  MOERT_HD const W *w3() const {
    return w.block(w.w3, kSlotW3, expert, f.hidden * f.inter);
  }
  MOERT_HD int64_t inputStride() const {
    return columnStride(f.inOut, f.w1Out);
  }
  /// Virtual column j's weight at input k.
  MOERT_HD float weight(int64_t k, int64_t j) const {
    FirstColumn c = firstColumn(f, j / parts(), int(j % parts()));
    return c.fromW3
               ? loadWeight(w3(), f.inOut, 0, f.hidden, f.inter, k, c.column)
               : loadWeight(w1(), f.inOut, 0, f.hidden, f.w1Out, k, c.column);
  }
  MOERT_HD float bias(int64_t unit, int part) const {
    FirstColumn c = firstColumn(f, unit, part);
    const float *b = c.fromW3 ? w.block(w.b3, kSlotB3, expert, f.inter)
                              : w.block(w.b1, kSlotB1, expert, f.w1Out);
    return b ? b[c.column] : 0.0f;
  }
  /// Stores the unit's value for tile row r from its unbiased sums.
  MOERT_HD void store(int64_t r, int64_t unit, float v0, float v1) const {
    float up = parts() == 2 ? v1 + bias(unit, 1) : 0.0f;
    act[(row0 + r) * f.inter + unit] = firstOutput(f, v0 + bias(unit, 0), up);
  }
};

/// The second projection: y[row, h] = (act[row] . w2[:, h] + b2[h]) *
/// gate[row] (gate: the shared expert's per-token factor, or null).
template <typename W> struct SecondProjection {
  ExpertFfn f;
  ExpertWeights<W> w;
  int64_t expert, row0;
  const float *gate;
  float *y; ///< [N, H].

  MOERT_HD int parts() const { return 1; }
  MOERT_HD int64_t units() const { return f.hidden; }
  MOERT_HD int64_t depth() const { return f.inter; }
  MOERT_HD const W *columnStart(int64_t j) const {
    return moert::cuda::columnStart(w2(), f.inOut, 0, f.inter, f.hidden, j);
  }
  /// This expert's w2 matrix.
  MOERT_HD const W *w2() const {
    return w.block(w.w2, kSlotW2, expert, f.inter * f.hidden);
  }
  MOERT_HD int64_t inputStride() const {
    return columnStride(f.inOut, f.hidden);
  }
  MOERT_HD float weight(int64_t k, int64_t j) const {
    return loadWeight(w2(), f.inOut, 0, f.inter, f.hidden, k, j);
  }
  MOERT_HD void store(int64_t r, int64_t unit, float v0, float) const {
    const float *b2 = w.block(w.b2, kSlotB2, expert, f.hidden);
    float v = v0 + (b2 ? b2[unit] : 0.0f);
    int64_t row = row0 + r;
    y[row * f.hidden + unit] = gate ? v * gate[row] : v;
  }
};

/// The reference of one output element of a projection: unit `unit` of tile
/// row r, whose input row is a[r * lda, ...), as one plain dot product per
/// part.
template <typename P>
MOERT_HD void referenceElement(const P &p, const float *a, int64_t lda,
                               int64_t r, int64_t unit) {
  float sums[2] = {0.0f, 0.0f};
  for (int part = 0; part < p.parts(); ++part)
    for (int64_t k = 0; k < p.depth(); ++k)
      sums[part] += a[r * lda + k] * p.weight(k, unit * p.parts() + part);
  p.store(r, unit, sums[0], sums[1]);
}

//===----------------------------------------------------------------------===//
// The tile schedule
//===----------------------------------------------------------------------===//

/// Experts with up to this many rows run one narrow tile.
constexpr int kNarrowRows = 8;
/// Rows of a wide tile.
constexpr int kWideRows = 64;
enum TileRegime : int { kRegimeNarrow = 0, kRegimeWide = 1 };

MOERT_HD inline int64_t rowsPerTile(int regime) {
  return regime == kRegimeNarrow ? kNarrowRows : kWideRows;
}

/// offsets[e] of an Experts step, or of a shared expert's single group
/// (null offsets: all `rows` rows).
MOERT_HD inline int64_t expertBegin(const int64_t *offsets, int64_t rows,
                                    int64_t e) {
  return offsets ? offsets[e] : (e == 0 ? 0 : rows);
}

/// Whether offsets[e] (e in [0, E]) is consistent: offsets[0] is 0, and the
/// rest never decrease and stay within the rows.
MOERT_HD inline bool offsetValid(const int64_t *offsets, int64_t rows,
                                 int64_t e) {
  if (!offsets)
    return true;
  if (e == 0)
    return offsets[0] == 0;
  return offsets[e] >= offsets[e - 1] && offsets[e] <= rows;
}

/// Tiles of `regime` that expert e's rows make; none when `present` (a
/// tiered step's round, ExpertLaunch::present) says e is not present.
MOERT_HD inline int64_t tileCount(const int64_t *offsets, int64_t rows,
                                  int64_t e, int regime,
                                  const void *const *present = nullptr) {
  if (present && !present[e])
    return 0;
  int64_t n = expertBegin(offsets, rows, e + 1) - expertBegin(offsets, rows, e);
  if (regime == kRegimeNarrow)
    return n > 0 && n <= kNarrowRows ? 1 : 0;
  return n > kNarrowRows ? (n + kWideRows - 1) / kWideRows : 0;
}

/// Bounds of the tile counts for `rows` rows and E experts (the grid sizes):
/// a narrow tile holds at least one row of its own expert; wide tiles are at
/// most one per kWideRows rows plus one partial tile per wide expert, which
/// has more than kNarrowRows rows.
MOERT_HD inline int64_t maxTiles(int64_t rows, int64_t experts, int regime) {
  if (regime == kRegimeNarrow)
    return rows < experts ? rows : experts;
  int64_t partial = rows / (kNarrowRows + 1);
  if (partial > experts)
    partial = experts;
  return rows / kWideRows + partial;
}

/// The rows a block works on; expert -1: none (the block exits).
struct ExpertTile {
  int64_t expert, row, rows;
};

/// Tile `tile` of `regime`, from the exclusive prefix of the tile counts
/// (prefix[e]: tiles of experts before e; prefix[E]: all of them).
MOERT_HD inline ExpertTile findTile(const int32_t *prefix, int64_t experts,
                                    const int64_t *offsets, int64_t rows,
                                    int regime, int64_t tile) {
  if (tile >= prefix[experts])
    return {-1, 0, 0};
  // prefix[lo] <= tile < prefix[hi]: the expert is the last one whose tiles
  // start at or before `tile` (empty experts before it share its prefix).
  int64_t lo = lastAtOrBelow(prefix, experts, tile);
  int64_t row = expertBegin(offsets, rows, lo) +
                (tile - prefix[lo]) * rowsPerTile(regime);
  int64_t left = expertBegin(offsets, rows, lo + 1) - row;
  return {lo, row, left < rowsPerTile(regime) ? left : rowsPerTile(regime)};
}

/// The first row that no expert received (rows from here on are zeroed).
MOERT_HD inline int64_t paddingBegin(const int64_t *offsets, int64_t experts,
                                     int64_t rows) {
  int64_t end = expertBegin(offsets, rows, experts);
  return end < 0 ? 0 : end > rows ? rows : end;
}

//===----------------------------------------------------------------------===//
// Wide tiles: a shared-memory tiled GEMM, 256 threads, 4x4 outputs each
//===----------------------------------------------------------------------===//

constexpr int kTileThreads = 256;
constexpr int kTileCols = 64; ///< Virtual columns of a tile.
constexpr int kTileDepth = 16;
constexpr int kMicro = 4;

/// Thread t's share of loading inputs [k0, k0 + kTileDepth) of the tile's
/// rows (a: row 0 of the tile) into as[k][r]; zero past the ends.
MOERT_HD inline void loadTileA(const float *a, int64_t lda, int64_t rows,
                               int64_t depth, int64_t k0, int t,
                               float as[kTileDepth][kWideRows]) {
  for (int i = 0; i < kWideRows * kTileDepth / kTileThreads; ++i) {
    int index = t + i * kTileThreads;
    int r = index / kTileDepth, k = index % kTileDepth;
    as[k][r] = r < rows && k0 + k < depth ? a[r * lda + k0 + k] : 0.0f;
  }
}

/// Thread t's share of loading the weights of inputs [k0, k0 + kTileDepth)
/// and virtual columns [j0, j0 + kTileCols) into bs[k][j]. Consecutive
/// threads take consecutive addresses: along k for [out, in] weights, along
/// j for [in, out].
template <typename P>
MOERT_HD void loadTileB(const P &p, int64_t k0, int64_t j0, int t,
                        float bs[kTileDepth][kTileCols]) {
  int64_t cols = p.units() * p.parts();
  for (int i = 0; i < kTileCols * kTileDepth / kTileThreads; ++i) {
    int index = t + i * kTileThreads;
    int k = p.f.inOut ? index / kTileCols : index % kTileDepth;
    int j = p.f.inOut ? index % kTileCols : index / kTileDepth;
    bs[k][j] =
        j0 + j < cols && k0 + k < p.depth() ? p.weight(k0 + k, j0 + j) : 0.0f;
  }
}

/// Thread t's products of one loaded slice: rows 4 (t / 16) + [0, 4),
/// virtual columns 4 (t % 16) + [0, 4) of the tile.
MOERT_HD inline void multiplyTile(const float as[kTileDepth][kWideRows],
                                  const float bs[kTileDepth][kTileCols], int t,
                                  float acc[kMicro][kMicro]) {
  int ty = t / (kTileCols / kMicro), tx = t % (kTileCols / kMicro);
  for (int k = 0; k < kTileDepth; ++k)
    for (int i = 0; i < kMicro; ++i)
      for (int c = 0; c < kMicro; ++c)
        acc[i][c] += as[k][ty * kMicro + i] * bs[k][tx * kMicro + c];
}

/// Thread t's epilogue: its units (whole, as kMicro is a multiple of the
/// parts) of its rows within the tile's `rows`.
template <typename P>
MOERT_HD void storeTile(const P &p, int64_t rows, int64_t j0, int t,
                        const float acc[kMicro][kMicro]) {
  int ty = t / (kTileCols / kMicro), tx = t % (kTileCols / kMicro);
  int parts = p.parts();
  for (int i = 0; i < kMicro; ++i) {
    int64_t r = ty * kMicro + i;
    if (r >= rows)
      break;
    for (int c = 0; c < kMicro; c += parts) {
      int64_t unit = (j0 + tx * kMicro + c) / parts;
      if (unit >= p.units())
        break;
      p.store(r, unit, acc[i][c], parts == 2 ? acc[i][c + 1] : 0.0f);
    }
  }
}

//===----------------------------------------------------------------------===//
// Wide tiles on tensor cores: bf16 weights, activations split into hi + lo
//===----------------------------------------------------------------------===//
//
// With bf16 weights the wide tiles run on the tensor cores (bf16 x bf16
// products, fp32 accumulation), without rounding the fp32 activations to
// bf16: each activation a is split into hi = bf16(a) and lo = bf16(a - hi),
// and W a is computed as W hi + W lo, two MMAs per fragment. The weights are
// exact in bf16 and a product of two bf16 values is exact in fp32, so the
// only error beyond fp32 accumulation is the split's residual: |a - hi| is at
// most half a bf16 ulp (2^-8 |a|) and lo is within 2^-8 of a - hi, so
// |a - hi - lo| <= 2^-16 |a| and an output is off by at most
// 2^-16 sum_k |w_k a_k| beyond what an fp32 GEMM makes.
//
// A block (kMmaThreads: 8 warps) computes kWideRows rows x kMmaCols virtual
// columns; warp w owns rows 32 (w / 4) + [0, 32) and columns 32 (w % 4) +
// [0, 32), 2 x 2 fragments of 16 x 16. Once per block, the start of each
// of its weight columns goes to shared memory; per slice of kMmaDepth
// inputs the block stages the split activations ([row][k], the row-major A
// fragment) and the weights' stored bits: [k][j] (row-major B) for [in, out]
// weights, [j][k] (column-major B) for [out, in], so that consecutive threads
// copy consecutive global addresses either way. Then each warp runs its
// fragments' MMAs, skipping fragment rows wholly past the tile's rows. The
// accumulators go through shared memory ([row][j], kMmaLdC) to an epilogue
// in the SIMT tile's terms (row, unit, gate and up side by side).

constexpr int kMmaThreads = 256;
constexpr int kMmaWarps = kMmaThreads / 32;
constexpr int kMmaCols = 128; ///< Virtual columns of a tile.
constexpr int kMmaDepth = 32; ///< Inputs per staged slice.
constexpr int kMmaShape = 16; ///< m = n = k of one MMA.
/// Fragments per warp along rows and along columns (32 x 32 per warp).
constexpr int kMmaWarpFragments = 2;
constexpr int kMmaWarpColumns = kMmaCols / (kMmaWarpFragments * kMmaShape);
/// Shared-memory row pitches in elements. The padding moves successive rows
/// by 16 bytes across the banks (conflict-free fragment loads); wmma needs
/// pitches of 16 bytes and fragment starts aligned to 32 bytes.
constexpr int kMmaLdA = kMmaDepth + 8;     ///< Activations [row][k].
constexpr int kMmaLdBRows = kMmaCols + 8;  ///< [in, out] weights: [k][j].
constexpr int kMmaLdBCols = kMmaDepth + 8; ///< [out, in] weights: [j][k].
constexpr int kMmaLdC = kMmaCols + 4;      ///< Accumulators [row][j], float.
constexpr int kMmaBElements = kMmaDepth * kMmaLdBRows > kMmaCols *kMmaLdBCols
                                  ? kMmaDepth *kMmaLdBRows
                                  : kMmaCols *kMmaLdBCols;
static_assert(kWideRows ==
                  kMmaWarps / kMmaWarpColumns * kMmaWarpFragments * kMmaShape,
              "the warps cover the tile's rows");
static_assert(kMmaLdA % 8 == 0 && kMmaLdBRows % 8 == 0 &&
                  kMmaLdBCols % 8 == 0 && kMmaLdC % 4 == 0,
              "wmma pitches are multiples of 16 bytes");
static_assert((kMmaShape * kMmaLdA * 2) % 32 == 0 &&
                  (kMmaShape * kMmaLdBRows * 2) % 32 == 0 &&
                  (kMmaShape * kMmaLdBCols * 2) % 32 == 0 &&
                  (kMmaShape * kMmaLdC * 4) % 32 == 0 &&
                  (kWideRows * kMmaLdA * 2) % 32 == 0,
              "fragment starts stay 32-byte aligned");

/// The block's column starts (set once, before the first slice) and one
/// slice's staged operands (raw bf16 bits).
struct MmaStage {
  const Bf16 *columns[kMmaCols];
  uint16_t aHi[kWideRows * kMmaLdA];
  uint16_t aLo[kWideRows * kMmaLdA];
  uint16_t b[kMmaBElements];
};
/// A tensor-core block's shared memory: the staged slice, then (after the
/// last slice) the accumulators for the epilogue.
union alignas(32) MmaShared {
  MmaStage stage;
  float c[kWideRows * kMmaLdC];
};

MOERT_HD inline uint32_t bitsFromFloat(float value) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

/// bf16 bits of `value` rounded to nearest even (infinities kept, a NaN
/// stays a NaN: its payload's top bit is set before the truncation).
MOERT_HD inline uint16_t roundToBf16(float value) {
  uint32_t u = bitsFromFloat(value);
  if ((u & 0x7f800000u) == 0x7f800000u)
    return uint16_t((u >> 16) | ((u & 0x007fffffu) ? 0x0040u : 0u));
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// An activation as the sum of two bf16 values (bits).
struct SplitActivation {
  uint16_t hi, lo;
};
/// hi = bf16(a), lo = bf16(a - hi); |a - hi - lo| <= 2^-16 |a| (and at most
/// half the smallest bf16 subnormal, 2^-134, for tiny a). Infinities and NaN
/// go whole into hi (lo 0, so that lo adds no NaN); a finite value that
/// would round to infinity (beyond the largest bf16, 3.39e38) is truncated
/// instead, which keeps a - hi finite and bounds the residual by 2^-15 |a|.
MOERT_HD inline SplitActivation splitActivation(float a) {
  uint32_t u = bitsFromFloat(a);
  if ((u & 0x7f800000u) == 0x7f800000u)
    return {roundToBf16(a), 0};
  uint16_t hi = roundToBf16(a);
  if ((hi & 0x7f80u) == 0x7f80u)
    hi = uint16_t(u >> 16);
  // Exact: hi has a's sign and is within a factor 2 of a (Sterbenz).
  float rest = a - weightToFloat(Bf16{hi});
  return {hi, roundToBf16(rest)};
}

/// Thread t's share of staging inputs [k0, k0 + kMmaDepth) of the tile's
/// rows (a: row 0 of the tile) split into hi and lo ([row][k], pitch
/// kMmaLdA). Zero past the rows and the depth: rows past the tile's only
/// reach discarded outputs, but zeros past the depth must meet finite
/// weights (0 x NaN would be NaN). A warp reads 32 consecutive inputs of a
/// row.
MOERT_HD inline void stageSplitActivations(const float *a, int64_t lda,
                                           int64_t rows, int64_t depth,
                                           int64_t k0, int t, uint16_t *hi,
                                           uint16_t *lo) {
  for (int i = 0; i < kWideRows * kMmaDepth / kMmaThreads; ++i) {
    int index = t + i * kMmaThreads;
    int r = index / kMmaDepth, k = index % kMmaDepth;
    float value = r < rows && k0 + k < depth ? a[r * lda + k0 + k] : 0.0f;
    SplitActivation split = splitActivation(value);
    hi[r * kMmaLdA + k] = split.hi;
    lo[r * kMmaLdA + k] = split.lo;
  }
}

/// Where input k and virtual column j of a slice are in the staged weights.
MOERT_HD inline int mmaBOffset(bool inOut, int k, int j) {
  return inOut ? k * kMmaLdBRows + j : j * kMmaLdBCols + k;
}
/// The staged weights' pitch (the B fragment's leading dimension).
MOERT_HD inline int mmaBPitch(bool inOut) {
  return inOut ? kMmaLdBRows : kMmaLdBCols;
}
/// Where tile row `row` and slice input k are in the staged activations.
MOERT_HD inline int mmaAOffset(int row, int k) { return row * kMmaLdA + k; }
/// Where tile row `row` and virtual column j are in the accumulators.
MOERT_HD inline int mmaCOffset(int row, int j) { return row * kMmaLdC + j; }

/// Thread t's share of the block's column starts, virtual columns
/// [j0, j0 + kMmaCols): null past the projection's columns. Resolved once
/// per block (which matrix, gate/up packing), so that staging a weight is
/// one load.
template <typename P>
MOERT_HD void mmaColumnStarts(const P &p, int64_t j0, int t,
                              const Bf16 **columns) {
  int64_t cols = p.units() * p.parts();
  for (int j = t; j < kMmaCols; j += kMmaThreads)
    columns[j] = j0 + j < cols ? p.columnStart(j0 + j) : nullptr;
}

/// Thread t's share of staging the stored bf16 bits of inputs
/// [k0, k0 + kMmaDepth) of the block's columns (inputs `stride` apart);
/// zero past the ends. Consecutive threads take consecutive addresses:
/// along k for [out, in] weights, along j for [in, out].
MOERT_HD inline void stageStoredWeights(const Bf16 *const *columns,
                                        int64_t stride, bool inOut,
                                        int64_t depth, int64_t k0, int t,
                                        uint16_t *b) {
  for (int i = 0; i < kMmaCols * kMmaDepth / kMmaThreads; ++i) {
    int index = t + i * kMmaThreads;
    int k = inOut ? index / kMmaCols : index % kMmaDepth;
    int j = inOut ? index % kMmaCols : index / kMmaDepth;
    const Bf16 *column = columns[j];
    b[mmaBOffset(inOut, k, j)] =
        column && k0 + k < depth ? column[(k0 + k) * stride].bits : 0;
  }
}

/// The first tile row and virtual column of fragment (fi, fj) of warp w.
MOERT_HD inline int mmaFragmentRow(int warp, int fi) {
  return (warp / kMmaWarpColumns * kMmaWarpFragments + fi) * kMmaShape;
}
MOERT_HD inline int mmaFragmentCol(int warp, int fj) {
  return (warp % kMmaWarpColumns * kMmaWarpFragments + fj) * kMmaShape;
}
/// Whether a fragment starting at tile row `row` holds any of the tile's
/// rows (the MMAs of the others are skipped; warp-uniform).
MOERT_HD inline bool mmaRowsLive(int row, int64_t rows) { return row < rows; }

/// What one 16 x 16 x 16 MMA with fp32 accumulators computes, in float:
/// acc[m][n] += sum_k a(m, k) b(k, n), a row-major at a[m * lda + k], b at
/// b[k * ldb + n] (rowMajorB) or b[n * ldb + k]: the operands as
/// wmma::load_matrix_sync reads them with those layouts and pitches. The
/// products are exact; the tensor cores add them in another order and
/// rounding than this loop (within fp32 accumulation error), so the kernel
/// matches this emulation to fp32 rounding, not bit for bit.
MOERT_HD inline void emulateMma(const uint16_t *a, int lda, const uint16_t *b,
                                bool rowMajorB, int ldb,
                                float acc[kMmaShape][kMmaShape]) {
  for (int m = 0; m < kMmaShape; ++m)
    for (int n = 0; n < kMmaShape; ++n) {
      float sum = acc[m][n];
      for (int k = 0; k < kMmaShape; ++k) {
        uint16_t bk = rowMajorB ? b[k * ldb + n] : b[n * ldb + k];
        sum += weightToFloat(Bf16{a[m * lda + k]}) * weightToFloat(Bf16{bk});
      }
      acc[m][n] = sum;
    }
}

/// Thread t's epilogue of a tensor-core tile from the accumulators c
/// ([row][j], pitch kMmaLdC): the (row, unit) pairs t + i kMmaThreads of the
/// tile, consecutive threads on consecutive units of a row (coalesced
/// stores), within the tile's rows and the projection's units.
template <typename P>
MOERT_HD void mmaEpilogue(const P &p, int64_t rows, int64_t j0, int t,
                          const float *c) {
  int parts = p.parts();
  int tileUnits = kMmaCols / parts;
  for (int i = 0; i < kWideRows * tileUnits / kMmaThreads; ++i) {
    int index = t + i * kMmaThreads;
    int r = index / tileUnits, u = index % tileUnits;
    int64_t unit = j0 / parts + u;
    if (r >= rows || unit >= p.units())
      continue;
    const float *v = c + mmaCOffset(r, u * parts);
    p.store(r, unit, v[0], parts == 2 ? v[1] : 0.0f);
  }
}

//===----------------------------------------------------------------------===//
// Narrow tiles: up to kNarrowRows rows, each weight element read once
//===----------------------------------------------------------------------===//

/// 256 threads per narrow block. [out, in] weights: one warp per unit (8
/// units per block), lanes stride over the inputs, so that a warp reads a
/// weight row contiguously. [in, out] weights: one lane per unit (32 units),
/// the 8 warps split the inputs, so that a warp reads 32 adjacent units of a
/// weight row.
constexpr int kNarrowThreads = 256;
MOERT_HD inline int narrowUnitsPerBlock(bool inOut) { return inOut ? 32 : 8; }
/// Threads whose partial sums make one unit.
MOERT_HD inline int narrowContributors(bool inOut) { return inOut ? 8 : 32; }

/// What thread t of block column `blockUnits` sums: unit, first input and
/// input step.
struct NarrowWork {
  int64_t unit, k0;
  int step;
};
MOERT_HD inline NarrowWork narrowWork(bool inOut, int64_t block, int t) {
  if (inOut)
    return {block * 32 + t % 32, t / 32, 8};
  return {block * 8 + t / 32, t % 32, 32};
}
/// The thread holding contribution c of the block's unit u.
MOERT_HD inline int narrowContributor(bool inOut, int u, int c) {
  return inOut ? c * 32 + u : u * 32 + c;
}

/// Thread t's partial sums sums[r * 2 + part] over its inputs, for the tile's
/// `rows` rows of a (row 0 of the tile).
template <typename P>
MOERT_HD void narrowPartial(const P &p, const float *a, int64_t lda,
                            int64_t rows, int64_t block, int t,
                            float sums[2 * kNarrowRows]) {
  for (int i = 0; i < 2 * kNarrowRows; ++i)
    sums[i] = 0.0f;
  NarrowWork work = narrowWork(p.f.inOut, block, t);
  if (work.unit >= p.units())
    return;
  int parts = p.parts();
  for (int64_t k = work.k0; k < p.depth(); k += work.step) {
    float w0 = p.weight(k, work.unit * parts);
    float w1 = parts == 2 ? p.weight(k, work.unit * parts + 1) : 0.0f;
    for (int r = 0; r < kNarrowRows; ++r)
      if (r < rows) {
        float x = a[r * lda + k];
        sums[2 * r] += x * w0;
        sums[2 * r + 1] += x * w1;
      }
  }
}

/// Thread t's share of the narrow epilogue (after every partial is in
/// `partials`, kNarrowThreads x 2 kNarrowRows): thread t finishes unit
/// t / kNarrowRows of the block, row t % kNarrowRows.
template <typename P>
MOERT_HD void narrowFinish(const P &p, int64_t rows, int64_t block, int t,
                           const float (*partials)[2 * kNarrowRows]) {
  int perBlock = narrowUnitsPerBlock(p.f.inOut);
  int u = t / kNarrowRows, r = t % kNarrowRows;
  int64_t unit = block * perBlock + u;
  if (u >= perBlock || r >= rows || unit >= p.units())
    return;
  float v0 = 0.0f, v1 = 0.0f;
  for (int c = 0; c < narrowContributors(p.f.inOut); ++c) {
    const float *sums = partials[narrowContributor(p.f.inOut, u, c)];
    v0 += sums[2 * r];
    v1 += sums[2 * r + 1];
  }
  p.store(r, unit, v0, v1);
}

//===----------------------------------------------------------------------===//
// The shared expert's gate, padding rows, scratch
//===----------------------------------------------------------------------===//

/// Lane `lane`'s share of token row x's dot product with the gate vector.
MOERT_HD inline float gatePartial(const float *x, const float *gate,
                                  int64_t hidden, int lane) {
  float sum = 0.0f;
  for (int64_t h = lane; h < hidden; h += 32)
    sum += x[h] * gate[h];
  return sum;
}

/// Where the step's scratch holds the narrow and wide tile prefixes
/// (int32 [E + 1] each), the gate factors (float [N]) and the intermediate
/// (float [N, F]); each part 256-byte aligned.
struct ExpertScratch {
  uint64_t narrowPrefix, widePrefix, gate, act, bytes;
};
MOERT_HD inline ExpertScratch expertScratch(int64_t experts, int64_t rows,
                                            int64_t inter) {
  auto align = [](uint64_t n) { return (n + 255) / 256 * 256; };
  ExpertScratch s;
  s.narrowPrefix = 0;
  s.widePrefix = align(uint64_t(experts + 1) * 4);
  s.gate = s.widePrefix + align(uint64_t(experts + 1) * 4);
  s.act = s.gate + align(uint64_t(rows) * 4);
  s.bytes = s.act + align(uint64_t(rows) * uint64_t(inter) * 4);
  return s;
}

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_EXPERT_LOGIC_H
