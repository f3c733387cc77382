//===- c_api_internal.h - The C API's handles and error helpers -*- C++ -*-===//
//
// Shared by c_api.cpp (plans and sessions) and c_api_generate.cpp
// (generators and batches): the types behind moert/moert_c.h's handles, and
// the conversion of statuses and exceptions into the C API's results.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_API_C_API_INTERNAL_H
#define MOERT_API_C_API_INTERNAL_H

#include "generate/plan_generator.h"
#include "moert/batch_generator.h"
#include "moert/moert.h"
#include "moert/moert_c.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include <exception>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace moert::capi {

/// The C view of one TensorDesc: its dims, with pointers into the desc.
struct DescView {
  std::vector<moert_dim> dims;
  moert_tensor_desc desc{};
};

} // namespace moert::capi

struct moert_plan {
  std::unique_ptr<moert::Plan> plan;
  std::vector<moert::capi::DescView> inputs;
  std::vector<moert::capi::DescView> outputs;
};

struct moert_session {
  const moert_plan *plan = nullptr;
  std::unique_ptr<moert::Session> session;
  /// The shapes of the outputs read since the last run, by name
  /// (moert_tensor.shape points into them; a run clears them).
  std::map<std::string, std::vector<int64_t>, std::less<>> outputShapes;
  /// The step statistics as of the last run or reset (moert_step_stats'
  /// strings point into them).
  std::vector<moert::StepStats> steps;
  uint64_t runs = 0;
  double lastSeconds = 0;
};

struct moert_generator {
  std::unique_ptr<moert::detail::PlanGenerator> generator;
  /// Its plan (freed after the generator), for the image processor.
  const moert::Plan *plan = nullptr;
};

struct moert_batch {
  std::unique_ptr<moert::BatchGenerator> batch;
  /// The last step's events (moert_batch_step points into them).
  std::vector<moert_batch_event> events;
  /// The last expert selections read (moert_batch_expert_selections).
  std::vector<std::vector<uint64_t>> selections;
};

namespace moert::capi {

/// Records `message` as this thread's last error (moert_last_error);
/// returns `status`.
moert_status fail(moert_status status, std::string message);

/// fail() with the C code of `status` and its message.
moert_status fail(const absl::Status &status);

/// Converts a moert::Status into the C result.
inline moert_status resultOf(const absl::Status &status) {
  return status.ok() ? MOERT_OK : fail(status);
}

/// The C++ form of a C shape; fails on a negative rank or a null shape of
/// positive rank.
moert_status shapeOf(const char *function, const int64_t *shape, int32_t rank,
                     std::vector<int64_t> &out);

/// Runs `body` (returning a moert_status), turning any exception into
/// MOERT_ERROR_INTERNAL or MOERT_ERROR_RESOURCE_EXHAUSTED.
template <typename Body> moert_status guard(const char *function, Body body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(MOERT_ERROR_RESOURCE_EXHAUSTED,
                absl::StrCat(function, ": out of memory"));
  } catch (const std::exception &e) {
    return fail(MOERT_ERROR_INTERNAL, absl::StrCat(function, ": ", e.what()));
  } catch (...) {
    return fail(MOERT_ERROR_INTERNAL,
                absl::StrCat(function, ": unknown exception"));
  }
}

/// Fails with "FUNCTION: ARG is null" unless every pointer is set.
#define MOERT_C_REQUIRE(ptr)                                                   \
  do {                                                                         \
    if (!(ptr))                                                                \
      return fail(MOERT_ERROR_INVALID_ARGUMENT,                                \
                  absl::StrCat(__func__, ": " #ptr " is null"));               \
  } while (false)

} // namespace moert::capi

#endif // MOERT_API_C_API_INTERNAL_H
