//===- fuzz_onnx_import.cpp - libFuzzer target: ONNX bytes to a plan ------===//
//
// What `moec compile MODEL -o PLAN --max-tokens 64` does, in memory: parse
// the bytes as a ModelProto, validate and import it, run the compile
// pipeline, emit the plan and load it back with the runtime's verifying
// loader. Any outcome but a plan (accepted by the runtime, or refused, which
// moec reports as one error) or one diagnostic is a bug: a crash, an
// assertion, a sanitizer report.
//
// MOEC_FUZZ_VERBOSE=1 prints the diagnostics (silent by default: formatting
// them is still exercised, into a null stream).
//
//===----------------------------------------------------------------------===//

#include "compiler/InitAll.h"
#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/Import.h"
#include "compiler/plan/CompilePipeline.h"
#include "compiler/plan/PlanEmitter.h"
#include "moert/moert.h"
#include "onnx_mutator.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace mlir;

/// moec compile's default is 256; 64 keeps bounded shapes, and so the
/// arena the loader checks, small.
static constexpr int64_t kMaxTokens = 64;

static llvm::raw_ostream &diagnosticStream() {
  static bool verbose = [] {
    const char *env = std::getenv("MOEC_FUZZ_VERBOSE");
    return env && *env && *env != '0';
  }();
  return verbose ? llvm::errs() : llvm::nulls();
}

/// LLVM's allocators (BumpPtrAllocator) poison their free slab space when
/// the code that includes them is built with ASan: our instrumented code
/// inlines that poisoning, while the uninstrumented Debian libLLVM/MLIR
/// allocate from the same slabs without unpoisoning, which reads as
/// use-after-poison. Manual poisoning is ignored; ASan's own checks stay.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const DialectRegistry *registry = [] {
    auto *registry = new DialectRegistry;
    moec::registerAllDialects(*registry);
    return registry;
  }();
  // A fresh context per input, as a fresh moec process has; one thread, so
  // that runs are deterministic and a crash has one stack.
  MLIRContext context(*registry, MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);
  moec::onnx_import::ModelDiagnosticHandler diagnostics(
      &context, diagnosticStream(), "moec");

  OwningOpRef<ModuleOp> module = moec::onnx_import::importOnnxModelFromBuffer(
      &context, llvm::StringRef(reinterpret_cast<const char *>(data), size),
      "fuzz.onnx");
  if (!module)
    return 0;
  (*module)->setAttr("moe.max_tokens",
                     Builder(&context).getI64IntegerAttr(kMaxTokens));
  PassManager pm(&context);
  moec::plan::CompileOptions options;
  options.maxTokens = kMaxTokens;
  moec::plan::buildCompilePipeline(pm, options);
  if (failed(pm.run(*module)))
    return 0;
  // What `moec compile --verbose` prints.
  moec::plan::printMoeLayers(*module, llvm::nulls());

  std::vector<uint8_t> plan;
  if (failed(moec::plan::emitPlanToBuffer(*module, plan)))
    return 0;
  // moec loads every plan it writes and turns a refusal into one error
  // naming the step (an op on a dtype the runtime has no kernel for, ...):
  // the same clean exit here. The loader itself runs under the sanitizers.
  absl::StatusOr<std::unique_ptr<moert::Plan>> loaded =
      moert::Plan::loadFromMemory(plan.data(), plan.size());
  if (!loaded.ok())
    diagnosticStream() << "fuzz_onnx_import: the runtime refuses the plan: "
                       << loaded.status().ToString() << "\n";
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  return moec::fuzz::mutateOnnxModel(data, size, maxSize, seed);
}

extern "C" size_t LLVMFuzzerCustomCrossOver(const uint8_t *data1, size_t size1,
                                            const uint8_t *data2, size_t size2,
                                            uint8_t *out, size_t maxOutSize,
                                            unsigned seed) {
  return moec::fuzz::crossOverOnnxModels(data1, size1, data2, size2, out,
                                         maxOutSize, seed);
}
