//===- moec.cpp - the moec compiler driver --------------------------------===//
//
//   moec check MODEL [--json]       which ops of a model moec imports
//   moec ops [--json]               every ONNX op version moec imports
//   moec inspect PLAN [--json]      what a plan file holds
//   moec verify MODEL [--plan PLAN] [--input NAME=FILE.npy ...] [--rtol R]
//                [--atol A] [--tokens N] [--seed S]   (tools/verify)
//   moec compile MODEL -o OUT [--emit plan|mlir|planned-mlir] [--max-tokens N]
//                [--report FILE.json] [--verbose] [--emit-weights]
//                [--import-only] [--target cpu|cuda] [--cuda-arch sm_90]
//                [--ptx-output FILE.ptx] [--cuda-source FILE.cu]
//                [--devices N] [--micro-batches M]
//                [--routing-profile FILE.json] [--replicate-hot K]
//                [--weight-dtype f32|bf16|f16|int8] [--keep-f32 NAME,...]
//   moec compile DECODE.onnx [--prefill PREFILL.onnx] --max-seq S -o OUT
//                (a generation plan; docs/cli.md)
//
// Exit status: 0 on success, 1 when the model is invalid, uses an unsupported
// op or fails to compile, 2 on a usage error. The options are Options.h's,
// the compile flow Compile.h's.
//
//===----------------------------------------------------------------------===//

#include "CommandLine.h"
#include "Compile.h"
#include "Options.h"
#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/Import.h"
#include "format/version.h"
#include "observe/inspect.h"
#include "tools/FatalErrors.h"
#include "tools/VerifyTool.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace moec;
namespace cl = llvm::cl;
namespace onnx_import = moec::onnx_import;

//===----------------------------------------------------------------------===//
// moec check
//===----------------------------------------------------------------------===//

static void printCoverageJson(const std::string &modelPath,
                              const onnx_import::ModelCoverage &coverage,
                              bool allSupported) {
  llvm::json::Object opsets;
  for (const auto &[domain, version] : coverage.opsets)
    opsets[domain] = version;
  llvm::json::Array ops;
  for (const onnx_import::OpCoverage &op : coverage.ops)
    ops.push_back(llvm::json::Object{
        {"domain", op.domain},
        {"op_type", op.opType},
        {"opset", op.opset},
        {"version", op.sinceVersion ? llvm::json::Value(op.sinceVersion)
                                    : llvm::json::Value(nullptr)},
        {"nodes", op.numNodes},
        {"supported", op.supported}});
  llvm::json::Object root{{"model", modelPath},
                          {"ir_version", coverage.irVersion},
                          {"opset_import", std::move(opsets)},
                          {"nodes", coverage.numNodes},
                          {"ops", std::move(ops)},
                          {"supported", allSupported}};
  llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(root)))
               << "\n";
}

static void printCoverageTable(const std::string &modelPath,
                               const onnx_import::ModelCoverage &coverage,
                               int64_t numUnsupported) {
  llvm::raw_ostream &os = llvm::outs();
  os << modelPath << ": ir_version " << coverage.irVersion << ", opsets ";
  llvm::interleaveComma(coverage.opsets, os, [&](const auto &opset) {
    os << opset.first << " " << opset.second;
  });
  os << ", " << coverage.numNodes << " nodes\n";
  size_t domainWidth = 6, opWidth = 2;
  for (const onnx_import::OpCoverage &op : coverage.ops) {
    domainWidth = std::max(domainWidth, op.domain.size());
    opWidth = std::max(opWidth, op.opType.size());
  }
  os << llvm::left_justify("domain", domainWidth) << "  "
     << llvm::left_justify("op", opWidth) << "  opset  version  nodes  "
     << "status\n";
  for (const onnx_import::OpCoverage &op : coverage.ops) {
    os << llvm::left_justify(op.domain, domainWidth) << "  "
       << llvm::left_justify(op.opType, opWidth) << "  "
       << llvm::right_justify(std::to_string(op.opset), 5) << "  "
       << llvm::right_justify(
              op.sinceVersion ? std::to_string(op.sinceVersion) : "-", 7)
       << "  " << llvm::right_justify(std::to_string(op.numNodes), 5) << "  "
       << (op.supported ? "supported" : "unsupported") << "\n";
  }
  if (numUnsupported)
    os << numUnsupported << " of " << coverage.ops.size()
       << " op types unsupported\n";
  else
    os << "all " << coverage.ops.size() << " op types supported\n";
}

static int runCheck(const DriverOptions &options) {
  MLIRContext context;
  configureContext(context);
  onnx_import::ModelDiagnosticHandler diagnostics(&context, llvm::errs(),
                                                  "moec");
  FailureOr<onnx_import::ModelCoverage> coverage =
      onnx_import::checkOnnxModel(&context, options.model);
  if (failed(coverage))
    return kFailure;
  int64_t numUnsupported =
      llvm::count_if(coverage->ops, [](const onnx_import::OpCoverage &op) {
        return !op.supported;
      });
  if (options.json)
    printCoverageJson(options.model, *coverage, numUnsupported == 0);
  else
    printCoverageTable(options.model, *coverage, numUnsupported);
  return numUnsupported ? kFailure : kSuccess;
}

//===----------------------------------------------------------------------===//
// moec ops
//===----------------------------------------------------------------------===//

static int runOps(const DriverOptions &options) {
  MLIRContext context;
  configureContext(context);
  std::vector<onnx_import::SupportedOp> ops =
      onnx_import::getSupportedOps(&context);
  if (options.json) {
    llvm::json::Array array;
    for (const onnx_import::SupportedOp &op : ops)
      array.push_back(llvm::json::Object{
          {"domain", op.domain},
          {"op_type", op.opType},
          {"since_version", op.sinceVersion},
          {"first_opset", op.firstOpset},
          {"last_opset", op.lastOpset == INT64_MAX
                             ? llvm::json::Value(nullptr)
                             : llvm::json::Value(op.lastOpset)},
          {"target", op.targetOp},
          {"available", op.available},
          {"inputs", op.inputs},
          {"target_min_operands", op.targetMinOperands}});
    llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(array)))
                 << "\n";
    return kSuccess;
  }
  size_t opWidth = 2;
  for (const onnx_import::SupportedOp &op : ops)
    opWidth = std::max(opWidth, op.domain.size() + 1 + op.opType.size());
  llvm::raw_ostream &os = llvm::outs();
  os << llvm::left_justify("op", opWidth) << "  version  opsets  becomes\n";
  for (const onnx_import::SupportedOp &op : ops) {
    std::string opsets = std::to_string(op.firstOpset);
    if (op.lastOpset == INT64_MAX)
      opsets += "+";
    else if (op.lastOpset != op.firstOpset)
      opsets += "-" + std::to_string(op.lastOpset);
    os << llvm::left_justify(op.domain + "." + op.opType, opWidth) << "  "
       << llvm::right_justify(std::to_string(op.sinceVersion), 7) << "  "
       << llvm::left_justify(opsets, 6) << "  "
       << (op.targetOp.empty() ? "(no op)" : op.targetOp)
       << (op.available ? "" : " (not in the dialect)") << "\n";
  }
  return kSuccess;
}

//===----------------------------------------------------------------------===//
// moec inspect
//===----------------------------------------------------------------------===//

static int runInspect(const DriverOptions &options) {
  // The runtime's loader validates the whole file first, so a corrupt plan is
  // reported instead of printed; mapped, since nothing runs.
  moert::LoadOptions load;
  load.weightPages = moert::LoadOptions::WeightPages::Mapped;
  absl::StatusOr<std::unique_ptr<moert::Plan>> plan =
      moert::Plan::load(options.plan, load);
  if (!plan.ok()) {
    llvm::errs() << "moec: error: " << std::string(plan.status().message())
                 << "\n";
    return kFailure;
  }
  llvm::outs() << (options.json ? moert::describePlanJson(**plan)
                                : moert::describePlanText(**plan));
  return kSuccess;
}

int main(int argc, char **argv) {
  // `moec verify` is the Python accuracy check (onnxruntime): hand it the
  // arguments as they are.
  if (argc >= 2 && llvm::StringRef(argv[1]) == "verify")
    return moec::execVerifyTool(
        "moec", std::vector<std::string>(argv + 2, argv + argc));
  llvm::InitLLVM initLLVM(argc, argv);
  moec::installFatalErrorHandlers("moec");
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << moert::getVersionLine("moec") << ", LLVM/MLIR " LLVM_VERSION_STRING
       << "\n";
  });
  cl::HideUnrelatedOptions(getMoecCategory());
  // The subcommand given (argv[1] when it is one), for usage hints.
  std::string commandName;
  if (argc >= 2 && llvm::is_contained(
                       std::initializer_list<llvm::StringRef>{
                           "check", "ops", "compile", "inspect"},
                       argv[1]))
    commandName = argv[1];
  setCommandName(commandName);
  // cl's own wording (and its "Try: ... --help") becomes moec's style.
  std::string clErrors;
  if (!moec::parseCommandLine(
          argc, argv,
          "moec: ahead-of-time compiler for Mixture-of-Experts models\n",
          clErrors))
    return usageError(moec::rewordCommandLineError(clErrors, commandName));
  switch (getCommand()) {
  case Command::Check:
    return runCheck(getDriverOptions());
  case Command::Ops:
    return runOps(getDriverOptions());
  case Command::Compile:
    return runCompile(getCompileFlags());
  case Command::Inspect:
    return runInspect(getDriverOptions());
  case Command::None:
    break;
  }
  return usageError("no command given (check, compile, inspect, ops or "
                    "verify)");
}
