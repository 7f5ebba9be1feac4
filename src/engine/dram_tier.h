// The DRAM tier: the arena, its page allocator, one record per resident block, and the
// eviction policy over those records.
//
// Policy: a probation FIFO in front of a main queue ordered by priority (S3-FIFO's shape,
// Yang et al., SOSP'23, with its main FIFO replaced). New blocks enter probation (or main
// directly when probation is off); a block used while there moves to main. Main evicts
// the lowest priority = last use + reuse bonus x past uses (at most 3), in a clock that
// counts the pages linked: a block used again outlives newer one-time blocks, by the
// bonus's worth of them per use (fixed by the options, or set by the store's PolicyTuner;
// SetBonus re-keys the heap, the one time keys may shrink). Hits store the clock and bump
// the use count in the record (two relaxed atomics: no lock, no queue move on reads); the
// heap keeps each record's key as of its push, a lower bound (keys only grow), and an
// entry that surfaces with a stale key is pushed again with the current one.
// Prefix rule: a new block whose parent was used or stored just now takes the parent's
// last use and leaves before it (ties go to the later linked), so a chain leaves leaf
// first. (Passing over parents that still have children was tried first: it kept stale
// parents alive a whole extra cycle and cost 3 points of hit ratio on the Mooncake trace.)
//
// Tenants: each record is charged to its tenant (PutOptions::tenant) from Allocate to
// Free, and a linked record of a tenant is also in that tenant's list, in linking order,
// from which PickTenantVictims takes the tenant's own coldest blocks (quota eviction).
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

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/mutex.h"
#include "kvpool/key.h"
#include "kvpool/options.h"
#include "kvpool/store.h"
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
  uint32_t heap_seq = 0;  // GUARDED_BY(policy mutex): names the record's current heap entry
  uint16_t tenant = 0;    // whose bytes (PutOptions::tenant); set by Allocate
  // GUARDED_BY(policy mutex): the tenant's list, which a queued record of a tenant is in.
  uint32_t tprev = kNoRecord, tnext = kNoRecord;
  std::atomic<uint64_t> last_use{0};  // policy clock at the last use (or at linking)
  std::atomic<uint8_t> freq{0};       // uses after the first, at most 3
  std::atomic<bool> used{false};      // hit at least once since it entered DRAM
  std::atomic<uint32_t> state{0};     // pins, plus kDoomed
};

class DramTier {
 public:
  static constexpr uint32_t kDoomed = 1u << 31;
  // `flash_bytes`: the flash tier's size (0: none); the reuse bonus is a share of both.
  static Result<std::unique_ptr<DramTier>> Create(const StoreOptions& options,
                                                  uint64_t flash_bytes = 0);

  // A record with room for `size` bytes (rounded up to pages), charged to `tenant`, or
  // kNoRecord. REQUIRES: tenant < kMaxTenants.
  uint32_t Allocate(uint32_t size, uint16_t tenant = 0);
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
  static constexpr uint8_t kMaxUses = 3;
  // A use (a hit, a re-put): counted, and the block's recency renewed.
  void Touch(uint32_t id) {
    Record& r = records_[id];
    uint8_t v = r.freq.load(std::memory_order_relaxed);
    if (v < kMaxUses) r.freq.store(static_cast<uint8_t>(v + 1), std::memory_order_relaxed);
    r.used.store(true, std::memory_order_relaxed);
    r.last_use.store(clock_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  // Past uses the block earned before this record (its flash copy, a ghost of it).
  void SetUses(uint32_t id, uint8_t uses) {
    records_[id].freq.store(std::min(uses, kMaxUses), std::memory_order_relaxed);
  }
  uint8_t Uses(uint32_t id) const { return records_[id].freq.load(std::memory_order_relaxed); }
  // The eviction priority of a record now (lowest goes first): for listing hottest first.
  uint64_t Priority(uint32_t id) const { return KeyOf(records_[id]); }

  // Enter the probation queue, or main directly (ghost hit, promotion from flash), with
  // recency now.
  void Link(uint32_t id, bool main);
  // Orders `id` just before `parent` toward eviction if the parent was used or linked
  // just now (the chain is being stored). An old parent (a shared system prompt not used
  // for long) leaves its new child's recency as it is.
  void PlaceBehind(uint32_t id, uint32_t parent);
  // A new reuse bonus, in DRAM-fulls per past use (the policy tuner's choice): every main
  // queue record is re-keyed at once, O(records).
  void SetBonus(double dram_fulls);
  // A new share of DRAM for the probation queue (the policy tuner's choice, with flash).
  void SetProbation(double fraction);
  uint64_t bonus_pages() const { return bonus_pages_.load(std::memory_order_relaxed); }
  // Leave whichever queue the record is in (no-op if none).
  void Unlink(uint32_t id);

  struct Victim {
    uint32_t id;
    uint32_t gen;                 // the record's generation when picked
    BlockKey key;                 // its key then (read under the policy lock, so consistent)
    bool one_hit;                 // leaving probation unused: dropped, not written to flash
    bool from_probation = false;  // picked from the probation queue (where PutBack returns it)
  };
  // Chooses up to `max` victims and unlinks them. The caller evicts each, or returns it
  // (PutBack; Link if it is in use right now), after checking under the key's shard lock
  // that the entry still names (id, gen): a victim may be erased, freed and reused by
  // another key in between.
  size_t PickVictims(size_t max, Victim* out);
  // A victim the caller could not evict (it must be written, and the caller may not
  // write) goes back where it was: a probation block to the tail, a main block with its
  // priority as it was. Linking it back (Link) would count as a use and make it the
  // newest block, which turned the DRAM's coldest blocks into its hottest each time a
  // flash hit looked for room.
  void PutBack(const Victim& v);
  // As PickVictims, among `tenant`'s blocks only, until they hold `bytes` (at most `max`):
  // of its longest-linked few, unused probation blocks first, then the lowest priority.
  size_t PickTenantVictims(uint16_t tenant, uint64_t bytes, size_t max, Victim* out);
  // Bytes (whole pages) of the records charged to `tenant`.
  uint64_t tenant_bytes(uint16_t tenant) const {
    return tenant_pages_[tenant].load(std::memory_order_relaxed) * 4096;
  }

  // Ghost list of keys recently dropped (from probation unused, or from flash after a
  // use), with their past uses; approximate, fixed size.
  void GhostInsert(const BlockKey& key, uint8_t uses = 0);
  // The ghost's past uses, or -1 if the key has none.
  int GhostUses(const BlockKey& key) const;
  // How many dropped blocks the ghost remembers (its slots).
  uint64_t ghost_capacity() const { return ghost_slots_; }

  uint64_t capacity_bytes() const { return uint64_t{pages_.total_pages()} * 4096; }
  uint64_t free_bytes() const { return uint64_t{pages_.free_pages()} * 4096; }
  uint64_t blocks() const { return live_.load(std::memory_order_relaxed); }
  const char* page_kind() const { return arena_->page_kind(); }
  std::span<std::byte> memory() const { return {arena_->base(), arena_->size()}; }

 private:
  enum Queue : uint8_t { kNone = 0, kSmall = 1, kMain = 2 };
  struct List {
    uint32_t head = kNoRecord, tail = kNoRecord;
    uint64_t pages = 0, count = 0;
  };
  struct HeapItem {
    uint64_t key;
    uint32_t id, seq;
  };
  DramTier(std::unique_ptr<mem::Arena> arena, uint32_t pages, uint32_t max_records,
           double probation_fraction, bool probation, uint64_t bonus_pages);
  // A doubly linked list through a record's (prev, next) pair of links: the queues' or the
  // tenant's.
  void ListPushFront(List& l, uint32_t id, uint32_t Record::*prev, uint32_t Record::*next);
  void ListPushBack(List& l, uint32_t id, uint32_t Record::*prev, uint32_t Record::*next);
  void ListRemove(List& l, uint32_t id, uint32_t Record::*prev, uint32_t Record::*next);
  void PushHeadLocked(List& l, Queue q, uint32_t id) REQUIRES(policy_mu_);
  void PushTailLocked(List& l, Queue q, uint32_t id) REQUIRES(policy_mu_);
  void RemoveLocked(List& l, uint32_t id) REQUIRES(policy_mu_);
  // Enter / leave the record's tenant list (no-op for tenant 0) as it enters / leaves a
  // queue.
  void PushTenantLocked(uint32_t id) REQUIRES(policy_mu_);
  void RemoveTenantLocked(uint32_t id) REQUIRES(policy_mu_);
  // Leaves its queue and its tenant's list.
  void UnlinkLocked(uint32_t id) REQUIRES(policy_mu_);
  uint64_t KeyOf(const Record& r) const {
    return r.last_use.load(std::memory_order_relaxed) +
           bonus_pages_.load(std::memory_order_relaxed) * r.freq.load(std::memory_order_relaxed);
  }
  // Main queue (the heap; main_ keeps only its counts).
  void PushMainLocked(uint32_t id) REQUIRES(policy_mu_);
  void RemoveMainLocked(uint32_t id) REQUIRES(policy_mu_);
  void HeapPushLocked(const HeapItem& item) REQUIRES(policy_mu_);
  HeapItem HeapPopLocked() REQUIRES(policy_mu_);
  // Drops entries that no longer name their record's place, when they outnumber the rest.
  void MaybeCompactHeapLocked() REQUIRES(policy_mu_);
  // Rebuilds the heap from the records' current keys, dropping stale entries.
  void RekeyHeapLocked() REQUIRES(policy_mu_);

  std::unique_ptr<mem::Arena> arena_;
  mem::PageAllocator pages_;
  std::unique_ptr<Record[]> records_;
  Mutex free_mu_;
  std::vector<uint32_t> free_records_ GUARDED_BY(free_mu_);
  std::atomic<uint64_t> live_{0};

  const bool probation_;
  uint64_t probation_pages_ GUARDED_BY(policy_mu_);
  // Clock ticks one past use is worth. Written under policy_mu_ (which then re-keys the
  // heap: keys may shrink); read by KeyOf, always under policy_mu_.
  std::atomic<uint64_t> bonus_pages_;
  Mutex policy_mu_;
  List small_ GUARDED_BY(policy_mu_);
  List main_ GUARDED_BY(policy_mu_);
  uint32_t link_counter_ GUARDED_BY(policy_mu_) = 0;
  uint32_t heap_counter_ GUARDED_BY(policy_mu_) = 0;
  std::vector<HeapItem> heap_ GUARDED_BY(policy_mu_);            // min key on top
  std::unique_ptr<List[]> tenant_lists_ GUARDED_BY(policy_mu_);  // kMaxTenants of them
  // kMaxTenants: pages charged (tenant 0, nobody's, is not counted: every untenanted
  // allocation would contend on one counter).
  std::unique_ptr<std::atomic<uint64_t>[]> tenant_pages_;
  // Pages linked so far: the policy's clock. Written under policy_mu_, read by Touch.
  std::atomic<uint64_t> clock_{0};

  // Ghost slots, in buckets of four: fingerprint (high 32 bits, never 0) | past uses
  // (2 bits) | insertion epoch (30 bits); 0 is empty. An entry counts for as many inserts
  // as the table has slots (a FIFO's memory).
  std::unique_ptr<std::atomic<uint64_t>[]> ghost_;
  uint64_t ghost_slots_ = 0;
  uint64_t ghost_mask_ = 0;  // of bucket numbers
  std::atomic<uint64_t> ghost_epoch_{0};
};

}  // namespace kvpool::engine

#endif  // KVPOOL_ENGINE_DRAM_TIER_H_
