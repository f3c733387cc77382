//===- CanonicalizeGates.cpp - gate code idioms to the matched gates ------===//
//
// Gates written outside transformers compute moe.router's semantics in
// other ops. DeepSeek-V3's own inference code reshapes the choice scores to
// `[T, n, E / n]` with the token count read from the tokens' shape, and
// drops the groups not kept with `masked_fill(-inf)` of a `[T, n, 1]` mask
// (ones with zeros scattered at the kept groups), where transformers
// repeats a mask of the kept groups over the experts of `[T, E]`. The
// patterns here rewrite each idiom into the form passes/MatchGates.cpp
// proves, only where the two are equal element for element.
//
//===----------------------------------------------------------------------===//

#include "passes/MatchGates.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchSupport.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace moec;

namespace {

/// An f32 scalar constant holding `value`.
Value createF32Scalar(PatternRewriter &rewriter, Location loc, float value) {
  auto type = RankedTensorType::get({}, rewriter.getF32Type());
  return moe::ConstantOp::create(rewriter, loc,
                                 DenseElementsAttr::get(type, value));
}

/// The value whose rows `value` has, one for one: walks back through ops
/// whose result row i is computed from row i of one operand alone
/// (elementwise ops whose other operands have a lower rank or one row, so
/// that broadcasting never repeats rows; matmuls by a matrix; reshapes between
/// matrices of the same static width).
Value getRowSource(Value value) {
  while (Operation *op = value.getDefiningOp()) {
    int64_t rank = getShape(value).size();
    if (rank < 1)
      return value;
    Value next;
    if (auto matMul = dyn_cast<moe::MatMulOp>(op)) {
      if (getShape(matMul.getA()).size() == 2 &&
          getShape(matMul.getB()).size() == 2)
        next = matMul.getA();
    } else if (auto gemm = dyn_cast<moe::GemmOp>(op)) {
      if (!gemm.getTransA())
        next = gemm.getA();
    } else if (auto reshape = dyn_cast<moe::ReshapeOp>(op)) {
      ArrayRef<int64_t> from = getShape(reshape.getData());
      ArrayRef<int64_t> to = getShape(value);
      if (from.size() == 2 && to.size() == 2 &&
          !ShapedType::isDynamic(from[1]) && from[1] > 0 && from[1] == to[1])
        next = reshape.getData();
    } else if (isa<moe::SigmoidOp, moe::AddOp, moe::SubOp, moe::MulOp,
                   moe::DivOp>(op)) {
      // One operand of the result's rank, the others of lower rank or of
      // one row (`[1, E]`), which broadcast over its rows.
      for (Value operand : op->getOperands()) {
        ArrayRef<int64_t> shape = getShape(operand);
        int64_t operandRank = shape.size();
        if (!isa<RankedTensorType>(operand.getType()) || operandRank > rank)
          return value;
        if (operandRank < rank || shape[0] == 1)
          continue;
        if (next)
          return value;
        next = operand;
      }
    }
    if (!next)
      return value;
    value = next;
  }
  return value;
}

/// The tensor whose dimension `dim` `value` is: `dim(t, dim)` or
/// `shape(t, dim, dim + 1)`, through scalar reshapes; null otherwise.
Value getDimensionOf(Value value, int64_t dim) {
  value = stripScalarReshapes(value);
  if (auto dimOp = value.getDefiningOp<moe::DimOp>())
    return static_cast<int64_t>(dimOp.getIndex()) == dim ? dimOp.getInput()
                                                         : Value();
  auto shape = value.getDefiningOp<moe::ShapeOp>();
  if (!shape || static_cast<int64_t>(shape.getStart()) != dim ||
      !shape.getEnd() || static_cast<int64_t>(*shape.getEnd()) != dim + 1)
    return nullptr;
  return shape.getData();
}

/// Whether the one-element integer `count` is the number of rows of the
/// matrix `matrix`: the first dimension of a tensor of the same rows, or
/// `d0 * d1` of the `[d0, d1, H]` tensor the matrix was reshaped from to
/// `[d0 * d1, H]` (the tokens of `x.view(-1, H)`).
bool isRowCount(Value count, Value matrix) {
  Value rows = getRowSource(matrix);
  if (Value tensor = getDimensionOf(count, 0))
    return getRowSource(tensor) == rows;
  auto mul = stripScalarReshapes(count).getDefiningOp<moe::MulOp>();
  auto reshape = rows.getDefiningOp<moe::ReshapeOp>();
  if (!mul || !reshape)
    return false;
  Value source = reshape.getData();
  ArrayRef<int64_t> from = getShape(source);
  ArrayRef<int64_t> to = getShape(rows);
  if (from.size() != 3 || to.size() != 2 || ShapedType::isDynamic(from[2]) ||
      from[2] < 1 || from[2] != to[1])
    return false;
  return (getDimensionOf(mul.getLhs(), 0) == source &&
          getDimensionOf(mul.getRhs(), 1) == source) ||
         (getDimensionOf(mul.getLhs(), 1) == source &&
          getDimensionOf(mul.getRhs(), 0) == source);
}

/// `reshape(x, concat(rows(x), c..., -1))` (TorchScript's `x.view(x.size(0),
/// n, -1)`), with x of static trailing sizes and the row count proven
/// (isRowCount), is `reshape(x, [-1, c..., r])` with r the size -1 stands
/// for: both keep x's rows and give every other dimension the same size.
/// The constant shape lets shape inference give the result static trailing
/// sizes (the gate's `[T, n, E / n]`, and the `[T, E]` it is flattened
/// back to), which the gate matchers and the top-k over E need.
struct RowCountReshapeToConstant : public OpRewritePattern<moe::ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    Value data = op.getData();
    ArrayRef<int64_t> shape = getShape(data);
    auto concat = op.getShape().getDefiningOp<moe::ConcatOp>();
    if (shape.size() < 2 || !concat || concat.getNumOperands() < 2 ||
        moe::getConstantInts(op.getShape()))
      return rewriter.notifyMatchFailure(op, "not a reshape to a computed "
                                             "shape");
    int64_t trailing = 1;
    for (int64_t size : shape.drop_front()) {
      if (ShapedType::isDynamic(size) || size < 1)
        return rewriter.notifyMatchFailure(op, "trailing sizes not static");
      trailing *= size;
    }
    // Every piece after the row count is a constant, positive or -1.
    SmallVector<int64_t> target = {-1};
    int64_t known = 1, inferred = -1;
    for (Value piece : concat.getOperands().drop_front()) {
      std::optional<SmallVector<int64_t>> sizes = moe::getConstantInts(piece);
      if (!sizes)
        return rewriter.notifyMatchFailure(op, "a size is computed");
      for (int64_t size : *sizes) {
        if (size == -1 && inferred < 0) {
          inferred = target.size();
        } else if (size < 1) {
          return rewriter.notifyMatchFailure(op, "a size is 0 or a second -1");
        } else {
          known *= size;
        }
        target.push_back(size);
      }
    }
    if (getShape(concat.getOperands().front()) != ArrayRef<int64_t>{1} ||
        !isRowCount(concat.getOperands().front(), data))
      return rewriter.notifyMatchFailure(op, "the first size is not the "
                                             "rows of the data");
    if (inferred < 0 ? known != trailing : trailing % known != 0)
      return rewriter.notifyMatchFailure(op, "the sizes do not split the "
                                             "rows' elements");
    if (inferred >= 0)
      target[inferred] = trailing / known;
    Value constant = createI64Constant(
        rewriter, op.getLoc(), {static_cast<int64_t>(target.size())}, target);
    rewriter.modifyOpInPlace(op,
                             [&] { op.getShapeMutable().assign(constant); });
    return success();
  }
};

/// DeepSeek-V3's own group masking, with c the `[T, E]` choice scores, n
/// groups of g = E / n experts and `keep` the indices of the kept groups
/// (the top-m of the group scores `G`, `[T, n]`):
///
///   drop = cast<i1>(scatter_elements(ones[T, n], keep, zeros, axis 1))
///   flat(where(unsqueeze(drop, -1), fill, reshape(c, [-1, n, g])))
///
/// (`flat`: a flatten from axis 1, or a reshape to [-1, E]) becomes the
/// form transformers writes and matchGroupMask proves,
///
///   mask = scatter_elements(zeros(shape(G)), keep, ones, axis 1)
///   where(not(cast<i1>(reshape(expand(unsqueeze(mask, 2), [1, n, g]),
///                              [-1, E]))), fill, c)
///
/// Both give entry (t, i * g + r) the fill where group i of token t is not
/// kept and c[t, i * g + r] elsewhere. The ones have as many rows as G (the
/// tokens': isRowCount), so that the mask broadcasts over no extra rows.
struct GroupFillToExpertMask : public OpRewritePattern<moe::WhereOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::WhereOp where,
                                PatternRewriter &rewriter) const override {
    // S = reshape(c, [-1, n, g]), c an f32 [T, n * g] matrix.
    auto grouped = where.getY().getDefiningOp<moe::ReshapeOp>();
    std::optional<SmallVector<int64_t>> groupShape =
        grouped ? moe::getConstantInts(grouped.getShape()) : std::nullopt;
    if (!groupShape || groupShape->size() != 3 || (*groupShape)[0] != -1 ||
        (*groupShape)[1] < 1 || (*groupShape)[2] < 1)
      return rewriter.notifyMatchFailure(where, "not over [-1, n, g] groups");
    int64_t nGroup = (*groupShape)[1], groupSize = (*groupShape)[2];
    int64_t numExperts = nGroup * groupSize;
    Value choice = grouped.getData();
    if (!isMatrixWithCols(choice, numExperts) ||
        !getElementTypeOrSelf(choice.getType()).isF32() ||
        where.getType() != grouped.getType())
      return rewriter.notifyMatchFailure(where, "not [T, E] f32 scores");
    std::optional<SmallVector<float>> fill = getConstantFloats(where.getX(), 1);
    if (!fill || fill->size() != 1 || !getShape(where.getX()).empty())
      return rewriter.notifyMatchFailure(where, "the fill is not a scalar");

    // drop = cast<i1>(scatter_elements(ones, keep, zeros)), unsqueezed.
    auto unsqueeze = where.getCondition().getDefiningOp<moe::UnsqueezeOp>();
    auto toBool =
        unsqueeze ? unsqueeze.getData().getDefiningOp<moe::CastOp>() : nullptr;
    auto scatter =
        toBool ? toBool.getInput().getDefiningOp<moe::ScatterElementsOp>()
               : nullptr;
    if (!scatter || !isConstAxes(unsqueeze.getAxes(), {2}, 3) ||
        !toBool.getTo().isInteger(1) || !isAxis(scatter.getAxis(), 1, 2) ||
        scatter.getReduction() != "none" ||
        !isMatrixWithCols(scatter.getOutput(), nGroup))
      return rewriter.notifyMatchFailure(where, "not a mask of dropped "
                                                "groups");
    Value onesShape = getFillShape(scatter.getData(), 1.0f);
    auto groupTopK = scatter.getIndices().getDefiningOp<moe::TopKOp>();
    if (!onesShape || !getFillShape(scatter.getUpdates(), 0.0f) || !groupTopK ||
        scatter.getIndices() != groupTopK.getIndices() ||
        !isLargestOnLastAxis(groupTopK, 2))
      return rewriter.notifyMatchFailure(where, "not zeros scattered at the "
                                                "kept groups into ones");
    // G = reduce_sum(top_k(S).values, -1): the rows of S, which are c's.
    Value groupScores = groupTopK.getInput();
    auto sum = groupScores.getDefiningOp<moe::ReduceSumOp>();
    auto innerTopK = sum ? sum.getData().getDefiningOp<moe::TopKOp>() : nullptr;
    if (!innerTopK || innerTopK.getInput() != grouped.getOutput() ||
        sum.getData() != innerTopK.getValues() || sum.getKeepdims() != 0 ||
        !sum.getAxes() || !isConstAxes(sum.getAxes(), {2}, 3))
      return rewriter.notifyMatchFailure(where, "the group scores are not "
                                                "sums over the groups");
    // ones = fill(concat(rows(c), [n])).
    auto onesConcat = onesShape.getDefiningOp<moe::ConcatOp>();
    if (!onesConcat || onesConcat.getNumOperands() != 2 ||
        getShape(onesConcat.getOperand(0)) != ArrayRef<int64_t>{1} ||
        moe::getConstantInts(onesConcat.getOperand(1)) !=
            SmallVector<int64_t>{nGroup} ||
        !isRowCount(onesConcat.getOperand(0), choice))
      return rewriter.notifyMatchFailure(where, "the ones do not have the "
                                                "tokens' rows");

    // flat(where): the root this pattern replaces.
    Operation *flat = nullptr;
    for (Operation *user : where.getOutput().getUsers()) {
      if (auto flatten = dyn_cast<moe::FlattenOp>(user);
          flatten && flatten.getAxis() == 1)
        flat = flatten;
      if (auto reshape = dyn_cast<moe::ReshapeOp>(user);
          reshape && reshape.getData() == where.getOutput() &&
          moe::getConstantInts(reshape.getShape()) ==
              SmallVector<int64_t>{-1, numExperts})
        flat = reshape;
      if (flat)
        break;
    }
    if (!flat || flat->getResult(0).getType() != choice.getType())
      return rewriter.notifyMatchFailure(where, "not flattened back to "
                                                "[T, E]");

    Location loc = where.getLoc();
    rewriter.setInsertionPoint(flat);
    auto i64 = rewriter.getI64IntegerAttr(0);
    Value scoresShape =
        moe::ShapeOp::create(rewriter, loc, groupScores, i64, nullptr);
    auto f32 = RankedTensorType::get({1}, rewriter.getF32Type());
    Value zeros = moe::ConstantOfShapeOp::create(
        rewriter, loc, groupScores.getType(), scoresShape,
        DenseElementsAttr::get(f32, 0.0f));
    Value keepShape = moe::ShapeOp::create(
        rewriter, loc, groupTopK.getIndices(), i64, nullptr);
    Value ones = moe::ExpandOp::create(
        rewriter, loc, createF32Scalar(rewriter, loc, 1.0f), keepShape);
    Value mask = moe::ScatterElementsOp::create(
        rewriter, loc, zeros, groupTopK.getIndices(), ones,
        rewriter.getI64IntegerAttr(1), rewriter.getStringAttr("none"));
    Value expanded = moe::UnsqueezeOp::create(
        rewriter, loc, mask, createI64Constant(rewriter, loc, {1}, {2}));
    Value repeated = moe::ExpandOp::create(
        rewriter, loc, expanded,
        createI64Constant(rewriter, loc, {3}, {1, nGroup, groupSize}));
    Value expertMask = moe::ReshapeOp::create(
        rewriter, loc, repeated,
        createI64Constant(rewriter, loc, {2}, {-1, numExperts}), i64);
    Value kept = moe::CastOp::create(rewriter, loc, expertMask,
                                     TypeAttr::get(rewriter.getI1Type()));
    Value dropped = moe::NotOp::create(rewriter, loc, kept);
    // [T, E] like c, the type `flat` was checked to have.
    Value selection =
        moe::WhereOp::create(rewriter, loc, dropped, where.getX(), choice);
    rewriter.replaceOp(flat, selection);
    return success();
  }
};

} // namespace

void moec::populateGateShapePatterns(RewritePatternSet &patterns) {
  patterns.add<RowCountReshapeToConstant>(patterns.getContext());
}

void moec::populateGatePatterns(RewritePatternSet &patterns) {
  patterns.add<GroupFillToExpertMask>(patterns.getContext());
}
