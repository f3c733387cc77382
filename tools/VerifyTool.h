//===- VerifyTool.h - Hand an accuracy check to moec-verify -----*- C++ -*-===//
//
// `moec verify MODEL ...` and `moe-run PLAN --compare MODEL` compare a plan
// with onnxruntime, which is Python: both exec the `moec-verify` tool
// (tools/verify/moec_verify.py) with their arguments. It is found as
// $MOEC_VERIFY, else next to the running binary (the build tree's bin/
// holds a wrapper, an install its entry point), else on PATH (scripts/
// setup.sh installs it into .venv/bin). `moe-run PLAN --tokenizer PATH
// --prompt TEXT` hands text generation to `moe-serve generate` the same way
// ($MOE_SERVE). Header-only and free of LLVM, so that the runtime's moe-run
// can use it too.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_VERIFYTOOL_H
#define MOEC_TOOLS_VERIFYTOOL_H

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

namespace moec {

/// The directory of the running executable, with a trailing '/' ("" when
/// unknown).
inline std::string selfDirectory() {
  char self[PATH_MAX];
  ssize_t size = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (size <= 0)
    return "";
  std::string path(self, static_cast<size_t>(size));
  return path.substr(0, path.find_last_of('/') + 1);
}

/// The tool `name` to run: $`envVar`, the one next to this executable, or
/// "" (then PATH is searched).
inline std::string findSiblingTool(const std::string &name,
                                   const char *envVar) {
  if (const char *env = std::getenv(envVar); env && *env)
    return env;
  std::string sibling = selfDirectory() + name;
  if (sibling != name && access(sibling.c_str(), X_OK) == 0)
    return sibling;
  return "";
}

/// Replaces this process by the tool `name` (found by findSiblingTool)
/// with `args`; returns only when that fails, after printing `TOOL: error:
/// PATH: cannot run WHAT: REASON; HINT`, with exit status 1.
inline int execSiblingTool(const char *tool, const std::string &name,
                           const char *envVar,
                           const std::vector<std::string> &args,
                           const char *what, const char *hint) {
  std::string path = findSiblingTool(name, envVar);
  std::vector<char *> argv;
  std::string argv0 = name;
  argv.push_back(argv0.data());
  for (const std::string &arg : args)
    argv.push_back(const_cast<char *>(arg.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  // The tool runs moec and moe-run: these, from the same installation.
  if (std::string dir = selfDirectory(); !dir.empty())
    setenv("MOEC_BIN_DIR", dir.c_str(), 1);
  if (path.empty())
    execvp(name.c_str(), argv.data());
  else
    execv(path.c_str(), argv.data());
  int error = errno;
  std::fprintf(stderr, "%s: error: %s: cannot run %s: %s; %s\n", tool,
               path.empty() ? name.c_str() : path.c_str(), what,
               error == ENOENT ? "not found (next to this tool or on PATH)"
                               : std::strerror(error),
               hint);
  return 1;
}

/// Replaces this process by moec-verify with `args` ($MOEC_VERIFY, else
/// next to this executable, else on PATH).
inline int execVerifyTool(const char *tool,
                          const std::vector<std::string> &args) {
  return execSiblingTool(tool, "moec-verify", "MOEC_VERIFY", args,
                         "the accuracy check",
                         "it needs moec-verify (tools/verify, Python with "
                         "onnxruntime): run scripts/setup.sh, or set "
                         "MOEC_VERIFY to its path");
}

} // namespace moec

#endif // MOEC_TOOLS_VERIFYTOOL_H
