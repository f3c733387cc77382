//===- DetectParallelExperts.cpp - parallel-experts MoE form to sparse ops ===//
//
// Recognises the "parallel experts" MoE form of GraniteMoE and JetMoE as the
// dynamo exporter writes it: the top-k assignments are sorted by expert, the
// sorted rows gather their tokens, a Split by the per-expert assignment
// counts hands each expert its contiguous group of rows, each group is
// projected with that expert's own weight, and the weighted rows are added
// into zeros at their tokens:
//
//   out[t] = sum_j w[t, j] * FFN_{indices[t, j]}(x[t])
//
// The match is rooted at a `moe.top_k` and proves that equation op by op: the
// sort is stable and ascending (so group i holds exactly expert i's rows), the
// split sizes are the counts of each expert in the top-k indices, row r's
// token is `perm[r] / k` and its weight `w_flat[perm[r]]`. The rewrite into
// moe.router -> dispatch -> experts -> combine is then exact; the per-expert
// weights become one `moe.stack` (no copy). Anything else stays generic with
// a remark naming the first condition that failed.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchSupport.h"
#include "passes/NearMiss.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseSet.h"

namespace moec {
#define GEN_PASS_DEF_MOEDETECTPARALLELEXPERTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

/// Why a match failed: the message of the remark.
using Failure = std::string;

/// The failure of a traced export whose split sizes are constants.
constexpr const char *kFrozenSplit =
    "the per-expert split sizes are constants: a trace froze the trace "
    "input's expert counts (wrong for any other input); re-export with the "
    "dynamo exporter";

/// Whether `value` is a one-element constant equal to `expected` (any
/// integer or float element type).
bool isConstNumber(Value value, double expected) {
  if (std::optional<double> number = getScalarFloat(value))
    return *number == expected;
  std::optional<int64_t> integer = moe::getConstantInt(value);
  return integer && static_cast<double>(*integer) == expected;
}

/// Strips the ops that move a one-element value without changing it.
Value stripScalarMoves(Value value) {
  while (Operation *def = value.getDefiningOp()) {
    if (!isa<moe::ReshapeOp, moe::SqueezeOp, moe::UnsqueezeOp>(def) &&
        !(isa<moe::GatherOp>(def) &&
          moe::getConstantInt(def->getOperand(1)) == 0))
      break;
    auto type = dyn_cast<RankedTensorType>(def->getOperand(0).getType());
    if (!type || !type.hasStaticShape() || type.getNumElements() != 1)
      break;
    value = def->getOperand(0);
  }
  return value;
}

/// The vector and index a one-element value was sliced from: `slice(v, i,
/// i + 1)` of a 1-D `v`, behind scalar moves.
std::optional<std::pair<Value, int64_t>> getVectorElement(Value value) {
  auto slice = stripScalarMoves(value).getDefiningOp<moe::SliceOp>();
  if (!slice || getShape(slice.getData()).size() != 1 ||
      (slice.getAxes() && !isConstAxes(slice.getAxes(), {0}, 1)) ||
      (slice.getSteps() && moe::getConstantInt(slice.getSteps()) != 1))
    return std::nullopt;
  std::optional<int64_t> start = moe::getConstantInt(slice.getStarts());
  std::optional<int64_t> end = moe::getConstantInt(slice.getEnds());
  if (!start || !end || *start < 0 || *end != *start + 1)
    return std::nullopt;
  return std::pair(slice.getData(), *start);
}

/// Whether the single-element `count` is the number of rows of `tokens`:
/// `dim(tokens, 0)`, or `dim(x, 0) * dim(x, 1)` where `tokens` flattens the
/// rank-3 `x` to `[-1, H]`.
bool isRowCountOf(Value count, Value tokens) {
  std::optional<SmallVector<moe::ShapeEntry>> entries =
      moe::getShapeEntries(count);
  if (entries && entries->size() == 1 &&
      (*entries)[0].isSameAs(moe::ShapeEntry::ofDim(tokens, 0)))
    return true;
  auto product = stripScalarMoves(count).getDefiningOp<moe::MulOp>();
  auto flatten = tokens.getDefiningOp<moe::ReshapeOp>();
  if (!product || !flatten || getShape(flatten.getData()).size() != 3 ||
      moe::getConstantInts(flatten.getShape()) !=
          SmallVector<int64_t>{-1, getShape(tokens)[1]})
    return false;
  auto lhs = moe::getShapeEntries(product.getLhs());
  auto rhs = moe::getShapeEntries(product.getRhs());
  if (!lhs || !rhs || lhs->size() != 1 || rhs->size() != 1)
    return false;
  Value source = flatten.getData();
  moe::ShapeEntry dim0 = moe::ShapeEntry::ofDim(source, 0);
  moe::ShapeEntry dim1 = moe::ShapeEntry::ofDim(source, 1);
  return ((*lhs)[0].isSameAs(dim0) && (*rhs)[0].isSameAs(dim1)) ||
         ((*lhs)[0].isSameAs(dim1) && (*rhs)[0].isSameAs(dim0));
}

/// Whether `value` is a tensor of `fill` broadcast to `shape`-operand sizes:
/// `expand(fill, shape)` or `constant_of_shape(shape, fill)`. Sets `shape`.
bool isFilled(Value value, double fill, Value &shape) {
  if (auto expand = value.getDefiningOp<moe::ExpandOp>()) {
    shape = expand.getShape();
    return isConstNumber(expand.getInput(), fill);
  }
  auto constant = value.getDefiningOp<moe::ConstantOfShapeOp>();
  if (!constant)
    return false;
  shape = constant.getInput();
  auto attr = constant.getValue()
                  ? dyn_cast<DenseElementsAttr>(*constant.getValue())
                  : DenseElementsAttr();
  if (!attr)
    return fill == 0.0; // ONNX's default value is a float zero.
  if (attr.getNumElements() != 1)
    return false;
  if (auto floats = dyn_cast<DenseFPElementsAttr>(attr))
    return (*floats.getValues<APFloat>().begin()).convertToDouble() == fill;
  auto ints = cast<DenseIntElementsAttr>(attr);
  return static_cast<double>(
             (*ints.getValues<APInt>().begin()).getSExtValue()) == fill;
}

/// Whether `value` is `perm / k` for the non-negative integers `perm`: an
/// integer division, or the float form torch's `floor_divide` exports
/// (`cast(trunc(cast(perm) / k))` with trunc as `floor(abs(d)) * sign(d)` or
/// `floor(d)`). The float form is exact for `perm < 2^24`, far above any
/// token bound.
bool isDivisionBy(Value value, Value perm, int64_t k) {
  if (auto div = value.getDefiningOp<moe::DivOp>())
    return div.getLhs() == perm && isConstNumber(div.getRhs(), k) &&
           isa<IntegerType>(getElementTypeOrSelf(value.getType()));
  auto toInt = value.getDefiningOp<moe::CastOp>();
  if (!toInt || !isa<IntegerType>(toInt.getTo()))
    return false;
  Value truncated = toInt.getInput();
  Value quotient;
  if (auto floor = truncated.getDefiningOp<moe::FloorOp>()) {
    quotient = floor.getInput();
  } else if (auto product = truncated.getDefiningOp<moe::MulOp>()) {
    for (auto [magnitude, sign] :
         {std::pair(product.getLhs(), product.getRhs()),
          std::pair(product.getRhs(), product.getLhs())}) {
      auto floor = magnitude.getDefiningOp<moe::FloorOp>();
      auto abs = floor ? floor.getInput().getDefiningOp<moe::AbsOp>() : nullptr;
      auto signOp = sign.getDefiningOp<moe::SignOp>();
      if (abs && signOp && abs.getInput() == signOp.getInput())
        quotient = abs.getInput();
    }
  }
  auto div = quotient ? quotient.getDefiningOp<moe::DivOp>() : nullptr;
  auto toFloat = div ? div.getLhs().getDefiningOp<moe::CastOp>() : nullptr;
  return toFloat && toFloat.getInput() == perm &&
         isa<FloatType>(toFloat.getTo()) && isConstNumber(div.getRhs(), k);
}

/// `data` gathered at the rows `index` names: `gather_nd(data,
/// unsqueeze(index, -1))` or `gather(data, index)`.
bool isRowGather(Value value, Value data, Value index) {
  if (auto gather = value.getDefiningOp<moe::GatherOp>())
    return gather.getData() == data && gather.getIndices() == index &&
           gather.getAxis() == 0;
  auto gather = value.getDefiningOp<moe::GatherNDOp>();
  auto column =
      gather ? gather.getIndices().getDefiningOp<moe::UnsqueezeOp>() : nullptr;
  return column && gather.getData() == data && gather.getBatchDims() == 0 &&
         column.getData() == index && column.getAxes() &&
         isConstAxes(column.getAxes(), {1}, 2);
}

/// Per-expert projections of the groups of a split, concatenated.
struct GroupedProjection {
  moe::SplitOp split;
  SmallVector<Value> weights;
  moe::WeightLayout layout = moe::WeightLayout::OutIn;
};

/// Matches `value` as `concat(x_0 @ W_0, ..., x_{E-1} @ W_{E-1})` along the
/// rows, with `x_i` result i of one split of the rows and `W_i` constant f32
/// matrices of one type, all `[out, in]` (`gemm transB`, layout out_in) or
/// all `[in, out]` (layout in_out).
std::optional<Failure> matchGroupedProjection(Value value, int64_t numExperts,
                                              GroupedProjection &projection) {
  auto concat = value.getDefiningOp<moe::ConcatOp>();
  if (!concat || !isAxis(concat.getAxis(), 0, 2) ||
      static_cast<int64_t>(concat.getInputs().size()) != numExperts)
    return Failure("the expert outputs are not E groups concatenated along "
                   "the rows");
  for (auto [expert, output] : llvm::enumerate(concat.getInputs())) {
    Operation *def = output.getDefiningOp();
    Value rows, weight;
    moe::WeightLayout layout = moe::WeightLayout::InOut;
    if (auto gemm = dyn_cast_or_null<moe::GemmOp>(def)) {
      if (gemm.getC() || gemm.getTransA() != 0 ||
          gemm.getAlpha().convertToFloat() != 1.0f)
        return Failure("an expert projection is a gemm with a bias, scale or "
                       "transposed input");
      rows = gemm.getA();
      weight = gemm.getB();
      if (gemm.getTransB() != 0)
        layout = moe::WeightLayout::OutIn;
    } else if (auto matMul = dyn_cast_or_null<moe::MatMulOp>(def)) {
      rows = matMul.getA();
      weight = matMul.getB();
    } else {
      return Failure("an expert group is not projected by a gemm or matmul");
    }
    auto split = rows.getDefiningOp<moe::SplitOp>();
    if (!split || split->getNumResults() != numExperts ||
        rows != split->getResult(expert) || !isAxis(split.getAxis(), 0, 2) ||
        (projection.split && split != projection.split))
      return Failure("expert i's projection does not take group i of one "
                     "split of the rows into E groups");
    projection.split = split;
    auto constant = weight.getDefiningOp<moe::ConstantOp>();
    if (!constant || !constant.getType().getElementType().isF32() ||
        constant.getType().getRank() != 2 ||
        (expert > 0 && (layout != projection.layout ||
                        weight.getType() != projection.weights[0].getType())))
      return Failure("the expert weights are not f32 constant matrices of one "
                     "shape and layout");
    projection.layout = layout;
    projection.weights.push_back(weight);
  }
  return std::nullopt;
}

/// The `[in, out]` sizes of one expert's matrix of `projection`.
std::pair<int64_t, int64_t> getInOut(const GroupedProjection &projection) {
  return getMatrixInOut(getShape(projection.weights[0]), projection.layout);
}

/// One parallel-experts MoE layer, as matched.
struct ParallelLayer {
  SoftmaxGate gate;
  GroupedProjection gateUp, down;
  /// The sort of the flattened expert ids, part of the layer.
  moe::TopKOp sort;
  /// The accumulation whose `[T, H]` result the layer replaces.
  moe::ScatterNDOp result;
};

/// Matches the parallel-experts form from its router's `moe.top_k`; each step
/// checks one op and states the condition it needs.
class ParallelMatcher {
public:
  explicit ParallelMatcher(moe::TopKOp topK) : topK(topK) {}

  std::optional<Failure> match() {
    if (std::optional<Failure> failure = matchSoftmaxGate(topK, layer.gate))
      return failure;
    if (std::optional<Failure> failure = matchSort())
      return failure;
    if (hasFrozenSplit())
      return Failure(kFrozenSplit);
    if (std::optional<Failure> failure = matchAccumulation())
      return failure;
    return matchExperts();
  }

  ParallelLayer layer;

private:
  moe::TopKOp topK;
  Value flatIndices, perm, rowTokens;
  /// The `[N, H]` outputs of the experts, rows in sorted order.
  Value expertOutputs;

  /// `perm = top_k(reshape(indices, [-1]), len, largest = 0).indices`: a
  /// stable ascending sort of the assignments by expert (ONNX TopK breaks
  /// ties by the lower index).
  std::optional<Failure> matchSort() {
    auto flatten = getOnlyUserOf<moe::ReshapeOp>(topK.getIndices());
    moe::TopKOp sort =
        flatten ? getOnlyUserOf<moe::TopKOp>(flatten.getOutput()) : nullptr;
    if (!flatten || !isFlattenedVector(flatten.getOutput(), topK.getIndices()))
      return Failure("top-k indices are not flattened into one list of "
                     "assignments");
    flatIndices = flatten.getOutput();
    std::optional<SmallVector<moe::ShapeEntry>> k =
        sort ? moe::getShapeEntries(sort.getK()) : std::nullopt;
    if (!sort || sort.getInput() != flatIndices ||
        !isAxis(sort.getAxis(), 0, 1) || sort.getLargest() != 0 ||
        sort.getSorted() != 1 || !k || k->size() != 1 ||
        !(*k)[0].isSameAs(moe::ShapeEntry::ofDim(flatIndices, 0)))
      return Failure("the flattened assignments are not sorted by expert "
                     "(ascending top-k over all of them)");
    layer.sort = sort;
    perm = sort.getIndices();
    return std::nullopt;
  }

  /// Whether the tokens gathered in sorted order (`x[perm / k]`) are split
  /// by constant sizes: a TorchScript trace froze the trace input's expert
  /// counts there (GraniteMoE calls `tolist()` on them), so the graph is
  /// wrong for any other input and nothing past it needs matching.
  bool hasFrozenSplit() {
    for (Operation *user : layer.gate.tokens.getUsers()) {
      if (!isa<moe::GatherOp, moe::GatherNDOp>(user))
        continue;
      Value index = user->getOperand(1);
      if (auto column = index.getDefiningOp<moe::UnsqueezeOp>())
        index = column.getData();
      Value rows = user->getResult(0);
      auto split = getOnlyUserOf<moe::SplitOp>(rows);
      if (split && split.getSplit() && moe::getConstantInts(split.getSplit()) &&
          isDivisionBy(index, perm, layer.gate.topK) &&
          isRowGather(rows, layer.gate.tokens, index))
        return true;
    }
    return false;
  }

  /// `scatter_nd(zeros [T, H], unsqueeze(perm / k, -1), y * unsqueeze(
  /// w_flat[perm], -1), add)`, optionally through an Expand to y's own shape.
  std::optional<Failure> matchAccumulation() {
    const SoftmaxGate &gate = layer.gate;
    auto flatWeights = getOnlyUserOf<moe::ReshapeOp>(gate.weights);
    if (!flatWeights ||
        !isFlattenedVector(flatWeights.getOutput(), gate.weights))
      return Failure("the routing weights are not flattened into one list of "
                     "assignments");
    Value rowWeights;
    for (Operation *user : flatWeights.getOutput().getUsers())
      if (user->getNumResults() == 1 &&
          isRowGather(user->getResult(0), flatWeights.getOutput(), perm))
        rowWeights = user->getResult(0);
    auto column =
        rowWeights ? getOnlyUserOf<moe::UnsqueezeOp>(rowWeights) : nullptr;
    if (!column || !column.getAxes() || !isConstAxes(column.getAxes(), {1}, 2))
      return Failure("the routing weights are not gathered in sorted order "
                     "as a column");
    auto scale = getOnlyUserOf<moe::MulOp>(column.getOutput());
    expertOutputs = scale ? otherOperand(scale, column.getOutput()) : Value();
    if (!expertOutputs || getShape(expertOutputs).size() != 2)
      return Failure("the sorted routing weights do not scale the expert "
                     "outputs");
    Value updates = scale.getOutput();
    if (auto expand = getOnlyUserOf<moe::ExpandOp>(updates)) {
      updates = expand.getOutput();
      layer.result = getOnlyUserOf<moe::ScatterNDOp>(updates);
    } else {
      layer.result = getOnlyUserOf<moe::ScatterNDOp>(updates);
    }
    moe::ScatterNDOp result = layer.result;
    if (!result || result.getUpdates() != updates ||
        result.getReduction() != "add")
      return Failure("the weighted expert outputs are not added into the "
                     "output rows (scatter_nd with reduction add)");
    auto tokenColumn = result.getIndices().getDefiningOp<moe::UnsqueezeOp>();
    if (!tokenColumn || !tokenColumn.getAxes() ||
        !isConstAxes(tokenColumn.getAxes(), {1}, 2) ||
        !isDivisionBy(tokenColumn.getData(), perm, gate.topK))
      return Failure("the outputs are not added at token sorted_position / "
                     "k");
    rowTokens = tokenColumn.getData();
    if (updates != scale.getOutput()) {
      // The Expand must not broadcast: its shape is [len(rows), H].
      auto entries = moe::getShapeEntries(
          updates.getDefiningOp<moe::ExpandOp>().getShape());
      if (!entries || entries->size() != 2 ||
          !(*entries)[0].isSameAs(moe::ShapeEntry::ofDim(rowTokens, 0)) ||
          !(*entries)[1].isSameAs(moe::ShapeEntry::ofConstant(gate.hidden)))
        return Failure("the weighted expert outputs are expanded to another "
                       "shape than [N, H]");
    }
    Value zerosShape;
    if (!isFilled(result.getData(), 0.0, zerosShape))
      return Failure("the outputs are not accumulated into zeros");
    auto shapeConcat = zerosShape.getDefiningOp<moe::ConcatOp>();
    if (!shapeConcat || shapeConcat.getInputs().size() != 2 ||
        !isConstNumber(shapeConcat.getInputs()[1], gate.hidden) ||
        !isRowCountOf(shapeConcat.getInputs()[0], gate.tokens))
      return Failure("the accumulated zeros are not [T, H] for the router's "
                     "T tokens");
    return std::nullopt;
  }

  /// The expert FFNs on the sorted rows `x[perm / k]`, grouped by per-expert
  /// counts: projections, `silu(gate) * up` on the halves, projections.
  std::optional<Failure> matchExperts() {
    const SoftmaxGate &gate = layer.gate;
    int64_t numExperts = gate.numExperts;
    if (std::optional<Failure> failure =
            matchGroupedProjection(expertOutputs, numExperts, layer.down))
      return Failure("down projection: ") + *failure;
    auto [ffn, hidden] = getInOut(layer.down);
    if (hidden != gate.hidden)
      return Failure("the down projections do not produce H columns");
    Value activation = layer.down.split.getInput();
    std::optional<std::pair<Value, Value>> glu = matchSiluGlu(activation);
    if (!glu)
      return Failure("the down projections' input is not silu(gate) * up");
    Value fused = getConcatenatedGlu(glu->first, glu->second);
    if (!fused || getShape(fused).back() != 2 * ffn)
      return Failure("gate and up are not the two halves of the fused "
                     "projection of size 2F");
    if (std::optional<Failure> failure =
            matchGroupedProjection(fused, numExperts, layer.gateUp))
      return Failure("gate/up projection: ") + *failure;
    if (layer.gateUp.layout != layer.down.layout ||
        getInOut(layer.gateUp) != std::pair(gate.hidden, 2 * ffn))
      return Failure("the gate/up weights are not H x 2F per expert in the "
                     "down projections' layout");
    if (!isRowGather(layer.gateUp.split.getInput(), gate.tokens, rowTokens))
      return Failure("the experts' rows are not the router's tokens gathered "
                     "at sorted_position / k");
    Value sizes = layer.gateUp.split.getSplit();
    if (!sizes || sizes != layer.down.split.getSplit())
      return Failure("the two projections are not split by the same group "
                     "sizes");
    return matchGroupSizes(sizes);
  }

  /// The split sizes are the number of assignments of each expert: element
  /// i of `reduce_sum(one_hot_mask, 0)` with the mask ones scattered into
  /// `[T, E]` zeros at the top-k indices.
  std::optional<Failure> matchGroupSizes(Value sizes) {
    int64_t numExperts = layer.gate.numExperts;
    if (moe::getConstantInts(sizes))
      return Failure(kFrozenSplit);
    Value counts = sizes;
    if (auto concat = sizes.getDefiningOp<moe::ConcatOp>()) {
      counts = nullptr;
      for (auto [expert, size] : llvm::enumerate(concat.getInputs())) {
        std::optional<std::pair<Value, int64_t>> element =
            getVectorElement(size);
        if (!element || (counts && element->first != counts) ||
            element->second != static_cast<int64_t>(expert))
          return Failure("the split sizes are not the per-expert counts in "
                         "expert order");
        counts = element->first;
      }
    }
    auto sum = counts ? counts.getDefiningOp<moe::ReduceSumOp>() : nullptr;
    if (!sum || getShape(counts) != ArrayRef<int64_t>{numExperts} ||
        !sum.getAxes() || !isConstAxes(sum.getAxes(), {0}, 2))
      return Failure("the split sizes are not a sum of the routing mask "
                     "over the tokens");
    Value mask = sum.getData();
    // The float mask counts exactly in any integer type of 32 bits or more.
    if (auto cast = mask.getDefiningOp<moe::CastOp>())
      if (cast.getTo().isSignlessInteger() &&
          cast.getTo().getIntOrFloatBitWidth() >= 32)
        mask = cast.getInput();
    auto scatter = mask.getDefiningOp<moe::ScatterElementsOp>();
    Value zerosShape, onesShape;
    if (!scatter || scatter.getIndices() != topK.getIndices() ||
        !isAxis(scatter.getAxis(), 1, 2) || scatter.getReduction() != "none" ||
        !isFilled(scatter.getData(), 0.0, zerosShape) ||
        !isFilled(scatter.getUpdates(), 1.0, onesShape) ||
        getShape(mask).size() != 2 || getShape(mask)[1] != numExperts)
      return Failure("the routing mask is not ones scattered into [T, E] "
                     "zeros at the top-k indices");
    return std::nullopt;
  }
};

/// Whether `topK` looks like the router of a parallel-experts layer: its
/// flattened indices are sorted by a second top-k. Only candidates that then
/// fail to match get a remark: a top-k of some other purpose is not a
/// near-miss.
bool isParallelCandidate(moe::TopKOp topK) {
  for (Operation *user : topK.getIndices().getUsers())
    if (isa<moe::ReshapeOp, moe::FlattenOp>(user))
      for (Operation *sortUser : user->getResult(0).getUsers())
        if (auto sort = dyn_cast<moe::TopKOp>(sortUser))
          if (sort.getInput() == user->getResult(0))
            return true;
  return false;
}

struct DetectParallelExpertsPass
    : public moec::impl::MoeDetectParallelExpertsBase<
          DetectParallelExpertsPass> {
  void runOnOperation() override {
    SmallVector<moe::TopKOp> candidates;
    getOperation().walk([&](moe::TopKOp op) { candidates.push_back(op); });
    // A layer's sort is a top-k of its own, not a near-miss.
    llvm::DenseSet<Operation *> claimed;
    bool changed = false;
    for (moe::TopKOp topK : lastLayerFirst(candidates)) {
      if (claimed.contains(topK))
        continue;
      if (!isParallelCandidate(topK))
        continue;
      ParallelMatcher matcher(topK);
      if (std::optional<Failure> failure = matcher.match()) {
        recordNearMiss(topK, "parallel experts", *failure);
        continue;
      }
      ParallelLayer &layer = matcher.layer;
      OpBuilder builder(layer.result);
      Location loc = layer.result.getLoc();
      Value w1 = moe::StackOp::create(builder, loc, layer.gateUp.weights);
      Value w2 = moe::StackOp::create(builder, loc, layer.down.weights);
      if (std::optional<Failure> why = replaceWithSiluGluLayer(
              getArgument(), topK, layer.result.getOutput(), layer.gate, w1, w2,
              layer.down.layout)) {
        if (!why->empty())
          topK.emitRemark("MoE parallel experts not rewritten: ") << *why;
        continue;
      }
      claimed.insert(layer.sort);
      changed = true;
    }
    if (changed)
      eraseDeadOps(getOperation().getBody());
  }
};

} // namespace
