//===- CudaTarget.h - moec compile --target cuda ----------------*- C++ -*-===//
//
// The compiler side of the CUDA backend (docs/cuda.md). The runtime ships
// precompiled kernels for the fixed sparse steps (router, dispatch, experts,
// combine); what is specific to a plan are its fused elementwise programs.
// Each FusedElementwise step becomes one CUDA C++ kernel, generated here from
// the step's expression program (the same program the CPU backend
// interprets, so both backends compute one function), compiled to PTX for
// the target architecture by NVRTC and embedded in the plan as its
// CudaModule. NVRTC is loaded at run time: moec builds and runs without the
// CUDA toolkit, and only --target cuda needs it.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_CUDA_CUDATARGET_H
#define MOEC_COMPILER_CUDA_CUDATARGET_H

#include "mlir/IR/Location.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moert {
class PlanWriter;
namespace fb {
struct FusedElementwiseAttrsT;
} // namespace fb
} // namespace moert

namespace moec::cuda {

/// Parses "sm_90" into 90. Fails on anything else (the message names the
/// accepted form).
llvm::Expected<uint32_t> parseCudaArch(llvm::StringRef arch);

/// The CUDA C++ source of one kernel named `name` that evaluates `program`
/// over `numInputs` inputs into `numOutputs` outputs with the launch ABI of
/// format/cuda_abi.h. Fails on programs the CPU validator would reject too
/// (registers read before written, unknown instructions, bad counts).
llvm::Expected<std::string>
generateFusedKernel(const moert::fb::FusedElementwiseAttrsT &program,
                    int numInputs, int numOutputs, llvm::StringRef name);

/// Compiles CUDA C++ `source` to PTX for compute capability `arch` with
/// NVRTC. Fails with a clear message when NVRTC cannot be loaded (set
/// MOEC_NVRTC to the library's path) or rejects the source (its log).
llvm::Expected<std::string> compileToPtx(llvm::StringRef source, uint32_t arch);

/// What `addCudaKernels` produced, for --cuda-source and --ptx-output.
struct CudaModuleInfo {
  std::string source;
  std::string ptx;
  std::vector<std::string> kernels;
};

/// Makes the plan being written a CUDA plan for `arch`: generates a kernel
/// per FusedElementwise step of every schedule, compiles them into one PTX
/// module, embeds it and names each step's kernel. Errors are reported at
/// `loc`.
mlir::LogicalResult addCudaKernels(moert::PlanWriter &writer, uint32_t arch,
                                   mlir::Location loc,
                                   CudaModuleInfo *info = nullptr);

} // namespace moec::cuda

#endif // MOEC_COMPILER_CUDA_CUDATARGET_H
