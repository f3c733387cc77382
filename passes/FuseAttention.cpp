//===- FuseAttention.cpp - softmax(Q K^T scale + mask) V to one op --------===//
//
// Exporters decompose scaled dot-product attention into
//
//   scores = mat_mul(Q', transpose(K', [0, 1, 3, 2]))
//   probs  = softmax(scores [* c | / c]... [+ mask], axis -1)
//   out    = mat_mul(probs, V')
//
// where scalar factors may sit on Q, on K (before or after the transpose) or
// on the scores, and K', V' may be `repeat_kv` copies of the key/value heads
// (grouped-query attention): reshape(expand(unsqueeze(x, 2), [b, kvh, rep, s,
// d]), [b, kvh * rep, s, d]). The pass peels the scalars into one `scale`,
// proves the repeat copies (every size of the expand and the reshape is shown
// equal to the size it must be, by following the graph's own shape
// arithmetic) and replaces the chain by one `moe.attention` whose key/value
// heads map to query heads by index. The mask stays whatever the graph
// computes; nothing is assumed about causality.
//
//===----------------------------------------------------------------------===//

#include "passes/MatchSupport.h"
#include "passes/Passes.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace moec {
#define GEN_PASS_DEF_MOEFUSEATTENTION
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

//===----------------------------------------------------------------------===//
// Symbolic sizes
//===----------------------------------------------------------------------===//

/// A size known statically (`root` and `symbol` null, `size` it), or as
/// `offset` plus dimension `size` of the value `root`, or plus the graph
/// input dimension named `symbol` (ONNX dim_params: inputs sharing a name
/// share one size, which the runtime checks): two equal keys are the same
/// size at run time.
struct SizeKey {
  Value root;
  StringAttr symbol;
  int64_t size = 0;
  int64_t offset = 0;
  static SizeKey known(int64_t size) { return {Value(), StringAttr(), size}; }
  static SizeKey of(Value value, int64_t dim) {
    return {value, StringAttr(), dim};
  }
  bool isStatic() const { return !root && !symbol; }
  /// The key of this size plus `n`.
  SizeKey plus(int64_t n) const {
    SizeKey key = *this;
    (isStatic() ? key.size : key.offset) += n;
    return key;
  }
  bool operator==(const SizeKey &other) const {
    return root == other.root && symbol == other.symbol && size == other.size &&
           offset == other.offset;
  }
};

/// Longest chain of shape ops followed back for one size: a deep model's
/// last layer reaches its sequence length through every layer before it
/// (residual adds, norms, projections, the MoE layers and attention). A
/// chain cut short gives the value's own key, which is still its size, so
/// the proofs only miss, never err.
constexpr int kMaxDepth = 512;

SizeKey getDimKey(Value value, int64_t dim, int depth = 0);

/// Memoised getDimKey results of this thread's pass while it matches (a
/// residual add reaches the previous layer both directly and through the
/// layer, so the plain walk doubles with every layer). The pass clears it
/// before each rewrite: keys hold Values, which a rewrite may erase.
thread_local llvm::DenseMap<std::pair<Value, int64_t>, SizeKey> *dimKeyCache =
    nullptr;
SizeKey getScalarKey(Value scalar, int depth);

/// One entry of a 1-D shape vector: a constant, a scalar value, or a
/// dimension of a tensor (a `moe.shape` entry).
struct ShapeEntry {
  std::optional<int64_t> constant;
  Value scalar;
  std::optional<SizeKey> dim;
};

/// Entry `index` of the shape vector `shape` (a constant, or a concat of
/// constants and unsqueezed scalars).
std::optional<ShapeEntry> getShapeEntry(Value shape, int64_t index) {
  if (std::optional<SmallVector<int64_t>> values =
          moe::getConstantInts(shape)) {
    if (index < 0 || index >= static_cast<int64_t>(values->size()))
      return std::nullopt;
    return ShapeEntry{(*values)[index], Value()};
  }
  if (auto concat = shape.getDefiningOp<moe::ConcatOp>()) {
    for (Value piece : concat.getInputs()) {
      auto type = cast<RankedTensorType>(piece.getType());
      if (type.getRank() != 1 || type.isDynamicDim(0))
        return std::nullopt;
      if (index < type.getDimSize(0))
        return getShapeEntry(piece, index);
      index -= type.getDimSize(0);
    }
    return std::nullopt;
  }
  if (auto slice = shape.getDefiningOp<moe::SliceOp>()) {
    // v[start:end] of a static 1-D vector v, step 1: entry i is v's
    // start + i (negative and out-of-range bounds as ONNX clamps them).
    auto vector = cast<RankedTensorType>(slice.getData().getType());
    std::optional<SmallVector<int64_t>> starts =
        moe::getConstantInts(slice.getStarts());
    std::optional<SmallVector<int64_t>> ends =
        moe::getConstantInts(slice.getEnds());
    std::optional<SmallVector<int64_t>> steps =
        slice.getSteps() ? moe::getConstantInts(slice.getSteps())
                         : SmallVector<int64_t>{1};
    std::optional<SmallVector<int64_t>> axes =
        slice.getAxes() ? moe::getConstantInts(slice.getAxes())
                        : SmallVector<int64_t>{0};
    if (vector.getRank() != 1 || vector.isDynamicDim(0) || !starts || !ends ||
        !steps || !axes || starts->size() != 1 || ends->size() != 1 ||
        steps->size() != 1 || axes->size() != 1 || (*steps)[0] != 1 ||
        ((*axes)[0] != 0 && (*axes)[0] != -1))
      return std::nullopt;
    int64_t size = vector.getDimSize(0);
    auto clampBound = [&](int64_t bound) {
      return std::clamp<int64_t>(bound < 0 ? bound + size : bound, 0, size);
    };
    int64_t start = clampBound((*starts)[0]), end = clampBound((*ends)[0]);
    if (index < 0 || start + index >= end)
      return std::nullopt;
    return getShapeEntry(slice.getData(), start + index);
  }
  auto type = cast<RankedTensorType>(shape.getType());
  if (isa_and_nonnull<moe::UnsqueezeOp, moe::ReshapeOp>(shape.getDefiningOp()))
    if (Value data = shape.getDefiningOp()->getOperand(0);
        index == 0 && type.getNumElements() == 1 &&
        cast<RankedTensorType>(data.getType()).getRank() == 0)
      return ShapeEntry{std::nullopt, data, std::nullopt};
  if (auto shapeOp = shape.getDefiningOp<moe::ShapeOp>()) {
    // shape(x)[start:end] of a ranked x: entry i is dimension start + i.
    int64_t rank = shapeOp.getData().getType().getRank();
    int64_t start = shapeOp.getStartAttr().getInt();
    if (start < 0)
      start += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    if (type.getRank() == 1 && !type.isDynamicDim(0) && index >= 0 &&
        index < type.getDimSize(0) && start + index < rank)
      return ShapeEntry{std::nullopt, Value(),
                        getDimKey(shapeOp.getData(), start + index)};
  }
  return std::nullopt;
}

/// The size a non-negative scalar (a `moe.dim`, a constant, or one of them
/// reshaped) holds.
SizeKey getScalarKey(Value scalar, int depth) {
  if (std::optional<int64_t> constant = moe::getConstantInt(scalar))
    return SizeKey::known(*constant);
  if (depth < kMaxDepth) {
    if (auto dim = scalar.getDefiningOp<moe::DimOp>())
      return getDimKey(dim.getInput(), dim.getIndexAttr().getInt(), depth + 1);
    Operation *op = scalar.getDefiningOp();
    if (isa_and_nonnull<moe::SqueezeOp, moe::UnsqueezeOp, moe::ReshapeOp>(op) &&
        cast<RankedTensorType>(op->getOperand(0).getType()).getNumElements() ==
            1) {
      // A one-element shape vector (moe.shape) squeezed to its scalar.
      if (std::optional<ShapeEntry> entry = getShapeEntry(op->getOperand(0), 0);
          entry && entry->dim)
        return *entry->dim;
      return getScalarKey(op->getOperand(0), depth + 1);
    }
    // past + n: the size of a concatenation along the sequence.
    if (auto add = dyn_cast_or_null<moe::AddOp>(op))
      for (auto [x, c] : {std::pair(add.getLhs(), add.getRhs()),
                          std::pair(add.getRhs(), add.getLhs())})
        if (std::optional<int64_t> constant = moe::getConstantInt(c))
          if (cast<RankedTensorType>(add.getType()).getNumElements() == 1)
            return getScalarKey(x, depth + 1).plus(*constant);
  }
  return SizeKey::of(scalar, -1);
}

/// The size of a broadcast result's dimension from its operands' keys
/// (`std::nullopt`: the operand lacks the dimension).
std::optional<SizeKey> broadcastKeys(std::optional<SizeKey> a,
                                     std::optional<SizeKey> b) {
  auto isOne = [](std::optional<SizeKey> k) {
    return !k || (k->isStatic() && k->size == 1);
  };
  if (isOne(a))
    return b ? b : a;
  if (isOne(b) || *a == *b)
    return a;
  return std::nullopt;
}

/// The key of dimension `dim` of `value`, aligned from the right against a
/// result of rank `rank` (numpy broadcasting); nullopt when it has none.
std::optional<SizeKey> getAlignedKey(Value value, int64_t dim, int64_t rank,
                                     int depth) {
  int64_t own = cast<RankedTensorType>(value.getType()).getRank();
  int64_t d = dim - (rank - own);
  if (d < 0)
    return std::nullopt;
  return getDimKey(value, d, depth + 1);
}

/// The size of the `-1` entry `dim` of a reshape whose other entries are
/// positive constants, when its input has one dynamic dimension j and the
/// static sizes on both sides have the same product: then it is dim j.
std::optional<SizeKey> getInferredDimKey(moe::ReshapeOp reshape, int64_t dim,
                                         int depth) {
  auto input = reshape.getData().getType();
  int64_t outRank = reshape.getType().getRank();
  int64_t product = 1;
  for (int64_t d = 0; d < outRank; ++d) {
    if (d == dim)
      continue;
    std::optional<ShapeEntry> entry = getShapeEntry(reshape.getShape(), d);
    if (!entry || !entry->constant || *entry->constant <= 0)
      return std::nullopt;
    product *= *entry->constant;
  }
  int64_t known = 1, dynamic = -1;
  for (int64_t d = 0; d < input.getRank(); ++d) {
    if (!input.isDynamicDim(d)) {
      known *= input.getDimSize(d);
    } else if (dynamic < 0) {
      dynamic = d;
    } else {
      return std::nullopt;
    }
  }
  if (dynamic < 0 || known != product)
    return std::nullopt;
  return getDimKey(reshape.getData(), dynamic, depth + 1);
}

/// The size of dimension `dim` of `value`, followed back through the shape
/// ops that carry it (transposes, reshapes to computed shapes, elementwise
/// broadcasting and mat_mul).
SizeKey computeDimKey(Value value, int64_t dim, int depth);

SizeKey getDimKey(Value value, int64_t dim, int depth) {
  if (!dimKeyCache)
    return computeDimKey(value, dim, depth);
  if (auto it = dimKeyCache->find({value, dim}); it != dimKeyCache->end())
    return it->second;
  SizeKey key = computeDimKey(value, dim, depth);
  dimKeyCache->try_emplace({value, dim}, key);
  return key;
}

SizeKey computeDimKey(Value value, int64_t dim, int depth) {
  auto type = cast<RankedTensorType>(value.getType());
  if (dim < 0 || dim >= type.getRank())
    return SizeKey::of(value, dim);
  if (!type.isDynamicDim(dim))
    return SizeKey::known(type.getDimSize(dim));
  SizeKey opaque = SizeKey::of(value, dim);
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    if (auto names = func ? func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(),
                                                             "moe.dim_params")
                          : ArrayAttr())
      if (dim < static_cast<int64_t>(names.size()))
        if (auto name = dyn_cast<StringAttr>(names[dim]);
            name && !name.getValue().empty())
          return {Value(), name, 0};
    return opaque;
  }
  Operation *op = value.getDefiningOp();
  if (!op || depth >= kMaxDepth)
    return opaque;
  int64_t rank = type.getRank();
  if (auto transpose = dyn_cast<moe::TransposeOp>(op)) {
    if (auto perm = transpose.getPermAttr()) {
      if (static_cast<int64_t>(perm.size()) == rank)
        return getDimKey(transpose.getData(), perm[dim], depth + 1);
      return opaque;
    }
    return getDimKey(transpose.getData(), rank - 1 - dim, depth + 1);
  }
  if (auto reshape = dyn_cast<moe::ReshapeOp>(op)) {
    std::optional<ShapeEntry> entry = getShapeEntry(reshape.getShape(), dim);
    if (!entry)
      return opaque;
    if (entry->dim)
      return *entry->dim;
    if (entry->scalar)
      return getScalarKey(entry->scalar, depth + 1);
    if (*entry->constant > 0)
      return SizeKey::known(*entry->constant);
    if (*entry->constant == 0 && reshape.getAllowzeroAttr().getInt() == 0 &&
        dim < reshape.getData().getType().getRank())
      return getDimKey(reshape.getData(), dim, depth + 1);
    if (*entry->constant == -1)
      return getInferredDimKey(reshape, dim, depth).value_or(opaque);
    return opaque;
  }
  if (auto unsqueeze = dyn_cast<moe::UnsqueezeOp>(op)) {
    std::optional<SmallVector<int64_t>> axes =
        moe::getConstantInts(unsqueeze.getAxes());
    if (!axes)
      return opaque;
    int64_t inserted = 0;
    for (int64_t axis : *axes) {
      axis = axis < 0 ? axis + rank : axis;
      if (axis == dim)
        return SizeKey::known(1);
      inserted += axis < dim;
    }
    return getDimKey(unsqueeze.getData(), dim - inserted, depth + 1);
  }
  if (auto gather = dyn_cast<moe::GatherOp>(op)) {
    int64_t dataRank = gather.getData().getType().getRank();
    int64_t indexRank = gather.getIndices().getType().getRank();
    int64_t axis = gather.getAxisAttr().getInt();
    axis = axis < 0 ? axis + dataRank : axis;
    if (dim < axis)
      return getDimKey(gather.getData(), dim, depth + 1);
    if (dim < axis + indexRank)
      return getDimKey(gather.getIndices(), dim - axis, depth + 1);
    return getDimKey(gather.getData(), dim - indexRank + 1, depth + 1);
  }
  if (isa<moe::ReduceMeanOp, moe::ReduceSumOp, moe::ReduceMaxOp>(op)) {
    // keepdims: a dimension outside the axes keeps its size.
    auto keepdims = op->getAttrOfType<IntegerAttr>("keepdims");
    if ((keepdims && keepdims.getInt() == 0) || op->getNumOperands() != 2)
      return opaque;
    std::optional<SmallVector<int64_t>> axes =
        moe::getConstantInts(op->getOperand(1));
    if (!axes || axes->empty())
      return opaque;
    for (int64_t axis : *axes)
      if ((axis < 0 ? axis + rank : axis) == dim)
        return opaque;
    return getDimKey(op->getOperand(0), dim, depth + 1);
  }
  if (auto slice = dyn_cast<moe::SliceOp>(op)) {
    // Dimensions outside the sliced axes keep their size.
    std::optional<SmallVector<int64_t>> axes =
        slice.getAxes() ? moe::getConstantInts(slice.getAxes()) : std::nullopt;
    if (!axes)
      return opaque;
    for (int64_t axis : *axes)
      if ((axis < 0 ? axis + rank : axis) == dim)
        return opaque;
    return getDimKey(slice.getData(), dim, depth + 1);
  }
  // Ops whose first result has their first operand's shape (unary math,
  // normalisations, clip), as their ODS definitions say.
  if (op->hasTrait<moe::OpTrait::SameShapeAsFirst>() &&
      value == op->getResult(0))
    return getDimKey(op->getOperand(0), dim, depth + 1);
  if (auto range = dyn_cast<moe::RangeOp>(op)) {
    // range(0, n, 1) of a size n has n elements.
    std::optional<int64_t> start = moe::getConstantInt(range.getStart());
    std::optional<int64_t> delta = moe::getConstantInt(range.getDelta());
    if (!start || *start != 0 || !delta || *delta != 1)
      return opaque;
    SizeKey limit = getScalarKey(range.getLimit(), depth + 1);
    if (limit.offset < 0 ||
        (!limit.isStatic() && !limit.symbol && limit.root == range.getLimit()))
      return opaque;
    return limit;
  }
  if (op->hasTrait<moe::OpTrait::Elementwise>()) {
    std::optional<SizeKey> key =
        getAlignedKey(op->getOperand(0), dim, rank, depth);
    for (Value operand : op->getOperands().drop_front()) {
      key = broadcastKeys(key, getAlignedKey(operand, dim, rank, depth));
      if (!key)
        return opaque;
    }
    return key ? *key : opaque;
  }
  if (auto concat = dyn_cast<moe::ConcatOp>(op)) {
    int64_t axis = concat.getAxisAttr().getInt();
    if (axis < 0)
      axis += rank;
    if (axis != dim)
      return getDimKey(concat.getInputs()[0], dim, depth + 1);
    // The sum of the pieces' sizes: all static but at most one.
    std::optional<SizeKey> sum = SizeKey::known(0);
    int64_t known = 0;
    for (Value piece : concat.getInputs()) {
      SizeKey key = getDimKey(piece, dim, depth + 1);
      if (key.isStatic()) {
        known += key.size;
      } else if (sum->isStatic()) {
        sum = key;
      } else {
        return opaque;
      }
    }
    return sum->plus(known);
  }
  // The MoE ops keep the tokens' rows: a combine has the router weights'
  // rows and the expert outputs' columns, a router's results the logits'
  // leading dimensions, a shared expert its tokens' shape.
  if (auto combine = dyn_cast<moe::CombineOp>(op))
    return dim == 0 ? getDimKey(combine.getWeights(), 0, depth + 1)
                    : getDimKey(combine.getExpertOutputs(), dim, depth + 1);
  if (auto router = dyn_cast<moe::RouterOp>(op))
    return dim < rank - 1 ? getDimKey(router.getLogits(), dim, depth + 1)
                          : opaque;
  if (auto shared = dyn_cast<moe::SharedExpertOp>(op))
    return getDimKey(shared.getTokens(), dim, depth + 1);
  // An earlier layer's fused attention: the query's shape, the value's
  // head size.
  if (auto attention = dyn_cast<moe::AttentionOp>(op))
    return dim < rank - 1 ? getDimKey(attention.getQuery(), dim, depth + 1)
                          : getDimKey(attention.getValue(), dim, depth + 1);
  if (auto gemm = dyn_cast<moe::GemmOp>(op)) {
    // [M, N] from op(a) [M, K] and op(b) [K, N].
    if (dim == 0)
      return getDimKey(gemm.getA(), gemm.getTransA() ? 1 : 0, depth + 1);
    return getDimKey(gemm.getB(), gemm.getTransB() ? 0 : 1, depth + 1);
  }
  if (auto matmul = dyn_cast<moe::MatMulOp>(op)) {
    Value a = matmul.getA(), b = matmul.getB();
    int64_t rankA = cast<RankedTensorType>(a.getType()).getRank();
    int64_t rankB = cast<RankedTensorType>(b.getType()).getRank();
    if (rankA < 2 || rankB < 2)
      return opaque;
    if (dim == rank - 1)
      return getDimKey(b, rankB - 1, depth + 1);
    if (dim == rank - 2)
      return getDimKey(a, rankA - 2, depth + 1);
    // Batch dimensions broadcast; the matrix dimensions do not take part.
    auto batchKey = [&](Value v, int64_t r) -> std::optional<SizeKey> {
      int64_t d = dim - (rank - r);
      if (d < 0)
        return std::nullopt;
      return getDimKey(v, d, depth + 1);
    };
    std::optional<SizeKey> key =
        broadcastKeys(batchKey(a, rankA), batchKey(b, rankB));
    return key ? *key : opaque;
  }
  return opaque;
}

/// Whether the shape entry holds the size `key`.
bool entryIs(const ShapeEntry &entry, SizeKey key) {
  if (entry.dim)
    return *entry.dim == key;
  if (entry.constant)
    return key.isStatic() && *entry.constant == key.size;
  return getScalarKey(entry.scalar, 0) == key;
}

/// Whether the shape entry holds `key * factor` (a static product, or a
/// mul of a scalar of that size by the constant).
bool entryIsProduct(const ShapeEntry &entry, SizeKey key, int64_t factor) {
  if (entry.dim)
    return factor == 1 && *entry.dim == key;
  if (entry.constant)
    return key.isStatic() && *entry.constant == key.size * factor;
  if (factor == 1 && getScalarKey(entry.scalar, 0) == key)
    return true;
  auto mul = entry.scalar.getDefiningOp<moe::MulOp>();
  if (!mul)
    return false;
  for (auto [x, c] : {std::pair(mul.getLhs(), mul.getRhs()),
                      std::pair(mul.getRhs(), mul.getLhs())})
    if (std::optional<int64_t> constant = moe::getConstantInt(c))
      if (*constant == factor && getScalarKey(x, 0) == key)
        return true;
  return false;
}

//===----------------------------------------------------------------------===//
// The pattern
//===----------------------------------------------------------------------===//

bool isF32Rank4(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.getRank() == 4 && type.getElementType().isF32();
}

/// A matched attention: its operands, the product of its scalar factors and
/// the ops it replaces (erased when nothing else reads them).
struct Attention {
  Value query, key, value, mask;
  double scale = 1.0;
  moe::MatMulOp output;
  SmallVector<Operation *> replaced;
};

/// Follows single-use multiplications and divisions of `value` by scalar
/// constants (whose result has `value`'s type, so nothing broadcasts) back to
/// the unscaled value, multiplying their factors into `scale`.
Value peelScalars(Value value, Attention &attention) {
  while (Operation *op = value.getDefiningOp()) {
    if (!op->hasOneUse() || !isa<moe::MulOp, moe::DivOp>(op))
      break;
    Value lhs = op->getOperand(0), rhs = op->getOperand(1);
    std::optional<double> factor;
    Value other;
    if ((factor = getScalarFloat(rhs))) {
      other = lhs;
    } else if (isa<moe::MulOp>(op) && (factor = getScalarFloat(lhs))) {
      other = rhs;
    } else {
      break;
    }
    if (other.getType() != op->getResult(0).getType())
      break;
    if (isa<moe::DivOp>(op)) {
      if (*factor == 0)
        break;
      attention.scale /= *factor;
    } else {
      attention.scale *= *factor;
    }
    attention.replaced.push_back(op);
    value = other;
  }
  return value;
}

/// The key/value heads `x` [b, kvh, s, d] that `value` copies `rep` times
/// each (repeat_kv: head h of the result is head h / rep of x), when every
/// size of the copy is provably the one repeat_kv needs.
std::optional<std::pair<Value, int64_t>> matchRepeatKv(Value value,
                                                       Attention &attention) {
  auto reshape = value.getDefiningOp<moe::ReshapeOp>();
  if (!reshape)
    return std::nullopt;
  auto expand = reshape.getData().getDefiningOp<moe::ExpandOp>();
  if (!expand)
    return std::nullopt;
  auto unsqueeze = expand.getInput().getDefiningOp<moe::UnsqueezeOp>();
  if (!unsqueeze)
    return std::nullopt;
  Value x = unsqueeze.getData();
  std::optional<SmallVector<int64_t>> axes =
      moe::getConstantInts(unsqueeze.getAxes());
  if (!isF32Rank4(x) || !axes || axes->size() != 1 ||
      ((*axes)[0] != 2 && (*axes)[0] != -3))
    return std::nullopt;
  // expand to [b, kvh, rep, s, d]: every size but rep is 1 (kept) or x's.
  std::optional<ShapeEntry> repEntry = getShapeEntry(expand.getShape(), 2);
  if (!repEntry || !repEntry->constant || *repEntry->constant < 1)
    return std::nullopt;
  int64_t rep = *repEntry->constant;
  SizeKey xDims[4];
  for (int d = 0; d < 4; ++d)
    xDims[d] = getDimKey(x, d);
  for (auto [entryIndex, d] :
       {std::pair(0, 0), std::pair(1, 1), std::pair(3, 2), std::pair(4, 3)}) {
    std::optional<ShapeEntry> entry =
        getShapeEntry(expand.getShape(), entryIndex);
    if (!entry ||
        !(entryIs(*entry, SizeKey::known(1)) || entryIs(*entry, xDims[d])))
      return std::nullopt;
  }
  // reshape to [b, kvh * rep, s, d]: with b, kvh * rep and d proven, the
  // element count leaves s for the remaining entry.
  std::optional<ShapeEntry> batch = getShapeEntry(reshape.getShape(), 0);
  std::optional<ShapeEntry> heads = getShapeEntry(reshape.getShape(), 1);
  std::optional<ShapeEntry> head = getShapeEntry(reshape.getShape(), 3);
  if (!batch || !heads || !head || !getShapeEntry(reshape.getShape(), 2) ||
      getShapeEntry(reshape.getShape(), 4))
    return std::nullopt;
  bool keepsBatch =
      entryIs(*batch, xDims[0]) || (batch->constant && *batch->constant == 0 &&
                                    reshape.getAllowzeroAttr().getInt() == 0);
  if (!keepsBatch || !entryIsProduct(*heads, xDims[1], rep) ||
      !entryIs(*head, xDims[3]))
    return std::nullopt;
  attention.replaced.append({reshape, expand, unsqueeze});
  return std::pair(x, rep);
}

/// K [1, h, s, d] when `keyT` is its transpose written around a rank-3
/// transpose, as vision encoders export it with their batch of one
/// dropped:
///
///   reshape(transpose(reshape(K, [h, s, d]), [0, 2, 1]), [1, h, d, s])
///
/// Each size is proven (static, or followed back to K's own), so that both
/// reshapes only drop and restore the unit batch: the result is then
/// transpose(K, [0, 1, 3, 2]) element for element. The three ops go to
/// `attention.replaced`.
Value matchUnbatchedKeyTranspose(Value keyT, Attention &attention) {
  auto outer = keyT.getDefiningOp<moe::ReshapeOp>();
  auto transpose =
      outer ? outer.getData().getDefiningOp<moe::TransposeOp>() : nullptr;
  if (!transpose || !transpose.getPermAttr() ||
      transpose.getPermAttr().asArrayRef() != ArrayRef<int64_t>{0, 2, 1})
    return Value();
  auto inner = transpose.getData().getDefiningOp<moe::ReshapeOp>();
  if (!inner || !isF32Rank4(inner.getData()) || !isF32Rank4(keyT) ||
      inner.getType().getRank() != 3)
    return Value();
  Value key = inner.getData();
  SizeKey k[4];
  for (int d = 0; d < 4; ++d)
    k[d] = getDimKey(key, d);
  if (!(k[0] == SizeKey::known(1)))
    return Value();
  for (auto [value, dim, expected] :
       {std::tuple(Value(inner), 0, k[1]), std::tuple(Value(inner), 1, k[2]),
        std::tuple(Value(inner), 2, k[3]), std::tuple(keyT, 0, k[0]),
        std::tuple(keyT, 1, k[1]), std::tuple(keyT, 2, k[3]),
        std::tuple(keyT, 3, k[2])})
    if (!(getDimKey(value, dim) == expected))
      return Value();
  for (Operation *op :
       {outer.getOperation(), transpose.getOperation(), inner.getOperation()})
    if (!op->hasOneUse())
      return Value();
  attention.replaced.append({outer, transpose, inner});
  return key;
}

/// Matches the attention whose softmax is `softmax`.
std::optional<Attention> matchAttention(moe::SoftmaxOp softmax) {
  Attention attention;
  Value probs = softmax.getOutput();
  if (!isF32Rank4(probs) || !probs.hasOneUse())
    return std::nullopt;
  int64_t axis = softmax.getAxisAttr().getInt();
  if (axis != -1 && axis != 3)
    return std::nullopt;
  auto output = dyn_cast<moe::MatMulOp>(*probs.getUsers().begin());
  if (!output || output.getA() != probs || !isF32Rank4(output.getB()) ||
      !isF32Rank4(output.getOutput()))
    return std::nullopt;
  attention.output = output;
  attention.replaced.push_back(softmax);

  // softmax(scores [+ mask]): the mask is the operand that is not scores.
  Value logits = softmax.getInput();
  moe::MatMulOp scores;
  auto matchScores = [&](Value candidate, Attention &into) {
    Value unscaled = peelScalars(candidate, into);
    auto matmul = unscaled.getDefiningOp<moe::MatMulOp>();
    if (!matmul || !matmul->hasOneUse() || !isF32Rank4(matmul.getOutput()))
      return false;
    scores = matmul;
    return true;
  };
  auto add = logits.getDefiningOp<moe::AddOp>();
  if (add && add->hasOneUse() && add.getType() == logits.getType()) {
    for (auto [candidate, mask] : {std::pair(add.getLhs(), add.getRhs()),
                                   std::pair(add.getRhs(), add.getLhs())}) {
      Attention trial = attention;
      if (!isF32Rank4(mask) || !matchScores(candidate, trial))
        continue;
      attention = trial;
      attention.mask = mask;
      attention.replaced.push_back(add);
      break;
    }
  }
  if (!attention.mask && !matchScores(logits, attention))
    return std::nullopt;
  attention.replaced.push_back(scores);

  // scores = [scaled] Q @ [scaled] transpose([scaled] K, [0, 1, 3, 2]).
  attention.query = peelScalars(scores.getA(), attention);
  Value keyT = peelScalars(scores.getB(), attention);
  auto transpose = keyT.getDefiningOp<moe::TransposeOp>();
  Value key;
  if (transpose && transpose.getPermAttr() &&
      transpose.getPermAttr().asArrayRef() == ArrayRef<int64_t>{0, 1, 3, 2}) {
    if (transpose->hasOneUse())
      attention.replaced.push_back(transpose);
    key = transpose.getData();
    if (transpose->hasOneUse())
      key = peelScalars(key, attention);
  } else if (!(key = matchUnbatchedKeyTranspose(keyT, attention))) {
    return std::nullopt;
  }
  Value value = output.getB();
  attention.key = key;
  attention.value = value;
  // Grouped-query attention: both copies proven, with the same factor.
  Attention trial = attention;
  std::optional<std::pair<Value, int64_t>> k = matchRepeatKv(key, trial);
  std::optional<std::pair<Value, int64_t>> v = matchRepeatKv(value, trial);
  if (k && v && k->second == v->second) {
    attention = trial;
    attention.key = k->first;
    attention.value = v->first;
  }
  if (!isF32Rank4(attention.query) || !isF32Rank4(attention.key) ||
      !isF32Rank4(attention.value) || !std::isfinite(attention.scale))
    return std::nullopt;
  // The op's own static checks (head sizes, key/value agreement).
  auto q = cast<RankedTensorType>(attention.query.getType()).getShape();
  auto kShape = cast<RankedTensorType>(attention.key.getType()).getShape();
  if (ShapedType::isDynamic(q[3]) || q[3] != kShape[3])
    return std::nullopt;
  return attention;
}

struct FuseAttentionPass
    : public moec::impl::MoeFuseAttentionBase<FuseAttentionPass> {
  void runOnOperation() override {
    SmallVector<moe::SoftmaxOp> softmaxes;
    getOperation().walk([&](moe::SoftmaxOp op) { softmaxes.push_back(op); });
    llvm::DenseMap<std::pair<Value, int64_t>, SizeKey> keys;
    dimKeyCache = &keys;
    for (moe::SoftmaxOp softmax : softmaxes)
      if (std::optional<Attention> attention = matchAttention(softmax)) {
        keys.clear();
        rewrite(*attention);
      }
    dimKeyCache = nullptr;
  }

  void rewrite(Attention &attention) {
    OpBuilder builder(attention.output);
    auto fused = moe::AttentionOp::create(
        builder, attention.output.getLoc(), attention.output.getType(),
        attention.query, attention.key, attention.value, attention.mask,
        /*sinks=*/Value(),
        builder.getF32FloatAttr(static_cast<float>(attention.scale)),
        /*softcap=*/builder.getF32FloatAttr(0.0f));
    attention.output.getOutput().replaceAllUsesWith(fused.getOutput());
    attention.output->erase();
    // Erase the replaced ops nothing reads any more, users before producers.
    bool erased = true;
    while (erased) {
      erased = false;
      for (Operation *&op : attention.replaced)
        if (op && op->use_empty()) {
          op->erase();
          op = nullptr;
          erased = true;
        }
    }
  }
};

} // namespace
