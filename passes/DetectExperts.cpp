//===- DetectExperts.cpp - per-expert loop to sparse MoE ops --------------===//
//
// Recognises the per-expert loop that TorchScript exports for Mixtral-,
// Qwen2-MoE- and DeepSeek-V3-style MoE blocks and rewrites it into
// moe.router -> moe.dispatch -> moe.experts -> moe.combine. The match is
// rooted at a `moe.top_k` and proves, op by op, that the loop's final
// accumulator equals
//
//   out[t] = sum_j w[t, j] * FFN_{indices[t, j]}(x[t])
//
// so the rewrite is exact; anything else stays generic with a remark naming
// the first condition that failed. Gates: softmax or sigmoid scores, a
// selection-only bias, grouped top-k, renormalisation and a routed scaling
// factor, or the softmax of the top-k logits. Experts: any network
// matchExpertMlp knows (SwiGLU, GeGLU, GELU, ReLU, SiLU, biases optional).
// SwiGLU MLPs on the same tokens added to the routed output (shared
// experts, plain or sigmoid-gated) become moe.shared_expert. The pass also
// takes Switch Transformers layers, rooted at an arg-max (SwitchLayer.cpp).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "passes/MatchGates.h"
#include "passes/MatchSupport.h"
#include "passes/NearMiss.h"
#include "passes/SharedExperts.h"
#include "passes/SwitchLayer.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/LayerForm.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace moec {
#define GEN_PASS_DEF_MOEDETECTEXPERTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// Why a match failed: the message of the remark.
using Failure = std::string;

/// Whether `value` is a column of values in row order: `[N]` or `[N, 1]`.
bool isColumn(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && (type.getRank() == 1 ||
                  (type.getRank() == 2 && type.getDimSize(1) == 1));
}

/// Strips reshapes and unsqueezes between columns (`[N]`, `[N, 1]`): they
/// keep every element in its row.
Value stripColumnReshapes(Value value) {
  while (true) {
    Value input;
    if (auto reshape = value.getDefiningOp<moe::ReshapeOp>())
      input = reshape.getData();
    else if (auto unsqueeze = value.getDefiningOp<moe::UnsqueezeOp>())
      input = unsqueeze.getData();
    if (!input || !isColumn(input) || !isColumn(value))
      return value;
    value = input;
  }
}

/// The index of the dimension of `source` that the one-element value `size`
/// holds: `dim(source, i)` or `shape(source)[i:i + 1]`, through
/// stripScalarReshapes. Nullopt when it is neither.
std::optional<int64_t> getDimIndex(Value size, Value source) {
  size = stripScalarReshapes(size);
  if (auto dim = size.getDefiningOp<moe::DimOp>())
    return dim.getInput() == source ? std::optional<int64_t>(dim.getIndex())
                                    : std::nullopt;
  auto shape = size.getDefiningOp<moe::ShapeOp>();
  if (!shape || shape.getData() != source ||
      getShape(size) != ArrayRef<int64_t>{1})
    return std::nullopt;
  return shape.getDimRange().first;
}

/// Whether the one-element value `count` is the number of rows of the
/// matrix `tokens`: its dimension 0, or the product of the two leading
/// dimensions of the rank-3 tensor `tokens` was reshaped from.
bool isRowCountOf(Value count, Value tokens) {
  if (getDimIndex(count, tokens) == 0)
    return true;
  auto mul = stripScalarReshapes(count).getDefiningOp<moe::MulOp>();
  auto reshape = tokens.getDefiningOp<moe::ReshapeOp>();
  if (!mul || !reshape)
    return false;
  Value source = reshape.getData();
  auto sourceType = cast<RankedTensorType>(source.getType());
  auto tokensType = cast<RankedTensorType>(tokens.getType());
  if (sourceType.getRank() != 3 || tokensType.getRank() != 2 ||
      ShapedType::isDynamic(tokensType.getDimSize(1)) ||
      sourceType.getDimSize(2) != tokensType.getDimSize(1))
    return false;
  std::optional<int64_t> lhs = getDimIndex(mul.getLhs(), source);
  std::optional<int64_t> rhs = getDimIndex(mul.getRhs(), source);
  return lhs && rhs && *lhs + *rhs == 1 && *lhs * *rhs == 0;
}

/// One expert's block of the loop: its network's weights and biases (w3
/// and the biases null where the network has none) and the accumulation
/// step that adds its weighted output to `previous`, giving `accumulated`.
struct ExpertBlock {
  moe::ConstantOp w1, b1, w3, b3, w2, b2;
  Value previous, accumulated;
};

/// A matched per-expert loop.
struct LoopLayer {
  moe::TopKOp topK;
  Value logits, tokens;
  int64_t numExperts = 0, topKValue = 0, hidden = 0, ffn = 0;
  /// The layout every expert's weights share.
  std::optional<moe::WeightLayout> layout;
  /// The activation every expert's network shares, and which of the
  /// optional weights (w3, b1, b3, b2) all of them have: `first` is set by
  /// the first expert matched.
  struct Network {
    moe::Activation activation = moe::Activation::SiluGlu;
    bool w3 = true, b1 = false, b3 = false, b2 = false;
    bool operator==(const Network &other) const {
      return activation == other.activation && w3 == other.w3 &&
             b1 == other.b1 && b3 == other.b3 && b2 == other.b2;
    }
  };
  std::optional<Network> network;
  bool normalize = false;
  /// The softmax is over the top-k logits (Mistral's reference code).
  bool afterTopK = false;
  moe::ScoreFunction score = moe::ScoreFunction::Softmax;
  /// The selection-only bias (`[E]` floats), empty when absent.
  SmallVector<float> bias;
  float scale = 1.0f;
  int64_t nGroup = 1, topkGroup = 1;
  /// Whether the expert mask is `[E, T, k]` (DeepSeek) rather than
  /// `[E, k, T]` (Mixtral): NonZero then yields (token, slot) pairs.
  bool tokenFirst = false;
  /// The top-k ops of grouped selection, part of this layer.
  SmallVector<moe::TopKOp> groupTopKs;
  /// Blocks by expert index; experts pruned at export time are absent and
  /// get zero weights (their contribution was zero in the loop too).
  llvm::DenseMap<int64_t, ExpertBlock> experts;
  /// The accumulator after the last expert: what the layer computes.
  Value result;
};

/// Whether `shape` is `[1, H]` or the shape of a `[1, H]` slice of a
/// `[?, H]` matrix (rows [0, 1), all columns): expanding `[n, H]` to it
/// keeps the `n` rows.
bool isRowBroadcastShape(Value shape) {
  std::optional<SmallVector<int64_t>> sizes = moe::getConstantInts(shape);
  if (sizes)
    return sizes->size() == 2 && (*sizes)[0] == 1;
  auto shapeOf = shape.getDefiningOp<moe::ShapeOp>();
  auto slice =
      shapeOf ? shapeOf.getData().getDefiningOp<moe::SliceOp>() : nullptr;
  if (!slice || shapeOf.getStart() != 0 || shapeOf.getEnd() ||
      getShape(slice.getData()).size() != 2)
    return false;
  int64_t cols = getShape(slice.getData())[1];
  std::optional<SmallVector<int64_t>> starts =
      moe::getConstantInts(slice.getStarts());
  std::optional<SmallVector<int64_t>> ends =
      moe::getConstantInts(slice.getEnds());
  std::optional<SmallVector<int64_t>> axes =
      slice.getAxes() ? moe::getConstantInts(slice.getAxes())
                      : SmallVector<int64_t>{0, 1};
  std::optional<SmallVector<int64_t>> steps =
      slice.getSteps() ? moe::getConstantInts(slice.getSteps()) : std::nullopt;
  if (!starts || !ends || !axes || starts->size() != axes->size() ||
      ends->size() != axes->size() ||
      (slice.getSteps() &&
       (!steps || llvm::any_of(*steps, [](int64_t s) { return s != 1; }))))
    return false;
  bool rowsSliced = false;
  for (auto [start, end, axis] : llvm::zip(*starts, *ends, *axes)) {
    if (isAxis(axis, 0, 2)) {
      if (start != 0 || end != 1)
        return false;
      rowsSliced = true;
    } else if (!isAxis(axis, 1, 2) || start != 0 ||
               ShapedType::isDynamic(cols) || end < cols) {
      return false;
    }
  }
  return rowsSliced;
}

class LoopMatcher {
public:
  explicit LoopMatcher(moe::TopKOp topK) { layer.topK = topK; }

  /// Whether the top-k indices are one-hot encoded into an expert mask, the
  /// mark of the loop form: other top-ks are no routers of this form and get
  /// no remark.
  bool isCandidate() {
    ArrayRef<int64_t> shape = getShape(layer.topK.getInput());
    if (shape.empty() || ShapedType::isDynamic(shape.back()))
      return false;
    layer.numExperts = shape.back();
    return getOneHot(layer.topK.getIndices()) != nullptr;
  }

  /// Matches the whole layer; on failure returns why.
  std::optional<Failure> match() {
    if (auto failure = matchRouter())
      return failure;
    return matchExperts();
  }

  LoopLayer layer;

private:
  Value weights, mask;
  /// The gate as matchGateScores and matchGateWeights found it.
  KnownGate gate;

  /// Softmax or Sigmoid [-> selection bias, grouped masking] -> TopK
  /// -> OneHot -> Transpose.
  std::optional<Failure> matchRouter() {
    moe::TopKOp topK = layer.topK;
    std::optional<Failure> scoresFailure = matchGateScores(topK, gate);
    // The top-ks of grouped selection are part of this gate, matched or
    // not, rather than candidates of their own.
    layer.groupTopKs = gate.groupTopKs;
    if (scoresFailure)
      return scoresFailure;
    layer.logits = gate.logits;
    layer.score = gate.score;
    layer.bias = gate.bias;
    layer.nGroup = gate.nGroup;
    layer.topkGroup = gate.topkGroup;
    Value logits = layer.logits;
    auto logitsType = cast<RankedTensorType>(logits.getType());
    if (logitsType.getRank() != 2 || logitsType.isDynamicDim(1))
      return Failure("router logits are not a [T, E] matrix with static E");
    int64_t topKAxis = static_cast<int64_t>(topK.getAxis());
    if (topKAxis != 1 && topKAxis != -1)
      return Failure("softmax or top-k is not over the expert axis");
    if (topK.getLargest() != 1)
      return Failure("top-k selects the smallest scores");
    std::optional<int64_t> k = moe::getConstantInt(topK.getK());
    layer.numExperts = logitsType.getDimSize(1);
    if (!k || *k < 1 || *k > layer.numExperts)
      return Failure("top-k's k is not a constant in [1, E]");
    if (layer.nGroup > 1 &&
        layer.topkGroup * (layer.numExperts / layer.nGroup) < *k)
      return Failure("the kept expert groups hold fewer than k experts");
    // The logits' rows are the tokens' rows: only the weights (and a
    // router bias, as makeMoE's nn.Linear has) may differ.
    std::optional<BiasedLinear> projection = matchBiasedLinear(logits);
    if (!projection)
      return Failure("router logits are not a matmul of the tokens");
    layer.tokens = projection->linear.input;
    layer.topKValue = *k;

    Value oneHot = getOneHot(topK.getIndices());
    if (!oneHot)
      return Failure("top-k indices are not one-hot encoded over E experts");
    auto transpose =
        findUser<moe::TransposeOp>(oneHot, [](moe::TransposeOp op) {
          return op.getPerm() && (*op.getPerm() == ArrayRef<int64_t>{2, 1, 0} ||
                                  *op.getPerm() == ArrayRef<int64_t>{2, 0, 1});
        });
    if (!transpose)
      return Failure("expert mask is not transposed to [E, k, T] or [E, T, k]");
    layer.tokenFirst = *transpose.getPerm() == ArrayRef<int64_t>{2, 0, 1};
    mask = transpose.getOutput();
    return std::nullopt;
  }

  /// The `[T, k, E]` one-hot encoding of the top-k `indices`: a OneHot with
  /// values {0, 1} (TorchScript), or `indices[..., None] == arange(E)`,
  /// optionally cast (dynamo). Null when there is none.
  Value getOneHot(Value indices) {
    auto oneHot = findUser<moe::OneHotOp>(indices, [&](moe::OneHotOp op) {
      return isAxis(op.getAxis(), 2, 3) &&
             isConstInt(op.getDepth(), layer.numExperts) &&
             moe::getConstantInts(op.getValues()) == SmallVector<int64_t>{0, 1};
    });
    if (oneHot)
      return oneHot.getOutput();
    // `arange(E)` is compared element by element rather than built: E comes
    // from the model and may be far larger than any constant (2^40).
    auto isExpertRange = [&](Value range) {
      std::optional<SmallVector<int64_t>> values = moe::getConstantInts(range);
      return values && int64_t(values->size()) == layer.numExperts &&
             llvm::all_of(llvm::enumerate(*values), [](auto e) {
               return e.value() == int64_t(e.index());
             });
    };
    for (Operation *user : indices.getUsers()) {
      auto unsqueeze = dyn_cast<moe::UnsqueezeOp>(user);
      if (!unsqueeze || !isConstAxes(unsqueeze.getAxes(), {2}, 3))
        continue;
      auto equal =
          findUser<moe::EqualOp>(unsqueeze.getOutput(), [&](moe::EqualOp op) {
            Value range = otherOperand(op, unsqueeze.getOutput());
            return range && getShape(range).size() == 1 && isExpertRange(range);
          });
      if (!equal)
        continue;
      if (auto cast = findUser<moe::CastOp>(equal.getOutput(),
                                            [](moe::CastOp) { return true; }))
        return cast.getOutput();
      return equal.getOutput();
    }
    return nullptr;
  }

  /// Matches the routing weights a block gathers (matchGateWeights); every
  /// block must gather the same.
  std::optional<Failure> matchWeights(Value gathered) {
    if (weights)
      return gathered == weights
                 ? std::nullopt
                 : std::optional<Failure>("experts gather different weights");
    if (std::optional<Failure> failure =
            matchGateWeights(gathered, layer.topK, gate))
      return failure;
    layer.normalize = gate.normalize;
    layer.afterTopK = gate.afterTopK;
    layer.scale = gate.scale;
    weights = gathered;
    return std::nullopt;
  }

  /// Every `gather(mask, e)` starts one expert block.
  std::optional<Failure> matchExperts() {
    auto tokensType = dyn_cast<RankedTensorType>(layer.tokens.getType());
    if (!tokensType || tokensType.getRank() != 2 ||
        tokensType.isDynamicDim(1) || !tokensType.getElementType().isF32())
      return Failure("tokens are not an f32 [T, H] matrix with static H");
    layer.hidden = tokensType.getDimSize(1);
    // transformers >= 4.57 loops over the experts hit:
    // nonzero(mask.sum((-1, -2)) > 0), split into one index per expert hit
    // at trace time, while each block's weights stay the traced expert's.
    if (llvm::any_of(mask.getUsers(), llvm::IsaPred<moe::ReduceSumOp>))
      return Failure("the loop runs over the experts hit at run time (a "
                     "NonZero of the expert mask's sum), split into as many "
                     "blocks as were hit at trace time: it is valid only "
                     "for inputs that hit the same experts");
    for (Operation *user : mask.getUsers()) {
      auto gather = dyn_cast<moe::GatherOp>(user);
      std::optional<int64_t> expert =
          gather ? moe::getConstantInt(gather.getIndices()) : std::nullopt;
      if (!gather || gather.getAxis() != 0 || !expert ||
          cast<RankedTensorType>(gather.getIndices().getType()).getRank() != 0)
        return Failure("expert mask has a use other than selecting one expert");
      if (*expert < 0 || *expert >= layer.numExperts ||
          layer.experts.count(*expert))
        return Failure(llvm::formatv("expert {0} is selected out of range or "
                                     "twice",
                                     *expert));
      if (auto failure = matchBlock(gather, *expert))
        return Failure(llvm::formatv("expert {0}: {1}", *expert, *failure));
    }
    if (layer.experts.empty())
      return Failure("no expert block uses the expert mask");
    return matchAccumulation();
  }

  /// mask[e] [-> Cast(bool)] -> NonZero -> Transpose -> (Split | Slices) ->
  /// Squeeze gives the (slot j, token t) pairs routed to expert e.
  std::optional<Failure> matchBlock(moe::GatherOp select, int64_t expert) {
    Value selected = select.getOutput();
    if (auto cast = findUser<moe::CastOp>(
            selected, [](moe::CastOp op) { return op.getTo().isInteger(1); }))
      selected = cast.getOutput();
    auto nonZero =
        findUser<moe::NonZeroOp>(selected, [](auto) { return true; });
    auto transpose =
        nonZero
            ? findUser<moe::TransposeOp>(nonZero.getOutput(),
                                         [](moe::TransposeOp op) {
                                           return op.getPerm() &&
                                                  *op.getPerm() ==
                                                      ArrayRef<int64_t>{1, 0};
                                         })
            : nullptr;
    if (!transpose)
      return Failure("the routed (slot, token) pairs are not computed by "
                     "NonZero of the expert's mask");
    Value slot = getPairColumn(transpose.getOutput(), layer.tokenFirst ? 1 : 0);
    Value token =
        getPairColumn(transpose.getOutput(), layer.tokenFirst ? 0 : 1);
    if (!slot || !token)
      return Failure("slot or token indices are not squeezed to vectors");

    ExpertBlock block;
    Value updates;
    if (auto failure = matchScatter(token, block, updates))
      return failure;

    // The weighted output y * w[t, j], which TorchScript expands to the
    // shape of the accumulator's first row: a broadcast that keeps its
    // rows. An expand to any other shape may drop rows (to zero rows, where
    // the update vanishes) or repeat them, and is not this form.
    if (auto expand = updates.getDefiningOp<moe::ExpandOp>()) {
      if (!isMatrixWithCols(expand.getInput(), layer.hidden) ||
          !isMatrixWithCols(expand.getOutput(), layer.hidden) ||
          !isRowBroadcastShape(expand.getShape()))
        return Failure("the expert output is expanded to a shape that may "
                       "not keep its rows");
      updates = expand.getInput();
    }
    auto scale = updates.getDefiningOp<moe::MulOp>();
    if (!scale)
      return Failure("the expert output is not scaled by its routing weight");
    for (auto [output, factor] : {std::pair{scale.getLhs(), scale.getRhs()},
                                  std::pair{scale.getRhs(), scale.getLhs()}}) {
      std::optional<Failure> weightFailure =
          matchRoutingWeight(stripColumnReshapes(factor), slot, token);
      if (weightFailure)
        continue;
      if (auto failure = matchFfn(output, token, block))
        return failure;
      layer.experts[expert] = block;
      return std::nullopt;
    }
    return Failure("the expert output is not scaled by the weight of its "
                   "(token, slot) pair");
  }

  /// Column `column` of the `[N, 2]` pairs as an `[N]` vector: a result of a
  /// Split in two columns (TorchScript) or a one-column Slice (dynamo),
  /// squeezed.
  static Value getPairColumn(Value pairs, int64_t column) {
    Value piece;
    if (auto split = findUser<moe::SplitOp>(pairs, [](moe::SplitOp op) {
          return isAxis(op.getAxis(), 1, 2) && op.getNumResults() == 2;
        }))
      piece = split.getResult(column);
    else if (auto slice = findUser<moe::SliceOp>(pairs, [&](moe::SliceOp op) {
               return op.getAxes() && isConstAxes(op.getAxes(), {1}, 2) &&
                      (!op.getSteps() || isConstInt(op.getSteps(), 1)) &&
                      isConstInt(op.getStarts(), column) &&
                      isConstInt(op.getEnds(), column + 1);
             }))
      piece = slice.getOutput();
    if (!piece)
      return nullptr;
    auto squeeze = findUser<moe::SqueezeOp>(piece, [](moe::SqueezeOp op) {
      return op.getAxes() && isConstAxes(op.getAxes(), {1}, 2);
    });
    return squeeze ? squeeze.getOutput() : nullptr;
  }

  /// The step adding the expert's weighted rows `updates` to the accumulator
  /// at its tokens' rows (index_add), in either export form:
  ///   acc + scatter_elements(zeros_like(acc), expand(unsqueeze(t, 1)), y)
  ///   scatter_nd(acc, unsqueeze(t, 1), y, reduction = add)
  std::optional<Failure> matchScatter(Value token, ExpertBlock &block,
                                      Value &updates) {
    for (Operation *user : token.getUsers()) {
      auto unsqueeze = dyn_cast<moe::UnsqueezeOp>(user);
      if (!unsqueeze || !isConstAxes(unsqueeze.getAxes(), {1}, 2))
        continue;
      Value index = unsqueeze.getOutput();
      if (auto scatter =
              findUser<moe::ScatterNDOp>(index, [&](moe::ScatterNDOp op) {
                return op.getIndices() == index;
              })) {
        if (scatter.getReduction() != "add" ||
            !isMatrixWithCols(scatter.getData(), layer.hidden) ||
            !isMatrixWithCols(scatter.getUpdates(), layer.hidden))
          return Failure("the scatter is not a row-wise add into the "
                         "accumulator");
        block.previous = scatter.getData();
        block.accumulated = scatter.getOutput();
        updates = scatter.getUpdates();
        return std::nullopt;
      }
      for (Operation *indexUser : index.getUsers()) {
        auto expand = dyn_cast<moe::ExpandOp>(indexUser);
        if (!expand)
          continue;
        auto scatter = findUser<moe::ScatterElementsOp>(
            expand.getOutput(), [&](moe::ScatterElementsOp op) {
              auto shape = expand.getShape().getDefiningOp<moe::ShapeOp>();
              return op.getIndices() == expand.getOutput() && shape &&
                     shape.getData() == op.getUpdates() &&
                     shape.getStart() == 0 && !shape.getEnd();
            });
        if (scatter)
          return matchScatterElements(scatter, block, updates);
      }
    }
    return Failure("the expert output is not scattered to its tokens' rows "
                   "(index_add)");
  }

  std::optional<Failure> matchScatterElements(moe::ScatterElementsOp scatter,
                                              ExpertBlock &block,
                                              Value &updates) {
    if (scatter.getAxis() != 0 || scatter.getReduction() != "none")
      return Failure("the scatter is not a row-wise overwrite of zeros");
    // Zeros shaped like some value (constant_of_shape(shape(v))), or, with
    // static shapes, folded to a constant: which value is checked next.
    Value data = scatter.getData();
    moe::ConstantOfShapeOp zeros = getZeros(data);
    auto zerosShape =
        zeros ? zeros.getInput().getDefiningOp<moe::ShapeOp>() : nullptr;
    bool shapedZeros =
        zerosShape && zerosShape.getStart() == 0 && !zerosShape.getEnd();
    if ((!shapedZeros && !isZerosShapedLike(data, data)) ||
        !scatter.getOutput().hasOneUse())
      return Failure("the scatter does not start from zeros shaped like the "
                     "accumulator");
    auto add = dyn_cast<moe::AddOp>(*scatter.getOutput().getUsers().begin());
    Value previous = add ? otherOperand(add, scatter.getOutput()) : nullptr;
    if (!previous || !isZerosShapedLike(data, previous) ||
        !isMatrixWithCols(add.getOutput(), layer.hidden))
      return Failure("the scattered output is not added to the accumulator");
    block.previous = previous;
    block.accumulated = add.getOutput();
    updates = scatter.getUpdates();
    return std::nullopt;
  }

  /// `w[t, j]` as a column: `gather(flatten(w), j + t * k)` (TorchScript),
  /// where the flatten of `w` (`[T, k]`, or `[T, k, 1]` unsqueezed) to a
  /// `[T * k, 1]` column keeps row-major order, or
  /// `gather_nd(unsqueeze(w, 2), concat(t[:, None], j[:, None]))` (dynamo).
  std::optional<Failure> matchRoutingWeight(Value value, Value slot,
                                            Value token) {
    if (auto gatherNd = value.getDefiningOp<moe::GatherNDOp>())
      return matchRoutingWeightNd(gatherNd, slot, token);
    auto gather = value.getDefiningOp<moe::GatherOp>();
    if (!gather || gather.getAxis() != 0)
      return Failure("not a gather");
    auto flatten = gather.getData().getDefiningOp<moe::FlattenOp>();
    if (!flatten || !isMatrixWithCols(flatten.getOutput(), 1))
      return Failure("not the flattened weights");
    Value routing = flatten.getInput();
    if (auto unsqueeze = routing.getDefiningOp<moe::UnsqueezeOp>())
      if (isConstAxes(unsqueeze.getAxes(), {2}, 3))
        routing = unsqueeze.getData();
    if (!isMatrixWithCols(routing, layer.topKValue))
      return Failure("not the flattened weights");
    auto add = gather.getIndices().getDefiningOp<moe::AddOp>();
    Value scaled = add ? otherOperand(add, slot) : nullptr;
    auto mul = scaled ? scaled.getDefiningOp<moe::MulOp>() : nullptr;
    Value k = mul ? otherOperand(mul, token) : nullptr;
    if (!k || !isConstInt(k, layer.topKValue))
      return Failure("not indexed by j + t * k");
    return matchWeights(routing);
  }

  /// `gather_nd(w, concat(t[:, None], j[:, None]))` with w the `[T, k]`
  /// weights, or `[T, k, 1]` (w unsqueezed): both gather w[t, j].
  std::optional<Failure> matchRoutingWeightNd(moe::GatherNDOp gather,
                                              Value slot, Value token) {
    Value weights = gather.getData();
    if (auto unsqueeze = weights.getDefiningOp<moe::UnsqueezeOp>();
        unsqueeze && isConstAxes(unsqueeze.getAxes(), {2}, 3))
      weights = unsqueeze.getData();
    auto concat = gather.getIndices().getDefiningOp<moe::ConcatOp>();
    if (!concat || gather.getBatchDims() != 0 ||
        concat.getInputs().size() != 2 || !isAxis(concat.getAxis(), 1, 2) ||
        !isMatrixWithCols(weights, layer.topKValue))
      return Failure("not the weights gathered at (t, j)");
    auto isColumnOf = [](Value column, Value vector) {
      auto unsqueeze = column.getDefiningOp<moe::UnsqueezeOp>();
      return unsqueeze && unsqueeze.getData() == vector &&
             isConstAxes(unsqueeze.getAxes(), {1}, 2);
    };
    if (!isColumnOf(concat.getInputs()[0], token) ||
        !isColumnOf(concat.getInputs()[1], slot))
      return Failure("not the weights gathered at (t, j)");
    return matchWeights(weights);
  }

  /// The expert's network on the gathered tokens (matchExpertMlp: SwiGLU,
  /// GeGLU, or relu / gelu / silu, with or without biases), the same for
  /// every expert.
  std::optional<Failure> matchFfn(Value output, Value token,
                                  ExpertBlock &block) {
    ExpertMlp ffn;
    if (auto failure = matchExpertMlp(output, ffn))
      return failure;
    block.w1 = ffn.w1;
    block.b1 = ffn.b1;
    block.w3 = ffn.w3;
    block.b3 = ffn.b3;
    block.w2 = ffn.w2;
    block.b2 = ffn.b2;
    LoopLayer::Network network{
        ffn.activation, static_cast<bool>(ffn.w3), static_cast<bool>(ffn.b1),
        static_cast<bool>(ffn.b3), static_cast<bool>(ffn.b2)};
    if (layer.network && !(*layer.network == network))
      return Failure("the experts' networks differ in activation or in which "
                     "biases they have");
    layer.network = network;
    if (!isGatheredRows(ffn.input, token))
      return Failure("the expert's input is not the router's tokens gathered "
                     "at its routed token indices");
    std::optional<int64_t> size = ffn.getFfnSize(layer.hidden);
    if (!size || (layer.ffn && layer.ffn != *size) ||
        (layer.layout && *layer.layout != ffn.layout))
      return Failure("expert weights are not f32 [H, F], [H, F], [F, H] (or "
                     "all transposed) with one F and layout for all experts");
    layer.ffn = *size;
    layer.layout = ffn.layout;
    return std::nullopt;
  }

  /// Whether `rows` (`[N, H]`) are `x[t]`, x the router's tokens:
  ///   gather(x, t) | reshape(gather(unsqueeze(x, 0), t, axis = 1))
  ///   | gather_nd(x, t[:, None])
  ///   | reshape(transpose(gather_nd(transpose(unsqueeze(x, 0), [1, 0, 2]),
  ///                                 t[:, None]), [1, 0, 2]))
  bool isGatheredRows(Value rows, Value token) {
    if (!isMatrixWithCols(rows, layer.hidden))
      return false;
    Value x = layer.tokens;
    auto isColumnOfToken = [&](Value column) {
      auto unsqueeze = column.getDefiningOp<moe::UnsqueezeOp>();
      return unsqueeze && unsqueeze.getData() == token &&
             isConstAxes(unsqueeze.getAxes(), {1}, 2);
    };
    auto isTransposed3d = [](moe::TransposeOp op) {
      return op && op.getPerm() && *op.getPerm() == ArrayRef<int64_t>{1, 0, 2};
    };
    auto isUnsqueezedTokens = [&](Value value) {
      auto unsqueeze = value.getDefiningOp<moe::UnsqueezeOp>();
      return unsqueeze && unsqueeze.getData() == x &&
             isConstAxes(unsqueeze.getAxes(), {0}, 3);
    };
    if (auto gather = rows.getDefiningOp<moe::GatherOp>())
      return gather.getData() == x && gather.getAxis() == 0 &&
             gather.getIndices() == token;
    if (auto gatherNd = rows.getDefiningOp<moe::GatherNDOp>())
      return gatherNd.getData() == x && gatherNd.getBatchDims() == 0 &&
             isColumnOfToken(gatherNd.getIndices());
    auto reshape = rows.getDefiningOp<moe::ReshapeOp>();
    if (!reshape)
      return false;
    // The reshape to [N, H] keeps the N gathered rows in order.
    if (auto gather = reshape.getData().getDefiningOp<moe::GatherOp>())
      return gather.getAxis() == 1 && gather.getIndices() == token &&
             isUnsqueezedTokens(gather.getData());
    auto outer = reshape.getData().getDefiningOp<moe::TransposeOp>();
    auto gatherNd = isTransposed3d(outer)
                        ? outer.getData().getDefiningOp<moe::GatherNDOp>()
                        : nullptr;
    auto inner = gatherNd ? gatherNd.getData().getDefiningOp<moe::TransposeOp>()
                          : nullptr;
    return isTransposed3d(inner) && gatherNd.getBatchDims() == 0 &&
           isColumnOfToken(gatherNd.getIndices()) &&
           isUnsqueezedTokens(inner.getData());
  }

  /// The blocks' additions form one chain from a zero [T, H] accumulator.
  std::optional<Failure> matchAccumulation() {
    llvm::DenseMap<Value, Value> next;
    llvm::DenseSet<Value> accumulated;
    for (auto &[expert, block] : layer.experts) {
      if (!next.try_emplace(block.previous, block.accumulated).second)
        return Failure("two experts accumulate into the same value");
      accumulated.insert(block.accumulated);
    }
    Value start;
    for (auto &[expert, block] : layer.experts) {
      if (accumulated.contains(block.previous))
        continue;
      if (start)
        return Failure("expert outputs are not accumulated in one chain");
      start = block.previous;
    }
    if (!start || !isMatrixWithCols(start, layer.hidden))
      return Failure("the accumulator does not start from zeros");
    Value shape;
    if (auto zeros = getZeros(start)) {
      shape = zeros.getInput();
    } else if (auto expand = start.getDefiningOp<moe::ExpandOp>()) {
      if (getShape(expand.getInput()).empty() &&
          isConstFloat(expand.getInput(), 0.0f))
        shape = expand.getShape();
    }
    bool rowsMatch = false;
    if (!shape) {
      // Static shapes: the zeros are a folded constant of the tokens' type.
      if (!isZerosShapedLike(start, layer.tokens))
        return Failure("the accumulator does not start from zeros");
      rowsMatch = true;
    } else if (auto shapeOf = shape.getDefiningOp<moe::ShapeOp>()) {
      rowsMatch = shapeOf.getData() == layer.tokens &&
                  shapeOf.getStart() == 0 && !shapeOf.getEnd();
    } else if (auto concat = shape.getDefiningOp<moe::ConcatOp>()) {
      rowsMatch = concat.getInputs().size() == 2 &&
                  isRowCountOf(concat.getInputs()[0], layer.tokens) &&
                  isConstAxes(concat.getInputs()[1], {layer.hidden}, 0);
    }
    if (!rowsMatch)
      return Failure("the accumulator is not shaped like the tokens");
    Value value = start;
    for (size_t i = 0; i < layer.experts.size(); ++i)
      value = next.lookup(value);
    layer.result = value;
    return std::nullopt;
  }
};

/// Stacks per-expert `[a, b]` weights (or `[n]` biases) into one `[E, a, b]`
/// (`[E, n]`) `moe.stack` of the existing constants, so no weight is copied;
/// pruned experts get a splat of zeros (their contribution was zero in the
/// loop too).
Value stackWeights(OpBuilder &builder, Location loc, LoopLayer &layer,
                   moe::ConstantOp ExpertBlock::*member) {
  auto type =
      cast<RankedTensorType>((layer.experts.begin()->second.*member).getType());
  Value zeros;
  SmallVector<Value> slices;
  for (int64_t expert = 0; expert < layer.numExperts; ++expert) {
    auto it = layer.experts.find(expert);
    if (it != layer.experts.end()) {
      slices.push_back(it->second.*member);
      continue;
    }
    if (!zeros)
      zeros = moe::ConstantOp::create(
          builder, loc,
          DenseElementsAttr::get(type,
                                 builder.getZeroAttr(type.getElementType())));
    slices.push_back(zeros);
  }
  return moe::StackOp::create(builder, loc, slices);
}

struct DetectExpertsPass
    : public moec::impl::MoeDetectExpertsBase<DetectExpertsPass> {
  void runOnOperation() override {
    SmallVector<moe::TopKOp> candidates;
    getOperation().walk([&](moe::TopKOp op) { candidates.push_back(op); });
    // Grouped selection's own top-ks are part of a layer, not near-misses:
    // remarks wait until every layer is matched.
    SmallVector<std::pair<moe::TopKOp, Failure>> nearMisses;
    llvm::DenseSet<Operation *> inLayer;
    for (moe::TopKOp topK : lastLayerFirst(candidates)) {
      LoopMatcher matcher(topK);
      if (!matcher.isCandidate())
        continue;
      std::optional<Failure> failure = matcher.match();
      for (moe::TopKOp groupTopK : matcher.layer.groupTopKs)
        inLayer.insert(groupTopK);
      if (failure) {
        nearMisses.emplace_back(topK, *failure);
        continue;
      }
      (void)rewrite(matcher.layer);
    }
    for (auto &[topK, failure] : nearMisses)
      if (!inLayer.contains(topK))
        recordNearMiss(topK, "per-expert loop", failure);
    // Switch Transformers routes with an arg-max; one over anything but a
    // softmax is no router (an empty failure), so it gets no remark.
    SmallVector<moe::ArgMaxOp> argMaxes;
    getOperation().walk([&](moe::ArgMaxOp op) { argMaxes.push_back(op); });
    for (moe::ArgMaxOp argMax : lastLayerFirst(argMaxes))
      detectSwitchLayer(argMax, getArgument());
    // The loop's ops are now dead; erase them so later passes and the plan
    // never see them.
    for (Block &block : getOperation().getBody())
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
        if (isOpTriviallyDead(&op))
          op.erase();
  }

  LogicalResult rewrite(LoopLayer &layer) {
    Value result = layer.result;
    OpBuilder builder(result.getDefiningOp());
    Location loc = result.getLoc();
    const LoopLayer::Network &network = *layer.network;
    auto stackIf = [&](bool present, moe::ConstantOp ExpertBlock::*member) {
      return present ? stackWeights(builder, loc, layer, member) : Value();
    };
    Value w1 = stackWeights(builder, loc, layer, &ExpertBlock::w1);
    Value b1 = stackIf(network.b1, &ExpertBlock::b1);
    Value w3 = stackIf(network.w3, &ExpertBlock::w3);
    Value b3 = stackIf(network.b3, &ExpertBlock::b3);
    Value w2 = stackWeights(builder, loc, layer, &ExpertBlock::w2);
    Value b2 = stackIf(network.b2, &ExpertBlock::b2);
    MLIRContext *context = builder.getContext();
    Value bias = createBiasConstant(builder, loc, layer.bias);
    RouterConfig config;
    config.topK = layer.topKValue;
    config.score = layer.score;
    config.normalize = layer.normalize;
    config.afterTopK = layer.afterTopK;
    config.scale = layer.scale;
    config.nGroup = layer.nGroup;
    config.topkGroup = layer.topkGroup;
    config.bias = bias;
    auto [router, dispatch] = createRouterAndDispatch(
        builder, loc, layer.logits, config, layer.tokens, layer.numExperts);
    auto experts = moe::ExpertsOp::create(
        builder, loc, dispatch.getRows(), dispatch.getOffsets(), w1, b1, w3, b3,
        w2, b2, moe::ActivationAttr::get(context, network.activation),
        moe::WeightLayoutAttr::get(context, *layer.layout),
        /*glu_layout=*/nullptr, /*alpha=*/nullptr, /*beta=*/nullptr,
        /*limit=*/nullptr);
    moe::setLayerForm(experts, "per-expert loop");
    auto combine = moe::CombineOp::create(
        builder, loc, experts.getOutput(), dispatch.getSource(),
        router.getWeights(), /*passthrough=*/Value(), /*indices=*/Value());
    if (combine.getType() != result.getType()) {
      layer.topK.emitRemark("MoE per-expert loop not rewritten: the combined "
                            "output type ")
          << combine.getType() << " differs from the loop's "
          << result.getType();
      for (Operation *op : {combine.getOperation(), experts.getOperation(),
                            dispatch.getOperation(), router.getOperation()})
        op->erase();
      for (Value stacked : {b2, w2, b3, w3, b1, w1})
        if (stacked)
          stacked.getDefiningOp()->erase();
      if (bias)
        bias.getDefiningOp()->erase();
      return failure();
    }
    if (failed(commitLayerRewrite(getArgument(), layer.topK, result,
                                  combine.getOutput(), layer.tokens)))
      return failure();
    rewriteSharedExperts(getArgument(), combine, layer.tokens);
    return success();
  }
};

} // namespace
