//===- c_api_generate.cpp - The C API's generators and batches -----------===//
//
// moert/moert_c.h's moert_generator and moert_batch, over the C++
// generators (c_api.cpp has the plans, the sessions and the conventions).
//
//===----------------------------------------------------------------------===//

#include "api/c_api_internal.h"
#include "moert/vision.h"

#include <algorithm>
#include <chrono>

using namespace moert::capi;

namespace {

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

} // namespace

extern "C" {

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
