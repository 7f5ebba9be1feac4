// Issue 16, the MLPerf kv_cache_benchmark case: large entries split into blocks, the
// writer erasing old entries to stay under a budget, DRAM far smaller than the working
// set. The old ring log freed nothing on erase and evicted regions still full of live
// blocks (4.8% of reads missed). Here: while the live data fits DRAM + flash, no block
// that was accepted is ever lost, and every byte read back is right.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <random>
#include <thread>

#include "engine/tiered_store.h"
#include "io/memory_device.h"
#include "store_testing.h"

namespace kvpool::engine {
namespace {

using testing::OpenStore;
using testing::SmallOptions;
using testing::TestKey;
using testing::TestValue;

struct Entry {
  uint64_t first;  // key number of its first block
  uint32_t blocks;
};

void RunEntriesUnderABudget(bool mover) {
  StoreOptions o = SmallOptions(4 * kMiB, mover);
  o.flash_writes_per_day = 0;  // the benchmark writes far past any endurance budget
  o.region_bytes = 1 * kMiB;   // several entries share a region
  const uint64_t flash = 32 * kMiB;
  auto s = OpenStore(o, std::make_unique<io::MemoryDevice>(flash));
  const size_t kBlock = 32 * 1024;
  const uint64_t kLiveBudget = 28 * kMiB;  // of 4 + 32 MiB
  std::mt19937_64 rng(7);
  std::deque<Entry> live;
  uint64_t live_bytes = 0, next = 0, lost = 0, checked = 0;
  std::vector<std::byte> out(kBlock);
  auto check = [&](const Entry& e) {
    for (uint32_t b = 0; b < e.blocks; ++b) {
      BlockKey k = TestKey(e.first + b);
      auto r = s->Get(k, out);
      ++checked;
      if (!r.ok()) {
        ++lost;
        continue;
      }
      ASSERT_EQ(out, TestValue(k, 0, kBlock)) << "wrong bytes for block " << e.first + b;
    }
  };
  for (int n = 0; n < 600; ++n) {
    Entry e{next, static_cast<uint32_t>(8 + rng() % 17)};  // 0.25 to 0.75 MiB
    next += e.blocks;
    // Erase entries, oldest or any (users' entries interleave in the log, so erased
    // space is scattered over regions), until the new one fits the budget.
    while (live_bytes + e.blocks * kBlock > kLiveBudget) {
      size_t i = rng() % 2 ? 0 : rng() % live.size();
      const Entry old = live[i];
      for (uint32_t b = 0; b < old.blocks; ++b) {
        ASSERT_TRUE(s->Erase(TestKey(old.first + b)).ok())
            << "an accepted block was lost, entry " << n << "\n"
            << s->GetStats().ToString();
      }
      live_bytes -= old.blocks * kBlock;
      live.erase(live.begin() + static_cast<long>(i));
    }
    for (uint32_t b = 0; b < e.blocks; ++b) {
      BlockKey k = TestKey(e.first + b);
      ASSERT_TRUE(s->Put(k, TestValue(k, 0, kBlock)).ok()) << n;
    }
    live.push_back(e);
    live_bytes += e.blocks * kBlock;
    if (n % 10 == 9) check(live[rng() % live.size()]);
  }
  for (const Entry& e : live) check(e);
  StoreStats st = s->GetStats();
  EXPECT_EQ(lost, 0u) << "of " << checked << " blocks read\n" << st.ToString();
  EXPECT_GT(st.flash.evictions, 100u) << "the log turned over many times";
  EXPECT_GT(st.flash_compacted, 0u);
  EXPECT_EQ(st.flash_live_evicted, 0u);
  EXPECT_EQ(st.crc_failures, 0u);
  // Moving live blocks costs writes, bounded: at most 8 per byte freed, in practice less.
  EXPECT_LT(st.flash_compacted, st.demotions);
}

TEST(LiveData, NoAcceptedBlockIsLostWhileTheLiveDataFits) { RunEntriesUnderABudget(false); }
TEST(LiveData, NoAcceptedBlockIsLostWithTheBackgroundMover) { RunEntriesUnderABudget(true); }

// Issue 16: with 512 MiB of DRAM, 21 puts of 16 MiB blocks failed with NoSpace while
// flash had room: a contiguous run takes many evictions in a DRAM fragmented by small
// blocks, and the put gave up after 64 rounds. Small and large puts from two threads,
// with the background mover: none fails, and every large block reads back.
TEST(LiveData, LargePutsAmongSmallOnesNeverFailWithNoSpace) {
  StoreOptions o = SmallOptions(64 * kMiB, /*mover=*/true);
  o.flash_writes_per_day = 0;
  o.region_bytes = 4 * kMiB;
  auto s = OpenStore(o, std::make_unique<io::MemoryDevice>(256 * kMiB));
  std::atomic<int> failed{0};
  std::thread small([&] {
    for (int i = 0; i < 3000; ++i) {
      BlockKey k = TestKey(i);
      if (!s->Put(k, TestValue(k, 0, 16 * 1024)).ok()) ++failed;
    }
  });
  std::atomic<bool> done{false};
  std::thread reader([&] {  // holds views of small blocks: pins the victims' neighbours
    std::mt19937 rng(3);
    while (!done) {
      auto v = s->Read(TestKey(rng() % 3000));
      std::this_thread::yield();
    }
  });
  const size_t kLarge = 16 * kMiB;
  std::vector<std::byte> out(kLarge);
  for (int i = 0; i < 24; ++i) {
    BlockKey k = TestKey(1'000'000 + i);
    Status st = s->Put(k, TestValue(k, 0, kLarge));
    EXPECT_TRUE(st.ok()) << i << " " << st.ToString();
    auto r = s->Get(k, out);
    ASSERT_TRUE(r.ok()) << i;
    ASSERT_EQ(out, TestValue(k, 0, kLarge)) << i;
  }
  small.join();
  done = true;
  reader.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(s->GetStats().put_rejected, 0u);
}

}  // namespace
}  // namespace kvpool::engine
