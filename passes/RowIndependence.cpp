//===- RowIndependence.cpp - The row-independence dataflow ----------------===//
//
// The driver and the transfer functions of the elementwise, axis, product
// and MoE ops (RowIndependence.h).
//
//===----------------------------------------------------------------------===//

#include "passes/RowIndependence.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "passes/MatchGates.h"

#include "llvm/ADT/TypeSwitch.h"

namespace moec::rows {

std::string formatLocation(Location loc) {
  if (auto named = dyn_cast<NameLoc>(loc)) {
    std::string text = named.getName().str();
    if (auto file = dyn_cast<FileLineColLoc>(named.getChildLoc()))
      text += " in " + file.getFilename().str();
    return text;
  }
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (isa<NameLoc>(inner))
        return formatLocation(inner);
  std::string text;
  llvm::raw_string_ostream os(text);
  loc.print(os);
  return text;
}

LogicalResult Analysis::run() {
  if (failed(config.batchTokens() ? seedRowInputs() : seedInputs()))
    return failure();
  for (Operation &op : func.getBody().front()) {
    if (!isa<func::ReturnOp>(op))
      for (Value v : op.getOperands())
        if (get(v).kind == State::Carried)
          return kill(&op, op.getName().getStringRef() +
                               " reads the state a recurrence leaves after "
                               "the rows (only the graph's outputs may)");
    if (succeeded(visit(&op)))
      continue;
    // Token batching: a row count computed into more than a tracked shape
    // vector (a Range over it, a mask made from that) is Positions, which
    // only an attention's mask may read.
    if (config.batchTokens() && !isa<func::ReturnOp, moe::AttentionOp>(op) &&
        readsSizesOnly(&op)) {
      culprit = nullptr;
      reason.clear();
      setAll(&op, State::positions());
      continue;
    }
    return failure();
  }
  return success();
}

LogicalResult Analysis::kill(Operation *op, const Twine &why) {
  culprit = op;
  reason = why.str();
  return failure();
}

std::string Analysis::argName(unsigned index) {
  if (auto name = func.getArgAttrOfType<StringAttr>(index, "moe.name"))
    return name.str();
  return "arg" + std::to_string(index);
}

std::string Analysis::resultName(unsigned index) {
  if (auto attr = func.getResultAttrOfType<StringAttr>(index, "moe.name"))
    return attr.str();
  return "#" + std::to_string(index);
}

void appendFailure(Builder &b, const Analysis &analysis,
                   SmallVectorImpl<NamedAttribute> &fields) {
  if (Operation *op = analysis.culprit) {
    fields.push_back(
        b.getNamedAttr("op", b.getStringAttr(op->getName().getStringRef())));
    fields.push_back(
        b.getNamedAttr("loc", b.getStringAttr(formatLocation(op->getLoc()))));
  }
  fields.push_back(b.getNamedAttr("reason", b.getStringAttr(analysis.reason)));
}

std::string Analysis::dimSymbol(ArrayAttr params, const std::string &name) {
  if (params && !params.empty())
    if (auto param = dyn_cast<StringAttr>(params[0]))
      if (!param.getValue().empty())
        return param.str();
  return name + ".0";
}

LogicalResult Analysis::seedInputs() {
  for (BlockArgument arg : func.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || type.getRank() == 0 || !type.isDynamicDim(0))
      continue;
    std::string name = argName(arg.getArgNumber());
    std::string sym = dimSymbol(
        func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(), "moe.dim_params"),
        name);
    if (!symbol.empty() && sym != symbol)
      return kill(nullptr, "inputs '" + splitInputs.front() + "' and '" + name +
                               "' have different dimensions 0 ('" + symbol +
                               "' and '" + sym + "')");
    symbol = sym;
    splitInputs.push_back(name);
    states[arg] = State::rows(0);
  }
  if (splitInputs.empty())
    return kill(nullptr, "no input has a dynamic dimension 0 to split");
  return success();
}

void Analysis::setAll(Operation *op, State state) {
  for (Value result : op->getResults())
    states[result] = state;
}

std::string Analysis::rowsText(Value value) {
  return "axis " + std::to_string(get(value).axis) +
         ", which carries the "
         "rows of '" +
         symbol + "'";
}

LogicalResult Analysis::visit(Operation *op) {
  // Ops that read nothing but Free values compute the same everywhere.
  if (llvm::all_of(op->getOperands(),
                   [&](Value v) { return get(v).isFree(); }) &&
      !isa<func::ReturnOp>(op)) {
    setAll(op, State::free());
    return success();
  }
  if (config.batchTokens())
    if (std::optional<LogicalResult> result = visitPositions(op))
      return *result;
  if (op->hasTrait<moe::OpTrait::Elementwise>())
    return visitElementwise(op, op->getOperands());
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      // Elementwise in its input only: the target's values are never read.
      .Case([&](moe::CastLikeOp op) {
        return visitElementwise(op, op->getOperands().take_front());
      })
      .Case([&](moe::DimOp op) {
        State in = get(op.getInput());
        bool local = in.kind == State::Local ||
                     (in.kind == State::Rows &&
                      static_cast<int64_t>(op.getIndex()) == in.axis);
        return setLocal(op, {local});
      })
      .Case([&](moe::ShapeOp op) { return visitShape(op); })
      .Case([&](moe::SizeOp op) { return setLocal(op, {true}); })
      .Case<moe::GatherOp>([&](moe::GatherOp op) { return visitGather(op); })
      .Case<moe::ConcatOp>([&](moe::ConcatOp op) { return visitConcat(op); })
      .Case<moe::SliceOp>([&](moe::SliceOp op) { return visitSlice(op); })
      .Case<moe::SqueezeOp, moe::UnsqueezeOp>(
          [&](Operation *op) { return visitSqueeze(op); })
      .Case([&](moe::ReshapeOp op) { return visitReshape(op); })
      .Case([&](moe::FlattenOp op) { return visitFlatten(op); })
      .Case([&](moe::TransposeOp op) { return visitTranspose(op); })
      .Case([&](moe::ExpandOp op) { return visitExpand(op); })
      .Case([&](moe::ConstantOfShapeOp op) {
        return visitSized(op, op.getInput(), Value());
      })
      .Case([&](moe::TileOp op) { return visitTile(op); })
      .Case([&](moe::RangeOp op) {
        return kill(op, "moe.range counts to a device's row count (the "
                        "positions of the rows)");
      })
      .Case<moe::SoftmaxOp, moe::LogSoftmaxOp>([&](Operation *op) {
        Value input = op->getOperand(0);
        int64_t axis = op->getAttrOfType<IntegerAttr>("axis").getInt();
        return visitAlongAxis(op, input, axis, /*keep=*/true, "normalises");
      })
      .Case<moe::ReduceSumOp, moe::ReduceMeanOp, moe::ReduceMaxOp,
            moe::ReduceMinOp, moe::ReduceProdOp, moe::ReduceL1Op,
            moe::ReduceL2Op, moe::ReduceSumSquareOp, moe::ReduceLogSumOp,
            moe::ReduceLogSumExpOp>(
          [&](Operation *op) { return visitReduce(op); })
      .Case([&](moe::ArgMaxOp op) {
        return visitAlongAxis(op, op.getData(), op.getAxis(),
                              op.getKeepdims() != 0, "reduces");
      })
      .Case([&](moe::CumSumOp op) {
        std::optional<int64_t> axis = moe::getConstantInt(op.getAxis());
        if (!axis || !get(op.getAxis()).isFree())
          return kill(op, "cum_sum along an axis that is not a constant");
        return visitAlongAxis(op, op.getX(), *axis, true, "accumulates");
      })
      .Case([&](moe::TopKOp op) {
        if (!get(op.getK()).isFree())
          return kill(op, "top_k takes as many elements as a device has "
                          "rows");
        return visitAlongAxis(op, op.getInput(), op.getAxis(), true, "ranks");
      })
      .Case<moe::LayerNormalizationOp, moe::SimplifiedLayerNormalizationOp>(
          [&](Operation *op) { return visitNorm(op); })
      .Case([&](moe::SplitOp op) {
        if (op.getSplit() && !get(op.getSplit()).isFree())
          return kill(op, "split sizes depend on a device's row count");
        return visitAlongAxis(op, op.getInput(), op.getAxis(), true, "splits");
      })
      .Case([&](moe::TriluOp op) {
        int64_t rank = getRank(op.getInput());
        State in = get(op.getInput());
        if (in.kind == State::Rows && in.axis >= rank - 2)
          return kill(op, "trilu masks by position along " +
                              rowsText(op.getInput()));
        return visitKeep(op, op.getInput(),
                         op.getK() ? ValueRange(op.getK()) : ValueRange());
      })
      .Case([&](moe::OneHotOp op) { return visitOneHot(op); })
      .Case([&](moe::GatherElementsOp op) {
        return visitIndexed(op, {op.getData(), op.getIndices()}, op.getAxis(),
                            "gather_elements");
      })
      .Case([&](moe::ScatterElementsOp op) {
        return visitIndexed(op,
                            {op.getData(), op.getIndices(), op.getUpdates()},
                            op.getAxis(), "scatter_elements");
      })
      .Case([&](moe::MatMulOp op) { return visitMatMul(op); })
      .Case([&](moe::GemmOp op) { return visitGemm(op); })
      .Case([&](moe::RouterOp op) { return visitRouter(op); })
      .Case([&](moe::DispatchOp op) { return visitDispatch(op); })
      .Case([&](moe::ExpertsOp op) { return visitExperts(op); })
      .Case([&](moe::CombineOp op) { return visitCombine(op); })
      .Case([&](moe::SharedExpertOp op) {
        State in = get(op.getTokens());
        for (Value v : op->getOperands().drop_front())
          if (!get(v).isFree())
            return kill(op, "shared_expert weights differ between devices");
        if (in.kind != State::Rows || in.axis != 0)
          return kill(op, "shared_expert reads tokens whose rows are not "
                          "axis 0");
        setAll(op, State::rows(0));
        return success();
      })
      .Case([&](moe::CausalConvOp op) {
        if (!config.batchTokens())
          return kill(op, "causal_conv runs along the rows");
        SmallVector<Value> params = {op.getWeight()};
        if (op.getBias())
          params.push_back(op.getBias());
        return visitBatchState(op, op.getInput(), 2, op.getState(), params);
      })
      .Case([&](moe::GatedDeltaRuleOp op) {
        if (!config.batchTokens())
          return kill(op, "gated_delta_rule runs along the rows");
        return visitBatchState(op,
                               {op.getQuery(), op.getKey(), op.getValue(),
                                op.getDecay(), op.getBeta()},
                               1, op.getState(), {});
      })
      .Case([&](moe::AttentionOp op) {
        if (config.batchTokens())
          return visitBatchAttention(op);
        // Batch rows attend within themselves; keys of batch 1 (free) are
        // shared by every row. The sinks are per head, not per row: every
        // device needs them whole.
        if (Value sinks = op.getSinks(); sinks && !get(sinks).isFree())
          return kill(op, "attention sinks differ between devices");
        for (Value v : op->getOperands()) {
          if (v == op.getSinks())
            continue;
          State s = get(v);
          if (!s.isFree() && (s.kind != State::Rows || s.axis != 0))
            return kill(op, "attention mixes " + rowsText(v));
          // A shared operand must broadcast over the batch (size 1).
          if (s.isFree() && v != op.getQuery() &&
              cast<RankedTensorType>(v.getType()).getDimSize(0) != 1 &&
              !get(op.getQuery()).isFree())
            return kill(op, "attention reads a whole batch of keys or mask "
                            "on every device");
        }
        bool free = llvm::all_of(op->getOperands(),
                                 [&](Value v) { return get(v).isFree(); });
        setAll(op, free ? State::free() : State::rows(0));
        return success();
      })
      .Case([&](func::ReturnOp op) {
        return config.batchTokens() ? visitBatchReturn(op) : visitReturn(op);
      })
      .Default([&](Operation *op) {
        return kill(op, op->getName().getStringRef() +
                            " is not known to keep rows apart");
      });
}

LogicalResult Analysis::setLocal(Operation *op, SmallVector<bool> mask) {
  states[op->getResult(0)] = State::localMask(std::move(mask));
  return success();
}

std::optional<SmallVector<bool>> Analysis::getMask(Value value) {
  State s = get(value);
  std::optional<int64_t> count = getTrackedCount(value);
  if (!count || (s.kind != State::Free && s.kind != State::Local))
    return std::nullopt;
  if (s.kind == State::Free)
    return SmallVector<bool>(*count, false);
  if (static_cast<int64_t>(s.local.size()) != *count)
    return std::nullopt;
  return s.local;
}

LogicalResult Analysis::visitElementwise(Operation *op, ValueRange inputs) {
  int64_t rank = getRank(op->getResult(0));
  bool anyRows = false, anyLocal = false;
  int64_t axis = -1, span = 1;
  for (Value v : inputs) {
    State s = get(v);
    if (s.kind == State::Layer)
      return kill(op, "reads a MoE layer's internal rows");
    if (s.kind == State::Local)
      anyLocal = true;
    if (s.kind != State::Rows)
      continue;
    int64_t mapped = s.axis + rank - getRank(v);
    if (anyRows && mapped != axis)
      return kill(op, "combines values whose rows lie on different axes (" +
                          Twine(axis) + " and " + Twine(mapped) + ")");
    // Operands whose rows are indexed differently along the axis: unknown.
    span = anyRows && span != s.span ? 0 : s.span;
    anyRows = true;
    axis = mapped;
  }
  if (anyRows && anyLocal)
    return kill(op, "combines rows with a device's row count");
  if (anyLocal) {
    // Shape arithmetic: an element is local if any element it reads is.
    std::optional<int64_t> count = getTrackedCount(op->getResult(0));
    if (!count)
      return kill(op, "computes a large value from a device's row count");
    SmallVector<bool> mask(*count, false);
    for (Value v : inputs) {
      std::optional<SmallVector<bool>> in = getMask(v);
      if (!in)
        return kill(op, "computes from a device's row count");
      if (in->size() == 1)
        for (bool &b : mask)
          b = b || in->front();
      else if (in->size() == mask.size())
        for (auto [b, i] : llvm::zip(mask, *in))
          b = b || i;
      else
        return kill(op, "broadcasts a device's row count");
    }
    for (Value result : op->getResults())
      states[result] = State::localMask(mask);
    return success();
  }
  // A Free operand must not extend along the rows: it could only match
  // one device's share of them.
  for (Value v : inputs) {
    State s = get(v);
    if (s.kind != State::Free)
      continue;
    int64_t at = axis - (rank - getRank(v));
    if (at >= 0 && getShape(v)[at] != 1)
      return kill(op, "broadcasts a replicated operand of size " +
                          Twine(ShapedType::isDynamic(getShape(v)[at])
                                    ? std::string("?")
                                    : std::to_string(getShape(v)[at])) +
                          " against the rows");
  }
  setAll(op, State::rows(axis, span));
  return success();
}

LogicalResult Analysis::visitAlongAxis(Operation *op, Value input, int64_t axis,
                                       bool keep, StringRef what) {
  for (Value v : op->getOperands())
    if (v != input && !get(v).isFree())
      return kill(op, "reads a device's row count or rows as a parameter");
  State in = get(input);
  if (in.kind != State::Rows)
    return kill(op, "acts on a device's row count or a MoE layer's "
                    "internal rows");
  int64_t rank = getRank(input);
  FailureOr<int64_t> a = moe::normalizeAxis(std::nullopt, "axis", axis, rank);
  if (failed(a))
    return kill(op, "acts along an invalid axis");
  if (*a == in.axis)
    return kill(op, op->getName().getStringRef() + " " + what + " along " +
                        rowsText(input));
  int64_t out = in.axis - (!keep && *a < in.axis ? 1 : 0);
  setAll(op, State::rows(out, in.span));
  return success();
}

LogicalResult Analysis::visitKeep(Operation *op, Value input,
                                  ValueRange params) {
  for (Value v : params)
    if (!get(v).isFree())
      return kill(op, "reads a device's row count or rows as a parameter");
  if (get(input).kind != State::Rows)
    return kill(op, "acts on a device's row count");
  setAll(op, get(input));
  return success();
}

LogicalResult Analysis::visitReduce(Operation *op) {
  Value data = op->getOperand(0);
  Value axesValue = op->getNumOperands() > 1 ? op->getOperand(1) : Value();
  State in = get(data);
  if (in.kind != State::Rows)
    return kill(op, "reduces a device's row count");
  if (axesValue && !get(axesValue).isFree())
    return kill(op, "reduces along axes given by a device's row count");
  bool keep = op->getAttrOfType<IntegerAttr>("keepdims").getInt() != 0;
  bool noop =
      op->getAttrOfType<IntegerAttr>("noop_with_empty_axes").getInt() != 0;
  int64_t rank = getRank(data);
  std::optional<SmallVector<int64_t>> axes;
  if (axesValue)
    axes = moe::getConstantInts(axesValue);
  else
    axes.emplace();
  if (!axes)
    return kill(op, "reduces along axes that are not constants");
  if (axes->empty()) {
    if (noop) {
      setAll(op, in);
      return success();
    }
    return kill(op, op->getName().getStringRef() +
                        " reduces every axis, including " + rowsText(data));
  }
  int64_t axis = in.axis;
  for (int64_t a : *axes) {
    int64_t n = a < 0 ? a + rank : a;
    if (n == in.axis)
      return kill(op, op->getName().getStringRef() + " reduces along " +
                          rowsText(data));
    if (!keep && n < in.axis)
      --axis;
  }
  setAll(op, State::rows(axis, in.span));
  return success();
}

LogicalResult Analysis::visitNorm(Operation *op) {
  Value x = op->getOperand(0);
  for (Value v : op->getOperands().drop_front())
    if (!get(v).isFree())
      return kill(op, "normalises with parameters that differ between "
                      "devices");
  State in = get(x);
  if (in.kind != State::Rows)
    return kill(op, "normalises a device's row count");
  int64_t rank = getRank(x);
  FailureOr<int64_t> axis =
      moe::normalizeAxis(std::nullopt, "axis",
                         op->getAttrOfType<IntegerAttr>("axis").getInt(), rank);
  if (failed(axis) || in.axis >= *axis)
    return kill(op, op->getName().getStringRef() + " normalises over " +
                        rowsText(x));
  setAll(op, in);
  return success();
}

LogicalResult Analysis::visitOneHot(moe::OneHotOp op) {
  if (!get(op.getDepth()).isFree() || !get(op.getValues()).isFree())
    return kill(op, "one_hot of a depth that depends on a device's rows");
  State in = get(op.getIndices());
  if (in.kind != State::Rows)
    return kill(op, "one_hot of a device's row count");
  int64_t rank = getRank(op.getResult());
  FailureOr<int64_t> axis =
      moe::normalizeAxis(std::nullopt, "axis", op.getAxis(), rank);
  if (failed(axis))
    return kill(op, "one_hot with an invalid axis");
  states[op.getResult()] = State::rows(in.axis < *axis ? in.axis : in.axis + 1);
  return success();
}

LogicalResult Analysis::visitIndexed(Operation *op, ArrayRef<Value> operands,
                                     int64_t axis, StringRef what) {
  int64_t rows = -1;
  for (Value v : operands) {
    State s = get(v);
    if (s.kind != State::Rows || (rows >= 0 && s.axis != rows))
      return kill(op, what + " mixes rows with values that do not carry "
                             "them on the same axis");
    rows = s.axis;
  }
  int64_t rank = getRank(operands.front());
  FailureOr<int64_t> a = moe::normalizeAxis(std::nullopt, "axis", axis, rank);
  if (failed(a) || *a == rows)
    return kill(op, what + " indexes along " + rowsText(operands.front()));
  setAll(op, State::rows(rows));
  return success();
}

LogicalResult Analysis::visitMatMul(moe::MatMulOp op) {
  Value a = op.getA(), b = op.getB();
  int64_t rankA = getRank(a), rankB = getRank(b);
  int64_t rank = getRank(op.getResult());
  int64_t axis = -1;
  for (auto [value, isA] : {std::pair(a, true), std::pair(b, false)}) {
    State s = get(value);
    if (s.isFree())
      continue;
    if (s.kind != State::Rows)
      return kill(op, "multiplies a device's row count");
    int64_t r = isA ? rankA : rankB;
    int64_t mapped;
    if (isA && s.axis == r - 1)
      return kill(op, "mat_mul contracts " + rowsText(value) +
                          " (the last axis of A)");
    if (!isA && r >= 2 && s.axis == r - 2)
      return kill(op, "mat_mul contracts " + rowsText(value) +
                          " (the second to last axis of B)");
    if (!isA && r == 1)
      return kill(op,
                  "mat_mul contracts " + rowsText(value) + " (the vector B)");
    if (isA && s.axis == r - 2)
      mapped = rank - (rankB == 1 ? 1 : 2);
    else if (!isA && s.axis == r - 1)
      mapped = rank - 1;
    else
      mapped = s.axis + rank - r; // a batch axis
    if (axis >= 0 && mapped != axis)
      return kill(op, "mat_mul multiplies rows by other rows (they lie on "
                      "axes " +
                          Twine(axis) + " and " + Twine(mapped) +
                          " of the product)");
    axis = mapped;
  }
  // A replicated operand must broadcast along a batch axis of rows.
  bool batch = axis >= 0 && axis < rank - 2;
  if (batch)
    for (Value value : {a, b}) {
      if (!get(value).isFree())
        continue;
      int64_t r = getRank(value);
      int64_t at = axis - (rank - r);
      if (r >= 2 && at >= 0 && at < r - 2 && getShape(value)[at] != 1)
        return kill(op, "mat_mul broadcasts a replicated batch against the "
                        "rows");
    }
  states[op.getResult()] = State::rows(axis);
  return success();
}

LogicalResult Analysis::visitGemm(moe::GemmOp op) {
  State a = get(op.getA()), b = get(op.getB());
  State c = op.getC() ? get(op.getC()) : State::free();
  if (!b.isFree() && !a.isFree())
    return kill(op, "gemm multiplies rows by rows");
  int64_t axis;
  if (a.kind == State::Rows) {
    int64_t m = op.getTransA() ? 1 : 0;
    if (a.axis != m)
      return kill(op, "gemm contracts " + rowsText(op.getA()));
    axis = 0;
  } else if (b.kind == State::Rows) {
    int64_t n = op.getTransB() ? 0 : 1;
    if (b.axis != n)
      return kill(op, "gemm contracts " + rowsText(op.getB()));
    axis = 1;
  } else if (c.kind == State::Rows) {
    return kill(op, "gemm adds rows to a replicated product");
  } else {
    return kill(op, "gemm of a device's row count");
  }
  if (c.kind == State::Rows) {
    if (c.axis + 2 - getRank(op.getC()) != axis)
      return kill(op, "gemm adds rows on another axis");
  } else if (!c.isFree()) {
    return kill(op, "gemm adds a device's row count");
  } else if (op.getC()) {
    int64_t at = axis - (2 - getRank(op.getC()));
    if (at >= 0 && getShape(op.getC())[at] != 1)
      return kill(op, "gemm broadcasts a replicated C against the rows");
  }
  states[op.getResult()] = State::rows(axis);
  return success();
}

LogicalResult Analysis::visitRouter(moe::RouterOp op) {
  if (op.getBias() && !get(op.getBias()).isFree())
    return kill(op, "router bias differs between devices");
  State in = get(op.getLogits());
  int64_t rank = getRank(op.getLogits());
  if (in.kind != State::Rows || in.axis == rank - 1)
    return kill(op, "router ranks experts along " + rowsText(op.getLogits()));
  // Capacity counts assignments along the tokens of a sequence.
  if (op.getCapacity() && in.axis == rank - 2)
    return kill(op, "router counts capacity along " + rowsText(op.getLogits()));
  setAll(op, in);
  return success();
}

LogicalResult Analysis::visitDispatch(moe::DispatchOp op) {
  State tokens = get(op.getTokens()), indices = get(op.getIndices());
  if (tokens.kind != State::Rows || tokens.axis != 0 ||
      indices.kind != State::Rows || indices.axis != 0)
    return kill(op, "dispatch of tokens whose rows are not axis 0");
  setAll(op, State::layer());
  return success();
}

LogicalResult Analysis::visitExperts(moe::ExpertsOp op) {
  if (get(op.getTokens()).kind != State::Layer ||
      get(op.getOffsets()).kind != State::Layer)
    return kill(op, "experts on rows that do not come from a dispatch");
  for (Value v : op->getOperands().drop_front(2))
    if (!get(v).isFree())
      return kill(op, "expert weights differ between devices");
  setAll(op, State::layer());
  return success();
}

LogicalResult Analysis::visitCombine(moe::CombineOp op) {
  if (get(op.getExpertOutputs()).kind != State::Layer ||
      get(op.getSource()).kind != State::Layer)
    return kill(op, "combine of rows that do not come from experts");
  for (Value v : {op.getWeights(), op.getPassthrough(), op.getIndices()})
    if (v && (get(v).kind != State::Rows || get(v).axis != 0))
      return kill(op, "combine with per-token operands whose rows are not "
                      "axis 0");
  setAll(op, State::rows(0));
  return success();
}

LogicalResult Analysis::visitReturn(func::ReturnOp op) {
  for (auto [index, value] : llvm::enumerate(op.getOperands())) {
    std::string name = resultName(index);
    auto params = func.getResultAttrOfType<ArrayAttr>(index, "moe.dim_params");
    bool joined = params && !params.empty() && isa<StringAttr>(params[0]) &&
                  cast<StringAttr>(params[0]).getValue() == symbol;
    State s = get(value);
    if (s.kind == State::Rows && s.axis == 0 && joined) {
      // The runtime joins only a dynamic dimension 0 (the plan's symbol).
      if (!ShapedType::isDynamic(getShape(value).front()))
        return kill(op, "output '" + name +
                            "' has the rows on dimension 0 but a static "
                            "size there");
      joinedOutputs.push_back(name);
      continue;
    }
    if (s.isFree() && !joined)
      continue;
    if (s.kind == State::Rows && s.axis == 0)
      return kill(op, "output '" + name +
                          "' has the rows on dimension 0 "
                          "but the model does not name it '" +
                          symbol + "'");
    if (s.kind == State::Rows)
      return kill(op, "output '" + name + "' has the rows on dimension " +
                          Twine(s.axis));
    return kill(op, "output '" + name + "' does not have the rows of '" +
                        symbol + "' on dimension 0");
  }
  return success();
}

} // namespace moec::rows
