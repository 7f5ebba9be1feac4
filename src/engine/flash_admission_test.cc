// Flash admission by a write budget (issue 16): every block DRAM pushes out goes to flash
// while the budget allows; unread blocks are refused first as it runs low, then all; the
// budget refills with time. WriteBudget alone on a hand-driven clock, then the store.
#include <gtest/gtest.h>

#include <atomic>

#include "engine/tiered_store.h"
#include "engine/write_budget.h"
#include "io/memory_device.h"
#include "store_testing.h"

namespace kvpool::engine {
namespace {

using testing::OpenStore;
using testing::SmallOptions;
using testing::TestKey;
using testing::TestValue;

std::atomic<uint64_t> g_now{0};
uint64_t FakeClock() { return g_now.load(); }
constexpr uint64_t kSecond = 1'000'000'000;

TEST(WriteBudget, BurstThenUnreadRefusedBelowHalfThenAllThenRefills) {
  g_now = 0;
  WriteBudget b(/*bytes_per_second=*/1000, /*bucket_bytes=*/10000, &FakeClock);
  EXPECT_DOUBLE_EQ(b.level(), 1.0);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.Admit(1000, /*used=*/false)) << i;
  EXPECT_FALSE(b.Admit(1000, false)) << "unread blocks stop at half";
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.Admit(1000, /*used=*/true)) << i;
  EXPECT_FALSE(b.Admit(1, true)) << "empty: nothing";
  g_now = 3 * kSecond;  // 3000 bytes back
  EXPECT_TRUE(b.Admit(3000, true));
  EXPECT_FALSE(b.Admit(1, true));
  g_now = 100 * kSecond;  // refills to the bucket, not past it
  EXPECT_DOUBLE_EQ(b.level(), 1.0);
  g_now = 50 * kSecond;  // a clock that goes back refills nothing and breaks nothing
  EXPECT_TRUE(b.Admit(10000, true));
  EXPECT_FALSE(b.Admit(1, true));
}

// The case from the issue: 2000 puts of 64 KiB, never read, into 64 MiB of DRAM with ample
// flash. Under the old default (probation) 496 were readable afterwards; a user who puts a
// context expects to find it while there is room for it.
TEST(FlashAdmission, EveryPutIsFoundWhileThereIsRoom) {
  StoreOptions o = SmallOptions(64 * kMiB);  // default admission: the write budget
  ASSERT_EQ(o.admission, Admission::kBudget);
  auto s = OpenStore(o, std::make_unique<io::MemoryDevice>(256 * kMiB));
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(s->Put(TestKey(i), TestValue(TestKey(i), 0, 65536)).ok()) << i;
  }
  std::vector<std::byte> out(65536);
  int found = 0;
  for (int i = 0; i < 2000; ++i) {
    if (!s->Get(TestKey(i), out).ok()) continue;
    ++found;
    ASSERT_EQ(out, TestValue(TestKey(i), 0, 65536)) << i;
  }
  EXPECT_EQ(found, 2000);
  StoreStats st = s->GetStats();
  EXPECT_EQ(st.admission_drops, 0u) << st.ToString();
  EXPECT_GT(st.demotions, 900u);
}

// With a small budget the flash tier is written no faster than it allows: a burst of one
// device, then the rate; blocks read while in DRAM keep their place while unread ones are
// refused; after a while of (fake) time, writes resume.
TEST(FlashAdmission, TheBudgetBoundsFlashWritesAndPrefersReadBlocks) {
  g_now = 0;
  StoreOptions o = SmallOptions(4 * kMiB);
  o.probation_fraction = 0.25;
  o.flash_writes_per_day = 86400.0 / 1000;  // one device per 1000 s
  o.clock_ns = &FakeClock;
  const uint64_t flash = 8 * kMiB;
  auto s = OpenStore(o, std::make_unique<io::MemoryDevice>(flash));
  const size_t kBlock = 16384;
  std::vector<std::byte> out(kBlock);
  // Three devices' worth of unread blocks at one instant: at most the burst is written.
  for (int i = 0; i < 1536; ++i) {
    ASSERT_TRUE(s->Put(TestKey(i), TestValue(TestKey(i), 0, kBlock)).ok());
  }
  StoreStats st = s->GetStats();
  EXPECT_LE(st.flash.bytes_written, flash / 2 + kBlock) << "unread blocks stop at half";
  EXPECT_GT(st.budget_drops, 500u);
  // Below half, blocks read while in DRAM are still written, unread ones are not.
  uint64_t written = st.flash.bytes_written;
  int read_kept = 0, unread_kept = 0;
  for (int i = 0; i < 256; ++i) {
    BlockKey k = TestKey(100000 + i);
    ASSERT_TRUE(s->Put(k, TestValue(k, 0, kBlock)).ok());
    if (i % 2 == 0) ASSERT_TRUE(s->Get(k, out).ok());  // read while in probation
  }
  for (int i = 0; i < 512; ++i) {  // push them all out of DRAM (read ones: out of main)
    BlockKey k = TestKey(200000 + i);
    ASSERT_TRUE(s->Put(k, TestValue(k, 0, kBlock)).ok());
    ASSERT_TRUE(s->Get(k, out).ok());
  }
  for (int i = 0; i < 256; ++i) {
    bool held = s->Exists(TestKey(100000 + i));
    (i % 2 == 0 ? read_kept : unread_kept) += held;
  }
  EXPECT_GT(read_kept, 100);
  EXPECT_EQ(unread_kept, 0);
  EXPECT_GT(s->GetStats().flash.bytes_written, written);
  EXPECT_LE(s->GetStats().flash.bytes_written, flash + kBlock) << "never past the burst";
  // 500 s later half a device may be written again: new unread blocks reach flash.
  g_now = 500 * kSecond;
  uint64_t before = s->GetStats().flash.bytes_written;
  for (int i = 0; i < 512; ++i) {
    BlockKey k = TestKey(300000 + i);
    ASSERT_TRUE(s->Put(k, TestValue(k, 0, kBlock)).ok());
  }
  uint64_t more = s->GetStats().flash.bytes_written - before;
  EXPECT_GT(more, 0u);
  EXPECT_LE(more, flash / 2 + kBlock);
}

TEST(FlashAdmission, UnlimitedAndProbationStillWork) {
  StoreOptions o = SmallOptions(4 * kMiB);
  o.flash_writes_per_day = 0;  // unlimited
  auto s = OpenStore(o, std::make_unique<io::MemoryDevice>(16 * kMiB));
  for (int i = 0; i < 1024; ++i)
    ASSERT_TRUE(s->Put(TestKey(i), TestValue(TestKey(i), 0, 8192)).ok());
  EXPECT_EQ(s->GetStats().admission_drops, 0u);
  StoreOptions bad = SmallOptions();
  bad.flash_writes_per_day = -1;
  EXPECT_EQ(bad.Validate().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace kvpool::engine
