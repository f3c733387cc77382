//===- Model.cpp - reading and validating an ONNX model -------------------===//

#include "compiler/onnx/Model.h"

#include "compiler/onnx/OpsetUpgrade.h"

#include "compiler/onnx/Diagnostics.h"
#include "compiler/onnx/Tensors.h"
#include "moert/file_io.h"

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
  const onnx::NodeProto &node = getGraph().node(index);
  std::string opType = node.op_type();
  StringRef domain = normalizeDomain(node.domain());
  if (!domain.empty())
    opType = (domain + "." + opType).str();
  if (node.name().empty())
    return getSubjectLoc("node #" + llvm::Twine(index) + " (" + opType + ")");
  return getSubjectLoc("node '" + node.name() + "' (" + opType + ")");
}

namespace {
/// Validates one parsed model; each check reports its own error.
class ModelValidator {
public:
  explicit ModelValidator(OnnxModel &model) : model(model), tensors(model) {}

  LogicalResult validate() {
    return success(succeeded(validateHeader()) && succeeded(validateOpsets()) &&
                   succeeded(validateGraphInterface()) &&
                   succeeded(validateNodes()) && succeeded(sortNodes()));
  }

private:
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
  LogicalResult validateNodes();
  LogicalResult sortNodes();

  OnnxModel &model;
  TensorReader tensors;
  /// Every value name a node may read: graph inputs and initializers (-1),
  /// node outputs (the producing node's index).
  llvm::StringMap<int> producers;
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
    producers[input.name()] = -1;
  }
  llvm::StringSet<> initializers;
  for (auto [i, tensor] : llvm::enumerate(graph().initializer())) {
    FailureOr<Location> loc =
        getUniqueNameLoc("initializer", i, tensor.name(), initializers);
    if (failed(loc) || failed(tensors.validate(tensor, *loc)))
      return failure();
    producers[tensor.name()] = -1;
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

LogicalResult ModelValidator::validateNodes() {
  for (auto [index, node] : llvm::enumerate(graph().node())) {
    Location loc = model.getNodeLoc(index);
    if (node.op_type().empty())
      return emitError(loc) << "has no op_type";
    if (!model.opsets.count(normalizeDomain(node.domain())))
      return emitError(loc) << "domain '" << node.domain()
                            << "' is not imported by the model's opset_import";
    for (const std::string &output : node.output()) {
      // An empty name leaves an optional output unused.
      if (output.empty())
        continue;
      auto [it, inserted] = producers.try_emplace(output, int(index));
      if (inserted)
        continue;
      if (it->second < 0)
        return emitError(loc) << "output '" << output
                              << "' redefines a graph input or initializer";
      return emitError(loc)
             << "output '" << output << "' is already produced by another node";
    }
  }
  for (auto [index, node] : llvm::enumerate(graph().node()))
    for (const std::string &input : node.input())
      if (!input.empty() && !producers.count(input))
        return emitError(model.getNodeLoc(index))
               << "input '" << input
               << "' is not a graph input, an initializer or the output of "
                  "any node";
  for (const onnx::ValueInfoProto &output : graph().output())
    if (!producers.count(output.name()))
      return emitError(
                 model.getSubjectLoc("graph output '" + output.name() + "'"))
             << "is not a graph input, an initializer or the output of any "
                "node";
  return success();
}

LogicalResult ModelValidator::sortNodes() {
  // Kahn's algorithm, always taking the ready node that comes first in the
  // file, so a file that is already sorted keeps its order.
  int numNodes = graph().node_size();
  std::vector<int> pending(numNodes, 0);
  std::vector<std::vector<int>> consumers(numNodes);
  for (int index = 0; index < numNodes; ++index)
    for (const std::string &input : graph().node(index).input()) {
      if (input.empty())
        continue;
      int producer = producers.lookup(input);
      if (producer < 0)
        continue;
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
    model.nodeOrder.push_back(index);
    for (int consumer : consumers[index])
      if (!--pending[consumer])
        ready.push(consumer);
  }
  if (int(model.nodeOrder.size()) == numNodes)
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
    for (const std::string &input : graph().node(current).input()) {
      int producer = input.empty() ? -1 : producers.lookup(input);
      if (producer >= 0 && pending[producer]) {
        current = producer;
        break;
      }
    }
  }
  // The cycle is the tail of the path from `current`, walked against the
  // data flow; print it along the data flow.
  std::string cycle;
  auto describe = [&](int index) {
    const onnx::NodeProto &node = graph().node(index);
    return node.name().empty() ? "#" + std::to_string(index)
                               : "'" + node.name() + "'";
  };
  for (int i = path.size() - 1; i >= positionInPath[current]; --i)
    cycle += describe(path[i]) + " -> ";
  cycle += describe(path.back());
  return emitError(model.getNodeLoc(current))
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
