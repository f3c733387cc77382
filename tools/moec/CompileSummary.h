//===- CompileSummary.h - What moec compile tells its user ------*- C++ -*-===//
//
// The parts of `moec compile` that speak to the person running it rather
// than build the plan: the output paths checked before minutes of work,
// progress on a terminal, the warning about dynamic dimensions that each
// take --max-tokens, and the one summary line of a written plan.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_MOEC_COMPILESUMMARY_H
#define MOEC_TOOLS_MOEC_COMPILESUMMARY_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <optional>
#include <string>

namespace moert {
class Plan;
} // namespace moert

namespace moec {

/// `bytes` for a person: "812 B", "240.0 KiB", "1.2 MiB", "3.40 GiB".
std::string formatBytes(uint64_t bytes);

/// The usage error of an output path given with `flag` that cannot be
/// written ("" when it can): its directory is missing or not writable, or
/// the path is a directory. Checked before the work, not after it.
std::string checkOutputPath(llvm::StringRef flag, llvm::StringRef path);

/// Shows on stderr which phase and pass of a compile runs, with the time
/// since the start, on one line rewritten in place: on a terminal only
/// (or when forced, for tests), and cleared when done.
class CompileProgress {
public:
  /// Diagnostics of `context` clear the line before they print.
  CompileProgress(mlir::MLIRContext *context, bool enabled);
  ~CompileProgress();

  /// Shows `what` ("importing model.onnx", "writing the plan").
  void phase(llvm::StringRef what);
  /// Clears the line.
  void done();
  /// An instrumentation for a pass manager that shows each pass it runs as
  /// a phase; this object must outlive it.
  std::unique_ptr<mlir::PassInstrumentation> passInstrumentation();

  /// Seconds since construction.
  double elapsedSeconds() const;

private:
  mlir::MLIRContext *context;
  bool enabled;
  bool shown = false;
  /// The handler that clears the line before a diagnostic prints.
  std::optional<uint64_t> handler;
  std::string last;
  std::chrono::steady_clock::time_point start;
};

/// Warns (at `modelPath`) when more than one dynamic input dimension took
/// --max-tokens `maxTokens` as its bound in the planned `module` (none
/// named by --bound): buffers are then planned for their product of tokens.
/// The warning names the dimensions, the arena they imply and the --bound
/// that shrinks it.
void warnUnboundedDimensions(mlir::ModuleOp module, llvm::StringRef modelPath,
                             llvm::ArrayRef<std::string> dimBounds,
                             uint64_t maxTokens);

/// Prints the summary of a plan written to `planPath`: its size, the MoE
/// layers of the compiled `module` and their form, the arena and weights
/// of `plan` (the written plan, loaded) and the compile time.
void printCompileSummary(llvm::raw_ostream &os, llvm::StringRef planPath,
                         const moert::Plan &plan, mlir::ModuleOp module,
                         double seconds);

} // namespace moec

#endif // MOEC_TOOLS_MOEC_COMPILESUMMARY_H
