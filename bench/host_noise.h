// How much a CPU of this host is taken away from a running thread: a tail-latency
// benchmark's floor on a shared VM, where the hypervisor runs other guests on our vCPUs.
#ifndef KVPOOL_BENCH_HOST_NOISE_H_
#define KVPOOL_BENCH_HOST_NOISE_H_

#include <cstdint>
#include <string>

namespace kvpool::bench {

struct HostNoise {
  double seconds = 0;
  uint64_t gaps_over_20us = 0;  // times the spinning thread saw the clock jump > 20 us
  uint64_t gaps_over_50us = 0;
  uint64_t gaps_over_100us = 0;
  double max_gap_us = 0;
  double lost_share = 0;  // share of the time in gaps > 20 us

  // "host noise: 412 gaps > 50 us per second (31 > 100 us), max 930 us, 2.9% of a CPU lost"
  std::string ToString() const;
};

// Spins on the clock for `ns` nanoseconds (one CPU busy meanwhile) and counts the gaps.
HostNoise MeasureHostNoise(uint64_t ns);

}  // namespace kvpool::bench

#endif  // KVPOOL_BENCH_HOST_NOISE_H_
