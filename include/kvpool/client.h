// The kvpoold client: put/get/exists/erase (single and batch), prefix match, stats, over
// the native protocol (docs/PROTOCOL.md), synchronous or asynchronous (pipelined).
//
// A Client is one connection, used by one thread at a time (give each thread its own).
// It connects on first use and reconnects on the next call after a failure; while the
// server is unreachable every operation answers kUnavailable at once (after at most
// connect_timeout_ms), never hangs and never throws. Gets verify the block's CRC32C end to
// end: a mismatch is answered as a miss (kNotFound) and counted.
//
// Same-host fast path: with address "unix:/path" and shared_memory_bytes > 0 the client
// creates a memfd region shared with the server. Values whose buffers lie inside
// shared_memory() skip the socket (the server copies between its DRAM tier and the region);
// other buffers travel over the socket as usual.
#ifndef KVPOOL_CLIENT_H_
#define KVPOOL_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "kvpool/block_store.h"
#include "kvpool/store.h"

namespace kvpool {

struct ClientOptions {
  std::string address = "127.0.0.1:7400";  // "host:port" or "unix:/path/to/kvpoold.sock"
  std::string ns = "default";              // namespace (tenant/model/layout)
  std::string token;                       // access token, if the server has tenants
  int connect_timeout_ms = 1000;
  int request_timeout_ms = 5000;     // each send or receive of a request; then kTimeout
  uint64_t shared_memory_bytes = 0;  // same-host region (Unix socket only); 0: off
  int max_pipelined = 64;            // in-flight requests before Submit waits
  // Check every get's value against the CRC32C it was put with (a mismatch is a miss).
  // Values the server wrote into shared_memory() are checked by the server over the
  // bytes in the region, as it writes them (the client's own memory), not again here.
  bool verify_crc = true;
  // Poll this long before sleeping on a reply: saves a wake-up (~20 us here) per request
  // at the cost of a busy core. For latency-critical single-stream clients. Same-host
  // path: spins on a word in shared memory (no system calls); TCP: polls the socket.
  unsigned busy_poll_us = 0;
  // A peer connection (a drain, another node): keys are the node's stored keys, not
  // scoped by `ns`; ListBlocks and Leave work. `token` must be the cluster's peer token
  // when the node has tenants.
  bool peer = false;
  // TLS 1.3 to a node whose TCP port has it (kvpoold --tls-cert). tls_ca: PEM bundle the
  // node's certificate must chain to ("": the system's CAs); tls_cert/tls_key: this
  // client's certificate, for nodes that ask for one (mutual TLS; peers must present one);
  // tls_server_name: the name the node's certificate must carry ("": the address's host).
  // Setting tls_ca or tls_cert implies tls.
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
};

struct ClientStats {
  uint64_t requests = 0, connects = 0, connect_failures = 0, io_failures = 0;
  uint64_t crc_failures = 0;  // gets whose value did not match its CRC (answered as misses)
};

class Client final : public BlockStore {
 public:
  // Fails only for invalid options; the server is reached lazily.
  static Result<std::unique_ptr<Client>> Create(const ClientOptions& options);
  ~Client() override;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Status Put(const BlockKey& key, std::span<const std::byte> value, const PutOptions& options = {});
  Result<size_t> Get(const BlockKey& key, std::span<std::byte> buffer);
  // true or false as the server answered; kUnavailable (unreachable), kTimeout (no answer
  // by the deadline), kRefused: no answer about the key at all, never "absent".
  Result<bool> Exists(const BlockKey& key, Deadline deadline = {});
  Status Erase(const BlockKey& key);

  // Batches: one round trip per max_batch items (the server's limit, split here); each op
  // gets its own status. The returned Status is the transport's (OK if the server answered).
  // Per-item codes: kNotFound (miss), kExists (insert-only put of a held key), kTooLarge,
  // kRefused, kTimeout (the deadline passed first), kUnavailable (server unreachable).
  // Deadlines: when one passes mid-call the connection is reset, so late answers cannot
  // be mistaken for the next call's.
  Status PutBatch(std::span<PutOp> ops, bool overwrite = false, Deadline deadline = {}) override;
  Status GetBatch(std::span<GetOp> ops, Deadline deadline = {}) override;
  Status ExistsBatch(std::span<KeyOp> ops, Deadline deadline = {}) override;
  // Lookup and lock: ExistsBatch that also holds each block found for the get that follows
  // (one get releases it; unloaded, it is released after `lease`, at most the server's
  // max_lease_ms). A held block is served by that get even if the store evicted it
  // meanwhile. A server older than the lease answers as a plain ExistsBatch.
  Status HoldBatch(std::span<KeyOp> ops, std::chrono::milliseconds lease, Deadline deadline = {});
  Status EraseBatch(std::span<KeyOp> ops, Deadline deadline = {}) override;
  // Leading keys of `chain` the server holds, in one round trip (a probe).
  Result<size_t> MatchPrefix(std::span<const BlockKey> chain, Deadline deadline = {}) override;
  Result<std::string> ServerStats();
  // The server's figures as numbers (what a pool's status shows per node). On a node with
  // tenants a tenant's connection gets its own: what it holds against its quota (0: none)
  // and its gets and hits; tenant_scoped is then true.
  struct Figures {
    uint64_t dram_used = 0, dram_capacity = 0, dram_blocks = 0, dram_hits = 0;
    uint64_t flash_used = 0, flash_capacity = 0, flash_blocks = 0, flash_hits = 0;
    uint64_t puts = 0, gets = 0, misses = 0;
    bool tenant_scoped = false;
  };
  Result<Figures> ServerFigures();
  Status Ping();
  // Peer connections only: the node's blocks, hottest first (at most `max`), and its
  // leaving the pod's member list while it keeps serving (the first step of a drain).
  Result<std::vector<HeldBlock>> ListBlocks(size_t max);
  Status Leave();

  // Asynchronous form: Submit sends at once and returns a ticket; the ops (and the buffers
  // they point to) must stay alive and untouched until Wait(ticket) returns. Tickets
  // complete in order; Wait(t) also completes every earlier ticket.
  using Ticket = uint64_t;
  Result<Ticket> SubmitGet(std::span<GetOp> ops);
  Result<Ticket> SubmitPut(std::span<PutOp> ops, bool overwrite = false);
  Result<Ticket> SubmitExists(std::span<KeyOp> ops);
  Result<Ticket> SubmitErase(std::span<KeyOp> ops);
  Status Wait(Ticket ticket, Deadline deadline = {});

  // Layer streaming: sends one get per entry of `layers` at once (each a span of ops, e.g.
  // the LayerKey parts of layer i of a request's blocks), then calls on_layer(i) as soon as
  // layers[i] has arrived, in order, so the caller computes layer i while later layers are
  // still in flight. Puts go layer by layer with SubmitPut as prefill produces them.
  Status GetLayers(std::span<const std::span<GetOp>> layers,
                   const std::function<void(size_t)>& on_layer, Deadline deadline = {});

  // The shared region (empty unless the same-host path is on and connected).
  std::span<std::byte> shared_memory();
  bool connected() const;
  ClientStats stats() const;

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvpool

#endif  // KVPOOL_CLIENT_H_
