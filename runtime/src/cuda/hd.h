//===- hd.h - Code shared by GPU kernels and their CPU tests ----*- C++ -*-===//
//
// The per-thread logic of the backend's kernels (what one thread computes for
// one token, row or element) lives in *_logic.h headers as MOERT_HD
// functions: nvcc compiles them into the kernels, and the unit tests compile
// the same functions for the host and run them over every thread index of a
// launch, against the CPU backend. The kernels themselves only map thread
// indices to those calls, so that the logic is tested on machines without a
// GPU.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_HD_H
#define MOERT_SRC_CUDA_HD_H

#ifdef __CUDACC__
#define MOERT_HD __host__ __device__
#else
#define MOERT_HD
#endif

#endif // MOERT_SRC_CUDA_HD_H
