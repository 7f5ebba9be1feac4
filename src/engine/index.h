// The block index: key -> where the block is, its size and CRC. 32 bytes an entry.
//
// Sharded by the key's high bits; each shard is an open-addressing table (linear probing,
// backward-shift deletion, no tombstones) under its own mutex. Keys are hashes already, so
// the low 64 bits pick the home slot directly (multiply-shift, so a table can have any size
// and start near its target load instead of at a power of two).
//
// Thread safety: callers lock Shard::mu and use the shard's methods under it. Entry
// pointers stay valid only until the next Insert or Erase on the same shard.
#ifndef KVPOOL_ENGINE_INDEX_H_
#define KVPOOL_ENGINE_INDEX_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/mutex.h"
#include "kvpool/key.h"
#include "kvpool/store.h"
#include "mem/arena.h"

namespace kvpool::engine {

// loc bit layout: [0, 30) size in bytes, [30, 32) past uses (0-3, kept while the block is
// on flash only, for the DRAM policy when it comes back), [32, 62) flash page, bit 62
// on-flash, bit 63 in-DRAM.
// aux: the DRAM record id while in DRAM; otherwise the generation of the flash region the
// block was written into (a region eviction bumps it, making the entry stale lazily).
struct IndexEntry {
  BlockKey key;
  uint32_t crc = 0;
  uint32_t aux = 0;
  uint64_t loc = 0;

  static constexpr uint64_t kInDram = 1ull << 63;
  static constexpr uint64_t kOnFlash = 1ull << 62;
  static constexpr uint64_t kPageMask = (1ull << 30) - 1;
  static constexpr uint64_t kSizeMask = (1ull << 30) - 1;

  uint32_t size() const { return static_cast<uint32_t>(loc & kSizeMask); }
  uint8_t uses() const { return static_cast<uint8_t>((loc >> 30) & 3); }
  void set_uses(uint8_t u) { loc = (loc & ~(3ull << 30)) | (uint64_t{u > 3 ? 3u : u} << 30); }
  bool in_dram() const { return loc & kInDram; }
  bool on_flash() const { return loc & kOnFlash; }
  uint32_t flash_page() const { return static_cast<uint32_t>((loc >> 32) & kPageMask); }
  void set_size(uint32_t s) { loc = (loc & ~kSizeMask) | s; }  // REQUIRES: s < 1 GiB
  void set_in_dram(bool v) { loc = v ? (loc | kInDram) : (loc & ~kInDram); }
  void set_flash(uint32_t page) {
    loc = (loc & ~(kPageMask << 32)) | (static_cast<uint64_t>(page) << 32) | kOnFlash;
  }
  void clear_flash() { loc &= ~(kOnFlash | (kPageMask << 32)); }
};
static_assert(sizeof(IndexEntry) == 32, "the index entry is 32 bytes by design");

class Index {
 public:
  class Shard {
   public:
    Mutex mu;
    IndexEntry* Find(const BlockKey& key) REQUIRES(mu);
    // Finds made by this thread while counting is on (tests count the lookups a read
    // costs). Off, a Find pays one load of a flag: no thread-local access, which in
    // position-independent code is a call.
    static void CountFinds(bool on) { counting_.store(on, std::memory_order_relaxed); }
    static uint64_t finds_on_this_thread() { return finds_; }
    // Starts loading key's home slot into cache, for a Find soon after (batched lookups
    // overlap their cache misses).
    void Prefetch(const BlockKey& key) const REQUIRES(mu) {
      __builtin_prefetch(slots_ + Home(key.lo));
    }
    // REQUIRES: key absent. Returns the new entry (key set, rest zero).
    IndexEntry* Insert(const BlockKey& key) REQUIRES(mu);
    // Removes the entry, telling the listener with `tenant`, or (negative) the tenant the
    // index's resolver finds for it.
    void Erase(IndexEntry* entry, int tenant = -1) REQUIRES(mu);
    size_t size() const { return size_; }
    size_t capacity() const { return capacity_; }
    // Erases entries for which `stale` is true among slots [begin, begin + n); returns
    // how many were erased.
    size_t EraseIf(size_t begin, size_t n, const std::function<bool(const IndexEntry&)>& stale)
        REQUIRES(mu);
    // Calls fn for every entry.
    void ForEach(const std::function<void(const IndexEntry&)>& fn) const REQUIRES(mu);

   private:
    friend class Index;
    void Grow();
    // What a lookup reads first, beside the mutex; then what erases and growth use.
    // The table: a slice of the index's first mapping until the shard grows, then a
    // mapping of its own (table_). Fresh anonymous memory is zero: every slot empty.
    IndexEntry* slots_ = nullptr;
    size_t capacity_ = 0;
    StoreListener* listener_ = nullptr;  // told of every erased key
    const std::function<uint16_t(const IndexEntry&)>* tenant_of_ = nullptr;
    std::unique_ptr<mem::Arena> table_;
    // Fibonacci mix, then multiply-shift onto [0, size): keys are hashes, but a caller's
    // sequential keys must not pile onto one slot either.
    size_t Home(uint64_t lo) const {
      uint64_t h = lo * 0x9E3779B97F4A7C15ull;
      return static_cast<size_t>((static_cast<unsigned __int128>(h) * capacity_) >> 64);
    }
    size_t Next(size_t i) const { return i + 1 == capacity_ ? 0 : i + 1; }
    size_t size_ = 0;
    static thread_local uint64_t finds_;
    static std::atomic<bool> counting_;
  };

  // `prefault`: touch the first tables now. On huge pages a first touch clears 2 MiB, which
  // on a VM whose host backs memory lazily took 3 ms inside a put.
  Index(uint64_t capacity, unsigned shards, bool prefault = false);
  Shard& ShardFor(const BlockKey& key) { return *shards_[ShardIndex(key)]; }
  size_t ShardIndex(const BlockKey& key) const {
    return ((key.hi * 0xC2B2AE3D27D4EB4Full) >> 40) & shard_mask_;
  }
  unsigned shard_count() const { return static_cast<unsigned>(shards_.size()); }
  // Every Erase is reported to `listener` (may be null), with the tenant `tenant_of` finds
  // for the entry (it runs under the shard lock). Call before concurrent use.
  void set_listener(StoreListener* listener, std::function<uint16_t(const IndexEntry&)> tenant_of) {
    tenant_of_ = std::move(tenant_of);
    for (auto& s : shards_) {
      s->listener_ = listener;
      s->tenant_of_ = &tenant_of_;
    }
  }
  Shard& shard(unsigned i) { return *shards_[i]; }
  // Totals over all shards (locks each in turn).
  uint64_t Size();
  uint64_t Bytes();

 private:
  // Every shard's first table, in one mapping on transparent huge pages: a lookup in a
  // large index is a cache miss, and on 4 KiB pages a TLB miss too (on a VM a two-level
  // page walk), which cost more than the miss itself.
  std::unique_ptr<mem::Arena> first_tables_;
  std::vector<std::unique_ptr<Shard>> shards_;
  uint64_t shard_mask_;
  std::function<uint16_t(const IndexEntry&)> tenant_of_;
};

}  // namespace kvpool::engine

#endif  // KVPOOL_ENGINE_INDEX_H_
