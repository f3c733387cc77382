//===- expert_tiers.cpp - Tiered expert weights on the GPU ----------------===//
//
// DeviceExpertStore (expert_tiers.h): the hot experts and a cache of cold
// ones in fixed-size device slots, the cold experts in pinned host memory,
// and the rounds of a tiered Experts step.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/expert_tiers.h"
#include "backends/cuda/cuda_check.h"
#include "format/plan_file.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>

namespace moert::cuda {

using detail::ExpertCache;
using detail::ExpertKey;
using detail::ScheduleInfo;
using detail::TierLayerInfo;

namespace {

/// Alignment of each paged input inside an expert's block.
constexpr uint64_t kBlockAlignment = 256;

/// The payload an ExpertCache entry carries: its slot, plus one (so that
/// slot 0 is not null).
void *slotPayload(int slot) {
  return reinterpret_cast<void *>(static_cast<uintptr_t>(slot) + 1);
}
int slotOf(void *payload) {
  return static_cast<int>(reinterpret_cast<uintptr_t>(payload)) - 1;
}

} // namespace

DeviceExpertStore::DeviceExpertStore(const Plan::Impl &plan,
                                     const ScheduleInfo &schedule,
                                     uint64_t capacity)
    : plan_(plan), schedule_(schedule), tiers_(schedule.tiers),
      cache_(capacity) {}

DeviceExpertStore::~DeviceExpertStore() {
  // Teardown cannot report errors; the session's device is current.
  if (copyStream_)
    cudaStreamSynchronize(copyStream_);
  for (const std::vector<cudaEvent_t> *events : {&slotCopied_, &slotReleased_})
    for (cudaEvent_t event : *events)
      if (event)
        cudaEventDestroy(event);
  if (tableUploaded_)
    cudaEventDestroy(tableUploaded_);
  for (RoundTiming &t : timings_)
    for (cudaEvent_t event : {t.copyBegin, t.copyEnd, t.waitBegin, t.waitEnd})
      if (event)
        cudaEventDestroy(event);
  if (copyStream_)
    cudaStreamDestroy(copyStream_);
  cudaFree(pool_);
  cudaFree(tableDevice_);
  cudaFreeHost(tableHost_);
  cudaFreeHost(offsetsHost_);
  for (uint8_t *block : hostAllocations_)
    cudaFreeHost(block);
}

uint64_t DeviceExpertStore::blockBytes(uint32_t layer) const {
  uint64_t bytes = 0;
  for (const detail::PagedInput &input : tiers_.layers[layer].inputs)
    bytes = detail::alignTo(bytes, kBlockAlignment) + input.expertBytes;
  return detail::alignTo(bytes, kBlockAlignment);
}

bool DeviceExpertStore::isPaged(uint32_t layer, int input) const {
  for (const detail::PagedInput &paged : tiers_.layers[layer].inputs)
    if (paged.input == input)
      return true;
  return false;
}

absl::Status DeviceExpertStore::readExpert(uint32_t layer, uint32_t e,
                                           uint8_t *out) const {
  const TierLayerInfo &info = tiers_.layers[layer];
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    const detail::PagedInput &input = info.inputs[i];
    uint8_t *at = out + inputOffsets_[layer][i];
    MOERT_RETURN_IF_ERROR(plan_.readBytes(
        input.fileOffset + e * input.expertBytes, at, input.expertBytes));
    MOERT_RETURN_IF_ERROR(
        detail::checkExpertBytes(plan_, schedule_, info, e, i, at));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceExpertStore>>
DeviceExpertStore::create(const Plan::Impl &plan, const ScheduleInfo &schedule,
                          uint64_t budget, detail::ExpertPrefetch prefetch) {
  if (prefetch == detail::ExpertPrefetch::NextMicroBatch)
    return absl::UnimplementedError(absl::StrCat(
        plan.source, ": the CUDA backend reads tiered experts ahead with "
                     "next-layer or none, not next-micro-batch"));
  std::vector<detail::GateInfo> gates;
  std::vector<int32_t> next;
  bool ahead = false;
  if (prefetch == detail::ExpertPrefetch::NextLayer) {
    gates = detail::findGates(schedule);
    next = detail::pregatingTargets(schedule, gates);
    ahead = std::any_of(next.begin(), next.end(),
                        [](int32_t layer) { return layer >= 0; });
  }
  // Reading a layer ahead wants room for a second layer's experts: twice
  // the least cold cache where the budget allows, as on the CPU.
  absl::StatusOr<ExpertTiersDesc> tiered =
      ahead ? detail::describeTiers(plan, schedule, budget, 1)
            : absl::StatusOr<ExpertTiersDesc>(absl::UnknownError(""));
  if (!tiered.ok())
    tiered = detail::describeTiers(plan, schedule, budget);
  MOERT_RETURN_IF_ERROR(tiered.status());
  const ExpertTiersDesc &desc = *tiered;
  std::unique_ptr<DeviceExpertStore> store(
      new DeviceExpertStore(plan, schedule, desc.cacheBytes));
  DeviceExpertStore &s = *store;
  s.desc_ = desc;
  if (ahead && desc.coldExperts) {
    s.prefetch_ = prefetch;
    s.gates_ = std::move(gates);
    s.nextLayer_ = std::move(next);
  }
  const detail::TierInfo &tiers = schedule.tiers;
  size_t layers = tiers.layers.size();
  s.paging_.resize(layers);
  s.inputOffsets_.resize(layers);
  s.hostBlocks_.resize(layers);
  // Slots hold the largest block; as many as the cache holds of the
  // smallest experts (equal sizes, the usual case, waste nothing).
  uint64_t smallest = UINT64_MAX;
  for (uint32_t l = 0; l < layers; ++l) {
    const TierLayerInfo &layer = tiers.layers[l];
    uint64_t at = 0;
    for (const detail::PagedInput &input : layer.inputs) {
      at = detail::alignTo(at, kBlockAlignment);
      s.inputOffsets_[l].push_back(at);
      at += input.expertBytes;
    }
    s.slotBytes_ = std::max(s.slotBytes_, s.blockBytes(l));
    smallest = std::min(smallest, layer.expertBytes);
    s.maxExperts_ = std::max(s.maxExperts_, layer.experts);
  }
  uint64_t slots = smallest ? desc.cacheBytes / smallest : 0;
  // Never more slots than experts to hold.
  slots = std::min<uint64_t>(slots, tiers.totalExperts);
  if (slots == 0)
    return absl::ResourceExhaustedError(
        absl::StrCat(plan.source, ": the expert cache of ", desc.cacheBytes,
                     " bytes holds no expert"));
  s.slotCount_ = static_cast<int>(slots);
  std::string where = absl::StrCat(plan.source, ": tiered experts");
  MOERT_CUDA(
      cudaMalloc(reinterpret_cast<void **>(&s.pool_), slots * s.slotBytes_),
      absl::StrCat(where, ": allocating ", slots, " device slots of ",
                   s.slotBytes_, " bytes"));
  s.slotCopied_.assign(slots, nullptr);
  s.slotReleased_.assign(slots, nullptr);
  s.slotLaunched_.assign(slots, 0);
  for (uint64_t k = 0; k < slots; ++k) {
    for (cudaEvent_t *event : {&s.slotCopied_[k], &s.slotReleased_[k]})
      MOERT_CUDA(cudaEventCreateWithFlags(event, cudaEventDisableTiming),
                 where);
    s.freeSlots_.push_back(static_cast<int>(slots - 1 - k));
  }
  MOERT_CUDA(cudaStreamCreateWithFlags(&s.copyStream_, cudaStreamNonBlocking),
             absl::StrCat(where, ": creating the copy stream"));
  MOERT_CUDA(
      cudaEventCreateWithFlags(&s.tableUploaded_, cudaEventDisableTiming),
      where);
  size_t tableEntries = (kExpertSlots + 1) * size_t{s.maxExperts_};
  MOERT_CUDA(cudaMallocHost(reinterpret_cast<void **>(&s.tableHost_),
                            tableEntries * sizeof(void *)),
             where);
  MOERT_CUDA(cudaMalloc(reinterpret_cast<void **>(&s.tableDevice_),
                        tableEntries * sizeof(void *)),
             where);
  MOERT_CUDA(cudaMallocHost(reinterpret_cast<void **>(&s.offsetsHost_),
                            (s.maxExperts_ + 1) * sizeof(int64_t)),
             where);

  // Every expert is read once: the hot ones through a staging block into
  // their pinned slots, the cold ones into the host tier.
  uint8_t *staging = nullptr;
  MOERT_CUDA(cudaMallocHost(reinterpret_cast<void **>(&staging), s.slotBytes_),
             where);
  s.hostAllocations_.push_back(staging);
  for (uint32_t l = 0; l < layers; ++l) {
    const TierLayerInfo &layer = tiers.layers[l];
    uint64_t block = s.blockBytes(l);
    uint32_t cold = 0;
    for (uint32_t e = 0; e < layer.experts; ++e)
      cold += desc.layers[l].hot[e] ? 0 : 1;
    uint8_t *host = nullptr;
    if (cold)
      MOERT_CUDA(
          cudaMallocHost(reinterpret_cast<void **>(&host), cold * block),
          absl::StrCat(where, ": pinning ", cold * block,
                       " bytes of host memory for the cold experts of layer ",
                       l));
    if (host)
      s.hostAllocations_.push_back(host);
    s.hostBlocks_[l].assign(layer.experts, nullptr);
    for (uint32_t e = 0; e < layer.experts; ++e) {
      if (!desc.layers[l].hot[e]) {
        MOERT_RETURN_IF_ERROR(s.readExpert(l, e, host));
        s.hostBlocks_[l][e] = host;
        host += block;
        continue;
      }
      std::vector<ExpertCache::Evicted> none;
      ExpertCache::Entry *entry =
          s.cache_.insert({l, e}, layer.expertBytes, /*pinned=*/true, none);
      if (!entry || s.freeSlots_.empty())
        return absl::ResourceExhaustedError(absl::StrCat(
            plan.source, ": cannot hold hot expert ", e, " of tiered layer ", l,
            " in the expert cache of ", desc.cacheBytes, " bytes"));
      int slot = s.freeSlots_.back();
      s.freeSlots_.pop_back();
      entry->payload = slotPayload(slot);
      MOERT_RETURN_IF_ERROR(s.readExpert(l, e, staging));
      MOERT_CUDA(cudaMemcpy(s.slotAddress(slot), staging, block,
                            cudaMemcpyHostToDevice),
                 where);
    }
  }
  // The staging block (first, and freed with the store on an error above)
  // is not needed once the hot experts are on the device.
  cudaFreeHost(staging);
  s.hostAllocations_.erase(s.hostAllocations_.begin());
  return store;
}

absl::StatusOr<ExpertCache::Entry *>
DeviceExpertStore::copyIn(uint32_t layer, uint32_t e,
                          const std::string &label) {
  const TierLayerInfo &info = tiers_.layers[layer];
  std::vector<ExpertCache::Evicted> evicted;
  ExpertCache::Entry *entry =
      cache_.insert({layer, e}, info.expertBytes, false, evicted);
  for (const ExpertCache::Evicted &gone : evicted)
    freeSlots_.push_back(slotOf(gone.payload));
  if (!entry || freeSlots_.empty()) {
    if (entry)
      cache_.erase(entry);
    return nullptr;
  }
  int slot = freeSlots_.back();
  freeSlots_.pop_back();
  entry->payload = slotPayload(slot);
  // The slot's last reader (a launch of an earlier round or layer) is done
  // before it is refilled; copies into other slots do not wait for it.
  if (slotLaunched_[slot])
    MOERT_CUDA(cudaStreamWaitEvent(copyStream_, slotReleased_[slot], 0), label);
  MOERT_CUDA(cudaMemcpyAsync(slotAddress(slot), hostBlocks_[layer][e],
                             blockBytes(layer), cudaMemcpyHostToDevice,
                             copyStream_),
             label);
  MOERT_CUDA(cudaEventRecord(slotCopied_[slot], copyStream_), label);
  return entry;
}

absl::Status DeviceExpertStore::acquire(uint32_t layer,
                                        std::vector<uint32_t> &pending,
                                        std::vector<uint32_t> &batch,
                                        cudaStream_t stream,
                                        const std::string &label) {
  const TierLayerInfo &info = tiers_.layers[layer];
  ExpertCacheCounters &paging = paging_[layer];
  std::vector<uint32_t> misses, left;
  for (uint32_t e : pending) {
    ExpertCache::Entry *entry = cache_.find({layer, e});
    if (!entry) {
      misses.push_back(e);
      continue;
    }
    cache_.lock(entry);
    batch.push_back(e);
    ++paging.hits;
    if (entry->prefetched) {
      // Read ahead: its copy may still be in flight.
      entry->prefetched = false;
      ++paging.prefetch.used;
      MOERT_CUDA(
          cudaStreamWaitEvent(stream, slotCopied_[slotOf(entry->payload)], 0),
          label);
    }
  }
  RoundTiming *timing = nullptr;
  std::vector<int> copied;
  for (uint32_t e : misses) {
    if (!timing) {
      MOERT_ASSIGN_OR_RETURN(timing, newTiming(layer));
      MOERT_CUDA(cudaEventRecord(timing->copyBegin, copyStream_), label);
    }
    MOERT_ASSIGN_OR_RETURN(ExpertCache::Entry * entry, copyIn(layer, e, label));
    if (!entry) {
      left.push_back(e);
      continue;
    }
    cache_.lock(entry);
    copied.push_back(slotOf(entry->payload));
    batch.push_back(e);
    ++paging.misses;
    paging.bytesPagedIn += info.expertBytes;
  }
  if (timing) {
    MOERT_CUDA(cudaEventRecord(timing->copyEnd, copyStream_), label);
    // The launch waits for these experts' copies, not for the others'.
    MOERT_CUDA(cudaEventRecord(timing->waitBegin, stream), label);
    for (int slot : copied)
      MOERT_CUDA(cudaStreamWaitEvent(stream, slotCopied_[slot], 0), label);
    MOERT_CUDA(cudaEventRecord(timing->waitEnd, stream), label);
  }
  pending.swap(left);
  return absl::OkStatus();
}

absl::Status
DeviceExpertStore::readAhead(uint32_t layer,
                             const std::vector<uint32_t> &predicted,
                             const std::string &label) {
  const TierLayerInfo &info = tiers_.layers[layer];
  ExpertCacheCounters &paging = paging_[layer];
  for (uint32_t e : predicted) {
    if (e >= info.experts || cache_.peek({layer, e}))
      continue;
    MOERT_ASSIGN_OR_RETURN(ExpertCache::Entry * entry, copyIn(layer, e, label));
    if (!entry)
      break;
    entry->prefetched = true;
    ++paging.prefetch.issued;
    paging.prefetch.bytes += info.expertBytes;
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceExpertStore::RoundTiming *>
DeviceExpertStore::newTiming(uint32_t layer) {
  if (timingsUsed_ == timings_.size()) {
    RoundTiming &t = timings_.emplace_back();
    for (cudaEvent_t *event :
         {&t.copyBegin, &t.copyEnd, &t.waitBegin, &t.waitEnd})
      MOERT_CUDA(cudaEventCreate(event), "timing expert copies");
  }
  RoundTiming *t = &timings_[timingsUsed_++];
  t->layer = layer;
  return t;
}

absl::Status DeviceExpertStore::harvestTimings() {
  size_t kept = 0;
  for (size_t i = 0; i < timingsUsed_; ++i) {
    RoundTiming &t = timings_[i];
    if (cudaEventQuery(t.copyEnd) != cudaSuccess ||
        cudaEventQuery(t.waitEnd) != cudaSuccess) {
      (void)cudaGetLastError(); // cudaErrorNotReady is not an error here.
      std::swap(timings_[kept++], t);
      continue;
    }
    float copyMs = 0, waitMs = 0;
    MOERT_CUDA(cudaEventElapsedTime(&copyMs, t.copyBegin, t.copyEnd),
               "timing expert copies");
    MOERT_CUDA(cudaEventElapsedTime(&waitMs, t.waitBegin, t.waitEnd),
               "timing expert copies");
    paging_[t.layer].readSeconds += copyMs * 1e-3;
    paging_[t.layer].waitSeconds += waitMs * 1e-3;
  }
  timingsUsed_ = kept;
  return absl::OkStatus();
}

absl::StatusOr<double> DeviceExpertStore::probeBandwidth(uint64_t maxBytes) {
  // The largest contiguous part of the host tier: one layer's cold experts.
  uint64_t bytes = 0;
  const uint8_t *source = nullptr;
  for (uint32_t l = 0; l < hostBlocks_.size(); ++l) {
    uint64_t cold = 0;
    const uint8_t *first = nullptr;
    for (const uint8_t *block : hostBlocks_[l])
      if (block) {
        first = first ? first : block;
        cold += blockBytes(l);
      }
    if (cold > bytes) {
      bytes = cold;
      source = first;
    }
  }
  bytes = std::min(bytes, maxBytes);
  if (!source || !bytes)
    return 0.0;
  std::string where = "measuring the host-to-device bandwidth";
  void *target = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  cudaError_t error = cudaMalloc(&target, bytes);
  if (error == cudaSuccess)
    error = cudaEventCreate(&begin);
  if (error == cudaSuccess)
    error = cudaEventCreate(&end);
  float ms = 0;
  // The first pass warms up; the second is timed.
  for (int pass = 0; error == cudaSuccess && pass < 2; ++pass) {
    error = cudaEventRecord(begin, copyStream_);
    if (error == cudaSuccess)
      error = cudaMemcpyAsync(target, source, bytes, cudaMemcpyHostToDevice,
                              copyStream_);
    if (error == cudaSuccess)
      error = cudaEventRecord(end, copyStream_);
    if (error == cudaSuccess)
      error = cudaEventSynchronize(end);
    if (error == cudaSuccess)
      error = cudaEventElapsedTime(&ms, begin, end);
  }
  cudaFree(target);
  for (cudaEvent_t event : {begin, end})
    if (event)
      cudaEventDestroy(event);
  MOERT_CUDA(error, where);
  return ms > 0 ? bytes / (ms * 1e-3) : 0.0;
}

int32_t DeviceExpertStore::gateTokensOf(uint32_t layer) const {
  if (prefetch_ != detail::ExpertPrefetch::NextLayer || nextLayer_[layer] < 0)
    return -1;
  return gates_[layer].tokens;
}

absl::Status DeviceExpertStore::runLayer(uint32_t layer, ExpertLaunch launch,
                                         cudaStream_t stream,
                                         const std::string &label,
                                         const float *gateTokens,
                                         int64_t gateElements,
                                         detail::ThreadPool &pool) {
  const TierLayerInfo &info = tiers_.layers[layer];
  int64_t E = info.experts;
  // The routing, on the host: the one wait of the step.
  MOERT_CUDA(cudaMemcpyAsync(offsetsHost_, launch.offsets,
                             (E + 1) * sizeof(int64_t), cudaMemcpyDeviceToHost,
                             stream),
             label);
  MOERT_CUDA(cudaStreamSynchronize(stream), label);
  MOERT_RETURN_IF_ERROR(harvestTimings());
  std::vector<uint32_t> pending;
  bool valid = offsetsHost_[0] == 0;
  for (int64_t e = 0; valid && e < E; ++e) {
    valid = offsetsHost_[e + 1] >= offsetsHost_[e] &&
            offsetsHost_[e + 1] <= launch.rows;
    if (valid && offsetsHost_[e + 1] > offsetsHost_[e])
      pending.push_back(static_cast<uint32_t>(e));
  }
  // Bad offsets: one launch of no expert, whose schedule records the error.
  if (!valid)
    pending.clear();
  ExpertCacheCounters &paging = paging_[layer];
  const void **present = tableHost_ + kExpertSlots * E;
  bool first = true;
  while (first || !pending.empty()) {
    first = false;
    std::vector<uint32_t> batch;
    MOERT_RETURN_IF_ERROR(acquire(layer, pending, batch, stream, label));
    if (batch.empty() && !pending.empty())
      return absl::ResourceExhaustedError(
          absl::StrCat(label, ": the expert cache of ", cache_.capacity(),
                       " bytes has no room for one more expert"));
    // The pinned table is rewritten once its last upload has left it.
    if (tableInFlight_)
      MOERT_CUDA(cudaEventSynchronize(tableUploaded_), label);
    std::fill(tableHost_, tableHost_ + (kExpertSlots + 1) * E, nullptr);
    for (uint32_t e : batch) {
      uint8_t *base = slotAddress(slotOf(cache_.peek({layer, e})->payload));
      for (size_t i = 0; i < info.inputs.size(); ++i) {
        int slot = info.inputs[i].input - 2; // Inputs from w1 on.
        tableHost_[slot * E + e] = base + inputOffsets_[layer][i];
      }
      present[e] = base;
    }
    size_t bytes = (kExpertSlots + 1) * E * sizeof(void *);
    MOERT_CUDA(cudaMemcpyAsync(tableDevice_, tableHost_, bytes,
                               cudaMemcpyHostToDevice, stream),
               label);
    MOERT_CUDA(cudaEventRecord(tableUploaded_, stream), label);
    tableInFlight_ = true;
    launch.table = tableDevice_;
    launch.present = tableDevice_ + kExpertSlots * E;
    MOERT_CUDA(launchExpertFfn(launch, stream), label);
    ++paging.rounds;
    for (uint32_t e : batch) {
      ExpertCache::Entry *entry = cache_.peek({layer, e});
      int slot = slotOf(entry->payload);
      MOERT_CUDA(cudaEventRecord(slotReleased_[slot], stream), label);
      slotLaunched_[slot] = 1;
      cache_.unlock(entry);
    }
  }
  // Pre-gating: the next layer's router on this layer's router input (on
  // the host since the offsets' wait); its copies overlap the compute
  // that is left of this layer and what runs before the next one.
  int64_t hidden = gateTokensOf(layer) >= 0 ? gates_[layer].hidden : 0;
  if (gateTokens && hidden > 0 && gateElements >= hidden) {
    uint32_t next = static_cast<uint32_t>(nextLayer_[layer]);
    std::vector<uint32_t> predicted =
        detail::predictExperts(gates_[next], gateTokens, gateElements / hidden,
                               /*maxTokens=*/128, pool);
    MOERT_RETURN_IF_ERROR(readAhead(next, predicted, label));
  }
  return absl::OkStatus();
}

ExpertCacheStats DeviceExpertStore::describe() const {
  ExpertCacheStats out;
  out.tiered = true;
  out.budget = desc_.budget;
  out.capacityBytes = cache_.capacity();
  out.usedBytes = cache_.used();
  out.hotExperts = desc_.hotExperts;
  out.hotBytes = desc_.hotBytes;
  out.residentBytes = tiers_.residentBytes;
  out.arenaBytes = schedule_.arenaSize;
  out.readMode = "pinned";
  out.prefetch = detail::expertPrefetchName(prefetch_);
  out.policy = "static";
  return out;
}

} // namespace moert::cuda
