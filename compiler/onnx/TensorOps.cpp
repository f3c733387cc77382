//===- TensorOps.cpp - Constant, Cast, Identity and Pad imports -----------===//
//
// Constant-19, -21, -23 and -24, Cast and CastLike of the same versions only
// add the float8/int4/float4 types, Cast's `saturate` (which only affects
// float8) and, at 24, `round_mode` (only float8e8m0), so every version in
// range imports alike.
//
// Pad imports when its `pads` are constant zeros, whatever the mode: it then
// copies its input (Llama 4's vision encoder writes one in front of its
// unfold). A Pad that pads is refused, naming the pads.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/GraphImporter.h"
#include "compiler/onnx/OpImport.h"
#include "compiler/onnx/Tensors.h"

#include "dialects/moe/GraphOpsSupport.h"
#include "dialects/moe/MoeOps.h"

using namespace mlir;
using namespace moec::onnx_import;

/// Constant holds its value in exactly one of several attributes; each
/// becomes a `moe.constant`. A large `value` tensor was already read as a
/// dense_resource weight when the attributes were converted.
static LogicalResult importConstant(NodeImporter &node) {
  NamedAttrList &attrs = node.getAttributes();
  // ONNX defines Constant by exactly one of these; anything else is not a
  // Constant's attribute.
  static constexpr llvm::StringLiteral kValueNames[] = {
      "value",      "value_float",  "value_floats",  "value_int",
      "value_ints", "value_string", "value_strings", "sparse_value"};
  for (NamedAttribute attr : attrs)
    if (!llvm::is_contained(kValueNames, attr.getName().getValue()))
      return node.emitAttributeError(attr.getName())
             << "is not an attribute of Constant";
  if (attrs.getAttrs().size() != 1)
    return node.emitError() << "needs exactly one value attribute, not "
                            << attrs.getAttrs().size();
  NamedAttribute attr = *attrs.begin();
  StringRef name = attr.getName().getValue();
  Builder b(node.getContext());
  auto wrongType = [&](StringRef expected) {
    return node.emitAttributeError(name)
           << "has the wrong type (" << node.getAttributeTypeName(name)
           << "); expected " << expected;
  };
  ElementsAttr value;
  if (name == "value") {
    value = dyn_cast<ElementsAttr>(attr.getValue());
    if (!value)
      return wrongType("TENSOR");
  } else if (name == "value_float" || name == "value_int") {
    bool isFloat = name == "value_float";
    Type type = isFloat ? Type(b.getF32Type()) : Type(b.getI64Type());
    auto scalar = RankedTensorType::get({}, type);
    if (auto f = dyn_cast<FloatAttr>(attr.getValue()); f && isFloat)
      value = DenseElementsAttr::get(scalar, f.getValue());
    else if (auto i = dyn_cast<IntegerAttr>(attr.getValue()); i && !isFloat)
      value = DenseElementsAttr::get(scalar, i.getValue());
    else
      return wrongType(isFloat ? "FLOAT" : "INT");
  } else if (name == "value_floats" || name == "value_ints") {
    // A list becomes a 1-D tensor of it.
    auto toTensor = [](auto array, Type elementType) {
      return DenseElementsAttr::get(
          RankedTensorType::get({array.size()}, elementType),
          array.asArrayRef());
    };
    if (auto floats = dyn_cast<DenseF32ArrayAttr>(attr.getValue());
        floats && name == "value_floats")
      value = toTensor(floats, b.getF32Type());
    else if (auto ints = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
             ints && name == "value_ints")
      value = toTensor(ints, b.getI64Type());
    else
      return wrongType(name == "value_floats" ? "FLOATS" : "INTS");
  } else if (name == "value_string" || name == "value_strings") {
    return node.emitAttributeError(name)
           << "string constants are not supported";
  } else {
    return node.emitAttributeError(name)
           << "sparse constants are not supported";
  }
  Value result = moec::moe::ConstantOp::create(node.getBuilder(), node.getLoc(),
                                               value.getType(), value);
  return node.setResults(result);
}

/// Cast's `to` names an ONNX data type; the op takes the element type.
static LogicalResult importCast(NodeImporter &node) {
  NamedAttrList &attrs = node.getAttributes();
  auto to = dyn_cast_or_null<IntegerAttr>(attrs.get("to"));
  if (!to)
    return node.emitAttributeError("to")
           << (attrs.get("to") ? "has the wrong type; expected INT"
                               : "is missing");
  Type elementType =
      convertDataType(node.getContext(), to.getInt(),
                      node.getGraphImporter().getOptions().widenFloat16);
  if (!elementType)
    return node.emitAttributeError("to")
           << "unsupported element type " << getDataTypeName(to.getInt());
  attrs.set("to", TypeAttr::get(elementType));
  return importGeneric(node);
}

/// Identity creates no op: its output is its input.
static LogicalResult importIdentity(NodeImporter &node) {
  // The node has its one input (checked against the table's "input").
  SmallVectorImpl<Value> &operands = node.getOperands();
  if (!node.getAttributes().empty())
    return node.emitAttributeError(node.getAttributes().begin()->getName())
           << "is not an attribute of Identity";
  return node.setResults(operands[0]);
}

/// A Pad whose constant `pads` are all zero is its input; any other is
/// refused.
static LogicalResult importPad(NodeImporter &node) {
  SmallVectorImpl<Value> &operands = node.getOperands();
  std::optional<SmallVector<int64_t>> pads =
      moec::moe::getConstantInts(operands[1]);
  if (!pads)
    return node.emitError() << "pads that are not a constant are not "
                               "supported (only a Pad that pads nothing is)";
  if (llvm::any_of(*pads, [](int64_t pad) { return pad != 0; })) {
    InFlightDiagnostic diag = node.emitError() << "pads [";
    llvm::interleaveComma(*pads, diag);
    return diag << "] are not supported (only a Pad that pads nothing is)";
  }
  return node.setResults(operands[0]);
}

/// Cast-24 and CastLike-24 add `round_mode`, which only rounds conversions
/// to float8e8m0, a type moec refuses wherever it appears: any valid value
/// is dropped, so that the op imports as the older versions do.
static LogicalResult dropRoundMode(NodeImporter &node) {
  Attribute mode = node.getAttributes().erase("round_mode");
  if (!mode)
    return success();
  auto name = dyn_cast<StringAttr>(mode);
  if (!name || (name != "up" && name != "down" && name != "nearest"))
    return node.emitAttributeError("round_mode")
           << "must be the string up, down or nearest";
  return success();
}

static LogicalResult importCast24(NodeImporter &node) {
  if (failed(dropRoundMode(node)))
    return failure();
  return importCast(node);
}

static LogicalResult importCastLike24(NodeImporter &node) {
  if (failed(dropRoundMode(node)))
    return failure();
  return importGeneric(node);
}

void moec::onnx_import::populateTensorImports(OpImportTable &table) {
  // Versions 23 and 24 only add float4e2m1 and float8e8m0 (and round_mode).
  for (int64_t version : {13, 19, 21, 23, 24})
    table.onOp("Constant", version, "", importConstant, "moe.constant");
  for (int64_t version : {13, 19, 21, 23})
    table.onOp("Cast", version, "input", importCast);
  table.onOp("Cast", 24, "input", importCast24);
  table.onOpGeneric("CastLike", {15, 19, 21, 23}, "input, target_type");
  table.onOp("CastLike", 24, "input, target_type", importCastLike24);
  for (int64_t version : {13, 14, 16, 19, 21, 23, 24})
    table.onOp("Identity", version, "input", importIdentity, StringRef());
  table.onOp("Pad", 13, "data, pads, constant_value?", importPad, StringRef());
  for (int64_t version : {18, 19, 21, 23, 24})
    table.onOp("Pad", version, "data, pads, constant_value?, axes?", importPad,
               StringRef());
}
