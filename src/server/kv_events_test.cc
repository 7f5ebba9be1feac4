// The KV event publisher in-process: several threads report blocks at once (as reactors and
// the mover do), a ZeroMQ SUB socket counts what arrives, msgpack's own unpacker decodes it.
#include "server/kv_events.h"

#include <gtest/gtest.h>
#include <msgpack.h>
#include <unistd.h>
#include <zmq.h>

#include <chrono>
#include <set>
#include <thread>

namespace kvpool::server {
namespace {

TEST(KvEvents, ConcurrentReportsArriveOnceEachInOrderOfSequence) {
  std::string ep = "ipc:///tmp/kvpool-kvev-" + std::to_string(getpid());
  KvEventsOptions o;
  o.endpoint = ep;
  o.map_form = false;  // the array form: events are tagged arrays
  o.max_events_per_batch = 50;
  auto pub = KvEventPublisher::Start(o);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  void* ctx = zmq_ctx_new();
  void* sub = zmq_socket(ctx, ZMQ_SUB);
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
  int timeout = 100;
  zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  ASSERT_EQ(zmq_connect(sub, ep.c_str()), 0);

  // Warm up: the SUB socket misses what is published before it joins.
  std::set<uint64_t> seen;
  int64_t last_seq = -1;
  // Receives until `ms` passed or `want` hashes were seen.
  auto drain = [&](int ms, size_t want = ~size_t{0}) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end && seen.size() < want) {
      char topic[64], seq[8];
      static char payload[1 << 20];
      if (zmq_recv(sub, topic, sizeof topic, 0) < 0) continue;
      ASSERT_EQ(zmq_recv(sub, seq, sizeof seq, 0), 8);
      int n = zmq_recv(sub, payload, sizeof payload, 0);
      ASSERT_GT(n, 0);
      int64_t s = 0;
      for (char c : seq) s = (s << 8) | static_cast<unsigned char>(c);
      if (last_seq >= 0) EXPECT_EQ(s, last_seq + 1);
      last_seq = s;
      msgpack_unpacked u;
      msgpack_unpacked_init(&u);
      ASSERT_EQ(msgpack_unpack_next(&u, payload, n, nullptr), MSGPACK_UNPACK_SUCCESS);
      const msgpack_object& batch = u.data;
      ASSERT_EQ(batch.type, MSGPACK_OBJECT_ARRAY);
      ASSERT_EQ(batch.via.array.size, 3u);  // [ts, events, data_parallel_rank]
      EXPECT_EQ(batch.via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
      const msgpack_object& events = batch.via.array.ptr[1];
      for (uint32_t i = 0; i < events.via.array.size; ++i) {
        const msgpack_object& ev = events.via.array.ptr[i];
        ASSERT_EQ(ev.via.array.size, 8u);  // BlockStored, lora_name last
        const msgpack_object& hashes = ev.via.array.ptr[1];
        for (uint32_t h = 0; h < hashes.via.array.size; ++h) {
          EXPECT_TRUE(seen.insert(hashes.via.array.ptr[h].via.u64).second) << "duplicate";
        }
      }
      msgpack_unpacked_destroy(&u);
    }
  };
  for (int i = 0; i < 100 && seen.empty(); ++i) {
    (*pub)->OnStored(BlockKey{0, 1'000'000u + i}, {}, 1, {}, 0);
    drain(20);
  }
  ASSERT_FALSE(seen.empty());
  seen.clear();

  constexpr int kThreads = 4, kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i)
        (*pub)->OnStored(BlockKey{1, uint64_t(t) * kPerThread + i + 1}, {}, 1, {}, 0);
    });
  }
  for (auto& th : threads) th.join();
  drain(20000, kThreads * kPerThread);  // sanitizer builds are ~10x slower
  size_t ours = 0;
  for (uint64_t h : seen) ours += h >= 1 && h <= kThreads * kPerThread;
  EXPECT_EQ(ours, size_t(kThreads * kPerThread));
  EXPECT_EQ((*pub)->stats().dropped, 0u);
  zmq_close(sub);
  zmq_ctx_term(ctx);
  pub->reset();  // joins the publisher thread
  ::unlink(("/tmp/kvpool-kvev-" + std::to_string(getpid())).c_str());
}

// One published batch, decoded: the first message after a warm-up on `ep`.
msgpack_object_kv* FindKey(const msgpack_object& map, std::string_view name) {
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const msgpack_object& k = map.via.map.ptr[i].key;
    if (k.type == MSGPACK_OBJECT_STR && std::string_view(k.via.str.ptr, k.via.str.size) == name)
      return &map.via.map.ptr[i];
  }
  return nullptr;
}

// The map form (the default; vLLM's msgspec classes since PR #42892): a positional batch
// [ts, events, data_parallel_rank] whose events are maps with named fields and a "type"
// tag, token ids of a chain concatenated in one BlockStored, the configured medium and rank.
TEST(KvEvents, MapFormNamesEveryFieldAndCarriesTokenIds) {
  std::string ep = "ipc:///tmp/kvpool-kvev-map-" + std::to_string(getpid());
  KvEventsOptions o;
  o.endpoint = ep;
  EXPECT_TRUE(o.map_form) << "the map form is the default";
  o.medium = "CPU_TIER2";
  o.data_parallel_rank = 3;
  auto pub = KvEventPublisher::Start(o);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  void* ctx = zmq_ctx_new();
  void* sub = zmq_socket(ctx, ZMQ_SUB);
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
  int timeout = 50;
  zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  ASSERT_EQ(zmq_connect(sub, ep.c_str()), 0);
  std::vector<uint32_t> t1 = {1, 2, 3, 4}, t2 = {5, 6, 7, 8};
  static char payload[1 << 16];
  int n = -1;
  for (int attempt = 0; attempt < 100 && n < 0; ++attempt) {  // until the SUB has joined
    (*pub)->OnStored(BlockKey{0, 9}, {}, 1, {}, 0);
    char topic[128], seq[8];
    if (zmq_recv(sub, topic, sizeof topic, 0) < 0) continue;
    ASSERT_EQ(zmq_recv(sub, seq, sizeof seq, 0), 8);
    n = zmq_recv(sub, payload, sizeof payload, 0);
  }
  ASSERT_GT(n, 0);
  (*pub)->OnStored(BlockKey{0, 10}, {}, 1, t1, 0);
  (*pub)->OnStored(BlockKey{0, 11}, BlockKey{0, 10}, 1, t2, 0);  // continues the chain
  // Block 11's event: with block 10 (one batch: hashes [10, 11], tokens 1..8) or alone
  // (hashes [11], parent 10, tokens 5..8) when the publisher sent 10 first.
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  bool found = false;
  for (int attempt = 0; attempt < 40 && !found; ++attempt) {
    char topic[128], seq[8];
    if (zmq_recv(sub, topic, sizeof topic, 0) < 0) continue;
    ASSERT_EQ(zmq_recv(sub, seq, sizeof seq, 0), 8);
    n = zmq_recv(sub, payload, sizeof payload, 0);
    ASSERT_GT(n, 0);
    ASSERT_EQ(msgpack_unpack_next(&u, payload, n, nullptr), MSGPACK_UNPACK_SUCCESS);
    const msgpack_object& batch = u.data;
    ASSERT_EQ(batch.type, MSGPACK_OBJECT_ARRAY);
    ASSERT_EQ(batch.via.array.size, 3u);
    EXPECT_EQ(batch.via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
    EXPECT_EQ(batch.via.array.ptr[2].via.u64, 3u);
    const msgpack_object& events = batch.via.array.ptr[1];
    for (uint32_t e = 0; e < events.via.array.size; ++e) {
      const msgpack_object& ev = events.via.array.ptr[e];
      ASSERT_EQ(ev.type, MSGPACK_OBJECT_MAP);
      for (const char* f :
           {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
            "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"})
        ASSERT_NE(FindKey(ev, f), nullptr) << f;
      EXPECT_EQ(FindKey(ev, "extra_keys")->val.via.array.size,
                FindKey(ev, "block_hashes")->val.via.array.size);
      EXPECT_EQ(FindKey(ev, "group_idx")->val.via.u64, 0u);
      const msgpack_object& type = FindKey(ev, "type")->val;
      EXPECT_EQ(std::string_view(type.via.str.ptr, type.via.str.size), "BlockStored");
      const msgpack_object& medium = FindKey(ev, "medium")->val;
      EXPECT_EQ(std::string_view(medium.via.str.ptr, medium.via.str.size), "CPU_TIER2");
      const msgpack_object& hashes = FindKey(ev, "block_hashes")->val;
      const msgpack_object& last = hashes.via.array.ptr[hashes.via.array.size - 1];
      if (last.via.u64 != 11) continue;
      found = true;
      const msgpack_object& toks = FindKey(ev, "token_ids")->val;
      ASSERT_EQ(toks.via.array.size, 4 * hashes.via.array.size);
      const uint32_t first = hashes.via.array.size == 2 ? 1 : 5;
      for (uint32_t i = 0; i < toks.via.array.size; ++i)
        EXPECT_EQ(toks.via.array.ptr[i].via.u64, first + i);
      EXPECT_EQ(FindKey(ev, "block_size")->val.via.u64, 4u) << "tokens per block, from the puts";
      if (hashes.via.array.size == 1) EXPECT_EQ(FindKey(ev, "parent_block_hash")->val.via.u64, 10u);
    }
  }
  EXPECT_TRUE(found);
  msgpack_unpacked_destroy(&u);
  zmq_close(sub);
  zmq_ctx_term(ctx);
  pub->reset();
  ::unlink(("/tmp/kvpool-kvev-map-" + std::to_string(getpid())).c_str());
}

// Issue 20: each tenant's blocks are announced on its own endpoint and nowhere else; the
// node's endpoint carries blocks of no tenant (or all, for an operator's router); each
// endpoint numbers its batches on its own.
TEST(KvEvents, EachTenantHearsOnlyItsOwnBlocks) {
  std::string base = "ipc:///tmp/kvpool-kvev-t" + std::to_string(getpid()) + "-";
  KvEventsOptions o;
  o.endpoint = base + "node";
  o.map_form = false;
  o.tenant_endpoints = {{5, base + "5"}, {7, base + "7"}};
  auto pub = KvEventPublisher::Start(o);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  void* ctx = zmq_ctx_new();
  struct Sub {
    void* sock = nullptr;
    std::multiset<uint64_t> stored, removed;  // hashes (key.lo)
    int64_t first_seq = -1, last_seq = -1;
    bool gap = false;
  };
  std::vector<Sub> subs;
  for (const std::string& ep : {o.endpoint, base + "5", base + "7"}) {
    void* sock = zmq_socket(ctx, ZMQ_SUB);
    zmq_setsockopt(sock, ZMQ_SUBSCRIBE, "", 0);
    int timeout = 20;
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ASSERT_EQ(zmq_connect(sock, ep.c_str()), 0);
    subs.emplace_back();
    subs.back().sock = sock;
  }
  auto drain = [&](int ms) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      for (Sub& sub : subs) {
        char topic[64], seq[8];
        static char payload[1 << 16];
        if (zmq_recv(sub.sock, topic, sizeof topic, 0) < 0) continue;
        ASSERT_EQ(zmq_recv(sub.sock, seq, sizeof seq, 0), 8);
        int n = zmq_recv(sub.sock, payload, sizeof payload, 0);
        ASSERT_GT(n, 0);
        int64_t sq = 0;
        for (char c : seq) sq = (sq << 8) | static_cast<unsigned char>(c);
        if (sub.last_seq >= 0 && sq != sub.last_seq + 1) sub.gap = true;
        if (sub.first_seq < 0) sub.first_seq = sq;
        sub.last_seq = sq;
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        ASSERT_EQ(msgpack_unpack_next(&u, payload, n, nullptr), MSGPACK_UNPACK_SUCCESS);
        const msgpack_object& events = u.data.via.array.ptr[1];
        for (uint32_t i = 0; i < events.via.array.size; ++i) {
          const msgpack_object& ev = events.via.array.ptr[i];
          std::string tag(ev.via.array.ptr[0].via.str.ptr, ev.via.array.ptr[0].via.str.size);
          const msgpack_object& hashes = ev.via.array.ptr[1];
          for (uint32_t h = 0; h < hashes.via.array.size; ++h) {
            (tag == "BlockStored" ? sub.stored : sub.removed)
                .insert(hashes.via.array.ptr[h].via.u64);
          }
        }
        msgpack_unpacked_destroy(&u);
      }
    }
  };
  // Warm up until every subscriber has joined (a SUB misses what came before it).
  uint64_t warm = 0;
  for (int round = 0; round < 200; ++round) {
    for (uint16_t t : {0, 5, 7}) (*pub)->OnStored(BlockKey{0, 900000 + warm++}, {}, 1, {}, t);
    drain(20);
    bool all = true;
    for (const Sub& sub : subs) all = all && !sub.stored.empty();
    if (all) break;
  }
  for (Sub& sub : subs) {
    ASSERT_FALSE(sub.stored.empty()) << "a subscriber never joined";
    sub.stored.clear();
  }
  // Tenant t's blocks are t * 1000 + i; removals and tenant 9 (no endpoint) among them.
  for (uint16_t t : {0, 5, 7, 9}) {
    for (uint64_t i = 0; i < 10; ++i) (*pub)->OnStored(BlockKey{0, t * 1000u + i}, {}, 1, {}, t);
    (*pub)->OnRemoved(BlockKey{0, t * 1000u + 3}, t);
  }
  for (int i = 0; i < 20; ++i) drain(20);
  const uint64_t own[] = {0, 5, 7};
  for (size_t s = 0; s < subs.size(); ++s) {
    std::multiset<uint64_t> want_stored, want_removed{own[s] * 1000 + 3};
    for (uint64_t i = 0; i < 10; ++i) want_stored.insert(own[s] * 1000 + i);
    EXPECT_EQ(subs[s].stored, want_stored) << "endpoint " << s;
    EXPECT_EQ(subs[s].removed, want_removed) << "endpoint " << s;
    EXPECT_FALSE(subs[s].gap) << "endpoint " << s << ": its sequence numbers are its own";
  }
  for (Sub& sub : subs) zmq_close(sub.sock);
  zmq_ctx_term(ctx);
  pub->reset();
  for (const char* n : {"node", "5", "7"}) {
    ::unlink(("/tmp/kvpool-kvev-t" + std::to_string(getpid()) + "-" + n).c_str());
  }
}

TEST(KvEvents, BadEndpointIsAClearError) {
  KvEventsOptions o;
  o.endpoint = "bogus://nowhere";
  auto pub = KvEventPublisher::Start(o);
  ASSERT_FALSE(pub.ok());
  EXPECT_NE(pub.status().message().find("bogus://nowhere"), std::string::npos);
  o.endpoint = "";
  EXPECT_FALSE(KvEventPublisher::Start(o).ok());
  o.tenant_endpoints = {{3, "bogus://tenant"}};
  pub = KvEventPublisher::Start(o);
  ASSERT_FALSE(pub.ok());
  EXPECT_NE(pub.status().message().find("bogus://tenant"), std::string::npos);
}

}  // namespace
}  // namespace kvpool::server
