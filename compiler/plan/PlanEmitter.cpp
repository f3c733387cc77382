//===- PlanEmitter.cpp - moe dialect to plan.bin --------------------------===//
//
// The step serialiser: writes each function's signature, arena tensors,
// steps and outputs into a schedule. How the weights are stored is the
// weight-storage planner's (WeightStorage.h). Each op states its step kind
// and attributes in its ODS definition (dialects/moe/MoePlanStep.td); this
// file reads them through PlanStepOpInterface and names no op kind.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/PlanEmitter.h"
#include "compiler/plan/Generation.h"
#include "compiler/plan/InputRanges.h"
#include "compiler/plan/Multimodal.h"
#include "compiler/plan/WeightStorage.h"

#include "dialects/moe/MoeOps.h"

#include "format/plan_writer.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <optional>

using namespace mlir;
namespace fb = moert::fb;

namespace moec::plan {
namespace {

/// The schema's OpKind named `name`, if there is one.
std::optional<fb::OpKind> getOpKind(StringRef name) {
  for (fb::OpKind kind : fb::EnumValuesOpKind())
    if (kind != fb::OpKind::Invalid && name == fb::EnumNameOpKind(kind))
      return kind;
  return std::nullopt;
}

/// Emits one function as the schedule of `device`. Tensors are numbered in
/// the writer as values are visited; every op result that lives in the arena
/// carries its planned offset.
class Emitter {
public:
  Emitter(func::FuncOp func, int device, PlanState &state)
      : Emitter(func, device, state, state.writer.schedule(device), "") {}
  /// Emits `func` into `schedule` (a prefill schedule, say), prefixing the
  /// names of the symbols it declares with `symbolPrefix`.
  /// `pagedExperts`: how a tiered plan's schedule holds its routed experts.
  Emitter(func::FuncOp func, int device, PlanState &state,
          moert::ScheduleBuilder &schedule, std::string symbolPrefix,
          PagedExperts pagedExperts = PagedExperts::Own)
      : func(func), state(state), writer(state.writer), schedule(schedule),
        symbols(state.symbols), symbolPrefix(std::move(symbolPrefix)),
        weights(func, device, state, schedule, tensorIds, pagedExperts) {}

  LogicalResult emit() {
    if (failed(emitSignature()))
      return failure();
    for (Operation &op : func.getBody().front())
      if (failed(emitOp(&op)))
        return failure();
    if (failed(weights.emitTiers()))
      return failure();
    auto arenaSize = func->getAttrOfType<IntegerAttr>("moe.arena_size");
    if (!arenaSize)
      return func.emitError("no memory plan; run moe-plan-memory first");
    // The runtime refuses a bigger arena; `moec compile` says first which
    // bounds planned it (checkArenaSize), a library caller learns it here.
    int64_t arenaBytes = arenaSize.getInt();
    if (arenaBytes < 0 || uint64_t(arenaBytes) > moert::kMaxArenaSize)
      return func.emitError("the planned activation arena is ")
             << arenaBytes << " bytes, more than a plan holds ("
             << moert::kMaxArenaSize << "); lower the bounds it is planned for";
    schedule.setArenaSize(arenaBytes);
    return success();
  }

private:
  func::FuncOp func;
  PlanState &state;
  moert::PlanWriter &writer;
  moert::ScheduleBuilder &schedule;
  llvm::DenseMap<Value, int32_t> tensorIds;
  llvm::StringMap<int> &symbols;
  std::string symbolPrefix;
  /// How the weights the steps read are stored.
  WeightStorage weights;

  std::string getArgName(BlockArgument arg) {
    if (auto name =
            func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "moe.name"))
      return name.str();
    return "arg" + std::to_string(arg.getArgNumber());
  }

  LogicalResult emitSignature() {
    for (BlockArgument arg : func.getArguments()) {
      auto type = cast<RankedTensorType>(arg.getType());
      auto bound = func.getArgAttrOfType<DenseI64ArrayAttr>(arg.getArgNumber(),
                                                            "moe.bound");
      auto offset =
          func.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), "moe.offset");
      if (!bound || !offset)
        return func.emitError("argument #")
               << arg.getArgNumber()
               << " has no bound or offset; run moe-bound-shapes and "
                  "moe-plan-memory first";
      std::string name = getArgName(arg);
      auto dimParams = func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(),
                                                        "moe.dim_params");
      std::vector<moert::PlanDim> dims;
      for (auto [index, size] : llvm::enumerate(type.getShape())) {
        if (!ShapedType::isDynamic(size)) {
          dims.emplace_back(size);
          continue;
        }
        // Dimensions sharing an ONNX dim_param share one symbol, so that the
        // runtime checks they agree; an unnamed one gets its own.
        std::string symbol;
        if (dimParams && index < dimParams.size())
          if (auto param = dyn_cast<StringAttr>(dimParams[index]))
            symbol = param.str();
        if (symbol.empty())
          symbol = name + "." + std::to_string(index);
        symbol = symbolPrefix + symbol;
        auto it = symbols.find(symbol);
        if (it == symbols.end()) {
          int64_t max = bound.asArrayRef()[index];
          int64_t min = state.zeroMinSymbols.contains(symbol) ? 0 : 1;
          it = symbols.insert({symbol, writer.addSymbol(symbol, min, max)})
                   .first;
          state.symbolMax.resize(it->second + 1);
          state.symbolMax[it->second] = max;
        }
        dims.push_back(moert::PlanDim::symbol(it->second));
      }
      FailureOr<int32_t> id =
          addArenaTensor(arg, name, dims, offset.getInt(), func);
      if (failed(id))
        return failure();
      // The dense part runs whole on every device (moe-insert-all-to-all).
      if (state.devices > 1 && func->hasAttr("moe.replicated"))
        schedule.tensor(*id).replicated = true;
      // Token ids: generated inputs should index the whole embedding.
      if (type.getElementType().isInteger())
        if (std::optional<int64_t> rows = getEmbeddingRows(arg))
          schedule.setValueRange(*id, 0, *rows);
      schedule.addInput(*id);
    }
    return success();
  }

  FailureOr<int32_t> addArenaTensor(Value value, StringRef name,
                                    std::vector<moert::PlanDim> dims,
                                    int64_t offset, Operation *where) {
    auto type = cast<RankedTensorType>(value.getType());
    SmallVector<int64_t> bounds;
    for (const moert::PlanDim &dim : dims)
      bounds.push_back(dim.kind == moert::DimDesc::Kind::Symbolic
                           ? state.symbolMax[dim.symbolIndex]
                           : dim.bound);
    std::string what = isa<func::FuncOp>(where) ? ("input '" + name + "'").str()
                                                : std::string("a result");
    if (failed(checkPlanShape(where, what, bounds)))
      return failure();
    std::optional<moert::DType> dtype = getDType(type.getElementType());
    if (!dtype)
      return where->emitError("element type ")
             << type.getElementType()
             << " has no runtime representation (f32, f16, bf16, i64, i32 "
                "and i1 do)";
    int32_t id = schedule.addTensor(name.str(), *dtype, std::move(dims),
                                    static_cast<uint64_t>(offset));
    tensorIds[value] = id;
    return id;
  }

  LogicalResult emitResultTensors(Operation *op) {
    auto bounds = op->getAttrOfType<ArrayAttr>("moe.bounds");
    auto offsets = op->getAttrOfType<DenseI64ArrayAttr>("moe.offsets");
    if (!bounds || !offsets || bounds.size() != op->getNumResults() ||
        offsets.size() != static_cast<int64_t>(op->getNumResults()))
      return op->emitError("no bounds or offsets; run moe-bound-shapes and "
                           "moe-plan-memory first");
    std::string base = getStepName(op);
    for (OpResult result : op->getResults()) {
      unsigned index = result.getResultNumber();
      auto type = cast<RankedTensorType>(result.getType());
      auto bound = dyn_cast<DenseI64ArrayAttr>(bounds[index]);
      if (!bound || bound.size() != type.getRank())
        return op->emitError("malformed moe.bounds for result #") << index;
      std::vector<moert::PlanDim> dims;
      for (auto [size, max] : llvm::zip(type.getShape(), bound.asArrayRef()))
        dims.push_back(ShapedType::isDynamic(size)
                           ? moert::PlanDim::dynamic(max)
                           : moert::PlanDim(size));
      std::string name =
          op->getNumResults() == 1 ? base : base + ":" + std::to_string(index);
      if (failed(addArenaTensor(result, name, std::move(dims),
                                offsets.asArrayRef()[index], op)))
        return failure();
    }
    return success();
  }

  FailureOr<int32_t> lookup(Operation *op, Value value) {
    auto it = tensorIds.find(value);
    if (it == tensorIds.end())
      return op->emitError("operand is not a planned tensor");
    return it->second;
  }

  LogicalResult emitOp(Operation *op) {
    FailureOr<bool> weight = weights.emitWeight(op);
    if (failed(weight) || *weight)
      return failure(failed(weight));
    if (auto ret = dyn_cast<func::ReturnOp>(op))
      return emitReturn(ret);

    auto step = dyn_cast<moe::PlanStepOpInterface>(op);
    if (!step)
      return op->emitError("'")
             << op->getName()
             << "' has no runtime step yet; it cannot be part of a plan";
    std::optional<fb::OpKind> kind = getOpKind(step.getPlanStepKind());
    if (!kind)
      return op->emitError("'") << op->getName() << "' declares the plan step '"
                                << step.getPlanStepKind()
                                << "', which the plan format does not have";
    std::vector<int32_t> inputs;
    if (failed(collectInputs(op, inputs)))
      return failure();
    // Attention without sinks keeps the 1.6 step's three or four inputs, so
    // that the plan stays readable by runtimes before 1.9.
    if (isa<moe::AttentionOp>(op))
      while (inputs.size() > 3 && inputs.back() < 0)
        inputs.pop_back();
    // int8 matrices: their scales are inputs 8 to 10, after an Experts
    // step's six weight inputs or a SharedExpert step's gate.
    auto addScales = [&](auto ffn) {
      if (!weights.getScales(ffn.getW1()))
        return;
      inputs.resize(8, -1);
      for (Value w : {ffn.getW1(), ffn.getW3(), ffn.getW2()})
        inputs.push_back(w ? weights.getScales(w).value_or(-1) : -1);
    };
    if (auto experts = dyn_cast<moe::ExpertsOp>(op))
      addScales(experts);
    else if (auto shared = dyn_cast<moe::SharedExpertOp>(op))
      addScales(shared);
    if (op->getNumResults() > 0 && failed(emitResultTensors(op)))
      return failure();
    std::vector<int32_t> outputs;
    for (Value result : op->getResults())
      outputs.push_back(tensorIds[result]);
    fb::AttrsUnion attrs;
    if (failed(step.getPlanStepAttrs(attrs)))
      return failure();
    // The step reads the matrices the planner stored transposed.
    if (isOutIn(op))
      attrs.AsFfnAttrs()->weight_layout = fb::WeightLayout::OutIn;
    rewritePackedStep(op, weights.getPackedWeights(), *kind, inputs, attrs);
    // A product by a dense matrix stored [N, K] (with its int8 scales).
    if (auto matMul = dyn_cast<moe::MatMulOp>(op);
        matMul && weights.isLinearDense(matMul.getB())) {
      *kind = fb::OpKind::Linear;
      if (std::optional<int32_t> scales = weights.getScales(matMul.getB()))
        inputs.push_back(*scales);
    }
    int index = schedule.addStep(*kind, getStepName(op), std::move(inputs),
                                 std::move(outputs), std::move(attrs));
    if (auto experts = dyn_cast<moe::ExpertsOp>(op))
      return weights.addExpertsStep(experts, index);
    return success();
  }

  /// Whether the expert matrices of `op` are stored transposed, [out, in].
  bool isOutIn(Operation *op) const {
    if (auto experts = dyn_cast<moe::ExpertsOp>(op))
      return weights.isTransposed(experts.getW1());
    if (auto shared = dyn_cast<moe::SharedExpertOp>(op))
      return weights.isTransposed(shared.getW1());
    return false;
  }

  /// The step's inputs in ONNX order; an absent optional operand is -1.
  LogicalResult collectInputs(Operation *op, std::vector<int32_t> &inputs) {
    auto segments = op->getAttrOfType<DenseI32ArrayAttr>("operandSegmentSizes");
    if (segments) {
      unsigned next = 0;
      for (int32_t size : segments.asArrayRef()) {
        if (size == 0)
          inputs.push_back(-1);
        for (int32_t i = 0; i < size; ++i) {
          FailureOr<int32_t> id = lookup(op, op->getOperand(next++));
          if (failed(id))
            return failure();
          inputs.push_back(*id);
        }
      }
      return success();
    }
    for (Value operand : op->getOperands()) {
      FailureOr<int32_t> id = lookup(op, operand);
      if (failed(id))
        return failure();
      inputs.push_back(*id);
    }
    return success();
  }

  LogicalResult emitReturn(func::ReturnOp ret) {
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      FailureOr<int32_t> id = lookup(ret, value);
      if (failed(id))
        return failure();
      // The output takes the graph's name for it.
      if (auto name = func.getResultAttrOfType<StringAttr>(index, "moe.name"))
        schedule.tensor(*id).name = name.str();
      if (state.devices > 1 && !func->hasAttr("moe.replicated") &&
          failed(markBatchOutput(ret, index, schedule.tensor(*id))))
        return failure();
      schedule.addOutput(*id);
    }
    return success();
  }

  /// Under expert parallelism the runtime concatenates the outputs whose
  /// leading dimension is a symbol (the batch the devices split). Only the
  /// outputs moe-analyze-row-independence proved to carry the split rows
  /// there (`moe.row_split`'s `outputs`) are declared so: any other output
  /// is the same on every device (device 0's is returned), even when its
  /// ONNX shape names an input's symbol there (concatenating it would
  /// repeat it once per device).
  LogicalResult markBatchOutput(func::ReturnOp ret, unsigned index,
                                fb::TensorT &tensor) {
    auto split =
        func->getParentOfType<ModuleOp>()->getAttrOfType<DictionaryAttr>(
            "moe.row_split");
    auto joined = split ? split.getAs<ArrayAttr>("outputs") : ArrayAttr();
    auto name = func.getResultAttrOfType<StringAttr>(index, "moe.name");
    std::string key = name ? name.str() : "#" + std::to_string(index);
    if (!joined || llvm::none_of(joined, [&](Attribute attr) {
          auto text = dyn_cast<StringAttr>(attr);
          return text && text.getValue() == key;
        }))
      return success();
    // An input returned as it is already has its symbol.
    if (!tensor.dims.empty() &&
        tensor.dims.front().kind() == fb::DimKind::Symbolic)
      return success();
    auto dimParams =
        func.getResultAttrOfType<ArrayAttr>(index, "moe.dim_params");
    auto param = dimParams && !dimParams.empty()
                     ? dyn_cast<StringAttr>(dimParams[0])
                     : StringAttr();
    auto it = param ? symbols.find(param.getValue()) : symbols.end();
    if (tensor.dims.empty() ||
        tensor.dims.front().kind() != fb::DimKind::Dynamic ||
        it == symbols.end())
      return ret.emitError("output '")
             << key
             << "' carries the split rows but has no symbolic dimension 0 "
                "to join them along";
    tensor.dims.front() =
        fb::Dim(state.symbolMax[it->second], it->second, fb::DimKind::Symbolic);
    return success();
  }
};

} // namespace

/// Finalizes and writes the plan of `state`; errors are located at `where`.
static LogicalResult writePlan(PlanState &state, Operation *where,
                               StringRef path, const PlanFinalizer &finalize) {
  if (finalize && failed(finalize(state.writer)))
    return failure();
  absl::Status status = state.writer.write(path.str());
  if (status.ok())
    return success();
  // The writer's messages name the file first ("PATH: cannot write: ..."):
  // report them located at the file, like every other output's.
  llvm::StringRef message(status.message().data(), status.message().size());
  message.consume_front((path + ": ").str());
  return emitError(FileLineColLoc::get(where->getContext(), path, 0, 0))
         << message;
}

LogicalResult emitPlan(func::FuncOp func, StringRef path,
                       const PlanFinalizer &finalize,
                       ExpertWeightType expertWeights) {
  PlanState state(1, expertWeights);
  if (failed(Emitter(func, 0, state).emit()))
    return failure();
  return writePlan(state, func, path, finalize);
}

FailureOr<SmallVector<func::FuncOp>> getDeviceFunctions(ModuleOp module) {
  SmallVector<func::FuncOp> devices;
  for (auto func : module.getOps<func::FuncOp>()) {
    auto device = func->getAttrOfType<IntegerAttr>("moe.device");
    if (!device)
      continue;
    int64_t index = device.getInt();
    if (index < 0 || index >= static_cast<int64_t>(llvm::range_size(
                                  module.getOps<func::FuncOp>())))
      return func.emitError("moe.device ") << index << " is out of range";
    if (devices.size() <= static_cast<size_t>(index))
      devices.resize(index + 1);
    if (devices[index])
      return func.emitError("a second function for device ") << index;
    devices[index] = func;
  }
  for (auto [index, func] : llvm::enumerate(devices))
    if (!func)
      return module.emitError("no function for device ") << index;
  if (!devices.empty())
    return devices;
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return module.emitError("no @main function");
  devices.push_back(main);
  return devices;
}

/// Emits the schedules of every device function of `module` into a new plan
/// state; null after reporting an error.
static std::unique_ptr<PlanState> emitModule(ModuleOp module,
                                             ExpertWeightType expertWeights,
                                             const TierOptions &tiers = {}) {
  FailureOr<SmallVector<func::FuncOp>> funcs = getDeviceFunctions(module);
  if (failed(funcs))
    return nullptr;
  auto state = std::make_unique<PlanState>(funcs->size(), expertWeights, tiers);
  for (auto [device, func] : llvm::enumerate(*funcs))
    if (failed(Emitter(func, device, *state).emit()))
      return nullptr;
  return state;
}

LogicalResult emitPlan(ModuleOp module, StringRef path,
                       const PlanFinalizer &finalize,
                       ExpertWeightType expertWeights,
                       const TierOptions &tiers) {
  std::unique_ptr<PlanState> state = emitModule(module, expertWeights, tiers);
  if (!state)
    return failure();
  return writePlan(*state, module, path, finalize);
}

LogicalResult emitPlanToBuffer(ModuleOp module, std::vector<uint8_t> &bytes,
                               const PlanFinalizer &finalize,
                               ExpertWeightType expertWeights) {
  std::unique_ptr<PlanState> state = emitModule(module, expertWeights);
  if (!state)
    return failure();
  if (finalize && failed(finalize(state->writer)))
    return failure();
  absl::StatusOr<std::vector<uint8_t>> serialized = state->writer.serialize();
  if (!serialized.ok())
    return module.emitError("cannot serialize the plan: ")
           << std::string(serialized.status().message());
  bytes = std::move(*serialized);
  return success();
}

} // namespace moec::plan

namespace moec::plan {

/// The generation table's names and cache pairs of `signature`.
static void fillGeneration(fb::GenerationT &gen,
                           const GenerationSignature &signature) {
  gen.max_seq = signature.maxSeq;
  gen.input_ids = signature.inputIds;
  gen.position_ids = signature.positionIds;
  gen.attention_mask = signature.attentionMask;
  gen.eos_ids = signature.eosIds;
  gen.logits = signature.logits;
  for (const CachePairInfo &pair : signature.cache) {
    auto entry = std::make_unique<fb::CachePairT>();
    entry->input = pair.input;
    entry->output = pair.output;
    entry->prefill_output = pair.prefillOutput;
    entry->layer = pair.layer;
    entry->axis = pair.axis;
    entry->state = pair.state;
    gen.cache.push_back(std::move(entry));
  }
}

LogicalResult emitGenerationPlan(ModuleOp decode, ModuleOp prefill,
                                 const GenerationSignature &signature,
                                 StringRef path, const PlanFinalizer &finalize,
                                 ExpertWeightType expertWeights,
                                 const TierOptions &tiers) {
  FailureOr<SmallVector<func::FuncOp>> decodeFuncs = getDeviceFunctions(decode);
  if (failed(decodeFuncs))
    return failure();
  SmallVector<func::FuncOp> prefillFuncs;
  if (prefill) {
    FailureOr<SmallVector<func::FuncOp>> funcs = getDeviceFunctions(prefill);
    if (failed(funcs))
      return failure();
    prefillFuncs = std::move(*funcs);
    // An expert-parallel plan runs device d's prefill and decode schedules
    // on one device, in lockstep with the others.
    if (prefillFuncs.size() != decodeFuncs->size())
      return prefill.emitError("the prefill graph compiled for ")
             << prefillFuncs.size() << " devices but the decode graph for "
             << decodeFuncs->size();
  }
  PlanState state(decodeFuncs->size(), expertWeights, tiers);
  state.shareByContent = prefill != nullptr;
  // Without a prefill the prompt runs with empty pasts. The value-range
  // analysis already takes every dynamic dimension from 0 (moe.dim's range
  // is [0, bound]), so nothing the compiler proved assumed a past of 1.
  if (signature.singleGraph)
    for (const std::string &symbol : getPastSymbols(signature))
      state.zeroMinSymbols.insert(symbol);
  for (auto [device, func] : llvm::enumerate(*decodeFuncs))
    if (failed(Emitter(func, device, state).emit()))
      return failure();
  fb::GenerationT &gen = state.writer.generation();
  // The prefill's symbols are its own ("prefill.s"): its sequence length
  // is not the decode's past length.
  for (auto [device, func] : llvm::enumerate(prefillFuncs))
    if (failed(Emitter(func, device, state,
                       state.writer.prefillSchedule(device), "prefill.",
                       PagedExperts::Shared)
                   .emit()))
      return failure();
  fillGeneration(gen, signature);
  // moe-analyze-batch-rows's verdict on the prefill graph (continuous
  // batching): proven, or the op that mixes rows another way.
  if (auto verdict =
          prefill ? prefill->getAttrOfType<DictionaryAttr>("moe.batch_rows")
                  : DictionaryAttr()) {
    if (verdict.get("symbol")) {
      gen.batchable = true;
      // Sliding windows only: a table of zeros is left out (format 1.13).
      if (auto windows = verdict.getAs<DenseI64ArrayAttr>("windows");
          windows &&
          llvm::any_of(windows.asArrayRef(), [](int64_t w) { return w > 0; }))
        gen.batch_windows.assign(windows.asArrayRef().begin(),
                                 windows.asArrayRef().end());
    } else {
      auto text = [&](StringRef name) {
        auto attr = verdict.getAs<StringAttr>(name);
        return attr ? attr.getValue().str() : std::string();
      };
      gen.batch_blocker = text("reason");
      if (!text("loc").empty())
        gen.batch_blocker += " (" + text("loc") + ")";
    }
  }
  return writePlan(state, decode, path, finalize);
}

static std::unique_ptr<fb::FeedT> makeFeed(const StageFeed &feed) {
  auto entry = std::make_unique<fb::FeedT>();
  entry->input = feed.input;
  entry->kind = feed.kind;
  entry->stage = feed.stage;
  entry->output = feed.output;
  return entry;
}

LogicalResult emitMultimodalPlan(ModuleOp decode, ArrayRef<StageGraph> stages,
                                 const GenerationSignature &signature,
                                 const MultimodalSignature &multimodal,
                                 StringRef path, const PlanFinalizer &finalize,
                                 ExpertWeightType expertWeights,
                                 const TierOptions &tiers) {
  FailureOr<SmallVector<func::FuncOp>> decodeFuncs = getDeviceFunctions(decode);
  if (failed(decodeFuncs))
    return failure();
  PlanState state(decodeFuncs->size(), expertWeights, tiers);
  // The graphs are separate imports of one model: equal bytes are one
  // weight (the decode's embedding and head are the stages').
  state.shareByContent = true;
  // A prompt without images may run through the decode schedule from an
  // empty past (MultimodalDesc::textThroughDecode).
  for (const std::string &symbol : getPastSymbols(signature))
    state.zeroMinSymbols.insert(symbol);
  for (auto [device, func] : llvm::enumerate(*decodeFuncs))
    if (failed(Emitter(func, device, state).emit()))
      return failure();
  fillGeneration(state.writer.generation(), signature);
  fb::MultimodalT &table = state.writer.multimodal();
  for (const StageGraph &stage : stages) {
    FailureOr<SmallVector<func::FuncOp>> funcs =
        getDeviceFunctions(stage.module);
    if (failed(funcs))
      return failure();
    // The language model runs on every device, in lockstep with the decode
    // schedules (its experts placed alike); the other stages are dense and
    // each device runs the one schedule.
    bool everyDevice = stage.role == fb::StageRole::Prefill;
    if (funcs->size() != (everyDevice ? decodeFuncs->size() : 1))
      return funcs->front().emitError("stage '")
             << stage.name << "' compiled for " << funcs->size()
             << " devices but the plan has "
             << (everyDevice ? decodeFuncs->size() : 1);
    size_t index = table.stages.size();
    state.writer.addStage(stage.name, stage.role, everyDevice);
    // Each stage's symbols are its own ("image_encoder.s11"). A tiered
    // plan's Prefill stage pages the decode schedules' experts.
    for (auto [device, func] : llvm::enumerate(*funcs))
      if (failed(
              Emitter(func, device, state,
                      state.writer.stageSchedule(index, device),
                      stage.name + ".",
                      everyDevice ? PagedExperts::Shared : PagedExperts::None)
                  .emit()))
        return failure();
    for (const StageFeed &feed : stage.feeds)
      table.stages.back()->feeds.push_back(makeFeed(feed));
  }
  table.image_token_id = multimodal.imageTokenId;
  table.image_features_stage = multimodal.imageFeaturesStage;
  table.image_features = multimodal.imageFeatures;
  table.logits_stage = multimodal.logitsStage;
  table.logits = multimodal.logits;
  table.position_rows = multimodal.positionRows;
  table.spatial_merge_size = multimodal.spatialMergeSize;
  table.image_grid = multimodal.imageGrid;
  table.max_images = multimodal.maxImages;
  for (const StageFeed &feed : multimodal.decodeFeeds)
    table.decode_feeds.push_back(makeFeed(feed));
  // The grid rule's table where a stage still takes one of its inputs.
  for (const StageGraph &stage : stages)
    for (const StageFeed &feed : stage.feeds)
      if (feed.kind >= fb::FeedKind::GridSegments && !table.grid_rule)
        table.grid_rule = std::make_unique<fb::GridRuleT>(multimodal.gridRule);
  if (multimodal.hasProcessor)
    table.image_processor =
        std::make_unique<fb::ImageProcessorT>(multimodal.processor);
  return writePlan(state, decode, path, finalize);
}

} // namespace moec::plan
