#include "engine/flash_log.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace kvpool::engine {
namespace {

// 4 regions of 16 pages. A model of the ring: a block stays valid until the head comes
// back to its start region; blocks never overlap while valid; nothing wraps the end.
TEST(FlashLog, RingOrderEvictionAndValidity) {
  FlashLog log(4 * 16 * 4096, 16 * 4096);
  ASSERT_EQ(log.region_count(), 4u);
  struct Live {
    FlashLog::Extent ext;
    uint32_t pages;
  };
  std::vector<Live> all;
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    uint32_t pages = 1 + rng() % 20;  // some span regions
    FlashLog::Extent ext;
    uint32_t ev;
    ASSERT_TRUE(log.Append(pages, &ext, &ev));
    ASSERT_LE(ext.page + pages, 64u) << "a block wrapped past the end";
    ASSERT_TRUE(log.Valid(ext.page, ext.gen));
    for (const Live& l : all) {
      if (!log.Valid(l.ext.page, l.ext.gen)) continue;
      bool overlap = ext.page < l.ext.page + l.pages && l.ext.page < ext.page + pages;
      ASSERT_FALSE(overlap) << "new block overwrites a block still marked valid";
    }
    all.push_back({ext, pages});
    if (all.size() > 64) all.erase(all.begin());
  }
  EXPECT_GT(log.regions_evicted(), 100u);
  FlashLog::Extent ext;
  uint32_t ev;
  EXPECT_FALSE(log.Append(65, &ext, &ev)) << "larger than the device";
}

TEST(FlashLog, BlockLargerThanRegionSpans) {
  FlashLog log(8 * 4 * 4096, 4 * 4096);
  FlashLog::Extent a, b;
  uint32_t ev;
  ASSERT_TRUE(log.Append(10, &a, &ev));  // regions 0..2
  ASSERT_TRUE(log.Append(2, &b, &ev));
  EXPECT_EQ(a.page, 0u);
  EXPECT_EQ(b.page, 10u);
  EXPECT_TRUE(log.Valid(a.page, a.gen));
  // Fill until region 0 is entered again: the spanning block becomes stale.
  for (int i = 0; i < 20 && log.Valid(a.page, a.gen); ++i) ASSERT_TRUE(log.Append(2, &b, &ev));
  EXPECT_FALSE(log.Valid(a.page, a.gen));
}

}  // namespace
}  // namespace kvpool::engine
