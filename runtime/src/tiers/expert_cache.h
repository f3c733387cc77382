//===- expert_cache.h - Bookkeeping of a bounded expert cache -*- C++ -*-===//
//
// ExpertCache: what every backend's expert store shares (the CPU store's
// host buffers, the CUDA backend's device copies): which experts are
// present, their recency order, which are pinned (the hot set) or locked
// (read by the running step), and the bytes they hold, never above the
// capacity; and which unpinned entry an insertion evicts: the least
// recently used, the least used by a decaying count, or (adaptive) the
// victim of whichever of those, or of a slowly decaying count, its shadow
// directories show hitting most lately (docs/tiered-experts.md, "The cache's
// policy"; bench/expert_cache_replay.py replays it exactly). It holds no
// memory: each entry carries the backend's payload.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_TIERS_EXPERT_CACHE_H
#define MOERT_SRC_TIERS_EXPERT_CACHE_H

#include <cstddef>
#include <cstdint>
#include <list>
#include <set>
#include <tuple>
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
    /// Locked entries (read by the running step, or queued or being filled
    /// by a prefetch) are never evicted.
    int locks = 0;
    /// Whether the payload holds the expert (Ready), or a prefetch reserved
    /// the entry and is yet to fill it (Queued) or filling it (Loading). A
    /// prefetch holds one lock until the entry is Ready.
    enum class State : uint8_t { Ready, Queued, Loading };
    State state = State::Ready;
    /// Inserted by a prefetch and not yet used by a step.
    bool prefetched = false;
  };
  /// What an insertion evicted: the backend frees (or reuses) each payload.
  struct Evicted {
    ExpertKey key;
    void *payload;
    uint64_t bytes;
  };
  /// Which unpinned, unlocked entry an insertion evicts.
  enum class Eviction : uint8_t {
    /// The least recently used (found or inserted).
    Lru,
    /// The least used: each lookup of a key by find() adds 2^(t / halfLife)
    /// to its score (t the lookup's number; kept for absent keys too), so
    /// that uses weigh 2^(-age / halfLife); ties: the least recently used.
    /// An expert used steadily stays while a burst of others passes.
    Lfu,
    /// The victim of Lru, of Lfu, or of a slow Lfu (a half-life
    /// kSlowHalfLives times longer, which keeps what a stable routing uses
    /// most, as a static rank would), whichever policy has hit most over
    /// about the last `window` lookups: three shadow directories (keys and
    /// sizes, no payloads) of the unpinned capacity replay every lookup of
    /// an unpinned key, each as one of the three, and count their hits (a
    /// moving average, in fixed point: 1 << 16 a hit).
    Adaptive,
  };

  explicit ExpertCache(uint64_t capacity) : capacity_(capacity) {}

  /// Sets the eviction policy (before any lookup); `halfLife` and `window`
  /// are counted in lookups (> 0 for the policies that use them).
  void setEviction(Eviction eviction, double halfLife = 0, uint64_t window = 0);
  Eviction eviction() const { return eviction_; }

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t pinnedBytes() const { return pinned_; }
  size_t size() const { return index_.size(); }

  /// The entry of `key`, or null. A hit makes it the most recently used;
  /// the lookup counts as a use of `key` (Lfu, Adaptive), hit or not.
  /// `bytes`: the expert's size, which the adaptive policy's shadows count.
  Entry *find(ExpertKey key, uint64_t bytes = 0);
  /// Ends a group of lookups (one step's selection of one layer, whose hits
  /// the caller locks before it inserts the misses): the adaptive policy's
  /// shadows insert the group's misses, evicting the group's keys last.
  /// Other policies need no call.
  void endLookups();
  /// The entry of `key`, or null, leaving the order as it is.
  Entry *peek(ExpertKey key);
  /// Inserts `key` (absent) of `bytes` bytes, the most recently used, after
  /// evicting the entries that are neither pinned nor locked, the policy's
  /// victims first, until it fits; their payloads are appended to
  /// `evicted`. Returns null, evicting nothing, when it cannot fit even
  /// then. The caller sets the payload.
  Entry *insert(ExpertKey key, uint64_t bytes, bool pinned,
                std::vector<Evicted> &evicted);
  /// Removes `entry` (one whose payload could not be filled); returns its
  /// payload.
  void *erase(Entry *entry);
  void lock(Entry *entry) { ++entry->locks; }
  void unlock(Entry *entry) { --entry->locks; }
  /// The keys from the most to the least recently used.
  std::vector<ExpertKey> order() const;
  /// Whose victims an insertion evicts now: Lru, Lfu, or (Adaptive, when
  /// its shadow hit most lately) the slow LFU.
  enum class Leader : uint8_t { Lru, Lfu, SlowLfu };
  Leader leader() const;
  /// Adaptive: each shadow's hit average (1 << 16 a hit).
  int64_t merit(Leader shadow) const {
    return merit_[static_cast<int>(shadow)];
  }
  /// Adaptive: the keys in the LRU shadow, the most recently used first,
  /// and in an LFU shadow (`slow`: the slow LFU's), the least scored first.
  std::vector<ExpertKey> lruShadow() const;
  std::vector<ExpertKey> lfuShadow(bool slow = false) const;

  /// Scores are multiplied by 2^-kRescale once a use would weigh more than
  /// 2^kRescale.
  static constexpr int kRescale = 256;
  /// The slow LFU's half-life over the LFU's.
  static constexpr int kSlowHalfLives = 32;

private:
  static uint64_t id(ExpertKey key) {
    return uint64_t{key.layer} << 32 | key.expert;
  }
  static ExpertKey keyOf(uint64_t id) {
    return {static_cast<uint32_t>(id >> 32), static_cast<uint32_t>(id)};
  }
  /// Decayed use scores of every key looked up: a lookup at clock c adds
  /// 2^((c - base) / halfLife).
  struct Scores {
    double halfLife = 1;
    double base = 0;
    std::unordered_map<uint64_t, double> of;
    double operator()(uint64_t key) const;
  };
  /// An LFU shadow: its keys by (score, lookup of the last use, key), and
  /// each key's place and size.
  struct LfuShadow {
    using Place = std::tuple<double, uint64_t, uint64_t>;
    struct Member {
      Place place;
      uint64_t bytes;
    };
    const Scores *scores = nullptr;
    std::set<Place> order;
    std::unordered_map<uint64_t, Member> members;
    uint64_t bytes = 0;
  };
  /// Adds lookup clock_'s use of `key` to `scores` (rescaling it and the
  /// shadow `shadow` first when due).
  void use(Scores &scores, LfuShadow &shadow, uint64_t key);
  /// Counts `key`'s lookup in the shadows; its misses wait for endLookups.
  void shadowLookup(uint64_t key, uint64_t bytes);
  /// Inserts the group's miss `key` into `shadow`, evicting its least
  /// scored keys not of the group until it fits.
  void shadowInsert(LfuShadow &shadow, uint64_t key, uint64_t bytes,
                    uint64_t at, uint64_t room);
  /// The evictable entry of least score (ties: the least recently used).
  std::list<Entry>::iterator leastScored(const Scores &scores);

  uint64_t capacity_;
  uint64_t used_ = 0;
  uint64_t pinned_ = 0;
  Eviction eviction_ = Eviction::Lru;
  uint64_t window_ = 1;
  /// Lookups so far.
  uint64_t clock_ = 0;
  /// The LFU's and the slow LFU's (Adaptive) scores.
  Scores scores_[2];
  /// Most recently used first.
  std::list<Entry> lru_;
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;

  // Adaptive: the shadows. The LRU one most recent first, with each key's
  // place; the LFU and slow LFU ones.
  struct ShadowKey {
    uint64_t key;
    uint64_t bytes;
  };
  std::list<ShadowKey> shadowLru_;
  std::unordered_map<uint64_t, std::list<ShadowKey>::iterator> shadowLruIndex_;
  uint64_t shadowLruBytes_ = 0;
  LfuShadow shadowLfu_[2];
  /// Hit averages: LRU, LFU, slow LFU.
  int64_t merit_[3] = {0, 0, 0};
  /// The lookups since the last endLookups: key, size, lookup number and
  /// whether each shadow hit.
  struct Lookup {
    uint64_t key;
    uint64_t bytes;
    uint64_t at;
    bool hit[3];
  };
  std::vector<Lookup> group_;
};

} // namespace moert::detail

#endif // MOERT_SRC_TIERS_EXPERT_CACHE_H
