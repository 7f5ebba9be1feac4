// The DRAM tier: the arena, its page allocator, one record per resident block, and the
// eviction policy over those records.
//
// Policy: S3-FIFO (Yang et al., SOSP'23) with a prefix rule. New blocks enter a small
// probation FIFO; a block used while there moves to the main FIFO; main is a FIFO with
// reinsertion (a 2-bit use counter, CLOCK-like). Prefix rule: a new block is placed just
// behind its parent (on the eviction side) when both were just stored, so a chain
// leaves leaf first. (Passing over parents that still have children was tried first: it
// kept stale parents alive a whole extra cycle and cost 3 points of hit ratio on the
// Mooncake trace.) Hits only bump an atomic counter: no lock, no list move on reads.
//
// Records are pinned by readers (a count in `state`); a record leaving the index is
// "doomed" and freed by whoever drops the last pin (or at once if none).
//
// Thread safety: Allocate/Free/Pin/Unpin/Doom/Touch are thread-safe. Link/Unlink/
// PickVictims lock the policy mutex. Record fields other than the atomics are written only
// by the owner of the record (the thread that allocated it, before publishing) or under
// the shard lock of its key.
#ifndef KVPOOL_ENGINE_DRAM_TIER_H_
#define KVPOOL_ENGINE_DRAM_TIER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kvpool/key.h"
#include "kvpool/options.h"
#include "mem/arena.h"
#include "mem/page_allocator.h"

namespace kvpool::engine {

inline constexpr uint32_t kNoRecord = ~0u;

struct Record {
  BlockKey key;
  uint32_t page = 0, pages = 0, size = 0;
  uint32_t gen = 0;        // bumped at every Allocate: tells a reused record from its past
  uint32_t flash_gen = 0;  // generation of the flash copy, if the entry has one
  uint32_t prev = kNoRecord, next = kNoRecord;  // GUARDED_BY(policy mutex)
  uint8_t queue = 0;                            // GUARDED_BY(policy mutex)
  uint32_t link_seq = 0;                        // GUARDED_BY(policy mutex): when linked
  std::atomic<uint8_t> freq{0};
  std::atomic<bool> used{false};   // hit at least once since it entered DRAM
  std::atomic<uint32_t> state{0};  // pins, plus kDoomed
};

class DramTier {
 public:
  static constexpr uint32_t kDoomed = 1u << 31;
  static Result<std::unique_ptr<DramTier>> Create(const StoreOptions& options);

  // A record with room for `size` bytes (rounded up to pages), or kNoRecord.
  uint32_t Allocate(uint32_t size);
  Record& rec(uint32_t id) { return records_[id]; }
  std::byte* Data(uint32_t id) {
    return arena_->base() + static_cast<uint64_t>(records_[id].page) * 4096;
  }
  // Frees a record that was never published (an aborted reservation, a lost race).
  void Free(uint32_t id);
  void Pin(uint32_t id) { records_[id].state.fetch_add(1, std::memory_order_acquire); }
  void Unpin(uint32_t id);
  uint32_t Pins(uint32_t id) const {
    return records_[id].state.load(std::memory_order_acquire) & ~kDoomed;
  }
  // The record has left the index: free it now, or when its last pin goes.
  void Doom(uint32_t id);
  void Touch(uint32_t id) {
    auto& f = records_[id].freq;
    uint8_t v = f.load(std::memory_order_relaxed);
    if (v < 3) f.store(static_cast<uint8_t>(v + 1), std::memory_order_relaxed);
    records_[id].used.store(true, std::memory_order_relaxed);
  }

  // Enter the probation queue, or main directly (ghost hit, promotion from flash).
  void Link(uint32_t id, bool main);
  // Moves `id` right behind `parent` (toward eviction) if both are in the same queue and
  // the parent was linked recently (the chain is being stored now). An old parent (a
  // shared system prompt deep in the queue) leaves its new child at the head.
  void PlaceBehind(uint32_t id, uint32_t parent);
  // Leave whichever queue the record is in (no-op if none).
  void Unlink(uint32_t id);

  struct Victim {
    uint32_t id;
    uint32_t gen;  // the record's generation when picked
    BlockKey key;  // its key then (read under the policy lock, so consistent)
    bool one_hit;  // leaving probation unused: dropped, not written to flash
  };
  // Chooses up to `max` victims and unlinks them. The caller evicts each, or Links it back,
  // after checking under the key's shard lock that the entry still names (id, gen): a
  // victim may be erased, freed and reused by another key in between.
  size_t PickVictims(size_t max, Victim* out);

  // Ghost list of keys recently dropped from probation (approximate, fixed size).
  void GhostInsert(const BlockKey& key);
  bool GhostContains(const BlockKey& key) const;
  void SetGhostWindow(uint64_t blocks) { ghost_window_.store(blocks, std::memory_order_relaxed); }

  uint64_t capacity_bytes() const { return uint64_t{pages_.total_pages()} * 4096; }
  uint64_t free_bytes() const { return uint64_t{pages_.free_pages()} * 4096; }
  uint64_t blocks() const { return live_.load(std::memory_order_relaxed); }
  const char* page_kind() const { return arena_->page_kind(); }

 private:
  enum Queue : uint8_t { kNone = 0, kSmall = 1, kMain = 2 };
  struct List {
    uint32_t head = kNoRecord, tail = kNoRecord;
    uint64_t pages = 0, count = 0;
  };
  DramTier(std::unique_ptr<mem::Arena> arena, uint32_t pages, uint32_t max_records,
           double probation_fraction, bool probation);
  void PushHeadLocked(List& l, Queue q, uint32_t id);
  void RemoveLocked(List& l, uint32_t id);

  std::unique_ptr<mem::Arena> arena_;
  mem::PageAllocator pages_;
  std::unique_ptr<Record[]> records_;
  std::mutex free_mu_;
  std::vector<uint32_t> free_records_;  // GUARDED_BY(free_mu_)
  std::atomic<uint64_t> live_{0};

  const bool probation_;
  const uint64_t probation_pages_;
  std::mutex policy_mu_;
  List small_, main_;          // GUARDED_BY(policy_mu_)
  uint32_t link_counter_ = 0;  // GUARDED_BY(policy_mu_)

  // Ghost slots: fingerprint (high 32 bits) | insertion epoch (low 32 bits).
  std::unique_ptr<std::atomic<uint64_t>[]> ghost_;
  uint64_t ghost_mask_ = 0;
  std::atomic<uint64_t> ghost_epoch_{0};
  std::atomic<uint64_t> ghost_window_{1 << 16};
};

}  // namespace kvpool::engine

#endif  // KVPOOL_ENGINE_DRAM_TIER_H_
