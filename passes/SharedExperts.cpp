//===- SharedExperts.cpp - dense expert networks and shared experts -------===//

#include "passes/SharedExperts.h"

#include "passes/MatchFfn.h"
#include "passes/MatchSupport.h"

#include "mlir/IR/IRMapping.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace moec;

using Failure = std::string;

namespace moec {

moe::ConstantOp getWeight(Value value) {
  auto constant = value.getDefiningOp<moe::ConstantOp>();
  if (!constant || !isa<FloatType>(constant.getType().getElementType()))
    return nullptr;
  return constant;
}

std::optional<Linear> matchLinear(Value output) {
  if (auto matmul = output.getDefiningOp<moe::MatMulOp>())
    return Linear{matmul.getA(), getWeight(matmul.getB()), false};
  auto gemm = output.getDefiningOp<moe::GemmOp>();
  if (!gemm || gemm.getTransA() != 0 || gemm.getC() ||
      gemm.getAlpha().convertToFloat() != 1.0f)
    return std::nullopt;
  return Linear{gemm.getA(), getWeight(gemm.getB()), gemm.getTransB() != 0};
}

/// The h that `a = act(h)` applies an ungated activation to (MatchFfn.h's
/// plain activations: relu, gelu, gelu_tanh, silu as `h * sigmoid(h)`),
/// setting `activation`; null when `a` is none of them.
static Value matchUngated(Value a, moe::Activation &activation) {
  GatedActivation plain;
  if (!matchPlainActivation(a, plain))
    return nullptr;
  activation = plain.activation;
  return plain.fused;
}

std::optional<Failure> matchExpertMlp(Value output, ExpertMlp &ffn) {
  std::optional<BiasedLinear> down = matchBiasedLinear(output);
  if (!down || !down->linear.weight)
    return Failure("the expert output is not a matmul by a down-projection "
                   "weight (plus a bias)");
  Value activated = down->linear.input;
  std::optional<BiasedLinear> gate, up;
  moe::Activation activation = moe::Activation::Identity;
  if (Value h = matchUngated(activated, activation)) {
    gate = matchBiasedLinear(h);
  } else if (auto product = activated.getDefiningOp<moe::MulOp>()) {
    for (auto [gateTerm, upTerm] :
         {std::pair(product.getLhs(), product.getRhs()),
          std::pair(product.getRhs(), product.getLhs())}) {
      moe::Activation gateFunction = moe::Activation::Identity;
      Value h = matchUngated(gateTerm, gateFunction);
      std::optional<moe::Activation> gated =
          h ? getGatedActivation(gateFunction) : std::nullopt;
      if (!gated)
        continue;
      gate = matchBiasedLinear(h);
      up = matchBiasedLinear(upTerm);
      activation = *gated;
      if (gate && up)
        break;
    }
  }
  if (!gate || (up && up->linear.input != gate->linear.input) ||
      activation == moe::Activation::Identity)
    return Failure("the activation is neither act(x @ w1 + b1) (relu, gelu, "
                   "silu) nor act(x @ w1 + b1) * (x @ w3 + b3) (SwiGLU, "
                   "GeGLU)");
  if (!gate->linear.weight || (up && !up->linear.weight))
    return Failure("gate or up projection is not a constant weight");
  if (gate->linear.transposed != down->linear.transposed ||
      (up && up->linear.transposed != down->linear.transposed))
    return Failure("the projections mix [in, out] and [out, in] weights");
  ffn.input = gate->linear.input;
  ffn.w1 = gate->linear.weight;
  ffn.b1 = gate->bias;
  ffn.w3 = up ? up->linear.weight : nullptr;
  ffn.b3 = up ? up->bias : nullptr;
  ffn.w2 = down->linear.weight;
  ffn.b2 = down->bias;
  ffn.activation = activation;
  ffn.layout = down->linear.transposed ? moe::WeightLayout::OutIn
                                       : moe::WeightLayout::InOut;
  return std::nullopt;
}

std::optional<int64_t> ExpertMlp::getFfnSize(int64_t hidden) {
  auto w1Type = cast<RankedTensorType>(w1.getType());
  if (w1Type.getRank() != 2)
    return std::nullopt;
  bool outIn = layout == moe::WeightLayout::OutIn;
  // A fused gate/up projection has 2F outputs.
  int64_t width = w1Type.getDimSize(outIn ? 0 : 1);
  if (glu && width % 2 != 0)
    return std::nullopt;
  int64_t ffn = glu ? width / 2 : width;
  auto isF32 = [](moe::ConstantOp constant) {
    return constant.getType().getElementType().isF32();
  };
  auto isMatrix = [&](moe::ConstantOp weight, int64_t in, int64_t out) {
    ArrayRef<int64_t> shape = weight.getType().getShape();
    return isF32(weight) && shape == (outIn ? ArrayRef<int64_t>{out, in}
                                            : ArrayRef<int64_t>{in, out});
  };
  auto isVector = [&](moe::ConstantOp bias, int64_t size) {
    return !bias || (isF32(bias) &&
                     bias.getType().getShape() == ArrayRef<int64_t>{size});
  };
  if (!isMatrix(w1, hidden, width) || (w3 && !isMatrix(w3, hidden, ffn)) ||
      !isMatrix(w2, ffn, hidden) || !isVector(b1, width) ||
      !isVector(b3, ffn) || !isVector(b2, hidden))
    return std::nullopt;
  return ffn;
}

/// Matches `output` as an expert network whose gate and up projections are
/// one fused projection of size 2F (`act(g) * u` on its concatenated halves
/// or even/odd columns: GraniteMoeShared's `input_linear`, DeepSeek-V3's
/// fused exports); returns why it is not one.
static std::optional<Failure> matchFusedExpertMlp(Value output,
                                                  ExpertMlp &ffn) {
  std::optional<BiasedLinear> down = matchBiasedLinear(output);
  if (!down || !down->linear.weight)
    return Failure("the expert output is not a matmul by a down-projection "
                   "weight (plus a bias)");
  GatedActivation activation;
  if (std::optional<Failure> failure =
          matchGatedActivation(down->linear.input, activation))
    return failure;
  std::optional<BiasedLinear> fused = matchBiasedLinear(activation.fused);
  if (!fused || !fused->linear.weight)
    return Failure("the fused gate/up projection is not a matmul by a "
                   "constant weight (plus a bias)");
  if (fused->linear.transposed != down->linear.transposed)
    return Failure("the projections mix [in, out] and [out, in] weights");
  ffn = ExpertMlp();
  ffn.input = fused->linear.input;
  ffn.w1 = fused->linear.weight;
  ffn.b1 = fused->bias;
  ffn.w2 = down->linear.weight;
  ffn.b2 = down->bias;
  ffn.activation = activation.activation;
  ffn.glu = activation.glu;
  ffn.alpha = activation.alpha;
  ffn.beta = activation.beta;
  ffn.limit = activation.limit;
  ffn.layout = down->linear.transposed ? moe::WeightLayout::OutIn
                                       : moe::WeightLayout::InOut;
  return std::nullopt;
}

/// Whether `op` only reshapes its first operand (a Reshape, Flatten,
/// Squeeze or Unsqueeze): its result holds the same elements in the same
/// row-major order.
static bool isView(Operation *op) {
  return isa<moe::ReshapeOp, moe::FlattenOp, moe::SqueezeOp, moe::UnsqueezeOp>(
      op);
}

/// The value whose elements `value` holds in the same row-major order:
/// `value` with the views in front of it peeled.
static Value getElementSource(Value value) {
  while (Operation *op = value.getDefiningOp()) {
    if (!isView(op))
      break;
    value = op->getOperand(0);
  }
  return value;
}

/// Whether `value` holds the rows of the `[T, H]` `tokens`: the same
/// elements in the same order, with the static last dimension H. A network
/// applied row by row then gives, on `value`, its output on `tokens`
/// reshaped to `value`'s shape.
static bool isRowView(Value value, Value tokens) {
  ArrayRef<int64_t> shape = getShape(value);
  int64_t hidden = getShape(tokens).back();
  return !shape.empty() && !ShapedType::isDynamic(hidden) &&
         shape.back() == hidden &&
         getElementSource(value) == getElementSource(tokens);
}

/// Why `output`, the down projection of `g(x @ w1 + b1) * (x @ w3 + b3)`
/// on the rows of `tokens` with a gate function g the runtime has no gated
/// form of (ReGLU, a sigmoid or tanh GLU), is not a shared expert; nullopt
/// when it is no such network.
static std::optional<Failure> getUnsupportedGlu(Value output, Value tokens) {
  std::optional<BiasedLinear> down = matchBiasedLinear(output);
  auto product = down && down->linear.weight
                     ? down->linear.input.getDefiningOp<moe::MulOp>()
                     : nullptr;
  if (!product)
    return std::nullopt;
  for (auto [gateTerm, upTerm] :
       {std::pair(product.getLhs(), product.getRhs()),
        std::pair(product.getRhs(), product.getLhs())}) {
    Operation *function = gateTerm.getDefiningOp();
    std::optional<BiasedLinear> up = matchBiasedLinear(upTerm);
    if (!function || function->getNumOperands() != 1 || !up ||
        !isRowView(up->linear.input, tokens))
      continue;
    std::optional<BiasedLinear> gate =
        matchBiasedLinear(function->getOperand(0));
    if (gate && gate->linear.input == up->linear.input)
      return "its gated activation " +
             function->getName().getStringRef().str() +
             "(x @ w1) * (x @ w3) has no moe.shared_expert form (the runtime "
             "gates with silu, gelu or gelu_tanh)";
  }
  return std::nullopt;
}

std::optional<SharedExpert>
matchSharedExpert(Value value, Value tokens, std::optional<Failure> &nearMiss) {
  SharedExpert shared;
  Value ffnValue = value;
  // sigmoid(x @ gate) [..., 1] broadcast over the network's [..., H] scales
  // each row.
  std::optional<Linear> gate;
  if (auto mul = value.getDefiningOp<moe::MulOp>()) {
    for (auto [gateValue, other] : {std::pair{mul.getLhs(), mul.getRhs()},
                                    std::pair{mul.getRhs(), mul.getLhs()}}) {
      auto sigmoid = gateValue.getDefiningOp<moe::SigmoidOp>();
      gate = sigmoid ? matchLinear(sigmoid.getInput()) : std::nullopt;
      if (gate && matchBiasedLinear(other)) {
        ffnValue = other;
        break;
      }
      gate.reset();
    }
  }
  if (matchExpertMlp(ffnValue, shared.ffn) &&
      matchFusedExpertMlp(ffnValue, shared.ffn)) {
    if (std::optional<Failure> why = getUnsupportedGlu(ffnValue, tokens))
      nearMiss = *why;
    return std::nullopt;
  }
  int64_t hidden = getShape(tokens).back();
  if (!isRowView(shared.ffn.input, tokens) || !shared.ffn.getFfnSize(hidden) ||
      value.getType() != shared.ffn.input.getType()) {
    nearMiss = "it is not an f32 SwiGLU MLP on the router's tokens (nor "
               "another expert network on them) with weights [H, F], "
               "[H, F], [F, H] (or all transposed; [H, 2F] fused)";
    return std::nullopt;
  }
  if (!gate)
    return shared;
  // `[H, 1]` as `x @ g`, `[1, H]` as a Gemm's `x @ g^T`: one vector.
  shared.gate = gate->weight;
  SmallVector<int64_t, 2> gateShape = {hidden, 1};
  if (gate->transposed)
    std::swap(gateShape[0], gateShape[1]);
  if (!shared.gate || gate->input != shared.ffn.input ||
      shared.gate.getType().getShape() != ArrayRef<int64_t>(gateShape) ||
      !shared.gate.getType().getElementType().isF32()) {
    nearMiss = "its gate is not sigmoid(tokens @ w) with a constant f32 "
               "[H, 1] weight w";
    return std::nullopt;
  }
  return shared;
}

/// Builds `moe.shared_expert` computing `shared` on the `[T, H]` `tokens`,
/// reshaped to the shape of the network's own input (a row view of them).
static Value createSharedExpert(OpBuilder &builder, Location loc,
                                SharedExpert shared, Value tokens) {
  MLIRContext *context = builder.getContext();
  ExpertMlp &ffn = shared.ffn;
  auto value = [](moe::ConstantOp constant) {
    return constant ? constant.getOutput() : Value();
  };
  auto f32 = [&](std::optional<float> number) {
    return number ? builder.getF32FloatAttr(*number) : FloatAttr();
  };
  Value output = moe::SharedExpertOp::create(
      builder, loc, tokens, ffn.w1.getOutput(), value(ffn.b1), value(ffn.w3),
      value(ffn.b3), ffn.w2.getOutput(), value(ffn.b2), value(shared.gate),
      moe::ActivationAttr::get(context, ffn.activation),
      moe::WeightLayoutAttr::get(context, ffn.layout),
      ffn.glu ? moe::GluLayoutAttr::get(context, *ffn.glu)
              : moe::GluLayoutAttr(),
      f32(ffn.alpha), f32(ffn.beta), f32(ffn.limit));
  Value input = ffn.input;
  if (input == tokens)
    return output;
  Value shape =
      moe::ShapeOp::create(builder, loc, input, builder.getI64IntegerAttr(0),
                           /*end=*/nullptr);
  return moe::ReshapeOp::create(builder, loc, input.getType(), output, shape);
}

/// Rewrites the shared experts added to `sum` (the routed experts' combined
/// output on the `[T, H]` `tokens`, a reshape of it, or its sum with shared
/// experts already rewritten) into `moe.shared_expert` on `tokens`, and
/// appends each such Add's result to `sums`. Exports add the network's
/// output as it is or reshaped (AFMoE computes it on the flattened tokens
/// and adds it to the routed output reshaped back to `[B, S, H]`); the
/// reshapes between the network and the Add are kept, applied to the new
/// output.
static void rewriteSharedExpertsAddedTo(StringRef pass, Value sum, Value tokens,
                                        SmallVectorImpl<Value> &sums) {
  for (Operation *user : llvm::make_early_inc_range(sum.getUsers())) {
    auto add = dyn_cast<moe::AddOp>(user);
    if (!add || add.getLhs() == add.getRhs())
      continue;
    OpOperand &operand =
        add.getLhs() == sum ? add.getRhsMutable() : add.getLhsMutable();
    // The views between the network and the Add, innermost last; each
    // intermediate value has no other use, so that the network dies.
    SmallVector<Operation *> views;
    Value network = operand.get();
    while (Operation *op = network.getDefiningOp()) {
      if (!isView(op) || !op->getOperand(0).hasOneUse())
        break;
      views.push_back(op);
      network = op->getOperand(0);
    }
    std::optional<Failure> nearMiss;
    std::optional<SharedExpert> shared =
        matchSharedExpert(network, tokens, nearMiss);
    if (!shared) {
      if (nearMiss)
        add.emitRemark("MoE shared expert not detected in the MLP added to "
                       "the routed experts' output: ")
            << *nearMiss;
      continue;
    }
    OpBuilder builder(add);
    Value output =
        createSharedExpert(builder, network.getLoc(), *shared, tokens);
    IRMapping mapping;
    for (Operation *view : llvm::reverse(views)) {
      mapping.map(view->getOperand(0), output);
      output = builder.clone(*view, mapping)->getResult(0);
    }
    // Validated from the source of the tokens' elements, which both sides
    // read (the network's input may be the [B, S, H] input of the tokens).
    if (failed(validateRewrite(pass, add, operand.get(), output,
                               getElementSource(tokens))))
      continue;
    operand.set(output);
    sums.push_back(add.getOutput());
  }
}

void rewriteSharedExperts(StringRef pass, moe::CombineOp combine,
                          Value tokens) {
  // Exports often add the shared expert after reshaping the routed output
  // back to the model's [B, S, H]: every view of the combined output, and
  // of its sums with the shared experts rewritten (DeepSeek's
  // `routed + shared_1 + shared_2`).
  SmallVector<Value> sums = {combine.getOutput()};
  for (size_t i = 0; i < sums.size(); ++i) {
    Value sum = sums[i];
    for (Operation *user : sum.getUsers())
      if (isView(user) && user->getOperand(0) == sum)
        sums.push_back(user->getResult(0));
    rewriteSharedExpertsAddedTo(pass, sum, tokens, sums);
  }
}

} // namespace moec
