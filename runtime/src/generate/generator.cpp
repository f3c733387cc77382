//===- generator.cpp - Token generation over a generation plan -----------===//

#include "moert/generator.h"

#include "exec/kv_cache_in_place.h"
#include "generate/generation_loop.h"
#include "generate/generator_impl.h"
#include "generate/mrope_positions.h"
#include "kernels/common.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moert {

//===----------------------------------------------------------------------===//
// Sampler
//===----------------------------------------------------------------------===//

Sampler::Sampler(const SamplingOptions &options)
    : options_(options), state_(options.seed) {}

absl::Status Sampler::validate(const SamplingOptions &options) {
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature))
    return absl::InvalidArgumentError(
        absl::StrCat("the temperature must be a finite number >= 0, not ",
                     options.temperature));
  if (options.topK < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("top-k must be >= 0 (0: all), not ", options.topK));
  if (!(options.topP > 0 && options.topP <= 1))
    return absl::InvalidArgumentError(
        absl::StrCat("top-p must be in (0, 1], not ", options.topP));
  return absl::OkStatus();
}

double Sampler::uniform() {
  // splitmix64: small, documented and easy to reproduce elsewhere.
  state_ += 0x9e3779b97f4a7c15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int64_t Sampler::sample(const float *logits, int64_t vocab) {
  // The order: larger logit first, NaN last, ties to the lower id.
  auto before = [logits](int64_t a, int64_t b) {
    float x = logits[a], y = logits[b];
    if (std::isnan(x) || std::isnan(y))
      return !std::isnan(x) || (std::isnan(y) && a < b);
    return x > y || (x == y && a < b);
  };
  if (options_.temperature == 0 || options_.topK == 1) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
      if (before(i, best))
        best = i;
    return best;
  }
  int64_t k = options_.topK > 0 ? std::min(options_.topK, vocab) : vocab;
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), int64_t{0});
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), before);
  // Softmax of logit / temperature over the k kept, in double, relative to
  // the largest; sums are taken in that order.
  double top = static_cast<double>(logits[order_[0]]) / options_.temperature;
  weights_.resize(k);
  double total = 0;
  for (int64_t i = 0; i < k; ++i) {
    double z = static_cast<double>(logits[order_[i]]) / options_.temperature;
    weights_[i] = std::isnan(z) ? 0 : std::exp(z - top);
    total += weights_[i];
  }
  int64_t n = k;
  if (options_.topP < 1) {
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      sum += weights_[i];
      if (sum >= options_.topP * total) {
        n = i + 1;
        break;
      }
    }
    total = 0;
    for (int64_t i = 0; i < n; ++i)
      total += weights_[i];
  }
  double target = uniform() * total;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += weights_[i];
    if (target < sum)
      return order_[i];
  }
  return order_[n - 1];
}

//===----------------------------------------------------------------------===//
// Generator
//===----------------------------------------------------------------------===//

Generator::Generator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Generator::~Generator() = default;

absl::StatusOr<std::unique_ptr<Generator>>
Generator::create(const Plan &plan, const SessionOptions &options) {
  const Plan::Impl &planImpl = plan.impl();
  MOERT_ASSIGN_OR_RETURN(const GenerationDesc *gen, detail::generationOf(plan));
  // One device of an expert-parallel plan runs in a GroupGenerator, which
  // gives each device's generator its endpoint (group_generator.cpp).
  if (plan.numDevices() != 1 && !options.communicator)
    return absl::FailedPreconditionError(absl::StrCat(
        planImpl.source, ": the plan has ", plan.numDevices(),
        " device schedules; generate with moert::GroupGenerator (moe-run "
        "--devices ",
        plan.numDevices(), ", or mpirun -np ", plan.numDevices(), ")"));
  if (options.device < 0 || options.device >= plan.numDevices())
    return absl::InvalidArgumentError(
        absl::StrCat(planImpl.source, ": device ", options.device,
                     " is not among the plan's ", plan.numDevices()));
  int device = options.device;
  detail::prepareGemm();
  auto impl = std::make_unique<Impl>(plan, *gen);
  MOERT_ASSIGN_OR_RETURN(
      impl->decode, Session::create(plan, options, planImpl.schedules[device]));
  if (gen->hasPrefill) {
    MOERT_ASSIGN_OR_RETURN(impl->prefill,
                           Session::create(plan, options,
                                           planImpl.prefillSchedules[device],
                                           impl->decode.get()));
  }
  if (const MultimodalDesc *mm = plan.multimodal()) {
    impl->mm = mm;
    // Each device runs every stage: the Prefill stage's schedule of its
    // own, paging the decode's tiered experts, the others' one schedule.
    for (size_t s = 0; s < mm->stages.size(); ++s) {
      bool prefill = static_cast<int>(s) == mm->prefillStage;
      MOERT_ASSIGN_OR_RETURN(
          std::unique_ptr<Session> session,
          Session::create(plan, options, planImpl.stageSchedule(s, device),
                          prefill ? impl->decode.get() : nullptr));
      impl->stages.push_back(std::move(session));
    }
  }
  const detail::ScheduleInfo &decode = planImpl.schedules[device];
  const detail::ScheduleInfo &prefill =
      impl->mm          ? planImpl.stageSchedule(impl->mm->prefillStage, device)
      : gen->hasPrefill ? planImpl.prefillSchedules[device]
                        : decode;
  for (const CachePairDesc &pair : gen->cache) {
    Impl::Cache cache;
    cache.pair = &pair;
    int32_t pastId = detail::findSignatureTensor(decode, true, pair.input);
    cache.present = detail::findSignatureTensor(decode, false, pair.output);
    if (pair.state) {
      // Two buffers of the state's one shape, swapped each step.
      const detail::TensorInfo &past = decode.tensors[pastId];
      uint64_t elements = 1;
      for (int d = 0; d < past.rank; ++d) {
        cache.shape.push_back(past.dims[d].bound);
        elements *= static_cast<uint64_t>(past.dims[d].bound);
      }
      for (std::vector<float> &buffer : cache.buffers)
        buffer.assign(elements, 0.0f);
      impl->caches.push_back(std::move(cache));
      continue;
    }
    cache.inPlace =
        options.kvCacheInPlace &&
        detail::cacheInPlaceBlocker(decode, pastId, cache.present, pair.axis)
            .empty();
    const detail::TensorInfo &past = decode.tensors[pastId];
    uint64_t elements = 1;
    for (int d = 0; d < past.rank; ++d) {
      int64_t size = d == pair.axis ? gen->maxSeq : past.dims[d].bound;
      cache.shape.push_back(d == pair.axis ? 0 : size);
      elements *= static_cast<uint64_t>(size);
    }
    if (cache.inPlace) {
      cache.buffers[0].assign(elements, 0.0f);
      impl->caches.push_back(std::move(cache));
      continue;
    }
    // At least max_seq positions, and what the memory plan allows the
    // present to be (its bound may exceed max_seq).
    uint64_t bytes = std::max({elements * sizeof(float),
                               Impl::plannedSize(decode, pair.output),
                               Impl::plannedSize(prefill, pair.prefillOutput)});
    for (std::vector<float> &buffer : cache.buffers)
      buffer.assign((bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
    impl->caches.push_back(std::move(cache));
  }
  return std::unique_ptr<Generator>(new Generator(std::move(impl)));
}

int64_t Generator::vocabSize() const { return impl_->gen.vocabSize; }
int64_t Generator::maxSeq() const { return impl_->gen.maxSeq; }

uint64_t Generator::cacheBytes() const {
  uint64_t bytes = 0;
  for (const Impl::Cache &cache : impl_->caches)
    for (const std::vector<float> &buffer : cache.buffers)
      bytes += buffer.size() * sizeof(float);
  return bytes;
}

int Generator::numCaches() const {
  return static_cast<int>(impl_->caches.size());
}

int Generator::cachesInPlace() const {
  return static_cast<int>(
      std::count_if(impl_->caches.begin(), impl_->caches.end(),
                    [](const Impl::Cache &cache) { return cache.inPlace; }));
}

Session &Generator::decodeSession() { return *impl_->decode; }
Session &Generator::prefillSession() {
  if (impl_->mm)
    return *impl_->stages[impl_->mm->prefillStage];
  return impl_->prefill ? *impl_->prefill : *impl_->decode;
}

absl::Status Generator::readLogits(Session &session) {
  MOERT_ASSIGN_OR_RETURN(TensorData out, session.output(impl_->gen.logits));
  int64_t vocab = impl_->gen.vocabSize;
  if (out.shape.size() != 3 || out.shape[0] != 1 || out.shape[1] < 1 ||
      out.shape[2] != vocab)
    return absl::InternalError(
        absl::StrCat("the logits '", impl_->gen.logits, "' have ",
                     out.shape.size(), " dims; expected [1, n, ", vocab, "]"));
  const float *last =
      static_cast<const float *>(out.data) + (out.shape[1] - 1) * vocab;
  logits_.assign(last, last + vocab);
  return absl::OkStatus();
}

/// Copies a prefill schedule's `present` (contiguous, its shape checked
/// against the cache's) into the first positions of the in-place `cache`,
/// whose buffer holds `maxSeq` positions along the pair's axis.
static void copyIntoCache(Generator::Impl::Cache &cache,
                          const TensorData &present, int64_t maxSeq) {
  int axis = cache.pair->axis;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d)
    outer *= present.shape[d];
  for (size_t d = axis + 1; d < present.shape.size(); ++d)
    inner *= present.shape[d];
  int64_t rows = present.shape[axis] * inner;
  const float *from = static_cast<const float *>(present.data);
  for (int64_t o = 0; o < outer; ++o)
    std::copy_n(from + o * rows, rows,
                cache.buffers[0].data() + o * maxSeq * inner);
}

namespace detail {

absl::Status setTokenFeed(Session &session, const std::string &name,
                          FeedKind kind, const std::vector<int64_t> &ids,
                          int64_t imageTokenId) {
  int64_t n = static_cast<int64_t>(ids.size());
  if (kind == FeedKind::TokenIds)
    return session.setInput(name, DType::I64, {1, n}, ids.data(), n * 8);
  if (kind == FeedKind::TokenTypes) {
    std::vector<int64_t> types(ids.size());
    for (size_t i = 0; i < ids.size(); ++i)
      types[i] = ids[i] == imageTokenId ? 1 : 0;
    return session.setInput(name, DType::I64, {1, n}, types.data(), n * 8);
  }
  std::vector<uint8_t> mask(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    mask[i] = ids[i] == imageTokenId ? 1 : 0;
  return session.setInput(name, DType::Bool, {1, n}, mask.data(), n);
}

void resetCaches(Generator::Impl &impl) {
  for (Generator::Impl::Cache &cache : impl.caches) {
    cache.current = 0;
    if (cache.pair->state)
      std::fill(cache.buffers[0].begin(), cache.buffers[0].end(), 0.0f);
    else
      cache.shape[cache.pair->axis] = 0;
  }
}

absl::Status bindCaches(Generator::Impl &impl, SessionState &state,
                        bool prefillSchedule) {
  const GenerationDesc &gen = impl.gen;
  for (Generator::Impl::Cache &cache : impl.caches) {
    const CachePairDesc &pair = *cache.pair;
    if (cache.inPlace) {
      // The decode schedule appends to the cache where it lies; a prefill
      // schedule's present stays in its arena until copied in below.
      MOERT_RETURN_IF_ERROR(
          prefillSchedule
              ? state.bindOutput(pair.prefillOutput, nullptr, 0)
              : state.bindCache(pair.input, pair.output, cache.shape,
                                cache.buffers[0].data(),
                                cache.buffers[0].size() * sizeof(float),
                                pair.axis, gen.maxSeq));
      continue;
    }
    std::vector<float> &next = cache.buffers[1 - cache.current];
    // A state is the prompt's input too, unless a prefill schedule (format
    // 1.23) or a multimodal Prefill stage (1.26) runs the prompt from zero
    // states.
    if (!prefillSchedule || (pair.state && !gen.hasPrefill && !impl.mm))
      MOERT_RETURN_IF_ERROR(state.bindInput(
          pair.input, cache.shape, cache.buffers[cache.current].data()));
    MOERT_RETURN_IF_ERROR(
        state.bindOutput(prefillSchedule ? pair.prefillOutput : pair.output,
                         next.data(), next.size() * sizeof(float)));
  }
  return absl::OkStatus();
}

absl::Status finishCaches(Generator::Impl &impl, Session &session,
                          SessionState &state, bool prefillSchedule,
                          int64_t start, int64_t n) {
  for (Generator::Impl::Cache &cache : impl.caches) {
    const CachePairDesc &pair = *cache.pair;
    const std::string &name =
        prefillSchedule ? pair.prefillOutput : pair.output;
    TensorData present;
    if (cache.inPlace && !prefillSchedule) {
      const detail::Tensor &tensor = state.tensors[cache.present];
      present.shape.assign(tensor.shape.dims,
                           tensor.shape.dims + tensor.shape.rank);
    } else {
      MOERT_ASSIGN_OR_RETURN(present, session.output(name));
    }
    std::vector<int64_t> expected = cache.shape;
    if (!pair.state)
      expected[pair.axis] = start + n;
    if (present.shape != expected)
      return absl::InternalError(
          pair.state
              ? absl::StrCat("state output '", name,
                             "' has a different shape than its input")
              : absl::StrCat(
                    "cache output '", name, "' has ", present.shape.size(),
                    " dims of a different shape than the past grown by ", n,
                    " positions along axis ", pair.axis,
                    "; the graph does not append to its cache"));
    if (cache.inPlace && prefillSchedule)
      copyIntoCache(cache, present, impl.gen.maxSeq);
    else if (!cache.inPlace)
      cache.current = 1 - cache.current;
    cache.shape = std::move(expected);
  }
  return absl::OkStatus();
}

} // namespace detail

absl::Status detail::runStep(Generator::Impl &impl, Session &session,
                             SessionState &state, bool prefillSchedule,
                             const std::vector<int64_t> &ids, int64_t start) {
  const GenerationDesc &gen = impl.gen;
  int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int64_t> positions(n);
  std::iota(positions.begin(), positions.end(), start);
  MOERT_RETURN_IF_ERROR(session.setInput(gen.inputIds, DType::I64, {1, n},
                                         ids.data(), ids.size() * 8));
  if (!gen.positionIds.empty() && gen.positionRows == 0)
    MOERT_RETURN_IF_ERROR(session.setInput(gen.positionIds, DType::I64, {1, n},
                                           positions.data(),
                                           positions.size() * 8));
  if (!gen.positionIds.empty() && gen.positionRows > 0) {
    // M-RoPE's rows (time, height, width) are one position for text; a
    // multimodal plan's rule says what each row holds after its prompt.
    std::vector<int64_t> rows;
    if (impl.mm) {
      detail::fillDecodePositions(start, n, impl.positionDelta,
                                  impl.mm->positionRows, rows);
    } else {
      for (int r = 0; r < gen.positionRows; ++r)
        rows.insert(rows.end(), positions.begin(), positions.end());
    }
    MOERT_RETURN_IF_ERROR(session.setInput(gen.positionIds, DType::I64,
                                           {gen.positionRows, 1, n},
                                           rows.data(), rows.size() * 8));
  }
  if (!gen.attentionMask.empty() && (!prefillSchedule || gen.prefillMask)) {
    // Every position of the one sequence is valid.
    std::vector<int64_t> mask(static_cast<size_t>(start + n), 1);
    MOERT_RETURN_IF_ERROR(session.setInput(gen.attentionMask, DType::I64,
                                           {1, start + n}, mask.data(),
                                           mask.size() * 8));
  }
  if (impl.mm)
    for (const FeedDesc &feed : impl.mm->decodeFeeds)
      MOERT_RETURN_IF_ERROR(detail::setTokenFeed(session, feed.input, feed.kind,
                                                 ids, impl.mm->imageTokenId));
  MOERT_RETURN_IF_ERROR(detail::bindCaches(impl, state, prefillSchedule));
  MOERT_RETURN_IF_ERROR(session.run());
  return detail::finishCaches(impl, session, state, prefillSchedule, start, n);
}

absl::Status Generator::prefill(const std::vector<int64_t> &prompt) {
  if (impl_->mm)
    return prefill(prompt, {});
  const GenerationDesc &gen = impl_->gen;
  MOERT_RETURN_IF_ERROR(detail::checkPrompt(prompt, gen));
  detail::resetCaches(*impl_);
  length_ = 0;
  Session &session = prefillSession();
  MOERT_RETURN_IF_ERROR(detail::runStep(*impl_, session, session.state_,
                                        gen.hasPrefill, prompt, 0));
  length_ = static_cast<int64_t>(prompt.size());
  return readLogits(session);
}

absl::Status Generator::decode(int64_t token) {
  const GenerationDesc &gen = impl_->gen;
  if (length_ == 0)
    return absl::FailedPreconditionError("decode before prefill");
  if (length_ >= gen.maxSeq)
    return absl::OutOfRangeError(
        absl::StrCat("the sequence holds the plan's max_seq of ", gen.maxSeq,
                     " tokens (moec compile --max-seq)"));
  MOERT_RETURN_IF_ERROR(detail::checkIds({token}, gen.vocabSize));
  Session &session = *impl_->decode;
  MOERT_RETURN_IF_ERROR(detail::runStep(*impl_, session, session.state_, false,
                                        {token}, length_));
  ++length_;
  return readLogits(session);
}

absl::StatusOr<std::vector<int64_t>>
Generator::generate(const std::vector<int64_t> &prompt,
                    const GenerateOptions &options,
                    const std::function<void(int64_t)> &onToken) {
  return generate(prompt, {}, options, onToken);
}

absl::StatusOr<std::vector<int64_t>>
Generator::generate(const std::vector<int64_t> &prompt,
                    const VisionInputs &vision, const GenerateOptions &options,
                    const std::function<void(int64_t)> &onToken) {
  MOERT_RETURN_IF_ERROR(
      detail::checkGenerateOptions(prompt, options, impl_->gen));
  if (!impl_->mm && !vision.empty())
    return absl::InvalidArgumentError(
        "vision inputs need a multimodal plan (moec compile MODEL_DIR of a "
        "vision-language export)");
  detail::GenerationSteps steps;
  steps.prefill = [this, &vision](const std::vector<int64_t> &ids) {
    return impl_->mm ? prefill(ids, vision) : prefill(ids);
  };
  steps.decode = [this](int64_t token) { return decode(token); };
  steps.next = [this](Sampler &sampler) -> absl::StatusOr<int64_t> {
    return sampler.sample(logits_.data(), impl_->gen.vocabSize);
  };
  steps.stop = detail::localStop(options);
  return detail::runGenerationLoop(prompt, options, steps, onToken, times_);
}

} // namespace moert
