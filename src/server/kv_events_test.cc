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
      ASSERT_EQ(batch.via.array.size, 2u);
      EXPECT_EQ(batch.via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
      const msgpack_object& events = batch.via.array.ptr[1];
      for (uint32_t i = 0; i < events.via.array.size; ++i) {
        const msgpack_object& ev = events.via.array.ptr[i];
        ASSERT_EQ(ev.via.array.size, 7u);  // BlockStored
        const msgpack_object& hashes = ev.via.array.ptr[1];
        for (uint32_t h = 0; h < hashes.via.array.size; ++h) {
          EXPECT_TRUE(seen.insert(hashes.via.array.ptr[h].via.u64).second) << "duplicate";
        }
      }
      msgpack_unpacked_destroy(&u);
    }
  };
  for (int i = 0; i < 100 && seen.empty(); ++i) {
    (*pub)->OnStored(BlockKey{0, 1'000'000u + i}, {}, 1);
    drain(20);
  }
  ASSERT_FALSE(seen.empty());
  seen.clear();

  constexpr int kThreads = 4, kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i)
        (*pub)->OnStored(BlockKey{1, uint64_t(t) * kPerThread + i + 1}, {}, 1);
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

TEST(KvEvents, BadEndpointIsAClearError) {
  KvEventsOptions o;
  o.endpoint = "bogus://nowhere";
  auto pub = KvEventPublisher::Start(o);
  ASSERT_FALSE(pub.ok());
  EXPECT_NE(pub.status().message().find("bogus://nowhere"), std::string::npos);
  o.endpoint = "";
  EXPECT_FALSE(KvEventPublisher::Start(o).ok());
}

}  // namespace
}  // namespace kvpool::server
