// Monotonic time in nanoseconds, for latency histograms and deadlines.
#ifndef KVPOOL_COMMON_CLOCK_H_
#define KVPOOL_COMMON_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace kvpool {

inline uint64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace kvpool

#endif  // KVPOOL_COMMON_CLOCK_H_
