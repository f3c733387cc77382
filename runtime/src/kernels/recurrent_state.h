//===- recurrent_state.h - Kernels of the steps that carry a state -*- C++
//-*-===//
//
// The CausalConv and GatedDeltaRule steps read a fixed-size state per
// sequence, run its tokens in order and leave the state after the last one.
// Their kernels (causal_conv.cpp, linear_attention.cpp) run either a whole
// batch of one state per batch element, or, for continuous batching
// (generate/batch_generator.cpp), the rows of one [1, ...] step split into
// segments: each segment is the consecutive rows of one sequence, run from
// and back into that sequence's own state. A row's result is the same
// either way: each is computed by the same code in the same order.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_RECURRENT_STATE_H
#define MOERT_SRC_KERNELS_RECURRENT_STATE_H

#include "exec/thread_pool.h"

#include <cstdint>
#include <vector>

namespace moert::detail {

/// The rows [begin, end) of a step that belong to one sequence, and that
/// sequence's state (the step's state of one batch element), read at the
/// start and replaced by the state after row end - 1.
struct StateSegment {
  int64_t begin = 0, end = 0;
  float *state = nullptr;
};

/// The operands of a CausalConv step with batch 1 or of one batch element:
/// input and output [C, L] (row t of channel c at c * L + t), weight
/// [C, K], bias? [C].
struct CausalConvArgs {
  int64_t channels = 0, length = 0, kernel = 0;
  bool silu = false;
  const float *input = nullptr, *weight = nullptr, *bias = nullptr;
  float *output = nullptr;
};

/// Runs each segment's rows of every channel from its state ([C, K - 1]),
/// which it replaces, on the pool's threads.
void computeCausalConv(ThreadPool &pool, const CausalConvArgs &args,
                       const std::vector<StateSegment> &segments);

/// The operands of a GatedDeltaRule step with batch 1 or of one batch
/// element, contiguous in the op's layouts: query [L, Hq, Dk], key
/// [L, Hk, Dk], value and output [L, Hv, Dv], decay and beta [L, Hv].
struct GatedDeltaArgs {
  int64_t tokens = 0, queryHeads = 0, keyHeads = 0, valueHeads = 0, keyDim = 0,
          valueDim = 0;
  float scale = 1.0f;
  const float *query = nullptr, *key = nullptr, *value = nullptr,
              *decay = nullptr, *beta = nullptr;
  float *output = nullptr;
};

/// Runs each segment's rows of every value head from its state
/// ([Hv, Dk, Dv]), which it replaces, on the pool's threads.
void computeGatedDeltaRule(ThreadPool &pool, const GatedDeltaArgs &args,
                           const std::vector<StateSegment> &segments);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_RECURRENT_STATE_H
