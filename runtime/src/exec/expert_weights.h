//===- expert_weights.h - Tiered expert weights as kernels see them -*- C++
//-*-===//
//
// A tiered Experts step reads its paged expert matrices through this
// interface, which the tier store (tiers/expert_store.h) implements: the
// kernels see which experts are present and where, never the store's cache,
// files or read-ahead.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_EXEC_EXPERT_WEIGHTS_H
#define MOERT_SRC_EXEC_EXPERT_WEIGHTS_H

#include "absl/status/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moert::detail {

class ThreadPool;

class ExpertWeights {
public:
  virtual ~ExpertWeights() = default;

  /// Makes experts of tiered layer `layer` present and locked: moves every
  /// one of `pending` that fits (hits first, then misses read in parallel
  /// on `pool`) into `batch`, at least one; their weights are then at
  /// pointers(). Fails with the step's label on a read or checksum error.
  virtual absl::Status acquire(uint32_t layer, std::vector<uint32_t> &pending,
                               std::vector<uint32_t> &batch, ThreadPool &pool,
                               const std::string &label) = 0;
  /// Unlocks the experts acquire() put into `batch`.
  virtual void release(uint32_t layer, const std::vector<uint32_t> &batch) = 0;
  /// Per expert of `layer`, the bytes of its paged step input `input` (the
  /// position among the step's inputs), null for one not present; null
  /// when the input is not paged.
  virtual const uint8_t *const *pointers(uint32_t layer, int input) const = 0;
};

} // namespace moert::detail

#endif // MOERT_SRC_EXEC_EXPERT_WEIGHTS_H
