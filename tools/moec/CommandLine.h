//===- CommandLine.h - moec's usage errors in its own style -----*- C++ -*-===//
//
// moec parses its flags with llvm::cl, whose errors read like LLVM's
// ("for the --max-tokens option: 'x' value invalid for ulong argument!",
// "Unknown command line argument '--jsn'.  Try: '/path/moec --help'"). moec
// reports every error as `moec: error: WHERE: WHAT`; these turn cl's text
// into that form, followed by a one-line hint instead of the whole help.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_MOEC_COMMANDLINE_H
#define MOEC_TOOLS_MOEC_COMMANDLINE_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace moec {

/// The usage error that llvm::cl's error text `text` (its lines, each
/// starting "PROGRAM: ") says, in moec's words without the leading
/// "moec: error: ". `command` is the subcommand given ("" for none), whose
/// positional argument is named in the message.
std::string rewordCommandLineError(llvm::StringRef text,
                                   llvm::StringRef command);

/// Parses the command line with llvm::cl; on failure returns false with
/// everything cl printed (some of its errors go to stderr directly, which
/// is captured meanwhile) in `errors`.
bool parseCommandLine(int argc, char **argv, llvm::StringRef overview,
                      std::string &errors);

/// The hint printed after a usage error: "run 'moec COMMAND --help' for
/// usage".
std::string usageHint(llvm::StringRef command);

} // namespace moec

#endif // MOEC_TOOLS_MOEC_COMMANDLINE_H
