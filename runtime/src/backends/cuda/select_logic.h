//===- select_logic.h - Per-thread logic of TopK, ArgMax, ... ---*- C++ -*-===//
//
// What one GPU thread of the selection and element-index kernels
// (generic_kernels.cu) computes, as MOERT_HD functions (hd.h):
// cuda_select_logic_test.cpp runs them over every thread index of each
// launch against the CPU backend's kernels (reduction.cpp, indexing.cpp).
// These are the ops that generic MoE gates (a gate moec does not know, left
// as plain ops before moe.dispatch) are made of, f32 data:
//
//  * TopK, one thread per row (the [outer, n, inner] split around the
//    axis): the CPU's heap over the row's k best, kept in the thread's own
//    slots of the indices output, fed the row in index order; for sorted = 1
//    then heapsorted (best first: the sorted result is unique, the ranking
//    being a strict total order). For sorted = 0 the heap's array order is
//    the CPU's (onnxruntime's) order wherever the CPU uses its heap
//    (topKUsesHeap) or k <= 1; where the CPU would use std::nth_element the
//    step stays on the host (generic_ops.cpp's accepts).
//  * ArgMax, one thread per row: the CPU's scan.
//  * GatherElements, one thread per output element; ScatterElements, one
//    thread per line of indices along the axis (the only elements that can
//    name the same destination), in the CPU's index order, so repeated
//    indices and reductions give the CPU's result exactly. A bad index is
//    reported through the device error record.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_SELECT_LOGIC_H
#define MOERT_SRC_CUDA_SELECT_LOGIC_H

#include "backends/cuda/generic_logic.h"

namespace moert::cuda {

/// Data error codes (DeviceErrorRecord::code) of GatherElements and
/// ScatterElements.
enum SelectError : int { kElementIndexOutOfRange = 1 };

/// The CPU's lessNanLast on floats: a strict weak order with NaN above
/// everything.
MOERT_HD inline bool lessNanLastF(float a, float b) {
  if (a != a)
    return false;
  if (b != b)
    return true;
  return a < b;
}

//===----------------------------------------------------------------------===//
// TopK, ArgMax
//===----------------------------------------------------------------------===//

/// A TopK launch: rows of `span` (n elements `inner` apart), k kept each.
struct TopKArgs {
  RowSpan span;
  long long k;
  bool largest, sorted;
};

/// The CPU's ranking: whether element a of the row at p comes before
/// element b (ties: the lower index first; NaN ranks above all values).
MOERT_HD inline bool topKBefore(const float *p, int64_t stride, bool largest,
                                int64_t a, int64_t b) {
  float va = p[a * stride], vb = p[b * stride];
  if (largest ? lessNanLastF(vb, va) : lessNanLastF(va, vb))
    return true;
  if (largest ? lessNanLastF(va, vb) : lessNanLastF(vb, va))
    return false;
  return a < b;
}

/// Row r of a TopK: its k values and indices at `values`/`indices` (the
/// outputs [outer, k, inner]). The indices output holds the heap while it
/// is built (slot j of the row at j * inner).
MOERT_HD inline void topKRow(const TopKArgs &args, const float *x, int64_t r,
                             float *values, int64_t *indices) {
  const RowSpan &span = args.span;
  int64_t k = args.k, inner = span.inner;
  const float *p = x + rowBase(span, r);
  int64_t out = (r / inner) * k * inner + r % inner;
  int64_t *heap = indices + out;
  // Moves heap[i] down below every entry of heap[0, count) that ranks
  // after it (the root is the worst kept entry).
  auto siftDown = [&](int64_t i, int64_t count) {
    while (true) {
      int64_t worst = i;
      for (int64_t child = 2 * i + 1; child <= 2 * i + 2; ++child)
        if (child < count &&
            topKBefore(p, inner, args.largest, heap[worst * inner],
                       heap[child * inner]))
          worst = child;
      if (worst == i)
        return;
      int64_t swap = heap[i * inner];
      heap[i * inner] = heap[worst * inner];
      heap[worst * inner] = swap;
      i = worst;
    }
  };
  for (int64_t j = 0; j < k; ++j) {
    heap[(k - 1 - j) * inner] = j;
    siftDown(k - 1 - j, k);
  }
  for (int64_t j = k; j < span.n && k > 0; ++j)
    if (topKBefore(p, inner, args.largest, j, heap[0])) {
      heap[0] = j;
      siftDown(0, k);
    }
  if (args.sorted)
    for (int64_t end = k - 1; end > 0; --end) {
      int64_t worst = heap[0];
      heap[0] = heap[end * inner];
      heap[end * inner] = worst;
      siftDown(0, end);
    }
  for (int64_t j = 0; j < k; ++j)
    values[out + j * inner] = p[heap[j * inner] * inner];
}

/// Row r of an ArgMax (rows of `span`): the CPU's scan, the first best
/// (the last with `last`), NaN above all values.
MOERT_HD inline int64_t argMaxRow(const RowSpan &span, const float *x,
                                  int64_t r, bool last) {
  const float *p = x + rowBase(span, r);
  int64_t best = 0;
  for (int64_t i = 1; i < span.n; ++i) {
    float v = p[i * span.inner], b = p[best * span.inner];
    if (lessNanLastF(b, v) || (last && !lessNanLastF(v, b)))
      best = i;
  }
  return best;
}

//===----------------------------------------------------------------------===//
// GatherElements, ScatterElements
//===----------------------------------------------------------------------===//

/// Indices of `shape` (rank `rank`) addressing data of the same rank with
/// contiguous `strides`, whose dim `axis` has size `dim`.
struct ElementIndexArgs {
  int rank, axis;
  long long dim;
  long long shape[kStridedMaxRank];
  long long strides[kStridedMaxRank];
};

/// The data element that indices element i (value `index`) addresses: its
/// position with the axis coordinate replaced by the index; -1 when the
/// index is out of [-dim, dim).
MOERT_HD inline int64_t elementSource(const ElementIndexArgs &args, int64_t i,
                                      int64_t index) {
  if (index < -args.dim || index >= args.dim)
    return -1;
  if (index < 0)
    index += args.dim;
  int64_t offset = 0;
  for (int d = args.rank - 1; d >= 0; --d) {
    int64_t coordinate = i % args.shape[d];
    i /= args.shape[d];
    offset += (d == args.axis ? index : coordinate) * args.strides[d];
  }
  return offset;
}

/// The indices elements of line `line` of a ScatterElements: line l is
/// every element with l's coordinates outside the axis, `count` of them
/// (the indices' axis size), in index order; element j of it is
/// lineElement(args, l, j).
MOERT_HD inline int64_t lineElement(const ElementIndexArgs &args, int64_t line,
                                    int64_t j) {
  int64_t inner = 1;
  for (int d = args.axis + 1; d < args.rank; ++d)
    inner *= args.shape[d];
  int64_t count = args.shape[args.axis];
  return ((line / inner) * count + j) * inner + line % inner;
}

/// ScatterElements's reductions on f32 (the CPU's combine).
enum class ScatterOp : int { None, Add, Mul, Max, Min };

MOERT_HD inline float scatterCombine(ScatterOp op, float dst, float src) {
  switch (op) {
  case ScatterOp::None:
    return src;
  case ScatterOp::Add:
    return applyBinary(GenericBinary::Add, dst, src);
  case ScatterOp::Mul:
    return applyBinary(GenericBinary::Mul, dst, src);
  case ScatterOp::Max:
    return applyBinary(GenericBinary::Max, dst, src);
  case ScatterOp::Min:
    return applyBinary(GenericBinary::Min, dst, src);
  }
  return src;
}

/// Line `line` of a ScatterElements into `out` (already a copy of the
/// data), in the CPU's order. Returns -1, or the position of the line's
/// first index out of range (its value in `badIndex`; the line stops there:
/// the CPU writes nothing then, and the run fails).
template <typename Index>
MOERT_HD inline int64_t
scatterLine(ScatterOp op, const ElementIndexArgs &args, const Index *indices,
            const float *updates, int64_t line, float *out, int64_t &badIndex) {
  for (int64_t j = 0; j < args.shape[args.axis]; ++j) {
    int64_t i = lineElement(args, line, j);
    int64_t index = indices[i];
    int64_t target = elementSource(args, i, index);
    if (target < 0) {
      badIndex = index;
      return i;
    }
    out[target] = scatterCombine(op, out[target], updates[i]);
  }
  return -1;
}

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_SELECT_LOGIC_H
