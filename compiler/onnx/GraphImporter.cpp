//===- GraphImporter.cpp - ONNX graph to a func.func ----------------------===//

#include "compiler/onnx/GraphImporter.h"

#include "compiler/onnx/Diagnostics.h"

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace moec::onnx_import;

GraphImporter::GraphImporter(const OnnxModel &model, MLIRContext *context)
    : model(model), context(context), builder(context), tensors(model),
      table(OpImportTable::get()) {
  for (const onnx::TensorProto &tensor : model.getGraph().initializer())
    initializers[tensor.name()] = &tensor;
}

/// Returns the tensor type of a validated graph input or output: ONNX's
/// symbolic and unknown dimensions are dynamic; a dim_param of digits is
/// the static size it spells.
static RankedTensorType getTensorType(const onnx::TypeProto::Tensor &type,
                                      MLIRContext *context) {
  SmallVector<int64_t> shape;
  for (const onnx::TensorShapeProto::Dimension &dim : type.shape().dim())
    shape.push_back(getStaticDimSize(dim).value_or(ShapedType::kDynamic));
  return RankedTensorType::get(shape,
                               convertDataType(context, type.elem_type()));
}

DictionaryAttr
GraphImporter::getValueInfoAttrs(const onnx::ValueInfoProto &value) {
  // `moe.name` keeps the ONNX name (for feeding inputs and naming outputs);
  // `moe.dim_params` keeps each dimension's symbolic name ("" where there is
  // none) so that later stages know which `?` is the token count.
  NamedAttrList attrs;
  attrs.append("moe.name", builder.getStringAttr(value.name()));
  const onnx::TypeProto::Tensor &type = value.type().tensor_type();
  SmallVector<Attribute> dimParams;
  bool anyDimParam = false;
  for (const onnx::TensorShapeProto::Dimension &dim : type.shape().dim()) {
    // A dim_param of digits is a static size, not a name.
    bool isName = dim.has_dim_param() && !getStaticDimSize(dim);
    anyDimParam |= isName && !dim.dim_param().empty();
    dimParams.push_back(
        builder.getStringAttr(isName ? dim.dim_param() : std::string()));
  }
  if (anyDimParam)
    attrs.append("moe.dim_params", builder.getArrayAttr(dimParams));
  return attrs.getDictionary(context);
}

LogicalResult GraphImporter::importSignature(ModuleOp module) {
  // A graph input that an initializer also defines is a weight with a
  // default value (older exporters list weights as inputs): it is imported
  // as the constant, not as an argument.
  SmallVector<const onnx::ValueInfoProto *> inputs;
  for (const onnx::ValueInfoProto &input : model.getGraph().input())
    if (!initializers.count(input.name()))
      inputs.push_back(&input);

  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  for (const onnx::ValueInfoProto *input : inputs) {
    argTypes.push_back(getTensorType(input->type().tensor_type(), context));
    argAttrs.push_back(getValueInfoAttrs(*input));
  }
  builder.setInsertionPointToEnd(module.getBody());
  func = func::FuncOp::create(builder, model.loc, "main",
                              builder.getFunctionType(argTypes, {}));
  func.setAllArgAttrs(argAttrs);
  Block *entry = func.addEntryBlock();
  for (auto [input, arg] : llvm::zip(inputs, entry->getArguments()))
    mapValue(input->name(), arg);
  builder.setInsertionPointToEnd(entry);
  return success();
}

FailureOr<Value> GraphImporter::lookupValue(StringRef name) {
  auto it = values.find(name);
  if (it != values.end())
    return it->second;
  // Initializers are imported at their first use, so unused ones cost
  // nothing.
  const onnx::TensorProto *tensor = initializers.lookup(name);
  if (!tensor)
    return emitError(model.loc) << "value '" << name << "' is not defined";
  Location loc = model.getSubjectLoc("initializer '" + name + "'");
  FailureOr<ElementsAttr> attr = tensors.read(*tensor, loc, name);
  if (failed(attr))
    return failure();
  Value value =
      moec::moe::ConstantOp::create(builder, loc, attr->getType(), *attr);
  mapValue(name, value);
  return value;
}

void GraphImporter::mapValue(StringRef name, Value value) {
  values[name] = value;
}

LogicalResult GraphImporter::checkSupport() {
  // Every node is checked before any is imported: an unsupported op fails
  // the import at once instead of after the ops before it were built.
  for (int index : model.nodeOrder) {
    const onnx::NodeProto &node = model.getGraph().node(index);
    StringRef domain = normalizeDomain(node.domain());
    int64_t opset = model.getOpsetVersion(domain);
    const OpImport *entry = table.lookup(domain, node.op_type(), opset);
    if (!entry || !isAvailable(*entry, context))
      return emitError(model.getNodeLoc(index))
             << "unsupported op " << node.op_type() << " ("
             << getDomainDisplayName(domain) << " opset " << opset << ")";
  }
  return success();
}

LogicalResult GraphImporter::importNode(int index) {
  const onnx::NodeProto &node = model.getGraph().node(index);
  StringRef domain = normalizeDomain(node.domain());
  const OpImport *entry =
      table.lookup(domain, node.op_type(), model.getOpsetVersion(domain));
  NodeImporter importer(*this, node, model.getNodeLoc(index), *entry);
  if (failed(importer.initialize()))
    return failure();
  return entry->fn(importer);
}

LogicalResult GraphImporter::importOutputs() {
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  for (const onnx::ValueInfoProto &output : model.getGraph().output()) {
    FailureOr<Value> value = lookupValue(output.name());
    if (failed(value))
      return failure();
    // A declared output type that disagrees with what the graph computes
    // means the model and moec read the graph differently: refuse it rather
    // than return something else than the model promises.
    if (output.type().has_tensor_type()) {
      Location loc =
          model.getSubjectLoc("graph output '" + output.name() + "'");
      const onnx::TypeProto::Tensor &declared = output.type().tensor_type();
      auto actual = cast<RankedTensorType>(value->getType());
      Type elementType = convertDataType(context, declared.elem_type());
      if (elementType != actual.getElementType())
        return emitError(loc)
               << "is declared " << getDataTypeName(declared.elem_type())
               << " but the graph computes " << actual;
      if (declared.has_shape()) {
        RankedTensorType type = getTensorType(declared, context);
        if (failed(verifyCompatibleShape(type.getShape(), actual.getShape())))
          return emitError(loc) << "is declared " << type
                                << " but the graph computes " << actual;
      }
    }
    results.push_back(*value);
    resultAttrs.push_back(getValueInfoAttrs(output));
  }
  func::ReturnOp::create(builder, func.getLoc(), results);
  func.setType(builder.getFunctionType(func.getArgumentTypes(),
                                       ValueRange(results).getTypes()));
  func.setAllResultAttrs(resultAttrs);
  return success();
}

OwningOpRef<ModuleOp> GraphImporter::import() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(model.loc);
  if (failed(checkSupport()) || failed(importSignature(*module)))
    return nullptr;
  for (int index : model.nodeOrder)
    if (failed(importNode(index)))
      return nullptr;
  if (failed(importOutputs()))
    return nullptr;
  return module;
}
