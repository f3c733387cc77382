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
  auto w1Type = cast<RankedTensorType>(w1.getType());
  if (w1Type.getRank() != 2)
    return std::nullopt;
  bool outIn = layout == moe::WeightLayout::OutIn;
  int64_t ffn = w1Type.getDimSize(outIn ? 0 : 1);
  auto expect = [&](moe::ConstantOp weight, int64_t in, int64_t out) {
    auto type = cast<RankedTensorType>(weight.getType());
    ArrayRef<int64_t> shape = type.getShape();
    return type.getElementType().isF32() &&
           shape == (outIn ? ArrayRef<int64_t>{out, in}
                           : ArrayRef<int64_t>{in, out});
  };
  if (!expect(w1, hidden, ffn) || !expect(w3, hidden, ffn) ||
      !expect(w2, ffn, hidden))
    return std::nullopt;
  return ffn;
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
