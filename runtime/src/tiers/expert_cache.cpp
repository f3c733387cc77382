//===- expert_cache.cpp - The bookkeeping of a bounded expert cache -------===//

#include "tiers/expert_cache.h"

#include <cmath>
#include <iterator>

namespace moert::detail {

void ExpertCache::setEviction(Eviction eviction, double halfLife,
                              uint64_t window) {
  eviction_ = eviction;
  scores_[0].halfLife = halfLife > 0 ? halfLife : 1;
  scores_[1].halfLife = kSlowHalfLives * scores_[0].halfLife;
  window_ = window > 0 ? window : 1;
  for (int i = 0; i < 2; ++i)
    shadowLfu_[i].scores = &scores_[i];
}

double ExpertCache::Scores::operator()(uint64_t key) const {
  auto it = of.find(key);
  return it == of.end() ? 0.0 : it->second;
}

void ExpertCache::use(Scores &scores, LfuShadow &shadow, uint64_t key) {
  if ((static_cast<double>(clock_) - scores.base) / scores.halfLife >
      kRescale) {
    // Multiplying by a power of two keeps every score's order (and is
    // exact down to the subnormals), as the replay does.
    constexpr double kScale = 0x1p-256;
    static_assert(kRescale == 256);
    for (auto &[k, s] : scores.of)
      s *= kScale;
    scores.base += kRescale * scores.halfLife;
    std::set<LfuShadow::Place> rescaled;
    for (auto &[k, member] : shadow.members) {
      std::get<0>(member.place) = scores(k);
      rescaled.insert(member.place);
    }
    shadow.order = std::move(rescaled);
  }
  scores.of[key] +=
      std::exp2((static_cast<double>(clock_) - scores.base) / scores.halfLife);
}

ExpertCache::Entry *ExpertCache::find(ExpertKey key, uint64_t bytes) {
  uint64_t k = id(key);
  ++clock_;
  if (eviction_ != Eviction::Lru)
    use(scores_[0], shadowLfu_[0], k);
  if (eviction_ == Eviction::Adaptive)
    use(scores_[1], shadowLfu_[1], k);
  auto it = index_.find(k);
  bool pinned = it != index_.end() && it->second->pinned;
  if (eviction_ == Eviction::Adaptive && !pinned)
    shadowLookup(k, bytes);
  if (it == index_.end())
    return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return &*it->second;
}

void ExpertCache::shadowLookup(uint64_t key, uint64_t bytes) {
  Lookup lookup{key, bytes, clock_, {}};
  auto inLru = shadowLruIndex_.find(key);
  lookup.hit[0] = inLru != shadowLruIndex_.end();
  if (lookup.hit[0])
    shadowLru_.splice(shadowLru_.begin(), shadowLru_, inLru->second);
  for (int i = 0; i < 2; ++i) {
    LfuShadow &shadow = shadowLfu_[i];
    auto member = shadow.members.find(key);
    lookup.hit[1 + i] = member != shadow.members.end();
    if (lookup.hit[1 + i]) {
      shadow.order.erase(member->second.place);
      member->second.place = {(*shadow.scores)(key), clock_, key};
      shadow.order.insert(member->second.place);
    }
  }
  for (int i = 0; i < 3; ++i)
    merit_[i] += (int64_t{lookup.hit[i]} << 16) -
                 merit_[i] / static_cast<int64_t>(window_);
  group_.push_back(lookup);
}

void ExpertCache::shadowInsert(LfuShadow &shadow, uint64_t key, uint64_t bytes,
                               uint64_t at, uint64_t room) {
  for (auto it = shadow.order.begin();
       shadow.bytes + bytes > room && it != shadow.order.end();) {
    uint64_t victim = std::get<2>(*it);
    bool inGroup = false;
    for (const Lookup &l : group_)
      inGroup = inGroup || l.key == victim;
    if (inGroup) {
      ++it;
      continue;
    }
    shadow.bytes -= shadow.members[victim].bytes;
    shadow.members.erase(victim);
    it = shadow.order.erase(it);
  }
  if (shadow.bytes + bytes <= room) {
    LfuShadow::Place place{(*shadow.scores)(key), at, key};
    shadow.order.insert(place);
    shadow.members[key] = {place, bytes};
    shadow.bytes += bytes;
  }
}

void ExpertCache::endLookups() {
  if (group_.empty())
    return;
  auto inGroup = [&](uint64_t key) {
    for (const Lookup &l : group_)
      if (l.key == key)
        return true;
    return false;
  };
  uint64_t room = capacity_ - pinned_;
  for (const Lookup &l : group_) {
    if (!l.hit[0]) {
      // Evict the least recent keys not of this group until it fits.
      auto it = shadowLru_.end();
      while (shadowLruBytes_ + l.bytes > room && it != shadowLru_.begin()) {
        --it;
        if (inGroup(it->key))
          continue;
        shadowLruBytes_ -= it->bytes;
        shadowLruIndex_.erase(it->key);
        it = shadowLru_.erase(it);
      }
      if (shadowLruBytes_ + l.bytes <= room) {
        shadowLru_.push_front({l.key, l.bytes});
        shadowLruIndex_[l.key] = shadowLru_.begin();
        shadowLruBytes_ += l.bytes;
      }
    }
    for (int i = 0; i < 2; ++i)
      if (!l.hit[1 + i])
        shadowInsert(shadowLfu_[i], l.key, l.bytes, l.at, room);
  }
  group_.clear();
}

ExpertCache::Leader ExpertCache::leader() const {
  if (eviction_ == Eviction::Adaptive) {
    int best = 0;
    for (int i = 1; i < 3; ++i)
      if (merit_[i] > merit_[best])
        best = i;
    return static_cast<Leader>(best);
  }
  return eviction_ == Eviction::Lfu ? Leader::Lfu : Leader::Lru;
}

ExpertCache::Entry *ExpertCache::peek(ExpertKey key) {
  auto it = index_.find(id(key));
  return it == index_.end() ? nullptr : &*it->second;
}

std::list<ExpertCache::Entry>::iterator
ExpertCache::leastScored(const Scores &scores) {
  // A scan per eviction: each eviction makes room for a read of megabytes,
  // beside which the scan is nothing.
  auto victim = lru_.end();
  double least = 0;
  for (auto it = std::prev(lru_.end());; --it) {
    if (!it->pinned && !it->locks) {
      double s = scores(id(it->key));
      if (victim == lru_.end() || s < least) {
        victim = it;
        least = s;
      }
    }
    if (it == lru_.begin())
      break;
  }
  return victim;
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
  auto evict = [&](std::list<Entry>::iterator it) {
    evicted.push_back({it->key, it->payload, it->bytes});
    used_ -= it->bytes;
    index_.erase(id(it->key));
    return lru_.erase(it);
  };
  Leader lead = leader();
  if (lead != Leader::Lru) {
    // The least scored evictable entry, one at a time.
    const Scores &scores = scores_[lead == Leader::Lfu ? 0 : 1];
    while (used_ + bytes > capacity_)
      evict(leastScored(scores));
  } else {
    for (auto it = lru_.end(); used_ + bytes > capacity_;) {
      --it;
      if (it->pinned || it->locks)
        continue;
      it = evict(it);
    }
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

std::vector<ExpertKey> ExpertCache::lruShadow() const {
  std::vector<ExpertKey> keys;
  for (const ShadowKey &k : shadowLru_)
    keys.push_back(keyOf(k.key));
  return keys;
}

std::vector<ExpertKey> ExpertCache::lfuShadow(bool slow) const {
  std::vector<ExpertKey> keys;
  for (const LfuShadow::Place &place : shadowLfu_[slow ? 1 : 0].order)
    keys.push_back(keyOf(std::get<2>(place)));
  return keys;
}

} // namespace moert::detail
