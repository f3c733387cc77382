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
// factor. SwiGLU MLPs on the same tokens added to the routed output (shared
// experts, plain or sigmoid-gated) become moe.shared_expert.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
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

/// The most bytes of per-expert weights the pass copies into stacked
/// constants. TODO: reference the per-expert blobs from `moe.experts` instead
/// of stacking them, so that real models (GBs of experts) are never copied;
/// until then larger layers stay generic with a remark.
constexpr int64_t kMaxStackedBytes = 64 << 20;

/// Why a match failed: the message of the remark.
using Failure = std::string;

/// Whether `value` is a single integer constant equal to `expected`.
bool isConstInt(Value value, int64_t expected) {
  std::optional<int64_t> actual = moe::getConstantInt(value);
  return actual && *actual == expected;
}

/// Whether `value` is a constant integer list equal to `expected`, where an
/// entry may also be written relative to `rank` (a negative axis).
bool isConstAxes(Value value, ArrayRef<int64_t> expected, int64_t rank) {
  std::optional<SmallVector<int64_t>> actual = moe::getConstantInts(value);
  if (!actual || actual->size() != expected.size())
    return false;
  for (auto [a, e] : llvm::zip(*actual, expected))
    if (a != e && a + rank != e)
      return false;
  return true;
}

/// A ranked type of rank 2 whose second dimension is static `dim1`.
bool isMatrixWithCols(Value value, int64_t dim1) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.getRank() == 2 && type.getDimSize(1) == dim1;
}

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

/// The operand of a binary op that is not `known`, or null.
template <typename OpTy> Value otherOperand(OpTy op, Value known) {
  if (op.getLhs() == known)
    return op.getRhs();
  if (op.getRhs() == known)
    return op.getLhs();
  return nullptr;
}

/// Strips reshapes between `[n, cols]` matrices: element counts match, so
/// the rows and their contents are unchanged.
Value stripMatrixReshapes(Value value, int64_t cols) {
  while (auto reshape = value.getDefiningOp<moe::ReshapeOp>()) {
    if (!isMatrixWithCols(reshape.getData(), cols) ||
        !isMatrixWithCols(reshape.getOutput(), cols))
      break;
    value = reshape.getData();
  }
  return value;
}

/// Whether the 0-D value `count` is the number of rows of the matrix
/// `tokens`: `dim(tokens, 0)`, or the product of the two leading dimensions
/// of the rank-3 tensor `tokens` was reshaped from.
bool isRowCountOf(Value count, Value tokens) {
  if (auto dim = count.getDefiningOp<moe::DimOp>())
    return dim.getInput() == tokens && dim.getIndex() == 0;
  auto mul = count.getDefiningOp<moe::MulOp>();
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
  auto lhs = mul.getLhs().getDefiningOp<moe::DimOp>();
  auto rhs = mul.getRhs().getDefiningOp<moe::DimOp>();
  return lhs && rhs && lhs.getInput() == source && rhs.getInput() == source &&
         ((lhs.getIndex() == 0 && rhs.getIndex() == 1) ||
          (lhs.getIndex() == 1 && rhs.getIndex() == 0));
}

/// Whether `value` is a `constant_of_shape` filled with float zeros.
moe::ConstantOfShapeOp getZeros(Value value) {
  auto zeros = value.getDefiningOp<moe::ConstantOfShapeOp>();
  if (!zeros || !zeros.getValue())
    return nullptr;
  auto fill = dyn_cast<DenseFPElementsAttr>(*zeros.getValue());
  if (!fill || fill.getNumElements() != 1 ||
      !(*fill.getValues<APFloat>().begin()).isZero())
    return nullptr;
  return zeros;
}

/// The float weight constant defining `value`, or null.
moe::ConstantOp getWeight(Value value) {
  auto constant = value.getDefiningOp<moe::ConstantOp>();
  if (!constant || !isa<FloatType>(constant.getType().getElementType()))
    return nullptr;
  return constant;
}

/// The bytes of a constant, or nullopt where they are not directly readable.
/// `storage` keeps expanded splats alive.
std::optional<ArrayRef<char>> getWeightBytes(moe::ConstantOp constant,
                                             std::vector<char> &storage) {
  auto type = cast<ShapedType>(constant.getType());
  int64_t bytes = type.getNumElements() * type.getElementTypeBitWidth() / 8;
  if (auto resource =
          dyn_cast<DenseResourceElementsAttr>(constant.getValue())) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob || static_cast<int64_t>(blob->getData().size()) != bytes)
      return std::nullopt;
    return blob->getData();
  }
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || type.getElementTypeBitWidth() % 8)
    return std::nullopt;
  ArrayRef<char> raw = dense.getRawData();
  if (!dense.isSplat())
    return raw;
  storage.clear();
  for (int64_t i = 0, e = type.getNumElements(); i < e; ++i)
    storage.insert(storage.end(), raw.begin(), raw.end());
  return ArrayRef<char>(storage);
}

/// The elements of an f32 constant of at most `maxElements` elements (so
/// that probing an operand never copies a weight), or nullopt.
std::optional<SmallVector<float>> getConstantFloats(Value value,
                                                    int64_t maxElements) {
  moe::ConstantOp constant = getWeight(value);
  if (!constant || !constant.getType().getElementType().isF32() ||
      constant.getType().getNumElements() > maxElements)
    return std::nullopt;
  std::vector<char> storage;
  std::optional<ArrayRef<char>> bytes = getWeightBytes(constant, storage);
  if (!bytes)
    return std::nullopt;
  SmallVector<float> floats(bytes->size() / sizeof(float));
  std::memcpy(floats.data(), bytes->data(), floats.size() * sizeof(float));
  return floats;
}

/// Whether `value` is a one-element f32 constant equal to `expected`.
bool isConstFloat(Value value, float expected) {
  std::optional<SmallVector<float>> floats = getConstantFloats(value, 1);
  return floats && floats->size() == 1 && (*floats)[0] == expected;
}

/// Whether the axis attribute `axis` (as stored: a signed value in an
/// unsigned getter) names the last axis of a `rank`-D tensor.
bool isLastAxis(uint64_t axis, int64_t rank) {
  int64_t signedAxis = static_cast<int64_t>(axis);
  return signedAxis == -1 || signedAxis == rank - 1;
}

/// Whether `op` selects the largest entries along the last axis of its
/// `rank`-D input.
bool isLargestOnLastAxis(moe::TopKOp op, int64_t rank) {
  return op.getLargest() == 1 && isLastAxis(op.getAxis(), rank);
}

/// A SwiGLU feed-forward network `(silu(x @ w1) * (x @ w3)) @ w2` on rows
/// `x`, with constant weights.
struct SwiGlu {
  Value input;
  moe::ConstantOp w1, w3, w2;
};

/// Matches `output` as a SwiGLU MLP with `silu(a) = a * sigmoid(a)`.
std::optional<Failure> matchSwiGlu(Value output, SwiGlu &ffn) {
  auto down = output.getDefiningOp<moe::MatMulOp>();
  auto act = down ? down.getA().getDefiningOp<moe::MulOp>() : nullptr;
  if (!act || !(ffn.w2 = getWeight(down.getB())))
    return Failure("the expert output is not a matmul by a down-projection "
                   "weight");
  for (auto [siluValue, upValue] : {std::pair{act.getLhs(), act.getRhs()},
                                    std::pair{act.getRhs(), act.getLhs()}}) {
    auto silu = siluValue.getDefiningOp<moe::MulOp>();
    auto up = upValue.getDefiningOp<moe::MulOp>()
                  ? nullptr
                  : upValue.getDefiningOp<moe::MatMulOp>();
    if (!silu || !up)
      continue;
    Value gateValue;
    for (auto [a, s] : {std::pair{silu.getLhs(), silu.getRhs()},
                        std::pair{silu.getRhs(), silu.getLhs()}}) {
      auto sigmoid = s.getDefiningOp<moe::SigmoidOp>();
      if (sigmoid && sigmoid.getInput() == a)
        gateValue = a;
    }
    auto gate = gateValue ? gateValue.getDefiningOp<moe::MatMulOp>() : nullptr;
    if (!gate || gate.getA() != up.getA())
      continue;
    ffn.w1 = getWeight(gate.getB());
    ffn.w3 = getWeight(up.getB());
    if (!ffn.w1 || !ffn.w3)
      return Failure("gate or up projection is not a constant weight");
    ffn.input = gate.getA();
    return std::nullopt;
  }
  return Failure("the activation is not SwiGLU (silu(x @ w1) * (x @ w3))");
}

/// A shared expert: a SwiGLU MLP on every token, optionally scaled by
/// `sigmoid(x @ gate)` with a `[H, 1]` gate (Qwen2-MoE's
/// `shared_expert_gate`).
struct SharedExpert {
  SwiGlu ffn;
  moe::ConstantOp gate;
};

/// Whether `ffn` is an f32 SwiGLU on `tokens` (`[..., H]`) with weights
/// `[H, F]`, `[H, F]`, `[F, H]`.
bool isSharedFfnOn(SwiGlu ffn, Value tokens) {
  auto tokensType = cast<RankedTensorType>(tokens.getType());
  int64_t hidden = tokensType.getShape().back();
  auto w1 = cast<RankedTensorType>(ffn.w1.getType());
  if (ffn.input != tokens || w1.getRank() != 2)
    return false;
  int64_t inter = w1.getDimSize(1);
  auto expect = [&](moe::ConstantOp weight, int64_t in, int64_t out) {
    auto type = cast<RankedTensorType>(weight.getType());
    return type.getShape() == ArrayRef<int64_t>{in, out} &&
           type.getElementType().isF32();
  };
  return expect(ffn.w1, hidden, inter) && expect(ffn.w3, hidden, inter) &&
         expect(ffn.w2, inter, hidden);
}

/// Matches `value` as a shared expert on `tokens`: the rows the routed
/// experts see (`[T, H]`), or the model's `[B, S, H]` they were flattened
/// from. Sets `nearMiss` when `value` is a SwiGLU MLP (possibly gated) that
/// is not such a shared expert.
std::optional<SharedExpert>
matchSharedExpert(Value value, Value tokens, std::optional<Failure> &nearMiss) {
  SharedExpert shared;
  Value ffnValue = value;
  // sigmoid(x @ gate) [T, 1] broadcast over the FFN's [T, H] scales each row.
  if (auto mul = value.getDefiningOp<moe::MulOp>()) {
    for (auto [gateValue, other] : {std::pair{mul.getLhs(), mul.getRhs()},
                                    std::pair{mul.getRhs(), mul.getLhs()}}) {
      auto sigmoid = gateValue.getDefiningOp<moe::SigmoidOp>();
      auto matmul =
          sigmoid ? sigmoid.getInput().getDefiningOp<moe::MatMulOp>() : nullptr;
      if (!matmul || !other.getDefiningOp<moe::MatMulOp>())
        continue;
      shared.gate = getWeight(matmul.getB());
      ffnValue = other;
      int64_t hidden =
          cast<RankedTensorType>(tokens.getType()).getShape().back();
      if (!shared.gate || matmul.getA() != tokens ||
          shared.gate.getType().getShape() != ArrayRef<int64_t>{hidden, 1} ||
          !shared.gate.getType().getElementType().isF32()) {
        if (!matchSwiGlu(ffnValue, shared.ffn))
          nearMiss = "its gate is not sigmoid(tokens @ w) with a constant "
                     "f32 [H, 1] weight w";
        return std::nullopt;
      }
      break;
    }
  }
  if (matchSwiGlu(ffnValue, shared.ffn))
    return std::nullopt;
  if (!isSharedFfnOn(shared.ffn, tokens) ||
      value.getType() != tokens.getType()) {
    nearMiss = "it is not an f32 SwiGLU MLP on the router's tokens with "
               "weights [H, F], [H, F], [F, H]";
    return std::nullopt;
  }
  return shared;
}

/// One expert's block of the loop: its SwiGLU weights (`[in, out]` each) and
/// the accumulation step that adds its weighted output.
struct ExpertBlock {
  moe::ConstantOp w1, w3, w2;
  moe::AddOp accumulate;
  Value previous;
};

/// A matched per-expert loop.
struct LoopLayer {
  moe::TopKOp topK;
  Value logits, tokens;
  int64_t numExperts = 0, topKValue = 0, hidden = 0, ffn = 0;
  bool normalize = false;
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
  moe::AddOp result;
};

/// The first user of `value` of type `OpTy` that `accept` admits.
template <typename OpTy, typename Pred>
OpTy findUser(Value value, Pred accept) {
  for (Operation *user : value.getUsers())
    if (auto op = dyn_cast<OpTy>(user))
      if (accept(op))
        return op;
  return nullptr;
}

class LoopMatcher {
public:
  explicit LoopMatcher(moe::TopKOp topK) { layer.topK = topK; }

  /// Matches the whole layer; on failure returns why.
  std::optional<Failure> match() {
    if (auto failure = matchRouter())
      return failure;
    return matchExperts();
  }

  LoopLayer layer;

private:
  Value weights, values, mask;
  /// The router's scores: the softmax or sigmoid of the logits.
  Value scores;
  /// The choice score grouped selection gives experts of dropped groups.
  float maskFill = 0.0f;

  /// Softmax or Sigmoid [-> selection bias, grouped masking] -> TopK
  /// -> OneHot -> Transpose.
  std::optional<Failure> matchRouter() {
    moe::TopKOp topK = layer.topK;
    Value selection = topK.getInput();
    if (auto softmax = selection.getDefiningOp<moe::SoftmaxOp>()) {
      int64_t softmaxAxis = static_cast<int64_t>(softmax.getAxis());
      if (softmaxAxis != 1 && softmaxAxis != -1)
        return Failure("softmax or top-k is not over the expert axis");
      scores = softmax.getOutput();
      layer.logits = softmax.getInput();
    } else if (auto failure = matchSigmoidSelection(selection)) {
      return failure;
    }
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
    auto matmul = logits.getDefiningOp<moe::MatMulOp>();
    if (!matmul)
      return Failure("router logits are not a matmul of the tokens");
    layer.tokens = matmul.getA();
    layer.topKValue = *k;
    values = topK.getValues();

    auto oneHot =
        findUser<moe::OneHotOp>(topK.getIndices(), [&](moe::OneHotOp op) {
          int64_t axis = static_cast<int64_t>(op.getAxis());
          return (axis == -1 || axis == 2) &&
                 isConstInt(op.getDepth(), layer.numExperts) &&
                 moe::getConstantInts(op.getValues()) ==
                     SmallVector<int64_t>{0, 1};
        });
    if (!oneHot)
      return Failure("top-k indices are not one-hot encoded over E experts");
    auto transpose =
        findUser<moe::TransposeOp>(oneHot.getOutput(), [](moe::TransposeOp op) {
          return op.getPerm() && (*op.getPerm() == ArrayRef<int64_t>{2, 1, 0} ||
                                  *op.getPerm() == ArrayRef<int64_t>{2, 0, 1});
        });
    if (!transpose)
      return Failure("expert mask is not transposed to [E, k, T] or [E, T, k]");
    layer.tokenFirst = *transpose.getPerm() == ArrayRef<int64_t>{2, 0, 1};
    mask = transpose.getOutput();
    return std::nullopt;
  }

  /// Sigmoid scores `s` chosen by `c = s [+ bias]`, optionally restricted to
  /// the best expert groups (DeepSeek-V3).
  std::optional<Failure> matchSigmoidSelection(Value selection) {
    const char *notScores = "top-k input is neither a softmax nor sigmoid "
                            "scores with an optional selection bias";
    Value choice = selection;
    auto where = selection.getDefiningOp<moe::WhereOp>();
    if (where)
      choice = where.getY();
    auto choiceType = dyn_cast<RankedTensorType>(choice.getType());
    if (!choiceType || choiceType.getRank() != 2 || choiceType.isDynamicDim(1))
      return Failure(notScores);
    int64_t numExperts = choiceType.getDimSize(1);
    Value base = choice;
    if (auto add = choice.getDefiningOp<moe::AddOp>()) {
      for (auto [lhs, rhs] : {std::pair{add.getLhs(), add.getRhs()},
                              std::pair{add.getRhs(), add.getLhs()}}) {
        moe::ConstantOp constant = getWeight(rhs);
        auto shape =
            constant ? constant.getType().getShape() : ArrayRef<int64_t>();
        if (!constant || !(shape == ArrayRef<int64_t>{numExperts} ||
                           shape == ArrayRef<int64_t>{1, numExperts}))
          continue;
        std::optional<SmallVector<float>> bias =
            getConstantFloats(rhs, numExperts);
        if (!bias)
          return Failure("the selection bias is not readable f32 data");
        layer.bias = std::move(*bias);
        base = lhs;
        break;
      }
    }
    auto sigmoid =
        stripMatrixReshapes(base, numExperts).getDefiningOp<moe::SigmoidOp>();
    if (!sigmoid)
      return Failure(notScores);
    scores = sigmoid.getOutput();
    layer.logits = sigmoid.getInput();
    layer.score = moe::ScoreFunction::Sigmoid;
    if (!where)
      return std::nullopt;
    if (auto failure = matchGroupMask(where, choice, numExperts))
      return Failure(llvm::formatv("grouped selection: {0}", *failure));
    // Masked experts get the fill value, which excludes them only while it
    // is below every eligible choice score `sigmoid + bias >= bias` (the
    // sigmoid may underflow to 0).
    SmallVector<float> lowest = layer.bias;
    if (lowest.empty())
      lowest.push_back(0.0f);
    if (llvm::any_of(lowest, [&](float b) { return !(b > maskFill); })) {
      char fill[32];
      std::snprintf(fill, sizeof(fill), "%g", maskFill);
      return Failure(llvm::formatv("grouped selection sets masked experts to "
                                   "{0}, not below every selection bias, so "
                                   "they could still be chosen",
                                   fill));
    }
    return std::nullopt;
  }

  /// `where(not(cast(mask)), fill, c)` where `mask` marks the experts of the
  /// `topk_group` groups with the largest sum of their two best `c`; the
  /// constant `fill` is checked against the choice scores by the caller.
  std::optional<Failure> matchGroupMask(moe::WhereOp where, Value choice,
                                        int64_t numExperts) {
    auto negate = where.getCondition().getDefiningOp<moe::NotOp>();
    auto toBool =
        negate ? negate.getInput().getDefiningOp<moe::CastOp>() : nullptr;
    std::optional<SmallVector<float>> fill = getConstantFloats(where.getX(), 1);
    if (!toBool || !toBool.getTo().isInteger(1) || !fill || fill->size() != 1)
      return Failure("experts outside the kept groups are not set to a "
                     "constant");
    maskFill = (*fill)[0];
    auto flat = toBool.getInput().getDefiningOp<moe::ReshapeOp>();
    auto expand =
        flat ? flat.getData().getDefiningOp<moe::ExpandOp>() : nullptr;
    auto unsqueeze =
        expand ? expand.getInput().getDefiningOp<moe::UnsqueezeOp>() : nullptr;
    if (!unsqueeze || !isMatrixWithCols(flat.getOutput(), numExperts) ||
        !isConstAxes(unsqueeze.getAxes(), {2}, 3))
      return Failure("the expert mask is not the group mask repeated over "
                     "each group's experts");
    auto groupMask = unsqueeze.getData();
    auto groupMaskType = cast<RankedTensorType>(groupMask.getType());
    if (groupMaskType.getRank() != 2 || groupMaskType.isDynamicDim(1))
      return Failure("the group mask is not a [T, n] matrix");
    int64_t nGroup = groupMaskType.getDimSize(1);
    if (nGroup < 1 || numExperts % nGroup || numExperts / nGroup < 2)
      return Failure("the groups do not split E into groups of at least 2");
    int64_t groupSize = numExperts / nGroup;
    if (moe::getConstantInts(expand.getShape()) !=
        SmallVector<int64_t>{1, nGroup, groupSize})
      return Failure("the expert mask is not the group mask repeated over "
                     "each group's experts");

    // mask = scatter_elements(zeros_like(g), top_k(g, m).indices, 1).
    auto scatter = groupMask.getDefiningOp<moe::ScatterElementsOp>();
    auto ones =
        scatter ? scatter.getUpdates().getDefiningOp<moe::ExpandOp>() : nullptr;
    auto zeros = scatter ? getZeros(scatter.getData()) : nullptr;
    auto groupTopK =
        scatter ? scatter.getIndices().getDefiningOp<moe::TopKOp>() : nullptr;
    if (!ones || !zeros || !groupTopK ||
        scatter.getIndices() != groupTopK.getIndices() ||
        !isLastAxis(scatter.getAxis(), 2) || scatter.getReduction() != "none" ||
        !isConstFloat(ones.getInput(), 1.0f))
      return Failure("the group mask is not ones scattered at the top "
                     "groups' indices into zeros");
    // From here on the group top-k, and the top-k within groups feeding it,
    // are part of this gate rather than candidates of their own.
    Value groupScores = groupTopK.getInput();
    auto sum = groupScores.getDefiningOp<moe::ReduceSumOp>();
    auto innerTopK = sum ? sum.getData().getDefiningOp<moe::TopKOp>() : nullptr;
    layer.groupTopKs.push_back(groupTopK);
    if (innerTopK)
      layer.groupTopKs.push_back(innerTopK);
    auto zerosShape = zeros.getInput().getDefiningOp<moe::ShapeOp>();
    std::optional<int64_t> topkGroup = moe::getConstantInt(groupTopK.getK());
    if (!zerosShape || zerosShape.getData() != groupScores ||
        zerosShape.getStart() != 0 || zerosShape.getEnd() ||
        !isLargestOnLastAxis(groupTopK, 2) || !topkGroup || *topkGroup < 1 ||
        *topkGroup > nGroup)
      return Failure("the kept groups are not the top-m of the group scores");

    // g = reduce_sum(top_k(reshape(c, [-1, n, E / n]), 2).values, -1).
    auto grouped = innerTopK
                       ? innerTopK.getInput().getDefiningOp<moe::ReshapeOp>()
                       : nullptr;
    if (!grouped || sum.getData() != innerTopK.getValues() ||
        sum.getKeepdims() != 0 || !sum.getAxes() ||
        !isConstAxes(sum.getAxes(), {2}, 3) ||
        !isLargestOnLastAxis(innerTopK, 3) ||
        !isConstInt(innerTopK.getK(), 2) || grouped.getData() != choice ||
        moe::getConstantInts(grouped.getShape()) !=
            SmallVector<int64_t>{-1, nGroup, groupSize})
      return Failure("a group's score is not the sum of its two best "
                     "choice scores");
    layer.nGroup = nGroup;
    layer.topkGroup = *topkGroup;
    return std::nullopt;
  }

  /// Matches the routing weights a block gathers: the chosen scores (the
  /// top-k values, or the scores gathered at the top-k indices where a bias
  /// or groups chose them), optionally renormalised over k
  /// (`w / (reduce_sum(w, -1, keepdims) [+ 1e-20])`), then optionally
  /// scaled by a constant.
  std::optional<Failure> matchWeights(Value gathered) {
    if (weights)
      return gathered == weights
                 ? std::nullopt
                 : std::optional<Failure>("experts gather different weights");
    Value chosen = gathered;
    if (auto mul = chosen.getDefiningOp<moe::MulOp>()) {
      for (auto [lhs, rhs] : {std::pair{mul.getLhs(), mul.getRhs()},
                              std::pair{mul.getRhs(), mul.getLhs()}}) {
        std::optional<SmallVector<float>> factor = getConstantFloats(rhs, 1);
        if (!factor || factor->size() != 1 || !((*factor)[0] > 0.0f) ||
            !std::isfinite((*factor)[0]))
          continue;
        layer.scale = (*factor)[0];
        chosen = lhs;
        break;
      }
    }
    if (auto div = chosen.getDefiningOp<moe::DivOp>()) {
      Value denominator = div.getRhs();
      // The router adds the same 1e-20 (see moe.router).
      if (auto add = denominator.getDefiningOp<moe::AddOp>()) {
        if (isConstFloat(add.getRhs(), 1e-20f))
          denominator = add.getLhs();
        else if (isConstFloat(add.getLhs(), 1e-20f))
          denominator = add.getRhs();
      }
      auto sum = denominator.getDefiningOp<moe::ReduceSumOp>();
      if (!sum || sum.getData() != div.getLhs() || sum.getKeepdims() != 1 ||
          !sum.getAxes() || !isConstAxes(sum.getAxes(), {1}, 2))
        return Failure("routing weights are neither the top-k scores nor "
                       "their renormalisation over k");
      layer.normalize = true;
      chosen = div.getLhs();
    }
    bool isTopKValues = chosen == values && layer.topK.getInput() == scores;
    auto gatherScores = chosen.getDefiningOp<moe::GatherElementsOp>();
    bool isGatheredScores =
        gatherScores && gatherScores.getData() == scores &&
        gatherScores.getIndices() == layer.topK.getIndices() &&
        isLastAxis(gatherScores.getAxis(), 2);
    if (!isTopKValues && !isGatheredScores)
      return Failure("routing weights are neither the top-k scores nor "
                     "their renormalisation over k");
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

  /// mask[e] -> Cast(bool) -> NonZero -> Transpose -> Split -> Squeeze gives
  /// the (slot j, token t) pairs routed to expert e.
  std::optional<Failure> matchBlock(moe::GatherOp select, int64_t expert) {
    auto cast = findUser<moe::CastOp>(select.getOutput(), [](moe::CastOp op) {
      return op.getTo().isInteger(1);
    });
    auto nonZero = cast ? findUser<moe::NonZeroOp>(cast.getOutput(),
                                                   [](auto) { return true; })
                        : nullptr;
    auto transpose =
        nonZero
            ? findUser<moe::TransposeOp>(nonZero.getOutput(),
                                         [](moe::TransposeOp op) {
                                           return op.getPerm() &&
                                                  *op.getPerm() ==
                                                      ArrayRef<int64_t>{1, 0};
                                         })
            : nullptr;
    auto split = transpose
                     ? findUser<moe::SplitOp>(transpose.getOutput(),
                                              [](moe::SplitOp op) {
                                                return op.getAxis() == 1 &&
                                                       op.getNumResults() == 2;
                                              })
                     : nullptr;
    if (!split)
      return Failure("the routed (slot, token) pairs are not computed by "
                     "NonZero of the expert's mask");
    auto squeezed = [](Value value) -> Value {
      auto squeeze = findUser<moe::SqueezeOp>(value, [](moe::SqueezeOp op) {
        return op.getAxes() && isConstAxes(op.getAxes(), {1}, 2);
      });
      return squeeze ? squeeze.getOutput() : nullptr;
    };
    Value slot = squeezed(split.getResult(layer.tokenFirst ? 1 : 0));
    Value token = squeezed(split.getResult(layer.tokenFirst ? 0 : 1));
    if (!slot || !token)
      return Failure("slot or token indices are not squeezed to vectors");

    // Accumulation: acc + scatter_elements(zeros_like(acc),
    //                                      expand(unsqueeze(t, 1)), y).
    moe::ScatterElementsOp scatter;
    for (Operation *user : token.getUsers()) {
      auto unsqueeze = dyn_cast<moe::UnsqueezeOp>(user);
      if (!unsqueeze || !isConstAxes(unsqueeze.getAxes(), {1}, 2))
        continue;
      for (Operation *indexUser : unsqueeze.getOutput().getUsers()) {
        auto expand = dyn_cast<moe::ExpandOp>(indexUser);
        if (!expand)
          continue;
        scatter = findUser<moe::ScatterElementsOp>(
            expand.getOutput(), [&](moe::ScatterElementsOp op) {
              auto shape = expand.getShape().getDefiningOp<moe::ShapeOp>();
              return op.getIndices() == expand.getOutput() && shape &&
                     shape.getData() == op.getUpdates() &&
                     shape.getStart() == 0 && !shape.getEnd();
            });
        if (scatter)
          break;
      }
      if (scatter)
        break;
    }
    if (!scatter)
      return Failure("the expert output is not scattered to its tokens' rows "
                     "(index_add)");
    if (scatter.getAxis() != 0 || scatter.getReduction() != "none")
      return Failure("the scatter is not a row-wise overwrite of zeros");
    auto zeros = getZeros(scatter.getData());
    auto zerosShape =
        zeros ? zeros.getInput().getDefiningOp<moe::ShapeOp>() : nullptr;
    if (!zerosShape || zerosShape.getStart() != 0 || zerosShape.getEnd() ||
        !scatter.getOutput().hasOneUse())
      return Failure("the scatter does not start from zeros shaped like the "
                     "accumulator");
    auto add = dyn_cast<moe::AddOp>(*scatter.getOutput().getUsers().begin());
    Value previous = add ? otherOperand(add, scatter.getOutput()) : nullptr;
    if (!previous || previous != zerosShape.getData() ||
        !isMatrixWithCols(add.getOutput(), layer.hidden))
      return Failure("the scattered output is not added to the accumulator");

    // The weighted output: y * gather(flatten(unsqueeze(w, 2)), j + t * k),
    // where expanding the rows is harmless: every copy overwrites the same
    // row with the same value.
    Value updates = scatter.getUpdates();
    if (auto expand = updates.getDefiningOp<moe::ExpandOp>())
      if (isMatrixWithCols(expand.getInput(), layer.hidden) &&
          isMatrixWithCols(expand.getOutput(), layer.hidden))
        updates = expand.getInput();
    auto scale = updates.getDefiningOp<moe::MulOp>();
    if (!scale)
      return Failure("the expert output is not scaled by its routing weight");
    for (auto [output, factor] : {std::pair{scale.getLhs(), scale.getRhs()},
                                  std::pair{scale.getRhs(), scale.getLhs()}}) {
      std::optional<Failure> weightFailure =
          matchRoutingWeight(stripColumnReshapes(factor), slot, token);
      if (weightFailure)
        continue;
      ExpertBlock block;
      if (auto failure = matchFfn(output, token, block))
        return failure;
      block.accumulate = add;
      block.previous = previous;
      layer.experts[expert] = block;
      return std::nullopt;
    }
    return Failure("the expert output is not scaled by the weight of its "
                   "(token, slot) pair");
  }

  /// `gather(flatten(w), j + t * k)` is `w[t, j]` as a column, where the
  /// flatten of `w` (`[T, k]`, or `[T, k, 1]` unsqueezed) to a `[T * k, 1]`
  /// column keeps row-major order.
  std::optional<Failure> matchRoutingWeight(Value value, Value slot,
                                            Value token) {
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

  /// The SwiGLU MLP on the gathered tokens.
  std::optional<Failure> matchFfn(Value output, Value token,
                                  ExpertBlock &block) {
    SwiGlu ffn;
    if (auto failure = matchSwiGlu(output, ffn))
      return failure;
    block.w1 = ffn.w1;
    block.w3 = ffn.w3;
    block.w2 = ffn.w2;
    return matchExpertTokens(ffn.input, token, block);
  }

  /// The expert's input rows are `x[t]`:
  /// `reshape(gather(unsqueeze(x, 0), t, axis = 1))` to `[N, H]`.
  std::optional<Failure> matchExpertTokens(Value rows, Value token,
                                           ExpertBlock &block) {
    auto direct = rows.getDefiningOp<moe::GatherOp>();
    auto reshape = rows.getDefiningOp<moe::ReshapeOp>();
    auto gather =
        reshape ? reshape.getData().getDefiningOp<moe::GatherOp>() : nullptr;
    auto unsqueeze =
        gather ? gather.getData().getDefiningOp<moe::UnsqueezeOp>() : nullptr;
    bool gathersRows = direct ? direct.getData() == layer.tokens &&
                                    direct.getAxis() == 0 &&
                                    direct.getIndices() == token
                              : unsqueeze && gather.getAxis() == 1 &&
                                    gather.getIndices() == token &&
                                    unsqueeze.getData() == layer.tokens &&
                                    isConstAxes(unsqueeze.getAxes(), {0}, 3);
    if (!gathersRows || !isMatrixWithCols(rows, layer.hidden))
      return Failure("the expert's input is not the router's tokens gathered "
                     "at its routed token indices");
    auto w1 = cast<RankedTensorType>(block.w1.getType());
    int64_t ffn = w1.getRank() == 2 ? w1.getDimSize(1) : ShapedType::kDynamic;
    auto expect = [&](moe::ConstantOp weight, int64_t in, int64_t out) {
      auto type = cast<RankedTensorType>(weight.getType());
      return type.getShape() == ArrayRef<int64_t>{in, out} &&
             type.getElementType().isF32();
    };
    if (!expect(block.w1, layer.hidden, ffn) ||
        !expect(block.w3, layer.hidden, ffn) ||
        !expect(block.w2, ffn, layer.hidden) || (layer.ffn && layer.ffn != ffn))
      return Failure("expert weights are not f32 [H, F], [H, F], [F, H] with "
                     "one F for all experts");
    layer.ffn = ffn;
    return std::nullopt;
  }

  /// The blocks' additions form one chain from a zero [T, H] accumulator.
  std::optional<Failure> matchAccumulation() {
    llvm::DenseMap<Value, moe::AddOp> next;
    for (auto &[expert, block] : layer.experts)
      if (!next.try_emplace(block.previous, block.accumulate).second)
        return Failure("two experts accumulate into the same value");
    Value start;
    for (auto &[expert, block] : layer.experts) {
      bool chained = false;
      for (auto &[other, otherBlock] : layer.experts)
        chained |= otherBlock.accumulate.getOutput() == block.previous;
      if (!chained) {
        if (start)
          return Failure("expert outputs are not accumulated in one chain");
        start = block.previous;
      }
    }
    auto zeros = start ? getZeros(start) : nullptr;
    if (!zeros || !isMatrixWithCols(start, layer.hidden))
      return Failure("the accumulator does not start from zeros");
    bool rowsMatch = false;
    if (auto shape = zeros.getInput().getDefiningOp<moe::ShapeOp>()) {
      rowsMatch = shape.getData() == layer.tokens && shape.getStart() == 0 &&
                  !shape.getEnd();
    } else if (auto concat = zeros.getInput().getDefiningOp<moe::ConcatOp>()) {
      auto rows = concat.getInputs().size() == 2
                      ? concat.getInputs()[0].getDefiningOp<moe::UnsqueezeOp>()
                      : nullptr;
      rowsMatch = rows && isConstAxes(rows.getAxes(), {0}, 1) &&
                  isRowCountOf(rows.getData(), layer.tokens) &&
                  isConstAxes(concat.getInputs()[1], {layer.hidden}, 0);
    }
    if (!rowsMatch)
      return Failure("the accumulator is not shaped like the tokens");
    Value value = start;
    for (size_t i = 0; i < layer.experts.size(); ++i)
      value = next.lookup(value).getOutput();
    layer.result = value.getDefiningOp<moe::AddOp>();
    return std::nullopt;
  }
};

/// Stacks per-expert `[a, b]` weights into one `[E, a, b]` constant; pruned
/// experts get zeros.
Value stackWeights(OpBuilder &builder, Location loc, LoopLayer &layer,
                   moe::ConstantOp ExpertBlock::*member, StringRef name) {
  auto type =
      cast<RankedTensorType>((layer.experts.begin()->second.*member).getType());
  int64_t bytes = type.getNumElements() * 4;
  std::vector<char> data(layer.numExperts * bytes, 0);
  std::vector<char> storage;
  for (auto &[expert, block] : layer.experts) {
    std::optional<ArrayRef<char>> source =
        getWeightBytes(block.*member, storage);
    if (!source)
      return nullptr;
    std::copy(source->begin(), source->end(), data.begin() + expert * bytes);
  }
  auto stacked = RankedTensorType::get(
      {layer.numExperts, type.getDimSize(0), type.getDimSize(1)},
      type.getElementType());
  auto attr = DenseResourceElementsAttr::get(
      stacked, name,
      HeapAsmResourceBlob::allocateAndCopyInferAlign(ArrayRef<char>(data)));
  return moe::ConstantOp::create(builder, loc, attr);
}

struct DetectExpertsPass
    : public moec::impl::MoeDetectExpertsBase<DetectExpertsPass> {
  void runOnOperation() override {
    SmallVector<moe::TopKOp> candidates;
    getOperation().walk([&](moe::TopKOp op) { candidates.push_back(op); });
    int layerIndex = 0;
    // Grouped selection's own top-ks are part of a layer, not near-misses:
    // remarks wait until every layer is matched.
    SmallVector<std::pair<moe::TopKOp, Failure>> nearMisses;
    llvm::DenseSet<Operation *> inLayer;
    for (moe::TopKOp topK : candidates) {
      LoopMatcher matcher(topK);
      std::optional<Failure> failure = matcher.match();
      for (moe::TopKOp groupTopK : matcher.layer.groupTopKs)
        inLayer.insert(groupTopK);
      if (failure) {
        nearMisses.emplace_back(topK, *failure);
        continue;
      }
      if (failed(rewrite(matcher.layer, layerIndex)))
        continue;
      ++layerIndex;
    }
    for (auto &[topK, failure] : nearMisses)
      if (!inLayer.contains(topK))
        topK.emitRemark("MoE per-expert loop not detected: ") << failure;
    // The loop's ops are now dead; erase them so later passes and the plan
    // never see them.
    for (Block &block : getOperation().getBody())
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
        if (isOpTriviallyDead(&op))
          op.erase();
  }

  LogicalResult rewrite(LoopLayer &layer, int layerIndex) {
    int64_t stackedBytes = layer.numExperts * 3 * layer.hidden * layer.ffn * 4;
    if (stackedBytes > kMaxStackedBytes) {
      layer.topK.emitRemark("MoE per-expert loop not rewritten: stacking its "
                            "expert weights would copy ")
          << stackedBytes << " bytes (limit " << kMaxStackedBytes << ")";
      return failure();
    }
    moe::AddOp result = layer.result;
    OpBuilder builder(result);
    Location loc = result.getLoc();
    std::string prefix = llvm::formatv("moe.layer{0}.", layerIndex).str();
    Value w1 =
        stackWeights(builder, loc, layer, &ExpertBlock::w1, prefix + "w1");
    Value w3 =
        stackWeights(builder, loc, layer, &ExpertBlock::w3, prefix + "w3");
    Value w2 =
        stackWeights(builder, loc, layer, &ExpertBlock::w2, prefix + "w2");
    if (!w1 || !w3 || !w2) {
      layer.topK.emitRemark("MoE per-expert loop not rewritten: an expert "
                            "weight's data is not readable");
      for (Value stacked : {w1, w3, w2})
        if (stacked)
          stacked.getDefiningOp()->erase();
      return failure();
    }
    MLIRContext *context = builder.getContext();
    Value bias;
    if (!layer.bias.empty())
      bias = moe::ConstantOp::create(
          builder, loc,
          DenseElementsAttr::get(
              RankedTensorType::get({layer.numExperts}, builder.getF32Type()),
              ArrayRef<float>(layer.bias)));
    auto router = moe::RouterOp::create(
        builder, loc, layer.logits, bias,
        moe::ScoreFunctionAttr::get(context, layer.score),
        builder.getI64IntegerAttr(layer.topKValue),
        /*score_after_topk=*/nullptr,
        layer.normalize ? builder.getUnitAttr() : nullptr,
        builder.getF32FloatAttr(layer.scale),
        builder.getI64IntegerAttr(layer.nGroup),
        builder.getI64IntegerAttr(layer.topkGroup), /*capacity=*/nullptr);
    auto dispatch =
        moe::DispatchOp::create(builder, loc, layer.tokens, router.getIndices(),
                                builder.getI64IntegerAttr(layer.numExperts));
    auto experts = moe::ExpertsOp::create(
        builder, loc, dispatch.getRows(), dispatch.getOffsets(), w1,
        /*b1=*/Value(), w3, /*b3=*/Value(), w2, /*b2=*/Value(),
        moe::ActivationAttr::get(context, moe::Activation::SiluGlu),
        moe::WeightLayoutAttr::get(context, moe::WeightLayout::InOut),
        /*glu_layout=*/nullptr, /*alpha=*/nullptr, /*beta=*/nullptr,
        /*limit=*/nullptr);
    auto combine = moe::CombineOp::create(
        builder, loc, experts.getOutput(), dispatch.getSource(),
        router.getWeights(), /*passthrough=*/Value(), /*indices=*/Value());
    if (combine.getType() != result.getType()) {
      layer.topK.emitRemark("MoE per-expert loop not rewritten: the combined "
                            "output type ")
          << combine.getType() << " differs from the loop's "
          << result.getType();
      for (Operation *op :
           {combine.getOperation(), experts.getOperation(),
            dispatch.getOperation(), router.getOperation(), w2.getDefiningOp(),
            w3.getDefiningOp(), w1.getDefiningOp()})
        op->erase();
      if (bias)
        bias.getDefiningOp()->erase();
      return failure();
    }
    result.getOutput().replaceAllUsesWith(combine.getOutput());
    rewriteSharedExperts(combine, layer.tokens);
    return success();
  }

  /// Rewrites the shared experts whose output is added to the layer's
  /// combined output into `moe.shared_expert`; their ops die with the loop's.
  void rewriteSharedExperts(moe::CombineOp combine, Value tokens) {
    rewriteSharedExpertsAddedTo(combine.getOutput(), tokens, tokens);
    // Exports often add the shared expert after reshaping the routed output
    // back to the model's [B, S, H], computing it on the [B, S, H] input the
    // tokens were flattened from.
    auto flatten = tokens.getDefiningOp<moe::ReshapeOp>();
    if (!flatten)
      return;
    Value input = flatten.getData();
    auto inputType = cast<RankedTensorType>(input.getType());
    if (inputType.getRank() < 2 ||
        inputType.getShape().back() !=
            cast<RankedTensorType>(tokens.getType()).getDimSize(1))
      return;
    for (Operation *user : combine.getOutput().getUsers())
      if (auto reshape = dyn_cast<moe::ReshapeOp>(user))
        if (reshape.getOutput().getType() == inputType)
          rewriteSharedExpertsAddedTo(reshape.getOutput(), input, tokens);
  }

  /// Rewrites the shared experts on `input` added to `sum` into
  /// `moe.shared_expert` on the `[T, H]` `tokens` flattened from `input`:
  /// the expert acts row by row, so `F(input)` is `F(tokens)` reshaped to
  /// `input`'s shape.
  void rewriteSharedExpertsAddedTo(Value sum, Value input, Value tokens) {
    MLIRContext *context = sum.getContext();
    for (Operation *user : llvm::make_early_inc_range(sum.getUsers())) {
      auto add = dyn_cast<moe::AddOp>(user);
      if (!add || add.getLhs() == add.getRhs())
        continue;
      OpOperand &operand =
          add.getLhs() == sum ? add.getRhsMutable() : add.getLhsMutable();
      std::optional<Failure> nearMiss;
      std::optional<SharedExpert> shared =
          matchSharedExpert(operand.get(), input, nearMiss);
      if (!shared) {
        if (nearMiss)
          add.emitRemark("MoE shared expert not detected in the MLP added to "
                         "the routed experts' output: ")
              << *nearMiss;
        continue;
      }
      OpBuilder builder(add);
      Location loc = operand.get().getLoc();
      Value output = moe::SharedExpertOp::create(
          builder, loc, tokens, shared->ffn.w1,
          /*b1=*/Value(), shared->ffn.w3, /*b3=*/Value(), shared->ffn.w2,
          /*b2=*/Value(), shared->gate ? shared->gate.getOutput() : Value(),
          moe::ActivationAttr::get(context, moe::Activation::SiluGlu),
          moe::WeightLayoutAttr::get(context, moe::WeightLayout::InOut),
          /*glu_layout=*/nullptr, /*alpha=*/nullptr, /*beta=*/nullptr,
          /*limit=*/nullptr);
      if (input != tokens) {
        Value shape = moe::ShapeOp::create(builder, loc, input,
                                           builder.getI64IntegerAttr(0),
                                           /*end=*/nullptr);
        output = moe::ReshapeOp::create(builder, loc, input.getType(), output,
                                        shape);
      }
      operand.set(output);
    }
  }
};

} // namespace
