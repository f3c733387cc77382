//===- test_util.cpp - Helpers for the runtime's unit tests ---------------===//

#include "test_util.h"

#include "kernels/expert_gemm.h"

#include "absl/strings/str_cat.h"

#include <cmath>
#include <random>

namespace moert::testing {

absl::StatusOr<std::unique_ptr<Session>>
openSession(const std::vector<uint8_t> &bytes, int threads,
            std::unique_ptr<Plan> &plan) {
  MOERT_ASSIGN_OR_RETURN(plan,
                         Plan::loadFromMemory(bytes.data(), bytes.size()));
  SessionOptions options;
  options.threads = threads;
  return Session::create(*plan, options);
}

absl::StatusOr<std::vector<Value>>
runStep(fb::OpKind op, const std::vector<std::optional<Value>> &inputs,
        const std::vector<Out> &outputs, fb::AttrsUnion attrs, int threads) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  std::vector<int32_t> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) {
      ins.push_back(-1);
      continue;
    }
    std::vector<PlanDim> dims(inputs[i]->shape.begin(), inputs[i]->shape.end());
    int32_t id = s.addTensor(absl::StrCat("in", i), inputs[i]->dtype, dims);
    s.addInput(id);
    ins.push_back(id);
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    int32_t id =
        s.addTensor(absl::StrCat("out", o), outputs[o].dtype, outputs[o].dims);
    s.addOutput(id);
    outs.push_back(id);
  }
  s.addStep(op, "step", ins, outs, std::move(attrs));
  MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.serialize());
  std::unique_ptr<Plan> plan;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                         openSession(bytes, threads, plan));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i])
      MOERT_RETURN_IF_ERROR(session->setInput(
          absl::StrCat("in", i), inputs[i]->dtype, inputs[i]->shape,
          inputs[i]->bytes.data(), inputs[i]->bytes.size()));
  MOERT_RETURN_IF_ERROR(session->run());
  std::vector<Value> results;
  for (size_t o = 0; o < outputs.size(); ++o) {
    MOERT_ASSIGN_OR_RETURN(Value v,
                           outputValue(*session, absl::StrCat("out", o)));
    results.push_back(std::move(v));
  }
  return results;
}

Value run1(fb::OpKind op, const std::vector<std::optional<Value>> &inputs,
           const Out &output, fb::AttrsUnion attrs, int threads) {
  auto result = runStep(op, inputs, {output}, std::move(attrs), threads);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok())
    return Value();
  return std::move((*result)[0]);
}

void expectNear(const Value &actual, const std::vector<int64_t> &shape,
                const std::vector<float> &expected, float tolerance) {
  ASSERT_EQ(actual.shape, shape);
  ASSERT_EQ(actual.dtype, DType::F32);
  std::vector<float> values = actual.as<float>();
  ASSERT_EQ(values.size(), expected.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(values[i])) << "at " << i;
      continue;
    }
    if (std::isinf(expected[i])) {
      EXPECT_EQ(values[i], expected[i]) << "at " << i;
      continue;
    }
    float bound = tolerance * std::max(1.0f, std::fabs(expected[i]));
    EXPECT_NEAR(values[i], expected[i], bound) << "at " << i;
  }
}

absl::StatusOr<BackendPair>
openOnBothBackends(const std::vector<uint8_t> &cpu,
                   const std::vector<uint8_t> &gpu) {
  BackendPair pair;
  MOERT_ASSIGN_OR_RETURN(pair.cpuPlan,
                         Plan::loadFromMemory(cpu.data(), cpu.size()));
  MOERT_ASSIGN_OR_RETURN(pair.gpuPlan,
                         Plan::loadFromMemory(gpu.data(), gpu.size()));
  MOERT_ASSIGN_OR_RETURN(pair.cpu,
                         Session::create(*pair.cpuPlan, SessionOptions()));
  MOERT_ASSIGN_OR_RETURN(pair.gpu, CudaSession::create(*pair.gpuPlan));
  return pair;
}

absl::StatusOr<Value> outputValue(const SessionBase &session,
                                  std::string_view name) {
  MOERT_ASSIGN_OR_RETURN(TensorData data, session.output(name));
  Value v;
  v.dtype = data.dtype;
  v.shape = data.shape;
  const auto *p = static_cast<const uint8_t *>(data.data);
  v.bytes.assign(p, p + data.bytes);
  return v;
}

fb::AttrsUnion routerAttrs(const RouterSpec &spec) {
  fb::RouterAttrsT a;
  a.score_function = spec.score;
  a.top_k = spec.topK;
  a.score_after_topk = spec.afterTopK;
  a.normalize = spec.normalize;
  a.routed_scaling_factor = spec.scale;
  a.n_group = spec.groups;
  a.topk_group = spec.keep;
  a.capacity = spec.capacity;
  a.normalize_kept_epsilon = spec.keptEpsilon;
  return attrs(a);
}

std::vector<int64_t> ffnMatrixShape(int64_t experts, bool lead, bool inOut,
                                    int64_t in, int64_t out) {
  std::vector<int64_t> shape;
  if (lead)
    shape.push_back(experts);
  shape.push_back(inOut ? in : out);
  shape.push_back(inOut ? out : in);
  return shape;
}

std::vector<int64_t> ffnVectorShape(int64_t experts, bool lead, int64_t size) {
  std::vector<int64_t> shape;
  if (lead)
    shape.push_back(experts);
  shape.push_back(size);
  return shape;
}

int64_t numelOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::vector<PlanDim> dimsOf(const std::vector<int64_t> &shape) {
  return std::vector<PlanDim>(shape.begin(), shape.end());
}

/// Bit-exact equality (NaN equal to NaN), with the element named.
void expectSameFloats(const std::vector<float> &got,
                      const std::vector<float> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i]))
      continue;
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    ASSERT_EQ(a, b) << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

WidenedBlocks::WidenedBlocks() { detail::allowBf16Matmul(false); }
WidenedBlocks::~WidenedBlocks() { detail::allowBf16Matmul(true); }
SgemmBlocks::SgemmBlocks() { detail::allowF32Matmul(false); }
SgemmBlocks::~SgemmBlocks() { detail::allowF32Matmul(true); }

std::vector<float> randomFloats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> out(count);
  for (float &v : out)
    v = dist(rng);
  return out;
}

} // namespace moert::testing
