//===- Diagnostics.cpp - diagnostics about an ONNX model ------------------===//

#include "compiler/onnx/Diagnostics.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace moec::onnx_import;

Location moec::onnx_import::getModelLoc(MLIRContext *context, StringRef path) {
  return FileLineColLoc::get(context, path, /*line=*/0, /*column=*/0);
}

Location moec::onnx_import::getSubjectLoc(Location modelLoc,
                                          const llvm::Twine &subject) {
  return NameLoc::get(StringAttr::get(modelLoc->getContext(), subject),
                      modelLoc);
}

ModelDiagnosticHandler::ModelDiagnosticHandler(MLIRContext *context,
                                               llvm::raw_ostream &os,
                                               StringRef prefix)
    : ScopedDiagnosticHandler(context), os(os), prefix(prefix) {
  setHandler([this](Diagnostic &diagnostic) {
    print(diagnostic);
    for (Diagnostic &note : diagnostic.getNotes())
      print(note);
  });
}

static StringRef getSeverityName(DiagnosticSeverity severity) {
  switch (severity) {
  case DiagnosticSeverity::Error:
    return "error";
  case DiagnosticSeverity::Warning:
    return "warning";
  case DiagnosticSeverity::Remark:
    return "remark";
  case DiagnosticSeverity::Note:
    return "note";
  }
  llvm_unreachable("unknown diagnostic severity");
}

std::string moec::onnx_import::describeLoc(Location loc) {
  // The file names the model; the names wrapped around it say which part of
  // it, each narrowing the one it wraps ("attribute 'value'" around
  // "node 'c' (Constant)"), so they print innermost first.
  StringRef file;
  SmallVector<StringRef> subjects;
  loc->walk([&](Location part) {
    if (auto fileLoc = dyn_cast<FileLineColRange>(part)) {
      file = fileLoc.getFilename().getValue();
      return WalkResult::interrupt();
    }
    if (auto nameLoc = dyn_cast<NameLoc>(part))
      subjects.push_back(nameLoc.getName().getValue());
    return WalkResult::advance();
  });
  std::string out;
  llvm::raw_string_ostream os(out);
  if (!file.empty())
    os << file << ": ";
  for (StringRef subject : llvm::reverse(subjects))
    os << subject << ": ";
  return out;
}

void ModelDiagnosticHandler::print(Diagnostic &diagnostic) {
  os << prefix << ": " << getSeverityName(diagnostic.getSeverity()) << ": "
     << describeLoc(diagnostic.getLocation()) << diagnostic.str() << '\n';
  os.flush();
}
