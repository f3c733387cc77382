//===- RewriteValidator.cpp - translation validation of MoE rewrites ------===//
//
// How a rewrite is checked:
//
// 1. Extraction. Both sides (the layer's original output and the proposed
//    replacement) become functions of the same arguments: the layer's input
//    first (its tokens, or the [B, S, H] hidden states they are a view of),
//    then every f32 value outside the layer that either side reads. An op
//    is cloned when it depends on the input, only on constants, or computes
//    integers (shape arithmetic); an f32 value of any other op (the
//    residual stream whose shape a loop reads, or an operand an edited
//    model rewired to something else) is an argument with its own random
//    data, so that neither side can read what the other does not see.
//    Constants are cloned as they are: the model's mapped weights are
//    referenced, never copied.
// 2. Lowering. Each function goes through moe-bound-shapes and
//    moe-plan-memory (bounded by the largest token count) and the plan
//    emitter into a temporary plan file (in memory), which the runtime
//    maps. The model's pages that the first side reads stay for the
//    second, which pages them out as the compile's plan writer does.
// 3. Running. Both plans run on the runtime's CPU session, one after the
//    other (so only one side's weights are mapped at a time), on the same
//    seeded random inputs (normal f32) at 1, 7 and 64 tokens (capped by
//    --max-tokens). The replacement also returns its router's logits; a
//    draw whose top-k selection has a near-tie (where the two sides may
//    legitimately choose different experts) is drawn again.
// 4. Comparing. The outputs must agree to max|a - b| <= 1e-5 * max(1,
//    max|a|), the bound the end-to-end tests use against onnxruntime.
//
//===----------------------------------------------------------------------===//

#include "compiler/verify/RewriteValidator.h"

#include "compiler/plan/PlanEmitter.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchSupport.h"
#include "passes/Passes.h"

#include "format/plan_stream.h"
#include "moert/moert.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>
#include <random>
#include <utility>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

using namespace mlir;

namespace moec::verify {
namespace {

/// Relative tolerance on the layer output (the end-to-end tests' bound).
constexpr double kTolerance = 1e-5;
/// The token counts a rewrite is run at (those up to --max-tokens).
constexpr int64_t kTokenCounts[] = {1, 7, 64};
/// Selection scores closer than this (relative) at the k-th choice are a
/// near-tie: the two sides may round them apart differently.
constexpr double kTieMargin = 1e-5;
/// Draws tried per token count before giving up on avoiding near-ties.
constexpr int kMaxDraws = 8;
/// The dim_param of a batch dimension of the extracted functions'
/// arguments, bounded to 1 (the leading dimension of inputs with several
/// dynamic ones, as the end-to-end tests draw them).
constexpr const char *kBatchSymbol = "moe_verify_batch";
constexpr const char *kTokensSymbol = "moe_verify_tokens";

/// Finds the ops and arguments of the functions extracted for one rewrite:
/// the arguments are the layer's input, then the values from outside the
/// layer either side reads.
class SliceBuilder {
public:
  explicit SliceBuilder(Value tokens) : tokens(tokens) {
    getForwardSlice(tokens, &dependsOnTokens);
    arguments.insert(tokens);
  }

  /// Collects the ops `output` is computed by, adding arguments for the
  /// values from outside the layer it reads.
  void collect(Value output, llvm::DenseSet<Operation *> &ops) {
    SmallVector<Value> worklist{output};
    while (!worklist.empty()) {
      Value value = worklist.pop_back_val();
      if (value == tokens)
        continue;
      Operation *op = value.getDefiningOp();
      // Integer values outside the layer are shape arithmetic (the sizes of
      // the hidden states a loop reshapes by): cloned, so that the shapes
      // come from the drawn arguments.
      bool shapeValue = op && !getElementTypeOrSelf(value.getType()).isF32() &&
                        op->getNumRegions() == 0 && isMemoryEffectFree(op);
      if (op && (dependsOnTokens.contains(op) || isConstantOnly(value) ||
                 shapeValue)) {
        if (ops.insert(op).second)
          llvm::append_range(worklist, op->getOperands());
        continue;
      }
      arguments.insert(value);
    }
  }

  llvm::SetVector<Value> arguments;

private:
  /// Whether `value` is computed from constants alone, by ops without side
  /// effects or regions.
  bool isConstantOnly(Value value) {
    Operation *op = value.getDefiningOp();
    if (!op)
      return false;
    auto it = constantOnly.find(op);
    if (it != constantOnly.end())
      return it->second;
    bool result = op->getNumRegions() == 0 && isMemoryEffectFree(op) &&
                  llvm::all_of(op->getOperands(), [&](Value operand) {
                    return isConstantOnly(operand);
                  });
    constantOnly[op] = result;
    return result;
  }

  Value tokens;
  llvm::SetVector<Operation *> dependsOnTokens;
  llvm::DenseMap<Operation *, bool> constantOnly;
};

/// The shape an argument of `type` is drawn with at `tokens` tokens: with
/// two or more dynamic dimensions the first is a batch of 1, and every
/// other dynamic dimension is the token count.
SmallVector<int64_t> getDrawShape(RankedTensorType type, int64_t tokens) {
  int64_t dynamic = type.getNumDynamicDims();
  SmallVector<int64_t> shape;
  bool first = true;
  for (int64_t size : type.getShape()) {
    if (!ShapedType::isDynamic(size)) {
      shape.push_back(size);
      continue;
    }
    shape.push_back(dynamic >= 2 && first ? 1 : tokens);
    first = false;
  }
  return shape;
}

/// The dim_params of an argument of `type`, naming the dimensions
/// getDrawShape fills so that the runtime checks they agree.
ArrayAttr getDimParams(Builder &builder, RankedTensorType type) {
  int64_t dynamic = type.getNumDynamicDims();
  SmallVector<Attribute> params;
  bool first = true;
  for (int64_t size : type.getShape()) {
    if (!ShapedType::isDynamic(size)) {
      params.push_back(builder.getStringAttr(""));
      continue;
    }
    params.push_back(builder.getStringAttr(
        dynamic >= 2 && first ? kBatchSymbol : kTokensSymbol));
    first = false;
  }
  return builder.getArrayAttr(params);
}

/// A module whose @main takes `arguments` and returns `outputs`, computed by
/// clones of `ops` (all in `block`, cloned in its order).
OwningOpRef<ModuleOp> buildFunction(Block &block, ArrayRef<Value> arguments,
                                    ArrayRef<Value> outputs,
                                    const llvm::DenseSet<Operation *> &ops) {
  MLIRContext *context = block.getParentOp()->getContext();
  Location loc = UnknownLoc::get(context);
  OpBuilder builder(context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  builder.setInsertionPointToEnd(module->getBody());
  SmallVector<Type> argumentTypes, resultTypes;
  for (Value value : arguments)
    argumentTypes.push_back(value.getType());
  for (Value value : outputs)
    resultTypes.push_back(value.getType());
  auto func =
      func::FuncOp::create(builder, loc, "main",
                           builder.getFunctionType(argumentTypes, resultTypes));
  Block *entry = func.addEntryBlock();
  IRMapping mapping;
  for (auto [index, value] : llvm::enumerate(arguments)) {
    mapping.map(value, entry->getArgument(index));
    func.setArgAttr(index, "moe.name",
                    builder.getStringAttr("arg" + std::to_string(index)));
    func.setArgAttr(
        index, "moe.dim_params",
        getDimParams(builder, cast<RankedTensorType>(value.getType())));
  }
  builder.setInsertionPointToEnd(entry);
  for (Operation &op : block)
    if (ops.contains(&op))
      builder.clone(op, mapping);
  SmallVector<Value> results;
  for (Value value : outputs)
    results.push_back(mapping.lookupOrDefault(value));
  func::ReturnOp::create(builder, loc, results);
  for (unsigned index = 0; index < outputs.size(); ++index)
    func.setResultAttr(index, "moe.name",
                       builder.getStringAttr("out" + std::to_string(index)));
  return module;
}

/// The runtime type of an argument of `type`, or nullopt when it is none.
std::optional<moert::DType> getDType(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return std::nullopt;
  Type element = tensor.getElementType();
  if (element.isF32())
    return moert::DType::F32;
  if (element.isInteger(64))
    return moert::DType::I64;
  if (element.isInteger(32))
    return moert::DType::I32;
  if (element.isInteger(1))
    return moert::DType::Bool;
  return std::nullopt;
}

/// One drawn argument: its type, shape and bytes.
struct Input {
  moert::DType dtype;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

/// One side of a rewrite, lowered to a plan and opened on the CPU.
struct Runner {
  std::unique_ptr<moert::Plan> plan;
  std::unique_ptr<moert::Session> session;
};

/// Collects the diagnostics of the inner pipeline as text instead of
/// reporting them: a layer that cannot be lowered is a rejected rewrite, not
/// a compile error.
class CapturedDiagnostics : public ScopedDiagnosticHandler {
public:
  explicit CapturedDiagnostics(MLIRContext *context)
      : ScopedDiagnosticHandler(context) {
    setHandler([this](Diagnostic &diagnostic) {
      if (diagnostic.getSeverity() == DiagnosticSeverity::Error) {
        if (!text.empty())
          text += "; ";
        text += diagnostic.str();
      }
      return success();
    });
  }
  std::string text;
};

/// Where each side's plan is written in turn: a file in memory (memfd) where
/// the system has one, else in the temporary directory; removed when it
/// goes. A layer's plan holds a copy of the layer's weights, which on disk
/// would cost a write and, once the kernel has written it back, a read of
/// every layer twice over. Each plan is written over the last in place, so
/// that the file's pages are allocated once for the largest layer, not
/// allocated and freed again for every side (bench/README.md, "The rewrite
/// validator's plans").
struct TemporaryPlan {
  std::string path;
  int fd = -1;

  static FailureOr<TemporaryPlan> create(std::string &error) {
    TemporaryPlan plan;
#if defined(__linux__) && defined(MFD_CLOEXEC)
    plan.fd = ::memfd_create("moec-verify-plan", MFD_CLOEXEC);
    if (plan.fd >= 0) {
      plan.path = "/proc/self/fd/" + std::to_string(plan.fd);
      // Written and loaded by path: without /proc, a file it is.
      int probe = ::open(plan.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (probe >= 0) {
        ::close(probe);
        return plan;
      }
      ::close(plan.fd);
      plan.fd = -1;
    }
#endif
    SmallString<128> path;
    if (std::error_code code =
            llvm::sys::fs::createTemporaryFile("moec-verify", "plan", path)) {
      error = "cannot create a temporary plan: " + code.message();
      return failure();
    }
    plan.path = std::string(path);
    return plan;
  }
  TemporaryPlan() = default;
  TemporaryPlan(TemporaryPlan &&other)
      : path(std::move(other.path)), fd(std::exchange(other.fd, -1)) {
    other.path.clear();
  }
  TemporaryPlan &operator=(TemporaryPlan &&) = delete;
  ~TemporaryPlan() {
    if (fd >= 0)
      ::close(fd);
    else if (!path.empty())
      (void)llvm::sys::fs::remove(path);
  }
};

/// Bounds, plans and emits `module` into `scratch` (which nothing may map),
/// and opens the plan on a CPU session. `firstSide`: the layer's other side
/// is lowered next, reading the same weights, so the model's pages this one
/// reads are kept for it.
FailureOr<Runner> lower(ModuleOp module, int64_t maxTokens,
                        const TemporaryPlan &scratch, std::string &error,
                        bool firstSide) {
  MLIRContext *context = module.getContext();
  CapturedDiagnostics diagnostics(context);
  PassManager pm(context);
  OpPassManager &funcPM = pm.nest<func::FuncOp>();
  MoeBoundShapesOptions bounds;
  bounds.maxTokens = maxTokens;
  bounds.dimBounds.push_back(std::string(kBatchSymbol) + "=1");
  funcPM.addPass(createMoeBoundShapes(bounds));
  funcPM.addPass(createMoePlanMemory());
  const std::string &path = scratch.path;
  // The plan writer pages out each weight's source once written (so that
  // writing a model larger than memory never holds it all). For the first
  // side that would make the second side, then the plan itself, read the
  // layer from the disk again: 3 reads of every rewritten layer instead of
  // 2 (bench/README.md, "The rewrite validator's reads").
  std::optional<moert::detail::KeepSourcePages> keep;
  if (firstSide)
    keep.emplace();
  auto inPlace = [](moert::PlanWriter &writer) {
    writer.setOverwriteInPlace();
    return success();
  };
  if (failed(pm.run(module)) || failed(plan::emitPlan(module, path, inPlace))) {
    error = "cannot lower the layer: " + diagnostics.text;
    return failure();
  }
  moert::LoadOptions load;
  load.verifyWeightChecksums = false;
  // A layer runs a few times: its weights are not worth a copy into huge
  // pages.
  load.weightPages = moert::LoadOptions::WeightPages::Mapped;
  absl::StatusOr<std::unique_ptr<moert::Plan>> plan =
      moert::Plan::load(std::string(path), load);
  if (!plan.ok()) {
    error =
        "cannot load the layer's plan: " + std::string(plan.status().message());
    return failure();
  }
  Runner runner;
  runner.plan = std::move(*plan);
  moert::SessionOptions options;
  options.collectStats = false;
  absl::StatusOr<std::unique_ptr<moert::Session>> session =
      moert::Session::create(*runner.plan, options);
  if (!session.ok()) {
    error = "cannot run the layer: " + std::string(session.status().message());
    return failure();
  }
  runner.session = std::move(*session);
  return runner;
}

/// Sets every input of `runner` from `inputs` and runs it.
absl::Status run(Runner &runner, ArrayRef<Input> inputs) {
  for (auto [index, input] : llvm::enumerate(inputs))
    MOERT_RETURN_IF_ERROR(runner.session->setInput(
        "arg" + std::to_string(index), input.dtype, input.shape,
        input.bytes.data(), input.bytes.size()));
  return runner.session->run();
}

/// The f32 values of output `index` of a session that ran.
absl::StatusOr<std::vector<float>> getOutput(Runner &runner, unsigned index,
                                             std::vector<int64_t> *shape) {
  absl::StatusOr<moert::TensorData> data =
      runner.session->output("out" + std::to_string(index));
  if (!data.ok())
    return data.status();
  if (data->dtype != moert::DType::F32)
    return absl::InvalidArgumentError("output is not f32");
  if (shape)
    *shape = data->shape;
  const auto *begin = static_cast<const float *>(data->data);
  return std::vector<float>(begin, begin + data->bytes / sizeof(float));
}

/// Whether the selection of `router` has a near-tie at its k-th choice in
/// some row, given its `logits` and selection `bias` (empty if none).
bool hasNearTie(moe::RouterOp router, const std::vector<float> &logits,
                const std::vector<float> &bias, int64_t experts) {
  int64_t k = router.getTopKAttr().getInt();
  if (experts <= 0 || k >= experts)
    return false;
  std::vector<double> scores(experts);
  for (size_t row = 0; row + experts <= logits.size(); row += experts) {
    const float *l = logits.data() + row;
    double max = *std::max_element(l, l + experts), sum = 0;
    for (int64_t e = 0; e < experts; ++e) {
      double s = l[e];
      if (!router.getScoreAfterTopk()) {
        if (router.getScoreFunction() == moe::ScoreFunction::Softmax) {
          s = std::exp(s - max);
          sum += s;
        } else {
          s = 1.0 / (1.0 + std::exp(-s));
        }
      }
      scores[e] = s;
    }
    for (int64_t e = 0; e < experts; ++e) {
      if (sum > 0)
        scores[e] /= sum;
      if (!bias.empty())
        scores[e] += bias[e];
    }
    std::vector<double> sorted = scores;
    std::nth_element(sorted.begin(), sorted.begin() + k, sorted.end(),
                     std::greater<double>());
    double next = sorted[k];
    double kth = *std::min_element(sorted.begin(), sorted.begin() + k);
    if (kth - next <= kTieMargin * std::max(1.0, std::abs(kth)))
      return true;
  }
  return false;
}

/// Draw `draw` of the arguments at `count` tokens: normal floats, and
/// zero integers (integers from outside a layer are read for their shape).
SmallVector<Input> drawInputs(ArrayRef<Value> arguments, int64_t count,
                              int draw) {
  std::mt19937_64 rng(0x5eed0000u + count * 64 + draw);
  std::normal_distribution<float> normal;
  SmallVector<Input> inputs;
  for (Value argument : arguments) {
    auto type = cast<RankedTensorType>(argument.getType());
    SmallVector<int64_t> shape = getDrawShape(type, count);
    Input input;
    input.dtype = *getDType(type);
    input.shape.assign(shape.begin(), shape.end());
    int64_t elements = 1;
    for (int64_t size : shape)
      elements *= size;
    input.bytes.assign(elements * moert::dtypeSize(input.dtype), 0);
    if (input.dtype == moert::DType::F32) {
      auto *data = reinterpret_cast<float *>(input.bytes.data());
      for (int64_t i = 0; i < elements; ++i)
        data[i] = normal(rng);
    }
    inputs.push_back(std::move(input));
  }
  return inputs;
}

class Validator final : public RewriteValidator {
public:
  Validator(Dialect *dialect, const ValidationOptions &options)
      : RewriteValidator(dialect), options(options) {}

  bool corruptRewrites() const override { return options.corrupt; }

  std::optional<std::string> validate(Value original, Value replacement,
                                      Value tokens) const override {
    if (!options.enabled)
      return std::nullopt;
    Operation *root = original.getDefiningOp();
    if (!root || !replacement.getDefiningOp() ||
        replacement.getDefiningOp()->getBlock() != root->getBlock())
      return std::string("the layer and its rewrite are not in one block");
    Block &block = *root->getBlock();

    // The layer's input is what its tokens are a view of (exports flatten
    // [B, S, H] hidden states, and the loop may read either).
    Value input = tokens;
    while (Operation *view = input.getDefiningOp()) {
      if (!isa<moe::ReshapeOp, moe::FlattenOp, moe::SqueezeOp,
               moe::UnsqueezeOp>(view) ||
          !getElementTypeOrSelf(view->getOperand(0).getType()).isF32())
        break;
      input = view->getOperand(0);
    }
    SliceBuilder slices(input);
    llvm::DenseSet<Operation *> originalOps, replacementOps;
    slices.collect(original, originalOps);
    slices.collect(replacement, replacementOps);
    // The replacement's router: its logits (and selection bias) are
    // returned as well, to find draws with near-ties.
    moe::RouterOp router;
    for (Operation *op : replacementOps)
      if (auto candidate = dyn_cast<moe::RouterOp>(op))
        router = candidate;
    SmallVector<Value> replacementOutputs{replacement};
    if (router) {
      replacementOutputs.push_back(router.getLogits());
      if (router.getBias())
        replacementOutputs.push_back(router.getBias());
    }
    SmallVector<Value> arguments(slices.arguments.begin(),
                                 slices.arguments.end());
    for (Value argument : arguments)
      if (!getDType(argument.getType()))
        return llvm::formatv("the layer reads a value of type {0} from "
                             "outside it",
                             argument.getType())
            .str();

    int64_t largest = 0;
    SmallVector<int64_t> counts;
    auto tokensType = cast<RankedTensorType>(input.getType());
    if (tokensType.hasStaticShape()) {
      counts.push_back(0); // The shape is the type's.
    } else {
      for (int64_t count : kTokenCounts)
        if (count <= options.maxTokens)
          counts.push_back(count);
      if (counts.empty())
        counts.push_back(options.maxTokens);
      largest = counts.back();
    }
    int64_t bound = std::max<int64_t>(largest, 1);

    // One side at a time, so that only one side's weights are mapped: the
    // rewrite first (its router tells which draws have near-ties), then
    // the original on the same draws. One layer at a time: both sides are
    // written to the one scratch file.
    std::string error;
    std::lock_guard<std::mutex> lock(scratchMutex);
    if (!scratch) {
      FailureOr<TemporaryPlan> created = TemporaryPlan::create(error);
      if (failed(created))
        return error;
      scratch.emplace(std::move(*created));
    }
    int64_t experts = router
                          ? cast<RankedTensorType>(router.getLogits().getType())
                                .getShape()
                                .back()
                          : 0;
    struct Trial {
      int64_t count;
      SmallVector<Input> inputs;
      std::vector<int64_t> shape;
      std::vector<float> output;
    };
    SmallVector<Trial> trials;
    {
      OwningOpRef<ModuleOp> module =
          buildFunction(block, arguments, replacementOutputs, replacementOps);
      FailureOr<Runner> runner =
          lower(*module, bound, *scratch, error, /*firstSide=*/true);
      if (failed(runner))
        return "the rewrite: " + error;
      for (int64_t count : counts) {
        bool drawn = false;
        for (int draw = 0; draw < kMaxDraws && !drawn; ++draw) {
          Trial trial{count, drawInputs(arguments, count, draw), {}, {}};
          if (absl::Status status = run(*runner, trial.inputs); !status.ok())
            return "the rewrite fails to run: " + std::string(status.message());
          if (router) {
            absl::StatusOr<std::vector<float>> logits =
                getOutput(*runner, 1, nullptr);
            absl::StatusOr<std::vector<float>> bias =
                router.getBias() ? getOutput(*runner, 2, nullptr)
                                 : absl::StatusOr<std::vector<float>>();
            if (logits.ok() && bias.ok() &&
                hasNearTie(router, *logits, *bias, experts))
              continue;
          }
          absl::StatusOr<std::vector<float>> output =
              getOutput(*runner, 0, &trial.shape);
          if (!output.ok())
            return std::string("cannot read the rewrite's output");
          trial.output = std::move(*output);
          trials.push_back(std::move(trial));
          drawn = true;
        }
        if (!drawn)
          return llvm::formatv("no draw of {0} tokens without a routing "
                               "near-tie",
                               count)
              .str();
      }
    }

    OwningOpRef<ModuleOp> module =
        buildFunction(block, arguments, {original}, originalOps);
    FailureOr<Runner> runner =
        lower(*module, bound, *scratch, error, /*firstSide=*/false);
    if (failed(runner))
      return "the original layer: " + error;
    for (const Trial &trial : trials) {
      if (absl::Status status = run(*runner, trial.inputs); !status.ok())
        return "the original layer fails to run: " +
               std::string(status.message());
      std::vector<int64_t> shape;
      absl::StatusOr<std::vector<float>> expected =
          getOutput(*runner, 0, &shape);
      if (!expected.ok())
        return std::string("cannot read the layer's output");
      int64_t tokens = trial.count ? trial.count : shape.front();
      if (shape != trial.shape)
        return llvm::formatv("output shapes differ at {0} tokens", tokens)
            .str();
      double scale = 1, diff = 0;
      for (auto [a, b] : llvm::zip(*expected, trial.output)) {
        scale = std::max(scale, double(std::abs(a)));
        double d = std::abs(double(a) - double(b));
        diff = std::isnan(d) ? INFINITY : std::max(diff, d);
      }
      double relative = diff / scale;
      if (!(relative <= kTolerance))
        return llvm::formatv("max rel error {0:e} at {1} tokens", relative,
                             tokens)
            .str();
    }
    return std::nullopt;
  }

  /// Frees the scratch file (created again if another rewrite comes).
  void releaseScratch() const {
    std::lock_guard<std::mutex> lock(scratchMutex);
    scratch.reset();
  }

private:
  ValidationOptions options;
  mutable std::mutex scratchMutex;
  mutable std::optional<TemporaryPlan> scratch;
};

} // namespace

void registerRewriteValidator(MLIRContext &context,
                              const ValidationOptions &options) {
  if (!options.enabled && !options.corrupt)
    return;
  auto *dialect = context.getOrLoadDialect<moe::MoeDialect>();
  dialect->addInterface(std::make_unique<Validator>(dialect, options));
}

void releaseRewriteValidatorMemory(MLIRContext &context) {
  auto *dialect = context.getLoadedDialect<moe::MoeDialect>();
  // registerRewriteValidator is the one place a RewriteValidator is made.
  if (const auto *validator =
          dialect ? dialect->getRegisteredInterface<RewriteValidator>()
                  : nullptr)
    static_cast<const Validator *>(validator)->releaseScratch();
}

} // namespace moec::verify
