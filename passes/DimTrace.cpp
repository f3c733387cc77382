//===- DimTrace.cpp - dimensions traced to where they were made -----------===//

#include "passes/DimTrace.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"
#include "passes/MatchSupport.h"
#include "passes/RoutingMatrix.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec;

int64_t moec::rankOf(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type ? type.getRank() : -1;
}

Value moec::stripReshapes(Value value) {
  while (auto reshape = value.getDefiningOp<moe::ReshapeOp>())
    value = reshape.getData();
  return value;
}

namespace {

/// The constant axes of `axes`, made non-negative for rank `rank`, or
/// nullopt.
std::optional<SmallVector<int64_t>> getAxes(Value axes, int64_t rank) {
  std::optional<SmallVector<int64_t>> values =
      axes ? moe::getConstantInts(axes) : std::nullopt;
  if (!values)
    return std::nullopt;
  for (int64_t &axis : *values) {
    axis = axis < 0 ? axis + rank : axis;
    if (axis < 0 || axis >= rank)
      return std::nullopt;
  }
  return values;
}

/// The dimension a shape-vector element denotes, traced.
std::optional<DimKey> traceEntry(const moe::ShapeEntry &entry, unsigned depth) {
  if (entry.isConstant())
    return DimKey{entry.constant, {}, -1};
  if (entry.isDim())
    return traceDim(entry.source, entry.dim, depth + 1);
  return std::nullopt;
}

/// Dimension `dim` of a broadcasting elementwise op of rank `rank`: the one
/// every operand that has it (not as a static 1) traces to.
std::optional<DimKey> traceBroadcast(ValueRange operands, int64_t rank,
                                     int64_t dim, unsigned depth) {
  std::optional<DimKey> result;
  for (Value operand : operands) {
    int64_t index = dim - (rank - rankOf(operand));
    if (rankOf(operand) < 0 || index < 0 || getShape(operand)[index] == 1)
      continue;
    DimKey key = traceDim(operand, index, depth + 1);
    if (result && !(*result == key))
      return std::nullopt;
    result = key;
  }
  return result;
}

/// Dimension `dim` of a reduction of `data` over the constant `axes`: the
/// input dimension it keeps.
std::optional<DimKey> traceReduced(Value data, Value axesValue,
                                   int64_t keepdims, int64_t dim,
                                   unsigned depth) {
  std::optional<SmallVector<int64_t>> axes =
      axesValue ? getAxes(axesValue, rankOf(data)) : std::nullopt;
  if (!axes)
    return std::nullopt;
  int64_t index = dim;
  if (keepdims == 0)
    for (int64_t axis = 0, seen = 0; axis < rankOf(data); ++axis) {
      if (llvm::is_contained(*axes, axis))
        continue;
      if (seen++ == dim) {
        index = axis;
        break;
      }
    }
  if (llvm::is_contained(*axes, index))
    return std::nullopt;
  return traceDim(data, index, depth + 1);
}

} // namespace

DimKey moec::traceDim(Value value, int64_t dim, unsigned depth) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || dim < 0 || dim >= type.getRank())
    return {};
  if (!type.isDynamicDim(dim))
    return {type.getDimSize(dim), {}, -1};
  DimKey self{std::nullopt, value, dim};
  Operation *def = value.getDefiningOp();
  if (!def || depth > 64)
    return self;
  int64_t rank = type.getRank();
  auto sameRank = [&](Value operand) -> std::optional<DimKey> {
    if (rankOf(operand) != rank)
      return std::nullopt;
    return traceDim(operand, dim, depth + 1);
  };
  std::optional<DimKey> traced =
      llvm::TypeSwitch<Operation *, std::optional<DimKey>>(def)
          .Case<moe::CastOp, moe::ReluOp, moe::GeluOp, moe::SigmoidOp,
                moe::TanhOp, moe::ExpOp, moe::NegOp, moe::NotOp, moe::SoftmaxOp,
                moe::ScatterElementsOp, moe::ScatterNDOp>(
              [&](Operation *op) { return sameRank(op->getOperand(0)); })
          .Case<moe::AddOp, moe::SubOp, moe::MulOp, moe::DivOp, moe::EqualOp,
                moe::GreaterOp, moe::LessOp, moe::AndOp, moe::OrOp>(
              [&](Operation *op) {
                return traceBroadcast(op->getOperands(), rank, dim, depth);
              })
          .Case([&](moe::MatMulOp op) -> std::optional<DimKey> {
            if (rankOf(op.getB()) != 2 || dim >= rank - 1)
              return std::nullopt;
            return sameRank(op.getA());
          })
          .Case([&](moe::GemmOp op) -> std::optional<DimKey> {
            if (dim != 0 || op.getTransA())
              return std::nullopt;
            return traceDim(op.getA(), 0, depth + 1);
          })
          .Case([&](moe::TopKOp op) -> std::optional<DimKey> {
            if (isAxis(op.getAxis(), dim, rank))
              return std::nullopt;
            return sameRank(op.getInput());
          })
          .Case([&](moe::ReduceSumOp op) {
            return traceReduced(op.getData(), op.getAxes(), op.getKeepdims(),
                                dim, depth);
          })
          .Case([&](moe::ReduceMaxOp op) {
            return traceReduced(op.getData(), op.getAxes(), op.getKeepdims(),
                                dim, depth);
          })
          .Case([&](moe::TransposeOp op) -> std::optional<DimKey> {
            SmallVector<int64_t> perm = op.getPermutation();
            if (static_cast<int64_t>(perm.size()) != rank)
              return std::nullopt;
            return traceDim(op.getData(), perm[dim], depth + 1);
          })
          .Case([&](moe::UnsqueezeOp op) -> std::optional<DimKey> {
            std::optional<SmallVector<int64_t>> axes =
                getAxes(op.getAxes(), rank);
            if (!axes || llvm::is_contained(*axes, dim))
              return std::nullopt;
            int64_t before =
                llvm::count_if(*axes, [&](int64_t axis) { return axis < dim; });
            return traceDim(op.getData(), dim - before, depth + 1);
          })
          .Case([&](moe::SqueezeOp op) -> std::optional<DimKey> {
            int64_t inputRank = rankOf(op.getData());
            std::optional<SmallVector<int64_t>> axes =
                getAxes(op.getAxes(), inputRank);
            if (!axes)
              return std::nullopt;
            for (int64_t axis = 0, seen = 0; axis < inputRank; ++axis)
              if (!llvm::is_contained(*axes, axis) && seen++ == dim)
                return traceDim(op.getData(), axis, depth + 1);
            return std::nullopt;
          })
          .Case([&](moe::ReshapeOp op) -> std::optional<DimKey> {
            auto entries = moe::getShapeEntries(op.getShape());
            if (!entries || static_cast<int64_t>(entries->size()) != rank)
              return std::nullopt;
            const moe::ShapeEntry &entry = (*entries)[dim];
            // The rows of `reshape(x, [-1, ...trailing sizes of x])` are the
            // product of x's leading dimensions, whichever op computes it.
            std::optional<SmallVector<int64_t>> target =
                moe::getConstantInts(op.getShape());
            ArrayRef<int64_t> data = getShape(op.getData());
            if (dim == 0 && target && !target->empty() && (*target)[0] == -1 &&
                data.size() >= target->size() &&
                data.take_back(target->size() - 1) ==
                    ArrayRef<int64_t>(*target).drop_front() &&
                llvm::all_of(ArrayRef<int64_t>(*target).drop_front(),
                             [](int64_t size) { return size > 0; }))
              return DimKey{std::nullopt, op.getData(), kFlatRows};
            if (entry.isConstant() && *entry.constant == 0 &&
                !op.getAllowzero())
              return sameRank(op.getData());
            if (entry.isConstant() && *entry.constant <= 0)
              return std::nullopt;
            return traceEntry(entry, depth);
          })
          .Case([&](moe::ExpandOp op) -> std::optional<DimKey> {
            auto entries = moe::getShapeEntries(op.getShape());
            if (!entries)
              return std::nullopt;
            int64_t index =
                dim - (rank - static_cast<int64_t>(entries->size()));
            std::optional<DimKey> target =
                index >= 0 ? traceEntry((*entries)[index], depth)
                           : std::nullopt;
            int64_t inputIndex = dim - (rank - rankOf(op.getInput()));
            if (inputIndex < 0 || getShape(op.getInput())[inputIndex] == 1)
              return target && target->constant != 1 ? target : std::nullopt;
            DimKey input = traceDim(op.getInput(), inputIndex, depth + 1);
            if (!target || target->constant == 1 || *target == input)
              return input;
            return std::nullopt;
          })
          .Case([&](moe::ConstantOfShapeOp op) -> std::optional<DimKey> {
            auto entries = moe::getShapeEntries(op.getInput());
            if (!entries || static_cast<int64_t>(entries->size()) != rank)
              return std::nullopt;
            return traceEntry((*entries)[dim], depth);
          })
          .Case([&](moe::GatherNDOp op) -> std::optional<DimKey> {
            if (op.getBatchDims() != 0 || dim >= rankOf(op.getIndices()) - 1)
              return std::nullopt;
            return traceDim(op.getIndices(), dim, depth + 1);
          })
          .Case([&](moe::GatherOp op) -> std::optional<DimKey> {
            int64_t dataRank = rankOf(op.getData());
            int64_t axis = static_cast<int64_t>(op.getAxis());
            axis = axis < 0 ? axis + dataRank : axis;
            int64_t indexRank = rankOf(op.getIndices());
            if (dim < axis)
              return traceDim(op.getData(), dim, depth + 1);
            if (dim >= axis + indexRank)
              return traceDim(op.getData(), dim - indexRank + 1, depth + 1);
            return traceDim(op.getIndices(), dim - axis, depth + 1);
          })
          .Case([&](moe::NonZeroOp op) -> std::optional<DimKey> {
            if (dim != 1)
              return std::nullopt;
            return DimKey{std::nullopt, stripReshapes(op.getX()), kTrueCount};
          })
          .Default([](Operation *) { return std::nullopt; });
  return traced && traced->isKnown() ? *traced : self;
}

bool moec::haveSameLeadingDims(Value a, Value b, int64_t count) {
  if (rankOf(a) < count || rankOf(b) < count)
    return false;
  for (int64_t i = 0; i < count; ++i) {
    DimKey lhs = traceDim(a, i), rhs = traceDim(b, i);
    if (!lhs.isKnown() || !(lhs == rhs))
      return false;
  }
  return true;
}

std::optional<DimKey> moec::traceShapeEntry(Value shape, int64_t index) {
  auto entries = moe::getShapeEntries(shape);
  if (!entries || index < 0 || index >= static_cast<int64_t>(entries->size()))
    return std::nullopt;
  return traceEntry((*entries)[index], 0);
}

bool moec::haveSameShape(Value a, Value b) {
  int64_t rank = rankOf(a);
  return rank >= 0 && rank == rankOf(b) && haveSameLeadingDims(a, b, rank);
}
