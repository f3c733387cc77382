//===- cublas.cpp - cuBLAS entry points, opened at run time ---------------===//

#include "backends/cuda/cublas.h"

#include "absl/strings/str_cat.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

namespace moert::cuda {

absl::StatusOr<const CublasApi *> loadCublas() {
  static CublasApi api;
  static const std::string failure = [] {
    std::string errors;
    void *library = nullptr;
    for (const char *name : {
#ifdef MOERT_CUBLAS_PATH
             MOERT_CUBLAS_PATH,
#endif
             "libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (library)
        break;
      const char *error = dlerror();
      absl::StrAppend(&errors, "; ", error ? error : name);
    }
    if (!library)
      return absl::StrCat("cannot load cuBLAS", errors);
    std::string absent;
    auto bind = [&](auto &fn, const char *symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          dlsym(library, symbol));
      if (!fn)
        absl::StrAppend(&absent, absent.empty() ? "" : ", ", symbol);
    };
    bind(api.create, "cublasCreate_v2");
    bind(api.destroy, "cublasDestroy_v2");
    bind(api.setStream, "cublasSetStream_v2");
    bind(api.statusString, "cublasGetStatusString");
    bind(api.setMathMode, "cublasSetMathMode");
    bind(api.setWorkspace, "cublasSetWorkspace_v2");
    bind(api.sgemm, "cublasSgemm_v2");
    bind(api.sgemmStridedBatched, "cublasSgemmStridedBatched");
    return absent.empty() ? std::string()
                          : absl::StrCat("the loaded cuBLAS lacks ", absent);
  }();
  if (!failure.empty())
    return absl::FailedPreconditionError(failure);
  return &api;
}

absl::Status cublasCheck(cublasStatus_t status, const char *call,
                         absl::string_view where) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return absl::OkStatus();
  absl::StatusOr<const CublasApi *> api = loadCublas();
  return absl::InternalError(absl::StrCat(
      where, ": ", call,
      " failed: ", api.ok() ? (*api)->statusString(status) : "(unknown)"));
}

} // namespace moert::cuda
