//===- expert_store.h - Bounded caches of paged expert weights --*- C++ -*-===//
//
// Tiered plans (docs/tiered-experts.md) keep the cold experts' weights in the
// plan file and read them when a layer's routing selects them. ExpertStore
// is the CPU backend's store, over host buffers filled from the plan file
// (pread, O_DIRECT or mmap), with per-layer paging counters, its entries
// kept by an ExpertCache (tiers/expert_cache.h); the Experts kernel obtains
// every paged expert's weights through it.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_TIERS_EXPERT_STORE_H
#define MOERT_SRC_TIERS_EXPERT_STORE_H

#include "exec/expert_weights.h"
#include "exec/tensor.h"
#include "exec/thread_pool.h"
#include "loader/plan_impl.h"
#include "tiers/expert_cache.h"

#include "absl/status/status.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace moert::detail {

/// How the CPU store reads an expert from the plan file.
enum class ExpertReadMode {
  /// pread into an anonymous buffer (through the page cache).
  Pread,
  /// pread with O_DIRECT (bypassing the page cache), of the enclosing
  /// 4096-byte blocks.
  Direct,
  /// mmap of the expert's pages of the file (page cache pages, no copy).
  Mmap,
  /// Direct when the cold experts and the budget do not fit in the memory
  /// the process may use (chooseExpertReadMode), else Pread; chosen when
  /// the store is created.
  Auto,
};

/// "pread", "direct", "mmap", "auto".
const char *expertReadModeName(ExpertReadMode mode);
/// Auto's choice: Direct when `coldBytes` (the experts read on demand) plus
/// `budget` (the store's own memory) exceed `available` (the memory the
/// process may use: the page cache could not keep the cold experts, and
/// buffered reads would copy each one and reclaim the page cache for it,
/// bench/README.md "A larger-than-RAM model"), else Pread.
ExpertReadMode chooseExpertReadMode(uint64_t coldBytes, uint64_t budget,
                                    uint64_t available);

/// Paging counters of one tiered layer, summed since the last reset.
using LayerPaging = ExpertCacheCounters;

/// Whether a tiered session reads experts ahead of the step that needs them:
/// the schema's policy (plan.fbs TierPrefetch), which a plan records as its
/// sessions' default.
/// * NextLayer: while layer L computes, read the experts layer L+1's router
///   picks for layer L's router input (pre-gating): a prediction that only
///   chooses what to read; the real routing still decides what runs.
/// * NextMicroBatch: before a tiered layer's micro-batch computes, read the
///   experts the layer's next micro-batch routes to (known exactly once that
///   micro-batch's expert offsets are computed, in an expert-parallel plan
///   after its count exchange): no prediction.
using ExpertPrefetch = fb::TierPrefetch;

/// "none", "next-layer", "next-micro-batch".
const char *expertPrefetchName(ExpertPrefetch prefetch);
/// Parses "none", "next-layer", "next-micro-batch"; "" is `planDefault`.
absl::StatusOr<ExpertPrefetch>
parseExpertPrefetch(absl::string_view text,
                    ExpertPrefetch planDefault = ExpertPrefetch::None);

/// How a tiered session spends its experts' budget (SessionOptions::
/// expertCache, docs/tiered-experts.md): the plan's hot set (the experts of
/// lowest rank that leave the cold cache its least size) is read when the
/// session starts; a share `pinned` of it, lowest ranks first, stays
/// pinned, and the rest of the budget is a cache that evicts by `eviction`
/// (the least recently used, the least used by a decaying count, or
/// adaptive: as whichever of those two, or a slowly decaying count, has hit
/// most lately; ExpertCache::Eviction). The unpinned part of the hot set
/// starts in that cache, so it begins from the profile's guess and follows
/// the routing from there.
struct ExpertCachePolicy {
  /// 1: today's static tiers (every hot expert pinned); 0: none pinned.
  double pinned = 1;
  ExpertCache::Eviction eviction = ExpertCache::Eviction::Lru;
};

/// Parses "static", "lru[:F]", "lfu[:F]" or "adaptive[:F]" (F in [0, 1]:
/// the share of the hot set pinned, 0 when left out); "" is static.
absl::StatusOr<ExpertCachePolicy>
parseExpertCachePolicy(absl::string_view text);
/// "static", "lru", "lfu:0.5", "adaptive", ...
std::string expertCachePolicyName(const ExpertCachePolicy &policy);

/// The router of a tiered layer as pre-gating evaluates it: logits = x @ w
/// (a MatMul of the layer's tokens by a resident f32 [H, E] weight), or
/// alpha x @ w (w [H, E], or [E, H] transposed) + beta c (a Gemm, as
/// exporters write nn.Linear), then the Router step's top-k of its scores.
struct GateInfo {
  /// The MatMul's or Gemm's token input (also the Dispatch step's, so it
  /// stays live until the layer's experts run) and its weight.
  int32_t tokens = -1;
  const float *weight = nullptr;
  /// The weight is [E, H] (Gemm trans_b).
  bool transposed = false;
  float alpha = 1.0f;
  /// The Gemm's resident addend [E] (or one value broadcast) times beta;
  /// null when none.
  const float *addend = nullptr;
  int64_t addendSize = 0;
  float beta = 1.0f;
  int64_t hidden = 0;
  int64_t experts = 0;
  /// The Router step: after it runs, the next layer's experts are predicted.
  int router = -1;
  int64_t topK = 0;
  bool sigmoid = false;
  /// The Router's selection bias [E] (a resident weight), or null.
  const float *bias = nullptr;
};

/// The gate of each tiered layer of `schedule` (router < 0 when its router
/// is not of GateInfo's form: the layer is then neither predicted from nor
/// for).
std::vector<GateInfo> findGates(const ScheduleInfo &schedule);

/// Per tiered layer of `schedule` (whose gates are `gates`), the tiered
/// layer pre-gating reads ahead for while it computes: the next one in step
/// order when both routers are of GateInfo's form with the same hidden
/// size; -1 for none.
std::vector<int32_t> pregatingTargets(const ScheduleInfo &schedule,
                                      const std::vector<GateInfo> &gates);

/// Pre-gating: the experts `gate` selects for the `tokens` rows of `x`
/// [tokens, hidden] (at most `maxTokens` of them, evenly spaced), most
/// selected first, ties to the lower index; computed on `pool`.
std::vector<uint32_t> predictExperts(const GateInfo &gate, const float *x,
                                     int64_t tokens, int64_t maxTokens,
                                     ThreadPool &pool);

using Clock = std::chrono::steady_clock;

/// Seconds from `start` to now, for the store's paging statistics.
inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The CPU backend's expert weights of a tiered schedule: hot experts read
/// and pinned when the session starts, cold ones read on demand into the
/// rest of the cache, all through one ExpertCache. A store with cold experts
/// has reader threads (kReaders), which read a step's misses while the step
/// computes the experts it has, and the reads ahead.
class ExpertStore final : public ExpertWeights {
public:
  /// Reader threads of a store with cold experts: two keep a read in
  /// flight while the other checks what it read (bench/README.md, "A
  /// larger-than-RAM model").
  static constexpr int kReaders = 2;

  /// Tiers schedule `schedule` of `plan` for `budget` bytes (0: the plan's
  /// own) and reads its hot experts. Fails when the budget is too small, or
  /// a read or checksum fails.
  static absl::StatusOr<std::unique_ptr<ExpertStore>>
  create(const Plan::Impl &plan, const ScheduleInfo &schedule, int device,
         uint64_t budget, ExpertReadMode mode, ThreadPool &pool,
         ExpertPrefetch prefetch = ExpertPrefetch::None,
         ExpertCachePolicy policy = {});
  ~ExpertStore();

  /// Lets another schedule whose tiered layers page the same experts layer
  /// for layer (a generation plan's prefill, loader/tier_validation.cpp)
  /// use this store: one cache, one budget. Returns its view, the index
  /// beginRun and paging take; the creating schedule's is 0.
  absl::StatusOr<int> attach(const ScheduleInfo &schedule);
  /// Makes `view` the one whose steps run next: afterStep's step indices
  /// are its schedule's, and its paging counters count. Views take turns;
  /// they never run at once.
  void beginRun(int view);

  /// Called before step `step` of the running view's schedule runs: before
  /// a micro-batch's Experts step of a tiered layer, when the layer's next
  /// micro-batch's expert offsets are already computed, queues that
  /// micro-batch's experts to be read ahead once this step has its own
  /// (NextMicroBatch). Cheap for other steps.
  void beforeStep(int step, const Tensor *tensors);

  /// Called after step `step` of the running view's schedule ran, with the
  /// session's tensors: after a tiered layer's Router (its tokens still
  /// live), predicts the next tiered layer's experts; after its Experts
  /// step, reads them ahead if acquire has not started that yet. Cheap for
  /// other steps.
  void afterStep(int step, const Tensor *tensors, ThreadPool &pool);
  /// Drops reads ahead not yet started (a run ended or failed).
  void cancelPrefetch();
  ExpertPrefetch prefetch() const { return prefetch_; }
  /// How many of `schedule`'s tiered layers `prefetch` reads ahead.
  static uint32_t layersReadAhead(const ScheduleInfo &schedule,
                                  ExpertPrefetch prefetch);

  /// Makes experts of tiered layer `layer` present and locked: moves the
  /// ones of `pending` that are ready into `batch`, at least one; their
  /// weights are then at pointers(). The hits are returned at once, while
  /// the reader threads read the misses that fit (left in `pending`, locked,
  /// for the next calls, which look nothing up until they are all
  /// returned); without hits ready, the call waits for the first read. The
  /// cache sees the lookups, insertions and locks of one call that reads
  /// every miss before returning. Fails with the step's label on a read or
  /// checksum error.
  absl::Status acquire(uint32_t layer, std::vector<uint32_t> &pending,
                       std::vector<uint32_t> &batch, ThreadPool &pool,
                       const std::string &label) override;
  /// Unlocks the experts acquire() put into `batch`.
  void release(uint32_t layer, const std::vector<uint32_t> &batch) override;
  /// Per expert of `layer`, the bytes of its paged step input `input` (the
  /// position among the step's inputs), null for one not present; null
  /// when the input is not paged.
  const uint8_t *const *pointers(uint32_t layer, int input) const override;

  const TierInfo &tiers() const { return tiers_; }
  /// The paging counters of `view`'s runs, per tiered layer.
  const std::vector<LayerPaging> &paging(int view = 0) const {
    return views_[view].paging;
  }
  void resetPaging(int view = 0);
  ExpertReadMode mode() const { return mode_; }
  uint64_t budget() const { return budget_; }
  const ExpertCache &cache() const { return cache_; }
  /// The pinned experts (the hot set, or the policy's share of it).
  uint32_t hotExperts() const { return hotExperts_; }
  const ExpertCachePolicy &policy() const { return policy_; }
  uint64_t hotBytes() const { return hotBytes_; }
  /// Reads up to `maxBytes` of the paged sections in `chunk`-byte pieces on
  /// `pool` (the same path as misses, without the cache) and returns the
  /// bytes per second: the file's read bandwidth as this store sees it
  /// (page cache when the file is cached, else the disk).
  absl::StatusOr<double> probeBandwidth(ThreadPool &pool, uint64_t maxBytes);

private:
  ExpertStore(const Plan::Impl &plan, const TierInfo &tiers,
              ExpertReadMode mode, uint64_t capacity);
  /// The memory of one present expert: one anonymous buffer holding every
  /// paged input (Pread, Direct), or one file mapping per input (Mmap).
  struct Payload {
    uint8_t *buffer = nullptr;
    size_t bufferBytes = 0;
    std::vector<std::pair<void *, size_t>> maps;
    /// Per paged input of the layer, its bytes.
    std::vector<const uint8_t *> inputs;
    /// A running step's miss (or a read ahead it took over) that the readers
    /// read: its bytes count as paged in, the step's lock stays.
    bool demand = false;
    /// The entry holds the read ahead's lock until its read ends.
    bool ahead = false;
    /// The readers' read of a demand entry failed: the step reads it again.
    bool failed = false;
  };
  /// Fills the payload of `entry` (allocated, or taken from a reused one),
  /// its paged inputs one after another.
  absl::Status fill(ExpertCache::Entry &entry, Payload *payload);
  /// Sizes `payload`'s tables for `entry`'s inputs, before fillInput.
  void prepare(const ExpertCache::Entry &entry, Payload *payload) const;
  /// Reads paged input i of `entry`'s expert into its place in `payload`
  /// (and checks it on the expert's first read); inputs of one payload may
  /// be filled at once on different threads.
  absl::Status fillInput(const ExpertCache::Entry &entry, Payload *payload,
                         size_t i);
  /// Fills every entry's payload in parallel on `pool`; the first error.
  absl::Status fillAll(const std::vector<ExpertCache::Entry *> &entries,
                       ThreadPool &pool);
  Payload *allocate(const TierLayerInfo &layer, void *reuse);
  void release(Payload *payload);
  uint64_t entryBytes(const TierLayerInfo &layer) const;
  void setPresent(ExpertKey key, Payload *payload);
  /// Inserts `key` (cold, absent) for `layer`, frees or reuses what that
  /// evicted and allocates its payload; null when it does not fit (or the
  /// allocation fails: `allocFailed`). Under mutex_.
  ExpertCache::Entry *insertEntry(ExpertKey key, bool &allocFailed);
  /// Queues reads ahead of the predicted experts of layer predictedLayer_.
  /// Under mutex_.
  void issuePrefetch();
  /// Removes the queued (not started) reads ahead, except those of `keep`
  /// of layer `layer`. Under mutex_.
  void dropQueued(uint32_t layer, const std::vector<uint32_t> &keep);
  /// A reader thread: fills queued entries (misses of the running step
  /// first, then reads ahead) one at a time.
  void readLoop();
  /// Moves the experts of awaiting_ that are ready into `batch`, those
  /// whose entry is gone (a failed read ahead) into `left`, and those the
  /// readers failed to read into `retry` (to be read by the step, which
  /// reports the error). Under mutex_.
  void collectAwaiting(std::vector<uint32_t> &batch,
                       std::vector<uint32_t> &left,
                       std::vector<ExpertCache::Entry *> &retry);
  /// Gives up awaiting_ (a step failed): waits for reads in flight, drops
  /// queued ones and unlocks the rest. Under mutex_ (`lock`).
  void abandonAwaiting(std::unique_lock<std::mutex> &lock);

  /// One schedule using the store: its reads ahead (gates_ and the tables
  /// below, empty without prefetch) and paging counters.
  struct View {
    const ScheduleInfo *schedule = nullptr;
    std::vector<GateInfo> gates;
    /// Per step: the tiered layer whose Router it is, else -1; and per
    /// tiered layer, the next one in step order (-1: the last).
    std::vector<int32_t> routerLayer;
    std::vector<int32_t> nextLayer;
    /// NextMicroBatch: per step, where the next micro-batch of the tiered
    /// layer whose Experts step it is finds its rows per expert, computed
    /// before the step: its offsets [E + 1] (sources 0), or the [sources,
    /// E] row counts of the Regroup that makes them (an expert-parallel
    /// layer, after the count exchange); tensor -1 for none.
    struct RoutedRows {
      int32_t tensor = -1;
      int64_t sources = 0;
    };
    std::vector<RoutedRows> nextRows;
    std::vector<LayerPaging> paging;
  };
  /// Fills `view`'s prefetch tables for its schedule and `prefetch`; the
  /// number of layers that can be read ahead (0: none).
  static uint32_t planPrefetch(View &view, ExpertPrefetch prefetch);
  /// A read ahead waiting for the prefetch thread, and the view that issued
  /// it (whose counters it adds to).
  struct QueuedRead {
    ExpertKey key;
    int view = 0;
  };

  const Plan::Impl &plan_;
  const ScheduleInfo *schedule_ = nullptr;
  /// Guarded by mutex_ (the counters; the tables are set before any run).
  std::vector<View> views_;
  int view_ = 0;
  const TierInfo &tiers_;
  ExpertReadMode mode_;
  uint64_t budget_ = 0;
  ExpertCache cache_;
  uint32_t hotExperts_ = 0;
  uint64_t hotBytes_ = 0;
  ExpertCachePolicy policy_;
  /// O_DIRECT descriptor of the plan (Direct mode).
  int directFd_ = -1;
  /// Per layer: the payload of each expert (null when absent) and the
  /// pointer tables (per step input, per expert).
  std::vector<std::vector<Payload *>> present_;
  std::vector<std::vector<std::vector<const uint8_t *>>> pointers_;
  /// Per layer and expert: its checksums were checked (on its first read).
  std::vector<std::vector<char>> verified_;

  // Reads by the reader threads. mutex_ guards cache_, present_/pointers_
  // updates, paging_ and the queue: the readers fill entries while steps
  // compute.
  ExpertPrefetch prefetch_ = ExpertPrefetch::None;
  /// The prediction waiting to be read ahead: for layer predictedLayer_
  /// (-1: none), issued once layer issueAfter_ has its experts.
  int32_t predictedLayer_ = -1;
  int32_t issueAfter_ = -1;
  std::vector<uint32_t> predicted_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<QueuedRead> queue_;
  /// Entries the readers are filling now.
  int loading_ = 0;
  /// The running step's misses the readers fill now, and since when one
  /// has been in flight (their wall time is the layer's read time).
  int demandLoading_ = 0;
  std::chrono::steady_clock::time_point demandSince_;
  /// The running step's experts that an earlier acquire call looked up and
  /// locked and did not return yet: misses (and reads ahead taken over)
  /// that the readers read, and reads ahead in flight.
  std::vector<ExpertKey> awaiting_;
  bool stop_ = false;
  std::vector<std::thread> readers_;
};

/// Checks expert e's bytes `data` of paged input i of `layer` (a tiered
/// layer of `schedule`) against its stored CRC-32; the error names the
/// step, the tensor and the file bytes.
absl::Status checkExpertBytes(const Plan::Impl &plan,
                              const ScheduleInfo &schedule,
                              const TierLayerInfo &layer, uint32_t e, size_t i,
                              const uint8_t *data);

/// The tiers of `schedule` (tiered) for `budget` bytes, 0 for the plan's
/// own (Plan::expertTiers). With `layersAhead` > 0 (prefetch) the cold
/// cache keeps room for that many more layers' least cache, the plan's ranks
/// re-tiered for its budget when `budget` is 0.
absl::StatusOr<ExpertTiersDesc> describeTiers(const Plan::Impl &plan,
                                              const ScheduleInfo &schedule,
                                              uint64_t budget,
                                              uint32_t layersAhead = 0);

/// Parses "pread", "direct", "mmap", "auto".
absl::StatusOr<ExpertReadMode> parseExpertReadMode(absl::string_view text);

} // namespace moert::detail

#endif // MOERT_SRC_TIERS_EXPERT_STORE_H
