// KV events: kvpoold announces the blocks its pool tier stores and removes, in vLLM's KV
// event format, so KV-aware routers (Dynamo, llm-d) can count pool hits.
//
// Wire format (vllm/distributed/kv_events.py): a ZeroMQ PUB socket sends multipart
// messages (topic, be64 sequence number, msgpack payload). The payload is a positional
// batch [ts, [event, ...], data_parallel_rank] in two forms:
//   map (default; what vLLM publishes since PR #42892, which Dynamo, llm-d >= 0.9 and
//     SGLang's consumers decode by field name): events are maps tagged
//     {"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids",
//      "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx",
//      "kv_cache_spec_kind"} and {"type": "BlockRemoved", "block_hashes", "medium",
//      "group_idx"};
//   array (vLLM before PR #42892, array-like classes; older routers): events tagged arrays
//     ["BlockStored", [hash, ...], parent | nil, token_ids, block_size, lora_id nil,
//      medium, lora_name nil] and ["BlockRemoved", [hash, ...], medium].
// token_ids are the writers' (PutOptions::token_ids), concatenated over the event's blocks;
// empty when a writer gave none (routers that hash tokens then cannot index the block).
// The medium defaults to "EXTERNAL", which Dynamo files under its external tier. A ROUTER
// socket serves replays: a request carrying a be64 start sequence is answered with every
// buffered (sequence, payload) from there on, then (be64 -1, empty). docs/PROTOCOL.md.
//
// Tenants: every block is some tenant's (PutOptions::tenant, 0: none). `endpoint` carries
// the blocks of no tenant (an open node's: all of them), or every tenant's with
// `all_tenants` (an operator's router); each tenant given an endpoint of its own gets its
// blocks' events there and nowhere else, so no tenant sees another's hashes or traffic.
// Each endpoint numbers its batches from 0; replay serves `endpoint`'s.
//
// Hashes name blocks by their pool key (the key kvpoold stores under: the client's key
// scoped by its namespace, docs/PROTOCOL.md), as vLLM's int form (the 16-byte key read
// big-endian, low 64 bits = key.lo) or as the 16 bytes.
//
// Thread safety: OnStored/OnRemoved from any thread (they queue and return); one thread
// owns the ZeroMQ sockets.
#ifndef KVPOOL_SERVER_KV_EVENTS_H_
#define KVPOOL_SERVER_KV_EVENTS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "kvpool/status.h"
#include "kvpool/store.h"

namespace kvpool::server {

struct KvEventsOptions {
  std::string endpoint;             // PUB, e.g. "tcp://*:5557"; empty: off
  std::string replay_endpoint;      // ROUTER; empty: no replay
  std::string topic;                // first frame of every message (llm-d: "kv@<pod>@<model>")
  bool int_hashes = true;           // false: 16-byte hashes
  bool map_form = true;             // false: the array form (vLLM before PR #42892)
  std::string medium = "EXTERNAL";  // BlockStored/BlockRemoved medium
  int data_parallel_rank = 0;
  unsigned block_size = 16;       // BlockStored.block_size (tokens)
  unsigned buffer_steps = 10000;  // batches kept for replay
  unsigned max_events_per_batch = 1000;
  uint64_t max_queued_events = 1 << 20;  // beyond: dropped and counted
  bool all_tenants = false;              // `endpoint` carries every tenant's blocks
  // (tenant id, PUB endpoint): that tenant's blocks only.
  std::vector<std::pair<uint16_t, std::string>> tenant_endpoints;
};

struct KvEventsStats {
  uint64_t batches = 0, stored = 0, removed = 0, dropped = 0, replays = 0;
};

class KvEventPublisher : public StoreListener {
 public:
  // Binds the sockets; fails clearly if an endpoint is malformed or in use.
  static Result<std::unique_ptr<KvEventPublisher>> Start(const KvEventsOptions& options);
  ~KvEventPublisher() override;  // publishes what is queued, then closes the sockets

  void OnStored(const BlockKey& key, const BlockKey& parent, uint64_t size,
                std::span<const uint32_t> token_ids, uint16_t tenant) override;
  void OnRemoved(const BlockKey& key, uint16_t tenant) override;
  KvEventsStats stats() const;

 private:
  struct Event {
    BlockKey key, parent;
    bool stored;
    std::vector<uint32_t> token_ids;
    uint16_t tenant = 0;
  };
  // A PUB socket and the events it carries: tenant -1 is `endpoint` (no tenant's, or all).
  struct Stream {
    void* sock = nullptr;
    int tenant = -1;
    int64_t next_seq = 0;  // owned by the publishing thread
  };
  bool Carries(const Stream& s, const Event& e) const {
    return s.tenant < 0 ? options_.all_tenants || e.tenant == 0 : e.tenant == s.tenant;
  }
  explicit KvEventPublisher(const KvEventsOptions& options);
  void Run();
  void Queue(const Event& e);
  std::string Encode(const std::vector<Event>& events) const;
  void ServeReplay();

  const KvEventsOptions options_;
  void* ctx_ = nullptr;
  std::vector<Stream> streams_;  // streams_[0] is `endpoint`'s when it is set
  void* replay_ = nullptr;
  int wake_fd_ = -1;  // eventfd: the queue became non-empty, or stop
  std::thread thread_;
  std::atomic<bool> stop_{false};

  mutable Mutex mu_;
  std::vector<Event> queue_ GUARDED_BY(mu_);
  KvEventsStats stats_ GUARDED_BY(mu_);

  // Owned by the publishing thread: `endpoint`'s batches, for replay.
  std::deque<std::pair<int64_t, std::string>> history_;
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_KV_EVENTS_H_
