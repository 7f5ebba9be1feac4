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

// Puts 300 blocks of 32 KiB (most end up on flash only), then reads all under `plan`.
void RunWithFaults(const FaultPlan& plan, uint64_t* wrong, uint64_t* hits, StoreStats* st,
                   FaultyDevice::Injected* inj) {
  Rig rig = MakeRig(99);
  ASSERT_TRUE(rig.store);
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(rig.store->Put(TestKey(i), TestValue(TestKey(i), 0, 32768)).ok());
  }
  rig.dev->SetPlan(plan);
  std::vector<std::byte> out(32768);
  *wrong = *hits = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < 300; ++i) {
      auto r = rig.store->Get(TestKey(i), out);
      if (!r.ok()) {
        ASSERT_TRUE(r.status().IsNotFound()) << r.status().ToString();
        continue;
      }
      ++*hits;
      if (out != TestValue(TestKey(i), 0, 32768)) ++*wrong;
    }
  }
  *st = rig.store->GetStats();
  *inj = rig.dev->injected();
}

TEST(FaultInjection, ReadEioIsAMiss) {
  uint64_t wrong, hits;
  StoreStats st;
  FaultyDevice::Injected inj;
  RunWithFaults({.read_eio = 0.3}, &wrong, &hits, &st, &inj);
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(inj.eio, 10u);
  EXPECT_EQ(st.io_errors, inj.eio);
  EXPECT_GT(hits, 100u);
}

TEST(FaultInjection, FlippedBitsAreCaughtByCrc) {
  uint64_t wrong, hits;
  StoreStats st;
  FaultyDevice::Injected inj;
  RunWithFaults({.read_flip = 0.3}, &wrong, &hits, &st, &inj);
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(inj.flips, 10u);
  EXPECT_EQ(st.crc_failures, inj.flips);
}

TEST(FaultInjection, LyingShortReadsAreCaughtByCrc) {
  uint64_t wrong, hits;
  StoreStats st;
  FaultyDevice::Injected inj;
  RunWithFaults({.read_short = 0.3}, &wrong, &hits, &st, &inj);
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(inj.short_reads, 10u);
  EXPECT_EQ(st.crc_failures, inj.short_reads);
}

TEST(FaultInjection, EverythingAtOnce) {
  uint64_t wrong, hits;
  StoreStats st;
  FaultyDevice::Injected inj;
  RunWithFaults({.read_eio = 0.1, .read_short = 0.1, .read_flip = 0.1}, &wrong, &hits, &st, &inj);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(st.crc_failures + st.io_errors, inj.eio + inj.short_reads + inj.flips);
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
  std::vector<std::byte> out(32768);
  int hits = 0;
  for (int i = 0; i < 300; ++i) {
    auto r = rig.store->Get(TestKey(i), out);
    if (r.ok()) {
      ++hits;
      EXPECT_EQ(out, TestValue(TestKey(i), 0, 32768));
    }
  }
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
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(rig.store->Put(TestKey(i), TestValue(TestKey(i), 0, 32768)).ok());
  std::vector<std::byte> out(32768);
  int hits = 0;
  for (int i = 0; i < 300; ++i) {
    auto r = rig.store->Get(TestKey(i), out);
    if (r.ok()) {
      ++hits;
      EXPECT_EQ(out, TestValue(TestKey(i), 0, 32768));
    }
  }
  StoreStats st = rig.store->GetStats();
  EXPECT_GT(st.io_errors, 50u);
  EXPECT_GT(st.demotions, 50u);
  EXPECT_GT(hits, 100);
}

}  // namespace
}  // namespace kvpool::engine
