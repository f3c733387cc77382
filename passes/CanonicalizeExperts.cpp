//===- CanonicalizeExperts.cpp - expert code idioms to detected forms -----===//
//
// MoE code outside transformers selects an expert's rows and computes its
// activation in ways the loop detector does not match, though they compute
// the same values: Mistral's reference code and most research code find
// the rows routed to expert e with `torch.where(ids == e)`, where
// transformers slices a one-hot mask, and opset 18 exports spell GELU out
// in elementwise ops. The patterns here rewrite each idiom into the form
// the detectors prove, only where the two are equal element for element.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchGates.h"
#include "passes/MatchSupport.h"
#include "passes/RoutingMatrix.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace moec {
#define GEN_PASS_DEF_MOECANONICALIZEEXPERTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// `ids == e`, with `ids` the `[T, k]` indices of a top-k over the last
/// axis of `[T, E]` scores and e a constant in [0, E), is
/// `cast<i1>(transpose(one_hot(ids, E), [2, 0, 1])[e])`: one_hot(ids)[t, j,
/// e] is 1 exactly where ids[t, j] == e, and top-k indices lie in [0, E).
/// The one-hot and its transpose are made once per top-k, right after it,
/// and shared by every expert: the `[E, T, k]` mask the loop detector takes
/// its experts' rows from (the (token, slot) order of DeepSeek's).
struct ExpertEqualityToOneHot : public OpRewritePattern<moe::EqualOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::EqualOp op,
                                PatternRewriter &rewriter) const override {
    for (auto [ids, expertValue] : {std::pair(op.getLhs(), op.getRhs()),
                                    std::pair(op.getRhs(), op.getLhs())}) {
      auto topK = ids.getDefiningOp<moe::TopKOp>();
      if (!topK || ids != topK.getIndices())
        continue;
      ArrayRef<int64_t> scores = getShape(topK.getInput());
      ArrayRef<int64_t> shape = getShape(ids);
      std::optional<int64_t> expert = moe::getConstantInt(expertValue);
      if (scores.size() != 2 || shape.size() != 2 ||
          !isAxis(topK.getAxis(), 1, 2) || ShapedType::isDynamic(scores[1]) ||
          !expert || *expert < 0 || *expert >= scores[1] ||
          getShape(expertValue).size() > 1 ||
          cast<RankedTensorType>(op.getType()).getShape() != shape)
        continue;
      Value mask = getTopKExpertMask(rewriter, topK, scores[1]);
      if (!mask)
        return rewriter.notifyMatchFailure(op, "the mask's type differs");
      Location loc = op.getLoc();
      Value index = createI64Constant(rewriter, loc, {}, {*expert});
      auto selected = moe::GatherOp::create(rewriter, loc, mask, index,
                                            rewriter.getI64IntegerAttr(0));
      auto cast = moe::CastOp::create(rewriter, loc, selected.getOutput(),
                                      TypeAttr::get(rewriter.getI1Type()));
      if (cast.getType() != op.getType())
        return rewriter.notifyMatchFailure(op, "the selection's type differs");
      rewriter.replaceOp(op, cast.getOutput());
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not top-k indices == expert");
  }
};

/// The `[N, 2]` pairs whose first column `column` (`[N, 1]`) is: the first
/// result of a split along axis 1 (TorchScript), or the slice [0, 1) of
/// axis 1 (dynamo); null otherwise.
Value getPairsOfFirstColumn(Value column) {
  if (auto split = column.getDefiningOp<moe::SplitOp>())
    return column == split->getResult(0) && isAxis(split.getAxis(), 1, 2)
               ? split.getInput()
               : Value();
  auto slice = column.getDefiningOp<moe::SliceOp>();
  if (!slice || !slice.getAxes() || !isConstAxes(slice.getAxes(), {1}, 2) ||
      moe::getConstantInt(slice.getStarts()) != 0 ||
      moe::getConstantInt(slice.getEnds()) != 1 ||
      (slice.getSteps() && moe::getConstantInt(slice.getSteps()) != 1))
    return nullptr;
  return slice.getData();
}

/// Whether the 1-D `rows` are distinct: the row coordinates of the nonzero
/// entries of a mask with at most one true entry per row
/// (`squeeze(transpose(nonzero(mask))[:, 0])`, torch.where's first result).
bool areDistinctRows(Value rows) {
  auto squeeze = rows.getDefiningOp<moe::SqueezeOp>();
  Value pairs = squeeze ? getPairsOfFirstColumn(squeeze.getData()) : Value();
  if (!pairs)
    return false;
  auto transpose = pairs.getDefiningOp<moe::TransposeOp>();
  auto nonZero =
      transpose ? transpose.getData().getDefiningOp<moe::NonZeroOp>() : nullptr;
  return nonZero && transpose.getPerm() &&
         *transpose.getPerm() == ArrayRef<int64_t>{1, 0} &&
         getShape(nonZero.getX()).size() == 2 &&
         hasOneTruePerRow(nonZero.getX());
}

/// `acc[rows] += u` as torch exports it for distinct `rows`:
/// `scatter_nd(acc, rows[:, None], acc[rows] + u)` (Mistral's
/// reference code, `out[idx] += ...`), becomes `acc + scatter_elements(
/// zeros, expand(rows[:, None], shape(u)), u)`, the index_add form the loop
/// detector accumulates experts in. Each row of acc gets acc[i] + u[m] where
/// rows[m] = i, and keeps acc[i] elsewhere, in both; distinct rows are
/// proven from how they were found (areDistinctRows), since with repeated
/// rows the read-modify-write would lose updates.
struct ReadModifyWriteScatterToAdd : public OpRewritePattern<moe::ScatterNDOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::ScatterNDOp op,
                                PatternRewriter &rewriter) const override {
    Value acc = op.getData();
    ArrayRef<int64_t> accShape = getShape(acc);
    auto unsqueeze = op.getIndices().getDefiningOp<moe::UnsqueezeOp>();
    if (op.getReduction() != "none" || accShape.size() != 2 ||
        ShapedType::isDynamic(accShape[1]) || !unsqueeze ||
        !unsqueeze.getAxes() || !isConstAxes(unsqueeze.getAxes(), {1}, 2) ||
        getShape(unsqueeze.getData()).size() != 1)
      return rewriter.notifyMatchFailure(op, "not acc[rows] = v");
    Value rows = unsqueeze.getData();
    Value updates = op.getUpdates();
    // A reshape of [M, H] to [M, H] (H static) keeps every element in place.
    if (auto reshape = updates.getDefiningOp<moe::ReshapeOp>();
        reshape && reshape.getData().getType() == updates.getType())
      updates = reshape.getData();
    auto add = updates.getDefiningOp<moe::AddOp>();
    if (!add || add.getType() != op.getUpdates().getType())
      return rewriter.notifyMatchFailure(op, "not acc[rows] + u");
    Value increment;
    for (auto [read, u] : {std::pair(add.getLhs(), add.getRhs()),
                           std::pair(add.getRhs(), add.getLhs())}) {
      // acc[rows]: a gather at rows, or dynamo's gather_nd at rows[:, None].
      auto gather = read.getDefiningOp<moe::GatherOp>();
      auto gatherNd = read.getDefiningOp<moe::GatherNDOp>();
      bool readsRows = (gather && gather.getData() == acc &&
                        gather.getAxis() == 0 && gather.getIndices() == rows) ||
                       (gatherNd && gatherNd.getData() == acc &&
                        gatherNd.getBatchDims() == 0 &&
                        gatherNd.getIndices() == op.getIndices());
      if (readsRows && u.getType() == add.getType())
        increment = u;
    }
    if (!increment || !areDistinctRows(rows))
      return rewriter.notifyMatchFailure(op,
                                         "not acc[rows] + u, distinct rows");
    Location loc = op.getLoc();
    Value accShapeValue = moe::ShapeOp::create(
        rewriter, loc, acc, rewriter.getI64IntegerAttr(0), /*end=*/nullptr);
    auto f32 = RankedTensorType::get({1}, rewriter.getF32Type());
    Value zeros = moe::ConstantOfShapeOp::create(
        rewriter, loc, acc.getType(), accShapeValue,
        DenseElementsAttr::get(f32, rewriter.getF32FloatAttr(0.0f)));
    Value incrementShape =
        moe::ShapeOp::create(rewriter, loc, increment,
                             rewriter.getI64IntegerAttr(0), /*end=*/nullptr);
    Value indices =
        moe::ExpandOp::create(rewriter, loc, op.getIndices(), incrementShape);
    Value scattered = moe::ScatterElementsOp::create(
        rewriter, loc, zeros, indices, increment, rewriter.getI64IntegerAttr(0),
        rewriter.getStringAttr("none"));
    Value sum = moe::AddOp::create(rewriter, loc, acc, scattered);
    if (sum.getType() != op.getType())
      return rewriter.notifyMatchFailure(op, "the sum's type differs");
    rewriter.replaceOp(op, sum);
    return success();
  }
};

/// Whether `value` is a float constant equal to `expected` within a
/// relative 1e-6 (exporters write sqrt(2 / pi) and 1 / sqrt(2) rounded).
bool isConstNear(Value value, double expected) {
  std::optional<double> actual = getScalarFloat(value);
  return actual && std::abs(*actual - expected) <= 1e-6 * std::abs(expected);
}

/// The factors of a chain of multiplications `a * b * ...`, any nesting.
void collectFactors(Value value, SmallVectorImpl<Value> &factors) {
  if (auto mul = value.getDefiningOp<moe::MulOp>()) {
    collectFactors(mul.getLhs(), factors);
    collectFactors(mul.getRhs(), factors);
    return;
  }
  factors.push_back(value);
}

/// `x^3` as `x * x * x` in any nesting, or `pow(x, 3)`.
bool isCube(Value value, Value x) {
  if (auto pow = value.getDefiningOp<moe::PowOp>())
    return pow.getBase() == x && isConstNear(pow.getExponent(), 3.0);
  SmallVector<Value> factors;
  collectFactors(value, factors);
  return factors.size() == 3 && llvm::all_equal(factors) && factors[0] == x;
}

/// The x of `tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))`, or null.
Value matchTanhArgument(Value value) {
  auto tanh = value.getDefiningOp<moe::TanhOp>();
  if (!tanh)
    return nullptr;
  SmallVector<Value> factors;
  collectFactors(tanh.getInput(), factors);
  if (factors.size() != 2)
    return nullptr;
  for (auto [scale, sum] :
       {std::pair(factors[0], factors[1]), std::pair(factors[1], factors[0])}) {
    auto add = sum.getDefiningOp<moe::AddOp>();
    if (!isConstNear(scale, std::sqrt(2.0 / M_PI)) || !add)
      continue;
    for (auto [x, term] : {std::pair(add.getLhs(), add.getRhs()),
                           std::pair(add.getRhs(), add.getLhs())}) {
      SmallVector<Value> termFactors;
      collectFactors(term, termFactors);
      // 0.044715 * x * x * x in any grouping: one constant, three x.
      auto coefficient = llvm::find_if(termFactors, [](Value factor) {
        return isConstNear(factor, 0.044715);
      });
      if (coefficient == termFactors.end())
        continue;
      SmallVector<Value> rest;
      for (Value factor : termFactors)
        if (factor != *coefficient)
          rest.push_back(factor);
      bool cube = (rest.size() == 3 && llvm::all_equal(rest) && rest[0] == x) ||
                  (rest.size() == 1 && isCube(rest[0], x));
      if (cube)
        return x;
    }
  }
  return nullptr;
}

/// The x of `erf(x / sqrt(2))` or `erf(x * (1 / sqrt(2)))`, or null.
Value matchErfArgument(Value value) {
  auto erf = value.getDefiningOp<moe::ErfOp>();
  if (!erf)
    return nullptr;
  if (auto div = erf.getInput().getDefiningOp<moe::DivOp>())
    return isConstNear(div.getRhs(), std::sqrt(2.0)) ? div.getLhs() : nullptr;
  if (auto mul = erf.getInput().getDefiningOp<moe::MulOp>())
    for (auto [x, scale] : {std::pair(mul.getLhs(), mul.getRhs()),
                            std::pair(mul.getRhs(), mul.getLhs())})
      if (isConstNear(scale, 1.0 / std::sqrt(2.0)))
        return x;
  return nullptr;
}

/// GELU written out, `0.5 * x * (1 + erf(x / sqrt(2)))` (exact) or
/// `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))` (tanh
/// approximation), its three factors in any order and grouping, is
/// `moe.gelu` with approximate "none" or "tanh": the same function, which
/// the expert detectors and kernels know by name.
struct DecomposedGeluToGelu : public OpRewritePattern<moe::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(moe::MulOp op,
                                PatternRewriter &rewriter) const override {
    // A product of exactly these three factors is a GELU wherever it is,
    // also inside a larger product (GeGLU's `gelu(g) * u`).
    SmallVector<Value> factors;
    collectFactors(op.getOutput(), factors);
    if (factors.size() != 3)
      return rewriter.notifyMatchFailure(op, "not three factors");
    for (int half = 0; half < 3; ++half) {
      if (!isConstNear(factors[half], 0.5))
        continue;
      for (int onePlus = 0; onePlus < 3; ++onePlus) {
        auto add = onePlus == half
                       ? nullptr
                       : factors[onePlus].getDefiningOp<moe::AddOp>();
        if (!add)
          continue;
        Value x = factors[3 - half - onePlus];
        for (auto [one, function] : {std::pair(add.getLhs(), add.getRhs()),
                                     std::pair(add.getRhs(), add.getLhs())}) {
          if (!isConstNear(one, 1.0))
            continue;
          StringRef approximate;
          if (matchErfArgument(function) == x)
            approximate = "none";
          else if (matchTanhArgument(function) == x)
            approximate = "tanh";
          else
            continue;
          if (x.getType() != op.getType())
            return rewriter.notifyMatchFailure(op, "broadcasts x");
          rewriter.replaceOpWithNewOp<moe::GeluOp>(
              op, op.getType(), x, rewriter.getStringAttr(approximate));
          return success();
        }
      }
    }
    return rewriter.notifyMatchFailure(op, "not a GELU");
  }
};

struct CanonicalizeExpertsPass
    : public moec::impl::MoeCanonicalizeExpertsBase<CanonicalizeExpertsPass> {
  void runOnOperation() override {
    GreedyRewriteConfig config;
    // Only the matched ops change; constants are not folded or moved here.
    config.enableFolding(false);
    // Gate shapes computed from the row count first, then their users'
    // types re-inferred, so that the patterns below see a static E.
    RewritePatternSet shapePatterns(&getContext());
    populateGateShapePatterns(shapePatterns);
    bool changed = false;
    if (failed(applyPatternsGreedily(getOperation(), std::move(shapePatterns),
                                     config, &changed)))
      return signalPassFailure();
    if (changed) {
      OpPassManager refine(func::FuncOp::getOperationName());
      refine.addPass(createMoeRefineShapes());
      if (failed(runPipeline(refine, getOperation())))
        return signalPassFailure();
    }
    // makeMoE's [B, T, H] layer onto tokens: its element-mask write-back
    // first (proven on the masks as the export wrote them), then the
    // flattening of its top-k, routing and row scatters.
    // Each rewrite is exact on its own, so a run that stops before its
    // fixpoint leaves a correct graph, at worst not detected.
    RewritePatternSet elementPatterns(&getContext());
    populateElementMaskScatterPatterns(elementPatterns);
    (void)applyPatternsGreedily(getOperation(), std::move(elementPatterns),
                                config);
    RewritePatternSet batchPatterns(&getContext());
    populateBatchRowPatterns(batchPatterns);
    (void)applyPatternsGreedily(getOperation(), std::move(batchPatterns),
                                config);
    RewritePatternSet patterns(&getContext());
    patterns.add<ExpertEqualityToOneHot, DecomposedGeluToGelu,
                 ReadModifyWriteScatterToAdd>(&getContext());
    populateGatePatterns(patterns);
    populateRoutingColumnPatterns(patterns);
    populateMaskedSoftmaxGatePatterns(patterns);
    populateExpertMaskRowPatterns(patterns);
    if (failed(
            applyPatternsGreedily(getOperation(), std::move(patterns), config)))
      signalPassFailure();
    // The written-out GELUs' ops are dead now.
    for (Block &block : getOperation().getBody())
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
        if (isOpTriviallyDead(&op))
          op.erase();
  }
};

} // namespace
