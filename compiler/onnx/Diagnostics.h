//===- Diagnostics.h - diagnostics about an ONNX model ----------*- C++ -*-===//
//
// Every error about a model names the model file and the part of it at fault
// (a node, an initializer, a field). Both are carried by the MLIR location:
// a FileLineColLoc for the file, wrapped in a NameLoc that describes the part
// ("node 'gate' (MatMul)", "initializer 'w1'"). The same locations become the
// imported ops' locations, so later passes report at the ONNX node too.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_DIAGNOSTICS_H
#define MOEC_COMPILER_ONNX_DIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"

#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace moec::onnx_import {

/// Returns the location of the model file `path` as a whole.
mlir::Location getModelLoc(mlir::MLIRContext *context, llvm::StringRef path);

/// Returns the location of one part of the model at `modelLoc`, described by
/// `subject` (for example "initializer 'w1'").
mlir::Location getSubjectLoc(mlir::Location modelLoc,
                             const llvm::Twine &subject);

/// Where `loc` points in a model, as diagnostics print it: `<file>: ` then
/// `<subject>: ` for each part, outermost first (empty when it names none).
std::string describeLoc(mlir::Location loc);

/// Prints the diagnostics of a context, for as long as it lives, in the form
/// `<prefix>: error: <file>: <subject>: <message>` (the tool, then where,
/// then what; notes, warnings and remarks alike), one line each; the file
/// and subjects are left out when the location names none.
class ModelDiagnosticHandler : public mlir::ScopedDiagnosticHandler {
public:
  ModelDiagnosticHandler(mlir::MLIRContext *context, llvm::raw_ostream &os,
                         llvm::StringRef prefix);

private:
  void print(mlir::Diagnostic &diagnostic);

  llvm::raw_ostream &os;
  std::string prefix;
};

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_DIAGNOSTICS_H
