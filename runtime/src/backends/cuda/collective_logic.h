//===- collective_logic.h - Per-thread logic of the collective kernels ----===//
//
// What one thread of AssignSlots, Regroup and Ungroup on the GPU computes
// (collective_kernels.cu), as MOERT_HD functions (hd.h) that the unit tests
// run on the host over every thread index against the CPU kernels
// (runtime/src/kernels/collective.cpp). Plain C++: no Abseil, no plan header.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_COLLECTIVE_LOGIC_H
#define MOERT_SRC_CUDA_COLLECTIVE_LOGIC_H

#include "backends/cuda/hd.h"

#include <cstdint>

namespace moert::cuda {

/// The data errors the collective kernels record (DeviceErrorRecord::code).
enum CollectiveErrorCode : int {
  /// AssignSlots: a = the expert index, b = its position t * k + j.
  kSlotExpertOutOfRange = 1,
  /// Regroup: a = the index of the count, b = the count.
  kRegroupCountDoesNotFit = 2,
  /// Ungroup: a = the grouped row, b = its perm entry.
  kUngroupPermOutOfRange = 3,
  /// Ungroup: a = the grouped row, b = the out row another row claimed.
  kUngroupPermRepeats = 4,
};

/// AssignSlots for the assignment of token `t` to expert `e`: the global
/// slot (replicas of an expert take turns by the token's row), or -1 for
/// e == -1. Returns false when `e` is outside [-1, experts).
MOERT_HD inline bool assignSlot(int64_t e, int64_t t, const int64_t *offsets,
                                const int64_t *slots, int64_t experts,
                                int64_t *slot) {
  if (e == -1) {
    *slot = -1;
    return true;
  }
  if (e < 0 || e >= experts)
    return false;
  int64_t first = offsets[e], count = offsets[e + 1] - first;
  *slot = slots[first + t % count];
  return true;
}

/// Regroup's layout (one thread: N * S counts are few): where each (source,
/// slot) block of `counts` [N * S] starts among the R received rows
/// (`start`, source-major) and where each slot starts among the grouped rows
/// (`offsets` [S + 1], slot-major). Returns -1, or the index of the first
/// count that is negative or overruns R; `offsets` is then all zeros, so
/// that every grouped row is empty.
MOERT_HD inline int64_t regroupLayout(const int64_t *counts, int64_t N,
                                      int64_t S, int64_t R, int64_t *start,
                                      int64_t *offsets) {
  int64_t total = 0;
  for (int64_t i = 0; i < N * S; ++i) {
    if (counts[i] < 0 || counts[i] > R - total) {
      for (int64_t j = 0; j <= S; ++j)
        offsets[j] = 0;
      return i;
    }
    start[i] = total;
    total += counts[i];
  }
  int64_t row = 0;
  for (int64_t j = 0; j < S; ++j) {
    offsets[j] = row;
    for (int64_t s = 0; s < N; ++s)
      row += counts[s * S + j];
  }
  offsets[S] = row;
  return -1;
}

/// Regroup's perm for grouped row `r`: the received row it takes (slot by
/// slot, and within a slot source by source), or -1 past the last row.
MOERT_HD inline int64_t regroupSource(int64_t r, const int64_t *counts,
                                      const int64_t *start,
                                      const int64_t *offsets, int64_t N,
                                      int64_t S) {
  if (r >= offsets[S])
    return -1;
  // The slot j with offsets[j] <= r < offsets[j + 1] (empty slots skipped).
  int64_t lo = lastAtOrBelow(offsets, S, r);
  int64_t i = r - offsets[lo];
  for (int64_t s = 0; s < N; ++s) {
    int64_t c = counts[s * S + lo];
    if (i < c)
      return start[s * S + lo] + i;
    i -= c;
  }
  return -1;
}

/// Ungroup's check of grouped row `r`'s perm entry `p` among R rows: 0 when
/// it is -1 (no row) or in range, else kUngroupPermOutOfRange. (Repeats are
/// found by the kernel's claim of out row p.)
MOERT_HD inline int ungroupCheck(int64_t p, int64_t R) {
  return p == -1 || (p >= 0 && p < R) ? 0 : kUngroupPermOutOfRange;
}

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_COLLECTIVE_LOGIC_H
