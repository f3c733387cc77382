//===- expert_cache.cpp - Bounded caches of paged expert weights ----------===//

#include "expert_cache.h"
#include "plan_file.h"
#include "tier_assignment.h"

#include "absl/strings/str_format.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>

namespace moert {
namespace detail {

//===----------------------------------------------------------------------===//
// ExpertCache
//===----------------------------------------------------------------------===//

ExpertCache::Entry *ExpertCache::find(ExpertKey key) {
  auto it = index_.find(id(key));
  if (it == index_.end())
    return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return &*it->second;
}

ExpertCache::Entry *ExpertCache::insert(ExpertKey key, uint64_t bytes,
                                        bool pinned,
                                        std::vector<Evicted> &evicted) {
  if (index_.count(id(key)) || bytes > capacity_)
    return nullptr;
  // Whether evicting every evictable entry would make room, before any is.
  uint64_t evictable = 0;
  for (const Entry &entry : lru_)
    if (!entry.pinned && entry.locks == 0)
      evictable += entry.bytes;
  if (used_ - evictable + bytes > capacity_)
    return nullptr;
  for (auto it = lru_.end(); used_ + bytes > capacity_;) {
    --it;
    if (it->pinned || it->locks)
      continue;
    evicted.push_back({it->key, it->payload, it->bytes});
    used_ -= it->bytes;
    index_.erase(id(it->key));
    it = lru_.erase(it);
  }
  Entry entry;
  entry.key = key;
  entry.bytes = bytes;
  entry.pinned = pinned;
  lru_.push_front(entry);
  index_[id(key)] = lru_.begin();
  used_ += bytes;
  if (pinned)
    pinned_ += bytes;
  return &lru_.front();
}

void *ExpertCache::erase(Entry *entry) {
  auto it = index_.find(id(entry->key));
  if (it == index_.end())
    return nullptr;
  void *payload = entry->payload;
  used_ -= entry->bytes;
  if (entry->pinned)
    pinned_ -= entry->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return payload;
}

std::vector<ExpertKey> ExpertCache::order() const {
  std::vector<ExpertKey> keys;
  for (const Entry &entry : lru_)
    keys.push_back(entry.key);
  return keys;
}

//===----------------------------------------------------------------------===//
// Tiers of a schedule
//===----------------------------------------------------------------------===//

const char *expertReadModeName(ExpertReadMode mode) {
  switch (mode) {
  case ExpertReadMode::Direct:
    return "direct";
  case ExpertReadMode::Mmap:
    return "mmap";
  case ExpertReadMode::Pread:
    break;
  }
  return "pread";
}

absl::StatusOr<ExpertReadMode> parseExpertReadMode(absl::string_view text) {
  for (ExpertReadMode mode :
       {ExpertReadMode::Pread, ExpertReadMode::Direct, ExpertReadMode::Mmap})
    if (text == expertReadModeName(mode))
      return mode;
  return absl::InvalidArgumentError(absl::StrCat(
      "the expert read mode must be pread, direct or mmap, not '", text, "'"));
}

absl::StatusOr<ExpertTiersDesc> describeTiers(const Plan::Impl &plan,
                                              const ScheduleInfo &schedule,
                                              uint64_t budget) {
  const TierInfo &tiers = schedule.tiers;
  if (!tiers.present)
    return absl::FailedPreconditionError(absl::StrCat(
        plan.source, ": the plan is not tiered (its expert weights are not "
                     "laid out for paging); compile it with moec compile "
                     "--device-memory BYTES"));
  std::vector<TierLayerShape> shapes;
  std::vector<std::vector<uint32_t>> ranks;
  for (const TierLayerInfo &layer : tiers.layers) {
    shapes.push_back({layer.experts, layer.expertBytes});
    ranks.push_back(layer.rank);
  }
  uint64_t fixed = tiers.residentBytes;
  uint64_t window = coldWindow(shapes, tiers.topK);
  ExpertTiersDesc desc;
  desc.residentBytes = tiers.residentBytes;
  desc.arenaBytes = schedule.arenaSize;
  desc.windowBytes = window;
  uint32_t hotCount;
  if (budget) {
    absl::StatusOr<TierAssignment> assignment =
        assignTiers(budget, fixed, shapes, ranks, window);
    if (!assignment.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(plan.source, ": ", assignment.status().message()));
    hotCount = assignment->hotCount;
    desc.budget = budget;
  } else {
    hotCount = tiers.hotCount;
    desc.budget = tiers.budget;
  }
  for (size_t l = 0; l < tiers.layers.size(); ++l) {
    const TierLayerInfo &layer = tiers.layers[l];
    TierLayerDesc out;
    out.step = std::string(schedule.steps[layer.step].name);
    out.stepIndex = layer.step;
    out.experts = layer.experts;
    out.expertBytes = layer.expertBytes;
    for (uint32_t e = 0; e < layer.experts; ++e) {
      bool hot = layer.rank[e] < hotCount;
      out.hot.push_back(hot);
      (hot ? desc.hotExperts : desc.coldExperts) += 1;
      (hot ? desc.hotBytes : desc.coldBytes) += layer.expertBytes;
    }
    desc.layers.push_back(std::move(out));
  }
  // The plan's own tiers are checked as untrusted input: its hot experts
  // and the cold experts' least cache fit in its budget.
  uint64_t need = fixed + desc.hotBytes + (desc.coldExperts ? window : 0);
  if (desc.budget < need)
    return absl::InvalidArgumentError(
        absl::StrCat(plan.source, ": expert tiers: the budget of ", desc.budget,
                     " bytes is less than the ", need,
                     " bytes its resident weights, hot experts and cold cache "
                     "need"));
  desc.cacheBytes = desc.budget - fixed;
  return desc;
}

} // namespace detail

bool Plan::tiered(int device) const {
  return impl_->schedules.at(device).tiers.present;
}

absl::StatusOr<ExpertTiersDesc> Plan::expertTiers(int device,
                                                  uint64_t budget) const {
  return detail::describeTiers(*impl_, impl_->schedules.at(device), budget);
}

namespace detail {

//===----------------------------------------------------------------------===//
// ExpertStore
//===----------------------------------------------------------------------===//

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr uint64_t kPage = 4096;

uint64_t alignDown(uint64_t value, uint64_t alignment) {
  return value / alignment * alignment;
}

} // namespace

/// The memory of one present expert: one anonymous buffer holding every
/// paged input (Pread, Direct), or one file mapping per input (Mmap).
struct ExpertStore::Payload {
  uint8_t *buffer = nullptr;
  size_t bufferBytes = 0;
  std::vector<std::pair<void *, size_t>> maps;
  /// Per paged input of the layer, its bytes.
  std::vector<const uint8_t *> inputs;
};

ExpertStore::ExpertStore(const Plan::Impl &plan, const TierInfo &tiers,
                         ExpertReadMode mode, uint64_t capacity)
    : plan_(plan), tiers_(tiers), mode_(mode), cache_(capacity) {
  present_.resize(tiers.layers.size());
  verified_.resize(tiers.layers.size());
  pointers_.resize(tiers.layers.size());
  paging_.resize(tiers.layers.size());
}

ExpertStore::~ExpertStore() {
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
  payload->buffer = static_cast<uint8_t *>(buffer);
  payload->bufferBytes = bytes;
  return payload;
}

void ExpertStore::release(Payload *payload) {
  if (payload->buffer)
    ::munmap(payload->buffer, payload->bufferBytes);
  for (auto &[address, bytes] : payload->maps)
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

void ExpertStore::resetPaging() {
  for (LayerPaging &paging : paging_)
    paging = LayerPaging();
}

absl::Status ExpertStore::fill(ExpertCache::Entry &entry, Payload *payload) {
  const TierLayerInfo &layer = tiers_.layers[entry.key.layer];
  uint32_t e = entry.key.expert;
  size_t at = 0;
  payload->inputs.resize(layer.inputs.size());
  for (size_t i = 0; i < layer.inputs.size(); ++i) {
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
      payload->maps.emplace_back(map, length);
      data = static_cast<const uint8_t *>(map) + (begin - first);
    } else if (mode_ == ExpertReadMode::Direct && directFd_ >= 0) {
      uint64_t first = alignDown(begin, kPage);
      uint64_t last = alignTo(begin + bytes, kPage);
      uint8_t *out = payload->buffer + at;
      at += alignTo(bytes, kPage) + 2 * kPage;
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
      at += alignTo(bytes, kPage);
      MOERT_RETURN_IF_ERROR(plan_.readBytes(begin, out, bytes));
      data = out;
    }
    payload->inputs[i] = data;
    // Checked on an expert's first read in the session: CRC-32 runs at
    // about 0.7 GB/s here, a third of the page cache's read rate, and a
    // later read of the same bytes trusts the file as a mapping would.
    if (verified_[entry.key.layer][e])
      continue;
    uint32_t stored = layer.crc[e * layer.inputs.size() + i];
    uint32_t computed = crc32(0, data, bytes);
    if (computed != stored)
      return absl::DataLossError(absl::StrCat(
          plan_.source, ": ", schedule_->steps[layer.step].label, ": expert ",
          e, "'s bytes of '", schedule_->tensors[input.tensor].name,
          "' (input ", input.input, ", section ", input.section,
          ", file bytes [", begin, ", +", bytes,
          ")) fail their checksum (stored ", absl::StrFormat("0x%08x", stored),
          ", computed ", absl::StrFormat("0x%08x", computed),
          "): the plan file is corrupt or was changed"));
  }
  verified_[entry.key.layer][e] = 1;
  return absl::OkStatus();
}

absl::Status
ExpertStore::fillAll(const std::vector<ExpertCache::Entry *> &entries,
                     ThreadPool &pool) {
  std::mutex mutex;
  absl::Status failure;
  pool.parallelFor(
      static_cast<int64_t>(entries.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          absl::Status status =
              fill(*entries[i], static_cast<Payload *>(entries[i]->payload));
          if (!status.ok()) {
            std::lock_guard<std::mutex> guard(mutex);
            if (failure.ok())
              failure = status;
          }
        }
      });
  return failure;
}

absl::Status ExpertStore::acquire(uint32_t layerIndex,
                                  std::vector<uint32_t> &pending,
                                  std::vector<uint32_t> &batch,
                                  ThreadPool &pool, const std::string &label) {
  Clock::time_point start = Clock::now();
  const TierLayerInfo &layer = tiers_.layers[layerIndex];
  LayerPaging &paging = paging_[layerIndex];
  batch.clear();
  std::vector<uint32_t> misses, left;
  for (uint32_t e : pending) {
    if (ExpertCache::Entry *entry = cache_.find({layerIndex, e})) {
      cache_.lock(entry);
      batch.push_back(e);
      ++paging.hits;
    } else {
      misses.push_back(e);
    }
  }
  std::vector<ExpertCache::Entry *> reads;
  for (uint32_t e : misses) {
    std::vector<ExpertCache::Evicted> evicted;
    ExpertCache::Entry *entry =
        cache_.insert({layerIndex, e}, entryBytes(layer), false, evicted);
    if (!entry) {
      left.push_back(e);
      continue;
    }
    void *reuse = nullptr;
    for (const ExpertCache::Evicted &old : evicted) {
      setPresent(old.key, nullptr);
      if (!reuse && old.key.layer == layerIndex)
        reuse = old.payload;
      else
        release(static_cast<Payload *>(old.payload));
    }
    Payload *payload = allocate(layer, reuse);
    if (!payload) {
      cache_.erase(entry);
      return absl::ResourceExhaustedError(
          absl::StrCat(label, ": cannot allocate ", entryBytes(layer),
                       " bytes for expert ", e));
    }
    entry->payload = payload;
    cache_.lock(entry);
    reads.push_back(entry);
    batch.push_back(e);
    ++paging.misses;
  }
  Clock::time_point readStart = Clock::now();
  absl::Status failure = fillAll(reads, pool);
  paging.readSeconds += secondsSince(readStart);
  if (!failure.ok()) {
    for (uint32_t e : batch)
      if (ExpertCache::Entry *entry = cache_.find({layerIndex, e}))
        cache_.unlock(entry);
    for (ExpertCache::Entry *entry : reads)
      release(static_cast<Payload *>(cache_.erase(entry)));
    return failure;
  }
  for (ExpertCache::Entry *entry : reads) {
    setPresent(entry->key, static_cast<Payload *>(entry->payload));
    paging.bytesRead += layer.expertBytes;
  }
  if (batch.empty())
    return absl::ResourceExhaustedError(
        absl::StrCat(label, ": the expert cache of ", cache_.capacity(),
                     " bytes has no room for one more expert of ",
                     entryBytes(layer), " bytes"));
  ++paging.rounds;
  pending = std::move(left);
  paging.waitSeconds += secondsSince(start);
  return absl::OkStatus();
}

void ExpertStore::release(uint32_t layer, const std::vector<uint32_t> &batch) {
  for (uint32_t e : batch)
    if (ExpertCache::Entry *entry = cache_.find({layer, e}))
      cache_.unlock(entry);
}

absl::StatusOr<std::unique_ptr<ExpertStore>>
ExpertStore::create(const Plan::Impl &plan, const ScheduleInfo &schedule,
                    int device, uint64_t budget, ExpertReadMode mode,
                    ThreadPool &pool) {
  (void)device;
  MOERT_ASSIGN_OR_RETURN(ExpertTiersDesc desc,
                         describeTiers(plan, schedule, budget));
  std::unique_ptr<ExpertStore> store(
      new ExpertStore(plan, schedule.tiers, mode, desc.cacheBytes));
  store->budget_ = desc.budget;
  store->schedule_ = &schedule;
  if (mode == ExpertReadMode::Direct && plan.fd >= 0) {
    std::string path = absl::StrCat("/proc/self/fd/", plan.fd);
    store->directFd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (store->directFd_ < 0)
      return absl::FailedPreconditionError(absl::StrCat(
          plan.source, ": cannot open with O_DIRECT: ", std::strerror(errno),
          " (use the pread read mode)"));
  }
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
  // The hot experts, read and pinned (one parallel pass over all of them).
  std::vector<ExpertCache::Entry *> hot;
  for (uint32_t l = 0; l < tiers.layers.size(); ++l)
    for (uint32_t e = 0; e < tiers.layers[l].experts; ++e) {
      if (!desc.layers[l].hot[e])
        continue;
      std::vector<ExpertCache::Evicted> none;
      ExpertCache::Entry *entry = store->cache_.insert(
          {l, e}, store->entryBytes(tiers.layers[l]), true, none);
      Payload *payload =
          entry ? store->allocate(tiers.layers[l], nullptr) : nullptr;
      if (!payload)
        return absl::ResourceExhaustedError(absl::StrCat(
            plan.source, ": cannot hold hot expert ", e, " of tiered layer ", l,
            " in the expert cache of ", desc.cacheBytes, " bytes"));
      entry->payload = payload;
      store->present_[l][e] = payload;
      hot.push_back(entry);
      ++store->hotExperts_;
      store->hotBytes_ += tiers.layers[l].expertBytes;
    }
  absl::Status failure = store->fillAll(hot, pool);
  MOERT_RETURN_IF_ERROR(failure);
  for (ExpertCache::Entry *entry : hot)
    store->setPresent(entry->key, static_cast<Payload *>(entry->payload));
  return store;
}

absl::StatusOr<double> ExpertStore::probeBandwidth(ThreadPool &pool,
                                                   uint64_t maxBytes) {
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  // The paged bytes: every tiered layer's inputs, in file order.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t total = 0;
  for (const TierLayerInfo &layer : tiers_.layers)
    for (const PagedInput &input : layer.inputs)
      for (uint64_t at = 0;
           at < input.expertBytes * layer.experts && total < maxBytes;
           at += kChunk) {
        uint64_t n = std::min(
            {kChunk, input.expertBytes * layer.experts - at, maxBytes - total});
        ranges.emplace_back(input.fileOffset + at, n);
        total += n;
      }
  if (!total)
    return 0.0;
  std::mutex mutex;
  absl::Status failure;
  Clock::time_point start = Clock::now();
  pool.parallelFor(
      static_cast<int64_t>(ranges.size()), 1, [&](int64_t begin, int64_t end) {
        std::unique_ptr<uint8_t[]> buffer(new uint8_t[kChunk]);
        for (int64_t r = begin; r < end; ++r) {
          absl::Status status =
              plan_.readBytes(ranges[r].first, buffer.get(), ranges[r].second);
          if (!status.ok()) {
            std::lock_guard<std::mutex> guard(mutex);
            failure = status;
          }
        }
      });
  double seconds = secondsSince(start);
  MOERT_RETURN_IF_ERROR(failure);
  return seconds > 0 ? total / seconds : 0.0;
}

} // namespace detail
} // namespace moert
