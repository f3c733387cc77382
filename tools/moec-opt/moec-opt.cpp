//===- moec-opt.cpp - mlir-opt for the moe dialect ------------------------===//
//
// Parses a module, runs passes given on the command line and prints the result;
// the driver of every lit test of the dialect and the passes.
//
//===----------------------------------------------------------------------===//

#include "compiler/InitAll.h"
#include "tools/FatalErrors.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  moec::installFatalErrorHandlers("moec-opt");
  mlir::DialectRegistry registry;
  moec::registerAllDialects(registry);
  moec::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "moec optimizer driver\n", registry));
}
