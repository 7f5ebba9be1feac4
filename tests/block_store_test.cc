// One suite, four implementations of kvpool::BlockStore: the embedded Store, a Client of a
// real kvpoold, a PoolClient over it and a NearCache in front of a Client. The same calls
// must give the same answers on each (the reference is what the interface promises), and
// a store that cannot be reached must never read as "absent".
#include "kvpool/block_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "daemon_test.h"
#include "kvpool/client.h"
#include "kvpool/near_cache.h"
#include "kvpool/pool.h"
#include "kvpool/store.h"

namespace kvpool {
namespace {

enum class Kind { kStore, kClient, kPool, kNear };

std::string Name(Kind k) {
  switch (k) {
    case Kind::kStore:
      return "Store";
    case Kind::kClient:
      return "Client";
    case Kind::kPool:
      return "PoolClient";
    case Kind::kNear:
      return "NearCache";
  }
  return "?";
}

BlockKey K(uint64_t i) { return BlockKey{0xB5, i}; }

std::vector<std::byte> Value(uint64_t i, size_t n) {
  std::vector<std::byte> v(n);
  for (size_t j = 0; j < n; ++j) v[j] = static_cast<std::byte>((i * 131 + j * 7) & 0xFF);
  return v;
}

class BlockStoreTest : public testing::DaemonTest, public ::testing::WithParamInterface<Kind> {
 protected:
  BlockStoreTest() : DaemonTest("kvpool-blockstore") {}

  void SetUp() override {
    DaemonTest::SetUp();
    ClientOptions co;
    co.ns = "block-store-test";
    co.connect_timeout_ms = 500;
    co.request_timeout_ms = 2000;
    if (GetParam() == Kind::kStore) {
      StoreOptions so;
      so.dram_bytes = 32 * kMiB;
      so.max_value_bytes = 1 * kMiB;
      so.prefault = false;
      auto s = Store::Open(so);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      store_ = std::move(s).value();
      return;
    }
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
    co.address = daemon_->tcp_address();
    if (GetParam() == Kind::kPool) {
      PoolOptions po;
      po.members = daemon_->tcp_address();
      po.client = co;
      po.failures_to_drop = 1000;  // the dead node stays placed: its keys are unavailable
      auto p = PoolClient::Create(po);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      store_ = std::move(p).value();
      return;
    }
    auto c = Client::Create(co);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    if (GetParam() == Kind::kClient) {
      store_ = std::move(c).value();
      return;
    }
    NearCacheOptions no;
    no.store.dram_bytes = 16 * kMiB;
    no.store.lock_memory = false;
    no.store.prefault = false;
    auto n = NearCache::Create(no, std::move(c).value());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    store_ = std::move(n).value();
  }

  void TearDown() override {
    store_.reset();
    DaemonTest::TearDown();
  }

  // Puts blocks first..first+n-1 as one chain (each names the previous as its parent).
  std::vector<PutOp> Chain(uint64_t first, size_t n, std::vector<std::vector<std::byte>>* vals,
                           size_t bytes = 4096) {
    std::vector<PutOp> ops(n);
    vals->clear();
    for (size_t i = 0; i < n; ++i) vals->push_back(Value(first + i, bytes));
    for (size_t i = 0; i < n; ++i) {
      ops[i].key = K(first + i);
      ops[i].value = (*vals)[i];
      ops[i].parent = i == 0 ? BlockKey{} : K(first + i - 1);
    }
    return ops;
  }

  std::unique_ptr<BlockStore> store_;
};

TEST_P(BlockStoreTest, EveryCallAnswersAsTheInterfaceSays) {
  BlockStore& s = *store_;
  std::vector<std::vector<std::byte>> vals;
  std::vector<PutOp> puts = Chain(1, 4, &vals);
  ASSERT_TRUE(s.PutBatch(puts).ok());
  for (const PutOp& p : puts) EXPECT_TRUE(p.status.ok()) << p.status.ToString();

  // Insert-only: a second put of held keys answers kExists and leaves the bytes alone.
  std::vector<std::vector<std::byte>> other;
  std::vector<PutOp> again = Chain(1, 2, &other, 2048);
  for (size_t i = 0; i < again.size(); ++i) again[i].value = Value(100 + i, 2048);
  std::vector<std::byte> v100 = Value(100, 2048), v101 = Value(101, 2048);
  again[0].value = v100;
  again[1].value = v101;
  ASSERT_TRUE(s.PutBatch(again).ok());
  for (const PutOp& p : again) EXPECT_EQ(p.status.code(), Code::kExists);

  // Gets: a hit with its bytes, a miss, a buffer too small (with the size).
  std::vector<std::byte> b0(4096), b1(4096), small(16);
  std::vector<GetOp> gets(4);
  gets[0] = {K(1), b0};
  gets[1] = {K(2), b1};
  gets[2] = {K(999), b0};
  gets[3] = {K(3), small};
  ASSERT_TRUE(s.GetBatch(gets).ok());
  EXPECT_TRUE(gets[0].status.ok());
  EXPECT_EQ(gets[0].size, 4096u);
  EXPECT_EQ(b0, vals[0]);
  EXPECT_EQ(b1, vals[1]);
  EXPECT_EQ(gets[2].status.code(), Code::kNotFound);
  EXPECT_EQ(gets[3].status.code(), Code::kBufferTooSmall);
  EXPECT_EQ(gets[3].size, 4096u);

  // Overwrite replaces.
  std::vector<std::byte> fresh = Value(77, 1000);
  std::vector<PutOp> over(1);
  over[0] = {K(2), fresh, K(1)};
  ASSERT_TRUE(s.PutBatch(over, /*overwrite=*/true).ok());
  EXPECT_TRUE(over[0].status.ok()) << over[0].status.ToString();
  std::vector<GetOp> one(1);
  one[0] = {K(2), b1};
  ASSERT_TRUE(s.GetBatch(one).ok());
  ASSERT_TRUE(one[0].status.ok());
  EXPECT_EQ(one[0].size, fresh.size());
  EXPECT_EQ(0, std::memcmp(b1.data(), fresh.data(), fresh.size()));

  // Exists and the chain's prefix.
  std::vector<KeyOp> ex = {{K(1), {}}, {K(4), {}}, {K(5), {}}};
  ASSERT_TRUE(s.ExistsBatch(ex).ok());
  EXPECT_TRUE(ex[0].status.ok());
  EXPECT_TRUE(ex[1].status.ok());
  EXPECT_EQ(ex[2].status.code(), Code::kNotFound);
  std::vector<BlockKey> chain = {K(1), K(2), K(3), K(4), K(5)};
  auto m = s.MatchPrefix(chain);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m.value(), 4u);

  // Views: bytes equal to what was put; a miss is kNotFound.
  std::vector<BlockKey> rk = {K(1), K(4), K(998)};
  std::vector<Result<BlockView>> views;
  for (size_t i = 0; i < rk.size(); ++i) views.emplace_back(Status::Internal("unset"));
  ASSERT_TRUE(s.ReadBatch(rk, views).ok());
  ASSERT_TRUE(views[0].ok()) << views[0].status().ToString();
  EXPECT_TRUE(
      std::equal(views[0]->data().begin(), views[0]->data().end(), vals[0].begin(), vals[0].end()));
  ASSERT_TRUE(views[1].ok());
  EXPECT_TRUE(
      std::equal(views[1]->data().begin(), views[1]->data().end(), vals[3].begin(), vals[3].end()));
  EXPECT_EQ(views[2].status().code(), Code::kNotFound);
  views.clear();

  // Erase: held then gone; the prefix ends there.
  std::vector<KeyOp> er = {{K(3), {}}, {K(3), {}}};
  ASSERT_TRUE(s.EraseBatch(std::span<KeyOp>(er).first(1)).ok());
  EXPECT_TRUE(er[0].status.ok());
  ASSERT_TRUE(s.EraseBatch(std::span<KeyOp>(er).last(1)).ok());
  EXPECT_EQ(er[1].status.code(), Code::kNotFound);
  m = s.MatchPrefix(chain);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m.value(), 2u);
}

TEST_P(BlockStoreTest, APassedDeadlineIsATimeoutNeverAMiss) {
  BlockStore& s = *store_;
  std::vector<std::vector<std::byte>> vals;
  std::vector<PutOp> puts = Chain(10, 2, &vals);
  ASSERT_TRUE(s.PutBatch(puts).ok());
  Deadline past = Deadline::After(std::chrono::nanoseconds(1));
  while (!past.passed()) {
  }
  std::vector<std::byte> buf(4096);
  std::vector<GetOp> gets = {{K(10), buf}, {K(404), buf}};
  (void)s.GetBatch(gets, past);
  for (const GetOp& g : gets) EXPECT_EQ(g.status.code(), Code::kTimeout) << g.status.ToString();
  std::vector<KeyOp> ex = {{K(11), {}}, {K(405), {}}};
  (void)s.ExistsBatch(ex, past);
  for (const KeyOp& k : ex) EXPECT_EQ(k.status.code(), Code::kTimeout) << k.status.ToString();
  std::vector<BlockKey> chain = {K(10), K(11)};
  EXPECT_FALSE(s.MatchPrefix(chain, past).ok());
}

TEST_P(BlockStoreTest, AStoreThatCannotBeReachedIsNeverReadAsAbsent) {
  if (GetParam() == Kind::kStore) GTEST_SKIP() << "in process: always reachable";
  BlockStore& s = *store_;
  std::vector<std::vector<std::byte>> vals;
  std::vector<PutOp> puts = Chain(20, 2, &vals);
  ASSERT_TRUE(s.PutBatch(puts).ok());
  ASSERT_EQ(daemon_->Stop(), 0) << daemon_->output();
  // Keys the near cache does not hold locally (its puts keep a local copy).
  std::vector<KeyOp> ex = {{K(500), {}}, {K(501), {}}};
  Status call = s.ExistsBatch(ex);
  for (const KeyOp& k : ex) {
    EXPECT_TRUE(k.status.code() == Code::kUnavailable || k.status.code() == Code::kTimeout)
        << Name(GetParam()) << ": " << k.status.ToString();
  }
  if (!call.ok()) EXPECT_NE(call.code(), Code::kNotFound);
  std::vector<std::byte> buf(4096);
  std::vector<GetOp> gets = {{K(502), buf}};
  (void)s.GetBatch(gets);
  EXPECT_TRUE(gets[0].status.code() == Code::kUnavailable ||
              gets[0].status.code() == Code::kTimeout)
      << gets[0].status.ToString();
  std::vector<BlockKey> chain = {K(500), K(501)};
  EXPECT_FALSE(s.MatchPrefix(chain).ok());
}

INSTANTIATE_TEST_SUITE_P(AllStores, BlockStoreTest,
                         ::testing::Values(Kind::kStore, Kind::kClient, Kind::kPool, Kind::kNear),
                         [](const ::testing::TestParamInfo<Kind>& i) { return Name(i.param); });

}  // namespace
}  // namespace kvpool
