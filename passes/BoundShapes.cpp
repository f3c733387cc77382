//===- BoundShapes.cpp - largest shapes for memory planning ---------------===//
//
// Bounds every dynamic dimension. The function is cloned, its dynamic argument
// dimensions are replaced by their bound, and type inference runs forward over
// the clone; where inference still leaves a dimension dynamic (data-dependent
// sizes), a per-op rule bounds it from the op's operands. Nothing is folded, so
// the clone's ops correspond one to one to the original's, and the bounds are
// copied back as attributes while the original types stay dynamic.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/ValueRanges.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <limits>

namespace moec {
#define GEN_PASS_DEF_MOEBOUNDSHAPES
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// The sizes a shape-vector operand denotes on the bounded clone: constants,
/// and dimensions of (now bounded) tensors; dynamic where neither.
SmallVector<int64_t> getBoundedSizes(Value shape) {
  SmallVector<int64_t> sizes;
  if (std::optional<SmallVector<moe::ShapeEntry>> entries =
          moe::getShapeEntries(shape))
    for (const moe::ShapeEntry &entry : *entries)
      sizes.push_back(entry.getSize());
  return sizes;
}

/// Bounds the result of a reshape on the bounded clone when its bounded input
/// and shape disagree on the element count: each dimension is at most the
/// bound of its shape entry (0 copies the input's dimension unless
/// allowzero; -1 is at most the input's element count).
LogicalResult boundReshape(moe::ReshapeOp reshape,
                           SmallVectorImpl<Type> &types) {
  auto input = dyn_cast<RankedTensorType>(reshape.getData().getType());
  if (!input || !input.hasStaticShape())
    return failure();
  SmallVector<int64_t> shape = getBoundedSizes(reshape.getShape());
  if (shape.empty() && !moe::getShapeEntries(reshape.getShape()))
    return failure();
  for (auto [index, size] : llvm::enumerate(shape)) {
    if (size == 0 && reshape.getAllowzero() == 0) {
      if (static_cast<int64_t>(index) >= input.getRank())
        return failure();
      size = input.getDimSize(index);
    } else if (size == -1) {
      size = input.getNumElements();
    } else if (size < 0) {
      return failure();
    }
  }
  types.assign({RankedTensorType::get(shape, input.getElementType())});
  return success();
}

/// The largest element of an integer operand by value analysis, or -1.
int64_t getLargestValue(const ValueRanges &ranges, Value value,
                        std::string *why, StringRef what) {
  const IntRange *range = ranges.lookup(value);
  if (!range || range->max < 0)
    return -1;
  *why = llvm::formatv("{0} is at most {1} ({2})", what, range->max, range->why)
             .str();
  return range->max;
}

/// Bounds a size-vector entry that shape arithmetic cannot see (`size` is
/// dynamic) by the largest value of the vector.
int64_t boundEntry(int64_t size, const ValueRanges &ranges, Value shape,
                   std::string *why) {
  if (!ShapedType::isDynamic(size))
    return size;
  return getLargestValue(ranges, shape, why, "every size of the shape");
}

/// Bounds the number of elements of a Range by value analysis:
/// ceil((limit - start) / delta) at its extremes, for a delta of one sign.
int64_t boundRangeByValues(moe::RangeOp range, const ValueRanges &ranges,
                           std::string *why) {
  const IntRange *start = ranges.lookup(range.getStart());
  const IntRange *limit = ranges.lookup(range.getLimit());
  const IntRange *delta = ranges.lookup(range.getDelta());
  if (!start || !limit || !delta || (delta->min <= 0 && delta->max >= 0))
    return -1;
  // Differences of values within int64 fit in uint64; sizes beyond int64 are
  // no bound.
  bool up = delta->min > 0;
  int64_t step = up ? delta->min : -delta->max;
  __int128 span = up ? __int128(limit->max) - start->min
                     : __int128(start->max) - limit->min;
  if (span <= 0)
    return 0;
  __int128 size = (span + step - 1) / step;
  if (size > std::numeric_limits<int64_t>::max())
    return -1;
  *why = llvm::formatv("the range runs from start >= {0} ({1}) to limit <= "
                       "{2} ({3}) in steps of at least {4}",
                       up ? start->min : start->max, start->why,
                       up ? limit->max : limit->min, limit->why, step)
             .str();
  return static_cast<int64_t>(size);
}

/// Bounds dimension `dim` of a result of `op` (TopK's and Split's results
/// share their rules), whose
/// operands already have static (bounded) types, when inference leaves it
/// dynamic because it depends on values. Rules from the shape arithmetic
/// come first; where they see no bound, the value ranges of the operands
/// give one, and `why` says which. Returns -1 when no sound bound is known.
int64_t boundDataDependentDim(Operation *op, int64_t dim,
                              const ValueRanges &ranges, std::string *why) {
  if (op->getNumOperands() == 0)
    return -1;
  auto input = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  if (!input || !input.hasStaticShape())
    return -1;
  // Dimensions of these ops are sizes of a part of, or a rearrangement of,
  // their first operand, so its element count bounds every one of them.
  if (isa<moe::NonZeroOp, moe::ReshapeOp, moe::FlattenOp, moe::SqueezeOp,
          moe::UnsqueezeOp, moe::IdentityOp>(op))
    return input.getNumElements();
  // These keep the input's rank and take at most its size in every
  // dimension (TopK: k <= size along the axis).
  if (isa<moe::SliceOp, moe::TopKOp, moe::SplitOp>(op))
    return dim < input.getRank() ? input.getDimSize(dim) : -1;
  // Sizes computed from the token count: the shape arithmetic evaluated at
  // the bound.
  if (auto tile = dyn_cast<moe::TileOp>(op)) {
    SmallVector<int64_t> repeats = getBoundedSizes(tile.getRepeats());
    if (dim >= input.getRank() || dim >= static_cast<int64_t>(repeats.size()))
      return -1;
    int64_t repeat = boundEntry(repeats[dim], ranges, tile.getRepeats(), why);
    if (repeat < 0)
      return -1;
    return input.getDimSize(dim) * repeat;
  }
  if (auto constant = dyn_cast<moe::ConstantOfShapeOp>(op)) {
    SmallVector<int64_t> shape = getBoundedSizes(constant.getInput());
    if (dim >= static_cast<int64_t>(shape.size()))
      return -1;
    return boundEntry(shape[dim], ranges, constant.getInput(), why);
  }
  if (auto expand = dyn_cast<moe::ExpandOp>(op)) {
    SmallVector<int64_t> shape = getBoundedSizes(expand.getShape());
    int64_t rank = std::max<int64_t>(shape.size(), input.getRank());
    int64_t fromShape = dim - (rank - static_cast<int64_t>(shape.size()));
    int64_t fromInput = dim - (rank - input.getRank());
    int64_t size = fromInput >= 0 ? input.getDimSize(fromInput) : 1;
    if (fromShape >= 0) {
      int64_t entry =
          boundEntry(shape[fromShape], ranges, expand.getShape(), why);
      if (entry < 0)
        return -1;
      size = std::max(size, entry);
    }
    return size;
  }
  if (auto range = dyn_cast<moe::RangeOp>(op)) {
    std::optional<int64_t> start = moe::getConstantInt(range.getStart());
    std::optional<int64_t> delta = moe::getConstantInt(range.getDelta());
    SmallVector<int64_t> limit = getBoundedSizes(range.getLimit());
    if (!start || !delta || *delta == 0 || limit.size() != 1 || limit[0] < 0)
      return boundRangeByValues(range, ranges, why);
    int64_t span = *delta > 0 ? limit[0] - *start : *start - limit[0];
    int64_t step = *delta > 0 ? *delta : -*delta;
    return std::max<int64_t>(0, (span + step - 1) / step);
  }
  return -1;
}

/// The bound of a broadcasting elementwise op's result whose operands'
/// bounds disagree in a dimension that is dynamic in the IR: at run time the
/// output size there is the operands' common non-1 size, so the largest
/// operand bound bounds it.
LogicalResult boundBroadcast(Operation *original, Operation *op,
                             SmallVectorImpl<Type> &types) {
  if (!op->hasTrait<moe::OpTrait::Elementwise>() || op->getNumResults() != 1)
    return failure();
  auto declared = cast<RankedTensorType>(original->getResult(0).getType());
  int64_t rank = declared.getRank();
  SmallVector<int64_t> shape(rank, 1);
  for (Value operand : op->getOperands()) {
    auto type = dyn_cast<RankedTensorType>(operand.getType());
    if (!type || !type.hasStaticShape() || type.getRank() > rank)
      return failure();
    int64_t offset = rank - type.getRank();
    for (int64_t d = 0; d < type.getRank(); ++d) {
      int64_t size = type.getDimSize(d);
      int64_t &out = shape[offset + d];
      if (size == 1 || size == out)
        continue;
      // Sizes that disagree are only acceptable where the IR says the size
      // is not known yet (a dynamic dimension), never for static ones.
      if (out != 1 && !declared.isDynamicDim(offset + d))
        return failure();
      out = std::max(out, size);
    }
  }
  types.push_back(RankedTensorType::get(shape, declared.getElementType()));
  return success();
}

/// The Range whose length dimension `axis` of `value` has at run time,
/// found through the ops of the bounded clone that keep that dimension: a
/// Gather of the range's indices along `axis`, the rows of a MatMul or Gemm,
/// splits along another axis, and elementwise ops whose other operands have
/// at most one element along `axis` (so broadcasting cannot enlarge it).
moe::RangeOp traceRangeLength(Value value, int64_t axis) {
  for (int step = 0; step < 64; ++step) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    Operation *op = value.getDefiningOp();
    if (!type || !op || axis < 0 || axis >= type.getRank())
      return nullptr;
    int64_t rank = type.getRank();
    if (auto gather = dyn_cast<moe::GatherOp>(op)) {
      auto indices = dyn_cast<RankedTensorType>(gather.getIndices().getType());
      int64_t gatherAxis = static_cast<int64_t>(gather.getAxis());
      if (gatherAxis < 0)
        gatherAxis += rank + 1 - (indices ? indices.getRank() : 0);
      if (!indices || indices.getRank() != 1 || gatherAxis != axis)
        return nullptr;
      return gather.getIndices().getDefiningOp<moe::RangeOp>();
    }
    if (auto matmul = dyn_cast<moe::MatMulOp>(op)) {
      auto lhs = cast<RankedTensorType>(matmul.getA().getType());
      auto rhs = cast<RankedTensorType>(matmul.getB().getType());
      if (lhs.getRank() != rank || rhs.getRank() > 2 || axis >= rank - 1)
        return nullptr;
      value = matmul.getA();
      continue;
    }
    if (auto gemm = dyn_cast<moe::GemmOp>(op)) {
      if (gemm.getTransA() != 0 || axis != 0)
        return nullptr;
      value = gemm.getA();
      continue;
    }
    if (auto split = dyn_cast<moe::SplitOp>(op)) {
      int64_t splitAxis = static_cast<int64_t>(split.getAxis());
      if ((splitAxis < 0 ? splitAxis + rank : splitAxis) == axis)
        return nullptr;
      value = split.getInput();
      continue;
    }
    // Any elementwise op keeps the carrier's size, whatever it computes from
    // the values (Floor or Log as much as Add).
    if (!op->hasTrait<moe::OpTrait::Elementwise>() || op->getNumResults() != 1)
      return nullptr;
    Value carrier;
    for (Value operand : op->getOperands()) {
      auto operandType = dyn_cast<RankedTensorType>(operand.getType());
      if (!operandType || !operandType.hasStaticShape())
        return nullptr;
      int64_t at = axis - (rank - operandType.getRank());
      if (at < 0 || operandType.getDimSize(at) <= 1)
        continue;
      if (carrier || operandType.getRank() != rank)
        return nullptr;
      carrier = operand;
    }
    if (!carrier)
      return nullptr;
    value = carrier;
  }
  return nullptr;
}

/// Bounds dimension `axis` of a Concat of grouped-matmul segments: when
/// its inputs' sizes there are the lengths of consecutive unit-step Ranges
/// (each starts where the previous one ends) whose ends are elements, in
/// order, of one non-decreasing vector, the lengths add up to the last end
/// minus the first start. Returns -1 when that is not shown.
int64_t boundSegmentConcat(moe::ConcatOp concat, int64_t axis,
                           const ValueRanges &ranges, std::string *why) {
  SmallVector<moe::RangeOp> segments;
  for (Value input : concat.getInputs()) {
    moe::RangeOp range = traceRangeLength(input, axis);
    std::optional<int64_t> delta =
        range ? moe::getConstantInt(range.getDelta()) : std::nullopt;
    if (!range || delta != 1)
      return -1;
    if (!segments.empty() && range.getStart() != segments.back().getLimit())
      return -1;
    segments.push_back(range);
  }
  if (segments.empty())
    return -1;
  Value vector;
  int64_t lastIndex = -1;
  for (moe::RangeOp range : segments) {
    auto element = ranges.getElementOf(range.getLimit());
    if (!element || (vector && element->first != vector) ||
        element->second <= lastIndex)
      return -1;
    vector = element->first;
    lastIndex = element->second;
  }
  const IntRange *ends = ranges.lookup(vector);
  const IntRange *first = ranges.lookup(segments.front().getStart());
  const IntRange *last = ranges.lookup(segments.back().getLimit());
  if (!ranges.isNonDecreasing(vector) || !ends || !first || !last ||
      first->max > ends->min)
    return -1;
  int64_t size = std::max<int64_t>(0, last->max - first->min);
  *why = llvm::formatv("the {0} segments are consecutive ranges over the "
                       "non-decreasing ends ({1}), so together they span at "
                       "most {2} - {3}",
                       segments.size(), ends->why, last->max, first->min)
             .str();
  return size;
}

struct BoundShapesPass
    : public moec::impl::MoeBoundShapesBase<BoundShapesPass> {
  using MoeBoundShapesBase::MoeBoundShapesBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (maxTokens < 1) {
      func.emitError("moe-bound-shapes: max-tokens must be at least 1, not ")
          << maxTokens.getValue();
      return signalPassFailure();
    }
    for (const std::string &entry : dimBounds) {
      auto [name, value] = StringRef(entry).split('=');
      int64_t bound = 0;
      if (name.empty() || value.getAsInteger(10, bound) || bound < 1) {
        func.emitError("moe-bound-shapes: dim-bounds entry '")
            << entry << "' is not NAME=N with N >= 1";
        return signalPassFailure();
      }
      namedBounds[name] = bound;
    }
    ranges = ValueRanges();
    if (failed(boundFunction(func)))
      signalPassFailure();
  }

  /// Bounds of named (ONNX dim_param) dimensions from `dim-bounds`.
  llvm::StringMap<int64_t> namedBounds;

  /// The integer value ranges of the bounded clone, op by op.
  ValueRanges ranges;

  /// The bound of dynamic dimension `dim` of argument `index`: its name's
  /// entry in `dim-bounds`, else max-tokens.
  int64_t getArgumentBound(func::FuncOp func, unsigned index, int64_t dim) {
    if (auto names = func.getArgAttrOfType<ArrayAttr>(index, "moe.dim_params"))
      if (dim < static_cast<int64_t>(names.size()))
        if (auto name = dyn_cast<StringAttr>(names[dim])) {
          auto it = namedBounds.find(name.getValue());
          if (it != namedBounds.end())
            return it->second;
        }
    return maxTokens;
  }

  LogicalResult boundFunction(func::FuncOp func) {
    OwningOpRef<func::FuncOp> clone(func.clone());
    Builder builder(func.getContext());

    // Arguments: every dynamic dimension takes its bound.
    for (auto [original, bounded] :
         llvm::zip(func.getArguments(), clone->getArguments())) {
      auto type = dyn_cast<RankedTensorType>(original.getType());
      if (!type)
        return func.emitError("argument #")
               << original.getArgNumber() << " is not a ranked tensor";
      SmallVector<int64_t> shape(type.getShape());
      for (auto [dim, size] : llvm::enumerate(shape))
        if (ShapedType::isDynamic(size))
          size = getArgumentBound(func, original.getArgNumber(), dim);
      bounded.setType(type.clone(shape));
      func.setArgAttr(original.getArgNumber(), "moe.bound",
                      builder.getDenseI64ArrayAttr(shape));
    }

    return boundBlock(func.getBody().front(), clone->getBody().front());
  }

  /// Bounds the results of the ops of `original` by inference over their
  /// counterparts in `bounded` (the clone), in order.
  LogicalResult boundBlock(Block &original, Block &bounded) {
    Builder builder(original.getParentOp()->getContext());
    for (auto [originalOp, boundedOp] : llvm::zip(original, bounded)) {
      Operation *op = &boundedOp;
      if (op->getNumResults() == 0)
        continue;
      SmallVector<Type> types;
      if (failed(inferBoundedTypes(&originalOp, op, types)))
        return failure();

      SmallVector<Attribute> bounds;
      for (auto [index, result] : llvm::enumerate(op->getResults())) {
        auto type = dyn_cast<RankedTensorType>(types[index]);
        if (!type)
          return originalOp.emitError("result #")
                 << index << " is not a ranked tensor";
        SmallVector<int64_t> shape(type.getShape());
        auto declared =
            cast<RankedTensorType>(originalOp.getResult(index).getType());
        for (auto [dim, size] : llvm::enumerate(shape)) {
          // A size the IR already knows statically stays: the bound of a
          // static dimension is the dimension.
          if (dim < static_cast<size_t>(declared.getRank()) &&
              !declared.isDynamicDim(dim))
            size = declared.getDimSize(dim);
          if (!ShapedType::isDynamic(size)) {
            // Inference adds the segments' bounds; their sum is tighter.
            std::string why;
            auto concat = dyn_cast<moe::ConcatOp>(op);
            int64_t axis = concat ? static_cast<int64_t>(concat.getAxis()) : -1;
            if (concat && axis < 0)
              axis += declared.getRank();
            if (concat && declared.isDynamicDim(dim) &&
                static_cast<int64_t>(dim) == axis) {
              int64_t tighter = boundSegmentConcat(concat, dim, ranges, &why);
              if (tighter >= 0 && tighter < size) {
                originalOp.emitRemark("dimension ")
                    << dim << " of result #" << index << " bounded by "
                    << tighter << " instead of " << size
                    << " from value ranges: " << why;
                size = tighter;
              }
            }
            continue;
          }
          std::string why;
          size = boundDataDependentDim(op, dim, ranges, &why);
          if (size < 0)
            return originalOp.emitError("cannot bound dimension ")
                   << dim << " of result #" << index
                   << ": its size depends on values the compiler cannot "
                      "see; moec bounds sizes derived from the token count, "
                      "from an operand's size, or from integer values whose "
                      "range it can prove";
          if (!why.empty())
            originalOp.emitRemark("dimension ")
                << dim << " of result #" << index << " bounded by " << size
                << " from value ranges: " << why;
        }
        result.setType(type.clone(shape));
        bounds.push_back(builder.getDenseI64ArrayAttr(shape));
      }
      originalOp.setAttr("moe.bounds", builder.getArrayAttr(bounds));
      ranges.visit(&originalOp, op);
    }
    return success();
  }

  /// The types of `op`'s results (in the clone) given its bounded operands:
  /// by type inference, or through the body of a fused region.
  LogicalResult inferBoundedTypes(Operation *original, Operation *op,
                                  SmallVectorImpl<Type> &types) {
    if (auto fused = dyn_cast<moe::FusedElementwiseOp>(op)) {
      Block &body = fused.getBody().front();
      for (auto [arg, input] :
           llvm::zip(body.getArguments(), fused.getInputs()))
        arg.setType(input.getType());
      auto originalFused = cast<moe::FusedElementwiseOp>(original);
      if (failed(boundBlock(originalFused.getBody().front(), body)))
        return failure();
      llvm::append_range(types, body.getTerminator()->getOperandTypes());
      return success();
    }
    if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
      // Bounds of values that are equal at run time can differ when they were
      // derived differently: a reshape restoring [B, S, H] from rows bounded
      // as B*S, or an elementwise op whose operands' token dimensions were
      // bounded through different paths. Inference then fails without
      // diagnostics and the op's own bound rule applies; only when there is
      // none does inference, run again, say why at the op.
      if (succeeded(infer.inferReturnTypes(
              op->getContext(), std::nullopt, op->getOperands(),
              op->getAttrDictionary(), op->getPropertiesStorage(),
              op->getRegions(), types)))
        return success();
      types.clear();
      if (auto reshape = dyn_cast<moe::ReshapeOp>(op))
        if (succeeded(boundReshape(reshape, types)))
          return success();
      types.clear();
      if (succeeded(boundBroadcast(original, op, types)))
        return success();
      types.clear();
      if (isa<moe::ExpandOp>(op)) {
        // Expand broadcasts too: each dimension by its own rule.
        auto declared =
            cast<RankedTensorType>(original->getResult(0).getType());
        SmallVector<int64_t> shape;
        std::string why;
        for (int64_t d = 0; d < declared.getRank(); ++d)
          shape.push_back(declared.isDynamicDim(d)
                              ? boundDataDependentDim(op, d, ranges, &why)
                              : declared.getDimSize(d));
        if (llvm::all_of(shape, [](int64_t size) { return size >= 0; })) {
          if (!why.empty())
            original->emitRemark("bounded from value ranges: ") << why;
          types.push_back(declared.clone(shape));
          return success();
        }
      }
      types.clear();
      (void)infer.inferReturnTypes(op->getContext(), op->getLoc(),
                                   op->getOperands(), op->getAttrDictionary(),
                                   op->getPropertiesStorage(), op->getRegions(),
                                   types);
      return failure();
    }
    llvm::append_range(types, op->getResultTypes());
    return success();
  }
};

} // namespace
