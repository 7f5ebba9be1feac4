// A client-side near cache: an embedded Store (in pinned host memory) in front of any
// BlockStore (a Client of one kvpoold, a PoolClient of the pod pool, ...), itself a
// BlockStore. Prestage(keys, deadline) pulls blocks from the pool in the background before
// the engine asks for them; a later Get of a prestaged block is a local copy.
//
// Prestaging follows chains: blocks are fetched in order, and a miss ends the prestage (a
// block is useless without its prefix). At the deadline it stops and keeps what arrived (a
// shorter prefix). Prestage never blocks its caller; WaitPrestaged blocks at most until
// the deadline it is given.
//
// The BlockStore calls: gets and reads are served locally where the block is held, from the
// backend otherwise; puts go to the backend and (keep_fetched) are kept locally too; exists
// asks the backend for what is not local; erase removes both copies; MatchPrefix is the
// longer of the local and the backend's prefix.
//
// Thread safety: every method may be called from any thread; one background thread does the
// backend I/O of prestages, and the calls' backend I/O share that connection under a lock.
#ifndef KVPOOL_NEAR_CACHE_H_
#define KVPOOL_NEAR_CACHE_H_

#include <cstdint>
#include <memory>
#include <span>

#include "kvpool/block_store.h"
#include "kvpool/client.h"
#include "kvpool/pool.h"
#include "kvpool/store.h"

namespace kvpool {

struct NearCacheOptions {
  // The local store: DRAM only, pinned (mlock) by default, its pages touched at creation
  // (a prestage should not pay first-touch faults: on a VM a 2 MiB page took 3 ms).
  StoreOptions store = [] {
    StoreOptions o;
    o.dram_bytes = 256 * kMiB;
    o.lock_memory = true;
    o.prefault = true;
    return o;
  }();
  unsigned batch = 16;                  // blocks per pool request while prestaging
  uint64_t max_block_bytes = 4 * kMiB;  // transfer buffer per block (larger ones are fetched alone)
  bool keep_fetched = true;             // Get's pool hits are kept locally too
};

struct NearCacheStats {
  uint64_t local_hits = 0, pool_hits = 0, misses = 0;  // Get's items
  uint64_t prestaged = 0;                              // blocks brought in by prestages
  uint64_t prestage_stopped_at_deadline = 0, prestage_stopped_at_miss = 0;
};

class NearCache final : public BlockStore {
 public:
  // Takes the backend (a Client to one kvpoold, a PoolClient to the pod pool, any
  // BlockStore), which the near cache's calls and its prestage thread then share.
  static Result<std::unique_ptr<NearCache>> Create(const NearCacheOptions& options,
                                                   std::unique_ptr<BlockStore> backend);
  ~NearCache() override;  // stops prestaging (in-flight requests finish), then closes

  using Ticket = uint64_t;
  // Starts pulling `chain` (in order) into the near cache; returns at once.
  Ticket Prestage(std::span<const BlockKey> chain, Deadline deadline);
  // Waits until that prestage ended or `deadline` passed; returns how many leading blocks of
  // its chain are local now. A finished prestage is reported once; one nobody waited for
  // is forgotten after 4096 newer ones have finished (then 0).
  size_t WaitPrestaged(Ticket ticket, Deadline deadline);

  // Local blocks are copied from the near cache; the rest come from the backend (by the
  // deadline; kTimeout otherwise). Per-item statuses as Client::GetBatch.
  Status GetBatch(std::span<GetOp> ops, Deadline deadline = {}) override;
  Status PutBatch(std::span<PutOp> ops, bool overwrite = false, Deadline deadline = {}) override;
  Status ExistsBatch(std::span<KeyOp> ops, Deadline deadline = {}) override;
  Status EraseBatch(std::span<KeyOp> ops, Deadline deadline = {}) override;
  Result<size_t> MatchPrefix(std::span<const BlockKey> chain, Deadline deadline = {}) override;
  Status ReadBatch(std::span<const BlockKey> keys, std::span<Result<BlockView>> out,
                   Deadline deadline = {}) override;
  // Leading blocks of `chain` held locally (a probe).
  size_t LocalPrefix(std::span<const BlockKey> chain);

  Store& local();
  NearCacheStats stats() const;

  class Impl;

 private:
  explicit NearCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvpool

#endif  // KVPOOL_NEAR_CACHE_H_
