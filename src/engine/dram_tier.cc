#include "engine/dram_tier.h"

#include <algorithm>
#include <bit>

namespace kvpool::engine {
namespace {
constexpr uint64_t kGhostEpochMask = (1ull << 30) - 1;
constexpr int kGhostWays = 4;  // one bucket: 32 bytes, half a cache line
// 32 bits of the key other than those that chose the bucket, mixed; never 0 (empty).
uint64_t GhostPrint(const BlockKey& key) {
  return (((key.hi ^ (key.lo >> 32)) * 0x9E3779B97F4A7C15ull) >> 32) | 1;
}
}  // namespace

Result<std::unique_ptr<DramTier>> DramTier::Create(const StoreOptions& options,
                                                   uint64_t flash_bytes) {
  auto arena = mem::Arena::Create(options.dram_bytes, options.huge_pages, options.prefault,
                                  options.lock_memory);
  if (!arena.ok()) return arena.status();
  uint64_t pages = options.dram_bytes / 4096;
  if (pages == 0 || pages >= (1ull << 31)) return Status::InvalidArgument("bad dram_bytes");
  // One record per page is the most blocks the arena can hold.
  auto tier = std::unique_ptr<DramTier>(new DramTier(
      std::move(arena).value(), static_cast<uint32_t>(pages), static_cast<uint32_t>(pages),
      // Probation tells one-hit blocks apart for flash admission: without flash only the
      // explicit kProbation keeps it.
      options.probation_fraction,
      options.admission == Admission::kProbation ||
          (options.admission == Admission::kBudget && flash_bytes > 0),
      // An explicit bonus is in store-fulls (DRAM + flash); "auto" (negative) starts at 0
      // and is set by the store's PolicyTuner.
      options.reuse_bonus < 0
          ? 0
          : static_cast<uint64_t>(options.reuse_bonus *
                                  static_cast<double>(pages + flash_bytes / 4096))));
  return tier;
}

DramTier::DramTier(std::unique_ptr<mem::Arena> arena, uint32_t pages, uint32_t max_records,
                   double probation_fraction, bool probation, uint64_t bonus_pages)
    : arena_(std::move(arena)),
      pages_(pages),
      records_(new Record[max_records]),
      probation_(probation),
      probation_pages_(static_cast<uint64_t>(probation_fraction * pages)),
      bonus_pages_(bonus_pages),
      tenant_lists_(new List[kMaxTenants]),
      tenant_pages_(new std::atomic<uint64_t>[kMaxTenants]) {
  for (uint32_t t = 0; t < kMaxTenants; ++t) tenant_pages_[t].store(0, std::memory_order_relaxed);
  free_records_.reserve(max_records);
  for (uint32_t i = max_records; i > 0; --i) free_records_.push_back(i - 1);
  // Four ghost entries per page of DRAM (8 bytes each: 0.8% of the arena), at most 2^28.
  ghost_slots_ = std::min<uint64_t>(
      1ull << 28, std::bit_ceil<uint64_t>(std::max<uint64_t>(4096, uint64_t{max_records} * 4)));
  ghost_.reset(new std::atomic<uint64_t>[ghost_slots_]);
  for (uint64_t i = 0; i < ghost_slots_; ++i) ghost_[i].store(0, std::memory_order_relaxed);
  ghost_mask_ = ghost_slots_ / kGhostWays - 1;
}

uint32_t DramTier::Allocate(uint32_t size, uint16_t tenant) {
  uint32_t npages = (size + 4095) / 4096;
  if (npages == 0) npages = 1;
  uint32_t page = pages_.Allocate(npages);
  if (page == mem::PageAllocator::kNone) return kNoRecord;
  uint32_t id;
  {
    MutexLock lock(free_mu_);
    if (free_records_.empty()) {
      pages_.Free(page, npages);
      return kNoRecord;
    }
    id = free_records_.back();
    free_records_.pop_back();
  }
  Record& r = records_[id];
  r.key = {};
  ++r.gen;
  r.page = page;
  r.pages = npages;
  r.size = size;
  r.flash_gen = 0;
  r.tenant = tenant;
  if (tenant) tenant_pages_[tenant].fetch_add(npages, std::memory_order_relaxed);
  // queue, prev, next and heap_seq are the policy's (under its mutex, which may be reading
  // them now for a stale heap entry naming this id): a free record is in no queue already.
  r.freq.store(0, std::memory_order_relaxed);
  r.used.store(false, std::memory_order_relaxed);
  r.state.store(0, std::memory_order_relaxed);
  live_.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void DramTier::Free(uint32_t id) {
  Record& r = records_[id];
  if (r.tenant) tenant_pages_[r.tenant].fetch_sub(r.pages, std::memory_order_relaxed);
  pages_.Free(r.page, r.pages);
  live_.fetch_sub(1, std::memory_order_relaxed);
  MutexLock lock(free_mu_);
  free_records_.push_back(id);
}

void DramTier::Unpin(uint32_t id) {
  uint32_t prev = records_[id].state.fetch_sub(1, std::memory_order_acq_rel);
  if (prev == (kDoomed | 1)) Free(id);
}

void DramTier::Doom(uint32_t id) {
  uint32_t prev = records_[id].state.fetch_or(kDoomed, std::memory_order_acq_rel);
  if (prev == 0) Free(id);
}

void DramTier::ListPushFront(List& l, uint32_t id, uint32_t Record::*prev, uint32_t Record::*next) {
  Record& r = records_[id];
  r.*prev = kNoRecord;
  r.*next = l.head;
  if (l.head != kNoRecord) records_[l.head].*prev = id;
  l.head = id;
  if (l.tail == kNoRecord) l.tail = id;
  l.pages += r.pages;
  ++l.count;
}

void DramTier::ListPushBack(List& l, uint32_t id, uint32_t Record::*prev, uint32_t Record::*next) {
  Record& r = records_[id];
  r.*next = kNoRecord;
  r.*prev = l.tail;
  if (l.tail != kNoRecord) records_[l.tail].*next = id;
  l.tail = id;
  if (l.head == kNoRecord) l.head = id;
  l.pages += r.pages;
  ++l.count;
}

void DramTier::ListRemove(List& l, uint32_t id, uint32_t Record::*prev, uint32_t Record::*next) {
  Record& r = records_[id];
  if (r.*prev != kNoRecord)
    records_[r.*prev].*next = r.*next;
  else
    l.head = r.*next;
  if (r.*next != kNoRecord)
    records_[r.*next].*prev = r.*prev;
  else
    l.tail = r.*prev;
  r.*prev = r.*next = kNoRecord;
  l.pages -= r.pages;
  --l.count;
}

void DramTier::PushHeadLocked(List& l, Queue q, uint32_t id) {
  Record& r = records_[id];
  r.queue = q;
  r.link_seq = ++link_counter_;
  ListPushFront(l, id, &Record::prev, &Record::next);
}

void DramTier::PushTailLocked(List& l, Queue q, uint32_t id) {
  Record& r = records_[id];
  r.queue = q;
  r.link_seq = ++link_counter_;
  ListPushBack(l, id, &Record::prev, &Record::next);
}

void DramTier::RemoveLocked(List& l, uint32_t id) {
  ListRemove(l, id, &Record::prev, &Record::next);
  records_[id].queue = kNone;
}

void DramTier::Link(uint32_t id, bool main) {
  MutexLock lock(policy_mu_);
  Record& r = records_[id];
  if (r.queue != kNone) return;
  uint64_t now = clock_.load(std::memory_order_relaxed);
  r.last_use.store(now, std::memory_order_relaxed);
  clock_.store(now + r.pages, std::memory_order_relaxed);
  if (main || !probation_) {
    PushMainLocked(id);
  } else {
    PushHeadLocked(small_, kSmall, id);
  }
  PushTenantLocked(id);
}

void DramTier::PushTenantLocked(uint32_t id) {
  Record& r = records_[id];
  if (r.tenant == 0) return;
  ListPushFront(tenant_lists_[r.tenant], id, &Record::tprev, &Record::tnext);
}

void DramTier::RemoveTenantLocked(uint32_t id) {
  Record& r = records_[id];
  if (r.tenant == 0) return;
  ListRemove(tenant_lists_[r.tenant], id, &Record::tprev, &Record::tnext);
}

void DramTier::PushMainLocked(uint32_t id) {
  Record& r = records_[id];
  r.queue = kMain;
  r.link_seq = ++link_counter_;
  r.heap_seq = ++heap_counter_;
  main_.pages += r.pages;
  ++main_.count;
  HeapPushLocked({KeyOf(r), id, r.heap_seq});
}

void DramTier::RemoveMainLocked(uint32_t id) {
  Record& r = records_[id];
  r.queue = kNone;  // its heap entry is left behind, recognised as stale when it surfaces
  main_.pages -= r.pages;
  --main_.count;
}

namespace {
// Heap order for std::*_heap (a max-heap of "comes out first"): the lowest key first, and
// of equal keys the later pushed (a chain's child before its parent).
struct OutLater {
  template <class T>
  bool operator()(const T& a, const T& b) const {
    return a.key != b.key ? a.key > b.key : a.seq < b.seq;
  }
};
}  // namespace

void DramTier::HeapPushLocked(const HeapItem& item) {
  heap_.push_back(item);
  std::push_heap(heap_.begin(), heap_.end(), OutLater{});
  MaybeCompactHeapLocked();
}

DramTier::HeapItem DramTier::HeapPopLocked() {
  std::pop_heap(heap_.begin(), heap_.end(), OutLater{});
  HeapItem top = heap_.back();
  heap_.pop_back();
  return top;
}

void DramTier::SetBonus(double dram_fulls) {
  MutexLock lock(policy_mu_);
  auto pages = static_cast<uint64_t>(dram_fulls * pages_.total_pages());
  if (pages == bonus_pages_.load(std::memory_order_relaxed)) return;
  bonus_pages_.store(pages, std::memory_order_relaxed);
  RekeyHeapLocked();
}

void DramTier::SetProbation(double fraction) {
  MutexLock lock(policy_mu_);
  probation_pages_ = static_cast<uint64_t>(fraction * pages_.total_pages());
}

void DramTier::MaybeCompactHeapLocked() {
  if (heap_.size() <= 2 * main_.count + 1024) return;
  RekeyHeapLocked();
}

void DramTier::RekeyHeapLocked() {
  size_t kept = 0;
  for (const HeapItem& it : heap_) {
    const Record& r = records_[it.id];
    if (r.queue == kMain && r.heap_seq == it.seq) heap_[kept++] = {KeyOf(r), it.id, it.seq};
  }
  heap_.resize(kept);
  std::make_heap(heap_.begin(), heap_.end(), OutLater{});
}

void DramTier::PlaceBehind(uint32_t id, uint32_t parent) {
  MutexLock lock(policy_mu_);
  Record& r = records_[id];
  Record& p = records_[parent];
  if (r.queue == kNone || p.queue == kNone || id == parent) return;
  constexpr uint32_t kRecent = 4096;  // links; longer than any chain stored at once
  if (r.queue == kMain) {
    // "Just now": the parent was used within 1/16 of DRAM's worth of linking, or was
    // itself linked within the last kRecent links (a chain being stored: however long it
    // is, all of it takes its head's recency; a window in pages alone cut chains longer
    // than 1/16 of DRAM into segments whose head segment left first, leaving their tails
    // unreachable). The child takes the parent's recency, keeping its own past uses, and
    // being pushed later it leaves first of equal keys.
    uint64_t mine = r.last_use.load(std::memory_order_relaxed);
    uint64_t theirs = p.last_use.load(std::memory_order_relaxed);
    bool parent_linked_now = p.queue == kMain && link_counter_ - p.link_seq <= kRecent;
    if (theirs > mine || (mine - theirs > pages_.total_pages() / 16 + 64 && !parent_linked_now))
      return;
    r.last_use.store(theirs, std::memory_order_relaxed);
    r.heap_seq = ++heap_counter_;
    HeapPushLocked({KeyOf(r), id, r.heap_seq});
    return;
  }
  if (r.queue != p.queue || link_counter_ - p.link_seq > kRecent) return;
  // Probation is a FIFO: insert between the parent and its tail-side neighbour.
  RemoveLocked(small_, id);
  r.queue = kSmall;
  r.prev = parent;
  r.next = p.next;
  if (p.next != kNoRecord)
    records_[p.next].prev = id;
  else
    small_.tail = id;
  p.next = id;
  small_.pages += r.pages;
  ++small_.count;
}

void DramTier::Unlink(uint32_t id) {
  MutexLock lock(policy_mu_);
  UnlinkLocked(id);
}

void DramTier::UnlinkLocked(uint32_t id) {
  Record& r = records_[id];
  if (r.queue == kNone) return;
  if (r.queue == kSmall)
    RemoveLocked(small_, id);
  else
    RemoveMainLocked(id);
  RemoveTenantLocked(id);
}

size_t DramTier::PickVictims(size_t max, Victim* out) {
  MutexLock lock(policy_mu_);
  size_t n = 0;
  uint64_t steps = 0, max_steps = 4 * (small_.count + heap_.size()) + 16;
  while (n < max && steps++ < max_steps) {
    bool from_small =
        small_.tail != kNoRecord && (small_.pages > probation_pages_ || main_.count == 0);
    if (from_small) {
      uint32_t id = small_.tail;
      Record& r = records_[id];
      RemoveLocked(small_, id);
      if (r.freq.load(std::memory_order_relaxed) > 0) {
        PushMainLocked(id);  // used during probation: admitted
        continue;
      }
      RemoveTenantLocked(id);
      out[n++] = {id, r.gen, r.key, probation_, true};
    } else if (main_.count > 0 && !heap_.empty()) {
      HeapItem top = HeapPopLocked();
      Record& r = records_[top.id];
      if (r.queue != kMain || r.heap_seq != top.seq) continue;  // left behind by a move
      uint64_t key = KeyOf(r);
      if (key > top.key) {  // used since it was pushed
        top.key = key;
        HeapPushLocked(top);
        continue;
      }
      RemoveMainLocked(top.id);
      RemoveTenantLocked(top.id);
      out[n++] = {top.id, r.gen, r.key, false, false};
    } else {
      break;
    }
  }
  return n;
}

void DramTier::PutBack(const Victim& v) {
  MutexLock lock(policy_mu_);
  Record& r = records_[v.id];
  if (r.queue != kNone || r.gen != v.gen) return;
  if (v.from_probation) {
    PushTailLocked(small_, kSmall, v.id);
  } else {
    PushMainLocked(v.id);
  }
  PushTenantLocked(v.id);
}

size_t DramTier::PickTenantVictims(uint16_t tenant, uint64_t bytes, size_t max, Victim* out) {
  if (tenant == 0 || tenant >= kMaxTenants || max == 0) return 0;
  MutexLock lock(policy_mu_);
  // The tenant's longest-linked records, then the policy's order among them: unused
  // probation blocks first (one-hit), then the lowest eviction priority.
  struct Candidate {
    bool keep;  // not an unused probation block
    uint64_t key;
    uint32_t id;
  };
  std::vector<Candidate> c;
  for (uint32_t id = tenant_lists_[tenant].tail; id != kNoRecord && c.size() < 4 * max;
       id = records_[id].tprev) {
    const Record& r = records_[id];
    c.push_back(
        {!(r.queue == kSmall && r.freq.load(std::memory_order_relaxed) == 0), KeyOf(r), id});
  }
  std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    return a.keep != b.keep ? !a.keep : a.key < b.key;
  });
  size_t n = 0;
  for (uint64_t got = 0; n < c.size() && n < max && got < bytes; ++n) {
    Record& r = records_[c[n].id];
    got += uint64_t{r.pages} * 4096;
    bool small = r.queue == kSmall;
    UnlinkLocked(c[n].id);
    out[n] = {c[n].id, r.gen, r.key, probation_ && !c[n].keep, small};
  }
  return n;
}

void DramTier::GhostInsert(const BlockKey& key, uint8_t uses) {
  // Four-way buckets, replacing the same key or else the oldest entry: close to a FIFO of
  // the table's size (a direct-mapped table lost a quarter of its entries within a quarter
  // of its size, which cost blocks coming back their past uses).
  uint64_t epoch = ghost_epoch_.fetch_add(1, std::memory_order_relaxed) & kGhostEpochMask;
  uint64_t fp = GhostPrint(key);
  uint64_t u = std::min(uses, kMaxUses);
  std::atomic<uint64_t>* bucket = &ghost_[(key.lo & ghost_mask_) * kGhostWays];
  int victim = 0;
  uint64_t oldest = 0;
  for (int w = 0; w < kGhostWays; ++w) {
    uint64_t v = bucket[w].load(std::memory_order_relaxed);
    if (v == 0 || (v >> 32) == fp) {
      victim = w;
      break;
    }
    uint64_t age = (epoch - v) & kGhostEpochMask;
    if (age > oldest) {
      oldest = age;
      victim = w;
    }
  }
  // Races between inserters lose an entry at worst: a ghost is a hint.
  bucket[victim].store((fp << 32) | (u << 30) | epoch, std::memory_order_relaxed);
}

int DramTier::GhostUses(const BlockKey& key) const {
  uint64_t fp = GhostPrint(key);
  const std::atomic<uint64_t>* bucket = &ghost_[(key.lo & ghost_mask_) * kGhostWays];
  uint64_t now = ghost_epoch_.load(std::memory_order_relaxed);
  for (int w = 0; w < kGhostWays; ++w) {
    uint64_t v = bucket[w].load(std::memory_order_relaxed);
    if (v == 0 || (v >> 32) != fp) continue;
    // Entries older than the table's size have been replaced in a FIFO; here they may
    // linger in a quiet bucket, so they are aged out the same.
    if (((now - v) & kGhostEpochMask) >= ghost_slots_) return -1;
    return static_cast<int>((v >> 30) & 3);
  }
  return -1;
}

}  // namespace kvpool::engine
