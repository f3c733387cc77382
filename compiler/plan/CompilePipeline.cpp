//===- CompilePipeline.cpp - from imported IR to a plan -------------------===//

#include "compiler/plan/CompilePipeline.h"

#include "compiler/plan/DenseWeights.h"
#include "compiler/plan/PlanEmitter.h"

#include "dialects/moe/LayerForm.h"

#include "dialects/moe/MoeOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"

#include <set>

using namespace mlir;

namespace moec::plan {

void buildCompilePipeline(OpPassManager &pm, const CompileOptions &options) {
  OpPassManager &funcPM = pm.nest<func::FuncOp>();
  funcPM.addPass(createCanonicalizerPass());
  funcPM.addPass(createMoeRefineShapes());
  funcPM.addPass(createCSEPass());
  if (options.simplifyOnly)
    return;
  // The idioms of expert code outside transformers, into the forms the
  // detectors match (then CSE shares the masks it makes per expert).
  funcPM.addPass(createMoeCanonicalizeExperts());
  funcPM.addPass(createCSEPass());
  // Before the loop detector, whose Switch form would remark first on the
  // arg-max of a capacity gate it cannot take.
  funcPM.addPass(createMoeDetectCapacityExperts());
  funcPM.addPass(createMoeDetectExperts());
  funcPM.addPass(createMoeDetectDenseExperts());
  funcPM.addPass(createMoeDetectParallelExperts());
  // The stacked form is matched in one canonical form of its exporters'
  // idioms; the detectors above match their dynamo forms themselves.
  funcPM.addPass(createMoeCanonicalizeIdioms());
  funcPM.addPass(createMoeDetectStackedExperts());
  funcPM.addPass(createMoeDetectInputScaledExperts());
  // After the stacked form, whose gathers it would rewrite.
  funcPM.addPass(createMoeCanonicalizeSegments());
  funcPM.addPass(createMoeDetectSegmentExperts());
  // After every detector: a layer one of them took gets no remark from
  // the others.
  MoeReportNearMissesOptions nearMisses;
  nearMisses.allReasons = options.allNearMisses;
  funcPM.addPass(createMoeReportNearMisses(nearMisses));
  funcPM.addPass(createMoeFuseNorms());
  // Before elementwise fusion, which would take the scores' scale and mask.
  if (options.fuseAttention)
    funcPM.addPass(createMoeFuseAttention());
  funcPM.addPass(createMoeFuseElementwise());
  // Fusion leaves the scalar constants it copied into regions unused.
  funcPM.addPass(createCanonicalizerPass());
  // Whether the tokens of several sequences may share one run of the
  // prefill graph (continuous batching), on the fused attention.
  if (!options.batchRowInputs.empty()) {
    MoeAnalyzeBatchRowsOptions batchRows;
    batchRows.rowInputs.assign(options.batchRowInputs.begin(),
                               options.batchRowInputs.end());
    pm.addPass(createMoeAnalyzeBatchRows(batchRows));
  }
  // Expert parallelism: with several devices @main becomes one function per
  // device, each bounded and planned on its own below.
  // Which input rows the dense part may split (moe-insert-all-to-all
  // replicates it otherwise); the report says which and why.
  pm.addPass(createMoeAnalyzeRowIndependence());
  MoePlaceExpertsOptions placement;
  placement.devices = options.devices;
  placement.routingProfile = options.routingProfile;
  placement.replicateHot = options.replicateHot;
  pm.addPass(createMoePlaceExperts(placement));
  MoeInsertAllToAllOptions exchange;
  exchange.microBatches = options.microBatches;
  pm.addPass(createMoeInsertAllToAll(exchange));
  OpPassManager &devicePM = pm.nest<func::FuncOp>();
  MoeBoundShapesOptions bounds;
  bounds.maxTokens = options.maxTokens;
  bounds.dimBounds.assign(options.dimBounds.begin(), options.dimBounds.end());
  devicePM.addPass(createMoeBoundShapes(bounds));
  devicePM.addPass(createMoePlanMemory());
}

llvm::StringMap<int64_t> countOps(ModuleOp module) {
  llvm::StringMap<int64_t> counts;
  module.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "moe" &&
        !op->getParentOfType<moe::FusedElementwiseOp>())
      ++counts[op->getName().getStringRef()];
  });
  return counts;
}

static llvm::json::Object toJson(const llvm::StringMap<int64_t> &counts) {
  llvm::json::Object object;
  for (const auto &entry : counts)
    object[entry.getKey().str()] = entry.getValue();
  return object;
}

/// One routed MoE layer of a compiled module: its `moe.router` (null for a
/// gate of generic ops), the `moe.experts` its dispatched rows run through
/// and the `moe.shared_expert`s on the same tokens.
struct MoeLayerInfo {
  moe::RouterOp router;
  moe::ExpertsOp experts;
  int64_t numExperts = 0;
  int64_t topK = 0;
  int64_t sharedExperts = 0;
};

/// The first op of type OpTy that `value` flows into, through any ops (the
/// slot assignment and micro-batch slices of expert parallelism).
template <typename OpTy> static OpTy findUser(Value value) {
  SmallVector<Value> worklist{value};
  llvm::SmallPtrSet<Operation *, 16> visited;
  while (!worklist.empty()) {
    for (Operation *user : worklist.pop_back_val().getUsers()) {
      if (auto op = dyn_cast<OpTy>(user))
        return op;
      if (visited.insert(user).second)
        llvm::append_range(worklist, user->getResults());
    }
  }
  return nullptr;
}

/// The layers of the function of device 0 (all devices run the same layers).
/// The value `indices` was taken from by the slices, reshapes and slot
/// assignments of expert parallelism and of the detectors: a router's
/// indices, or the generic gate's.
static Value getRoutingSource(Value indices) {
  while (Operation *op = indices.getDefiningOp()) {
    if (auto slice = dyn_cast<moe::SliceOp>(op))
      indices = slice.getData();
    else if (auto reshape = dyn_cast<moe::ReshapeOp>(op))
      indices = reshape.getData();
    else if (auto assign = dyn_cast<moe::AssignSlotsOp>(op))
      indices = assign.getIndices();
    else
      break;
  }
  return indices;
}

/// The number of shared experts on the tokens `dispatch` routes.
static int64_t countSharedExperts(moe::DispatchOp dispatch) {
  Value tokens = dispatch.getTokens();
  // A micro-batch dispatches a slice of the layer's tokens.
  if (auto slice = tokens.getDefiningOp<moe::SliceOp>())
    tokens = slice.getData();
  // A layer that scales its tokens before the experts (Llama4) dispatches
  // `x * s`; its shared experts read x.
  SmallVector<Value, 3> inputs{tokens};
  if (auto scaled = tokens.getDefiningOp<moe::MulOp>())
    inputs.append({scaled.getLhs(), scaled.getRhs()});
  int64_t count = 0;
  for (Value input : inputs)
    for (Operation *tokensUser : input.getUsers())
      count += isa<moe::SharedExpertOp>(tokensUser);
  return count;
}

static SmallVector<MoeLayerInfo> collectMoeLayers(ModuleOp module) {
  SmallVector<MoeLayerInfo> layers;
  FailureOr<SmallVector<func::FuncOp>> funcs = getDeviceFunctions(module);
  if (failed(funcs))
    return layers;
  // Layers in program order: each router, and each generic gate's indices
  // at the first dispatch that reads them.
  llvm::DenseSet<Value> generic;
  funcs->front().walk([&](Operation *op) {
    MoeLayerInfo info;
    if (auto router = dyn_cast<moe::RouterOp>(op)) {
      info.router = router;
      info.numExperts = router.getLogits().getType().getShape().back();
      info.topK = router.getTopKAttr().getInt();
      if (auto dispatch = findUser<moe::DispatchOp>(router.getIndices()))
        info.sharedExperts = countSharedExperts(dispatch);
      info.experts = findUser<moe::ExpertsOp>(router.getIndices());
      layers.push_back(info);
      return;
    }
    auto dispatch = dyn_cast<moe::DispatchOp>(op);
    if (!dispatch)
      return;
    Value source = getRoutingSource(dispatch.getIndices());
    if (source.getDefiningOp<moe::RouterOp>() || !generic.insert(source).second)
      return;
    info.topK = cast<RankedTensorType>(source.getType()).getDimSize(1);
    info.sharedExperts = countSharedExperts(dispatch);
    info.experts = findUser<moe::ExpertsOp>(dispatch.getOffsets());
    info.numExperts = dispatch.getNumExperts();
    // Under expert parallelism the dispatch is over slots: the experts are
    // the rows of the weight each device's shard is cut from.
    if (info.experts)
      if (auto shard = info.experts.getW1().getDefiningOp<moe::ShardOp>())
        info.numExperts =
            cast<ShapedType>(shard.getWeight().getType()).getDimSize(0);
    layers.push_back(info);
  });
  return layers;
}

/// The expert matrices of `func` that the plan stores narrowed.
/// The bytes the plan stores for a weight `value` of `type`, narrowed to
/// `expertWeights` or not (an int8 matrix's scales not counted).
static int64_t getStoredBytes(ShapedType type, bool narrowed,
                              ExpertWeightType expertWeights) {
  return type.getNumElements() *
         (narrowed ? getExpertWeightElementBytes(expertWeights)
                   : std::max<int64_t>(1, type.getElementTypeBitWidth() / 8));
}

/// The slots and experts of each layer and the expert weight bytes that
/// each device of an expert-parallel module holds.
static llvm::json::Array devicesToJson(ArrayRef<func::FuncOp> funcs,
                                       ExpertWeightType expertWeights) {
  llvm::json::Array array;
  for (auto [device, entry] : llvm::enumerate(funcs)) {
    func::FuncOp func = entry;
    llvm::DenseSet<Value> narrowed = getNarrowableWeights(func, expertWeights);
    llvm::json::Array layers;
    int64_t expertBytes = 0;
    func.walk([&](moe::ExpertsOp experts) {
      SmallVector<int64_t> slotExperts;
      if (auto shard = experts.getW1().getDefiningOp<moe::ShardOp>())
        llvm::append_range(slotExperts, shard.getRows());
      for (Value weight : experts->getOperands().drop_front(2))
        expertBytes += getStoredBytes(cast<ShapedType>(weight.getType()),
                                      narrowed.contains(weight), expertWeights);
      layers.push_back(
          llvm::json::Object{{"slots", experts.getW1().getType().getDimSize(0)},
                             {"experts", llvm::json::Array(slotExperts)}});
    });
    array.push_back(llvm::json::Object{
        {"device", static_cast<int64_t>(device)},
        {"layers", std::move(layers)},
        {"expert_weight_bytes", expertBytes},
        {"arena_bytes",
         func->getAttrOfType<IntegerAttr>("moe.arena_size")
             ? llvm::json::Value(
                   func->getAttrOfType<IntegerAttr>("moe.arena_size").getInt())
             : llvm::json::Value(nullptr)}});
  }
  return array;
}

/// A static dimension as JSON: null when dynamic.
static llvm::json::Value dimToJson(int64_t dim) {
  return ShapedType::isDynamic(dim) ? llvm::json::Value(nullptr)
                                    : llvm::json::Value(dim);
}

static int64_t hiddenSize(MoeLayerInfo layer) {
  if (!layer.experts)
    return ShapedType::kDynamic;
  return cast<RankedTensorType>(layer.experts.getOutput().getType())
      .getDimSize(1);
}

/// The form the layer had in the model ("stacked", ...; LayerForm.h), or
/// "?" when its experts carry none.
static std::string getForm(const MoeLayerInfo &layer) {
  StringRef form = layer.experts ? moe::getLayerForm(layer.experts) : "";
  return form.empty() ? "?" : form.str();
}

std::string summarizeMoeLayers(ModuleOp module) {
  SmallVector<MoeLayerInfo> layers = collectMoeLayers(module);
  if (layers.empty())
    return "no MoE layer (the model runs through generic ops; see the "
           "remarks)";
  // Forms in the order of their first layer, each with its count.
  SmallVector<std::pair<std::string, int64_t>> forms;
  for (const MoeLayerInfo &layer : layers) {
    std::string form = getForm(layer);
    auto *it =
        llvm::find_if(forms, [&](auto &entry) { return entry.first == form; });
    if (it == forms.end())
      forms.push_back({form, 1});
    else
      ++it->second;
  }
  std::string text = llvm::formatv("{0} MoE layer{1} (", layers.size(),
                                   layers.size() == 1 ? "" : "s");
  for (auto [index, entry] : llvm::enumerate(forms)) {
    if (index)
      text += ", ";
    if (forms.size() > 1)
      text += std::to_string(entry.second) + " ";
    text += entry.first;
  }
  return text + ")";
}

static llvm::json::Array moeLayersToJson(ArrayRef<MoeLayerInfo> layers) {
  llvm::json::Array array;
  for (MoeLayerInfo layer : layers) {
    moe::RouterOp router = layer.router;
    // A gate of generic ops has no router attributes: only its top-k.
    auto routerField = [&](auto get) -> llvm::json::Value {
      return router ? llvm::json::Value(get()) : llvm::json::Value(nullptr);
    };
    std::optional<uint64_t> capacity =
        router ? router.getCapacity() : std::nullopt;
    llvm::json::Object object{
        {"form", getForm(layer)},
        {"experts", layer.numExperts},
        {"top_k", layer.topK},
        {"score", router ? stringifyEnum(router.getScoreFunction()).str()
                         : std::string("generic")},
        {"topk_before_softmax",
         routerField([&] { return router.getScoreAfterTopk(); })},
        // GShard's renormalisation over the kept choices reads "kept".
        {"normalize", routerField([&]() -> llvm::json::Value {
           if (router.getNormalizeKeptAttr())
             return "kept";
           return router.getNormalize();
         })},
        {"scale", routerField([&] {
           return router.getRoutedScalingFactorAttr().getValueAsDouble();
         })},
        {"groups",
         routerField([&] { return router.getNGroupAttr().getInt(); })},
        {"topk_groups",
         routerField([&] { return router.getTopkGroupAttr().getInt(); })},
        {"selection_bias",
         routerField([&] { return static_cast<bool>(router.getBias()); })},
        {"capacity", capacity ? llvm::json::Value(int64_t(*capacity))
                              : llvm::json::Value(nullptr)},
        {"shared_experts", layer.sharedExperts},
        {"activation",
         layer.experts ? llvm::json::Value(
                             stringifyEnum(layer.experts.getActivation()).str())
                       : llvm::json::Value(nullptr)},
        {"hidden", dimToJson(hiddenSize(layer))},
        {"ffn", layer.experts ? dimToJson(layer.experts.getInterSize())
                              : llvm::json::Value(nullptr)}};
    array.push_back(std::move(object));
  }
  return array;
}

/// The number of devices of an expert-parallel module (1 otherwise).
static int64_t getNumDevices(ModuleOp module) {
  auto devices = module->getAttrOfType<IntegerAttr>("moe.devices");
  return devices ? devices.getInt() : 1;
}

/// How an expert-parallel module runs its dense part
/// (moe-analyze-row-independence's `moe.row_split`): split along a proven
/// axis, or replicated with the op that mixes the rows.
static llvm::json::Object denseSplitToJson(ModuleOp module) {
  auto split = module->getAttrOfType<DictionaryAttr>("moe.row_split");
  auto text = [&](StringRef key) -> llvm::json::Value {
    auto value = split ? split.getAs<StringAttr>(key) : StringAttr();
    return value ? llvm::json::Value(value.str()) : llvm::json::Value(nullptr);
  };
  auto axis = split ? split.getAs<IntegerAttr>("axis") : IntegerAttr();
  if (!axis)
    return llvm::json::Object{{"mode", "replicated"},
                              {"axis", nullptr},
                              {"op", text("op")},
                              {"loc", text("loc")},
                              {"reason", text("reason")}};
  llvm::json::Array inputs;
  if (auto names = split.getAs<ArrayAttr>("inputs"))
    for (auto name : names.getAsValueRange<StringAttr>())
      inputs.push_back(name.str());
  llvm::json::Array outputs;
  if (auto names = split.getAs<ArrayAttr>("outputs"))
    for (auto name : names.getAsValueRange<StringAttr>())
      outputs.push_back(name.str());
  return llvm::json::Object{{"mode", "split"},
                            {"axis", axis.getInt()},
                            {"symbol", text("symbol")},
                            {"inputs", std::move(inputs)},
                            {"outputs", std::move(outputs)}};
}

/// The --verbose line for denseSplitToJson.
static void printDenseSplit(ModuleOp module, llvm::raw_ostream &os) {
  llvm::json::Object split = denseSplitToJson(module);
  int64_t devices = getNumDevices(module);
  auto str = [&](StringRef key) {
    std::optional<StringRef> value = split.getString(key);
    return value ? value->str() : std::string("?");
  };
  if (split.getString("mode") == "split") {
    std::string inputs;
    for (const llvm::json::Value &name : *split.getArray("inputs"))
      inputs += (inputs.empty() ? "'" : ", '") +
                name.getAsString().value_or("").str() + "'";
    os << llvm::formatv("moec: dense part split over {0} devices along dim "
                        "{1} ('{2}') of {3}\n",
                        devices, *split.getInteger("axis"), str("symbol"),
                        inputs);
    return;
  }
  os << llvm::formatv("moec: dense part replicated on {0} devices, each MoE "
                      "layer's tokens partitioned: no input dim 0 is "
                      "provably batch-like: {1}",
                      devices, str("reason"));
  if (split.getString("op"))
    os << llvm::formatv(" ({0} at {1})", str("op"), str("loc"));
  os << "\n";
}

void printMoeLayers(ModuleOp module, llvm::raw_ostream &os,
                    ExpertWeightType expertWeights) {
  if (getNumDevices(module) > 1)
    printDenseSplit(module, os);
  SmallVector<MoeLayerInfo> layers = collectMoeLayers(module);
  if (layers.empty()) {
    os << "moec: no MoE layer detected (the model runs through generic ops; "
          "see the remarks)\n";
    return;
  }
  auto dim = [](int64_t value) -> std::string {
    return ShapedType::isDynamic(value) ? "?" : std::to_string(value);
  };
  os << llvm::formatv("moec: {0} MoE layer{1}\n", layers.size(),
                      layers.size() == 1 ? "" : "s");
  os << llvm::formatv("{0,-6}{1,-8}{2,-6}{3,-8}{4,-11}{5,-10}{6,-7}{7,-8}"
                      "{8,-5}{9,-9}{10,-7}{11,-7}{12,-7}{13,-15}{14}\n",
                      "layer", "experts", "top_k", "score", "topk_first",
                      "normalize", "scale", "groups", "bias", "capacity",
                      "shared", "hidden", "ffn", "activation", "form");
  for (auto [index, layer] : llvm::enumerate(layers)) {
    moe::RouterOp router = layer.router;
    std::optional<uint64_t> capacity =
        router ? router.getCapacity() : std::nullopt;
    auto routerField = [&](auto get) -> std::string {
      return router ? get() : std::string("-");
    };
    os << llvm::formatv(
        "{0,-6}{1,-8}{2,-6}{3,-8}{4,-11}{5,-10}{6,-7}{7,-8}{8,-5}{9,-9}"
        "{10,-7}{11,-7}{12,-7}{13,-15}{14}\n",
        index, layer.numExperts, layer.topK,
        router ? stringifyEnum(router.getScoreFunction()).str()
               : std::string("generic"),
        routerField([&] {
          return std::string(router.getScoreAfterTopk() ? "yes" : "no");
        }),
        routerField([&] {
          return std::string(router.getNormalizeKeptAttr() ? "kept"
                             : router.getNormalize()       ? "yes"
                                                           : "no");
        }),
        routerField([&] {
          return llvm::formatv(
                     "{0}",
                     router.getRoutedScalingFactorAttr().getValueAsDouble())
              .str();
        }),
        routerField([&] {
          return llvm::formatv("{0}/{1}", router.getTopkGroupAttr().getInt(),
                               router.getNGroupAttr().getInt())
              .str();
        }),
        routerField(
            [&] { return std::string(router.getBias() ? "yes" : "no"); }),
        capacity ? std::to_string(*capacity) : "-", layer.sharedExperts,
        dim(hiddenSize(layer)),
        layer.experts ? dim(layer.experts.getInterSize()) : "?",
        layer.experts ? stringifyEnum(layer.experts.getActivation()) : "?",
        getForm(layer));
  }
  if (expertWeights == ExpertWeightType::F32)
    return;
  FailureOr<SmallVector<func::FuncOp>> funcs = getDeviceFunctions(module);
  if (failed(funcs))
    return;
  llvm::DenseSet<Value> narrowed =
      getNarrowableWeights(funcs->front(), expertWeights);
  int64_t networks = 0, narrowedNetworks = 0;
  funcs->front().walk([&](Operation *op) {
    if (!isa<moe::ExpertsOp, moe::SharedExpertOp>(op))
      return;
    ++networks;
    Value w1 = isa<moe::ExpertsOp>(op) ? cast<moe::ExpertsOp>(op).getW1()
                                       : cast<moe::SharedExpertOp>(op).getW1();
    narrowedNetworks += narrowed.contains(w1);
  });
  os << llvm::formatv("moec: expert weights (w1, w3, w2) stored as {0} in "
                      "{1} of {2} expert networks\n",
                      stringifyExpertWeightType(expertWeights),
                      narrowedNetworks, networks);
  os << llvm::formatv(
      "moec: dense matrices stored as {0}: {1}\n",
      stringifyExpertWeightType(expertWeights),
      getNarrowableDenseWeights(funcs->front(), expertWeights).size());
}

/// The ONNX initializer a constant was imported from ("initializer 'NAME'"
/// locations), or "" for a constant the compiler made (folding, detection).
static std::string getInitializerName(Location loc) {
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    for (Location inner : fused.getLocations())
      if (std::string name = getInitializerName(inner); !name.empty())
        return name;
    return "";
  }
  auto named = dyn_cast<NameLoc>(loc);
  if (!named)
    return "";
  StringRef text = named.getName().getValue();
  if (!text.consume_front("initializer '") || !text.consume_back("'"))
    return getInitializerName(named.getChildLoc());
  return text.str();
}

/// The model initializers whose values the narrowed matrices of `funcs`
/// hold, in a JSON array, and the number of narrowed constants that are not
/// an initializer (splats of zeros for pruned experts do not count: they
/// narrow to themselves). A test makes its reference model by rounding
/// exactly these initializers.
static std::pair<llvm::json::Array, int64_t>
getNarrowedInitializers(ArrayRef<func::FuncOp> funcs,
                        ExpertWeightType expertWeights) {
  std::set<std::string> names;
  int64_t unnamed = 0;
  auto addConstant = [&](moe::ConstantOp constant) {
    auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (dense && dense.isSplat() &&
        llvm::all_of(dense.getRawData(), [](char c) { return c == 0; }))
      return;
    std::string name = getInitializerName(constant.getLoc());
    if (name.empty())
      ++unnamed;
    else
      names.insert(name);
  };
  auto addWeight = [&](Value value) {
    Operation *def = value.getDefiningOp();
    if (auto constant = dyn_cast_or_null<moe::ConstantOp>(def))
      return addConstant(constant);
    if (auto stack = dyn_cast_or_null<moe::StackOp>(def))
      for (Value input : stack.getInputs())
        if (auto constant = input.getDefiningOp<moe::ConstantOp>())
          addConstant(constant);
  };
  for (func::FuncOp func : funcs)
    for (Value value : getNarrowableWeights(func, expertWeights)) {
      if (auto shard = value.getDefiningOp<moe::ShardOp>())
        addWeight(shard.getWeight());
      else
        addWeight(value);
    }
  llvm::json::Array array;
  for (const std::string &name : names)
    array.push_back(name);
  return {std::move(array), unnamed};
}

LogicalResult writeReport(ModuleOp module,
                          const llvm::StringMap<int64_t> &opsBefore,
                          StringRef path, ExpertWeightType expertWeights,
                          llvm::json::Object extra) {
  FailureOr<SmallVector<func::FuncOp>> funcs = getDeviceFunctions(module);
  if (failed(funcs))
    return failure();
  // Memory and steps are device 0's; with several devices, "devices" has
  // each one's experts and arena.
  func::FuncOp func = funcs->front();
  auto arena = func->getAttrOfType<IntegerAttr>("moe.arena_size");
  auto naive = func->getAttrOfType<IntegerAttr>("moe.naive_size");
  if (!arena || !naive)
    return func.emitError("no memory plan to report on");

  llvm::DenseSet<Value> narrowed = getNarrowableWeights(func, expertWeights);
  int64_t weightBytes = 0, numWeights = 0, numSteps = 0, numFused = 0;
  for (Operation &op : func.getBody().front()) {
    if (auto constant = dyn_cast<moe::ConstantOp>(op)) {
      // Whole expert weights of which the device stores only shards.
      if (!op.use_empty() && llvm::all_of(op.getUsers(), [](Operation *user) {
            return isa<moe::ShardOp>(user);
          }))
        continue;
      // A narrowed matrix, or a piece of narrowed stacks.
      bool isNarrowed =
          narrowed.contains(constant.getResult()) ||
          (!op.use_empty() && llvm::all_of(op.getUsers(), [&](Operation *user) {
            return isa<moe::StackOp>(user) &&
                   narrowed.contains(user->getResult(0));
          }));
      weightBytes += getStoredBytes(cast<ShapedType>(constant.getType()),
                                    isNarrowed, expertWeights);
      ++numWeights;
    } else if (!isa<func::ReturnOp>(op)) {
      ++numSteps;
      numFused += isa<moe::FusedElementwiseOp>(op);
    }
  }
  int64_t arenaBytes = arena.getInt(), naiveBytes = naive.getInt();
  llvm::json::Object memory{
      {"arena_bytes", arenaBytes},
      {"naive_bytes", naiveBytes},
      {"saved_fraction",
       naiveBytes ? 1.0 - double(arenaBytes) / double(naiveBytes) : 0.0},
      {"weight_bytes", weightBytes},
      {"weights", numWeights}};
  auto maxTokens = module->getAttrOfType<IntegerAttr>("moe.max_tokens");
  llvm::json::Object root{
      {"max_tokens", maxTokens ? llvm::json::Value(maxTokens.getInt())
                               : llvm::json::Value(nullptr)},
      {"memory", std::move(memory)},
      {"steps", numSteps},
      {"fused_elementwise_steps", numFused},
      {"ops_before", toJson(opsBefore)},
      {"ops_after", toJson(countOps(module))},
      {"moe_layers", moeLayersToJson(collectMoeLayers(module))},
      {"expert_weight_dtype", stringifyExpertWeightType(expertWeights)}};
  if (expertWeights != ExpertWeightType::F32) {
    auto [initializers, unnamed] =
        getNarrowedInitializers(*funcs, expertWeights);
    root["narrowed_initializers"] = std::move(initializers);
    root["narrowed_unnamed_constants"] = unnamed;
    root["narrowed_dense_matrices"] = static_cast<int64_t>(
        getNarrowableDenseWeights(func, expertWeights).size());
  }
  if (funcs->size() > 1) {
    root["devices"] = devicesToJson(*funcs, expertWeights);
    root["dense_split"] = denseSplitToJson(module);
  }

  for (auto &entry : extra)
    root[entry.first] = std::move(entry.second);
  return writeOutputFile(module.getContext(), path, [&](llvm::raw_ostream &os) {
    os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
  });
}

LogicalResult
writeOutputFile(MLIRContext *context, StringRef path,
                llvm::function_ref<void(llvm::raw_ostream &)> print) {
  bool toStdout = path == "-";
  Location loc = FileLineColLoc::get(context, toStdout ? "<stdout>" : path,
                                     /*line=*/0, /*column=*/0);
  std::error_code ec;
  llvm::ToolOutputFile output(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return emitError(loc) << "cannot create: " << ec.message();
  llvm::raw_fd_ostream &os = output.os();
  print(os);
  // The stream reports a pending error only when it is destroyed, as a fatal
  // "IO failure on output stream": close (stdout: flush) and check here.
  if (toStdout)
    os.flush();
  else
    os.close();
  if (os.has_error()) {
    ec = os.error();
    os.clear_error();
    return emitError(loc) << "cannot write: " << ec.message();
  }
  output.keep();
  return success();
}

} // namespace moec::plan
