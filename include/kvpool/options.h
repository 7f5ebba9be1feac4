// Configuration of an embedded store. Every field has a default that fits a small machine.
#ifndef KVPOOL_OPTIONS_H_
#define KVPOOL_OPTIONS_H_

#include <cstdint>
#include <string>

#include "kvpool/status.h"

namespace kvpool {

class StoreListener;  // store.h

inline constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

enum class Admission : unsigned char {
  // Every block leaving DRAM is written to flash while the flash write budget
  // (flash_writes_per_day) allows; as the budget runs low, blocks never read while in
  // DRAM (left the probation FIFO unused) are refused first, then all. A refused block is
  // dropped (a later miss). A put is found again while there is room and budget for it.
  kBudget,
  // New blocks enter a small probation FIFO in DRAM; a block evicted from it unused is
  // dropped (never written to flash) and remembered in a ghost list, so a block seen again
  // soon enters the main queue directly. S3-FIFO's rule; it keeps one-hit blocks, 58-76% of
  // blocks in real traces, from flushing reused ones and spares flash the writes.
  kProbation,
  // Every block evicted from DRAM goes to flash; plain two-tier FIFO-with-reinsertion.
  kAll,
};

struct StoreOptions {
  // DRAM tier (G2): one arena, allocated at open. Values live here first; a put is
  // acknowledged when its data is in the arena.
  uint64_t dram_bytes = 256 * kMiB;
  // Try MAP_HUGETLB first, then transparent huge pages; normal pages if neither is there.
  bool huge_pages = true;
  // Touch every arena page and the index tables at open, so the first puts do not pay
  // page faults.
  bool prefault = false;
  // mlock the arena: pinned host memory (never swapped; what GPU DMA registration such as
  // cudaHostRegister wants). Open fails with a clear message if RLIMIT_MEMLOCK is too low.
  bool lock_memory = false;

  // Flash tier (G3). Empty path: DRAM only. A regular file is created if missing and
  // preallocated to flash_bytes; a block device is used whole (flash_bytes 0) or in part.
  // Opened with O_DIRECT; never fsynced (the cache is ephemeral).
  std::string flash_path;
  uint64_t flash_bytes = 1 * kGiB;
  // Log-structured region size: the unit of flash eviction. A multiple of 4 KiB.
  uint64_t region_bytes = 16 * kMiB;
  // io_uring submission queue depth per ring.
  unsigned io_queue_depth = 64;

  // Largest value accepted, in bytes. Must fit the DRAM tier (at most half of it).
  uint64_t max_value_bytes = 128 * kMiB;

  // Index: initial capacity in entries (it grows by doubling) and the number of shards
  // (locks). A power of two, at most 65536.
  uint64_t index_capacity = 1 << 20;
  unsigned index_shards = 64;

  Admission admission = Admission::kBudget;
  // kBudget's rate, in drive writes per day (flash_bytes per 24 h), the way endurance is
  // rated; the budget's burst is one whole device. 0: unlimited.
  double flash_writes_per_day = 3;
  // Time source for the write budget, in nanoseconds (null: the steady clock). A replay
  // passes its trace's time.
  uint64_t (*clock_ns)() = nullptr;
  // Share of DRAM for the probation queue (S3-FIFO uses 10%).
  double probation_fraction = 0.1;
  // Eviction from DRAM's main queue: each past use of a block (up to 3) keeps it as long
  // as this many store-fulls (DRAM + flash) of newer blocks would. 0: plain LRU. Uses
  // survive a trip through flash, so a block promoted back keeps its standing.
  // kReuseBonusAuto (the default): learnt while the store runs, by simulating candidate
  // bonuses on a sample of keys and following the best (engine/policy_tuner.h).
  static constexpr double kReuseBonusAuto = -1;
  double reuse_bonus = kReuseBonusAuto;
  // The background mover demotes blocks to flash to keep this share of DRAM free, so puts
  // rarely wait for eviction and flash hits find room to come back. Without a flash tier
  // nothing is kept free (an eviction is then only a drop).
  double dram_free_target = 0.05;
  // Reopen the flash file or device with its blocks (warm restart): the index is rebuilt
  // from the regions' summaries at open. False: start empty (the device is formatted anew).
  bool flash_restore = true;
  // At a clean close, write the blocks held only in DRAM to flash (past the write budget
  // and admission), so that a restart finds them too.
  bool flush_on_close = true;
  // Off: no background thread; eviction happens inline in put (deterministic, for tests).
  bool background_mover = true;

  // Told of every block stored and removed (KV event publishers); not owned, must outlive
  // the store. Null: no events.
  StoreListener* listener = nullptr;

  Status Validate() const;
};

}  // namespace kvpool

#endif  // KVPOOL_OPTIONS_H_
