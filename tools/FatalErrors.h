//===- FatalErrors.h - Fatal errors as one error line -----------*- C++ -*-===//
//
// What moec and moec-opt install first in main: whatever ends the process
// from inside LLVM or the C++ runtime (report_fatal_error, e.g. "IO failure
// on output stream" when stdout is a full disk; an allocation LLVM or `new`
// cannot satisfy; std::terminate) prints one line "TOOL: error: REASON" and
// exits with status 1, instead of "LLVM ERROR: ..." and an abort with a
// stack dump. Partial output files are removed first, as LLVM does.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_FATALERRORS_H
#define MOEC_TOOLS_FATALERRORS_H

#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/Signals.h"

#include <cstdio>
#include <cstdlib>
#include <cxxabi.h>
#include <exception>
#include <new>

namespace moec {

namespace detail {
/// The tool name the error line starts with.
inline const char *&fatalErrorTool() {
  static const char *tool = "moec";
  return tool;
}

[[noreturn]] inline void exitWithFatalError(const char *reason) {
  // Remove the files ToolOutputFile registered for removal on a crash.
  llvm::sys::RunInterruptHandlers();
  std::fprintf(stderr, "%s: error: %s\n", fatalErrorTool(), reason);
  std::fflush(stderr);
  std::_Exit(1);
}
} // namespace detail

/// Installs the handlers; `tool` names the program in the error line.
inline void installFatalErrorHandlers(const char *tool) {
  detail::fatalErrorTool() = tool;
  llvm::install_fatal_error_handler(
      [](void *, const char *reason, bool) {
        detail::exitWithFatalError(reason);
      },
      nullptr);
  // No allocation may happen in these two: memory has run out.
  llvm::install_bad_alloc_error_handler(
      [](void *, const char *, bool) {
        detail::exitWithFatalError("out of memory");
      },
      nullptr);
  std::set_new_handler([] { detail::exitWithFatalError("out of memory"); });
  // The tools are built without exceptions, so an exception that reaches
  // here is named by its type only.
  std::set_terminate([] {
    const char *reason = "internal error: std::terminate called";
    static char message[512];
    if (std::type_info *type = abi::__cxa_current_exception_type()) {
      int status = 0;
      char *name = abi::__cxa_demangle(type->name(), nullptr, nullptr, &status);
      std::snprintf(message, sizeof(message),
                    "internal error: uncaught exception %s",
                    status == 0 && name ? name : type->name());
      std::free(name);
      reason = message;
    }
    detail::exitWithFatalError(reason);
  });
}

} // namespace moec

#endif // MOEC_TOOLS_FATALERRORS_H
