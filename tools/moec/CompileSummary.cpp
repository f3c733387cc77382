//===- CompileSummary.cpp - What moec compile tells its user --------------===//

#include "CompileSummary.h"

#include "compiler/onnx/Diagnostics.h"
#include "compiler/plan/CompilePipeline.h"
#include "compiler/plan/PlanEmitter.h"
#include "moert/moert.h"
#include "observe/inspect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <algorithm>

using namespace mlir;

namespace moec {

std::string formatBytes(uint64_t bytes) {
  if (bytes < 1024)
    return std::to_string(bytes) + " B";
  const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return llvm::formatv(value < 10 ? "{0:F2} {1}" : "{0:F1} {1}", value,
                       units[unit])
      .str();
}

std::string checkOutputPath(llvm::StringRef flag, llvm::StringRef path) {
  if (path.empty() || path == "-")
    return "";
  if (llvm::sys::fs::is_directory(path))
    return (flag + " " + path + ": is a directory, not a file").str();
  llvm::StringRef parent = llvm::sys::path::parent_path(path);
  if (parent.empty())
    parent = ".";
  if (!llvm::sys::fs::exists(parent))
    return (flag + " " + path + ": the directory " + parent + " does not exist")
        .str();
  if (!llvm::sys::fs::is_directory(parent))
    return (flag + " " + path + ": " + parent + " is not a directory").str();
  if (llvm::sys::fs::access(parent, llvm::sys::fs::AccessMode::Write))
    return (flag + " " + path + ": the directory " + parent +
            " is not writable")
        .str();
  return "";
}

CompileProgress::CompileProgress(MLIRContext *context, bool enabled)
    : context(context), enabled(enabled),
      start(std::chrono::steady_clock::now()) {
  if (!enabled)
    return;
  // Registered after moec's own handler, so it runs first; failure passes
  // the diagnostic on to be printed.
  handler = context->getDiagEngine().registerHandler([this](Diagnostic &) {
    done();
    return failure();
  });
}

CompileProgress::~CompileProgress() {
  done();
  if (handler)
    context->getDiagEngine().eraseHandler(*handler);
}

double CompileProgress::elapsedSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

void CompileProgress::phase(llvm::StringRef what) {
  // Nested passes run once per function: one line per change.
  if (!enabled || what == last)
    return;
  last = what.str();
  llvm::errs() << llvm::formatv("\r\x1b[Kmoec: {0:F1} s  {1}", elapsedSeconds(),
                                what);
  llvm::errs().flush();
  shown = true;
}

void CompileProgress::done() {
  if (!shown)
    return;
  llvm::errs() << "\r\x1b[K";
  llvm::errs().flush();
  shown = false;
  last.clear();
}

namespace {
/// Shows each pass a pass manager runs as a phase of `progress`.
class PassProgress : public PassInstrumentation {
public:
  explicit PassProgress(CompileProgress &progress) : progress(progress) {}
  void runBeforePass(Pass *pass, Operation *) override {
    // The pass managers' adaptors (which have no argument) are no phase of
    // their own.
    if (!pass->getArgument().empty())
      progress.phase(pass->getArgument());
  }

private:
  CompileProgress &progress;
};
} // namespace

std::unique_ptr<PassInstrumentation> CompileProgress::passInstrumentation() {
  return std::make_unique<PassProgress>(*this);
}

void warnUnboundedDimensions(ModuleOp module, llvm::StringRef modelPath,
                             llvm::ArrayRef<std::string> dimBounds,
                             uint64_t maxTokens) {
  FailureOr<SmallVector<func::FuncOp>> funcs =
      moec::plan::getDeviceFunctions(module);
  if (failed(funcs))
    return;
  llvm::StringSet<> given;
  for (const std::string &bound : dimBounds)
    given.insert(llvm::StringRef(bound).split('=').first);
  // Each named dimension once (inputs share them), each unnamed one alone.
  std::vector<std::string> unbounded;
  func::FuncOp main = funcs->front();
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    auto type = dyn_cast<RankedTensorType>(main.getArgument(i).getType());
    auto params = main.getArgAttrOfType<ArrayAttr>(i, "moe.dim_params");
    auto name = main.getArgAttrOfType<StringAttr>(i, "moe.name");
    if (!type)
      continue;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (!type.isDynamicDim(d))
        continue;
      llvm::StringRef param;
      if (params && d < int64_t(params.size()))
        if (auto text = dyn_cast<StringAttr>(params[d]))
          param = text.getValue();
      if (given.contains(param))
        continue;
      std::string dim =
          param.empty()
              ? llvm::formatv("dim {0} of '{1}'", d,
                              name ? name.getValue() : llvm::StringRef("?"))
                    .str()
              : param.str();
      if (!llvm::is_contained(unbounded, dim))
        unbounded.push_back(std::move(dim));
    }
  }
  if (unbounded.size() < 2)
    return;
  uint64_t arena = 0;
  for (func::FuncOp func : *funcs)
    if (auto size = func->getAttrOfType<IntegerAttr>("moe.arena_size"))
      arena = std::max(arena, size.getValue().getZExtValue());
  double tokens = 1;
  for (size_t i = 0; i < unbounded.size(); ++i)
    tokens *= static_cast<double>(maxTokens);
  InFlightDiagnostic diag =
      emitWarning(onnx_import::getModelLoc(module.getContext(), modelPath));
  diag << unbounded.size() << " dynamic dimensions (";
  llvm::interleaveComma(unbounded, diag);
  diag << ") each take --max-tokens " << maxTokens
       << " as their bound, so buffers are planned for "
       << llvm::formatv("{0:F0}", tokens).str() << " tokens and the "
       << "activation arena is " << formatBytes(arena)
       << "; bound the smaller ones";
  // The token axis is the last dynamic one of an input ([batch, seq]); the
  // ones before it are usually a batch the user runs at 1.
  std::string example;
  for (const std::string &dim : llvm::ArrayRef(unbounded).drop_back())
    if (!llvm::StringRef(dim).starts_with("dim "))
      example += (example.empty() ? "" : " ") + ("--bound " + dim + "=1");
  if (!example.empty())
    diag << ", e.g. " << example;
  else
    diag << " with --bound NAME=N (they have no names: re-export them with "
            "named dynamic axes)";
}

void printCompileSummary(llvm::raw_ostream &os, llvm::StringRef planPath,
                         const moert::Plan &plan, ModuleOp module,
                         double seconds) {
  uint64_t fileSize = 0;
  (void)llvm::sys::fs::file_size(planPath, fileSize);
  uint64_t arena = 0, weights = 0;
  const moert::GenerationDesc *generation = plan.generation();
  for (int d = 0; d < plan.numDevices(); ++d) {
    arena = std::max(arena, plan.arenaSize(d));
    if (generation && generation->hasPrefill)
      arena = std::max(arena, plan.prefillArenaSize(d));
    weights = std::max(weights, moert::planWeightBytes(plan, d));
  }
  os << "moec: wrote " << planPath << " (" << formatBytes(fileSize) << ")";
  if (generation)
    os << ", a generation plan for " << generation->maxSeq << " positions";
  os << ": " << moec::plan::summarizeMoeLayers(module);
  const char *each = plan.numDevices() > 1 ? " per device" : "";
  os << ", arena " << formatBytes(arena) << each << ", weights "
     << formatBytes(weights) << each;
  if (generation)
    os << ", KV cache " << formatBytes(generation->cacheBytes);
  os << llvm::formatv(", {0:F1} s\n", seconds);
}

} // namespace moec
