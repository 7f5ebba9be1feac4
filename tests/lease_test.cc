// Lookup and lock: the lease table over a real store, and a real kvpoold holding blocks a
// client looked up while other clients' puts evict them.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "daemon_test.h"
#include "kvpool/client.h"
#include "kvpool/store.h"
#include "server/leases.h"
#include "store_testing.h"

namespace kvpool {
namespace {

std::unique_ptr<Store> SmallStore() {
  auto s = Store::Open(testing::SmallOptions(16 << 20));
  return s.ok() ? std::move(s).value() : nullptr;
}

BlockView ViewOf(Store& s, const BlockKey& k) {
  auto v = s.Read(k);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return v.ok() ? std::move(v).value() : BlockView{};
}

TEST(LeaseTable, AHeldBlockOutlivesItsEraseAndGoesWithItsLastHolder) {
  auto store = SmallStore();
  ASSERT_TRUE(store);
  BlockKey k{1, 2};
  auto want = testing::TestValue(k, 0, 100000);
  ASSERT_TRUE(store->Put(k, want).ok());
  server::Leases leases(1 << 20);
  EXPECT_TRUE(leases.empty());
  uint64_t now = NowNanos();
  leases.Hold(k, ViewOf(*store, k), now, 1'000'000'000);
  leases.Hold(k, ViewOf(*store, k), now, 1'000'000'000);  // a second lookup of the same key
  EXPECT_FALSE(leases.empty());
  EXPECT_EQ(leases.stats().held, 1u);
  EXPECT_EQ(leases.stats().held_bytes, want.size());
  ASSERT_TRUE(store->Erase(k).ok());
  ASSERT_FALSE(store->Exists(k));
  for (int holder = 0; holder < 2; ++holder) {
    auto v = leases.Take(k, now);
    ASSERT_TRUE(v) << holder;
    ASSERT_EQ(v->data().size(), want.size());
    EXPECT_EQ(0, std::memcmp(v->data().data(), want.data(), want.size()));
  }
  EXPECT_FALSE(leases.Take(k, now));
  EXPECT_TRUE(leases.empty());
  EXPECT_EQ(leases.stats().granted, 2u);
  EXPECT_EQ(leases.stats().held_bytes, 0u);
  EXPECT_EQ(leases.stats().expired, 0u);
}

TEST(LeaseTable, AnExpiredLeaseIsNeverReturned) {
  auto store = SmallStore();
  ASSERT_TRUE(store);
  BlockKey a{1, 1}, b{1, 2};
  ASSERT_TRUE(store->Put(a, testing::TestValue(a, 0, 5000)).ok());
  ASSERT_TRUE(store->Put(b, testing::TestValue(b, 0, 5000)).ok());
  server::Leases leases(1 << 20);
  uint64_t now = NowNanos();
  leases.Hold(a, ViewOf(*store, a), now, 10'000'000);   // 10 ms
  leases.Hold(b, ViewOf(*store, b), now, 500'000'000);  // 500 ms
  EXPECT_FALSE(leases.Take(a, now + 20'000'000));
  EXPECT_EQ(leases.stats().expired, 1u);
  EXPECT_EQ(leases.stats().held, 1u);
  leases.Sweep(now + 600'000'000);
  EXPECT_TRUE(leases.empty());
  EXPECT_EQ(leases.stats().expired, 2u);
  EXPECT_FALSE(leases.Take(b, now + 600'000'000));
}

TEST(LeaseTable, PastItsByteBoundTheLeaseDueSoonestGoes) {
  auto store = SmallStore();
  ASSERT_TRUE(store);
  server::Leases leases(25000);  // room for two 10000-byte blocks
  uint64_t now = NowNanos();
  BlockKey keys[3] = {{7, 1}, {7, 2}, {7, 3}};
  uint64_t ttl_ms[3] = {300, 100, 200};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store->Put(keys[i], testing::TestValue(keys[i], 0, 10000)).ok());
    leases.Hold(keys[i], ViewOf(*store, keys[i]), now, ttl_ms[i] * 1'000'000);
  }
  EXPECT_EQ(leases.stats().held, 2u);
  EXPECT_LE(leases.stats().held_bytes, 25000u);
  EXPECT_EQ(leases.stats().expired, 1u);
  EXPECT_TRUE(leases.Take(keys[0], now));
  EXPECT_FALSE(leases.Take(keys[1], now));  // due soonest: dropped for room
  EXPECT_TRUE(leases.Take(keys[2], now));
}

// ---- a real kvpoold ---------------------------------------------------------------------

class LeaseServerTest : public testing::DaemonTest {
 protected:
  LeaseServerTest() : DaemonTest("kvpoold-lease") {}
  void SetUp() override {
    DaemonTest::SetUp();
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();  // 64 MiB of DRAM, no flash
  }
  std::unique_ptr<Client> Connect(const std::string& ns = "lmcache") {
    ClientOptions o;
    o.address = daemon_->tcp_address();
    o.ns = ns;
    auto c = Client::Create(o);
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // Puts `n` blocks of 256 KiB from key base.. : 4x the DRAM evicts what was there.
  void Flood(Client& c, uint64_t base, int n) {
    auto v = testing::TestValue(BlockKey{99, 99}, 0, 256 << 10);
    for (int i = 0; i < n; i += 16) {
      std::vector<PutOp> ops(std::min(16, n - i));
      for (size_t j = 0; j < ops.size(); ++j) ops[j] = PutOp{{base, uint64_t(i + j)}, v, {}, {}};
      ASSERT_TRUE(c.PutBatch(ops).ok());
    }
  }
  size_t Held(Client& c, const std::vector<BlockKey>& keys) {
    std::vector<KeyOp> ops(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) ops[i].key = keys[i];
    EXPECT_TRUE(c.ExistsBatch(ops).ok());
    size_t n = 0;
    for (const KeyOp& o : ops) n += o.status.ok();
    return n;
  }
};

TEST_F(LeaseServerTest, BlocksFoundByALookupAndLockAreLoadedAfterEviction) {
  auto c = Connect();
  ASSERT_TRUE(c);
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 32; ++i) keys.push_back(BlockKey{5, i});
  for (const BlockKey& k : keys) ASSERT_TRUE(c->Put(k, testing::TestValue(k, 0, 200000)).ok());
  // Lock the first 16 (one lookup-and-lock, as LMCache's adapter issues it).
  std::vector<KeyOp> hold(16);
  for (size_t i = 0; i < 16; ++i) hold[i].key = keys[i];
  ASSERT_TRUE(c->HoldBatch(hold, std::chrono::seconds(30)).ok());
  for (const KeyOp& h : hold) ASSERT_TRUE(h.status.ok());
  // Another writer fills the store four times over.
  auto writer = Connect();
  ASSERT_TRUE(writer);
  Flood(*writer, 6, 1024);
  std::vector<BlockKey> locked(keys.begin(), keys.begin() + 16);
  std::vector<BlockKey> unlocked(keys.begin() + 16, keys.end());
  EXPECT_LT(Held(*c, unlocked), 4u) << "the flood did not evict: the test proves nothing";
  // Another namespace cannot take the lease.
  auto other = Connect("other");
  std::vector<std::byte> buf(200000);
  EXPECT_TRUE(other->Get(keys[0], buf).status().IsNotFound());
  // The load finds every locked block, byte for byte.
  std::vector<std::vector<std::byte>> bufs(16, std::vector<std::byte>(200000));
  std::vector<GetOp> gets(16);
  for (size_t i = 0; i < 16; ++i) gets[i] = GetOp{keys[i], bufs[i]};
  ASSERT_TRUE(c->GetBatch(gets).ok());
  for (size_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(gets[i].status.ok()) << i << ": " << gets[i].status.ToString();
    auto want = testing::TestValue(keys[i], 0, 200000);
    EXPECT_EQ(0, std::memcmp(bufs[i].data(), want.data(), want.size())) << i;
  }
  auto stats = c->ServerStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_NE(stats->find("leases: 0 held (0 bytes), 16 granted, 16 loaded ("), std::string::npos)
      << *stats;
  // The load released them: they are ordinary blocks again, which the next flood evicts.
  Flood(*writer, 7, 1024);
  EXPECT_LT(Held(*c, locked), 4u);
}

TEST_F(LeaseServerTest, AnUnloadedLeaseExpiresAndAPlainExistsHoldsNothing) {
  auto c = Connect();
  ASSERT_TRUE(c);
  BlockKey a{8, 1}, b{8, 2};
  ASSERT_TRUE(c->Put(a, testing::TestValue(a, 0, 100000)).ok());
  ASSERT_TRUE(c->Put(b, testing::TestValue(b, 0, 100000)).ok());
  std::vector<KeyOp> hold(1);
  hold[0].key = a;
  ASSERT_TRUE(c->HoldBatch(hold, std::chrono::milliseconds(100)).ok());
  ASSERT_TRUE(hold[0].status.ok());
  EXPECT_TRUE(c->Exists(b).value());  // a probe: no lease
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Flood(*c, 9, 1024);  // its first request drops the expired lease, then evicts both
  std::vector<std::byte> buf(100000);
  EXPECT_TRUE(c->Get(a, buf).status().IsNotFound());
  EXPECT_TRUE(c->Get(b, buf).status().IsNotFound());
  auto stats = c->ServerStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_NE(
      stats->find("leases: 0 held (0 bytes), 1 granted, 0 loaded (0 after eviction), 1 expired"),
      std::string::npos)
      << *stats;
}

TEST_F(LeaseServerTest, EraseAndOverwriteEndALeaseSoOldBytesNeverComeBack) {
  auto c = Connect();
  ASSERT_TRUE(c);
  BlockKey a{10, 1}, b{10, 2};
  ASSERT_TRUE(c->Put(a, testing::TestValue(a, 0, 50000)).ok());
  ASSERT_TRUE(c->Put(b, testing::TestValue(b, 0, 50000)).ok());
  std::vector<KeyOp> hold = {{a, {}}, {b, {}}};
  ASSERT_TRUE(c->HoldBatch(hold, std::chrono::seconds(30)).ok());
  ASSERT_TRUE(c->Erase(a).ok());
  auto fresh = testing::TestValue(BlockKey{11, 11}, 0, 40000);
  ASSERT_TRUE(c->Put(b, fresh, {.overwrite = true}).ok());
  std::vector<std::byte> buf(50000);
  EXPECT_TRUE(c->Get(a, buf).status().IsNotFound());
  auto got = c->Get(b, buf);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(*got, fresh.size());
  EXPECT_EQ(0, std::memcmp(buf.data(), fresh.data(), fresh.size()));
  auto stats = c->ServerStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_NE(stats->find("leases: 0 held (0 bytes), 2 granted, 0 loaded"), std::string::npos)
      << *stats;
}

}  // namespace
}  // namespace kvpool
