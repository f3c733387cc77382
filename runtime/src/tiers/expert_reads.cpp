//===- expert_reads.cpp - The expert store's reader threads ---------------===//
//
// The reads of a tiered plan's cold experts by ExpertStore's reader threads
// (docs/tiered-experts.md): a step's misses, read while the step computes
// its hits, then reads ahead; and the probe of the file's read rate.
//
//===----------------------------------------------------------------------===//

#include "tiers/expert_store.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>

namespace moert {
namespace detail {

void ExpertStore::collectAwaiting(std::vector<uint32_t> &batch,
                                  std::vector<uint32_t> &left,
                                  std::vector<ExpertCache::Entry *> &retry) {
  for (auto it = awaiting_.begin(); it != awaiting_.end();) {
    ExpertCache::Entry *entry = cache_.peek(*it);
    auto *payload = entry ? static_cast<Payload *>(entry->payload) : nullptr;
    if (!entry) {
      // A read ahead that failed: looked up and read again by a later call.
      left.push_back(it->expert);
    } else if (entry->state == ExpertCache::Entry::State::Ready) {
      batch.push_back(it->expert);
    } else if (entry->state == ExpertCache::Entry::State::Queued &&
               payload->failed) {
      payload->failed = false;
      entry->state = ExpertCache::Entry::State::Loading;
      retry.push_back(entry);
      batch.push_back(it->expert);
    } else {
      ++it;
      continue;
    }
    it = awaiting_.erase(it);
  }
}

void ExpertStore::abandonAwaiting(std::unique_lock<std::mutex> &lock) {
  for (ExpertKey key : awaiting_) {
    ExpertCache::Entry *entry = nullptr;
    changed_.wait(lock, [&] {
      entry = cache_.peek(key);
      return !entry || entry->state != ExpertCache::Entry::State::Loading;
    });
    if (!entry)
      continue;
    if (entry->state == ExpertCache::Entry::State::Queued) {
      // Not read: its queue item finds no queued entry and is skipped.
      release(static_cast<Payload *>(cache_.erase(entry)));
    } else {
      cache_.unlock(entry);
    }
  }
  awaiting_.clear();
}

void ExpertStore::readLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_)
      return;
    ExpertKey key = queue_.front().key;
    int view = queue_.front().view;
    queue_.pop_front();
    ExpertCache::Entry *entry = cache_.peek(key);
    // Taken over by a step, dropped, or already read meanwhile.
    if (!entry || entry->state != ExpertCache::Entry::State::Queued)
      continue;
    auto *payload = static_cast<Payload *>(entry->payload);
    if (payload->failed)
      continue;
    entry->state = ExpertCache::Entry::State::Loading;
    ++loading_;
    // A step's miss stays Loading until its read ends: whether it is one
    // cannot change meanwhile.
    bool demand = payload->demand;
    if (demand && demandLoading_++ == 0)
      demandSince_ = Clock::now();
    lock.unlock();
    Clock::time_point start = Clock::now();
    absl::Status status = fill(*entry, payload);
    double seconds = secondsSince(start);
    lock.lock();
    --loading_;
    LayerPaging &paging = views_[view].paging[key.layer];
    if (demand && --demandLoading_ == 0)
      paging.readSeconds += secondsSince(demandSince_);
    if (!demand)
      paging.prefetch.readSeconds += seconds;
    if (status.ok()) {
      entry->state = ExpertCache::Entry::State::Ready;
      setPresent(key, payload);
      (demand ? paging.bytesPagedIn : paging.prefetch.bytes) +=
          tiers_.layers[key.layer].expertBytes;
      if (payload->ahead) {
        payload->ahead = false;
        cache_.unlock(entry); // the read ahead's lock
      }
    } else if (demand) {
      // The step reads it again and reports the error with its label.
      entry->state = ExpertCache::Entry::State::Queued;
      payload->failed = true;
    } else {
      // Read on demand instead, which reports the error with its step.
      release(static_cast<Payload *>(cache_.erase(entry)));
    }
    changed_.notify_all();
  }
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
