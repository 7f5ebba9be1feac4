#include "engine/policy_tuner.h"

#include <algorithm>
#include <cmath>

namespace kvpool::engine {
namespace {
// Candidates, in DRAM-fulls of newer blocks one past use outlives: 0 (LRU) and 1/16 .. 4.
constexpr double kCandidates[] = {0, 0.0625, 0.125, 0.25, 0.5, 1, 2, 4};
constexpr uint64_t kSimPages = 64 * 1024;      // a simulation's target size, in pages
constexpr uint64_t kTierSimPages = 64 * 1024;  // a two-tier simulation's, DRAM + flash
// Probation shares of DRAM the two-tier simulations try, each with and without writing
// one-hit blocks to flash.
constexpr double kProbationCandidates[] = {0.02, 0.1, 0.25, 0.5};
constexpr double kHeldWeight = 1.0 / 16;  // of each new sample of DRAM's held share
constexpr uint8_t kMaxUses = 3;
constexpr uint64_t kMinEpoch = 4096, kEpochPerBlock = 2;
constexpr double kDecay = 0.75;
constexpr double kMargin = 0.01;
// Heap order for std::*_heap: the lowest priority comes out first.
struct Later {
  template <class T>
  bool operator()(const T& a, const T& b) const {
    return a.key != b.key ? a.key > b.key : a.seq < b.seq;  // ties: the later added first
  }
};
uint64_t BlockId(const BlockKey& k) { return k.lo ^ (k.hi * 0xC2B2AE3D27D4EB4Full); }
// A FIFO of (block, seq) whose entries go stale when their block leaves another way (a
// promotion, an erase): past twice the live entries (plus slack) the stale ones are
// dropped, so a FIFO that is seldom popped (a flash whose blocks are all promoted back)
// does not grow without bound.
template <class IsLive>
void DropStale(std::deque<std::pair<uint64_t, uint32_t>>& fifo, size_t live, IsLive is_live) {
  if (fifo.size() <= 2 * live + 1024) return;
  std::erase_if(fifo, [&](const std::pair<uint64_t, uint32_t>& e) { return !is_live(e); });
}
}  // namespace

PolicyTuner::PolicyTuner(uint64_t dram_pages, uint64_t ghost_blocks, double initial,
                         uint64_t flash_pages, double probation) {
  uint64_t rate = std::max<uint64_t>(1, dram_pages / kSimPages);
  rate = std::min<uint64_t>(rate, 65536);
  threshold_ = std::max<uint64_t>(1, 65536 / rate);
  capacity_ = std::max<uint64_t>(1, dram_pages * threshold_ / 65536);
  ghost_capacity_ = std::max<uint64_t>(16, ghost_blocks * threshold_ / 65536);
  sims_.resize(std::size(kCandidates));
  double best = 1e18;
  for (size_t i = 0; i < sims_.size(); ++i) {
    sims_[i].bonus = kCandidates[i];
    sims_[i].bonus_pages = static_cast<uint64_t>(kCandidates[i] * static_cast<double>(capacity_));
    double d = std::fabs(kCandidates[i] - initial);
    if (d < best) {
      best = d;
      chosen_ = i;
    }
  }
  bonus_.store(kCandidates[chosen_], std::memory_order_relaxed);
  probation_.store(probation, std::memory_order_relaxed);
  if (flash_pages == 0) return;
  uint64_t tier_rate = std::max(rate, (dram_pages + flash_pages) / kTierSimPages);
  tier_rate = std::min<uint64_t>(tier_rate, 65536);
  tier_threshold_ = std::min(threshold_, std::max<uint64_t>(1, 65536 / tier_rate));
  tier_dram_ = std::max<uint64_t>(1, dram_pages * tier_threshold_ / 65536);
  tier_held_ = tier_dram_;
  tier_flash_ = std::max<uint64_t>(1, flash_pages * tier_threshold_ / 65536);
  tier_ghost_ = std::max<uint64_t>(16, ghost_blocks * tier_threshold_ / 65536);
  // The store starts writing one-hit blocks, with the candidate share nearest its own.
  double nearest = 1e18;
  for (bool admit : {true, false}) {
    for (double share : kProbationCandidates) {
      TierSim& t = tiers_.emplace_back();
      t.admit = admit;
      t.probation_share = share;
      t.probation_cap = static_cast<uint64_t>(share * static_cast<double>(tier_dram_));
      Rekey(t.dram, kCandidates[chosen_]);
      if (admit && std::fabs(share - probation) < nearest) {
        nearest = std::fabs(share - probation);
        tier_chosen_ = tiers_.size() - 1;
      }
    }
  }
  for (bool all : {true, false}) {
    TierSim& t = promos_.emplace_back();
    t.promote_all = all;
    t.reinsert = true;
    Follow(t, tiers_[tier_chosen_]);
    Rekey(t.dram, kCandidates[chosen_]);
  }
}

void PolicyTuner::Follow(TierSim& t, const TierSim& chosen) {
  t.admit = chosen.admit;
  t.probation_share = chosen.probation_share;
  t.probation_cap = chosen.probation_cap;
}

size_t PolicyTuner::TierFifoEntries() {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const TierSim& t : tiers_) n += t.probation.size() + t.flash_order.size();
  for (const TierSim& t : promos_) n += t.probation.size() + t.flash_order.size();
  return n;
}

void PolicyTuner::SetDramHeld(double share) {
  MutexLock lock(mu_);
  if (tiers_.empty()) return;
  share = std::clamp(share, 0.0, 1.0);
  held_share_ = held_share_ < 0 ? share : held_share_ * (1 - kHeldWeight) + share * kHeldWeight;
  tier_held_ =
      std::max<uint64_t>(1, static_cast<uint64_t>(held_share_ * static_cast<double>(tier_dram_)));
}

void PolicyTuner::Rekey(Sim& s, double bonus) {
  s.bonus = bonus;
  s.bonus_pages = static_cast<uint64_t>(bonus * static_cast<double>(tier_dram_));
  s.heap.clear();
  for (const auto& [block, e] : s.map) {
    if (!e.probation) s.heap.push_back({e.last_use + s.bonus_pages * e.freq, block, e.seq});
  }
  std::make_heap(s.heap.begin(), s.heap.end(), Later{});
}

void PolicyTuner::Push(Sim& s, uint64_t block, const Entry& e) {
  s.heap.push_back({e.last_use + s.bonus_pages * e.freq, block, e.seq});
  std::push_heap(s.heap.begin(), s.heap.end(), Later{});
  if (s.heap.size() > 2 * s.map.size() + 1024) {  // drop the stale items
    size_t kept = 0;
    for (const HeapItem& it : s.heap) {
      auto f = s.map.find(it.block);
      if (f != s.map.end() && f->second.seq == it.seq) s.heap[kept++] = it;
    }
    s.heap.resize(kept);
    std::make_heap(s.heap.begin(), s.heap.end(), Later{});
  }
}

void PolicyTuner::Forget(Sim& s, uint64_t block, uint8_t freq, uint64_t ghost_capacity) {
  // The ghost remembers evicted blocks' uses as long as the DRAM tier's does.
  s.ghost[block] = freq;
  s.ghost_order.push_back(block);
  while (s.ghost_order.size() > ghost_capacity) {
    s.ghost.erase(s.ghost_order.front());
    s.ghost_order.pop_front();
  }
}

bool PolicyTuner::EvictOne(Sim& s) {
  uint64_t block;
  Entry e;
  if (!PopMain(s, &block, &e)) return false;
  Forget(s, block, e.freq, ghost_capacity_);
  return true;
}

bool PolicyTuner::PopMain(Sim& s, uint64_t* block, Entry* out) {
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), Later{});
    HeapItem top = s.heap.back();
    s.heap.pop_back();
    auto f = s.map.find(top.block);
    if (f == s.map.end() || f->second.seq != top.seq) continue;  // erased or moved
    Entry& e = f->second;
    uint64_t key = e.last_use + s.bonus_pages * e.freq;
    if (key > top.key) {  // used since pushed: goes back with its current priority
      top.key = key;
      s.heap.push_back(top);
      std::push_heap(s.heap.begin(), s.heap.end(), Later{});
      continue;
    }
    s.used -= e.pages;
    s.evicted = true;
    *block = top.block;
    *out = e;
    s.map.erase(f);
    return true;
  }
  return false;
}

void PolicyTuner::Hold(TierSim& t, uint64_t block, uint32_t pages, uint8_t freq, bool main) {
  Sim& s = t.dram;
  while (s.used + pages > tier_held_ && EvictTier(t)) {
  }
  Entry e;
  e.pages = pages;
  e.freq = freq;
  e.last_use = s.clock;
  e.seq = ++s.seq;
  e.probation = !main;
  s.used += pages;
  s.added += pages;
  s.map[block] = e;
  if (main) {
    Push(s, block, e);
  } else {
    t.probation.emplace_back(block, e.seq);
    t.probation_used += pages;
    DropStale(t.probation, s.map.size(), [&s](const std::pair<uint64_t, uint32_t>& q) {
      auto f = s.map.find(q.first);
      return f != s.map.end() && f->second.seq == q.second && f->second.probation;
    });
  }
}

bool PolicyTuner::AccessTier(TierSim& t, uint64_t block, uint32_t pages, bool add) {
  Sim& s = t.dram;
  auto f = s.map.find(block);
  if (f != s.map.end()) {
    Entry& e = f->second;
    if (e.freq < kMaxUses) ++e.freq;
    e.last_use = s.clock;
    return true;
  }
  auto c = t.flash.find(block);
  if (c != t.flash.end()) {  // a flash hit: promoted to the main queue, the copy kept
    TierSim::Copy copy = c->second;
    c->second.used = true;
    // Or left where it is while far from the log's end.
    if (!t.promote_all && (t.flash_written - copy.at) * 2 < tier_flash_) return true;
    Hold(t, block, copy.pages, static_cast<uint8_t>(std::min<int>(kMaxUses, copy.freq + 1)), true);
    return true;
  }
  pages = std::max<uint32_t>(1, pages);
  if (!add || pages > tier_held_) return false;
  auto g = s.ghost.find(block);
  bool ghost = g != s.ghost.end();
  Hold(t, block, pages, ghost ? static_cast<uint8_t>(std::min<int>(kMaxUses, g->second + 1)) : 0,
       ghost);
  return false;
}

bool PolicyTuner::EvictTier(TierSim& t) {
  Sim& s = t.dram;
  while (!t.probation.empty() &&
         (t.probation_used > t.probation_cap || s.used == t.probation_used)) {
    auto [block, seq] = t.probation.front();
    t.probation.pop_front();
    auto f = s.map.find(block);
    if (f == s.map.end() || f->second.seq != seq || !f->second.probation) continue;
    Entry& e = f->second;
    t.probation_used -= e.pages;
    e.probation = false;
    if (e.freq > 0) {  // used during probation: admitted to the main queue
      Push(s, block, e);
      continue;
    }
    uint32_t pages = e.pages;
    s.used -= pages;
    s.map.erase(f);
    if (t.admit) {
      ToFlash(t, block, pages, 0);
    } else {
      Forget(s, block, 0, tier_ghost_);
    }
    return true;
  }
  uint64_t block;
  Entry e;
  if (!PopMain(s, &block, &e)) return false;
  auto c = t.flash.find(block);
  if (c != t.flash.end()) {
    c->second.freq = e.freq;  // its flash copy is still there: nothing to write
  } else {
    ToFlash(t, block, e.pages, e.freq);
  }
  return true;
}

void PolicyTuner::ToFlash(TierSim& t, uint64_t block, uint32_t pages, uint8_t freq) {
  if (pages > tier_flash_) {
    Forget(t.dram, block, freq, tier_ghost_);
    return;
  }
  while (t.flash_used + pages > tier_flash_ && !t.flash_order.empty()) {
    auto [oldest, seq] = t.flash_order.front();
    t.flash_order.pop_front();
    auto c = t.flash.find(oldest);
    if (c == t.flash.end() || c->second.seq != seq) continue;  // promoted or erased
    if (t.reinsert && c->second.used && !t.dram.map.contains(oldest)) {
      // Used since it was written, and not in DRAM: moved to the head (once per use).
      c->second.used = false;
      c->second.seq = ++t.dram.seq;
      c->second.at = t.flash_written;
      t.flash_written += c->second.pages;
      t.flash_order.emplace_back(oldest, c->second.seq);
      continue;
    }
    t.flash_used -= c->second.pages;
    t.flash_full = true;
    Forget(t.dram, oldest, c->second.freq, tier_ghost_);
    t.flash.erase(c);
  }
  uint32_t seq = ++t.dram.seq;
  t.flash[block] = {pages, seq, freq, false, t.flash_written};
  t.flash_order.emplace_back(block, seq);
  t.flash_used += pages;
  t.flash_written += pages;
  DropStale(t.flash_order, t.flash.size(), [&t](const std::pair<uint64_t, uint32_t>& q) {
    auto c = t.flash.find(q.first);
    return c != t.flash.end() && c->second.seq == q.second;
  });
}

bool PolicyTuner::AccessSim(Sim& s, uint64_t block, uint32_t pages, bool add) {
  auto f = s.map.find(block);
  if (f != s.map.end()) {
    Entry& e = f->second;
    if (e.freq < kMaxUses) ++e.freq;
    e.last_use = s.clock;  // priority only grows: the heap item is a lower bound
    return true;
  }
  if (!add) return false;
  Entry e;
  e.pages = std::max<uint32_t>(1, pages);
  if (e.pages > capacity_) return false;
  while (s.used + e.pages > capacity_ && EvictOne(s)) {
  }
  auto g = s.ghost.find(block);
  if (g != s.ghost.end()) e.freq = static_cast<uint8_t>(std::min<int>(kMaxUses, g->second + 1));
  e.last_use = s.clock;
  e.seq = ++s.seq;
  s.used += e.pages;
  s.added += e.pages;
  s.map[block] = e;
  Push(s, block, e);
  return false;
}

namespace {
constexpr size_t kMaxQueuedKeys = 1 << 16;  // 1 MiB of keys between two drains
}  // namespace

void PolicyTuner::OfferChain(std::span<const BlockKey> chain, double dram_held) {
  if (!queue_mu_.try_lock()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  MutexLock lock(queue_mu_, kAdoptLock);
  if (queue_keys_.size() + chain.size() > kMaxQueuedKeys) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint32_t held = dram_held < 0 ? 0 : 1 + static_cast<uint32_t>(std::min(dram_held, 1.0) * 65536.0);
  queue_.push_back(
      {static_cast<uint32_t>(queue_keys_.size()), static_cast<uint32_t>(chain.size()), held, 0});
  queue_keys_.insert(queue_keys_.end(), chain.begin(), chain.end());
  queued_keys_.store(static_cast<uint32_t>(queue_keys_.size()), std::memory_order_relaxed);
}

void PolicyTuner::OfferAccess(const BlockKey& key, uint32_t pages, bool put) {
  if (!queue_mu_.try_lock()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  MutexLock lock(queue_mu_, kAdoptLock);
  if (queue_keys_.size() >= kMaxQueuedKeys) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.push_back(
      {static_cast<uint32_t>(queue_keys_.size()), 1, pages, static_cast<uint8_t>(put ? 2 : 1)});
  queue_keys_.push_back(key);
  queued_keys_.store(static_cast<uint32_t>(queue_keys_.size()), std::memory_order_relaxed);
}

void PolicyTuner::OfferErase(const BlockKey& key) {
  MutexLock lock(queue_mu_);  // not dropped: a stale block would linger
  queue_.push_back({static_cast<uint32_t>(queue_keys_.size()), 1, 0, 3});
  queue_keys_.push_back(key);
}

bool PolicyTuner::Drain() {
  std::vector<BlockKey> keys;
  std::vector<Queued> events;
  {
    MutexLock lock(queue_mu_);
    keys.swap(queue_keys_);
    events.swap(queue_);
    queued_keys_.store(0, std::memory_order_relaxed);
  }
  bool changed = false;
  for (const Queued& q : events) {
    std::span<const BlockKey> k(keys.data() + q.first, q.count);
    switch (q.kind) {
      case 0:
        if (q.pages > 0) SetDramHeld(static_cast<double>(q.pages - 1) / 65536.0);
        changed |= Chain(k);
        break;
      case 1:
      case 2:
        changed |= Access(k[0], q.pages, q.kind == 2);
        break;
      default:
        Erase(k[0]);
    }
  }
  return changed;
}

bool PolicyTuner::Chain(std::span<const BlockKey> chain) {
  MutexLock lock(mu_);
  chains_ = true;
  for (Sim& s : sims_) {
    // The leading blocks held are the hits; then the whole chain is held, all with one
    // last use, added in order (so a child, pushed later, leaves before its parent).
    bool prefix = true;
    for (const BlockKey& k : chain) {
      bool held = AccessSim(s, BlockId(k), block_pages_, /*add=*/true);
      prefix = prefix && held;
      s.hits += prefix;
    }
    s.clock += s.added;  // the clock counts pages added, as the DRAM tier's does
    s.added = 0;
  }
  if (!tiers_.empty() && TierSampled(chain[0])) {
    for (TierSim& t : tiers_) ChainTier(t, chain);
    for (TierSim& t : promos_) ChainTier(t, chain);
  }
  return CountAndMaybeEndEpoch(chain.size());
}

void PolicyTuner::ChainTier(TierSim& t, std::span<const BlockKey> chain) {
  bool prefix = true;
  for (const BlockKey& k : chain) {
    bool held = AccessTier(t, BlockId(k), block_pages_, /*add=*/true);
    prefix = prefix && held;
    t.dram.hits += prefix;
  }
  t.dram.clock += t.dram.added;
  t.dram.added = 0;
}

void PolicyTuner::AccessTierOnce(TierSim& t, uint64_t block, uint32_t pages, bool put) {
  t.dram.hits += AccessTier(t, block, pages, put);
  t.dram.clock += t.dram.added;
  t.dram.added = 0;
}

bool PolicyTuner::Access(const BlockKey& key, uint32_t pages, bool put) {
  uint64_t block = BlockId(key);
  MutexLock lock(mu_);
  if (put) block_pages_ = std::max<uint32_t>(1, pages);
  if (chains_) return false;
  for (Sim& s : sims_) {
    s.hits += AccessSim(s, block, pages, put);
    s.clock += s.added;
    s.added = 0;
  }
  if (!tiers_.empty() && TierSampled(key)) {
    for (TierSim& t : tiers_) AccessTierOnce(t, block, pages, put);
    for (TierSim& t : promos_) AccessTierOnce(t, block, pages, put);
  }
  return CountAndMaybeEndEpoch(1);
}

bool PolicyTuner::CountAndMaybeEndEpoch(uint64_t accesses) {
  epoch_accesses_ += accesses;
  uint64_t epoch_len = std::max<uint64_t>(kMinEpoch, kEpochPerBlock * sims_[0].map.size());
  if (epoch_accesses_ < epoch_len) return false;
  size_t before = chosen_, tier_before = tier_chosen_;
  EndEpoch();
  return chosen_ != before || tier_chosen_ != tier_before;
}

void PolicyTuner::EndEpoch() {
  total_score_ = total_score_ * kDecay + static_cast<double>(epoch_accesses_);
  epoch_accesses_ = 0;
  size_t best = chosen_;
  for (size_t i = 0; i < sims_.size(); ++i) {
    Sim& s = sims_[i];
    s.score = s.score * kDecay + static_cast<double>(s.hits);
    s.hits = 0;
  }
  for (size_t i = 0; i < sims_.size(); ++i) {
    if (sims_[i].score > sims_[best].score) best = i;
  }
  // Judged only once the simulations are full: before, every candidate holds everything.
  bool full = std::all_of(sims_.begin(), sims_.end(), [](const Sim& s) { return s.evicted; });
  if (full && sims_[best].score > sims_[chosen_].score * (1 + kMargin)) chosen_ = best;
  bonus_.store(sims_[chosen_].bonus, std::memory_order_relaxed);
  if (!tiers_.empty()) EndTierEpoch();
  epochs_.fetch_add(1, std::memory_order_relaxed);
}

void PolicyTuner::EndTierEpoch() {
  auto decay = [this](TierSim& t) REQUIRES(mu_) {
    t.dram.score = t.dram.score * kDecay + static_cast<double>(t.dram.hits);
    t.dram.hits = 0;
    if (t.dram.bonus != sims_[chosen_].bonus) Rekey(t.dram, sims_[chosen_].bonus);
  };
  for (TierSim& t : tiers_) decay(t);
  size_t tier_best = tier_chosen_;
  for (size_t i = 0; i < tiers_.size(); ++i) {
    if (tiers_[i].dram.score > tiers_[tier_best].dram.score) tier_best = i;
  }
  // Judged once the flashes taking one-hit blocks are full: before, they cost no block
  // its room (the others may never fill).
  bool flash_full = std::all_of(tiers_.begin(), tiers_.end(),
                                [](const TierSim& t) { return !t.admit || t.flash_full; });
  if (flash_full &&
      tiers_[tier_best].dram.score > tiers_[tier_chosen_].dram.score * (1 + kMargin)) {
    tier_chosen_ = tier_best;
    probation_.store(tiers_[tier_chosen_].probation_share, std::memory_order_relaxed);
  }
  admit_one_hit_.store(tiers_[tier_chosen_].admit, std::memory_order_relaxed);
  const TierSim& chosen = tiers_[tier_chosen_];
  for (TierSim& t : promos_) {
    decay(t);
    Follow(t, chosen);
  }
  // Judged once both flashes are full: before, a promotion costs no block its room.
  bool full =
      std::all_of(promos_.begin(), promos_.end(), [](const TierSim& t) { return t.flash_full; });
  size_t other = 1 - promo_chosen_;
  if (full && promos_[other].dram.score > promos_[promo_chosen_].dram.score * (1 + kMargin)) {
    promo_chosen_ = other;
  }
  promote_all_.store(promos_[promo_chosen_].promote_all, std::memory_order_relaxed);
}

void PolicyTuner::Erase(const BlockKey& key) {
  uint64_t block = BlockId(key);
  MutexLock lock(mu_);
  for (Sim& s : sims_) {
    auto f = s.map.find(block);
    if (f == s.map.end()) continue;
    s.used -= f->second.pages;
    s.map.erase(f);  // its heap item goes stale
  }
  if (tiers_.empty() || !TierSampled(key)) return;
  for (TierSim& t : tiers_) EraseTier(t, block);
  for (TierSim& t : promos_) EraseTier(t, block);
}

void PolicyTuner::EraseTier(TierSim& t, uint64_t block) {
  auto f = t.dram.map.find(block);
  if (f != t.dram.map.end()) {
    t.dram.used -= f->second.pages;
    if (f->second.probation) t.probation_used -= f->second.pages;
    t.dram.map.erase(f);  // its heap item or probation place goes stale
  }
  auto c = t.flash.find(block);
  if (c != t.flash.end()) {
    t.flash_used -= c->second.pages;
    t.flash.erase(c);
  }
}

}  // namespace kvpool::engine
