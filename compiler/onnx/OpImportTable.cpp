//===- OpImportTable.cpp - the (domain, op, version) handler table --------===//

#include "compiler/onnx/OpImport.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <tuple>

using namespace mlir;
using namespace moec::onnx_import;

static auto getKey(const OpImport &entry) {
  return std::make_tuple(StringRef(entry.domain), StringRef(entry.opType),
                         entry.sinceVersion);
}

const OpImportTable &OpImportTable::get() {
  static const OpImportTable table = [] {
    OpImportTable table;
    populateElementwiseImports(table);
    populateNeuralNetImports(table);
    populateShapeImports(table);
    populateIndexingImports(table);
    populateReductionImports(table);
    populateTensorImports(table);
    populateContribImports(table);
    populateContribAttentionImports(table);
    populateContribMultiHeadAttentionImports(table);
    populateContribRecurrentImports(table);
    populateControlFlowImports(table);
    llvm::sort(table.entries, [](const OpImport &a, const OpImport &b) {
      return getKey(a) < getKey(b);
    });
    return table;
  }();
  return table;
}

/// Parses the registration spelling of an op's inputs ("A, B, C?").
static std::vector<OpInput> parseInputs(StringRef spelling) {
  std::vector<OpInput> inputs;
  SmallVector<StringRef> names;
  spelling.split(names, ", ", /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (StringRef name : names) {
    OpInput input;
    if (name.consume_back("..."))
      input.kind = OpInput::Kind::Variadic;
    else if (name.consume_back("?"))
      input.kind = OpInput::Kind::Optional;
    assert(!name.empty() &&
           (inputs.empty() || inputs.back().kind != OpInput::Kind::Variadic) &&
           "malformed inputs of an import table entry");
    input.name = name.str();
    inputs.push_back(std::move(input));
  }
  return inputs;
}

std::string moec::onnx_import::formatInputs(ArrayRef<OpInput> inputs) {
  std::string result;
  for (const OpInput &input : inputs) {
    if (!result.empty())
      result += ", ";
    result += input.name;
    if (input.kind == OpInput::Kind::Optional)
      result += "?";
    else if (input.kind == OpInput::Kind::Variadic)
      result += "...";
  }
  return result;
}

void OpImportTable::onOp(StringRef opType, int64_t since, StringRef inputs,
                         OpImportFn fn, std::optional<StringRef> targetOp,
                         StringRef domain) {
  std::string target = targetOp
                           ? targetOp->str()
                           : "moe." + llvm::convertToSnakeFromCamelCase(opType);
  entries.push_back(OpImport{domain.str(), opType.str(), since,
                             parseInputs(inputs), std::move(target), fn});
}

void OpImportTable::onOpGeneric(StringRef opType, ArrayRef<int64_t> versions,
                                StringRef inputs) {
  for (int64_t version : versions)
    onOp(opType, version, inputs, importGeneric);
}

const OpImport *OpImportTable::lookup(StringRef domain, StringRef opType,
                                      int64_t opset) const {
  // The entries of one op are contiguous and sorted by version: the one that
  // applies is the last whose version is not above the opset.
  auto first = llvm::partition_point(entries, [&](const OpImport &entry) {
    return std::make_tuple(StringRef(entry.domain), StringRef(entry.opType)) <
           std::make_tuple(domain, opType);
  });
  const OpImport *found = nullptr;
  for (auto it = first; it != entries.end() && it->domain == domain &&
                        it->opType == opType && it->sinceVersion <= opset;
       ++it)
    found = &*it;
  return found;
}

const OpImport *OpImportTable::getNextVersion(const OpImport &entry) const {
  const OpImport *next = &entry + 1;
  if (next == entries.data() + entries.size() || next->domain != entry.domain ||
      next->opType != entry.opType)
    return nullptr;
  return next;
}

bool moec::onnx_import::isAvailable(const OpImport &entry,
                                    MLIRContext *context) {
  return entry.targetOp.empty() ||
         RegisteredOperationName::lookup(entry.targetOp, context).has_value();
}
