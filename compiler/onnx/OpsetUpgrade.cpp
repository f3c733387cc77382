//===- OpsetUpgrade.cpp - Older ONNX opsets upgraded on import ------------===//
//
// The one file of the frontend built with exceptions: onnx's checker and
// version converter report errors by throwing, and every throw ends here.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OpsetUpgrade.h"

#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"
#include "onnx/version_converter/convert.h"

#include <exception>
#include <unordered_set>

using namespace moec::onnx_import;

namespace {
/// Sets a model's initializers aside while the rest of it is checked and
/// converted, and puts them back (into whichever model is kept).
class SetAsideWeights {
public:
  explicit SetAsideWeights(onnx::ModelProto &model) {
    onnx::GraphProto &graph = *model.mutable_graph();
    // Small tensors (shapes, axes, scalars) stay: shape inference and the
    // adapters read their values.
    google::protobuf::RepeatedPtrField<onnx::TensorProto> all;
    all.Swap(graph.mutable_initializer());
    for (onnx::TensorProto &tensor : all)
      (isSmall(tensor) ? graph.add_initializer() : weights.Add())
          ->Swap(&tensor);
    std::unordered_set<std::string> inputs;
    for (const onnx::ValueInfoProto &input : graph.input())
      inputs.insert(input.name());
    // A weight becomes an input of its type and shape (older IR versions
    // list weights as inputs already), so that the nodes reading it read a
    // defined value.
    for (const onnx::TensorProto &weight : weights) {
      if (!inputs.insert(weight.name()).second)
        continue;
      onnx::ValueInfoProto &input = *graph.add_input();
      input.set_name(weight.name());
      onnx::TypeProto::Tensor &type =
          *input.mutable_type()->mutable_tensor_type();
      type.set_elem_type(weight.data_type());
      onnx::TensorShapeProto &shape = *type.mutable_shape();
      for (int64_t dim : weight.dims())
        shape.add_dim()->set_dim_value(dim);
      declared.insert(weight.name());
    }
  }

  /// Puts the weights back into `model`'s graph and removes the inputs that
  /// were declared for them.
  void restoreInto(onnx::ModelProto &model) {
    onnx::GraphProto &graph = *model.mutable_graph();
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
    for (onnx::ValueInfoProto &input : *graph.mutable_input())
      if (!declared.count(input.name()))
        kept.Add()->Swap(&input);
    graph.mutable_input()->Swap(&kept);
    // Initializers the converter made (for attributes that became inputs)
    // stay; the model's own follow them.
    for (onnx::TensorProto &weight : weights)
      graph.add_initializer()->Swap(&weight);
    weights.Clear();
  }

private:
  /// Whether `tensor` is small enough to go through the converter: at most
  /// kMaxInlineElements elements, inline.
  static bool isSmall(const onnx::TensorProto &tensor) {
    constexpr int64_t kMaxInlineElements = 4096;
    if (tensor.data_location() == onnx::TensorProto::EXTERNAL)
      return false;
    int64_t elements = 1;
    for (int64_t dim : tensor.dims()) {
      if (dim < 0 || (dim && elements > kMaxInlineElements / dim))
        return false;
      elements *= dim;
    }
    return elements <= kMaxInlineElements;
  }

  google::protobuf::RepeatedPtrField<onnx::TensorProto> weights;
  std::unordered_set<std::string> declared;
};
} // namespace

std::string moec::onnx_import::upgradeOpset(onnx::ModelProto &model,
                                            int64_t target) {
  SetAsideWeights weights(model);
  std::string error;
  try {
    // The converter trusts its input: onnx's checker (op schemas, arities,
    // attribute types, topological order) must accept it first.
    onnx::checker::check_model(model);
    // Some adapters (Softmax's) need the ranks that shape inference gives;
    // the inferred value_info is dropped again afterwards.
    onnx::ModelProto inferred = model;
    onnx::shape_inference::InferShapes(inferred);
    onnx::ModelProto upgraded =
        onnx::version_conversion::ConvertVersion(inferred, int(target));
    upgraded.mutable_graph()->mutable_value_info()->CopyFrom(
        model.graph().value_info());
    weights.restoreInto(upgraded);
    // Opset 13 came with IR version 7.
    if (upgraded.ir_version() < 7)
      upgraded.set_ir_version(7);
    model = std::move(upgraded);
    return "";
  } catch (const std::exception &e) {
    error = e.what();
  } catch (...) {
    error = "unknown error";
  }
  weights.restoreInto(model);
  // The checker's messages span lines ("==> Context: ..."): one line here.
  for (char &c : error)
    if (c == '\n')
      c = ' ';
  while (!error.empty() && error.back() == ' ')
    error.pop_back();
  return error;
}
