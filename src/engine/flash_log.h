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
// Persistence (the constructor over a device): each region's summary (flash_summary.h) is
// written once the head has left the region and every write into it is over (sealed), and
// written again whenever a block in a sealed region dies (erase, overwrite, move), before
// the caller acknowledges: Release marks the block dead, Persist writes every summary
// behind. A region taken again has its on-device summary invalidated before any new data
// is written into it. Open rebuilds the log from the summaries alone, never reading data.
// A block in a region not sealed at a crash is lost (a miss), never wrong.
//
// Thread safety: Append, Release, Written and the statistics lock a mutex; Valid is
// lock-free. Summary writes are done outside it, each under its region's stripe lock (so
// an older image never lands after a newer one); the one write made under it is the
// single-page invalidation when a region whose summary is valid on the device is taken
// (once per region of appends). Lock order: mu_ -> stripe.
#ifndef KVPOOL_ENGINE_FLASH_LOG_H_
#define KVPOOL_ENGINE_FLASH_LOG_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/mutex.h"
#include "engine/flash_summary.h"
#include "io/device.h"
#include "kvpool/key.h"
#include "kvpool/status.h"
#include "kvpool/store.h"

namespace kvpool::engine {

class FlashLog {
 public:
  // In memory only: nothing is written but the caller's data (tests, benches).
  FlashLog(uint64_t device_bytes, uint64_t region_bytes);
  // Persistent over `device` (not owned), whose end holds the metadata; call Open first.
  FlashLog(io::Device* device, uint64_t region_bytes);

  // A block found at Open. `seq` orders copies of one key: the larger is newer.
  struct Recovered {
    BlockKey key;
    uint32_t page = 0, gen = 0, size = 0, crc = 0;
    uint64_t seq = 0;
    uint16_t tenant = 0;
  };
  struct OpenStats {
    bool formatted = false;        // no usable metadata (new device, other geometry, !restore)
    uint32_t regions_read = 0;     // regions with a valid summary
    uint32_t regions_dropped = 0;  // summaries torn or inconsistent: dropped whole
    uint64_t blocks = 0;
  };
  // Persistent log: reads the superblock and every region's summary (restore) into `out`
  // (ascending seq), or formats the metadata (a new instance: older summaries are orphaned).
  Status Open(bool restore, std::vector<Recovered>* out, OpenStats* stats);

  struct Extent {
    uint32_t page = 0;  // first device page
    uint32_t gen = 0;   // generation of the start region at append time
  };
  // Reserves `pages` pages at the head. Returns false when the block cannot fit in the
  // device at all. `*regions_evicted` counts regions this call evicted. The block (key,
  // size, CRC) enters its region's summary. Every successful Append must be followed by
  // Written once the data write is over (failed or not: a failed one is Released first).
  // The block's pages are charged to `tenant` (REQUIRES: < kMaxTenants) while it is live.
  // `lost` (optional) gets the live blocks of the regions this call evicted (their index
  // entries are now stale).
  struct Located {
    BlockKey key;
    uint32_t page = 0, gen = 0, pages = 0;
    uint16_t tenant = 0;
  };
  bool Append(uint32_t pages, const BlockKey& key, uint32_t size, uint32_t crc, uint16_t tenant,
              Extent* out, uint32_t* regions_evicted, std::vector<Located>* lost = nullptr);
  void Written(const Extent& ext);
  bool Valid(uint32_t page, uint32_t gen) const {
    return gens_[page / pages_per_region_].load(std::memory_order_acquire) == gen;
  }
  // The block at (page, gen) of `pages` pages is no longer wanted (erased, overwritten,
  // written again elsewhere): its pages stop counting as live, and its summary entry is
  // dead (on the device at the next Persist). No-op if already stale.
  void Release(uint32_t page, uint32_t gen, uint32_t pages);
  // The block at (page, gen) was used (read, matched, or used in DRAM after a promotion)
  // since it was written: when its region is next to be taken it is worth moving to the
  // head (ReinsertionCandidate). No-op if stale. Lock-free: one bit per device page,
  // cleared when a block is appended there (a Touch racing with the region's reuse may
  // mark the new block: one move too many, never a wrong byte).
  void Touch(uint32_t page, uint32_t gen) {
    if (page / pages_per_region_ >= regions_ || !Valid(page, gen)) return;
    uint64_t bit = uint64_t{1} << (page % 64);
    std::atomic<uint64_t>& word = touched_[page / 64];
    // Marked already (a chain matched again): a load, no locked write to a shared line.
    if (!(word.load(std::memory_order_relaxed) & bit))
      word.fetch_or(bit, std::memory_order_relaxed);
  }
  // Writes every summary that is behind (sealed regions, blocks released); returns when
  // they are on the device. An erase is acknowledged after this. No-op in memory.
  void Persist();
  // The head stops being one (a clean close): its summary is written by the next Persist.
  void Close();
  bool persistent() const { return device_ != nullptr; }
  const FlashGeometry& geometry() const { return geo_; }
  uint64_t summary_bytes() const { return summary_bytes_.load(std::memory_order_relaxed); }

  uint32_t region_count() const { return regions_; }
  uint64_t capacity_bytes() const { return uint64_t{regions_} * pages_per_region_ * 4096; }
  // Bytes of live blocks.
  uint64_t used_bytes() const;
  uint64_t blocks() const { return blocks_.load(std::memory_order_relaxed); }
  uint64_t regions_evicted() const { return evicted_.load(std::memory_order_relaxed); }
  // Live blocks evicted with their region (the log was full of live data).
  uint64_t live_blocks_evicted() const { return live_evicted_.load(std::memory_order_relaxed); }
  // Bytes (whole pages) of `tenant`'s live blocks.
  uint64_t tenant_bytes(uint16_t tenant) const {
    return tenant_pages_[tenant].load(std::memory_order_relaxed) * 4096;
  }
  // The tenant of the block at (page, gen), live or released; 0 if its region was taken
  // since.
  uint16_t TenantAt(uint32_t page, uint32_t gen) const;
  // `tenant`'s oldest live blocks (oldest region first) until they hold `bytes`, at most
  // `max` of them: quota eviction's candidates. The caller releases each (or its index
  // entry no longer names it: then Release it directly).
  void OldestOf(uint16_t tenant, uint64_t bytes, size_t max, std::vector<Located>* out) const;
  // The region of `page` was entered by the head within the last half of the log's
  // regions: far from being taken (the store's choice not to promote such a flash hit).
  bool InNewerHalf(uint32_t page) const;
  // Live pages in `region` (tests).
  uint64_t live_pages(uint32_t region) const;
  // Regions holding no live block.
  uint32_t empty_regions() const { return empty_.load(std::memory_order_relaxed); }
  // The region compaction should empty next: the one with least live data that is not
  // the head's and takes part in no block spanning regions. False if none has any, or if
  // the least is more than 7/8 live (moving it would write more than 8x what it frees:
  // the log is full, and eviction must drop). `keys` gets the keys appended there since it was
  // entered (some since released or moved: the caller checks each against the index).
  bool CompactionCandidate(uint32_t* region, std::vector<Located>* keys) const;
  // Reinsertion (a second chance, as CacheLib navy's hits-based reinsertion): of the
  // `ahead` regions the head would take next (least live data, oldest of equals), the first
  // that still holds blocks used since they were written, and those blocks (`keys`), to
  // be moved to the head before the region is taken; the rest go with it. False if none
  // of them holds any (or a region a block spans is among them).
  // The region is then marked as next to go: compaction leaves it alone (it would move the
  // unused blocks reinsertion left to go with it).
  bool ReinsertionCandidate(uint32_t ahead, uint32_t* region, std::vector<Located>* keys);
  uint32_t region_of(uint32_t page) const { return page / pages_per_region_; }

 private:
  struct Slot {
    BlockKey key;
    uint32_t page = 0;  // relative to the region
    uint32_t size = 0, crc = 0;
    uint16_t tenant = 0;
    bool dead = false;
    uint32_t pages() const { return (size + 4095) / 4096; }
  };
  // The live slot `s` counts for its tenant (add) or no longer (tenant 0 is not counted).
  void ChargeLocked(const Slot& s, bool add) REQUIRES(mu_);
  Located Locate(uint32_t region, const Slot& s) const {
    return {s.key, region * pages_per_region_ + s.page,
            gens_[region].load(std::memory_order_relaxed), s.pages(), s.tenant};
  }
  FlashLog(io::Device* device, const FlashGeometry& geo);
  // Evicts `region` (bumps its generation, drops its live count) and makes it the head's;
  // invalidates its summary on the device if one is valid there.
  void EnterRegionLocked(uint32_t region, uint32_t* evicted, std::vector<Located>* lost = nullptr)
      REQUIRES(mu_);
  bool InHeadLocked(uint32_t r) const REQUIRES(mu_) {
    return started_ && head_first_ <= r && r <= head_region_;
  }
  // A sealed region whose summary is behind: queued for Persist.
  void MaybePendingLocked(uint32_t r) REQUIRES(mu_);
  // The order in which the head takes regions (or runs): least live data first, the
  // oldest (smallest entry sequence) of equals. PickRunLocked and ReinsertionCandidate.
  static bool TakenFirst(uint64_t live_a, uint64_t seq_a, uint64_t live_b, uint64_t seq_b) {
    return live_a != live_b ? live_a < live_b : seq_a < seq_b;
  }
  void PersistRegion(uint32_t r);
  std::mutex& Stripe(uint32_t r) { return stripes_[r % kStripes]; }
  // The first of `k` consecutive regions to take next: least live data, oldest of equals,
  // never the head region nor a region a live block continues into.
  uint32_t PickRunLocked(uint32_t k) const REQUIRES(mu_);

  static constexpr uint32_t kStripes = 64;
  io::Device* const device_;  // null: in memory only
  const FlashGeometry geo_;
  uint64_t instance_ = 0;
  const uint32_t pages_per_region_;
  const uint32_t regions_;
  std::unique_ptr<std::atomic<uint32_t>[]> gens_;
  mutable Mutex mu_;
  std::vector<uint32_t> region_blocks_ GUARDED_BY(mu_);
  std::vector<uint64_t> live_ GUARDED_BY(mu_);            // live pages per region
  std::vector<uint64_t> entered_ GUARDED_BY(mu_);         // enter_seq_ when last entered
  std::vector<uint32_t> spill_ GUARDED_BY(mu_);           // last region its blocks reach
  std::vector<uint32_t> from_ GUARDED_BY(mu_);            // start region continuing here,
                                                          // or kNone
  std::vector<std::vector<Slot>> slots_ GUARDED_BY(mu_);  // appended since entered
  std::vector<uint32_t> inflight_ GUARDED_BY(mu_);        // appends not yet Written
  std::vector<char> reinserted_ GUARDED_BY(mu_);          // its used blocks moved: next to go
  std::vector<uint64_t> ver_ GUARDED_BY(mu_);             // summary version in memory
  std::vector<char> pending_flag_ GUARDED_BY(mu_);
  std::vector<uint32_t> pending_ GUARDED_BY(mu_);  // regions to Persist
  std::atomic<size_t> pending_n_{0};               // pending_.size(), read without the lock
  // Version of the summary on the device (0: none valid there). Written under the
  // region's stripe lock.
  std::unique_ptr<std::atomic<uint64_t>[]> disk_ver_;
  std::unique_ptr<std::mutex[]> stripes_;
  std::atomic<uint64_t> summary_bytes_{0};
  uint32_t head_first_ GUARDED_BY(mu_) = 0;  // first region of the head's run
  uint64_t enter_seq_ GUARDED_BY(mu_) = 0;
  uint64_t live_total_ GUARDED_BY(mu_) = 0;
  uint64_t head_ GUARDED_BY(mu_) = 0;         // next free page
  uint64_t head_end_ GUARDED_BY(mu_) = 0;     // end of the head's run of regions
  uint32_t head_region_ GUARDED_BY(mu_) = 0;  // the last region of that run
  bool started_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> blocks_{0}, evicted_{0}, live_evicted_{0};
  std::atomic<uint32_t> empty_{0};                         // regions with live_ == 0
  std::unique_ptr<std::atomic<uint64_t>[]> tenant_pages_;  // kMaxTenants: live pages
  std::unique_ptr<std::atomic<uint64_t>[]> touched_;       // a bit per device page (Touch)
  bool TouchedPage(uint32_t page) const {
    return touched_[page / 64].load(std::memory_order_relaxed) >> (page % 64) & 1;
  }
};

}  // namespace kvpool::engine

#endif  // KVPOOL_ENGINE_FLASH_LOG_H_
