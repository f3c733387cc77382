//===- c_api.cpp - The C API over the C++ runtime ------------------------===//
//
// moert/moert_c.h: each handle owns its C++ object and the C views of its
// descriptions; each entry point converts an absl::Status into a code and
// the thread's last message, and no exception leaves it.
//
//===----------------------------------------------------------------------===//

#include "generate/plan_generator.h"
#include "loader/plan_impl.h"
#include "moert/batch_generator.h"
#include "moert/moert.h"
#include "moert/moert_c.h"
#include "moert/vision.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <new>
#include <string>
#include <vector>

#ifndef MOERT_VERSION
#error "MOERT_VERSION must be defined by the build"
#endif

namespace {

/// The C view of one TensorDesc: its dims, with pointers into the desc.
struct DescView {
  std::vector<moert_dim> dims;
  moert_tensor_desc desc{};
};

} // namespace

struct moert_plan {
  std::unique_ptr<moert::Plan> plan;
  std::vector<DescView> inputs;
  std::vector<DescView> outputs;
};

struct moert_session {
  const moert_plan *plan = nullptr;
  std::unique_ptr<moert::Session> session;
  /// The shapes of the outputs read since the last run, by name
  /// (moert_tensor.shape points into them; a run clears them).
  std::map<std::string, std::vector<int64_t>, std::less<>> outputShapes;
  /// The step statistics as of the last run or reset (moert_step_stats'
  /// strings point into them).
  std::vector<moert::StepStats> steps;
  uint64_t runs = 0;
  double lastSeconds = 0;
};

struct moert_generator {
  std::unique_ptr<moert::detail::PlanGenerator> generator;
  /// Its plan (freed after the generator), for the image processor.
  const moert::Plan *plan = nullptr;
};

struct moert_batch {
  std::unique_ptr<moert::BatchGenerator> batch;
  /// The last step's events (moert_batch_step points into them).
  std::vector<moert_batch_event> events;
  /// The last expert selections read (moert_batch_expert_selections).
  std::vector<std::vector<uint64_t>> selections;
};

namespace {

thread_local std::string lastError;

/// Records `message` as this thread's last error; returns `status`.
moert_status fail(moert_status status, std::string message) {
  try {
    lastError = std::move(message);
  } catch (...) {
    // Out of memory for the message: keep the code.
  }
  return status;
}

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

moert_status fail(const absl::Status &status) {
  return fail(codeOf(status.code()), std::string(status.message()));
}

/// Runs `body` (returning a moert_status), turning any exception into
/// MOERT_ERROR_INTERNAL or MOERT_ERROR_RESOURCE_EXHAUSTED.
template <typename Body> moert_status guard(const char *function, Body body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(MOERT_ERROR_RESOURCE_EXHAUSTED,
                absl::StrCat(function, ": out of memory"));
  } catch (const std::exception &e) {
    return fail(MOERT_ERROR_INTERNAL, absl::StrCat(function, ": ", e.what()));
  } catch (...) {
    return fail(MOERT_ERROR_INTERNAL,
                absl::StrCat(function, ": unknown exception"));
  }
}

/// Fails with "FUNCTION: ARG is null" unless every pointer is set.
#define MOERT_C_REQUIRE(ptr)                                                   \
  do {                                                                         \
    if (!(ptr))                                                                \
      return fail(MOERT_ERROR_INVALID_ARGUMENT,                                \
                  absl::StrCat(__func__, ": " #ptr " is null"));               \
  } while (false)

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

/// The C++ form of a C shape; fails on a negative rank or a null shape of
/// positive rank.
moert_status shapeOf(const char *function, const int64_t *shape, int32_t rank,
                     std::vector<int64_t> &out) {
  if (rank < 0 || (rank > 0 && !shape))
    return fail(MOERT_ERROR_INVALID_ARGUMENT,
                absl::StrCat(function, ": rank ", rank,
                             rank < 0 ? " is negative" : " with a null shape"));
  out.assign(shape, shape + rank);
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

/// The ids of a C prompt; fails on a null prompt of positive length.
moert_status promptOf(const char *function, const int64_t *prompt,
                      size_t length, std::vector<int64_t> &out) {
  if (length > 0 && !prompt)
    return fail(MOERT_ERROR_INVALID_ARGUMENT,
                absl::StrCat(function, ": prompt is null"));
  out.assign(prompt, prompt + length);
  return MOERT_OK;
}

/// The C++ options of `c` (its callback aside).
moert::GenerateOptions generateOptions(const moert_generate_options &c) {
  moert::GenerateOptions cxx;
  cxx.maxNewTokens = c.max_new_tokens;
  cxx.sampling.temperature = c.temperature;
  cxx.sampling.topK = c.top_k;
  cxx.sampling.topP = c.top_p;
  cxx.sampling.seed = c.seed;
  if (c.num_stop_ids > 0)
    cxx.stopIds.assign(c.stop_ids, c.stop_ids + c.num_stop_ids);
  return cxx;
}

/// Converts a moert::Status into the C result.
moert_status resultOf(const absl::Status &status) {
  return status.ok() ? MOERT_OK : fail(status);
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

moert_generate_options moert_generate_options_default(void) {
  moert_generate_options options{};
  options.max_new_tokens = 16;
  options.top_p = 1.0;
  return options;
}

moert_status moert_generator_create(const moert_plan *plan,
                                    const moert_session_options *options,
                                    moert_generator **generator) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(generator);
    *generator = nullptr;
    MOERT_C_REQUIRE(plan);
    int32_t threads = options ? options->threads : 0;
    if (threads < 0)
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("moert_generator_create: threads is ", threads,
                               "; it must be 0 (the hardware concurrency) or "
                               "positive"));
    auto created = moert::detail::PlanGenerator::create(*plan->plan, threads);
    if (!created.ok())
      return fail(created.status());
    *generator = new moert_generator{*std::move(created), plan->plan.get()};
    return MOERT_OK;
  });
}

void moert_generator_free(moert_generator *generator) { delete generator; }

moert_status moert_generator_generate(moert_generator *generator,
                                      const int64_t *prompt,
                                      size_t prompt_length,
                                      const moert_generate_options *options,
                                      int64_t *tokens, size_t capacity,
                                      size_t *num_tokens) {
  return moert_generator_generate_vision(generator, prompt, prompt_length,
                                         nullptr, 0, options, tokens, capacity,
                                         num_tokens);
}

moert_status moert_generator_generate_vision(
    moert_generator *generator, const int64_t *prompt, size_t prompt_length,
    const moert_vision_input *vision, size_t num_vision,
    const moert_generate_options *options, int64_t *tokens, size_t capacity,
    size_t *num_tokens) {
  return guard("moert_generator_generate", [&] {
    MOERT_C_REQUIRE(generator);
    MOERT_C_REQUIRE(tokens);
    MOERT_C_REQUIRE(num_tokens);
    *num_tokens = 0;
    moert_generate_options c =
        options ? *options : moert_generate_options_default();
    if (c.num_stop_ids > 0 && !c.stop_ids)
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  "moert_generator_generate: stop_ids is null");
    if (c.max_new_tokens < 0 ||
        static_cast<uint64_t>(c.max_new_tokens) > capacity)
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("moert_generator_generate: tokens has room for ",
                               capacity, " ids; max_new_tokens is ",
                               c.max_new_tokens));
    std::vector<int64_t> ids;
    if (moert_status s = promptOf(__func__, prompt, prompt_length, ids))
      return s;
    if (num_vision > 0 && !vision)
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  "moert_generator_generate_vision: vision is null");
    moert::VisionInputs inputs;
    for (size_t i = 0; i < num_vision; ++i) {
      const moert_vision_input &v = vision[i];
      std::vector<int64_t> dims;
      if (!v.name || (v.bytes && !v.data) || v.dtype < MOERT_DTYPE_F32 ||
          v.dtype > MOERT_DTYPE_I8)
        return fail(MOERT_ERROR_INVALID_ARGUMENT,
                    absl::StrCat("moert_generator_generate_vision: vision "
                                 "input ",
                                 i, " has a null name or data or no dtype"));
      if (moert_status s =
              shapeOf("moert_generator_generate_vision", v.shape, v.rank, dims))
        return s;
      inputs.emplace_back(v.name,
                          moert::TensorData{static_cast<moert::DType>(v.dtype),
                                            std::move(dims), v.data, v.bytes});
    }
    moert::GenerateOptions cxx = generateOptions(c);
    std::function<void(int64_t)> onToken;
    if (c.on_token)
      onToken = [&c](int64_t token) { c.on_token(token, c.user_data); };
    if (c.should_stop)
      cxx.stopRequested = [&c] { return c.should_stop(c.user_data) != 0; };
    absl::StatusOr<std::vector<int64_t>> drawn =
        generator->generator->generate(ids, inputs, cxx, onToken);
    if (!drawn.ok())
      return fail(drawn.status());
    std::copy(drawn->begin(), drawn->end(), tokens);
    *num_tokens = drawn->size();
    return MOERT_OK;
  });
}

moert_status moert_generator_generate_images(
    moert_generator *generator, const int64_t *prompt, size_t prompt_length,
    const moert_image *images, size_t num_images,
    const moert_generate_options *options, int64_t *tokens, size_t capacity,
    size_t *num_tokens) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(generator);
    MOERT_C_REQUIRE(num_tokens);
    *num_tokens = 0;
    if (num_images > 0 && !images)
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  "moert_generator_generate_images: images is null");
    const moert::MultimodalDesc *mm = generator->plan->multimodal();
    if (!mm)
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  "moert_generator_generate_images: images need a "
                  "multimodal plan");
    std::vector<std::string> paths;
    std::vector<moert::EncodedImage> encoded;
    for (size_t i = 0; i < num_images; ++i) {
      if (images[i].path)
        paths.push_back(images[i].path);
      else
        encoded.push_back({absl::StrCat("image ", i),
                           static_cast<const uint8_t *>(images[i].data),
                           images[i].bytes});
    }
    if (!paths.empty() && !encoded.empty())
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  "moert_generator_generate_images: give every image as a "
                  "path or every image as bytes");
    absl::StatusOr<std::vector<moert::NamedTensor>> loaded =
        encoded.empty() ? moert::loadImages(*mm, paths)
                        : moert::loadEncodedImages(*mm, encoded);
    if (!loaded.ok())
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("moert_generator_generate_images: ",
                               loaded.status().message()));
    std::vector<moert_vision_input> vision;
    for (const moert::NamedTensor &t : *loaded)
      vision.push_back({t.name.c_str(), static_cast<moert_dtype>(t.dtype),
                        t.shape.data(), static_cast<int32_t>(t.shape.size()),
                        t.bytes.data(), t.bytes.size()});
    return moert_generator_generate_vision(
        generator, prompt, prompt_length, vision.data(), vision.size(), options,
        tokens, capacity, num_tokens);
  });
}

moert_status moert_generator_prefill(moert_generator *generator,
                                     const int64_t *prompt,
                                     size_t prompt_length) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(generator);
    std::vector<int64_t> ids;
    if (moert_status s = promptOf(__func__, prompt, prompt_length, ids))
      return s;
    return resultOf(generator->generator->prefill(ids));
  });
}

moert_status moert_generator_decode(moert_generator *generator, int64_t token) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(generator);
    return resultOf(generator->generator->decode(token));
  });
}

moert_status moert_generator_logits(const moert_generator *generator,
                                    const float **logits, int64_t *vocab) {
  MOERT_C_REQUIRE(generator);
  MOERT_C_REQUIRE(logits);
  MOERT_C_REQUIRE(vocab);
  const std::vector<float> &row = generator->generator->logits();
  if (row.empty())
    return fail(MOERT_ERROR_FAILED_PRECONDITION,
                "moert_generator_logits: no step has run");
  *logits = row.data();
  *vocab = static_cast<int64_t>(row.size());
  return MOERT_OK;
}

moert_status moert_generator_length(const moert_generator *generator,
                                    int64_t *length, int64_t *max_seq) {
  MOERT_C_REQUIRE(generator);
  if (length)
    *length = generator->generator->length();
  if (max_seq)
    *max_seq = generator->generator->maxSeq();
  return MOERT_OK;
}

moert_status moert_generator_times(const moert_generator *generator,
                                   moert_generation_times *times) {
  MOERT_C_REQUIRE(generator);
  MOERT_C_REQUIRE(times);
  const moert::GenerationTimes &t = generator->generator->times();
  times->prompt_tokens = t.promptTokens;
  times->new_tokens = t.newTokens;
  times->prefill_seconds = t.prefillSeconds;
  times->first_token_seconds = t.firstTokenSeconds;
  times->decode_steps = t.decodeSteps;
  times->decode_seconds = t.decodeSeconds;
  times->stopped_early = t.stoppedEarly ? 1 : 0;
  return MOERT_OK;
}

moert_status moert_batch_create(const moert_plan *plan,
                                const moert_session_options *options,
                                int32_t slots, moert_batch **batch) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(batch);
    *batch = nullptr;
    MOERT_C_REQUIRE(plan);
    moert::SessionOptions session;
    session.threads = options ? options->threads : 0;
    session.collectStats = false;
    if (session.threads < 0)
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("moert_batch_create: threads is ",
                               session.threads,
                               "; it must be 0 (the hardware concurrency) or "
                               "positive"));
    moert::BatchOptions batchOptions;
    batchOptions.slots = slots;
    auto created =
        moert::BatchGenerator::create(*plan->plan, session, batchOptions);
    if (!created.ok())
      return fail(created.status());
    *batch = new moert_batch{*std::move(created), {}, {}};
    return MOERT_OK;
  });
}

void moert_batch_free(moert_batch *batch) { delete batch; }

moert_status moert_batch_add(moert_batch *batch, const int64_t *prompt,
                             size_t prompt_length,
                             const moert_generate_options *options,
                             int64_t *sequence) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(batch);
    MOERT_C_REQUIRE(sequence);
    *sequence = 0;
    moert_generate_options c =
        options ? *options : moert_generate_options_default();
    if (c.num_stop_ids > 0 && !c.stop_ids)
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  "moert_batch_add: stop_ids is null");
    std::vector<int64_t> ids;
    if (moert_status s = promptOf(__func__, prompt, prompt_length, ids))
      return s;
    absl::StatusOr<int64_t> id = batch->batch->add(ids, generateOptions(c));
    if (!id.ok())
      return fail(id.status());
    *sequence = *id;
    return MOERT_OK;
  });
}

moert_status moert_batch_cancel(moert_batch *batch, int64_t sequence,
                                int *found) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(batch);
    bool cancelled = batch->batch->cancel(sequence);
    if (found)
      *found = cancelled ? 1 : 0;
    return MOERT_OK;
  });
}

moert_status moert_batch_step(moert_batch *batch,
                              const moert_batch_event **events,
                              size_t *num_events) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(batch);
    MOERT_C_REQUIRE(events);
    MOERT_C_REQUIRE(num_events);
    *events = nullptr;
    *num_events = 0;
    absl::StatusOr<std::vector<moert::SequenceEvent>> step =
        batch->batch->step();
    if (!step.ok())
      return fail(step.status());
    batch->events.clear();
    for (const moert::SequenceEvent &e : *step)
      batch->events.push_back(
          {e.sequence, e.token, static_cast<moert_finish>(e.finish)});
    *events = batch->events.data();
    *num_events = batch->events.size();
    return MOERT_OK;
  });
}

moert_status moert_batch_counts(const moert_batch *batch, int32_t *slots,
                                int32_t *slots_in_use, int32_t *waiting) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(batch);
    if (slots)
      *slots = batch->batch->slots();
    if (slots_in_use)
      *slots_in_use = batch->batch->slotsInUse();
    if (waiting)
      *waiting = batch->batch->waiting();
    return MOERT_OK;
  });
}

const char *moert_batch_blocker(const moert_batch *batch) {
  return batch ? batch->batch->batchBlocker().c_str() : "";
}

moert_status moert_batch_expert_selections(moert_batch *batch, size_t layer,
                                           const uint64_t **counts,
                                           size_t *num_experts,
                                           size_t *num_layers) {
  return guard(__func__, [&] {
    MOERT_C_REQUIRE(batch);
    batch->selections = batch->batch->expertSelections();
    if (num_layers)
      *num_layers = batch->selections.size();
    if (!counts && !num_experts)
      return MOERT_OK;
    if (layer >= batch->selections.size())
      return fail(MOERT_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("moert_batch_expert_selections: layer ", layer,
                               " of ", batch->selections.size()));
    if (counts)
      *counts = batch->selections[layer].data();
    if (num_experts)
      *num_experts = batch->selections[layer].size();
    return MOERT_OK;
  });
}

} // extern "C"
