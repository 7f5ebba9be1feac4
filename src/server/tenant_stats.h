// What each tenant does on a node: requests, gets and hits, puts, bytes, connections. For
// the metrics endpoint and the live page (kvpool_tenant_* series).
//
// A connection looks its tenant's counters up once, when it authenticates, and adds to them
// with relaxed atomics (one add per request, not per block). Counters are never removed:
// tenants come from the configuration, so there are few (capped at kMaxTenants; beyond it
// they share one "other" entry), and a tenant dropped by a reload keeps its history.
//
// Thread safety: all methods are thread-safe; counters' addresses are stable.
#ifndef KVPOOL_SERVER_TENANT_STATS_H_
#define KVPOOL_SERVER_TENANT_STATS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"

namespace kvpool::server {

struct alignas(64) TenantCounters {
  std::atomic<uint64_t> connections{0};  // open now
  std::atomic<uint64_t> requests{0}, gets{0}, hits{0}, puts{0};
  std::atomic<uint64_t> bytes_in{0}, bytes_out{0};
};

struct TenantSnapshot {
  std::string name;
  uint64_t connections = 0, requests = 0, gets = 0, hits = 0, puts = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  // What it holds in the store, and its quotas (0: none): Server::TenantSnapshots.
  uint64_t dram_bytes = 0, flash_bytes = 0, dram_quota = 0, flash_quota = 0;
};

class TenantStats {
 public:
  static constexpr size_t kMaxTenants = 256;
  // The name a connection counts under when the node has no tenants configured.
  static constexpr std::string_view kOpen = "default";

  TenantCounters* For(std::string_view name);
  std::vector<TenantSnapshot> Snapshot() const;  // sorted by name

 private:
  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<TenantCounters>, std::less<>> by_name_ GUARDED_BY(mu_);
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_TENANT_STATS_H_
