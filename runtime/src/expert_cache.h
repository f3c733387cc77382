//===- expert_cache.h - Bounded caches of paged expert weights --*- C++ -*-===//
//
// Tiered plans (docs/tiered-experts.md) keep the cold experts' weights in the
// plan file and read them when a layer's routing selects them. Two parts:
//
// * ExpertCache: the bookkeeping every backend shares (the CUDA backend's
//   device-memory cache would hold its copies the same way): which experts
//   are present, their LRU order, which are pinned (the hot set) or locked
//   (read by the running step), and the bytes they hold, never above the
//   capacity. It holds no memory: each entry carries the backend's payload.
// * ExpertStore: the CPU backend's, over host buffers filled from the plan
//   file (pread, O_DIRECT or mmap), with per-layer paging counters; the
//   Experts kernel obtains every paged expert's weights through it.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_EXPERT_CACHE_H
#define MOERT_SRC_EXPERT_CACHE_H

#include "plan_impl.h"
#include "thread_pool.h"

#include "absl/status/status.h"

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

namespace moert::detail {

/// A tiered layer (its index among the schedule's) and one of its experts.
struct ExpertKey {
  uint32_t layer = 0;
  uint32_t expert = 0;
  bool operator==(const ExpertKey &o) const {
    return layer == o.layer && expert == o.expert;
  }
};

class ExpertCache {
public:
  struct Entry {
    ExpertKey key;
    uint64_t bytes = 0;
    /// The backend's memory of the entry.
    void *payload = nullptr;
    bool pinned = false;
    /// Locked entries (read by the running step) are never evicted.
    int locks = 0;
  };
  /// What an insertion evicted: the backend frees (or reuses) each payload.
  struct Evicted {
    ExpertKey key;
    void *payload;
    uint64_t bytes;
  };

  explicit ExpertCache(uint64_t capacity) : capacity_(capacity) {}

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t pinnedBytes() const { return pinned_; }
  size_t size() const { return index_.size(); }

  /// The entry of `key`, or null. A hit makes it the most recently used.
  Entry *find(ExpertKey key);
  /// Inserts `key` (absent) of `bytes` bytes, the most recently used, after
  /// evicting the least recently used entries that are neither pinned nor
  /// locked until it fits, whose payloads are appended to `evicted`. Returns
  /// null, evicting nothing, when it cannot fit even then. The caller sets
  /// the payload.
  Entry *insert(ExpertKey key, uint64_t bytes, bool pinned,
                std::vector<Evicted> &evicted);
  /// Removes `entry` (one whose payload could not be filled); returns its
  /// payload.
  void *erase(Entry *entry);
  void lock(Entry *entry) { ++entry->locks; }
  void unlock(Entry *entry) { --entry->locks; }
  /// The keys from the most to the least recently used.
  std::vector<ExpertKey> order() const;

private:
  static uint64_t id(ExpertKey key) {
    return uint64_t{key.layer} << 32 | key.expert;
  }
  uint64_t capacity_;
  uint64_t used_ = 0;
  uint64_t pinned_ = 0;
  /// Most recently used first.
  std::list<Entry> lru_;
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
};

/// How the CPU store reads an expert from the plan file.
enum class ExpertReadMode {
  /// pread into an anonymous buffer (through the page cache).
  Pread,
  /// pread with O_DIRECT (bypassing the page cache), of the enclosing
  /// 4096-byte blocks.
  Direct,
  /// mmap of the expert's pages of the file (page cache pages, no copy).
  Mmap,
};

/// "pread", "direct", "mmap".
const char *expertReadModeName(ExpertReadMode mode);

/// Paging counters of one tiered layer, summed since the last reset.
struct LayerPaging {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytesRead = 0;
  /// Wall seconds of the reads (several experts in parallel), and of the
  /// whole acquisition (what the layer's compute waited for its weights).
  double readSeconds = 0;
  double waitSeconds = 0;
  /// Rounds: batches of experts a step computed between acquisitions (more
  /// than one per call when the missing experts exceed the free cache).
  uint64_t rounds = 0;
};

/// The CPU backend's expert weights of a tiered schedule: hot experts read
/// and pinned when the session starts, cold ones read on demand into the
/// rest of the cache, all through one ExpertCache.
class ExpertStore {
public:
  /// Tiers schedule `schedule` of `plan` for `budget` bytes (0: the plan's
  /// own) and reads its hot experts. Fails when the budget is too small, or
  /// a read or checksum fails.
  static absl::StatusOr<std::unique_ptr<ExpertStore>>
  create(const Plan::Impl &plan, const ScheduleInfo &schedule, int device,
         uint64_t budget, ExpertReadMode mode, ThreadPool &pool);
  ~ExpertStore();

  /// Makes experts of tiered layer `layer` present and locked: moves every
  /// one of `pending` that fits (hits first, then misses read in parallel
  /// on `pool`) into `batch`, at least one; their weights are then at
  /// pointers(). Fails with the step's label on a read or checksum error.
  absl::Status acquire(uint32_t layer, std::vector<uint32_t> &pending,
                       std::vector<uint32_t> &batch, ThreadPool &pool,
                       const std::string &label);
  /// Unlocks the experts acquire() put into `batch`.
  void release(uint32_t layer, const std::vector<uint32_t> &batch);
  /// Per expert of `layer`, the bytes of its paged step input `input` (the
  /// position among the step's inputs), null for one not present; null
  /// when the input is not paged.
  const uint8_t *const *pointers(uint32_t layer, int input) const;

  const TierInfo &tiers() const { return tiers_; }
  const std::vector<LayerPaging> &paging() const { return paging_; }
  void resetPaging();
  ExpertReadMode mode() const { return mode_; }
  uint64_t budget() const { return budget_; }
  const ExpertCache &cache() const { return cache_; }
  uint32_t hotExperts() const { return hotExperts_; }
  uint64_t hotBytes() const { return hotBytes_; }
  /// Reads up to `maxBytes` of the paged sections in `chunk`-byte pieces on
  /// `pool` (the same path as misses, without the cache) and returns the
  /// bytes per second: the file's read bandwidth as this store sees it
  /// (page cache when the file is cached, else the disk).
  absl::StatusOr<double> probeBandwidth(ThreadPool &pool, uint64_t maxBytes);

private:
  ExpertStore(const Plan::Impl &plan, const TierInfo &tiers,
              ExpertReadMode mode, uint64_t capacity);
  struct Payload;
  /// Allocates (or takes from `reuse`) and fills the payload of `entry`.
  absl::Status fill(ExpertCache::Entry &entry, Payload *payload);
  /// Fills every entry's payload in parallel on `pool`; the first error.
  absl::Status fillAll(const std::vector<ExpertCache::Entry *> &entries,
                       ThreadPool &pool);
  Payload *allocate(const TierLayerInfo &layer, void *reuse);
  void release(Payload *payload);
  uint64_t entryBytes(const TierLayerInfo &layer) const;
  void setPresent(ExpertKey key, Payload *payload);

  const Plan::Impl &plan_;
  const ScheduleInfo *schedule_ = nullptr;
  const TierInfo &tiers_;
  ExpertReadMode mode_;
  uint64_t budget_ = 0;
  ExpertCache cache_;
  uint32_t hotExperts_ = 0;
  uint64_t hotBytes_ = 0;
  /// O_DIRECT descriptor of the plan (Direct mode).
  int directFd_ = -1;
  /// Per layer: the payload of each expert (null when absent) and the
  /// pointer tables (per step input, per expert).
  std::vector<std::vector<Payload *>> present_;
  std::vector<std::vector<std::vector<const uint8_t *>>> pointers_;
  std::vector<LayerPaging> paging_;
  /// Per layer and expert: its checksums were checked (on its first read).
  std::vector<std::vector<char>> verified_;
};

/// The tiers of `schedule` (tiered) for `budget` bytes, 0 for the plan's
/// own (Plan::expertTiers).
absl::StatusOr<ExpertTiersDesc> describeTiers(const Plan::Impl &plan,
                                              const ScheduleInfo &schedule,
                                              uint64_t budget);

/// Parses "pread", "direct", "mmap".
absl::StatusOr<ExpertReadMode> parseExpertReadMode(absl::string_view text);

} // namespace moert::detail

#endif // MOERT_SRC_EXPERT_CACHE_H
