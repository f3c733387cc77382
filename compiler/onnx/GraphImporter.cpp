//===- GraphImporter.cpp - ONNX graph to a func.func ----------------------===//

#include "compiler/onnx/GraphImporter.h"

#include "compiler/onnx/Diagnostics.h"

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/ScopeExit.h"

using namespace mlir;
using namespace moec::onnx_import;

GraphImporter::GraphImporter(const OnnxModel &model, MLIRContext *context,
                             const ImportOptions &options)
    : model(model), context(context), builder(context), tensors(model),
      table(OpImportTable::get()), options(options) {
  this->options.positionInput |= options.firstPrompt;
  tensors.setWidenFloat16(options.widenFloat16);
  pushScope(model.getGraph());
}

void GraphImporter::pushScope(const onnx::GraphProto &graph) {
  Scope &scope = scopes.emplace_back();
  if (&graph != &model.getGraph())
    scope.context = model.subgraphs.at(&graph).context;
  for (const onnx::TensorProto &tensor : graph.initializer())
    scope.initializers[tensor.name()] = &tensor;
}

/// Returns the tensor type of a validated graph input or output: ONNX's
/// symbolic and unknown dimensions are dynamic; a dim_param of digits is
/// the static size it spells.
static RankedTensorType getTensorType(const onnx::TypeProto::Tensor &type,
                                      MLIRContext *context, bool widenFloat16) {
  SmallVector<int64_t> shape;
  for (const onnx::TensorShapeProto::Dimension &dim : type.shape().dim())
    shape.push_back(getStaticDimSize(dim).value_or(ShapedType::kDynamic));
  return RankedTensorType::get(
      shape, convertDataType(context, type.elem_type(), widenFloat16));
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
    if (!scopes.front().initializers.count(input.name()))
      inputs.push_back(&input);

  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  for (const onnx::ValueInfoProto *input : inputs) {
    argTypes.push_back(getTensorType(input->type().tensor_type(), context,
                                     options.widenFloat16));
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
  // Validation refused names that redefine an enclosing scope's, so the
  // innermost scope defining `name` is the only one.
  for (Scope &scope : llvm::reverse(scopes)) {
    auto it = scope.values.find(name);
    if (it != scope.values.end())
      return it->second;
    // Initializers are imported at their first use, so unused ones cost
    // nothing. The constant is bound in the initializer's own scope: a
    // subgraph reading the enclosing graph's weight leaves it imported for
    // the enclosing graph's later nodes.
    const onnx::TensorProto *tensor = scope.initializers.lookup(name);
    if (!tensor)
      continue;
    Location loc =
        model.getSubjectLoc("initializer '" + name + "'" + scope.context);
    FailureOr<ElementsAttr> attr = tensors.read(*tensor, loc, name);
    if (failed(attr))
      return failure();
    Value value =
        moec::moe::ConstantOp::create(builder, loc, attr->getType(), *attr);
    scope.values[name] = value;
    return value;
  }
  return emitError(model.loc) << "value '" << name << "' is not defined";
}

void GraphImporter::mapValue(StringRef name, Value value) {
  scopes.back().values[name] = value;
}

LogicalResult GraphImporter::checkSupport(const onnx::GraphProto &graph) {
  // Every node is checked before any is imported: an unsupported op fails
  // the import at once instead of after the ops before it were built. The
  // nodes of subgraphs are checked with their node's.
  for (int index : model.getNodeOrder(graph)) {
    const onnx::NodeProto &node = graph.node(index);
    StringRef domain = normalizeDomain(node.domain());
    int64_t opset = model.getOpsetVersion(domain);
    const OpImport *entry = table.lookup(domain, node.op_type(), opset);
    if (!entry || !isAvailable(*entry, context))
      return emitError(model.getNodeLoc(graph, index))
             << "unsupported op " << node.op_type() << " ("
             << getDomainDisplayName(domain) << " opset " << opset << ")";
    for (auto [name, subgraph] : getSubgraphs(node))
      if (failed(checkSupport(*subgraph)))
        return failure();
  }
  return success();
}

LogicalResult GraphImporter::importNode(const onnx::GraphProto &graph,
                                        int index) {
  const onnx::NodeProto &node = graph.node(index);
  StringRef domain = normalizeDomain(node.domain());
  const OpImport *entry =
      table.lookup(domain, node.op_type(), model.getOpsetVersion(domain));
  NodeImporter importer(*this, node, model.getNodeLoc(graph, index), *entry);
  if (failed(importer.initialize()))
    return failure();
  if (succeeded(entry->fn(importer)))
    return success();
  // Most contrib ops import in f32 only.
  if (!options.widenFloat16 && hasFloat16Signature())
    emitRemark(model.loc) << "the model's inputs or outputs are float16: "
                             "`moec compile --widen-f16` imports it as "
                             "float32";
  return failure();
}

LogicalResult GraphImporter::importSubgraph(const onnx::GraphProto &subgraph,
                                            SmallVectorImpl<Value> &outputs) {
  pushScope(subgraph);
  llvm::scope_exit popScope([&] { scopes.pop_back(); });
  for (int index : model.getNodeOrder(subgraph))
    if (failed(importNode(subgraph, index)))
      return failure();
  const std::string &context = scopes.back().context;
  for (const onnx::ValueInfoProto &output : subgraph.output()) {
    FailureOr<Value> value = lookupValue(output.name());
    if (failed(value) ||
        failed(checkDeclaredType(
            output, *value,
            model.getSubjectLoc("output '" + output.name() + "'" + context))))
      return failure();
    outputs.push_back(*value);
  }
  return success();
}

LogicalResult
GraphImporter::checkDeclaredType(const onnx::ValueInfoProto &declaredValue,
                                 Value value, Location loc) {
  // A declared output type that disagrees with what the graph computes
  // means the model and moec read the graph differently: refuse it rather
  // than return something else than the model promises.
  if (!declaredValue.type().has_tensor_type())
    return success();
  const onnx::TypeProto::Tensor &declared = declaredValue.type().tensor_type();
  auto actual = cast<RankedTensorType>(value.getType());
  Type elementType =
      convertDataType(context, declared.elem_type(), options.widenFloat16);
  if (elementType != actual.getElementType())
    return emitError(loc) << "is declared "
                          << getDataTypeName(declared.elem_type())
                          << " but the graph computes " << actual;
  if (declared.has_shape()) {
    RankedTensorType type =
        getTensorType(declared, context, options.widenFloat16);
    if (failed(verifyCompatibleShape(type.getShape(), actual.getShape())))
      return emitError(loc)
             << "is declared " << type << " but the graph computes " << actual;
  }
  return success();
}

DictionaryAttr GraphImporter::renameRowsDim(DictionaryAttr attrs,
                                            int64_t axis) {
  auto ids = func.getArgAttrOfType<ArrayAttr>(
      cast<BlockArgument>(positionInput).getArgNumber(), "moe.dim_params");
  auto rank = cast<RankedTensorType>(positionInput.getType()).getRank();
  if (!ids || static_cast<int64_t>(ids.size()) != rank)
    return attrs;
  SmallVector<Attribute> params;
  if (auto own = attrs.getAs<ArrayAttr>("moe.dim_params"))
    llvm::append_range(params, own.getValue());
  if (static_cast<int64_t>(params.size()) <= axis)
    params.resize(axis + 1, builder.getStringAttr(""));
  params[axis] = ids[rank - 1];
  NamedAttrList list(attrs);
  list.set("moe.dim_params", builder.getArrayAttr(params));
  return list.getDictionary(context);
}

LogicalResult GraphImporter::importOutputs() {
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  for (const onnx::ValueInfoProto &output : model.getGraph().output()) {
    FailureOr<Value> value = lookupValue(output.name());
    if (failed(value))
      return failure();
    if (failed(checkDeclaredType(
            output, *value,
            model.getSubjectLoc("graph output '" + output.name() + "'"))))
      return failure();
    results.push_back(*value);
    resultAttrs.push_back(getValueInfoAttrs(output));
    auto rows = tokenRowAxes.find(*value);
    if (rows != tokenRowAxes.end() && positionInput)
      resultAttrs.back() = renameRowsDim(resultAttrs.back(), rows->second);
  }
  func::ReturnOp::create(builder, func.getLoc(), results);
  func.setType(builder.getFunctionType(func.getArgumentTypes(),
                                       ValueRange(results).getTypes()));
  func.setAllResultAttrs(resultAttrs);
  return success();
}

OwningOpRef<ModuleOp> GraphImporter::import() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(model.loc);
  if (failed(checkSupport(model.getGraph())) ||
      failed(importSignature(*module)))
    return nullptr;
  // A first prompt's token rows are named after the graph's own
  // position_ids when it has them (the rotary reads them itself).
  if (options.firstPrompt)
    for (BlockArgument arg : func.getArguments())
      if (auto name =
              func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "moe.name");
          name && name.getValue() == "position_ids")
        positionInput = arg;
  for (int index : model.nodeOrder)
    if (failed(importNode(model.getGraph(), index)))
      return nullptr;
  if (failed(importOutputs()))
    return nullptr;
  if (positionInput) {
    removeUnreadInputs();
    (*module)->setAttr(kPositionsFromInputAttr, UnitAttr::get(context));
  }
  // The first-prompt import is the same graph a second time.
  if (options.widenFloat16 && !options.firstPrompt && hasFloat16Signature())
    emitRemark(model.loc) << "float16 tensors import as float32: the plan "
                             "computes in float32 from the same values";
  return module;
}

bool GraphImporter::hasFloat16Signature() const {
  if (tensors.hasWidenedFloat16())
    return true;
  const onnx::GraphProto &graph = model.getGraph();
  auto isFloat16 = [](const onnx::ValueInfoProto &value) {
    return value.type().tensor_type().elem_type() == onnx::TensorProto::FLOAT16;
  };
  return llvm::any_of(graph.input(), isFloat16) ||
         llvm::any_of(graph.output(), isFloat16);
}

Value GraphImporter::getPositionInput() {
  if (positionInput)
    return positionInput;
  for (const onnx::ValueInfoProto &input : model.getGraph().input())
    if (input.name() == "position_ids")
      return nullptr;
  // The token ids: named input_ids, else the first i64 [?, ?] input.
  std::optional<unsigned> ids;
  for (BlockArgument arg : func.getArguments()) {
    auto type = cast<RankedTensorType>(arg.getType());
    if (!type.getElementType().isInteger(64) || type.getRank() != 2)
      continue;
    auto name =
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "moe.name");
    if (name && name.getValue() == "input_ids") {
      ids = arg.getArgNumber();
      break;
    }
    if (!ids)
      ids = arg.getArgNumber();
  }
  if (!ids)
    return nullptr;
  NamedAttrList attrs;
  attrs.append("moe.name", builder.getStringAttr("position_ids"));
  if (auto params = func.getArgAttrOfType<ArrayAttr>(*ids, "moe.dim_params"))
    attrs.append("moe.dim_params", params);
  unsigned index = func.getNumArguments();
  if (failed(func.insertArgument(index, func.getArgument(*ids).getType(),
                                 attrs.getDictionary(context), func.getLoc())))
    return nullptr;
  positionInput = func.getArgument(index);
  return positionInput;
}

void GraphImporter::removeUnreadInputs() {
  Block &body = func.getBody().front();
  // Reverse order: an op's users come after it, so they go first.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
    if (isOpTriviallyDead(&op))
      op.erase();
  llvm::BitVector unread(func.getNumArguments());
  for (BlockArgument arg : func.getArguments())
    if (arg.use_empty())
      unread.set(arg.getArgNumber());
  (void)func.eraseArguments(unread);
}
