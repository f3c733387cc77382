//===- GraphOpsFold.cpp - folders and canonicalisation of graph ops -------===//
//
// Folding of the shape arithmetic exporters emit (Shape -> Gather -> Mul ->
// Unsqueeze -> Concat -> Reshape, Where(Equal(shape, -1), ...)), of
// constants, shape manipulation and indexing; elementwise ops fold in
// ElementwiseFold.cpp. Everything folds only constants that are splats or
// have at most kMaxFoldElements elements, so weights (in particular
// `dense_resource` blobs) are never read or copied.
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/APSInt.h"

#include <cmath>

using namespace mlir;
using namespace moec::moe;

namespace {

/// Row-major strides of `shape`.
SmallVector<int64_t> getStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// Gathers the elements of a small constant at `flatIndices`.
Attribute gatherElements(DenseElementsAttr data, RankedTensorType type,
                         ArrayRef<int64_t> flatIndices) {
  if (data.isSplat())
    return DenseElementsAttr::get(type, data.getSplatValue<Attribute>());
  SmallVector<Attribute> values(data.getValues<Attribute>());
  SmallVector<Attribute> result;
  for (int64_t index : flatIndices)
    result.push_back(values[index]);
  return DenseElementsAttr::get(type, result);
}

/// Calls `fn` with every multi-index of `shape` in row-major order.
void forEachIndex(ArrayRef<int64_t> shape,
                  llvm::function_ref<void(ArrayRef<int64_t>)> fn) {
  int64_t count = ShapedType::getNumElements(shape);
  SmallVector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    fn(index);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1;
         d >= 0 && ++index[d] == shape[d]; --d)
      index[d] = 0;
  }
}

} // namespace

OpFoldResult moec::moe::ifSameType(Value value, Type type) {
  if (value && value.getType() == type)
    return value;
  return {};
}

Attribute moec::moe::foldShapeVector(Value result) {
  auto type = dyn_cast<RankedTensorType>(result.getType());
  if (!type || !type.hasStaticShape() || type.getRank() > 1)
    return {};
  auto intType = dyn_cast<IntegerType>(type.getElementType());
  if (!intType)
    return {};
  std::optional<SmallVector<ShapeEntry>> entries = getShapeEntries(result);
  if (!entries)
    return {};
  SmallVector<APInt> values;
  for (const ShapeEntry &entry : *entries) {
    if (!entry.isConstant())
      return {};
    values.push_back(APInt(intType.getWidth(), *entry.constant,
                           /*isSigned=*/!intType.isUnsigned()));
  }
  return DenseElementsAttr::get(type, values);
}

//===----------------------------------------------------------------------===//
// Constants and shape values
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult DimOp::fold(FoldAdaptor) {
  auto type = getInput().getType();
  int64_t index = getIndexAttr().getInt();
  if (index < 0 || index >= type.getRank() || type.isDynamicDim(index))
    return {};
  return getI64Elements(getType(), {type.getDimSize(index)});
}

OpFoldResult ShapeOp::fold(FoldAdaptor) { return foldShapeVector(getResult()); }

OpFoldResult SizeOp::fold(FoldAdaptor) { return foldShapeVector(getResult()); }

OpFoldResult ConstantOfShapeOp::fold(FoldAdaptor) {
  auto type = getType();
  if (!type.hasStaticShape())
    return {};
  // A splat is O(1) in memory whatever the shape.
  Attribute element = FloatAttr::get(type.getElementType(), 0.0);
  if (ElementsAttr value = getValueAttr()) {
    DenseElementsAttr dense = getFoldableElements(value);
    if (!dense || dense.getNumElements() != 1)
      return {};
    element = *dense.getValues<Attribute>().begin();
  }
  if (getAttrType(element) != type.getElementType())
    return {};
  return DenseElementsAttr::get(type, element);
}

OpFoldResult RangeOp::fold(FoldAdaptor adaptor) {
  auto type = getType();
  if (!type.hasStaticShape() || type.getNumElements() > kMaxFoldElements)
    return {};
  auto start = getFoldableElements(adaptor.getStart());
  auto delta = getFoldableElements(adaptor.getDelta());
  if (!start || !delta)
    return {};
  Attribute first = *start.getValues<Attribute>().begin();
  Attribute step = *delta.getValues<Attribute>().begin();
  SmallVector<Attribute> values;
  if (auto intStart = dyn_cast<IntegerAttr>(first)) {
    APInt value = intStart.getValue();
    APInt increment = cast<IntegerAttr>(step).getValue();
    for (int64_t i = 0; i < type.getNumElements(); ++i, value += increment)
      values.push_back(IntegerAttr::get(type.getElementType(), value));
  } else {
    // ONNX defines element i as start + i * delta.
    double base = cast<FloatAttr>(first).getValueAsDouble();
    double increment = cast<FloatAttr>(step).getValueAsDouble();
    for (int64_t i = 0; i < type.getNumElements(); ++i)
      values.push_back(FloatAttr::get(
          type.getElementType(), base + static_cast<double>(i) * increment));
  }
  return DenseElementsAttr::get(type, values);
}

OpFoldResult OneHotOp::fold(FoldAdaptor) {
  // Exporters build small index vectors (Tile repeats, say) as one-hots of
  // constants; folding them lets shape inference see the sizes.
  auto type = getType();
  if (!type.hasStaticShape() || type.getNumElements() > kMaxFoldElements ||
      !type.getElementType().isSignlessInteger(64))
    return {};
  std::optional<SmallVector<int64_t>> indices = getConstantInts(getIndices());
  std::optional<int64_t> depth = getConstantInt(getDepth());
  std::optional<SmallVector<int64_t>> values = getConstantInts(getValues());
  if (!indices || !depth || !values || values->size() != 2)
    return {};
  int64_t rank = type.getRank();
  int64_t axis = getAxisAttr().getInt();
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank || type.getDimSize(axis) != *depth)
    return {};
  // Element (outer, j, inner) is on when indices[outer, inner] is j.
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= type.getDimSize(d);
  SmallVector<int64_t> result(type.getNumElements());
  for (int64_t i = 0, e = result.size(); i < e; ++i) {
    int64_t j = (i / inner) % *depth;
    int64_t source = (i / (inner * *depth)) * inner + i % inner;
    if (source >= static_cast<int64_t>(indices->size()))
      return {};
    int64_t index = (*indices)[source];
    if (index < 0)
      index += *depth;
    result[i] = (*values)[index == j ? 1 : 0];
  }
  return getI64Elements(type, result);
}

OpFoldResult IdentityOp::fold(FoldAdaptor) {
  return ifSameType(getInput(), getType());
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

namespace {

/// A constant reshaped to `type` when it is small or a splat.
Attribute reshapeConstant(Attribute input, Type type) {
  auto dense = getFoldableElements(input);
  auto shaped = dyn_cast<RankedTensorType>(type);
  if (!dense || !shaped || !shaped.hasStaticShape() ||
      dense.getNumElements() != shaped.getNumElements())
    return {};
  return dense.reshape(shaped);
}

/// True when `shape` asks Reshape for exactly the shape `data` already has.
bool isIdentityReshape(ReshapeOp op) {
  auto type = op.getData().getType();
  if (type != op.getType())
    return false;
  if (type.hasStaticShape())
    return true;
  std::optional<SmallVector<ShapeEntry>> entries =
      getShapeEntries(op.getShape());
  if (!entries || static_cast<int64_t>(entries->size()) != type.getRank())
    return false;
  bool allowZero = op.getAllowzero() != 0;
  for (auto [i, entry] : llvm::enumerate(*entries)) {
    if (!allowZero && entry.isConstant() && *entry.constant == 0)
      continue;
    if (!entry.isSameAs(ShapeEntry::ofDim(op.getData(), i)))
      return false;
  }
  return true;
}

} // namespace

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (isIdentityReshape(*this))
    return getData();
  if (Attribute folded = reshapeConstant(adaptor.getData(), getType()))
    return folded;
  return foldShapeVector(getResult());
}

namespace {

/// Reshape(Reshape(x, a), b) -> Reshape(x, b): only the last shape matters,
/// unless b copies dimensions of the intermediate with 0 entries.
struct ReshapeOfReshape : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getData().getDefiningOp<ReshapeOp>();
    if (!inner)
      return failure();
    if (!op.getAllowzero()) {
      std::optional<SmallVector<ShapeEntry>> entries =
          getShapeEntries(op.getShape());
      if (!entries || llvm::any_of(*entries, [](const ShapeEntry &e) {
            return !e.isConstant() || *e.constant == 0;
          }))
        return failure();
    }
    rewriter.modifyOpInPlace(
        op, [&] { op.getDataMutable().assign(inner.getData()); });
    return success();
  }
};

} // namespace

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<ReshapeOfReshape>(context);
}

OpFoldResult SqueezeOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult same = ifSameType(getData(), getType()))
    return same;
  if (Attribute folded = reshapeConstant(adaptor.getData(), getType()))
    return folded;
  return foldShapeVector(getResult());
}

OpFoldResult UnsqueezeOp::fold(FoldAdaptor adaptor) {
  if (Attribute folded = reshapeConstant(adaptor.getData(), getType()))
    return folded;
  return foldShapeVector(getResult());
}

OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  SmallVector<int64_t> perm = getPermutation();
  bool identity = llvm::equal(perm, llvm::seq<int64_t>(0, perm.size()));
  if (identity)
    return ifSameType(getData(), getType());
  // Only splats: permuting a non-splat constant is not shape arithmetic.
  auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getData());
  if (dense && dense.isSplat() && getType().hasStaticShape())
    return DenseElementsAttr::get(getType(), dense.getSplatValue<Attribute>());
  return {};
}

OpFoldResult ExpandOp::fold(FoldAdaptor adaptor) {
  auto type = getInput().getType();
  if (type == getType()) {
    // Broadcasting to an equal or all-ones shape is the identity.
    std::optional<SmallVector<ShapeEntry>> entries =
        getShapeEntries(getShape());
    if (type.hasStaticShape() ||
        (entries && static_cast<int64_t>(entries->size()) <= type.getRank() &&
         llvm::all_of(llvm::enumerate(*entries), [&](auto it) {
           const ShapeEntry &e = it.value();
           int64_t dim = type.getRank() - entries->size() + it.index();
           return (e.isConstant() && *e.constant == 1) ||
                  e.isSameAs(ShapeEntry::ofDim(getInput(), dim));
         })))
      return getInput();
  }
  auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput());
  if (dense && dense.isSplat() && getType().hasStaticShape())
    return DenseElementsAttr::get(getType(), dense.getSplatValue<Attribute>());
  return {};
}

OpFoldResult ConcatOp::fold(FoldAdaptor adaptor) {
  if (getInputs().size() == 1)
    return ifSameType(getInputs().front(), getType());
  auto type = getType();
  if (!type.hasStaticShape() || type.getNumElements() > kMaxFoldElements)
    return foldShapeVector(getResult());
  SmallVector<DenseElementsAttr> inputs;
  for (Attribute input : adaptor.getInputs()) {
    DenseElementsAttr dense = getFoldableElements(input);
    if (!dense)
      return foldShapeVector(getResult());
    inputs.push_back(dense);
  }
  // Row-major concatenation: for every outer index, each input contributes
  // its contiguous block along and after the axis.
  int64_t axis = getAxisAttr().getInt();
  if (axis < 0)
    axis += type.getRank();
  int64_t outer = ShapedType::getNumElements(type.getShape().take_front(axis));
  SmallVector<SmallVector<Attribute>> values;
  for (DenseElementsAttr input : inputs)
    values.push_back(llvm::to_vector(input.getValues<Attribute>()));
  SmallVector<Attribute> result;
  for (int64_t o = 0; o < outer; ++o) {
    for (auto [input, elements] : llvm::zip(inputs, values)) {
      int64_t block = input.getNumElements() / std::max<int64_t>(outer, 1);
      for (int64_t i = 0; i < block; ++i)
        result.push_back(elements[o * block + i]);
    }
  }
  return DenseElementsAttr::get(type, result);
}

namespace {

/// Concat(a, Concat(b, c), d) along one axis -> Concat(a, b, c, d).
struct FlattenConcat : OpRewritePattern<ConcatOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConcatOp op,
                                PatternRewriter &rewriter) const override {
    int64_t rank = op.getType().getRank();
    auto normalized = [rank](int64_t axis) {
      return axis < 0 ? axis + rank : axis;
    };
    int64_t axis = normalized(op.getAxisAttr().getInt());
    SmallVector<Value> inputs;
    bool changed = false;
    for (Value input : op.getInputs()) {
      auto inner = input.getDefiningOp<ConcatOp>();
      if (inner && normalized(inner.getAxisAttr().getInt()) == axis) {
        llvm::append_range(inputs, inner.getInputs());
        changed = true;
      } else {
        inputs.push_back(input);
      }
    }
    if (!changed)
      return failure();
    rewriter.modifyOpInPlace(op, [&] { op.getInputsMutable().assign(inputs); });
    return success();
  }
};

} // namespace

void ConcatOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                           MLIRContext *context) {
  results.add<FlattenConcat>(context);
}

namespace {

/// Stack(a, b) of non-constants -> Concat(Unsqueeze(a, 0), Unsqueeze(b, 0))
/// along axis 0: the runtime step that moves the rows. Stacks of constants
/// stay: the plan stores them as one weight without a copy.
struct StackToConcat : OpRewritePattern<StackOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(StackOp op,
                                PatternRewriter &rewriter) const override {
    if (op.isWeight())
      return failure();
    Location loc = op.getLoc();
    auto axesType = RankedTensorType::get({1}, rewriter.getI64Type());
    Value axes = ConstantOp::create(
        rewriter, loc, DenseElementsAttr::get(axesType, int64_t{0}));
    SmallVector<Value> slices;
    for (Value input : op.getInputs())
      slices.push_back(UnsqueezeOp::create(rewriter, loc, input, axes));
    rewriter.replaceOpWithNewOp<ConcatOp>(op, op.getType(), slices,
                                          rewriter.getI64IntegerAttr(0));
    return success();
  }
};

} // namespace

void StackOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                          MLIRContext *context) {
  results.add<StackToConcat>(context);
}

OpFoldResult SliceOp::fold(FoldAdaptor adaptor) {
  auto type = getType();
  auto dataType = getData().getType();
  if (OpFoldResult same = ifSameType(getData(), type);
      same && dataType.hasStaticShape())
    return same;
  auto data = getFoldableElements(adaptor.getData());
  auto starts = getConstantInts(getStarts());
  auto ends = getConstantInts(getEnds());
  if (!data || !starts || !ends || !type.hasStaticShape() ||
      type.getNumElements() > kMaxFoldElements)
    return foldShapeVector(getResult());
  int64_t rank = dataType.getRank();
  SmallVector<int64_t> axes =
      getAxes() ? getConstantInts(getAxes()).value_or(SmallVector<int64_t>())
                : llvm::to_vector(llvm::seq<int64_t>(0, starts->size()));
  SmallVector<int64_t> steps =
      getSteps() ? getConstantInts(getSteps()).value_or(SmallVector<int64_t>())
                 : SmallVector<int64_t>(starts->size(), 1);
  if (axes.size() != starts->size() || steps.size() != starts->size() ||
      ends->size() != starts->size())
    return {};
  // Per dimension: first index and step (untouched dimensions: 0 and 1).
  SmallVector<int64_t> first(rank, 0), step(rank, 1);
  for (auto [i, axis] : llvm::enumerate(axes)) {
    int64_t d = axis < 0 ? axis + rank : axis;
    if (d < 0 || d >= rank || steps[i] == 0)
      return {};
    first[d] = getSliceRange(dataType.getDimSize(d), (*starts)[i], (*ends)[i],
                             steps[i])
                   .first;
    step[d] = steps[i];
  }
  SmallVector<int64_t> strides = getStrides(dataType.getShape());
  SmallVector<int64_t> flat;
  forEachIndex(type.getShape(), [&](ArrayRef<int64_t> index) {
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d)
      offset += (first[d] + index[d] * step[d]) * strides[d];
    flat.push_back(offset);
  });
  return gatherElements(data, type, flat);
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

OpFoldResult GatherOp::fold(FoldAdaptor adaptor) {
  auto type = getType();
  auto data = getFoldableElements(adaptor.getData());
  auto indices = getConstantInts(getIndices());
  if (!data || !indices || !type.hasStaticShape() ||
      type.getNumElements() > kMaxFoldElements)
    return foldShapeVector(getResult());
  auto dataType = getData().getType();
  int64_t rank = dataType.getRank();
  int64_t axis = static_cast<int64_t>(getAxis());
  if (axis < 0)
    axis += rank;
  int64_t size = dataType.getDimSize(axis);
  // data viewed as [outer, size, inner]; the result as [outer, n, inner].
  int64_t outer =
      ShapedType::getNumElements(dataType.getShape().take_front(axis));
  int64_t inner =
      ShapedType::getNumElements(dataType.getShape().drop_front(axis + 1));
  SmallVector<int64_t> flat;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t index : *indices) {
      if (index < -size || index >= size)
        return {};
      int64_t row = index < 0 ? index + size : index;
      for (int64_t i = 0; i < inner; ++i)
        flat.push_back((o * size + row) * inner + i);
    }
  }
  return gatherElements(data, type, flat);
}

namespace {

/// Gather(Shape(x), i) with a scalar index -> moe.dim(x, i): the symbolic
/// form of a dynamic dimension that later shape arithmetic and inference
/// understand. Static dimensions fold to constants instead.
struct GatherOfShapeToDim : OpRewritePattern<GatherOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GatherOp op,
                                PatternRewriter &rewriter) const override {
    auto type = op.getType();
    if (type.getRank() != 0 || !type.getElementType().isInteger(64))
      return failure();
    std::optional<SmallVector<ShapeEntry>> entries =
        getShapeEntries(op.getResult());
    if (!entries || entries->size() != 1 || !entries->front().isDim())
      return failure();
    const ShapeEntry &entry = entries->front();
    rewriter.replaceOpWithNewOp<DimOp>(op, entry.source,
                                       rewriter.getI64IntegerAttr(entry.dim));
    return success();
  }
};

} // namespace

void GatherOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                           MLIRContext *context) {
  results.add<GatherOfShapeToDim>(context);
}
