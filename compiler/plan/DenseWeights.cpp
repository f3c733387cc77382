//===- DenseWeights.cpp - Narrowed dense matrices in a plan ---------------===//
//
// Which dense matrices `--weight-dtype` narrows (DenseWeights.h).
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/DenseWeights.h"
#include "compiler/plan/WeightStorage.h"

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace moec::plan {
namespace {

/// The unit attribute that marks a constant --keep-f32 keeps wide.
constexpr llvm::StringLiteral kKeepF32 = "moe.keep_f32";

/// Whether `product` feeds a router: a moe.router, or a TopK through ops
/// that only move values or score them (a gate the detector left generic).
bool feedsRouter(Value product) {
  SmallVector<Value> work = {product};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value value = work.pop_back_val();
    if (!seen.insert(value).second)
      continue;
    for (Operation *user : value.getUsers()) {
      if (isa<moe::RouterOp, moe::TopKOp>(user))
        return true;
      if (isa<moe::ReshapeOp, moe::FlattenOp, moe::SqueezeOp, moe::UnsqueezeOp,
              moe::TransposeOp, moe::IdentityOp, moe::CastOp, moe::SoftmaxOp,
              moe::SigmoidOp, moe::AddOp>(user))
        for (Value result : user->getResults())
          work.push_back(result);
    }
  }
  return false;
}

/// Whether `use` is the right operand of an f32 moe.mat_mul that no router
/// reads.
bool isDenseProductUse(OpOperand &use) {
  auto matMul = dyn_cast<moe::MatMulOp>(use.getOwner());
  return matMul && use.getOperandNumber() == 1 &&
         cast<ShapedType>(matMul.getA().getType()).getElementType().isF32() &&
         cast<ShapedType>(matMul.getA().getType()).getRank() >= 1 &&
         !feedsRouter(matMul.getResult());
}

/// Whether constant `op` is a used f32 matrix of at least
/// kMinNarrowedDenseElements whose values are not a splat (a splat is a
/// folded value, not a trained matrix).
bool isTrainedMatrix(moe::ConstantOp op) {
  auto type = cast<RankedTensorType>(op.getType());
  if (type.getRank() != 2 || !type.getElementType().isF32() ||
      !type.hasStaticShape() ||
      type.getNumElements() < kMinNarrowedDenseElements || op->use_empty())
    return false;
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  return !dense || !dense.isSplat();
}

/// Whether constant `op` is a dense matrix --weight-dtype may narrow,
/// whatever --keep-f32 says.
bool isDenseMatrix(moe::ConstantOp op) {
  return isTrainedMatrix(op) && llvm::all_of(op->getUses(), [](OpOperand &use) {
           return isDenseProductUse(use);
         });
}

/// Whether constant `op` is an embedding table bf16 / f16 may narrow: an f32
/// matrix of at least kMinNarrowedDenseElements that only Gathers along its
/// rows read (a table tied to the output layer is read by a MatMul too and
/// stays f32), whatever --keep-f32 says.
bool isEmbeddingTable(moe::ConstantOp op) {
  return isTrainedMatrix(op) && llvm::all_of(op->getUses(), [](OpOperand &use) {
           auto gather = dyn_cast<moe::GatherOp>(use.getOwner());
           return gather && use.getOperandNumber() == 0 &&
                  gather.getAxis() == 0;
         });
}

} // namespace

llvm::DenseSet<Value> getNarrowableEmbeddings(func::FuncOp func,
                                              ExpertWeightType type) {
  llvm::DenseSet<Value> result;
  if (type != ExpertWeightType::BF16 && type != ExpertWeightType::F16)
    return result;
  func.walk([&](moe::ConstantOp op) {
    if (!op->hasAttr(kKeepF32) && isEmbeddingTable(op))
      result.insert(op.getResult());
  });
  return result;
}

llvm::DenseSet<Value> getNarrowableDenseWeights(func::FuncOp func,
                                                ExpertWeightType type) {
  llvm::DenseSet<Value> result;
  if (type == ExpertWeightType::F32)
    return result;
  func.walk([&](moe::ConstantOp op) {
    if (!op->hasAttr(kKeepF32) && isDenseMatrix(op))
      result.insert(op.getResult());
  });
  return result;
}

llvm::DenseSet<Value> getLinearDenseWeights(func::FuncOp func,
                                            ExpertWeightType type) {
  if (type != ExpertWeightType::F32)
    return getNarrowableDenseWeights(func, type);
  llvm::DenseSet<Value> result;
  func.walk([&](moe::ConstantOp op) {
    if (!op->hasAttr(kKeepF32) && isDenseMatrix(op))
      result.insert(op.getResult());
  });
  return result;
}

llvm::DenseSet<Value> getNarrowableWeights(func::FuncOp func,
                                           ExpertWeightType type) {
  llvm::DenseSet<Value> result = getNarrowableExpertWeights(func, type);
  for (Value value : getNarrowableDenseWeights(func, type))
    result.insert(value);
  for (Value value : getNarrowableEmbeddings(func, type))
    result.insert(value);
  return result;
}

LogicalResult keepDenseWeightsWide(ArrayRef<ModuleOp> modules,
                                   ArrayRef<std::string> names, bool all) {
  if (names.empty() && !all)
    return success();
  llvm::StringSet<> matched;
  for (ModuleOp module : modules)
    ModuleOp(module).walk([&](moe::ConstantOp op) {
      if (!isDenseMatrix(op) && !isEmbeddingTable(op))
        return;
      // The initializer's name, the names of the MatMul nodes that read it,
      // and the graph outputs their products are (`logits`).
      SmallVector<std::string> candidates = {getStepName(op)};
      for (Operation *user : op->getUsers()) {
        candidates.push_back(getStepName(user));
        for (OpOperand &use : user->getResult(0).getUses())
          if (isa<func::ReturnOp>(use.getOwner()))
            if (auto name = use.getOwner()
                                ->getParentOfType<func::FuncOp>()
                                .getResultAttrOfType<StringAttr>(
                                    use.getOperandNumber(), "moe.name"))
              candidates.push_back(name.str());
      }
      bool keep = all;
      for (const std::string &name : names)
        for (const std::string &candidate : candidates)
          if (StringRef(candidate).contains(name)) {
            matched.insert(name);
            keep = true;
          }
      if (keep)
        op->setAttr(kKeepF32, UnitAttr::get(op.getContext()));
    });
  for (const std::string &name : names)
    if (!matched.contains(name))
      return emitError(ModuleOp(modules.front()).getLoc())
             << "--keep-f32 '" << name
             << "' names no dense matrix that --weight-dtype narrows (it is "
                "matched against the names of MatMul weight and embedding "
                "initializers, of the MatMul and Gather nodes that read them "
                "and of the graph outputs their products are)";
  return success();
}

} // namespace moec::plan
