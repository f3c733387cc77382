//===- PlanMemory.cpp - arena offsets by liveness -------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

namespace moec {
#define GEN_PASS_DEF_MOEPLANMEMORY
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

constexpr uint64_t kAlignment = 64;

/// One arena buffer: the values stored in it, their byte size and when it is
/// live (step indices, inclusive).
struct Buffer {
  uint64_t size = 0;
  int64_t start = 0;
  int64_t end = 0;
  uint64_t offset = 0;
};

/// Bytes of one element of `type` as the runtime stores it (bool: one byte).
uint64_t getElementBytes(Type type) {
  unsigned bits = type.getIntOrFloatBitWidth();
  return bits == 1 ? 1 : llvm::divideCeil(bits, 8);
}

/// How a step may write its output over an input (the runtime's in-place
/// rules, docs/plan-format.md).
enum class InPlace {
  None,
  /// Elementwise: over any input of the output's exact type.
  Elementwise,
  /// Over input 0, whose shape the output always has.
  SameShapeAsFirst,
  /// Over input 0, of which the output is a view with the same elements.
  View,
};

/// The in-place rule of `op`'s step, from its ODS categories
/// (dialects/moe/MoeTraits.td).
InPlace getInPlaceKind(Operation *op) {
  if (!op->hasTrait<moe::OpTrait::InPlaceable>())
    return InPlace::None;
  // Before Elementwise: Identity is both, and the runtime runs it as a view.
  if (op->hasTrait<moe::OpTrait::View>())
    return InPlace::View;
  if (op->hasTrait<moe::OpTrait::Elementwise>())
    return InPlace::Elementwise;
  return InPlace::SameShapeAsFirst;
}

/// True when the output of `op` (of `type`) may overwrite `operand` (operand
/// number `index`) as far as shapes go: element for element at run time.
bool canOverwrite(Operation *op, InPlace kind, unsigned index, Value operand,
                  RankedTensorType type) {
  switch (kind) {
  case InPlace::None:
    return false;
  case InPlace::Elementwise: {
    if (operand.getType() != type)
      return false;
    // With several tensor operands, dynamic sizes could broadcast at run time
    // (a `?` that is 1 against one that is not); only static shapes are
    // certain to match.
    unsigned numTensors = llvm::count_if(
        op->getOperandTypes(), [](Type t) { return isa<RankedTensorType>(t); });
    return numTensors == 1 || type.hasStaticShape();
  }
  case InPlace::SameShapeAsFirst:
    return index == 0 && operand.getType() == type;
  case InPlace::View:
    return index == 0 && cast<ShapedType>(operand.getType()).getElementType() ==
                             type.getElementType();
  }
  return false;
}

struct PlanMemoryPass : public moec::impl::MoePlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Block &body = func.getBody().front();
    Builder builder(func.getContext());

    // Step indices: arguments are defined at -1, the terminator uses its
    // operands at the last index, so graph outputs live to the end.
    llvm::DenseMap<Operation *, int64_t> stepIndex;
    int64_t numSteps = 0;
    for (Operation &op : body)
      stepIndex[&op] = numSteps++;

    SmallVector<Buffer> buffers;
    llvm::DenseMap<Value, unsigned> bufferOf;

    auto getBound = [&](Value value) -> FailureOr<uint64_t> {
      ArrayRef<int64_t> shape;
      if (auto arg = dyn_cast<BlockArgument>(value)) {
        auto bound = func.getArgAttrOfType<DenseI64ArrayAttr>(
            arg.getArgNumber(), "moe.bound");
        if (!bound)
          return failure();
        shape = bound.asArrayRef();
      } else {
        auto bounds =
            value.getDefiningOp()->getAttrOfType<ArrayAttr>("moe.bounds");
        unsigned index = cast<OpResult>(value).getResultNumber();
        if (!bounds || index >= bounds.size() ||
            !isa<DenseI64ArrayAttr>(bounds[index]))
          return failure();
        shape = cast<DenseI64ArrayAttr>(bounds[index]).asArrayRef();
      }
      uint64_t bytes =
          getElementBytes(cast<ShapedType>(value.getType()).getElementType());
      for (int64_t size : shape)
        bytes *= static_cast<uint64_t>(size);
      return llvm::alignTo(std::max<uint64_t>(bytes, 1), kAlignment);
    };

    auto lastUse = [&](Value value) {
      int64_t last = -1;
      for (Operation *user : value.getUsers())
        last =
            std::max(last, stepIndex.lookup(body.findAncestorOpInBlock(*user)));
      return last;
    };

    uint64_t naive = 0;
    auto addBuffer = [&](Value value, int64_t start) -> LogicalResult {
      FailureOr<uint64_t> size = getBound(value);
      if (failed(size))
        return failure();
      naive += *size;
      bufferOf[value] = buffers.size();
      buffers.push_back({*size, start, std::max(start, lastUse(value)), 0});
      return success();
    };

    // The runtime copies graph inputs into the arena at the start of every
    // run, so their bytes are free after their last use like any other's.
    for (BlockArgument arg : func.getArguments())
      if (failed(addBuffer(arg, -1))) {
        func.emitError("argument #")
            << arg.getArgNumber()
            << " has no bound; run moe-bound-shapes first";
        return signalPassFailure();
      }

    for (Operation &op : body) {
      // Constants (block-quantized ones too), stacks of constants and their
      // shards are weights, not arena tensors.
      auto stack = dyn_cast<moe::StackOp>(op);
      if (op.getNumResults() == 0 ||
          isa<moe::ConstantOp, moe::ShardOp, moe::BlockQuantizedConstantOp>(
              op) ||
          (stack && stack.isWeight()))
        continue;
      int64_t index = stepIndex[&op];
      for (OpResult result : op.getResults()) {
        // In place: output 0 may take the buffer of an operand that dies at
        // this op, when the runtime's rules allow it and the shapes match
        // element for element (canOverwrite).
        InPlace kind = getInPlaceKind(&op);
        if (kind != InPlace::None && result.getResultNumber() == 0) {
          auto type = cast<RankedTensorType>(result.getType());
          FailureOr<uint64_t> size = getBound(result);
          Value reuse;
          for (OpOperand &use : op.getOpOperands()) {
            Value operand = use.get();
            auto it = bufferOf.find(operand);
            if (it == bufferOf.end() || failed(size) ||
                buffers[it->second].end != index ||
                buffers[it->second].size < *size ||
                !canOverwrite(&op, kind, use.getOperandNumber(), operand, type))
              continue;
            reuse = operand;
            break;
          }
          if (reuse) {
            unsigned buffer = bufferOf[reuse];
            bufferOf[result] = buffer;
            buffers[buffer].end = std::max(index, lastUse(result));
            continue;
          }
        }
        if (failed(addBuffer(result, index))) {
          op.emitError("result #")
              << result.getResultNumber()
              << " has no bound; run moe-bound-shapes first";
          return signalPassFailure();
        }
      }
    }

    uint64_t arenaSize = placeBuffers(buffers);

    for (BlockArgument arg : func.getArguments())
      func.setArgAttr(arg.getArgNumber(), "moe.offset",
                      builder.getI64IntegerAttr(buffers[bufferOf[arg]].offset));
    for (Operation &op : body) {
      if (op.getNumResults() == 0)
        continue;
      SmallVector<int64_t> offsets;
      for (OpResult result : op.getResults()) {
        auto it = bufferOf.find(result);
        offsets.push_back(
            it == bufferOf.end()
                ? -1
                : static_cast<int64_t>(buffers[it->second].offset));
      }
      op.setAttr("moe.offsets", builder.getDenseI64ArrayAttr(offsets));
    }
    func->setAttr("moe.arena_size", builder.getI64IntegerAttr(arenaSize));
    func->setAttr("moe.naive_size", builder.getI64IntegerAttr(naive));
  }

  /// Greedy by size: the largest buffers are placed first, each at the lowest
  /// offset clear of every already placed buffer whose lifetime overlaps.
  /// Returns the arena size.
  static uint64_t placeBuffers(MutableArrayRef<Buffer> buffers) {
    SmallVector<unsigned> order(buffers.size());
    for (unsigned i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](unsigned a, unsigned b) {
      return buffers[a].size > buffers[b].size;
    });
    SmallVector<unsigned> placed;
    uint64_t arenaSize = 0;
    for (unsigned index : order) {
      Buffer &buffer = buffers[index];
      SmallVector<std::pair<uint64_t, uint64_t>> busy;
      for (unsigned other : placed) {
        const Buffer &o = buffers[other];
        if (o.start <= buffer.end && buffer.start <= o.end)
          busy.push_back({o.offset, o.offset + o.size});
      }
      llvm::sort(busy);
      uint64_t offset = 0;
      for (auto [begin, end] : busy) {
        if (offset + buffer.size <= begin)
          break;
        offset = std::max(offset, end);
      }
      buffer.offset = offset;
      arenaSize = std::max(arenaSize, offset + buffer.size);
      placed.push_back(index);
    }
    return arenaSize;
  }
};

} // namespace
