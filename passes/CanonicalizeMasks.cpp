//===- CanonicalizeMasks.cpp - expert rows found through boolean masks ----===//
//
// makeMoE (a widely copied tutorial) finds expert e's rows as the tokens of
// `(ids == e).any(-1)`, a mask over tokens, where Mistral's reference code
// takes the token column of `torch.where(ids == e)`. The rewrite here brings
// the first onto the second, the form moe-detect-experts proves.
//
//===----------------------------------------------------------------------===//

#include "passes/RoutingMatrix.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "passes/MatchGates.h"
#include "passes/MatchSupport.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace moec;

namespace {

/// The 2-D boolean `[T, k]` mask whose any-reduction over k the 1-D boolean
/// `any` is: `reduce_sum(cast<i64>(b), [1]) > 0` (TorchScript) or
/// `cast<i1>(reduce_max(cast<i64>(b), [1]))` (dynamo), keepdims 0. Null
/// otherwise.
Value matchAnyOverSlots(Value any) {
  Value reduced;
  if (auto greater = any.getDefiningOp<moe::GreaterOp>()) {
    if (getShape(greater.getRhs()).size() > 1 ||
        moe::getConstantInt(greater.getRhs()) != 0)
      return nullptr;
    auto sum = greater.getLhs().getDefiningOp<moe::ReduceSumOp>();
    reduced = sum && sum.getKeepdims() == 0 && sum.getAxes() &&
                      isConstAxes(sum.getAxes(), {1}, 2)
                  ? sum.getData()
                  : Value();
  } else if (auto toBool = any.getDefiningOp<moe::CastOp>()) {
    auto max = toBool.getInput().getDefiningOp<moe::ReduceMaxOp>();
    reduced = max && max.getKeepdims() == 0 && max.getAxes() &&
                      isConstAxes(max.getAxes(), {1}, 2)
                  ? max.getData()
                  : Value();
  }
  // The reduced counts: the mask cast to i64 (0 or 1 per slot).
  auto counts = reduced ? reduced.getDefiningOp<moe::CastOp>() : nullptr;
  auto intType = counts ? dyn_cast<RankedTensorType>(counts.getType())
                        : RankedTensorType();
  auto anyType = dyn_cast<RankedTensorType>(any.getType());
  if (!intType || !intType.getElementType().isInteger(64) || !anyType ||
      !anyType.getElementType().isInteger(1))
    return nullptr;
  Value mask = counts.getInput();
  auto maskType = dyn_cast<RankedTensorType>(mask.getType());
  if (!maskType || maskType.getRank() != 2 ||
      !maskType.getElementType().isInteger(1))
    return nullptr;
  return mask;
}

/// The top-k and expert e of a `[T, k]` expert mask: `ids == e` or
/// `cast<i1>(transpose(one_hot(ids, E), [2, 0, 1])[e])`, with ids the indices
/// of the top-k. Null when `mask` is neither.
std::optional<std::pair<moe::TopKOp, int64_t>> matchExpertMask(Value mask) {
  Value ids;
  std::optional<int64_t> expert;
  if (auto equal = mask.getDefiningOp<moe::EqualOp>()) {
    ids = equal.getLhs();
    if (getShape(equal.getRhs()).empty())
      expert = moe::getConstantInt(equal.getRhs());
  } else if (auto cast = mask.getDefiningOp<moe::CastOp>()) {
    auto gather = cast.getInput().getDefiningOp<moe::GatherOp>();
    auto transpose =
        gather ? gather.getData().getDefiningOp<moe::TransposeOp>() : nullptr;
    auto oneHot = transpose ? transpose.getData().getDefiningOp<moe::OneHotOp>()
                            : nullptr;
    if (oneHot && gather.getAxis() == 0 &&
        getShape(gather.getIndices()).empty() && transpose.getPerm() &&
        *transpose.getPerm() == ArrayRef<int64_t>{2, 0, 1}) {
      ids = oneHot.getIndices();
      expert = moe::getConstantInt(gather.getIndices());
    }
  }
  auto topK = ids ? ids.getDefiningOp<moe::TopKOp>() : nullptr;
  if (!topK || !expert || !hasOneTruePerRow(mask))
    return std::nullopt;
  return std::make_pair(topK, *expert);
}

/// Expert e's rows as makeMoE finds them, `transpose(nonzero(any(b, 1)))`
/// (`[N, 1]`) for a `[T, k]` mask b with at most one true entry per row
/// (`ids == e` or the one-hot mask's slice e, hasOneTruePerRow), become the
/// token column `slice(transpose(nonzero(b)), [0, 1), axis 1)` of b's
/// (token, slot) pairs, squeezed and unsqueezed again.
///
/// nonzero(b) lists the pairs in row-major order, so its tokens ascend, and
/// with at most one true entry per row each token of a row with a true entry
/// appears exactly once: the token column is the ascending list of the rows
/// where any(b) is true, which is nonzero(any(b)). Equal element for element.
struct AnySlotRowsToTokenColumn : public OpRewritePattern<moe::TransposeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::TransposeOp transpose,
                                PatternRewriter &rewriter) const override {
    auto nonZero = transpose.getData().getDefiningOp<moe::NonZeroOp>();
    if (!nonZero || !transpose.getPerm() ||
        *transpose.getPerm() != ArrayRef<int64_t>{1, 0} ||
        getShape(nonZero.getX()).size() != 1)
      return rewriter.notifyMatchFailure(transpose, "not 1-D nonzero rows");
    Value mask = matchAnyOverSlots(nonZero.getX());
    if (!mask || !matchExpertMask(mask))
      return rewriter.notifyMatchFailure(
          transpose, "not the any over k of a mask with one true per row");
    ArrayRef<int64_t> rows = getShape(transpose.getOutput());
    if (rows.size() != 2 || rows[1] != 1)
      return rewriter.notifyMatchFailure(transpose, "not [N, 1] rows");
    Location loc = transpose.getLoc();
    auto pairs = moe::TransposeOp::create(
        rewriter, loc, moe::NonZeroOp::create(rewriter, loc, mask).getOutput(),
        rewriter.getDenseI64ArrayAttr({1, 0}));
    Value axis = createI64Constant(rewriter, loc, {1}, {1});
    Value start = createI64Constant(rewriter, loc, {1}, {0});
    auto column = moe::SliceOp::create(rewriter, loc, pairs, start,
                                       /*ends=*/axis, axis, /*steps=*/Value());
    // As `token[:, None]` of the squeezed column, the vector the detector
    // follows (Mistral's `out[token] += ...`).
    auto token =
        moe::SqueezeOp::create(rewriter, loc, column.getOutput(), axis);
    auto rowsColumn =
        moe::UnsqueezeOp::create(rewriter, loc, token.getOutput(), axis);
    if (rowsColumn.getType() != transpose.getType())
      return rewriter.notifyMatchFailure(transpose,
                                         "the column's type differs");
    // The rows squeezed again (dynamo's `rows.squeeze(1)`) are the token
    // vector itself.
    for (Operation *user :
         llvm::make_early_inc_range(transpose.getOutput().getUsers()))
      if (auto squeeze = dyn_cast<moe::SqueezeOp>(user);
          squeeze && squeeze.getAxes() &&
          isConstAxes(squeeze.getAxes(), {1}, 2) &&
          squeeze.getType() == token.getType())
        rewriter.replaceOp(squeeze, token.getOutput());
    rewriter.replaceOp(transpose, rowsColumn.getOutput());
    return success();
  }
};

/// Expert e's weights as makeMoE reads them, `R[:, e]` of a routing matrix R
/// (the top-k weights w scattered into zeros) at the token column of
/// nonzero(b)'s pairs, with b the mask of the same top-k and e, become
/// `w[token, slot]` at the pairs themselves.
///
/// R[t, e] = w[t, j] for the slot j with ids[t, j] = e, and the pairs of b
/// are exactly those (t, j): equal element for element.
struct RoutingColumnAtTokensToSlotWeights
    : public OpRewritePattern<moe::GatherNDOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::GatherNDOp read,
                                PatternRewriter &rewriter) const override {
    auto column = read.getData().getDefiningOp<moe::GatherOp>();
    std::optional<int64_t> expert =
        column && getShape(column.getIndices()).empty()
            ? moe::getConstantInt(column.getIndices())
            : std::nullopt;
    std::optional<RoutingMatrix> matrix =
        column ? matchRoutingMatrix(column.getData()) : std::nullopt;
    if (!matrix || !expert || !isAxis(column.getAxis(), 1, 2) ||
        read.getBatchDims() != 0)
      return rewriter.notifyMatchFailure(read, "not a routing column read");
    // The indices: token[:, None], token the squeezed first column of the
    // pairs transpose(nonzero(b)).
    auto unsqueeze = read.getIndices().getDefiningOp<moe::UnsqueezeOp>();
    auto token = unsqueeze && isConstAxes(unsqueeze.getAxes(), {1}, 2)
                     ? unsqueeze.getData().getDefiningOp<moe::SqueezeOp>()
                     : moe::SqueezeOp();
    auto slice =
        token && token.getAxes() && isConstAxes(token.getAxes(), {1}, 2)
            ? token.getData().getDefiningOp<moe::SliceOp>()
            : moe::SliceOp();
    if (!slice || !slice.getAxes() || !isConstAxes(slice.getAxes(), {1}, 2) ||
        moe::getConstantInt(slice.getStarts()) != 0 ||
        moe::getConstantInt(slice.getEnds()) != 1 ||
        (slice.getSteps() && moe::getConstantInt(slice.getSteps()) != 1))
      return rewriter.notifyMatchFailure(read, "not at a token column");
    auto pairs = slice.getData().getDefiningOp<moe::TransposeOp>();
    auto nonZero =
        pairs ? pairs.getData().getDefiningOp<moe::NonZeroOp>() : nullptr;
    if (!nonZero || !pairs.getPerm() ||
        *pairs.getPerm() != ArrayRef<int64_t>{1, 0} ||
        getShape(nonZero.getX()).size() != 2)
      return rewriter.notifyMatchFailure(read, "not the pairs of a mask");
    auto mask = matchExpertMask(nonZero.getX());
    if (!mask || mask->first != matrix->topK || mask->second != *expert)
      return rewriter.notifyMatchFailure(
          read, "not the mask of the matrix's top-k and expert");
    if (read.getType() !=
        RankedTensorType::get({ShapedType::kDynamic},
                              getElementTypeOrSelf(matrix->weights.getType())))
      return rewriter.notifyMatchFailure(read, "the weights' type differs");

    Location loc = read.getLoc();
    Value axis = createI64Constant(rewriter, loc, {1}, {1});
    Value start = createI64Constant(rewriter, loc, {1}, {1});
    Value end = createI64Constant(rewriter, loc, {1}, {2});
    auto slotColumn = moe::SliceOp::create(rewriter, loc, pairs.getOutput(),
                                           start, end, axis, /*steps=*/Value());
    auto slot =
        moe::SqueezeOp::create(rewriter, loc, slotColumn.getOutput(), axis);
    Value at = moe::ConcatOp::create(
        rewriter, loc,
        ValueRange{unsqueeze.getOutput(),
                   moe::UnsqueezeOp::create(rewriter, loc, slot, axis)},
        rewriter.getI64IntegerAttr(1));
    rewriter.replaceOpWithNewOp<moe::GatherNDOp>(read, read.getType(),
                                                 matrix->weights, at,
                                                 rewriter.getI64IntegerAttr(0));
    return success();
  }
};

} // namespace

void moec::populateExpertMaskRowPatterns(RewritePatternSet &patterns) {
  patterns.add<AnySlotRowsToTokenColumn, RoutingColumnAtTokensToSlotWeights>(
      patterns.getContext());
}
