//===- VerifyTool.h - Hand an accuracy check to moec-verify -----*- C++ -*-===//
//
// `moec verify MODEL ...` and `moe-run PLAN --compare MODEL` compare a plan
// with onnxruntime, which is Python: both exec the `moec-verify` tool
// (tools/verify/moec_verify.py) with their arguments. It is found as
// $MOEC_VERIFY, else next to the running binary (the build tree's bin/
// holds a wrapper, an install its entry point), else on PATH (scripts/
// setup.sh installs it into .venv/bin). Header-only and free of LLVM, so
// that the runtime's moe-run can use it too.
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

/// The moec-verify to run: $MOEC_VERIFY, the one next to this executable,
/// or "" (then PATH is searched).
inline std::string findVerifyTool() {
  if (const char *env = std::getenv("MOEC_VERIFY"); env && *env)
    return env;
  std::string sibling = selfDirectory() + "moec-verify";
  if (sibling != "moec-verify" && access(sibling.c_str(), X_OK) == 0)
    return sibling;
  return "";
}

/// Replaces this process by moec-verify with `args`; returns only when that
/// fails, after printing `TOOL: error: ...`, with exit status 1.
inline int execVerifyTool(const char *tool,
                          const std::vector<std::string> &args) {
  std::string path = findVerifyTool();
  std::vector<char *> argv;
  std::string name = "moec-verify";
  argv.push_back(name.data());
  for (const std::string &arg : args)
    argv.push_back(const_cast<char *>(arg.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  // moec-verify runs moec and moe-run: these, from the same installation.
  if (std::string dir = selfDirectory(); !dir.empty())
    setenv("MOEC_BIN_DIR", dir.c_str(), 1);
  if (path.empty())
    execvp(name.c_str(), argv.data());
  else
    execv(path.c_str(), argv.data());
  int error = errno;
  std::fprintf(stderr,
               "%s: error: %s: cannot run the accuracy check: %s; it needs "
               "moec-verify (tools/verify, Python with onnxruntime): run "
               "scripts/setup.sh, or set MOEC_VERIFY to its path\n",
               tool, path.empty() ? "moec-verify" : path.c_str(),
               error == ENOENT ? "not found (next to this tool or on PATH)"
                               : std::strerror(error));
  return 1;
}

} // namespace moec

#endif // MOEC_TOOLS_VERIFYTOOL_H
