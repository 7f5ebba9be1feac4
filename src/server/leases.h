// Blocks held between a lookup and the load that follows it ("lookup and lock", as
// LMCache's L2 adapters expect): an EXISTS with a lease reads each block it finds and keeps
// the pinned view here; the next GET of that key is answered from it even if the store has
// evicted the block meanwhile, and releases it. A lease nobody loads expires after its
// time. The table is bounded in bytes: past the bound the leases due soonest go first (their
// blocks are then ordinary cache entries again, found or not).
//
// Keys are the scoped keys (tenant and namespace inside), so one tenant cannot take
// another's lease. A key held twice keeps one view and counts its holders: each GET
// releases one. A view taken stays pinned while the answer that carries it is sent.
//
// Thread safety: every method locks one mutex; `empty()` is a relaxed atomic read so a GET
// with no lease anywhere pays nothing.
#ifndef KVPOOL_SERVER_LEASES_H_
#define KVPOOL_SERVER_LEASES_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"
#include "kvpool/store.h"

namespace kvpool::server {

struct LeaseStats {
  uint64_t held = 0, held_bytes = 0;  // now
  uint64_t granted = 0;               // leases taken (a key held twice counts twice)
  uint64_t loads = 0;                 // GETs that took a lease
  uint64_t saved = 0;                 // of those: the store no longer had the block
  uint64_t expired = 0;               // ran out of time (or of room) before a load
};

class Leases {
 public:
  explicit Leases(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // Holds `view` for `key` for `ttl_ns` from `now_ns` (steady clock). A key already held
  // keeps its view, takes the later expiry and one more holder.
  void Hold(const BlockKey& key, BlockView view, uint64_t now_ns, uint64_t ttl_ns);
  // Releases one holder of `key` and returns the held view (the caller answers from it when
  // the store misses: `store_missed`, counted); null if the key is not held. An expired
  // lease is never returned.
  std::shared_ptr<const BlockView> Take(const BlockKey& key, uint64_t now_ns,
                                        bool store_missed = false);
  // The block was erased or replaced: its lease goes, so the old bytes never come back.
  void Forget(const BlockKey& key) {
    if (!empty()) ForgetSlow(&key);
  }
  void Clear() {
    if (!empty()) ForgetSlow(nullptr);
  }
  // Drops expired leases (Hold and Take do it too). Called before every request, so an
  // expired lease pins nothing while other clients' puts need room: without a lease due it
  // is one relaxed atomic read.
  void Sweep(uint64_t now_ns) {
    if (now_ns >= next_due_.load(std::memory_order_relaxed)) SweepSlow(now_ns);
  }
  void Tick() {
    if (!empty()) Sweep(NowNanos());
  }

  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }
  LeaseStats stats() const;

 private:
  struct Lease {
    std::shared_ptr<const BlockView> view;
    uint64_t expiry_ns = 0;
    uint32_t holders = 0;
    uint64_t seq = 0;  // with expiry_ns, its place in due_
  };
  using Map = std::unordered_map<BlockKey, Lease, BlockKeyHash>;
  void SweepSlow(uint64_t now_ns);
  void ForgetSlow(const BlockKey* key);  // null: every lease
  void SweepLocked(uint64_t now_ns) REQUIRES(mu_);
  void DropLocked(Map::iterator it, bool expired) REQUIRES(mu_);

  const uint64_t max_bytes_;
  mutable Mutex mu_;
  Map held_ GUARDED_BY(mu_);
  // Every lease by (expiry, seq): what Sweep and the byte bound drop first.
  std::map<std::pair<uint64_t, uint64_t>, BlockKey> due_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  LeaseStats counts_ GUARDED_BY(mu_);
  std::atomic<size_t> count_{0};
  std::atomic<uint64_t> next_due_{UINT64_MAX};  // the earliest expiry held (a lower bound)
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_LEASES_H_
