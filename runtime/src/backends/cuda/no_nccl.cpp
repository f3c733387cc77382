//===- no_nccl.cpp - The NCCL communicator of a runtime without CUDA ------===//
//
// Built instead of nccl.cpp when the runtime is configured with
// MOERT_CUDA=OFF: NCCL runs on GPUs, so every entry point says why it cannot.
//
//===----------------------------------------------------------------------===//

#include "moert/nccl.h"

namespace moert {
namespace {
absl::Status notBuilt() {
  return absl::FailedPreconditionError(
      "the NCCL communicator needs the CUDA backend; this runtime was built "
      "without it (MOERT_CUDA=OFF)");
}
} // namespace

absl::StatusOr<NcclLibraryInfo> loadNccl(const std::string &) {
  return notBuilt();
}
absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>>
createNcclGroup(const std::vector<int> &, const std::vector<Communicator *> &,
                const NcclOptions &) {
  return notBuilt();
}
absl::StatusOr<std::unique_ptr<NcclCommunicator>>
createNcclCommunicatorMpi(Communicator &, int, const NcclOptions &) {
  return notBuilt();
}

} // namespace moert
