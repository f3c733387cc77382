//===- RoutingMatrix.cpp - [T, E] routing matrices and expert masks -------===//
//
// The routing matrix of dense-masked MoE code, the one-hot expert mask of
// loop code, and the rewrite of a loop that finds an expert's rows in the
// matrix's column (V-MoE) into the mask form moe-detect-experts proves.
//
//===----------------------------------------------------------------------===//

#include "passes/RoutingMatrix.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "passes/MatchGates.h"
#include "passes/MatchSupport.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace moec;

std::optional<APFloat> moec::getFillValue(Value data, Value *shapeValue) {
  DenseFPElementsAttr fill;
  Value shape;
  if (auto filled = data.getDefiningOp<moe::ConstantOfShapeOp>()) {
    shape = filled.getInput();
    if (filled.getValue())
      fill = dyn_cast<DenseFPElementsAttr>(*filled.getValue());
  } else if (auto expand = data.getDefiningOp<moe::ExpandOp>()) {
    shape = expand.getShape();
    if (auto constant = expand.getInput().getDefiningOp<moe::ConstantOp>())
      fill = dyn_cast<DenseFPElementsAttr>(constant.getValue());
  } else if (auto constant = data.getDefiningOp<moe::ConstantOp>()) {
    fill = dyn_cast<DenseFPElementsAttr>(constant.getValue());
  }
  if (!fill || !fill.isSplat())
    return std::nullopt;
  if (shapeValue)
    *shapeValue = shape;
  return fill.getSplatValue<APFloat>();
}

bool moec::isZerosLike(Value data, Value scores) {
  Value shapeValue;
  std::optional<APFloat> fill = getFillValue(data, &shapeValue);
  if (!fill || !fill->isZero())
    return false;
  auto shape =
      shapeValue ? shapeValue.getDefiningOp<moe::ShapeOp>() : moe::ShapeOp();
  // The shape of the scores, or of a value of the same shape (makeMoE's
  // fill of the [B, T, E] logits' shape, flattened).
  return shape &&
         (shape.getData() == scores ||
          haveSameShape(shape.getData(), scores)) &&
         shape.getStart() == 0 &&
         (!shape.getEnd() || static_cast<int64_t>(*shape.getEnd()) == 2 ||
          static_cast<int64_t>(*shape.getEnd()) == -1);
}

std::optional<RoutingMatrix> moec::matchRoutingMatrix(Value matrix) {
  auto scatter = matrix.getDefiningOp<moe::ScatterElementsOp>();
  auto topK = scatter ? scatter.getIndices().getDefiningOp<moe::TopKOp>()
                      : moe::TopKOp();
  if (!topK || scatter.getIndices() != topK.getIndices() ||
      !isAxis(scatter.getAxis(), 1, 2) || scatter.getReduction() != "none")
    return std::nullopt;
  ArrayRef<int64_t> scores = getShape(topK.getInput());
  if (scores.size() != 2 || ShapedType::isDynamic(scores[1]) ||
      !isAxis(topK.getAxis(), 1, 2) ||
      !isZerosLike(scatter.getData(), topK.getInput()))
    return std::nullopt;
  return RoutingMatrix{topK, scatter.getUpdates(), scores[1]};
}

Value moec::getTopKExpertMask(PatternRewriter &rewriter, moe::TopKOp topK,
                              int64_t experts) {
  Value ids = topK.getIndices();
  for (Operation *user : ids.getUsers()) {
    auto oneHot = dyn_cast<moe::OneHotOp>(user);
    if (!oneHot || !isAxis(oneHot.getAxis(), 2, 3) ||
        moe::getConstantInt(oneHot.getDepth()) != experts ||
        moe::getConstantInts(oneHot.getValues()) != SmallVector<int64_t>{0, 1})
      continue;
    for (Operation *oneHotUser : oneHot.getOutput().getUsers())
      if (auto transpose = dyn_cast<moe::TransposeOp>(oneHotUser);
          transpose && transpose.getPerm() &&
          *transpose.getPerm() == ArrayRef<int64_t>{2, 0, 1})
        return transpose.getOutput();
  }
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointAfter(topK);
  Location loc = topK.getLoc();
  Value depth = createI64Constant(rewriter, loc, {}, {experts});
  Value values = createI64Constant(rewriter, loc, {2}, {0, 1});
  auto oneHot = moe::OneHotOp::create(rewriter, loc, ids, depth, values,
                                      rewriter.getI64IntegerAttr(-1));
  auto transpose =
      moe::TransposeOp::create(rewriter, loc, oneHot.getOutput(),
                               rewriter.getDenseI64ArrayAttr({2, 0, 1}));
  return transpose.getOutput();
}

bool moec::hasOneTruePerRow(Value mask) {
  if (auto cast = mask.getDefiningOp<moe::CastOp>())
    mask = cast.getInput();
  auto isTopKIndices = [](Value ids) {
    auto topK = ids.getDefiningOp<moe::TopKOp>();
    return topK && ids == topK.getIndices() && getShape(ids).size() == 2 &&
           isAxis(topK.getAxis(), 1, 2);
  };
  if (auto equal = mask.getDefiningOp<moe::EqualOp>())
    return (isTopKIndices(equal.getLhs()) &&
            getShape(equal.getRhs()).size() <= 1 &&
            moe::getConstantInt(equal.getRhs())) ||
           (isTopKIndices(equal.getRhs()) &&
            getShape(equal.getLhs()).size() <= 1 &&
            moe::getConstantInt(equal.getLhs()));
  auto gather = mask.getDefiningOp<moe::GatherOp>();
  auto transpose =
      gather ? gather.getData().getDefiningOp<moe::TransposeOp>() : nullptr;
  auto oneHot =
      transpose ? transpose.getData().getDefiningOp<moe::OneHotOp>() : nullptr;
  return oneHot && gather.getAxis() == 0 &&
         moe::getConstantInt(gather.getIndices()) && transpose.getPerm() &&
         *transpose.getPerm() == ArrayRef<int64_t>{2, 0, 1} &&
         isAxis(oneHot.getAxis(), 2, 3) &&
         moe::getConstantInts(oneHot.getValues()) ==
             SmallVector<int64_t>{0, 1} &&
         isTopKIndices(oneHot.getIndices());
}

namespace {

/// A loop over the columns of a routing matrix R (V-MoE's torch port):
/// expert e's rows are `squeeze(transpose(nonzero(R[:, e])), 1)` and its
/// weights `R[rows, e]` (a gather of the column, or dynamo's gather_nd at
/// `rows[:, None]`). They become the token column of the (token, slot) pairs
/// `transpose(nonzero(mask[e]))` of the top-k's `[E, T, k]` one-hot mask
/// and `gather_nd(w, [token, slot])`, the form moe-detect-experts proves.
///
/// The pairs hold every token routed to e in token order (a token has at
/// most one slot per expert); `nonzero(R[:, e])` holds those of them whose
/// weight is not exactly zero, also in token order, and R[t, e] is the
/// weight w[t, j] of the slot j with ids[t, j] = e. So the rewritten loop
/// also runs the zero-weight rows and adds `0 * y = 0` for them: the same
/// sums for finite expert outputs (a NaN or infinite output at a zero
/// weight, which the column skipped, would now reach the sum, as in every
/// sparse engine).
struct RoutingColumnRowsToMaskPairs : public OpRewritePattern<moe::NonZeroOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::NonZeroOp nonZero,
                                PatternRewriter &rewriter) const override {
    auto column = nonZero.getX().getDefiningOp<moe::GatherOp>();
    std::optional<int64_t> expert =
        column ? moe::getConstantInt(column.getIndices()) : std::nullopt;
    std::optional<RoutingMatrix> matrix =
        column ? matchRoutingMatrix(column.getData()) : std::nullopt;
    if (!matrix || !expert || !isAxis(column.getAxis(), 1, 2) ||
        !getShape(column.getIndices()).empty() || *expert < 0 ||
        *expert >= matrix->numExperts)
      return rewriter.notifyMatchFailure(nonZero, "not a routing column");
    // rows = squeeze(transpose(nonzero(column)), 1), the only uses.
    auto transpose =
        nonZero.getOutput().hasOneUse()
            ? dyn_cast<moe::TransposeOp>(*nonZero.getOutput().user_begin())
            : moe::TransposeOp();
    auto squeeze =
        transpose && transpose.getPerm() &&
                *transpose.getPerm() == ArrayRef<int64_t>{1, 0} &&
                transpose.getOutput().hasOneUse()
            ? dyn_cast<moe::SqueezeOp>(*transpose.getOutput().user_begin())
            : moe::SqueezeOp();
    if (!squeeze || !squeeze.getAxes() ||
        !isConstAxes(squeeze.getAxes(), {1}, 2))
      return rewriter.notifyMatchFailure(nonZero, "not the column's rows");
    Value rows = squeeze.getOutput();
    // Every other use of the column reads the weights at the rows.
    SmallVector<Operation *> weightReads;
    for (Operation *user : column.getOutput().getUsers()) {
      if (user == nonZero)
        continue;
      if (auto gather = dyn_cast<moe::GatherOp>(user);
          gather && gather.getIndices() == rows && gather.getAxis() == 0) {
        weightReads.push_back(user);
        continue;
      }
      auto gatherNd = dyn_cast<moe::GatherNDOp>(user);
      auto unsqueeze =
          gatherNd ? gatherNd.getIndices().getDefiningOp<moe::UnsqueezeOp>()
                   : moe::UnsqueezeOp();
      if (!unsqueeze || unsqueeze.getData() != rows ||
          gatherNd.getBatchDims() != 0 ||
          !isConstAxes(unsqueeze.getAxes(), {1}, 2))
        return rewriter.notifyMatchFailure(
            nonZero, "the column is used other than at its rows");
      weightReads.push_back(user);
    }

    // The rewrite's rows and weights have a dynamic count, as theirs.
    auto weightType =
        RankedTensorType::get({ShapedType::kDynamic},
                              getElementTypeOrSelf(matrix->weights.getType()));
    if (rows.getType() != RankedTensorType::get({ShapedType::kDynamic},
                                                rewriter.getI64Type()) ||
        llvm::any_of(weightReads, [&](Operation *read) {
          return read->getResult(0).getType() != weightType;
        }))
      return rewriter.notifyMatchFailure(nonZero, "the rows or weights have "
                                                  "another type");

    Location loc = nonZero.getLoc();
    Value mask = getTopKExpertMask(rewriter, matrix->topK, matrix->numExperts);
    auto index = createI64Constant(rewriter, loc, {}, {*expert});
    auto selected = moe::GatherOp::create(rewriter, loc, mask, index,
                                          rewriter.getI64IntegerAttr(0));
    auto hits = moe::CastOp::create(rewriter, loc, selected.getOutput(),
                                    TypeAttr::get(rewriter.getI1Type()));
    auto pairs = moe::TransposeOp::create(
        rewriter, loc, moe::NonZeroOp::create(rewriter, loc, hits).getOutput(),
        rewriter.getDenseI64ArrayAttr({1, 0}));
    Value axis = createI64Constant(rewriter, loc, {1}, {1});
    auto pairColumn = [&](int64_t column) -> Value {
      Value start = createI64Constant(rewriter, loc, {1}, {column});
      Value end = createI64Constant(rewriter, loc, {1}, {column + 1});
      auto slice = moe::SliceOp::create(rewriter, loc, pairs, start, end, axis,
                                        /*steps=*/Value());
      return moe::SqueezeOp::create(rewriter, loc, slice.getOutput(), axis);
    };
    Value token = pairColumn(0), slot = pairColumn(1);
    Value at = moe::ConcatOp::create(
        rewriter, loc,
        ValueRange{moe::UnsqueezeOp::create(rewriter, loc, token, axis),
                   moe::UnsqueezeOp::create(rewriter, loc, slot, axis)},
        rewriter.getI64IntegerAttr(1));
    Value weight = moe::GatherNDOp::create(rewriter, loc, matrix->weights, at,
                                           rewriter.getI64IntegerAttr(0));
    for (Operation *read : weightReads)
      rewriter.replaceOp(read, weight);
    rewriter.replaceAllUsesWith(rows, token);
    return success();
  }
};

} // namespace

void moec::populateRoutingColumnPatterns(RewritePatternSet &patterns) {
  patterns.add<RoutingColumnRowsToMaskPairs>(patterns.getContext());
}
