//===- CommandLine.cpp - moec's usage errors in its own style -------------===//

#include "CommandLine.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <unistd.h>

using namespace llvm;

namespace {

/// What a cl value type is called in a message.
StringRef describeType(StringRef type) {
  if (type == "ulong" || type == "uint" || type == "long" || type == "int")
    return type.starts_with("u") ? "a non-negative integer" : "an integer";
  if (type == "number")
    return "a number";
  return "a valid value";
}

/// One line of cl's text without its "PROGRAM: " prefix.
StringRef stripProgram(StringRef line) {
  // cl prefixes its program name ("moec" or argv[0]) and ": ".
  size_t colon = line.find(": ");
  if (colon != StringRef::npos && !line.take_front(colon).contains(' ') &&
      !line.take_front(colon).starts_with("-") && !line.starts_with("'"))
    return line.drop_front(colon + 2);
  return line;
}

} // namespace

std::string moec::rewordCommandLineError(StringRef text, StringRef command) {
  SmallVector<StringRef> lines;
  text.split(lines, '\n', -1, /*KeepEmpty=*/false);
  if (lines.empty())
    return "invalid command line";
  StringRef first = stripProgram(lines.front()).trim();
  std::string suggestion;
  for (StringRef line : ArrayRef(lines).drop_front()) {
    StringRef body = stripProgram(line).trim();
    if (body.consume_front("Did you mean ") && body.consume_back("?"))
      suggestion = (" (did you mean " + body + "?)").str();
  }
  SmallVector<StringRef> match;
  if (Regex("^Unknown command line argument '([^']*)'").match(first, &match))
    return ("unknown option '" + match[1] + "'" + suggestion).str();
  if (Regex("^Unknown subcommand '([^']*)'").match(first, &match))
    return ("unknown command '" + match[1] +
            "' (the commands: check, compile, inspect, ops, verify)")
        .str();
  if (first.starts_with("Not enough positional command line arguments"))
    return command == "inspect" ? "no plan given"
           : command.empty()    ? "no command given"
                                : "no model given";
  if (first.starts_with("Too many positional arguments"))
    return ("moec " + command + " takes one " +
            (command == "inspect" ? "plan" : "model") +
            "; unexpected extra argument")
        .str();
  if (Regex("^for the (-+[^ ]+) option: '([^']*)' value invalid for ([a-z]+) "
            "argument")
          .match(first, &match))
    return (match[1] + " needs " + describeType(match[3]) + ", not '" +
            match[2] + "'")
        .str();
  if (Regex("^for the (-+[^ ]+) option: '([^']*)' is invalid value for "
            "boolean argument")
          .match(first, &match))
    return (match[1] + " takes no value, or true/false; not '" + match[2] + "'")
        .str();
  if (Regex("^for the (-+[^ ]+) option: requires a value").match(first, &match))
    return (match[1] + " needs a value").str();
  if (Regex("^for the (-+[^ ]+) option: may only occur zero or one times")
          .match(first, &match))
    return (match[1] + " is given more than once").str();
  if (Regex("^for the (-+[^ ]+) option: (.*)$").match(first, &match))
    return (match[1] + ": " + match[2].rtrim("!")).str();
  return first.rtrim("!").str();
}

bool moec::parseCommandLine(int argc, char **argv, StringRef overview,
                            std::string &errors) {
  raw_string_ostream stream(errors);
  // cl reports a bad option value on llvm::errs() whatever stream it is
  // given: stderr goes to a temporary file while it parses.
  std::FILE *capture = std::tmpfile();
  int saved = capture ? dup(STDERR_FILENO) : -1;
  if (saved >= 0)
    dup2(fileno(capture), STDERR_FILENO);
  bool ok = cl::ParseCommandLineOptions(argc, argv, overview, &stream);
  errs().flush();
  if (saved >= 0) {
    dup2(saved, STDERR_FILENO);
    close(saved);
    std::string direct;
    std::rewind(capture);
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), capture));)
      direct.append(buffer, n);
    // What cl printed directly comes first: it is the error itself.
    errors = direct + errors;
  }
  if (capture)
    std::fclose(capture);
  return ok;
}

std::string moec::usageHint(StringRef command) {
  return ("run 'moec " + (command.empty() ? "" : command + " ") +
          "--help' for usage")
      .str();
}
