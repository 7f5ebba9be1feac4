#include "common/histogram.h"

#include <bit>

namespace kvpool {

int Histogram::BucketOf(uint64_t v) {
  if (v < (1u << kSubBits)) return static_cast<int>(v);
  int msb = 63 - std::countl_zero(v);
  int shift = msb - kSubBits;
  int sub = static_cast<int>((v >> shift) & ((1u << kSubBits) - 1));
  return ((shift + 1) << kSubBits) + sub;
}

uint64_t Histogram::BucketMid(int b) {
  if (b < (1 << kSubBits)) return static_cast<uint64_t>(b);
  int shift = (b >> kSubBits) - 1;
  uint64_t sub = static_cast<uint64_t>(b & ((1 << kSubBits) - 1));
  uint64_t lo = ((1ull << kSubBits) | sub) << shift;
  return lo + ((1ull << shift) >> 1);
}

void Histogram::Record(uint64_t nanos) {
  buckets_[BucketOf(nanos)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(nanos, std::memory_order_relaxed);
  uint64_t m = max_.load(std::memory_order_relaxed);
  while (nanos > m && !max_.compare_exchange_weak(m, nanos, std::memory_order_relaxed)) {
  }
}

uint64_t Histogram::Quantile(double q) const {
  uint64_t total = 0;
  for (const auto& b : buckets_) total += b.load(std::memory_order_relaxed);
  if (total == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total - 1)) + 1;
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += buckets_[i].load(std::memory_order_relaxed);
    if (seen >= rank) {
      uint64_t mid = BucketMid(i);
      uint64_t mx = max_.load(std::memory_order_relaxed);
      return mid < mx ? mid : mx;
    }
  }
  return max_.load(std::memory_order_relaxed);
}

LatencySummary Histogram::Summary() const {
  LatencySummary s;
  s.count = count_.load(std::memory_order_relaxed);
  if (s.count == 0) return s;
  s.p50_us = static_cast<double>(Quantile(0.50)) / 1e3;
  s.p99_us = static_cast<double>(Quantile(0.99)) / 1e3;
  s.p999_us = static_cast<double>(Quantile(0.999)) / 1e3;
  s.max_us = static_cast<double>(max_.load(std::memory_order_relaxed)) / 1e3;
  s.mean_us = static_cast<double>(sum_.load(std::memory_order_relaxed)) / 1e3 /
              static_cast<double>(s.count);
  // Cumulative counts by each bucket's middle value: a bucket counts under the first bound
  // its middle does not exceed.
  size_t bound = 0;
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    uint64_t n = buckets_[i].load(std::memory_order_relaxed);
    if (n == 0) continue;
    double mid_us = static_cast<double>(BucketMid(i)) / 1e3;
    while (bound < kLatencyBounds && mid_us > kLatencyBoundsUs[bound]) s.le[bound++] = seen;
    seen += n;
  }
  for (; bound < kLatencyBounds; ++bound) s.le[bound] = seen;
  return s;
}

void Histogram::Reset() {
  for (auto& b : buckets_) b.store(0, std::memory_order_relaxed);
  count_ = 0;
  sum_ = 0;
  max_ = 0;
}

}  // namespace kvpool
