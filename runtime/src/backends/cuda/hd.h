//===- hd.h - Code shared by GPU kernels and their CPU tests ----*- C++ -*-===//
//
// The per-thread logic of the backend's kernels (what one thread computes for
// one token, row or element) lives in *_logic.h headers as MOERT_HD
// functions: nvcc compiles them into the kernels, and the unit tests compile
// the same functions for the host and run them over every thread index of a
// launch, against the CPU backend. The kernels themselves only map thread
// indices to those calls, so that the logic is tested on machines without a
// GPU. MOERT_HD itself comes from kernels/logic/hd.h, where the logic the
// CPU kernels share with these kernels lives.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_HD_H
#define MOERT_SRC_CUDA_HD_H

#include "kernels/logic/hd.h"

#include <stdint.h>

namespace moert::cuda {

/// The last index i in [0, n) with sorted[i] <= value, by binary search over
/// the non-decreasing `sorted` (0 when none after the first qualifies):
/// which block of a prefix sum (offsets, tile counts) holds `value`.
template <typename T>
MOERT_HD inline int64_t lastAtOrBelow(const T *sorted, int64_t n,
                                      int64_t value) {
  int64_t lo = 0, hi = n;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] <= value)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_HD_H
