//===- kv_cache_in_place.h - KV caches written in place ------------*- C++
//-*-===//
//
// A generation plan's decode schedule appends to each cache with the
// exported graph's Concat(past, new) along the sequence axis. Where the
// schedule proves that nothing but that Concat, attention's key and value
// operands and shape queries read the past and the present, the Generator
// keeps each cache in one buffer of max_seq positions (a cache view,
// Tensor::cacheAxis) and the Concat writes just the new positions into it:
// a decode step then never copies the prefix.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CACHE_IN_PLACE_H
#define MOERT_SRC_CACHE_IN_PLACE_H

#include "loader/plan_impl.h"

#include <string>

namespace moert::detail {

/// Whether input `input` of `step` may be a cache view along `axis`: the
/// operand reads only its shape (Shape, Size, Dim), or it is a key or value
/// of an Attention step whose sequence axis is `axis`, or the first input of
/// a Concat along `axis` (which then appends to the view).
bool cacheViewUse(const StepInfo &step, int input, int axis);

/// Why the cache pair `past` -> `present` (tensor ids of `schedule`'s graph
/// input and output) along `axis` cannot be written in place, or "" when it
/// can: `present` must be Concat(past, ...) along `axis`, f32, and every
/// other read of either must be a cacheViewUse.
std::string cacheInPlaceBlocker(const ScheduleInfo &schedule, int32_t past,
                                int32_t present, int axis);

} // namespace moert::detail

#endif // MOERT_SRC_CACHE_IN_PLACE_H
