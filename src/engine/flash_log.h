// The flash tier's space: a circular log of fixed-size regions over an io::Device.
//
// Blocks are appended at the head, page-aligned, never rewritten in place. When the head
// enters a region it evicts it whole: the region's generation is bumped, which makes every
// index entry that points into it stale (checked lazily at lookup and swept in the
// background). Eviction therefore never reads the device and never moves live data:
// bytes written to flash = bytes demoted from DRAM (write amplification 1.0).
//
// A block may span regions; it takes the generation of the region it starts in, which is
// the oldest of them and so evicted first. A block never wraps past the device's end: the
// head skips to region 0 (evicting the skipped regions in ring order).
//
// Thread safety: Append locks a mutex; Valid is lock-free.
#ifndef KVPOOL_ENGINE_FLASH_LOG_H_
#define KVPOOL_ENGINE_FLASH_LOG_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

namespace kvpool::engine {

class FlashLog {
 public:
  FlashLog(uint64_t device_bytes, uint64_t region_bytes);

  struct Extent {
    uint32_t page = 0;  // first device page
    uint32_t gen = 0;   // generation of the start region at append time
  };
  // Reserves `pages` pages at the head. Returns false when the block cannot fit in the
  // device at all. `*regions_evicted` counts regions this call evicted.
  bool Append(uint32_t pages, Extent* out, uint32_t* regions_evicted);
  bool Valid(uint32_t page, uint32_t gen) const {
    return gens_[page / pages_per_region_].load(std::memory_order_acquire) == gen;
  }

  // How far behind the head `page` lies, as a share of the log: near 1 = evicted soon.
  double Age(uint32_t page) const;
  uint32_t region_count() const { return regions_; }
  uint64_t capacity_bytes() const { return uint64_t{regions_} * pages_per_region_ * 4096; }
  uint64_t used_bytes() const;
  uint64_t blocks() const { return blocks_.load(std::memory_order_relaxed); }
  uint64_t regions_evicted() const { return evicted_.load(std::memory_order_relaxed); }

 private:
  void EnterRegionLocked(uint32_t region, uint32_t* evicted);

  const uint32_t pages_per_region_;
  const uint32_t regions_;
  std::unique_ptr<std::atomic<uint32_t>[]> gens_;
  std::unique_ptr<uint32_t[]> region_blocks_;  // GUARDED_BY(mu_)
  mutable std::mutex mu_;
  uint64_t head_ = 0;          // GUARDED_BY(mu_): next free page
  uint32_t head_region_ = 0;   // GUARDED_BY(mu_): region the head is in (entered)
  bool started_ = false;       // GUARDED_BY(mu_)
  uint32_t live_regions_ = 0;  // GUARDED_BY(mu_)
  std::atomic<uint64_t> blocks_{0}, evicted_{0};
};

}  // namespace kvpool::engine

#endif  // KVPOOL_ENGINE_FLASH_LOG_H_
