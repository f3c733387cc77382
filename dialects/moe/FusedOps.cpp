//===- FusedOps.cpp - fused regions ---------------------------------------===//

#include "dialects/moe/MoeOps.h"

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
