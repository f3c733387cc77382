//===- preflight.h - moe-run's checks before the work starts ----*- C++ -*-===//
//
// What moe-run checks before it loads a plan or runs anything, so that a
// long benchmark does not end in an error it could have given at once: that
// every output path can be written, and (a warning) that the devices'
// threads fit the cores this process may run on.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_PREFLIGHT_H
#define MOE_RUN_PREFLIGHT_H

#include "options.h"

#include "absl/status/status.h"

#include <string>

namespace moe_run {

/// Checks that the outputs of `outputs` can be written: the files of
/// --stats, --trace and --report-html (their directory exists and is
/// writable; an existing path is a writable file, not a directory) and the
/// directories of --output-dir and --save-inputs (an existing one is a
/// writable directory, else its nearest existing parent is, moe-run creating
/// the rest). The error names the flag and the path.
absl::Status checkOutputPaths(const OutputOptions &outputs);

/// The cores this process may run on: its CPU affinity (taskset, cpusets),
/// else std::thread::hardware_concurrency; at least 1.
int availableCores();

/// The warning when `devices` devices of `threadsPerDevice` threads each
/// exceed `cores` (threads then take turns on a core, and every exchange
/// waits for the slowest); "" when they fit.
std::string oversubscription(int devices, int threadsPerDevice, int cores);

} // namespace moe_run

#endif // MOE_RUN_PREFLIGHT_H
