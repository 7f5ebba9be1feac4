#include "engine/tiered_store.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/clock.h"
#include "common/crc32c.h"

namespace kvpool::engine {
namespace {
constexpr size_t kEvictBatch = 32;
constexpr uint32_t Pages(uint32_t size) { return (size + 4095) / 4096; }
}  // namespace

struct TieredStore::FlashRead {
  GetOp* op = nullptr;                // a get: copied into op->buffer
  Result<BlockView>* view = nullptr;  // a read: the promoted record, pinned, as a view
  BlockKey key;
  uint32_t page = 0, gen = 0, size = 0, crc = 0;
  uint32_t rec = kNoRecord;  // DRAM record the data lands in, or kNoRecord: bounce buffer
  bool stay = false;         // left on flash by the policy's choice, not promoted
  std::byte* buf = nullptr;
  uint64_t start_ns = 0;
};

Result<std::unique_ptr<TieredStore>> TieredStore::Open(const StoreOptions& options,
                                                       std::unique_ptr<io::Device> device) {
  Status s = options.Validate();
  if (!s.ok()) return s;
  if (device && device->size() < options.region_bytes * 2) {
    return Status::InvalidArgument("flash device smaller than two regions");
  }
  auto dram = DramTier::Create(options, device ? device->size() : 0);
  if (!dram.ok()) return dram.status();
  std::unique_ptr<TieredStore> store(
      new TieredStore(options, std::move(dram).value(), std::move(device)));
  s = store->Recover();
  if (!s.ok()) return s;
  return store;
}

Status TieredStore::Recover() {
  if (!flash_) return Status::Ok();
  std::vector<FlashLog::Recovered> found;
  FlashLog::OpenStats st;
  Status s = flash_->Open(options_.flash_restore, &found, &st);
  if (!s.ok()) return s;
  // Ascending sequence: a later copy of a key replaces an earlier one (same bytes: a
  // reinsertion or a compaction move whose old copy's death had not reached the device).
  for (const FlashLog::Recovered& r : found) {
    if (r.tenant) tenants_seen_.store(true, std::memory_order_relaxed);
    Index::Shard& shard = index_.ShardFor(r.key);
    MutexLock lock(shard.mu);
    IndexEntry* e = shard.Find(r.key);
    if (e) {
      flash_->Release(e->flash_page(), e->aux, Pages(e->size()));
    } else {
      e = shard.Insert(r.key);
    }
    e->crc = r.crc;
    e->loc = 0;
    e->set_size(r.size);
    e->set_flash(r.page);
    e->aux = r.gen;
  }
  flash_->Persist();
  c_.restored.store(flash_->blocks(), std::memory_order_relaxed);
  c_.regions_dropped.store(st.regions_dropped, std::memory_order_relaxed);
  return Status::Ok();
}

TieredStore::TieredStore(const StoreOptions& options, std::unique_ptr<DramTier> dram,
                         std::unique_ptr<io::Device> device)
    : options_(options),
      index_(options.index_capacity, options.index_shards, options.prefault),
      dram_(std::move(dram)),
      device_(std::move(device)),
      // Without flash an eviction is a drop, as cheap inline as in the background: nothing
      // is kept free (on the Mooncake trace 5% kept free cost 0.008 of prefix hit ratio).
      free_target_bytes_(device_ ? static_cast<uint64_t>(options.dram_free_target *
                                                         static_cast<double>(options.dram_bytes))
                                 : 0),
      dram_quota_(new std::atomic<uint64_t>[kMaxTenants]),
      flash_quota_(new std::atomic<uint64_t>[kMaxTenants]) {
  for (uint32_t t = 0; t < kMaxTenants; ++t) {
    dram_quota_[t].store(0, std::memory_order_relaxed);
    flash_quota_[t].store(0, std::memory_order_relaxed);
  }
  if (device_) flash_ = std::make_unique<FlashLog>(device_.get(), options.region_bytes);
  if (flash_ && options_.admission == Admission::kBudget && options_.flash_writes_per_day > 0) {
    double cap = static_cast<double>(flash_->capacity_bytes());
    budget_ = std::make_unique<WriteBudget>(cap * options_.flash_writes_per_day / 86400.0,
                                            flash_->capacity_bytes(), options_.clock_ns);
  }
  if (options_.reuse_bonus == StoreOptions::kReuseBonusAuto) {
    // With flash under the budget admission it also learns whether one-hit blocks earn
    // their flash writes.
    bool learn_admission = flash_ && options_.admission == Admission::kBudget;
    tuner_ = std::make_unique<PolicyTuner>(options_.dram_bytes / 4096, dram_->ghost_capacity(), 0.0,
                                           learn_admission ? flash_->capacity_bytes() / 4096 : 0,
                                           options_.probation_fraction);
    dram_->SetBonus(tuner_->bonus());
  }
  // A removed block's tenant: its DRAM record's, or its flash slot's (0 once the slot's
  // region was taken: a stale entry the sweep finds).
  index_.set_listener(options.listener, [this](const IndexEntry& e) -> uint16_t {
    if (e.in_dram()) return dram_->rec(e.aux).tenant;
    return e.on_flash() ? TenantOnFlash(e.flash_page(), e.aux) : 0;
  });
  if (options_.background_mover) mover_ = std::thread([this] { MoverLoop(); });
}

TieredStore::~TieredStore() {
  if (mover_.joinable()) {
    {
      MutexLock lock(mover_mu_);
      stop_ = true;
    }
    mover_cv_.SignalAll();
    mover_.join();
  }
  FlushForClose();
}

void TieredStore::FlushForClose() {
  if (!flash_) return;
  if (options_.flush_on_close) {
    closing_.store(true, std::memory_order_relaxed);
    // Every record leaves DRAM: clean ones are dropped, dirty ones written. Bounded: each
    // round frees at least one record or ends the loop.
    for (size_t rounds = dram_->blocks() + 16; rounds > 0 && dram_->blocks() > 0; --rounds) {
      if (EvictSome(kEvictBatch, /*may_write=*/true) == 0) break;
    }
  }
  flash_->Close();
}

Status TieredStore::CheckSize(size_t size) const {
  if (size == 0) return Status::InvalidArgument("empty value");
  if (size > options_.max_value_bytes) {
    return Status::TooLarge("value of " + std::to_string(size) + " bytes exceeds max_value_bytes " +
                            std::to_string(options_.max_value_bytes));
  }
  return Status::Ok();
}

bool TieredStore::FlashValidLocked(const IndexEntry& e) const {
  if (!e.on_flash() || !flash_) return false;
  uint32_t gen = e.in_dram() ? dram_->rec(e.aux).flash_gen : e.aux;
  return flash_->Valid(e.flash_page(), gen);
}

void TieredStore::MaybeWakeMover() {
  if (!mover_.joinable() || dram_->free_bytes() >= free_target_bytes_) return;
  if (!mover_wanted_.exchange(true, std::memory_order_acq_rel)) mover_cv_.Signal();
}

size_t TieredStore::EvictionBatch() const {
  // A batch takes one policy lock and one device submit. Without flash it frees at most
  // 1/256 of the blocks held: 32 at once left a small cache 10% empty for nothing (chat
  // trace at 2%: 0.291 against 0.305 evicting one at a time). With flash the room kept
  // free is what a flash hit is promoted into without writing; a batch frees at most the
  // free target's share of the blocks (32 blocks were a quarter of a 128-block DRAM: chat
  // at 2% held 0.80 of it and hit 0.250; at 1/256 the chat family at 10% promoted 69% of
  // its flash hits instead of all, 0.573 against 0.598).
  auto blocks = static_cast<double>(dram_->blocks());
  double share = flash_ ? options_.dram_free_target : 1.0 / 256;
  return std::clamp<size_t>(static_cast<size_t>(blocks * share), 1, kEvictBatch);
}

uint32_t TieredStore::AllocateRecord(uint32_t size, bool may_write, uint16_t tenant) {
  // A put evicts until its block fits: a large block needs a contiguous run, which may
  // take many evictions in a DRAM fragmented by small blocks (64 rounds of 32 victims
  // used to give up with NoSpace while flash had room). When nothing can be evicted right
  // now (victims pinned by readers or by demotions in flight) it waits for them, up to
  // kPutWait. The read path (a promotion) only drops clean blocks and gives up soon.
  constexpr uint64_t kPutWait = 2'000'000'000;  // ns
  uint64_t deadline = 0;
  for (int attempt = 0;; ++attempt) {
    uint32_t id = dram_->Allocate(size, tenant);
    if (id != kNoRecord) {
      MaybeWakeMover();
      return id;
    }
    if (!may_write && attempt >= 64) return kNoRecord;
    size_t batch = EvictionBatch();
    if (EvictSome(batch, may_write) > 0) continue;
    if (!may_write) {
      if (attempt > 8) return kNoRecord;
      MaybeWakeMover();
      std::this_thread::yield();
      continue;
    }
    uint64_t now = NowNanos();
    if (deadline == 0) deadline = now + kPutWait;
    if (now > deadline) return kNoRecord;
    MaybeWakeMover();
    std::this_thread::sleep_for(std::chrono::microseconds(attempt < 16 ? 0 : 100));
  }
}

void TieredStore::PlaceBehindParent(uint32_t id, const BlockKey& parent) {
  if (parent.empty()) return;
  Index::Shard& shard = index_.ShardFor(parent);
  MutexLock lock(shard.mu);
  IndexEntry* p = shard.Find(parent);
  if (p && p->in_dram()) dram_->PlaceBehind(id, p->aux);
}

bool TieredStore::ReleaseFlashLocked(const IndexEntry& e) {
  if (!e.on_flash() || !flash_) return false;
  uint32_t gen = e.in_dram() ? dram_->rec(e.aux).flash_gen : e.aux;
  flash_->Release(e.flash_page(), gen, Pages(e.size()));
  return true;
}

uint32_t TieredStore::EraseEntryLocked(Index::Shard& shard, IndexEntry* e, bool* flash) {
  uint32_t doomed = kNoRecord;
  bool released = ReleaseFlashLocked(*e);
  if (flash) *flash = released;
  if (e->in_dram()) {
    doomed = e->aux;
    dram_->Unlink(doomed);
  }
  shard.Erase(e);
  return doomed;
}

void TieredStore::CompactSome(uint32_t want) {
  // Three: the head's own region counts as empty until its first block lands. A batch of
  // demotions can fill a region, and a region moved half live frees half of one, so this
  // keeps going (a few regions at most) until the margin is back.
  // Another thread compacting makes this one wait: its demotions need the space too.
  if (!flash_ || flash_->empty_regions() >= want) return;
  MutexLock guard(compact_mu_);
  for (uint32_t i = 0; i < std::max<uint32_t>(8, 2 * want) && flash_->empty_regions() < want; ++i) {
    if (!CompactRegion()) {
      // The log is full of live data: the regions to be taken next lose their blocks, but
      // not those used since they were written.
      uint32_t empty = flash_->empty_regions();
      uint32_t short_by = want > empty ? want - empty : 0;
      for (uint32_t j = 0; j < short_by; ++j) {
        if (!ReinsertSome(short_by)) break;
      }
      break;
    }
  }
}

bool TieredStore::CompactRegion() {
  uint32_t region;
  std::vector<FlashLog::Located> keys;
  if (!flash_->CompactionCandidate(&region, &keys)) return false;
  MoveBlocks(region, keys, c_.compacted);
  return true;
}

bool TieredStore::ReinsertSome(uint32_t ahead) {
  uint32_t region;
  std::vector<FlashLog::Located> keys;
  if (!flash_->ReinsertionCandidate(ahead, &region, &keys)) return false;
  MoveBlocks(region, keys, c_.reinserted);
  return true;
}

void TieredStore::MoveBlocks(uint32_t region, const std::vector<FlashLog::Located>& keys,
                             std::atomic<uint64_t>& moved) {
  struct Move {
    BlockKey key;
    uint16_t tenant;
    uint32_t page, gen, size, crc;
    std::byte* buf;
    FlashLog::Extent to;
    bool ok;
    bool stay;
  };
  std::vector<Move> moves;
  std::vector<FlashLog::Located> lost;
  for (const FlashLog::Located& candidate : keys) {
    const BlockKey& key = candidate.key;
    Index::Shard& shard = index_.ShardFor(key);
    MutexLock lock(shard.mu);
    IndexEntry* e = shard.Find(key);
    if (!e || !e->on_flash() || flash_->region_of(e->flash_page()) != region) continue;
    if (!FlashValidLocked(*e)) continue;
    if (e->in_dram()) {  // DRAM holds it: the flash copy is a spare, not worth moving
      ReleaseFlashLocked(*e);
      e->clear_flash();
      continue;
    }
    moves.push_back({key,
                     candidate.tenant,
                     e->flash_page(),
                     e->aux,
                     e->size(),
                     e->crc,
                     nullptr,
                     {},
                     false,
                     false});
  }
  // Read them all, append them at the head, re-point the entries, then release the old
  // copies (the region becomes empty and reusable).
  std::vector<io::IoRequest> reqs;
  for (Move& m : moves) {
    m.buf = static_cast<std::byte*>(std::aligned_alloc(4096, uint64_t{Pages(m.size)} * 4096));
    reqs.push_back(
        {io::IoRequest::Op::kRead, uint64_t{m.page} * 4096, m.buf, Pages(m.size) * 4096, {}});
  }
  device_->Submit(reqs);
  for (size_t i = 0; i < moves.size(); ++i) {
    moves[i].ok = reqs[i].status.ok() && Crc32c(moves[i].buf, moves[i].size) == moves[i].crc;
  }
  reqs.clear();
  for (Move& m : moves) {
    // A move is a flash write like any other: within the budget, or the block stays where
    // it is (and goes with its region if that is taken).
    if (m.ok && budget_ && !budget_->Admit(uint64_t{Pages(m.size)} * 4096, /*used=*/true)) {
      m.stay = true;
      m.ok = false;
      continue;
    }
    uint32_t ev = 0;
    if (m.ok && flash_->Append(Pages(m.size), m.key, m.size, m.crc, m.tenant, &m.to, &ev, &lost)) {
      reqs.push_back(
          {io::IoRequest::Op::kWrite, uint64_t{m.to.page} * 4096, m.buf, Pages(m.size) * 4096, {}});
    } else {
      m.ok = false;
    }
  }
  device_->Submit(reqs);
  size_t ri = 0;
  for (Move& m : moves) {
    if (m.stay) {
      std::free(m.buf);
      continue;
    }
    bool written = m.ok && reqs[ri++].status.ok();
    Index::Shard& shard = index_.ShardFor(m.key);
    {
      MutexLock lock(shard.mu);
      IndexEntry* e = shard.Find(m.key);
      bool same =
          e && !e->in_dram() && e->on_flash() && e->flash_page() == m.page && e->aux == m.gen;
      // The old copy is released only now that nothing points at it: released earlier,
      // its region could be reused while the entry still named it, and the entry would be
      // swept as stale (a lost block, 1 run in 20 with the mover).
      if (same && written) {
        e->set_flash(m.to.page);
        e->aux = m.to.gen;
        flash_->Release(m.page, m.gen, Pages(m.size));
        moved.fetch_add(1, std::memory_order_relaxed);
      } else if (m.ok) {
        flash_->Release(m.to.page, m.to.gen, Pages(m.size));  // moved for nothing
      }
    }
    if (m.ok) flash_->Written(m.to);
    std::free(m.buf);
  }
  flash_->Persist();  // the emptied region's summary says its blocks moved
  DropLost(lost);
}

size_t TieredStore::EvictSome(size_t max, bool may_write) {
  if (may_write) CompactSome();
  DramTier::Victim victims[kEvictBatch];
  size_t n = dram_->PickVictims(std::min(max, kEvictBatch), victims);
  return EvictVictims(victims, n, may_write);
}

size_t TieredStore::EvictVictims(DramTier::Victim* victims, size_t n, bool may_write) {
  struct Write {
    uint32_t id;
    BlockKey key;
    uint32_t crc;
    FlashLog::Extent ext;
    bool placed;
  };
  Write writes[kEvictBatch];
  size_t nw = 0, freed = 0;
  // Blocks leaving probation unused are refused by the probation admission, and by the
  // budget admission while its tuner finds them not worth the room they take in a full
  // flash (with room to spare, everything is kept).
  bool refuse_one_hit = options_.admission == Admission::kProbation ||
                        (tuner_ && flash_ && !tuner_->admit_one_hit() &&
                         flash_->used_bytes() >= flash_->capacity_bytes() / 4 * 3);
  uint32_t to_doom[kEvictBatch];
  size_t nd = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t id = victims[i].id;
    Record& r = dram_->rec(id);
    BlockKey key = victims[i].key;
    Index::Shard& shard = index_.ShardFor(key);
    MutexLock lock(shard.mu);
    IndexEntry* e = shard.Find(key);
    // Erased or replaced meanwhile (and maybe the record reused by another key).
    if (!e || !e->in_dram() || e->aux != id || r.gen != victims[i].gen) continue;
    if (dram_->Pins(id) > 0) {
      dram_->Link(id, true);  // in use right now: keep it
      continue;
    }
    bool clean = FlashValidLocked(*e);
    bool one_hit = victims[i].one_hit;
    bool closing = closing_.load(std::memory_order_relaxed);
    bool write = flash_ && !clean && (closing || !(one_hit && refuse_one_hit));
    // A block larger than its tenant's whole flash quota is not written.
    uint64_t fq = r.tenant ? flash_quota_[r.tenant].load(std::memory_order_relaxed) : 0;
    if (write && fq != 0 && uint64_t{r.pages} * 4096 > fq) {
      write = false;
      if (!clean) c_.quota_evictions.fetch_add(1, std::memory_order_relaxed);
    }
    bool refused = !write && flash_ && !clean && one_hit;
    if (write && !may_write) {  // the read path only drops: a dirty block stays, unrefreshed
      dram_->PutBack(victims[i]);
      continue;
    }
    if (write && budget_ && !closing &&
        !budget_->Admit(uint64_t{r.pages} * 4096, /*used=*/!one_hit)) {
      write = false;
      refused = !clean;
      if (refused) c_.budget_drops.fetch_add(1, std::memory_order_relaxed);
    }
    if (!write) {
      if (refused) c_.admission_drops.fetch_add(1, std::memory_order_relaxed);
      if (clean) {
        e->set_in_dram(false);
        e->set_uses(dram_->Uses(id));
        e->aux = r.flash_gen;
        // Used in DRAM: its flash copy is worth keeping when its region is taken.
        if (r.used.load(std::memory_order_relaxed)) flash_->Touch(e->flash_page(), e->aux);
      } else {
        dram_->GhostInsert(key, dram_->Uses(id));  // dropped: remembered, with its uses
        shard.Erase(e);
      }
      c_.dram_evictions.fetch_add(1, std::memory_order_relaxed);
      to_doom[nd++] = id;
      continue;
    }
    dram_->Pin(id);  // held across the write so the pages stay put
    writes[nw++] = {id, key, e->crc, {}, false};
  }
  for (size_t i = 0; i < nd; ++i) {
    dram_->Doom(to_doom[i]);
  }
  freed += nd;
  if (nw == 0) return freed;
  // The batch may fill several regions (large blocks, small regions): make room for all of
  // it, so that appending it takes emptied regions rather than ones still holding live data.
  uint64_t batch_pages = 0;
  for (size_t i = 0; i < nw; ++i) batch_pages += dram_->rec(writes[i].id).pages;
  uint64_t region_pages = options_.region_bytes / 4096;
  CompactSome(static_cast<uint32_t>(std::min<uint64_t>(
      (batch_pages + region_pages - 1) / region_pages + 2, flash_->region_count() / 2)));

  io::IoRequest reqs[kEvictBatch];
  std::vector<FlashLog::Located> lost;  // live blocks of the regions these appends took
  size_t nr = 0;
  uint32_t evicted_regions = 0;
  for (size_t i = 0; i < nw; ++i) {
    Record& r = dram_->rec(writes[i].id);
    uint32_t ev = 0;
    writes[i].placed = flash_->Append(r.pages, writes[i].key, r.size, writes[i].crc, r.tenant,
                                      &writes[i].ext, &ev, &lost);
    evicted_regions += ev;
    if (!writes[i].placed) continue;
    reqs[nr++] = {io::IoRequest::Op::kWrite,
                  uint64_t{writes[i].ext.page} * 4096,
                  dram_->Data(writes[i].id),
                  r.pages * 4096,
                  {}};
  }
  device_->Submit(std::span<io::IoRequest>(reqs, nr));
  size_t ri = 0;
  uint16_t tenants[kEvictBatch];
  size_t nt = 0;
  for (size_t i = 0; i < nw; ++i) {
    Write& w = writes[i];
    uint16_t t = dram_->rec(w.id).tenant;
    if (t && flash_quota_[t].load(std::memory_order_relaxed) &&
        std::find(tenants, tenants + nt, t) == tenants + nt) {
      tenants[nt++] = t;
    }
    bool ok = false;
    if (w.placed) {
      ok = reqs[ri].status.ok();
      ++ri;
    }
    if (w.placed && !ok) c_.io_errors.fetch_add(1, std::memory_order_relaxed);
    Index::Shard& shard = index_.ShardFor(w.key);
    bool doom = false;
    {
      MutexLock lock(shard.mu);
      IndexEntry* e = shard.Find(w.key);
      if (e && e->in_dram() && e->aux == w.id) {
        if (ok) {
          e->set_flash(w.ext.page);
          e->set_in_dram(false);
          e->set_uses(dram_->Uses(w.id));
          e->aux = w.ext.gen;
          c_.demotions.fetch_add(1, std::memory_order_relaxed);
        } else {
          shard.Erase(e);  // lost: the block becomes a miss
        }
        c_.dram_evictions.fetch_add(1, std::memory_order_relaxed);
        doom = true;
      }
      // Written for nothing (failed, or the block was erased or replaced meanwhile).
      if (w.placed && !(ok && doom)) flash_->Release(w.ext.page, w.ext.gen, dram_->rec(w.id).pages);
    }
    if (w.placed) flash_->Written(w.ext);
    if (doom) {
      dram_->Doom(w.id);
    }
    dram_->Unpin(w.id);
    ++freed;
  }
  flash_->Persist();  // summaries of regions this batch completed
  DropLost(lost);
  for (size_t i = 0; i < nt; ++i) EnforceFlashQuota(tenants[i]);
  if (evicted_regions > 0) {
    SweepStale(
        static_cast<size_t>(evicted_regions) *
        (index_.Bytes() / sizeof(IndexEntry) / std::max<uint32_t>(1, flash_->region_count()) + 64));
  }
  return freed;
}

Status TieredStore::MakeTenantRoom(uint16_t tenant, uint32_t size) {
  uint64_t quota = tenant ? dram_quota_[tenant].load(std::memory_order_relaxed) : 0;
  if (quota == 0) return Status::Ok();
  uint64_t need = uint64_t{std::max<uint32_t>(1, Pages(size))} * 4096;
  if (need > quota) {
    return Status::NoSpace("a value of " + std::to_string(size) +
                           " bytes is larger than its tenant's DRAM quota of " +
                           std::to_string(quota) + " bytes");
  }
  // The tenant's own blocks make the room; when all of them are in use (reserved, or
  // pinned by readers) it waits for them as a put waits for DRAM, up to 2 s.
  constexpr uint64_t kWait = 2'000'000'000;  // ns
  uint64_t deadline = 0;
  while (dram_->tenant_bytes(tenant) + need > quota) {
    DramTier::Victim victims[kEvictBatch];
    uint64_t over = dram_->tenant_bytes(tenant) + need - quota;
    size_t n = dram_->PickTenantVictims(tenant, over, kEvictBatch, victims);
    size_t freed = n ? EvictVictims(victims, n, /*may_write=*/true) : 0;
    if (freed > 0) {
      c_.quota_evictions.fetch_add(freed, std::memory_order_relaxed);
      continue;
    }
    uint64_t now = NowNanos();
    if (deadline == 0) deadline = now + kWait;
    if (now > deadline) {
      return Status::NoSpace("its tenant's DRAM quota of " + std::to_string(quota) +
                             " bytes is full of blocks in use (reserved, or pinned by readers)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return Status::Ok();
}

void TieredStore::EnforceFlashQuota(uint16_t tenant) {
  uint64_t quota = flash_quota_[tenant].load(std::memory_order_relaxed);
  if (!flash_ || quota == 0) return;
  uint64_t held = flash_->tenant_bytes(tenant);
  if (held <= quota) return;
  std::vector<FlashLog::Located> oldest;
  flash_->OldestOf(tenant, held - quota, 1024, &oldest);
  for (const FlashLog::Located& b : oldest) {
    Index::Shard& shard = index_.ShardFor(b.key);
    MutexLock lock(shard.mu);
    IndexEntry* e = shard.Find(b.key);
    bool here = e && e->on_flash() && e->flash_page() == b.page &&
                (e->in_dram() ? dram_->rec(e->aux).flash_gen : e->aux) == b.gen;
    flash_->Release(b.page, b.gen, b.pages);
    if (here && e->in_dram()) {
      e->clear_flash();  // the DRAM copy stays (written again if it leaves DRAM)
    } else if (here) {
      dram_->GhostInsert(e->key, e->uses());
      shard.Erase(e);
    }
    c_.quota_evictions.fetch_add(1, std::memory_order_relaxed);
  }
  flash_->Persist();
}

void TieredStore::SetQuota(uint16_t tenant, const TenantQuota& quota) {
  if (tenant == 0 || tenant >= kMaxTenants) return;
  dram_quota_[tenant].store(quota.dram_bytes, std::memory_order_relaxed);
  flash_quota_[tenant].store(flash_ ? quota.flash_bytes : 0, std::memory_order_relaxed);
}

TenantUsage TieredStore::Usage(uint16_t tenant) const {
  if (tenant >= kMaxTenants) return {};
  return {dram_->tenant_bytes(tenant), flash_ ? flash_->tenant_bytes(tenant) : 0};
}

void TieredStore::DropLost(const std::vector<FlashLog::Located>& lost) {
  for (const FlashLog::Located& b : lost) {
    Index::Shard& shard = index_.ShardFor(b.key);
    MutexLock lock(shard.mu);
    IndexEntry* e = shard.Find(b.key);
    if (!e || !e->on_flash() || e->flash_page() != b.page) continue;
    if (e->in_dram()) {  // only its flash copy is gone
      if (dram_->rec(e->aux).flash_gen == b.gen) e->clear_flash();
      continue;
    }
    if (e->aux != b.gen) continue;
    dram_->GhostInsert(e->key, e->uses());  // as the sweep would have
    shard.Erase(e, b.tenant);
  }
}

void TieredStore::SweepStale(size_t slots) {
  MutexLock sweep(sweep_mu_);
  while (slots > 0) {
    Index::Shard& shard = index_.shard(sweep_shard_);
    MutexLock lock(shard.mu);
    size_t n = std::min(slots, shard.capacity() - std::min(shard.capacity(), sweep_slot_));
    shard.EraseIf(sweep_slot_, n, [this](const IndexEntry& e) {
      bool stale = !e.in_dram() && !FlashValidLocked(e);
      // It leaves a ghost: put again soon, it counts as used again and keeps its standing.
      if (stale) dram_->GhostInsert(e.key, e.uses());
      return stale;
    });
    slots -= std::min(slots, n);
    sweep_slot_ += n;
    if (sweep_slot_ >= shard.capacity()) {
      sweep_slot_ = 0;
      sweep_shard_ = (sweep_shard_ + 1) % index_.shard_count();
    }
    if (n == 0) break;
  }
}

Status TieredStore::Publish(uint32_t id, const BlockKey& key, const PutOptions& options,
                            uint32_t crc) {
  Record& r = dram_->rec(id);
  const uint32_t size = r.size;  // r may be reused by another thread once published
  Observe(key, size, /*put=*/true);
  r.key = key;
  Index::Shard& shard = index_.ShardFor(key);
  uint32_t replaced = kNoRecord;
  bool replaced_flash = false;
  {
    MutexLock lock(shard.mu);
    IndexEntry* e = shard.Find(key);
    // A stale entry (its flash region was evicted, the sweep has not reached it yet) is a
    // miss, and also a ghost: the block was held recently, so it re-enters the main queue.
    bool ghost = false;
    if (e && !e->in_dram() && !FlashValidLocked(*e)) {
      dram_->SetUses(id, e->uses() + 1);  // and its past uses with it, this put one more
      shard.Erase(e);
      e = nullptr;
      ghost = true;
    }
    if (e && !options.overwrite) {
      if (e->in_dram()) dram_->Touch(e->aux);  // a re-put is a use
      c_.put_exists.fetch_add(1, std::memory_order_relaxed);
      dram_->Free(id);
      return Status::Exists();
    }
    if (e) {
      replaced = EraseEntryLocked(shard, e, &replaced_flash);
    }
    IndexEntry* n = shard.Insert(key);
    n->crc = crc;
    n->set_size(r.size);
    n->set_in_dram(true);
    n->aux = id;
    int ghost_uses = dram_->GhostUses(key);
    if (ghost_uses >= dram_->Uses(id)) dram_->SetUses(id, static_cast<uint8_t>(ghost_uses + 1));
    dram_->Link(id, ghost || ghost_uses >= 0);
    if (options_.listener)
      options_.listener->OnStored(key, options.parent, r.size, options.token_ids, options.tenant);
  }
  if (replaced != kNoRecord) {
    dram_->Doom(replaced);
  }
  // The old value's flash copy is dead on the device before the overwrite is acknowledged.
  if (replaced_flash) flash_->Persist();
  PlaceBehindParent(id, options.parent);
  c_.puts.fetch_add(1, std::memory_order_relaxed);
  c_.dram_bytes_in.fetch_add(size, std::memory_order_relaxed);
  return Status::Ok();
}

Status TieredStore::Put(const BlockKey& key, std::span<const std::byte> value,
                        const PutOptions& options) {
  uint64_t t0 = NowNanos();
  auto res = Reserve(key, value.size(), options);
  if (!res.ok()) return res.status();
  // Copy and checksum in cache-sized chunks: the CRC reads each chunk while it is still
  // in L2 instead of fetching the whole value back from DRAM (1 MiB puts: ~1.4x faster).
  constexpr size_t kChunk = 64 * 1024;
  std::byte* dst = res->data().data();
  uint32_t crc = 0;
  for (size_t off = 0; off < value.size(); off += kChunk) {
    size_t n = std::min(kChunk, value.size() - off);
    std::memcpy(dst + off, value.data() + off, n);
    crc = Crc32cExtend(crc, dst + off, n);
  }
  Status s = CommitWithCrc(std::move(res).value(), crc);
  put_hist_.Record(NowNanos() - t0);
  return s;
}

Result<Reservation> TieredStore::Reserve(const BlockKey& key, size_t size,
                                         const PutOptions& options) {
  uint64_t t0 = NowNanos();
  Status s = CheckSize(size);
  if (!s.ok()) {
    c_.put_rejected.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  if (key.empty()) return Status::InvalidArgument("the zero key is reserved");
  if (!options.overwrite && HeldAlready(key, size)) return Status::Exists();
  if (options.tenant >= kMaxTenants) return Status::InvalidArgument("tenant id out of range");
  if (options.tenant && !tenants_seen_.load(std::memory_order_relaxed)) {
    tenants_seen_.store(true, std::memory_order_relaxed);
  }
  s = MakeTenantRoom(options.tenant, static_cast<uint32_t>(size));
  if (!s.ok()) {
    c_.put_rejected.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  uint32_t id = AllocateRecord(static_cast<uint32_t>(size), /*may_write=*/true, options.tenant);
  if (id == kNoRecord) {
    c_.put_rejected.fetch_add(1, std::memory_order_relaxed);
    return Status::NoSpace("DRAM tier full: nothing evictable for 2 s (all pinned by readers)");
  }
  Reservation r;
  r.owner_ = this;
  r.data_ = std::span<std::byte>(dram_->Data(id), size);
  r.key_ = key;
  r.options_ = options;
  r.record_ = id;
  r.reserve_ns_ = NowNanos() - t0;
  return r;
}

std::vector<HeldBlock> TieredStore::ListBlocks(size_t max) {
  struct Ranked {
    uint64_t priority;  // DRAM: the eviction priority (higher: kept longer); flash: uses
    HeldBlock block;
  };
  std::vector<Ranked> all;
  for (unsigned i = 0; i < index_.shard_count(); ++i) {
    Index::Shard& shard = index_.shard(i);
    MutexLock lock(shard.mu);
    shard.ForEach([&](const IndexEntry& e) {
      if (e.in_dram()) {
        all.push_back({dram_->Priority(e.aux), {e.key, e.size(), true, dram_->Uses(e.aux)}});
      } else if (FlashValidLocked(e)) {  // a stale flash copy is not held
        all.push_back({e.uses(), {e.key, e.size(), false, e.uses()}});
      }
    });
  }
  // Hottest first: DRAM before flash, then by priority; the cut keeps the hottest `max`.
  auto hotter = [](const Ranked& a, const Ranked& b) {
    if (a.block.in_dram != b.block.in_dram) return a.block.in_dram;
    return a.priority > b.priority;
  };
  if (all.size() > max) {
    std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(max), all.end(),
                     hotter);
    all.resize(max);
  }
  std::sort(all.begin(), all.end(), hotter);
  std::vector<HeldBlock> out;
  out.reserve(all.size());
  for (const Ranked& r : all) out.push_back(r.block);
  return out;
}

bool TieredStore::HeldAlready(const BlockKey& key, size_t size) {
  // Answered before any DRAM is allocated: allocating first would evict other blocks to
  // make room for a copy that Publish then throws away (an engine re-putting the blocks
  // after a missing one cost the conversation of another user each time).
  Index::Shard& shard = index_.ShardFor(key);
  {
    MutexLock lock(shard.mu);
    IndexEntry* e = shard.Find(key);
    if (!e || !(e->in_dram() || FlashValidLocked(*e))) return false;
    if (e->in_dram()) dram_->Touch(e->aux);  // a re-put is a use
  }
  c_.put_exists.fetch_add(1, std::memory_order_relaxed);
  Observe(key, static_cast<uint32_t>(size), /*put=*/true);
  return true;
}

Status TieredStore::Commit(Reservation reservation) {
  if (reservation.owner_ != this) return Status::InvalidArgument("reservation of another store");
  uint64_t t0 = NowNanos();
  // CRC computed once, at commit, over the bytes as they sit in DRAM; it travels with the
  // index entry and is checked on every flash read.
  uint32_t crc = Crc32c(reservation.data_.data(), reservation.data_.size());
  return CommitTimed(std::move(reservation), crc, t0);
}

Status TieredStore::CommitVerified(Reservation reservation, uint32_t expected_crc) {
  if (reservation.owner_ != this) return Status::InvalidArgument("reservation of another store");
  uint64_t t0 = NowNanos();
  uint32_t crc = Crc32c(reservation.data_.data(), reservation.data_.size());
  if (crc != expected_crc) {
    c_.put_rejected.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption("value CRC32C does not match the one sent with it");
  }  // the reservation's destructor releases the slot
  return CommitTimed(std::move(reservation), crc, t0);
}

Status TieredStore::CommitChecksummed(Reservation reservation, uint32_t crc) {
  if (reservation.owner_ != this) return Status::InvalidArgument("reservation of another store");
  return CommitTimed(std::move(reservation), crc, NowNanos());
}

Status TieredStore::CommitTimed(Reservation reservation, uint32_t crc, uint64_t t0) {
  uint64_t reserve_ns = reservation.reserve_ns_;
  Status s = CommitWithCrc(std::move(reservation), crc);
  put_hist_.Record(reserve_ns + (NowNanos() - t0));
  return s;
}

Status TieredStore::CommitWithCrc(Reservation reservation, uint32_t crc) {
  uint32_t id = reservation.record_;
  reservation.owner_ = nullptr;  // ownership of the record passes to Publish
  return Publish(id, reservation.key_, reservation.options_, crc);
}

void TieredStore::Abort(Reservation& reservation) {
  dram_->Free(reservation.record_);
  reservation.owner_ = nullptr;
}

void TieredStore::ReadFromFlash(std::span<FlashRead> reads, bool copy_out, int attempt) {
  std::vector<GetOp*> moved;  // lost a race with a move: read again where the block went
  std::vector<size_t> moved_views;
  // Scratch kept by the thread: a flash hit allocates nothing once it has been used.
  thread_local std::vector<io::IoRequest> reqs;
  thread_local std::vector<size_t> req_of;
  reqs.clear();
  req_of.assign(reads.size(), SIZE_MAX);
  for (size_t i = 0; i < reads.size(); ++i) {
    FlashRead& fr = reads[i];
    // Promoted into DRAM, charged to the block's tenant; a tenant at its DRAM quota reads
    // its flash blocks without promoting them. So does a get or read of a block far from
    // the log's end while the policy tuner finds that promotions cost more room than they
    // are worth (the read marks it: reinsertion keeps it when its region is taken; a view
    // of it owns a copy).
    uint16_t tenant = TenantOnFlash(fr.page, fr.gen);
    fr.stay =
        (fr.op || fr.view) && tuner_ && !tuner_->promote_all() && flash_->InNewerHalf(fr.page);
    fr.rec = fr.stay || OverDramQuota(tenant, uint64_t{Pages(fr.size)} * 4096)
                 ? kNoRecord
                 : AllocateRecord(fr.size, /*may_write=*/false, tenant);
    if (fr.rec != kNoRecord) {
      fr.buf = dram_->Data(fr.rec);
    } else if (copy_out) {
      fr.buf = static_cast<std::byte*>(std::aligned_alloc(4096, Pages(fr.size) * 4096));
    }
    if (!fr.buf) continue;  // prefetch with no room: skipped
    req_of[i] = reqs.size();
    reqs.push_back(
        {io::IoRequest::Op::kRead, uint64_t{fr.page} * 4096, fr.buf, Pages(fr.size) * 4096, {}});
  }
  device_->Submit(std::span<io::IoRequest>(reqs));
  for (size_t i = 0; i < reads.size(); ++i) {
    FlashRead& fr = reads[i];
    if (req_of[i] == SIZE_MAX) continue;
    const io::IoRequest& rq = reqs[req_of[i]];
    bool io_ok = rq.status.ok();
    bool crc_ok = io_ok && Crc32c(fr.buf, fr.size) == fr.crc;
    bool promoted = false, retry = false;
    Index::Shard& shard = index_.ShardFor(fr.key);
    {
      MutexLock lock(shard.mu);
      IndexEntry* e = shard.Find(fr.key);
      bool same = e && e->on_flash() && e->flash_page() == fr.page &&
                  (e->in_dram() ? dram_->rec(e->aux).flash_gen : e->aux) == fr.gen &&
                  flash_->Valid(fr.page, fr.gen);
      if (!crc_ok) {
        if (!same) {
          c_.stale_races.fetch_add(1, std::memory_order_relaxed);
          retry = e && copy_out && attempt < 2 && (fr.op || fr.view);
        } else {
          (io_ok ? c_.crc_failures : c_.io_errors).fetch_add(1, std::memory_order_relaxed);
          // The flash copy is bad: forget it (a DRAM copy, if any, is still good).
          ReleaseFlashLocked(*e);
          if (e->in_dram()) {
            e->clear_flash();
          } else {
            shard.Erase(e);
          }
        }
      } else if (fr.rec != kNoRecord && same && !e->in_dram()) {
        Record& r = dram_->rec(fr.rec);
        r.key = fr.key;
        r.flash_gen = fr.gen;
        dram_->SetUses(fr.rec, e->uses());
        // A flash hit is a use (a prefetch is not).
        if (copy_out) dram_->Touch(fr.rec);
        e->set_in_dram(true);
        e->aux = fr.rec;
        dram_->Link(fr.rec, /*main=*/true);
        // Once published the record can be evicted by others: hold it while copying out
        // (a view keeps this pin until it is destroyed).
        dram_->Pin(fr.rec);
        promoted = true;
      }
      // Read where it lies: worth keeping when its region is taken (a prefetch is not a use).
      if (crc_ok && same && (fr.op || fr.view)) flash_->Touch(fr.page, fr.gen);
    }
    bool hit = crc_ok && (fr.op || fr.view);
    if (hit && fr.op) {
      if (copy_out) std::memcpy(fr.op->buffer.data(), fr.buf, fr.size);
      fr.op->size = fr.size;
      fr.op->crc = fr.crc;
      fr.op->status = Status::Ok();
    } else if (hit && promoted) {  // the view is the promoted record, pinned: no copy
      BlockView v;
      v.owner_ = this;
      v.record_ = fr.rec;
      v.data_ = std::span<const std::byte>(fr.buf, fr.size);
      v.crc_ = fr.crc;
      *fr.view = std::move(v);
    } else if (hit) {  // not promoted (no room, or a race): a copy the view owns
      BlockView v;
      v.owned_.reset(new std::byte[fr.size]);
      std::memcpy(v.owned_.get(), fr.buf, fr.size);
      v.data_ = std::span<const std::byte>(v.owned_.get(), fr.size);
      v.crc_ = fr.crc;
      *fr.view = std::move(v);
    } else if (retry) {
      if (fr.op) moved.push_back(fr.op);
      if (fr.view) moved_views.push_back(i);
    } else if (fr.op || fr.view) {
      if (fr.op) fr.op->status = Status::NotFound();
      if (fr.view) *fr.view = Status::NotFound();
      c_.misses.fetch_add(1, std::memory_order_relaxed);
    }
    if (hit) {
      c_.flash_hits.fetch_add(1, std::memory_order_relaxed);
      if (fr.stay) c_.hits_in_place.fetch_add(1, std::memory_order_relaxed);
      get_flash_hist_.Record(NowNanos() - fr.start_ns);
    }
    if (promoted) {
      if (!fr.view) dram_->Unpin(fr.rec);
      c_.promotions.fetch_add(1, std::memory_order_relaxed);
      if (!copy_out) c_.prefetched.fetch_add(1, std::memory_order_relaxed);
    } else if (fr.rec != kNoRecord) {
      dram_->Free(fr.rec);
    } else {
      std::free(fr.buf);
    }
  }
  if (!moved.empty()) {
    std::vector<GetOp> again;
    for (GetOp* op : moved) again.push_back(*op);
    GetBatchAttempt(again, attempt + 1);
    for (size_t i = 0; i < moved.size(); ++i) *moved[i] = std::move(again[i]);
  }
  for (size_t i : moved_views) {  // the block moved while it was read: look it up again
    size_t size = reads[i].size;
    ReadUnpinned(std::span<const BlockKey>(&reads[i].key, 1), std::span<const size_t>(&size, 1),
                 std::span<Result<BlockView>>(reads[i].view, 1));
  }
}

Result<size_t> TieredStore::Get(const BlockKey& key, std::span<std::byte> buffer) {
  GetOp op{key, buffer, 0, 0, {}};
  GetBatchAttempt(std::span<GetOp>(&op, 1), 0);
  if (!op.status.ok()) return op.status;
  return op.size;
}

BlockView TieredStore::PinLocked(const IndexEntry& e) {
  BlockView view;
  dram_->Pin(e.aux);
  view.owner_ = this;
  view.record_ = e.aux;
  view.data_ = std::span<const std::byte>(dram_->Data(e.aux), e.size());
  view.crc_ = e.crc;
  return view;
}

void TieredStore::CountDramHit(const BlockKey& key, const BlockView& view, uint64_t t0) {
  c_.dram_hits.fetch_add(1, std::memory_order_relaxed);
  c_.dram_bytes_out.fetch_add(view.data_.size(), std::memory_order_relaxed);
  dram_->Touch(view.record_);
  get_dram_hist_.Record(NowNanos() - t0);
  Observe(key, static_cast<uint32_t>(view.data_.size()), false);
}

// The DRAM part of a read: a pinned view of a resident block, or (view empty) the size
// of a flash-only copy in *flash_size (0: not held).
BlockView TieredStore::PinResident(const BlockKey& key, size_t* flash_size) {
  uint64_t t0 = NowNanos();
  Index::Shard& shard = index_.ShardFor(key);
  BlockView view;
  *flash_size = 0;
  {
    MutexLock lock(shard.mu);
    IndexEntry* e = shard.Find(key);
    if (e && e->in_dram()) {
      view = PinLocked(*e);
    } else if (e) {
      *flash_size = e->size();
    }
  }
  if (view.owner_) {
    c_.gets.fetch_add(1, std::memory_order_relaxed);
    CountDramHit(key, view, t0);
  }
  return view;
}

Result<BlockView> TieredStore::ReadResident(const BlockKey& key) {
  size_t size = 0;
  BlockView view = PinResident(key, &size);
  if (view.owner_) return view;
  if (size > 0) return Status::Busy("held on flash only");
  Result<BlockView> out = Status::NotFound();
  ReadUnpinned(std::span<const BlockKey>(&key, 1), {}, std::span<Result<BlockView>>(&out, 1));
  return out;  // the miss, counted (and a stale entry cleaned) as by Read
}

Result<BlockView> TieredStore::Read(const BlockKey& key) {
  Result<BlockView> out = Status::NotFound();
  ReadMany(std::span<const BlockKey>(&key, 1), std::span<Result<BlockView>>(&out, 1));
  return out;
}

Status TieredStore::ReadBatch(std::span<const BlockKey> keys, std::span<Result<BlockView>> out,
                              Deadline deadline) {
  if (out.size() < keys.size()) return Status::InvalidArgument("fewer results than keys");
  if (deadline.passed()) return ExpireAll(out.first(keys.size()));
  ReadMany(keys, out);
  return Status::Ok();
}

void TieredStore::ReadMany(std::span<const BlockKey> keys, std::span<Result<BlockView>> out) {
  // One lookup a key: a DRAM hit is pinned in place; a flash hit is read into a new DRAM
  // record, which is published (promoted) and handed out pinned: no copy, and (a few keys
  // at a time) no heap allocation.
  constexpr size_t kInline = 8;
  FlashRead inline_reads[kInline];
  std::vector<FlashRead> many;
  if (keys.size() > kInline) many.reserve(keys.size());
  size_t nreads = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const BlockKey& key = keys[i];
    uint64_t t0 = NowNanos();
    c_.gets.fetch_add(1, std::memory_order_relaxed);
    Index::Shard& shard = index_.ShardFor(key);
    BlockView view;
    FlashRead fr;
    {
      MutexLock lock(shard.mu);
      IndexEntry* e = shard.Find(key);
      if (e && !e->in_dram() && !FlashValidLocked(*e)) {
        shard.Erase(e);  // its region was evicted
        e = nullptr;
      }
      if (e && e->in_dram()) {
        view = PinLocked(*e);
      } else if (e) {
        fr.key = key;
        fr.page = e->flash_page();
        fr.gen = e->aux;
        fr.size = e->size();
        fr.crc = e->crc;
        fr.start_ns = t0;
        fr.view = &out[i];
      }
    }
    if (view.owner_) {
      CountDramHit(key, view, t0);
      out[i] = std::move(view);
    } else if (fr.view) {
      Observe(key, fr.size, false);
      if (keys.size() > kInline) {
        many.push_back(fr);
      } else {
        inline_reads[nreads] = fr;
      }
      ++nreads;
    } else {
      out[i] = Status::NotFound();
      c_.misses.fetch_add(1, std::memory_order_relaxed);
      Observe(key, 0, false);
    }
  }
  if (nreads == 0) return;
  ReadFromFlash(keys.size() > kInline ? std::span<FlashRead>(many)
                                      : std::span<FlashRead>(inline_reads, nreads),
                /*copy_out=*/true);
}

void TieredStore::ReadUnpinned(std::span<const BlockKey> keys, std::span<const size_t> sizes,
                               std::span<Result<BlockView>> out) {
  // One GetBatch, so the flash reads go out together, each into memory its view owns; it
  // also counts the misses and flash hits, cleans stale entries and promotes. sizes[i] is
  // keys[i]'s flash copy's size as PinResident saw it (absent or 0: not held).
  std::vector<GetOp> ops(keys.size());
  std::vector<std::unique_ptr<std::byte[]>> owned(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    size_t size = i < sizes.size() ? sizes[i] : 0;
    if (size) owned[i] = std::make_unique<std::byte[]>(size);
    ops[i].key = keys[i];
    ops[i].buffer = std::span<std::byte>(owned[i].get(), size);
  }
  GetBatchAttempt(ops, 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    // Not held, or re-put with another size since it was looked up (a race): a miss.
    if (!ops[i].status.ok() || !owned[i]) {
      out[i] = ops[i].status.ok() || ops[i].status.code() == Code::kBufferTooSmall
                   ? Status::NotFound()
                   : ops[i].status;
      continue;
    }
    BlockView view;
    view.owned_ = std::move(owned[i]);
    view.data_ = std::span<const std::byte>(view.owned_.get(), ops[i].size);
    view.crc_ = ops[i].crc;
    out[i] = std::move(view);
  }
}

void TieredStore::ReleaseView(BlockView& view) { dram_->Unpin(view.record_); }

void TieredStore::Clear() {
  std::vector<uint32_t> doomed;
  for (unsigned i = 0; i < index_.shard_count(); ++i) {
    Index::Shard& shard = index_.shard(i);
    MutexLock lock(shard.mu);
    shard.EraseIf(0, shard.capacity(), [&](const IndexEntry& e) {
      ReleaseFlashLocked(e);
      if (e.in_dram()) {
        dram_->Unlink(e.aux);
        doomed.push_back(e.aux);
      }
      return true;
    });
  }
  for (uint32_t id : doomed) dram_->Doom(id);
  if (flash_) flash_->Persist();
}

Status TieredStore::GetBatch(std::span<GetOp> ops, Deadline deadline) {
  if (deadline.passed()) return ExpireAll(ops);
  GetBatchAttempt(ops, 0);
  return Status::Ok();
}

void TieredStore::GetBatchAttempt(std::span<GetOp> ops, int attempt) {
  std::vector<FlashRead> flash_reads;
  for (GetOp& op : ops) {
    uint64_t t0 = NowNanos();
    if (attempt == 0) c_.gets.fetch_add(1, std::memory_order_relaxed);
    Index::Shard& shard = index_.ShardFor(op.key);
    uint32_t id = kNoRecord;
    {
      MutexLock lock(shard.mu);
      IndexEntry* e = shard.Find(op.key);
      if (e && !e->in_dram() && !FlashValidLocked(*e)) {
        shard.Erase(e);  // its region was evicted
        e = nullptr;
      }
      if (!e) {
        op.status = Status::NotFound();
        c_.misses.fetch_add(1, std::memory_order_relaxed);
        lock.Unlock();
        Observe(op.key, 0, false);
        continue;
      }
      op.size = e->size();
      op.crc = e->crc;
      if (op.buffer.size() < op.size) {
        op.status = Status::BufferTooSmall("value is " + std::to_string(op.size) + " bytes");
        continue;
      }
      if (e->in_dram()) {
        id = e->aux;
        dram_->Pin(id);
      } else {
        FlashRead fr;
        fr.op = &op;
        fr.key = op.key;
        fr.page = e->flash_page();
        fr.gen = e->aux;
        fr.size = e->size();
        fr.crc = e->crc;
        fr.start_ns = t0;
        flash_reads.push_back(fr);
        lock.Unlock();
        Observe(op.key, fr.size, false);
        continue;
      }
    }
    std::memcpy(op.buffer.data(), dram_->Data(id), op.size);
    dram_->Touch(id);
    dram_->Unpin(id);
    Observe(op.key, static_cast<uint32_t>(op.size), false);
    op.status = Status::Ok();
    c_.dram_hits.fetch_add(1, std::memory_order_relaxed);
    c_.dram_bytes_out.fetch_add(op.size, std::memory_order_relaxed);
    get_dram_hist_.Record(NowNanos() - t0);
  }
  if (!flash_reads.empty()) ReadFromFlash(flash_reads, /*copy_out=*/true, attempt);
}

bool TieredStore::Exists(const BlockKey& key) {
  Index::Shard& shard = index_.ShardFor(key);
  MutexLock lock(shard.mu);
  IndexEntry* e = shard.Find(key);
  return e && (e->in_dram() || FlashValidLocked(*e));
}

Status TieredStore::Erase(const BlockKey& key) {
  Index::Shard& shard = index_.ShardFor(key);
  uint32_t doomed;
  bool on_flash = false;
  {
    MutexLock lock(shard.mu);
    IndexEntry* e = shard.Find(key);
    if (!e) return Status::NotFound();
    bool held = e->in_dram() || FlashValidLocked(*e);
    doomed = EraseEntryLocked(shard, e, &on_flash);
    if (!held) return Status::NotFound();
  }
  // Acknowledged once the flash copy's summary says it is dead: it never comes back.
  if (on_flash) flash_->Persist();
  if (doomed != kNoRecord) {
    dram_->Doom(doomed);
  }
  c_.erases.fetch_add(1, std::memory_order_relaxed);
  if (tuner_ && tuner_->Sampled(key)) {
    tuner_->OfferErase(key);
    DrainTunerInline();
  }
  return Status::Ok();
}

Status TieredStore::PutBatch(std::span<PutOp> ops, bool overwrite, Deadline deadline) {
  if (deadline.passed()) return ExpireAll(ops);
  for (PutOp& op : ops) {
    PutOptions o;
    o.parent = op.parent;
    o.overwrite = overwrite;
    o.token_ids = op.token_ids;
    o.tenant = op.tenant;
    op.status = Put(op.key, op.value, o);
  }
  return Status::Ok();
}

Status TieredStore::ExistsBatch(std::span<KeyOp> ops, Deadline deadline) {
  if (deadline.passed()) return ExpireAll(ops);
  for (KeyOp& op : ops) op.status = Exists(op.key) ? Status::Ok() : Status::NotFound();
  return Status::Ok();
}

Status TieredStore::EraseBatch(std::span<KeyOp> ops, Deadline deadline) {
  if (deadline.passed()) return ExpireAll(ops);
  for (KeyOp& op : ops) op.status = Erase(op.key);
  return Status::Ok();
}

Result<size_t> TieredStore::MatchPrefix(std::span<const BlockKey> chain, Deadline deadline) {
  if (deadline.passed()) return Status::Timeout("deadline passed before the call");
  size_t matched = MatchPrefixInIndex(chain);
  if (tuner_ && !chain.empty() && tuner_->Sampled(chain[0])) {
    // Once DRAM has been full, how much of it is held now (the two-tier simulations
    // follow): the rest is kept free for promotions and freed in batches.
    double held = -1;
    if (flash_ && c_.dram_evictions.load(std::memory_order_relaxed) > 0) {
      held = 1.0 - static_cast<double>(dram_->free_bytes()) /
                       static_cast<double>(dram_->capacity_bytes());
    }
    tuner_->OfferChain(chain, held);
    DrainTunerInline();
  }
  return matched;
}

size_t TieredStore::MatchPrefixInIndex(std::span<const BlockKey> chain) {
  // Up to 1024 keys at a time, grouped by index shard (a counting sort), so that each
  // shard's lock is taken once per group rather than once per key; the lowest missing
  // position ends the match. Long chains are answered 1024 keys at a time.
  constexpr size_t kPass = 1024;
  const size_t shards = index_.shard_count();
  std::vector<uint32_t> first(shards + 1);
  std::vector<uint16_t> shard_of(std::min(kPass, chain.size())), order(shard_of.size());
  for (size_t base = 0; base < chain.size(); base += kPass) {
    size_t n = std::min(kPass, chain.size() - base);
    std::fill(first.begin(), first.end(), 0);
    for (size_t i = 0; i < n; ++i) {
      shard_of[i] = static_cast<uint16_t>(index_.ShardIndex(chain[base + i]));
      ++first[shard_of[i] + 1];
    }
    for (size_t s = 0; s < shards; ++s) first[s + 1] += first[s];
    std::vector<uint32_t> fill(first.begin(), first.end() - 1);
    for (size_t i = 0; i < n; ++i) order[fill[shard_of[i]]++] = static_cast<uint16_t>(i);
    size_t missing = n;  // lowest position not held
    for (size_t s = 0; s < shards; ++s) {
      if (first[s] == first[s + 1]) continue;
      Index::Shard& shard = index_.shard(static_cast<unsigned>(s));
      MutexLock lock(shard.mu);
      for (uint32_t j = first[s]; j < first[s + 1]; ++j) shard.Prefetch(chain[base + order[j]]);
      for (uint32_t j = first[s]; j < first[s + 1]; ++j) {
        size_t i = order[j];
        if (i >= missing) continue;
        IndexEntry* e = shard.Find(chain[base + i]);
        if (!e || !(e->in_dram() || FlashValidLocked(*e))) {
          missing = i;
        } else if (!e->in_dram()) {
          // A matched block is about to be read: its flash copy is kept if its region is
          // taken before the read comes. (A block past a gap another shard finds later is
          // marked too: one reinsertion too many at worst.)
          flash_->Touch(e->flash_page(), e->aux);
        }
      }
    }
    if (missing < n) return base + missing;
  }
  return chain.size();
}

void TieredStore::PromoteKeys(const std::vector<BlockKey>& keys) {
  std::vector<FlashRead> reads;
  for (const BlockKey& key : keys) {
    Index::Shard& shard = index_.ShardFor(key);
    MutexLock lock(shard.mu);
    IndexEntry* e = shard.Find(key);
    if (!e || e->in_dram() || !FlashValidLocked(*e)) continue;
    FlashRead fr;
    fr.key = key;
    fr.page = e->flash_page();
    fr.gen = e->aux;
    fr.size = e->size();
    fr.crc = e->crc;
    reads.push_back(fr);
  }
  if (reads.empty()) return;
  // Room first, written out if need be (the read path below only drops clean blocks): a
  // prefetch runs on the mover, or for a store without one on the caller, which asked
  // for it. At most half of DRAM is made room for.
  uint64_t need = 0;
  for (const FlashRead& fr : reads) need += uint64_t{Pages(fr.size)} * 4096;
  need = std::min(need, dram_->capacity_bytes() / 2) + free_target_bytes_;
  while (dram_->free_bytes() < need && EvictSome(EvictionBatch(), /*may_write=*/true) > 0) {
  }
  ReadFromFlash(reads, /*copy_out=*/false);
}

void TieredStore::Prefetch(std::span<const BlockKey> keys) {
  c_.prefetch_requests.fetch_add(keys.size(), std::memory_order_relaxed);
  if (!flash_) return;
  if (!mover_.joinable()) {
    PromoteKeys(std::vector<BlockKey>(keys.begin(), keys.end()));
    return;
  }
  {
    MutexLock lock(mover_mu_);
    constexpr size_t kMaxQueued = 1 << 16;  // a hint: past this, drop rather than grow
    for (const BlockKey& k : keys) {
      if (prefetch_queue_.size() >= kMaxQueued) break;
      prefetch_queue_.push_back(k);
    }
  }
  mover_wanted_.store(true, std::memory_order_release);
  mover_cv_.Signal();
}

void TieredStore::Quiesce() {
  if (!mover_.joinable()) {
    while (dram_->free_bytes() < free_target_bytes_ && EvictSome(EvictionBatch(), true) > 0) {
    }
    return;
  }
  MutexLock lock(mover_mu_);
  uint64_t want = ++requested_passes_;
  mover_wanted_.store(true, std::memory_order_release);
  mover_cv_.Signal();
  while (done_passes_ < want && !stop_) idle_cv_.Wait(lock);
}

void TieredStore::MoverLoop() {
  MutexLock lock(mover_mu_);
  while (!stop_) {
    if (!mover_wanted_.load(std::memory_order_acquire) && prefetch_queue_.empty()) {
      mover_cv_.WaitFor(lock, std::chrono::milliseconds(20));
    }
    if (stop_) break;
    mover_wanted_.store(false, std::memory_order_release);
    uint64_t pass = requested_passes_;
    lock.Unlock();
    DrainTuner();  // the policy simulations run here, off the request path
    lock.Lock();
    // Prefetches first (a reader is about to want them), in batches of one device submit.
    while (!prefetch_queue_.empty() && !stop_) {
      std::vector<BlockKey> keys;
      while (!prefetch_queue_.empty() && keys.size() < 64) {
        keys.push_back(prefetch_queue_.front());
        prefetch_queue_.pop_front();
      }
      lock.Unlock();
      PromoteKeys(keys);
      lock.Lock();
    }
    lock.Unlock();
    while (dram_->free_bytes() < free_target_bytes_) {
      if (EvictSome(EvictionBatch(), /*may_write=*/true) == 0) break;
    }
    lock.Lock();
    done_passes_ = std::max(done_passes_, pass);
    idle_cv_.SignalAll();
  }
  done_passes_ = requested_passes_;
  idle_cv_.SignalAll();
}

StoreStats TieredStore::GetStats() const {
  StoreStats s;
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.dram.capacity_bytes = dram_->capacity_bytes();
  s.dram.used_bytes = dram_->capacity_bytes() - dram_->free_bytes();
  s.dram.blocks = dram_->blocks();
  s.dram.hits = ld(c_.dram_hits);
  s.dram.evictions = ld(c_.dram_evictions);
  s.dram.bytes_written = ld(c_.dram_bytes_in);
  s.dram.bytes_read = ld(c_.dram_bytes_out);
  if (flash_) {
    s.flash.capacity_bytes = flash_->capacity_bytes();
    s.flash.used_bytes = flash_->used_bytes();
    s.flash.blocks = flash_->blocks();
    s.flash.evictions = flash_->regions_evicted();
  }
  s.flash.hits = ld(c_.flash_hits);
  if (device_) {
    s.flash.bytes_written = ld(device_->counters().bytes_written);
    s.flash.bytes_read = ld(device_->counters().bytes_read);
  }
  s.puts = ld(c_.puts);
  s.put_exists = ld(c_.put_exists);
  s.put_rejected = ld(c_.put_rejected);
  s.gets = ld(c_.gets);
  s.misses = ld(c_.misses);
  s.erases = ld(c_.erases);
  s.demotions = ld(c_.demotions);
  s.promotions = ld(c_.promotions);
  s.flash_hits_in_place = ld(c_.hits_in_place);
  s.admission_drops = ld(c_.admission_drops);
  s.budget_drops = ld(c_.budget_drops);
  s.prefetch_requests = ld(c_.prefetch_requests);
  s.prefetched = ld(c_.prefetched);
  s.crc_failures = ld(c_.crc_failures);
  s.io_errors = ld(c_.io_errors);
  s.reuse_bonus_dram_fulls = static_cast<double>(dram_->bonus_pages()) /
                             static_cast<double>(dram_->capacity_bytes() / 4096);
  s.reuse_bonus_learnt = tuner_ != nullptr;
  if (tuner_) s.policy_epochs = tuner_->epochs();
  s.unused_to_flash =
      flash_ && options_.admission != Admission::kProbation && (!tuner_ || tuner_->admit_one_hit());
  s.probation_share = tuner_ ? tuner_->probation() : options_.probation_fraction;
  s.promote_all_flash_hits = !tuner_ || tuner_->promote_all();
  s.stale_races = ld(c_.stale_races);
  s.flash_compacted = ld(c_.compacted);
  s.flash_reinserted = ld(c_.reinserted);
  if (flash_) s.flash_live_evicted = flash_->live_blocks_evicted();
  if (flash_) s.flash_summary_bytes = flash_->summary_bytes();
  s.flash_restored = ld(c_.restored);
  s.flash_regions_dropped = ld(c_.regions_dropped);
  s.quota_evictions = ld(c_.quota_evictions);
  auto& idx = const_cast<Index&>(index_);
  s.index_entries = idx.Size();
  s.index_bytes = idx.Bytes();
  s.put_latency = put_hist_.Summary();
  s.get_dram_latency = get_dram_hist_.Summary();
  s.get_flash_latency = get_flash_hist_.Summary();
  return s;
}

}  // namespace kvpool::engine
