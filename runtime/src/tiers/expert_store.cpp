//===- expert_store.cpp - Bounded caches of paged expert weights ----------===//

#include "tiers/expert_store.h"
#include "format/file_io.h"
#include "format/plan_file.h"
#include "format/tier_assignment.h"

#include "absl/strings/str_format.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <numeric>
#include <sys/mman.h>
#include <unistd.h>

namespace moert {
namespace detail {

//===----------------------------------------------------------------------===//
// ExpertStore
//===----------------------------------------------------------------------===//

namespace {

constexpr uint64_t kPage = 4096;

uint64_t alignDown(uint64_t value, uint64_t alignment) {
  return value / alignment * alignment;
}

} // namespace

absl::Status checkExpertBytes(const Plan::Impl &plan,
                              const ScheduleInfo &schedule,
                              const TierLayerInfo &layer, uint32_t e, size_t i,
                              const uint8_t *data) {
  const PagedInput &input = layer.inputs[i];
  uint64_t begin = input.fileOffset + e * input.expertBytes;
  uint32_t stored = layer.crc[e * layer.inputs.size() + i];
  uint32_t computed = crc32(0, data, input.expertBytes);
  if (computed == stored)
    return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      plan.source, ": ", schedule.steps[layer.step].label, ": expert ", e,
      "'s bytes of '", schedule.tensors[input.tensor].name, "' (input ",
      input.input, ", section ", input.section, ", file bytes [", begin, ", +",
      input.expertBytes, ")) fail their checksum (stored ",
      absl::StrFormat("0x%08x", stored), ", computed ",
      absl::StrFormat("0x%08x", computed),
      "): the plan file is corrupt or was changed"));
}

ExpertStore::ExpertStore(const Plan::Impl &plan, const TierInfo &tiers,
                         ExpertReadMode mode, uint64_t capacity)
    : plan_(plan), tiers_(tiers), mode_(mode), cache_(capacity) {
  present_.resize(tiers.layers.size());
  verified_.resize(tiers.layers.size());
  pointers_.resize(tiers.layers.size());
}

ExpertStore::~ExpertStore() {
  if (!readers_.empty()) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    for (std::thread &reader : readers_)
      reader.join();
  }
  for (std::vector<Payload *> &layer : present_)
    for (Payload *payload : layer)
      if (payload)
        release(payload);
  if (directFd_ >= 0)
    ::close(directFd_);
}

uint64_t ExpertStore::entryBytes(const TierLayerInfo &layer) const {
  return layer.expertBytes;
}

ExpertStore::Payload *ExpertStore::allocate(const TierLayerInfo &layer,
                                            void *reuse) {
  auto *payload = static_cast<Payload *>(reuse);
  if (mode_ == ExpertReadMode::Mmap && plan_.fd >= 0) {
    if (payload)
      release(payload);
    return new Payload();
  }
  // Each input at a page in the buffer (O_DIRECT reads whole blocks into
  // page-aligned memory), with room for the blocks around it.
  size_t bytes = 0;
  for (const PagedInput &input : layer.inputs)
    bytes += alignTo(input.expertBytes, kPage) +
             (mode_ == ExpertReadMode::Direct ? 2 * kPage : 0);
  if (payload && payload->bufferBytes == bytes) {
    payload->inputs.clear();
    payload->demand = payload->ahead = payload->failed = false;
    return payload;
  }
  if (payload)
    release(payload);
  payload = new Payload();
  void *buffer = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buffer == MAP_FAILED) {
    delete payload;
    return nullptr;
  }
  // Huge pages where the kernel has them: fewer faults when the buffer is
  // first filled, and fewer pages for O_DIRECT reads to pin.
  if (bytes >= (size_t{2} << 20))
    ::madvise(buffer, bytes, MADV_HUGEPAGE);
  payload->buffer = static_cast<uint8_t *>(buffer);
  payload->bufferBytes = bytes;
  return payload;
}

void ExpertStore::release(Payload *payload) {
  if (payload->buffer)
    ::munmap(payload->buffer, payload->bufferBytes);
  for (auto &[address, bytes] : payload->maps)
    if (address)
      ::munmap(address, bytes);
  delete payload;
}

void ExpertStore::setPresent(ExpertKey key, Payload *payload) {
  const TierLayerInfo &layer = tiers_.layers[key.layer];
  present_[key.layer][key.expert] = payload;
  for (size_t i = 0; i < layer.inputs.size(); ++i)
    pointers_[key.layer][layer.inputs[i].input][key.expert] =
        payload ? payload->inputs[i] : nullptr;
}

const uint8_t *const *ExpertStore::pointers(uint32_t layer, int input) const {
  if (input < 0 || static_cast<size_t>(input) >= pointers_[layer].size())
    return nullptr;
  const std::vector<const uint8_t *> &table = pointers_[layer][input];
  return table.empty() ? nullptr : table.data();
}

void ExpertStore::resetPaging(int view) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (LayerPaging &paging : views_[view].paging)
    paging = LayerPaging();
}

void ExpertStore::beginRun(int view) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (view != view_)
    predictedLayer_ = issueAfter_ = -1;
  view_ = view;
}

void ExpertStore::prepare(const ExpertCache::Entry &entry,
                          Payload *payload) const {
  size_t inputs = tiers_.layers[entry.key.layer].inputs.size();
  payload->inputs.assign(inputs, nullptr);
  if (mode_ == ExpertReadMode::Mmap && plan_.fd >= 0)
    payload->maps.resize(inputs, {nullptr, 0});
}

absl::Status ExpertStore::fill(ExpertCache::Entry &entry, Payload *payload) {
  prepare(entry, payload);
  const TierLayerInfo &layer = tiers_.layers[entry.key.layer];
  for (size_t i = 0; i < layer.inputs.size(); ++i)
    MOERT_RETURN_IF_ERROR(fillInput(entry, payload, i));
  verified_[entry.key.layer][entry.key.expert] = 1;
  return absl::OkStatus();
}

absl::Status ExpertStore::fillInput(const ExpertCache::Entry &entry,
                                    Payload *payload, size_t i) {
  const TierLayerInfo &layer = tiers_.layers[entry.key.layer];
  uint32_t e = entry.key.expert;
  // The input's place in the buffer: each input at a page (allocate).
  size_t at = 0;
  for (size_t j = 0; j < i; ++j)
    at += alignTo(layer.inputs[j].expertBytes, kPage) +
          (mode_ == ExpertReadMode::Direct ? 2 * kPage : 0);
  {
    const PagedInput &input = layer.inputs[i];
    uint64_t begin = input.fileOffset + e * input.expertBytes;
    uint64_t bytes = input.expertBytes;
    const uint8_t *data = nullptr;
    if (mode_ == ExpertReadMode::Mmap && plan_.fd >= 0) {
      uint64_t first = alignDown(begin, kPage);
      size_t length = static_cast<size_t>(begin + bytes - first);
      void *map = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE | MAP_POPULATE,
                         plan_.fd, static_cast<off_t>(first));
      if (map == MAP_FAILED)
        return absl::ResourceExhaustedError(
            absl::StrCat(plan_.source, ": cannot map bytes [", begin, ", +",
                         bytes, "): ", std::strerror(errno)));
      payload->maps[i] = {map, length};
      data = static_cast<const uint8_t *>(map) + (begin - first);
    } else if (mode_ == ExpertReadMode::Direct && directFd_ >= 0) {
      uint64_t first = alignDown(begin, kPage);
      uint64_t last = alignTo(begin + bytes, kPage);
      uint8_t *out = payload->buffer + at;
      for (uint64_t done = 0; first + done < begin + bytes;) {
        ssize_t n = ::pread(directFd_, out + done, last - first - done,
                            static_cast<off_t>(first + done));
        if (n < 0 && errno == EINTR)
          continue;
        if (n <= 0)
          return absl::DataLossError(absl::StrCat(
              plan_.source, ": cannot read bytes [", begin, ", +", bytes,
              ") with O_DIRECT: ",
              n < 0 ? std::strerror(errno) : "unexpected end of file"));
        done += static_cast<uint64_t>(n);
      }
      data = out + (begin - first);
    } else {
      uint8_t *out = payload->buffer + at;
      MOERT_RETURN_IF_ERROR(plan_.readBytes(begin, out, bytes));
      data = out;
    }
    payload->inputs[i] = data;
    // Checked on an expert's first read in the session: CRC-32 is several
    // times slower than the page cache's reads (bench/README.md, "Expert
    // checksums"), and a later read of the same bytes trusts the file as a
    // mapping would.
    if (!verified_[entry.key.layer][e])
      MOERT_RETURN_IF_ERROR(
          checkExpertBytes(plan_, *schedule_, layer, e, i, data));
  }
  return absl::OkStatus();
}

absl::Status
ExpertStore::fillAll(const std::vector<ExpertCache::Entry *> &entries,
                     ThreadPool &pool) {
  // One item per paged input of each entry (w1, w3, w2 apart): a layer
  // that misses one expert still reads it on every thread.
  std::vector<std::pair<ExpertCache::Entry *, size_t>> items;
  for (ExpertCache::Entry *entry : entries) {
    prepare(*entry, static_cast<Payload *>(entry->payload));
    for (size_t i = 0; i < tiers_.layers[entry->key.layer].inputs.size(); ++i)
      items.emplace_back(entry, i);
  }
  std::mutex mutex;
  absl::Status failure;
  pool.parallelFor(
      static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          auto [entry, i] = items[k];
          absl::Status status =
              fillInput(*entry, static_cast<Payload *>(entry->payload), i);
          if (!status.ok()) {
            std::lock_guard<std::mutex> guard(mutex);
            if (failure.ok())
              failure = status;
          }
        }
      });
  if (failure.ok())
    for (ExpertCache::Entry *entry : entries)
      verified_[entry->key.layer][entry->key.expert] = 1;
  return failure;
}

ExpertCache::Entry *ExpertStore::insertEntry(ExpertKey key, bool &allocFailed) {
  const TierLayerInfo &layer = tiers_.layers[key.layer];
  allocFailed = false;
  std::vector<ExpertCache::Evicted> evicted;
  ExpertCache::Entry *entry =
      cache_.insert(key, entryBytes(layer), false, evicted);
  if (!entry)
    return nullptr;
  // The buffer of an evicted expert of the same layer, else of a layer
  // whose experts take as many bytes, is refilled in place: a fresh one
  // would be mapped, faulted in page by page and unmapped again at the
  // next eviction.
  size_t reuse = evicted.size();
  int best = 0;
  for (size_t i = 0; i < evicted.size(); ++i) {
    setPresent(evicted[i].key, nullptr);
    int fit = evicted[i].key.layer == key.layer       ? 2
              : evicted[i].bytes == entryBytes(layer) ? 1
                                                      : 0;
    if (fit > best) {
      best = fit;
      reuse = i;
    }
  }
  for (size_t i = 0; i < evicted.size(); ++i)
    if (i != reuse)
      release(static_cast<Payload *>(evicted[i].payload));
  Payload *payload = allocate(
      layer, reuse < evicted.size() ? evicted[reuse].payload : nullptr);
  if (!payload) {
    cache_.erase(entry);
    allocFailed = true;
    return nullptr;
  }
  entry->payload = payload;
  return entry;
}

absl::Status ExpertStore::acquire(uint32_t layerIndex,
                                  std::vector<uint32_t> &pending,
                                  std::vector<uint32_t> &batch,
                                  ThreadPool &pool, const std::string &label) {
  Clock::time_point start = Clock::now();
  const TierLayerInfo &layer = tiers_.layers[layerIndex];
  std::unique_lock<std::mutex> lock(mutex_);
  LayerPaging &paging = views_[view_].paging[layerIndex];
  batch.clear();
  std::vector<uint32_t> misses, left;
  for (uint32_t e : pending)
    if (std::find(awaiting_.begin(), awaiting_.end(),
                  ExpertKey{layerIndex, e}) == awaiting_.end() &&
        !awaiting_.empty())
      left.push_back(e);
  // Entries this call fills itself: without readers its misses and the
  // reads ahead it takes over from the queue (still Queued); with them,
  // only reads the readers failed.
  std::vector<ExpertCache::Entry *> reads;
  bool readers = !readers_.empty();
  // Experts an earlier call looked up are returned before anything else is
  // looked up, so that the cache sees what it would if that call had read
  // them before returning.
  if (awaiting_.empty()) {
    // Reads ahead of this layer not wanted now, or of other layers, would
    // only hold cache room: they are dropped.
    dropQueued(layerIndex, pending);
    std::vector<ExpertKey> toReaders;
    for (uint32_t e : pending) {
      ExpertCache::Entry *entry =
          cache_.find({layerIndex, e}, entryBytes(layer));
      if (!entry) {
        misses.push_back(e);
        continue;
      }
      cache_.lock(entry);
      // A read ahead not started yet is this step's to read: a miss.
      bool queued = entry->state == ExpertCache::Entry::State::Queued;
      ++(queued ? paging.misses : paging.hits);
      if (entry->prefetched) {
        entry->prefetched = false;
        ++paging.prefetch.used;
        if (entry->state != ExpertCache::Entry::State::Ready)
          ++paging.prefetch.late;
      }
      if (queued && readers) {
        static_cast<Payload *>(entry->payload)->demand = true;
        toReaders.push_back({layerIndex, e});
        awaiting_.push_back({layerIndex, e});
      } else if (queued) {
        entry->state = ExpertCache::Entry::State::Loading;
        reads.push_back(entry);
        batch.push_back(e);
      } else if (entry->state == ExpertCache::Entry::State::Loading) {
        awaiting_.push_back({layerIndex, e});
      } else {
        batch.push_back(e);
      }
    }
    cache_.endLookups();
    for (uint32_t e : misses) {
      bool allocFailed = false;
      ExpertCache::Entry *entry = insertEntry({layerIndex, e}, allocFailed);
      // A read ahead in flight holds its room until it ends.
      while (!entry && !allocFailed && loading_ > 0) {
        changed_.wait(lock);
        entry = insertEntry({layerIndex, e}, allocFailed);
      }
      if (allocFailed) {
        for (uint32_t b : batch)
          if (ExpertCache::Entry *held = cache_.peek({layerIndex, b}))
            cache_.unlock(held);
        abandonAwaiting(lock);
        return absl::ResourceExhaustedError(
            absl::StrCat(label, ": cannot allocate ", entryBytes(layer),
                         " bytes for expert ", e));
      }
      if (!entry) {
        left.push_back(e);
        continue;
      }
      cache_.lock(entry);
      ++paging.misses;
      if (readers) {
        entry->state = ExpertCache::Entry::State::Queued;
        static_cast<Payload *>(entry->payload)->demand = true;
        toReaders.push_back({layerIndex, e});
        awaiting_.push_back({layerIndex, e});
      } else {
        entry->state = ExpertCache::Entry::State::Loading;
        reads.push_back(entry);
        batch.push_back(e);
      }
    }
    // The step's misses go before any read ahead, in order.
    std::vector<QueuedRead> front;
    for (ExpertKey key : toReaders)
      front.push_back({key, view_});
    queue_.insert(queue_.begin(), front.begin(), front.end());
    if (!front.empty())
      changed_.notify_all();
  }
  // The hits are computed while the readers read; with none, wait for the
  // first read to end.
  collectAwaiting(batch, left, reads);
  if (batch.empty() && reads.empty() && !awaiting_.empty()) {
    Clock::time_point waitStart = Clock::now();
    bool ahead = false;
    for (ExpertKey key : awaiting_)
      if (ExpertCache::Entry *entry = cache_.peek(key))
        ahead |= !static_cast<Payload *>(entry->payload)->demand;
    changed_.wait(lock, [&] {
      collectAwaiting(batch, left, reads);
      return !batch.empty() || !reads.empty() || awaiting_.empty();
    });
    if (ahead)
      paging.prefetch.waitSeconds += secondsSince(waitStart);
  }
  if (!reads.empty()) {
    lock.unlock();
    Clock::time_point readStart = Clock::now();
    absl::Status failure = fillAll(reads, pool);
    double readSeconds = secondsSince(readStart);
    lock.lock();
    paging.readSeconds += readSeconds;
    for (ExpertCache::Entry *entry : reads) {
      entry->state = ExpertCache::Entry::State::Ready;
      auto *payload = static_cast<Payload *>(entry->payload);
      if (payload->ahead) {
        payload->ahead = false;
        cache_.unlock(entry); // the read ahead's lock
      }
    }
    if (!failure.ok()) {
      for (uint32_t e : batch)
        if (ExpertCache::Entry *entry = cache_.peek({layerIndex, e}))
          cache_.unlock(entry);
      for (ExpertCache::Entry *entry : reads)
        release(static_cast<Payload *>(cache_.erase(entry)));
      abandonAwaiting(lock);
      changed_.notify_all();
      return failure;
    }
    for (ExpertCache::Entry *entry : reads) {
      setPresent(entry->key, static_cast<Payload *>(entry->payload));
      paging.bytesPagedIn += layer.expertBytes;
    }
  }
  if (batch.empty() && awaiting_.empty() && left.size() == pending.size())
    return absl::ResourceExhaustedError(
        absl::StrCat(label, ": the expert cache of ", cache_.capacity(),
                     " bytes has no room for one more expert of ",
                     entryBytes(layer), " bytes"));
  ++paging.rounds;
  pending = std::move(left);
  for (ExpertKey key : awaiting_)
    pending.push_back(key.expert);
  // This layer's experts are all present and locked: the next layer's
  // predicted experts can be read while they compute.
  if (pending.empty() && issueAfter_ == static_cast<int32_t>(layerIndex))
    issuePrefetch();
  paging.waitSeconds += secondsSince(start);
  return absl::OkStatus();
}

void ExpertStore::release(uint32_t layer, const std::vector<uint32_t> &batch) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (uint32_t e : batch)
    if (ExpertCache::Entry *entry = cache_.peek({layer, e}))
      cache_.unlock(entry);
}

void ExpertStore::afterStep(int step, const Tensor *tensors, ThreadPool &pool) {
  if (prefetch_ == ExpertPrefetch::None)
    return;
  // view_ changes only between runs, on the thread that runs the steps.
  const View &view = views_[view_];
  if (step < static_cast<int>(view.routerLayer.size()) &&
      view.routerLayer[step] >= 0) {
    int32_t from = view.routerLayer[step];
    int32_t to = view.nextLayer[from];
    const GateInfo &gate = view.gates[from];
    const Tensor &x = tensors[gate.tokens];
    int64_t tokens = gate.hidden ? x.numel() / gate.hidden : 0;
    std::vector<uint32_t> predicted;
    if (tokens > 0)
      predicted = predictExperts(view.gates[to], x.as<const float>(), tokens,
                                 /*maxTokens=*/128, pool);
    std::lock_guard<std::mutex> guard(mutex_);
    predicted_ = std::move(predicted);
    predictedLayer_ = to;
    issueAfter_ = from;
    return;
  }
  int32_t layer = view.schedule->tiers.layerOfStep[step];
  if (layer >= 0 && layer == issueAfter_) {
    // The layer's Experts step ran without acquiring (no rows).
    std::lock_guard<std::mutex> guard(mutex_);
    issuePrefetch();
  }
}

void ExpertStore::beforeStep(int step, const Tensor *tensors) {
  if (prefetch_ != ExpertPrefetch::NextMicroBatch)
    return;
  const View &view = views_[view_];
  if (step >= static_cast<int>(view.nextRows.size()) ||
      view.nextRows[step].tensor < 0)
    return;
  int32_t layer = view.schedule->tiers.layerOfStep[step];
  const View::RoutedRows &rows = view.nextRows[step];
  const Tensor &t = tensors[rows.tensor];
  int64_t experts = tiers_.layers[layer].experts;
  // The kernels check the offsets and counts when they run; malformed ones
  // only make nothing (or less) read ahead.
  std::vector<uint32_t> routed;
  const int64_t *at = t.data ? t.as<const int64_t>() : nullptr;
  if (at && rows.sources == 0 && t.numel() == experts + 1) {
    for (int64_t e = 0; e < experts; ++e)
      if (at[e + 1] > at[e])
        routed.push_back(static_cast<uint32_t>(e));
  } else if (at && rows.sources > 0 && t.numel() == rows.sources * experts) {
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t s = 0; s < rows.sources; ++s)
        if (at[s * experts + e] > 0) {
          routed.push_back(static_cast<uint32_t>(e));
          break;
        }
  }
  std::lock_guard<std::mutex> guard(mutex_);
  predicted_ = std::move(routed);
  predictedLayer_ = layer;
  issueAfter_ = layer;
}

absl::StatusOr<int> ExpertStore::attach(const ScheduleInfo &schedule) {
  const TierInfo &own = tiers_, &other = schedule.tiers;
  bool same = other.present && other.layers.size() == own.layers.size();
  for (size_t l = 0; same && l < own.layers.size(); ++l) {
    const TierLayerInfo &a = own.layers[l], &b = other.layers[l];
    same = a.experts == b.experts && a.inputs.size() == b.inputs.size();
    for (size_t i = 0; same && i < a.inputs.size(); ++i)
      same = a.inputs[i].input == b.inputs[i].input &&
             a.inputs[i].fileOffset == b.inputs[i].fileOffset &&
             a.inputs[i].expertBytes == b.inputs[i].expertBytes;
  }
  if (!same)
    return absl::FailedPreconditionError(absl::StrCat(
        plan_.source, ": a schedule whose tiered layers page other experts "
                      "cannot share this expert cache"));
  View view;
  view.schedule = &schedule;
  view.paging.resize(other.layers.size());
  // Views predict only when the store reads ahead at all.
  if (prefetch_ != ExpertPrefetch::None && !planPrefetch(view, prefetch_)) {
    view.gates.clear();
    view.routerLayer.clear();
    view.nextRows.clear();
  }
  std::lock_guard<std::mutex> guard(mutex_);
  views_.push_back(std::move(view));
  return static_cast<int>(views_.size()) - 1;
}

absl::StatusOr<std::unique_ptr<ExpertStore>>
ExpertStore::create(const Plan::Impl &plan, const ScheduleInfo &schedule,
                    int device, uint64_t budget, ExpertReadMode mode,
                    ThreadPool &pool, ExpertPrefetch prefetch,
                    ExpertCachePolicy policy) {
  (void)device;
  View first;
  first.schedule = &schedule;
  first.paging.resize(schedule.tiers.layers.size());
  bool ahead = planPrefetch(first, prefetch);
  // Reading a layer ahead needs room for a second layer's experts beside
  // the computing one's: the cold cache gets twice its least size (fewer
  // hot experts) when the budget allows, else prefetch fits where it can.
  absl::StatusOr<ExpertTiersDesc> tiered =
      ahead ? describeTiers(plan, schedule, budget, 1)
            : absl::StatusOr<ExpertTiersDesc>(absl::UnknownError(""));
  if (!tiered.ok())
    tiered = describeTiers(plan, schedule, budget);
  MOERT_RETURN_IF_ERROR(tiered.status());
  const ExpertTiersDesc &desc = *tiered;
  std::unique_ptr<ExpertStore> store(
      new ExpertStore(plan, schedule.tiers, mode, desc.cacheBytes));
  store->budget_ = desc.budget;
  store->schedule_ = &schedule;
  bool chosen = mode == ExpertReadMode::Auto;
  if (chosen)
    mode = chooseExpertReadMode(desc.coldBytes, desc.budget,
                                processMemoryAvailable());
  if (mode == ExpertReadMode::Direct && plan.fd >= 0) {
    std::string path = absl::StrCat("/proc/self/fd/", plan.fd);
    store->directFd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    // Auto falls back to buffered reads where the file system has no
    // O_DIRECT (tmpfs).
    if (store->directFd_ < 0 && chosen)
      mode = ExpertReadMode::Pread;
    else if (store->directFd_ < 0)
      return absl::FailedPreconditionError(absl::StrCat(
          plan.source, ": cannot open with O_DIRECT: ", std::strerror(errno),
          " (use the pread read mode)"));
  }
  store->mode_ = mode;
  const TierInfo &tiers = schedule.tiers;
  size_t numInputs = 0;
  for (const StepInfo &step : schedule.steps)
    numInputs = std::max(numInputs, step.inputs.size());
  for (size_t l = 0; l < tiers.layers.size(); ++l) {
    const TierLayerInfo &layer = tiers.layers[l];
    store->present_[l].assign(layer.experts, nullptr);
    store->verified_[l].assign(layer.experts, 0);
    store->pointers_[l].resize(schedule.steps[layer.step].inputs.size());
    for (const PagedInput &input : layer.inputs)
      store->pointers_[l][input.input].assign(layer.experts, nullptr);
  }
  // The hot experts, read in one parallel pass, lowest rank first; the
  // policy's share of them pinned, the rest left in the cache to be
  // evicted once the routing wants others. Inserted from the highest rank
  // down, so that the lowest ranks are the most recently used.
  std::vector<ExpertKey> hotKeys;
  for (uint32_t l = 0; l < tiers.layers.size(); ++l)
    for (uint32_t e = 0; e < tiers.layers[l].experts; ++e)
      if (desc.layers[l].hot[e])
        hotKeys.push_back({l, e});
  std::sort(hotKeys.begin(), hotKeys.end(), [&](ExpertKey a, ExpertKey b) {
    return tiers.layers[a.layer].rank[a.expert] >
           tiers.layers[b.layer].rank[b.expert];
  });
  size_t pinnedCount =
      policy.pinned >= 1 ? hotKeys.size()
                         : static_cast<size_t>(policy.pinned * hotKeys.size());
  store->policy_ = policy;
  if (policy.eviction != ExpertCache::Eviction::Lru) {
    // The half-life of the use counts and the adaptive policy's window:
    // about 32 decode tokens of lookups (every tiered layer's top-k each),
    // long enough that an expert used steadily outweighs a burst of others,
    // short enough to follow the routing when the text moves on
    // (bench/expert_cache_replay.py).
    uint64_t perToken = 0;
    for (const TierLayerInfo &layer : tiers.layers)
      perToken +=
          std::min<uint64_t>(std::max<uint32_t>(tiers.topK, 1), layer.experts);
    perToken = std::max<uint64_t>(perToken, 1);
    store->cache_.setEviction(policy.eviction, 32.0 * perToken, 32 * perToken);
  }
  std::vector<ExpertCache::Entry *> hot;
  for (size_t i = 0; i < hotKeys.size(); ++i) {
    auto [l, e] = hotKeys[i];
    bool pinned = hotKeys.size() - i <= pinnedCount;
    std::vector<ExpertCache::Evicted> none;
    ExpertCache::Entry *entry = store->cache_.insert(
        {l, e}, store->entryBytes(tiers.layers[l]), pinned, none);
    Payload *payload =
        entry ? store->allocate(tiers.layers[l], nullptr) : nullptr;
    if (!payload)
      return absl::ResourceExhaustedError(absl::StrCat(
          plan.source, ": cannot hold hot expert ", e, " of tiered layer ", l,
          " in the expert cache of ", desc.cacheBytes, " bytes"));
    entry->payload = payload;
    store->present_[l][e] = payload;
    hot.push_back(entry);
    if (pinned) {
      ++store->hotExperts_;
      store->hotBytes_ += tiers.layers[l].expertBytes;
    }
  }
  absl::Status failure = store->fillAll(hot, pool);
  MOERT_RETURN_IF_ERROR(failure);
  for (ExpertCache::Entry *entry : hot)
    store->setPresent(entry->key, static_cast<Payload *>(entry->payload));
  if (!ahead || !desc.coldExperts) {
    first.gates.clear();
    first.routerLayer.clear();
    first.nextRows.clear();
  }
  store->views_.push_back(std::move(first));
  if (ahead && desc.coldExperts)
    store->prefetch_ = prefetch;
  if (desc.coldExperts)
    for (int r = 0; r < kReaders; ++r)
      store->readers_.emplace_back([s = store.get()] { s->readLoop(); });
  return store;
}

} // namespace detail
} // namespace moert
