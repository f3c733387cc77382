//===- Compile.h - moec compile ---------------------------------*- C++ -*-===//
//
// The compile flow of `moec compile`: a model (or a generation pair, or an
// onnxruntime-genai builder folder) through the pipeline to a plan or IR,
// from options that Options.h has already read and verify() checks first.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_MOEC_COMPILE_H
#define MOEC_TOOLS_MOEC_COMPILE_H

#include "Options.h"

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace moec {

/// Loads moec's dialects into `context`, whose diagnostics then print as
/// `<file>: error: <subject>: <message>`.
void configureContext(mlir::MLIRContext &context);

/// Runs `moec compile` with `flags`: resolves a builder folder, reports the
/// first usage error of the flags, then compiles; returns the exit code.
int runCompile(CompileFlags flags);

} // namespace moec

#endif // MOEC_TOOLS_MOEC_COMPILE_H
