// Tenant quotas (issue 20, item 4): a tenant's bytes are counted in each tier, a tenant at
// its DRAM quota evicts its own blocks (never another tenant's), a tenant at its flash
// quota loses its own oldest flash blocks, a put that cannot fit fails with a message
// that says why, and the counts stay exact through erases, overwrites, evictions and a
// restart.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "crash_device.h"
#include "engine/tiered_store.h"
#include "io/memory_device.h"
#include "store_testing.h"

namespace kvpool::engine {
namespace {

using testing::OpenStore;
using testing::SharedDevice;
using testing::SmallOptions;
using testing::TestKey;
using testing::TestValue;

constexpr size_t kBlock = 64 * kKiB;

Status PutFor(Store& s, uint16_t tenant, uint64_t k, size_t size = kBlock, uint32_t v = 1) {
  PutOptions o;
  o.tenant = tenant;
  return s.Put(TestKey(k), TestValue(TestKey(k), v, size), o);
}

// Reads key k; a hit must hold (k, v)'s bytes.
bool Holds(Store& s, uint64_t k, size_t size = kBlock, uint32_t v = 1) {
  std::vector<std::byte> out(size);
  auto r = s.Get(TestKey(k), out);
  if (!r.ok()) {
    EXPECT_TRUE(r.status().IsNotFound()) << r.status().ToString();
    return false;
  }
  EXPECT_EQ(*r, size);
  EXPECT_EQ(0, std::memcmp(out.data(), TestValue(TestKey(k), v, size).data(), size))
      << "wrong bytes for key " << k;
  return true;
}

TEST(TenantQuota, DramQuotaEvictsOnlyTheTenantsOwnBlocks) {
  auto s = OpenStore(SmallOptions(8 * kMiB), nullptr);
  ASSERT_TRUE(s);
  s->SetQuota(1, {.dram_bytes = 1 * kMiB});
  for (uint64_t k = 0; k < 32; ++k) ASSERT_TRUE(PutFor(*s, 2, 1000 + k).ok());  // 2 MiB
  EXPECT_EQ(s->Usage(2).dram_bytes, 32 * kBlock);
  for (uint64_t k = 0; k < 64; ++k) {  // 4 MiB into a 1 MiB quota
    ASSERT_TRUE(PutFor(*s, 1, k).ok()) << k;
    EXPECT_LE(s->Usage(1).dram_bytes, 1 * kMiB) << "after put " << k;
  }
  EXPECT_EQ(s->Usage(1).dram_bytes, 1 * kMiB);
  for (uint64_t k = 0; k < 32; ++k) EXPECT_TRUE(Holds(*s, 1000 + k)) << "tenant 2 lost " << k;
  size_t held = 0;
  for (uint64_t k = 0; k < 64; ++k) held += Holds(*s, k);
  EXPECT_EQ(held, 16u);
  for (uint64_t k = 56; k < 64; ++k) EXPECT_TRUE(Holds(*s, k)) << "the newest go last";
  EXPECT_GE(s->GetStats().quota_evictions, 48u);
  // Erasing gives the bytes back; an untouched tenant counts nothing.
  for (uint64_t k = 0; k < 64; ++k) (void)s->Erase(TestKey(k));
  EXPECT_EQ(s->Usage(1).dram_bytes, 0u);
  EXPECT_EQ(s->Usage(3).dram_bytes, 0u);
  EXPECT_EQ(s->Usage(2).dram_bytes, 32 * kBlock);
}

TEST(TenantQuota, ReadsKeepAUsedBlockOverAnUnusedOne) {
  auto s = OpenStore(SmallOptions(8 * kMiB), nullptr);
  ASSERT_TRUE(s);
  s->SetQuota(1, {.dram_bytes = 1 * kMiB});
  for (uint64_t k = 0; k < 16; ++k) ASSERT_TRUE(PutFor(*s, 1, k).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Holds(*s, 0));  // the oldest, but used
  for (uint64_t k = 16; k < 24; ++k) ASSERT_TRUE(PutFor(*s, 1, k).ok());
  EXPECT_TRUE(Holds(*s, 0)) << "a used block outlives unused newer ones of its tenant";
  EXPECT_FALSE(Holds(*s, 1));
}

TEST(TenantQuota, PutsThatCannotFitFailWithAClearError) {
  auto s = OpenStore(SmallOptions(8 * kMiB), nullptr);
  ASSERT_TRUE(s);
  s->SetQuota(1, {.dram_bytes = 512 * kKiB});
  Status big = PutFor(*s, 1, 1, 1 * kMiB);
  EXPECT_EQ(big.code(), Code::kNoSpace);
  EXPECT_NE(big.message().find("larger than its tenant's DRAM quota"), std::string::npos)
      << big.ToString();
  EXPECT_TRUE(PutFor(*s, 2, 1, 1 * kMiB).ok()) << "another tenant is not limited";
  // Every byte of the quota pinned by readers: the put waits (2 s), then says so.
  std::vector<BlockView> views;
  for (uint64_t k = 10; k < 18; ++k) {
    ASSERT_TRUE(PutFor(*s, 1, k).ok());
    auto v = s->Read(TestKey(k));
    ASSERT_TRUE(v.ok());
    views.push_back(std::move(*v));
  }
  Status pinned = PutFor(*s, 1, 99);
  EXPECT_EQ(pinned.code(), Code::kNoSpace);
  EXPECT_NE(pinned.message().find("in use"), std::string::npos) << pinned.ToString();
  views.clear();
  EXPECT_TRUE(PutFor(*s, 1, 99).ok()) << "room once the readers are done";
  PutOptions bad;
  bad.tenant = kMaxTenants;
  EXPECT_EQ(s->Put(TestKey(5), TestValue(TestKey(5), 1, 100), bad).code(), Code::kInvalidArgument);
}

StoreOptions FlashOptions() {
  StoreOptions o = SmallOptions(4 * kMiB);
  o.max_value_bytes = 1 * kMiB;
  o.admission = Admission::kAll;  // every block leaving DRAM is written
  return o;
}

TEST(TenantQuota, FlashQuotaDropsTheTenantsOldestFlashBlocks) {
  auto s = OpenStore(FlashOptions(), std::make_unique<io::MemoryDevice>(32 * kMiB));
  ASSERT_TRUE(s);
  s->SetQuota(1, {.dram_bytes = 1 * kMiB, .flash_bytes = 4 * kMiB});
  for (uint64_t k = 0; k < 96; ++k) ASSERT_TRUE(PutFor(*s, 2, 1000 + k).ok());  // 6 MiB
  for (uint64_t k = 0; k < 192; ++k) {                                          // 12 MiB
    ASSERT_TRUE(PutFor(*s, 1, k).ok()) << k;
    // Enforced after each demotion batch: over by one batch at most.
    EXPECT_LE(s->Usage(1).flash_bytes, 4 * kMiB + 32 * kBlock);
  }
  s->Quiesce();
  TenantUsage u = s->Usage(1);
  EXPECT_LE(u.dram_bytes, 1 * kMiB);
  EXPECT_LE(u.flash_bytes, 4 * kMiB);
  EXPECT_GE(u.flash_bytes, 3 * kMiB) << "the quota is used, not emptied";
  EXPECT_GT(s->Usage(2).flash_bytes, 0u);
  for (uint64_t k = 0; k < 96; ++k) EXPECT_TRUE(Holds(*s, 1000 + k)) << "tenant 2 lost " << k;
  size_t held = 0;
  for (uint64_t k = 0; k < 192; ++k) held += Holds(*s, k);
  EXPECT_LE(held, 5 * kMiB / kBlock);
  EXPECT_GE(held, 4 * kMiB / kBlock);
  EXPECT_TRUE(Holds(*s, 191));
  EXPECT_FALSE(Holds(*s, 0)) << "the oldest left first";
  // A block larger than the whole flash quota is never written to flash.
  s->SetQuota(3, {.flash_bytes = 64 * kKiB});
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(PutFor(*s, 3, 5000 + k, 128 * kKiB).ok());
  for (uint64_t k = 0; k < 400; ++k) ASSERT_TRUE(PutFor(*s, 2, 2000 + k).ok());  // push out
  EXPECT_EQ(s->Usage(3).flash_bytes, 0u);
}

// KV events of a tenant go to that tenant only, so every removal must know the block's
// tenant: erased, dropped from DRAM, lost with a flash region (told when the region is
// taken, not found stale later), pushed out by a quota.
struct TenantListener : StoreListener {
  std::mutex mu;
  std::map<BlockKey, uint16_t> stored_as;
  std::vector<std::pair<BlockKey, uint16_t>> removed;
  void OnStored(const BlockKey& k, const BlockKey&, uint64_t, std::span<const uint32_t>,
                uint16_t tenant) override {
    std::lock_guard<std::mutex> lock(mu);
    stored_as[k] = tenant;
  }
  void OnRemoved(const BlockKey& k, uint16_t tenant) override {
    std::lock_guard<std::mutex> lock(mu);
    removed.push_back({k, tenant});
  }
};

TEST(TenantQuota, EveryRemovalNamesTheBlocksTenant) {
  TenantListener l;
  StoreOptions o = FlashOptions();
  o.listener = &l;
  auto s = OpenStore(o, std::make_unique<io::MemoryDevice>(16 * kMiB));
  ASSERT_TRUE(s);
  s->SetQuota(3, {.dram_bytes = 512 * kKiB, .flash_bytes = 1 * kMiB});
  for (uint64_t k = 0; k < 600; ++k) {  // 37 MiB through 4 MiB of DRAM and 16 of flash
    ASSERT_TRUE(PutFor(*s, static_cast<uint16_t>(1 + k % 3), k).ok());
    if (k % 7 == 0) ASSERT_TRUE(s->Erase(TestKey(k)).ok());
  }
  s->Quiesce();
  for (uint64_t k = 0; k < 600; ++k) (void)s->Exists(TestKey(k));  // lookups sweep stale ones
  EXPECT_GT(s->GetStats().flash.evictions, 0u) << "regions were taken";
  // Not while holding the listener's lock: the store calls it under its shard locks.
  std::lock_guard<std::mutex> lock(l.mu);
  ASSERT_GT(l.removed.size(), 250u);
  size_t unknown = 0;
  for (const auto& [k, tenant] : l.removed) {
    uint16_t want = static_cast<uint16_t>(1 + (k.lo - 1) % 3);
    EXPECT_EQ(l.stored_as.at(k), want);
    if (tenant == 0) {
      ++unknown;
    } else {
      EXPECT_EQ(tenant, want) << "key " << k.lo - 1;
    }
  }
  EXPECT_EQ(unknown, 0u) << "removals whose tenant was lost (found stale by the sweep)";
}

// Tenants at their quotas beside one without, from threads at once (TSan runs this): the
// counts stay exact at rest and every read returns the right bytes or a miss.
TEST(TenantQuota, ConcurrentTenantsKeepExactCounts) {
  auto s = OpenStore(FlashOptions(), std::make_unique<io::MemoryDevice>(32 * kMiB));
  ASSERT_TRUE(s);
  s->SetQuota(1, {.dram_bytes = 512 * kKiB, .flash_bytes = 2 * kMiB});
  s->SetQuota(2, {.dram_bytes = 1 * kMiB});
  std::vector<std::thread> threads;
  for (uint16_t t = 1; t <= 3; ++t) {
    threads.emplace_back([&s, t] {
      std::mt19937 rng(t);
      std::vector<std::byte> out(kBlock);
      for (int i = 0; i < 400; ++i) {
        uint64_t k = t * 10000 + rng() % 120;
        switch (rng() % 4) {
          case 0:
            (void)s->Erase(TestKey(k));
            break;
          case 1: {
            auto r = s->Get(TestKey(k), out);
            if (r.ok()) {
              EXPECT_EQ(0,
                        std::memcmp(out.data(), TestValue(TestKey(k), 1, kBlock).data(), kBlock));
            }
            break;
          }
          default: {
            Status st = PutFor(*s, t, k);
            EXPECT_TRUE(st.ok() || st.code() == Code::kExists) << st.ToString();
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  s->Quiesce();
  std::map<uint16_t, uint64_t> dram;
  for (const HeldBlock& b : s->ListBlocks(1 << 20)) {
    if (b.in_dram) dram[static_cast<uint16_t>((b.key.lo - 1) / 10000)] += kBlock;
  }
  for (uint16_t t = 1; t <= 3; ++t) EXPECT_EQ(s->Usage(t).dram_bytes, dram[t]) << "tenant " << t;
  EXPECT_LE(s->Usage(1).dram_bytes, 512 * kKiB);
  EXPECT_LE(s->Usage(2).dram_bytes, 1 * kMiB);
  EXPECT_LE(s->Usage(1).flash_bytes, 2 * kMiB);
}

// Against a recount from the blocks listed: DRAM bytes exact at rest, flash bytes between
// the tenant's flash-only blocks and all its blocks.
void CheckCounts(Store& s, const std::map<uint64_t, std::pair<uint16_t, size_t>>& owner) {
  std::map<uint16_t, uint64_t> dram, flash_only, all;
  for (const HeldBlock& b : s.ListBlocks(1 << 20)) {
    auto it = owner.find(b.key.lo - 1);
    ASSERT_NE(it, owner.end());
    uint64_t bytes = (uint64_t{b.size} + 4095) / 4096 * 4096;
    (b.in_dram ? dram : flash_only)[it->second.first] += bytes;
    all[it->second.first] += bytes;
  }
  for (uint16_t t = 1; t <= 3; ++t) {
    TenantUsage u = s.Usage(t);
    EXPECT_EQ(u.dram_bytes, dram[t]) << "tenant " << t;
    EXPECT_GE(u.flash_bytes, flash_only[t]) << "tenant " << t;
    EXPECT_LE(u.flash_bytes, all[t]) << "tenant " << t;
  }
}

TEST(TenantQuota, CountsStayExactThroughChurnAndRestart) {
  auto mem = std::make_shared<io::MemoryDevice>(32 * kMiB);
  std::map<uint64_t, std::pair<uint16_t, size_t>> owner;  // key -> (tenant, size)
  std::mt19937 rng(20);
  {
    auto s = OpenStore(FlashOptions(), std::make_unique<SharedDevice>(mem));
    ASSERT_TRUE(s);
    s->SetQuota(1, {.dram_bytes = 1 * kMiB, .flash_bytes = 3 * kMiB});
    s->SetQuota(2, {.dram_bytes = 2 * kMiB});
    for (int i = 0; i < 3000; ++i) {
      uint64_t k = rng() % 400;
      uint16_t t = static_cast<uint16_t>(1 + k % 3);
      size_t size = 4096 + (rng() % 24) * 4096 - rng() % 4000;
      switch (rng() % 5) {
        case 0:
          if (s->Erase(TestKey(k)).ok()) owner.erase(k);
          break;
        case 1: {
          PutOptions o;
          o.tenant = t;
          o.overwrite = true;
          ASSERT_TRUE(s->Put(TestKey(k), TestValue(TestKey(k), 2, size), o).ok());
          owner[k] = {t, size};
          break;
        }
        case 2:
          if (owner.count(k)) (void)Holds(*s, k, owner[k].second, 2);
          break;
        default: {
          PutOptions o;
          o.tenant = t;
          Status st = s->Put(TestKey(k), TestValue(TestKey(k), 2, size), o);
          ASSERT_TRUE(st.ok() || st.code() == Code::kExists) << st.ToString();
          if (st.ok()) owner[k] = {t, size};
        }
      }
    }
    s->Quiesce();
    CheckCounts(*s, owner);
    EXPECT_LE(s->Usage(1).dram_bytes, 1 * kMiB);
    EXPECT_LE(s->Usage(1).flash_bytes, 3 * kMiB);
    EXPECT_LE(s->Usage(2).dram_bytes, 2 * kMiB);
  }
  // A clean close writes DRAM to flash: after the restart every block held is on flash,
  // charged to the tenant it was put for (the summaries carry it).
  auto s = OpenStore(FlashOptions(), std::make_unique<SharedDevice>(mem));
  ASSERT_TRUE(s);
  std::map<uint16_t, uint64_t> all;
  for (const HeldBlock& b : s->ListBlocks(1 << 20)) {
    all[owner.at(b.key.lo - 1).first] += (uint64_t{b.size} + 4095) / 4096 * 4096;
  }
  for (uint16_t t = 1; t <= 3; ++t) {
    EXPECT_EQ(s->Usage(t).flash_bytes, all[t]) << "tenant " << t;
    EXPECT_EQ(s->Usage(t).dram_bytes, 0u);
  }
}

}  // namespace
}  // namespace kvpool::engine
