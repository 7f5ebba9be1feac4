// Tenants and namespaces: who may reach which namespace, and how a namespace's keys are
// kept apart inside the one store.
//
// A client's keys are scoped before they reach the store: stored = XXH3-128(ns_root ||
// key), ns_root = NamespaceRoot(namespace). So two namespaces never share a block even if
// their clients send the same 16 bytes, and a client cannot name another namespace's block.
#ifndef KVPOOL_SERVER_TENANTS_H_
#define KVPOOL_SERVER_TENANTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/key.h"
#include "kvpool/status.h"
#include "server/sealer.h"

namespace kvpool::server {

struct Tenant {
  std::string name;
  std::string token;
  // Namespaces this tenant may open: exact names, or a prefix ending in '*'.
  std::vector<std::string> namespaces;
  uint32_t max_connections = 0;  // open at once, on this node; 0: no cap of its own
  // Bytes of the store it may hold in each tier on this node (Store::SetQuota); 0: none.
  uint64_t dram_quota = 0, flash_quota = 0;
  // KV events of its blocks, and only those, are published here (a ZeroMQ PUB endpoint).
  std::string kv_events_endpoint;
  // The store's id for it (PutOptions::tenant): set by AssignTenantIds from the name, the
  // same on every start for the same set of names (flash blocks carry it across restarts).
  uint16_t id = 0;
  // Encryption at rest (server/sealer.h): where the tenant's keys come from, at most one.
  std::string key_file, key_command;
  std::shared_ptr<const TenantKeys> keys;  // loaded by LoadTenantKeys; null: not sealed
};

// Sets every tenant's id: from a hash of its name, the next free one on a clash, names
// taken in sorted order (so the config's order does not matter).
void AssignTenantIds(std::vector<Tenant>& tenants);

// Loads the keys of every tenant that names a key file or command (at start, and again on
// SIGHUP: rotation, retirement, shredding). An error leaves `tenants` as it was.
Status LoadTenantKeys(std::vector<Tenant>& tenants);

class Tenants {
 public:
  Tenants() = default;
  // Assigns each tenant its id.
  explicit Tenants(std::vector<Tenant> tenants);
  // With no tenants configured every namespace is open and tokens are ignored.
  bool open() const { return tenants_.empty(); }
  // OK, or kRefused with a message that names neither the token nor other tenants. On OK
  // `*tenant` (if given) is the tenant's name ("" on an open node) and `*max_connections`
  // its connection cap (0: none).
  // `*keys` (if given): the tenant's encryption keys (null: its blocks are not sealed).
  // `*id` (if given): its id in the store (0 on an open node).
  Status Authorize(std::string_view token, std::string_view ns, std::string* tenant = nullptr,
                   uint32_t* max_connections = nullptr,
                   std::shared_ptr<const TenantKeys>* keys = nullptr, uint16_t* id = nullptr) const;
  const std::vector<Tenant>& list() const { return tenants_; }
  // The tenant of that store id / name, or null.
  const Tenant* ById(uint16_t id) const;
  const Tenant* ByName(std::string_view name) const;

 private:
  std::vector<Tenant> tenants_;
};

class Scope {
 public:
  Scope() = default;
  explicit Scope(std::string_view ns) : root_(NamespaceRoot(ns)) {}
  // A peer's scope: its keys are already stored keys (a drain copying blocks between nodes).
  static Scope Raw() {
    Scope s;
    s.raw_ = true;
    return s;
  }
  BlockKey Key(const BlockKey& client_key) const;  // the empty key stays empty

 private:
  BlockKey root_;
  bool raw_ = false;
};

// Constant-time comparison of two tokens (timing does not tell how much matched).
bool SameToken(std::string_view a, std::string_view b);

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_TENANTS_H_
