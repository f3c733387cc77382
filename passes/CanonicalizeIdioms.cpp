//===- CanonicalizeIdioms.cpp - one IR form per exporter idiom ------------===//
//
// Exporters write the same computation in different ops: torch's dynamo
// exporter gathers rows with `GatherND(W, unsqueeze(ids, -1))` where
// TorchScript writes `Gather(W, ids)`, and repeats a tensor with
// `Expand(unsqueeze(x, 1), [1, k, 1])` where TorchScript writes `Tile`. The
// patterns here rewrite each idiom into the one form the MoE detectors match,
// only where the two are provably equal element for element, so that a new
// exporter needs a pattern rather than a matcher.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace moec {
#define GEN_PASS_DEF_MOECANONICALIZEIDIOMS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// A 1-D i64 constant holding `values`.
Value createI64Vector(PatternRewriter &rewriter, Location loc,
                      ArrayRef<int64_t> values) {
  auto type = RankedTensorType::get({static_cast<int64_t>(values.size())},
                                    rewriter.getI64Type());
  return moe::ConstantOp::create(rewriter, loc,
                                 moe::getI64Elements(type, values));
}

/// `gather_nd(data, indices)` with `batch_dims = 0` and a trailing index
/// dimension of size 1 indexes dimension 0 of `data` with every element of
/// `indices[..., 0]` (negative entries counting from the back in both ops):
/// it is `gather(data, squeeze(indices, -1), axis = 0)`. An index that was
/// `unsqueeze(x, -1)` is `x` itself.
struct GatherNDToGather : public OpRewritePattern<moe::GatherNDOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::GatherNDOp op,
                                PatternRewriter &rewriter) const override {
    auto indicesType = dyn_cast<RankedTensorType>(op.getIndices().getType());
    if (op.getBatchDims() != 0 || !indicesType || indicesType.getRank() < 1 ||
        indicesType.getShape().back() != 1)
      return rewriter.notifyMatchFailure(op, "not a one-dimensional index");
    int64_t last = indicesType.getRank() - 1;
    // The gather's result type: the indices' leading dimensions, then the
    // data's after the first; the same as the GatherND's, or no rewrite.
    auto dataType = dyn_cast<RankedTensorType>(op.getData().getType());
    if (!dataType || dataType.getRank() < 1)
      return rewriter.notifyMatchFailure(op, "unranked or scalar data");
    SmallVector<int64_t> shape(indicesType.getShape().drop_back());
    llvm::append_range(shape, dataType.getShape().drop_front());
    if (RankedTensorType::get(shape, dataType.getElementType()) != op.getType())
      return rewriter.notifyMatchFailure(op, "the gather's type differs");
    Value indices;
    if (auto unsqueeze = op.getIndices().getDefiningOp<moe::UnsqueezeOp>()) {
      std::optional<SmallVector<int64_t>> axes =
          unsqueeze.getAxes() ? moe::getConstantInts(unsqueeze.getAxes())
                              : std::nullopt;
      if (axes && axes->size() == 1 && ((*axes)[0] == -1 || (*axes)[0] == last))
        indices = unsqueeze.getData();
    }
    if (!indices)
      indices = moe::SqueezeOp::create(
          rewriter, op.getLoc(), op.getIndices(),
          createI64Vector(rewriter, op.getLoc(), {last}));
    auto gather = moe::GatherOp::create(rewriter, op.getLoc(), op.getData(),
                                        indices, rewriter.getI64IntegerAttr(0));
    rewriter.replaceOp(op, gather.getOutput());
    return success();
  }
};

/// `expand(x, shape)` with a constant `shape` of x's rank, where each
/// dimension either keeps x's size (shape 1, or equal to a static size) or
/// broadcasts a static size 1 to `shape[i] >= 1`, is `tile(x, repeats)` with
/// `repeats[i] = shape[i]` on the broadcast dimensions and 1 elsewhere.
/// A dynamic dimension of x is kept only where `shape` says 1: elsewhere its
/// size at run time decides between keeping and broadcasting.
struct ExpandToTile : public OpRewritePattern<moe::ExpandOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::ExpandOp op,
                                PatternRewriter &rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(op.getInput().getType());
    std::optional<SmallVector<int64_t>> shape =
        moe::getConstantInts(op.getShape());
    if (!type || !shape ||
        static_cast<int64_t>(shape->size()) != type.getRank())
      return rewriter.notifyMatchFailure(op, "not a same-rank constant shape");
    SmallVector<int64_t> repeats, result;
    for (auto [size, target] : llvm::zip(type.getShape(), *shape)) {
      if (target == 1 || (!ShapedType::isDynamic(size) && size == target))
        repeats.push_back(1);
      else if (size == 1 && target >= 1)
        repeats.push_back(target);
      else
        return rewriter.notifyMatchFailure(op, "a dimension may broadcast");
      result.push_back(ShapedType::isDynamic(size) ? size
                                                   : size * repeats.back());
    }
    if (type.clone(result) != op.getType())
      return rewriter.notifyMatchFailure(op, "the tile's type differs");
    auto tile =
        moe::TileOp::create(rewriter, op.getLoc(), op.getInput(),
                            createI64Vector(rewriter, op.getLoc(), repeats));
    rewriter.replaceOp(op, tile.getOutput());
    return success();
  }
};

/// `squeeze(unsqueeze(x, axes), axes)` is `x` (dynamo writes such pairs
/// around batched products): the squeeze removes exactly the size-1
/// dimensions the unsqueeze inserted.
struct SqueezeOfUnsqueeze : public OpRewritePattern<moe::SqueezeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::SqueezeOp op,
                                PatternRewriter &rewriter) const override {
    auto unsqueeze = op.getData().getDefiningOp<moe::UnsqueezeOp>();
    if (!unsqueeze || !op.getAxes() || !unsqueeze.getAxes() ||
        unsqueeze.getData().getType() != op.getType())
      return rewriter.notifyMatchFailure(op, "not a squeezed unsqueeze");
    std::optional<SmallVector<int64_t>> removed =
        moe::getConstantInts(op.getAxes());
    std::optional<SmallVector<int64_t>> inserted =
        moe::getConstantInts(unsqueeze.getAxes());
    int64_t rank = cast<RankedTensorType>(op.getData().getType()).getRank();
    auto normalize = [&](SmallVector<int64_t> axes) {
      for (int64_t &axis : axes)
        axis = axis < 0 ? axis + rank : axis;
      llvm::sort(axes);
      return axes;
    };
    if (!removed || !inserted || normalize(*removed) != normalize(*inserted))
      return rewriter.notifyMatchFailure(op, "different axes");
    rewriter.replaceOp(op, unsqueeze.getData());
    return success();
  }
};

/// `reshape(y, [T, k, H]) * unsqueeze(w, 2)`, the routing weights `w`
/// (`[T, k]`) applied after the expert rows `y` (`[T*k, H]`, row `t*k + j`
/// for choice j of token t) are viewed per token, is
/// `reshape(y * unsqueeze(reshape(w, [-1]), 1), [T, k, H])`, the weights
/// applied per row first as transformers' stacked form does: the reshapes
/// are row-major, so both give `y[t*k + j, h] * w[t, j]` at `[t, j, h]`.
/// Static row counts must agree; dynamic ones are the same tokens, which
/// the detected layer's dispatch and combine check at run time.
struct WeightsAfterReshapeToRows : public OpRewritePattern<moe::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::MulOp op,
                                PatternRewriter &rewriter) const override {
    for (auto [lhs, rhs] : {std::pair(op.getLhs(), op.getRhs()),
                            std::pair(op.getRhs(), op.getLhs())}) {
      auto perToken = lhs.getDefiningOp<moe::ReshapeOp>();
      auto column = rhs.getDefiningOp<moe::UnsqueezeOp>();
      std::optional<SmallVector<int64_t>> axes =
          column && column.getAxes() ? moe::getConstantInts(column.getAxes())
                                     : std::nullopt;
      // Axis 2 of the rank-3 result, also written as -1.
      if (!perToken || !axes || axes->size() != 1 ||
          ((*axes)[0] != 2 && (*axes)[0] != -1))
        continue;
      Value rows = perToken.getData(), weights = column.getData();
      auto rowsType = dyn_cast<RankedTensorType>(rows.getType());
      auto viewType = cast<RankedTensorType>(perToken.getType());
      auto weightsType = dyn_cast<RankedTensorType>(weights.getType());
      if (!rowsType || !weightsType || rowsType.getRank() != 2 ||
          viewType.getRank() != 3 || weightsType.getRank() != 2 ||
          viewType.isDynamicDim(1) || viewType.isDynamicDim(2) ||
          viewType.getDimSize(1) != weightsType.getDimSize(1) ||
          viewType.getDimSize(2) != rowsType.getDimSize(1) ||
          rowsType.getElementType() != weightsType.getElementType() ||
          op.getType() != viewType)
        continue;
      if (!viewType.isDynamicDim(0) && !weightsType.isDynamicDim(0) &&
          viewType.getDimSize(0) != weightsType.getDimSize(0))
        continue;
      Location loc = op.getLoc();
      Value flat = moe::ReshapeOp::create(rewriter, loc, weights,
                                          createI64Vector(rewriter, loc, {-1}),
                                          rewriter.getI64IntegerAttr(0));
      Value perRow = moe::UnsqueezeOp::create(
          rewriter, loc, flat, createI64Vector(rewriter, loc, {1}));
      Value scaled = moe::MulOp::create(rewriter, loc, rowsType, rows, perRow);
      rewriter.replaceOpWithNewOp<moe::ReshapeOp>(op, viewType, scaled,
                                                  perToken.getShape(),
                                                  perToken.getAllowzeroAttr());
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not weights after the view");
  }
};

struct CanonicalizeIdiomsPass
    : public moec::impl::MoeCanonicalizeIdiomsBase<CanonicalizeIdiomsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<GatherNDToGather, ExpandToTile, SqueezeOfUnsqueeze,
                 WeightsAfterReshapeToRows>(&getContext());
    GreedyRewriteConfig config;
    // Only the matched ops change; constants are not folded or moved here.
    config.enableFolding(false);
    // Not converging within the driver's limits leaves a correct graph.
    (void)applyPatternsGreedily(getOperation(), std::move(patterns), config);
  }
};

} // namespace
