//===- WeightStorage.h - How a plan stores its weights ----------*- C++ -*-===//
//
// The plan emitter's two halves meet here. The weight-storage planner
// (WeightStorage.cpp) decides how each constant of a schedule is stored: as
// the model has it, narrowed to bf16 / f16 or quantized to int8, packed
// block-quantized, transposed, paged into a tiered section, or shared with
// an earlier schedule that holds the same bytes. The step serialiser
// (PlanEmitter.cpp) writes the schedule's tensors and steps and asks the
// planner for the weights its steps read.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PLAN_WEIGHTSTORAGE_H
#define MOEC_COMPILER_PLAN_WEIGHTSTORAGE_H

#include "compiler/plan/PlanEmitter.h"
#include "compiler/plan/QuantizedWeights.h"

#include "dialects/moe/MoeOps.h"

#include "format/plan_writer.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <optional>
#include <string>
#include <vector>

namespace moec::plan {

/// The runtime's dtype of an MLIR element type, if it has one.
std::optional<moert::DType> getDType(mlir::Type type);

/// A step's name for diagnostics and stats: the ONNX node name the importer
/// put into the location, else the op name.
std::string getStepName(mlir::Operation *op);

/// Fails with an error on `where` unless its tensor `what` ("input 'x'",
/// "a result", "its value") of sizes or bounds `dims` fits the limits the
/// runtime's loader checks (rank and dimension bound, format/format.h). moec
/// also loads every plan it writes, but the loader can only name the tensor;
/// this names the node, for every caller of the emitter. An empty
/// ConstantOfShape of [0, 2^41] is otherwise a valid graph.
mlir::LogicalResult checkPlanShape(mlir::Operation *where,
                                   const llvm::Twine &what,
                                   llvm::ArrayRef<int64_t> dims);

/// What the schedules of one plan share.
struct PlanState {
  PlanState(uint32_t devices, ExpertWeightType expertWeights,
            TierOptions tiers = {});
  moert::PlanWriter writer;
  uint32_t devices;
  /// The storage of the narrowable expert matrices.
  ExpertWeightType expertWeights;
  /// Tiered expert weights; per device, the paged section of its routed
  /// experts' weights (-1 until the first).
  TierOptions tiers;
  llvm::SmallVector<int> pagedSections;
  llvm::StringMap<int> symbols;
  /// The largest value of each symbol, by index.
  llvm::SmallVector<int64_t> symbolMax;
  /// Per device, the weight section of its expert shards (-1 until its first
  /// shard): a device that maps only its own pages reads no other device's
  /// experts.
  llvm::SmallVector<int> shardSections;
  /// The weights written so far, keyed by their contents (a constant's
  /// attribute, or the list of a stack's): the schedule and tensor that hold
  /// them. A later schedule reading the same weight shares its bytes.
  llvm::DenseMap<mlir::Attribute, std::pair<int, int32_t>> weights;
  /// The scales of the int8 weights among `weights`, by the same keys.
  llvm::DenseMap<mlir::Attribute, std::pair<int, int32_t>> scaleWeights;
  /// The paged expert weights written so far (and their scales), by the
  /// same keys: a tiered generation plan's prefill schedule reads its
  /// decode schedule's, so that one expert cache serves both.
  llvm::DenseMap<mlir::Attribute, std::pair<int, int32_t>> pagedWeights;
  llvm::DenseMap<mlir::Attribute, std::pair<int, int32_t>> pagedScaleWeights;
  /// Bytes that back dense constants until the plan is written.
  std::vector<std::vector<char>> constantBytes;
  /// Symbols whose minimum is 0 rather than 1 (a generation plan's pasts
  /// when one graph also runs the prompt).
  llvm::StringSet<> zeroMinSymbols;
  /// Whether weights are shared by their bytes, not only by their
  /// attribute: two imports of one model (a generation plan's prefill and
  /// decode graphs) hold the same initializer in different resources.
  bool shareByContent = false;
  /// The resource weights seen so far by type, with their bytes.
  llvm::DenseMap<
      mlir::Type,
      llvm::SmallVector<std::pair<mlir::Attribute, llvm::ArrayRef<char>>, 1>>
      resources;

  /// With shareByContent, `key` with every resource weight replaced by the
  /// first resource seen with the same type and bytes (compared byte for
  /// byte; differing weights differ in their first bytes, so a comparison
  /// with another weight of the same shape stops early), so that equal
  /// weights of different imports share one entry of `weights`.
  mlir::Attribute getContentKey(mlir::Attribute key);
};

/// The weight-storage planner of one schedule: writes the weights of
/// `func` (constants, block-quantized constants, stacks of constants,
/// shards) into `schedule` as the plan's options ask, numbering them in
/// `tensorIds`, and tiers the schedule's paged expert layers.
/// How a schedule of a tiered plan (PlanState::tiers) holds its routed
/// experts' weights.
enum class PagedExperts {
  /// Paged, and tiered by the schedule (a decode schedule).
  Own,
  /// The paged weights an earlier schedule wrote, with no tiers of its own
  /// (a prefill schedule, a multimodal plan's Prefill stage).
  Shared,
  /// Resident, as in an untiered plan (a multimodal plan's other stages).
  None,
};

class WeightStorage {
public:
  WeightStorage(mlir::func::FuncOp func, int device, PlanState &state,
                moert::ScheduleBuilder &schedule,
                llvm::DenseMap<mlir::Value, int32_t> &tensorIds,
                PagedExperts pagedExperts);

  /// Writes `op` when it is a weight: true. False for any other op.
  mlir::FailureOr<bool> emitWeight(mlir::Operation *op);

  /// The tensor of the int8 scales of matrix `w`, if it has any.
  std::optional<int32_t> getScales(mlir::Value w) const;

  /// Whether the [E, in, out] matrix `w` is stored transposed, [E, out, in]
  /// (getTransposableExpertWeights): its steps run the out_in layout.
  bool isTransposed(mlir::Value w) const { return transposed.contains(w); }

  /// Whether the [K, N] matrix `w` is a dense matrix stored [N, K]
  /// (getLinearDenseWeights): its MatMul steps are Linear steps.
  bool isLinearDense(mlir::Value w) const { return dense.contains(w); }

  /// The block-quantized constants stored packed.
  const llvm::DenseMap<mlir::Value, PackedWeight> &getPackedWeights() const {
    return packedWeights;
  }

  /// Records the step of a moe.experts op: the layer of a routing profile,
  /// and with tiers the tiered layer its paged weights form.
  mlir::LogicalResult addExpertsStep(moe::ExpertsOp op, int step);

  /// Tiers the schedule's layers whose weights were paged.
  mlir::LogicalResult emitTiers();

private:
  mlir::LogicalResult emitConstant(moe::ConstantOp op);
  mlir::LogicalResult emitQuantizedConstant(moe::BlockQuantizedConstantOp op);
  mlir::LogicalResult emitWeightStack(moe::StackOp op);
  mlir::LogicalResult emitShard(moe::ShardOp op);

  int getSection(mlir::Value value, int section = -1);
  std::optional<moert::DType> getNarrowedType(mlir::Value value) const;
  int32_t addPieces(mlir::Value value, std::string name, moert::DType dtype,
                    std::vector<int64_t> shape,
                    std::vector<moert::WeightPiece> pieces, int section = -1);
  mlir::Attribute getWeightKey(mlir::Attribute key, mlir::Value value) const;
  bool reuseWeight(mlir::Attribute key, mlir::Value result,
                   llvm::StringRef name);
  void recordWeight(mlir::Attribute key, mlir::Value result);
  mlir::Attribute getPagedKey(mlir::Attribute key, mlir::Value result);
  mlir::FailureOr<bool> shareWeight(mlir::Attribute key, mlir::Value result,
                                    llvm::StringRef name);
  mlir::FailureOr<llvm::ArrayRef<char>> getConstantData(moe::ConstantOp op,
                                                        moert::DType dtype);
  mlir::FailureOr<moert::WeightPiece> getStackPiece(moe::ConstantOp constant,
                                                    moert::DType dtype);
  int32_t addKeyedWeight(mlir::Attribute key, std::string name,
                         moert::DType dtype, std::vector<int64_t> shape,
                         llvm::ArrayRef<char> bytes);

  mlir::func::FuncOp func;
  int device;
  PlanState &state;
  moert::PlanWriter &writer;
  moert::ScheduleBuilder &schedule;
  llvm::DenseMap<mlir::Value, int32_t> &tensorIds;
  /// The expert matrices written as state.expertWeights.
  llvm::DenseSet<mlir::Value> narrowed;
  /// The routed experts' [E, in, out] matrices written as [E, out, in], and
  /// the dense matrices.
  llvm::DenseSet<mlir::Value> transposed;
  /// The dense matrices of Linear steps, [K, N] written as [N, K].
  llvm::DenseSet<mlir::Value> dense;
  /// For int8 matrices: the dimension of their output channels (1 or 2),
  /// and the tensor of their scales once written.
  llvm::DenseMap<mlir::Value, int> channelDims;
  llvm::DenseMap<mlir::Value, int32_t> scaleIds;
  /// The block-quantized constants stored packed.
  llvm::DenseMap<mlir::Value, PackedWeight> packedWeights;
  /// Tiered plans: the routed experts' weights written to the paged
  /// section, each with its MoE layer (in program order) and operand, and
  /// the tiered layers (their steps and expected loads).
  llvm::DenseMap<mlir::Value, std::pair<int, unsigned>> paged;
  std::vector<moert::ScheduleBuilder::TierLayer> tierLayers;
  /// The MoE layers by their w1 (one moe.experts op per micro-batch), and
  /// the tiered layer of each paged w1.
  llvm::DenseMap<mlir::Value, int> layerOfWeights;
  llvm::DenseMap<mlir::Value, size_t> tierLayerOfWeights;
  /// Whether the paged expert weights are an earlier schedule's.
  bool sharesPagedWeights = false;
  /// Whether the schedule pages its routed experts (a tiered plan's).
  bool pagesExperts = false;
};

} // namespace moec::plan

#endif // MOEC_COMPILER_PLAN_WEIGHTSTORAGE_H
