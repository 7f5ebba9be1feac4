// Baselines the replay sets beside the store, over exactly the blocks the store is offered
// (a request's full blocks: a trailing partial block is never stored, as in vLLM and SGLang):
// plain LRU, and the offline farthest-next-use policy (Belady's, with bypass), which no
// online policy can beat by much on these traces. Both count leading (prefix) hits.
#ifndef KVPOOL_WORKLOAD_BASELINES_H_
#define KVPOOL_WORKLOAD_BASELINES_H_

#include <cstdint>
#include <vector>

#include "workload/trace.h"

namespace kvpool::workload {

// Blocks of `r` a store is offered after prefill: all but a trailing partial block.
size_t FullBlocks(const TraceRequest& r, unsigned tokens_per_block);

// Tokens a prefix of `hits` blocks saves `r` (capped at its input).
uint64_t TokensSaved(uint64_t hits, const TraceRequest& r, unsigned tokens_per_block);

// Plain LRU over block ids with `capacity` blocks: leading hits per request, summed.
uint64_t LruPrefixHits(const std::vector<TraceRequest>& trace, uint64_t capacity,
                       uint64_t* tokens_saved, unsigned tokens_per_block);

// The offline policy with `capacity` blocks: on a miss it evicts the held block used again
// farthest in the future (or does not admit the new block if that one is), knowing the
// whole trace.
uint64_t OfflinePrefixHits(const std::vector<TraceRequest>& trace, uint64_t capacity,
                           uint64_t* tokens_saved, unsigned tokens_per_block);

}  // namespace kvpool::workload

#endif  // KVPOOL_WORKLOAD_BASELINES_H_
