//===- DetectCapacityExperts.cpp - Experts on capacity slots --------------===//
//
// Switch as t5x writes it and GShard as DeepSpeed writes it run every expert
// on a fixed number C of slots: a `[T, E, C]` dispatch mask gathers each
// kept assignment's token into its expert's slot
// (`einsum("th,tec->ech")`), every expert runs on its `[C, H]` slots, and a
// `[T, E, C]` combine tensor sums each token's slots back, weighted
// (`einsum("ech,tec->th")`). CapacityGates.h proves the two tensors are
// what moe.router with `capacity C` decides; this pass proves the rest and
// rewrites the layer into the sparse ops, which run each token through its
// kept experts only and skip the empty slots.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/moe/LayerForm.h"
#include "dialects/moe/MoeOps.h"
#include "passes/CapacityGates.h"
#include "passes/MatchGates.h"
#include "passes/MatchSupport.h"
#include "passes/NearMiss.h"
#include "passes/SharedExperts.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/Support/FormatVariadic.h"

namespace moec {
#define GEN_PASS_DEF_MOEDETECTCAPACITYEXPERTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;
using namespace moec;

namespace {

using Failure = std::string;

/// The form named in near-miss remarks and in the report.
constexpr llvm::StringLiteral kForm = "capacity slots";

/// A matched layer: the gate, the tokens, the experts and the output.
struct CapacityLayer {
  CapacityGate gate;
  /// The `[T, H]` f32 tokens the dispatch einsum gathers.
  Value tokens;
  int64_t hidden = 0;
  /// The experts: stacked weights in `ffn`, or (the chunked form) each
  /// expert's network in `networks`, stacked by the rewrite.
  ExpertFfn ffn;
  SmallVector<ExpertMlp> networks;
  /// The `[T, H]` output einsum, replaced by the rewrite.
  Value result;
};

/// Matches the experts on the `[E, C, H]` slots `slots`: stacked weights in
/// einsums (`relu(einsum("ech,ehf->ecf", slots, w1))` then
/// `einsum("ecf,efh->ech", _, w2)`, or `[E, out, in]` weights), or each
/// expert's network on its `[1, C, H]` chunk (a Slice or Split of axis 0),
/// concatenated along axis 0. Returns the `[E, C, H]` expert outputs.
class ExpertsMatcher {
public:
  ExpertsMatcher(Value slots, int64_t experts, int64_t hidden, ExpertFfn &ffn,
                 SmallVectorImpl<ExpertMlp> &networks)
      : slots(slots), experts(experts), hidden(hidden), ffn(ffn),
        networks(networks) {}

  std::optional<Failure> match(Value &outputs) {
    for (Operation *user : slots.getUsers()) {
      if (auto einsum = dyn_cast<moe::EinsumOp>(user))
        return matchStacked(einsum, outputs);
      if (isa<moe::SliceOp, moe::SplitOp>(user))
        return matchChunks(outputs);
    }
    return Failure("the slots feed neither a stacked einsum nor per-expert "
                   "chunks");
  }

private:
  Value slots;
  int64_t experts, hidden;
  ExpertFfn &ffn;
  /// The per-expert networks of the chunked form, in expert order.
  SmallVectorImpl<ExpertMlp> &networks;

  /// The `[E, H, F]` (in_out) or `[E, F, H]` (out_in) f32 constant that
  /// `einsum` multiplies `input` (roles `inRoles`) by into `outRoles`.
  std::optional<moe::WeightLayout> matchBatched(moe::EinsumOp einsum,
                                                Value input, StringRef inRoles,
                                                StringRef outRoles,
                                                Value &weight) {
    if (einsum.getInputs().size() != 2)
      return std::nullopt;
    weight = einsum.getInputs()[0] == input ? einsum.getInputs()[1]
                                            : einsum.getInputs()[0];
    moe::ConstantOp constant = getWeight(weight);
    if (!constant || !constant.getType().getElementType().isF32())
      return std::nullopt;
    // inRoles "ecx", outRoles "ecy": weight "exy" is in_out, "eyx" out_in.
    std::string inOut = {'e', inRoles[2], outRoles[2]};
    std::string outIn = {'e', outRoles[2], inRoles[2]};
    if (isEinsumOf(einsum, input, inRoles, weight, inOut, outRoles))
      return moe::WeightLayout::InOut;
    if (isEinsumOf(einsum, input, inRoles, weight, outIn, outRoles))
      return moe::WeightLayout::OutIn;
    return std::nullopt;
  }

  std::optional<Failure> matchStacked(moe::EinsumOp up, Value &outputs) {
    Value w1, w2;
    std::optional<moe::WeightLayout> first =
        matchBatched(up, slots, "ech", "ecf", w1);
    auto relu = first ? getOnlyUserOf<moe::ReluOp>(up.getResult()) : nullptr;
    if (!first || !relu || !up.getResult().hasOneUse())
      return Failure("the stacked experts are not relu(einsum(\"ech,ehf->"
                     "ecf\", slots, w1)) with a constant [E, H, F] or "
                     "[E, F, H] w1");
    auto down = getOnlyUserOf<moe::EinsumOp>(relu.getOutput());
    std::optional<moe::WeightLayout> second =
        down ? matchBatched(down, relu.getOutput(), "ecf", "ech", w2)
             : std::nullopt;
    if (!second || *second != *first)
      return Failure("the stacked experts' down projection is not "
                     "einsum(\"ecf,efh->ech\") with a constant w2 in w1's "
                     "layout");
    ArrayRef<int64_t> shape1 = getShape(w1), shape2 = getShape(w2);
    bool inOut = *first == moe::WeightLayout::InOut;
    int64_t ffnSize = inOut ? shape1[2] : shape1[1];
    if (shape1[0] != experts || (inOut ? shape1[1] : shape1[2]) != hidden ||
        shape2 != (inOut ? ArrayRef<int64_t>{experts, ffnSize, hidden}
                         : ArrayRef<int64_t>{experts, hidden, ffnSize}))
      return Failure("the stacked expert weights are not [E, H, F] and "
                     "[E, F, H] (or both transposed)");
    ffn.w1 = w1;
    ffn.w2 = w2;
    ffn.activation = moe::Activation::Relu;
    ffn.layout = *first;
    outputs = down.getResult();
    return std::nullopt;
  }

  /// The chunk of expert `e` when `value` is `slots[e : e + 1]` along axis
  /// 0: a Slice with step 1, or result e of a Split into E parts of 1.
  std::optional<int64_t> getChunkExpert(Value value) {
    if (auto slice = value.getDefiningOp<moe::SliceOp>()) {
      std::optional<int64_t> start = moe::getConstantInt(slice.getStarts());
      std::optional<int64_t> end = moe::getConstantInt(slice.getEnds());
      if (slice.getData() != slots || !start || !end || *end != *start + 1 ||
          *start < 0 || *start >= experts ||
          (slice.getAxes() && !isConstAxes(slice.getAxes(), {0}, 3)) ||
          (slice.getSteps() && !isConstInt(slice.getSteps(), 1)))
        return std::nullopt;
      return *start;
    }
    auto split = value.getDefiningOp<moe::SplitOp>();
    if (!split || split.getInput() != slots || !isAxis(split.getAxis(), 0, 3) ||
        static_cast<int64_t>(split.getNumResults()) != experts ||
        (split.getSplit() && moe::getConstantInts(split.getSplit()) !=
                                 SmallVector<int64_t>(experts, 1)))
      return std::nullopt;
    return cast<OpResult>(value).getResultNumber();
  }

  /// The concat that the chain of single uses from `chunk` (an expert's
  /// network) ends in, within a few ops; null when there is none.
  static moe::ConcatOp findConcat(Value chunk) {
    Value y = chunk;
    for (int depth = 0; y && y.hasOneUse() && depth < 8; ++depth) {
      Operation *next = *y.getUsers().begin();
      if (auto concat = dyn_cast<moe::ConcatOp>(next))
        return concat;
      y = next->getNumResults() == 1 ? next->getResult(0) : Value();
    }
    return nullptr;
  }

  std::optional<Failure> matchChunks(Value &outputs) {
    // The expert outputs: concat(y_0, ..., y_{E-1}) along axis 0, each the
    // expert's network on its own chunk.
    moe::ConcatOp concat;
    for (Operation *user : slots.getUsers())
      for (Value chunk : user->getResults())
        if (!concat)
          concat = findConcat(chunk);
    if (!concat || !isAxis(concat.getAxis(), 0, 3) ||
        static_cast<int64_t>(concat.getInputs().size()) != experts)
      return Failure("the expert chunks' outputs are not concatenated along "
                     "the experts");
    networks.clear();
    for (auto [e, output] : llvm::enumerate(concat.getInputs())) {
      ExpertMlp mlp;
      if (auto failure = matchExpertMlp(output, mlp))
        return Failure(llvm::formatv("expert {0}: {1}", e, *failure).str());
      std::optional<int64_t> expert = getChunkExpert(mlp.input);
      if (!expert || *expert != static_cast<int64_t>(e))
        return Failure(llvm::formatv("expert {0}'s network does not read "
                                     "chunk {0} of the slots",
                                     e)
                           .str());
      // A fused gate/up w1 (2F outputs for an F-wide w2) is not taken.
      bool outIn = mlp.layout == moe::WeightLayout::OutIn;
      ArrayRef<int64_t> w1 = mlp.w1.getType().getShape();
      ArrayRef<int64_t> w2 = mlp.w2.getType().getShape();
      if (w1.size() != 2 || w2.size() != 2 ||
          w1[outIn ? 0 : 1] != w2[outIn ? 1 : 0])
        return Failure(llvm::formatv("expert {0}'s first projection is not "
                                     "as wide as its down projection's input",
                                     e)
                           .str());
      if (!mlp.getFfnSize(hidden) ||
          (!networks.empty() &&
           (mlp.getFfnSize(hidden) != networks[0].getFfnSize(hidden) ||
            mlp.activation != networks[0].activation ||
            mlp.layout != networks[0].layout || !mlp.b1 != !networks[0].b1 ||
            !mlp.w3 != !networks[0].w3 || !mlp.b3 != !networks[0].b3 ||
            !mlp.b2 != !networks[0].b2)))
        return Failure("the experts' networks differ in size, activation, "
                       "layout or biases");
      networks.push_back(mlp);
    }
    ffn.activation = networks[0].activation;
    ffn.layout = networks[0].layout;
    outputs = concat.getOutput();
    return std::nullopt;
  }
};

/// Matches the layer whose slots `gather` fills:
///
///   slots   = einsum("th,tec->ech", x, dispatch)     [E, C, H]
///   outputs = experts(slots)                         [E, C, H]
///   out     = einsum("ech,tec->th", outputs, combine)
///
/// With the gate proven (every slot holds at most one kept assignment's
/// token, combine that assignment's weight there and 0 elsewhere),
/// `out[t] = sum_j w[t, j] * FFN_{ids[t, j]}(x[t])` over the kept
/// assignments: what moe.router -> moe.dispatch -> moe.experts ->
/// moe.combine computes. An empty slot holds zeros, whose expert output
/// (the biases, through the network) every combine weight multiplies by 0.
std::optional<Failure> matchLayer(moe::EinsumOp gather, Value dispatch,
                                  CapacityLayer &layer) {
  Value tokens = gather.getInputs()[0] == dispatch ? gather.getInputs()[1]
                                                   : gather.getInputs()[0];
  ArrayRef<int64_t> tokensShape = getShape(tokens);
  if (tokensShape.size() != 2 || ShapedType::isDynamic(tokensShape[1]) ||
      !getElementTypeOrSelf(tokens.getType()).isF32())
    return Failure("the dispatched tokens are not an f32 [T, H] matrix");
  layer.tokens = tokens;
  layer.hidden = tokensShape[1];
  int64_t experts = getShape(dispatch)[1];
  Value outputs;
  ExpertsMatcher matcher(gather.getResult(), experts, layer.hidden, layer.ffn,
                         layer.networks);
  if (auto failure = matcher.match(outputs))
    return failure;
  moe::EinsumOp scatter;
  Value combine;
  for (Operation *user : outputs.getUsers()) {
    auto einsum = dyn_cast<moe::EinsumOp>(user);
    if (!einsum || einsum.getInputs().size() != 2)
      continue;
    Value other = einsum.getInputs()[0] == outputs ? einsum.getInputs()[1]
                                                   : einsum.getInputs()[0];
    if (isEinsumOf(einsum, outputs, "ech", other, "tec", "th")) {
      scatter = einsum;
      combine = other;
    }
  }
  if (!scatter)
    return Failure("the expert outputs are not summed back by "
                   "einsum(\"ech,tec->th\") with a combine tensor");
  if (auto failure = matchCapacityGate(dispatch, combine, layer.gate))
    return failure;
  layer.result = scatter.getResult();
  return std::nullopt;
}

/// Rewrites a matched layer; its ops die with the old output.
LogicalResult rewriteLayer(StringRef pass, CapacityLayer &layer) {
  const CapacityGate &gate = layer.gate;
  OpBuilder builder(layer.result.getDefiningOp());
  Location loc = layer.result.getLoc();
  MLIRContext *context = builder.getContext();
  RouterConfig config;
  config.topK = gate.topK;
  config.capacity = gate.capacity;
  config.keptEpsilon = gate.keptEpsilon;
  moe::RouterOp router = createRouter(builder, loc, gate.logits, config);
  auto dispatch =
      moe::DispatchOp::create(builder, loc, layer.tokens, router.getIndices(),
                              builder.getI64IntegerAttr(gate.numExperts));
  ExpertFfn &ffn = layer.ffn;
  if (!layer.networks.empty()) {
    // Per-expert constants: one stack each, never a copy.
    auto stack = [&](moe::ConstantOp ExpertMlp::*member) -> Value {
      if (!(layer.networks[0].*member))
        return nullptr;
      SmallVector<Value> pieces;
      for (ExpertMlp &mlp : layer.networks)
        pieces.push_back(mlp.*member);
      return moe::StackOp::create(builder, loc, pieces);
    };
    ffn.w1 = stack(&ExpertMlp::w1);
    ffn.b1 = stack(&ExpertMlp::b1);
    ffn.w3 = stack(&ExpertMlp::w3);
    ffn.b3 = stack(&ExpertMlp::b3);
    ffn.w2 = stack(&ExpertMlp::w2);
    ffn.b2 = stack(&ExpertMlp::b2);
  }
  auto experts = moe::ExpertsOp::create(
      builder, loc, dispatch.getRows(), dispatch.getOffsets(), ffn.w1, ffn.b1,
      ffn.w3, ffn.b3, ffn.w2, ffn.b2,
      moe::ActivationAttr::get(context, ffn.activation),
      moe::WeightLayoutAttr::get(context, ffn.layout),
      /*glu_layout=*/nullptr, /*alpha=*/nullptr, /*beta=*/nullptr,
      /*limit=*/nullptr);
  moe::setLayerForm(experts, kForm);
  // Dropped assignments contribute nothing: no pass-through.
  auto combine = moe::CombineOp::create(
      builder, loc, experts.getOutput(), dispatch.getSource(),
      router.getWeights(), /*passthrough=*/Value(), /*indices=*/Value());
  if (combine.getType() != layer.result.getType()) {
    recordNearMiss(gate.anchor, kForm,
                   "the combined output type differs from the layer's");
    eraseIfUnused(combine.getOutput());
    return failure();
  }
  return commitLayerRewrite(pass, gate.anchor, layer.result,
                            combine.getOutput(), layer.tokens);
}

struct DetectCapacityExpertsPass
    : public moec::impl::MoeDetectCapacityExpertsBase<
          DetectCapacityExpertsPass> {
  void runOnOperation() override {
    // Candidates: einsums that gather [T, H] tokens into [E, C, H] slots by
    // a [T, E, C] mask computed from an arg-max (the gate's anchor).
    SmallVector<std::pair<moe::EinsumOp, Value>> candidates;
    getOperation().walk([&](moe::EinsumOp einsum) {
      if (einsum.getInputs().size() != 2)
        return;
      for (auto [mask, tokens] :
           {std::pair(einsum.getInputs()[0], einsum.getInputs()[1]),
            std::pair(einsum.getInputs()[1], einsum.getInputs()[0])})
        if (isEinsumOf(einsum, mask, "tec", tokens, "th", "ech")) {
          candidates.push_back({einsum, mask});
          return;
        }
    });
    for (auto [gather, dispatch] : lastLayerFirst(candidates)) {
      moe::ArgMaxOp anchor = findCapacityAnchor(dispatch);
      if (!anchor)
        continue;
      CapacityLayer layer;
      if (auto failure = matchLayer(gather, dispatch, layer)) {
        recordNearMiss(anchor, kForm, *failure);
        continue;
      }
      (void)rewriteLayer(getArgument(), layer);
    }
    // The layers' ops are now dead; later passes and the plan never see
    // them.
    for (Block &block : getOperation().getBody())
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
        if (isOpTriviallyDead(&op))
          op.erase();
  }
};

} // namespace
