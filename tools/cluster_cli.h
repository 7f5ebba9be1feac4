// `kvpool cluster ...`: the pod pool's status (members, labels, capacity, use, hit rates,
// reachability) and the placement benchmark (shares and key movement).
#ifndef KVPOOL_TOOLS_CLUSTER_CLI_H_
#define KVPOOL_TOOLS_CLUSTER_CLI_H_

namespace kvpool::tools {

extern const char kClusterUsage[];
// argv: the arguments after "cluster".
int ClusterCommand(int argc, char** argv);
// argv: the arguments after "cluster drain" (cluster_drain.cc).
int DrainCommand(int argc, char** argv);

}  // namespace kvpool::tools

#endif  // KVPOOL_TOOLS_CLUSTER_CLI_H_
