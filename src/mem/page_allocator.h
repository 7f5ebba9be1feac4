// A buddy allocator of 4 KiB pages over the arena, with trimming: an allocation of n pages
// takes the smallest power-of-two block that holds it and gives the tail back at once, so
// a value wastes at most the rounding to 4 KiB (an 80 MiB value holds 80 MiB, not 128).
// O(log n) per call, no memory allocation after construction.
//
// Thread safety: all methods lock an internal mutex (the critical sections are short).
#ifndef KVPOOL_MEM_PAGE_ALLOCATOR_H_
#define KVPOOL_MEM_PAGE_ALLOCATOR_H_

#include <cstdint>
#include <mutex>
#include <vector>

#include "common/mutex.h"

namespace kvpool::mem {

class PageAllocator {
 public:
  static constexpr uint32_t kNone = ~0u;
  explicit PageAllocator(uint32_t pages);

  // First page of a run of `pages` contiguous pages, or kNone when no run is free.
  uint32_t Allocate(uint32_t pages);
  // REQUIRES: [first, first + pages) was returned by Allocate(pages) and not yet freed.
  void Free(uint32_t first, uint32_t pages);

  uint32_t total_pages() const { return pages_; }
  uint32_t free_pages() const;
  // Largest run Allocate could return now.
  uint32_t largest_free_run() const;

 private:
  static constexpr uint8_t kNotHead = 0xFF;
  void FreeRangeLocked(uint32_t first, uint32_t pages) REQUIRES(mu_);
  void FreeBlockLocked(uint32_t page, int order) REQUIRES(mu_);
  void PushLocked(uint32_t page, int order) REQUIRES(mu_);
  void RemoveLocked(uint32_t page, int order) REQUIRES(mu_);

  const uint32_t pages_;
  int max_order_;
  mutable Mutex mu_;
  std::vector<uint8_t> head_order_ GUARDED_BY(mu_);  // order of the free block at a page
  std::vector<uint32_t> next_ GUARDED_BY(mu_);       // free-list links per head page
  std::vector<uint32_t> prev_ GUARDED_BY(mu_);
  std::vector<uint32_t> lists_ GUARDED_BY(mu_);  // head page of each order's list
  uint32_t free_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvpool::mem

#endif  // KVPOOL_MEM_PAGE_ALLOCATOR_H_
