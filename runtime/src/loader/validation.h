//===- validation.h - What the loader's checks share ------------*- C++ -*-===//
//
// Private to the loader: the file-level layout that plan.cpp reads and the
// schedule checks (schedule_validation.cpp) that it calls per schedule.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_LOADER_VALIDATION_H
#define MOERT_SRC_LOADER_VALIDATION_H

#include "format/plan_file.h"
#include "loader/diag.h"
#include "loader/plan_impl.h"

#include <vector>

namespace moert::detail {

/// The file-level structure: header, section table, checksums, program.
struct Layout {
  std::vector<detail::SectionEntry> sections;
  const fb::Program *program = nullptr;
};

/// The characters of a FlatBuffers string (empty when absent).
inline absl::string_view str(const flatbuffers::String *s) {
  return s ? absl::string_view(s->c_str(), s->size()) : absl::string_view();
}

/// Whether a + b overflows or exceeds `limit`.
inline bool overflowsAdd(uint64_t a, uint64_t b, uint64_t limit) {
  uint64_t sum;
  return __builtin_add_overflow(a, b, &sum) || sum > limit;
}

/// Checks one schedule of the program (its tensors, steps, collectives,
/// arena and tiers) and records it in `schedule`; `decode` is the decode
/// schedule of the prefill schedule being checked, if any.
absl::Status validateSchedule(const Diag &diag, const Plan::Impl &impl,
                              const Layout &layout, const fb::Schedule &fbSched,
                              ScheduleInfo &schedule,
                              const ScheduleInfo *decode = nullptr);

} // namespace moert::detail

#endif // MOERT_SRC_LOADER_VALIDATION_H
