//===- WeightStorage.cpp - How a plan stores its weights ------------------===//
//
// The weight-storage planner of the plan emitter (WeightStorage.h).
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/WeightStorage.h"
#include "compiler/plan/DenseWeights.h"

#include "format/version.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSwitch.h"

#include <cstring>

using namespace mlir;

namespace moec::plan {

std::optional<moert::DType> getDType(Type type) {
  // moert::DType has the values of the schema's DType.
  if (std::optional<moert::fb::DType> dtype = moe::getPlanDType(type))
    return static_cast<moert::DType>(*dtype);
  return std::nullopt;
}

/// The quoted ONNX name in an importer location name ("node 'x' (Op)",
/// "initializer 'w'"), or the whole name.
static std::string getOnnxName(StringRef locationName) {
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

PlanState::PlanState(uint32_t devices, ExpertWeightType expertWeights,
                     TierOptions tiers)
    : writer({moert::Backend::Cpu, devices},
             std::string("moec ") + moert::getVersion()),
      devices(devices), expertWeights(expertWeights), tiers(std::move(tiers)) {}

Attribute PlanState::getContentKey(Attribute key) {
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

namespace {

/// Whether every use of `w` is the same operand of a moe.experts op of one
/// layer (the ops sharing its w1: one per micro-batch).
bool isReadByOneLayer(Value w) {
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

/// The weight operands of the moe.experts ops of `func` that can be paged:
/// stored weights read by one operand of one layer's ops and nothing else,
/// each with its place (the layer, numbered in program order, and the
/// operand).
llvm::DenseMap<Value, std::pair<int, unsigned>>
getPagedExpertWeights(func::FuncOp func) {
  llvm::DenseMap<Value, std::pair<int, unsigned>> result;
  llvm::DenseMap<Value, int> layers;
  func.walk([&](moe::ExpertsOp op) {
    int layer = layers.try_emplace(op.getW1(), static_cast<int>(layers.size()))
                    .first->second;
    for (OpOperand &operand : op->getOpOperands()) {
      Value w = operand.get();
      if (!llvm::is_contained({op.getW1(), op.getB1(), op.getW3(), op.getB3(),
                               op.getW2(), op.getB2()},
                              w) ||
          !isReadByOneLayer(w))
        continue;
      Operation *def = w.getDefiningOp();
      auto stack = dyn_cast_or_null<moe::StackOp>(def);
      if (isa_and_nonnull<moe::ConstantOp, moe::ShardOp>(def) ||
          (stack && stack.isWeight()))
        result.try_emplace(w, layer, operand.getOperandNumber());
    }
  });
  return result;
}

/// The key of a stack of constants for `reuseWeight`.
Attribute getStackKey(moe::StackOp op) {
  SmallVector<Attribute> values;
  for (Value input : op.getInputs())
    values.push_back(input.getDefiningOp<moe::ConstantOp>().getValue());
  return ArrayAttr::get(op.getContext(), values);
}

/// Whether `op` is only read through stacks of constants or shards, which
/// carry its bytes themselves: the plan then needs no weight of its own.
bool isOnlyStacked(Operation *op) {
  return !op->use_empty() && llvm::all_of(op->getUsers(), [](Operation *user) {
    auto stack = dyn_cast<moe::StackOp>(user);
    return (stack && stack.isWeight()) || isa<moe::ShardOp>(user);
  });
}

/// ".w1", ".b2", ...: which weight of its moe.experts a shard is, so that
/// the shards of one layer have distinct names.
std::string getShardRole(moe::ShardOp op) {
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

/// The little-endian bytes of `dense` as the runtime stores `dtype` (splats
/// expanded, bools one byte each).
std::vector<char> getBytes(DenseElementsAttr dense, moert::DType dtype) {
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

} // namespace

WeightStorage::WeightStorage(func::FuncOp func, int device, PlanState &state,
                             moert::ScheduleBuilder &schedule,
                             llvm::DenseMap<Value, int32_t> &tensorIds,
                             PagedExperts pagedExperts)
    : func(func), device(device), state(state), writer(state.writer),
      schedule(schedule), tensorIds(tensorIds),
      sharesPagedWeights(pagedExperts == PagedExperts::Shared),
      pagesExperts(state.tiers.deviceMemory &&
                   pagedExperts != PagedExperts::None) {
  narrowed = getNarrowableExpertWeights(func, state.expertWeights);
  transposed = getTransposableExpertWeights(func);
  // Dense matrices [K, N]: stored [N, K] for the Linear step (narrowed
  // unless the plan is f32), int8 with its channels along the columns as
  // the model has them.
  // Embedding tables: narrowed as they are (bf16 / f16 only).
  for (Value w : getNarrowableEmbeddings(func, state.expertWeights))
    narrowed.insert(w);
  dense = getLinearDenseWeights(func, state.expertWeights);
  for (Value w : dense) {
    if (state.expertWeights != ExpertWeightType::F32)
      narrowed.insert(w);
    transposed.insert(w);
    if (state.expertWeights == ExpertWeightType::I8)
      channelDims.try_emplace(w, 2);
  }
  if (pagesExperts)
    paged = getPagedExpertWeights(func);
  if (state.expertWeights == ExpertWeightType::I8) {
    // [E, out, in] (or a shared expert's [out, in]) matrices have their
    // channels along their rows (1), [E, in, out] ones along their columns.
    auto addChannels = [&](auto op) {
      int channelDim = op.getWeightLayout() == moe::WeightLayout::InOut ? 2 : 1;
      for (Value w : {op.getW1(), op.getW3(), op.getW2()})
        if (w && narrowed.contains(w))
          channelDims.try_emplace(w, channelDim);
    };
    func.walk([&](moe::ExpertsOp op) { addChannels(op); });
    func.walk([&](moe::SharedExpertOp op) { addChannels(op); });
  }
}

FailureOr<bool> WeightStorage::emitWeight(Operation *op) {
  LogicalResult result = success();
  if (auto constant = dyn_cast<moe::ConstantOp>(op))
    result = emitConstant(constant);
  else if (auto quantized = dyn_cast<moe::BlockQuantizedConstantOp>(op))
    result = emitQuantizedConstant(quantized);
  else if (auto stack = dyn_cast<moe::StackOp>(op); stack && stack.isWeight())
    result = emitWeightStack(stack);
  else if (auto shard = dyn_cast<moe::ShardOp>(op))
    result = emitShard(shard);
  else
    return false;
  if (failed(result))
    return failure();
  return true;
}

std::optional<int32_t> WeightStorage::getScales(Value w) const {
  auto it = scaleIds.find(w);
  if (it == scaleIds.end())
    return std::nullopt;
  return it->second;
}

LogicalResult WeightStorage::addExpertsStep(moe::ExpertsOp op, int step) {
  // Layer i of a routing profile is the i-th moe.experts op (of the
  // first micro-batch). A device function's slot s holds the expert its
  // weights' moe.shard takes row s of: the device tiers its slots in
  // the order of the profile restricted to its experts.
  int layer =
      layerOfWeights
          .try_emplace(op.getW1(), static_cast<int>(layerOfWeights.size()))
          .first->second;
  if (pagesExperts && paged.contains(op.getW1()) &&
      tierLayerOfWeights.count(op.getW1())) {
    // A later micro-batch of a tiered layer pages the same experts.
    tierLayers[tierLayerOfWeights[op.getW1()]].moreSteps.push_back(step);
  } else if (pagesExperts && paged.contains(op.getW1())) {
    tierLayerOfWeights[op.getW1()] = tierLayers.size();
    moert::ScheduleBuilder::TierLayer tier;
    tier.step = step;
    if (static_cast<size_t>(layer) < state.tiers.loads.size()) {
      const std::vector<double> &loads = state.tiers.loads[layer];
      auto shard = op.getW1().getDefiningOp<moe::ShardOp>();
      if (!shard) {
        tier.loads = loads;
      } else {
        for (int64_t row : shard.getRows()) {
          if (row < 0 || static_cast<size_t>(row) >= loads.size())
            return op.emitError("the routing profile's layer ")
                   << layer << " has " << loads.size()
                   << " experts; this device holds expert " << row;
          tier.loads.push_back(loads[row]);
        }
      }
    }
    tierLayers.push_back(std::move(tier));
  }
  return success();
}

/// The weight section of `value`: the device's paged section for a paged
/// expert weight, else `section`.
int WeightStorage::getSection(Value value, int section) {
  if (!paged.contains(value))
    return section;
  state.pagedSections.resize(state.devices, -1);
  int &pagedSection = state.pagedSections[device];
  if (pagedSection < 0)
    pagedSection = writer.addWeightSection(/*paged=*/true);
  return pagedSection;
}

/// Tiers the schedule's layers whose weights were paged.
LogicalResult WeightStorage::emitTiers() {
  if (!pagesExperts || sharesPagedWeights)
    return success();
  if (tierLayers.empty()) {
    // int4 and int8 builder exports keep their experts block-quantized.
    bool blockQuantized = false;
    func.walk([&](moe::ExpertsOp op) {
      blockQuantized |= isa_and_nonnull<moe::BlockQuantizedConstantOp>(
          op.getW1().getDefiningOp());
    });
    if (blockQuantized)
      return func.emitError("--device-memory tiers the routed experts' "
                            "weights, but they are block-quantized (an int4 "
                            "or int8 export), which tiers do not page");
    return func.emitError("--device-memory tiers the routed experts' "
                          "weights, but no moe.experts op has weights that "
                          "only it reads");
  }
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
std::optional<moert::DType> WeightStorage::getNarrowedType(Value value) const {
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
int32_t WeightStorage::addPieces(Value value, std::string name,
                                 moert::DType dtype, std::vector<int64_t> shape,
                                 std::vector<moert::WeightPiece> pieces,
                                 int section) {
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
Attribute WeightStorage::getWeightKey(Attribute key, Value value) const {
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
bool WeightStorage::reuseWeight(Attribute key, Value result, StringRef name) {
  auto it = state.weights.find(state.getContentKey(key));
  if (it == state.weights.end() || it->second.first == schedule.index())
    return false;
  tensorIds[result] =
      schedule.addSharedWeight(name.str(), it->second.first, it->second.second);
  if (auto scales = state.scaleWeights.find(state.getContentKey(key));
      scales != state.scaleWeights.end())
    scaleIds[result] = schedule.addSharedWeight(
        name.str() + ".scales", scales->second.first, scales->second.second);
  return true;
}

void WeightStorage::recordWeight(Attribute key, Value result) {
  bool isPaged = paged.contains(result);
  Attribute content =
      isPaged ? getPagedKey(key, result) : state.getContentKey(key);
  (isPaged ? state.pagedWeights : state.weights)
      .try_emplace(content, schedule.index(), tensorIds[result]);
  if (auto it = scaleIds.find(result); it != scaleIds.end())
    (isPaged ? state.pagedScaleWeights : state.scaleWeights)
        .try_emplace(content, schedule.index(), it->second);
}

/// A paged weight's key in PlanState::pagedWeights: its content and its
/// place, since equal bytes (two layers' zero biases) may be the weights of
/// different tiered layers, which another schedule must read apart.
Attribute WeightStorage::getPagedKey(Attribute key, Value result) {
  auto [layer, operand] = paged.lookup(result);
  Builder builder(key.getContext());
  return builder.getArrayAttr({state.getContentKey(key),
                               builder.getI64IntegerAttr(layer),
                               builder.getI64IntegerAttr(operand)});
}

/// Like reuseWeight for every weight: a paged expert weight is never
/// shared within a schedule or with a resident weight (its one reader
/// pages it), only by a schedule that shares the paged weights, which
/// must find it. Fails when that schedule's weight is not an earlier
/// schedule's.
FailureOr<bool> WeightStorage::shareWeight(Attribute key, Value result,
                                           StringRef name) {
  if (!paged.contains(result))
    return reuseWeight(key, result, name);
  if (!sharesPagedWeights)
    return false;
  Attribute content = getPagedKey(key, result);
  auto it = state.pagedWeights.find(content);
  if (it == state.pagedWeights.end() || it->second.first == schedule.index())
    return emitError(result.getLoc())
           << "expert weight '" << name
           << "' of the prefill graph is not among the decode graph's "
              "tiered experts; a tiered generation plan pages the experts "
              "both graphs share";
  tensorIds[result] =
      schedule.addSharedWeight(name.str(), it->second.first, it->second.second);
  if (auto scales = state.pagedScaleWeights.find(content);
      scales != state.pagedScaleWeights.end())
    scaleIds[result] = schedule.addSharedWeight(
        name.str() + ".scales", scales->second.first, scales->second.second);
  return true;
}

/// The bytes of constant `op` as the runtime stores them, referencing the
/// model's mapped memory where possible (kept alive in `constantBytes`
/// otherwise).
FailureOr<ArrayRef<char>> WeightStorage::getConstantData(moe::ConstantOp op,
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
    state.constantBytes.push_back(getBytes(dense, dtype));
    return ArrayRef<char>(state.constantBytes.back());
  }
  return op.emitError("unsupported constant attribute ") << op.getValue();
}

/// A stack of constants is one weight whose bytes are its inputs' bytes in
/// order, gathered from them while the plan is written.
LogicalResult WeightStorage::emitWeightStack(moe::StackOp op) {
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
FailureOr<moert::WeightPiece>
WeightStorage::getStackPiece(moe::ConstantOp constant, moert::DType dtype) {
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
LogicalResult WeightStorage::emitShard(moe::ShardOp op) {
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

LogicalResult WeightStorage::emitConstant(moe::ConstantOp op) {
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
  if (narrowed.contains(op.getResult()) || transposed.contains(op.getResult()))
    tensorIds[op.getResult()] =
        addPieces(op.getResult(), getStepName(op), *dtype, shape,
                  {moert::WeightPiece{data->data(), data->size()}}, section);
  else
    tensorIds[op.getResult()] = schedule.addWeightRef(
        getStepName(op), *dtype, shape, data->data(), data->size(), section);
  recordWeight(key, op.getResult());
  return success();
}

/// Adds weight `key`, or shares it with an earlier schedule that holds it.
int32_t WeightStorage::addKeyedWeight(Attribute key, std::string name,
                                      moert::DType dtype,
                                      std::vector<int64_t> shape,
                                      ArrayRef<char> bytes) {
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
LogicalResult
WeightStorage::emitQuantizedConstant(moe::BlockQuantizedConstantOp op) {
  std::optional<PackedWeight> packed;
  int32_t id = -1;
  auto add = [&](Attribute key, std::string name, moert::DType dtype,
                 std::vector<int64_t> shape, ArrayRef<char> bytes) {
    return addKeyedWeight(key, std::move(name), dtype, std::move(shape), bytes);
  };
  if (failed(emitBlockQuantizedConstant(op, getStepName(op), add,
                                        state.constantBytes, packed, id)))
    return failure();
  // A packed weight's readers find its codes as its tensor.
  tensorIds[op.getResult()] = packed ? packed->codes : id;
  if (packed)
    packedWeights[op.getResult()] = *packed;
  return success();
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
  llvm::SetVector<Operation *> candidates;
  func.walk([&](Operation *op) {
    if (isa<moe::ExpertsOp, moe::SharedExpertOp>(op))
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

} // namespace moec::plan
