//===- preflight.cpp - moe-run's checks before the work starts ------------===//

#include "preflight.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sched.h>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace moe_run {
namespace {

namespace fs = std::filesystem;

/// Whether this process may create and write entries in directory `dir`;
/// else the reason.
std::string directoryProblem(const fs::path &dir) {
  std::error_code ec;
  fs::file_status status = fs::status(dir, ec);
  if (ec || !fs::exists(status))
    return absl::StrCat("the directory '", dir.string(), "' does not exist");
  if (!fs::is_directory(status))
    return absl::StrCat("'", dir.string(), "' is not a directory");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    return absl::StrCat("cannot write in '", dir.string(),
                        "': ", std::strerror(errno));
  return "";
}

/// The directory of file `path` ("." for a bare name).
fs::path parentOf(const fs::path &path) {
  fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

absl::Status checkFile(const char *flag, const std::string &path) {
  if (path.empty())
    return absl::OkStatus();
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  std::string problem;
  if (!ec && fs::exists(status)) {
    if (fs::is_directory(status))
      problem = "it is a directory";
    else if (access(path.c_str(), W_OK) != 0)
      problem = absl::StrCat("cannot write it: ", std::strerror(errno));
  } else {
    problem = directoryProblem(parentOf(path));
  }
  if (problem.empty())
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", problem,
                                                 " (checked before the run)"));
}

absl::Status checkDirectory(const char *flag, const std::string &path) {
  if (path.empty())
    return absl::OkStatus();
  // moe-run creates the directory and its missing parents: the nearest one
  // that exists must take them.
  fs::path dir = path;
  std::error_code ec;
  while (!fs::exists(fs::symlink_status(dir, ec)) && dir.has_relative_path() &&
         dir.has_parent_path() && dir.parent_path() != dir)
    dir = dir.parent_path();
  if (!fs::exists(fs::symlink_status(dir, ec)))
    dir = ".";
  std::string problem = directoryProblem(dir);
  if (problem.empty())
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", problem,
                                                 " (checked before the run)"));
}

} // namespace

absl::Status checkOutputPaths(const OutputOptions &outputs) {
  MOERT_RETURN_IF_ERROR(checkFile("--stats", outputs.stats));
  MOERT_RETURN_IF_ERROR(checkFile("--trace", outputs.trace));
  MOERT_RETURN_IF_ERROR(checkFile("--report-html", outputs.reportHtml));
  MOERT_RETURN_IF_ERROR(checkDirectory("--output-dir", outputs.outputDir));
  return checkDirectory("--save-inputs", outputs.saveInputs);
}

int availableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string oversubscription(int devices, int threadsPerDevice, int cores) {
  int64_t total = int64_t{devices} * threadsPerDevice;
  if (total <= cores)
    return "";
  std::string fix =
      cores >= devices
          ? absl::StrCat("--threads ", cores / devices, " fits them")
          : absl::StrCat("the plan's ", devices,
                         " devices need as many cores, one thread each");
  return absl::StrCat(
      devices, devices == 1 ? " device" : " devices", " x ", threadsPerDevice,
      threadsPerDevice == 1 ? " thread" : " threads", " = ", total,
      " threads on ", cores, cores == 1 ? " core" : " cores",
      ": they take turns on the cores, which slows every run; ", fix);
}

} // namespace moe_run
