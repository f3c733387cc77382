//===- moe_internal.h - What the CPU MoE kernels share ----------*- C++ -*-===//
//
// Private to the CPU kernels of the sparse MoE steps: router.cpp (Router),
// dispatch.cpp (Dispatch, Combine and the registry entries), experts.cpp
// (Experts and SharedExpert: checks and weights) and expert_blocks.cpp (the
// block scheduler that runs the expert networks). Not for the backends:
// what they share with the CPU is in kernels/moe.h.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_MOE_INTERNAL_H
#define MOERT_SRC_KERNELS_MOE_INTERNAL_H

#include "kernels/moe.h"
#include "kernels/quant_gemm.h"
#include "kernels/stream.h"

#include <vector>

namespace moert::detail {

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
inline int64_t staticDim(const TensorInfo &info, int d) {
  return d < info.rank && info.dims[d].kind == fb::DimKind::Static
             ? info.dims[d].bound
             : -1;
}

/// The declared shape of `info` when every dimension is static.
inline bool staticShape(const TensorInfo &info, Shape &shape) {
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
                const int64_t *load, int64_t dropped);

/// The weights of an expert network, in input order from the step's first
/// weight input.
enum Slot { kW1, kB1, kW3, kB3, kW2, kB2, kNumSlots };

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

/// Runs expert e's network on its rows x[offsets[e], offsets[e+1]) into the
/// same rows of y, for every expert (or those of `only`, ascending), in
/// blocks that any pool thread takes (expert_blocks.cpp).
void runExperts(ThreadPool &pool, const Ffn &f, const float *x,
                const int64_t *offsets, float *y,
                const std::vector<uint32_t> *only = nullptr);

/// The registry entries of Router (router.cpp) and of Experts and
/// SharedExpert (experts.cpp); registerMoeOps (dispatch.cpp) adds them.
void registerRouterOp(OpRegistry &r);
void registerExpertOps(OpRegistry &r);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_MOE_INTERNAL_H
