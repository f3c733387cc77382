//===- nccl_util.cpp - NCCL helpers that need neither CUDA nor NCCL -------===//
//
// Version text, error formatting and option parsing of the NCCL
// communicator (moert/nccl.h): part of every runtime, CUDA or not, so that
// they are tested everywhere.
//
//===----------------------------------------------------------------------===//

#include "moert/nccl.h"

#include "absl/strings/str_cat.h"

namespace moert {

namespace {
/// The enumerator of an ncclResult_t (nccl.h), stable since NCCL 2.0.
const char *resultName(int result) {
  switch (result) {
  case 0:
    return "ncclSuccess";
  case 1:
    return "ncclUnhandledCudaError";
  case 2:
    return "ncclSystemError";
  case 3:
    return "ncclInternalError";
  case 4:
    return "ncclInvalidArgument";
  case 5:
    return "ncclInvalidUsage";
  case 6:
    return "ncclRemoteError";
  case 7:
    return "ncclInProgress";
  }
  return nullptr;
}
} // namespace

std::string ncclVersionString(int code) {
  // NCCL 2.9 widened the minor field: 2.9.6 is 20906, 2.8.4 was 2804.
  if (code >= 10000)
    return absl::StrCat(code / 10000, ".", code % 10000 / 100, ".", code % 100);
  return absl::StrCat(code / 1000, ".", code % 1000 / 100, ".", code % 100);
}

absl::Status ncclError(absl::string_view where, const char *call, int result,
                       const char *text, const char *lastError) {
  const char *name = resultName(result);
  std::string message = absl::StrCat(
      where, ": ", call,
      " failed: ", name ? name : absl::StrCat("ncclResult ", result), ": ",
      text && *text ? text : "(no description)");
  // NCCL's last error is its detailed account (which peer, which system
  // call); the result string alone is generic.
  if (lastError && *lastError)
    absl::StrAppend(&message, " (", lastError, ")");
  return absl::InternalError(message);
}

absl::StatusOr<CommKind> parseCommKind(absl::string_view text) {
  if (text == "host")
    return CommKind::Host;
  if (text == "nccl")
    return CommKind::Nccl;
  return absl::InvalidArgumentError(
      absl::StrCat("--comm must be host or nccl, not '", text, "'"));
}

} // namespace moert
