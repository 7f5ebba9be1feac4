// `kvpool replay`: drives an embedded store with a request trace as an inference fleet
// would (match the prefix, load the hit blocks, store the rest after prefill) and, over
// the same trace and the same offered blocks, a plain LRU and the offline farthest-next-use
// policy of equal capacity in blocks (baselines.h) for comparison.
#ifndef KVPOOL_WORKLOAD_REPLAY_H_
#define KVPOOL_WORKLOAD_REPLAY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvpool/options.h"
#include "kvpool/stats.h"
#include "workload/baselines.h"
#include "workload/trace.h"

namespace kvpool::workload {

struct ReplayOptions {
  uint64_t block_bytes = 32 * kKiB;  // bytes per 512-token block (scaled down from 64 MiB)
  double capacity_fraction = 0.05;   // total capacity as a share of the trace's distinct blocks
  double dram_share = 0.5;           // share of that capacity in DRAM; the rest is flash
  std::string flash_path;            // empty: DRAM only, with the whole capacity
  // The best tiered setting found on the Mooncake trace (docs/PERFORMANCE.md): its reuse
  // distances are long, so a small probation queue that drops one-hit blocks loses reuses.
  Admission admission = StoreOptions{}.admission;
  double flash_writes_per_day = StoreOptions{}.flash_writes_per_day;
  double probation_fraction = 0.02;
  double reuse_bonus = StoreOptions{}.reuse_bonus;
  unsigned tokens_per_block = 512;
};

struct ReplayResult {
  uint64_t requests = 0, blocks_requested = 0, distinct_blocks = 0, capacity_blocks = 0;
  uint64_t blocks_done = 0;  // references replayed so far
  uint64_t prefix_hits = 0, dram_hits = 0, flash_hits = 0;
  uint64_t tokens_total = 0, tokens_saved = 0;
  uint64_t bytes_put = 0, bytes_got = 0;
  uint64_t wrong_data = 0;       // gets that returned bytes other than what was put (must be 0)
  uint64_t lru_prefix_hits = 0;  // baselines.h: LRU and offline over the same offered blocks
  uint64_t lru_tokens_saved = 0;
  uint64_t offline_prefix_hits = 0;
  uint64_t offline_tokens_saved = 0;
  double seconds = 0;
  // Mean share of each tier's capacity held (DRAM: allocated pages; flash: live blocks),
  // sampled before every request of the trace's second half: what eviction batches, the
  // free space kept for puts and promotions, and the log's empty regions leave unused.
  double dram_fill = 0, flash_fill = 0;
  StoreStats stats;
  double prefix_hit_ratio() const {
    return blocks_requested ? double(prefix_hits) / double(blocks_requested) : 0;
  }
  double lru_prefix_hit_ratio() const {
    return blocks_requested ? double(lru_prefix_hits) / double(blocks_requested) : 0;
  }
};

// Called every ~1% of the trace with (requests done, total, result so far).
using ReplayProgress = std::function<void(size_t, size_t, const ReplayResult&)>;

Result<ReplayResult> RunReplay(const std::vector<TraceRequest>& trace, const ReplayOptions& options,
                               const ReplayProgress& progress = {});

std::string ReplayTable(const ReplayResult& r, const ReplayOptions& o);
std::string ReplayJson(const ReplayResult& r, const ReplayOptions& o);

}  // namespace kvpool::workload

#endif  // KVPOOL_WORKLOAD_REPLAY_H_
