//===- Nvrtc.cpp - CUDA C++ to PTX through NVRTC, loaded at run time ------===//
//
// NVRTC is an optional dependency: the library is opened on first use, so
// that moec builds and runs on machines without the CUDA toolkit and only
// `--target cuda` needs it. The few entry points used are declared here with
// the C ABI of nvrtc.h (stable since CUDA 7).
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/CudaTarget.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/DynamicLibrary.h"
#include "llvm/Support/Process.h"

#include <mutex>

namespace moec::cuda {
namespace {

using nvrtcResult = int; // NVRTC_SUCCESS is 0.
using nvrtcProgram = struct NvrtcProgramOpaque *;

struct NvrtcApi {
  const char *(*getErrorString)(nvrtcResult);
  nvrtcResult (*version)(int *, int *);
  nvrtcResult (*createProgram)(nvrtcProgram *, const char *, const char *, int,
                               const char *const *, const char *const *);
  nvrtcResult (*destroyProgram)(nvrtcProgram *);
  nvrtcResult (*compileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*getPTXSize)(nvrtcProgram, size_t *);
  nvrtcResult (*getPTX)(nvrtcProgram, char *);
  nvrtcResult (*getProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*getProgramLog)(nvrtcProgram, char *);
};

/// Opens NVRTC: $MOEC_NVRTC if set, else the toolkit's library found at
/// configure time, else the dynamic loader's search path.
llvm::Expected<const NvrtcApi *> loadNvrtc() {
  static std::once_flag once;
  static NvrtcApi api;
  static std::string failure;
  std::call_once(once, [] {
    llvm::SmallVector<std::string, 4> candidates;
    if (std::optional<std::string> path =
            llvm::sys::Process::GetEnv("MOEC_NVRTC"))
      candidates.push_back(*path);
    else {
#ifdef MOEC_NVRTC_DEFAULT_PATH
      candidates.push_back(MOEC_NVRTC_DEFAULT_PATH);
#endif
      candidates.push_back("libnvrtc.so");
      candidates.push_back("libnvrtc.so.13");
      candidates.push_back("libnvrtc.so.12");
    }
    llvm::sys::DynamicLibrary library;
    std::string errors;
    for (const std::string &candidate : candidates) {
      std::string error;
      library = llvm::sys::DynamicLibrary::getPermanentLibrary(
          candidate.c_str(), &error);
      if (library.isValid())
        break;
      errors += "\n  " + candidate + ": " + error;
    }
    if (!library.isValid()) {
      failure = "--target cuda needs NVRTC (libnvrtc from the CUDA toolkit), "
                "which could not be loaded; set MOEC_NVRTC to its path:" +
                errors;
      return;
    }
    bool complete = true;
    auto bind = [&](auto &fn, const char *symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          library.getAddressOfSymbol(symbol));
      complete &= fn != nullptr;
    };
    bind(api.getErrorString, "nvrtcGetErrorString");
    bind(api.version, "nvrtcVersion");
    bind(api.createProgram, "nvrtcCreateProgram");
    bind(api.destroyProgram, "nvrtcDestroyProgram");
    bind(api.compileProgram, "nvrtcCompileProgram");
    bind(api.getPTXSize, "nvrtcGetPTXSize");
    bind(api.getPTX, "nvrtcGetPTX");
    bind(api.getProgramLogSize, "nvrtcGetProgramLogSize");
    bind(api.getProgramLog, "nvrtcGetProgramLog");
    if (!complete)
      failure = "the NVRTC library that was loaded lacks an entry point moec "
                "needs (nvrtcCreateProgram, nvrtcGetPTX, ...)";
  });
  if (!failure.empty())
    return llvm::createStringError(failure);
  return &api;
}

} // namespace

llvm::Expected<std::string> compileToPtx(llvm::StringRef source,
                                         uint32_t arch) {
  llvm::Expected<const NvrtcApi *> loaded = loadNvrtc();
  if (!loaded)
    return loaded.takeError();
  const NvrtcApi &api = **loaded;
  auto check = [&](nvrtcResult result, const char *call) -> llvm::Error {
    if (result == 0)
      return llvm::Error::success();
    return llvm::createStringError(std::string("NVRTC ") + call +
                                   " failed: " + api.getErrorString(result));
  };

  std::string text = source.str();
  nvrtcProgram program = nullptr;
  if (llvm::Error error =
          check(api.createProgram(&program, text.c_str(), "moec_fused.cu", 0,
                                  nullptr, nullptr),
                "nvrtcCreateProgram"))
    return std::move(error);
  // Destroys the program on every path out.
  struct Guard {
    const NvrtcApi &api;
    nvrtcProgram &program;
    ~Guard() { api.destroyProgram(&program); }
  } guard{api, program};

  std::string archOption = "--gpu-architecture=compute_" + std::to_string(arch);
  // IEEE-accurate math (no --use_fast_math): the CPU backend is the
  // reference these kernels are checked against.
  const char *options[] = {archOption.c_str(), "--std=c++17",
                           "--device-as-default-execution-space"};
  nvrtcResult compiled =
      api.compileProgram(program, std::size(options), options);
  if (compiled != 0) {
    size_t logSize = 0;
    std::string log;
    if (api.getProgramLogSize(program, &logSize) == 0 && logSize > 1) {
      log.resize(logSize);
      if (api.getProgramLog(program, log.data()) != 0)
        log.clear();
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
        log.pop_back();
    }
    return llvm::createStringError(
        "NVRTC cannot compile the generated kernels for sm_" +
        std::to_string(arch) + ": " + api.getErrorString(compiled) +
        (log.empty() ? std::string() : "\n" + log));
  }
  size_t ptxSize = 0;
  if (llvm::Error error =
          check(api.getPTXSize(program, &ptxSize), "nvrtcGetPTXSize"))
    return std::move(error);
  std::string ptx(ptxSize, '\0');
  if (llvm::Error error = check(api.getPTX(program, ptx.data()), "nvrtcGetPTX"))
    return std::move(error);
  // The size counts the terminating NUL; the plan stores text.
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  return ptx;
}

} // namespace moec::cuda
