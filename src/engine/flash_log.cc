#include "engine/flash_log.h"

namespace kvpool::engine {

FlashLog::FlashLog(uint64_t device_bytes, uint64_t region_bytes)
    : pages_per_region_(static_cast<uint32_t>(region_bytes / 4096)),
      regions_(static_cast<uint32_t>(device_bytes / region_bytes)),
      gens_(new std::atomic<uint32_t>[regions_ ? regions_ : 1]),
      region_blocks_(new uint32_t[regions_ ? regions_ : 1]()) {
  for (uint32_t i = 0; i < (regions_ ? regions_ : 1); ++i) gens_[i].store(0);
}

void FlashLog::EnterRegionLocked(uint32_t region, uint32_t* evicted) {
  // Bump before any new data is written: a reader that sees the old generation after its
  // read finished knows no overwrite had started.
  gens_[region].fetch_add(1, std::memory_order_acq_rel);
  if (region_blocks_[region] > 0 || live_regions_ == regions_) {
    blocks_.fetch_sub(region_blocks_[region], std::memory_order_relaxed);
    region_blocks_[region] = 0;
    evicted_.fetch_add(1, std::memory_order_relaxed);
    ++*evicted;
  } else {
    ++live_regions_;
  }
  head_region_ = region;
}

bool FlashLog::Append(uint32_t pages, Extent* out, uint32_t* regions_evicted) {
  *regions_evicted = 0;
  uint64_t total = uint64_t{regions_} * pages_per_region_;
  if (pages == 0 || pages > total) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_) {
    started_ = true;
    head_ = 0;
    EnterRegionLocked(0, regions_evicted);
  }
  if (head_ + pages > total) {
    // Skip the tail of the device: evict the remaining regions in ring order, then wrap.
    for (uint32_t r = head_region_ + 1; r < regions_; ++r) EnterRegionLocked(r, regions_evicted);
    head_ = 0;
    EnterRegionLocked(0, regions_evicted);
  }
  out->page = static_cast<uint32_t>(head_);
  uint32_t start_region = static_cast<uint32_t>(head_ / pages_per_region_);
  out->gen = gens_[start_region].load(std::memory_order_relaxed);
  head_ += pages;
  // Enter every further region the block reaches, and the next one if the head now sits
  // exactly on its boundary (so the next append finds its region already entered).
  uint64_t last_page = head_ - 1;
  uint32_t last_region = static_cast<uint32_t>(last_page / pages_per_region_);
  for (uint32_t r = head_region_ + 1; r <= last_region; ++r) EnterRegionLocked(r, regions_evicted);
  ++region_blocks_[start_region];
  blocks_.fetch_add(1, std::memory_order_relaxed);
  if (head_ < total && head_ % pages_per_region_ == 0) {
    EnterRegionLocked(static_cast<uint32_t>(head_ / pages_per_region_), regions_evicted);
  } else if (head_ == total) {
    head_ = 0;
    EnterRegionLocked(0, regions_evicted);
  }
  return true;
}

double FlashLog::Age(uint32_t page) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t total = uint64_t{regions_} * pages_per_region_;
  uint64_t behind = head_ >= page ? head_ - page : head_ + total - page;
  return static_cast<double>(behind) / static_cast<double>(total);
}

uint64_t FlashLog::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return uint64_t{live_regions_} * pages_per_region_ * 4096;
}

}  // namespace kvpool::engine
