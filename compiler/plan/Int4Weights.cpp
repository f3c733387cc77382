//===- Int4Weights.cpp - --weight-dtype int4 ------------------------------===//
//
// Rewrites the matrices --weight-dtype int4 quantizes into
// moe.block_quantized_constant ops (Int4Weights.h).
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/Int4Weights.h"
#include "compiler/plan/DenseWeights.h"

#include "dialects/moe/MoeOps.h"
#include "dialects/moe/QuantOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <cstring>

using namespace mlir;

namespace moec::plan {

void quantizeInt4Rows(const float *values, int64_t rows, int64_t cols,
                      int64_t blockSize, float (*roundScale)(float),
                      std::vector<uint8_t> &codes, std::vector<float> &scales) {
  const int64_t blocks = (cols + blockSize - 1) / blockSize;
  const int64_t rowBytes = blocks * blockSize / 2;
  codes.assign(size_t(rows * rowBytes), 0x88);
  scales.assign(size_t(rows * blocks), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = values + r * cols;
    uint8_t *rowCodes = codes.data() + r * rowBytes;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * blockSize,
                    end = std::min(cols, begin + blockSize);
      float extreme = 0.0f;
      for (int64_t c = begin; c < end; ++c)
        if (std::fabs(row[c]) > std::fabs(extreme))
          extreme = row[c];
      const float scale = roundScale(extreme / -8.0f);
      scales[size_t(r * blocks + b)] = scale;
      for (int64_t c = begin; c < end; ++c) {
        // The extreme gives exactly -8; the others round to nearest, ties to
        // even, and a value of the extreme's magnitude and opposite sign
        // clamps to 7.
        const float q = scale != 0.0f ? std::nearbyint(row[c] / scale) : 0.0f;
        const int code = int(std::clamp(q, -8.0f, 7.0f)) + 8;
        uint8_t &byte = rowCodes[c / 2];
        byte = c % 2 ? uint8_t((byte & 0x0F) | (code << 4))
                     : uint8_t((byte & 0xF0) | code);
      }
    }
  }
}

namespace {

/// The f32 elements of weight `value` (a constant or a stack of constants;
/// int4 plans have no expert-parallel shards) in row-major order.
LogicalResult readWeight(Value value, std::vector<float> &out) {
  auto type = cast<RankedTensorType>(value.getType());
  Operation *def = value.getDefiningOp();
  auto readConstant = [&](moe::ConstantOp constant,
                          std::vector<float> &into) -> LogicalResult {
    std::vector<char> storage;
    std::optional<ArrayRef<char>> bytes =
        moe::getElementBytes(constant.getValue(), storage);
    auto constantType = cast<ShapedType>(constant.getType());
    if (!bytes || !constantType.getElementType().isF32() ||
        int64_t(bytes->size()) !=
            constantType.getNumElements() * int64_t(sizeof(float)))
      return constant.emitError("--weight-dtype int4: the f32 data of this "
                                "weight cannot be read");
    size_t at = into.size();
    into.resize(at + bytes->size() / sizeof(float));
    std::memcpy(into.data() + at, bytes->data(), bytes->size());
    return success();
  };
  out.clear();
  out.reserve(size_t(type.getNumElements()));
  if (auto constant = dyn_cast_or_null<moe::ConstantOp>(def))
    return readConstant(constant, out);
  if (auto stack = dyn_cast_or_null<moe::StackOp>(def)) {
    for (Value input : stack.getInputs())
      if (failed(readConstant(input.getDefiningOp<moe::ConstantOp>(), out)))
        return failure();
    return success();
  }
  return emitError(value.getLoc(),
                   "--weight-dtype int4 quantizes constant weights only");
}

/// Transposes the last two dims of `values` ([outer, rows, cols]).
std::vector<float> transposeMatrices(const std::vector<float> &values,
                                     int64_t outer, int64_t rows,
                                     int64_t cols) {
  std::vector<float> out(values.size());
  for (int64_t m = 0; m < outer; ++m)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[size_t((m * cols + c) * rows + r)] =
            values[size_t((m * rows + r) * cols + c)];
  return out;
}

/// `value` rounded to f16 (nearest even), as an f32; infinite beyond f16's
/// range.
float roundToHalf(float value) {
  llvm::APFloat half(value);
  bool lost;
  half.convert(llvm::APFloat::IEEEhalf(), llvm::APFloat::rmNearestTiesToEven,
               &lost);
  half.convert(llvm::APFloat::IEEEsingle(), llvm::APFloat::rmNearestTiesToEven,
               &lost);
  return half.convertToFloat();
}

/// The f16 bits of `value`, which is an f16 value.
uint16_t halfBits(float value) {
  llvm::APFloat half(value);
  bool lost;
  half.convert(llvm::APFloat::IEEEhalf(), llvm::APFloat::rmNearestTiesToEven,
               &lost);
  return uint16_t(half.bitcastToAPInt().getZExtValue());
}

/// Whether every scale is an f16 that loses nothing of the block: zero, or
/// a normal f16 (a subnormal scale would round the codes coarser).
bool fitsHalf(const std::vector<float> &scales) {
  constexpr float kMinNormalHalf = 6.103515625e-05f;
  return llvm::all_of(scales, [&](float s) {
    return s == 0.0f || (std::isfinite(s) && std::fabs(s) >= kMinNormalHalf);
  });
}

/// A resource attribute holding `data` as a tensor of `shape` x `element`.
template <typename T>
ElementsAttr makeResource(Builder &builder, ArrayRef<int64_t> shape,
                          Type element, const std::vector<T> &data,
                          StringRef name) {
  auto type = RankedTensorType::get(shape, element);
  AsmResourceBlob blob =
      HeapAsmResourceBlob::allocate(data.size() * sizeof(T), alignof(T));
  std::memcpy(blob.getMutableData().data(), data.data(),
              data.size() * sizeof(T));
  return DenseResourceElementsAttr::get(type, name, std::move(blob));
}

/// The block-quantized constant of result type `type` whose stored
/// matrices ([outer, rows, cols], the rows the output channels) are
/// `stored`.
FailureOr<Value> createQuantized(OpBuilder &builder, Location loc,
                                 RankedTensorType type, bool transposed,
                                 const std::vector<float> &stored, int64_t cols,
                                 StringRef name, const Int4Options &options) {
  if (!llvm::all_of(stored, [](float v) { return std::isfinite(v); }))
    return emitError(loc, "--weight-dtype int4: this matrix holds an "
                          "infinity or NaN, which 4-bit codes cannot "
                          "represent");
  const int64_t allRows = int64_t(stored.size()) / cols;
  const int64_t blocks = (cols + options.blockSize - 1) / options.blockSize;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  // f16 scales (q4_0's), unless one would be subnormal or overflow: then
  // the matrix keeps f32 ones.
  quantizeInt4Rows(stored.data(), allRows, cols, options.blockSize, roundToHalf,
                   codes, scales);
  ElementsAttr scaleAttr;
  if (fitsHalf(scales)) {
    std::vector<uint16_t> halves(scales.size());
    for (size_t i = 0; i < scales.size(); ++i)
      halves[i] = halfBits(scales[i]);
    scaleAttr = makeResource(builder, {allRows, blocks}, builder.getF16Type(),
                             halves, (name + ".int4_scales").str());
  } else {
    quantizeInt4Rows(
        stored.data(), allRows, cols, options.blockSize,
        [](float s) { return s; }, codes, scales);
    scaleAttr = makeResource(builder, {allRows, blocks}, builder.getF32Type(),
                             scales, (name + ".int4_scales").str());
  }
  ElementsAttr codeAttr =
      makeResource(builder, {allRows, blocks * options.blockSize / 2},
                   builder.getIntegerType(8, /*isSigned=*/false), codes,
                   (name + ".int4_codes").str());
  auto op = moe::BlockQuantizedConstantOp::create(
      builder, loc, type, builder.getI64IntegerAttr(4),
      builder.getI64IntegerAttr(options.blockSize),
      transposed ? builder.getUnitAttr() : UnitAttr(), codeAttr, scaleAttr,
      ElementsAttr(),
      options.int8Activations ? builder.getUnitAttr() : UnitAttr());
  if (failed(mlir::verify(op))) {
    op->erase();
    return failure();
  }
  return op.getResult();
}

/// A name for diagnostics and the codes' resource: the weight's location.
std::string getWeightName(Value value, int index) {
  std::string text;
  llvm::raw_string_ostream os(text);
  value.getLoc().print(os);
  return "int4_" + std::to_string(index) + "_" +
         std::to_string(llvm::hash_value(os.str()));
}

class Int4Rewriter {
public:
  Int4Rewriter(func::FuncOp func, const Int4Options &options)
      : func(func), options(options), builder(func.getContext()) {}

  LogicalResult run(Int4Summary &summary) {
    llvm::DenseSet<Value> dense =
        getNarrowableDenseWeights(func, ExpertWeightType::I8);
    llvm::DenseSet<Value> experts =
        getNarrowableExpertWeights(func, ExpertWeightType::I8);
    SmallVector<Value> denseOrder;
    func.walk([&](moe::MatMulOp op) {
      Value w = op.getB();
      if (dense.contains(w) && !llvm::is_contained(denseOrder, w))
        denseOrder.push_back(w);
    });
    for (Value w : denseOrder)
      if (failed(quantizeDense(w)))
        return failure();
    summary.denseMatrices += int64_t(denseOrder.size());
    SmallVector<moe::ExpertsOp> ops;
    func.walk([&](moe::ExpertsOp op) {
      if (llvm::all_of(matrices(op),
                       [&](Value w) { return experts.contains(w); }))
        ops.push_back(op);
    });
    for (moe::ExpertsOp op : ops)
      if (failed(quantizeExperts(op)))
        return failure();
    summary.expertNetworks += int64_t(ops.size());
    return success();
  }

private:
  static SmallVector<Value, 3> matrices(moe::ExpertsOp op) {
    SmallVector<Value, 3> result;
    for (Value w : {op.getW1(), op.getW3(), op.getW2()})
      if (w)
        result.push_back(w);
    return result;
  }

  /// A [K, N] right operand, stored [N, K].
  LogicalResult quantizeDense(Value w) {
    auto type = cast<RankedTensorType>(w.getType());
    std::vector<float> values;
    if (failed(readWeight(w, values)))
      return failure();
    const int64_t k = type.getDimSize(0), n = type.getDimSize(1);
    std::vector<float> stored = transposeMatrices(values, 1, k, n);
    builder.setInsertionPointAfterValue(w);
    FailureOr<Value> quantized =
        createQuantized(builder, w.getLoc(), type, /*transposed=*/true, stored,
                        k, getWeightName(w, counter++), options);
    if (failed(quantized))
      return failure();
    replace(w, *quantized);
    return success();
  }

  /// The experts' matrices, stored [E, out, in]: an in_out op's are
  /// transposed and the op becomes out_in.
  LogicalResult quantizeExperts(moe::ExpertsOp op) {
    bool inOut = op.getWeightLayout() == moe::WeightLayout::InOut;
    SmallVector<std::pair<unsigned, Value>> replacements;
    for (OpOperand &operand : op->getOpOperands()) {
      Value w = operand.get();
      if (!w || !llvm::is_contained(matrices(op), w))
        continue;
      auto it = done.find(w);
      if (it != done.end()) {
        replacements.push_back({operand.getOperandNumber(), it->second});
        continue;
      }
      auto type = cast<RankedTensorType>(w.getType());
      if (type.getRank() != 3)
        return op.emitError("--weight-dtype int4 expects [E, rows, cols] "
                            "expert matrices, got ")
               << type;
      const int64_t e = type.getDimSize(0), a = type.getDimSize(1),
                    b = type.getDimSize(2);
      std::vector<float> values;
      if (failed(readWeight(w, values)))
        return failure();
      int64_t cols = b;
      RankedTensorType storedType = type;
      if (inOut) {
        values = transposeMatrices(values, e, a, b);
        cols = a;
        storedType = RankedTensorType::get({e, b, a}, type.getElementType());
      }
      builder.setInsertionPointAfterValue(w);
      FailureOr<Value> quantized =
          createQuantized(builder, w.getLoc(), storedType, /*transposed=*/false,
                          values, cols, getWeightName(w, counter++), options);
      if (failed(quantized))
        return failure();
      done[w] = *quantized;
      replacements.push_back({operand.getOperandNumber(), *quantized});
    }
    for (auto [index, value] : replacements) {
      Value old = op->getOperand(index);
      op->setOperand(index, value);
      eraseIfDead(old);
    }
    if (inOut)
      op.setWeightLayout(moe::WeightLayout::OutIn);
    if (failed(mlir::verify(op)))
      return failure();
    return success();
  }

  void replace(Value old, Value quantized) {
    old.replaceAllUsesWith(quantized);
    eraseIfDead(old);
  }

  static void eraseIfDead(Value old) {
    Operation *def = old.getDefiningOp();
    if (!def || !def->use_empty())
      return;
    SmallVector<Value> inputs(def->getOperands());
    def->erase();
    for (Value input : inputs)
      eraseIfDead(input);
  }

  func::FuncOp func;
  const Int4Options &options;
  OpBuilder builder;
  llvm::DenseMap<Value, Value> done;
  int counter = 0;
};

} // namespace

FailureOr<Int4Summary> quantizeWeightsToInt4(ArrayRef<ModuleOp> modules,
                                             const Int4Options &options) {
  Int4Summary first;
  for (ModuleOp module : modules) {
    Int4Summary summary;
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    for (func::FuncOp func : funcs)
      if (failed(Int4Rewriter(func, options).run(summary)))
        return failure();
    if (module == modules.front())
      first = summary;
  }
  return first;
}

int64_t markInt8Activations(ArrayRef<ModuleOp> modules) {
  int64_t first = 0;
  for (ModuleOp module : modules) {
    int64_t marked = 0;
    module.walk([&](moe::BlockQuantizedConstantOp op) {
      op.setInt8Activations(true);
      ++marked;
    });
    if (module == modules.front())
      first = marked;
  }
  return first;
}

} // namespace moec::plan
