//===- PlanEmitter.cpp - moe dialect to plan.bin --------------------------===//

#include "compiler/plan/PlanEmitter.h"
#include "compiler/plan/Generation.h"
#include "compiler/plan/InputRanges.h"
#include "compiler/plan/QuantizedWeights.h"

#include "dialects/moe/MoeOps.h"

#include "format/plan_writer.h"
#include "format/version.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cstring>
#include <optional>

using namespace mlir;
namespace fb = moert::fb;

namespace moec::plan {
namespace {

std::optional<moert::DType> getDType(Type type) {
  if (type.isF32())
    return moert::DType::F32;
  if (type.isF16())
    return moert::DType::F16;
  if (type.isBF16())
    return moert::DType::BF16;
  if (type.isSignlessInteger(64))
    return moert::DType::I64;
  if (type.isSignlessInteger(32))
    return moert::DType::I32;
  if (type.isSignlessInteger(1))
    return moert::DType::Bool;
  return std::nullopt;
}

/// The quoted ONNX name in an importer location name ("node 'x' (Op)",
/// "initializer 'w'"), or the whole name.
std::string getOnnxName(StringRef locationName) {
  size_t open = locationName.find('\'');
  size_t close = locationName.rfind('\'');
  if (open != StringRef::npos && close > open)
    return locationName.slice(open + 1, close).str();
  return locationName.str();
}

/// A step's name for diagnostics and stats: the ONNX node name the importer
/// put into the location, else the op name.
std::string getStepName(Operation *op) {
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (auto name = dyn_cast<NameLoc>(inner))
        return getOnnxName(name.getName());
  if (auto name = dyn_cast<NameLoc>(loc))
    return getOnnxName(name.getName());
  return op->getName().getStringRef().str();
}

/// Fails with an error on `where` unless its tensor `what` ("input 'x'",
/// "a result", "its value") of sizes or bounds `dims` fits the limits the
/// runtime's loader checks (rank and dimension bound, format/format.h). moec
/// also loads every plan it writes, but the loader can only name the tensor;
/// this names the node, for every caller of the emitter. An empty
/// ConstantOfShape of [0, 2^41] is otherwise a valid graph.
LogicalResult checkPlanShape(Operation *where, const Twine &what,
                             ArrayRef<int64_t> dims) {
  if (dims.size() > static_cast<size_t>(moert::kMaxRank))
    return where->emitError(what) << " has rank " << dims.size()
                                  << "; the runtime's tensors have at most "
                                  << moert::kMaxRank << " dimensions";
  for (auto [index, size] : llvm::enumerate(dims))
    if (size < 0 || static_cast<uint64_t>(size) > moert::kMaxDimBound)
      return where->emitError(what)
             << " has dimension " << index << " of size or bound " << size
             << ", above the runtime's limit of 2^40";
  return success();
}

/// The most bytes a constant that is not a weight blob of the model (a
/// splat, a folded value) may take once expanded into the plan.
constexpr uint64_t kMaxExpandedConstantBytes = uint64_t{1} << 30;

/// What the schedules of one plan share.
struct PlanState {
  PlanState(uint32_t devices, ExpertWeightType expertWeights,
            TierOptions tiers = {})
      : writer({moert::Backend::Cpu, devices},
               std::string("moec ") + moert::getVersion()),
        devices(devices), expertWeights(expertWeights),
        tiers(std::move(tiers)) {}
  moert::PlanWriter writer;
  uint32_t devices;
  /// The storage of the narrowable expert matrices.
  ExpertWeightType expertWeights;
  /// Tiered expert weights; per device, the paged section of its routed
  /// experts' weights (-1 until the first).
  TierOptions tiers;
  SmallVector<int> pagedSections;
  llvm::StringMap<int> symbols;
  /// The largest value of each symbol, by index.
  SmallVector<int64_t> symbolMax;
  /// Per device, the weight section of its expert shards (-1 until its first
  /// shard): a device that maps only its own pages reads no other device's
  /// experts.
  SmallVector<int> shardSections;
  /// The weights written so far, keyed by their contents (a constant's
  /// attribute, or the list of a stack's): the schedule and tensor that hold
  /// them. A later schedule reading the same weight shares its bytes.
  llvm::DenseMap<Attribute, std::pair<int, int32_t>> weights;
  /// The scales of the int8 weights among `weights`, by the same keys.
  llvm::DenseMap<Attribute, std::pair<int, int32_t>> scaleWeights;
  /// The paged expert weights written so far (and their scales), by the
  /// same keys: a tiered generation plan's prefill schedule reads its
  /// decode schedule's, so that one expert cache serves both.
  llvm::DenseMap<Attribute, std::pair<int, int32_t>> pagedWeights;
  llvm::DenseMap<Attribute, std::pair<int, int32_t>> pagedScaleWeights;
  /// Bytes that back dense constants until the plan is written.
  std::vector<std::vector<char>> constantBytes;
  /// Symbols whose minimum is 0 rather than 1 (a generation plan's pasts
  /// when one graph also runs the prompt).
  llvm::StringSet<> zeroMinSymbols;
  /// Whether weights are shared by their bytes, not only by their
  /// attribute: two imports of one model (a generation plan's prefill and
  /// decode graphs) hold the same initializer in different resources.
  bool shareByContent = false;
  /// The resource weights seen so far by type, with their bytes.
  llvm::DenseMap<Type, SmallVector<std::pair<Attribute, ArrayRef<char>>, 1>>
      resources;

  /// With shareByContent, `key` with every resource weight replaced by the
  /// first resource seen with the same type and bytes (compared byte for
  /// byte; differing weights differ in their first bytes, so a comparison
  /// with another weight of the same shape stops early), so that equal
  /// weights of different imports share one entry of `weights`.
  Attribute getContentKey(Attribute key) {
    if (!shareByContent)
      return key;
    if (auto array = dyn_cast<ArrayAttr>(key)) {
      SmallVector<Attribute> elements;
      for (Attribute element : array)
        elements.push_back(getContentKey(element));
      return ArrayAttr::get(key.getContext(), elements);
    }
    auto resource = dyn_cast<DenseResourceElementsAttr>(key);
    AsmResourceBlob *blob =
        resource ? resource.getRawHandle().getBlob() : nullptr;
    if (!blob)
      return key;
    ArrayRef<char> data = blob->getData();
    auto &seen = resources[resource.getType()];
    for (auto &[first, bytes] : seen)
      if (bytes.size() == data.size() &&
          std::memcmp(bytes.data(), data.data(), data.size()) == 0)
        return first;
    seen.push_back({key, data});
    return key;
  }
};

/// Emits one function as the schedule of `device`. Tensors are numbered in
/// the writer as values are visited; every op result that lives in the arena
/// carries its planned offset.
class Emitter {
public:
  Emitter(func::FuncOp func, int device, PlanState &state)
      : Emitter(func, device, state, state.writer.schedule(device), "") {}
  /// Emits `func` into `schedule` (a prefill schedule, say), prefixing the
  /// names of the symbols it declares with `symbolPrefix`.
  /// With `sharesPagedWeights` (a tiered generation plan's prefill), the
  /// paged expert weights are the ones an earlier schedule wrote and the
  /// schedule gets no tiers of its own.
  Emitter(func::FuncOp func, int device, PlanState &state,
          moert::ScheduleBuilder &schedule, std::string symbolPrefix,
          bool sharesPagedWeights = false)
      : func(func), device(device), state(state), writer(state.writer),
        schedule(schedule), symbols(state.symbols),
        constantBytes(state.constantBytes),
        symbolPrefix(std::move(symbolPrefix)),
        sharesPagedWeights(sharesPagedWeights) {
    narrowed = getNarrowableExpertWeights(func, state.expertWeights);
    transposed = getTransposableExpertWeights(func);
    if (state.tiers.deviceMemory)
      paged = getPagedExpertWeights(func);
    if (state.expertWeights == ExpertWeightType::I8)
      func.walk([&](moe::ExpertsOp op) {
        // [E, out, in] matrices have their channels along dimension 1.
        int channelDim =
            op.getWeightLayout() == moe::WeightLayout::InOut ? 2 : 1;
        for (Value w : {op.getW1(), op.getW3(), op.getW2()})
          if (w && narrowed.contains(w))
            channelDims.try_emplace(w, channelDim);
      });
  }

  LogicalResult emit() {
    if (failed(emitSignature()))
      return failure();
    for (Operation &op : func.getBody().front())
      if (failed(emitOp(&op)))
        return failure();
    if (failed(emitTiers()))
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
  int device;
  PlanState &state;
  moert::PlanWriter &writer;
  moert::ScheduleBuilder &schedule;
  llvm::DenseMap<Value, int32_t> tensorIds;
  llvm::StringMap<int> &symbols;
  std::vector<std::vector<char>> &constantBytes;
  /// The expert matrices written as state.expertWeights.
  llvm::DenseSet<Value> narrowed;
  /// The routed experts' [E, in, out] matrices written as [E, out, in]
  /// (getTransposableExpertWeights): their steps run the layout whose
  /// column blocks are contiguous.
  llvm::DenseSet<Value> transposed;
  /// For int8 matrices: the dimension of their output channels (1 or 2),
  /// and the tensor of their scales once written.
  llvm::DenseMap<Value, int> channelDims;
  llvm::DenseMap<Value, int32_t> scaleIds;
  /// The block-quantized constants stored packed.
  llvm::DenseMap<Value, PackedWeight> packedWeights;
  std::string symbolPrefix;
  /// Tiered plans: the routed experts' weights written to the paged
  /// section, and the tiered layers (their steps and expected loads).
  llvm::DenseSet<Value> paged;
  std::vector<moert::ScheduleBuilder::TierLayer> tierLayers;
  /// The MoE layers by their w1 (one moe.experts op per micro-batch), and
  /// the tiered layer of each paged w1.
  llvm::DenseMap<Value, int> layerOfWeights;
  llvm::DenseMap<Value, size_t> tierLayerOfWeights;
  bool sharesPagedWeights = false;

  /// The weight operands of the moe.experts ops of `func` that can be paged:
  /// stored weights read by one operand of one op and nothing else.
  static llvm::DenseSet<Value> getPagedExpertWeights(func::FuncOp func) {
    llvm::DenseSet<Value> result;
    func.walk([&](moe::ExpertsOp op) {
      for (Value w : {op.getW1(), op.getB1(), op.getW3(), op.getB3(),
                      op.getW2(), op.getB2()}) {
        if (!w || !isReadByOneLayer(w))
          continue;
        Operation *def = w.getDefiningOp();
        auto stack = dyn_cast_or_null<moe::StackOp>(def);
        if (isa_and_nonnull<moe::ConstantOp, moe::ShardOp>(def) ||
            (stack && stack.isWeight()))
          result.insert(w);
      }
    });
    return result;
  }

  /// Whether every use of `w` is the same operand of a moe.experts op of one
  /// layer (the ops sharing its w1: one per micro-batch).
  static bool isReadByOneLayer(Value w) {
    std::optional<std::pair<unsigned, Value>> first;
    for (OpOperand &use : w.getUses()) {
      auto experts = dyn_cast<moe::ExpertsOp>(use.getOwner());
      if (!experts)
        return false;
      std::pair<unsigned, Value> role(use.getOperandNumber(), experts.getW1());
      if (first && *first != role)
        return false;
      first = role;
    }
    return first.has_value();
  }

  /// The weight section of `value`: the device's paged section for a paged
  /// expert weight, else `section`.
  int getSection(Value value, int section = -1) {
    if (!paged.contains(value))
      return section;
    state.pagedSections.resize(state.devices, -1);
    int &pagedSection = state.pagedSections[device];
    if (pagedSection < 0)
      pagedSection = writer.addWeightSection(/*paged=*/true);
    return pagedSection;
  }

  /// Tiers the schedule's layers whose weights were paged.
  LogicalResult emitTiers() {
    if (!state.tiers.deviceMemory || sharesPagedWeights)
      return success();
    if (tierLayers.empty())
      return func.emitError("--device-memory tiers the routed experts' "
                            "weights, but no moe.experts op has weights that "
                            "only it reads");
    if (!state.tiers.loads.empty() &&
        state.tiers.loads.size() != layerOfWeights.size())
      return func.emitError("the routing profile has ")
             << state.tiers.loads.size() << " MoE layers; the model has "
             << layerOfWeights.size();
    std::optional<moert::fb::TierPrefetch> prefetch =
        llvm::StringSwitch<std::optional<moert::fb::TierPrefetch>>(
            state.tiers.prefetch)
            .Case("none", moert::fb::TierPrefetch::None)
            .Case("next-layer", moert::fb::TierPrefetch::NextLayer)
            .Case("next-micro-batch", moert::fb::TierPrefetch::NextMicroBatch)
            .Default(std::nullopt);
    if (!prefetch)
      return func.emitError("unknown expert prefetch '")
             << state.tiers.prefetch << "'";
    schedule.setExpertTiers(state.tiers.deviceMemory, std::move(tierLayers),
                            *prefetch);
    return success();
  }

  /// The 16-bit dtype `value` is stored as, when it is a narrowed matrix.
  std::optional<moert::DType> getNarrowedType(Value value) const {
    if (!narrowed.contains(value))
      return std::nullopt;
    switch (state.expertWeights) {
    case ExpertWeightType::BF16:
      return moert::DType::BF16;
    case ExpertWeightType::F16:
      return moert::DType::F16;
    case ExpertWeightType::I8:
      return moert::DType::I8;
    case ExpertWeightType::F32:
      break;
    }
    return std::nullopt;
  }

  /// Adds a weight whose bytes are `pieces`: narrowed (or quantized, with
  /// its scales) from f32 while the plan is written when `value` is a
  /// narrowed matrix.
  int32_t addPieces(Value value, std::string name, moert::DType dtype,
                    std::vector<int64_t> shape,
                    std::vector<moert::WeightPiece> pieces, int section = -1) {
    std::optional<moert::DType> narrow = getNarrowedType(value);
    if (narrow == moert::DType::I8) {
      int32_t scales = -1;
      int32_t id = schedule.addQuantizedWeightPieces(
          std::move(name), std::move(shape), std::move(pieces),
          channelDims.lookup(value), scales, section);
      scaleIds[value] = scales;
      if (transposed.contains(value))
        schedule.transposeExpertMatrices(id);
      return id;
    }
    int32_t id =
        narrow
            ? schedule.addNarrowedWeightPieces(std::move(name), *narrow,
                                               std::move(shape),
                                               std::move(pieces), section)
            : schedule.addWeightPieces(std::move(name), dtype, std::move(shape),
                                       std::move(pieces), section);
    if (transposed.contains(value))
      schedule.transposeExpertMatrices(id);
    return id;
  }

  /// The key under which the weight `value` with contents `key` is shared:
  /// a narrowed copy differs from the f32 one.
  Attribute getWeightKey(Attribute key, Value value) const {
    MLIRContext *context = key.getContext();
    if (transposed.contains(value))
      key = ArrayAttr::get(context, {key, StringAttr::get(context, "out_in")});
    if (!narrowed.contains(value))
      return key;
    return ArrayAttr::get(
        context, {key, StringAttr::get(context, stringifyExpertWeightType(
                                                    state.expertWeights))});
  }

  /// Makes `result` name the weight `key` when an earlier schedule already
  /// holds it: the file then stores its bytes once.
  bool reuseWeight(Attribute key, Value result, StringRef name) {
    auto it = state.weights.find(state.getContentKey(key));
    if (it == state.weights.end() || it->second.first == schedule.index())
      return false;
    tensorIds[result] = schedule.addSharedWeight(name.str(), it->second.first,
                                                 it->second.second);
    if (auto scales = state.scaleWeights.find(state.getContentKey(key));
        scales != state.scaleWeights.end())
      scaleIds[result] = schedule.addSharedWeight(
          name.str() + ".scales", scales->second.first, scales->second.second);
    return true;
  }

  void recordWeight(Attribute key, Value result) {
    bool isPaged = paged.contains(result);
    (isPaged ? state.pagedWeights : state.weights)
        .try_emplace(state.getContentKey(key), schedule.index(),
                     tensorIds[result]);
    if (auto it = scaleIds.find(result); it != scaleIds.end())
      (isPaged ? state.pagedScaleWeights : state.scaleWeights)
          .try_emplace(state.getContentKey(key), schedule.index(), it->second);
  }

  /// Like reuseWeight for every weight: a paged expert weight is never
  /// shared within a schedule or with a resident weight (its one reader
  /// pages it), only by a schedule that shares the paged weights, which
  /// must find it. Fails when that schedule's weight is not an earlier
  /// schedule's.
  FailureOr<bool> shareWeight(Attribute key, Value result, StringRef name) {
    if (!paged.contains(result))
      return reuseWeight(key, result, name);
    if (!sharesPagedWeights)
      return false;
    Attribute content = state.getContentKey(key);
    auto it = state.pagedWeights.find(content);
    if (it == state.pagedWeights.end() || it->second.first == schedule.index())
      return emitError(result.getLoc())
             << "expert weight '" << name
             << "' of the prefill graph is not among the decode graph's "
                "tiered experts; a tiered generation plan pages the experts "
                "both graphs share";
    tensorIds[result] = schedule.addSharedWeight(name.str(), it->second.first,
                                                 it->second.second);
    if (auto scales = state.pagedScaleWeights.find(content);
        scales != state.pagedScaleWeights.end())
      scaleIds[result] = schedule.addSharedWeight(
          name.str() + ".scales", scales->second.first, scales->second.second);
    return true;
  }

  /// The key of a stack of constants for `reuseWeight`.
  static Attribute getStackKey(moe::StackOp op) {
    SmallVector<Attribute> values;
    for (Value input : op.getInputs())
      values.push_back(input.getDefiningOp<moe::ConstantOp>().getValue());
    return ArrayAttr::get(op.getContext(), values);
  }

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

  /// Whether `op` is only read through stacks of constants or shards, which
  /// carry its bytes themselves: the plan then needs no weight of its own.
  static bool isOnlyStacked(Operation *op) {
    return !op->use_empty() &&
           llvm::all_of(op->getUsers(), [](Operation *user) {
             auto stack = dyn_cast<moe::StackOp>(user);
             return (stack && stack.isWeight()) || isa<moe::ShardOp>(user);
           });
  }

  /// The bytes of constant `op` as the runtime stores them, referencing the
  /// model's mapped memory where possible (kept alive in `constantBytes`
  /// otherwise).
  FailureOr<ArrayRef<char>> getConstantData(moe::ConstantOp op,
                                            moert::DType dtype) {
    if (auto resource = dyn_cast<DenseResourceElementsAttr>(op.getValue())) {
      AsmResourceBlob *blob = resource.getRawHandle().getBlob();
      if (!blob)
        return op.emitError("weight '")
               << resource.getRawHandle().getKey() << "' has no data";
      // The blob references the model's mapped memory, which outlives the
      // write: no copy.
      return blob->getData();
    }
    if (auto dense = dyn_cast<DenseElementsAttr>(op.getValue())) {
      // A splat (a folded ConstantOfShape, say) is stored expanded: one of
      // a crafted shape could ask for terabytes.
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(dense.getNumElements()),
                                 static_cast<uint64_t>(moert::dtypeSize(dtype)),
                                 &bytes) ||
          bytes > kMaxExpandedConstantBytes)
        return op.emitError("constant of ")
               << dense.getNumElements() << " elements is more than "
               << kMaxExpandedConstantBytes
               << " bytes expanded; a plan stores constants expanded";
      constantBytes.push_back(getBytes(dense, dtype));
      return ArrayRef<char>(constantBytes.back());
    }
    return op.emitError("unsupported constant attribute ") << op.getValue();
  }

  /// A stack of constants is one weight whose bytes are its inputs' bytes in
  /// order, gathered from them while the plan is written.
  LogicalResult emitWeightStack(moe::StackOp op) {
    auto type = cast<RankedTensorType>(op.getType());
    std::optional<moert::DType> dtype = getDType(type.getElementType());
    if (!dtype)
      return op.emitError("stack of element type ")
             << type.getElementType() << " has no runtime representation";
    if (isOnlyStacked(op))
      return success();
    if (failed(checkPlanShape(op, "its value", type.getShape())))
      return failure();
    Attribute key = getWeightKey(getStackKey(op), op.getResult());
    FailureOr<bool> shared = shareWeight(key, op.getResult(), getStepName(op));
    if (failed(shared) || *shared)
      return failure(failed(shared));
    std::vector<moert::WeightPiece> pieces;
    for (Value input : op.getInputs()) {
      FailureOr<moert::WeightPiece> piece =
          getStackPiece(input.getDefiningOp<moe::ConstantOp>(), *dtype);
      if (failed(piece))
        return failure();
      pieces.push_back(*piece);
    }
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    tensorIds[op.getResult()] =
        addPieces(op.getResult(), getStepName(op), *dtype, shape,
                  std::move(pieces), getSection(op.getResult()));
    recordWeight(key, op.getResult());
    return success();
  }

  /// The bytes of one input of a stack of constants.
  FailureOr<moert::WeightPiece> getStackPiece(moe::ConstantOp constant,
                                              moert::DType dtype) {
    // A splat of zeros (an expert absent from the export) is written as
    // zeros without expanding it.
    auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (dense && dense.isSplat() && dtype != moert::DType::Bool &&
        llvm::all_of(dense.getRawData(), [](char c) { return c == 0; }))
      return moert::WeightPiece{nullptr,
                                static_cast<size_t>(dense.getNumElements()) *
                                    moert::dtypeSize(dtype)};
    FailureOr<ArrayRef<char>> data = getConstantData(constant, dtype);
    if (failed(data))
      return failure();
    return moert::WeightPiece{data->data(), data->size()};
  }

  /// A device's shard of a stacked weight: the selected rows, each a
  /// contiguous byte range of the weight (or one input of its stack),
  /// gathered while the plan is written.
  LogicalResult emitShard(moe::ShardOp op) {
    auto type = cast<RankedTensorType>(op.getType());
    std::optional<moert::DType> dtype = getDType(type.getElementType());
    if (!dtype)
      return op.emitError("shard of element type ")
             << type.getElementType() << " has no runtime representation";
    Operation *weight = op.getWeight().getDefiningOp();
    std::string name =
        getStepName(weight) + getShardRole(op) + ".d" + std::to_string(device);
    if (failed(checkPlanShape(op, "the shard '" + name + "'", type.getShape())))
      return failure();
    // Device d's prefill and decode schedules select the same rows of the
    // same weight: the file holds them once. The key names the device, so
    // that a shard is never shared across devices (an MPI rank reads only
    // its own device's shard section).
    auto constant = dyn_cast<moe::ConstantOp>(weight);
    Builder builder(op.getContext());
    Attribute key =
        getWeightKey(builder.getArrayAttr(
                         {constant ? constant.getValue()
                                   : getStackKey(cast<moe::StackOp>(weight)),
                          op.getRowsAttr(), builder.getI64IntegerAttr(device)}),
                     op.getResult());
    FailureOr<bool> shared = shareWeight(key, op.getResult(), name);
    if (failed(shared) || *shared)
      return failure(failed(shared));
    std::vector<moert::WeightPiece> pieces;
    if (constant) {
      FailureOr<ArrayRef<char>> data = getConstantData(constant, *dtype);
      if (failed(data))
        return failure();
      int64_t numRows = op.getWeight().getType().getDimSize(0);
      size_t rowBytes = data->size() / numRows;
      for (int64_t row : op.getRows())
        pieces.push_back({data->data() + row * rowBytes, rowBytes});
    } else {
      auto stack = cast<moe::StackOp>(weight);
      for (int64_t row : op.getRows()) {
        FailureOr<moert::WeightPiece> piece = getStackPiece(
            stack.getInputs()[row].getDefiningOp<moe::ConstantOp>(), *dtype);
        if (failed(piece))
          return failure();
        pieces.push_back(*piece);
      }
    }
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    state.shardSections.resize(state.devices, -1);
    int &section = state.shardSections[device];
    if (section < 0 && !paged.contains(op.getResult()))
      section = writer.addWeightSection();
    tensorIds[op.getResult()] =
        addPieces(op.getResult(), name, *dtype, shape, std::move(pieces),
                  getSection(op.getResult(), section));
    recordWeight(key, op.getResult());
    return success();
  }

  /// ".w1", ".b2", ...: which weight of its moe.experts a shard is, so that
  /// the shards of one layer have distinct names.
  static std::string getShardRole(moe::ShardOp op) {
    for (OpOperand &use : op->getUses()) {
      auto experts = dyn_cast<moe::ExpertsOp>(use.getOwner());
      if (!experts)
        continue;
      Value result = op.getResult();
      for (auto [name, weight] :
           {std::pair<const char *, Value>{".w1", experts.getW1()},
            {".b1", experts.getB1()},
            {".w3", experts.getW3()},
            {".b3", experts.getB3()},
            {".w2", experts.getW2()},
            {".b2", experts.getB2()}})
        if (weight == result)
          return name;
    }
    return "";
  }

  LogicalResult emitConstant(moe::ConstantOp op) {
    if (isOnlyStacked(op))
      return success();
    auto type = cast<RankedTensorType>(op.getType());
    std::optional<moert::DType> dtype = getDType(type.getElementType());
    if (!dtype)
      return op.emitError("constant of element type ")
             << type.getElementType() << " has no runtime representation";
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    if (failed(checkPlanShape(op, "its value", shape)))
      return failure();
    Attribute key = getWeightKey(op.getValue(), op.getResult());
    FailureOr<bool> shared = shareWeight(key, op.getResult(), getStepName(op));
    if (failed(shared) || *shared)
      return failure(failed(shared));
    FailureOr<ArrayRef<char>> data = getConstantData(op, *dtype);
    if (failed(data))
      return failure();
    int section = getSection(op.getResult());
    if (narrowed.contains(op.getResult()) ||
        transposed.contains(op.getResult()))
      tensorIds[op.getResult()] =
          addPieces(op.getResult(), getStepName(op), *dtype, shape,
                    {moert::WeightPiece{data->data(), data->size()}}, section);
    else
      tensorIds[op.getResult()] = schedule.addWeightRef(
          getStepName(op), *dtype, shape, data->data(), data->size(), section);
    recordWeight(key, op.getResult());
    return success();
  }

  /// The little-endian bytes of `dense` as the runtime stores `dtype` (splats
  /// expanded, bools one byte each).
  static std::vector<char> getBytes(DenseElementsAttr dense,
                                    moert::DType dtype) {
    int64_t count = dense.getNumElements();
    size_t width = moert::dtypeSize(dtype);
    std::vector<char> bytes(count * width);
    if (dtype == moert::DType::Bool) {
      int64_t i = 0;
      for (bool value : dense.getValues<bool>())
        bytes[i++] = value ? 1 : 0;
      return bytes;
    }
    ArrayRef<char> raw = dense.getRawData();
    if (dense.isSplat()) {
      for (int64_t i = 0; i < count; ++i)
        std::memcpy(bytes.data() + i * width, raw.data(), width);
    } else if (!bytes.empty()) {
      // An empty tensor has no buffer to copy into (memcpy of null is UB).
      std::memcpy(bytes.data(), raw.data(), bytes.size());
    }
    return bytes;
  }

  FailureOr<int32_t> lookup(Operation *op, Value value) {
    auto it = tensorIds.find(value);
    if (it == tensorIds.end())
      return op->emitError("operand is not a planned tensor");
    return it->second;
  }

  /// Adds weight `key`, or shares it with an earlier schedule that holds it.
  int32_t addKeyedWeight(Attribute key, std::string name, moert::DType dtype,
                         std::vector<int64_t> shape, ArrayRef<char> bytes) {
    Attribute content = state.getContentKey(key);
    auto it = state.weights.find(content);
    if (it != state.weights.end() && it->second.first != schedule.index())
      return schedule.addSharedWeight(std::move(name), it->second.first,
                                      it->second.second);
    int32_t id = schedule.addWeightRef(std::move(name), dtype, std::move(shape),
                                       bytes.data(), bytes.size());
    state.weights.try_emplace(content, schedule.index(), id);
    return id;
  }

  /// A block-quantized constant: packed where its readers read it so
  /// (compiler/plan/QuantizedWeights.h), else its exact f32 values.
  LogicalResult emitQuantizedConstant(moe::BlockQuantizedConstantOp op) {
    std::optional<PackedWeight> packed;
    int32_t id = -1;
    auto add = [&](Attribute key, std::string name, moert::DType dtype,
                   std::vector<int64_t> shape, ArrayRef<char> bytes) {
      return addKeyedWeight(key, std::move(name), dtype, std::move(shape),
                            bytes);
    };
    if (failed(emitBlockQuantizedConstant(op, getStepName(op), add,
                                          constantBytes, packed, id)))
      return failure();
    // A packed weight's readers find its codes as its tensor.
    tensorIds[op.getResult()] = packed ? packed->codes : id;
    if (packed)
      packedWeights[op.getResult()] = *packed;
    return success();
  }

  LogicalResult emitOp(Operation *op) {
    if (auto constant = dyn_cast<moe::ConstantOp>(op))
      return emitConstant(constant);
    if (auto quantized = dyn_cast<moe::BlockQuantizedConstantOp>(op))
      return emitQuantizedConstant(quantized);
    if (auto stack = dyn_cast<moe::StackOp>(op); stack && stack.isWeight())
      return emitWeightStack(stack);
    if (auto shard = dyn_cast<moe::ShardOp>(op))
      return emitShard(shard);
    if (auto ret = dyn_cast<func::ReturnOp>(op))
      return emitReturn(ret);

    std::optional<fb::OpKind> kind = getOpKind(op);
    if (!kind)
      return op->emitError("'")
             << op->getName()
             << "' has no runtime step yet; it cannot be part of a plan";
    std::vector<int32_t> inputs;
    if (failed(collectInputs(op, inputs)))
      return failure();
    // Attention without sinks keeps the 1.6 step's three or four inputs, so
    // that the plan stays readable by runtimes before 1.9.
    if (isa<moe::AttentionOp>(op))
      while (inputs.size() > 3 && inputs.back() < 0)
        inputs.pop_back();
    if (auto experts = dyn_cast<moe::ExpertsOp>(op);
        experts && scaleIds.contains(experts.getW1())) {
      // int8 matrices: their scales follow the step's six weight inputs.
      inputs.resize(8, -1);
      for (Value w : {experts.getW1(), experts.getW3(), experts.getW2()})
        inputs.push_back(w ? scaleIds.lookup(w) : -1);
    }
    if (op->getNumResults() > 0 && failed(emitResultTensors(op)))
      return failure();
    std::vector<int32_t> outputs;
    for (Value result : op->getResults())
      outputs.push_back(tensorIds[result]);
    FailureOr<fb::AttrsUnion> attrs = getAttrs(op);
    if (failed(attrs))
      return failure();
    rewritePackedStep(op, packedWeights, *kind, inputs, *attrs);
    int step = schedule.addStep(*kind, getStepName(op), std::move(inputs),
                                std::move(outputs), std::move(*attrs));
    if (auto experts = dyn_cast<moe::ExpertsOp>(op)) {
      // Layer i of a routing profile is the i-th moe.experts op (of the
      // first micro-batch). A device function's slot s holds the expert its
      // weights' moe.shard takes row s of: the device tiers its slots in
      // the order of the profile restricted to its experts.
      int layer = layerOfWeights
                      .try_emplace(experts.getW1(),
                                   static_cast<int>(layerOfWeights.size()))
                      .first->second;
      if (state.tiers.deviceMemory && paged.contains(experts.getW1()) &&
          tierLayerOfWeights.count(experts.getW1())) {
        // A later micro-batch of a tiered layer pages the same experts.
        tierLayers[tierLayerOfWeights[experts.getW1()]].moreSteps.push_back(
            step);
      } else if (state.tiers.deviceMemory && paged.contains(experts.getW1())) {
        tierLayerOfWeights[experts.getW1()] = tierLayers.size();
        moert::ScheduleBuilder::TierLayer tier;
        tier.step = step;
        if (static_cast<size_t>(layer) < state.tiers.loads.size()) {
          const std::vector<double> &loads = state.tiers.loads[layer];
          auto shard = experts.getW1().getDefiningOp<moe::ShardOp>();
          if (!shard) {
            tier.loads = loads;
          } else {
            for (int64_t row : shard.getRows()) {
              if (row < 0 || static_cast<size_t>(row) >= loads.size())
                return op->emitError("the routing profile's layer ")
                       << layer << " has " << loads.size()
                       << " experts; this device holds expert " << row;
              tier.loads.push_back(loads[row]);
            }
          }
        }
        tierLayers.push_back(std::move(tier));
      }
    }
    return success();
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

  static std::optional<fb::OpKind> getOpKind(Operation *op) {
    return llvm::TypeSwitch<Operation *, std::optional<fb::OpKind>>(op)
        .Case([](moe::AddOp) { return fb::OpKind::Add; })
        .Case([](moe::SubOp) { return fb::OpKind::Sub; })
        .Case([](moe::MulOp) { return fb::OpKind::Mul; })
        .Case([](moe::DivOp) { return fb::OpKind::Div; })
        .Case([](moe::PowOp) { return fb::OpKind::Pow; })
        .Case([](moe::ModOp) { return fb::OpKind::Mod; })
        .Case([](moe::MinOp) { return fb::OpKind::Min; })
        .Case([](moe::MaxOp) { return fb::OpKind::Max; })
        .Case([](moe::SumOp) { return fb::OpKind::Sum; })
        .Case([](moe::SqrtOp) { return fb::OpKind::Sqrt; })
        .Case([](moe::ReciprocalOp) { return fb::OpKind::Reciprocal; })
        .Case([](moe::NegOp) { return fb::OpKind::Neg; })
        .Case([](moe::AbsOp) { return fb::OpKind::Abs; })
        .Case([](moe::ExpOp) { return fb::OpKind::Exp; })
        .Case([](moe::LogOp) { return fb::OpKind::Log; })
        .Case([](moe::TanhOp) { return fb::OpKind::Tanh; })
        .Case([](moe::ErfOp) { return fb::OpKind::Erf; })
        .Case([](moe::SigmoidOp) { return fb::OpKind::Sigmoid; })
        .Case([](moe::ReluOp) { return fb::OpKind::Relu; })
        .Case([](moe::SignOp) { return fb::OpKind::Sign; })
        .Case([](moe::GeluOp) { return fb::OpKind::Gelu; })
        .Case([](moe::SinOp) { return fb::OpKind::Sin; })
        .Case([](moe::CosOp) { return fb::OpKind::Cos; })
        .Case([](moe::FloorOp) { return fb::OpKind::Floor; })
        .Case([](moe::CeilOp) { return fb::OpKind::Ceil; })
        .Case([](moe::SoftplusOp) { return fb::OpKind::Softplus; })
        .Case([](moe::EqualOp) { return fb::OpKind::Equal; })
        .Case([](moe::LessOp) { return fb::OpKind::Less; })
        .Case([](moe::LessOrEqualOp) { return fb::OpKind::LessOrEqual; })
        .Case([](moe::GreaterOp) { return fb::OpKind::Greater; })
        .Case([](moe::GreaterOrEqualOp) { return fb::OpKind::GreaterOrEqual; })
        .Case([](moe::NotOp) { return fb::OpKind::Not; })
        .Case([](moe::AndOp) { return fb::OpKind::And; })
        .Case([](moe::OrOp) { return fb::OpKind::Or; })
        .Case([](moe::WhereOp) { return fb::OpKind::Where; })
        .Case([](moe::ClipOp) { return fb::OpKind::Clip; })
        .Case([](moe::CastOp) { return fb::OpKind::Cast; })
        .Case([](moe::CastLikeOp) { return fb::OpKind::CastLike; })
        .Case([](moe::SoftmaxOp) { return fb::OpKind::Softmax; })
        .Case([](moe::LogSoftmaxOp) { return fb::OpKind::LogSoftmax; })
        .Case([](moe::MatMulOp) { return fb::OpKind::MatMul; })
        .Case([](moe::GemmOp) { return fb::OpKind::Gemm; })
        .Case([](moe::EinsumOp) { return fb::OpKind::Einsum; })
        .Case([](moe::TopKOp) { return fb::OpKind::TopK; })
        .Case([](moe::ArgMaxOp) { return fb::OpKind::ArgMax; })
        .Case([](moe::ReduceSumOp) { return fb::OpKind::ReduceSum; })
        .Case([](moe::ReduceMeanOp) { return fb::OpKind::ReduceMean; })
        .Case([](moe::ReduceMaxOp) { return fb::OpKind::ReduceMax; })
        .Case([](moe::ReduceMinOp) { return fb::OpKind::ReduceMin; })
        .Case([](moe::ReduceProdOp) { return fb::OpKind::ReduceProd; })
        .Case([](moe::ReduceL1Op) { return fb::OpKind::ReduceL1; })
        .Case([](moe::ReduceL2Op) { return fb::OpKind::ReduceL2; })
        .Case(
            [](moe::ReduceSumSquareOp) { return fb::OpKind::ReduceSumSquare; })
        .Case([](moe::ReduceLogSumOp) { return fb::OpKind::ReduceLogSum; })
        .Case(
            [](moe::ReduceLogSumExpOp) { return fb::OpKind::ReduceLogSumExp; })
        .Case([](moe::IsNaNOp) { return fb::OpKind::IsNaN; })
        .Case([](moe::CumSumOp) { return fb::OpKind::CumSum; })
        .Case([](moe::ReshapeOp) { return fb::OpKind::Reshape; })
        .Case([](moe::FlattenOp) { return fb::OpKind::Flatten; })
        .Case([](moe::TransposeOp) { return fb::OpKind::Transpose; })
        .Case([](moe::SqueezeOp) { return fb::OpKind::Squeeze; })
        .Case([](moe::UnsqueezeOp) { return fb::OpKind::Unsqueeze; })
        .Case([](moe::ConcatOp) { return fb::OpKind::Concat; })
        .Case([](moe::SplitOp) { return fb::OpKind::Split; })
        .Case([](moe::SliceOp) { return fb::OpKind::Slice; })
        .Case([](moe::GatherOp) { return fb::OpKind::Gather; })
        .Case([](moe::GatherElementsOp) { return fb::OpKind::GatherElements; })
        .Case([](moe::GatherNDOp) { return fb::OpKind::GatherND; })
        .Case(
            [](moe::ScatterElementsOp) { return fb::OpKind::ScatterElements; })
        .Case([](moe::ScatterNDOp) { return fb::OpKind::ScatterND; })
        .Case([](moe::OneHotOp) { return fb::OpKind::OneHot; })
        .Case([](moe::NonZeroOp) { return fb::OpKind::NonZero; })
        .Case([](moe::ExpandOp) { return fb::OpKind::Expand; })
        .Case([](moe::TileOp) { return fb::OpKind::Tile; })
        .Case([](moe::ShapeOp) { return fb::OpKind::Shape; })
        .Case([](moe::DimOp) { return fb::OpKind::Dim; })
        .Case([](moe::SizeOp) { return fb::OpKind::Size; })
        .Case(
            [](moe::ConstantOfShapeOp) { return fb::OpKind::ConstantOfShape; })
        .Case([](moe::IdentityOp) { return fb::OpKind::Identity; })
        .Case([](moe::RangeOp) { return fb::OpKind::Range; })
        .Case([](moe::TriluOp) { return fb::OpKind::Trilu; })
        .Case([](moe::LayerNormalizationOp) {
          return fb::OpKind::LayerNormalization;
        })
        .Case([](moe::SimplifiedLayerNormalizationOp) {
          return fb::OpKind::SimplifiedLayerNormalization;
        })
        .Case([](moe::FusedElementwiseOp) {
          return fb::OpKind::FusedElementwise;
        })
        .Case([](moe::RouterOp) { return fb::OpKind::Router; })
        .Case([](moe::DispatchOp) { return fb::OpKind::Dispatch; })
        .Case([](moe::ExpertsOp) { return fb::OpKind::Experts; })
        .Case([](moe::SharedExpertOp) { return fb::OpKind::SharedExpert; })
        .Case([](moe::CombineOp) { return fb::OpKind::Combine; })
        .Case([](moe::AssignSlotsOp) { return fb::OpKind::AssignSlots; })
        .Case([](moe::AllToAllOp) { return fb::OpKind::AllToAll; })
        .Case([](moe::AllToAllStartOp) { return fb::OpKind::AllToAllStart; })
        .Case([](moe::AllToAllWaitOp) { return fb::OpKind::AllToAllWait; })
        .Case([](moe::RegroupOp) { return fb::OpKind::Regroup; })
        .Case([](moe::UngroupOp) { return fb::OpKind::Ungroup; })
        .Case([](moe::AttentionOp) { return fb::OpKind::Attention; })
        .Case([](moe::GatedDeltaRuleOp) { return fb::OpKind::GatedDeltaRule; })
        .Default([](Operation *) { return std::nullopt; });
  }

  static fb::AttrsUnion axisAttrs(int64_t axis) {
    fb::AxisAttrsT attrs;
    attrs.axis = axis;
    return moert::attrs(std::move(attrs));
  }

  static fb::AttrsUnion normAttrs(int64_t axis, float epsilon) {
    fb::NormAttrsT attrs;
    attrs.axis = axis;
    attrs.epsilon = epsilon;
    return moert::attrs(std::move(attrs));
  }

  template <typename OpT> static fb::AttrsUnion reduceAttrs(OpT op) {
    fb::ReduceAttrsT attrs;
    attrs.keepdims = op.getKeepdims() != 0;
    attrs.noop_with_empty_axes = op.getNoopWithEmptyAxes() != 0;
    return moert::attrs(std::move(attrs));
  }

  static FailureOr<fb::ScatterReduction> getReduction(Operation *op,
                                                      StringRef name) {
    auto reduction =
        llvm::StringSwitch<std::optional<fb::ScatterReduction>>(name)
            .Case("none", fb::ScatterReduction::None)
            .Case("add", fb::ScatterReduction::Add)
            .Case("mul", fb::ScatterReduction::Mul)
            .Case("max", fb::ScatterReduction::Max)
            .Case("min", fb::ScatterReduction::Min)
            .Default(std::nullopt);
    if (!reduction)
      return op->emitError("unknown reduction '") << name << "'";
    return *reduction;
  }

  FailureOr<fb::AttrsUnion> getAttrs(Operation *op) {
    using Result = FailureOr<fb::AttrsUnion>;
    auto none = [](Operation *) -> Result { return fb::AttrsUnion(); };
    return llvm::TypeSwitch<Operation *, Result>(op)
        .Case<moe::SoftmaxOp, moe::LogSoftmaxOp>([](auto op) -> Result {
          return axisAttrs(op.getAxisAttr().getInt());
        })
        .Case<moe::FlattenOp, moe::GatherOp, moe::GatherElementsOp,
              moe::OneHotOp>([](auto op) -> Result {
          return axisAttrs(op.getAxisAttr().getInt());
        })
        .Case([](moe::ConcatOp op) -> Result {
          return axisAttrs(op.getAxisAttr().getInt());
        })
        .Case([](moe::GemmOp op) -> Result {
          fb::GemmAttrsT attrs;
          attrs.alpha = op.getAlpha().convertToFloat();
          attrs.beta = op.getBeta().convertToFloat();
          attrs.trans_a = op.getTransA() != 0;
          attrs.trans_b = op.getTransB() != 0;
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::EinsumOp op) -> Result {
          fb::EinsumAttrsT attrs;
          attrs.equation = op.getEquation().str();
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::TopKOp op) -> Result {
          fb::TopKAttrsT attrs;
          attrs.axis = op.getAxisAttr().getInt();
          attrs.largest = op.getLargest() != 0;
          attrs.sorted = op.getSorted() != 0;
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::ArgMaxOp op) -> Result {
          fb::ArgMaxAttrsT attrs;
          attrs.axis = op.getAxisAttr().getInt();
          attrs.keepdims = op.getKeepdims() != 0;
          attrs.select_last_index = op.getSelectLastIndex() != 0;
          return moert::attrs(std::move(attrs));
        })
        .Case<moe::ReduceSumOp, moe::ReduceMeanOp, moe::ReduceMaxOp,
              moe::ReduceMinOp, moe::ReduceProdOp, moe::ReduceL1Op,
              moe::ReduceL2Op, moe::ReduceSumSquareOp, moe::ReduceLogSumOp,
              moe::ReduceLogSumExpOp>(
            [](auto op) -> Result { return reduceAttrs(op); })
        .Case([](moe::CumSumOp op) -> Result {
          fb::CumSumAttrsT attrs;
          attrs.exclusive = op.getExclusive() != 0;
          attrs.reverse = op.getReverse() != 0;
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::ReshapeOp op) -> Result {
          fb::ReshapeAttrsT attrs;
          attrs.allowzero = op.getAllowzero() != 0;
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::TransposeOp op) -> Result {
          fb::TransposeAttrsT attrs;
          if (auto perm = op.getPermAttr())
            attrs.perm.assign(perm.asArrayRef().begin(),
                              perm.asArrayRef().end());
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::SplitOp op) -> Result {
          fb::SplitAttrsT attrs;
          attrs.axis = op.getAxisAttr().getInt();
          if (auto count = op.getNumOutputsAttr())
            attrs.num_outputs = count.getInt();
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::GatherNDOp op) -> Result {
          fb::GatherNDAttrsT attrs;
          attrs.batch_dims = op.getBatchDimsAttr().getInt();
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::ScatterElementsOp op) -> Result {
          FailureOr<fb::ScatterReduction> reduction =
              getReduction(op, op.getReduction());
          if (failed(reduction))
            return failure();
          fb::ScatterAttrsT attrs;
          attrs.axis = op.getAxisAttr().getInt();
          attrs.reduction = *reduction;
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::ScatterNDOp op) -> Result {
          FailureOr<fb::ScatterReduction> reduction =
              getReduction(op, op.getReduction());
          if (failed(reduction))
            return failure();
          fb::ScatterAttrsT attrs;
          attrs.reduction = *reduction;
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::CastOp op) -> Result {
          std::optional<moert::DType> to = getDType(op.getTo());
          if (!to)
            return op.emitError("cast to ")
                   << op.getTo() << " has no runtime representation";
          fb::CastAttrsT attrs;
          attrs.to = static_cast<fb::DType>(*to);
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::TriluOp op) -> Result {
          fb::TriluAttrsT attrs;
          attrs.upper = op.getUpper() != 0;
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::ModOp op) -> Result {
          fb::ModAttrsT attrs;
          attrs.fmod = op.getFmod() != 0;
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::LayerNormalizationOp op) -> Result {
          return normAttrs(op.getAxisAttr().getInt(),
                           op.getEpsilon().convertToFloat());
        })
        .Case([](moe::SimplifiedLayerNormalizationOp op) -> Result {
          return normAttrs(op.getAxisAttr().getInt(),
                           op.getEpsilon().convertToFloat());
        })
        .Case([](moe::GeluOp op) -> Result {
          fb::GeluAttrsT attrs;
          attrs.approximate = op.getApproximate() == "tanh"
                                  ? fb::GeluApproximation::Tanh
                                  : fb::GeluApproximation::None;
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::ConstantOfShapeOp op) -> Result {
          return getConstantOfShapeAttrs(op);
        })
        .Case([](moe::ShapeOp op) -> Result {
          fb::ShapeAttrsT attrs;
          attrs.start = op.getStartAttr().getInt();
          if (auto end = op.getEndAttr())
            attrs.end = end.getInt();
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::DimOp op) -> Result {
          return axisAttrs(op.getIndexAttr().getInt());
        })
        .Case(
            [](moe::FusedElementwiseOp op) -> Result { return getProgram(op); })
        .Case([](moe::RouterOp op) -> Result { return getRouterAttrs(op); })
        .Case([](moe::AttentionOp op) -> Result {
          fb::AttentionAttrsT attrs;
          attrs.scale = op.getScale().convertToFloat();
          attrs.softcap = op.getSoftcap().convertToFloat();
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::GatedDeltaRuleOp op) -> Result {
          fb::GatedDeltaRuleAttrsT attrs;
          attrs.scale = op.getScale().convertToFloat();
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::DispatchOp op) -> Result {
          fb::DispatchAttrsT attrs;
          attrs.num_experts = op.getNumExpertsAttr().getInt();
          return moert::attrs(std::move(attrs));
        })
        .Case<moe::ExpertsOp, moe::SharedExpertOp>([this](auto op) -> Result {
          return getFfnAttrs(op, transposed.contains(op.getW1()));
        })
        .Case([](moe::AssignSlotsOp op) -> Result {
          fb::SlotAttrsT attrs;
          ArrayRef<int64_t> offsets = op.getExpertSlotOffsets();
          ArrayRef<int64_t> slots = op.getExpertSlots();
          attrs.expert_slot_offsets.assign(offsets.begin(), offsets.end());
          attrs.expert_slots.assign(slots.begin(), slots.end());
          return moert::attrs(std::move(attrs));
        })
        .Case<moe::AllToAllOp, moe::AllToAllStartOp>([](auto op) -> Result {
          fb::CollectiveAttrsT attrs;
          attrs.num_devices = op.getNumDevicesAttr().getInt();
          return moert::attrs(std::move(attrs));
        })
        .Case([](moe::RegroupOp op) -> Result {
          fb::RegroupAttrsT attrs;
          attrs.num_sources = op.getNumSourcesAttr().getInt();
          attrs.num_slots = op.getNumSlotsAttr().getInt();
          return moert::attrs(std::move(attrs));
        })
        .Default(none);
  }

  static fb::AttrsUnion getRouterAttrs(moe::RouterOp op) {
    fb::RouterAttrsT attrs;
    attrs.score_function = op.getScoreFunction() == moe::ScoreFunction::Sigmoid
                               ? fb::ScoreFunction::Sigmoid
                               : fb::ScoreFunction::Softmax;
    attrs.top_k = op.getTopKAttr().getInt();
    attrs.score_after_topk = op.getScoreAfterTopk();
    attrs.normalize = op.getNormalize();
    attrs.routed_scaling_factor =
        op.getRoutedScalingFactorAttr().getValue().convertToFloat();
    attrs.n_group = op.getNGroupAttr().getInt();
    attrs.topk_group = op.getTopkGroupAttr().getInt();
    // The plan spells "no capacity" as 0.
    if (IntegerAttr capacity = op.getCapacityAttr())
      attrs.capacity = capacity.getInt();
    if (FloatAttr kept = op.getNormalizeKeptAttr())
      attrs.normalize_kept_epsilon = kept.getValue().convertToFloat();
    return moert::attrs(std::move(attrs));
  }

  static fb::Activation getActivation(moe::Activation activation) {
    switch (activation) {
    case moe::Activation::Relu:
      return fb::Activation::Relu;
    case moe::Activation::Gelu:
      return fb::Activation::Gelu;
    case moe::Activation::GeluTanh:
      return fb::Activation::GeluTanh;
    case moe::Activation::Silu:
      return fb::Activation::Silu;
    case moe::Activation::Identity:
      return fb::Activation::Identity;
    case moe::Activation::SiluGlu:
      return fb::Activation::SiluGlu;
    case moe::Activation::GeluGlu:
      return fb::Activation::GeluGlu;
    case moe::Activation::GeluTanhGlu:
      return fb::Activation::GeluTanhGlu;
    case moe::Activation::ClampedSwiglu:
      return fb::Activation::ClampedSwiglu;
    case moe::Activation::ReluSquared:
      return fb::Activation::ReluSquared;
    }
    llvm_unreachable("unknown activation");
  }

  /// The expert network of moe.experts and moe.shared_expert.
  /// `outIn`: the matrices are written transposed to [out, in].
  template <typename OpT>
  static fb::AttrsUnion getFfnAttrs(OpT op, bool outIn) {
    fb::FfnAttrsT attrs;
    attrs.activation = getActivation(op.getActivation());
    attrs.weight_layout =
        op.getWeightLayout() == moe::WeightLayout::InOut && !outIn
            ? fb::WeightLayout::InOut
            : fb::WeightLayout::OutIn;
    if (std::optional<moe::GluLayout> glu = op.getGluLayout())
      attrs.glu_layout = *glu == moe::GluLayout::Interleaved
                             ? fb::GluLayout::Interleaved
                             : fb::GluLayout::Concatenated;
    if (FloatAttr alpha = op.getAlphaAttr())
      attrs.alpha = alpha.getValue().convertToFloat();
    if (FloatAttr beta = op.getBetaAttr())
      attrs.beta = beta.getValue().convertToFloat();
    // The plan spells "no clamping" as limit 0.
    if (FloatAttr limit = op.getLimitAttr())
      attrs.limit = limit.getValue().convertToFloat();
    return moert::attrs(std::move(attrs));
  }

  static FailureOr<fb::AttrsUnion>
  getConstantOfShapeAttrs(moe::ConstantOfShapeOp op) {
    fb::ConstantOfShapeAttrsT attrs;
    Type elementType = op.getType().getElementType();
    std::optional<moert::DType> dtype = getDType(elementType);
    if (!dtype)
      return op.emitError("constant_of_shape of element type ")
             << elementType << " has no runtime representation";
    attrs.dtype = static_cast<fb::DType>(*dtype);
    if (auto value = op.getValueAttr()) {
      auto dense = dyn_cast<DenseElementsAttr>(value);
      if (!dense || dense.getNumElements() != 1)
        return op.emitError("constant_of_shape value must be one element");
      if (isa<FloatType>(elementType))
        attrs.float_value =
            (*dense.getValues<APFloat>().begin()).convertToFloat();
      else
        attrs.int_value = (*dense.getValues<APInt>().begin()).getSExtValue();
    }
    return moert::attrs(std::move(attrs));
  }

  /// Translates a fused region into a register program: one register per
  /// body value, inputs first.
  static FailureOr<fb::AttrsUnion> getProgram(moe::FusedElementwiseOp op) {
    fb::FusedElementwiseAttrsT attrs;
    llvm::DenseMap<Value, uint8_t> registers;
    Block &body = op.getBody().front();
    auto allocate = [&](Value value) -> FailureOr<uint8_t> {
      if (registers.size() >= 255)
        return op.emitError("fused region needs more than 255 registers");
      uint8_t reg = registers.size();
      registers[value] = reg;
      return reg;
    };
    for (BlockArgument arg : body.getArguments()) {
      FailureOr<uint8_t> reg = allocate(arg);
      if (failed(reg))
        return failure();
      attrs.program.emplace_back(fb::ExprOp::Input, *reg,
                                 static_cast<uint8_t>(arg.getArgNumber()), 0,
                                 0.0f);
    }
    for (Operation &inner : body.without_terminator()) {
      if (auto constant = dyn_cast<moe::ConstantOp>(inner)) {
        auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
        if (!dense || !dense.isSplat() || !dense.getElementType().isF32())
          return inner.emitError("fused constants must be f32 splats");
        FailureOr<uint8_t> reg = allocate(constant.getResult());
        if (failed(reg))
          return failure();
        attrs.program.emplace_back(
            fb::ExprOp::Const, *reg, 0, 0,
            dense.getSplatValue<APFloat>().convertToFloat());
        continue;
      }
      std::optional<fb::ExprOp> expr = getExprOp(&inner);
      if (!expr)
        return inner.emitError("op cannot be part of a fused program");
      uint8_t a = registers.lookup(inner.getOperand(0));
      uint8_t b = inner.getNumOperands() > 1
                      ? registers.lookup(inner.getOperand(1))
                      : 0;
      FailureOr<uint8_t> reg = allocate(inner.getResult(0));
      if (failed(reg))
        return failure();
      attrs.program.emplace_back(*expr, *reg, a, b, 0.0f);
    }
    attrs.num_registers = registers.size();
    for (Value value : body.getTerminator()->getOperands())
      attrs.results.push_back(registers.lookup(value));
    return moert::attrs(std::move(attrs));
  }

  static std::optional<fb::ExprOp> getExprOp(Operation *op) {
    return llvm::TypeSwitch<Operation *, std::optional<fb::ExprOp>>(op)
        .Case([](moe::AddOp) { return fb::ExprOp::Add; })
        .Case([](moe::SubOp) { return fb::ExprOp::Sub; })
        .Case([](moe::MulOp) { return fb::ExprOp::Mul; })
        .Case([](moe::DivOp) { return fb::ExprOp::Div; })
        .Case([](moe::PowOp) { return fb::ExprOp::Pow; })
        .Case([](moe::MaxOp) { return fb::ExprOp::Max; })
        .Case([](moe::MinOp) { return fb::ExprOp::Min; })
        .Case([](moe::NegOp) { return fb::ExprOp::Neg; })
        .Case([](moe::AbsOp) { return fb::ExprOp::Abs; })
        .Case([](moe::ExpOp) { return fb::ExprOp::Exp; })
        .Case([](moe::LogOp) { return fb::ExprOp::Log; })
        .Case([](moe::SqrtOp) { return fb::ExprOp::Sqrt; })
        .Case([](moe::ReciprocalOp) { return fb::ExprOp::Reciprocal; })
        .Case([](moe::TanhOp) { return fb::ExprOp::Tanh; })
        .Case([](moe::ErfOp) { return fb::ExprOp::Erf; })
        .Case([](moe::SigmoidOp) { return fb::ExprOp::Sigmoid; })
        .Case([](moe::ReluOp) { return fb::ExprOp::Relu; })
        .Case([](moe::GeluOp op) {
          return op.getApproximate() == "tanh" ? fb::ExprOp::GeluTanh
                                               : fb::ExprOp::Gelu;
        })
        .Case([](moe::SinOp) { return fb::ExprOp::Sin; })
        .Case([](moe::CosOp) { return fb::ExprOp::Cos; })
        .Case([](moe::FloorOp) { return fb::ExprOp::Floor; })
        .Case([](moe::CeilOp) { return fb::ExprOp::Ceil; })
        .Case([](moe::SoftplusOp) { return fb::ExprOp::Softplus; })
        .Default([](Operation *) { return std::nullopt; });
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

StringRef stringifyExpertWeightType(ExpertWeightType type) {
  switch (type) {
  case ExpertWeightType::F32:
    return "f32";
  case ExpertWeightType::BF16:
    return "bf16";
  case ExpertWeightType::F16:
    return "f16";
  case ExpertWeightType::I8:
    return "int8";
  }
  llvm_unreachable("unknown expert weight type");
}

int64_t getExpertWeightElementBytes(ExpertWeightType type) {
  switch (type) {
  case ExpertWeightType::F32:
    return 4;
  case ExpertWeightType::BF16:
  case ExpertWeightType::F16:
    return 2;
  case ExpertWeightType::I8:
    return 1;
  }
  llvm_unreachable("unknown expert weight type");
}

/// The matrix operands (w1, w3, w2) of an expert network op.
static SmallVector<Value, 3> getExpertMatrices(Operation *op) {
  SmallVector<Value, 3> matrices;
  auto collect = [&](auto ffn) {
    for (Value value : {ffn.getW1(), ffn.getW3(), ffn.getW2()})
      if (value)
        matrices.push_back(value);
  };
  if (auto experts = dyn_cast<moe::ExpertsOp>(op))
    collect(experts);
  else if (auto shared = dyn_cast<moe::SharedExpertOp>(op))
    collect(shared);
  return matrices;
}

/// The matrices of the expert network ops `candidates` that the plan
/// writer may store in another form (narrowed, quantized, transposed):
/// stored f32 weights (constants, stacks of constants, shards) that nothing
/// but the candidates' matrix operands reads. Candidates with a matrix that
/// is not are dropped, until none is: dropping one may make a matrix it
/// shares with another op unfit there too. An op keeps all of its matrices
/// or none.
static llvm::DenseSet<Value>
getRewritableMatrices(llvm::SetVector<Operation *> candidates) {
  auto isMatrixUse = [&](OpOperand &use) {
    return candidates.contains(use.getOwner()) &&
           llvm::is_contained(getExpertMatrices(use.getOwner()), use.get());
  };
  auto isRewritable = [&](Value value) {
    Operation *def = value.getDefiningOp();
    auto stack = dyn_cast_or_null<moe::StackOp>(def);
    bool storedWeight = isa_and_nonnull<moe::ConstantOp, moe::ShardOp>(def) ||
                        (stack && stack.isWeight());
    return storedWeight &&
           cast<ShapedType>(value.getType()).getElementType().isF32() &&
           llvm::all_of(value.getUses(), isMatrixUse);
  };
  for (bool changed = true; changed;) {
    SmallVector<Operation *> kept;
    for (Operation *op : candidates)
      if (llvm::all_of(getExpertMatrices(op), isRewritable))
        kept.push_back(op);
    changed = kept.size() != candidates.size();
    candidates.clear();
    candidates.insert(kept.begin(), kept.end());
  }
  llvm::DenseSet<Value> matrices;
  for (Operation *op : candidates)
    for (Value value : getExpertMatrices(op))
      matrices.insert(value);
  return matrices;
}

llvm::DenseSet<Value> getNarrowableExpertWeights(func::FuncOp func,
                                                 ExpertWeightType type) {
  if (type == ExpertWeightType::F32)
    return {};
  // int8 is for the routed experts only (shared experts run on every
  // token: their weights are read as often as the dense layers').
  llvm::SetVector<Operation *> candidates;
  func.walk([&](Operation *op) {
    if (isa<moe::ExpertsOp>(op) ||
        (type != ExpertWeightType::I8 && isa<moe::SharedExpertOp>(op)))
      candidates.insert(op);
  });
  return getRewritableMatrices(std::move(candidates));
}

llvm::DenseSet<Value> getTransposableExpertWeights(func::FuncOp func) {
  llvm::SetVector<Operation *> candidates;
  func.walk([&](moe::ExpertsOp op) {
    if (op.getWeightLayout() == moe::WeightLayout::InOut)
      candidates.insert(op);
  });
  return getRewritableMatrices(std::move(candidates));
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
                       /*sharesPagedWeights=*/tiers.deviceMemory != 0)
                   .emit()))
      return failure();
  gen.max_seq = signature.maxSeq;
  gen.input_ids = signature.inputIds;
  gen.position_ids = signature.positionIds;
  gen.attention_mask = signature.attentionMask;
  gen.eos_ids = signature.eosIds;
  gen.logits = signature.logits;
  // moe-analyze-batch-rows's verdict on the prefill graph (continuous
  // batching): proven, or the op that mixes rows another way.
  if (auto verdict =
          prefill ? prefill->getAttrOfType<DictionaryAttr>("moe.batch_rows")
                  : DictionaryAttr()) {
    if (verdict.get("symbol")) {
      gen.batchable = true;
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
  return writePlan(state, decode, path, finalize);
}

} // namespace moec::plan
