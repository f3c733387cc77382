//===- moec-opt.cpp - mlir-opt for the moe dialect ------------------------===//
//
// Parses a module, runs passes given on the command line and prints the result;
// the driver of every lit test of the dialect and the passes.
//
//===----------------------------------------------------------------------===//

#include "compiler/InitAll.h"
#include "format/version.h"
#include "tools/FatalErrors.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  moec::installFatalErrorHandlers("moec-opt");
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << moert::getVersionLine("moec-opt") << ", LLVM/MLIR "
       << LLVM_VERSION_STRING << "\n";
  });
  mlir::DialectRegistry registry;
  moec::registerAllDialects(registry);
  moec::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "moec optimizer driver\n", registry));
}
