//===- diag.h - The loader's error messages ---------------------*- C++ -*-===//
//
// Every load error names the plan's source and where in the plan it lies
// ("plan.bin: schedule 0: step 3 'x' (Add): ..."); every check of
// the loader (schedule_validation.cpp, tier_validation.cpp) builds them here.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_LOADER_DIAG_H
#define MOERT_SRC_LOADER_DIAG_H

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#include <string>
#include <utility>

namespace moert::detail {

/// Builds load errors, all prefixed with the plan's source.
class Diag {
public:
  explicit Diag(std::string prefix) : prefix_(std::move(prefix)) {}
  template <typename... Args> absl::Status invalid(const Args &...args) const {
    return absl::InvalidArgumentError(absl::StrCat(prefix_, ": ", args...));
  }
  template <typename... Args> absl::Status dataLoss(const Args &...args) const {
    return absl::DataLossError(absl::StrCat(prefix_, ": ", args...));
  }
  template <typename... Args>
  absl::Status unsupported(const Args &...args) const {
    return absl::FailedPreconditionError(absl::StrCat(prefix_, ": ", args...));
  }
  /// Prefixes an error returned by a step validator.
  absl::Status wrap(const absl::Status &status) const {
    if (status.ok())
      return status;
    return absl::Status(status.code(),
                        absl::StrCat(prefix_, ": ", status.message()));
  }
  Diag nested(absl::string_view what) const {
    return Diag(absl::StrCat(prefix_, ": ", what));
  }

private:
  std::string prefix_;
};

} // namespace moert::detail

#endif // MOERT_SRC_LOADER_DIAG_H
