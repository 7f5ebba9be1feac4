// The pod pool: many kvpoold nodes used as one store.
//
// A PoolClient places each block by weighted rendezvous hashing over the live members
// (weight = advertised capacity; docs/DEPLOY.md has the rule) of the block's stored key
// (the key scoped by the namespace, as the nodes hold it), so the owner is computed
// locally with no lookup round trip, and a drain that sees only stored keys agrees. Batches are
// split per node and sent to all nodes before any answer is awaited; results come back in request
// order, each op with its own status. Members come from a static list or from etcd (watched in the
// background; the data path never waits on etcd and keeps the last known list while it is
// unreachable).
//
// Failures (KV cache is ephemeral: a lost node is lost blocks, never errors): every item of
// a node that does not answer within node_timeout_ms says kUnavailable (a get of it is a
// miss to the engine, but not "absent"), and the call still returns OK; MatchPrefix stops
// there (an error if that is the chain's first key). After failures_to_drop consecutive
// failures the node leaves placement (its keys go to the next-ranked node) and is probed
// again every retry_after_ms; it comes back when it answers. A node whose etcd lease
// expires leaves the member list itself.
//
// Like Client, a PoolClient is used by one thread at a time.
#ifndef KVPOOL_POOL_H_
#define KVPOOL_POOL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvpool/block_store.h"
#include "kvpool/client.h"
#include "kvpool/store.h"

namespace kvpool {

struct PoolOptions {
  // Static members: "host:port[,capacity=SIZE][,id=ID][,node=N][,rack=R][,zone=Z]", several
  // separated by ';'. Used when etcd is empty.
  std::string members;
  std::string etcd;  // "host:port[,host:port...]": members from etcd
  std::string etcd_prefix = "/kvpool/members/";
  // etcd with auth or TLS: a user and password, and/or HTTPS with a CA (and a client
  // certificate for etcd's --client-cert-auth). All empty: etcdctl's environment
  // variables (ETCDCTL_USER, ETCDCTL_PASSWORD, ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY).
  std::string etcd_user, etcd_password, etcd_tls_ca, etcd_tls_cert, etcd_tls_key;
  ClientOptions client;       // per-node connection settings (address is ignored)
  int node_timeout_ms = 300;  // a node that does not answer within this is a miss
  int failures_to_drop = 3;   // consecutive failures before a node leaves placement
  int retry_after_ms = 1000;  // a dropped node is probed again after this long
  int etcd_wait_ms = 2000;    // Create() waits this long for etcd's first answer
  // Handoff: after the members change (a join, a leave, a drain, a node dropped or back),
  // for this long a get or exists that misses at a block's owner asks the block's owner
  // under the previous placements (up to 3), and a get found there is stored at its owner
  // now. Erases and overwrites reach the previous owners too. 0: off.
  int handoff_ms = 600'000;
};

struct PoolMemberStatus {
  std::string id, address, node, rack, zone;
  uint64_t capacity = 0;      // advertised (placement weight)
  bool in_placement = false;  // false while dropped after repeated failures
  bool reachable = false;     // answered the last request or probe
  uint64_t consecutive_failures = 0, requests = 0, failures = 0;
  // From the node's STAT (when queried): bytes held and capacity over both tiers, gets
  // and hits since it started.
  bool stats_valid = false;
  uint64_t used_bytes = 0, capacity_bytes = 0, blocks = 0, gets = 0, hits = 0;
};

struct PoolStatus {
  bool membership_ok = true;  // etcd reachable (always true with a static list)
  std::string membership_error;
  uint64_t membership_version = 0;
  // Handoff (PoolOptions::handoff_ms): blocks asked of a previous owner, found there, and
  // stored again at their owner now.
  uint64_t handoff_reads = 0, handoff_hits = 0, handoff_kept = 0;
  std::vector<PoolMemberStatus> members;
};

class PoolClient final : public BlockStore {
 public:
  static Result<std::unique_ptr<PoolClient>> Create(const PoolOptions& options);
  ~PoolClient() override;
  PoolClient(const PoolClient&) = delete;
  PoolClient& operator=(const PoolClient&) = delete;

  Status Put(const BlockKey& key, std::span<const std::byte> value, const PutOptions& options = {});
  Result<size_t> Get(const BlockKey& key, std::span<std::byte> buffer);
  // As Client::Exists: an error when the key's node (and its fallbacks) did not answer.
  Result<bool> Exists(const BlockKey& key, Deadline deadline = {});
  Status Erase(const BlockKey& key);

  // Per-item statuses as described above; the returned Status is kUnavailable only when
  // the pool has no members at all. With a deadline, items of nodes that have not answered
  // when it passes get kTimeout (and the node is not counted as failing: the deadline was
  // the caller's).
  Status PutBatch(std::span<PutOp> ops, bool overwrite = false, Deadline deadline = {}) override;
  Status GetBatch(std::span<GetOp> ops, Deadline deadline = {}) override;
  Status ExistsBatch(std::span<KeyOp> ops, Deadline deadline = {}) override;
  Status EraseBatch(std::span<KeyOp> ops, Deadline deadline = {}) override;

  // Leading keys of `chain` the pool holds: each node is asked about its share of the
  // chain, all in parallel (one round trip); a node that does not answer ends the prefix
  // at its first key. A probe: no use is counted.
  Result<size_t> MatchPrefix(std::span<const BlockKey> chain, Deadline deadline = {}) override;

  // The member id that owns `key` now (empty if there are no live members).
  std::string OwnerOf(const BlockKey& key);
  // Members and their state; with query_nodes, also each node's STAT (one round trip each).
  PoolStatus GetStatus(bool query_nodes);

  class Impl;

 private:
  explicit PoolClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvpool

#endif  // KVPOOL_POOL_H_
