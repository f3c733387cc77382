//===- CanonicalizeBatchRows.cpp - [B, T, ...] expert loops onto rows -----===//
//
// makeMoE (a widely copied tutorial) keeps its layer on `[B, T, H]`: the
// router's logits are `[B, T, E]`, an expert's tokens are the true entries
// of a `[B, T]` mask, and the expert's output goes back with `out[mask] +=
// y`, which the exporters write as a ScatterND of every element of the
// masked rows. moe-detect-experts proves the `[T, H]` form (the tokens
// flattened, as transformers and Mistral's code write it). The patterns
// here bring the first onto the second: the batch and sequence axes become
// one token axis, op by op, where the two are equal element for element.
//
//===----------------------------------------------------------------------===//

#include "passes/RoutingMatrix.h"

#include "passes/DimTrace.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "passes/MatchGates.h"
#include "passes/MatchSupport.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec;

namespace {

/// Whether `value` is the true-element count of `mask`:
/// `reduce_sum(cast<i64>(m))` over every axis, m a reshape of `mask`.
bool isTrueCountOf(Value value, Value mask) {
  auto sum = value.getDefiningOp<moe::ReduceSumOp>();
  auto cast = sum ? sum.getData().getDefiningOp<moe::CastOp>() : nullptr;
  if (!cast || sum.getAxes() || sum.getNoopWithEmptyAxes() ||
      !getElementTypeOrSelf(cast.getType()).isInteger(64) ||
      !getElementTypeOrSelf(cast.getInput().getType()).isInteger(1))
    return false;
  return stripReshapes(cast.getInput()) == stripReshapes(mask);
}

/// The pairs `transpose(nonzero(mask), [1, 0])` of `indices`' mask, or null.
Value getPairsMask(Value indices) {
  auto transpose = indices.getDefiningOp<moe::TransposeOp>();
  auto nonZero =
      transpose ? transpose.getData().getDefiningOp<moe::NonZeroOp>() : nullptr;
  if (!nonZero || !transpose.getPerm() ||
      *transpose.getPerm() != ArrayRef<int64_t>{1, 0})
    return nullptr;
  return nonZero.getX();
}

/// Sets `rewriter`'s insertion point right after the last of `operands`
/// defined in `anchor`'s block (its start when none is): a new op of those
/// operands is then placed before any op that one of the originals it is
/// computed from dominates.
void setInsertionAfterOperands(PatternRewriter &rewriter, ValueRange operands,
                               Operation *anchor) {
  Operation *last = nullptr;
  for (Value operand : operands)
    if (Operation *def = operand.getDefiningOp();
        def && def->getBlock() == anchor->getBlock() &&
        (!last || last->isBeforeInBlock(def)))
      last = def;
  if (last)
    rewriter.setInsertionPointAfter(last);
  else
    rewriter.setInsertionPointToStart(anchor->getBlock());
}

/// Whether the attribute `axis` of an op on rank `rank` names a trailing
/// axis (not batch or sequence) negatively, so that it names the same axis
/// after the flattening.
bool isTrailingAxis(int64_t axis, int64_t rank) {
  return axis < 0 && axis + rank >= 2;
}

/// Rebuilds values of `[B, T, ...]` on `[B * T, ...]`, the batch and
/// sequence axes flattened into one token axis (what
/// `reshape(v, [-1, ...])` gives), by recomputing them from flattened
/// operands where that is exact: elementwise ops whose other operands
/// broadcast over the trailing axes only (or have provably the same leading
/// dimensions), reductions, softmaxes and scatters along trailing axes, a
/// projection by a matrix, fills of such a shape, and a reshape of a
/// `[B * T, ...]` value, which is that value. Anything else is reshaped.
/// Every new op is placed right after its operands, so it dominates
/// whatever the value it replaces did. Without a rewriter it only checks.
class BatchFlattener {
public:
  explicit BatchFlattener(PatternRewriter *rewriter) : rewriter(rewriter) {}

  /// Whether a reshape of a `[T, k]` top-k's result was found, so that the
  /// flattening removes a reshape of the routing.
  bool progress = false;

  /// The flattened `value`; failure when it cannot be flattened (a 3-D
  /// top-k's results: BatchTopKToRows flattens the top-k first).
  FailureOr<Value> flatten(Value value) {
    auto it = memo.find(value);
    if (it != memo.end())
      return it->second;
    FailureOr<Value> result = compute(value);
    if (succeeded(result))
      memo[value] = *result;
    return result;
  }

  /// The `[-1, ...trailing]` shape target of `value`, or nullopt when its
  /// trailing dimensions are not static and positive.
  static std::optional<SmallVector<int64_t>> getTarget(Value value) {
    ArrayRef<int64_t> shape = getShape(value);
    if (shape.size() < 2)
      return std::nullopt;
    SmallVector<int64_t> target{-1};
    for (int64_t size : shape.drop_front(2)) {
      if (ShapedType::isDynamic(size) || size <= 0)
        return std::nullopt;
      target.push_back(size);
    }
    return target;
  }

private:
  PatternRewriter *rewriter;
  llvm::DenseMap<Value, Value> memo;

  /// `reshape(value, target)`, with the attributes of an existing one so
  /// that CSE merges the two.
  FailureOr<Value> reshaped(Value value, ArrayRef<int64_t> target) {
    if (!rewriter)
      return Value();
    int64_t allowZero = 0;
    for (Operation *user : value.getUsers())
      if (auto reshape = dyn_cast<moe::ReshapeOp>(user);
          reshape && reshape.getData() == value &&
          moe::getConstantInts(reshape.getShape()) ==
              SmallVector<int64_t>(target))
        allowZero = reshape.getAllowzero();
    OpBuilder::InsertionGuard guard(*rewriter);
    rewriter->setInsertionPointAfterValue(value);
    Location loc = value.getLoc();
    Value shape = createI64Constant(
        *rewriter, loc, {static_cast<int64_t>(target.size())}, target);
    return Value(moe::ReshapeOp::create(
        *rewriter, loc, value, shape, rewriter->getI64IntegerAttr(allowZero)));
  }

  /// `op` rebuilt on `operands` (same attributes), its result types
  /// inferred again; a reshape of `op`'s result where they cannot be.
  FailureOr<Value> rebuild(Operation *op, ArrayRef<Value> operands,
                           ArrayRef<int64_t> target) {
    if (!rewriter)
      return Value();
    OpBuilder::InsertionGuard guard(*rewriter);
    setInsertionAfterOperands(*rewriter, operands, op);
    IRMapping mapping;
    for (auto [from, to] : llvm::zip(op->getOperands(), operands))
      mapping.map(from, to);
    Operation *clone = rewriter->clone(*op, mapping);
    SmallVector<Type> types;
    auto infer = dyn_cast<InferTypeOpInterface>(clone);
    if (!infer ||
        failed(infer.inferReturnTypes(
            clone->getContext(), clone->getLoc(), clone->getOperands(),
            clone->getAttrDictionary(), clone->getPropertiesStorage(),
            clone->getRegions(), types)) ||
        types.size() != clone->getNumResults()) {
      rewriter->eraseOp(clone);
      return reshaped(op->getResult(0), target);
    }
    for (auto [result, type] : llvm::zip(clone->getResults(), types))
      result.setType(type);
    return clone->getResult(0);
  }

  /// Flattens the operands at `positions` of `def` of rank `rank` into
  /// `operands`; the others must have rank `maxOther` at most (broadcast
  /// over the trailing axes). Fails unless one operand is flattened.
  LogicalResult flattenOperands(Operation *def, ArrayRef<unsigned> positions,
                                int64_t rank, int64_t maxOther,
                                SmallVectorImpl<Value> &operands) {
    Value first;
    for (unsigned i : positions) {
      Value operand = def->getOperand(i);
      int64_t operandRank = rankOf(operand);
      if (operandRank == rank) {
        if (first && !haveSameLeadingDims(first, operand, 2))
          return failure();
        first = first ? first : operand;
        FailureOr<Value> flat = flatten(operand);
        if (failed(flat))
          return failure();
        operands[i] = *flat;
      } else if (operandRank < 0 || operandRank > maxOther) {
        return failure();
      }
    }
    return success(first != nullptr);
  }

  /// Flattens the input of a reduction over negative (trailing) axes.
  LogicalResult flattenReduced(Value data, Value axesValue,
                               SmallVectorImpl<Value> &operands) {
    std::optional<SmallVector<int64_t>> axes =
        axesValue ? moe::getConstantInts(axesValue) : std::nullopt;
    int64_t inputRank = rankOf(data);
    // Negative axes name the same trailing axes after the flattening.
    if (!axes || axes->empty() || inputRank < 3 ||
        llvm::any_of(*axes, [&](int64_t axis) {
          return axis >= 0 || axis + inputRank < 2;
        }))
      return failure();
    FailureOr<Value> flat = flatten(data);
    if (failed(flat))
      return failure();
    operands[0] = *flat;
    return success();
  }

  /// Flattens the shape operand `shape(y)` of a fill (y of rank `rank`).
  LogicalResult flattenFillShape(Operation *op, Value shapeOperand,
                                 int64_t rank,
                                 SmallVectorImpl<Value> &operands) {
    auto shape = shapeOperand.getDefiningOp<moe::ShapeOp>();
    if (!shape || shape.getStart() != 0 || shape.getEnd() ||
        rankOf(shape.getData()) != rank)
      return failure();
    FailureOr<Value> flat = flatten(shape.getData());
    if (failed(flat))
      return failure();
    if (rewriter) {
      OpBuilder::InsertionGuard guard(*rewriter);
      rewriter->setInsertionPointAfterValue(*flat);
      operands.back() =
          moe::ShapeOp::create(*rewriter, op->getLoc(), *flat,
                               rewriter->getI64IntegerAttr(0), /*end=*/nullptr);
    }
    return success();
  }

  FailureOr<Value> compute(Value value) {
    std::optional<SmallVector<int64_t>> target = getTarget(value);
    if (!target)
      return failure();
    int64_t rank = rankOf(value);
    Operation *def = value.getDefiningOp();
    if (!def)
      return reshaped(value, *target);
    if (isa<moe::TopKOp>(def))
      return failure();
    // A reshape of a [B * T, ...] value with the same trailing sizes.
    if (auto reshape = dyn_cast<moe::ReshapeOp>(def)) {
      Value data = reshape.getData();
      if (rankOf(data) != rank - 1 ||
          getShape(data).drop_front() !=
              ArrayRef<int64_t>(*target).drop_front())
        return reshaped(value, *target);
      if (auto topK = data.getDefiningOp<moe::TopKOp>())
        progress |= rankOf(topK.getInput()) == 2;
      return data;
    }
    SmallVector<Value> operands(def->getOperands());
    LogicalResult matched =
        llvm::TypeSwitch<Operation *, LogicalResult>(def)
            .Case<moe::CastOp, moe::ReluOp, moe::GeluOp, moe::SigmoidOp,
                  moe::TanhOp, moe::ExpOp, moe::NegOp, moe::NotOp>(
                [&](Operation *op) {
                  return flattenOperands(op, {0}, rank, -1, operands);
                })
            .Case([&](moe::SoftmaxOp op) {
              return success(
                  isTrailingAxis(op.getAxis(), rank) &&
                  succeeded(flattenOperands(op, {0}, rank, -1, operands)));
            })
            .Case<moe::AddOp, moe::SubOp, moe::MulOp, moe::DivOp, moe::EqualOp,
                  moe::GreaterOp, moe::LessOp, moe::AndOp, moe::OrOp>(
                [&](Operation *op) {
                  return flattenOperands(op, {0, 1}, rank, rank - 2, operands);
                })
            .Case([&](moe::ReduceSumOp op) {
              return flattenReduced(op.getData(), op.getAxes(), operands);
            })
            .Case([&](moe::ReduceMaxOp op) {
              return flattenReduced(op.getData(), op.getAxes(), operands);
            })
            .Case([&](moe::MatMulOp op) -> LogicalResult {
              if (rank < 3 || rankOf(op.getB()) != 2)
                return failure();
              return flattenOperands(op, {0}, rank, -1, operands);
            })
            .Case([&](moe::ScatterElementsOp op) -> LogicalResult {
              if (!isTrailingAxis(op.getAxis(), rank))
                return failure();
              return flattenOperands(op, {0, 1, 2}, rank, -1, operands);
            })
            .Case([&](moe::ConstantOfShapeOp op) {
              return flattenFillShape(op, op.getInput(), rank, operands);
            })
            .Case([&](moe::ExpandOp op) -> LogicalResult {
              if (rankOf(op.getInput()) > rank - 2)
                return failure();
              return flattenFillShape(op, op.getShape(), rank, operands);
            })
            .Default([](Operation *) { return failure(); });
    if (failed(matched))
      return reshaped(value, *target);
    return rebuild(def, operands, *target);
  }
};

/// Whether the `[B, T, k]` top-k indices `ids` are used the way makeMoE
/// finds an expert's tokens: `(ids == e).any(-1)`, as the sum or maximum of
/// the i64 comparison over the last axis.
bool hasAnyExpertMask(Value ids) {
  for (Operation *user : ids.getUsers()) {
    auto equal = dyn_cast<moe::EqualOp>(user);
    if (!equal || getShape(otherOperand(equal, ids)).size() > 1 ||
        !moe::getConstantInt(otherOperand(equal, ids)))
      continue;
    for (Operation *castUser : equal.getOutput().getUsers())
      if (auto cast = dyn_cast<moe::CastOp>(castUser))
        for (Operation *reduce : cast.getOutput().getUsers())
          if (isa<moe::ReduceSumOp, moe::ReduceMaxOp>(reduce) &&
              reduce->getNumOperands() > 1 &&
              isConstAxes(reduce->getOperand(1), {rankOf(ids) - 1},
                          rankOf(ids)))
            return true;
  }
  return false;
}

/// A top-k over the last axis of `[B, T, E]` scores whose indices select
/// experts' tokens as makeMoE does (hasAnyExpertMask) becomes the top-k of
/// the scores flattened to `[B * T, E]`, its results reshaped back to
/// `[B, T, k]`: the top-k of each row is the same whichever rows surround
/// it, and the reshapes keep the rows in order.
struct BatchTopKToRows : public OpRewritePattern<moe::TopKOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::TopKOp topK,
                                PatternRewriter &rewriter) const override {
    Value scores = topK.getInput();
    int64_t rank = rankOf(scores);
    std::optional<int64_t> k = moe::getConstantInt(topK.getK());
    if (rank != 3 || !isAxis(topK.getAxis(), rank - 1, rank) ||
        !BatchFlattener::getTarget(scores) || !k ||
        getShape(topK.getIndices()).back() != *k ||
        !hasAnyExpertMask(topK.getIndices()))
      return rewriter.notifyMatchFailure(
          topK, "not a [B, T, E] top-k of makeMoE's expert masks");
    BatchFlattener check(nullptr);
    if (failed(check.flatten(scores)))
      return rewriter.notifyMatchFailure(topK, "the scores do not flatten");
    BatchFlattener flattener(&rewriter);
    Value flat = *flattener.flatten(scores);
    Location loc = topK.getLoc();
    rewriter.setInsertionPoint(topK);
    ArrayRef<int64_t> flatShape = getShape(flat);
    auto valuesType = RankedTensorType::get(
        {flatShape[0], *k}, getElementTypeOrSelf(topK.getValues().getType()));
    auto indicesType =
        RankedTensorType::get({flatShape[0], *k}, rewriter.getI64Type());
    auto rows =
        moe::TopKOp::create(rewriter, loc, TypeRange{valuesType, indicesType},
                            flat, topK.getK(), rewriter.getI64IntegerAttr(-1),
                            topK.getLargestAttr(), topK.getSortedAttr());
    Value leading = moe::ShapeOp::create(rewriter, loc, scores,
                                         rewriter.getI64IntegerAttr(0),
                                         rewriter.getI64IntegerAttr(rank - 1));
    Value shape = moe::ConcatOp::create(
        rewriter, loc,
        ValueRange{leading, createI64Constant(rewriter, loc, {1}, {*k})},
        rewriter.getI64IntegerAttr(0));
    SmallVector<Value> results;
    for (auto [flatResult, old] :
         llvm::zip(rows->getResults(), topK->getResults()))
      results.push_back(moe::ReshapeOp::create(rewriter, loc, old.getType(),
                                               flatResult, shape,
                                               rewriter.getI64IntegerAttr(0)));
    rewriter.replaceOp(topK, results);
    return success();
  }
};

/// `reshape(v, [-1, ...trailing])` of a `[B, T, ...]` value computed from a
/// flattened top-k's results reshaped back to `[B, T, k]` (BatchTopKToRows)
/// is v recomputed on the flattened rows (BatchFlattener): makeMoE's
/// routing matrix and expert masks, viewed per token.
struct FlatReshapeOfRouting : public OpRewritePattern<moe::ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::ReshapeOp reshape,
                                PatternRewriter &rewriter) const override {
    Value value = reshape.getData();
    std::optional<SmallVector<int64_t>> target =
        BatchFlattener::getTarget(value);
    if (!target || rankOf(value) < 2 || !value.getDefiningOp() ||
        moe::getConstantInts(reshape.getShape()) != *target)
      return rewriter.notifyMatchFailure(reshape, "not a flattening reshape");
    BatchFlattener check(nullptr);
    if (failed(check.flatten(value)) || !check.progress)
      return rewriter.notifyMatchFailure(
          reshape, "not computed from a flattened top-k's results");
    BatchFlattener flattener(&rewriter);
    Value flat = *flattener.flatten(value);
    if (flat.getType() != reshape.getType()) {
      rewriter.setInsertionPoint(reshape);
      flat = moe::ReshapeOp::create(rewriter, reshape.getLoc(),
                                    reshape.getType(), flat, reshape.getShape(),
                                    reshape.getAllowzeroAttr());
    }
    rewriter.replaceOp(reshape, flat);
    return success();
  }
};

/// A shape operand that is the accumulator `acc`'s shape, read literally
/// (a reshape to it with allowzero = 1 gives that shape): through scatters
/// to the fill that made it (`constant_of_shape(s)`, or the expand of one
/// element to s) or the reshape back a previous rewrite made; null when
/// there is none.
Value getShapeOperand(Value acc) {
  while (auto scatter = acc.getDefiningOp<moe::ScatterNDOp>())
    acc = scatter.getData();
  if (auto reshape = acc.getDefiningOp<moe::ReshapeOp>())
    return reshape.getAllowzero() ? reshape.getShape() : Value();
  if (auto expand = acc.getDefiningOp<moe::ExpandOp>()) {
    auto input = dyn_cast<RankedTensorType>(expand.getInput().getType());
    return input && input.hasStaticShape() && input.getNumElements() == 1
               ? expand.getShape()
               : Value();
  }
  if (auto fill = acc.getDefiningOp<moe::ConstantOfShapeOp>())
    return fill.getInput();
  return nullptr;
}

/// `out[mask] = v` of `[B, T, H]` `out` and a `[B, T]` mask, as exporters
/// write it: `scatter_nd(out, transpose(nonzero(expand(mask[..., None],
/// [B, T, H]))), flatten(v))`, one index per element, becomes the scatter of
/// v's rows at `transpose(nonzero(mask))`, one index per row, where `v` is
/// `out[mask] + u` (makeMoE's `out[mask] += y`: the read at the same
/// mask's rows).
///
/// The expanded mask is the mask repeated along H (its leading dimensions
/// are proven the mask's), so nonzero lists, for each true (b, t) in
/// row-major order, (b, t, 0) ... (b, t, H - 1). v has count(mask) rows
/// (traced to the read's NonZero and the mask's count), so flattening v
/// lists v's rows in that order: element (b, t, h) gets v[i, h] for the
/// i-th true (b, t) in both. The flattened v is dynamo's
/// `reshape(expand(v, [count(mask), H]), [-1])` (expanding v to its own
/// row count) or TorchScript's `slice(reshape(v, [-1]), 0, n)` with n the
/// number of element indices (all of v).
struct ElementMaskScatterToRows : public OpRewritePattern<moe::ScatterNDOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::ScatterNDOp scatter,
                                PatternRewriter &rewriter) const override {
    Value out = scatter.getData();
    int64_t rank = rankOf(out);
    ArrayRef<int64_t> outShape = getShape(out);
    Value expanded = getPairsMask(scatter.getIndices());
    auto expand =
        expanded ? expanded.getDefiningOp<moe::ExpandOp>() : moe::ExpandOp();
    auto unsqueeze = expand
                         ? expand.getInput().getDefiningOp<moe::UnsqueezeOp>()
                         : moe::UnsqueezeOp();
    if (scatter.getReduction() != "none" || rank < 2 ||
        ShapedType::isDynamic(outShape.back()) || !unsqueeze ||
        rankOf(expanded) != rank ||
        !isConstAxes(unsqueeze.getAxes(), {rank - 1}, rank))
      return rewriter.notifyMatchFailure(
          scatter, "not a scatter at a row mask's elements");
    Value mask = unsqueeze.getData();
    int64_t hidden = outShape.back();
    std::optional<DimKey> width = traceShapeEntry(expand.getShape(), rank - 1);
    if (!getElementTypeOrSelf(mask.getType()).isInteger(1) ||
        getShape(expand.getShape()) != ArrayRef<int64_t>{rank} || !width ||
        width->constant != hidden)
      return rewriter.notifyMatchFailure(scatter, "not expanded along H");
    for (int64_t i = 0; i + 1 < rank; ++i) {
      std::optional<DimKey> target = traceShapeEntry(expand.getShape(), i);
      if (!target || !(*target == traceDim(mask, i)))
        return rewriter.notifyMatchFailure(
            scatter, "the expansion may broadcast the mask's leading axes");
    }
    // The flattened rows v.
    Value rows;
    if (auto flat = scatter.getUpdates().getDefiningOp<moe::ReshapeOp>()) {
      auto grown = flat.getData().getDefiningOp<moe::ExpandOp>();
      auto shape =
          grown ? grown.getShape().getDefiningOp<moe::ConcatOp>() : nullptr;
      if (moe::getConstantInts(flat.getShape()) == SmallVector<int64_t>{-1} &&
          shape && shape.getInputs().size() == 2 &&
          isTrueCountOf(shape.getInputs()[0], mask) &&
          isConstAxes(shape.getInputs()[1], {hidden}, 0))
        rows = grown.getInput();
    } else if (auto slice =
                   scatter.getUpdates().getDefiningOp<moe::SliceOp>()) {
      auto flat = slice.getData().getDefiningOp<moe::ReshapeOp>();
      Value end = slice.getEnds();
      if (auto unsqueezed = end.getDefiningOp<moe::UnsqueezeOp>())
        end = unsqueezed.getData();
      auto count = end.getDefiningOp<moe::DimOp>();
      auto nonZero = scatter.getIndices()
                         .getDefiningOp<moe::TransposeOp>()
                         .getData()
                         .getDefiningOp<moe::NonZeroOp>();
      if (flat &&
          moe::getConstantInts(flat.getShape()) == SmallVector<int64_t>{-1} &&
          moe::getConstantInt(slice.getStarts()) == 0 &&
          (!slice.getAxes() || isConstAxes(slice.getAxes(), {0}, 1)) &&
          (!slice.getSteps() || moe::getConstantInt(slice.getSteps()) == 1) &&
          count && count.getInput() == nonZero.getOutput() &&
          count.getIndex() == 1)
        rows = flat.getData();
    }
    if (!rows ||
        getShape(rows) != ArrayRef<int64_t>{ShapedType::kDynamic, hidden})
      return rewriter.notifyMatchFailure(scatter,
                                         "not the flattened [N, H] rows");
    // v = out[mask] + u, the read at the mask's row pairs.
    auto add = rows.getDefiningOp<moe::AddOp>();
    Value pairs;
    for (Value operand : add ? add->getOperands() : ValueRange{})
      if (auto read = operand.getDefiningOp<moe::GatherNDOp>();
          read && read.getData() == out && read.getBatchDims() == 0 &&
          getPairsMask(read.getIndices()) == mask)
        pairs = read.getIndices();
    DimKey count{std::nullopt, stripReshapes(mask), kTrueCount};
    if (!pairs || !(traceDim(rows, 0) == count))
      return rewriter.notifyMatchFailure(
          scatter, "not out[mask] + u with one row per true mask entry");
    rewriter.replaceOpWithNewOp<moe::ScatterNDOp>(scatter, scatter.getType(),
                                                  out, pairs, rows,
                                                  scatter.getReductionAttr());
    return success();
  }
};

/// The row scatter `scatter_nd(out, transpose(nonzero(mask)), v)` of
/// `[B, T, H]` `out` at the true entries of a `[B, T]` mask (and reads
/// `gather_nd(out, ...)` at the same pairs) becomes the scatter of the
/// flattened `[B * T, H]` out at `transpose(nonzero(flatten(mask)))`,
/// reshaped back. Nonzero lists (b, t) in row-major order, and the
/// flattened index of (b, t) is b * T + t in the same order, when the mask
/// and out have the same leading dimensions (proven by traceDim): the same
/// rows in the same order, written with the same values.
struct BatchRowScatterToRows : public OpRewritePattern<moe::ScatterNDOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::ScatterNDOp scatter,
                                PatternRewriter &rewriter) const override {
    Value out = scatter.getData();
    Value pairs = scatter.getIndices();
    Value mask = getPairsMask(pairs);
    if (scatter.getReduction() != "none" || rankOf(out) != 3 || !mask ||
        rankOf(mask) != 2 || rankOf(scatter.getUpdates()) != 2 ||
        !BatchFlattener::getTarget(out) || !haveSameLeadingDims(mask, out, 2))
      return rewriter.notifyMatchFailure(scatter,
                                         "not a row scatter of [B, T, H]");
    // The accumulator as the previous row scatter left it (a reshape of
    // its flattened rows) or its fill: the chain of experts stays one chain
    // of [B * T, H] values. An earlier scatter not rewritten yet is waited
    // for.
    auto previous = out.getDefiningOp<moe::ReshapeOp>();
    if (!(previous && rankOf(previous.getData()) == 2) &&
        !out.getDefiningOp<moe::ExpandOp>() &&
        !out.getDefiningOp<moe::ConstantOfShapeOp>())
      return rewriter.notifyMatchFailure(scatter,
                                         "the accumulator is not flat yet");
    Value shape = getShapeOperand(out);
    BatchFlattener check(nullptr);
    if (!shape || failed(check.flatten(out)) || failed(check.flatten(mask)))
      return rewriter.notifyMatchFailure(scatter, "does not flatten");
    BatchFlattener flattener(&rewriter);
    Value flatOut = *flattener.flatten(out);
    Value flatMask = *flattener.flatten(mask);
    // Before the reads, which come before the scatter.
    setInsertionAfterOperands(rewriter, flatMask, scatter);
    Location loc = scatter.getLoc();
    Value rows = moe::TransposeOp::create(
        rewriter, loc,
        moe::NonZeroOp::create(rewriter, loc, flatMask).getOutput(),
        rewriter.getDenseI64ArrayAttr({1, 0}));
    for (Operation *user : llvm::make_early_inc_range(pairs.getUsers()))
      if (auto read = dyn_cast<moe::GatherNDOp>(user);
          read && read.getData() == out && read.getIndices() == pairs &&
          read.getBatchDims() == 0) {
        rewriter.setInsertionPoint(read);
        rewriter.replaceOpWithNewOp<moe::GatherNDOp>(
            read, read.getType(), flatOut, rows, read.getBatchDimsAttr());
      }
    rewriter.setInsertionPoint(scatter);
    Value flatScatter = moe::ScatterNDOp::create(
        rewriter, loc, flatOut.getType(), flatOut, rows, scatter.getUpdates(),
        scatter.getReductionAttr());
    rewriter.replaceOpWithNewOp<moe::ReshapeOp>(scatter, scatter.getType(),
                                                flatScatter, shape,
                                                rewriter.getI64IntegerAttr(1));
    return success();
  }
};

} // namespace

void moec::populateElementMaskScatterPatterns(RewritePatternSet &patterns) {
  patterns.add<ElementMaskScatterToRows>(patterns.getContext());
}

void moec::populateBatchRowPatterns(RewritePatternSet &patterns) {
  patterns.add<BatchTopKToRows, FlatReshapeOfRouting, BatchRowScatterToRows>(
      patterns.getContext());
}
