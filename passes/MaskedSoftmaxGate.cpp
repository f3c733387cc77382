//===- MaskedSoftmaxGate.cpp - softmax over top-k logits scattered in -inf
//-===//
//
// makeMoE's gate (a widely copied tutorial) scatters the top-k logits into a
// tensor of -inf and takes the softmax over every expert. Its rewrite here
// into the routing matrix form, the softmax of the k logits scattered into
// zeros, is the `[T, E]` matrix that the dense detector and the
// routing-column rewrite prove (passes/RoutingMatrix.cpp), and its weights
// are moe.router's `softmax after_topk`.
//
//===----------------------------------------------------------------------===//

#include "passes/RoutingMatrix.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "passes/MatchSupport.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace moec;

namespace {

/// `softmax(scatter_elements(full(-inf), ids, v))` along the last axis, with
/// `ids` the indices of a top-k along that axis and k <= 2, becomes
/// `scatter_elements(zeros, ids, softmax(v))`.
///
/// Top-k indices are distinct within a row, so the scattered row holds the k
/// values of v at their experts and -inf elsewhere. When v has a finite value
/// and no +inf or NaN (finite logits), the row's maximum is v's, each -inf
/// entry's exponential is exactly 0 (also in moe-run, whose Softmax gives
/// -inf entries 0 when the row has a finite entry), and the sum of the
/// exponentials is that of v's k terms plus zeros. With k <= 2 that sum is
/// the same in any order (a + b = b + a, and adding 0 is exact), so every
/// element equals the softmax of v's row at its expert and 0 elsewhere. With
/// k > 2 the order of the sum over E would differ from the one over k, and
/// the rewrite is refused.
struct ScatteredTopKSoftmaxToRoutingMatrix
    : public OpRewritePattern<moe::SoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::SoftmaxOp softmax,
                                PatternRewriter &rewriter) const override {
    auto scatter = softmax.getInput().getDefiningOp<moe::ScatterElementsOp>();
    if (!scatter || scatter.getReduction() != "none")
      return rewriter.notifyMatchFailure(softmax, "not over a scatter");
    auto type = dyn_cast<RankedTensorType>(softmax.getType());
    if (!type || !type.getElementType().isF32())
      return rewriter.notifyMatchFailure(softmax, "not an f32 tensor");
    int64_t rank = type.getRank();
    auto topK = scatter.getIndices().getDefiningOp<moe::TopKOp>();
    if (!topK || topK.getIndices() != scatter.getIndices() ||
        getShape(topK.getInput()).size() != static_cast<size_t>(rank) ||
        !isAxis(softmax.getAxis(), rank - 1, rank) ||
        !isAxis(scatter.getAxis(), rank - 1, rank) ||
        !isAxis(topK.getAxis(), rank - 1, rank))
      return rewriter.notifyMatchFailure(
          softmax, "not top-k indices scattered along the softmax's axis");
    ArrayRef<int64_t> ids = getShape(topK.getIndices());
    Value values = scatter.getUpdates();
    if (ids.empty() || ShapedType::isDynamic(ids.back()) || ids.back() > 2 ||
        values.getType() != topK.getValues().getType())
      return rewriter.notifyMatchFailure(
          softmax, "not k <= 2 f32 values at the top-k's indices");
    Value data = scatter.getData();
    Value shape;
    std::optional<APFloat> fill = getFillValue(data, &shape);
    if (!fill || !fill->isInfinity() || !fill->isNegative())
      return rewriter.notifyMatchFailure(softmax, "not scattered into -inf");

    Location loc = softmax.getLoc();
    Value weights =
        moe::SoftmaxOp::create(rewriter, loc, values.getType(), values,
                               rewriter.getI64IntegerAttr(-1));
    // The zeros take the fill's shape operand, so that the fill dies; the
    // expand of a one-element constant of lower rank has that shape too.
    auto expand = data.getDefiningOp<moe::ExpandOp>();
    auto scalar = expand
                      ? dyn_cast<RankedTensorType>(expand.getInput().getType())
                      : RankedTensorType();
    if (!shape || (expand && (!scalar || scalar.getNumElements() != 1 ||
                              scalar.getRank() > rank)))
      shape = moe::ShapeOp::create(rewriter, loc, data,
                                   rewriter.getI64IntegerAttr(0),
                                   /*end=*/nullptr);
    auto f32 = RankedTensorType::get({1}, rewriter.getF32Type());
    Value zeros = moe::ConstantOfShapeOp::create(
        rewriter, loc, data.getType(), shape,
        DenseElementsAttr::get(f32, rewriter.getF32FloatAttr(0.0f)));
    rewriter.replaceOpWithNewOp<moe::ScatterElementsOp>(
        softmax, softmax.getType(), zeros, scatter.getIndices(), weights,
        scatter.getAxisAttr(), scatter.getReductionAttr());
    return success();
  }
};

} // namespace

void moec::populateMaskedSoftmaxGatePatterns(RewritePatternSet &patterns) {
  patterns.add<ScatteredTopKSoftmaxToRoutingMatrix>(patterns.getContext());
}
