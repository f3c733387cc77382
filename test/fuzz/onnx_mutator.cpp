//===- onnx_mutator.cpp - structure-aware mutations of ONNX models --------===//
//
// One edit per call, chosen over every field of every message of the model
// through protobuf reflection, so that no ONNX field is left out as the
// schema grows. Names are drawn from the model's own value names, so that a
// rewired input still refers to something the graph defines.
//
//===----------------------------------------------------------------------===//

#include "onnx_mutator.h"

#include "onnx/onnx_pb.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace moec::fuzz {
namespace {

namespace pb = google::protobuf;
using FD = pb::FieldDescriptor;

/// Largest raw_data an edit grows an initializer to: mutants stay small
/// enough to execute quickly.
constexpr size_t kMaxRawData = 1 << 20;

/// One field of one message of the model.
struct FieldRef {
  pb::Message *message;
  const FD *field;
};

class Mutator {
public:
  Mutator(onnx::ModelProto &model, unsigned seed) : rng(seed) {
    collect(model);
  }

  /// Applies one random edit; false if none applied.
  bool mutate() {
    switch (pick(10)) {
    case 0:
      return resizeInitializer();
    case 1:
      return rewireName();
    default:
      return mutateField();
    }
  }

private:
  size_t pick(size_t n) {
    return n ? std::uniform_int_distribution<size_t>(0, n - 1)(rng) : 0;
  }
  bool chance(int percent) { return pick(100) < size_t(percent); }

  /// Records every field of `message` and its sub-messages, set or not
  /// (so that an edit may also set an absent field), and every value name.
  void collect(pb::Message &message) {
    const pb::Descriptor *descriptor = message.GetDescriptor();
    const pb::Reflection *reflection = message.GetReflection();
    // Sub-messages of a generated message are generated classes (no RTTI:
    // the descriptor says which).
    if (descriptor == onnx::TensorProto::descriptor())
      tensors.push_back(static_cast<onnx::TensorProto *>(&message));
    if (descriptor == onnx::NodeProto::descriptor()) {
      auto &node = static_cast<onnx::NodeProto &>(message);
      names.insert(names.end(), node.input().begin(), node.input().end());
      names.insert(names.end(), node.output().begin(), node.output().end());
    }
    for (int i = 0; i < descriptor->field_count(); ++i) {
      const FD *field = descriptor->field(i);
      bool present = field->is_repeated()
                         ? reflection->FieldSize(message, field) > 0
                         : reflection->HasField(message, field);
      (present ? setFields : unsetFields).push_back({&message, field});
      if (field->cpp_type() != FD::CPPTYPE_MESSAGE || !present)
        continue;
      if (field->is_repeated()) {
        for (int j = 0, e = reflection->FieldSize(message, field); j < e; ++j)
          collect(*reflection->MutableRepeatedMessage(&message, field, j));
      } else {
        collect(*reflection->MutableMessage(&message, field));
      }
    }
  }

  /// A name the model uses, or a fresh one now and then.
  std::string pickName() {
    if (names.empty() || chance(10))
      return chance(50) ? std::string() : "fuzz_" + std::to_string(pick(4));
    return names[pick(names.size())];
  }

  /// Renames one node input or output to another of the model's names: the
  /// graph stays well-formed protobuf but its data flow changes (inputs
  /// swapped, a value read before it is defined, a cycle, a name dropped).
  bool rewireName() {
    std::vector<FieldRef> ends;
    for (const FieldRef &ref : setFields)
      if (ref.field->containing_type() == onnx::NodeProto::descriptor() &&
          (ref.field->name() == "input" || ref.field->name() == "output"))
        ends.push_back(ref);
    if (ends.empty())
      return false;
    const FieldRef &ref = ends[pick(ends.size())];
    const pb::Reflection *reflection = ref.message->GetReflection();
    int size = reflection->FieldSize(*ref.message, ref.field);
    reflection->SetRepeatedString(ref.message, ref.field, pick(size),
                                  pickName());
    return true;
  }

  /// Changes one dim of an initializer and, most of the time, resizes its
  /// raw_data to match, so that the mutant passes the size check and the
  /// new shape reaches the importer and the passes.
  bool resizeInitializer() {
    std::vector<onnx::TensorProto *> candidates;
    for (onnx::TensorProto *tensor : tensors)
      if (tensor->has_raw_data() && tensor->dims_size())
        candidates.push_back(tensor);
    if (candidates.empty())
      return false;
    onnx::TensorProto &tensor = *candidates[pick(candidates.size())];
    // Unsigned, wrapping arithmetic: the model's dims may be anything.
    uint64_t elements = 1;
    for (int64_t dim : tensor.dims())
      elements *= uint64_t(std::max<int64_t>(dim, 1));
    size_t elementSize =
        elements ? tensor.raw_data().size() / size_t(elements) : 0;
    int index = pick(tensor.dims_size());
    uint64_t old = uint64_t(tensor.dims(index));
    int64_t dims[] = {
        0, 1, 2, 3, int64_t(old + 1), int64_t(old - 1), int64_t(old * 2)};
    tensor.set_dims(index, dims[pick(std::size(dims))]);
    if (chance(20) || !elementSize)
      return true;
    uint64_t bytes = elementSize;
    for (int64_t dim : tensor.dims()) {
      if (dim < 0 || (dim && bytes > kMaxRawData / uint64_t(dim)))
        return true;
      bytes *= uint64_t(dim);
    }
    std::string data = tensor.raw_data();
    size_t oldSize = data.size();
    data.resize(bytes);
    for (size_t i = oldSize; i < data.size(); ++i)
      data[i] = data[i % std::max<size_t>(oldSize, 1)];
    tensor.set_raw_data(std::move(data));
    return true;
  }

  int64_t mutateInteger(int64_t value, int64_t min, int64_t max) {
    // Wrapping arithmetic: the edit itself must not overflow (UBSan).
    uint64_t u = uint64_t(value);
    int64_t candidates[] = {0,
                            1,
                            -1,
                            2,
                            int64_t(u + 1),
                            int64_t(u - 1),
                            int64_t(u * 2),
                            int64_t(0 - u),
                            int64_t(u ^ (uint64_t(1) << pick(63))),
                            int64_t(pick(64)),
                            int64_t(1) << 31,
                            int64_t(1) << 40,
                            min,
                            max};
    return std::clamp(candidates[pick(std::size(candidates))], min, max);
  }

  double mutateFloat(double value) {
    double candidates[] = {0.0,
                           1.0,
                           -1.0,
                           value * 2,
                           -value,
                           value + 1,
                           std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           1e-30,
                           1e30};
    return candidates[pick(std::size(candidates))];
  }

  std::string mutateString(std::string value, const FD *field) {
    bool isName = field->name() == "name" || field->name() == "input" ||
                  field->name() == "output";
    if (isName && chance(60))
      return pickName();
    if (field->type() != FD::TYPE_BYTES && chance(30))
      return chance(50) ? std::string() : value + value;
    // Byte-level edits of the string itself (raw_data, op_type, ...).
    size_t maxSize = std::min(kMaxRawData, value.size() * 2 + 64);
    std::string buffer = value;
    buffer.resize(maxSize);
    size_t size = LLVMFuzzerMutate(reinterpret_cast<uint8_t *>(&buffer[0]),
                                   value.size(), maxSize);
    buffer.resize(size);
    return buffer;
  }

  /// Gives element `index` (-1: the singular field) of `ref` a new value.
  void mutateScalar(const FieldRef &ref, int index) {
    pb::Message *m = ref.message;
    const FD *f = ref.field;
    const pb::Reflection *r = m->GetReflection();
    bool rep = index >= 0;
    switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32: {
      int64_t v = rep ? r->GetRepeatedInt32(*m, f, index) : r->GetInt32(*m, f);
      int32_t n = int32_t(mutateInteger(v, INT32_MIN, INT32_MAX));
      rep ? r->SetRepeatedInt32(m, f, index, n) : r->SetInt32(m, f, n);
      break;
    }
    case FD::CPPTYPE_INT64: {
      int64_t v = rep ? r->GetRepeatedInt64(*m, f, index) : r->GetInt64(*m, f);
      int64_t n = mutateInteger(v, INT64_MIN, INT64_MAX);
      rep ? r->SetRepeatedInt64(m, f, index, n) : r->SetInt64(m, f, n);
      break;
    }
    case FD::CPPTYPE_UINT32: {
      int64_t v =
          rep ? r->GetRepeatedUInt32(*m, f, index) : r->GetUInt32(*m, f);
      uint32_t n = uint32_t(mutateInteger(v, 0, UINT32_MAX));
      rep ? r->SetRepeatedUInt32(m, f, index, n) : r->SetUInt32(m, f, n);
      break;
    }
    case FD::CPPTYPE_UINT64: {
      int64_t v = int64_t(rep ? r->GetRepeatedUInt64(*m, f, index)
                              : r->GetUInt64(*m, f));
      uint64_t n = uint64_t(mutateInteger(v, 0, INT64_MAX));
      rep ? r->SetRepeatedUInt64(m, f, index, n) : r->SetUInt64(m, f, n);
      break;
    }
    case FD::CPPTYPE_FLOAT: {
      double v = rep ? r->GetRepeatedFloat(*m, f, index) : r->GetFloat(*m, f);
      float n = float(mutateFloat(v));
      rep ? r->SetRepeatedFloat(m, f, index, n) : r->SetFloat(m, f, n);
      break;
    }
    case FD::CPPTYPE_DOUBLE: {
      double v = rep ? r->GetRepeatedDouble(*m, f, index) : r->GetDouble(*m, f);
      double n = mutateFloat(v);
      rep ? r->SetRepeatedDouble(m, f, index, n) : r->SetDouble(m, f, n);
      break;
    }
    case FD::CPPTYPE_BOOL: {
      bool v = rep ? r->GetRepeatedBool(*m, f, index) : r->GetBool(*m, f);
      rep ? r->SetRepeatedBool(m, f, index, !v) : r->SetBool(m, f, !v);
      break;
    }
    case FD::CPPTYPE_ENUM: {
      const pb::EnumDescriptor *e = f->enum_type();
      const pb::EnumValueDescriptor *n = e->value(pick(e->value_count()));
      rep ? r->SetRepeatedEnum(m, f, index, n) : r->SetEnum(m, f, n);
      break;
    }
    case FD::CPPTYPE_STRING: {
      std::string v =
          rep ? r->GetRepeatedString(*m, f, index) : r->GetString(*m, f);
      std::string n = mutateString(std::move(v), f);
      rep ? r->SetRepeatedString(m, f, index, std::move(n))
          : r->SetString(m, f, std::move(n));
      break;
    }
    case FD::CPPTYPE_MESSAGE:
      break;
    }
  }

  /// Appends a copy of element `index` of a repeated field.
  void appendCopy(const FieldRef &ref, int index) {
    pb::Message *m = ref.message;
    const FD *f = ref.field;
    const pb::Reflection *r = m->GetReflection();
    switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
      return r->AddInt32(m, f, r->GetRepeatedInt32(*m, f, index));
    case FD::CPPTYPE_INT64:
      return r->AddInt64(m, f, r->GetRepeatedInt64(*m, f, index));
    case FD::CPPTYPE_UINT32:
      return r->AddUInt32(m, f, r->GetRepeatedUInt32(*m, f, index));
    case FD::CPPTYPE_UINT64:
      return r->AddUInt64(m, f, r->GetRepeatedUInt64(*m, f, index));
    case FD::CPPTYPE_FLOAT:
      return r->AddFloat(m, f, r->GetRepeatedFloat(*m, f, index));
    case FD::CPPTYPE_DOUBLE:
      return r->AddDouble(m, f, r->GetRepeatedDouble(*m, f, index));
    case FD::CPPTYPE_BOOL:
      return r->AddBool(m, f, r->GetRepeatedBool(*m, f, index));
    case FD::CPPTYPE_ENUM:
      return r->AddEnum(m, f, r->GetRepeatedEnum(*m, f, index));
    case FD::CPPTYPE_STRING:
      return r->AddString(m, f, r->GetRepeatedString(*m, f, index));
    case FD::CPPTYPE_MESSAGE: {
      // Copied through a temporary: adding may move the source element.
      std::unique_ptr<pb::Message> copy(
          r->GetRepeatedMessage(*m, f, index).New());
      copy->CopyFrom(r->GetRepeatedMessage(*m, f, index));
      r->AddMessage(m, f)->CopyFrom(*copy);
      return;
    }
    }
  }

  /// Moves the last element of a repeated field to `index`.
  void moveLastTo(const FieldRef &ref, int index) {
    const pb::Reflection *r = ref.message->GetReflection();
    for (int i = r->FieldSize(*ref.message, ref.field) - 1; i > index; --i)
      r->SwapElements(ref.message, ref.field, i, i - 1);
  }

  /// One edit of one field: a repeated field loses, gains, reorders or
  /// changes an element; a singular one changes, appears or is cleared.
  bool mutateField() {
    const std::vector<FieldRef> &from =
        unsetFields.empty() || chance(85) ? setFields : unsetFields;
    if (from.empty())
      return false;
    const FieldRef &ref = from[pick(from.size())];
    pb::Message *m = ref.message;
    const FD *f = ref.field;
    const pb::Reflection *r = m->GetReflection();
    bool isMessage = f->cpp_type() == FD::CPPTYPE_MESSAGE;
    if (!f->is_repeated()) {
      if (isMessage) {
        if (r->HasField(*m, f))
          r->ClearField(m, f);
        else
          r->MutableMessage(m, f);
      } else if (r->HasField(*m, f) && chance(10)) {
        r->ClearField(m, f);
      } else {
        mutateScalar(ref, -1);
      }
      return true;
    }
    int size = r->FieldSize(*m, f);
    if (!size) {
      if (isMessage)
        r->AddMessage(m, f);
      else
        return false;
      return true;
    }
    int index = pick(size);
    switch (pick(isMessage ? 3 : 4)) {
    case 0: // delete
      for (int i = index; i < size - 1; ++i)
        r->SwapElements(m, f, i, i + 1);
      r->RemoveLast(m, f);
      return true;
    case 1: // duplicate, next to the original
      appendCopy(ref, index);
      moveLastTo(ref, index + 1);
      return true;
    case 2: // swap two elements (node inputs, dims, nodes)
      if (size < 2)
        return false;
      r->SwapElements(m, f, index, pick(size));
      return true;
    default:
      mutateScalar(ref, index);
      return true;
    }
  }

  std::minstd_rand rng;
  std::vector<FieldRef> setFields;
  std::vector<FieldRef> unsetFields;
  std::vector<onnx::TensorProto *> tensors;
  std::vector<std::string> names;
};

/// Serializes `model` into `out` if it fits in `maxSize`; returns the size or
/// 0.
size_t serializeInto(const onnx::ModelProto &model, uint8_t *out,
                     size_t maxSize) {
  size_t size = model.ByteSizeLong();
  if (size == 0 || size > maxSize || size > size_t(INT_MAX))
    return 0;
  return model.SerializeToArray(out, int(size)) ? size : 0;
}

bool parse(onnx::ModelProto &model, const uint8_t *data, size_t size) {
  return size <= size_t(INT_MAX) && model.ParseFromArray(data, int(size));
}

} // namespace

size_t mutateOnnxModel(uint8_t *data, size_t size, size_t maxSize,
                       unsigned seed) {
  onnx::ModelProto original;
  std::minstd_rand rng(seed);
  // Bit flips and truncations still find what the structure-aware edits
  // cannot express (a corrupt varint, a protobuf that only some parsers
  // accept).
  if (rng() % 10 == 0 || !parse(original, data, size))
    return LLVMFuzzerMutate(data, size, maxSize);
  for (int attempt = 0; attempt < 4; ++attempt) {
    onnx::ModelProto model = original;
    // Sometimes several edits at once: some bugs need two changes. Each
    // edit collects the fields afresh (the last one may have moved them).
    int edits = 1 + int(rng() % 3 == 0) + int(rng() % 9 == 0);
    bool changed = false;
    for (int i = 0; i < edits; ++i)
      changed |= Mutator(model, unsigned(rng())).mutate();
    if (!changed)
      continue;
    if (size_t newSize = serializeInto(model, data, maxSize))
      return newSize;
  }
  return LLVMFuzzerMutate(data, size, maxSize);
}

size_t crossOverOnnxModels(const uint8_t *data1, size_t size1,
                           const uint8_t *data2, size_t size2, uint8_t *out,
                           size_t maxOutSize, unsigned seed) {
  onnx::ModelProto model, other;
  if (!parse(model, data1, size1) || !parse(other, data2, size2) ||
      !other.has_graph())
    return 0;
  std::minstd_rand rng(seed);
  onnx::GraphProto &graph = *model.mutable_graph();
  const onnx::GraphProto &from = other.graph();
  // A run of consecutive nodes of the other model, with the initializers
  // they read: a subgraph transplanted into this one (name clashes and
  // dangling inputs are what the validator must catch).
  if (from.node_size()) {
    int begin = int(rng() % from.node_size());
    int end = std::min(from.node_size(), begin + 1 + int(rng() % 4));
    for (int i = begin; i < end; ++i) {
      *graph.add_node() = from.node(i);
      for (const std::string &input : from.node(i).input())
        for (const onnx::TensorProto &init : from.initializer())
          if (init.name() == input && rng() % 2)
            *graph.add_initializer() = init;
    }
  }
  if (from.input_size() && rng() % 4 == 0)
    *graph.add_input() = from.input(int(rng() % from.input_size()));
  return serializeInto(model, out, maxOutSize);
}

} // namespace moec::fuzz
