#include "engine/flash_log.h"

#include <algorithm>
#include <cstdlib>
#include <random>

#include "common/clock.h"

namespace kvpool::engine {
namespace {
constexpr uint32_t kNone = ~0u;

// A page-aligned buffer for the device (O_DIRECT).
struct AlignedBuf {
  explicit AlignedBuf(size_t bytes)
      : p(static_cast<std::byte*>(std::aligned_alloc(4096, bytes ? bytes : 4096))), n(bytes) {}
  ~AlignedBuf() { std::free(p); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
  std::byte* p;
  size_t n;
};

Status WriteBytes(io::Device* dev, uint64_t offset, const std::vector<std::byte>& bytes) {
  AlignedBuf buf(bytes.size());
  std::copy(bytes.begin(), bytes.end(), buf.p);
  return dev->Write(offset, buf.p, static_cast<uint32_t>(bytes.size()));
}

// A summary's pages to its slot: the head area, then (if longer) the tail area.
Status WriteSummary(io::Device* dev, const FlashGeometry& g, uint32_t region,
                    const std::vector<std::byte>& bytes) {
  AlignedBuf buf(bytes.size());
  std::copy(bytes.begin(), bytes.end(), buf.p);
  uint32_t pages = static_cast<uint32_t>(bytes.size() / 4096);
  uint32_t head = std::min(pages, g.head_pages);
  io::IoRequest reqs[2] = {
      {io::IoRequest::Op::kWrite, g.head_offset(region), buf.p, head * 4096, {}},
      {io::IoRequest::Op::kWrite,
       g.tail_offset(region),
       buf.p + uint64_t{head} * 4096,
       (pages - head) * 4096,
       {}}};
  dev->Submit(std::span<io::IoRequest>(reqs, pages > head ? 2 : 1));
  if (!reqs[0].status.ok()) return reqs[0].status;
  return pages > head ? reqs[1].status : Status::Ok();
}
}  // namespace

FlashLog::FlashLog(uint64_t device_bytes, uint64_t region_bytes)
    : FlashLog(nullptr, FlashGeometry::For(device_bytes, region_bytes, /*persistent=*/false)) {}

FlashLog::FlashLog(io::Device* device, uint64_t region_bytes)
    : FlashLog(device, FlashGeometry::For(device->size(), region_bytes, /*persistent=*/true)) {}

FlashLog::FlashLog(io::Device* device, const FlashGeometry& geo)
    : device_(device),
      geo_(geo),
      pages_per_region_(static_cast<uint32_t>(geo.region_bytes / 4096)),
      regions_(geo.regions),
      gens_(new std::atomic<uint32_t>[regions_ ? regions_ : 1]),
      region_blocks_(regions_ ? regions_ : 1, 0),
      live_(regions_ ? regions_ : 1, 0),
      entered_(regions_ ? regions_ : 1, 0),
      spill_(regions_ ? regions_ : 1, 0),
      from_(regions_ ? regions_ : 1, kNone),
      slots_(regions_ ? regions_ : 1),
      inflight_(regions_ ? regions_ : 1, 0),
      reinserted_(regions_ ? regions_ : 1, 0),
      ver_(regions_ ? regions_ : 1, 0),
      pending_flag_(regions_ ? regions_ : 1, 0),
      disk_ver_(new std::atomic<uint64_t>[regions_ ? regions_ : 1]),
      stripes_(new std::mutex[kStripes]),
      empty_(regions_),
      tenant_pages_(new std::atomic<uint64_t>[kMaxTenants]),
      touched_(new std::atomic<uint64_t>[uint64_t{regions_} * pages_per_region_ / 64 + 1]) {
  for (uint64_t w = 0; w <= uint64_t{regions_} * pages_per_region_ / 64; ++w) {
    touched_[w].store(0, std::memory_order_relaxed);
  }
  for (uint32_t t = 0; t < kMaxTenants; ++t) tenant_pages_[t].store(0, std::memory_order_relaxed);
  for (uint32_t i = 0; i < (regions_ ? regions_ : 1); ++i) {
    gens_[i].store(0);
    disk_ver_[i].store(0);
    spill_[i] = i;
  }
}

Status FlashLog::Open(bool restore, std::vector<Recovered>* out, OpenStats* stats) {
  *stats = {};
  out->clear();
  if (!device_) return Status::Ok();
  if (regions_ < 2) return Status::InvalidArgument("flash device smaller than two regions");
  AlignedBuf sb_page(4096);
  Superblock sb;
  bool usable = device_->Read(geo_.meta_offset, sb_page.p, 4096).ok() &&
                DecodeSuperblock({sb_page.p, 4096}, &sb) && sb.region_bytes == geo_.region_bytes &&
                sb.regions == regions_ && sb.slot_pages == geo_.slot_pages && sb.instance != 0;
  if (!restore || !usable) {
    // A new instance: every summary on the device names another one and is never read.
    std::random_device rd;
    instance_ = ((uint64_t{rd()} << 32) ^ rd() ^ NowNanos()) | 1;
    std::vector<std::byte> page;
    EncodeSuperblock({instance_, geo_.region_bytes, regions_, geo_.slot_pages}, &page);
    Status s = WriteBytes(device_, geo_.meta_offset, page);
    if (!s.ok()) return Status::IoError("writing the flash superblock: " + s.ToString());
    summary_bytes_.fetch_add(page.size(), std::memory_order_relaxed);
    stats->formatted = true;
    return Status::Ok();
  }
  instance_ = sb.instance;

  // The heads of every slot (up to 4 pages: a whole summary of 510 blocks), side by side
  // on the device: one sequential read per batch of regions; then, batched too, the rest
  // of the longer summaries.
  struct Found {
    SummaryHeader h;
    std::vector<SummaryEntry> entries;
  };
  std::vector<Found> found;
  constexpr uint32_t kBatch = 256;
  const uint32_t head_pages = geo_.head_pages;
  AlignedBuf heads(uint64_t{kBatch} * head_pages * 4096);
  std::vector<std::pair<uint32_t, uint32_t>> longer;  // (region, pages)
  auto decode = [&](uint32_t r, std::span<const std::byte> buf) {
    Found f;
    if (DecodeSummary(buf, instance_, &f.h, &f.entries) && f.h.region == r) {
      found.push_back(std::move(f));
    } else {
      ++stats->regions_dropped;  // torn by a crash, or inconsistent: dropped whole
    }
  };
  for (uint32_t base = 0; base < regions_; base += kBatch) {
    uint32_t n = std::min(kBatch, regions_ - base);
    // In pieces of 16 regions submitted together: one large read leaves the device's
    // queue nearly empty (270 MB/s here against over 1 GB/s in pieces).
    constexpr uint32_t kPiece = 16;
    std::vector<io::IoRequest> pieces;
    for (uint32_t i = 0; i < n; i += kPiece) {
      uint32_t m = std::min(kPiece, n - i);
      pieces.push_back({io::IoRequest::Op::kRead,
                        geo_.head_offset(base + i),
                        heads.p + uint64_t{i} * head_pages * 4096,
                        m * head_pages * 4096,
                        {}});
    }
    device_->Submit(pieces);
    std::vector<char> piece_ok(n);
    for (uint32_t i = 0; i < n; ++i) piece_ok[i] = pieces[i / kPiece].status.ok();
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t r = base + i;
      std::span<const std::byte> head(heads.p + uint64_t{i} * head_pages * 4096,
                                      uint64_t{head_pages} * 4096);
      SummaryHeader h;
      if (!piece_ok[i] || !PeekSummary(head, instance_, &h)) continue;
      if (h.region != r || h.count > pages_per_region_) {
        ++stats->regions_dropped;
        continue;
      }
      uint32_t pages = SummaryPages(h.count);
      if (pages <= head_pages) {
        decode(r, head.first(uint64_t{pages} * 4096));
      } else {
        longer.push_back({r, pages});
      }
    }
  }
  for (size_t base = 0; base < longer.size(); base += kBatch) {
    size_t n = std::min<size_t>(kBatch, longer.size() - base);
    std::vector<std::unique_ptr<AlignedBuf>> bufs;
    std::vector<io::IoRequest> reqs(2 * n);
    for (size_t i = 0; i < n; ++i) {
      auto [r, pages] = longer[base + i];
      bufs.push_back(std::make_unique<AlignedBuf>(uint64_t{pages} * 4096));
      reqs[2 * i] = {
          io::IoRequest::Op::kRead, geo_.head_offset(r), bufs[i]->p, head_pages * 4096, {}};
      reqs[2 * i + 1] = {io::IoRequest::Op::kRead,
                         geo_.tail_offset(r),
                         bufs[i]->p + uint64_t{head_pages} * 4096,
                         (pages - head_pages) * 4096,
                         {}};
    }
    device_->Submit(reqs);
    for (size_t i = 0; i < n; ++i) {
      auto [r, pages] = longer[base + i];
      if (!reqs[2 * i].status.ok() || !reqs[2 * i + 1].status.ok()) {
        ++stats->regions_dropped;
        continue;
      }
      decode(r, {bufs[i]->p, uint64_t{pages} * 4096});
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.h.seq < b.h.seq; });
  std::vector<uint64_t> seq_of(regions_, 0);  // 0: no valid summary
  for (const Found& f : found) seq_of[f.h.region] = f.h.seq;

  MutexLock lock(mu_);
  const uint64_t total_pages = uint64_t{regions_} * pages_per_region_;
  size_t total_entries = 0;
  for (const Found& f : found) total_entries += f.entries.size();
  out->reserve(total_entries);
  uint64_t live_blocks = 0;
  for (const Found& f : found) {
    uint32_t r = f.h.region;
    ++stats->regions_read;
    entered_[r] = f.h.seq;
    enter_seq_ = std::max(enter_seq_, f.h.seq);
    ver_[r] = 1;
    disk_ver_[r].store(1);
    slots_[r].reserve(f.entries.size());
    uint64_t prev_end = 0;  // entries are in page order and never overlap
    for (const SummaryEntry& e : f.entries) {
      uint64_t pages = (uint64_t{e.size} + 4095) / 4096;
      uint64_t start = uint64_t{r} * pages_per_region_ + e.page;
      bool ok = !e.dead() && e.size > 0 && e.size < (1u << 30) && e.page < pages_per_region_ &&
                e.page >= prev_end && start + pages <= total_pages && !e.key.empty();
      // A block continuing into later regions: each of them must be of its run (same
      // sequence) or hold no summary; one entered later overwrote it.
      uint32_t last = ok ? static_cast<uint32_t>((start + pages - 1) / pages_per_region_) : r;
      for (uint32_t q = r + 1; ok && q <= last; ++q) {
        ok = seq_of[q] <= f.h.seq && from_[q] == kNone;
      }
      if (!ok) continue;
      prev_end = e.page + pages;
      for (uint32_t q = r + 1; q <= last; ++q) from_[q] = r;
      spill_[r] = std::max(spill_[r], last);
      uint16_t tenant = e.tenant() < kMaxTenants ? e.tenant() : 0;
      slots_[r].push_back({e.key, e.page, e.size, e.crc, tenant, false});
      ChargeLocked(slots_[r].back(), true);
      if (live_[r] == 0) empty_.fetch_sub(1, std::memory_order_relaxed);
      live_[r] += pages;
      live_total_ += pages;
      ++region_blocks_[r];
      ++live_blocks;
      out->push_back({e.key, static_cast<uint32_t>(start), gens_[r].load(std::memory_order_relaxed),
                      e.size, e.crc, f.h.seq, tenant});
    }
  }
  blocks_.fetch_add(live_blocks, std::memory_order_relaxed);
  stats->blocks = live_blocks;
  return Status::Ok();
}

void FlashLog::EnterRegionLocked(uint32_t region, uint32_t* evicted, std::vector<Located>* lost) {
  if (lost) {
    for (const Slot& s : slots_[region]) {
      if (!s.dead) lost->push_back(Locate(region, s));
    }
  }
  // Bump before any new data is written: a reader that sees the old generation after its
  // read finished knows no overwrite had started.
  gens_[region].fetch_add(1, std::memory_order_acq_rel);
  if (device_) {
    // The summary on the device describes what is about to be overwritten: invalidated
    // first (under the stripe, so that no older image of it lands afterwards).
    std::lock_guard<std::mutex> stripe(Stripe(region));
    if (disk_ver_[region].load(std::memory_order_acquire) != 0) {
      std::vector<std::byte> page;
      EncodeInvalidSummary(&page);
      (void)WriteBytes(device_, geo_.head_offset(region), page);  // failed: CRCs still guard
      summary_bytes_.fetch_add(page.size(), std::memory_order_relaxed);
      disk_ver_[region].store(0, std::memory_order_release);
    }
  }
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
  for (const Slot& s : slots_[region]) {
    if (!s.dead) ChargeLocked(s, false);
  }
  slots_[region].clear();
  inflight_[region] = 0;
  reinserted_[region] = 0;
  ver_[region] = 0;
  // Blocks that started here and continued into later regions are gone with it.
  for (uint32_t r = region + 1; r <= spill_[region] && r < regions_; ++r) {
    if (from_[r] == region) from_[r] = kNone;
  }
  spill_[region] = region;
}

uint32_t FlashLog::PickRunLocked(uint32_t k) const {
  uint32_t best = kNone;
  uint64_t best_live = 0, best_age = 0;
  for (uint32_t s = 0; s + k <= regions_; ++s) {
    uint64_t live = 0, oldest = ~0ull;
    bool ok = true;
    for (uint32_t r = s; r < s + k && ok; ++r) {
      // Not the head, not a region writes are still landing in, not the continuation of
      // another run's block.
      ok = !InHeadLocked(r) && inflight_[r] == 0 && (from_[r] == kNone || from_[r] == s);
      live += live_[r];
      oldest = std::min(oldest, entered_[r]);
    }
    if (!ok) continue;
    if (best == kNone || TakenFirst(live, oldest, best_live, best_age)) {
      best = s;
      best_live = live;
      best_age = oldest;
    }
  }
  return best;
}

void FlashLog::MaybePendingLocked(uint32_t r) {
  if (!device_ || InHeadLocked(r) || inflight_[r] > 0 || pending_flag_[r]) return;
  uint64_t disk = disk_ver_[r].load(std::memory_order_acquire);
  if (ver_[r] == disk || (slots_[r].empty() && disk == 0)) return;
  pending_flag_[r] = 1;
  pending_.push_back(r);
  pending_n_.store(pending_.size(), std::memory_order_release);
}

void FlashLog::ChargeLocked(const Slot& s, bool add) {
  if (s.tenant == 0) return;
  if (add) {
    tenant_pages_[s.tenant].fetch_add(s.pages(), std::memory_order_relaxed);
  } else {
    tenant_pages_[s.tenant].fetch_sub(s.pages(), std::memory_order_relaxed);
  }
}

bool FlashLog::Append(uint32_t pages, const BlockKey& key, uint32_t size, uint32_t crc,
                      uint16_t tenant, Extent* out, uint32_t* regions_evicted,
                      std::vector<Located>* lost) {
  *regions_evicted = 0;
  uint64_t total = uint64_t{regions_} * pages_per_region_;
  if (pages == 0 || pages > total || regions_ < 2) return false;
  MutexLock lock(mu_);
  if (!started_ || head_ + pages > head_end_) {
    bool had = started_;
    uint32_t old_first = head_first_, old_last = head_region_;
    uint32_t k = (pages + pages_per_region_ - 1) / pages_per_region_;
    uint32_t s = PickRunLocked(k);
    if (s == kNone) {
      // Every run of k is pinned by blocks continuing into it (a device nearly all one
      // huge block): take the run after the head and the regions those blocks start in.
      s = (head_region_ + 1) % regions_;
      if (s + k > regions_) s = 0;
      for (uint32_t r = s; r < s + k; ++r) {
        if (from_[r] != kNone && from_[r] != s) {
          EnterRegionLocked(from_[r], regions_evicted, lost);
          entered_[from_[r]] = ++enter_seq_;
        }
      }
    }
    // A run shares one entry sequence: its regions are one unit on the device.
    ++enter_seq_;
    for (uint32_t r = s; r < s + k; ++r) {
      EnterRegionLocked(r, regions_evicted, lost);
      entered_[r] = enter_seq_;
    }
    started_ = true;
    head_ = uint64_t{s} * pages_per_region_;
    head_end_ = uint64_t{s + k} * pages_per_region_;
    head_first_ = s;
    head_region_ = s + k - 1;
    if (had) {  // the old run is done once its writes land: its summaries can be written
      for (uint32_t r = old_first; r <= old_last && r < regions_; ++r) MaybePendingLocked(r);
    }
  }
  out->page = static_cast<uint32_t>(head_);
  touched_[out->page / 64].fetch_and(~(uint64_t{1} << (out->page % 64)), std::memory_order_relaxed);
  uint32_t start = static_cast<uint32_t>(head_ / pages_per_region_);
  uint32_t last = static_cast<uint32_t>((head_ + pages - 1) / pages_per_region_);
  out->gen = gens_[start].load(std::memory_order_relaxed);
  for (uint32_t r = start + 1; r <= last; ++r) from_[r] = start;
  spill_[start] = std::max(spill_[start], last);
  head_ += pages;
  ++region_blocks_[start];
  if (live_[start] == 0) empty_.fetch_sub(1, std::memory_order_relaxed);
  live_[start] += pages;
  slots_[start].push_back(
      {key, out->page - start * pages_per_region_, size, crc, tenant, /*dead=*/false});
  ChargeLocked(slots_[start].back(), true);
  ++inflight_[start];
  ++ver_[start];
  live_total_ += pages;
  blocks_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void FlashLog::Written(const Extent& ext) {
  MutexLock lock(mu_);
  uint32_t r = ext.page / pages_per_region_;
  if (r >= regions_ || gens_[r].load(std::memory_order_relaxed) != ext.gen) return;
  if (inflight_[r] > 0) --inflight_[r];
  MaybePendingLocked(r);
}

void FlashLog::Release(uint32_t page, uint32_t gen, uint32_t pages) {
  MutexLock lock(mu_);
  uint32_t region = page / pages_per_region_;
  if (region >= regions_ || !Valid(page, gen)) return;
  std::vector<Slot>& sl = slots_[region];
  uint32_t off = page - region * pages_per_region_;
  auto it = std::lower_bound(sl.begin(), sl.end(), off,
                             [](const Slot& s, uint32_t p) { return s.page < p; });
  if (it == sl.end() || it->page != off || it->dead) return;  // released already
  it->dead = true;
  ChargeLocked(*it, false);
  uint64_t n = std::min<uint64_t>(pages, live_[region]);
  live_[region] -= n;
  if (n > 0 && live_[region] == 0) empty_.fetch_add(1, std::memory_order_relaxed);
  live_total_ -= n;
  if (region_blocks_[region] > 0) {
    --region_blocks_[region];
    blocks_.fetch_sub(1, std::memory_order_relaxed);
  }
  ++ver_[region];
  MaybePendingLocked(region);
}

void FlashLog::Persist() {
  if (!device_) return;
  // Called after every demotion batch: nothing queued (the common case) costs no lock.
  if (pending_n_.load(std::memory_order_acquire) == 0) return;
  std::vector<uint32_t> todo;
  {
    MutexLock lock(mu_);
    todo = pending_;  // left queued until written: a concurrent Persist waits on the stripe
  }
  for (uint32_t r : todo) PersistRegion(r);
}

void FlashLog::PersistRegion(uint32_t r) {
  SummaryHeader h;
  std::vector<SummaryEntry> entries;
  uint64_t v;
  uint32_t gen;
  auto unqueue = [&]() REQUIRES(mu_) {
    if (pending_flag_[r]) {
      pending_flag_[r] = 0;
      pending_.erase(std::find(pending_.begin(), pending_.end(), r));
      pending_n_.store(pending_.size(), std::memory_order_release);
    }
  };
  {
    MutexLock lock(mu_);
    if (InHeadLocked(r) || inflight_[r] > 0) {  // not sealed: no summary valid on the device
      unqueue();
      return;
    }
    gen = gens_[r].load(std::memory_order_relaxed);
    v = ver_[r];
    if (disk_ver_[r].load(std::memory_order_acquire) >= v) {
      unqueue();
      return;
    }
    h = {instance_, entered_[r], r, 0};
    entries.reserve(slots_[r].size());
    for (const Slot& s : slots_[r]) {
      if (!s.dead) entries.push_back({s.key, s.page, s.size, s.crc, uint32_t{s.tenant} << 16});
    }
  }
  std::vector<std::byte> bytes;
  EncodeSummary(h, entries, &bytes);
  {
    std::lock_guard<std::mutex> stripe(Stripe(r));
    // Taken again meanwhile (its summary invalidated), or a newer image written: skip.
    if (gens_[r].load(std::memory_order_acquire) != gen ||
        disk_ver_[r].load(std::memory_order_acquire) >= v) {
      return;
    }
    if (WriteSummary(device_, geo_, r, bytes).ok()) {
      disk_ver_[r].store(v, std::memory_order_release);
    }
    summary_bytes_.fetch_add(bytes.size(), std::memory_order_relaxed);
  }
  MutexLock lock(mu_);
  if (gens_[r].load(std::memory_order_relaxed) == gen &&
      disk_ver_[r].load(std::memory_order_acquire) >= ver_[r]) {
    unqueue();
  }
}

void FlashLog::Close() {
  {
    MutexLock lock(mu_);
    if (!started_) return;
    uint32_t first = head_first_, last = head_region_;
    started_ = false;
    for (uint32_t r = first; r <= last && r < regions_; ++r) MaybePendingLocked(r);
  }
  Persist();
}

uint64_t FlashLog::used_bytes() const {
  MutexLock lock(mu_);
  return live_total_ * 4096;
}

uint16_t FlashLog::TenantAt(uint32_t page, uint32_t gen) const {
  MutexLock lock(mu_);
  uint32_t region = page / pages_per_region_;
  if (region >= regions_ || !Valid(page, gen)) return 0;
  const std::vector<Slot>& sl = slots_[region];
  uint32_t off = page - region * pages_per_region_;
  auto it = std::lower_bound(sl.begin(), sl.end(), off,
                             [](const Slot& s, uint32_t p) { return s.page < p; });
  return it == sl.end() || it->page != off ? 0 : it->tenant;
}

void FlashLog::OldestOf(uint16_t tenant, uint64_t bytes, size_t max,
                        std::vector<Located>* out) const {
  out->clear();
  MutexLock lock(mu_);
  std::vector<uint32_t> order;
  for (uint32_t r = 0; r < regions_; ++r) {
    if (live_[r] > 0 && inflight_[r] == 0) order.push_back(r);
  }
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) REQUIRES(mu_) { return entered_[a] < entered_[b]; });
  uint64_t found = 0;
  for (uint32_t r : order) {
    for (const Slot& s : slots_[r]) {
      if (s.dead || s.tenant != tenant) continue;
      out->push_back(Locate(r, s));
      found += uint64_t{s.pages()} * 4096;
      if (found >= bytes || out->size() >= max) return;
    }
  }
}

bool FlashLog::CompactionCandidate(uint32_t* region, std::vector<Located>* keys) const {
  MutexLock lock(mu_);
  uint32_t best = kNone;
  for (uint32_t r = 0; r < regions_; ++r) {
    if (InHeadLocked(r) || inflight_[r] > 0 || live_[r] == 0 || from_[r] != kNone ||
        spill_[r] != r || reinserted_[r]) {
      continue;
    }
    if (best == kNone || live_[r] < live_[best]) best = r;
  }
  // Moving a region 7/8 live frees an eighth: past that, compaction would write more than
  // 8x what it frees, and the log is simply full (eviction drops instead).
  if (best == kNone || live_[best] * 8 > uint64_t{pages_per_region_} * 7) return false;
  *region = best;
  keys->clear();
  for (const Slot& s : slots_[best]) {
    if (!s.dead) keys->push_back(Locate(best, s));
  }
  return true;
}

bool FlashLog::ReinsertionCandidate(uint32_t ahead, uint32_t* region, std::vector<Located>* keys) {
  MutexLock lock(mu_);
  std::vector<uint32_t> order;
  for (uint32_t r = 0; r < regions_; ++r) {
    if (InHeadLocked(r) || inflight_[r] > 0 || live_[r] == 0) continue;
    order.push_back(r);
  }
  size_t n = std::min<size_t>(ahead, order.size());
  std::partial_sort(order.begin(), order.begin() + n, order.end(),
                    [&](uint32_t a, uint32_t b) REQUIRES(mu_) {
                      return TakenFirst(live_[a], entered_[a], live_[b], entered_[b]);
                    });
  for (size_t i = 0; i < n; ++i) {
    uint32_t r = order[i];
    if (from_[r] != kNone || spill_[r] != r) return false;
    keys->clear();
    for (const Slot& s : slots_[r]) {
      if (!s.dead && TouchedPage(r * pages_per_region_ + s.page)) keys->push_back(Locate(r, s));
    }
    if (!keys->empty()) {
      *region = r;
      reinserted_[r] = 1;
      return true;
    }
  }
  return false;
}

bool FlashLog::InNewerHalf(uint32_t page) const {
  MutexLock lock(mu_);
  uint32_t r = page / pages_per_region_;
  return r < regions_ && entered_[r] != 0 && (enter_seq_ - entered_[r]) * 2 < regions_;
}

uint64_t FlashLog::live_pages(uint32_t region) const {
  MutexLock lock(mu_);
  return region < regions_ ? live_[region] : 0;
}

}  // namespace kvpool::engine
