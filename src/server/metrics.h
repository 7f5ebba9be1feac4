// Prometheus metrics of a kvpoold node: the text exposition format (version 0.0.4) of a
// NodeStats snapshot, served at /metrics by the node's HTTP endpoint.
//
// Names follow Prometheus's conventions: `kvpool_` prefix, base units (`_bytes`,
// `_seconds`), `_total` on counters, the tier, tenant or member as a label. Latencies are
// histograms with fixed bounds (1 us to 1 s), so a pod's nodes can be summed.
//
// Thread safety: pure.
#ifndef KVPOOL_SERVER_METRICS_H_
#define KVPOOL_SERVER_METRICS_H_

#include <string>

#include "server/node_stats.h"

namespace kvpool::server {

std::string RenderMetrics(const NodeStats& stats);

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_METRICS_H_
