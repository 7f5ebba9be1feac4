#include "engine/flash_log.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "io/memory_device.h"
#include "kvpool/options.h"

namespace kvpool::engine {
namespace {

const BlockKey kKey{1, 2};  // the log only remembers keys for compaction

// 4 regions of 16 pages. A model of the log: blocks never overlap while valid, nothing
// passes the device's end, and a block released or not, spanning regions or not, is
// never overwritten while it still reads as valid.
TEST(FlashLog, NoValidBlockIsEverOverwritten) {
  FlashLog log(4 * 16 * 4096, 16 * 4096);
  ASSERT_EQ(log.region_count(), 4u);
  struct Live {
    FlashLog::Extent ext;
    uint32_t pages;
  };
  std::vector<Live> all;
  std::mt19937 rng(5);
  for (int i = 0; i < 4000; ++i) {
    uint32_t pages = 1 + rng() % 20;  // some span regions
    FlashLog::Extent ext;
    uint32_t ev;
    ASSERT_TRUE(log.Append(pages, kKey, 0, 0, 0, &ext, &ev));
    log.Written(ext);
    ASSERT_LE(ext.page + pages, 64u) << "a block passed the end";
    ASSERT_TRUE(log.Valid(ext.page, ext.gen));
    for (const Live& l : all) {
      if (!log.Valid(l.ext.page, l.ext.gen)) continue;
      bool overlap = ext.page < l.ext.page + l.pages && l.ext.page < ext.page + pages;
      ASSERT_FALSE(overlap) << "new block overwrites a block still marked valid, step " << i;
    }
    all.push_back({ext, pages});
    if (rng() % 3 == 0) {  // an erase
      size_t j = rng() % all.size();
      log.Release(all[j].ext.page, all[j].ext.gen, all[j].pages);
      all.erase(all.begin() + static_cast<long>(j));
    }
    if (all.size() > 64) all.erase(all.begin());
  }
  EXPECT_GT(log.regions_evicted(), 100u);
  FlashLog::Extent ext;
  uint32_t ev;
  EXPECT_FALSE(log.Append(65, kKey, 0, 0, 0, &ext, &ev)) << "larger than the device";
}

// Issue 16: erased bytes are free space. A region whose blocks were all released is the
// next one taken, and the regions full of live blocks are kept.
TEST(FlashLog, TakesTheRegionWithLeastLiveDataFirst) {
  FlashLog log(4 * 16 * 4096, 16 * 4096);
  std::vector<FlashLog::Extent> blocks;
  uint32_t ev;
  for (int i = 0; i < 64; ++i) {  // four regions of sixteen one-page blocks
    FlashLog::Extent e;
    ASSERT_TRUE(log.Append(1, kKey, 0, 0, 0, &e, &ev));
    log.Written(e);
    blocks.push_back(e);
  }
  EXPECT_EQ(log.used_bytes(), 64u * 4096);
  uint32_t victim = blocks[20].page / 16;  // the second region taken
  for (const auto& e : blocks) {
    if (e.page / 16 == victim) log.Release(e.page, e.gen, 1);
  }
  EXPECT_EQ(log.live_pages(victim), 0u);
  EXPECT_EQ(log.used_bytes(), 48u * 4096);
  FlashLog::Extent next;
  ASSERT_TRUE(log.Append(1, kKey, 0, 0, 0, &next, &ev));
  log.Written(next);
  EXPECT_EQ(next.page / 16, victim);
  for (const auto& e : blocks) {
    if (e.page / 16 != victim) EXPECT_TRUE(log.Valid(e.page, e.gen)) << e.page;
  }
  // Released twice, or released once stale: counted once, never below zero.
  log.Release(blocks[20].page, blocks[20].gen, 1);
  EXPECT_EQ(log.used_bytes(), 49u * 4096);
}

// The newer half of the log: regions the head entered within the last half of them. With
// eight regions filled in order, the blocks of the last four are there; once the head
// comes round and takes the first region again, the fifth region has left it.
TEST(FlashLog, TheNewerHalfIsTheRegionsEnteredLast) {
  FlashLog log(8 * 16 * 4096, 16 * 4096);
  std::vector<FlashLog::Extent> blocks;
  uint32_t ev;
  for (uint64_t i = 0; i < 8 * 16; ++i) {
    FlashLog::Extent e;
    ASSERT_TRUE(log.Append(1, BlockKey{3, i}, 4096, 0, 0, &e, &ev));
    log.Written(e);
    blocks.push_back(e);
  }
  for (uint64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(log.InNewerHalf(blocks[r * 16].page), r >= 4) << "region " << r;
    EXPECT_EQ(log.InNewerHalf(blocks[r * 16 + 15].page), r >= 4) << "region " << r;
  }
  FlashLog::Extent next;
  ASSERT_TRUE(log.Append(1, BlockKey{4, 0}, 4096, 0, 0, &next, &ev));
  log.Written(next);
  EXPECT_TRUE(log.InNewerHalf(next.page));
  EXPECT_FALSE(log.InNewerHalf(blocks[4 * 16].page));
  EXPECT_TRUE(log.InNewerHalf(blocks[5 * 16].page));
  EXPECT_FALSE(log.InNewerHalf(8 * 16 * 4096));  // past the device: no region
}

// Reinsertion: of the regions the head takes next, the blocks used since they were written
// are named to be moved first; the others go with their region, and a region whose used
// blocks were moved is left to go (compaction would move the unused ones too).
TEST(FlashLog, ReinsertionNamesTheUsedBlocksOfTheNextRegionOnly) {
  FlashLog log(4 * 16 * 4096, 16 * 4096);
  std::vector<FlashLog::Extent> blocks;
  uint32_t ev;
  for (uint64_t i = 0; i < 64; ++i) {  // four full regions, filled in order
    FlashLog::Extent e;
    ASSERT_TRUE(log.Append(1, BlockKey{1, i}, 4096, 0, 0, &e, &ev));
    log.Written(e);
    blocks.push_back(e);
  }
  uint32_t first = blocks[0].page / 16, second = blocks[16].page / 16;
  log.Touch(blocks[3].page, blocks[3].gen);
  log.Touch(blocks[7].page, blocks[7].gen);
  log.Touch(blocks[20].page, blocks[20].gen);
  uint32_t region = 99;
  std::vector<FlashLog::Located> keys;
  ASSERT_TRUE(log.ReinsertionCandidate(1, &region, &keys));
  EXPECT_EQ(region, first);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].key, (BlockKey{1, 3}));
  EXPECT_EQ(keys[1].key, (BlockKey{1, 7}));
  // Moved (the caller appends them elsewhere and releases these copies).
  log.Release(blocks[3].page, blocks[3].gen, 1);
  log.Release(blocks[7].page, blocks[7].gen, 1);
  EXPECT_FALSE(log.ReinsertionCandidate(1, &region, &keys))
      << "the next region has no used block left";
  ASSERT_TRUE(log.ReinsertionCandidate(2, &region, &keys));
  EXPECT_EQ(region, second);
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0].key, (BlockKey{1, 20}));
  // 14 of 16 pages live would be compacted, but its used blocks are gone: it goes as it is.
  EXPECT_FALSE(log.CompactionCandidate(&region, &keys));
  FlashLog::Extent next;
  ASSERT_TRUE(log.Append(1, BlockKey{2, 0}, 4096, 0, 0, &next, &ev));
  log.Written(next);
  EXPECT_EQ(next.page / 16, first);
  EXPECT_FALSE(log.Valid(blocks[0].page, blocks[0].gen));
  log.Touch(blocks[0].page, blocks[0].gen);  // stale: no-op
  EXPECT_TRUE(log.Valid(blocks[20].page, blocks[20].gen));
}

TEST(FlashLog, BlockLargerThanRegionSpansAndPinsItsRun) {
  FlashLog log(8 * 4 * 4096, 4 * 4096);
  FlashLog::Extent a, b;
  uint32_t ev;
  ASSERT_TRUE(log.Append(10, kKey, 0, 0, 0, &a, &ev));  // a run of three regions
  log.Written(a);
  ASSERT_TRUE(log.Append(2, kKey, 0, 0, 0, &b, &ev));  // the rest of the run's last region
  log.Written(b);
  EXPECT_EQ(b.page, a.page + 10);
  EXPECT_TRUE(log.Valid(a.page, a.gen));
  // Many small blocks, each erased at once: the log turns over the free regions and never
  // takes a's run while a is live.
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(log.Append(2, kKey, 0, 0, 0, &b, &ev));
    log.Written(b);
    EXPECT_FALSE(b.page < a.page + 10 && a.page < b.page + 2) << i;
    log.Release(b.page, b.gen, 2);
    ASSERT_TRUE(log.Valid(a.page, a.gen)) << i;
  }
  // Erased, its run is reused like any other.
  log.Release(a.page, a.gen, 10);
  bool reused = false;
  for (int i = 0; i < 200 && !reused; ++i) {
    ASSERT_TRUE(log.Append(2, kKey, 0, 0, 0, &b, &ev));
    log.Written(b);
    reused = b.page < a.page + 10 && a.page < b.page + 2;
  }
  EXPECT_TRUE(reused);
  EXPECT_FALSE(log.Valid(a.page, a.gen));
}

}  // namespace
}  // namespace kvpool::engine

namespace kvpool::engine {
namespace {

// Issue 16 item 6 at the log's level: summaries long enough to take several pages (4 KiB
// blocks in 4 MiB regions: 1024 entries, 9 pages) come back whole; a summary torn or
// flipped drops its region and no other; a released block is not listed.
TEST(FlashLogPersist, SummariesOfManyPagesComeBackAndATornOneDropsItsRegionOnly) {
  io::MemoryDevice dev(FlashGeometry::DeviceBytesFor(6 * 4 * kMiB, 4 * kMiB));
  std::vector<FlashLog::Recovered> found;
  FlashLog::OpenStats st;
  std::vector<std::pair<BlockKey, uint32_t>> written;  // key, page
  {
    FlashLog log(&dev, 4 * kMiB);
    ASSERT_EQ(log.region_count(), 6u);
    ASSERT_TRUE(log.Open(true, &found, &st).ok());
    EXPECT_TRUE(st.formatted);
    for (uint64_t i = 0; i < 4 * 1024; ++i) {  // four regions full of one-page blocks
      FlashLog::Extent ext;
      uint32_t ev;
      BlockKey k{i + 1, i * 7 + 1};
      ASSERT_TRUE(log.Append(1, k, 4000, static_cast<uint32_t>(i), 0, &ext, &ev));
      log.Written(ext);
      if (i % 100 == 5) {
        log.Release(ext.page, ext.gen, 1);  // erased: must not come back
      } else {
        written.push_back({k, ext.page});
      }
    }
    log.Persist();
    log.Close();
  }
  {
    FlashLog log(&dev, 4 * kMiB);
    ASSERT_TRUE(log.Open(true, &found, &st).ok());
    EXPECT_FALSE(st.formatted);
    EXPECT_EQ(st.regions_dropped, 0u);
    ASSERT_EQ(found.size(), written.size());
    for (size_t i = 0; i < found.size(); ++i) {
      EXPECT_EQ(found[i].key, written[i].first);
      EXPECT_EQ(found[i].page, written[i].second);
      EXPECT_EQ(found[i].size, 4000u);
    }
    EXPECT_EQ(log.blocks(), written.size());
  }
  // Flip one byte in the third page of region 1's summary: region 1 is dropped, the others
  // come back.
  FlashGeometry g = FlashGeometry::For(dev.size(), 4 * kMiB, true);
  alignas(4096) static std::byte page[4096];
  uint64_t off = g.head_offset(1) + 2 * 4096;
  ASSERT_TRUE(dev.Read(off, page, 4096).ok());
  page[100] ^= std::byte{0x40};
  ASSERT_TRUE(dev.Write(off, page, 4096).ok());
  // And one in region 2's sixth page (past the head: in the tail area).
  off = g.tail_offset(2) + 1 * 4096;
  ASSERT_TRUE(dev.Read(off, page, 4096).ok());
  page[8] ^= std::byte{0x01};
  ASSERT_TRUE(dev.Write(off, page, 4096).ok());
  FlashLog log(&dev, 4 * kMiB);
  ASSERT_TRUE(log.Open(true, &found, &st).ok());
  EXPECT_EQ(st.regions_dropped, 2u);
  EXPECT_EQ(st.regions_read, 2u);
  for (const auto& r : found) EXPECT_TRUE(r.page / 1024 != 1 && r.page / 1024 != 2) << r.page;
}

}  // namespace
}  // namespace kvpool::engine
