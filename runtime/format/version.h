//===- version.h - Release, commit and plan format of this build -*- C++
//-*-===//
//
// What every tool's --version prints and what moec records in each plan it
// writes (docs/plan-format.md, "Provenance").
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_VERSION_H
#define MOERT_VERSION_H

#include <string>
#include <string_view>

namespace moert {

/// The release of moec and its runtime, e.g. "0.2.0" (the top-level
/// project's VERSION).
const char *getVersion();

/// The git commit the build came from: 12 hex digits, "-dirty" appended when
/// tracked files differed from it, or "unknown" outside a git checkout.
const char *getGitCommit();

/// The line `TOOL --version` prints: the tool, the release, the commit and
/// the range of plan formats this runtime reads, e.g.
/// "moe-run 0.2.0 (git 0123456789ab), reads plan format 1.0 to 1.4".
std::string getVersionLine(std::string_view tool);

} // namespace moert

#endif // MOERT_VERSION_H
