// The flash tier's space: a log of fixed-size regions over an io::Device.
//
// Blocks are appended at the head, page-aligned, never rewritten in place. When the head
// needs a fresh region it takes the one holding the least live data (the oldest of equals)
// and evicts it whole: the region's generation is bumped, which makes every index entry
// that points into it stale (checked lazily at lookup and swept in the background).
// Eviction never reads the device. Live data is counted per region: a block's pages are
// live from its append until it is released (erased, overwritten, rewritten elsewhere) or
// its region is evicted, so a region whose blocks were erased is reused first and keeps
// nothing anyone wants; the oldest-first ring this replaced evicted regions full of live
// blocks while erased ones waited their turn.
//
// A block fits the rest of the head region, or starts a fresh run of regions: one region,
// or as many consecutive ones as a block larger than a region needs (the tail of the
// previous head region is left unused). A block takes the generation of the region it
// starts in; the regions it continues into cannot be chosen for eviction before that one
// (they would overwrite it while it still reads as valid).
//
// Thread safety: Append, Release and the statistics lock a mutex; Valid is lock-free.
#ifndef KVPOOL_ENGINE_FLASH_LOG_H_
#define KVPOOL_ENGINE_FLASH_LOG_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kvpool/key.h"

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
  // `key` is remembered in the region's list (what compaction looks up).
  bool Append(uint32_t pages, const BlockKey& key, Extent* out, uint32_t* regions_evicted);
  bool Valid(uint32_t page, uint32_t gen) const {
    return gens_[page / pages_per_region_].load(std::memory_order_acquire) == gen;
  }
  // The block at (page, gen) of `pages` pages is no longer wanted (erased, overwritten,
  // written again elsewhere): its pages stop counting as live. No-op if already stale.
  void Release(uint32_t page, uint32_t gen, uint32_t pages);

  // How long ago `page`'s region was filled, as a share of one pass over the log: near 1 =
  // among the oldest (and, of regions equally live, evicted next).
  double Age(uint32_t page) const;
  uint32_t region_count() const { return regions_; }
  uint64_t capacity_bytes() const { return uint64_t{regions_} * pages_per_region_ * 4096; }
  // Bytes of live blocks.
  uint64_t used_bytes() const;
  uint64_t blocks() const { return blocks_.load(std::memory_order_relaxed); }
  uint64_t regions_evicted() const { return evicted_.load(std::memory_order_relaxed); }
  // Live blocks evicted with their region (the log was full of live data).
  uint64_t live_blocks_evicted() const { return live_evicted_.load(std::memory_order_relaxed); }
  // Live pages in `region` (tests).
  uint64_t live_pages(uint32_t region) const;
  // Regions holding no live block.
  uint32_t empty_regions() const { return empty_.load(std::memory_order_relaxed); }
  // The region compaction should empty next: the one with least live data that is not
  // the head's and takes part in no block spanning regions. False if none has any, or if
  // the least is more than 7/8 live (moving it would write more than 8x what it frees:
  // the log is full, and eviction must drop). `keys` gets the keys appended there since it was
  // entered (some since released or moved: the caller checks each against the index).
  bool CompactionCandidate(uint32_t* region, std::vector<BlockKey>* keys) const;
  uint32_t region_of(uint32_t page) const { return page / pages_per_region_; }

 private:
  // Evicts `region` (bumps its generation, drops its live count) and makes it the head's.
  void EnterRegionLocked(uint32_t region, uint32_t* evicted);
  // The first of `k` consecutive regions to take next: least live data, oldest of equals,
  // never the head region nor a region a live block continues into.
  uint32_t PickRunLocked(uint32_t k) const;

  const uint32_t pages_per_region_;
  const uint32_t regions_;
  std::unique_ptr<std::atomic<uint32_t>[]> gens_;
  mutable std::mutex mu_;
  std::vector<uint32_t> region_blocks_;      // GUARDED_BY(mu_)
  std::vector<uint64_t> live_;               // GUARDED_BY(mu_): live pages per region
  std::vector<uint64_t> entered_;            // GUARDED_BY(mu_): enter_seq_ when last entered
  std::vector<uint32_t> spill_;              // GUARDED_BY(mu_): last region its blocks reach
  std::vector<uint32_t> from_;               // GUARDED_BY(mu_): start region continuing here,
                                             // or kNone
  std::vector<std::vector<BlockKey>> keys_;  // GUARDED_BY(mu_): appended since entered
  uint64_t enter_seq_ = 0;                   // GUARDED_BY(mu_)
  uint64_t live_total_ = 0;                  // GUARDED_BY(mu_)
  uint64_t head_ = 0;                        // GUARDED_BY(mu_): next free page
  uint64_t head_end_ = 0;                    // GUARDED_BY(mu_): end of the head's run of regions
  uint32_t head_region_ = 0;                 // GUARDED_BY(mu_): the last region of that run
  bool started_ = false;                     // GUARDED_BY(mu_)
  std::atomic<uint64_t> blocks_{0}, evicted_{0}, live_evicted_{0};
  std::atomic<uint32_t> empty_{0};  // regions with live_ == 0
};

}  // namespace kvpool::engine

#endif  // KVPOOL_ENGINE_FLASH_LOG_H_
