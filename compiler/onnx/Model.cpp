//===- Model.cpp - reading and validating an ONNX model -------------------===//

#include "compiler/onnx/Model.h"

#include "compiler/onnx/OpsetUpgrade.h"

#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/Tensors.h"
#include "format/file_io.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <climits>
#include <functional>
#include <queue>

using namespace mlir;
using namespace moec::onnx_import;

StringRef moec::onnx_import::normalizeDomain(StringRef domain) {
  return domain == kDefaultDomainName ? StringRef() : domain;
}

StringRef moec::onnx_import::getDomainDisplayName(StringRef domain) {
  return domain.empty() ? StringRef(kDefaultDomainName) : domain;
}

int64_t OnnxModel::getOpsetVersion(StringRef domain) const {
  auto it = opsets.find(normalizeDomain(domain));
  return it == opsets.end() ? 0 : it->second;
}

Location OnnxModel::getSubjectLoc(const llvm::Twine &what) const {
  return onnx_import::getSubjectLoc(loc, what);
}

Location OnnxModel::getNodeLoc(int index) const {
  return getNodeLoc(getGraph(), index);
}

std::string OnnxModel::describeNode(const onnx::GraphProto &graph,
                                    int index) const {
  const onnx::NodeProto &node = graph.node(index);
  std::string opType = node.op_type();
  StringRef domain = normalizeDomain(node.domain());
  if (!domain.empty())
    opType = (domain + "." + opType).str();
  std::string text =
      node.name().empty()
          ? "node #" + std::to_string(index) + " (" + opType + ")"
          : "node '" + node.name() + "' (" + opType + ")";
  auto it = subgraphs.find(&graph);
  if (it != subgraphs.end())
    text += it->second.context;
  return text;
}

Location OnnxModel::getNodeLoc(const onnx::GraphProto &graph, int index) const {
  return getSubjectLoc(describeNode(graph, index));
}

const std::vector<int> &
OnnxModel::getNodeOrder(const onnx::GraphProto &graph) const {
  if (&graph == &getGraph())
    return nodeOrder;
  return subgraphs.at(&graph).nodeOrder;
}

SmallVector<std::pair<StringRef, const onnx::GraphProto *>>
moec::onnx_import::getSubgraphs(const onnx::NodeProto &node) {
  SmallVector<std::pair<StringRef, const onnx::GraphProto *>> result;
  for (const onnx::AttributeProto &attr : node.attribute()) {
    if (attr.type() == onnx::AttributeProto::GRAPH && attr.has_g())
      result.emplace_back(attr.name(), &attr.g());
    if (attr.type() == onnx::AttributeProto::GRAPHS)
      for (const onnx::GraphProto &graph : attr.graphs())
        result.emplace_back(attr.name(), &graph);
  }
  return result;
}

namespace {
/// Validates one parsed model; each check reports its own error.
class ModelValidator {
public:
  explicit ModelValidator(OnnxModel &model) : model(model), tensors(model) {}

  LogicalResult validate() {
    if (failed(validateHeader()) || failed(validateOpsets()) ||
        failed(validateGraphInterface()))
      return failure();
    main.graph = &graph();
    return success(succeeded(validateNodes(main, /*depth=*/0)) &&
                   succeeded(sortNodes(main, model.nodeOrder)));
  }

private:
  /// One graph being validated, the main graph or a subgraph, with the
  /// names it defines. A subgraph may read the names of every enclosing
  /// graph (ONNX's lexical scoping), never redefine one, and none of its own
  /// names is visible outside it.
  struct Scope {
    const onnx::GraphProto *graph = nullptr;
    const Scope *parent = nullptr;
    /// Every value name the graph defines: its inputs and initializers
    /// (-1), node outputs (the producing node's index).
    llvm::StringMap<int> producers;
    /// Names the graph (its subgraphs included) reads from enclosing graphs.
    llvm::StringSet<> outerReads;
    /// For each node, the names of this graph that its subgraphs read: they
    /// order the node after their producers like its inputs do.
    std::vector<std::vector<std::string>> implicitInputs;
  };

  const onnx::GraphProto &graph() const { return model.getGraph(); }

  LogicalResult validateHeader();
  LogicalResult validateOpsets();
  LogicalResult validateGraphInterface();
  /// Returns the location naming the `index`th `kind` ("initializer")
  /// `name`; fails if the name is empty or already in `seen`.
  FailureOr<Location> getUniqueNameLoc(StringRef kind, size_t index,
                                       StringRef name, llvm::StringSet<> &seen);
  LogicalResult validateValueType(const onnx::ValueInfoProto &value,
                                  Location loc, bool requireShape);
  LogicalResult validateNodes(Scope &scope, int depth);
  LogicalResult validateIf(const onnx::NodeProto &node, Location loc);
  LogicalResult validateSubgraph(const onnx::GraphProto &subgraph,
                                 StringRef attrName, Scope &parent,
                                 int nodeIndex, int depth);
  LogicalResult sortNodes(const Scope &scope, std::vector<int> &order);

  /// Whether a graph enclosing `scope` defines `name`.
  static bool isDefinedOutside(const Scope &scope, StringRef name) {
    for (const Scope *outer = scope.parent; outer; outer = outer->parent)
      if (outer->producers.count(name))
        return true;
    return false;
  }

  OnnxModel &model;
  TensorReader tensors;
  Scope main;
};
} // namespace

std::optional<int64_t> moec::onnx_import::getStaticDimSize(
    const onnx::TensorShapeProto::Dimension &dim) {
  if (dim.has_dim_value())
    return dim.dim_value();
  StringRef param = dim.has_dim_param() ? StringRef(dim.dim_param()) : "";
  if (param.empty() || !llvm::all_of(param, llvm::isDigit))
    return std::nullopt;
  uint64_t size;
  if (param.getAsInteger(10, size) || size > uint64_t(INT64_MAX))
    return -1;
  return int64_t(size);
}

LogicalResult ModelValidator::validateHeader() {
  const onnx::ModelProto &proto = *model.proto;
  if (!proto.has_ir_version())
    return emitError(model.loc)
           << "not a valid ONNX model: ir_version is missing";
  int64_t ir = proto.ir_version();
  if (ir < kMinIrVersion || ir > kMaxIrVersion)
    return emitError(model.loc)
           << "ir_version " << ir << " is not supported (moec reads "
           << kMinIrVersion << " to " << kMaxIrVersion << ")";
  if (!proto.has_graph())
    return emitError(model.loc) << "not a valid ONNX model: it has no graph";
  return success();
}

LogicalResult ModelValidator::validateOpsets() {
  for (const onnx::OperatorSetIdProto &opset : model.proto->opset_import()) {
    StringRef domain = normalizeDomain(opset.domain());
    StringRef name = getDomainDisplayName(domain);
    Location loc = model.getSubjectLoc("opset_import '" + name + "'");
    if (!model.opsets.try_emplace(domain, opset.version()).second)
      return emitError(loc) << "imported twice";
    if (domain.empty()) {
      if (opset.version() < kMinUpgradableOpset || opset.version() > kMaxOpset)
        return emitError(loc)
               << "opset " << opset.version() << " is out of range (moec "
               << "imports " << kDefaultDomainName << " opsets " << kMinOpset
               << " to " << kMaxOpset << ", and upgrades "
               << kMinUpgradableOpset << " to " << kMinOpset - 1 << ")";
    } else if (domain == kMicrosoftDomain) {
      if (opset.version() < 1)
        return emitError(loc)
               << "opset " << opset.version() << " is not a valid version";
    } else {
      return emitError(loc) << "domain '" << name << "' is not supported "
                            << "(moec imports " << kDefaultDomainName << " and "
                            << kMicrosoftDomain << ")";
    }
  }
  if (!model.opsets.count(""))
    return emitError(model.loc)
           << "opset_import has no entry for the default domain ("
           << kDefaultDomainName << ")";
  return success();
}

LogicalResult
ModelValidator::validateValueType(const onnx::ValueInfoProto &value,
                                  Location loc, bool requireShape) {
  if (!value.has_type()) {
    if (requireShape)
      return emitError(loc) << "has no type";
    return success();
  }
  if (!value.type().has_tensor_type())
    return emitError(loc) << "is not a tensor (sequences, maps and optionals "
                             "are not supported)";
  const onnx::TypeProto::Tensor &type = value.type().tensor_type();
  int64_t elementSize = getDataTypeSize(type.elem_type());
  if (!elementSize)
    return emitError(loc) << "has unsupported element type "
                          << getDataTypeName(type.elem_type());
  if (!type.has_shape()) {
    if (requireShape)
      return emitError(loc) << "has no shape; moec needs the rank of every "
                               "graph input";
    return success();
  }
  SmallVector<int64_t> shape;
  for (auto [i, dim] : llvm::enumerate(type.shape().dim())) {
    if (dim.has_dim_value() && dim.dim_value() < 0)
      return emitError(loc)
             << "dimension " << i << " is negative (" << dim.dim_value() << ")";
    std::optional<int64_t> size = getStaticDimSize(dim);
    if (size && *size < 0)
      return emitError(loc)
             << "dimension " << i << " has dim_param '" << dim.dim_param()
             << "', a size that does not fit in 64 bits";
    shape.push_back(size.value_or(ShapedType::kDynamic));
  }
  if (!getStaticByteSize(shape, elementSize))
    return emitError(loc) << "has a shape whose size overflows 64 bits";
  return success();
}

FailureOr<Location> ModelValidator::getUniqueNameLoc(StringRef kind,
                                                     size_t index,
                                                     StringRef name,
                                                     llvm::StringSet<> &seen) {
  if (name.empty())
    return emitError(model.getSubjectLoc(kind + " #" + llvm::Twine(index)))
           << "has no name";
  Location loc = model.getSubjectLoc(kind + " '" + name + "'");
  if (!seen.insert(name).second)
    return emitError(loc) << "is defined twice";
  return loc;
}

LogicalResult ModelValidator::validateGraphInterface() {
  if (graph().sparse_initializer_size())
    return emitError(model.getSubjectLoc(
               "sparse_initializer '" +
               graph().sparse_initializer(0).values().name() + "'"))
           << "sparse initializers are not supported";

  // Graph inputs and initializers may share a name: the initializer is then
  // the input's default value (older exporters list weights as inputs).
  llvm::StringSet<> inputs;
  for (auto [i, input] : llvm::enumerate(graph().input())) {
    FailureOr<Location> loc =
        getUniqueNameLoc("graph input", i, input.name(), inputs);
    if (failed(loc) ||
        failed(validateValueType(input, *loc, /*requireShape=*/true)))
      return failure();
    main.producers[input.name()] = -1;
  }
  llvm::StringSet<> initializers;
  for (auto [i, tensor] : llvm::enumerate(graph().initializer())) {
    FailureOr<Location> loc =
        getUniqueNameLoc("initializer", i, tensor.name(), initializers);
    if (failed(loc) || failed(tensors.validate(tensor, *loc)))
      return failure();
    main.producers[tensor.name()] = -1;
  }
  // The runtime binds outputs by name: a name listed twice has no meaning.
  llvm::StringSet<> outputs;
  for (auto [i, output] : llvm::enumerate(graph().output())) {
    FailureOr<Location> loc =
        getUniqueNameLoc("graph output", i, output.name(), outputs);
    if (failed(loc) ||
        failed(validateValueType(output, *loc, /*requireShape=*/false)))
      return failure();
  }
  return success();
}

LogicalResult ModelValidator::validateNodes(Scope &scope, int depth) {
  const onnx::GraphProto &graph = *scope.graph;
  bool isMain = !scope.parent;
  scope.implicitInputs.assign(graph.node_size(), {});
  for (auto [index, node] : llvm::enumerate(graph.node())) {
    Location loc = model.getNodeLoc(graph, index);
    if (node.op_type().empty())
      return emitError(loc) << "has no op_type";
    if (!model.opsets.count(normalizeDomain(node.domain())))
      return emitError(loc) << "domain '" << node.domain()
                            << "' is not imported by the model's opset_import";
    for (const std::string &output : node.output()) {
      // An empty name leaves an optional output unused.
      if (output.empty())
        continue;
      if (isDefinedOutside(scope, output))
        return emitError(loc) << "output '" << output
                              << "' redefines a value of an enclosing graph";
      auto [it, inserted] = scope.producers.try_emplace(output, int(index));
      if (inserted)
        continue;
      if (it->second < 0)
        return emitError(loc)
               << "output '" << output << "' redefines a graph input or "
               << (isMain ? "initializer" : "initializer of the subgraph");
      return emitError(loc)
             << "output '" << output << "' is already produced by another node";
    }
  }
  for (auto [index, node] : llvm::enumerate(graph.node())) {
    Location loc = model.getNodeLoc(graph, index);
    for (const onnx::AttributeProto &attr : node.attribute())
      if (attr.type() == onnx::AttributeProto::GRAPH && !attr.has_g())
        return emitError(getSubjectLoc(loc, "attribute '" + attr.name() + "'"))
               << "is of type GRAPH but holds no graph";
    if (normalizeDomain(node.domain()).empty() && node.op_type() == "If" &&
        failed(validateIf(node, loc)))
      return failure();
    for (auto [attrName, subgraph] : getSubgraphs(node))
      if (failed(
              validateSubgraph(*subgraph, attrName, scope, index, depth + 1)))
        return failure();
    for (const std::string &input : node.input()) {
      if (input.empty() || scope.producers.count(input))
        continue;
      if (isDefinedOutside(scope, input)) {
        scope.outerReads.insert(input);
        continue;
      }
      if (isMain)
        return emitError(loc)
               << "input '" << input
               << "' is not a graph input, an initializer or the output of "
                  "any node";
      return emitError(loc) << "input '" << input
                            << "' is not defined in the subgraph or in any "
                               "enclosing graph";
    }
  }
  if (!isMain)
    return success();
  for (const onnx::ValueInfoProto &output : graph.output())
    if (!scope.producers.count(output.name()))
      return emitError(
                 model.getSubjectLoc("graph output '" + output.name() + "'"))
             << "is not a graph input, an initializer or the output of any "
                "node";
  return success();
}

LogicalResult ModelValidator::validateIf(const onnx::NodeProto &node,
                                         Location loc) {
  // The importer relies on these: two graphs, each computing exactly the
  // node's outputs from nothing but the enclosing graphs' values.
  if (!node.output_size())
    return emitError(loc) << "has no outputs";
  for (StringRef name : {"then_branch", "else_branch"}) {
    const onnx::AttributeProto *branch = nullptr;
    for (const onnx::AttributeProto &attr : node.attribute()) {
      if (attr.name() != name)
        continue;
      if (branch)
        return emitError(getSubjectLoc(loc, "attribute '" + name + "'"))
               << "is given twice";
      branch = &attr;
    }
    if (!branch)
      return emitError(loc) << "has no attribute '" << name << "'";
    Location attrLoc = getSubjectLoc(loc, "attribute '" + name + "'");
    if (branch->type() != onnx::AttributeProto::GRAPH)
      return emitError(attrLoc)
             << "must be a graph (GRAPH), not "
             << onnx::AttributeProto::AttributeType_Name(branch->type());
    const onnx::GraphProto &graph = branch->g();
    if (graph.input_size())
      return emitError(attrLoc) << "declares " << graph.input_size()
                                << " inputs, but a branch of If takes none";
    if (graph.output_size() != node.output_size())
      return emitError(attrLoc)
             << "has " << graph.output_size() << " outputs, but the node has "
             << node.output_size();
  }
  return success();
}

LogicalResult ModelValidator::validateSubgraph(const onnx::GraphProto &subgraph,
                                               StringRef attrName,
                                               Scope &parent, int nodeIndex,
                                               int depth) {
  Location nodeLoc = model.getNodeLoc(*parent.graph, nodeIndex);
  if (depth > kMaxSubgraphDepth)
    return emitError(getSubjectLoc(nodeLoc, "attribute '" + attrName + "'"))
           << "subgraphs are nested more than " << kMaxSubgraphDepth
           << " levels deep";
  std::string where =
      (attrName + " of " + model.describeNode(*parent.graph, nodeIndex)).str();
  // References into the map stay valid while nested subgraphs are added.
  SubgraphInfo &info = model.subgraphs[&subgraph];
  info.context = " in " + where;
  Scope scope;
  scope.graph = &subgraph;
  scope.parent = &parent;

  auto define = [&](StringRef kind, size_t index,
                    StringRef name) -> FailureOr<Location> {
    if (name.empty())
      return emitError(model.getSubjectLoc(kind + " #" + llvm::Twine(index) +
                                           " of " + where))
             << "has no name";
    Location loc = model.getSubjectLoc(kind + " '" + name + "' of " + where);
    if (isDefinedOutside(scope, name))
      return emitError(loc) << "redefines a value of an enclosing graph";
    if (!scope.producers.try_emplace(name, -1).second)
      return emitError(loc) << "is defined twice";
    return loc;
  };
  if (subgraph.sparse_initializer_size())
    return emitError(model.getSubjectLoc("sparse_initializer of " + where))
           << "sparse initializers are not supported";
  for (auto [i, input] : llvm::enumerate(subgraph.input())) {
    FailureOr<Location> loc = define("input", i, input.name());
    if (failed(loc) ||
        failed(validateValueType(input, *loc, /*requireShape=*/false)))
      return failure();
  }
  for (auto [i, tensor] : llvm::enumerate(subgraph.initializer())) {
    FailureOr<Location> loc = define("initializer", i, tensor.name());
    if (failed(loc) || failed(tensors.validate(tensor, *loc)))
      return failure();
  }
  if (failed(validateNodes(scope, depth)) ||
      failed(sortNodes(scope, info.nodeOrder)))
    return failure();
  for (auto [i, output] : llvm::enumerate(subgraph.output())) {
    Location loc =
        model.getSubjectLoc("output #" + llvm::Twine(i) + " of " + where);
    if (output.name().empty())
      return emitError(loc) << "has no name";
    if (failed(validateValueType(output, loc, /*requireShape=*/false)))
      return failure();
    if (scope.producers.count(output.name()))
      continue;
    if (!isDefinedOutside(scope, output.name()))
      return emitError(loc) << "'" << output.name()
                            << "' is not defined in the subgraph or in any "
                               "enclosing graph";
    scope.outerReads.insert(output.name());
  }
  // What the subgraph reads from outside is an input of the node that holds
  // it when the node's graph defines it, else read from further out.
  for (const auto &name : scope.outerReads) {
    if (parent.producers.count(name.getKey()))
      parent.implicitInputs[nodeIndex].push_back(name.getKey().str());
    else
      parent.outerReads.insert(name.getKey());
  }
  return success();
}

LogicalResult ModelValidator::sortNodes(const Scope &scope,
                                        std::vector<int> &order) {
  // Kahn's algorithm, always taking the ready node that comes first in the
  // file, so a file that is already sorted keeps its order. A node depends
  // on the producers of its inputs and of the values its subgraphs read.
  const onnx::GraphProto &graph = *scope.graph;
  int numNodes = graph.node_size();
  std::vector<std::vector<int>> producersOf(numNodes);
  auto addProducer = [&](int index, StringRef name) {
    if (name.empty())
      return;
    auto it = scope.producers.find(name);
    if (it != scope.producers.end() && it->second >= 0)
      producersOf[index].push_back(it->second);
  };
  for (int index = 0; index < numNodes; ++index) {
    for (const std::string &input : graph.node(index).input())
      addProducer(index, input);
    for (const std::string &input : scope.implicitInputs[index])
      addProducer(index, input);
  }
  std::vector<int> pending(numNodes, 0);
  std::vector<std::vector<int>> consumers(numNodes);
  for (int index = 0; index < numNodes; ++index)
    for (int producer : producersOf[index]) {
      ++pending[index];
      consumers[producer].push_back(index);
    }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int index = 0; index < numNodes; ++index)
    if (!pending[index])
      ready.push(index);
  while (!ready.empty()) {
    int index = ready.top();
    ready.pop();
    order.push_back(index);
    for (int consumer : consumers[index])
      if (!--pending[consumer])
        ready.push(consumer);
  }
  if (int(order.size()) == numNodes)
    return success();

  // Every node left waits on another node left; following unsorted producers
  // from any of them must come back to a node already seen: a cycle.
  int start =
      llvm::find_if(pending, [](int count) { return count; }) - pending.begin();
  std::vector<int> path;
  std::vector<int> positionInPath(numNodes, -1);
  int current = start;
  while (positionInPath[current] < 0) {
    positionInPath[current] = path.size();
    path.push_back(current);
    for (int producer : producersOf[current]) {
      if (pending[producer]) {
        current = producer;
        break;
      }
    }
  }
  // The cycle is the tail of the path from `current`, walked against the
  // data flow; print it along the data flow.
  std::string cycle;
  auto describe = [&](int index) {
    const onnx::NodeProto &node = graph.node(index);
    return node.name().empty() ? "#" + std::to_string(index)
                               : "'" + node.name() + "'";
  };
  for (int i = path.size() - 1; i >= positionInPath[current]; --i)
    cycle += describe(path[i]) + " -> ";
  cycle += describe(path.back());
  return emitError(model.getNodeLoc(graph, current))
         << "the graph has a cycle: " << cycle;
}

/// Parses the protobuf of a model from `stream`, which must hold exactly one
/// ModelProto.
static FailureOr<std::shared_ptr<onnx::ModelProto>>
parseModel(const OnnxModel &model,
           google::protobuf::io::ZeroCopyInputStream &stream) {
  auto proto = std::make_shared<onnx::ModelProto>();
  google::protobuf::io::CodedInputStream coded(&stream);
  // The default limit would refuse models over 64 MiB.
  coded.SetTotalBytesLimit(INT_MAX);
  if (!proto->ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    return emitError(model.loc)
           << "not a valid ONNX model (truncated or corrupt protobuf)";
  return proto;
}

/// Makes the parsed `proto` the model, validates it and brings a
/// default-domain opset from kMinUpgradableOpset to kMinOpset - 1 to opset
/// kMinOpset (OpsetUpgrade.h); the upgraded model is validated again.
static LogicalResult
validateAndUpgrade(OnnxModel &model, std::shared_ptr<onnx::ModelProto> proto) {
  model.proto = proto;
  if (failed(ModelValidator(model).validate()))
    return failure();
  int64_t opset = model.getOpsetVersion("");
  if (opset >= kMinOpset)
    return success();
  // Only a model our validator accepted reaches onnx's converter, which
  // trusts its input (a graph output that no node produces crashes it).
  std::string error = upgradeOpset(*proto, kMinOpset);
  if (!error.empty())
    return emitError(model.loc)
           << kDefaultDomainName << " opset " << opset
           << " cannot be upgraded to opset " << kMinOpset << ": " << error;
  model.originalOpset = opset;
  model.opsets.clear();
  model.nodeOrder.clear();
  model.subgraphs.clear();
  emitRemark(model.loc) << kDefaultDomainName << " opset " << opset
                        << " upgraded to opset " << kMinOpset
                        << " by onnx's version converter";
  return ModelValidator(model).validate();
}

FailureOr<std::unique_ptr<OnnxModel>>
moec::onnx_import::loadOnnxModel(MLIRContext *context, StringRef path) {
  auto model = std::make_unique<OnnxModel>(path, getModelLoc(context, path));
  // The file is streamed into the parser rather than mapped whole, so the
  // parsed model (whose raw_data weights the IR references) is the only
  // copy of its bytes in memory.
  // Opened without blocking and checked to be a regular file first (a FIFO
  // or /dev/zero would otherwise hang or be read without end).
  absl::StatusOr<moert::InputFile> file = moert::InputFile::open(path.str());
  if (!file.ok())
    return emitError(model->loc) << std::string(file.status().message());
  // One protobuf message cannot exceed 2 GiB; bigger models keep their
  // weights in external data files.
  if (file->size() > uint64_t(INT_MAX))
    return emitError(model->loc)
           << "the model file is " << file->size()
           << " bytes; an ONNX protobuf over 2 GiB must keep its weights in "
              "external data";
  google::protobuf::io::FileInputStream stream(file->fd());
  FailureOr<std::shared_ptr<onnx::ModelProto>> proto =
      parseModel(*model, stream);
  if (failed(proto))
    return failure();

  SmallString<256> directory(llvm::sys::path::parent_path(path));
  if (directory.empty())
    directory = ".";
  SmallString<256> realDirectory;
  if (std::error_code ec = llvm::sys::fs::real_path(directory, realDirectory))
    return emitError(model->loc)
           << "cannot resolve the model's directory: " << ec.message();
  model->directory = std::string(realDirectory);

  if (failed(validateAndUpgrade(*model, std::move(*proto))))
    return failure();
  return model;
}

FailureOr<std::unique_ptr<OnnxModel>>
moec::onnx_import::loadOnnxModelFromBuffer(MLIRContext *context,
                                           StringRef bytes, StringRef name) {
  auto model = std::make_unique<OnnxModel>(name, getModelLoc(context, name));
  if (bytes.size() > size_t(INT_MAX))
    return emitError(model->loc)
           << "the model is " << bytes.size()
           << " bytes; an ONNX protobuf over 2 GiB must keep its weights in "
              "external data";
  google::protobuf::io::ArrayInputStream stream(bytes.data(), bytes.size());
  FailureOr<std::shared_ptr<onnx::ModelProto>> proto =
      parseModel(*model, stream);
  if (failed(proto))
    return failure();
  // No directory: external data has nothing to resolve against.
  if (failed(validateAndUpgrade(*model, std::move(*proto))))
    return failure();
  return model;
}
