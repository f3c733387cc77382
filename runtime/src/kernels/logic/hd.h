//===- hd.h - Functions for the host and the device -------------*- C++ -*-===//
//
// MOERT_HD marks a function that nvcc compiles for both the host and the
// GPU, and any other compiler for the host only: the logic that the CPU
// kernels and the CUDA backend's kernels share (kernels/logic/), and the
// CUDA backend's per-thread logic (backends/cuda/*_logic.h).
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_LOGIC_HD_H
#define MOERT_SRC_KERNELS_LOGIC_HD_H

#ifdef __CUDACC__
#define MOERT_HD __host__ __device__
#else
#define MOERT_HD
#endif

#endif // MOERT_SRC_KERNELS_LOGIC_HD_H
