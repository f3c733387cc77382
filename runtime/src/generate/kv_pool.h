//===- kv_pool.h - Caches of many sequences, and their attention -*- C++
//-*-===//
//
// The KV pool of a BatchGenerator (moert/batch_generator.h): for one cache
// of the plan (a layer's keys or values, [1, heads, positions, dim]) one
// buffer of `slots` sequences × max_seq positions, allocated once. A batched
// step's rows each carry their sequence's slot and position: the pool
// attention writes every row's new key and value at its position of its
// slot, then attends each row's query over its slot's positions 0 ..
// position (the row itself included), which is what the decode step of the
// row's sequence computes alone (its past, then its new position), and what
// a causal prefill computes for a prompt row.
//
// Beside it, the state pool: one recurrence state (a state pair of the
// plan) per slot, which the batched step's CausalConv and GatedDeltaRule
// steps read and replace per sequence (kernels/recurrent_state.h).
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_GENERATE_KV_POOL_H
#define MOERT_SRC_GENERATE_KV_POOL_H

#include "exec/thread_pool.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace moert::detail {

/// One cache of every slot: slots × [heads, maxSeq, dim] f32, zeroed.
class KvPool {
public:
  KvPool(int64_t slots, int64_t heads, int64_t maxSeq, int64_t dim);

  int64_t slots() const { return slots_; }
  int64_t heads() const { return heads_; }
  int64_t maxSeq() const { return maxSeq_; }
  int64_t dim() const { return dim_; }
  /// Slot `s`: [heads, maxSeq, dim], positions dim apart, heads maxSeq *
  /// dim apart.
  float *slot(int64_t s) { return data_.data() + s * slotElements(); }
  const float *slot(int64_t s) const {
    return data_.data() + s * slotElements();
  }
  int64_t slotElements() const { return heads_ * maxSeq_ * dim_; }
  uint64_t bytes() const { return data_.size() * sizeof(float); }

private:
  int64_t slots_, heads_, maxSeq_, dim_;
  std::vector<float> data_;
};

/// One state of every slot (a recurrence's fixed-size state, a state pair of
/// the plan): slots × `elements` f32. A slot is zeroed when a sequence
/// takes it, the state a first prompt starts from.
class StatePool {
public:
  StatePool(int64_t slots, int64_t elements)
      : elements_(elements),
        data_(static_cast<size_t>(slots * elements), 0.0f) {}

  int64_t elements() const { return elements_; }
  float *slot(int64_t s) { return data_.data() + s * elements_; }
  void reset(int64_t s) { std::fill_n(slot(s), elements_, 0.0f); }
  uint64_t bytes() const { return data_.size() * sizeof(float); }

private:
  int64_t elements_;
  std::vector<float> data_;
};

/// A row of a batched step: its sequence's slot and its position there.
struct PoolRow {
  int64_t slot = 0;
  int64_t position = 0;
};

/// One layer's attention over the pool for the rows of a step.
struct PoolAttentionArgs {
  int64_t rows = 0, heads = 0, kvHeads = 0, headDim = 0, valueDim = 0;
  float scale = 1.0f;
  /// > 0: scores become softcap * tanh(score / softcap) (AttentionAttrs).
  float softcap = 0.0f;
  /// Optional [heads] sink logits.
  const float *sinks = nullptr;
  /// > 0: a row at position i sees the keys at i - window + 1 .. i only.
  int64_t window = 0;
  /// The step's rows: queries [1, heads, rows, headDim], new keys
  /// [1, kvHeads, rows, headDim] and values [1, kvHeads, rows, valueDim],
  /// contiguous.
  const float *query = nullptr;
  const float *key = nullptr;
  const float *value = nullptr;
  const PoolRow *rowSlots = nullptr;
  KvPool *keys = nullptr;
  KvPool *values = nullptr;
  /// [1, heads, rows, valueDim], contiguous.
  float *output = nullptr;
};

/// Writes every row's key and value at its position of its slot, then
/// computes each row's attention over positions 0 .. position of its slot
/// (the last `window` of them with a sliding window),
/// as the Attention step computes one query (the same products and
/// softmax), on the pool's threads. Rows of one slot may be several (a
/// prompt chunk): each sees the positions up to its own.
void computePoolAttention(ThreadPool &pool, const PoolAttentionArgs &args);

} // namespace moert::detail

#endif // MOERT_SRC_GENERATE_KV_POOL_H
