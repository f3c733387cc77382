//===- expert_cache_test.cpp - The expert cache's eviction policies -------===//
//
// The adaptive policy (ExpertCache::Eviction::Adaptive): it evicts as an LFU
// where frequency pays, as an LRU where recency does and as a slow LFU where
// only long counts see what is used steadily, learning which from its
// shadow directories; the shadows keep a group's keys; under every policy
// pinned and locked entries stay and the capacity holds.
// bench/expert_cache_replay.py mirrors this cache; test/E2E/
// tiered-cache-replay.test checks that both count the same hits.
//
//===----------------------------------------------------------------------===//

#include "tiers/expert_cache.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <random>

namespace moert::testing {
namespace {

using detail::ExpertCache;
using detail::ExpertKey;
using Eviction = ExpertCache::Eviction;
using Leader = ExpertCache::Leader;

constexpr uint64_t kBytes = 100;

std::vector<uint32_t> experts(const std::vector<ExpertKey> &keys) {
  std::vector<uint32_t> out;
  for (const ExpertKey &key : keys)
    out.push_back(key.expert);
  return out;
}

/// One step of layer 0 as the expert store makes it: every expert looked
/// up, the hits locked, the misses inserted (locked too), then all
/// unlocked. Returns the hits; appends what was evicted to `evicted`.
int step(ExpertCache &cache, const std::vector<uint32_t> &chosen,
         std::vector<uint32_t> *evicted = nullptr) {
  std::vector<ExpertCache::Entry *> held;
  std::vector<uint32_t> misses;
  int hits = 0;
  for (uint32_t e : chosen) {
    if (ExpertCache::Entry *entry = cache.find({0, e}, kBytes)) {
      cache.lock(entry);
      held.push_back(entry);
      ++hits;
    } else {
      misses.push_back(e);
    }
  }
  cache.endLookups();
  for (uint32_t e : misses) {
    std::vector<ExpertCache::Evicted> gone;
    ExpertCache::Entry *entry = cache.insert({0, e}, kBytes, false, gone);
    EXPECT_NE(entry, nullptr) << "expert " << e;
    if (!entry)
      continue;
    cache.lock(entry);
    held.push_back(entry);
    for (const ExpertCache::Evicted &g : gone)
      if (evicted)
        evicted->push_back(g.key.expert);
  }
  for (ExpertCache::Entry *entry : held)
    cache.unlock(entry);
  return hits;
}

/// Expert 0 returns after three others, each new: farther back than an LRU
/// of three remembers, but the most used. Returns the hits of the last
/// `measured` returns.
int returnsOfAFrequentExpert(ExpertCache &cache, int rounds, int measured) {
  int hits = 0;
  uint32_t fresh = 100;
  for (int r = 0; r < rounds; ++r) {
    int h = step(cache, {0});
    if (r >= rounds - measured)
      hits += h;
    for (int i = 0; i < 3; ++i)
      step(cache, {fresh++});
  }
  return hits;
}

TEST(AdaptiveCache, EvictsAsAnLfuWhereFrequencyPays) {
  ExpertCache lru(3 * kBytes), lfu(3 * kBytes), adaptive(3 * kBytes);
  lfu.setEviction(Eviction::Lfu, 1000);
  adaptive.setEviction(Eviction::Adaptive, 1000, 8);
  EXPECT_EQ(adaptive.leader(), Leader::Lru); // No evidence yet.
  EXPECT_EQ(returnsOfAFrequentExpert(lru, 20, 10), 0);
  EXPECT_EQ(returnsOfAFrequentExpert(lfu, 20, 10), 10);
  EXPECT_EQ(returnsOfAFrequentExpert(adaptive, 20, 10), 10);
  // Both LFU shadows keep expert 0: the first of them leads.
  EXPECT_EQ(adaptive.leader(), Leader::Lfu);
  EXPECT_GT(adaptive.merit(Leader::Lfu), adaptive.merit(Leader::Lru));
}

/// Experts 1 and 2 used 50 times each, then 3, 4, 5 in turn: a working set
/// that moved. Returns the hits of the last `measured` turns.
int aMovedWorkingSet(ExpertCache &cache, int turns, int measured) {
  for (int i = 0; i < 50; ++i) {
    step(cache, {1});
    step(cache, {2});
  }
  int hits = 0;
  for (int t = 0; t < turns; ++t)
    for (uint32_t e : {3u, 4u, 5u}) {
      int h = step(cache, {e});
      if (t >= turns - measured)
        hits += h;
    }
  return hits;
}

TEST(AdaptiveCache, EvictsAsAnLruWhereRecencyPays) {
  ExpertCache lru(3 * kBytes), lfu(3 * kBytes), adaptive(3 * kBytes);
  lfu.setEviction(Eviction::Lfu, 1000);
  adaptive.setEviction(Eviction::Adaptive, 1000, 8);
  EXPECT_EQ(aMovedWorkingSet(lru, 20, 10), 30);
  EXPECT_EQ(aMovedWorkingSet(lfu, 20, 10), 0);
  EXPECT_EQ(aMovedWorkingSet(adaptive, 20, 10), 30);
  EXPECT_EQ(adaptive.leader(), Leader::Lru);
  EXPECT_GT(adaptive.merit(Leader::Lru), adaptive.merit(Leader::Lfu));
  EXPECT_GT(adaptive.merit(Leader::Lru), adaptive.merit(Leader::SlowLfu));
}

TEST(AdaptiveCache, KeepsWhatIsUsedSteadilyWithTheSlowLfu) {
  // A half-life of one lookup: the LFU forgets expert 0 within the four
  // others between its returns, as an LRU does; the slow LFU (32 lookups)
  // keeps it.
  ExpertCache lfu(3 * kBytes), adaptive(3 * kBytes);
  lfu.setEviction(Eviction::Lfu, 1);
  adaptive.setEviction(Eviction::Adaptive, 1, 8);
  auto rounds = [](ExpertCache &cache) {
    int hits = 0;
    uint32_t fresh = 100;
    for (int r = 0; r < 30; ++r) {
      int h = step(cache, {0});
      if (r >= 20)
        hits += h;
      for (int i = 0; i < 4; ++i)
        step(cache, {fresh++});
    }
    return hits;
  };
  EXPECT_EQ(rounds(lfu), 0);
  EXPECT_EQ(rounds(adaptive), 10);
  EXPECT_EQ(adaptive.leader(), Leader::SlowLfu);
  EXPECT_EQ(experts(adaptive.lfuShadow(/*slow=*/true)).back(), 0u);
}

TEST(AdaptiveCache, LearnsAgainWhenTheRoutingChanges) {
  // A half-life of 64 lookups: the old working set's counts fade.
  ExpertCache adaptive(3 * kBytes);
  adaptive.setEviction(Eviction::Adaptive, 64, 8);
  EXPECT_EQ(aMovedWorkingSet(adaptive, 20, 10), 30);
  EXPECT_EQ(adaptive.leader(), Leader::Lru);
  // Expert 0 now returns every fourth step: the LFU's victims again.
  EXPECT_EQ(returnsOfAFrequentExpert(adaptive, 40, 10), 10);
  EXPECT_EQ(adaptive.leader(), Leader::Lfu);
}

TEST(AdaptiveCache, ShadowsFollowTheirPoliciesAndKeepAGroupsKeys) {
  ExpertCache cache(2 * kBytes);
  cache.setEviction(Eviction::Adaptive, 1000, 8);
  // Shadows of two experts' room: the LRU one keeps the last two, the LFU
  // one the most used (ties: the last used).
  for (uint32_t e : {1u, 1u, 1u, 2u, 3u})
    step(cache, {e});
  EXPECT_EQ(experts(cache.lruShadow()), (std::vector<uint32_t>{3, 2}));
  EXPECT_EQ(experts(cache.lfuShadow()), (std::vector<uint32_t>{3, 1}));
  step(cache, {7, 8});
  EXPECT_EQ(experts(cache.lruShadow()), (std::vector<uint32_t>{8, 7}));
  // A group of three in a room of two: the third does not fit, and the
  // first two are not evicted for it.
  cache.find({0, 9}, kBytes);
  cache.find({0, 10}, kBytes);
  cache.find({0, 11}, kBytes);
  cache.endLookups();
  EXPECT_EQ(experts(cache.lruShadow()), (std::vector<uint32_t>{10, 9}));
  EXPECT_EQ(cache.lfuShadow().size(), 2u);
  // Pinned experts are not the shadows' business.
  ExpertCache pinned(3 * kBytes);
  pinned.setEviction(Eviction::Adaptive, 1000, 8);
  std::vector<ExpertCache::Evicted> none;
  ASSERT_NE(pinned.insert({0, 42}, kBytes, true, none), nullptr);
  step(pinned, {42});
  step(pinned, {1});
  EXPECT_EQ(experts(pinned.lruShadow()), (std::vector<uint32_t>{1}));
}

TEST(AdaptiveCache, WithLruLeadingEvictsTheLeastRecentlyUsed) {
  ExpertCache cache(3 * kBytes);
  cache.setEviction(Eviction::Adaptive, 1000, 8);
  for (uint32_t e : {0u, 0u, 0u, 1u, 2u})
    step(cache, {e});
  ASSERT_EQ(cache.leader(), Leader::Lru);
  std::vector<uint32_t> evicted;
  step(cache, {3}, &evicted);
  EXPECT_EQ(evicted, (std::vector<uint32_t>{0})); // An LFU would take 1.
}

/// Random steps of one to three experts of 3 layers under `eviction`, a
/// few of them pinned, sizes of 50 to 249 bytes: the capacity is never
/// exceeded, pinned experts stay, and no step evicts its own experts.
void randomTraffic(Eviction eviction) {
  std::mt19937 rng(11);
  ExpertCache cache(1000);
  cache.setEviction(eviction, 64, 16);
  std::vector<ExpertCache::Evicted> evicted;
  std::vector<uint64_t> bytes(3 * 40);
  for (uint64_t &b : bytes)
    b = 50 + rng() % 200;
  auto size = [&](ExpertKey k) { return bytes[k.layer * 40 + k.expert]; };
  std::vector<ExpertKey> pinned = {{0, 0}, {2, 5}};
  for (ExpertKey k : pinned)
    ASSERT_NE(cache.insert(k, size(k), true, evicted), nullptr);
  for (int s = 0; s < 3000; ++s) {
    uint32_t layer = rng() % 3;
    std::vector<ExpertKey> chosen;
    for (uint32_t n = 1 + rng() % 3; chosen.size() < n;) {
      ExpertKey k{layer, static_cast<uint32_t>(rng() % 12)};
      if (std::find(chosen.begin(), chosen.end(), k) == chosen.end())
        chosen.push_back(k);
    }
    std::vector<ExpertCache::Entry *> held;
    std::vector<ExpertKey> misses;
    for (ExpertKey k : chosen)
      if (ExpertCache::Entry *entry = cache.find(k, size(k))) {
        cache.lock(entry);
        held.push_back(entry);
      } else {
        misses.push_back(k);
      }
    cache.endLookups();
    for (ExpertKey k : misses) {
      evicted.clear();
      ExpertCache::Entry *entry = cache.insert(k, size(k), false, evicted);
      ASSERT_LE(cache.used(), cache.capacity());
      for (const ExpertCache::Evicted &gone : evicted)
        for (ExpertCache::Entry *h : held)
          ASSERT_FALSE(gone.key == h->key) << "evicted a locked expert";
      if (entry) {
        cache.lock(entry);
        held.push_back(entry);
      }
    }
    for (ExpertCache::Entry *h : held)
      cache.unlock(h);
    for (ExpertKey k : pinned)
      ASSERT_NE(cache.peek(k), nullptr);
  }
  EXPECT_EQ(cache.pinnedBytes(), size(pinned[0]) + size(pinned[1]));
}

TEST(AdaptiveCache, NeverEvictsPinnedOrLockedEntriesNorExceedsTheCapacity) {
  for (Eviction eviction : {Eviction::Lru, Eviction::Lfu, Eviction::Adaptive})
    randomTraffic(eviction);
}

TEST(AdaptiveCache, ScoresRescaleWithoutChangingTheOrder) {
  // A half-life of one lookup: a use weighs twice the last one's, so the
  // scores pass 2^256 and are rescaled every 256 lookups; the LFU then
  // keeps the most recently used, as an LRU would.
  ExpertCache lfu(2 * kBytes), lru(2 * kBytes);
  lfu.setEviction(Eviction::Lfu, 1);
  std::mt19937 rng(5);
  for (int s = 0; s < 2000; ++s) {
    std::vector<uint32_t> a, b;
    uint32_t e = rng() % 5;
    step(lfu, {e}, &a);
    step(lru, {e}, &b);
    ASSERT_EQ(a, b) << "step " << s;
  }
  EXPECT_EQ(experts(lfu.order()), experts(lru.order()));
}

} // namespace
} // namespace moert::testing
