//===- comm_util.h - Helpers of the communicator backends -------*- C++ -*-===//

#ifndef MOERT_SRC_COMM_COMM_UTIL_H
#define MOERT_SRC_COMM_COMM_UTIL_H

#include "moert/comm.h"
#include "moert/moert.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace moert::comm {

using Clock = std::chrono::steady_clock;

/// The time point `seconds` from now (saturating for huge timeouts).
inline Clock::time_point deadline(double seconds) {
  constexpr double kMax = 1e9;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(
                                std::min(std::max(seconds, 0.0), kMax)));
}

/// "device 1" or "devices 1, 3".
inline std::string describeDevices(const std::vector<int> &devices,
                                   uint64_t seq) {
  std::string out = devices.size() == 1 ? "device " : "devices ";
  for (size_t i = 0; i < devices.size(); ++i)
    absl::StrAppend(&out, i ? ", " : "", devices[i]);
  return absl::StrCat(out, " to reach collective #", seq);
}

/// The error of a call that gave up: names the exchange, this device and what
/// it waited for.
inline absl::Status timeoutError(absl::string_view what, double timeout,
                                 int rank, const char *backend,
                                 absl::string_view waitedFor) {
  return absl::DeadlineExceededError(
      absl::StrCat(what, ": device ", rank, " (", backend, ") timed out after ",
                   timeout, " s waiting for ", waitedFor));
}

/// Checks that an exchange spec has one entry per device in each vector.
inline absl::Status checkSpec(const ExchangeSpec &spec, int n,
                              absl::string_view what) {
  size_t count = static_cast<size_t>(n);
  if (spec.sendBytes.size() != count || spec.sendOffsets.size() != count ||
      spec.recvBytes.size() != count || spec.recvOffsets.size() != count)
    return absl::InternalError(absl::StrCat(what, ": an exchange spec needs ",
                                            n, " entries per vector"));
  return absl::OkStatus();
}

/// The error of a wait on an exchange the communicator does not hold (never
/// started, or already waited for).
inline absl::Status notInFlight(ExchangeId id) {
  return absl::InternalError(
      absl::StrCat("wait on exchange ", id, ", which is not in flight"));
}

} // namespace moert::comm

#endif // MOERT_SRC_COMM_COMM_UTIL_H
