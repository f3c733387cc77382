//===- CapacityGates.cpp - Gates that fill slots up to a capacity ---------===//

#include "passes/CapacityGates.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "passes/MatchGates.h"
#include "passes/MatchSupport.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>

using namespace mlir;
using namespace moec;

namespace {

using Failure = std::string;

/// How many ops above a dispatch mask its gate's arg-maxes are looked for.
constexpr int kMaxGateDepth = 40;

/// The static shape `[?, d1, ...]` of `value` when its rank is `rank`, its
/// elements are of type `elementType` and every dimension but the first is
/// static; empty otherwise.
ArrayRef<int64_t> getRowsShape(Value value, int64_t rank, Type elementType) {
  ArrayRef<int64_t> shape = getShape(value);
  if (static_cast<int64_t>(shape.size()) != rank ||
      getElementTypeOrSelf(value.getType()) != elementType ||
      llvm::any_of(shape.drop_front(), ShapedType::isDynamic))
    return {};
  return shape;
}

/// Whether `value` is the i64 constant `[0, 1, ..., n - 1]` of shape `[n]`.
bool isArange(Value value, int64_t n) {
  std::optional<SmallVector<int64_t>> values = moe::getConstantInts(value);
  if (!values || getShape(value) != ArrayRef<int64_t>{n})
    return false;
  for (int64_t i = 0; i < n; ++i)
    if ((*values)[i] != i)
      return false;
  return true;
}

/// The input of `value = cast(input)` to an element type `to`, or null.
Value getCastInput(Value value, Type to) {
  auto cast = value.getDefiningOp<moe::CastOp>();
  return cast && cast.getTo() == to ? cast.getInput() : Value();
}

/// The indices of `mask` when it is the i64 one-hot `[T, depth]` of `[T]`
/// indices: `one_hot(idx, depth, [0, 1])` on the last axis, or
/// `cast<i64>(unsqueeze(idx, -1) == arange(depth))` (dynamo); else null.
/// Each row then has a 1 at the index and 0 elsewhere, for an index in
/// `[0, depth)`.
Value getOneHotIndices(Value mask, int64_t depth) {
  Type i64 = IntegerType::get(mask.getContext(), 64);
  ArrayRef<int64_t> shape = getShape(mask);
  if (shape.size() != 2 || shape[1] != depth ||
      getElementTypeOrSelf(mask.getType()) != i64)
    return nullptr;
  if (auto oneHot = mask.getDefiningOp<moe::OneHotOp>()) {
    if (!isAxis(oneHot.getAxis(), 1, 2) ||
        !isConstInt(oneHot.getDepth(), depth) ||
        moe::getConstantInts(oneHot.getValues()) !=
            SmallVector<int64_t>{0, 1} ||
        getShape(oneHot.getIndices()).size() != 1)
      return nullptr;
    return oneHot.getIndices();
  }
  auto equal = getCastInput(mask, i64)
                   ? getCastInput(mask, i64).getDefiningOp<moe::EqualOp>()
                   : nullptr;
  if (!equal)
    return nullptr;
  for (auto [column, range] : {std::pair(equal.getLhs(), equal.getRhs()),
                               std::pair(equal.getRhs(), equal.getLhs())}) {
    auto unsqueeze = column.getDefiningOp<moe::UnsqueezeOp>();
    if (unsqueeze && isConstAxes(unsqueeze.getAxes(), {1}, 2) &&
        getShape(unsqueeze.getData()).size() == 1 && isArange(range, depth))
      return unsqueeze.getData();
  }
  return nullptr;
}

/// The softmax over the last axis of `[T, E]` logits whose first largest
/// score `argMax` picks, or null.
moe::SoftmaxOp getArgMaxOfSoftmax(moe::ArgMaxOp argMax, int64_t experts) {
  auto softmax = argMax.getData().getDefiningOp<moe::SoftmaxOp>();
  if (!softmax || !isAxis(static_cast<int64_t>(argMax.getAxis()), 1, 2) ||
      argMax.getKeepdims() != 0 || argMax.getSelectLastIndex() != 0 ||
      !isAxis(static_cast<int64_t>(softmax.getAxis()), 1, 2) ||
      getRowsShape(softmax.getInput(), 2,
                   Float32Type::get(argMax.getContext()))
              .drop_front() != ArrayRef<int64_t>{experts})
    return nullptr;
  return softmax;
}

/// Whether `count` is the inclusive `cumsum(mask, axis 0)` of the `[T, E]`
/// `mask`: for a one-hot mask, the number of rows up to this one choosing
/// each expert.
bool isRunningCount(Value count, Value mask) {
  auto cumSum = count.getDefiningOp<moe::CumSumOp>();
  std::optional<int64_t> axis =
      cumSum ? moe::getConstantInt(cumSum.getAxis()) : std::nullopt;
  return cumSum && cumSum.getX() == mask && axis && isAxis(*axis, 0, 2) &&
         !cumSum.getExclusive() && !cumSum.getReverse();
}

/// Whether `positions` is `cumsum(mask, axis 0) - 1`: for a one-hot `mask`,
/// the number of earlier rows choosing the row's expert, at that expert.
bool isSlotCount(Value positions, Value mask) {
  auto sub = positions.getDefiningOp<moe::SubOp>();
  return sub && isConstInt(sub.getRhs(), 1) &&
         isRunningCount(sub.getLhs(), mask);
}

/// The operands {x, y} of the commutative `op` with `isX(x)`, or nullopt.
template <typename OpTy, typename Pred>
std::optional<std::pair<Value, Value>> orderOperands(OpTy op, Pred isX) {
  if (!op)
    return std::nullopt;
  if (isX(op.getLhs()))
    return std::pair(op.getLhs(), op.getRhs());
  if (isX(op.getRhs()))
    return std::pair(op.getRhs(), op.getLhs());
  return std::nullopt;
}

/// Matches Switch's dispatch as t5x writes it, for `[T, E, C]` `dispatch`:
///
///   mask     = one_hot(argmax(softmax(logits)), E)
///   priority = reduce_max(cumsum(mask, 0) * mask - 1, axis 1)
///   dispatch = (priority[:, None, None] == arange(C)) * mask[:, :, None]
///   combine  = softmax(logits)[:, :, None] * dispatch
///
/// `priority` is the number of earlier tokens choosing the token's expert
/// (-1 at the other experts, below every count), so dispatch is 1 exactly at
/// the kept first choices' slots, and combine holds their score there: the
/// router's top 1 with capacity C (ties to the lower expert, as ArgMax).
std::optional<Failure> matchSwitch(moe::MulOp product, Value combine,
                                   int64_t experts, int64_t slots,
                                   CapacityGate &gate) {
  MLIRContext *context = product.getContext();
  Type f32 = Float32Type::get(context), i64 = IntegerType::get(context, 64);
  // slot[t, 0, c] = (priority[t] == c), expert[t, e, 0] = mask[t, e].
  Value priority, mask;
  for (auto [slot, expert] : {std::pair(product.getLhs(), product.getRhs()),
                              std::pair(product.getRhs(), product.getLhs())}) {
    Value test = getCastInput(slot, f32);
    auto equal = test ? test.getDefiningOp<moe::EqualOp>() : nullptr;
    auto column =
        orderOperands(equal, [&](Value v) { return getShape(v).size() == 3; });
    Value rows = column ? column->first : nullptr;
    while (auto unsqueeze =
               rows ? rows.getDefiningOp<moe::UnsqueezeOp>() : nullptr)
      rows = unsqueeze.getData();
    if (!column ||
        getShape(column->first).drop_front() != ArrayRef<int64_t>{1, 1} ||
        getShape(rows).size() != 1 || !isArange(column->second, slots))
      continue;
    // The expert column: unsqueeze(cast(mask)) or cast(unsqueeze(mask)).
    Value m = expert;
    if (Value input = getCastInput(m, f32))
      m = input;
    auto unsqueeze = m.getDefiningOp<moe::UnsqueezeOp>();
    m = unsqueeze && isConstAxes(unsqueeze.getAxes(), {2}, 3)
            ? unsqueeze.getData()
            : nullptr;
    if (m && getElementTypeOrSelf(m.getType()) == f32)
      m = getCastInput(m, f32);
    ArrayRef<int64_t> column3 = getShape(expert);
    if (!m || getElementTypeOrSelf(m.getType()) != i64 || column3.size() != 3 ||
        column3[1] != experts || column3[2] != 1)
      continue;
    priority = rows;
    mask = m;
    break;
  }
  if (!priority)
    return Failure("the slot mask is not (priority == arange(C)) times the "
                   "one-hot expert column");
  // priority = reduce_max(cumsum(mask, 0) * mask - 1, axis 1).
  auto max = priority.getDefiningOp<moe::ReduceMaxOp>();
  auto shifted = max && max.getAxes() && isConstAxes(max.getAxes(), {1}, 2) &&
                         !max.getKeepdims()
                     ? max.getData().getDefiningOp<moe::SubOp>()
                     : nullptr;
  auto counted =
      shifted && isConstInt(shifted.getRhs(), 1)
          ? orderOperands(shifted.getLhs().getDefiningOp<moe::MulOp>(),
                          [&](Value v) { return v != mask; })
          : std::nullopt;
  if (!counted || counted->second != mask ||
      !isRunningCount(counted->first, mask))
    return Failure("the priority is not reduce_max(cumsum(mask, 0) * mask "
                   "- 1) over the experts");
  Value index = getOneHotIndices(mask, experts);
  auto argMax = index ? index.getDefiningOp<moe::ArgMaxOp>() : nullptr;
  moe::SoftmaxOp softmax =
      argMax ? getArgMaxOfSoftmax(argMax, experts) : nullptr;
  if (!softmax)
    return Failure("the expert mask is not the one-hot of the first largest "
                   "softmax score over [T, E] logits");
  // combine = scores[:, :, None] * dispatch.
  auto weighted = orderOperands(combine.getDefiningOp<moe::MulOp>(),
                                [&](Value v) { return v != product; });
  auto scores = weighted && weighted->second == product
                    ? weighted->first.getDefiningOp<moe::UnsqueezeOp>()
                    : nullptr;
  if (!scores || scores.getData() != softmax.getOutput() ||
      !isConstAxes(scores.getAxes(), {2}, 3))
    return Failure("the combine weights are not the softmax scores times the "
                   "dispatch mask");
  gate.anchor = argMax;
  gate.logits = softmax.getInput();
  gate.topK = 1;
  return std::nullopt;
}

/// One choice of GShard's top-2 gating, matched back from its term
/// `einsum("se,sc->sec", gates, one_hot(slot, C))` of combine.
struct Choice {
  /// The one-hot `[T, E]` i64 mask of the choice, and its kept part.
  Value mask, kept;
  /// `cast<f32>(kept)`, the kept gate `einsum("se,se->s", scores, keptF)`
  /// and its renormalised value.
  Value keptF, scores, gate, normalised;
  /// The slots `cumsum(mask, 0) - 1 [+ sum(first mask, 0)]`.
  Value slots;
};

/// Matches `term = einsum("se,sc->sec", einsum("s,se->se", g / d, keptF),
/// cast<f32>(one_hot(reduce_sum(slots * kept, 1), C)))` with `kept = mask *
/// cast<i64>(slots < C)` and `g = einsum("se,se->s", scores, keptF)`.
std::optional<Failure> matchChoice(Value term, int64_t slots,
                                   Value &denominator, Choice &choice) {
  MLIRContext *context = term.getContext();
  Type f32 = Float32Type::get(context), i64 = IntegerType::get(context, 64);
  auto outer = term.getDefiningOp<moe::EinsumOp>();
  if (!outer || outer.getInputs().size() != 2)
    return Failure("a combine term is not an einsum of gates and slots");
  Value gates, position;
  for (auto [a, b] : {std::pair(outer.getInputs()[0], outer.getInputs()[1]),
                      std::pair(outer.getInputs()[1], outer.getInputs()[0])})
    if (isEinsumOf(outer, a, "se", b, "sc", "sec")) {
      gates = a;
      position = b;
    }
  Value slotIndex = position ? getCastInput(position, f32) : nullptr;
  slotIndex = slotIndex ? getOneHotIndices(slotIndex, slots) : nullptr;
  if (!slotIndex)
    return Failure("a combine term is not einsum(\"se,sc->sec\") of the gates "
                   "and the one-hot of a slot among C");
  auto spread = gates.getDefiningOp<moe::EinsumOp>();
  if (!spread || spread.getInputs().size() != 2)
    return Failure("the gates of a choice are not its weight spread over its "
                   "kept mask");
  for (auto [a, b] : {std::pair(spread.getInputs()[0], spread.getInputs()[1]),
                      std::pair(spread.getInputs()[1], spread.getInputs()[0])})
    if (isEinsumOf(spread, a, "s", b, "se", "se")) {
      choice.normalised = a;
      choice.keptF = b;
    }
  auto divide = choice.normalised
                    ? choice.normalised.getDefiningOp<moe::DivOp>()
                    : nullptr;
  choice.kept = choice.keptF ? getCastInput(choice.keptF, f32) : nullptr;
  if (!divide || !choice.kept)
    return Failure("the gates of a choice are not einsum(\"s,se->se\") of its "
                   "weight over a denominator and its kept mask");
  if (denominator && divide.getRhs() != denominator)
    return Failure("the two choices' weights have different denominators");
  denominator = divide.getRhs();
  choice.gate = divide.getLhs();
  auto select = choice.gate.getDefiningOp<moe::EinsumOp>();
  if (select && select.getInputs().size() == 2)
    choice.scores = select.getInputs()[0] == choice.keptF
                        ? select.getInputs()[1]
                        : select.getInputs()[0];
  if (!select || select.getInputs().size() != 2 ||
      !isEinsumOf(select, choice.scores, "se", choice.keptF, "se", "s"))
    return Failure("a choice's weight is not einsum(\"se,se->s\") of the "
                   "scores and its kept mask");
  // kept = mask * cast<i64>(slots < C).
  Value mask, slotsOfKept;
  if (auto product = choice.kept.getDefiningOp<moe::MulOp>())
    for (auto [m, test] : {std::pair(product.getLhs(), product.getRhs()),
                           std::pair(product.getRhs(), product.getLhs())}) {
      Value bool_ = getCastInput(test, i64);
      auto less = bool_ ? bool_.getDefiningOp<moe::LessOp>() : nullptr;
      if (less && isConstInt(less.getRhs(), slots)) {
        mask = m;
        slotsOfKept = less.getLhs();
      }
    }
  if (!mask)
    return Failure("a choice's kept mask is not its mask where its slot is "
                   "below the capacity");
  // slotIndex = reduce_sum(slots * kept, 1).
  auto total = slotIndex.getDefiningOp<moe::ReduceSumOp>();
  auto located =
      total && total.getAxes() && isConstAxes(total.getAxes(), {1}, 2) &&
              !total.getKeepdims()
          ? orderOperands(total.getData().getDefiningOp<moe::MulOp>(),
                          [&](Value v) { return v == slotsOfKept; })
          : std::nullopt;
  if (!located || located->second != choice.kept)
    return Failure("a choice's slot index is not reduce_sum(slots * kept) "
                   "over the experts");
  choice.mask = mask;
  choice.slots = slotsOfKept;
  return std::nullopt;
}

/// Matches GShard's top-2 gating as DeepSpeed writes it, for `combine` =
/// `dispatch`'s source, the sum of the two choices' terms (matchChoice):
///
///   scores = softmax(logits); mask1 = one_hot(argmax(scores))
///   mask2  = one_hot(argmax(where(mask1, -inf, logits)))
///   slots1 = cumsum(mask1, 0) - 1
///   slots2 = cumsum(mask2, 0) - 1 + reduce_sum(mask1, 0)
///   g_i / clip(g_1 + g_2, min = eps)   (g_i the kept choice's score)
///
/// The second choice ranks the logits without the first, which orders the
/// experts as their softmax scores do (softmax is increasing; only logits
/// whose f32 scores round equal could rank apart); the slots count all first
/// choices before any second one, which is the router's capacity order; and the
/// weights are normalize_kept's. dispatch = combine != 0 differs from the
/// router's kept assignments only where a kept weight is 0, whose row the
/// combine scales by 0 either way.
std::optional<Failure> matchGShard(Value combine, int64_t experts,
                                   int64_t slots, CapacityGate &gate) {
  MLIRContext *context = combine.getContext();
  auto sum = combine.getDefiningOp<moe::AddOp>();
  if (!sum)
    return Failure("the combine weights are not the sum of two choices' "
                   "terms");
  Value denominator;
  Choice choices[2];
  for (int i = 0; i < 2; ++i)
    if (auto failure =
            matchChoice(sum->getOperand(i), slots, denominator, choices[i]))
      return failure;
  auto softmax = choices[0].scores.getDefiningOp<moe::SoftmaxOp>();
  if (!softmax || choices[1].scores != choices[0].scores)
    return Failure("the two choices' weights do not select one softmax's "
                   "scores");
  // denominator = clip(g_1 + g_2, min = eps).
  auto clip = denominator.getDefiningOp<moe::ClipOp>();
  std::optional<double> epsilon = clip && clip.getMin() && !clip.getMax()
                                      ? getScalarFloat(clip.getMin())
                                      : std::nullopt;
  auto total = clip ? clip.getInput().getDefiningOp<moe::AddOp>() : nullptr;
  if (!epsilon || !(*epsilon > 0) || !std::isfinite(*epsilon) || !total ||
      !((total.getLhs() == choices[0].gate &&
         total.getRhs() == choices[1].gate) ||
        (total.getLhs() == choices[1].gate &&
         total.getRhs() == choices[0].gate)))
    return Failure("the weights' denominator is not clip(g1 + g2, min = eps) "
                   "of the kept choices' scores with a positive eps");
  // Which choice is first: its mask is the one-hot of the scores' arg-max.
  Value first[2];
  for (int i = 0; i < 2; ++i) {
    Value index = getOneHotIndices(choices[i].mask, experts);
    auto argMax = index ? index.getDefiningOp<moe::ArgMaxOp>() : nullptr;
    first[i] = argMax && getArgMaxOfSoftmax(argMax, experts) == softmax
                   ? index
                   : nullptr;
  }
  if (!first[0] && first[1])
    std::swap(choices[0], choices[1]);
  Value index1 = getOneHotIndices(choices[0].mask, experts);
  auto argMax1 = index1 ? index1.getDefiningOp<moe::ArgMaxOp>() : nullptr;
  if (!argMax1 || getArgMaxOfSoftmax(argMax1, experts) != softmax)
    return Failure("the first choice is not the one-hot of the first largest "
                   "softmax score over [T, E] logits");
  Value index2 = getOneHotIndices(choices[1].mask, experts);
  auto argMax2 = index2 ? index2.getDefiningOp<moe::ArgMaxOp>() : nullptr;
  auto masked =
      argMax2 ? argMax2.getData().getDefiningOp<moe::WhereOp>() : nullptr;
  Value condition = masked ? masked.getCondition() : nullptr;
  // The first mask as a condition: cast<i1>(mask1), or the equality mask1
  // was cast from (dynamo).
  Value maskBool = condition
                       ? getCastInput(condition, IntegerType::get(context, 1))
                       : nullptr;
  std::optional<double> fill =
      masked ? getScalarFloat(masked.getX()) : std::nullopt;
  if (!argMax2 || !isAxis(static_cast<int64_t>(argMax2.getAxis()), 1, 2) ||
      argMax2.getKeepdims() != 0 || argMax2.getSelectLastIndex() != 0 ||
      !masked || masked.getY() != softmax.getInput() || !fill ||
      !std::isinf(*fill) || *fill > 0 || maskBool != choices[0].mask)
    return Failure("the second choice is not the arg-max of the logits with "
                   "the first choice masked to -inf");
  // Slots: all first choices before any second one.
  if (!isSlotCount(choices[0].slots, choices[0].mask))
    return Failure("the first choice's slots are not cumsum(mask1, 0) - 1");
  auto offset =
      orderOperands(choices[1].slots.getDefiningOp<moe::AddOp>(),
                    [&](Value v) { return isSlotCount(v, choices[1].mask); });
  auto firsts =
      offset ? offset->second.getDefiningOp<moe::ReduceSumOp>() : nullptr;
  if (!firsts || firsts.getData() != choices[0].mask || !firsts.getAxes() ||
      !isConstAxes(firsts.getAxes(), {0}, 2) || !firsts.getKeepdims())
    return Failure("the second choice's slots are not cumsum(mask2, 0) - 1 + "
                   "sum(mask1, 0): after every first choice");
  gate.anchor = argMax2;
  gate.logits = softmax.getInput();
  gate.topK = 2;
  gate.keptEpsilon = static_cast<float>(*epsilon);
  return std::nullopt;
}

} // namespace

bool moec::isEinsumOf(moe::EinsumOp einsum, Value a, StringRef aRoles, Value b,
                      StringRef bRoles, StringRef outRoles) {
  if (einsum.getInputs().size() != 2)
    return false;
  bool aFirst = einsum.getInputs()[0] == a && einsum.getInputs()[1] == b;
  bool bFirst = einsum.getInputs()[0] == b && einsum.getInputs()[1] == a;
  if (!aFirst && !bFirst)
    return false;
  std::string spaced = einsum.getEquation().str();
  llvm::erase(spaced, ' ');
  auto [inputs, out] = StringRef(spaced).split("->");
  auto [lhs, rhs] = inputs.split(',');
  if (bFirst && !aFirst)
    std::swap(lhs, rhs);
  // Letter <-> role, one to one across the terms; the roles of a term are
  // distinct, so a letter repeated within one (a diagonal) fails too.
  llvm::DenseMap<char, char> role, letter;
  auto bind = [&](StringRef letters, StringRef roles, Value operand) {
    if (letters.size() != roles.size() ||
        getShape(operand).size() != roles.size())
      return false;
    for (auto [l, r] : llvm::zip(letters, roles))
      if (!llvm::isAlpha(l) || role.try_emplace(l, r).first->second != r ||
          letter.try_emplace(r, l).first->second != l)
        return false;
    return true;
  };
  return bind(lhs, aRoles, a) && bind(rhs, bRoles, b) &&
         bind(out, outRoles, einsum.getResult());
}

moe::ArgMaxOp moec::findCapacityAnchor(Value dispatch) {
  SmallVector<std::pair<Value, int>> worklist{{dispatch, 0}};
  llvm::SmallPtrSet<Operation *, 32> visited;
  moe::ArgMaxOp last;
  while (!worklist.empty()) {
    auto [value, depth] = worklist.pop_back_val();
    Operation *op = value.getDefiningOp();
    if (!op || !visited.insert(op).second)
      continue;
    if (auto argMax = dyn_cast<moe::ArgMaxOp>(op))
      if (!last || last->isBeforeInBlock(argMax))
        last = argMax;
    // Past a projection the values are the tokens', not the gate's.
    if (depth + 1 >= kMaxGateDepth ||
        isa<moe::MatMulOp, moe::GemmOp, moe::ConstantOp>(op))
      continue;
    for (Value operand : op->getOperands())
      worklist.push_back({operand, depth + 1});
  }
  return last;
}

std::optional<std::string>
moec::matchCapacityGate(Value dispatch, Value combine, CapacityGate &gate) {
  Type f32 = Float32Type::get(dispatch.getContext());
  ArrayRef<int64_t> shape = getRowsShape(dispatch, 3, f32);
  if (shape.empty() || getShape(combine) != shape)
    return Failure("the dispatch and combine tensors are not f32 [T, E, C] "
                   "of one shape");
  gate.numExperts = shape[1];
  gate.capacity = shape[2];
  gate.dispatch = dispatch;
  gate.combine = combine;
  gate.keptEpsilon.reset();
  if (auto product = dispatch.getDefiningOp<moe::MulOp>())
    return matchSwitch(product, combine, shape[1], shape[2], gate);
  // GShard: dispatch = cast<f32>(cast<i1>(combine)).
  Value nonZero = getCastInput(dispatch, f32);
  if (!nonZero || getCastInput(nonZero, IntegerType::get(dispatch.getContext(),
                                                         1)) != combine)
    return Failure("the dispatch mask is neither Switch's (priority == "
                   "arange(C)) * mask nor GShard's combine != 0");
  return matchGShard(combine, shape[1], shape[2], gate);
}
