// Everything a node reports about itself at one instant: its store's and server's
// counters, its tenants', and the pod's members as it sees them. Rendered as Prometheus
// text (server/metrics.h) and as JSON for the live page (server/status_json.h).
#ifndef KVPOOL_SERVER_NODE_STATS_H_
#define KVPOOL_SERVER_NODE_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvpool/stats.h"
#include "server/server.h"
#include "server/tenant_stats.h"

namespace kvpool::server {

struct PoolMemberInfo {
  std::string id, address;
  uint64_t capacity_bytes = 0;
};

struct NodeStats {
  StoreStats store;
  ServerStats server;
  std::vector<TenantSnapshot> tenants;
  bool in_pool = false;  // registered in etcd: `members` is the pod as this node sees it
  std::string member_id;
  std::vector<PoolMemberInfo> members;
  double uptime_seconds = 0;
  uint64_t unix_ms = 0;  // when the snapshot was taken
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_NODE_STATS_H_
