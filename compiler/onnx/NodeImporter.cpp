//===- NodeImporter.cpp - generic creation of one node's op ---------------===//

#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/GraphImporter.h"
#include "compiler/onnx/OpImport.h"
#include "compiler/onnx/Tensors.h"

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/StringSet.h"

#include <climits>
#include <utility>

using namespace mlir;
using namespace moec::onnx_import;

namespace {
/// Counts the errors reported while it lives and passes them on, so a caller
/// can add its own error only where the callee reported none.
class ErrorCounter {
public:
  explicit ErrorCounter(MLIRContext *context)
      : engine(context->getDiagEngine()) {
    id = engine.registerHandler([this](Diagnostic &diagnostic) {
      if (diagnostic.getSeverity() == DiagnosticSeverity::Error)
        ++count;
      return failure();
    });
  }
  ~ErrorCounter() { engine.eraseHandler(id); }
  unsigned getCount() const { return count; }

private:
  DiagnosticEngine &engine;
  DiagnosticEngine::HandlerID id;
  unsigned count = 0;
};
} // namespace

NodeImporter::NodeImporter(GraphImporter &graph, const onnx::NodeProto &node,
                           Location loc, const OpImport &import)
    : graph(graph), node(node), loc(loc), import(import) {}

int NodeImporter::getNumOutputs() const { return node.output_size(); }

OpBuilder &NodeImporter::getBuilder() { return graph.getBuilder(); }

InFlightDiagnostic NodeImporter::emitError() const {
  return mlir::emitError(loc);
}

InFlightDiagnostic NodeImporter::emitAttributeError(StringRef name) const {
  return mlir::emitError(getSubjectLoc(loc, "attribute '" + name + "'"));
}

LogicalResult NodeImporter::checkInputs() const {
  ArrayRef<OpInput> formals = import.inputs;
  int numGiven = node.input_size();
  bool isVariadic =
      !formals.empty() && formals.back().kind == OpInput::Kind::Variadic;
  if (!isVariadic && numGiven > int(formals.size()))
    return emitError() << "has " << numGiven << " inputs, but " << import.opType
                       << "-" << import.sinceVersion << " takes at most "
                       << formals.size();
  for (auto [i, formal] : llvm::enumerate(formals)) {
    if (formal.kind == OpInput::Kind::Optional)
      continue;
    if (int(i) >= numGiven || node.input(i).empty())
      return emitError() << "input #" << i << " (" << formal.name
                         << ") is required but missing";
  }
  // Only optional inputs may be left out by an empty name; each of a
  // variadic input's values is required.
  if (isVariadic)
    for (int i = formals.size(); i < numGiven; ++i)
      if (node.input(i).empty())
        return emitError() << "input #" << i << " (" << formals.back().name
                           << ") is empty, but the values of a variadic "
                              "input are required";
  return success();
}

LogicalResult NodeImporter::initialize() {
  if (failed(checkInputs()))
    return failure();
  for (const std::string &input : node.input()) {
    // An empty name leaves an optional input out.
    if (input.empty()) {
      operands.push_back(Value());
      continue;
    }
    FailureOr<Value> value = graph.lookupValue(input);
    if (failed(value))
      return failure();
    operands.push_back(*value);
  }
  llvm::StringSet<> seen;
  // If's branches are graphs its handler imports itself (validation checked
  // them); a graph anywhere else is refused by convertAttribute.
  bool isIf = import.domain.empty() && import.opType == "If";
  for (int i = 0, e = node.attribute_size(); i < e; ++i) {
    StringRef name = node.attribute(i).name();
    if (!seen.insert(name).second)
      return emitAttributeError(name) << "is given twice";
    if (isIf && node.attribute(i).type() == onnx::AttributeProto::GRAPH)
      continue;
    FailureOr<Attribute> value = convertAttribute(i);
    if (failed(value))
      return failure();
    attributes.append(name, *value);
  }
  return success();
}

std::string NodeImporter::getAttributeTypeName(StringRef name) const {
  for (const onnx::AttributeProto &attr : node.attribute())
    if (attr.name() == name)
      return onnx::AttributeProto::AttributeType_Name(attr.type());
  return "";
}

FailureOr<Attribute> NodeImporter::convertAttribute(int index) {
  const onnx::AttributeProto &attr = node.attribute(index);
  Builder b(getContext());
  if (!attr.ref_attr_name().empty())
    return emitAttributeError(attr.name())
           << "refers to function attribute '" << attr.ref_attr_name()
           << "'; functions are not supported";
  switch (attr.type()) {
  case onnx::AttributeProto::INT:
    return Attribute(b.getI64IntegerAttr(attr.i()));
  case onnx::AttributeProto::FLOAT:
    return Attribute(b.getF32FloatAttr(attr.f()));
  case onnx::AttributeProto::INTS:
    return Attribute(b.getDenseI64ArrayAttr(
        SmallVector<int64_t>(attr.ints().begin(), attr.ints().end())));
  case onnx::AttributeProto::FLOATS:
    return Attribute(b.getDenseF32ArrayAttr(
        SmallVector<float>(attr.floats().begin(), attr.floats().end())));
  case onnx::AttributeProto::STRING:
    return Attribute(b.getStringAttr(attr.s()));
  case onnx::AttributeProto::TENSOR: {
    std::string resourceName = node.output_size() && !node.output(0).empty()
                                   ? node.output(0)
                                   : attr.name();
    FailureOr<ElementsAttr> tensor =
        readTensor(attr.t(), attr.name(), resourceName);
    if (failed(tensor))
      return failure();
    return Attribute(*tensor);
  }
  case onnx::AttributeProto::UNDEFINED:
    return emitAttributeError(attr.name()) << "has no type";
  default:
    return emitAttributeError(attr.name())
           << "is of type "
           << onnx::AttributeProto::AttributeType_Name(attr.type())
           << ", which moec does not import";
  }
}

FailureOr<ElementsAttr>
NodeImporter::readTensor(const onnx::TensorProto &tensor, StringRef attrName,
                         StringRef resourceName) {
  return graph.getTensors().read(
      tensor, getSubjectLoc(loc, "attribute '" + attrName + "'"), resourceName);
}

Value NodeImporter::createI64Constant(ArrayRef<int64_t> values) {
  auto type = RankedTensorType::get({int64_t(values.size())},
                                    IntegerType::get(getContext(), 64));
  auto value = DenseElementsAttr::get(type, values);
  return moec::moe::ConstantOp::create(getBuilder(), loc, type, value);
}

LogicalResult NodeImporter::setResults(ValueRange values) {
  if (node.output_size() > int(values.size()))
    return emitError() << "has " << node.output_size() << " outputs but "
                       << import.targetOp << " produces " << values.size();
  for (auto [name, value] : llvm::zip(node.output(), values))
    if (!name.empty())
      graph.mapValue(name, value);
  return success();
}

Operation *NodeImporter::createOperation(OperationName name,
                                         unsigned numResults,
                                         Operation *propertiesFrom) {
  SmallVector<Value> present(
      llvm::make_filter_range(operands, [](Value v) { return bool(v); }));
  // Result types are placeholders until inference has run on the op.
  SmallVector<Type> types(numResults, NoneType::get(getContext()));
  Operation *op =
      Operation::create(loc, name, types, present, NamedAttrList(),
                        propertiesFrom ? propertiesFrom->getPropertiesStorage()
                                       : OpaqueProperties(nullptr));
  getBuilder().insert(op);
  return op;
}

LogicalResult NodeImporter::setAttributes(Operation *op) {
  StringRef opName = op->getName().getStringRef();
  for (NamedAttribute attr : attributes) {
    StringRef name = attr.getName().getValue();
    if (!op->getInherentAttr(name))
      return emitAttributeError(name) << "is not supported by " << opName;
    op->setInherentAttr(attr.getName(), attr.getValue());
    // An attribute of the wrong ONNX type does not fit the op's storage and
    // reads back null: it would otherwise be dropped silently.
    std::optional<Attribute> stored = op->getInherentAttr(name);
    if (!stored || *stored != attr.getValue()) {
      std::string type = getAttributeTypeName(name);
      return emitAttributeError(name)
             << "has the wrong type" << (type.empty() ? "" : " (" + type + ")")
             << " for " << opName;
    }
  }
  if (!op->getName().hasTrait<OpTrait::AttrSizedOperandSegments>())
    return success();

  // One segment per ONNX input: 1 or 0 for an optional input that is present
  // or absent; the last segment takes the rest (a variadic group).
  StringRef segmentsName = "operandSegmentSizes";
  auto current = dyn_cast_or_null<DenseI32ArrayAttr>(
      op->getInherentAttr(segmentsName).value_or(Attribute()));
  if (!current || current.empty())
    return emitError() << opName << " has no operand segments to set";
  size_t numSegments = current.size();
  SmallVector<int32_t> sizes(numSegments, 0);
  for (auto [i, operand] : llvm::enumerate(operands))
    if (operand)
      ++sizes[std::min(i, numSegments - 1)];
  op->setInherentAttr(StringAttr::get(getContext(), segmentsName),
                      DenseI32ArrayAttr::get(getContext(), sizes));
  return success();
}

/// Sets `range` to {N, N} (`isFixed`) or {N, unbounded} if `name` has the
/// trait `Count<N>::Impl`, for N in Ns.
template <template <unsigned> class Count, bool isFixed, unsigned... Ns>
static void matchOperandCount(RegisteredOperationName name,
                              std::pair<unsigned, unsigned> &range,
                              std::integer_sequence<unsigned, Ns...>) {
  ((name.hasTrait<Count<Ns>::template Impl>()
        ? (void)(range = {Ns, isFixed ? Ns : UINT_MAX})
        : (void)0),
   ...);
}

std::pair<unsigned, unsigned>
moec::onnx_import::getOperandCountRange(RegisteredOperationName name) {
  // ODS gives every op one of these traits: its fixed operand count, or the
  // count of its operands that are neither optional nor variadic.
  if (name.hasTrait<OpTrait::ZeroOperands>())
    return {0, 0};
  if (name.hasTrait<OpTrait::OneOperand>())
    return {1, 1};
  std::pair<unsigned, unsigned> range = {0, UINT_MAX};
  // No graph op has more operands than these.
  using Counts =
      std::integer_sequence<unsigned, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
  matchOperandCount<OpTrait::NOperands, true>(name, range, Counts());
  matchOperandCount<OpTrait::AtLeastNOperands, false>(
      name, range, std::integer_sequence<unsigned, 0, 1>());
  matchOperandCount<OpTrait::AtLeastNOperands, false>(name, range, Counts());
  return range;
}

LogicalResult NodeImporter::createOp(StringRef opName) {
  std::optional<RegisteredOperationName> name =
      RegisteredOperationName::lookup(opName, getContext());
  if (!name)
    return emitError() << "unsupported op: " << opName
                       << " is not in the moe dialect";
  if (!name->hasInterface<InferTypeOpInterface>())
    return emitError() << opName << " does not infer its result types";

  // Inference reads operands by their ODS position: it must never see fewer
  // than the op requires. The node's inputs were checked against the
  // table's record of them, which test/Import/op-table.test checks against
  // the op; this keeps a handler or a table entry out of step with the op
  // from reaching inference.
  unsigned numOperands = llvm::count_if(operands, [](Value v) { return v; });
  auto [minOperands, maxOperands] = getOperandCountRange(*name);
  if (numOperands < minOperands || numOperands > maxOperands)
    return emitError() << opName << " takes "
                       << (minOperands == maxOperands ? "" : "at least ")
                       << minOperands << " operands, not " << numOperands;

  Operation *op = createOperation(*name, node.output_size(), nullptr);
  auto fail = [&] {
    op->erase();
    return failure();
  };
  if (failed(setAttributes(op)))
    return fail();

  SmallVector<Type> types;
  {
    ErrorCounter errors(getContext());
    if (failed(cast<InferTypeOpInterface>(op).inferReturnTypes(
            getContext(), loc, op->getOperands(), op->getAttrDictionary(),
            op->getPropertiesStorage(), op->getRegions(), types))) {
      if (!errors.getCount())
        emitError() << "cannot infer the result types of " << opName;
      return fail();
    }
  }
  // The op may have more results than the node names outputs (optional ONNX
  // outputs are always results): rebuild it with the inferred count.
  if (types.size() != op->getNumResults()) {
    Operation *resized = createOperation(*name, types.size(), op);
    resized->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    op->erase();
    op = resized;
  }
  for (auto [i, type] : llvm::enumerate(types)) {
    // Later stages size buffers from these types: a shape whose size does
    // not fit in 64 bits (a ConstantOfShape of [2^40, 2^40]) stops here.
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (tensor && !getStaticByteSize(
                      tensor.getShape(),
                      llvm::divideCeil(tensor.getElementTypeBitWidth(), 8))) {
      emitError() << "result #" << i << " of " << opName << " would be " << type
                  << ", whose size overflows 64 bits";
      return fail();
    }
    op->getResult(i).setType(type);
  }
  if (failed(mlir::verify(op)))
    return fail();
  return setResults(op->getResults());
}

LogicalResult moec::onnx_import::importGeneric(NodeImporter &node) {
  return node.createOp(node.getImport().targetOp);
}
