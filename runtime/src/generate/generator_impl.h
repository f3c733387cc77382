//===- generator_impl.h - A Generator's state -----------------*- C++ -*-===//
//
// Private to src/generate/: the state of a moert::Generator and the pieces
// of a step that its text prompt, decode and multimodal prompt
// (multimodal_prefill.cpp) share.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_GENERATE_GENERATOR_IMPL_H
#define MOERT_SRC_GENERATE_GENERATOR_IMPL_H

#include "exec/session_state.h"
#include "loader/generation_plan.h"
#include "moert/generator.h"

#include <memory>
#include <vector>

namespace moert {

struct Generator::Impl {
  const Plan &plan;
  const GenerationDesc &gen;
  std::unique_ptr<Session> decode;
  std::unique_ptr<Session> prefill;

  /// One cache pair's buffers. Written in place (kv_cache_in_place.h),
  /// buffers[0] alone holds max_seq positions along the pair's axis: the
  /// decode session reads its past there and appends the new positions,
  /// and a separate prefill schedule's present is copied in once. Otherwise
  /// a run reads the past from `buffers[current]` and writes the present
  /// into the other.
  struct Cache {
    const CachePairDesc *pair = nullptr;
    bool inPlace = false;
    /// The decode schedule's present.
    int32_t present = -1;
    /// The shape of the valid part of buffers[current].
    std::vector<int64_t> shape;
    std::vector<float> buffers[2];
    int current = 0;
  };
  std::vector<Cache> caches;

  /// Multimodal plans (format 1.17): the table, one session per stage, and
  /// what the position rule adds to a decode token's sequence index in the
  /// Time/Height/Width rows (set by each prompt).
  const MultimodalDesc *mm = nullptr;
  std::vector<std::unique_ptr<Session>> stages;
  int64_t positionDelta = 0;

  Impl(const Plan &plan, const GenerationDesc &gen) : plan(plan), gen(gen) {}

  /// The planned bytes of output `name` of `schedule`.
  static uint64_t plannedSize(const detail::ScheduleInfo &schedule,
                              const std::string &name) {
    int32_t id = detail::findSignatureTensor(schedule, false, name);
    return id < 0 ? 0 : schedule.tensors[id].size;
  }
};

namespace detail {

/// Binds every cache of `impl` for a run of `state`'s schedule: the decode
/// schedule's past and present, or (`prefillSchedule`: a prefill schedule
/// or a multimodal Prefill stage) the present only.
absl::Status bindCaches(Generator::Impl &impl, SessionState &state,
                        bool prefillSchedule);

/// After the run of `session` over n tokens at [start, start + n): checks
/// every present against its past grown by n, and makes it the next
/// step's past.
absl::Status finishCaches(Generator::Impl &impl, Session &session,
                          SessionState &state, bool prefillSchedule,
                          int64_t start, int64_t n);

/// Runs `session` over `ids` at positions [start, start + n): every cache's
/// past is its current buffer, its present goes to the other one (or, in
/// place, the same one).
absl::Status runStep(Generator::Impl &impl, Session &session,
                     SessionState &state, bool prefillSchedule,
                     const std::vector<int64_t> &ids, int64_t start);

/// Clears every cache before a prompt.
void resetCaches(Generator::Impl &impl);

/// Sets `session`'s input `name` to the new tokens' feed `kind` (TokenIds,
/// TokenTypes or ImageTokenMask of `ids`, i64/bool [1, n]).
absl::Status setTokenFeed(Session &session, const std::string &name,
                          FeedKind kind, const std::vector<int64_t> &ids,
                          int64_t imageTokenId);

} // namespace detail
} // namespace moert

#endif // MOERT_SRC_GENERATE_GENERATOR_IMPL_H
