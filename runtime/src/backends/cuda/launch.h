//===- launch.h - Host-side launch planning of the CUDA backend -*- C++ -*-===//
//
// The parts of the CUDA backend that are plain arithmetic on shapes: the
// argument block of a generated fused kernel and grid sizes. Pure C++ (no
// CUDA header), so that they are unit-tested on machines without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_LAUNCH_H
#define MOERT_SRC_CUDA_LAUNCH_H

#include "exec/tensor.h"
#include "format/cuda_abi.h"

#include "absl/status/status.h"

namespace moert::cuda {

/// Fills `args.numel`, `rank`, `shape`, `num_inputs` and `strides` for a
/// fused kernel writing the broadcast shape `out` from inputs of shapes
/// `inputs[0 .. count)` (numpy broadcasting, right-aligned). Size-1 dims are
/// dropped and adjacent dims that are contiguous in every operand merged, so
/// that the kernel's index arithmetic covers as few dims as possible (one
/// for same-shape operands). Pointers are left to the caller. Fails if an
/// input does not broadcast to `out` or the counts exceed the ABI.
absl::Status planFusedArgs(const detail::Shape &out,
                           const detail::Shape *const *inputs, int count,
                           FusedArgs &args);

/// Blocks of `blockSize` threads for a grid-stride loop over `n` elements
/// on a device with `smCount` multiprocessors: enough to cover `n`, at most
/// `blocksPerSm` waves' worth; at least 1 (an empty launch still runs).
unsigned gridSize(int64_t n, int blockSize, int smCount, int blocksPerSm = 8);

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_LAUNCH_H
