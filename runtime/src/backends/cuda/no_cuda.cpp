//===- no_cuda.cpp - The CUDA backend's interface without CUDA ------------===//
//
// Built instead of the backend when the runtime is configured with
// MOERT_CUDA=OFF (no CUDA toolkit): every entry point says so.
//
//===----------------------------------------------------------------------===//

#include "moert/cuda.h"

namespace moert {
namespace {
absl::Status notBuilt() {
  return absl::FailedPreconditionError(
      "no CUDA device: this runtime was built without the CUDA backend "
      "(MOERT_CUDA=OFF)");
}
} // namespace

struct CudaSession::Impl {};

bool cudaBackendBuilt() { return false; }
absl::StatusOr<int> cudaDeviceCount() { return notBuilt(); }
absl::StatusOr<CudaPlacement> cudaPlacement(const Plan &, int, bool) {
  return absl::FailedPreconditionError(
      "this runtime was built without the CUDA backend (MOERT_CUDA=OFF)");
}

// No session is ever created, so the private constructor is not needed.
CudaSession::~CudaSession() = default;
absl::StatusOr<std::unique_ptr<CudaSession>>
CudaSession::create(const Plan &, const CudaSessionOptions &) {
  return notBuilt();
}
absl::Status CudaSession::run() { return notBuilt(); }
std::string CudaSession::deviceDescription() const { return {}; }
CommStats CudaSession::commStats() const { return {}; }
bool CudaSession::usesGraphs() const { return false; }
std::string CudaSession::graphsRefused() const { return {}; }

} // namespace moert
