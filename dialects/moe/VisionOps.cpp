//===- VisionOps.cpp - vision encoder graph ops ---------------------------===//
//
// The definitions of MoeVisionOps.td's ops, and the result type inference of
// moe.conv and moe.grid_sample. Inference runs before the op is verified (the
// importer builds ops from its result), so it checks every attribute it relies
// on and fails with a diagnostic naming it.
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeVisionOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace moec::moe;

namespace {

constexpr int64_t kDynamic = ShapedType::kDynamic;

/// A per-axis attribute: its values, checked to have `count` entries of at
/// least `least`, or `count` copies of `fallback` when absent.
FailureOr<SmallVector<int64_t>>
getAxisList(std::optional<Location> loc, StringRef name,
            std::optional<ArrayRef<int64_t>> list, size_t count,
            int64_t fallback, int64_t least) {
  if (!list)
    return SmallVector<int64_t>(count, fallback);
  if (list->size() != count)
    return emitOptionalError(loc, "attribute '", name, "' has ", list->size(),
                             " entries; the input has ", count,
                             name == "pads" ? " (2 per spatial axis)"
                                            : " spatial axes");
  for (int64_t value : *list)
    if (value < least)
      return emitOptionalError(loc, "attribute '", name, "' holds ", value,
                               "; expected >= ", least);
  return SmallVector<int64_t>(*list);
}

} // namespace

LogicalResult ConvOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> xType =
      getRankedType(location, adaptor.getX(), "x");
  FailureOr<RankedTensorType> wType =
      getRankedType(location, adaptor.getW(), "w");
  if (failed(xType) || failed(wType))
    return failure();
  int64_t rank = xType->getRank();
  if (rank < 3)
    return emitOptionalError(location, "input 'x' has rank ", rank,
                             "; expected [N, C, D1, ...] with a spatial axis");
  if (wType->getRank() != rank)
    return emitOptionalError(location, "weight 'w' ", *wType,
                             " does not have the input's rank ", rank);
  Type element = xType->getElementType();
  if (wType->getElementType() != element)
    return emitOptionalError(location, "weight 'w' has element type ",
                             wType->getElementType(), " but the input has ",
                             element);
  size_t spatial = rank - 2;
  int64_t group = toSigned(adaptor.getGroup());
  if (group < 1)
    return emitOptionalError(location, "attribute 'group' is ", group,
                             "; expected >= 1");
  int64_t channels = xType->getDimSize(1), filters = wType->getDimSize(0);
  int64_t perGroup = wType->getDimSize(1);
  if (!ShapedType::isDynamic(channels) && !ShapedType::isDynamic(perGroup) &&
      channels != perGroup * group)
    return emitOptionalError(location, "input 'x' has ", channels,
                             " channels; the weight ", *wType, " with group ",
                             group, " takes ", perGroup * group);
  if (!ShapedType::isDynamic(filters) && filters % group != 0)
    return emitOptionalError(location, "the weight's ", filters,
                             " filters do not divide into group ", group);
  if (Value bias = adaptor.getBias()) {
    FailureOr<RankedTensorType> bType = getRankedType(location, bias, "bias");
    if (failed(bType))
      return failure();
    if (bType->getRank() != 1 || bType->getElementType() != element ||
        (!ShapedType::isDynamic(filters) && !bType->isDynamicDim(0) &&
         bType->getDimSize(0) != filters))
      return emitOptionalError(location, "bias ", *bType, " is not [", filters,
                               "] of ", element);
  }
  StringRef autoPad = adaptor.getAutoPad();
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" &&
      autoPad != "SAME_LOWER")
    return emitOptionalError(location, "attribute 'auto_pad' is \"", autoPad,
                             "\"; expected NOTSET, VALID, SAME_UPPER or "
                             "SAME_LOWER");
  FailureOr<SmallVector<int64_t>> strides =
      getAxisList(location, "strides", adaptor.getStrides(), spatial, 1, 1);
  FailureOr<SmallVector<int64_t>> dilations =
      getAxisList(location, "dilations", adaptor.getDilations(), spatial, 1, 1);
  FailureOr<SmallVector<int64_t>> pads =
      getAxisList(location, "pads", adaptor.getPads(), 2 * spatial, 0, 0);
  if (failed(strides) || failed(dilations) || failed(pads))
    return failure();
  ArrayRef<int64_t> kernel = wType->getShape().drop_front(2);
  if (std::optional<ArrayRef<int64_t>> shape = adaptor.getKernelShape())
    if (failed(verifyCompatibleShape(*shape, kernel)))
      return emitOptionalError(
          location, "attribute 'kernel_shape' ", formatShape(*shape),
          " differs from the weight's spatial sizes ", formatShape(kernel));

  SmallVector<int64_t> shape = {xType->getDimSize(0), filters};
  for (size_t i = 0; i < spatial; ++i) {
    int64_t size = xType->getDimSize(2 + i), k = kernel[i];
    if (ShapedType::isDynamic(size) || ShapedType::isDynamic(k)) {
      shape.push_back(kDynamic);
      continue;
    }
    int64_t stride = (*strides)[i];
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      shape.push_back((size + stride - 1) / stride);
      continue;
    }
    int64_t padded = size;
    if (autoPad == "NOTSET")
      padded += (*pads)[i] + (*pads)[spatial + i];
    int64_t extent = (*dilations)[i] * (k - 1) + 1;
    if (padded < extent)
      return emitOptionalError(location, "spatial axis ", i,
                               ": the kernel spans ", extent,
                               " but the padded input has ", padded);
    shape.push_back((padded - extent) / stride + 1);
  }
  types.push_back(RankedTensorType::get(shape, element));
  return success();
}

LogicalResult GridSampleOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> location,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  FailureOr<RankedTensorType> xType =
      getRankedType(location, adaptor.getX(), "x");
  FailureOr<RankedTensorType> gridType =
      getRankedType(location, adaptor.getGrid(), "grid");
  if (failed(xType) || failed(gridType))
    return failure();
  if (xType->getRank() != 4)
    return emitOptionalError(location, "input 'x' has rank ", xType->getRank(),
                             "; only 4-D GridSample ([N, C, H, W]) is "
                             "supported");
  if (gridType->getRank() != 4 ||
      !llvm::is_contained({int64_t(2), kDynamic}, gridType->getDimSize(3)))
    return emitOptionalError(location, "grid ", *gridType,
                             " is not [N, Ho, Wo, 2] for the 4-D input");
  Type element = xType->getElementType();
  if (gridType->getElementType() != element)
    return emitOptionalError(location, "grid has element type ",
                             gridType->getElementType(), " but the input has ",
                             element);
  int64_t batch = xType->getDimSize(0), gridBatch = gridType->getDimSize(0);
  if (!ShapedType::isDynamic(batch) && !ShapedType::isDynamic(gridBatch) &&
      batch != gridBatch)
    return emitOptionalError(location, "grid ", *gridType, " has batch ",
                             gridBatch, " but the input has ", batch);
  StringRef mode = adaptor.getMode();
  if (!llvm::is_contained(ArrayRef<StringRef>{"linear", "bilinear", "nearest",
                                              "cubic", "bicubic"},
                          mode))
    return emitOptionalError(location, "attribute 'mode' is \"", mode,
                             "\"; expected linear, nearest or cubic "
                             "(bilinear or bicubic in opset 16)");
  StringRef padding = adaptor.getPaddingMode();
  if (!llvm::is_contained(ArrayRef<StringRef>{"zeros", "border", "reflection"},
                          padding))
    return emitOptionalError(location, "attribute 'padding_mode' is \"",
                             padding,
                             "\"; expected zeros, border or reflection");
  int64_t align = toSigned(adaptor.getAlignCorners());
  if (align != 0 && align != 1)
    return emitOptionalError(location, "attribute 'align_corners' is ", align,
                             "; expected 0 or 1");
  types.push_back(RankedTensorType::get(
      {batch == kDynamic ? gridBatch : batch, xType->getDimSize(1),
       gridType->getDimSize(1), gridType->getDimSize(2)},
      element));
  return success();
}

#define GET_OP_CLASSES
#include "dialects/moe/MoeVisionOps.cpp.inc"
