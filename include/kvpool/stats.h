// Counters and latency summaries reported by Store::GetStats.
#ifndef KVPOOL_STATS_H_
#define KVPOOL_STATS_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

namespace kvpool {

// Upper bounds (microseconds) of the cumulative counts in LatencySummary::le: the buckets
// of a Prometheus histogram, 1 us to 1 s.
inline constexpr double kLatencyBoundsUs[] = {1,   2,    5,    10,   20,    50,    100,    200,
                                              500, 1000, 2000, 5000, 10000, 50000, 100000, 1000000};
inline constexpr size_t kLatencyBounds = std::size(kLatencyBoundsUs);

struct LatencySummary {
  uint64_t count = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0, mean_us = 0;
  // le[i]: how many took at most kLatencyBoundsUs[i] (within the histogram's 6.25%).
  uint64_t le[kLatencyBounds] = {};
};

struct TierStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;     // bytes held (DRAM: allocated pages; flash: live log span)
  uint64_t blocks = 0;         // blocks with a copy in this tier
  uint64_t hits = 0;           // gets served from this tier
  uint64_t evictions = 0;      // DRAM: blocks dropped or demoted; flash: regions evicted
  uint64_t bytes_written = 0;  // DRAM: bytes of blocks put; flash: bytes written to the device
  uint64_t bytes_read = 0;     // DRAM: bytes of the hits served; flash: bytes read from the device
};

struct StoreStats {
  TierStats dram, flash;
  uint64_t puts = 0, put_exists = 0, put_rejected = 0;
  uint64_t gets = 0, misses = 0;
  uint64_t erases = 0;
  uint64_t demotions = 0;            // blocks written DRAM -> flash
  uint64_t promotions = 0;           // flash hits copied back into DRAM
  uint64_t flash_hits_in_place = 0;  // flash hits left there by the policy (not promoted)
  uint64_t admission_drops = 0;  // blocks leaving DRAM refused by flash admission, never written
  uint64_t budget_drops = 0;     // of which refused by the flash write budget
  uint64_t prefetch_requests = 0, prefetched = 0;
  uint64_t crc_failures = 0;           // flash reads whose CRC did not match (answered as misses)
  uint64_t io_errors = 0;              // failed or short flash reads/writes (answered as misses)
  uint64_t stale_races = 0;            // flash reads that lost a race with region eviction
  uint64_t flash_compacted = 0;        // live blocks moved off a region so it could be reused
  uint64_t flash_reinserted = 0;       // used blocks moved off a region about to be taken
  uint64_t flash_live_evicted = 0;     // live blocks evicted with their region (log full)
  uint64_t flash_restored = 0;         // blocks found on the flash at open (warm restart)
  uint64_t flash_regions_dropped = 0;  // regions whose summary was torn at open (blocks lost)
  uint64_t flash_summary_bytes = 0;    // flash metadata written (summaries, superblock)
  uint64_t quota_evictions = 0;        // blocks a tenant's quota pushed out (DRAM or flash)
  // The DRAM eviction policy's reuse bonus now, in DRAM-fulls per past use, and how many
  // epochs the tuner has judged (0: fixed by the options).
  double reuse_bonus_dram_fulls = 0;
  bool reuse_bonus_learnt = false;
  uint64_t policy_epochs = 0;
  // Whether blocks leaving DRAM's probation queue unused are written to flash (once it is
  // full; learnt beside the reuse bonus under the budget admission).
  bool unused_to_flash = true;
  double probation_share = 0;  // of DRAM, for new blocks (learnt with flash)
  // Whether every flash hit of a get or read is promoted into DRAM, or only one whose copy is in
  // the older half of the log (learnt with flash under the budget admission).
  bool promote_all_flash_hits = true;
  uint64_t index_entries = 0;
  uint64_t index_bytes = 0;  // DRAM held by the index tables
  LatencySummary put_latency, get_dram_latency, get_flash_latency;

  // Multi-line human-readable form.
  std::string ToString() const;
};

}  // namespace kvpool

#endif  // KVPOOL_STATS_H_
