//===- test_util.h - Helpers for the runtime's unit tests -------*- C++ -*-===//
//
// `runStep` builds a one-step plan with the plan writer, loads it, binds the
// inputs and runs it: every kernel test goes through the loader's validation
// and the session's shape checks like a compiled plan does.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TESTS_TEST_UTIL_H
#define MOERT_TESTS_TEST_UTIL_H

#include "format/plan_writer.h"
#include "moert/cuda.h"
#include "moert/moert.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace moert::testing {

/// A host tensor value.
struct Value {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  template <typename T>
  static Value of(DType dtype, std::vector<int64_t> shape,
                  const std::vector<T> &values) {
    Value v;
    v.dtype = dtype;
    v.shape = std::move(shape);
    v.bytes.resize(values.size() * sizeof(T));
    if (!values.empty())
      std::memcpy(v.bytes.data(), values.data(), v.bytes.size());
    return v;
  }
  template <typename T> std::vector<T> as() const {
    std::vector<T> out(bytes.size() / sizeof(T));
    if (!out.empty())
      std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

inline Value f32(std::vector<int64_t> shape, const std::vector<float> &v) {
  return Value::of(DType::F32, std::move(shape), v);
}
inline Value i64(std::vector<int64_t> shape, const std::vector<int64_t> &v) {
  return Value::of(DType::I64, std::move(shape), v);
}
inline Value i32(std::vector<int64_t> shape, const std::vector<int32_t> &v) {
  return Value::of(DType::I32, std::move(shape), v);
}
inline Value boolean(std::vector<int64_t> shape,
                     const std::vector<uint8_t> &v) {
  return Value::of(DType::Bool, std::move(shape), v);
}

/// A declared step output.
struct Out {
  DType dtype;
  std::vector<PlanDim> dims;
};

/// Loads the plan serialized in `bytes` into `plan` and opens a session of
/// `threads` threads on it (`plan` must outlive the session).
absl::StatusOr<std::unique_ptr<Session>>
openSession(const std::vector<uint8_t> &bytes, int threads,
            std::unique_ptr<Plan> &plan);

/// Runs one step of `op`; std::nullopt inputs are omitted (-1).
absl::StatusOr<std::vector<Value>>
runStep(fb::OpKind op, const std::vector<std::optional<Value>> &inputs,
        const std::vector<Out> &outputs, fb::AttrsUnion attrs = {},
        int threads = 2);

/// Like runStep, returning the single output; fails the test on error.
Value run1(fb::OpKind op, const std::vector<std::optional<Value>> &inputs,
           const Out &output, fb::AttrsUnion attrs = {}, int threads = 2);

/// Expects `actual` to equal `expected` within `tolerance` (relative and
/// absolute), element by element, and the shapes to match.
void expectNear(const Value &actual, const std::vector<int64_t> &shape,
                const std::vector<float> &expected, float tolerance = 1e-5f);

/// The value of output `name` of `session` after a successful run, copied.
absl::StatusOr<Value> outputValue(const SessionBase &session,
                                  std::string_view name);

/// A Router step's attributes; the defaults are a plain softmax top-2.
struct RouterSpec {
  fb::ScoreFunction score = fb::ScoreFunction::Softmax;
  int64_t topK = 2;
  bool afterTopK = false;
  bool normalize = false;
  float scale = 1.0f;
  int64_t groups = 1, keep = 1;
  int64_t capacity = 0;
  /// normalize_kept's epsilon; 0: off.
  float keptEpsilon = 0;
};

fb::AttrsUnion routerAttrs(const RouterSpec &spec);

/// The shape of an expert network's weight matrix with `in` inputs and `out`
/// outputs in its layout ([in, out] when `inOut`, else [out, in]), after the
/// expert dimension `experts` when `lead`.
std::vector<int64_t> ffnMatrixShape(int64_t experts, bool lead, bool inOut,
                                    int64_t in, int64_t out);

/// The shape of an expert network's bias of `size`, after the expert
/// dimension `experts` when `lead`.
std::vector<int64_t> ffnVectorShape(int64_t experts, bool lead, int64_t size);

/// The element count of `shape`.
int64_t numelOf(const std::vector<int64_t> &shape);

/// `shape` as static plan dims.
std::vector<PlanDim> dimsOf(const std::vector<int64_t> &shape);

/// Bit-exact equality (NaN equal to NaN), with the element named.
void expectSameFloats(const std::vector<float> &got,
                      const std::vector<float> &want);

/// Deterministic pseudo-random floats in [-1, 1).
std::vector<float> randomFloats(size_t count, uint32_t seed);

/// While alive, the experts' GEMM blocks of bf16 and int8 weights widen to
/// f32 as on a CPU without AVX512-BF16 (kernels/expert_gemm.h), so that the
/// fallback is tested on every CPU.
struct WidenedBlocks {
  WidenedBlocks();
  ~WidenedBlocks();
  WidenedBlocks(const WidenedBlocks &) = delete;
  WidenedBlocks &operator=(const WidenedBlocks &) = delete;
};

/// While alive, the experts' GEMM blocks of f32 weights run oneDNN's sgemm
/// as on a CPU without f32 brgemm kernels (kernels/expert_gemm.h), so that
/// the fallback is tested on every CPU.
struct SgemmBlocks {
  SgemmBlocks();
  ~SgemmBlocks();
  SgemmBlocks(const SgemmBlocks &) = delete;
  SgemmBlocks &operator=(const SgemmBlocks &) = delete;
};

/// Matches an absl::Status whose message contains `substring`.
MATCHER_P(StatusHas, substring, "") {
  if (arg.ok()) {
    *result_listener << "status is OK";
    return false;
  }
  std::string message(arg.message());
  *result_listener << "message: " << message;
  return message.find(substring) != std::string::npos;
}

/// A plan's CPU and CUDA versions (same steps, backend set per plan) with a
/// session on each: what the GPU tests compare. Plans outlive the sessions.
struct BackendPair {
  std::unique_ptr<Plan> cpuPlan, gpuPlan;
  std::unique_ptr<Session> cpu;
  std::unique_ptr<CudaSession> gpu;
};
/// Loads both serialized plans and opens a session on each backend.
absl::StatusOr<BackendPair> openOnBothBackends(const std::vector<uint8_t> &cpu,
                                               const std::vector<uint8_t> &gpu);

/// Skips the test where no GPU can run the CUDA backend's kernels.
#define MOERT_REQUIRE_GPU()                                                    \
  do {                                                                         \
    if (!::moert::cudaBackendBuilt())                                          \
      GTEST_SKIP() << "built without the CUDA backend";                        \
    if (absl::StatusOr<int> gpus = ::moert::cudaDeviceCount(); !gpus.ok())     \
      GTEST_SKIP() << gpus.status().message();                                 \
  } while (false)

} // namespace moert::testing

#endif // MOERT_TESTS_TEST_UTIL_H
