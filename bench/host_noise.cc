#include "host_noise.h"

#include <algorithm>
#include <cstdio>

#include "common/clock.h"

namespace kvpool::bench {

HostNoise MeasureHostNoise(uint64_t ns) {
  HostNoise h;
  uint64_t start = NowNanos(), prev = start, end = start + ns, lost = 0, max = 0;
  while (prev < end) {
    uint64_t t = NowNanos(), gap = t - prev;
    prev = t;
    if (gap <= 20'000) continue;
    ++h.gaps_over_20us;
    lost += gap;
    h.gaps_over_50us += gap > 50'000;
    h.gaps_over_100us += gap > 100'000;
    max = std::max(max, gap);
  }
  h.seconds = static_cast<double>(prev - start) / 1e9;
  h.max_gap_us = static_cast<double>(max) / 1e3;
  h.lost_share = static_cast<double>(lost) / static_cast<double>(prev - start);
  return h;
}

std::string HostNoise::ToString() const {
  char buf[200];
  double s = seconds > 0 ? seconds : 1;
  std::snprintf(buf, sizeof buf,
                "host noise: %.0f gaps > 50 us per second (%.0f > 100 us), max %.0f us, %.1f%% "
                "of a CPU lost",
                gaps_over_50us / s, gaps_over_100us / s, max_gap_us, lost_share * 100);
  return buf;
}

}  // namespace kvpool::bench
