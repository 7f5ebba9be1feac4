#include "engine/write_budget.h"

#include <algorithm>

#include "common/clock.h"

namespace kvpool::engine {

WriteBudget::WriteBudget(double bytes_per_second, uint64_t bucket_bytes, uint64_t (*clock_ns)())
    : rate_(bytes_per_second),
      bucket_(static_cast<double>(bucket_bytes)),
      clock_ns_(clock_ns ? clock_ns : &NowNanos),
      tokens_(static_cast<double>(bucket_bytes)),
      last_ns_(clock_ns_()) {}

void WriteBudget::RefillLocked() const {
  uint64_t now = clock_ns_();
  if (now > last_ns_) {
    tokens_ = std::min(bucket_, tokens_ + rate_ * static_cast<double>(now - last_ns_) / 1e9);
  }
  last_ns_ = std::max(last_ns_, now);
}

bool WriteBudget::Admit(uint64_t bytes, bool used) {
  MutexLock lock(mu_);
  RefillLocked();
  double need = static_cast<double>(bytes);
  double floor = used ? 0 : bucket_ / 2;
  if (tokens_ - need < floor) return false;
  tokens_ -= need;
  return true;
}

double WriteBudget::level() const {
  MutexLock lock(mu_);
  RefillLocked();
  return bucket_ > 0 ? tokens_ / bucket_ : 0;
}

}  // namespace kvpool::engine
