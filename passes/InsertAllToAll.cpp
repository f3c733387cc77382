//===- InsertAllToAll.cpp - per-device functions with token exchanges -----===//
//
// moe-insert-all-to-all: the communication half of expert parallelism. @main
// becomes one function per device; in each, every placed MoE layer sends its
// dispatched rows to the devices holding their experts, runs the local
// experts on the rows it receives and sends the results back
// (docs/expert-parallelism.md has the sequence and its invariants). Unless
// moe-analyze-row-independence proved the dense part may split the rows of
// the inputs, every device runs it whole, and each layer takes the device's
// share of its tokens and all-gathers the combined rows.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/PlacementLimits.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

#include <numeric>

namespace moec {
#define GEN_PASS_DEF_MOEINSERTALLTOALL
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace moec {
namespace {

/// The device group every exchange of expert parallelism runs in.
constexpr StringLiteral kGroup = "ep";

/// One MoE layer as the detection passes leave it.
struct Layer {
  moe::DispatchOp dispatch;
  moe::ExpertsOp experts;
  moe::CombineOp combine;
  ArrayRef<int64_t> slotBegin;
  ArrayRef<int64_t> slotExperts;
};

/// The state of one micro-batch of a layer while its ops are created.
struct Chunk {
  Value tokens, slots, weights, passthrough, indices;
  moe::DispatchOp dispatch;
  /// Rows per destination device, and the counts of this device's slots from
  /// every source.
  Value send, slotCounts;
  /// The dispatch exchange: received rows and rows per source.
  Value received, recvCounts;
  /// The expert outputs in received order, and the rows back home.
  Value back, returned;
  moe::AllToAllStartOp dispatchStart, returnStart;
};

/// Gives `op` the result types its operands imply. A clone (or an op whose
/// operands were replaced) keeps the original's result types, which are
/// wrong when the original's were static for other rows: a layer of a
/// static token count T whose device takes T*d/N of them, or whose experts
/// receive up to N*T*k rows.
void inferResultTypes(Operation *op) {
  auto infer = dyn_cast<InferTypeOpInterface>(op);
  if (!infer)
    return;
  SmallVector<Type> types;
  if (failed(infer.inferReturnTypes(
          op->getContext(), op->getLoc(), op->getOperands(),
          op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
          op->getRegions(), types)))
    return; // The verifier reports the op.
  for (auto [result, type] : llvm::zip(op->getResults(), types))
    result.setType(type);
}

/// Rewrites the layers of the function of device `device`.
class LayerRewriter {
public:
  LayerRewriter(int64_t numDevices, int64_t device, int64_t microBatches,
                bool replicated)
      : numDevices(numDevices), device(device), microBatches(microBatches),
        replicated(replicated) {}

  LogicalResult rewrite(Layer &layer) {
    moe::CombineOp combine = layer.combine;
    OpBuilder b(combine);
    loc = layer.experts.getLoc();
    this->layer = &layer;
    localWeights.clear();
    numSlots = layer.slotExperts.size();
    firstSlot = layer.slotBegin[device];
    localSlots = layer.slotBegin[device + 1] - firstSlot;

    // The layer's per-token operands on this device: all of its tokens when
    // the dense part is split, else the device's share of the tokens that
    // every device holds (rows [T * d / N, T * (d + 1) / N)).
    Chunk local;
    local.tokens = layer.dispatch.getTokens();
    local.indices = layer.dispatch.getIndices();
    local.weights = combine.getWeights();
    local.passthrough = combine.getPassthrough();
    Value combineIndices = combine.getIndices();
    if (replicated)
      takeShare(b, local, combineIndices);

    // Expert e's slots, for AssignSlots.
    int64_t numExperts = layer.experts.getW1().getType().getDimSize(0);
    SmallVector<SmallVector<int64_t>> slotsOf(numExperts);
    for (auto [slot, expert] : llvm::enumerate(layer.slotExperts))
      slotsOf[expert].push_back(slot);
    SmallVector<int64_t> offsets{0}, slotList;
    for (ArrayRef<int64_t> list : slotsOf) {
      llvm::append_range(slotList, list);
      offsets.push_back(slotList.size());
    }
    // The slots are numbered over the whole token range of this device, so
    // that replicas split the tokens evenly whatever the micro-batches.
    Value slots = moe::AssignSlotsOp::create(b, loc, local.indices,
                                             b.getDenseI64ArrayAttr(offsets),
                                             b.getDenseI64ArrayAttr(slotList));

    SmallVector<Chunk> chunks(microBatches);
    Value numTokens;
    if (microBatches > 1)
      numTokens = reshapeTo1(b, moe::DimOp::create(b, loc, local.tokens, 0));
    for (int64_t c = 0; c < microBatches; ++c) {
      Chunk &chunk = chunks[c];
      chunk.tokens = local.tokens;
      chunk.slots = slots;
      chunk.weights = local.weights;
      chunk.passthrough = local.passthrough;
      chunk.indices = combineIndices;
      if (microBatches > 1) {
        // Rows [T * c / M, T * (c + 1) / M) of every per-token operand.
        Value begin = boundary(b, numTokens, c, microBatches);
        Value end = boundary(b, numTokens, c + 1, microBatches);
        for (Value *value : {&chunk.tokens, &chunk.slots, &chunk.weights,
                             &chunk.passthrough, &chunk.indices})
          if (*value)
            *value = sliceRows(b, *value, begin, end);
      }
      dispatchLocally(b, chunk);
    }

    receiveCapacity = replicated ? getReceiveCapacity(b, layer) : Value();
    if (microBatches == 1) {
      Chunk &chunk = chunks.front();
      auto exchange = moe::AllToAllOp::create(
          b, loc, chunk.dispatch.getRows(), chunk.send, receiveCapacity,
          b.getStringAttr(kGroup), b.getI64IntegerAttr(numDevices));
      chunk.received = exchange.getReceived();
      chunk.recvCounts = exchange.getRecvCounts();
      runExperts(b, chunk);
      chunk.returned =
          moe::AllToAllOp::create(
              b, loc, chunk.back, chunk.recvCounts, chunk.dispatch.getRows(),
              b.getStringAttr(kGroup), b.getI64IntegerAttr(numDevices))
              .getReceived();
      combine.getExpertOutputsMutable().assign(chunk.returned);
      combine.getSourceMutable().assign(chunk.dispatch.getSource());
      if (replicated) {
        combine.getWeightsMutable().assign(chunk.weights);
        if (chunk.passthrough) {
          combine.getPassthroughMutable().assign(chunk.passthrough);
          combine.getIndicesMutable().assign(chunk.indices);
        }
        // The device's share of the rows; the all-gather below gives the
        // layer's users all of them again.
        inferResultTypes(combine);
        b.setInsertionPointAfter(combine);
        gatherRows(b, combine.getOutput(), layer.dispatch.getTokens());
      }
    } else {
      // Software pipeline: chunk c + 1's rows travel while chunk c's experts
      // run, and chunk c's results travel back while chunk c + 1's run.
      SmallVector<Value> outputs;
      startDispatch(b, chunks[0]);
      for (int64_t c = 0; c < microBatches; ++c) {
        if (c + 1 < microBatches)
          startDispatch(b, chunks[c + 1]);
        wait(b, chunks[c].dispatchStart);
        runExperts(b, chunks[c]);
        startReturn(b, chunks[c]);
        if (c > 0)
          outputs.push_back(finish(b, combine, chunks[c - 1]));
      }
      outputs.push_back(finish(b, combine, chunks.back()));
      Value output =
          moe::ConcatOp::create(b, loc, outputs, b.getI64IntegerAttr(0));
      combine.getOutput().replaceAllUsesWith(output);
      if (replicated)
        gatherRows(b, output, layer.dispatch.getTokens());
      combine.erase();
    }

    SmallVector<Value> weights(layer.experts->getOperands().drop_front(2));
    layer.experts.erase();
    layer.dispatch.erase();
    eraseDeadRouters();
    for (Value weight : weights)
      eraseIfDead(weight);
    return success();
  }

private:
  int64_t numDevices, device, microBatches;
  /// Whether every device runs the dense part on all rows: each layer then
  /// takes the device's share of its tokens and all-gathers its output.
  bool replicated;
  /// Routers whose results the layers no longer read (re-run on a share).
  SmallVector<moe::RouterOp> oldRouters;
  Location loc = UnknownLoc();
  Layer *layer = nullptr;
  int64_t numSlots = 0, firstSlot = 0, localSlots = 0;
  /// The device's part of each expert weight of the current layer.
  llvm::DenseMap<Value, Value> localWeights;
  /// getReceiveCapacity of the current layer.
  Value receiveCapacity;

  Value constant(OpBuilder &b, ArrayRef<int64_t> values) {
    auto type = RankedTensorType::get({static_cast<int64_t>(values.size())},
                                      b.getI64Type());
    return moe::ConstantOp::create(b, loc, moe::getI64Elements(type, values));
  }

  /// `values[i]` for constant indices `indices`.
  Value pick(OpBuilder &b, Value values, ArrayRef<int64_t> indices) {
    return moe::GatherOp::create(b, loc, values, constant(b, indices),
                                 b.getI64IntegerAttr(0));
  }

  Value reshapeTo1(OpBuilder &b, Value scalar) {
    return moe::ReshapeOp::create(
        b, loc, RankedTensorType::get({1}, b.getI64Type()), scalar,
        constant(b, {1}), b.getI64IntegerAttr(0));
  }

  /// T * c / parts as a [1] tensor.
  Value boundary(OpBuilder &b, Value numTokens, int64_t c, int64_t parts) {
    Value scaled = moe::MulOp::create(b, loc, numTokens, constant(b, {c}));
    return moe::DivOp::create(b, loc, scaled, constant(b, {parts}));
  }

  /// Rows [begin, end) of `value` ([1] tensors).
  Value sliceRows(OpBuilder &b, Value value, Value begin, Value end) {
    return moe::SliceOp::create(b, loc, value, begin, end, constant(b, {0}),
                                Value());
  }

  /// Cuts `local` (and `combineIndices`) to this device's share of the
  /// layer's tokens. A router that only this layer reads, on [T, E] logits
  /// without capacity (a function of each token alone), is re-run on the
  /// share of its logits, so that each device routes (and counts in its
  /// stats) only its own tokens; any other router's results are sliced.
  void takeShare(OpBuilder &b, Chunk &local, Value &combineIndices) {
    Value numTokens =
        reshapeTo1(b, moe::DimOp::create(b, loc, local.tokens, 0));
    Value begin = boundary(b, numTokens, device, numDevices);
    Value end = boundary(b, numTokens, device + 1, numDevices);
    auto router = local.indices.getDefiningOp<moe::RouterOp>();
    if (router && !router.getCapacity() &&
        router.getLogits().getType().getRank() == 2 &&
        local.weights == router.getWeights() &&
        (!combineIndices || combineIndices == router.getIndices())) {
      IRMapping mapping;
      mapping.map(router.getLogits(),
                  sliceRows(b, router.getLogits(), begin, end));
      Operation *share = b.clone(*router, mapping);
      inferResultTypes(share);
      local.weights = share->getResult(0);
      local.indices = share->getResult(1);
      if (combineIndices)
        combineIndices = local.indices;
      oldRouters.push_back(router);
    } else {
      local.indices = sliceRows(b, local.indices, begin, end);
      local.weights = sliceRows(b, local.weights, begin, end);
      if (combineIndices)
        combineIndices = sliceRows(b, combineIndices, begin, end);
    }
    local.tokens = sliceRows(b, local.tokens, begin, end);
    if (local.passthrough)
      local.passthrough = sliceRows(b, local.passthrough, begin, end);
  }

  /// With a replicated dense part and a static token count T, the rows any
  /// device receives for its experts: a [T * k] tensor passed as the
  /// dispatch exchange's `like`, whose leading size sizes `received` (the
  /// shares partition the T tokens, each dispatched k times, so no device
  /// receives more). Without it the exchange's received rows are inferred
  /// as N times this device's own share, which with a static T differs
  /// between devices: device 0's share of T = 1 on 2 devices is 0 rows, and
  /// the 2 rows device 1 sends it would not fit. Null for a dynamic T,
  /// whose shares every device bounds by T alike.
  Value getReceiveCapacity(OpBuilder &b, Layer &layer) {
    auto tokens = cast<RankedTensorType>(layer.dispatch.getTokens().getType());
    auto indices =
        cast<RankedTensorType>(layer.dispatch.getIndices().getType());
    if (tokens.getRank() < 1 || tokens.isDynamicDim(0) ||
        !indices.hasStaticShape())
      return Value();
    auto type =
        RankedTensorType::get({indices.getNumElements()}, b.getI64Type());
    return moe::ConstantOp::create(
        b, loc, DenseElementsAttr::get(type, b.getI64IntegerAttr(0)));
  }

  /// All-gather: every device sends its rows of `value` (its share of the
  /// layer's output) to every device, which receives them in device order:
  /// the layer's output for all the rows of `like`, that replaces `value`.
  void gatherRows(OpBuilder &b, Value value, Value like) {
    SmallVector<Value> copies(numDevices, value);
    Value data = moe::ConcatOp::create(b, loc, copies, b.getI64IntegerAttr(0));
    auto dim = moe::DimOp::create(b, loc, value, 0);
    SmallVector<Value> counts(numDevices, reshapeTo1(b, dim));
    Value send = moe::ConcatOp::create(b, loc, counts, b.getI64IntegerAttr(0));
    Value all = moe::AllToAllOp::create(b, loc, data, send, like,
                                        b.getStringAttr(kGroup),
                                        b.getI64IntegerAttr(numDevices))
                    .getReceived();
    value.replaceUsesWithIf(all, [&](OpOperand &use) {
      return use.getOwner() != data.getDefiningOp() && use.getOwner() != dim;
    });
  }

  void eraseDeadRouters() {
    for (moe::RouterOp router : oldRouters)
      if (router->use_empty())
        router.erase();
    oldRouters.clear();
  }

  /// Dispatch over the slots, and the counts every exchange needs: the rows
  /// for each device (slots of a device are contiguous, so they are sums of
  /// consecutive slot counts) and, exchanged right away, the rows for each
  /// of this device's slots from each source.
  void dispatchLocally(OpBuilder &b, Chunk &chunk) {
    chunk.dispatch = moe::DispatchOp::create(b, loc, chunk.tokens, chunk.slots,
                                             b.getI64IntegerAttr(numSlots));
    Value offsets = chunk.dispatch.getOffsets();
    ArrayRef<int64_t> begin = layer->slotBegin;
    chunk.send =
        moe::SubOp::create(b, loc, pick(b, offsets, begin.drop_front()),
                           pick(b, offsets, begin.drop_back()));
    SmallVector<int64_t> bounds(numSlots + 1);
    std::iota(bounds.begin(), bounds.end(), 0);
    Value perSlot = moe::SubOp::create(
        b, loc, pick(b, offsets, ArrayRef(bounds).drop_front()),
        pick(b, offsets, ArrayRef(bounds).drop_back()));
    SmallVector<int64_t> slotsPerDevice;
    for (int64_t d = 0; d < numDevices; ++d)
      slotsPerDevice.push_back(begin[d + 1] - begin[d]);
    Value received =
        moe::AllToAllOp::create(b, loc, perSlot, constant(b, slotsPerDevice),
                                Value(), b.getStringAttr(kGroup),
                                b.getI64IntegerAttr(numDevices))
            .getReceived();
    if (localSlots == 0)
      return;
    // The counts arrive source-major, S_d from each source.
    SmallVector<int64_t> mine(numDevices * localSlots);
    std::iota(mine.begin(), mine.end(), 0);
    chunk.slotCounts = pick(b, received, mine);
  }

  /// Regroup, the local experts on their shards, and back to received order.
  /// A device without slots receives no rows: what it sends back is empty.
  void runExperts(OpBuilder &b, Chunk &chunk) {
    if (localSlots == 0) {
      chunk.back = chunk.received;
      return;
    }
    auto regroup = moe::RegroupOp::create(
        b, loc, chunk.received, chunk.slotCounts,
        b.getI64IntegerAttr(numDevices), b.getI64IntegerAttr(localSlots));
    IRMapping mapping;
    mapping.map(layer->experts.getTokens(), regroup.getGrouped());
    mapping.map(layer->experts.getOffsets(), regroup.getOffsets());
    ArrayRef<int64_t> rows = layer->slotExperts.slice(firstSlot, localSlots);
    for (Value weight : layer->experts->getOperands().drop_front(2)) {
      if (mapping.contains(weight))
        continue;
      // Every micro-batch reads the same shard.
      if (Value shard = localWeights.lookup(weight)) {
        mapping.map(weight, shard);
        continue;
      }
      // A constant weight is sharded in the plan file; one computed in the
      // graph (a reshaped bias, say) is gathered at run time.
      Operation *def = weight.getDefiningOp();
      auto stack = dyn_cast_or_null<moe::StackOp>(def);
      Value local;
      if (isa_and_nonnull<moe::ConstantOp>(def) || (stack && stack.isWeight()))
        local =
            moe::ShardOp::create(b, loc, weight, b.getDenseI64ArrayAttr(rows));
      else
        local = pick(b, weight, rows);
      mapping.map(weight, local);
      localWeights[weight] = local;
    }
    Operation *experts = b.clone(*layer->experts, mapping);
    inferResultTypes(experts);
    experts->removeAttr("moe.placement");
    chunk.back = moe::UngroupOp::create(b, loc, experts->getResult(0),
                                        regroup.getPerm());
  }

  void startDispatch(OpBuilder &b, Chunk &chunk) {
    chunk.dispatchStart = moe::AllToAllStartOp::create(
        b, loc, chunk.dispatch.getRows(), chunk.send, receiveCapacity,
        b.getStringAttr(kGroup), b.getI64IntegerAttr(numDevices));
    chunk.received = chunk.dispatchStart.getReceived();
    chunk.recvCounts = chunk.dispatchStart.getRecvCounts();
  }

  void startReturn(OpBuilder &b, Chunk &chunk) {
    chunk.returnStart = moe::AllToAllStartOp::create(
        b, loc, chunk.back, chunk.recvCounts, chunk.dispatch.getRows(),
        b.getStringAttr(kGroup), b.getI64IntegerAttr(numDevices));
    chunk.returned = chunk.returnStart.getReceived();
  }

  void wait(OpBuilder &b, moe::AllToAllStartOp start) {
    moe::AllToAllWaitOp::create(b, loc, start.getData(), start.getSendCounts(),
                                start.getRowsLike(), start.getReceived(),
                                start.getRecvCounts());
  }

  /// Completes a chunk's return exchange and combines its rows.
  Value finish(OpBuilder &b, moe::CombineOp combine, Chunk &chunk) {
    wait(b, chunk.returnStart);
    return moe::CombineOp::create(b, combine.getLoc(), chunk.returned,
                                  chunk.dispatch.getSource(), chunk.weights,
                                  chunk.passthrough, chunk.indices);
  }

  /// Erases the weight `value` when nothing reads it any more (the experts
  /// now read shards), and the constants of a stack with it.
  static void eraseIfDead(Value value) {
    Operation *def = value.getDefiningOp();
    if (!def || !def->use_empty() || !isa<moe::ConstantOp, moe::StackOp>(def))
      return;
    SmallVector<Value> operands(def->getOperands());
    def->erase();
    for (Value operand : operands)
      eraseIfDead(operand);
  }
};

/// The layer that `experts` (layer `index` in program order) belongs to, or
/// failure (with a diagnostic) when the chain is not the plain dispatch ->
/// experts -> combine or its placement is not one for `numDevices` devices
/// that gives every expert a slot.
FailureOr<Layer> getLayer(moe::ExpertsOp experts, int64_t index,
                          int64_t numDevices) {
  auto placement = experts->getAttrOfType<DictionaryAttr>("moe.placement");
  auto slotBegin = placement ? placement.getAs<DenseI64ArrayAttr>("slot_begin")
                             : DenseI64ArrayAttr();
  auto slotExperts = placement
                         ? placement.getAs<DenseI64ArrayAttr>("slot_experts")
                         : DenseI64ArrayAttr();
  if (!slotBegin || !slotExperts)
    return experts.emitError("malformed moe.placement; expected "
                             "{slot_begin, slot_experts} from "
                             "moe-place-experts");
  Layer layer;
  layer.experts = experts;
  layer.slotBegin = slotBegin.asArrayRef();
  layer.slotExperts = slotExperts.asArrayRef();
  int64_t numExperts = experts.getW1().getType().getDimSize(0);
  if (layer.slotBegin.size() < 2 || layer.slotBegin.front() != 0 ||
      layer.slotBegin.back() !=
          static_cast<int64_t>(layer.slotExperts.size()) ||
      !llvm::is_sorted(layer.slotBegin) ||
      llvm::any_of(layer.slotExperts, [&](int64_t e) {
        return e < 0 || ShapedType::isDynamic(numExperts) || e >= numExperts;
      }))
    return experts.emitError("inconsistent moe.placement: slot_begin must "
                             "rise from 0 to the number of slots and "
                             "slot_experts name experts in [0, ")
           << numExperts << ")";
  int64_t numSlots = layer.slotExperts.size();
  if (static_cast<int64_t>(layer.slotBegin.size()) != numDevices + 1)
    return experts.emitError("moe.placement is for ")
           << layer.slotBegin.size() - 1 << " devices, the module for "
           << numDevices;
  if (failed(
          checkDeviceSlots(experts, index, numExperts, numSlots, numDevices)))
    return failure();
  // AssignSlots needs a slot for every expert (so there are at least as
  // many slots as experts, which bounds what is sized by the experts).
  if (numExperts > numSlots)
    return experts.emitError("inconsistent moe.placement: ")
           << numSlots << " slots for " << numExperts
           << " experts; every expert needs one";
  SmallVector<bool> hasSlot(numExperts, false);
  for (int64_t e : layer.slotExperts)
    hasSlot[e] = true;
  if (const bool *missing = llvm::find(hasSlot, false);
      missing != hasSlot.end())
    return experts.emitError("inconsistent moe.placement: expert ")
           << missing - hasSlot.begin() << " has no slot";
  layer.dispatch = experts.getTokens().getDefiningOp<moe::DispatchOp>();
  if (!layer.dispatch || layer.dispatch.getOffsets() != experts.getOffsets())
    return experts.emitError("cannot distribute experts whose rows do not "
                             "come from one moe.dispatch");
  for (Operation *user : experts.getOutput().getUsers())
    if (auto combine = dyn_cast<moe::CombineOp>(user))
      if (combine.getSource() == layer.dispatch.getSource())
        layer.combine = combine;
  if (!layer.combine || !experts.getOutput().hasOneUse() ||
      !layer.dispatch.getRows().hasOneUse() ||
      !layer.dispatch.getOffsets().hasOneUse() ||
      !layer.dispatch.getSource().hasOneUse())
    return experts.emitError("cannot distribute experts whose dispatch or "
                             "outputs have users besides one moe.combine");
  return layer;
}

struct InsertAllToAllPass
    : public impl::MoeInsertAllToAllBase<InsertAllToAllPass> {
  using MoeInsertAllToAllBase::MoeInsertAllToAllBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (microBatches < 1) {
      module.emitError("moe-insert-all-to-all: micro-batches must be at "
                       "least 1, got ")
          << microBatches.getValue();
      return signalPassFailure();
    }
    auto devices = module->getAttrOfType<IntegerAttr>("moe.devices");
    if (!devices || devices.getInt() <= 1)
      return;
    int64_t numDevices = devices.getInt();
    if (numDevices > static_cast<int64_t>(moert::kMaxDevices)) {
      module.emitError("moe-insert-all-to-all: moe.devices must be at most ")
          << moert::kMaxDevices << " (a plan's limit), got " << numDevices;
      return signalPassFailure();
    }
    if (static_cast<uint64_t>(microBatches) > moert::kMaxMicroBatches) {
      module.emitError("moe-insert-all-to-all: micro-batches must be at most ")
          << moert::kMaxMicroBatches << ", got " << microBatches.getValue();
      return signalPassFailure();
    }
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError("moe-insert-all-to-all: no @main function");
      return signalPassFailure();
    }

    // The dense part runs split only along rows that
    // moe-analyze-row-independence proved independent; otherwise every
    // device runs it whole.
    auto split = module->getAttrOfType<DictionaryAttr>("moe.row_split");
    bool replicated = !split || !split.get("axis");
    Builder builder(module.getContext());
    Operation *insertAfter = main;
    for (int64_t d = 0; d < numDevices; ++d) {
      func::FuncOp clone = main.clone();
      clone.setSymName(("main_d" + Twine(d)).str());
      clone->setAttr("moe.device", builder.getI64IntegerAttr(d));
      if (replicated)
        clone->setAttr("moe.replicated", builder.getUnitAttr());
      module.getBody()->getOperations().insertAfter(
          Block::iterator(insertAfter), clone);
      insertAfter = clone;

      SmallVector<moe::ExpertsOp> placed;
      clone.walk([&](moe::ExpertsOp op) {
        if (op->hasAttr("moe.placement"))
          placed.push_back(op);
      });
      LayerRewriter rewriter(numDevices, d, microBatches, replicated);
      for (auto [index, experts] : llvm::enumerate(placed)) {
        FailureOr<Layer> layer = getLayer(experts, index, numDevices);
        if (failed(layer))
          return signalPassFailure();
        if (failed(rewriter.rewrite(*layer)))
          return signalPassFailure();
      }
    }
    main.erase();
  }
};

} // namespace
} // namespace moec
