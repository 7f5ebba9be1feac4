// Fault injection on the flash device: EIO, lying short reads, flipped bits, a full
// device. Every fault must end as a miss plus a counter: never wrong data, never a crash.
#include <gtest/gtest.h>

#include "faulty_device.h"
#include "store_testing.h"

namespace kvpool::engine {
namespace {

using kvpool::testing::FaultPlan;
using kvpool::testing::FaultyDevice;
using kvpool::testing::OpenStore;
using kvpool::testing::SmallOptions;
using kvpool::testing::TestKey;
using kvpool::testing::TestValue;

struct Rig {
  FaultyDevice* dev;
  std::unique_ptr<Store> store;
};

Rig MakeRig(uint64_t seed) {
  StoreOptions o = SmallOptions(4 * kMiB);
  o.admission = Admission::kAll;
  auto dev = std::make_unique<FaultyDevice>(std::make_unique<io::MemoryDevice>(64 * kMiB), seed);
  FaultyDevice* raw = dev.get();
  return {raw, OpenStore(o, std::move(dev))};
}

struct Outcome {
  uint64_t wrong = 0, hits = 0;
  StoreStats stats;
  FaultyDevice::Injected injected;
};

// Puts 300 blocks of 32 KiB (most end up on flash only), then reads all twice under `plan`.
Outcome RunWithFaults(const FaultPlan& plan) {
  Outcome out;
  Rig rig = MakeRig(99);
  EXPECT_TRUE(rig.store);
  if (!rig.store) return out;
  for (int i = 0; i < 300; ++i) {
    EXPECT_TRUE(rig.store->Put(TestKey(i), TestValue(TestKey(i), 0, 32768)).ok());
  }
  rig.dev->SetPlan(plan);
  std::vector<std::byte> buf(32768);
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < 300; ++i) {
      auto r = rig.store->Get(TestKey(i), buf);
      if (!r.ok()) {
        EXPECT_TRUE(r.status().IsNotFound()) << r.status().ToString();
        continue;
      }
      ++out.hits;
      if (buf != TestValue(TestKey(i), 0, 32768)) ++out.wrong;
    }
  }
  out.stats = rig.store->GetStats();
  out.injected = rig.dev->injected();
  return out;
}

TEST(FaultInjection, ReadEioIsAMiss) {
  Outcome o = RunWithFaults({.read_eio = 0.3});
  EXPECT_EQ(o.wrong, 0u);
  EXPECT_GT(o.injected.eio, 10u);
  EXPECT_EQ(o.stats.io_errors, o.injected.eio);
  EXPECT_GT(o.hits, 100u);
}

TEST(FaultInjection, FlippedBitsAreCaughtByCrc) {
  Outcome o = RunWithFaults({.read_flip = 0.3});
  EXPECT_EQ(o.wrong, 0u);
  EXPECT_GT(o.injected.flips, 10u);
  EXPECT_EQ(o.stats.crc_failures, o.injected.flips);
}

TEST(FaultInjection, LyingShortReadsAreCaughtByCrc) {
  Outcome o = RunWithFaults({.read_short = 0.3});
  EXPECT_EQ(o.wrong, 0u);
  EXPECT_GT(o.injected.short_reads, 10u);
  EXPECT_EQ(o.stats.crc_failures, o.injected.short_reads);
}

TEST(FaultInjection, EverythingAtOnce) {
  Outcome o = RunWithFaults({.read_eio = 0.1, .read_short = 0.1, .read_flip = 0.1});
  EXPECT_EQ(o.wrong, 0u);
  EXPECT_EQ(o.stats.crc_failures + o.stats.io_errors,
            o.injected.eio + o.injected.short_reads + o.injected.flips);
}

// Gets keys [0, n); every hit must carry the right bytes. Returns the number of hits.
int GoodHits(Store& store, int n) {
  std::vector<std::byte> out(32768);
  int hits = 0;
  for (int i = 0; i < n; ++i) {
    auto r = store.Get(TestKey(i), out);
    if (r.ok()) {
      ++hits;
      EXPECT_EQ(out, TestValue(TestKey(i), 0, 32768));
    }
  }
  return hits;
}

TEST(FaultInjection, FullDeviceDropsDemotionsButPutsSucceed) {
  Rig rig = MakeRig(5);
  rig.dev->SetPlan({.device_full = true});
  int ok = 0;
  for (int i = 0; i < 300; ++i) {
    ok += rig.store->Put(TestKey(i), TestValue(TestKey(i), 0, 32768)).ok();
  }
  EXPECT_EQ(ok, 300) << "a put is acknowledged once in DRAM; flash trouble is not its error";
  StoreStats st = rig.store->GetStats();
  EXPECT_GT(st.io_errors, 100u);
  EXPECT_EQ(st.demotions, 0u);
  int hits = GoodHits(*rig.store, 300);
  EXPECT_GT(hits, 50);  // what DRAM still holds
  EXPECT_LT(hits, 200);
  // The device recovers: demotions work again.
  rig.dev->SetPlan({});
  for (int i = 300; i < 600; ++i) (void)rig.store->Put(TestKey(i), TestValue(TestKey(i), 0, 32768));
  EXPECT_GT(rig.store->GetStats().demotions, 100u);
}

TEST(FaultInjection, WriteErrorsLoseOnlyThoseBlocks) {
  Rig rig = MakeRig(11);
  rig.dev->SetPlan({.write_eio = 0.5});
  for (int i = 0; i < 300; ++i)
    ASSERT_TRUE(rig.store->Put(TestKey(i), TestValue(TestKey(i), 0, 32768)).ok());
  int hits = GoodHits(*rig.store, 300);
  StoreStats st = rig.store->GetStats();
  EXPECT_GT(st.io_errors, 50u);
  EXPECT_GT(st.demotions, 50u);
  EXPECT_GT(hits, 100);
}

}  // namespace
}  // namespace kvpool::engine
