//===- FuseNorms.cpp - decomposed RMSNorm to one op -----------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"

namespace moec {
#define GEN_PASS_DEF_MOEFUSENORMS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// The value of a single-element float constant.
std::optional<double> getScalarFloat(Value value) {
  DenseElementsAttr elements;
  if (!matchPattern(value, m_Constant(&elements)) ||
      elements.getNumElements() != 1 ||
      !isa<FloatType>(elements.getElementType()))
    return std::nullopt;
  return (*elements.getValues<APFloat>().begin()).convertToDouble();
}

bool isF32(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.getElementType().isF32();
}

/// A matched RMSNorm: `normalized = x / sqrt(mean(x^2) + eps)`, the ops that
/// compute it (to erase), and an optional trailing weight multiplication.
struct RmsNorm {
  Value x;
  double epsilon = 0;
  Operation *normalize = nullptr;
  SmallVector<Operation *> chain;
};

/// Matches `sqrt(mean(x^2, last axis, keepdims) + eps)` with single-use
/// intermediates, appending the ops to `norm.chain`.
bool matchRootMeanSquare(Value root, RmsNorm &norm) {
  auto sqrt = root.getDefiningOp<moe::SqrtOp>();
  if (!sqrt || !sqrt->hasOneUse())
    return false;
  auto add = sqrt.getInput().getDefiningOp<moe::AddOp>();
  if (!add || !add->hasOneUse())
    return false;
  Value meanValue;
  if (std::optional<double> eps = getScalarFloat(add.getRhs())) {
    norm.epsilon = *eps;
    meanValue = add.getLhs();
  } else if (std::optional<double> eps = getScalarFloat(add.getLhs())) {
    norm.epsilon = *eps;
    meanValue = add.getRhs();
  } else {
    return false;
  }
  auto mean = meanValue.getDefiningOp<moe::ReduceMeanOp>();
  if (!mean || !mean->hasOneUse() || mean.getKeepdims() != 1 || !mean.getAxes())
    return false;
  auto rank = cast<RankedTensorType>(mean.getData().getType()).getRank();
  std::optional<SmallVector<int64_t>> axes =
      moe::getConstantInts(mean.getAxes());
  if (!axes || axes->size() != 1 ||
      ((*axes)[0] != -1 && (*axes)[0] != rank - 1))
    return false;
  Operation *square = mean.getData().getDefiningOp();
  if (!square || !square->hasOneUse())
    return false;
  if (auto pow = dyn_cast<moe::PowOp>(square)) {
    std::optional<double> exponent = getScalarFloat(pow.getExponent());
    if (!exponent || *exponent != 2.0)
      return false;
    norm.x = pow.getBase();
  } else if (auto mul = dyn_cast<moe::MulOp>(square)) {
    if (mul.getLhs() != mul.getRhs())
      return false;
    norm.x = mul.getLhs();
  } else {
    return false;
  }
  norm.chain.append({square, mean, add, sqrt});
  return true;
}

/// Matches the op normalising x: `x * (1 / rms)`, `x * reciprocal(rms)` (in
/// either operand order) or `x / rms`.
std::optional<RmsNorm> matchNormalize(Operation *op) {
  RmsNorm norm;
  norm.normalize = op;
  if (auto div = dyn_cast<moe::DivOp>(op)) {
    if (!matchRootMeanSquare(div.getRhs(), norm) || norm.x != div.getLhs())
      return std::nullopt;
    return norm;
  }
  auto mul = dyn_cast<moe::MulOp>(op);
  if (!mul)
    return std::nullopt;
  for (auto [x, inverse] : {std::make_pair(mul.getLhs(), mul.getRhs()),
                            std::make_pair(mul.getRhs(), mul.getLhs())}) {
    RmsNorm candidate = norm;
    Operation *invert = inverse.getDefiningOp();
    if (!invert || !invert->hasOneUse())
      continue;
    Value root;
    if (auto div = dyn_cast<moe::DivOp>(invert)) {
      std::optional<double> one = getScalarFloat(div.getLhs());
      if (!one || *one != 1.0)
        continue;
      root = div.getRhs();
    } else if (auto reciprocal = dyn_cast<moe::ReciprocalOp>(invert)) {
      root = reciprocal.getInput();
    } else {
      continue;
    }
    if (!matchRootMeanSquare(root, candidate) || candidate.x != x)
      continue;
    candidate.chain.push_back(invert);
    return candidate;
  }
  return std::nullopt;
}

struct FuseNormsPass : public moec::impl::MoeFuseNormsBase<FuseNormsPass> {
  void runOnOperation() override {
    SmallVector<RmsNorm> norms;
    getOperation().walk([&](Operation *op) {
      if (isa<moe::MulOp, moe::DivOp>(op))
        if (std::optional<RmsNorm> norm = matchNormalize(op))
          norms.push_back(*norm);
    });
    for (RmsNorm &norm : norms)
      rewrite(norm);
  }

  void rewrite(RmsNorm &norm) {
    auto type = dyn_cast<RankedTensorType>(norm.x.getType());
    Value normalized = norm.normalize->getResult(0);
    if (!type || !isF32(norm.x) || type.getRank() == 0 ||
        type.isDynamicDim(type.getRank() - 1) || normalized.getType() != type)
      return;
    int64_t hidden = type.getDimSize(type.getRank() - 1);
    auto scaleType = RankedTensorType::get({hidden}, type.getElementType());

    // A single following multiplication by a [hidden] vector is the weight.
    Operation *last = norm.normalize;
    Value scale;
    if (normalized.hasOneUse())
      if (auto mul = dyn_cast<moe::MulOp>(*normalized.getUsers().begin())) {
        Value other = mul.getLhs() == normalized ? mul.getRhs() : mul.getLhs();
        if (other.getType() == scaleType && mul.getType() == type &&
            other.getParentBlock() == mul->getBlock()) {
          scale = other;
          last = mul;
        }
      }

    OpBuilder builder(last);
    Location loc = last->getLoc();
    if (!scale)
      scale = moe::ConstantOp::create(builder, loc,
                                      DenseElementsAttr::get(scaleType, 1.0f));
    // The weight must be defined before the new op, which replaces `last`.
    if (Operation *def = scale.getDefiningOp())
      if (def->getBlock() == last->getBlock() && last->isBeforeInBlock(def))
        return;
    auto fused = moe::SimplifiedLayerNormalizationOp::create(
        builder, loc, norm.x, scale, builder.getI64IntegerAttr(-1),
        builder.getF32FloatAttr(static_cast<float>(norm.epsilon)),
        builder.getI64IntegerAttr(1));
    last->getResult(0).replaceAllUsesWith(fused.getOutput());
    if (last != norm.normalize)
      last->erase();
    norm.normalize->erase();
    for (Operation *op : llvm::reverse(norm.chain))
      op->erase();
  }
};

} // namespace
