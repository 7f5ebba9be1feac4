// The pod pool against real processes: etcd (Debian's etcd-server) and several kvpoold
// nodes on loopback, driven by the pool client.
#include "kvpool/pool.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "cluster/etcd.h"
#include "cluster/http.h"
#include "cluster/membership.h"
#include "cluster/registrar.h"
#include "common/base64.h"
#include "daemon.h"
#include "etcd.h"
#include "kvpool/near_cache.h"

namespace kvpool {
namespace {

using namespace std::chrono_literals;
using testing::Daemon;
using testing::EtcdServer;
using Clock = std::chrono::steady_clock;

std::string TempDir(const char* what) {
  std::string base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  std::string t = base + "/kvpool-" + what + "-XXXXXX";
  char* d = mkdtemp(t.data());
  return d ? std::string(d) : base;
}

std::vector<std::byte> Value(const BlockKey& k, size_t size) {
  std::vector<std::byte> v(size);
  uint64_t x = k.lo ^ (k.hi * 31);
  for (size_t i = 0; i < size; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<std::byte>(x >> 56);
  }
  return v;
}

// Polls `cond` every 20 ms for up to `limit`.
template <class F>
bool WaitFor(F cond, std::chrono::milliseconds limit) {
  auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return cond();
}

#define REQUIRE_ETCD() \
  if (!EtcdServer::Available()) GTEST_SKIP() << "etcd-server not installed (scripts/deps.sh)"

TEST(EtcdTest, KvRangeWatchAndLeases) {
  REQUIRE_ETCD();
  EtcdServer etcd(TempDir("etcd"));
  ASSERT_TRUE(etcd.Start()) << etcd.output();
  cluster::Etcd e({etcd.endpoint()}, 1000);
  ASSERT_TRUE(e.Put("/t/a", "1").ok());
  ASSERT_TRUE(e.Put("/u/x", "outside").ok());
  std::vector<cluster::EtcdKv> kvs;
  int64_t rev = 0;
  ASSERT_TRUE(e.RangePrefix("/t/", &kvs, &rev).ok());
  ASSERT_EQ(kvs.size(), 1u);
  EXPECT_EQ(kvs[0].key, "/t/a");
  EXPECT_EQ(kvs[0].value, "1");
  EXPECT_GT(rev, 0);

  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<cluster::EtcdEvent> events;
  Status watch_status;
  std::thread watcher([&] {
    cluster::Etcd w({etcd.endpoint()}, 1000);
    int64_t last = 0;
    watch_status = w.WatchPrefix(
        "/t/", rev + 1,
        [&](const cluster::EtcdEvent& ev) {
          std::lock_guard<std::mutex> lock(mu);
          events.push_back(ev);
        },
        stop, &last);
  });
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(e.Put("/t/b", std::string("\x00\xff binary", 9)).ok());
  ASSERT_TRUE(e.Put("/u/y", "not watched").ok());
  ASSERT_TRUE(e.Delete("/t/a").ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        std::lock_guard<std::mutex> l(mu);
        return events.size() >= 2;
      },
      5000ms));
  stop = true;
  watcher.join();
  EXPECT_TRUE(watch_status.ok()) << watch_status.ToString();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[0].deleted);
  EXPECT_EQ(events[0].kv.key, "/t/b");
  EXPECT_EQ(events[0].kv.value, std::string("\x00\xff binary", 9));
  EXPECT_TRUE(events[1].deleted);
  EXPECT_EQ(events[1].kv.key, "/t/a");

  // A lease keeps its key alive while kept alive; the key goes when the lease expires.
  auto lease = e.LeaseGrant(2);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(e.Put("/t/leased", "v", *lease).ok());
  auto ttl = e.LeaseKeepAlive(*lease);
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(*ttl, 0);
  EXPECT_TRUE(WaitFor(
      [&] {
        std::vector<cluster::EtcdKv> left;
        int64_t r;
        return e.RangePrefix("/t/leased", &left, &r).ok() && left.empty();
      },
      8000ms));
  auto expired = e.LeaseKeepAlive(*lease);
  ASSERT_TRUE(expired.ok());
  EXPECT_EQ(*expired, 0);

  // An etcd that is gone is kUnavailable, promptly.
  etcd.Stop();
  auto t0 = Clock::now();
  EXPECT_EQ(e.Put("/t/c", "x").code(), Code::kUnavailable);
  EXPECT_LT(Clock::now() - t0, 3s);
}

TEST(EtcdTest, RegistrarAndMembershipFollowEachOther) {
  REQUIRE_ETCD();
  EtcdServer etcd(TempDir("etcd"));
  ASSERT_TRUE(etcd.Start()) << etcd.output();
  auto membership = cluster::Membership::FromEtcd({etcd.endpoint()}, "/pod/", 1000);
  ASSERT_TRUE(membership->WaitReady(5000));
  EXPECT_TRUE(membership->Current().source_ok);
  EXPECT_TRUE(membership->Current().members->empty());

  cluster::Member self;
  self.id = "node-a";
  self.address = "127.0.0.1:1";
  self.capacity = 5;
  self.labels.zone = "z1";
  cluster::RegistrarOptions ro;
  ro.endpoints = {etcd.endpoint()};
  ro.prefix = "/pod/";
  ro.ttl_seconds = 2;
  std::vector<std::string> log;
  std::mutex log_mu;
  auto reg = std::make_unique<cluster::Registrar>(ro, self, [&](const std::string& s) {
    std::lock_guard<std::mutex> l(log_mu);
    log.push_back(s);
  });
  reg->Start();
  ASSERT_TRUE(WaitFor([&] { return membership->Current().members->size() == 1; }, 5000ms));
  EXPECT_EQ(membership->Current().members->at(0), self);
  // Keep-alives hold it past the TTL.
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(membership->Current().members->size(), 1u);

  // etcd stops answering: the last known list stays, and the source says it is down.
  etcd.Pause();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(membership->Current().members->size(), 1u);
  etcd.Resume();

  reg.reset();  // Stop revokes the lease: the member leaves at once, not after the TTL
  EXPECT_TRUE(WaitFor([&] { return membership->Current().members->empty(); }, 1500ms));
  std::lock_guard<std::mutex> l(log_mu);
  ASSERT_GE(log.size(), 2u);
  EXPECT_NE(log.front().find("registered /pod/node-a"), std::string::npos) << log.front();
  EXPECT_NE(log.back().find("left"), std::string::npos) << log.back();

  etcd.Stop();  // the watcher loses etcd and says so
  EXPECT_TRUE(WaitFor([&] { return !membership->Current().source_ok; }, 3000ms));
}

class PoolTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& d : nodes_) {
      d->Stop();
      // A sanitizer build of kvpoold reports races and leaks in its log: that is a failure.
      EXPECT_EQ(d->output().find("Sanitizer"), std::string::npos) << d->output();
    }
  }
  bool StartNode(size_t i, const std::string& etcd) {
    while (nodes_.size() <= i) nodes_.push_back(std::make_unique<Daemon>(TempDir("node")));
    return nodes_[i]->Start({"--etcd", etcd, "--member-id", "n" + std::to_string(i), "--lease-ttl",
                             "2", "--labels", "zone=z" + std::to_string(i % 2)});
  }
  std::vector<std::unique_ptr<Daemon>> nodes_;
};

// The issue's scenario: three nodes and etcd; clients put and get; one node is SIGKILLed
// mid-load (its blocks become misses, nothing else fails); it restarts and rejoins; a
// fourth node joins and takes about a quarter of new blocks.
TEST_F(PoolTest, NodeDeathRestartAndJoin) {
  REQUIRE_ETCD();
  EtcdServer etcd(TempDir("etcd"));
  ASSERT_TRUE(etcd.Start()) << etcd.output();
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(StartNode(i, etcd.endpoint())) << nodes_[i]->output();

  PoolOptions po;
  po.etcd = etcd.endpoint();
  po.client.ns = "pool-test";
  po.node_timeout_ms = 300;
  po.retry_after_ms = 300;
  auto probe = PoolClient::Create(po);
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  PoolClient& pc = **probe;
  ASSERT_TRUE(WaitFor([&] { return pc.GetStatus(false).members.size() == 3; }, 5000ms));

  constexpr size_t kValue = 4096;
  constexpr int kThreads = 3;
  std::atomic<bool> stop{false}, killed{false};
  std::atomic<uint64_t> bad_gets{0}, wrong_data{0}, bad_puts{0}, misses{0}, gets{0}, puts{0};
  std::vector<std::vector<BlockKey>> written(kThreads);
  std::vector<std::vector<bool>> must_survive(kThreads);  // put started after node 1 was dead
  std::atomic<bool> dead{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto c = PoolClient::Create(po);
      if (!c.ok()) {
        ++bad_puts;
        return;
      }
      std::mt19937_64 rng(t);
      auto deadline = Clock::now() + 20s;
      for (uint64_t i = 0; !stop && i < 200000 && Clock::now() < deadline; ++i) {
        BlockKey k{uint64_t(t + 1), i + 1};
        auto v = Value(k, kValue);
        bool after_death = dead.load();
        Status s = (*c)->Put(k, v);
        ++puts;
        if (s.ok()) {
          written[t].push_back(k);
          must_survive[t].push_back(after_death);
        } else if (!(killed && s.code() == Code::kUnavailable)) {
          if (bad_puts++ == 0) ADD_FAILURE() << "put failed before the kill: " << s.ToString();
        }
        if (written[t].empty()) continue;
        BlockKey g = written[t][rng() % written[t].size()];
        std::vector<std::byte> buf(kValue);
        auto r = (*c)->Get(g, buf);
        ++gets;
        if (r.ok()) {
          if (*r != kValue || buf != Value(g, kValue)) ++wrong_data;
        } else if ((r.status().code() == Code::kNotFound ||
                    r.status().code() == Code::kUnavailable) &&
                   killed) {  // a miss, or the dead node's key before it is dropped
          ++misses;
        } else if (bad_gets++ == 0) {
          ADD_FAILURE() << "get failed: " << r.status().ToString();
        }
        std::this_thread::sleep_for(500us);
      }
    });
  }
  // Enough blocks on every node before the kill, however slow this build runs (a fixed
  // 700 ms gave fewer than the 200 asserted below under ASan on a busy machine).
  EXPECT_TRUE(WaitFor([&] { return puts.load() >= 400; }, 15000ms)) << puts.load();
  killed = true;  // first: a request may fail before Kill() returns
  nodes_[1]->Kill();
  dead = true;
  std::this_thread::sleep_for(1000ms);
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong_data.load(), 0u);
  EXPECT_EQ(bad_gets.load(), 0u);
  EXPECT_EQ(bad_puts.load(), 0u);
  EXPECT_GT(puts.load(), 300u);
  EXPECT_GT(gets.load(), 300u);

  // Every block written is either served intact or a miss; the misses are node 1's blocks
  // (node 1 is out of placement now: its keys map to the survivors, which never held them).
  // Blocks put after node 1 was dead went to the survivors and all hit.
  size_t before_kill = 0, lost = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (size_t i = 0; i < written[t].size(); ++i) {
      const BlockKey& k = written[t][i];
      std::vector<std::byte> buf(kValue);
      auto r = pc.Get(k, buf);
      before_kill += !must_survive[t][i];
      if (r.ok()) {
        EXPECT_TRUE(buf == Value(k, kValue));
      } else {  // a miss at a survivor, or the dead node's key before it is dropped
        EXPECT_TRUE(r.status().code() == Code::kNotFound || r.status().code() == Code::kUnavailable)
            << r.status().ToString();
        EXPECT_FALSE(must_survive[t][i]) << "a block put after the kill was lost";
        ++lost;
      }
    }
  }
  ASSERT_GT(before_kill, 200u);
  double lost_share = double(lost) / double(before_kill);
  EXPECT_GT(lost_share, 0.2);  // about a third were node 1's
  EXPECT_LT(lost_share, 0.45);

  // The survivors serve new blocks; node 1's lease expires and it leaves the list.
  EXPECT_TRUE(WaitFor([&] { return pc.GetStatus(false).members.size() == 2; }, 6000ms));
  // It restarts (empty, on a new port) and takes its share again.
  ASSERT_TRUE(StartNode(1, etcd.endpoint())) << nodes_[1]->output();
  ASSERT_TRUE(WaitFor([&] { return pc.GetStatus(false).members.size() == 3; }, 5000ms));
  std::map<std::string, int> owners;
  for (uint64_t i = 0; i < 3000; ++i) {
    BlockKey k{99, i};
    owners[pc.OwnerOf(k)]++;
  }
  EXPECT_GT(owners["n1"], 800);
  for (uint64_t i = 0; i < 300; ++i) {
    BlockKey k{100, i};
    auto v = Value(k, kValue);
    ASSERT_TRUE(pc.Put(k, v).ok());
    std::vector<std::byte> buf(kValue);
    auto r = pc.Get(k, buf);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(buf == v);
  }

  // A fourth node joins: it receives about a quarter of the new blocks (counted by the
  // nodes themselves, through STAT).
  ASSERT_TRUE(StartNode(3, etcd.endpoint())) << nodes_[3]->output();
  ASSERT_TRUE(WaitFor([&] { return pc.GetStatus(false).members.size() == 4; }, 5000ms));
  auto blocks_of = [&](const std::string& id) -> uint64_t {
    for (const auto& m : pc.GetStatus(true).members) {
      if (m.id == id) return m.blocks;
    }
    return 0;
  };
  uint64_t before = blocks_of("n3");
  EXPECT_EQ(before, 0u);
  constexpr int kNew = 2000;
  for (uint64_t i = 0; i < kNew; ++i) {
    BlockKey k{200, i};
    ASSERT_TRUE(pc.Put(k, Value(k, 1024)).ok());
  }
  double share = double(blocks_of("n3") - before) / kNew;
  EXPECT_NEAR(share, 0.25, 0.05);
  // The nodes watch the member list as well and log who joined. One change may name
  // several members ("joined: n1@... n3@..." when the restarted n1 and n3 arrive together).
  auto logged_join = [&](const std::string& id) {
    std::istringstream log(nodes_[0]->output());
    for (std::string line; std::getline(log, line);) {
      size_t at = line.find("joined:");
      if (at != std::string::npos && line.find(" " + id + "@", at) != std::string::npos)
        return true;
    }
    return false;
  };
  EXPECT_TRUE(WaitFor([&] { return logged_join("n3"); }, 3000ms)) << nodes_[0]->output();
  PoolStatus st = pc.GetStatus(true);
  EXPECT_TRUE(st.membership_ok);
  for (const auto& m : st.members) {
    EXPECT_TRUE(m.reachable) << m.id;
    EXPECT_TRUE(m.stats_valid) << m.id;
    EXPECT_EQ(m.zone, "z" + std::to_string((m.id[1] - '0') % 2));
  }
}

// Static membership (no etcd): a dead node's blocks are misses within the timeout, the
// other node is not held up, the dead node leaves placement after repeated failures and
// comes back when it answers again.
TEST_F(PoolTest, StaticMembersDropAndReadmitADeadNode) {
  nodes_.push_back(std::make_unique<Daemon>(TempDir("node")));
  nodes_.push_back(std::make_unique<Daemon>(TempDir("node")));
  ASSERT_TRUE(nodes_[0]->Start()) << nodes_[0]->output();
  ASSERT_TRUE(nodes_[1]->Start()) << nodes_[1]->output();
  int port1 = nodes_[1]->port();
  PoolOptions po;
  po.members = nodes_[0]->tcp_address() + ",id=a;" + nodes_[1]->tcp_address() + ",id=b";
  po.node_timeout_ms = 300;
  po.failures_to_drop = 2;
  po.retry_after_ms = 200;
  auto pool = PoolClient::Create(po);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  PoolClient& pc = **pool;

  // A batch spanning both nodes, results in request order.
  std::vector<BlockKey> keys;
  std::vector<std::vector<std::byte>> values;
  for (uint64_t i = 0; i < 64; ++i) {
    keys.push_back({7, i});
    values.push_back(Value(keys.back(), 1000 + i));
  }
  std::vector<PutOp> puts(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) puts[i] = PutOp{keys[i], values[i], {}, {}};
  ASSERT_TRUE(pc.PutBatch(puts).ok());
  for (const PutOp& p : puts) EXPECT_TRUE(p.status.ok()) << p.status.ToString();
  std::vector<std::string> owner(keys.size());
  int on_b = 0;
  for (size_t i = 0; i < keys.size(); ++i) on_b += (owner[i] = pc.OwnerOf(keys[i])) == "b";
  EXPECT_GT(on_b, 10);
  EXPECT_LT(on_b, 54);
  std::vector<std::vector<std::byte>> bufs(keys.size(), std::vector<std::byte>(2000));
  std::vector<GetOp> gets(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    gets[i].key = keys[i];
    gets[i].buffer = bufs[i];
  }
  ASSERT_TRUE(pc.GetBatch(gets).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(gets[i].status.ok());
    ASSERT_EQ(gets[i].size, values[i].size());
    EXPECT_TRUE(std::equal(values[i].begin(), values[i].end(), bufs[i].begin()));
  }

  // b stops answering (SIGSTOP: connections stay open, nothing comes back). Its blocks are
  // unavailable (not absent) after node_timeout_ms, and a's blocks in the same batch are
  // served.
  ASSERT_TRUE(nodes_[1]->Freeze());
  auto t0 = Clock::now();
  ASSERT_TRUE(pc.GetBatch(gets).ok());
  auto took = Clock::now() - t0;
  nodes_[1]->Thaw();
  EXPECT_LT(took, 1500ms);  // bounded by node_timeout_ms (300), not the 5 s client default
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(gets[i].status.code(), owner[i] == "b" ? Code::kUnavailable : Code::kOk) << i;
  }

  nodes_[1]->Kill();
  for (auto& g : gets) g.status = Status();
  ASSERT_TRUE(pc.GetBatch(gets).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (owner[i] == "b") {
      // Not answered: kUnavailable, a miss to the engine but not "absent" (the call is OK).
      EXPECT_EQ(gets[i].status.code(), Code::kUnavailable);
      EXPECT_EQ(gets[i].size, 0u);
    } else {
      EXPECT_TRUE(gets[i].status.ok());  // node a answers as before
    }
  }
  // After repeated failures b leaves placement: every key maps to a, new puts succeed.
  for (int i = 0; i < 4; ++i) (void)pc.Exists(keys[0]);
  ASSERT_TRUE(WaitFor(
      [&] {
        (void)pc.GetBatch(gets);
        return pc.OwnerOf(keys[0]) == "a" && pc.OwnerOf(keys[1]) == "a" &&
               pc.OwnerOf(keys[2]) == "a";
      },
      3000ms));
  int owned_by_a = 0;
  for (const BlockKey& k : keys) owned_by_a += pc.OwnerOf(k) == "a";
  EXPECT_EQ(owned_by_a, int(keys.size()));
  PoolStatus st = pc.GetStatus(false);
  ASSERT_EQ(st.members.size(), 2u);
  EXPECT_FALSE(st.members[1].in_placement);
  EXPECT_FALSE(st.members[1].reachable);
  EXPECT_TRUE(pc.Put({8, 1}, Value({8, 1}, 100)).ok());

  // b returns on its old port: the prober finds it and it takes its keys again.
  ASSERT_TRUE(nodes_[1]->Start({}, "127.0.0.1:" + std::to_string(port1))) << nodes_[1]->output();
  ASSERT_TRUE(WaitFor(
      [&] {
        int b = 0;
        for (const BlockKey& k : keys) b += pc.OwnerOf(k) == "b";
        return b == on_b;
      },
      5000ms));
  EXPECT_TRUE(pc.GetStatus(true).members[1].reachable);
}

// `kvpool cluster status`: the real CLI against a live and a dead member.
// Issue 21's handoff figures: a working set written to three nodes, read just after a
// fourth joins (a client without handoff misses the newcomer's share; with it, misses at
// the new owner read through from the old one and are kept there), then read after a
// node is drained with `kvpool cluster drain` and stopped, by a client that never saw the
// old placement (so every hit is a block the drain moved).
TEST_F(PoolTest, JoinAndDrainKeepTheWorkingSet) {
  REQUIRE_ETCD();
  EtcdServer etcd(TempDir("etcd"));
  ASSERT_TRUE(etcd.Start()) << etcd.output();
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(StartNode(i, etcd.endpoint())) << nodes_[i]->output();
  PoolOptions po;
  po.etcd = etcd.endpoint();
  po.client.ns = "handoff";
  PoolOptions plain_o = po;
  plain_o.handoff_ms = 0;
  auto with = PoolClient::Create(po);
  auto plain = PoolClient::Create(plain_o);
  ASSERT_TRUE(with.ok() && plain.ok());
  auto members = [](PoolClient& pc) { return pc.GetStatus(false).members.size(); };
  ASSERT_TRUE(WaitFor([&] { return members(**with) == 3 && members(**plain) == 3; }, 5000ms));

  constexpr size_t kBlocks = 3000, kValue = 4096, kBatch = 100;
  auto key = [](size_t i) { return BlockKey{77, i + 1}; };
  for (size_t at = 0; at < kBlocks; at += kBatch) {
    std::vector<std::vector<std::byte>> vals;
    std::vector<PutOp> puts;
    for (size_t i = at; i < at + kBatch; ++i) vals.push_back(Value(key(i), kValue));
    for (size_t i = 0; i < kBatch; ++i) puts.push_back(PutOp{key(at + i), vals[i], {}, {}});
    ASSERT_TRUE((*with)->PutBatch(puts).ok());
    for (const PutOp& p : puts) ASSERT_TRUE(p.status.ok()) << p.status.ToString();
  }
  uint64_t wrong = 0;
  auto hit_ratio = [&](PoolClient& pc) {
    size_t hits = 0;
    for (size_t at = 0; at < kBlocks; at += kBatch) {
      std::vector<std::vector<std::byte>> bufs(kBatch, std::vector<std::byte>(kValue));
      std::vector<GetOp> gets(kBatch);
      for (size_t i = 0; i < kBatch; ++i) gets[i].key = key(at + i), gets[i].buffer = bufs[i];
      EXPECT_TRUE(pc.GetBatch(gets).ok());
      for (size_t i = 0; i < kBatch; ++i) {
        if (!gets[i].status.ok()) continue;
        ++hits;
        wrong += bufs[i] != Value(key(at + i), kValue);
      }
    }
    return double(hits) / kBlocks;
  };
  double before = hit_ratio(**with);
  EXPECT_EQ(before, 1.0);

  ASSERT_TRUE(StartNode(3, etcd.endpoint())) << nodes_[3]->output();
  ASSERT_TRUE(WaitFor([&] { return members(**with) == 4 && members(**plain) == 4; }, 5000ms));
  double join_plain = hit_ratio(**plain);  // first: the handoff below stores blocks anew
  double join = hit_ratio(**with);
  PoolStatus st = (*with)->GetStatus(false);
  double again = hit_ratio(**with);
  uint64_t reads_again = (*with)->GetStatus(false).handoff_reads - st.handoff_reads;
  EXPECT_LT(join_plain, 0.9);  // the newcomer's share (about a quarter) is missing
  EXPECT_GE(join / before, 0.95);
  EXPECT_EQ(again, 1.0);
  EXPECT_EQ(reads_again, 0u);  // the blocks found were kept at their new owners
  EXPECT_EQ(st.handoff_hits, st.handoff_kept);
  EXPECT_GT(st.handoff_hits, kBlocks / 10);

  // Nothing stale comes back through the handoff: a block erased, or overwritten, after
  // the join is gone (or new) everywhere, though its previous owner held it.
  PoolClient& hc = **with;
  std::vector<BlockKey> moved;
  for (size_t i = 0; i < kBlocks && moved.size() < 2; ++i) {
    if ((*plain)->OwnerOf(key(i)) == "n3") moved.push_back(key(i));
  }
  ASSERT_EQ(moved.size(), 2u);
  std::vector<std::byte> buf(kValue);
  ASSERT_TRUE(hc.Erase(moved[0]).ok());
  EXPECT_EQ(hc.Get(moved[0], buf).status().code(), Code::kNotFound);
  auto fresh_value = Value(BlockKey{1, 2}, kValue);
  ASSERT_TRUE(hc.Put(moved[1], fresh_value, PutOptions{{}, /*overwrite=*/true}).ok());
  ASSERT_TRUE(hc.Erase(moved[1]).ok());
  EXPECT_EQ(hc.Get(moved[1], buf).status().code(), Code::kNotFound);
  ASSERT_TRUE(hc.Put(moved[1], fresh_value, PutOptions{{}, /*overwrite=*/true}).ok());
  ASSERT_TRUE(hc.Get(moved[1], buf).ok());
  EXPECT_EQ(buf, fresh_value);
  for (const BlockKey& k : moved) {  // back as they were, for the drain below
    ASSERT_TRUE(hc.Put(k, Value(k, kValue), PutOptions{{}, /*overwrite=*/true}).ok());
  }

  // Drain n1, then stop it; a client that never saw n1 finds the working set.
  std::string out;
  auto drain_t0 = Clock::now();
  int rc = testing::RunKvpoolCli("cluster drain n1 --etcd " + etcd.endpoint(), &out);
  EXPECT_EQ(rc, 0) << out;
  std::string drain_out =
      out.substr(out.rfind("drained")) + "drain took " +
      std::to_string(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - drain_t0).count()) +
      " ms\n";
  EXPECT_NE(out.find("drained n1"), std::string::npos) << out;
  EXPECT_NE(nodes_[1]->output().find("left the pod's member list (drain)"), std::string::npos);
  EXPECT_EQ(nodes_[1]->Stop(), 0);
  auto fresh = PoolClient::Create(po);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(WaitFor([&] { return members(**fresh) == 3; }, 5000ms));
  double drained = hit_ratio(**fresh);
  EXPECT_GE(drained / before, 0.90);
  EXPECT_EQ((*fresh)->GetStatus(false).handoff_reads, 0u);
  EXPECT_EQ(wrong, 0u);
  std::printf(
      "handoff: working set %zu blocks; hit ratio before %.3f, after a join %.3f "
      "(without handoff %.3f; %llu found at previous owners), again %.3f; after a "
      "drain %.3f (%.2fx of before)\n%s",
      kBlocks, before, join, join_plain, (unsigned long long)st.handoff_hits, again, drained,
      drained / before, drain_out.c_str());
  // Draining again, or a node that is not there: clear errors.
  EXPECT_EQ(testing::RunKvpoolCli("cluster drain n9 --etcd " + etcd.endpoint(), &out), 2);
  EXPECT_NE(out.find("no member 'n9'"), std::string::npos) << out;
}

// Trustworthy membership (issue 20): a second node with a member id already in use is
// refused at start (it would take the first one's place, and delete its record when it
// left); a record deleted by hand comes back within one lease.
TEST_F(PoolTest, MemberIdClashIsRefusedAndAVanishedRecordComesBack) {
  REQUIRE_ETCD();
  EtcdServer etcd(TempDir("etcd"));
  ASSERT_TRUE(etcd.Start()) << etcd.output();
  ASSERT_TRUE(StartNode(0, etcd.endpoint())) << nodes_[0]->output();
  cluster::Etcd e({etcd.endpoint()}, 1000);
  auto record = [&]() -> std::string {
    std::vector<cluster::EtcdKv> kvs;
    int64_t rev = 0;
    if (!e.RangePrefix("/kvpool/members/n0", &kvs, &rev).ok()) return "";
    for (const auto& kv : kvs) {
      if (kv.key == "/kvpool/members/n0") return kv.value;
    }
    return "";
  };
  ASSERT_TRUE(WaitFor([&] { return !record().empty(); }, 5000ms));
  std::string original = record();

  Daemon twin(TempDir("twin"));
  EXPECT_FALSE(twin.Start({"--etcd", etcd.endpoint(), "--member-id", "n0", "--lease-ttl", "2"}));
  EXPECT_NE(
      twin.output().find("member id 'n0' is registered by the node at " + nodes_[0]->tcp_address()),
      std::string::npos)
      << twin.output();
  EXPECT_EQ(record(), original);  // the first node's record is untouched

  ASSERT_TRUE(e.Delete("/kvpool/members/n0").ok());
  // Back within one lease (2 s) and a check (every 2/3 s), with room for a loaded machine.
  ASSERT_TRUE(WaitFor([&] { return record() == original; }, 3000ms)) << nodes_[0]->output();
  // The node logs it just after writing it back.
  EXPECT_TRUE(WaitFor(
      [&] {
        return nodes_[0]->output().find("had vanished; registered again") != std::string::npos;
      },
      2000ms));
}

// etcd with auth on (issue 20): a node joins only with the cluster's credential; a node
// without it, or with a wrong password, is refused at start; a record written without
// credentials is refused by etcd; a pool client finds the members only with the credential.
TEST_F(PoolTest, EtcdAuthAdmitsOnlyTheClustersCredential) {
  REQUIRE_ETCD();
  EtcdServer etcd(TempDir("etcd"));
  ASSERT_TRUE(etcd.Start()) << etcd.output();
  auto admin = [&](const char* path, const std::string& body) {
    auto r = cluster::HttpPost(etcd.endpoint(), path, body, 2000);
    EXPECT_TRUE(r.ok()) << path << ": " << r.status().ToString();
  };
  // root (needed to turn auth on) and a kvpool user that may write the member prefix only.
  admin("/v3/auth/user/add", R"({"name":"root","password":"rootpw"})");
  admin("/v3/auth/user/grant", R"({"user":"root","role":"root"})");
  admin("/v3/auth/role/add", R"({"name":"kvpool"})");
  std::string prefix = "/kvpool/members/";
  admin("/v3/auth/role/grant", R"({"name":"kvpool","perm":{"permType":"READWRITE","key":")" +
                                   Base64Encode(prefix) + R"(","range_end":")" +
                                   Base64Encode(cluster::PrefixEnd(prefix)) + R"("}})");
  admin("/v3/auth/user/add", R"({"name":"kvpool","password":"podpw"})");
  admin("/v3/auth/user/grant", R"({"user":"kvpool","role":"kvpool"})");
  admin("/v3/auth/enable", "{}");

  std::string dir = TempDir("auth");
  std::ofstream(dir + "/good.pw") << "podpw\n";
  std::ofstream(dir + "/bad.pw") << "guess\n";
  auto config = [&](const std::string& name, const std::string& pw) {
    std::string path = dir + "/" + name + ".toml";
    std::ofstream(path) << "[cluster]\netcd_user = \"kvpool\"\netcd_password_file = \"" + dir +
                               "/" + pw + "\"\n";
    return path;
  };
  nodes_.push_back(std::make_unique<Daemon>(TempDir("node")));
  ASSERT_TRUE(nodes_[0]->Start({"--config", config("good", "good.pw"), "--etcd", etcd.endpoint(),
                                "--member-id", "n0", "--lease-ttl", "2"}))
      << nodes_[0]->output();
  cluster::Etcd member({etcd.endpoint()}, 1000, {"kvpool", "podpw", "", "", ""});
  auto members = [&](cluster::Etcd& e) {
    std::vector<cluster::EtcdKv> kvs;
    int64_t rev = 0;
    Status s = e.RangePrefix(prefix, &kvs, &rev);
    return s.ok() ? int(kvs.size()) : -1;
  };
  ASSERT_TRUE(WaitFor([&] { return members(member) == 1; }, 5000ms)) << nodes_[0]->output();

  Daemon rogue(TempDir("rogue"));
  EXPECT_FALSE(rogue.Start({"--etcd", etcd.endpoint(), "--member-id", "rogue"}));
  EXPECT_NE(rogue.output().find("refused"), std::string::npos) << rogue.output();
  Daemon guesser(TempDir("guesser"));
  EXPECT_FALSE(guesser.Start(
      {"--config", config("bad", "bad.pw"), "--etcd", etcd.endpoint(), "--member-id", "guesser"}));
  EXPECT_NE(guesser.output().find("refused user 'kvpool'"), std::string::npos) << guesser.output();
  // etcdctl-style writes without a credential: etcd refuses them now.
  cluster::Etcd anonymous({etcd.endpoint()}, 1000);
  EXPECT_FALSE(anonymous.Put(prefix + "forged", R"({"address":"127.0.0.1:1"})").ok());
  EXPECT_EQ(members(anonymous), -1);
  EXPECT_EQ(members(member), 1);
  // The pool client: with the credential it finds the node, without it none.
  PoolOptions po;
  po.etcd = etcd.endpoint();
  po.etcd_user = "kvpool";
  po.etcd_password = "podpw";
  auto pool = std::move(PoolClient::Create(po)).value();
  EXPECT_EQ(pool->GetStatus(false).members.size(), 1u);
  po.etcd_user.clear();
  po.etcd_password.clear();
  po.etcd_wait_ms = 500;
  auto blind = std::move(PoolClient::Create(po)).value();
  PoolStatus st = blind->GetStatus(false);
  EXPECT_EQ(st.members.size(), 0u);
  EXPECT_FALSE(st.membership_ok);
}

// etcd over TLS with client certificates (--client-cert-auth): a node with the cluster's
// certificate joins; one without, or with a certificate of another CA, is refused at start.
TEST_F(PoolTest, EtcdClientCertificatesAdmitOnlyTheCluster) {
  REQUIRE_ETCD();
  std::string certs = TempDir("etcd-certs");
  ASSERT_EQ(std::system((std::string(KVPOOL_SOURCE_DIR) + "/scripts/make-test-certs.sh " + certs +
                         " >/dev/null")
                            .c_str()),
            0);
  EtcdServer etcd(TempDir("etcd"));
  ASSERT_TRUE(etcd.Start(certs)) << etcd.output();
  auto config = [&](const std::string& client) {
    std::string path = certs + "/" + client + ".toml";
    std::ofstream(path) << "[cluster]\netcd_tls_ca = \"" + certs + "/ca.pem\"\n" +
                               (client.empty() ? ""
                                               : "etcd_tls_cert = \"" + certs + "/" + client +
                                                     ".pem\"\netcd_tls_key = \"" + certs + "/" +
                                                     client + ".key\"\n");
    return path;
  };
  nodes_.push_back(std::make_unique<Daemon>(TempDir("node")));
  ASSERT_TRUE(nodes_[0]->Start({"--config", config("client"), "--etcd", etcd.endpoint(),
                                "--member-id", "n0", "--lease-ttl", "2"}))
      << nodes_[0]->output();
  cluster::Etcd e({etcd.endpoint()}, 1000,
                  {"", "", certs + "/ca.pem", certs + "/client.pem", certs + "/client.key"});
  ASSERT_TRUE(WaitFor(
      [&] {
        std::vector<cluster::EtcdKv> kvs;
        int64_t rev = 0;
        return e.RangePrefix("/kvpool/members/", &kvs, &rev).ok() && kvs.size() == 1;
      },
      5000ms))
      << nodes_[0]->output();
  for (const std::string& who : {std::string(), std::string("rogue-client")}) {
    Daemon rogue(TempDir("rogue"));
    EXPECT_FALSE(
        rogue.Start({"--config", config(who), "--etcd", etcd.endpoint(), "--member-id", "rogue"}))
        << who;
    EXPECT_NE(rogue.output().find("refused"), std::string::npos) << rogue.output();
  }
}

// Every record vanishing at once (as when etcd stalled and all leases expired together)
// does not empty the clients' member list while the nodes register again; one node
// leaving is still seen at once.
TEST_F(PoolTest, MassExpiryKeepsTheLastKnownMembers) {
  REQUIRE_ETCD();
  EtcdServer etcd(TempDir("etcd"));
  ASSERT_TRUE(etcd.Start()) << etcd.output();
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(StartNode(i, etcd.endpoint())) << nodes_[i]->output();
  auto watch = cluster::Membership::FromEtcd({etcd.endpoint()}, "/kvpool/members/", 1000);
  auto size = [&] { return watch->Current().members->size(); };
  ASSERT_TRUE(WaitFor([&] { return size() == 3; }, 5000ms));
  cluster::Etcd e({etcd.endpoint()}, 1000);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(e.Delete("/kvpool/members/n" + std::to_string(i)).ok());
  size_t least = 3;
  for (auto end = Clock::now() + 2500ms; Clock::now() < end;) {
    least = std::min(least, size());
    std::this_thread::sleep_for(5ms);
  }
  // The first departure is published before the second shows it is a mass one (so 2 may
  // be seen for an instant); without the guard the list falls to 0.
  EXPECT_GE(least, 2u);
  for (int i = 0; i < 3; ++i) {  // and the records really are back
    EXPECT_TRUE(WaitFor(
        [&] {
          return nodes_[i]->output().find("had vanished; registered again") != std::string::npos;
        },
        2000ms));
  }
  std::this_thread::sleep_for(3500ms);  // past the mass window
  EXPECT_EQ(nodes_[2]->Stop(), 0);
  EXPECT_TRUE(WaitFor([&] { return size() == 2; }, 3000ms));  // not held the 10 s
}

TEST_F(PoolTest, ClusterStatusCommand) {
  nodes_.push_back(std::make_unique<Daemon>(TempDir("node")));
  ASSERT_TRUE(nodes_[0]->Start()) << nodes_[0]->output();
  auto run = [](const std::string& args, std::string* out) {
    return testing::RunKvpoolCli("cluster status " + args, out);
  };
  std::string out;
  std::string live = nodes_[0]->tcp_address() + ",id=live,zone=z9,capacity=2GiB";
  EXPECT_EQ(run("--members '" + live + "' --json", &out), 0) << out;
  EXPECT_NE(out.find("\"id\": \"live\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"zone\": \"z9\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"capacity\": 2147483648"), std::string::npos) << out;
  EXPECT_NE(out.find("\"reachable\": true"), std::string::npos) << out;
  EXPECT_EQ(run("--members '" + live + ";127.0.0.1:1,id=dead'", &out), 1) << out;
  EXPECT_NE(out.find("UNREACHABLE"), std::string::npos) << out;
  EXPECT_NE(out.find("live"), std::string::npos) << out;
  EXPECT_EQ(run("--members nonsense", &out), 2) << out;
  EXPECT_NE(out.find("host:port"), std::string::npos) << out;
  // What a script must not read as healthy: a member missing, etcd unreachable.
  EXPECT_EQ(run("--members '" + live + "' --expect-members 1", &out), 0) << out;
  EXPECT_EQ(run("--members '" + live + "' --expect-members 2", &out), 1) << out;
  EXPECT_NE(out.find("1 members listed, 2 expected"), std::string::npos) << out;
  EXPECT_EQ(run("--etcd 127.0.0.1:1", &out), 1) << out;
  EXPECT_NE(out.find("UNREACHABLE"), std::string::npos) << out;
}

TEST(PoolOptionsTest, BadOptionsAreClearErrors) {
  PoolOptions po;
  EXPECT_EQ(PoolClient::Create(po).status().code(), Code::kInvalidArgument);  // no members
  po.members = "nohost";
  EXPECT_EQ(PoolClient::Create(po).status().code(), Code::kInvalidArgument);
  po.members = "127.0.0.1:1";
  po.node_timeout_ms = 0;
  EXPECT_EQ(PoolClient::Create(po).status().code(), Code::kInvalidArgument);
  // A pool whose only member is unreachable: kUnavailable, promptly.
  po.node_timeout_ms = 200;
  auto pool = PoolClient::Create(po);
  ASSERT_TRUE(pool.ok());
  std::vector<std::byte> buf(16);
  auto t0 = Clock::now();
  EXPECT_EQ((*pool)->Get({1, 1}, buf).status().code(), Code::kUnavailable);
  EXPECT_EQ((*pool)->Put({1, 1}, buf).code(), Code::kUnavailable);
  EXPECT_EQ((*pool)->Exists({1, 1}).status().code(), Code::kUnavailable) << "not absent: unknown";
  EXPECT_LT(Clock::now() - t0, 3s);
}

// One kvpoold for a test; stopped (Stop resumes it first, should the test have left it
// frozen) and its directory removed at the end.
class OneNode : public ::testing::Test {
 protected:
  void StartNode(const std::vector<std::string>& flags) {
    dir_ = TempDir("node");
    d_ = std::make_unique<Daemon>(dir_);
    ASSERT_TRUE(d_->Start(flags)) << d_->output();
  }
  void TearDown() override {
    if (!d_) return;
    EXPECT_EQ(d_->Stop(), 0);
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  Daemon& d() { return *d_; }
  std::string dir_;
  std::unique_ptr<Daemon> d_;
};
class ClientDeadlineTest : public OneNode {};
class NearCacheTest : public OneNode {};

// Every batch call honours its deadline: a server that stops answering costs the caller the
// deadline, not request_timeout_ms; items say kTimeout; the next call reconnects and works.
TEST_F(ClientDeadlineTest, StoppedServerTimesOutAtTheDeadline) {
  StartNode({"--reactors", "1"});
  ClientOptions o;
  o.address = d().tcp_address();
  o.request_timeout_ms = 5000;
  auto c = Client::Create(o);
  ASSERT_TRUE(c.ok());
  std::vector<BlockKey> keys;
  std::vector<std::vector<std::byte>> vals;
  for (uint64_t i = 1; i <= 8; ++i) {
    keys.push_back(BlockKey{i, i});
    vals.push_back(Value(keys.back(), 64 << 10));
    ASSERT_TRUE((*c)->Put(keys.back(), vals.back()).ok());
  }
  std::vector<std::vector<std::byte>> bufs(8, std::vector<std::byte>(64 << 10));
  std::vector<GetOp> gets(8);
  for (size_t i = 0; i < 8; ++i) gets[i].key = keys[i], gets[i].buffer = bufs[i];

  // A deadline already passed: no I/O, every item kTimeout.
  EXPECT_EQ((*c)->GetBatch(gets, Deadline{1}).code(), Code::kTimeout);
  for (auto& g : gets) EXPECT_EQ(g.status.code(), Code::kTimeout);
  // A generous one: served.
  ASSERT_TRUE((*c)->GetBatch(gets, Deadline::After(2s)).ok());
  for (auto& g : gets) EXPECT_TRUE(g.status.ok());

  ASSERT_TRUE(d().Freeze());
  auto t0 = Clock::now();
  Status s = (*c)->GetBatch(gets, Deadline::After(80ms));
  auto took = Clock::now() - t0;
  std::vector<KeyOp> ex(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) ex[i].key = keys[i];
  auto t1 = Clock::now();
  Status se = (*c)->ExistsBatch(ex, Deadline::After(50ms));
  auto took_exists = Clock::now() - t1;
  auto m = (*c)->MatchPrefix(keys, Deadline::After(50ms));
  d().Thaw();
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_GE(took, 75ms);
  EXPECT_LT(took, 1000ms);  // the deadline, not the 5 s request timeout
  for (auto& g : gets) EXPECT_EQ(g.status.code(), Code::kTimeout);
  EXPECT_EQ(se.code(), Code::kTimeout);
  EXPECT_LT(took_exists, 1000ms);
  for (auto& e : ex) EXPECT_EQ(e.status.code(), Code::kTimeout);
  EXPECT_EQ(m.status().code(), Code::kTimeout);

  // Resumed: the next call (new connection) gets the right data, and no stale answer.
  for (auto& b : bufs) std::fill(b.begin(), b.end(), std::byte{0});
  ASSERT_TRUE((*c)->GetBatch(gets, Deadline::After(3s)).ok());
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(gets[i].status.ok());
    EXPECT_EQ(bufs[i], vals[i]);
  }
}

// The near cache against a real kvpoold: a prestaged chain is local; a miss ends the
// prestage at the chain's gap; a stopped server costs the prestage its deadline, never the
// caller's thread.
TEST_F(NearCacheTest, PrestageFollowsTheChainAndHonoursTheDeadline) {
  StartNode({"--dram", "128MiB"});
  ClientOptions co;
  co.address = d().tcp_address();
  auto writer = Client::Create(co);
  ASSERT_TRUE(writer.ok());
  std::vector<uint32_t> tokens(128 * 16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 7 + 3);
  std::vector<BlockKey> chain = ChainKeys(NamespaceRoot("near"), tokens, 16);
  ASSERT_EQ(chain.size(), 128u);
  for (size_t i = 0; i < chain.size(); ++i) {
    ASSERT_TRUE(
        (*writer)
            ->Put(chain[i], Value(chain[i], 64 << 10), PutOptions{i ? chain[i - 1] : BlockKey{}})
            .ok());
  }
  NearCacheOptions no;
  no.store.dram_bytes = 64 * kMiB;
  auto make = [&] {
    auto c = Client::Create(co);
    EXPECT_TRUE(c.ok());
    auto nc = NearCache::Create(no, std::move(c).value());
    EXPECT_TRUE(nc.ok()) << nc.status().ToString();
    return std::move(nc).value();
  };

  auto nc = make();
  auto t = nc->Prestage(chain, Deadline::After(10s));
  EXPECT_EQ(nc->WaitPrestaged(t, Deadline::After(10s)), 128u);
  EXPECT_EQ(nc->LocalPrefix(chain), 128u);
  EXPECT_EQ(nc->stats().prestaged, 128u);
  std::vector<std::vector<std::byte>> bufs(128, std::vector<std::byte>(64 << 10));
  std::vector<GetOp> gets(128);
  for (size_t i = 0; i < 128; ++i) gets[i].key = chain[i], gets[i].buffer = bufs[i];
  ASSERT_TRUE(nc->GetBatch(gets).ok());
  for (size_t i = 0; i < 128; ++i) {
    ASSERT_TRUE(gets[i].status.ok());
    ASSERT_EQ(bufs[i], Value(chain[i], 64 << 10));
  }
  EXPECT_EQ(nc->stats().local_hits, 128u);  // all local copies, no pool round trip
  EXPECT_EQ(nc->stats().pool_hits, 0u);

  // A gap in the pool's chain ends the prestage there: later blocks are useless without it.
  ASSERT_TRUE((*writer)->Erase(chain[50]).ok());
  auto nc2 = make();
  t = nc2->Prestage(chain, Deadline::After(10s));
  EXPECT_EQ(nc2->WaitPrestaged(t, Deadline::After(10s)), 50u);
  EXPECT_EQ(nc2->stats().prestage_stopped_at_miss, 1u);
  // Get: local hits, then the pool for the rest (kept locally), a miss for the gap.
  ASSERT_TRUE(nc2->GetBatch(std::span<GetOp>(gets).first(60)).ok());
  EXPECT_EQ(gets[49].status.code(), Code::kOk);
  EXPECT_EQ(gets[50].status.code(), Code::kNotFound);
  EXPECT_EQ(gets[51].status.code(), Code::kOk);
  EXPECT_EQ(bufs[55], Value(chain[55], 64 << 10));
  EXPECT_EQ(nc2->stats().local_hits, 50u);
  EXPECT_EQ(nc2->stats().pool_hits, 9u);
  EXPECT_TRUE(nc2->local().Exists(chain[55]));

  // A server that stops answering: Prestage returns at once, the prestage ends at its
  // deadline with what it had.
  auto nc3 = make();
  ASSERT_TRUE(d().Freeze());
  auto t0 = Clock::now();
  t = nc3->Prestage(chain, Deadline::After(150ms));
  EXPECT_LT(Clock::now() - t0, 50ms);
  size_t got = nc3->WaitPrestaged(t, Deadline::After(3s));
  auto took = Clock::now() - t0;
  d().Thaw();
  EXPECT_EQ(got, 0u);
  EXPECT_GE(took, 140ms);
  EXPECT_LT(took, 1500ms);
  EXPECT_EQ(nc3->stats().prestage_stopped_at_deadline, 1u);
  // WaitPrestaged itself never waits past its own deadline.
  auto t4 = nc3->Prestage(chain, Deadline::After(10s));
  size_t early = nc3->WaitPrestaged(t4, Deadline::After(1ms));
  EXPECT_LE(early, 128u);
  EXPECT_EQ(nc3->WaitPrestaged(t4, Deadline::After(10s)), 49u + 1u);  // up to the gap again
}

}  // namespace
}  // namespace kvpool
