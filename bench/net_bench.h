// kvpool bench: kvpoold (native TCP and same-host shared memory) beside redis-server,
// memcached, a file-per-block directory with fsync, a TCP echo and memcpy, in one run.
#ifndef KVPOOL_BENCH_NET_BENCH_H_
#define KVPOOL_BENCH_NET_BENCH_H_

namespace kvpool::bench {

// argv: the arguments after "bench".
int NetBench(int argc, char** argv);

}  // namespace kvpool::bench

#endif  // KVPOOL_BENCH_NET_BENCH_H_
