//===- QuantizedWeights.cpp - Block-quantized weights in a plan -----------===//

#include "compiler/plan/QuantizedWeights.h"

#include "dialects/moe/QuantOps.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
namespace fb = moert::fb;

namespace moec::plan {
namespace {

moe::BlockQuantizedConstantOp getQuantized(Value value) {
  return value ? value.getDefiningOp<moe::BlockQuantizedConstantOp>()
               : moe::BlockQuantizedConstantOp();
}

/// Whether `experts` reads all its matrices packed: out_in, every present
/// matrix a block-quantized constant of one bits, block_size and
/// int8_activations.
bool hasPackedMatrices(moe::ExpertsOp experts) {
  if (experts.getWeightLayout() != moe::WeightLayout::OutIn)
    return false;
  auto w1 = getQuantized(experts.getW1());
  if (!w1)
    return false;
  for (Value w : {experts.getW3(), experts.getW2()}) {
    if (!w)
      continue;
    auto q = getQuantized(w);
    if (!q || q.getTransposed() || q.getBits() != w1.getBits() ||
        q.getBlockSize() != w1.getBlockSize() ||
        q.getInt8Activations() != w1.getInt8Activations())
      return false;
  }
  return !w1.getTransposed();
}

/// Keeps `bytes` (`storage` when it holds them) alive until the plan is
/// written.
ArrayRef<char> keep(ArrayRef<char> bytes, std::vector<char> &storage,
                    std::vector<std::vector<char>> &constantBytes) {
  if (storage.empty())
    return bytes;
  constantBytes.push_back(std::move(storage));
  return constantBytes.back();
}

} // namespace

bool canStayPacked(moe::BlockQuantizedConstantOp op) {
  if (op->use_empty())
    return false;
  for (OpOperand &use : op->getUses()) {
    Operation *user = use.getOwner();
    if (auto matMul = dyn_cast<moe::MatMulOp>(user)) {
      if (use.getOperandNumber() != 1 || !op.getTransposed())
        return false;
      continue;
    }
    auto experts = dyn_cast<moe::ExpertsOp>(user);
    Value v = use.get();
    if (!experts || !hasPackedMatrices(experts) ||
        (v != experts.getW1() && v != experts.getW3() && v != experts.getW2()))
      return false;
  }
  return true;
}

LogicalResult emitBlockQuantizedConstant(
    moe::BlockQuantizedConstantOp op, const std::string &name,
    const AddKeyedWeight &add, std::vector<std::vector<char>> &constantBytes,
    std::optional<PackedWeight> &packed, int32_t &f32Id) {
  MLIRContext *context = op.getContext();
  auto key = [&](Attribute attr, StringRef role) -> Attribute {
    return ArrayAttr::get(context, {attr, StringAttr::get(context, role)});
  };
  if (!canStayPacked(op)) {
    // The exact f32 values, for readers that take no packed weights.
    RankedTensorType type = op.getType();
    std::vector<char> bytes(size_t(type.getNumElements()) * sizeof(float));
    if (failed(op.dequantize(reinterpret_cast<float *>(bytes.data()))))
      return failure();
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    ArrayRef<char> data = keep(bytes, bytes, constantBytes);
    f32Id = add(key(op.getCodes(), op.getTransposed() ? "f32_t" : "f32"), name,
                moert::DType::F32, shape, data);
    return success();
  }
  SmallVector<int64_t> stored = op.getStoredShape();
  std::vector<int64_t> outer(stored.begin(), stored.end() - 1);
  auto shapeWith = [&](int64_t last) {
    std::vector<int64_t> shape = outer;
    shape.push_back(last);
    return shape;
  };
  PackedWeight weight;
  weight.bits = int64_t(op.getBits());
  weight.blockSize = int64_t(op.getBlockSize());
  weight.int8Activations = op.getInt8Activations();
  struct Part {
    ElementsAttr attr;
    const char *role;
    moert::DType dtype;
    int64_t last;
    int32_t *id;
  } parts[] = {
      {op.getCodes(), "codes", moert::DType::I8, op.getRowBytes(),
       &weight.codes},
      {op.getScales(), "scales",
       cast<ShapedType>(op.getScales().getType()).getElementType().isF16()
           ? moert::DType::F16
           : moert::DType::F32,
       op.getNumBlocks(), &weight.scales},
      {op.getZeroPoints() ? *op.getZeroPoints() : ElementsAttr(), "zero_points",
       moert::DType::I8, op.getZeroPointRowBytes(), &weight.zeroPoints},
  };
  for (Part &part : parts) {
    if (!part.attr)
      continue;
    std::vector<char> storage;
    std::optional<ArrayRef<char>> bytes =
        moe::getElementBytes(part.attr, storage);
    if (!bytes)
      return op.emitOpError("has ") << part.role << " that cannot be read";
    *part.id =
        add(key(part.attr, part.role), name + "." + part.role, part.dtype,
            shapeWith(part.last), keep(*bytes, storage, constantBytes));
  }
  packed = weight;
  return success();
}

bool rewritePackedStep(Operation *op,
                       const llvm::DenseMap<Value, PackedWeight> &packed,
                       fb::OpKind &kind, std::vector<int32_t> &inputs,
                       fb::AttrsUnion &attrs) {
  if (auto matMul = dyn_cast<moe::MatMulOp>(op)) {
    auto it = packed.find(matMul->getOperand(1));
    if (it == packed.end())
      return false;
    const PackedWeight &w = it->second;
    kind = fb::OpKind::MatMulNBits;
    inputs = {inputs[0], w.codes, w.scales, w.zeroPoints};
    if (w.zeroPoints < 0)
      inputs.pop_back();
    fb::BlockQuantAttrsT table;
    table.bits = int32_t(w.bits);
    table.block_size = w.blockSize;
    table.k =
        cast<RankedTensorType>(matMul->getOperand(1).getType()).getDimSize(0);
    table.int8_activations = w.int8Activations;
    attrs.Set(std::move(table));
    return true;
  }
  auto experts = dyn_cast<moe::ExpertsOp>(op);
  if (!experts)
    return false;
  auto it = packed.find(experts.getW1());
  if (it == packed.end())
    return false;
  inputs.resize(8, -1);
  Value matrices[] = {experts.getW1(), experts.getW3(), experts.getW2()};
  for (bool zeroPoints : {false, true})
    for (Value w : matrices) {
      auto found = w ? packed.find(w) : packed.end();
      inputs.push_back(found == packed.end() ? -1
                       : zeroPoints          ? found->second.zeroPoints
                                             : found->second.scales);
    }
  while (inputs.back() < 0)
    inputs.pop_back();
  auto table = std::make_unique<fb::BlockQuantAttrsT>();
  table->bits = int32_t(it->second.bits);
  table->block_size = it->second.blockSize;
  table->int8_activations = it->second.int8Activations;
  attrs.AsFfnAttrs()->block_quant = std::move(table);
  return true;
}

} // namespace moec::plan
