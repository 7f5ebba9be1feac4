#include "engine/index.h"

#include <algorithm>
#include <bit>
#include <new>

namespace kvpool::engine {
namespace {

// Zeroed slots on huge pages when the table is large enough to fill one (a small table on
// a 2 MiB page would commit the whole page at its first write); never the hugetlb pool,
// which is sized for the DRAM tier.
std::unique_ptr<mem::Arena> MapTable(size_t slots, bool prefault) {
  uint64_t bytes = slots * sizeof(IndexEntry);
  auto arena = mem::Arena::Create(bytes, /*huge_pages=*/bytes >= (2u << 20), prefault,
                                  /*lock=*/false, /*hugetlb=*/false);
  if (!arena.ok()) throw std::bad_alloc();  // as the std::vector it replaces would
  return std::move(*arena);
}

}  // namespace

Index::Index(uint64_t capacity, unsigned shards, bool prefault) {
  if (shards == 0 || (shards & (shards - 1))) shards = std::bit_ceil(shards ? shards : 1u);
  if (shards > (1u << 20)) shards = 1u << 20;
  shard_mask_ = shards - 1;
  // Start at 75% load for the asked capacity (any size: homes are found by multiply-shift,
  // not a mask); tables double past 85%.
  uint64_t per = std::max<uint64_t>(64, capacity / shards * 4 / 3);
  first_tables_ = MapTable(per * shards, prefault);
  auto* slots = reinterpret_cast<IndexEntry*>(first_tables_->base());
  for (unsigned i = 0; i < shards; ++i) {
    auto s = std::make_unique<Shard>();
    s->slots_ = slots + i * per;
    s->capacity_ = per;
    shards_.push_back(std::move(s));
  }
}

thread_local uint64_t Index::Shard::finds_ = 0;
std::atomic<bool> Index::Shard::counting_{false};

IndexEntry* Index::Shard::Find(const BlockKey& key) {
  if (counting_.load(std::memory_order_relaxed)) [[unlikely]]
    ++finds_;
  for (size_t i = Home(key.lo);; i = Next(i)) {
    IndexEntry& e = slots_[i];
    if (e.key == key) return &e;
    if (e.key.empty()) return nullptr;
  }
}

IndexEntry* Index::Shard::Insert(const BlockKey& key) {
  if ((size_ + 1) * 100 > capacity_ * 85) Grow();
  for (size_t i = Home(key.lo);; i = Next(i)) {
    IndexEntry& e = slots_[i];
    if (e.key.empty()) {
      e = IndexEntry{};
      e.key = key;
      ++size_;
      return &e;
    }
  }
}

void Index::Shard::Erase(IndexEntry* entry, int tenant) {
  if (listener_) {
    uint16_t t = tenant >= 0                 ? static_cast<uint16_t>(tenant)
                 : tenant_of_ && *tenant_of_ ? (*tenant_of_)(*entry)
                                             : 0;
    listener_->OnRemoved(entry->key, t);
  }
  size_t hole = static_cast<size_t>(entry - slots_);
  // Backward-shift: pull later members of the probe run into the hole so that lookups
  // never need tombstones.
  for (size_t i = Next(hole);; i = Next(i)) {
    IndexEntry& e = slots_[i];
    if (e.key.empty()) break;
    size_t home = Home(e.key.lo);
    // Move e if its home is not in (hole, i] (cyclically).
    bool in_range = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!in_range) {
      slots_[hole] = e;
      hole = i;
    }
  }
  slots_[hole] = IndexEntry{};
  --size_;
}

void Index::Shard::Grow() {
  // The old table's memory goes with old_table (a slice of the first mapping stays
  // mapped, unused, until the index goes).
  std::unique_ptr<mem::Arena> old_table = std::move(table_);
  const IndexEntry* old = slots_;
  size_t old_capacity = capacity_;
  table_ = MapTable(old_capacity * 2, /*prefault=*/false);  // the rehash writes it all now
  slots_ = reinterpret_cast<IndexEntry*>(table_->base());
  capacity_ = old_capacity * 2;
  for (size_t j = 0; j < old_capacity; ++j) {
    const IndexEntry& e = old[j];
    if (e.key.empty()) continue;
    for (size_t i = Home(e.key.lo);; i = Next(i)) {
      if (slots_[i].key.empty()) {
        slots_[i] = e;
        break;
      }
    }
  }
}

size_t Index::Shard::EraseIf(size_t begin, size_t n,
                             const std::function<bool(const IndexEntry&)>& stale) {
  size_t erased = 0;
  size_t end = std::min(capacity_, begin + n);
  for (size_t i = begin; i < end;) {
    IndexEntry& e = slots_[i];
    if (!e.key.empty() && stale(e)) {
      Erase(&e);  // a later entry may have shifted into i: look at i again
      ++erased;
    } else {
      ++i;
    }
  }
  return erased;
}

void Index::Shard::ForEach(const std::function<void(const IndexEntry&)>& fn) const {
  for (size_t i = 0; i < capacity_; ++i) {
    if (!slots_[i].key.empty()) fn(slots_[i]);
  }
}

uint64_t Index::Size() {
  uint64_t n = 0;
  for (auto& s : shards_) {
    MutexLock lock(s->mu);
    n += s->size();
  }
  return n;
}

uint64_t Index::Bytes() {
  uint64_t n = 0;
  for (auto& s : shards_) {
    MutexLock lock(s->mu);
    n += s->capacity() * sizeof(IndexEntry);
  }
  return n;
}

}  // namespace kvpool::engine
