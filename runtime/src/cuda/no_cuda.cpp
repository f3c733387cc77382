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

CudaSession::CudaSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaSession::~CudaSession() = default;
absl::StatusOr<std::unique_ptr<CudaSession>>
CudaSession::create(const Plan &, const CudaSessionOptions &) {
  return notBuilt();
}
absl::Status CudaSession::setInput(std::string_view, DType,
                                   const std::vector<int64_t> &, const void *,
                                   size_t) {
  return notBuilt();
}
absl::Status CudaSession::run() { return notBuilt(); }
absl::StatusOr<TensorData> CudaSession::output(std::string_view) const {
  return notBuilt();
}
std::vector<StepStats> CudaSession::stepStats() const { return {}; }
void CudaSession::resetStats() {}
int CudaSession::threads() const { return 0; }
std::string CudaSession::deviceDescription() const { return {}; }

} // namespace moert
