//===- device_error.h - Data errors found by GPU kernels --------*- C++ -*-===//
//
// A kernel that finds bad data (an expert index out of range, a repeated
// assignment) cannot return an error, and the host must not wait for it to
// ask. It records the first failure of the run here; the session reads the
// record once, after the run's final synchronisation, and fails the run with
// the op's message and the step's label. Plain C++, shared by .cu and .cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_DEVICE_ERROR_H
#define MOERT_SRC_CUDA_DEVICE_ERROR_H

namespace moert::cuda {

/// Zeroed at the start of every run; `code` 0 means no error.
struct DeviceErrorRecord {
  /// Op-specific, non-zero; the first recorded wins.
  int code;
  /// The index of the step whose kernel recorded it.
  int step;
  /// Op-specific values (the bad index, its position, ...).
  long long a, b;
};

#ifdef __CUDACC__
/// Records (code, step, a, b) unless an error was recorded before.
__device__ inline void recordDeviceError(DeviceErrorRecord *record, int code,
                                         int step, long long a, long long b) {
  if (atomicCAS(&record->code, 0, -1) == 0) {
    record->step = step;
    record->a = a;
    record->b = b;
    __threadfence();
    atomicExch(&record->code, code);
  }
}
#endif

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_DEVICE_ERROR_H
