// TieredStore: the Store of include/kvpool/store.h, over a DramTier and (optionally) a
// FlashLog on an io::Device.
//
// Lock order: index shard -> policy mutex -> allocator mutexes; index shard -> flash log
// mutex. No thread holds two shard locks at once. Flash I/O is never done under a lock:
// records being written are pinned, and flash reads are validated afterwards (CRC and
// region generation).
//
// A block's life: Put -> DRAM (probation queue). Evicted from DRAM: dropped if a valid
// flash copy exists, else written to the flash log (demoted) unless flash admission
// refuses it (the write budget, or kProbation's one-hit rule: then dropped, and the ghost
// remembers it). A flash hit is read into a new DRAM record and verified, then published
// as the DRAM copy (promoted; the flash copy stays valid, so a later DRAM eviction of it
// costs no write). Erasing or overwriting a block releases its flash copy's pages, which
// the log counts as free when it picks the next region to reuse.
//
// Warm restart: the flash log keeps a summary per region on the device (flash_log.h);
// Open rebuilds the index from them (newest copy of a key wins), and a clean close writes
// the DRAM-only blocks to flash first (flush_on_close). An erase or overwrite of a block
// with a flash copy returns once the copy's summary says it is dead, so it never comes
// back after a crash.
#ifndef KVPOOL_ENGINE_TIERED_STORE_H_
#define KVPOOL_ENGINE_TIERED_STORE_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/histogram.h"
#include "common/mutex.h"
#include "engine/dram_tier.h"
#include "engine/flash_log.h"
#include "engine/index.h"
#include "engine/policy_tuner.h"
#include "engine/write_budget.h"
#include "io/device.h"
#include "kvpool/store.h"

namespace kvpool::engine {

class TieredStore final : public Store {
 public:
  // `device` may be null (DRAM only). Takes ownership.
  static Result<std::unique_ptr<TieredStore>> Open(const StoreOptions& options,
                                                   std::unique_ptr<io::Device> device);
  ~TieredStore() override;

  Status Put(const BlockKey& key, std::span<const std::byte> value,
             const PutOptions& options) override;
  Result<Reservation> Reserve(const BlockKey& key, size_t size, const PutOptions& options) override;
  Status Commit(Reservation reservation) override;
  Status CommitVerified(Reservation reservation, uint32_t expected_crc) override;
  Status CommitChecksummed(Reservation reservation, uint32_t crc) override;
  Result<size_t> Get(const BlockKey& key, std::span<std::byte> buffer) override;
  Result<BlockView> Read(const BlockKey& key) override;
  Result<BlockView> ReadResident(const BlockKey& key) override;
  Status ReadBatch(std::span<const BlockKey> keys, std::span<Result<BlockView>> out,
                   Deadline deadline = {}) override;
  bool Exists(const BlockKey& key) override;
  Status Erase(const BlockKey& key) override;
  Status PutBatch(std::span<PutOp> ops, bool overwrite = false, Deadline deadline = {}) override;
  Status GetBatch(std::span<GetOp> ops, Deadline deadline = {}) override;
  Status ExistsBatch(std::span<KeyOp> ops, Deadline deadline = {}) override;
  Status EraseBatch(std::span<KeyOp> ops, Deadline deadline = {}) override;
  Result<size_t> MatchPrefix(std::span<const BlockKey> chain, Deadline deadline = {}) override;
  void Prefetch(std::span<const BlockKey> keys) override;
  void Quiesce() override;
  void Clear() override;
  StoreStats GetStats() const override;
  void SetQuota(uint16_t tenant, const TenantQuota& quota) override;
  TenantUsage Usage(uint16_t tenant) const override;
  std::vector<HeldBlock> ListBlocks(size_t max) override;
  std::span<std::byte> DramMemory() const override { return dram_->memory(); }

  const char* dram_page_kind() const { return dram_->page_kind(); }

 protected:
  void Abort(Reservation& reservation) override;
  void ReleaseView(BlockView& view) override;

 private:
  struct Counters {
    std::atomic<uint64_t> puts{0}, put_exists{0}, put_rejected{0}, gets{0}, misses{0}, erases{0},
        dram_hits{0}, flash_hits{0}, dram_bytes_in{0}, dram_bytes_out{0}, dram_evictions{0},
        demotions{0}, promotions{0}, admission_drops{0}, budget_drops{0}, prefetch_requests{0},
        prefetched{0}, crc_failures{0}, io_errors{0}, stale_races{0}, compacted{0}, reinserted{0},
        restored{0}, regions_dropped{0}, quota_evictions{0}, hits_in_place{0};
  };
  struct FlashRead;

  TieredStore(const StoreOptions& options, std::unique_ptr<DramTier> dram,
              std::unique_ptr<io::Device> device);
  // Rebuilds the index from the flash log's summaries (or formats it). Called once by Open.
  Status Recover();
  // Writes every dirty DRAM block to flash and seals the log (destructor, clean close).
  void FlushForClose();
  Status CheckSize(size_t size) const;
  // True (counted as a re-put, and a use) if `key` is held: a put without overwrite is
  // then answered Exists without allocating.
  bool HeldAlready(const BlockKey& key, size_t size);
  BlockView PinResident(const BlockKey& key, size_t* flash_size);
  // REQUIRES: the shard lock of e, which is in DRAM. A view of its record, pinned.
  BlockView PinLocked(const IndexEntry& e);
  // A DRAM hit handed out as `view`: counted, a use, its latency since t0, the tuner told.
  void CountDramHit(const BlockKey& key, const BlockView& view, uint64_t t0);
  void ReadUnpinned(std::span<const BlockKey> keys, std::span<const size_t> sizes,
                    std::span<Result<BlockView>> out);
  // A DRAM record for `size` bytes, evicting as needed. `may_write`: eviction may write
  // dirty blocks to flash (put path); otherwise it only drops (read path). kNoRecord if
  // no room could be made.
  uint32_t AllocateRecord(uint32_t size, bool may_write, uint16_t tenant = 0);
  // Evicts up to `max` victims; returns how many records were freed or queued for freeing.
  size_t EvictSome(size_t max, bool may_write);
  // Evicts victims picked by the DRAM tier (dropped, or written to flash); returns how
  // many records were freed or queued for freeing.
  size_t EvictVictims(DramTier::Victim* victims, size_t n, bool may_write);
  // Quotas (SetQuota). Before a put of `size` bytes for `tenant`: evicts the tenant's own
  // coldest DRAM blocks until the put fits its DRAM quota; kNoSpace if it cannot.
  Status MakeTenantRoom(uint16_t tenant, uint32_t size);
  // After demotions for `tenant`: releases its oldest flash blocks while it is over its
  // flash quota.
  void EnforceFlashQuota(uint16_t tenant);
  // The tenant of the flash block at (page, gen): a look into the flash log under its
  // lock, skipped (0) while no block was ever stored for a tenant.
  uint16_t TenantOnFlash(uint32_t page, uint32_t gen) const {
    if (!flash_ || !tenants_seen_.load(std::memory_order_relaxed)) return 0;
    return flash_->TenantAt(page, gen);
  }
  bool OverDramQuota(uint16_t tenant, uint64_t more) const {
    uint64_t q = tenant ? dram_quota_[tenant].load(std::memory_order_relaxed) : 0;
    return q != 0 && dram_->tenant_bytes(tenant) + more > q;
  }
  // REQUIRES: crc is the CRC32C of the reservation's bytes.
  // A two-phase put's commit: the put latency recorded is Reserve's time plus the commit's
  // since t0 (the time the bytes took to arrive between the two is the caller's).
  Status CommitTimed(Reservation reservation, uint32_t crc, uint64_t t0);
  Status CommitWithCrc(Reservation reservation, uint32_t crc);
  Status Publish(uint32_t id, const BlockKey& key, const PutOptions& options, uint32_t crc);
  // REQUIRES: the shard lock of e->key. Removes the entry and unlinks its DRAM record,
  // which it returns (or kNoRecord) for the caller to Doom.
  // `*flash` (optional) is set if a flash copy was released: the caller Persists before
  // acknowledging.
  uint32_t EraseEntryLocked(Index::Shard& shard, IndexEntry* e, bool* flash = nullptr)
      REQUIRES(shard.mu);
  // REQUIRES: the shard lock of e.key. The entry's flash copy, if any, is no longer live.
  // True if it had one.
  bool ReleaseFlashLocked(const IndexEntry& e);
  bool FlashValidLocked(const IndexEntry& e) const;
  void PlaceBehindParent(uint32_t id, const BlockKey& parent);
  // Reads flash-resident ops (one device batch), promoting into DRAM. copy_out false:
  // prefetch (no caller buffer; nothing read when no DRAM record is free).
  // `attempt`: a read that lost a race with compaction (the block moved and its old
  // region was reused while the read was in flight) is tried again at the block's new
  // place, up to twice.
  void ReadFromFlash(std::span<FlashRead> reads, bool copy_out, int attempt = 0);
  void GetBatchAttempt(std::span<GetOp> ops, int attempt);
  void ReadMany(std::span<const BlockKey> keys, std::span<Result<BlockView>> out);
  void PromoteKeys(const std::vector<BlockKey>& keys);
  size_t MatchPrefixInIndex(std::span<const BlockKey> chain);
  // Shows an access to the policy tuner (if any, and if the key is sampled); applies its
  // new choice. Call with no lock held.
  void Observe(const BlockKey& key, uint32_t size, bool put) {
    if (tuner_ && tuner_->Sampled(key)) {
      tuner_->OfferAccess(key, (size + 4095) / 4096, put);
      DrainTunerInline();
    }
  }
  // Without a mover thread the tuner's queue is drained by the caller (deterministic).
  void DrainTunerInline() {
    if (!mover_.joinable()) {
      DrainTuner();
    } else if (tuner_->backlog() && !mover_wanted_.exchange(true, std::memory_order_acq_rel)) {
      mover_cv_.Signal();  // without flash nothing else wakes the mover
    }
  }
  void DrainTuner() {
    if (tuner_ && tuner_->Drain()) {
      dram_->SetBonus(tuner_->bonus());
      dram_->SetProbation(tuner_->probation());
    }
  }
  // Blocks that went with flash regions appends just took: removed now (told to the
  // listener with their tenant), instead of found stale later; a DRAM copy stays.
  void DropLost(const std::vector<FlashLog::Located>& lost);
  void SweepStale(size_t slots);
  // When fewer than two flash regions (besides the head's) are empty, moves the live blocks of the
  // region with least live data to the head (read, verified, appended, written, re-pointed) so that
  // region can be reused without losing them. Up to eight regions per call, until three
  // are empty; one thread at a time (the others wait: they need the space too). When no
  // region qualifies (the log is full of live data), reinserts instead: the used blocks of
  // the regions the head takes next are moved, the rest go with their region.
  // `want`: empty regions to aim for (a batch of demotions about to be appended needs
  // that many besides the margin).
  void CompactSome(uint32_t want = 3);
  // Moves one region's live blocks (REQUIRES compact_mu_); false if no region qualifies.
  bool CompactRegion();
  // Moves the used blocks of the next region to be taken (REQUIRES compact_mu_); false if
  // none of the next `ahead` regions holds any.
  bool ReinsertSome(uint32_t ahead);
  // Moves `keys` of `region` to the head (REQUIRES compact_mu_); counts each moved in
  // `moved`.
  void MoveBlocks(uint32_t region, const std::vector<FlashLog::Located>& keys,
                  std::atomic<uint64_t>& moved);
  // How many victims one eviction round takes (see the definition).
  size_t EvictionBatch() const;
  void MaybeWakeMover();
  void MoverLoop();

  const StoreOptions options_;
  Index index_;
  std::unique_ptr<DramTier> dram_;
  std::unique_ptr<io::Device> device_;
  std::unique_ptr<FlashLog> flash_;
  std::unique_ptr<PolicyTuner> tuner_;   // null: the reuse bonus is fixed
  std::unique_ptr<WriteBudget> budget_;  // null: flash writes unlimited
  const uint64_t free_target_bytes_;
  // kMaxTenants each: bytes allowed (0: no limit).
  std::unique_ptr<std::atomic<uint64_t>[]> dram_quota_, flash_quota_;
  std::atomic<bool> tenants_seen_{false};  // a block was stored (or found) with a tenant

  mutable Counters c_;
  Histogram put_hist_, get_dram_hist_, get_flash_hist_;

  std::atomic<bool> closing_{false};  // FlushForClose: flash admission and budget set aside
  Mutex compact_mu_;
  Mutex sweep_mu_;
  unsigned sweep_shard_ GUARDED_BY(sweep_mu_) = 0;
  size_t sweep_slot_ GUARDED_BY(sweep_mu_) = 0;

  Mutex mover_mu_;
  CondVar mover_cv_, idle_cv_;
  std::deque<BlockKey> prefetch_queue_ GUARDED_BY(mover_mu_);
  uint64_t requested_passes_ GUARDED_BY(mover_mu_) = 0;
  uint64_t done_passes_ GUARDED_BY(mover_mu_) = 0;
  bool stop_ GUARDED_BY(mover_mu_) = false;
  std::atomic<bool> mover_wanted_{false};
  std::thread mover_;
};

}  // namespace kvpool::engine

#endif  // KVPOOL_ENGINE_TIERED_STORE_H_
