// kvpool prestage-bench: the stall an engine sees when a request's cached blocks are needed,
// fetched on demand, prestaged into the near cache, or streamed layer by layer.
#ifndef KVPOOL_BENCH_PRESTAGE_BENCH_H_
#define KVPOOL_BENCH_PRESTAGE_BENCH_H_

namespace kvpool::bench {

extern const char kPrestageUsage[];
int PrestageBench(int argc, char** argv);  // argv: the arguments after the command name

}  // namespace kvpool::bench

#endif  // KVPOOL_BENCH_PRESTAGE_BENCH_H_
