//===- cuda_abi.h - Launch ABI of compiler-generated CUDA kernels -*- C++
//-*-===//
//
// The contract between the kernels `moec compile --target cuda` generates
// (compiler/cuda) and the CUDA backend that launches them
// (runtime/src/backends/cuda). A FusedElementwise kernel is
//
//   extern "C" __global__ void NAME(const moert_fused_args args)
//
// launched on a 1-D grid of `kFusedBlockSize` threads that strides over
// `numel` output elements. The argument struct is spelled once, in
// MOERT_FUSED_ARGS_FIELDS, so that the host struct and the generated CUDA
// source cannot drift apart. Pure C++; no CUDA header needed.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_CUDA_ABI_H
#define MOERT_CUDA_ABI_H

#include <cstdint>

// The fields of the kernel argument (a kernel parameter, passed by value):
// the broadcast output shape with `rank` dims, per input the element stride
// along each output dim (0 where the input is broadcast), and the f32 input
// and output pointers. Sizes are literals so that the text can be pasted into
// the generated source; they equal kFusedMaxRank and kFusedMaxOperands.
#define MOERT_FUSED_ARGS_FIELDS                                                \
  long long numel;                                                             \
  int rank;                                                                    \
  int num_inputs;                                                              \
  long long shape[8];                                                          \
  long long strides[32][8];                                                    \
  const float *inputs[32];                                                     \
  float *outputs[32];

#define MOERT_ABI_STRINGIFY_(x) #x
#define MOERT_ABI_STRINGIFY(x) MOERT_ABI_STRINGIFY_(x)

namespace moert::cuda {

inline constexpr int kFusedMaxRank = 8;
inline constexpr int kFusedMaxOperands = 32;
/// Threads per block of every generated kernel (its __launch_bounds__).
inline constexpr int kFusedBlockSize = 256;

/// The host view of the argument struct (64-bit targets: long long and
/// pointers are 8 bytes on host and device alike).
struct FusedArgs {
  MOERT_FUSED_ARGS_FIELDS
};
static_assert(sizeof(long long) == 8 && sizeof(void *) == 8,
              "the CUDA kernel ABI assumes a 64-bit host");
// Kernel parameters are limited to 4 KiB on every supported architecture.
static_assert(sizeof(FusedArgs) <= 4096, "FusedArgs exceeds the 4 KiB limit");

/// The same struct as CUDA source text, for the generator.
inline constexpr const char *kFusedArgsSource =
    "struct moert_fused_args { " MOERT_ABI_STRINGIFY(
        MOERT_FUSED_ARGS_FIELDS) " };\n";

} // namespace moert::cuda

#endif // MOERT_CUDA_ABI_H
