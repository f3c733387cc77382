//===- SharedExperts.cpp - dense expert networks and shared experts -------===//

#include "passes/SharedExperts.h"

#include "passes/MatchSupport.h"

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

std::optional<int64_t> SwiGlu::getFfnSize(int64_t hidden) {
  ExpertMlp mlp;
  mlp.w1 = w1;
  mlp.w3 = w3;
  mlp.w2 = w2;
  mlp.layout = layout;
  return mlp.getFfnSize(hidden);
}

std::optional<Failure> matchSwiGlu(Value output, SwiGlu &ffn) {
  std::optional<Linear> down = matchLinear(output);
  if (!down || !down->weight)
    return Failure("the expert output is not a matmul by a down-projection "
                   "weight");
  std::optional<std::pair<Value, Value>> glu = matchSiluGlu(down->input);
  std::optional<Linear> gate = glu ? matchLinear(glu->first) : std::nullopt;
  std::optional<Linear> up = glu ? matchLinear(glu->second) : std::nullopt;
  if (!gate || !up || gate->input != up->input)
    return Failure("the activation is not SwiGLU (silu(x @ w1) * (x @ w3))");
  if (!gate->weight || !up->weight)
    return Failure("gate or up projection is not a constant weight");
  if (gate->transposed != down->transposed ||
      up->transposed != down->transposed)
    return Failure("the projections mix [in, out] and [out, in] weights");
  ffn.input = gate->input;
  ffn.w1 = gate->weight;
  ffn.w3 = up->weight;
  ffn.w2 = down->weight;
  ffn.layout =
      down->transposed ? moe::WeightLayout::OutIn : moe::WeightLayout::InOut;
  return std::nullopt;
}

/// A Linear, plus the constant `[out]` bias added to it (null when none).
struct BiasedLinear {
  Linear linear;
  moe::ConstantOp bias;
};

/// Matches `output` as `linear` or `linear + b` (either operand order) with
/// a constant 1-D float b.
static std::optional<BiasedLinear> matchBiasedLinear(Value output) {
  if (std::optional<Linear> linear = matchLinear(output))
    return BiasedLinear{*linear, nullptr};
  // torch's Linear with a bias as one Gemm: x @ W^T + b with b as its C.
  if (auto gemm = output.getDefiningOp<moe::GemmOp>(); gemm && gemm.getC()) {
    moe::ConstantOp bias = getWeight(gemm.getC());
    if (!bias || bias.getType().getRank() != 1 || gemm.getTransA() != 0 ||
        gemm.getAlpha().convertToFloat() != 1.0f ||
        gemm.getBeta().convertToFloat() != 1.0f)
      return std::nullopt;
    return BiasedLinear{
        Linear{gemm.getA(), getWeight(gemm.getB()), gemm.getTransB() != 0},
        bias};
  }
  auto add = output.getDefiningOp<moe::AddOp>();
  if (!add)
    return std::nullopt;
  for (auto [product, biasValue] : {std::pair(add.getLhs(), add.getRhs()),
                                    std::pair(add.getRhs(), add.getLhs())}) {
    moe::ConstantOp bias = getWeight(biasValue);
    std::optional<Linear> linear = matchLinear(product);
    if (bias && linear && bias.getType().getRank() == 1)
      return BiasedLinear{*linear, bias};
  }
  return std::nullopt;
}

/// The activation `a = act(h)` applies to h, for the ungated activations
/// (relu, gelu, gelu_tanh, silu as `h * sigmoid(h)`); null when `a` is
/// none of them.
static Value matchUngated(Value a, moe::Activation &activation) {
  if (auto relu = a.getDefiningOp<moe::ReluOp>()) {
    activation = moe::Activation::Relu;
    return relu.getInput();
  }
  if (auto gelu = a.getDefiningOp<moe::GeluOp>()) {
    if (gelu.getApproximate() != "none" && gelu.getApproximate() != "tanh")
      return nullptr;
    activation = gelu.getApproximate() == "tanh" ? moe::Activation::GeluTanh
                                                 : moe::Activation::Gelu;
    return gelu.getInput();
  }
  if (auto silu = a.getDefiningOp<moe::MulOp>())
    for (auto [h, sigmoidValue] : {std::pair(silu.getLhs(), silu.getRhs()),
                                   std::pair(silu.getRhs(), silu.getLhs())})
      if (auto sigmoid = sigmoidValue.getDefiningOp<moe::SigmoidOp>();
          sigmoid && sigmoid.getInput() == h) {
        activation = moe::Activation::Silu;
        return h;
      }
  return nullptr;
}

/// The gated activation whose gate function is `ungated` (silu -> silu_glu,
/// gelu -> gelu_glu, gelu_tanh -> gelu_tanh_glu); nullopt for relu.
static std::optional<moe::Activation> getGated(moe::Activation ungated) {
  switch (ungated) {
  case moe::Activation::Silu:
    return moe::Activation::SiluGlu;
  case moe::Activation::Gelu:
    return moe::Activation::GeluGlu;
  case moe::Activation::GeluTanh:
    return moe::Activation::GeluTanhGlu;
  default:
    return std::nullopt;
  }
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
          h ? getGated(gateFunction) : std::nullopt;
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
  int64_t ffn = w1Type.getDimSize(outIn ? 0 : 1);
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
  if (!isMatrix(w1, hidden, ffn) || (w3 && !isMatrix(w3, hidden, ffn)) ||
      !isMatrix(w2, ffn, hidden) || !isVector(b1, ffn) || !isVector(b3, ffn) ||
      !isVector(b2, hidden))
    return std::nullopt;
  return ffn;
}

/// Whether `ffn` is an f32 SwiGLU on `tokens` (`[..., H]`).
static bool isSharedFfnOn(SwiGlu ffn, Value tokens) {
  int64_t hidden = cast<RankedTensorType>(tokens.getType()).getShape().back();
  return ffn.input == tokens && ffn.getFfnSize(hidden).has_value();
}

std::optional<SharedExpert>
matchSharedExpert(Value value, Value tokens, std::optional<Failure> &nearMiss) {
  SharedExpert shared;
  Value ffnValue = value;
  // sigmoid(x @ gate) [T, 1] broadcast over the FFN's [T, H] scales each row.
  if (auto mul = value.getDefiningOp<moe::MulOp>()) {
    for (auto [gateValue, other] : {std::pair{mul.getLhs(), mul.getRhs()},
                                    std::pair{mul.getRhs(), mul.getLhs()}}) {
      auto sigmoid = gateValue.getDefiningOp<moe::SigmoidOp>();
      std::optional<Linear> projection =
          sigmoid ? matchLinear(sigmoid.getInput()) : std::nullopt;
      if (!projection || !matchLinear(other))
        continue;
      shared.gate = projection->weight;
      ffnValue = other;
      int64_t hidden =
          cast<RankedTensorType>(tokens.getType()).getShape().back();
      // `[H, 1]` as `x @ g`, `[1, H]` as a Gemm's `x @ g^T`: one vector.
      SmallVector<int64_t, 2> gateShape = {hidden, 1};
      if (projection->transposed)
        std::swap(gateShape[0], gateShape[1]);
      if (!shared.gate || projection->input != tokens ||
          shared.gate.getType().getShape() != ArrayRef<int64_t>(gateShape) ||
          !shared.gate.getType().getElementType().isF32()) {
        if (!matchSwiGlu(ffnValue, shared.ffn))
          nearMiss = "its gate is not sigmoid(tokens @ w) with a constant "
                     "f32 [H, 1] weight w";
        return std::nullopt;
      }
      break;
    }
  }
  if (matchSwiGlu(ffnValue, shared.ffn))
    return std::nullopt;
  if (!isSharedFfnOn(shared.ffn, tokens) ||
      value.getType() != tokens.getType()) {
    nearMiss = "it is not an f32 SwiGLU MLP on the router's tokens with "
               "weights [H, F], [H, F], [F, H] (or all transposed)";
    return std::nullopt;
  }
  return shared;
}

/// Rewrites the shared experts on `input` added to `sum` into
/// `moe.shared_expert` on the `[T, H]` `tokens` flattened from `input`:
/// the expert acts row by row, so `F(input)` is `F(tokens)` reshaped to
/// `input`'s shape.
static void rewriteSharedExpertsAddedTo(StringRef pass, Value sum, Value input,
                                        Value tokens) {
  MLIRContext *context = sum.getContext();
  for (Operation *user : llvm::make_early_inc_range(sum.getUsers())) {
    auto add = dyn_cast<moe::AddOp>(user);
    if (!add || add.getLhs() == add.getRhs())
      continue;
    OpOperand &operand =
        add.getLhs() == sum ? add.getRhsMutable() : add.getLhsMutable();
    std::optional<Failure> nearMiss;
    std::optional<SharedExpert> shared =
        matchSharedExpert(operand.get(), input, nearMiss);
    if (!shared) {
      if (nearMiss)
        add.emitRemark("MoE shared expert not detected in the MLP added to "
                       "the routed experts' output: ")
            << *nearMiss;
      continue;
    }
    OpBuilder builder(add);
    Location loc = operand.get().getLoc();
    Value output = moe::SharedExpertOp::create(
        builder, loc, tokens, shared->ffn.w1,
        /*b1=*/Value(), shared->ffn.w3, /*b3=*/Value(), shared->ffn.w2,
        /*b2=*/Value(), shared->gate ? shared->gate.getOutput() : Value(),
        moe::ActivationAttr::get(context, moe::Activation::SiluGlu),
        moe::WeightLayoutAttr::get(context, shared->ffn.layout),
        /*glu_layout=*/nullptr, /*alpha=*/nullptr, /*beta=*/nullptr,
        /*limit=*/nullptr);
    if (input != tokens) {
      Value shape = moe::ShapeOp::create(builder, loc, input,
                                         builder.getI64IntegerAttr(0),
                                         /*end=*/nullptr);
      output =
          moe::ReshapeOp::create(builder, loc, input.getType(), output, shape);
    }
    if (succeeded(validateRewrite(pass, add, operand.get(), output, input)))
      operand.set(output);
  }
}

void rewriteSharedExperts(StringRef pass, moe::CombineOp combine,
                          Value tokens) {
  rewriteSharedExpertsAddedTo(pass, combine.getOutput(), tokens, tokens);
  // Exports often add the shared expert after reshaping the routed output
  // back to the model's [B, S, H], computing it on the [B, S, H] input the
  // tokens were flattened from.
  auto flatten = tokens.getDefiningOp<moe::ReshapeOp>();
  if (!flatten)
    return;
  Value input = flatten.getData();
  auto inputType = cast<RankedTensorType>(input.getType());
  if (inputType.getRank() < 2 ||
      inputType.getShape().back() !=
          cast<RankedTensorType>(tokens.getType()).getDimSize(1))
    return;
  for (Operation *user : combine.getOutput().getUsers())
    if (auto reshape = dyn_cast<moe::ReshapeOp>(user))
      if (reshape.getOutput().getType() == inputType)
        rewriteSharedExpertsAddedTo(pass, reshape.getOutput(), input, tokens);
}

} // namespace moec
