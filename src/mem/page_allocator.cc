#include "mem/page_allocator.h"

#include <bit>

namespace kvpool::mem {

PageAllocator::PageAllocator(uint32_t pages)
    : pages_(pages),
      max_order_(pages ? 31 - std::countl_zero(pages) : 0),
      head_order_(pages, kNotHead),
      next_(pages, kNone),
      prev_(pages, kNone),
      lists_(32, kNone) {
  MutexLock lock(mu_);
  FreeRangeLocked(0, pages);
}

void PageAllocator::PushLocked(uint32_t page, int order) {
  head_order_[page] = static_cast<uint8_t>(order);
  prev_[page] = kNone;
  next_[page] = lists_[order];
  if (lists_[order] != kNone) prev_[lists_[order]] = page;
  lists_[order] = page;
}

void PageAllocator::RemoveLocked(uint32_t page, int order) {
  head_order_[page] = kNotHead;
  if (prev_[page] != kNone) {
    next_[prev_[page]] = next_[page];
  } else {
    lists_[order] = next_[page];
  }
  if (next_[page] != kNone) prev_[next_[page]] = prev_[page];
}

void PageAllocator::FreeBlockLocked(uint32_t page, int order) {
  while (order < max_order_) {
    uint32_t buddy = page ^ (1u << order);
    if (buddy >= pages_ || head_order_[buddy] != order) break;
    RemoveLocked(buddy, order);
    page &= ~(1u << order);
    ++order;
  }
  PushLocked(page, order);
}

void PageAllocator::FreeRangeLocked(uint32_t first, uint32_t pages) {
  free_ += pages;
  while (pages > 0) {
    // The largest block aligned at `first` that fits in what is left.
    int align = first ? std::countr_zero(first) : 31;
    int fit = 31 - std::countl_zero(pages);
    int order = align < fit ? align : fit;
    FreeBlockLocked(first, order);
    first += 1u << order;
    pages -= 1u << order;
  }
}

uint32_t PageAllocator::Allocate(uint32_t pages) {
  if (pages == 0) return kNone;
  int want = pages == 1 ? 0 : 32 - std::countl_zero(pages - 1);
  MutexLock lock(mu_);
  int order = want;
  while (order <= max_order_ && lists_[order] == kNone) ++order;
  if (order > max_order_) return kNone;
  uint32_t page = lists_[order];
  RemoveLocked(page, order);
  free_ -= 1u << order;
  // Give back everything past the request: the halves from splitting and the trim.
  uint32_t block = 1u << order;
  if (block > pages) FreeRangeLocked(page + pages, block - pages);
  return page;
}

void PageAllocator::Free(uint32_t first, uint32_t pages) {
  MutexLock lock(mu_);
  FreeRangeLocked(first, pages);
}

uint32_t PageAllocator::free_pages() const {
  MutexLock lock(mu_);
  return free_;
}

uint32_t PageAllocator::largest_free_run() const {
  MutexLock lock(mu_);
  for (int o = max_order_; o >= 0; --o) {
    if (lists_[o] != kNone) return 1u << o;
  }
  return 0;
}

}  // namespace kvpool::mem
