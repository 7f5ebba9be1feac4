// A latency histogram: log-linear buckets (16 per power of two, <= 6.25% error), lock-free
// recording with relaxed atomics, percentiles on demand.
//
// Thread safety: Record from any thread; Summary may run concurrently (it sees a slightly
// stale but consistent-enough snapshot).
#ifndef KVPOOL_COMMON_HISTOGRAM_H_
#define KVPOOL_COMMON_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "kvpool/stats.h"

namespace kvpool {

class Histogram {
 public:
  void Record(uint64_t nanos);
  LatencySummary Summary() const;
  // Value (ns) at quantile q in [0, 1]; 0 when empty.
  uint64_t Quantile(double q) const;
  uint64_t Count() const { return count_.load(std::memory_order_relaxed); }
  void Reset();

 private:
  static constexpr int kSubBits = 4;
  static constexpr int kBuckets = 64 << kSubBits;
  static int BucketOf(uint64_t v);
  static uint64_t BucketMid(int b);

  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0}, sum_{0}, max_{0};
};

}  // namespace kvpool

#endif  // KVPOOL_COMMON_HISTOGRAM_H_
