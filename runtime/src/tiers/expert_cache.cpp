//===- expert_cache.cpp - The bookkeeping of a bounded expert cache -------===//

#include "tiers/expert_cache.h"

#include <cmath>
#include <iterator>

namespace moert::detail {

void ExpertCache::setEviction(Eviction eviction, double halfLife,
                              uint64_t window) {
  eviction_ = eviction;
  halfLife_ = halfLife > 0 ? halfLife : 1;
  window_ = window > 0 ? window : 1;
}

double ExpertCache::score(uint64_t key) const {
  auto it = scores_.find(key);
  return it == scores_.end() ? 0.0 : it->second;
}

void ExpertCache::use(uint64_t key) {
  if ((static_cast<double>(clock_) - base_) / halfLife_ > kRescale) {
    // Multiplying by a power of two keeps every score's order (and is
    // exact down to the subnormals), as the replay does.
    constexpr double kScale = 0x1p-256;
    static_assert(kRescale == 256);
    for (auto &[k, s] : scores_)
      s *= kScale;
    base_ += kRescale * halfLife_;
    std::set<LfuPlace> rescaled;
    for (auto &[k, member] : shadowLfuIndex_) {
      std::get<0>(member.place) = score(k);
      rescaled.insert(member.place);
    }
    shadowLfu_ = std::move(rescaled);
  }
  scores_[key] += std::exp2((static_cast<double>(clock_) - base_) / halfLife_);
}

ExpertCache::Entry *ExpertCache::find(ExpertKey key, uint64_t bytes) {
  uint64_t k = id(key);
  ++clock_;
  if (eviction_ != Eviction::Lru)
    use(k);
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
  auto inLru = shadowLruIndex_.find(key);
  auto inLfu = shadowLfuIndex_.find(key);
  bool hits[2] = {inLru != shadowLruIndex_.end(),
                  inLfu != shadowLfuIndex_.end()};
  for (int i = 0; i < 2; ++i)
    merit_[i] +=
        (int64_t{hits[i]} << 16) - merit_[i] / static_cast<int64_t>(window_);
  if (hits[0])
    shadowLru_.splice(shadowLru_.begin(), shadowLru_, inLru->second);
  if (hits[1]) {
    shadowLfu_.erase(inLfu->second.place);
    inLfu->second.place = {score(key), clock_, key};
    shadowLfu_.insert(inLfu->second.place);
  }
  group_.push_back({key, bytes, clock_, hits[0], hits[1]});
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
    if (!l.lruHit) {
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
    if (!l.lfuHit) {
      for (auto it = shadowLfu_.begin();
           shadowLfuBytes_ + l.bytes > room && it != shadowLfu_.end();) {
        uint64_t victim = std::get<2>(*it);
        if (inGroup(victim)) {
          ++it;
          continue;
        }
        shadowLfuBytes_ -= shadowLfuIndex_[victim].bytes;
        shadowLfuIndex_.erase(victim);
        it = shadowLfu_.erase(it);
      }
      if (shadowLfuBytes_ + l.bytes <= room) {
        LfuPlace place{score(l.key), l.at, l.key};
        shadowLfu_.insert(place);
        shadowLfuIndex_[l.key] = {place, l.bytes};
        shadowLfuBytes_ += l.bytes;
      }
    }
  }
  group_.clear();
}

bool ExpertCache::lfuLeads() const {
  if (eviction_ == Eviction::Adaptive)
    return merit_[1] > merit_[0];
  return eviction_ == Eviction::Lfu;
}

ExpertCache::Entry *ExpertCache::peek(ExpertKey key) {
  auto it = index_.find(id(key));
  return it == index_.end() ? nullptr : &*it->second;
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
  if (lfuLeads()) {
    // The least scored evictable entry, one at a time (ties: the least
    // recently used). A scan per eviction: each eviction makes room for a
    // read of megabytes, beside which the scan is nothing.
    while (used_ + bytes > capacity_) {
      auto victim = lru_.end();
      double least = 0;
      for (auto it = std::prev(lru_.end());; --it) {
        if (!it->pinned && !it->locks) {
          double s = score(id(it->key));
          if (victim == lru_.end() || s < least) {
            victim = it;
            least = s;
          }
        }
        if (it == lru_.begin())
          break;
      }
      evict(victim);
    }
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

std::vector<ExpertKey> ExpertCache::lfuShadow() const {
  std::vector<ExpertKey> keys;
  for (const LfuPlace &place : shadowLfu_)
    keys.push_back(keyOf(std::get<2>(place)));
  return keys;
}

} // namespace moert::detail
