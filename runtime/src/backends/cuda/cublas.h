//===- cublas.h - cuBLAS entry points, opened at run time -------*- C++ -*-===//
//
// The cuBLAS functions the CUDA backend calls, bound with dlopen on first
// use: linking libcublas would make every moe-run start (CPU runs included)
// load a library of hundreds of megabytes, and fail where it is absent.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_CUBLAS_H
#define MOERT_SRC_CUDA_CUBLAS_H

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cublas_v2.h>

namespace moert::cuda {

/// The bound entry points (a subset of cublas_api.h, same signatures).
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t *);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*setStream)(cublasHandle_t, cudaStream_t);
  const char *(*statusString)(cublasStatus_t);
  // The GEMMs of MatMul and Gemm (moe_routing.cpp), declared from the
  // header's own prototypes so that the signatures cannot drift.
  decltype(&cublasSetMathMode) setMathMode;
  decltype(&cublasSetWorkspace_v2) setWorkspace;
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasSgemmStridedBatched) sgemmStridedBatched;
};

/// Opens cuBLAS once per process ($MOERT_CUBLAS_PATH at configure time, then
/// libcublas.so.13, .12, .so) and binds every entry point; fails with one
/// message naming what was missing.
absl::StatusOr<const CublasApi *> loadCublas();

/// OK for CUBLAS_STATUS_SUCCESS, else "<where>: <call> failed: <status>".
absl::Status cublasCheck(cublasStatus_t status, const char *call,
                         absl::string_view where);

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_CUBLAS_H
