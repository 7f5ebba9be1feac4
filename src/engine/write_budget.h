// WriteBudget: how many bytes the flash tier may be written, as a token bucket.
//
// Flash wears out by the bytes written; a cache that writes every block DRAM pushes out
// can burn a drive's rated endurance in weeks. The budget is a rate in drive writes per
// day (DWPD, how endurance is rated), refilled continuously, with a bucket the size of
// the device: an empty device can be filled once at full speed, and after that writes
// average out to the rate. CacheLib's dynamic random admission keeps a write rate the
// same way but admits at random; here the bucket's level decides, so the blocks least
// likely to be read again are the first refused:
//   - above half full: every block leaving DRAM is admitted;
//   - below half: only blocks that were used while in DRAM (a one-hit block, never read,
//     is dropped);
//   - empty: none (the block is dropped: a miss later, never an error).
//
// Thread safety: Admit is thread-safe (one mutex; called once per evicted block).
#ifndef KVPOOL_ENGINE_WRITE_BUDGET_H_
#define KVPOOL_ENGINE_WRITE_BUDGET_H_

#include <cstdint>
#include <mutex>

#include "common/mutex.h"

namespace kvpool::engine {

class WriteBudget {
 public:
  // `bytes_per_second`: the sustained rate; `bucket_bytes`: the burst (the device size).
  // `clock_ns`: the time source (null: the steady clock).
  WriteBudget(double bytes_per_second, uint64_t bucket_bytes, uint64_t (*clock_ns)() = nullptr);

  // Whether `bytes` may be written now for a block that was (`used`) or was not read while
  // in DRAM; if so they are taken from the bucket.
  bool Admit(uint64_t bytes, bool used);
  // The bucket's level, as a share of its size.
  double level() const;

 private:
  void RefillLocked() const REQUIRES(mu_);
  const double rate_;  // bytes per second
  const double bucket_;
  uint64_t (*const clock_ns_)();
  mutable Mutex mu_;
  mutable double tokens_ GUARDED_BY(mu_);
  mutable uint64_t last_ns_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvpool::engine

#endif  // KVPOOL_ENGINE_WRITE_BUDGET_H_
