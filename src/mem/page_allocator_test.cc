#include "mem/page_allocator.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace kvpool::mem {
namespace {

TEST(PageAllocator, TrimmingWastesNothing) {
  PageAllocator a(1024);
  uint32_t p = a.Allocate(640);  // 2.5 MiB in 4 KiB pages: takes 1024, gives 384 back
  ASSERT_NE(p, PageAllocator::kNone);
  EXPECT_EQ(a.free_pages(), 384u);
  EXPECT_NE(a.Allocate(256), PageAllocator::kNone);
  EXPECT_NE(a.Allocate(128), PageAllocator::kNone);
  EXPECT_EQ(a.free_pages(), 0u);
  EXPECT_EQ(a.Allocate(1), PageAllocator::kNone);
}

TEST(PageAllocator, NonPowerOfTwoArena) {
  PageAllocator a(1000);
  EXPECT_EQ(a.free_pages(), 1000u);
  std::vector<uint32_t> got;
  for (uint32_t p; (p = a.Allocate(1)) != PageAllocator::kNone;) got.push_back(p);
  EXPECT_EQ(got.size(), 1000u);
  for (uint32_t p : got) a.Free(p, 1);
  EXPECT_EQ(a.free_pages(), 1000u);
  EXPECT_EQ(a.largest_free_run(), 512u);  // coalesced back
}

// Randomized against a model: allocations never overlap, stay in bounds, and freeing all
// coalesces the arena back into its largest blocks.
TEST(PageAllocator, RandomizedNoOverlap) {
  constexpr uint32_t kPages = 4096;
  PageAllocator a(kPages);
  std::mt19937 rng(42);
  std::map<uint32_t, uint32_t> live;  // first -> pages
  std::vector<int> owner(kPages, 0);
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      uint32_t n = 1 + rng() % (rng() % 4 == 0 ? 300 : 16);
      uint32_t p = a.Allocate(n);
      if (p == PageAllocator::kNone) continue;
      ASSERT_LE(p + n, kPages);
      for (uint32_t i = p; i < p + n; ++i) {
        ASSERT_EQ(owner[i], 0) << "page " << i << " handed out twice";
        owner[i] = 1;
      }
      live[p] = n;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      for (uint32_t i = it->first; i < it->first + it->second; ++i) owner[i] = 0;
      a.Free(it->first, it->second);
      live.erase(it);
    }
    uint32_t used = 0;
    for (auto& [p, n] : live) used += n;
    ASSERT_EQ(a.free_pages(), kPages - used);
  }
  for (auto& [p, n] : live) a.Free(p, n);
  EXPECT_EQ(a.free_pages(), kPages);
  EXPECT_EQ(a.largest_free_run(), kPages);
}

}  // namespace
}  // namespace kvpool::mem
