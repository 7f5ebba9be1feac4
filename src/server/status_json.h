// A NodeStats snapshot as JSON, for the live page (GET /api/stats) and `kvpool top`.
//
// Counters are cumulative since start (a reader takes differences between two snapshots
// for rates); latency histograms carry their cumulative bucket counts (`le`, bounds in
// `bounds_us`) so percentiles over an interval can be computed the same way.
#ifndef KVPOOL_SERVER_STATUS_JSON_H_
#define KVPOOL_SERVER_STATUS_JSON_H_

#include <string>

#include "server/node_stats.h"

namespace kvpool::server {

std::string RenderStatusJson(const NodeStats& stats);

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_STATUS_JSON_H_
