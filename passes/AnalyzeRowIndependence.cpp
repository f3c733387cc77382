//===- AnalyzeRowIndependence.cpp - may the dense part split its rows? ----===//
//
// moe-analyze-row-independence: expert parallelism may run the dense part of
// a model data-parallel (each device on a share of the rows of the inputs the
// runtime splits, those whose dimension 0 is symbolic) only if no op outside
// the MoE layers makes a row depend on another row: attention over the
// split axis, a reduction or a cumulative sum along it, a reshape that
// merges it with an axis before it, positions computed from its length...
// This pass proves it with a forward dataflow over @main, or names the first
// op that breaks it; moe-insert-all-to-all then splits, or replicates the
// dense part and partitions only the MoE layers' tokens
// (docs/expert-parallelism.md).
//
// The lattice, per value:
//   Free    the same on every device (constants, replicated inputs, and
//           whatever is computed from them alone);
//   Local   a small integer vector (a shape, a dimension size) some of whose
//           elements are a device's own row count: those elements are
//           tracked one by one, and they may only size a reshape, an expand
//           or a constant_of_shape at the rows' own position;
//   Rows    the value has the split rows along `axis`: on each device it is
//           exactly the global value's slice of the rows the device owns
//           (a row may span several consecutive indices of the axis after a
//           reshape merges inner axes into it);
//   Layer   a MoE layer's internals between moe.dispatch and moe.combine,
//           which are only read by that layer.
// Anything else kills the proof.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/TypeSwitch.h"

namespace moec {
#define GEN_PASS_DEF_MOEANALYZEROWINDEPENDENCE
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace moec {
namespace {

/// The longest integer vector whose elements are tracked one by one.
constexpr int64_t kMaxTracked = 64;

struct State {
  enum Kind { Free, Local, Rows, Layer } kind = Free;
  /// Rows: the axis that carries the rows.
  int64_t axis = -1;
  /// Local: which flat elements are a device's row count.
  SmallVector<bool> local;

  static State free() { return State(); }
  static State rows(int64_t axis) {
    State s;
    s.kind = Rows;
    s.axis = axis;
    return s;
  }
  static State layer() {
    State s;
    s.kind = Layer;
    return s;
  }
  /// A Local vector; all-false masks are Free.
  static State localMask(SmallVector<bool> mask) {
    State s;
    if (llvm::none_of(mask, [](bool b) { return b; }))
      return s;
    s.kind = Local;
    s.local = std::move(mask);
    return s;
  }
  bool isFree() const { return kind == Free; }
};

/// The static element count of `value`, when it is small enough to track.
std::optional<int64_t> getTrackedCount(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape() || type.getNumElements() > kMaxTracked)
    return std::nullopt;
  return type.getNumElements();
}

int64_t getRank(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type ? type.getRank() : -1;
}

ArrayRef<int64_t> getShape(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// The product of `dims`, or nullopt when one is dynamic.
std::optional<int64_t> getStaticProduct(ArrayRef<int64_t> dims) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (ShapedType::isDynamic(d))
      return std::nullopt;
    product *= d;
  }
  return product;
}

class Analysis {
public:
  explicit Analysis(func::FuncOp func) : func(func) {}

  /// Runs over @main: success when the split rows are provably independent;
  /// else `culprit` and `reason` say why not.
  LogicalResult run() {
    if (failed(seedInputs()))
      return failure();
    for (Operation &op : func.getBody().front())
      if (failed(visit(&op)))
        return failure();
    return success();
  }

  /// The inputs split over the devices, and the symbol of their dim 0.
  SmallVector<std::string> splitInputs;
  std::string symbol;
  /// Why the proof failed: the op (null for a signature problem) and what
  /// it does to the rows.
  Operation *culprit = nullptr;
  std::string reason;

private:
  func::FuncOp func;
  llvm::DenseMap<Value, State> states;

  State get(Value value) const { return states.lookup(value); }

  LogicalResult kill(Operation *op, const Twine &why) {
    culprit = op;
    reason = why.str();
    return failure();
  }

  std::string argName(unsigned index) {
    if (auto name = func.getArgAttrOfType<StringAttr>(index, "moe.name"))
      return name.str();
    return "arg" + std::to_string(index);
  }

  /// The ONNX dimension name of dim 0 of argument or result `index`, as the
  /// plan emitter names the symbol ("NAME.0" when unnamed).
  std::string dimSymbol(ArrayAttr params, const std::string &name) {
    if (params && !params.empty())
      if (auto param = dyn_cast<StringAttr>(params[0]))
        if (!param.getValue().empty())
          return param.str();
    return name + ".0";
  }

  /// Every input whose dimension 0 is dynamic is split by the runtime; they
  /// must share one symbol (the rows of one batch).
  LogicalResult seedInputs() {
    for (BlockArgument arg : func.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type || type.getRank() == 0 || !type.isDynamicDim(0))
        continue;
      std::string name = argName(arg.getArgNumber());
      std::string sym = dimSymbol(func.getArgAttrOfType<ArrayAttr>(
                                      arg.getArgNumber(), "moe.dim_params"),
                                  name);
      if (!symbol.empty() && sym != symbol)
        return kill(nullptr, "inputs '" + splitInputs.front() + "' and '" +
                                 name + "' have different dimensions 0 ('" +
                                 symbol + "' and '" + sym + "')");
      symbol = sym;
      splitInputs.push_back(name);
      states[arg] = State::rows(0);
    }
    if (splitInputs.empty())
      return kill(nullptr, "no input has a dynamic dimension 0 to split");
    return success();
  }

  void setAll(Operation *op, State state) {
    for (Value result : op->getResults())
      states[result] = state;
  }

  /// The description of the rows for messages.
  std::string rowsText(Value value) {
    return "axis " + std::to_string(get(value).axis) +
           ", which carries the "
           "rows of '" +
           symbol + "'";
  }

  LogicalResult visit(Operation *op) {
    // Ops that read nothing but Free values compute the same everywhere.
    if (llvm::all_of(op->getOperands(),
                     [&](Value v) { return get(v).isFree(); }) &&
        !isa<func::ReturnOp>(op)) {
      setAll(op, State::free());
      return success();
    }
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case<moe::IdentityOp, moe::CastOp, moe::SqrtOp, moe::ReciprocalOp,
              moe::NegOp, moe::AbsOp, moe::ExpOp, moe::LogOp, moe::TanhOp,
              moe::ErfOp, moe::SigmoidOp, moe::ReluOp, moe::SinOp, moe::CosOp,
              moe::FloorOp, moe::CeilOp, moe::SoftplusOp, moe::SignOp,
              moe::NotOp, moe::GeluOp, moe::AddOp, moe::SubOp, moe::MulOp,
              moe::DivOp, moe::PowOp, moe::ModOp, moe::EqualOp, moe::LessOp,
              moe::LessOrEqualOp, moe::GreaterOp, moe::GreaterOrEqualOp,
              moe::AndOp, moe::OrOp, moe::SumOp, moe::MinOp, moe::MaxOp,
              moe::WhereOp, moe::ClipOp, moe::FusedElementwiseOp>(
            [&](Operation *op) {
              return visitElementwise(op, op->getOperands());
            })
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
              moe::ReduceMinOp>([&](Operation *op) { return visitReduce(op); })
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
          return visitAlongAxis(op, op.getInput(), op.getAxis(), true,
                                "splits");
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
        .Case([&](func::ReturnOp op) { return visitReturn(op); })
        .Default([&](Operation *op) {
          return kill(op, op->getName().getStringRef() +
                              " is not known to keep rows apart");
        });
  }

  LogicalResult setLocal(Operation *op, SmallVector<bool> mask) {
    states[op->getResult(0)] = State::localMask(std::move(mask));
    return success();
  }

  /// The Local mask of `value` (all false for Free), or nullopt when it
  /// cannot be tracked element by element.
  std::optional<SmallVector<bool>> getMask(Value value) {
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

  /// Broadcasting elementwise ops (and fused programs of them).
  LogicalResult visitElementwise(Operation *op, ValueRange inputs) {
    int64_t rank = getRank(op->getResult(0));
    bool anyRows = false, anyLocal = false;
    int64_t axis = -1;
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
    setAll(op, State::rows(axis));
    return success();
  }

  LogicalResult visitShape(moe::ShapeOp op) {
    State in = get(op.getData());
    int64_t rank = getRank(op.getData());
    int64_t start = op.getStartAttr() ? op.getStartAttr().getInt() : 0;
    int64_t end = op.getEndAttr() ? op.getEndAttr().getInt() : rank;
    if (start < 0)
      start += rank;
    if (end < 0)
      end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    SmallVector<bool> mask;
    for (int64_t d = start; d < end; ++d)
      mask.push_back(in.kind == State::Local ||
                     (in.kind == State::Rows && d == in.axis));
    return setLocal(op, mask);
  }

  /// Ops on Local vectors that select elements by constant indices (gather,
  /// slice): `picks` are the flat input elements of each result element.
  LogicalResult pickLocal(Operation *op, Value input,
                          std::optional<SmallVector<int64_t>> picks) {
    std::optional<SmallVector<bool>> mask = getMask(input);
    if (!mask || !picks)
      return kill(op, "selects from a device's row count at indices it "
                      "cannot see");
    SmallVector<bool> out;
    for (int64_t p : *picks) {
      if (p < 0 || p >= static_cast<int64_t>(mask->size()))
        return kill(op, "selects out of range");
      out.push_back((*mask)[p]);
    }
    return setLocal(op, out);
  }

  LogicalResult visitGather(moe::GatherOp op) {
    State data = get(op.getData()), indices = get(op.getIndices());
    int64_t rank = getRank(op.getData());
    FailureOr<int64_t> axis =
        moe::normalizeAxis(std::nullopt, "axis", op.getAxis(), rank);
    if (failed(axis))
      return kill(op, "gather with an invalid axis");
    if (data.kind == State::Local && indices.isFree() && rank <= 1) {
      std::optional<SmallVector<int64_t>> idx =
          moe::getConstantInts(op.getIndices());
      if (idx)
        for (int64_t &i : *idx)
          if (i < 0)
            i += getShape(op.getData())[0];
      return pickLocal(op, op.getData(), idx);
    }
    if (data.kind == State::Rows && indices.isFree()) {
      if (data.axis == *axis)
        return kill(op, "gathers along " + rowsText(op.getData()));
      int64_t shift = data.axis > *axis ? getRank(op.getIndices()) - 1 : 0;
      states[op.getResult()] = State::rows(data.axis + shift);
      return success();
    }
    if (data.isFree() && indices.kind == State::Rows) {
      // An embedding lookup: each index row picks its own rows of data.
      states[op.getResult()] = State::rows(*axis + indices.axis);
      return success();
    }
    return kill(op, "gathers rows with indices that depend on other rows");
  }

  LogicalResult visitConcat(moe::ConcatOp op) {
    int64_t rank = getRank(op.getResult());
    FailureOr<int64_t> axis =
        moe::normalizeAxis(std::nullopt, "axis", op.getAxis(), rank);
    if (failed(axis))
      return kill(op, "concat with an invalid axis");
    bool anyLocal = llvm::any_of(
        op.getInputs(), [&](Value v) { return get(v).kind == State::Local; });
    if (anyLocal) {
      if (rank != 1)
        return kill(op, "concatenates a device's row count");
      SmallVector<bool> mask;
      for (Value v : op.getInputs()) {
        std::optional<SmallVector<bool>> in = getMask(v);
        if (!in)
          return kill(op, "concatenates a device's row count with rows");
        llvm::append_range(mask, *in);
      }
      return setLocal(op, mask);
    }
    int64_t rowsAxis = -1;
    for (Value v : op.getInputs()) {
      State s = get(v);
      if (s.kind != State::Rows)
        return kill(op, "concatenates rows with values that have none");
      if (rowsAxis >= 0 && s.axis != rowsAxis)
        return kill(op, "concatenates values whose rows lie on different "
                        "axes");
      rowsAxis = s.axis;
    }
    if (rowsAxis == *axis)
      return kill(op, "concatenates along " + rowsText(op.getInputs()[0]));
    states[op.getResult()] = State::rows(rowsAxis);
    return success();
  }

  LogicalResult visitSlice(moe::SliceOp op) {
    for (Value v : op->getOperands().drop_front())
      if (!get(v).isFree())
        return kill(op, "slices at positions given by a device's row count");
    State data = get(op.getData());
    int64_t rank = getRank(op.getData());
    std::optional<SmallVector<int64_t>> starts =
        moe::getConstantInts(op.getStarts());
    std::optional<SmallVector<int64_t>> ends =
        moe::getConstantInts(op.getEnds());
    std::optional<SmallVector<int64_t>> axes;
    if (op.getAxes())
      axes = moe::getConstantInts(op.getAxes());
    else if (starts) {
      axes.emplace();
      for (int64_t i = 0; i < static_cast<int64_t>(starts->size()); ++i)
        axes->push_back(i);
    }
    std::optional<SmallVector<int64_t>> steps;
    if (op.getSteps())
      steps = moe::getConstantInts(op.getSteps());
    else if (starts)
      steps = SmallVector<int64_t>(starts->size(), 1);
    if (data.kind == State::Local) {
      if (!starts || !ends || !axes || !steps)
        return kill(op, "slices a device's row count at positions that are "
                        "not constants");
      if (rank != 1 || axes->size() != 1 || (*steps)[0] == 0)
        return kill(op, "slices a device's row count");
      auto [first, count] = moe::getSliceRange(
          getShape(op.getData())[0], (*starts)[0], (*ends)[0], (*steps)[0]);
      SmallVector<int64_t> picks;
      for (int64_t i = 0; i < count; ++i)
        picks.push_back(first + i * (*steps)[0]);
      return pickLocal(op, op.getData(), picks);
    }
    if (data.kind != State::Rows)
      return kill(op, "slices a MoE layer's internal rows");
    if (!axes)
      return kill(op, "slices along axes that are not constants");
    for (int64_t a : *axes)
      if ((a < 0 ? a + rank : a) == data.axis)
        return kill(op, "slices along " + rowsText(op.getData()));
    states[op.getResult()] = data;
    return success();
  }

  LogicalResult visitSqueeze(Operation *op) {
    Value data = op->getOperand(0);
    Value axesValue = op->getNumOperands() > 1 ? op->getOperand(1) : Value();
    State in = get(data);
    if (axesValue && !get(axesValue).isFree())
      return kill(op, "squeezes axes given by a device's row count");
    if (in.kind == State::Local) {
      std::optional<SmallVector<bool>> mask = getMask(data);
      if (!mask)
        return kill(op, "reshapes a device's row count");
      return setLocal(op, *mask);
    }
    if (in.kind != State::Rows)
      return kill(op, "reshapes a MoE layer's internal rows");
    bool squeeze = isa<moe::SqueezeOp>(op);
    int64_t inRank = getRank(data), outRank = getRank(op->getResult(0));
    std::optional<SmallVector<int64_t>> axes;
    if (axesValue)
      axes = moe::getConstantInts(axesValue);
    if (!axes)
      return kill(op, "squeezes axes that are not constants");
    int64_t axisRank = squeeze ? inRank : outRank;
    SmallVector<int64_t> normalized;
    for (int64_t a : *axes)
      normalized.push_back(a < 0 ? a + axisRank : a);
    llvm::sort(normalized);
    int64_t axis = in.axis;
    if (squeeze) {
      if (llvm::is_contained(normalized, axis))
        return kill(op, "squeezes " + rowsText(data));
      axis -=
          llvm::count_if(normalized, [&](int64_t a) { return a < in.axis; });
    } else {
      for (int64_t a : normalized)
        if (a <= axis)
          ++axis;
    }
    states[op->getResult(0)] = State::rows(axis);
    return success();
  }

  LogicalResult visitTranspose(moe::TransposeOp op) {
    State in = get(op.getData());
    if (in.kind != State::Rows)
      return kill(op, "transposes a device's row count or a MoE layer's "
                      "internal rows");
    int64_t rank = getRank(op.getData());
    SmallVector<int64_t> perm;
    if (op.getPerm())
      llvm::append_range(perm, *op.getPerm());
    else
      for (int64_t i = rank - 1; i >= 0; --i)
        perm.push_back(i);
    auto it = llvm::find(perm, in.axis);
    if (it == perm.end())
      return kill(op, "transpose loses the rows' axis");
    states[op.getResult()] = State::rows(it - perm.begin());
    return success();
  }

  /// Where a reshape's target puts the rows: the output axis `j` whose size
  /// is the rows' (a device's row count, or the -1 that absorbs it).
  LogicalResult visitReshape(moe::ReshapeOp op) {
    State data = get(op.getData());
    State shape = get(op.getShape());
    if (data.kind == State::Local && shape.isFree()) {
      std::optional<SmallVector<bool>> mask = getMask(op.getData());
      if (!mask || !getTrackedCount(op.getResult()))
        return kill(op, "reshapes a device's row count");
      return setLocal(op, *mask);
    }
    if (data.kind != State::Rows)
      return kill(op, "reshapes replicated data to a device's row count");
    ArrayRef<int64_t> in = getShape(op.getData());
    ArrayRef<int64_t> out = getShape(op.getResult());
    std::optional<SmallVector<moe::ShapeEntry>> entries =
        moe::getShapeEntries(op.getShape());
    std::optional<SmallVector<bool>> mask = getMask(op.getShape());
    if (!entries || !mask || entries->size() != out.size())
      return kill(op, "reshapes the rows to a target it cannot see");
    int64_t rowsAt = -1, absorbAt = -1;
    for (auto [i, entry] : llvm::enumerate(*entries)) {
      bool rowCount = false;
      if (entry.isConstant()) {
        if (*entry.constant == -1)
          absorbAt = i;
        // allowzero 0: a zero copies the input's dimension.
        rowCount = *entry.constant == 0 && !op.getAllowzero() &&
                   static_cast<int64_t>(i) == data.axis;
      } else if (entry.isDim()) {
        State source = get(entry.source);
        rowCount = source.kind == State::Rows && entry.dim == source.axis;
        if (!rowCount && !source.isFree() && source.kind != State::Rows)
          return kill(op, "reshapes to a size it cannot see");
      } else if ((*mask)[i]) {
        return kill(op, "reshapes to a size computed from a device's row "
                        "count");
      }
      if (!rowCount)
        continue;
      if (rowsAt >= 0)
        return kill(op, "reshapes to two sizes that are row counts");
      rowsAt = i;
    }
    int64_t j = rowsAt >= 0 ? rowsAt : absorbAt;
    if (j < 0)
      return kill(op, "reshapes the rows to a fixed size");
    // The dimensions before the rows are the same blocks on both sides.
    std::optional<int64_t> before = getStaticProduct(in.take_front(data.axis));
    std::optional<int64_t> outBefore = getStaticProduct(out.take_front(j));
    if (!before || !outBefore || *before != *outBefore)
      return kill(op, "reshapes across " + rowsText(op.getData()) +
                          " (it merges or splits the rows with the axes "
                          "before them)");
    if (rowsAt < 0) {
      // -1 takes the rows: each output slab along j must lie within one
      // row, so its size must divide a static tail of the input's row.
      std::optional<int64_t> slab = getStaticProduct(out.drop_front(j + 1));
      int64_t tail = 1;
      for (int64_t d : llvm::reverse(in.drop_front(data.axis + 1))) {
        if (ShapedType::isDynamic(d))
          break;
        tail *= d;
      }
      if (!slab || *slab == 0 || tail % *slab != 0)
        return kill(op, "reshapes across " + rowsText(op.getData()) +
                            " (a slab of the result may span two rows)");
    }
    states[op.getResult()] = State::rows(j);
    return success();
  }

  LogicalResult visitFlatten(moe::FlattenOp op) {
    State in = get(op.getInput());
    int64_t rank = getRank(op.getInput());
    FailureOr<int64_t> axis =
        moe::normalizeAxis(std::nullopt, "axis", op.getAxis(), rank + 1);
    if (in.kind != State::Rows || failed(axis))
      return kill(op, "flattens a device's row count");
    ArrayRef<int64_t> shape = getShape(op.getInput());
    // Rows stay whole when only size-1 axes come before them in their group.
    int64_t groupStart = in.axis < *axis ? 0 : *axis;
    std::optional<int64_t> before =
        getStaticProduct(shape.slice(groupStart, in.axis - groupStart));
    if (!before || *before != 1)
      return kill(op, "flattens " + rowsText(op.getInput()) +
                          " together with the axes before it");
    states[op.getResult()] = State::rows(in.axis < *axis ? 0 : 1);
    return success();
  }

  /// Expand and constant_of_shape: a target shape whose only row count
  /// gives the result its rows (a replicated value broadcast to them).
  LogicalResult visitSized(Operation *op, Value shape, Value input) {
    int64_t rank = getRank(op->getResult(0));
    std::optional<SmallVector<moe::ShapeEntry>> entries =
        moe::getShapeEntries(shape);
    std::optional<SmallVector<bool>> mask = getMask(shape);
    if (!entries || !mask)
      return kill(op, "takes a shape it cannot see");
    int64_t offset = rank - static_cast<int64_t>(entries->size());
    State in = input ? get(input) : State::free();
    if (in.kind != State::Free && in.kind != State::Rows)
      return kill(op, "expands a device's row count");
    int64_t inAxis =
        in.kind == State::Rows ? in.axis + rank - getRank(input) : -1;
    int64_t rowsAt = -1;
    for (auto [i, entry] : llvm::enumerate(*entries)) {
      int64_t at = offset + i;
      bool rowCount = false;
      if (entry.isDim()) {
        State source = get(entry.source);
        rowCount = source.kind == State::Rows && entry.dim == source.axis;
      }
      if (!rowCount && (*mask)[i])
        return kill(op, "takes a size computed from a device's row count");
      if (at == inAxis) {
        // The input's rows: the target keeps them (1) or names them.
        if (!rowCount && !(entry.isConstant() && *entry.constant == 1))
          return kill(op, "expands " + rowsText(input) + " to a fixed size");
      } else if (rowCount) {
        if (rowsAt >= 0 || inAxis >= 0)
          return kill(op, "takes two row counts");
        rowsAt = at;
      }
    }
    if (inAxis >= 0)
      rowsAt = inAxis;
    if (rowsAt < 0)
      return kill(op, "broadcasts rows to a fixed size");
    states[op->getResult(0)] = State::rows(rowsAt);
    return success();
  }

  LogicalResult visitExpand(moe::ExpandOp op) {
    return visitSized(op, op.getShape(), op.getInput());
  }

  LogicalResult visitTile(moe::TileOp op) {
    State in = get(op.getInput());
    std::optional<SmallVector<int64_t>> repeats =
        moe::getConstantInts(op.getRepeats());
    if (in.kind != State::Rows || !repeats || !get(op.getRepeats()).isFree())
      return kill(op, "tiles by a device's row count");
    if ((*repeats)[in.axis] != 1)
      return kill(op, "tiles along " + rowsText(op.getInput()));
    states[op.getResult()] = in;
    return success();
  }

  /// An op that acts along `axis` of `input` (its other operands must be
  /// Free); `keep` says whether the axis stays in the results.
  LogicalResult visitAlongAxis(Operation *op, Value input, int64_t axis,
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
    setAll(op, State::rows(out));
    return success();
  }

  /// Like visitAlongAxis for an op that keeps the shape and acts on no axis
  /// of the rows; `params` must be Free.
  LogicalResult visitKeep(Operation *op, Value input, ValueRange params) {
    for (Value v : params)
      if (!get(v).isFree())
        return kill(op, "reads a device's row count or rows as a parameter");
    if (get(input).kind != State::Rows)
      return kill(op, "acts on a device's row count");
    setAll(op, get(input));
    return success();
  }

  LogicalResult visitReduce(Operation *op) {
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
    setAll(op, State::rows(axis));
    return success();
  }

  LogicalResult visitNorm(Operation *op) {
    Value x = op->getOperand(0);
    for (Value v : op->getOperands().drop_front())
      if (!get(v).isFree())
        return kill(op, "normalises with parameters that differ between "
                        "devices");
    State in = get(x);
    if (in.kind != State::Rows)
      return kill(op, "normalises a device's row count");
    int64_t rank = getRank(x);
    FailureOr<int64_t> axis = moe::normalizeAxis(
        std::nullopt, "axis", op->getAttrOfType<IntegerAttr>("axis").getInt(),
        rank);
    if (failed(axis) || in.axis >= *axis)
      return kill(op, op->getName().getStringRef() + " normalises over " +
                          rowsText(x));
    setAll(op, in);
    return success();
  }

  LogicalResult visitOneHot(moe::OneHotOp op) {
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
    states[op.getResult()] =
        State::rows(in.axis < *axis ? in.axis : in.axis + 1);
    return success();
  }

  /// gather_elements / scatter_elements: every operand carries the rows on
  /// the same axis, and the op indexes along another.
  LogicalResult visitIndexed(Operation *op, ArrayRef<Value> operands,
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

  /// A batched matrix product: the rows survive as a batch axis, as A's
  /// M axis or as B's N axis; K (A's last axis, B's second to last) is
  /// contracted and kills them.
  LogicalResult visitMatMul(moe::MatMulOp op) {
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

  LogicalResult visitGemm(moe::GemmOp op) {
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

  LogicalResult visitRouter(moe::RouterOp op) {
    if (op.getBias() && !get(op.getBias()).isFree())
      return kill(op, "router bias differs between devices");
    State in = get(op.getLogits());
    int64_t rank = getRank(op.getLogits());
    if (in.kind != State::Rows || in.axis == rank - 1)
      return kill(op, "router ranks experts along " + rowsText(op.getLogits()));
    // Capacity counts assignments along the tokens of a sequence.
    if (op.getCapacity() && in.axis == rank - 2)
      return kill(op,
                  "router counts capacity along " + rowsText(op.getLogits()));
    setAll(op, in);
    return success();
  }

  /// A MoE layer: dispatch -> experts -> combine is a function of each token
  /// row alone (the exchanges of moe-insert-all-to-all keep it so).
  LogicalResult visitDispatch(moe::DispatchOp op) {
    State tokens = get(op.getTokens()), indices = get(op.getIndices());
    if (tokens.kind != State::Rows || tokens.axis != 0 ||
        indices.kind != State::Rows || indices.axis != 0)
      return kill(op, "dispatch of tokens whose rows are not axis 0");
    setAll(op, State::layer());
    return success();
  }

  LogicalResult visitExperts(moe::ExpertsOp op) {
    if (get(op.getTokens()).kind != State::Layer ||
        get(op.getOffsets()).kind != State::Layer)
      return kill(op, "experts on rows that do not come from a dispatch");
    for (Value v : op->getOperands().drop_front(2))
      if (!get(v).isFree())
        return kill(op, "expert weights differ between devices");
    setAll(op, State::layer());
    return success();
  }

  LogicalResult visitCombine(moe::CombineOp op) {
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

  /// The runtime joins an output over the devices along dimension 0 when
  /// the ONNX graph names it with the split symbol, and takes device 0's
  /// otherwise: each output must be one or the other.
  LogicalResult visitReturn(func::ReturnOp op) {
    for (auto [index, value] : llvm::enumerate(op.getOperands())) {
      std::string name = "#" + std::to_string(index);
      if (auto attr = func.getResultAttrOfType<StringAttr>(index, "moe.name"))
        name = attr.str();
      auto params =
          func.getResultAttrOfType<ArrayAttr>(index, "moe.dim_params");
      bool joined = params && !params.empty() && isa<StringAttr>(params[0]) &&
                    cast<StringAttr>(params[0]).getValue() == symbol;
      State s = get(value);
      if (s.kind == State::Rows && s.axis == 0 && joined)
        continue;
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
};

/// A location as text: the ONNX node the importer named in it and the
/// file ("node 'attn' (MatMul) in model.onnx"), else MLIR's own form.
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

struct AnalyzeRowIndependencePass
    : public impl::MoeAnalyzeRowIndependenceBase<AnalyzeRowIndependencePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main)
      return;
    Analysis analysis(main);
    Builder b(module.getContext());
    SmallVector<NamedAttribute> fields;
    if (succeeded(analysis.run())) {
      auto inputs = llvm::map_to_vector(
          analysis.splitInputs, [&](const std::string &name) {
            return Attribute(b.getStringAttr(name));
          });
      fields.push_back(b.getNamedAttr("axis", b.getI64IntegerAttr(0)));
      fields.push_back(b.getNamedAttr("inputs", b.getArrayAttr(inputs)));
      fields.push_back(
          b.getNamedAttr("symbol", b.getStringAttr(analysis.symbol)));
    } else {
      if (Operation *op = analysis.culprit) {
        fields.push_back(b.getNamedAttr(
            "op", b.getStringAttr(op->getName().getStringRef())));
        fields.push_back(b.getNamedAttr(
            "loc", b.getStringAttr(formatLocation(op->getLoc()))));
      }
      fields.push_back(
          b.getNamedAttr("reason", b.getStringAttr(analysis.reason)));
    }
    module->setAttr("moe.row_split", b.getDictionaryAttr(fields));
  }
};

} // namespace
} // namespace moec
