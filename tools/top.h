// `kvpool top`: a terminal view of one node or the whole pod, refreshed every interval:
// per node and pod-wide gets/s, hit ratio by tier, puts/s, interval latency percentiles,
// bytes/s, connections, occupancy; per tenant across the pod. Reads each node's
// /api/stats (kvpoold --metrics-listen); with --etcd, the nodes come from the member list.
#ifndef KVPOOL_TOOLS_TOP_H_
#define KVPOOL_TOOLS_TOP_H_

namespace kvpool::tools {

extern const char kTopUsage[];
// argv: the arguments after "top".
int TopCommand(int argc, char** argv);

}  // namespace kvpool::tools

#endif  // KVPOOL_TOOLS_TOP_H_
