//===- MatchSupport.h - helpers of the MoE pattern matchers -----*- C++ -*-===//
//
// Small predicates the MoE detection passes use to prove, op by op, that a
// subgraph has the form they rewrite: constant axes, scalar constants, the
// operands of commutative ops, the softmax router and the SwiGLU activation
// several forms share, and the sparse layer they are all rewritten into.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_MATCHSUPPORT_H
#define MOEC_PASSES_MATCHSUPPORT_H

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/LayerForm.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchGates.h"
#include "passes/SharedExperts.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectInterface.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <utility>

namespace moec {

/// Whether `axis` names dimension `expected` of a rank-`rank` tensor, also
/// when written as a negative axis.
inline bool isAxis(int64_t axis, int64_t expected, int64_t rank) {
  return axis == expected || axis + rank == expected;
}

/// Whether `value` is a constant integer list equal to `expected`, where an
/// entry may also be written relative to `rank` (a negative axis).
inline bool isConstAxes(mlir::Value value, llvm::ArrayRef<int64_t> expected,
                        int64_t rank) {
  std::optional<llvm::SmallVector<int64_t>> actual =
      moe::getConstantInts(value);
  if (!actual || actual->size() != expected.size())
    return false;
  for (auto [a, e] : llvm::zip(*actual, expected))
    if (!isAxis(a, e, rank))
      return false;
  return true;
}

/// The value of a single-element float constant, or nullopt.
inline std::optional<double> getScalarFloat(mlir::Value value) {
  mlir::Attribute attr;
  if (!value || !mlir::matchPattern(value, mlir::m_Constant(&attr)))
    return std::nullopt;
  auto dense = llvm::dyn_cast<mlir::DenseFPElementsAttr>(attr);
  if (!dense || dense.getNumElements() != 1)
    return std::nullopt;
  return (*dense.getValues<llvm::APFloat>().begin()).convertToDouble();
}

/// The operand of the commutative binary op `op` that is not `known`, or null
/// when `known` is neither.
template <typename OpTy> mlir::Value otherOperand(OpTy op, mlir::Value known) {
  if (op.getLhs() == known)
    return op.getRhs();
  if (op.getRhs() == known)
    return op.getLhs();
  return nullptr;
}

/// The single user of `value` of type `OpTy`, or null when `value` has no
/// such user or more than one.
template <typename OpTy> OpTy getOnlyUserOf(mlir::Value value) {
  OpTy found;
  for (mlir::Operation *user : value.getUsers()) {
    auto op = llvm::dyn_cast<OpTy>(user);
    if (!op)
      continue;
    if (found && found != op)
      return nullptr;
    found = op;
  }
  return found;
}

/// The first user of `value` of type `OpTy` that `accept` admits, or null.
template <typename OpTy, typename Pred>
OpTy findUser(mlir::Value value, Pred accept) {
  for (mlir::Operation *user : value.getUsers())
    if (auto op = llvm::dyn_cast<OpTy>(user))
      if (accept(op))
        return op;
  return nullptr;
}

/// The static shape of `value`'s ranked type, or an empty list.
inline llvm::ArrayRef<int64_t> getShape(mlir::Value value) {
  auto type = llvm::dyn_cast<mlir::RankedTensorType>(value.getType());
  return type ? type.getShape() : llvm::ArrayRef<int64_t>();
}

/// `value` without the unsqueezes, squeezes and reshapes of a one-element
/// value that made it: they all carry the same single number.
inline mlir::Value stripScalarReshapes(mlir::Value value) {
  while (mlir::Operation *op = value.getDefiningOp()) {
    if (!llvm::isa<moe::UnsqueezeOp, moe::SqueezeOp, moe::ReshapeOp>(op))
      break;
    auto type = llvm::dyn_cast<mlir::RankedTensorType>(value.getType());
    if (!type || !type.hasStaticShape() || type.getNumElements() != 1)
      break;
    value = op->getOperand(0);
  }
  return value;
}

/// Whether `value` is `reshape(source, [-1])`.
inline bool isFlattenedVector(mlir::Value value, mlir::Value source) {
  auto reshape = value.getDefiningOp<moe::ReshapeOp>();
  return reshape && reshape.getData() == source &&
         moe::getConstantInts(reshape.getShape()) ==
             llvm::SmallVector<int64_t>{-1};
}

/// The `{in, out}` sizes of the matrices in the last two dimensions of a
/// weight of `shape` stored in `layout`.
inline std::pair<int64_t, int64_t> getMatrixInOut(llvm::ArrayRef<int64_t> shape,
                                                  moe::WeightLayout layout) {
  int64_t rows = shape[shape.size() - 2], cols = shape.back();
  if (layout == moe::WeightLayout::OutIn)
    return {cols, rows};
  return {rows, cols};
}

/// Erases the ops of `body` that became dead, users first: what a detector
/// leaves behind after replacing a layer, so that later passes and the plan
/// never see it.
inline void eraseDeadOps(mlir::Region &body) {
  for (mlir::Block &block : body)
    for (mlir::Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
      if (mlir::isOpTriviallyDead(&op))
        op.erase();
}

/// Translation validation of the detectors' rewrites: a tool that can run
/// IR (moec compile, compiler/verify) registers an implementation on the moe
/// dialect, and every detector asks it before replacing a layer. Without one
/// (moec-opt, `moec compile --no-verify-rewrites`) rewrites are kept as the
/// structural proof found them.
class RewriteValidator : public mlir::DialectInterface::Base<RewriteValidator> {
public:
  explicit RewriteValidator(mlir::Dialect *dialect) : Base(dialect) {}

  /// Whether `replacement` computes what `original` does, as functions of
  /// the layer's `tokens` (and of any other value they read): nullopt when
  /// they agree, else why not ("max rel error X at N tokens").
  virtual std::optional<std::string> validate(mlir::Value original,
                                              mlir::Value replacement,
                                              mlir::Value tokens) const = 0;

  /// A test-only hook (`moec compile --moe-test-corrupt-rewrite`): whether
  /// the detectors deliberately break every proposed rewrite before it is
  /// validated, so that a test can show that validation rejects it.
  virtual bool corruptRewrites() const { return false; }
};

/// Erases `value`'s defining op when nothing uses it, and then whatever of
/// its operands' defining ops that leaves unused: the ops a detector built
/// for a rewrite it drops (the original ops all keep users).
inline void eraseIfUnused(mlir::Value value) {
  // An op is queued once, when its last user is erased: it has no user
  // left to queue it again.
  llvm::SmallVector<mlir::Operation *> worklist;
  mlir::Operation *root = value.getDefiningOp();
  if (root && mlir::isOpTriviallyDead(root))
    worklist.push_back(root);
  while (!worklist.empty()) {
    mlir::Operation *op = worklist.pop_back_val();
    llvm::SmallSetVector<mlir::Operation *, 4> operands;
    for (mlir::Value operand : op->getOperands())
      if (mlir::Operation *def = operand.getDefiningOp())
        operands.insert(def);
    op->erase();
    for (mlir::Operation *def : operands)
      if (mlir::isOpTriviallyDead(def))
        worklist.push_back(def);
  }
}

/// Breaks a proposed rewrite for `--moe-test-corrupt-rewrite`: the routers
/// it built scale their weights twice (a routed scaling factor applied
/// twice), and a combine of a gate of generic ops adds its weights twice, a
/// plausible detector mistake that any layer's output shows. The walk stops
/// at the layer's `tokens`, so that earlier layers stay as committed.
inline void corruptRewrite(mlir::Value replacement, mlir::Value tokens) {
  llvm::SmallVector<mlir::Value> worklist{replacement};
  llvm::DenseSet<mlir::Operation *> visited;
  mlir::OpBuilder builder(replacement.getContext());
  while (!worklist.empty()) {
    mlir::Value value = worklist.pop_back_val();
    mlir::Operation *op = value.getDefiningOp();
    if (value == tokens || !op || !visited.insert(op).second)
      continue;
    if (auto router = llvm::dyn_cast<moe::RouterOp>(op))
      router.setRoutedScalingFactorAttr(builder.getF32FloatAttr(
          2 * router.getRoutedScalingFactorAttr().getValueAsDouble()));
    auto combine = llvm::dyn_cast<moe::CombineOp>(op);
    if (combine && !combine.getWeights().getDefiningOp<moe::RouterOp>()) {
      builder.setInsertionPoint(combine);
      mlir::Value weights = combine.getWeights();
      combine.getWeightsMutable().assign(
          moe::AddOp::create(builder, combine.getLoc(), weights, weights));
    }
    llvm::append_range(worklist, op->getOperands());
  }
}

/// A detector's candidate layers, collected in program order, in the order
/// to rewrite them: last layer first. Validating a rewrite reads its
/// layer's weights (RewriteValidator), and the plan's writer then reads
/// every layer first to last; rewritten last to first, the first layers
/// are the ones that a model larger than memory still has in the page
/// cache when the writer starts (bench/README.md, "The rewrite validator's
/// plans").
template <typename Range> auto lastLayerFirst(Range &&candidates) {
  return llvm::reverse(std::forward<Range>(candidates));
}

/// Asks the registered RewriteValidator (if any) whether the `replacement`
/// a detector built computes a detected layer's `original` output from the
/// layer's `tokens`. On a rejection, the remark "`pass`: rewrite of layer at
/// LOC rejected by validation: WHY" goes to `anchor` (the layer's router),
/// the built ops are erased, and failure is returned: the layer keeps its
/// generic ops.
inline mlir::LogicalResult validateRewrite(llvm::StringRef pass,
                                           mlir::Operation *anchor,
                                           mlir::Value original,
                                           mlir::Value replacement,
                                           mlir::Value tokens) {
  auto *dialect = original.getContext()->getLoadedDialect<moe::MoeDialect>();
  const RewriteValidator *validator =
      dialect ? dialect->getRegisteredInterface<RewriteValidator>() : nullptr;
  if (!validator)
    return mlir::success();
  if (validator->corruptRewrites())
    corruptRewrite(replacement, tokens);
  std::optional<std::string> why =
      validator->validate(original, replacement, tokens);
  if (!why)
    return mlir::success();
  anchor->emitRemark() << pass << ": rewrite of layer at " << original.getLoc()
                       << " rejected by validation: " << *why;
  eraseIfUnused(replacement);
  return mlir::failure();
}

/// validateRewrite, then replaces every use of `original` with
/// `replacement` when it passed.
inline mlir::LogicalResult commitLayerRewrite(llvm::StringRef pass,
                                              mlir::Operation *anchor,
                                              mlir::Value original,
                                              mlir::Value replacement,
                                              mlir::Value tokens) {
  if (failed(validateRewrite(pass, anchor, original, replacement, tokens)))
    return mlir::failure();
  original.replaceAllUsesWith(replacement);
  return mlir::success();
}

/// A Linear, plus the constant `[out]` bias added to it (null when none).
struct BiasedLinear {
  Linear linear;
  moe::ConstantOp bias;
};

/// Matches `output` as `linear` or `linear + b` (either operand order) with
/// a constant 1-D float b: torch's nn.Linear with or without its bias, as
/// one Gemm or a product plus the bias.
inline std::optional<BiasedLinear> matchBiasedLinear(mlir::Value output) {
  if (std::optional<Linear> linear = matchLinear(output))
    return BiasedLinear{*linear, nullptr};
  // torch's Linear with a bias as one Gemm: x @ W^T + b with b as its C.
  if (auto gemm = output.getDefiningOp<moe::GemmOp>(); gemm && gemm.getC()) {
    moe::ConstantOp bias = getWeight(gemm.getC());
    if (!bias || bias.getType().getRank() != 1 || gemm.getTransA() != 0 ||
        gemm.getAlpha().convertToFloat() != 1.0f ||
        gemm.getBeta().convertToFloat() != 1.0f)
      return std::nullopt;
    return BiasedLinear{
        Linear{gemm.getA(), getWeight(gemm.getB()), gemm.getTransB() != 0},
        bias};
  }
  auto add = output.getDefiningOp<moe::AddOp>();
  if (!add)
    return std::nullopt;
  for (auto [product, biasValue] : {std::pair(add.getLhs(), add.getRhs()),
                                    std::pair(add.getRhs(), add.getLhs())}) {
    moe::ConstantOp bias = getWeight(biasValue);
    std::optional<Linear> linear = matchLinear(product);
    if (bias && linear && bias.getType().getRank() == 1)
      return BiasedLinear{*linear, bias};
  }
  return std::nullopt;
}

/// A softmax router over `[T, E]` logits projected from `[T, H]` tokens, in
/// the two orders exporters produce: `softmax -> top_k [-> w / sum(w)]`
/// (Mixtral) and `top_k(logits) -> softmax over k` (Granite, GPT-OSS).
struct SoftmaxGate {
  mlir::Value logits, tokens;
  /// The `[T, k]` routing weights the experts' outputs are scaled by.
  mlir::Value weights;
  int64_t numExperts = 0, topK = 0, hidden = 0;
  bool afterTopK = false, normalize = false;
};

/// Matches the softmax router headed by `topK`; returns why it is not one.
inline std::optional<std::string> matchSoftmaxGate(moec::moe::TopKOp topK,
                                                   SoftmaxGate &gate) {
  using namespace mlir;
  Value input = topK.getInput();
  auto softmax = input.getDefiningOp<moe::SoftmaxOp>();
  gate.afterTopK = !softmax;
  gate.logits = softmax ? softmax.getInput() : input;
  ArrayRef<int64_t> logitsShape = getShape(gate.logits);
  if (logitsShape.size() != 2 || ShapedType::isDynamic(logitsShape[1]) ||
      !getElementTypeOrSelf(input.getType()).isF32())
    return std::string("top-k input is not f32 [T, E] logits or their "
                       "softmax, with static E");
  gate.numExperts = logitsShape[1];
  if ((softmax && !isAxis(softmax.getAxis(), 1, 2)) ||
      !isAxis(topK.getAxis(), 1, 2) || topK.getLargest() != 1)
    return std::string("top-k does not take the largest entries over the "
                       "experts");
  std::optional<int64_t> k = moe::getConstantInt(topK.getK());
  if (!k || *k < 1 || *k > gate.numExperts)
    return std::string("top-k's k is not a constant in [1, E]");
  gate.topK = *k;

  Value values = topK.getValues();
  gate.weights = values;
  if (gate.afterTopK) {
    auto overK = getOnlyUserOf<moe::SoftmaxOp>(values);
    if (!overK || !values.hasOneUse() || !isAxis(overK.getAxis(), 1, 2))
      return std::string("the top-k logits do not only feed a softmax over k");
    gate.weights = overK.getOutput();
  } else if (auto div = getOnlyUserOf<moe::DivOp>(values)) {
    // Renormalisation: w / reduce_sum(w, -1, keepdims).
    auto sum = div.getRhs().getDefiningOp<moe::ReduceSumOp>();
    if (div.getLhs() != values || !sum || sum.getData() != values ||
        sum.getKeepdims() != 1 || !sum.getAxes() ||
        !isConstAxes(sum.getAxes(), {1}, 2))
      return std::string("the top-k scores are divided by something other "
                         "than their sum over k");
    gate.normalize = true;
    gate.weights = div.getOutput();
  }

  // The logits are a projection of the tokens, which ties the router's rows
  // to the rows the experts run on.
  Operation *projection = gate.logits.getDefiningOp();
  auto gemm = dyn_cast_or_null<moe::GemmOp>(projection);
  if (!(gemm && gemm.getTransA() == 0) &&
      !isa_and_nonnull<moe::MatMulOp>(projection))
    return std::string("the router logits are not a projection of the "
                       "tokens");
  gate.tokens = projection->getOperand(0);
  ArrayRef<int64_t> tokensShape = getShape(gate.tokens);
  if (tokensShape.size() != 2 || ShapedType::isDynamic(tokensShape[1]) ||
      !getElementTypeOrSelf(gate.tokens.getType()).isF32())
    return std::string("the tokens are not an f32 [T, H] matrix with static "
                       "H");
  gate.hidden = tokensShape[1];
  return std::nullopt;
}

/// Matches `a = silu(g) * u` with `silu(g) = g * sigmoid(g)`, any operand
/// order; returns {g, u}.
inline std::optional<std::pair<mlir::Value, mlir::Value>>
matchSiluGlu(mlir::Value a) {
  auto product = a.getDefiningOp<moe::MulOp>();
  if (!product)
    return std::nullopt;
  for (auto [siluValue, up] : {std::pair(product.getLhs(), product.getRhs()),
                               std::pair(product.getRhs(), product.getLhs())}) {
    auto silu = siluValue.getDefiningOp<moe::MulOp>();
    if (!silu)
      continue;
    for (auto [gate, sigmoidValue] :
         {std::pair(silu.getLhs(), silu.getRhs()),
          std::pair(silu.getRhs(), silu.getLhs())}) {
      auto sigmoid = sigmoidValue.getDefiningOp<moe::SigmoidOp>();
      if (sigmoid && sigmoid.getInput() == gate)
        return std::pair(gate, up);
    }
  }
  return std::nullopt;
}

/// The common last-axis size F of the two halves `gate` and `up` of a fused
/// gate/up projection (equal static shapes), or nullopt.
inline std::optional<int64_t> getGluHalfWidth(mlir::Value gate,
                                              mlir::Value up) {
  llvm::ArrayRef<int64_t> shape = getShape(gate);
  if (shape.empty() || getShape(up) != shape ||
      mlir::ShapedType::isDynamic(shape.back()))
    return std::nullopt;
  return shape.back();
}

/// The input and constant end of `half` when it is a Slice of the last axis
/// (of a rank-`rank` value) from `start` with step `step` (absent steps:
/// 1), or nullopt.
inline std::optional<std::pair<mlir::Value, int64_t>>
getLastAxisSlice(mlir::Value half, int64_t rank, int64_t start, int64_t step) {
  auto slice = half.getDefiningOp<moe::SliceOp>();
  if (!slice || !slice.getAxes() ||
      !isConstAxes(slice.getAxes(), {rank - 1}, rank))
    return std::nullopt;
  std::optional<int64_t> sliceStep =
      slice.getSteps() ? moe::getConstantInt(slice.getSteps()) : 1;
  std::optional<int64_t> end = moe::getConstantInt(slice.getEnds());
  if (sliceStep != step || moe::getConstantInt(slice.getStarts()) != start ||
      !end)
    return std::nullopt;
  return std::pair(slice.getData(), *end);
}

/// The fused `[..., 2F]` projection whose first half along the last axis is
/// `gate` and whose second half is `up` (`glu concatenated`): two Slices or
/// the two results of a Split in halves. Null when they are not.
inline mlir::Value getConcatenatedGlu(mlir::Value gate, mlir::Value up) {
  using namespace mlir;
  std::optional<int64_t> width = getGluHalfWidth(gate, up);
  if (!width)
    return nullptr;
  int64_t rank = getShape(gate).size(), ffn = *width;
  auto isHalf = [&](Value half, int64_t start) -> Value {
    auto slice = getLastAxisSlice(half, rank, start, /*step=*/1);
    // The second half may end past 2F (a "to the end" slice).
    if (!slice || (slice->second != start + ffn &&
                   !(start == ffn && slice->second > 2 * ffn)))
      return nullptr;
    return slice->first;
  };
  Value fused = isHalf(gate, 0);
  if (fused && isHalf(up, ffn) == fused)
    return getShape(fused).back() == 2 * ffn ? fused : nullptr;
  auto split = gate.getDefiningOp<moe::SplitOp>();
  if (!split || split->getNumResults() != 2 || split->getResult(0) != gate ||
      split->getResult(1) != up || !isAxis(split.getAxis(), rank - 1, rank) ||
      getShape(split.getInput()).back() != 2 * ffn)
    return nullptr;
  return split.getInput();
}

/// What a detected layer's moe.router computes besides its logits; the
/// defaults are plain softmax top-1 routing without groups or capacity.
struct RouterConfig {
  int64_t topK = 1;
  moe::ScoreFunction score = moe::ScoreFunction::Softmax;
  bool afterTopK = false;
  bool normalize = false;
  float scale = 1.0f;
  int64_t nGroup = 1, topkGroup = 1;
  std::optional<int64_t> capacity;
  /// GShard's renormalisation over the kept choices (`normalize_kept`):
  /// its epsilon.
  std::optional<float> keptEpsilon;
  /// An optional `[E]` selection bias.
  mlir::Value bias;
};

/// The `[E]` f32 constant of a router's selection-only `bias`, or null when
/// it is empty.
inline mlir::Value createBiasConstant(mlir::OpBuilder &builder,
                                      mlir::Location loc,
                                      llvm::ArrayRef<float> bias) {
  if (bias.empty())
    return nullptr;
  return moe::ConstantOp::create(
      builder, loc,
      mlir::DenseElementsAttr::get(
          mlir::RankedTensorType::get({static_cast<int64_t>(bias.size())},
                                      builder.getF32Type()),
          bias));
}

/// Builds the moe.router of `logits` that `config` describes.
inline moe::RouterOp createRouter(mlir::OpBuilder &builder, mlir::Location loc,
                                  mlir::Value logits,
                                  const RouterConfig &config) {
  auto unitIf = [&](bool set) { return set ? builder.getUnitAttr() : nullptr; };
  return moe::RouterOp::create(
      builder, loc, logits, config.bias,
      moe::ScoreFunctionAttr::get(builder.getContext(), config.score),
      builder.getI64IntegerAttr(config.topK), unitIf(config.afterTopK),
      unitIf(config.normalize), builder.getF32FloatAttr(config.scale),
      builder.getI64IntegerAttr(config.nGroup),
      builder.getI64IntegerAttr(config.topkGroup),
      config.capacity ? builder.getI64IntegerAttr(*config.capacity) : nullptr,
      config.keptEpsilon ? builder.getF32FloatAttr(*config.keptEpsilon)
                         : nullptr);
}

/// Builds the moe.router of `logits` and the moe.dispatch of the `[T, H]`
/// `tokens` to the `numExperts` experts it chooses.
inline std::pair<moe::RouterOp, moe::DispatchOp>
createRouterAndDispatch(mlir::OpBuilder &builder, mlir::Location loc,
                        mlir::Value logits, const RouterConfig &config,
                        mlir::Value tokens, int64_t numExperts) {
  moe::RouterOp router = createRouter(builder, loc, logits, config);
  auto dispatch =
      moe::DispatchOp::create(builder, loc, tokens, router.getIndices(),
                              builder.getI64IntegerAttr(numExperts));
  return {router, dispatch};
}

/// The moe.router configuration of a matched softmax router.
inline RouterConfig getRouterConfig(const SoftmaxGate &softmax) {
  RouterConfig config;
  config.topK = softmax.topK;
  config.afterTopK = softmax.afterTopK;
  config.normalize = softmax.normalize;
  return config;
}

/// Whether every element of the integer tensor `ids` provably lies in
/// `[0, numExperts)`: the positions top-k or arg-max choose along an axis of
/// size `numExperts`, and concatenations, reshapes, squeezes and unsqueezes
/// of such tensors (they move elements, never change them). moe.dispatch
/// drops -1 and rejects other indices outside the range, where a Gather
/// would wrap a negative one: the rewrite needs this proof.
inline bool isExpertIndex(mlir::Value ids, int64_t numExperts) {
  using namespace mlir;
  auto axisSize = [](Value input, int64_t axis) -> int64_t {
    ArrayRef<int64_t> shape = getShape(input);
    int64_t rank = shape.size();
    if (axis < 0)
      axis += rank;
    return axis >= 0 && axis < rank ? shape[axis] : ShapedType::kDynamic;
  };
  Operation *op = ids.getDefiningOp();
  if (!op)
    return false;
  if (auto topK = dyn_cast<moe::TopKOp>(op))
    return ids == topK.getIndices() &&
           axisSize(topK.getInput(), static_cast<int64_t>(topK.getAxis())) ==
               numExperts;
  if (auto argMax = dyn_cast<moe::ArgMaxOp>(op))
    return axisSize(argMax.getData(), static_cast<int64_t>(argMax.getAxis())) ==
           numExperts;
  if (auto concat = dyn_cast<moe::ConcatOp>(op))
    return llvm::all_of(concat->getOperands(), [&](Value input) {
      return isExpertIndex(input, numExperts);
    });
  if (isa<moe::ReshapeOp, moe::SqueezeOp, moe::UnsqueezeOp, moe::FlattenOp>(op))
    return isExpertIndex(op->getOperand(0), numExperts);
  return false;
}

/// The gate of a detected layer as its experts see it: token `t` goes to
/// experts `indices[t, j]` (`[T, k]` i64, each in `[0, E)`) and their
/// outputs are summed with weights `weights[t, j]` (`[T, k]` f32). Where the
/// values come from a known router, `router` describes it and `logits` are
/// its input; otherwise the gate's ops stay as they are (generic) and feed
/// moe.dispatch and moe.combine directly.
struct LayerGate {
  mlir::Value tokens, indices, weights;
  int64_t numExperts = 0, topK = 0;
  std::optional<RouterConfig> router;
  mlir::Value logits;
  /// The known router's selection-only bias (`[E]` floats), empty when
  /// absent: built as a constant with the router.
  llvm::SmallVector<float> bias;
};

/// Matches the gate that sends the `[T, H]` `tokens` to experts `indices`
/// with `weights`, both `[T, k]`, among `numExperts` experts; returns why it
/// cannot be the gate of a layer. Only the expert side has to be proven: the
/// gate is any computation whose indices are provably expert indices
/// (isExpertIndex). When `indices` and `weights` are those of a router of
/// the same tokens in a known form (matchSoftmaxGate, or the sigmoid,
/// selection-bias, grouped and scaled gates of matchGateScores and
/// matchGateWeights), the gate becomes that moe.router; otherwise it stays
/// generic.
inline std::optional<std::string>
matchLayerGate(mlir::Value tokens, mlir::Value indices, mlir::Value weights,
               int64_t numExperts, LayerGate &gate) {
  using namespace mlir;
  ArrayRef<int64_t> indicesShape = getShape(indices);
  ArrayRef<int64_t> weightsShape = getShape(weights);
  ArrayRef<int64_t> tokensShape = getShape(tokens);
  if (indicesShape.size() != 2 || ShapedType::isDynamic(indicesShape[1]) ||
      indicesShape[1] < 1 ||
      !getElementTypeOrSelf(indices.getType()).isInteger(64))
    return std::string("the expert indices are not an i64 [T, k] tensor with "
                       "static k");
  if (weightsShape.size() != 2 || weightsShape[1] != indicesShape[1] ||
      !getElementTypeOrSelf(weights.getType()).isF32())
    return std::string("the routing weights are not an f32 [T, k] tensor of "
                       "the indices' shape");
  if (tokensShape.size() != 2 || ShapedType::isDynamic(tokensShape[1]) ||
      !getElementTypeOrSelf(tokens.getType()).isF32())
    return std::string("the tokens are not an f32 [T, H] matrix with static "
                       "H");
  // Rows must agree where both are static; dynamic rows are the same token
  // dimension, which moe.dispatch and moe.combine check at run time.
  for (int64_t rows : {indicesShape[0], weightsShape[0]})
    if (!ShapedType::isDynamic(rows) &&
        !ShapedType::isDynamic(tokensShape[0]) && rows != tokensShape[0])
      return std::string("the indices, weights and tokens have different "
                         "numbers of rows");
  if (!isExpertIndex(indices, numExperts))
    return std::string("the expert indices are not provably in [0, E): "
                       "top-k or arg-max positions over the E experts");
  gate.tokens = tokens;
  gate.indices = indices;
  gate.weights = weights;
  gate.numExperts = numExperts;
  gate.topK = indicesShape[1];
  gate.router.reset();
  gate.logits = nullptr;
  gate.bias.clear();
  auto topK = indices.getDefiningOp<moe::TopKOp>();
  if (!topK)
    return std::nullopt;
  SoftmaxGate softmax;
  if (!matchSoftmaxGate(topK, softmax) && softmax.weights == weights &&
      softmax.tokens == tokens && softmax.numExperts == numExperts) {
    gate.router = getRouterConfig(softmax);
    gate.logits = softmax.logits;
    return std::nullopt;
  }
  // Sigmoid scores, a selection bias, groups, scaling: the other gates
  // moe.router computes, when the logits project these tokens.
  KnownGate known;
  if (matchGateScores(topK, known) || matchGateWeights(weights, topK, known))
    return std::nullopt;
  std::optional<Linear> projection = matchLinear(known.logits);
  ArrayRef<int64_t> logitsShape = getShape(known.logits);
  std::optional<int64_t> k = moe::getConstantInt(topK.getK());
  if (!projection || projection->input != tokens || logitsShape.size() != 2 ||
      logitsShape[1] != numExperts || !isLargestOnLastAxis(topK, 2) ||
      k != gate.topK ||
      (known.nGroup > 1 &&
       known.topkGroup * (numExperts / known.nGroup) < gate.topK))
    return std::nullopt;
  RouterConfig config;
  config.topK = gate.topK;
  config.score = known.score;
  config.normalize = known.normalize;
  config.scale = known.scale;
  config.nGroup = known.nGroup;
  config.topkGroup = known.topkGroup;
  gate.router = config;
  gate.logits = known.logits;
  gate.bias = known.bias;
  return std::nullopt;
}

/// The LayerGate of a matched softmax router.
inline LayerGate getLayerGate(const SoftmaxGate &softmax) {
  LayerGate gate;
  gate.tokens = softmax.tokens;
  gate.weights = softmax.weights;
  gate.numExperts = softmax.numExperts;
  gate.topK = softmax.topK;
  gate.router = getRouterConfig(softmax);
  gate.logits = softmax.logits;
  return gate;
}

/// The routing of `gate`, built at `builder`'s point: the moe.router of a
/// known gate (null for a generic one), the `[T, k]` indices and weights the
/// layer uses, and the moe.dispatch of the tokens by those indices.
struct LayerRouting {
  moe::RouterOp router;
  mlir::Value indices, weights;
  moe::DispatchOp dispatch;
};

inline LayerRouting createLayerRouting(mlir::OpBuilder &builder,
                                       mlir::Location loc,
                                       const LayerGate &gate) {
  LayerRouting routing;
  routing.indices = gate.indices;
  routing.weights = gate.weights;
  if (gate.router) {
    RouterConfig config = *gate.router;
    config.bias = createBiasConstant(builder, loc, gate.bias);
    routing.router = createRouter(builder, loc, gate.logits, config);
    routing.indices = routing.router.getIndices();
    routing.weights = routing.router.getWeights();
  }
  routing.dispatch =
      moe::DispatchOp::create(builder, loc, gate.tokens, routing.indices,
                              builder.getI64IntegerAttr(gate.numExperts));
  return routing;
}

/// The weights and attributes of one moe.experts feed-forward network.
struct ExpertFfn {
  mlir::Value w1, b1, w3, b3, w2, b2;
  moe::Activation activation = moe::Activation::SiluGlu;
  moe::WeightLayout layout = moe::WeightLayout::OutIn;
  std::optional<moe::GluLayout> glu;
  std::optional<float> alpha, beta, limit;
};

/// Replaces `result` (the `[T, H]` output of a matched layer) with
/// `[moe.router ->] moe.dispatch -> moe.experts -> moe.combine` for `gate`
/// and the experts `ffn`, built before `result`'s op. Returns why nothing
/// was replaced when the combined type differs from `result`'s (the built
/// ops are then erased), or an empty string when validation rejected the
/// rewrite (commitLayerRewrite has given the remark at `anchor`). On
/// success, `combined` (when given) is set to the moe.combine. The
/// rewrite is validated as a function of the gate's tokens, or of
/// `validationTokens` where the gate dispatches values computed from them.
inline std::optional<std::string>
replaceWithExpertsLayer(llvm::StringRef pass, mlir::Operation *anchor,
                        mlir::Value result, const LayerGate &gate,
                        const ExpertFfn &ffn,
                        moe::CombineOp *combined = nullptr,
                        mlir::Value validationTokens = nullptr) {
  using namespace mlir;
  OpBuilder builder(result.getDefiningOp());
  Location loc = result.getLoc();
  MLIRContext *context = builder.getContext();
  LayerRouting routing = createLayerRouting(builder, loc, gate);
  auto f32 = [&](std::optional<float> value) {
    return value ? builder.getF32FloatAttr(*value) : FloatAttr();
  };
  auto experts = moe::ExpertsOp::create(
      builder, loc, routing.dispatch.getRows(), routing.dispatch.getOffsets(),
      ffn.w1, ffn.b1, ffn.w3, ffn.b3, ffn.w2, ffn.b2,
      moe::ActivationAttr::get(context, ffn.activation),
      moe::WeightLayoutAttr::get(context, ffn.layout),
      ffn.glu ? moe::GluLayoutAttr::get(context, *ffn.glu)
              : moe::GluLayoutAttr(),
      f32(ffn.alpha), f32(ffn.beta), f32(ffn.limit));
  moe::setLayerForm(experts,
                    llvm::StringSwitch<llvm::StringRef>(pass)
                        .Case("moe-detect-stacked-experts", "stacked")
                        .Case("moe-detect-segment-experts", "segments")
                        .Case("moe-detect-parallel-experts", "parallel")
                        .Case("moe-detect-input-scaled-experts", "input-scaled")
                        .Default(pass));
  auto combine = moe::CombineOp::create(
      builder, loc, experts.getOutput(), routing.dispatch.getSource(),
      routing.weights, /*passthrough=*/Value(), /*indices=*/Value());
  if (combine.getType() == result.getType()) {
    if (failed(commitLayerRewrite(pass, anchor, result, combine.getOutput(),
                                  validationTokens ? validationTokens
                                                   : gate.tokens)))
      return std::string();
    if (combined)
      *combined = combine;
    return std::nullopt;
  }
  std::string message;
  llvm::raw_string_ostream os(message);
  os << "the combined output type " << combine.getType()
     << " differs from the layer's " << result.getType();
  // Erase what was built, users first, and the weight stacks that only it
  // used, so the graph is left as it was.
  SmallVector<Operation *> dead{combine, experts, routing.dispatch};
  if (routing.router) {
    dead.push_back(routing.router);
    if (Value bias = routing.router.getBias())
      dead.push_back(bias.getDefiningOp());
  }
  for (Value weight : {ffn.w1, ffn.w2})
    if (weight.getDefiningOp<moe::StackOp>())
      dead.push_back(weight.getDefiningOp());
  for (Operation *op : dead)
    if (op->use_empty())
      op->erase();
  return message;
}

/// Replaces `result` (the `[T, H]` output of a matched layer) with
/// `moe.router -> moe.dispatch -> moe.experts silu_glu (fused concatenated
/// gate/up) -> moe.combine` for the softmax `gate`: replaceWithExpertsLayer
/// with `w1` the stacked `[E, 2F, H]` or `[E, H, 2F]` gate/up weight and
/// `w2` the down projection, both in `layout`.
inline std::optional<std::string>
replaceWithSiluGluLayer(llvm::StringRef pass, mlir::Operation *anchor,
                        mlir::Value result, const SoftmaxGate &gate,
                        mlir::Value w1, mlir::Value w2,
                        moe::WeightLayout layout) {
  ExpertFfn ffn;
  ffn.w1 = w1;
  ffn.w2 = w2;
  ffn.layout = layout;
  ffn.glu = moe::GluLayout::Concatenated;
  return replaceWithExpertsLayer(pass, anchor, result, getLayerGate(gate), ffn);
}

} // namespace moec

#endif // MOEC_PASSES_MATCHSUPPORT_H
