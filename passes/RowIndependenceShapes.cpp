//===- RowIndependenceShapes.cpp - Shape and layout transfer functions ----===//
//
// Where the shape and layout ops (Shape, Gather, Concat, Slice, the
// squeezes, Transpose, Reshape, Flatten, Expand, ConstantOfShape, Tile) put
// the rows of a value, and the element-by-element tracking of a device's row
// count in shape vectors (RowIndependence.h).
//
//===----------------------------------------------------------------------===//

#include "passes/RowIndependence.h"

#include "dialects/moe/GraphOpsSupport.h"

#include "llvm/ADT/TypeSwitch.h"

namespace moec::rows {

LogicalResult Analysis::visitShape(moe::ShapeOp op) {
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

LogicalResult Analysis::pickLocal(Operation *op, Value input,
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

LogicalResult Analysis::visitGather(moe::GatherOp op) {
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

LogicalResult Analysis::visitConcat(moe::ConcatOp op) {
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

LogicalResult Analysis::visitSlice(moe::SliceOp op) {
  for (Value v : op->getOperands().drop_front())
    if (!get(v).isFree())
      return kill(op, "slices at positions given by a device's row count");
  State data = get(op.getData());
  int64_t rank = getRank(op.getData());
  std::optional<SmallVector<int64_t>> starts =
      moe::getConstantInts(op.getStarts());
  std::optional<SmallVector<int64_t>> ends = moe::getConstantInts(op.getEnds());
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

LogicalResult Analysis::visitSqueeze(Operation *op) {
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
    axis -= llvm::count_if(normalized, [&](int64_t a) { return a < in.axis; });
  } else {
    for (int64_t a : normalized)
      if (a <= axis)
        ++axis;
  }
  states[op->getResult(0)] = State::rows(axis, in.span);
  return success();
}

LogicalResult Analysis::visitTranspose(moe::TransposeOp op) {
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
  states[op.getResult()] = State::rows(it - perm.begin(), in.span);
  return success();
}

LogicalResult Analysis::visitReshape(moe::ReshapeOp op) {
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
  // A copied row count keeps one index per row; else unknown.
  int64_t span = data.span == 1 ? 1 : 0;
  if (rowsAt < 0) {
    // -1 takes the rows: each output slab along j must lie within one
    // row, so its size must divide a static tail of the input's row, or
    // the whole row (its span along the axis times a static tail).
    std::optional<int64_t> slab = getStaticProduct(out.drop_front(j + 1));
    int64_t tail = 1;
    bool wholeTail = true;
    for (int64_t d : llvm::reverse(in.drop_front(data.axis + 1))) {
      if (ShapedType::isDynamic(d)) {
        wholeTail = false;
        break;
      }
      tail *= d;
    }
    int64_t row = wholeTail && data.span > 0 ? data.span * tail : tail;
    if (!slab || *slab == 0 || row % *slab != 0)
      return kill(op, "reshapes across " + rowsText(op.getData()) +
                          " (a slab of the result may span two rows)");
    span = wholeTail && data.span > 0 ? row / *slab : 0;
  }
  states[op.getResult()] = State::rows(j, span);
  return success();
}

LogicalResult Analysis::visitFlatten(moe::FlattenOp op) {
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

LogicalResult Analysis::visitSized(Operation *op, Value shape, Value input) {
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

LogicalResult Analysis::visitExpand(moe::ExpandOp op) {
  return visitSized(op, op.getShape(), op.getInput());
}

LogicalResult Analysis::visitTile(moe::TileOp op) {
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

} // namespace moec::rows
