//===- FusedOps.cpp - fused regions ---------------------------------------===//

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/TypeUtilities.h"

#include <cmath>
#include <tuple>

using namespace mlir;
using namespace moec::moe;

LogicalResult FusedElementwiseOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("has ")
           << getInputs().size() << " inputs but its body takes "
           << body.getNumArguments() << " arguments";
  for (auto [index, input, arg] :
       llvm::enumerate(getInputs(), body.getArguments()))
    if (input.getType() != arg.getType())
      return emitOpError("input #")
             << index << " has type " << input.getType()
             << " but the body argument has type " << arg.getType();
  auto yield = dyn_cast_or_null<YieldOp>(body.empty() ? nullptr : &body.back());
  if (!yield)
    return emitOpError("body must end with moe.yield");
  if (yield.getValues().getTypes() != getOutputs().getTypes())
    return emitOpError("yields ")
           << yield.getValues().getTypes() << " but its results are "
           << getOutputs().getTypes();
  if (getOutputs().empty())
    return emitOpError("must produce at least one result");
  return success();
}

//===----------------------------------------------------------------------===//
// moe.attention
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto query = cast<RankedTensorType>(adaptor.getQuery().getType());
  auto value = cast<RankedTensorType>(adaptor.getValue().getType());
  if (query.getRank() != 4 || value.getRank() != 4)
    return emitOptionalError(location, "'moe.attention' op expects query and ",
                             "value of rank 4, got ", query, " and ", value);
  types.push_back(
      RankedTensorType::get({query.getDimSize(0), query.getDimSize(1),
                             query.getDimSize(2), value.getDimSize(3)},
                            query.getElementType()));
  return success();
}

/// Whether static sizes `a` and `b` may be equal (either is dynamic).
static bool mayEqual(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

LogicalResult AttentionOp::verify() {
  RankedTensorType query = getQuery().getType(), key = getKey().getType(),
                   value = getValue().getType();
  for (auto [name, type] : {std::pair("key", key), std::pair("value", value)})
    if (type.getRank() != 4)
      return emitOpError("expects ")
             << name << " of rank 4 ([B, Hkv, Skv, D]), got " << type;
  ArrayRef<int64_t> q = query.getShape(), k = key.getShape(),
                    v = value.getShape();
  if (!mayEqual(q[3], k[3]))
    return emitOpError("expects query and key of the same head size, got ")
           << query << " and " << key;
  for (int d = 0; d < 3; ++d)
    if (!mayEqual(k[d], v[d]))
      return emitOpError("expects key and value to agree in dimension ")
             << d << ", got " << key << " and " << value;
  if (!ShapedType::isDynamic(k[0]) && k[0] != 1 && !mayEqual(k[0], q[0]))
    return emitOpError("expects key batch 1 or the query's batch, got ")
           << key << " for " << query;
  if (!ShapedType::isDynamic(k[1]) && !ShapedType::isDynamic(q[1]) &&
      (k[1] == 0 || q[1] % k[1] != 0))
    return emitOpError("expects the key/value heads to divide the query "
                       "heads, got ")
           << k[1] << " and " << q[1];
  if (Value mask = getMask()) {
    auto maskType = cast<RankedTensorType>(mask.getType());
    int64_t scores[4] = {q[0], q[1], q[2], k[2]};
    if (maskType.getRank() != 4)
      return emitOpError("expects a mask of rank 4, got ") << maskType;
    for (int d = 0; d < 4; ++d) {
      int64_t size = maskType.getDimSize(d);
      if (size != 1 && !mayEqual(size, scores[d]))
        return emitOpError("expects mask dimension ")
               << d << " to be 1 or the scores' size " << scores[d] << ", got "
               << maskType;
    }
  }
  if (Value sinks = getSinks()) {
    auto sinksType = cast<RankedTensorType>(sinks.getType());
    if (sinksType.getRank() != 1 || !mayEqual(sinksType.getDimSize(0), q[1]))
      return emitOpError("expects sinks of shape [H], one per query head, "
                         "got ")
             << sinksType << " for " << query;
  }
  // NaN fails the comparison too: a cap must bound the scores.
  float softcap = getSoftcap().convertToFloat();
  if (!(softcap >= 0.0f) || std::isinf(softcap))
    return emitOpError("expects a finite non-negative softcap (0: none), got ")
           << softcap;
  auto result = getOutput().getType();
  int64_t expected[4] = {q[0], q[1], q[2], v[3]};
  for (int d = 0; d < 4; ++d)
    if (!mayEqual(result.getDimSize(d), expected[d]))
      return emitOpError("expects a result of shape [B, H, Sq, Dv], got ")
             << result;
  return success();
}

ParseResult AttentionOp::parseValueAndOptionalTypes(
    OpAsmParser &parser, Type &valueType,
    const std::optional<OpAsmParser::UnresolvedOperand> &mask, Type &maskType,
    const std::optional<OpAsmParser::UnresolvedOperand> &sinks,
    Type &sinksType) {
  if (parser.parseType(valueType))
    return failure();
  if (mask && (parser.parseComma() || parser.parseType(maskType)))
    return failure();
  if (sinks && (parser.parseComma() || parser.parseType(sinksType)))
    return failure();
  return success();
}

void AttentionOp::printValueAndOptionalTypes(OpAsmPrinter &printer, Operation *,
                                             Type valueType, Value mask,
                                             Type maskType, Value sinks,
                                             Type sinksType) {
  printer << valueType;
  if (mask)
    printer << ", " << maskType;
  if (sinks)
    printer << ", " << sinksType;
}

//===----------------------------------------------------------------------===//
// moe.gated_delta_rule
//===----------------------------------------------------------------------===//

LogicalResult GatedDeltaRuleOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  auto value = cast<RankedTensorType>(adaptor.getValue().getType());
  auto state = cast<RankedTensorType>(adaptor.getState().getType());
  if (value.getRank() != 4)
    return emitOptionalError(location,
                             "'moe.gated_delta_rule' op expects a value of "
                             "rank 4 ([B, S, Hv, Dv]), got ",
                             value);
  types.push_back(value);
  types.push_back(state);
  return success();
}

LogicalResult GatedDeltaRuleOp::verify() {
  RankedTensorType query = getQuery().getType(), key = getKey().getType(),
                   value = getValue().getType(), state = getState().getType(),
                   decay = getDecay().getType(), beta = getBeta().getType();
  for (auto [name, type, rank] :
       {std::tuple("query", query, 4), std::tuple("key", key, 4),
        std::tuple("value", value, 4), std::tuple("state", state, 4),
        std::tuple("decay", decay, 3), std::tuple("beta", beta, 3)})
    if (type.getRank() != rank)
      return emitOpError("expects ")
             << name << " of rank " << rank << ", got " << type;
  ArrayRef<int64_t> q = query.getShape(), k = key.getShape(),
                    v = value.getShape(), s = state.getShape();
  for (auto [name, type] : {std::pair("key", key), std::pair("value", value),
                            std::pair("decay", decay), std::pair("beta", beta)})
    for (int d = 0; d < 2; ++d)
      if (!mayEqual(type.getDimSize(d), q[d]))
        return emitOpError("expects ")
               << name << " to agree with the query in dimension " << d
               << " (batch, sequence), got " << type << " and " << query;
  if (!mayEqual(s[0], q[0]))
    return emitOpError("expects a state of the query's batch, got ")
           << state << " and " << query;
  if (!mayEqual(q[3], k[3]) || !mayEqual(k[3], s[2]))
    return emitOpError("expects query, key and state dimension 2 of one key "
                       "size, got ")
           << query << ", " << key << " and " << state;
  if (!mayEqual(v[3], s[3]))
    return emitOpError("expects value and state dimension 3 of one value "
                       "size, got ")
           << value << " and " << state;
  for (auto [name, size] :
       {std::pair("state", s[1]), std::pair("decay", decay.getDimSize(2)),
        std::pair("beta", beta.getDimSize(2))})
    if (!mayEqual(size, v[2]))
      return emitOpError("expects ") << name << " to have the value's " << v[2]
                                     << " heads, got " << size;
  for (auto [name, heads] : {std::pair("query", q[2]), std::pair("key", k[2])})
    if (!ShapedType::isDynamic(heads) && !ShapedType::isDynamic(v[2]) &&
        (heads == 0 || v[2] % heads != 0))
      return emitOpError("expects the ")
             << name << " heads to divide the value heads, got " << heads
             << " and " << v[2];
  float scale = getScale().convertToFloat();
  if (!std::isfinite(scale))
    return emitOpError("expects a finite scale, got ") << scale;
  for (auto [name, result, expected] :
       {std::tuple("output", getOutput().getType(), value),
        std::tuple("new state", getNewState().getType(), state)})
    if (failed(verifyCompatibleShape(result, expected)))
      return emitOpError("expects the ")
             << name << " to have shape " << expected << ", got " << result;
  return success();
}

//===----------------------------------------------------------------------===//
// moe.causal_conv
//===----------------------------------------------------------------------===//

LogicalResult CausalConvOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> location,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  if (input.getRank() != 3)
    return emitOptionalError(location,
                             "'moe.causal_conv' op expects an input of rank "
                             "3 ([B, C, L]), got ",
                             input);
  types.push_back(input);
  types.push_back(adaptor.getState().getType());
  return success();
}

LogicalResult CausalConvOp::verify() {
  RankedTensorType input = getInput().getType(), weight = getWeight().getType(),
                   state = getState().getType();
  if (input.getRank() != 3 || state.getRank() != 3)
    return emitOpError("expects an input and a state of rank 3, got ")
           << input << " and " << state;
  if (weight.getRank() != 2 || !weight.hasStaticShape() ||
      weight.getDimSize(1) < 1)
    return emitOpError("expects a static [channels, kernel] weight, got ")
           << weight;
  int64_t channels = weight.getDimSize(0), kernel = weight.getDimSize(1);
  if (!mayEqual(input.getDimSize(1), channels) ||
      !mayEqual(state.getDimSize(1), channels))
    return emitOpError("expects input and state of the weight's ")
           << channels << " channels, got " << input << " and " << state;
  if (!mayEqual(state.getDimSize(0), input.getDimSize(0)) ||
      !mayEqual(state.getDimSize(2), kernel - 1))
    return emitOpError("expects a state [batch, channels, ")
           << kernel - 1 << "] (the kernel's history), got " << state;
  if (Value bias = getBias()) {
    auto type = cast<RankedTensorType>(bias.getType());
    if (type.getRank() != 1 || !mayEqual(type.getDimSize(0), channels))
      return emitOpError("expects a bias [") << channels << "], got " << type;
  }
  for (auto [name, result, expected] :
       {std::tuple("output", getOutput().getType(), input),
        std::tuple("new state", getNewState().getType(), state)})
    if (failed(verifyCompatibleShape(result, expected)))
      return emitOpError("expects the ")
             << name << " to have shape " << expected << ", got " << result;
  return success();
}
