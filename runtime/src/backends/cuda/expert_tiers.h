//===- expert_tiers.h - Tiered expert weights on the GPU --------*- C++ -*-===//
//
// The CUDA backend's side of tiered plans (docs/tiered-experts.md, "On the
// GPU"): the hot experts live in device memory for the whole session, the
// cold ones in pinned host memory (read from the plan file and checked when
// the session starts), and a bounded device cache of fixed-size slots takes
// the cold experts a layer's routing selects. Which experts are present is
// kept by the ExpertCache every backend shares (expert_store.h).
//
// A tiered Experts step reads its expert offsets back to the host (the one
// point where it waits for the GPU), then runs as rounds: each round locks
// the experts it can hold (hits first), copies its misses into evicted or
// free slots on a copy stream of its own, makes the compute stream wait for
// exactly those copies (an event per slot), uploads the round's table of
// per-expert addresses and launches the expert kernels for the round's
// experts only (ExpertLaunch::table, ::present). A slot is refilled only
// after the compute stream has passed the last launch that read it (another
// event per slot), so copies into other slots overlap the compute.
//
// With next-layer prefetch (pre-gating), the step also reads back the
// layer's router input, evaluates the next tiered layer's router on it on
// the host (expert_prefetch.cpp) and, after its last round, starts the
// copies of the predicted experts that are absent; the next layer finds
// them as hits and waits only for the copies still in flight.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_CUDA_EXPERT_TIERS_H
#define MOERT_SRC_CUDA_EXPERT_TIERS_H

#include "backends/cuda/expert_kernels.h"
#include "exec/thread_pool.h"
#include "tiers/expert_store.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

namespace moert::cuda {

class DeviceExpertStore {
public:
  /// Tiers `schedule` of `plan` for `budget` bytes of device memory (0: the
  /// plan's own tiers), reads every expert once (checking its checksums):
  /// the hot ones into device memory, the cold ones into pinned host
  /// memory. Fails when the budget is too small, a read or checksum fails,
  /// or an allocation fails.
  /// With `prefetch` NextLayer the cache keeps room for a second layer's
  /// experts where the budget allows (as the CPU store does); NextMicroBatch
  /// is refused.
  static absl::StatusOr<std::unique_ptr<DeviceExpertStore>>
  create(const Plan::Impl &plan, const detail::ScheduleInfo &schedule,
         uint64_t budget, detail::ExpertPrefetch prefetch);
  ~DeviceExpertStore();
  DeviceExpertStore(const DeviceExpertStore &) = delete;
  DeviceExpertStore &operator=(const DeviceExpertStore &) = delete;

  /// Runs tiered layer `layer`'s Experts step on `stream`: `launch` holds
  /// the step's sizes, tokens, device offsets and outputs, with null
  /// addresses for its paged weights. Waits for the offsets, then launches
  /// the step once per round of experts the cache holds at once (once at
  /// least, so that the padding rows are zeroed and bad offsets reported).
  ///
  /// With prefetch, `gateTokens` is the host mirror of this layer's router
  /// input (GateInfo::tokens, gateTokensOf) whose copy from the device is
  /// enqueued on `stream` (valid once the offsets are), of `gateElements`
  /// floats; `pool` evaluates the next layer's router on it.
  absl::Status runLayer(uint32_t layer, ExpertLaunch launch,
                        cudaStream_t stream, const std::string &label,
                        const float *gateTokens, int64_t gateElements,
                        detail::ThreadPool &pool);
  /// The router input tensor whose value runLayer(layer) predicts from, or
  /// -1 when nothing is read ahead after `layer`.
  int32_t gateTokensOf(uint32_t layer) const;

  /// The paging counters per tiered layer since the last reset: hits,
  /// misses, bytes copied to the device, rounds, reads ahead; readSeconds
  /// the copy stream's time for the misses' copies and waitSeconds the
  /// compute stream's wait for them (CUDA events, added once they
  /// completed: by the next tiered step or finishRun).
  std::vector<ExpertCacheCounters> &paging() { return paging_; }
  /// Adds the timings of the run's copies and waits (the run is complete:
  /// its last synchronisation passed).
  absl::Status finishRun() { return harvestTimings(); }
  /// Copies up to `maxBytes` of the pinned host tier to the device and
  /// returns the bytes per second (0 when every expert is hot).
  absl::StatusOr<double> probeBandwidth(uint64_t maxBytes);
  /// The session's cache as ExpertCacheStats describes it.
  ExpertCacheStats describe() const;
  /// Whether `input` (a position among a tiered Experts step's inputs) is
  /// paged in `layer`: its device address is then the store's.
  bool isPaged(uint32_t layer, int input) const;

private:
  DeviceExpertStore(const Plan::Impl &plan,
                    const detail::ScheduleInfo &schedule, uint64_t capacity);
  /// The bytes of one expert's block, its paged inputs each 256-byte
  /// aligned, in a slot and in the host tier.
  uint64_t blockBytes(uint32_t layer) const;
  /// Reads expert e of `layer` from the plan into `out` (blockBytes) and
  /// checks it.
  absl::Status readExpert(uint32_t layer, uint32_t e, uint8_t *out) const;
  /// Locks the experts of `pending` that fit (hits first) into `batch`,
  /// copying misses to their slots and making `stream` wait for them.
  absl::Status acquire(uint32_t layer, std::vector<uint32_t> &pending,
                       std::vector<uint32_t> &batch, cudaStream_t stream,
                       const std::string &label);
  /// Inserts expert e of `layer` (absent) into a slot, evicting the least
  /// recently used unlocked entries, and enqueues its copy; null when it
  /// does not fit.
  absl::StatusOr<detail::ExpertCache::Entry *>
  copyIn(uint32_t layer, uint32_t e, const std::string &label);
  /// Starts the copies of the predicted experts of `layer` that are absent,
  /// most predicted first, while they fit.
  absl::Status readAhead(uint32_t layer, const std::vector<uint32_t> &predicted,
                         const std::string &label);
  /// Event pairs around one round's misses: their copies on the copy
  /// stream and the compute stream's wait for them. Pairs are reused once
  /// harvested.
  struct RoundTiming {
    uint32_t layer = 0;
    cudaEvent_t copyBegin = nullptr, copyEnd = nullptr;
    cudaEvent_t waitBegin = nullptr, waitEnd = nullptr;
  };
  absl::StatusOr<RoundTiming *> newTiming(uint32_t layer);
  /// Adds every pending pair whose events completed to its layer's
  /// counters.
  absl::Status harvestTimings();
  uint8_t *slotAddress(int slot) const {
    return pool_ + static_cast<uint64_t>(slot) * slotBytes_;
  }

  const Plan::Impl &plan_;
  const detail::ScheduleInfo &schedule_;
  const detail::TierInfo &tiers_;
  ExpertTiersDesc desc_;
  detail::ExpertCache cache_;
  std::vector<ExpertCacheCounters> paging_;
  /// Per layer: each paged input's offset in an expert's block.
  std::vector<std::vector<uint64_t>> inputOffsets_;
  /// Per layer and expert: its block in the pinned host tier (cold experts;
  /// null for hot ones).
  std::vector<std::vector<const uint8_t *>> hostBlocks_;
  std::vector<uint8_t *> hostAllocations_;
  /// The device slots: slotCount_ blocks of slotBytes_, the free ones, and
  /// per slot the event its last copy recorded.
  uint8_t *pool_ = nullptr;
  uint64_t slotBytes_ = 0;
  int slotCount_ = 0;
  std::vector<int> freeSlots_;
  std::vector<cudaEvent_t> slotCopied_;
  /// Per slot: the event the compute stream recorded after the last launch
  /// that read it (the copy stream waits for it before refilling the slot),
  /// and whether there was one.
  std::vector<cudaEvent_t> slotReleased_;
  std::vector<char> slotLaunched_;
  cudaStream_t copyStream_ = nullptr;
  /// Pre-gating: the gates, and per layer the layer read ahead for (-1).
  detail::ExpertPrefetch prefetch_ = detail::ExpertPrefetch::None;
  std::vector<detail::GateInfo> gates_;
  std::vector<int32_t> nextLayer_;
  /// The round's address table ([kExpertSlots][E] then present [E]) in
  /// pinned host memory and on the device, and the event of its last upload
  /// (the host waits for it before rewriting the pinned copy).
  const void **tableHost_ = nullptr;
  const void **tableDevice_ = nullptr;
  cudaEvent_t tableUploaded_ = nullptr;
  bool tableInFlight_ = false;
  std::vector<RoundTiming> timings_;
  size_t timingsUsed_ = 0;
  /// The offsets read back, [E + 1] of the largest layer.
  int64_t *offsetsHost_ = nullptr;
  uint32_t maxExperts_ = 0;
};

} // namespace moert::cuda

#endif // MOERT_SRC_CUDA_EXPERT_TIERS_H
