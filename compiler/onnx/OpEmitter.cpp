//===- OpEmitter.cpp - building graph ops from handlers -------------------===//

#include "compiler/onnx/OpEmitter.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

using namespace mlir;
using namespace moec::onnx_import;

SmallVector<Value> OpEmitter::emitAll(StringRef name, ArrayRef<Value> operands,
                                      ArrayRef<NamedAttribute> attrs,
                                      ArrayRef<int32_t> segments) {
  if (hasFailed || llvm::any_of(operands, [](Value v) { return !v; })) {
    hasFailed = true;
    return {};
  }
  MLIRContext *context = builder.getContext();
  std::optional<RegisteredOperationName> opName =
      RegisteredOperationName::lookup(name, context);
  assert(opName && "OpEmitter builds moe ops only");
  NamedAttrList attributes(attrs);
  if (!segments.empty())
    attributes.set("operandSegmentSizes",
                   DenseI32ArrayAttr::get(context, segments));
  // Inference reads the attributes from the op's properties: build the op
  // once without results to infer them, then with them.
  Operation *probe =
      Operation::create(loc, *opName, {}, operands, NamedAttrList(attributes),
                        OpaqueProperties(nullptr), {}, 0);
  SmallVector<Type> types;
  LogicalResult inferred = cast<InferTypeOpInterface>(probe).inferReturnTypes(
      context, loc, probe->getOperands(), probe->getAttrDictionary(),
      probe->getPropertiesStorage(), probe->getRegions(), types);
  if (mlir::failed(inferred)) {
    probe->destroy();
    hasFailed = true;
    return {};
  }
  Operation *op =
      Operation::create(loc, *opName, types, operands, NamedAttrList(),
                        probe->getPropertiesStorage(), {}, 0);
  op->setDiscardableAttrs(probe->getDiscardableAttrDictionary());
  probe->destroy();
  builder.insert(op);
  if (mlir::failed(mlir::verify(op))) {
    hasFailed = true;
    return {};
  }
  return SmallVector<Value>(op->getResults());
}
