//===- broadcast_layout.h - The loop nest of a broadcast -------*- C++ -*-===//
//
// Shared by the CPU kernels' BroadcastLoop and the CUDA backend's fused
// kernel arguments, so that both walk a broadcast the same way.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_BROADCAST_LAYOUT_H
#define MOERT_SRC_BROADCAST_LAYOUT_H

#include "exec/tensor.h"

namespace moert::detail {

/// Collapses the broadcast of `inputs[0 .. count)` to `out` (each must
/// broadcast to it, right-aligned) into its smallest loop nest: size-1 dims
/// are dropped, and a dim is merged into its outer neighbour when every
/// operand steps over the pair as over one dim. Fills `dims[0 .. rank)` and
/// each operand's element strides `strides[i][0 .. rank)` (0 along a dim it
/// is broadcast over), outer to inner, and returns the rank: 0 when `out`
/// has one element.
inline int collapseBroadcast(const Shape &out, const Shape *const *inputs,
                             int count, int64_t *dims,
                             int64_t (*strides)[kMaxRank]) {
  for (int i = 0; i < count; ++i) {
    const Shape &in = *inputs[i];
    int64_t stride = 1;
    for (int d = out.rank - 1; d >= 0; --d) {
      int k = d - (out.rank - in.rank);
      int64_t size = k >= 0 ? in[k] : 1;
      strides[i][d] = size == 1 ? 0 : stride;
      stride *= size;
    }
  }
  // In place: the collapsed dim `rank` never lies after the dim `d` read.
  int rank = 0;
  for (int d = 0; d < out.rank; ++d) {
    if (out[d] == 1)
      continue;
    bool merge = rank > 0;
    for (int i = 0; merge && i < count; ++i)
      merge = strides[i][rank - 1] == strides[i][d] * out[d];
    if (merge) {
      dims[rank - 1] *= out[d];
      for (int i = 0; i < count; ++i)
        strides[i][rank - 1] = strides[i][d];
      continue;
    }
    dims[rank] = out[d];
    for (int i = 0; i < count; ++i)
      strides[i][rank] = strides[i][d];
    ++rank;
  }
  return rank;
}

} // namespace moert::detail

#endif // MOERT_SRC_BROADCAST_LAYOUT_H
