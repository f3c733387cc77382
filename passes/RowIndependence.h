//===- RowIndependence.h - The row-independence dataflow -----*- C++ -*-===//
//
// The analysis behind moe-analyze-row-independence
// (AnalyzeRowIndependence.cpp): may the dense part of @main run on a share of
// the rows of dim 0 of its inputs? The transfer functions of the shape and
// layout ops are in RowIndependenceShapes.cpp, token batching's own in
// RowIndependenceTokens.cpp, the others in RowIndependence.cpp.
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
//           which are only read by that layer;
//   Positions (token batching only) computed from a row count alone and
//           too large to track (a Range over it, a mask built from that):
//           only an attention's mask may read it, and only a causal mask.
//   Carried (token batching only) the state a causal_conv or
//           gated_delta_rule leaves after the rows: only the graph's
//           outputs may take it (a state pair's present).
// Anything else kills the proof.
//
// Token batching (moe-analyze-batch-rows) asks the same question of a
// generation graph's token axis, with two kinds of ops allowed to mix rows:
// an attention whose keys and values are the rows themselves under a
// causal mask, which the runtime replaces by each row's attention over its
// own sequence's cache; and the recurrences that carry a state from a zero
// start (moe.causal_conv, moe.gated_delta_rule), which the runtime runs
// per sequence from that sequence's state.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_ROWINDEPENDENCE_H
#define MOEC_PASSES_ROWINDEPENDENCE_H

#include "dialects/moe/MoeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <optional>
#include <string>

namespace moec::rows {

using namespace mlir;

/// The longest integer vector whose elements are tracked one by one.
constexpr int64_t kMaxTracked = 64;

struct State {
  enum Kind { Free, Local, Rows, Layer, Positions, Carried } kind = Free;
  /// Rows: the axis that carries the rows.
  int64_t axis = -1;
  /// Rows: how many consecutive indices of `axis` one row spans (a reshape
  /// that splits each row along it, [n, 64] -> [n * 4, 16]), or 0 when
  /// unknown. Ops that keep the axis's indexing keep it.
  int64_t span = 1;
  /// Local: which flat elements are a device's row count.
  SmallVector<bool> local;

  static State free() { return State(); }
  static State rows(int64_t axis, int64_t span = 1) {
    State s;
    s.kind = Rows;
    s.axis = axis;
    s.span = span;
    return s;
  }
  static State layer() {
    State s;
    s.kind = Layer;
    return s;
  }
  static State positions() {
    State s;
    s.kind = Positions;
    return s;
  }
  static State carried() {
    State s;
    s.kind = Carried;
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
inline std::optional<int64_t> getTrackedCount(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape() || type.getNumElements() > kMaxTracked)
    return std::nullopt;
  return type.getNumElements();
}

inline int64_t getRank(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type ? type.getRank() : -1;
}

inline ArrayRef<int64_t> getShape(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// The product of `dims`, or nullopt when one is dynamic.
inline std::optional<int64_t> getStaticProduct(ArrayRef<int64_t> dims) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (ShapedType::isDynamic(d))
      return std::nullopt;
    product *= d;
  }
  return product;
}

/// What the rows are. By default, expert parallelism's: dimension 0 of
/// every input whose dimension 0 is dynamic.
struct Config {
  /// Token batching: the inputs that carry one token per row along `axis`
  /// (a generation graph's ids and positions); every other input is
  /// refused. Attention may then mix rows as a causal attention over them.
  SmallVector<std::string> rowInputs;
  int64_t axis = 0;
  bool batchTokens() const { return !rowInputs.empty(); }
};

/// Whether `mask` is the additive causal mask of a [.., queries, keys]
/// attention whose queries and keys are the same rows from position 0:
/// `where(keys <= queries, 0, m)` (or `queries >= keys`) with m at most
/// -1e30, keys and queries each `range(0, n, 1)` placed on the last and the
/// second to last axis, possibly expanded. Returns the window W of a
/// sliding-window mask (the condition and-ed with `keys > queries - W` for
/// a constant W > 0; key j visible to query i when i - W < j <= i), 0 for
/// a plain causal mask, nullopt for any other mask.
std::optional<int64_t> getCausalWindow(Value mask);

/// A location as text: the ONNX node the importer named in it and the
/// file ("node 'attn' (MatMul) in model.onnx"), else MLIR's own form.
std::string formatLocation(Location loc);

/// The dataflow over the ops of @main, in program order.
class Analysis {
public:
  explicit Analysis(func::FuncOp func, Config config = {})
      : func(func), config(std::move(config)) {}

  /// Runs over @main: success when the split rows are provably independent;
  /// else `culprit` and `reason` say why not.
  LogicalResult run();

  /// The inputs split over the devices, and the symbol of their dim 0.
  SmallVector<std::string> splitInputs;
  std::string symbol;
  /// The outputs that carry the split rows on dimension 0 under `symbol`:
  /// the only ones the runtime may join over the devices (every other
  /// output is the same on every device, and device 0's is returned).
  SmallVector<std::string> joinedOutputs;
  /// Token batching: the window of each attention in program order (0: no
  /// window), which the runtime's attention over the KV pool applies.
  SmallVector<int64_t> attentionWindows;
  /// Token batching: the outputs that are a recurrence's state after the
  /// rows (the runtime keeps one per sequence).
  SmallVector<std::string> stateOutputs;
  /// Why the proof failed: the op (null for a signature problem) and what
  /// it does to the rows.
  Operation *culprit = nullptr;
  std::string reason;

private:
  func::FuncOp func;
  Config config;
  llvm::DenseMap<Value, State> states;

  /// Token batching: the seeds are config.rowInputs.
  LogicalResult seedRowInputs();
  /// Token batching: an op reading Positions values (nullopt: none).
  std::optional<LogicalResult> visitPositions(Operation *op);
  /// Whether every operand of `op` is computed from row counts alone.
  bool readsSizesOnly(Operation *op) const;
  LogicalResult visitBatchAttention(moe::AttentionOp op);
  /// A recurrence over the rows along `axis` of `rows` from a zero `state`
  /// (moe.causal_conv, moe.gated_delta_rule): its output keeps the rows, its
  /// new state is Carried.
  LogicalResult visitBatchState(Operation *op, ValueRange rows, int64_t axis,
                                Value state, ValueRange params);
  LogicalResult visitBatchReturn(func::ReturnOp op);

  State get(Value value) const { return states.lookup(value); }

  LogicalResult kill(Operation *op, const Twine &why);

  std::string argName(unsigned index);
  /// The ONNX name of result `index` ("#index" when unnamed).
  std::string resultName(unsigned index);

  /// The ONNX dimension name of dim 0 of argument or result `index`, as the
  /// plan emitter names the symbol ("NAME.0" when unnamed).
  std::string dimSymbol(ArrayAttr params, const std::string &name);

  /// Every input whose dimension 0 is dynamic is split by the runtime; they
  /// must share one symbol (the rows of one batch).
  LogicalResult seedInputs();

  void setAll(Operation *op, State state);

  /// The description of the rows for messages.
  std::string rowsText(Value value);

  LogicalResult visit(Operation *op);

  LogicalResult setLocal(Operation *op, SmallVector<bool> mask);

  /// The Local mask of `value` (all false for Free), or nullopt when it
  /// cannot be tracked element by element.
  std::optional<SmallVector<bool>> getMask(Value value);

  /// Broadcasting elementwise ops (and fused programs of them).
  LogicalResult visitElementwise(Operation *op, ValueRange inputs);

  LogicalResult visitShape(moe::ShapeOp op);

  /// Ops on Local vectors that select elements by constant indices (gather,
  /// slice): `picks` are the flat input elements of each result element.
  LogicalResult pickLocal(Operation *op, Value input,
                          std::optional<SmallVector<int64_t>> picks);

  LogicalResult visitGather(moe::GatherOp op);

  LogicalResult visitConcat(moe::ConcatOp op);

  LogicalResult visitSlice(moe::SliceOp op);

  LogicalResult visitSqueeze(Operation *op);

  LogicalResult visitTranspose(moe::TransposeOp op);

  /// Where a reshape's target puts the rows: the output axis `j` whose size
  /// is the rows' (a device's row count, or the -1 that absorbs it).
  LogicalResult visitReshape(moe::ReshapeOp op);

  LogicalResult visitFlatten(moe::FlattenOp op);

  /// Expand and constant_of_shape: a target shape whose only row count
  /// gives the result its rows (a replicated value broadcast to them).
  LogicalResult visitSized(Operation *op, Value shape, Value input);

  LogicalResult visitExpand(moe::ExpandOp op);

  LogicalResult visitTile(moe::TileOp op);

  /// An op that acts along `axis` of `input` (its other operands must be
  /// Free); `keep` says whether the axis stays in the results.
  LogicalResult visitAlongAxis(Operation *op, Value input, int64_t axis,
                               bool keep, StringRef what);

  /// Like visitAlongAxis for an op that keeps the shape and acts on no axis
  /// of the rows; `params` must be Free.
  LogicalResult visitKeep(Operation *op, Value input, ValueRange params);

  LogicalResult visitReduce(Operation *op);

  LogicalResult visitNorm(Operation *op);

  LogicalResult visitOneHot(moe::OneHotOp op);

  /// gather_elements / scatter_elements: every operand carries the rows on
  /// the same axis, and the op indexes along another.
  LogicalResult visitIndexed(Operation *op, ArrayRef<Value> operands,
                             int64_t axis, StringRef what);

  /// A batched matrix product: the rows survive as a batch axis, as A's
  /// M axis or as B's N axis; K (A's last axis, B's second to last) is
  /// contracted and kills them.
  LogicalResult visitMatMul(moe::MatMulOp op);

  LogicalResult visitGemm(moe::GemmOp op);

  LogicalResult visitRouter(moe::RouterOp op);

  /// A MoE layer: dispatch -> experts -> combine is a function of each token
  /// row alone (the exchanges of moe-insert-all-to-all keep it so).
  LogicalResult visitDispatch(moe::DispatchOp op);

  LogicalResult visitExperts(moe::ExpertsOp op);

  LogicalResult visitCombine(moe::CombineOp op);

  /// The runtime joins an output over the devices along dimension 0 when
  /// the ONNX graph names it with the split symbol, and takes device 0's
  /// otherwise: each output must be one or the other.
  LogicalResult visitReturn(func::ReturnOp op);
};

/// Appends why `analysis` failed to `fields`: the culprit op's name and
/// location (`op`, `loc`) when there is one, then `reason`.
void appendFailure(Builder &b, const Analysis &analysis,
                   SmallVectorImpl<NamedAttribute> &fields);

} // namespace moec::rows

#endif // MOEC_PASSES_ROWINDEPENDENCE_H
