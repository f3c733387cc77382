//===- c_api.cpp - The C API over the C++ runtime ------------------------===//
//
// moert/moert_c.h: each handle owns its C++ object and the C views of its
// descriptions; each entry point converts an absl::Status into a code and
// the thread's last message, and no exception leaves it. Plans and sessions
// here; generators and batches in c_api_generate.cpp.
//
//===----------------------------------------------------------------------===//

#include "api/c_api_internal.h"
#include "loader/plan_impl.h"

#include <algorithm>
#include <chrono>

#ifndef MOERT_VERSION
#error "MOERT_VERSION must be defined by the build"
#endif

namespace moert::capi {
namespace {

thread_local std::string lastError;

/// The C code of an absl status code.
moert_status codeOf(absl::StatusCode code) {
  switch (code) {
  case absl::StatusCode::kOk:
    return MOERT_OK;
  case absl::StatusCode::kInvalidArgument:
  case absl::StatusCode::kOutOfRange:
    return MOERT_ERROR_INVALID_ARGUMENT;
  case absl::StatusCode::kNotFound:
    return MOERT_ERROR_NOT_FOUND;
  case absl::StatusCode::kFailedPrecondition:
    return MOERT_ERROR_FAILED_PRECONDITION;
  case absl::StatusCode::kDataLoss:
    return MOERT_ERROR_INVALID_PLAN;
  case absl::StatusCode::kResourceExhausted:
    return MOERT_ERROR_RESOURCE_EXHAUSTED;
  case absl::StatusCode::kUnimplemented:
    return MOERT_ERROR_UNSUPPORTED;
  default:
    return MOERT_ERROR_INTERNAL;
  }
}

} // namespace

moert_status fail(moert_status status, std::string message) {
  try {
    lastError = std::move(message);
  } catch (...) {
    // Out of memory for the message: keep the code.
  }
  return status;
}

moert_status fail(const absl::Status &status) {
  return fail(codeOf(status.code()), std::string(status.message()));
}

moert_status shapeOf(const char *function, const int64_t *shape, int32_t rank,
                     std::vector<int64_t> &out) {
  if (rank < 0 || (rank > 0 && !shape))
    return fail(MOERT_ERROR_INVALID_ARGUMENT,
                absl::StrCat(function, ": rank ", rank,
                             rank < 0 ? " is negative" : " with a null shape"));
  out.assign(shape, shape + rank);
  return MOERT_OK;
}

} // namespace moert::capi

using namespace moert::capi;

namespace {

std::vector<DescView> viewsOf(const moert::Plan &plan,
                              const std::vector<moert::TensorDesc> &descs) {
  std::vector<DescView> views(descs.size());
  for (size_t i = 0; i < descs.size(); ++i) {
    const moert::TensorDesc &d = descs[i];
    DescView &view = views[i];
    uint64_t bytes = moert::dtypeSize(d.dtype);
    for (const moert::DimDesc &dim : d.dims) {
      moert_dim c{};
      c.bound = dim.bound;
      bytes *= static_cast<uint64_t>(dim.bound);
      switch (dim.kind) {
      case moert::DimDesc::Kind::Static:
        c.kind = MOERT_DIM_STATIC;
        break;
      case moert::DimDesc::Kind::Symbolic:
        c.kind = MOERT_DIM_SYMBOLIC;
        c.symbol = dim.symbol.c_str();
        for (const moert::SymbolDesc &symbol : plan.symbols())
          if (symbol.name == dim.symbol)
            c.symbol_min = symbol.min;
        break;
      case moert::DimDesc::Kind::Dynamic:
        c.kind = MOERT_DIM_DYNAMIC;
        break;
      }
      view.dims.push_back(c);
    }
    view.desc.name = d.name.c_str();
    view.desc.dtype = static_cast<moert_dtype>(d.dtype);
    view.desc.rank = static_cast<int32_t>(d.dims.size());
    view.desc.dims = view.dims.data();
    view.desc.max_bytes = bytes;
  }
  return views;
}

moert_status describe(const std::vector<DescView> &views, size_t index,
                      const char *what, moert_tensor_desc *desc) {
  if (index >= views.size())
    return fail(MOERT_ERROR_INVALID_ARGUMENT,
                absl::StrCat(what, " index ", index,
                             " is out of range; the "
                             "plan has ",
                             views.size()));
  *desc = views[index].desc;
  return MOERT_OK;
}

/// moert_session_set_input and moert_session_bind_input: checks the C
/// arguments and hands the value to `give` (SessionBase::setInput or
/// bindInput).
moert_status giveInput(const char *function,
                       absl::Status (moert::SessionBase::*give)(
                           std::string_view, moert::DType,
                           const std::vector<int64_t> &, const void *, size_t),
                       moert_session *session, const char *name,
                       moert_dtype dtype, const int64_t *shape, int32_t rank,
                       const void *data, size_t bytes) {
  return guard(function, [&] {
    if (!session || !name || (bytes && !data))
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  absl::StrCat(function, ": ",
                               !session ? "session"
                               : !name  ? "name"
                                        : "data",
                               " is null"));
    std::vector<int64_t> dims;
    if (moert_status s = shapeOf(function, shape, rank, dims))
      return s;
    absl::Status status = ((*session->session).*give)(
        name, static_cast<moert::DType>(dtype), dims, data, bytes);
    return status.ok() ? MOERT_OK : fail(status);
  });
}

} // namespace

extern "C" {

const char *moert_version(void) { return MOERT_VERSION; }

const char *moert_last_error(void) { return lastError.c_str(); }

const char *moert_dtype_name(moert_dtype dtype) {
  return moert::dtypeName(static_cast<moert::DType>(dtype));
}

size_t moert_dtype_size(moert_dtype dtype) {
  return moert::dtypeSize(static_cast<moert::DType>(dtype));
}

moert_status moert_plan_load(const char *path, moert_plan **plan) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(plan);
    *plan = nullptr;
    MOERT_C_REQUIRE(path);
    absl::StatusOr<std::unique_ptr<moert::Plan>> loaded =
        moert::Plan::load(path);
    if (!loaded.ok()) {
      // Whatever the loader's code, a file that does not open is "not
      // found" and one that opens but fails validation an invalid plan.
      moert_status code = absl::IsNotFound(loaded.status())
                              ? MOERT_ERROR_NOT_FOUND
                              : codeOf(loaded.status().code());
      if (code == MOERT_ERROR_INVALID_ARGUMENT ||
          code == MOERT_ERROR_FAILED_PRECONDITION ||
          code == MOERT_ERROR_INTERNAL)
        code = MOERT_ERROR_INVALID_PLAN;
      return fail(code, std::string(loaded.status().message()));
    }
    auto handle = std::make_unique<moert_plan>();
    handle->plan = *std::move(loaded);
    handle->inputs = viewsOf(*handle->plan, handle->plan->inputs());
    handle->outputs = viewsOf(*handle->plan, handle->plan->outputs());
    // A step's output may have more planned bytes than its bounds need; a
    // bound buffer needs all of them (SessionBase::outputCapacity).
    const moert::detail::ScheduleInfo &schedule =
        handle->plan->impl().schedules[0];
    for (size_t k = 0; k < handle->outputs.size(); ++k) {
      const moert::detail::TensorInfo &info =
          schedule.tensors[schedule.outputs[k]];
      uint64_t &bytes = handle->outputs[k].desc.max_bytes;
      if (info.producer >= 0 && !info.isGraphInput)
        bytes = std::max(bytes, info.size);
    }
    *plan = handle.release();
    return MOERT_OK;
  });
}

void moert_plan_free(moert_plan *plan) { delete plan; }

size_t moert_plan_num_inputs(const moert_plan *plan) {
  return plan ? plan->inputs.size() : 0;
}

size_t moert_plan_num_outputs(const moert_plan *plan) {
  return plan ? plan->outputs.size() : 0;
}

moert_status moert_plan_input(const moert_plan *plan, size_t index,
                              moert_tensor_desc *desc) {
  MOERT_C_REQUIRE(plan);
  MOERT_C_REQUIRE(desc);
  return describe(plan->inputs, index, "input", desc);
}

moert_status moert_plan_output(const moert_plan *plan, size_t index,
                               moert_tensor_desc *desc) {
  MOERT_C_REQUIRE(plan);
  MOERT_C_REQUIRE(desc);
  return describe(plan->outputs, index, "output", desc);
}

int32_t moert_plan_num_devices(const moert_plan *plan) {
  return plan ? plan->plan->numDevices() : 0;
}

moert_session_options moert_session_options_default(void) {
  moert_session_options options;
  options.threads = 0;
  options.collect_stats = 1;
  return options;
}

moert_status moert_session_create(const moert_plan *plan,
                                  const moert_session_options *options,
                                  moert_session **session) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(session);
    *session = nullptr;
    MOERT_C_REQUIRE(plan);
    moert_session_options c =
        options ? *options : moert_session_options_default();
    if (c.threads < 0)
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("moert_session_create: threads is ", c.threads,
                               "; it must be 0 (the hardware concurrency) or "
                               "positive"));
    moert::SessionOptions cxx;
    cxx.threads = c.threads;
    cxx.collectStats = c.collect_stats != 0;
    absl::StatusOr<std::unique_ptr<moert::Session>> created =
        moert::Session::create(*plan->plan, cxx);
    if (!created.ok())
      return fail(created.status());
    auto handle = std::make_unique<moert_session>();
    handle->plan = plan;
    handle->session = *std::move(created);
    handle->steps = handle->session->stepStats();
    *session = handle.release();
    return MOERT_OK;
  });
}

void moert_session_free(moert_session *session) { delete session; }

moert_status moert_session_set_input(moert_session *session, const char *name,
                                     moert_dtype dtype, const int64_t *shape,
                                     int32_t rank, const void *data,
                                     size_t bytes) {
  return giveInput(__func__, &moert::Session::setInput, session, name, dtype,
                   shape, rank, data, bytes);
}

moert_status moert_session_bind_input(moert_session *session, const char *name,
                                      moert_dtype dtype, const int64_t *shape,
                                      int32_t rank, const void *data,
                                      size_t bytes) {
  return giveInput(__func__, &moert::Session::bindInput, session, name, dtype,
                   shape, rank, data, bytes);
}

moert_status moert_session_bind_output(moert_session *session, const char *name,
                                       void *data, size_t capacity) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(session);
    MOERT_C_REQUIRE(name);
    absl::Status status = session->session->bindOutput(name, data, capacity);
    return status.ok() ? MOERT_OK : fail(status);
  });
}

moert_status moert_session_run(moert_session *session) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(session);
    session->outputShapes.clear();
    auto start = std::chrono::steady_clock::now();
    absl::Status status = session->session->run();
    if (!status.ok())
      return fail(status);
    session->lastSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    ++session->runs;
    session->steps = session->session->stepStats();
    return MOERT_OK;
  });
}

moert_status moert_session_output(moert_session *session, const char *name,
                                  moert_tensor *tensor) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(session);
    MOERT_C_REQUIRE(name);
    MOERT_C_REQUIRE(tensor);
    absl::StatusOr<moert::TensorData> value = session->session->output(name);
    if (!value.ok())
      return fail(value.status());
    // A second read of the same output keeps the first one's shape (the same
    // until the next run), so that its pointer stays valid.
    const std::vector<int64_t> &shape =
        session->outputShapes.emplace(name, std::move(value->shape))
            .first->second;
    tensor->dtype = static_cast<moert_dtype>(value->dtype);
    tensor->rank = static_cast<int32_t>(shape.size());
    tensor->shape = shape.data();
    tensor->data = value->data;
    tensor->bytes = value->bytes;
    return MOERT_OK;
  });
}

moert_status moert_session_run_time(const moert_session *session,
                                    uint64_t *runs, double *last_seconds) {
  MOERT_C_REQUIRE(session);
  if (runs)
    *runs = session->runs;
  if (last_seconds)
    *last_seconds = session->lastSeconds;
  return MOERT_OK;
}

size_t moert_session_num_steps(const moert_session *session) {
  return session ? session->plan->plan->numSteps() : 0;
}

moert_status moert_session_step_stats(moert_session *session, size_t index,
                                      moert_step_stats *stats) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(session);
    MOERT_C_REQUIRE(stats);
    if (index >= session->steps.size())
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("step index ", index,
                               " is out of range; the "
                               "schedule has ",
                               session->steps.size()));
    const moert::StepStats &step = session->steps[index];
    stats->name = step.name.c_str();
    stats->op = step.op.c_str();
    stats->calls = step.calls;
    stats->total_seconds = step.totalSeconds;
    return MOERT_OK;
  });
}

moert_status moert_session_reset_stats(moert_session *session) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(session);
    session->session->resetStats();
    session->runs = 0;
    session->lastSeconds = 0;
    session->steps = session->session->stepStats();
    return MOERT_OK;
  });
}

} // extern "C"
