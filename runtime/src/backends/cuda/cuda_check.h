//===- cuda_check.h - CUDA runtime errors as statuses -----------*- C++ -*-===//
//
// The one form of a failed CUDA runtime call across the backend (the
// session, the device ops, the NCCL communicator):
// "<where>: <call> failed: <error name>: <error text>".
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_CUDA_CHECK_H
#define MOERT_SRC_CUDA_CUDA_CHECK_H

#include "moert/moert.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#include <cuda_runtime_api.h>

namespace moert::cuda {

/// OK for cudaSuccess, else "<where>: <call> failed: <name>: <text>", e.g.
/// "uploading weights: cudaMalloc(...) failed: cudaErrorMemoryAllocation:
/// out of memory"; `where` is a step's label or what the caller was doing.
inline absl::Status cudaCheck(cudaError_t error, const char *call,
                              absl::string_view where) {
  if (error == cudaSuccess)
    return absl::OkStatus();
  return absl::InternalError(absl::StrCat(where, ": ", call,
                                          " failed: ", cudaGetErrorName(error),
                                          ": ", cudaGetErrorString(error)));
}

} // namespace moert::cuda

/// Returns the failure of the CUDA runtime call `call` (its text names it),
/// made while doing `where`.
#define MOERT_CUDA(call, where)                                                \
  MOERT_RETURN_IF_ERROR(::moert::cuda::cudaCheck((call), #call, (where)))

#endif // MOERT_SRC_CUDA_CUDA_CHECK_H
