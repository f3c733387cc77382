//===- RowIndependenceTokens.cpp - Token batching's transfer functions ----===//
//
// The parts of the row-independence dataflow (RowIndependence.h) that only
// token batching (moe-analyze-batch-rows) uses: the row inputs as seeds,
// values computed from the row count alone (Positions), the causal mask an
// attention may mix rows under, the recurrences that carry a state from
// zeros, and the outputs.
//
//===----------------------------------------------------------------------===//

#include "passes/RowIndependence.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "passes/MatchGates.h"

#include "mlir/IR/Matchers.h"

namespace moec::rows {

LogicalResult Analysis::seedRowInputs() {
  for (BlockArgument arg : func.getArguments()) {
    std::string name = argName(arg.getArgNumber());
    if (!llvm::is_contained(config.rowInputs, name))
      return kill(nullptr, "input '" + name +
                               "' is not one of the token rows (a past "
                               "cache or a mask spans a sequence)");
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || type.getRank() == 0 || !type.isDynamicDim(type.getRank() - 1))
      return kill(nullptr, "input '" + name +
                               "' has no dynamic last dimension to carry "
                               "the token rows");
    int64_t axis = type.getRank() - 1;
    std::string sym = name + "." + std::to_string(axis);
    auto params =
        func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(), "moe.dim_params");
    if (params && static_cast<int64_t>(params.size()) > axis)
      if (auto param = dyn_cast<StringAttr>(params[axis]))
        if (!param.getValue().empty())
          sym = param.str();
    if (!symbol.empty() && sym != symbol)
      return kill(nullptr, "inputs '" + splitInputs.front() + "' and '" + name +
                               "' have different token dimensions ('" + symbol +
                               "' and '" + sym + "')");
    symbol = sym;
    splitInputs.push_back(name);
    states[arg] = State::rows(axis);
  }
  for (const std::string &name : config.rowInputs)
    if (!llvm::is_contained(splitInputs, name))
      return kill(nullptr, "the graph has no input '" + name + "'");
  return success();
}

bool Analysis::readsSizesOnly(Operation *op) const {
  return llvm::all_of(op->getOperands(), [&](Value v) {
    State::Kind kind = get(v).kind;
    return kind == State::Free || kind == State::Local ||
           kind == State::Positions;
  });
}

std::optional<LogicalResult> Analysis::visitPositions(Operation *op) {
  if (isa<moe::AttentionOp, func::ReturnOp>(op) ||
      llvm::none_of(op->getOperands(),
                    [&](Value v) { return get(v).kind == State::Positions; }))
    return std::nullopt;
  if (readsSizesOnly(op)) {
    setAll(op, State::positions());
    return success();
  }
  return kill(op, op->getName().getStringRef() +
                      " combines the rows with positions computed from "
                      "their count (only a causal attention mask may read "
                      "those)");
}

namespace {

/// The one axis of `value` whose size is not statically 1, if there is
/// exactly one.
std::optional<int64_t> getSoleAxis(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type)
    return std::nullopt;
  std::optional<int64_t> axis;
  for (auto [i, size] : llvm::enumerate(type.getShape())) {
    if (size == 1)
      continue;
    if (axis)
      return std::nullopt;
    axis = static_cast<int64_t>(i);
  }
  return axis;
}

/// Whether `value`, broadcast to rank `rank`, is `range(0, n, 1)` laid
/// along axis `axis`: the range through unsqueezes, squeezes and reshapes
/// that only add or remove size-1 axes (which keep the elements' order).
bool isIotaAlong(Value value, int64_t rank, int64_t axis) {
  std::optional<int64_t> sole = getSoleAxis(value);
  if (!sole || *sole + rank - getRank(value) != axis)
    return false;
  while (Operation *op = value.getDefiningOp()) {
    if (!isa<moe::UnsqueezeOp, moe::SqueezeOp, moe::ReshapeOp>(op) ||
        !getSoleAxis(op->getOperand(0)))
      break;
    value = op->getOperand(0);
  }
  auto range = value.getDefiningOp<moe::RangeOp>();
  return range && moe::getConstantInt(range.getStart()) == 0 &&
         moe::getConstantInt(range.getDelta()) == 1;
}

/// Whether `value` is a one-element f32 constant at most -1e30 (-inf or
/// finfo.min: exp of it minus a finite maximum is 0 in f32).
bool isMaskedOut(Value value) {
  std::optional<SmallVector<float>> floats = getConstantFloats(value, 1);
  return floats && floats->size() == 1 && (*floats)[0] <= -1e30f;
}

} // namespace

namespace {

/// `keys <= queries` (or `queries >= keys`) when `visible`, else `keys >
/// queries` (or `queries < keys`), with each an iota along the last and
/// the second to last of `rank` axes; sets `queries`.
bool isCausalCondition(Value cond, int64_t rank, bool visible, Value &queries) {
  Value keys;
  Operation *compare = cond.getDefiningOp();
  if (visible) {
    if (auto op = dyn_cast_or_null<moe::LessOrEqualOp>(compare))
      keys = op.getLhs(), queries = op.getRhs();
    else if (auto op = dyn_cast_or_null<moe::GreaterOrEqualOp>(compare))
      queries = op.getLhs(), keys = op.getRhs();
  } else {
    if (auto op = dyn_cast_or_null<moe::GreaterOp>(compare))
      keys = op.getLhs(), queries = op.getRhs();
    else if (auto op = dyn_cast_or_null<moe::LessOp>(compare))
      queries = op.getLhs(), keys = op.getRhs();
  }
  return keys && isIotaAlong(keys, rank, rank - 1) &&
         isIotaAlong(queries, rank, rank - 2);
}

/// The W of `keys > queries - W` (or `queries - W < keys`), W a positive
/// constant, `queries` the given value and keys an iota along the last of
/// `rank` axes.
std::optional<int64_t> getWindowCondition(Value cond, int64_t rank,
                                          Value queries) {
  Value keys, first;
  Operation *compare = cond.getDefiningOp();
  if (auto op = dyn_cast_or_null<moe::GreaterOp>(compare))
    keys = op.getLhs(), first = op.getRhs();
  else if (auto op = dyn_cast_or_null<moe::LessOp>(compare))
    first = op.getLhs(), keys = op.getRhs();
  else
    return std::nullopt;
  auto sub = first.getDefiningOp<moe::SubOp>();
  if (!sub || sub.getLhs() != queries || !isIotaAlong(keys, rank, rank - 1))
    return std::nullopt;
  std::optional<int64_t> window = moe::getConstantInt(sub.getRhs());
  if (!window || *window <= 0)
    return std::nullopt;
  return window;
}

} // namespace

std::optional<int64_t> getCausalWindow(Value mask) {
  if (auto expand = mask.getDefiningOp<moe::ExpandOp>())
    mask = expand.getInput();
  auto where = mask.getDefiningOp<moe::WhereOp>();
  if (!where)
    return std::nullopt;
  Value cond = where.getCondition();
  int64_t rank = getRank(cond);
  if (rank < 2)
    return std::nullopt;
  // where(visible, 0, masked) or where(hidden, masked, 0).
  bool visible = isConstFloat(where.getX(), 0.0f);
  Value shown = visible ? where.getX() : where.getY();
  Value hidden = visible ? where.getY() : where.getX();
  if (!isConstFloat(shown, 0.0f) || !isMaskedOut(hidden))
    return std::nullopt;
  Value queries;
  if (isCausalCondition(cond, rank, visible, queries))
    return 0;
  // Visible: causal and window, either way round.
  auto both = cond.getDefiningOp<moe::AndOp>();
  if (!visible || !both)
    return std::nullopt;
  for (auto [causal, window] : {std::pair(both.getLhs(), both.getRhs()),
                                std::pair(both.getRhs(), both.getLhs())})
    if (isCausalCondition(causal, rank, /*visible=*/true, queries))
      return getWindowCondition(window, rank, queries);
  return std::nullopt;
}

LogicalResult Analysis::visitBatchAttention(moe::AttentionOp op) {
  if (Value sinks = op.getSinks(); sinks && !get(sinks).isFree())
    return kill(op, "attention sinks depend on the rows");
  for (Value v : {op.getQuery(), op.getKey(), op.getValue()}) {
    State s = get(v);
    if (s.kind != State::Rows || getRank(v) != 4 || s.axis != 2 || s.span != 1)
      return kill(op, "attention whose queries, keys and values do not all "
                      "carry the rows on axis 2 of [batch, heads, rows, "
                      "dim], one index per row");
  }
  std::optional<int64_t> window =
      op.getMask() ? getCausalWindow(op.getMask()) : std::nullopt;
  if (!window)
    return kill(op, "attention without a mask proven causal over the rows "
                    "(key j visible to query i exactly when j <= i, or "
                    "i - W < j <= i in a window of W)");
  attentionWindows.push_back(*window);
  setAll(op, State::rows(2));
  return success();
}

namespace {

/// Whether `value` is all zeros: a constant, or a constant_of_shape of 0.
bool isZeros(Value value) {
  Attribute attr;
  if (auto fill = value.getDefiningOp<moe::ConstantOfShapeOp>()) {
    if (!fill.getValue())
      return true;
    attr = *fill.getValue();
  } else if (!matchPattern(value, m_Constant(&attr))) {
    return false;
  }
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense || !dense.getElementType().isF32())
    return false;
  return llvm::all_of(dense.getValues<APFloat>(),
                      [](const APFloat &f) { return f.isZero(); });
}

} // namespace

LogicalResult Analysis::visitBatchState(Operation *op, ValueRange rows,
                                        int64_t axis, Value state,
                                        ValueRange params) {
  StringRef name = op->getName().getStringRef();
  for (Value v : rows) {
    State s = get(v);
    if (s.kind != State::Rows || s.axis != axis || s.span != 1)
      return kill(op, name +
                          " whose operands do not all carry the rows on "
                          "axis " +
                          Twine(axis) + ", one index per row");
  }
  for (Value v : params)
    if (!get(v).isFree())
      return kill(op, name + " with weights that depend on the rows");
  if (!get(state).isFree() || !isZeros(state))
    return kill(op, name + " that does not start from a zero state (the "
                           "runtime starts each sequence from zeros)");
  states[op->getResult(0)] = State::rows(axis);
  states[op->getResult(1)] = State::carried();
  return success();
}

LogicalResult Analysis::visitBatchReturn(func::ReturnOp op) {
  for (auto [index, value] : llvm::enumerate(op.getOperands())) {
    std::string name = resultName(index);
    auto params = func.getResultAttrOfType<ArrayAttr>(index, "moe.dim_params");
    State s = get(value);
    if (s.kind == State::Carried) {
      stateOutputs.push_back(name);
      continue;
    }
    if (s.kind == State::Rows && params &&
        static_cast<int64_t>(params.size()) > s.axis)
      if (auto param = dyn_cast<StringAttr>(params[s.axis]);
          param && param.getValue() == symbol) {
        joinedOutputs.push_back(name);
        continue;
      }
    return kill(op, "output '" + name + "' does not carry the rows on its '" +
                        symbol + "' dimension");
  }
  return success();
}

} // namespace moec::rows
