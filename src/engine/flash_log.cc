#include "engine/flash_log.h"

#include <algorithm>

namespace kvpool::engine {
namespace {
constexpr uint32_t kNone = ~0u;
}  // namespace

FlashLog::FlashLog(uint64_t device_bytes, uint64_t region_bytes)
    : pages_per_region_(static_cast<uint32_t>(region_bytes / 4096)),
      regions_(static_cast<uint32_t>(device_bytes / region_bytes)),
      gens_(new std::atomic<uint32_t>[regions_ ? regions_ : 1]),
      region_blocks_(regions_ ? regions_ : 1, 0),
      live_(regions_ ? regions_ : 1, 0),
      entered_(regions_ ? regions_ : 1, 0),
      spill_(regions_ ? regions_ : 1, 0),
      from_(regions_ ? regions_ : 1, kNone),
      keys_(regions_ ? regions_ : 1),
      empty_(regions_) {
  for (uint32_t i = 0; i < (regions_ ? regions_ : 1); ++i) {
    gens_[i].store(0);
    spill_[i] = i;
  }
}

void FlashLog::EnterRegionLocked(uint32_t region, uint32_t* evicted) {
  // Bump before any new data is written: a reader that sees the old generation after its
  // read finished knows no overwrite had started.
  gens_[region].fetch_add(1, std::memory_order_acq_rel);
  if (entered_[region] != 0) {  // it held data once: an eviction
    evicted_.fetch_add(1, std::memory_order_relaxed);
    ++*evicted;
  }
  live_evicted_.fetch_add(region_blocks_[region], std::memory_order_relaxed);
  blocks_.fetch_sub(region_blocks_[region], std::memory_order_relaxed);
  region_blocks_[region] = 0;
  live_total_ -= live_[region];
  if (live_[region] > 0) empty_.fetch_add(1, std::memory_order_relaxed);
  live_[region] = 0;
  keys_[region].clear();
  // Blocks that started here and continued into later regions are gone with it.
  for (uint32_t r = region + 1; r <= spill_[region] && r < regions_; ++r) {
    if (from_[r] == region) from_[r] = kNone;
  }
  spill_[region] = region;
  entered_[region] = ++enter_seq_;
}

uint32_t FlashLog::PickRunLocked(uint32_t k) const {
  uint32_t best = kNone;
  uint64_t best_live = 0, best_age = 0;
  for (uint32_t s = 0; s + k <= regions_; ++s) {
    uint64_t live = 0, oldest = ~0ull;
    bool ok = true;
    for (uint32_t r = s; r < s + k && ok; ++r) {
      ok = !(started_ && r == head_region_) && (from_[r] == kNone || from_[r] == s);
      live += live_[r];
      oldest = std::min(oldest, entered_[r]);
    }
    if (!ok) continue;
    if (best == kNone || live < best_live || (live == best_live && oldest < best_age)) {
      best = s;
      best_live = live;
      best_age = oldest;
    }
  }
  return best;
}

bool FlashLog::Append(uint32_t pages, const BlockKey& key, Extent* out, uint32_t* regions_evicted) {
  *regions_evicted = 0;
  uint64_t total = uint64_t{regions_} * pages_per_region_;
  if (pages == 0 || pages > total || regions_ < 2) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_ || head_ + pages > head_end_) {
    uint32_t k = (pages + pages_per_region_ - 1) / pages_per_region_;
    uint32_t s = PickRunLocked(k);
    if (s == kNone) {
      // Every run of k is pinned by blocks continuing into it (a device nearly all one
      // huge block): take the run after the head and the regions those blocks start in.
      s = (head_region_ + 1) % regions_;
      if (s + k > regions_) s = 0;
      for (uint32_t r = s; r < s + k; ++r) {
        if (from_[r] != kNone && from_[r] != s) EnterRegionLocked(from_[r], regions_evicted);
      }
    }
    for (uint32_t r = s; r < s + k; ++r) EnterRegionLocked(r, regions_evicted);
    started_ = true;
    head_ = uint64_t{s} * pages_per_region_;
    head_end_ = uint64_t{s + k} * pages_per_region_;
    head_region_ = s + k - 1;
  }
  out->page = static_cast<uint32_t>(head_);
  uint32_t start = static_cast<uint32_t>(head_ / pages_per_region_);
  uint32_t last = static_cast<uint32_t>((head_ + pages - 1) / pages_per_region_);
  out->gen = gens_[start].load(std::memory_order_relaxed);
  for (uint32_t r = start + 1; r <= last; ++r) from_[r] = start;
  spill_[start] = std::max(spill_[start], last);
  head_ += pages;
  ++region_blocks_[start];
  if (live_[start] == 0) empty_.fetch_sub(1, std::memory_order_relaxed);
  live_[start] += pages;
  keys_[start].push_back(key);
  live_total_ += pages;
  blocks_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void FlashLog::Release(uint32_t page, uint32_t gen, uint32_t pages) {
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t region = page / pages_per_region_;
  if (region >= regions_ || !Valid(page, gen)) return;
  uint64_t n = std::min<uint64_t>(pages, live_[region]);
  live_[region] -= n;
  if (n > 0 && live_[region] == 0) empty_.fetch_add(1, std::memory_order_relaxed);
  live_total_ -= n;
  if (region_blocks_[region] > 0) {
    --region_blocks_[region];
    blocks_.fetch_sub(1, std::memory_order_relaxed);
  }
}

double FlashLog::Age(uint32_t page) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t region = page / pages_per_region_;
  if (region >= regions_ || regions_ == 0) return 1;
  uint64_t behind = enter_seq_ - entered_[region];
  return std::min(1.0, static_cast<double>(behind) / static_cast<double>(regions_));
}

uint64_t FlashLog::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_total_ * 4096;
}

bool FlashLog::CompactionCandidate(uint32_t* region, std::vector<BlockKey>* keys) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t best = kNone;
  for (uint32_t r = 0; r < regions_; ++r) {
    bool head = started_ && head_ / pages_per_region_ <= r && r <= head_region_;
    if (head || live_[r] == 0 || from_[r] != kNone || spill_[r] != r) continue;
    if (best == kNone || live_[r] < live_[best]) best = r;
  }
  // Moving a region 7/8 live frees an eighth: past that, compaction would write more than
  // 8x what it frees, and the log is simply full (eviction drops instead).
  if (best == kNone || live_[best] * 8 > uint64_t{pages_per_region_} * 7) return false;
  *region = best;
  *keys = keys_[best];
  return true;
}

uint64_t FlashLog::live_pages(uint32_t region) const {
  std::lock_guard<std::mutex> lock(mu_);
  return region < regions_ ? live_[region] : 0;
}

}  // namespace kvpool::engine
