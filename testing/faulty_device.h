// A fault-injecting io::Device decorator for tests: EIO, short reads, flipped bits and a
// full device, by probability or for the next N requests. Deterministic for a given seed.
//
// Thread safety: Submit is thread-safe (the fault state is under a mutex).
#ifndef KVPOOL_TESTING_FAULTY_DEVICE_H_
#define KVPOOL_TESTING_FAULTY_DEVICE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>

#include "io/device.h"

namespace kvpool::testing {

struct FaultPlan {
  double read_eio = 0;         // probability a read fails with EIO
  double read_short = 0;       // probability a read loses its last page (reported as success)
  double read_flip = 0;        // probability a read succeeds with one bit flipped
  double write_eio = 0;        // probability a write fails
  bool device_full = false;    // every write fails with ENOSPC
  unsigned read_delay_ms = 0;  // every batch with a read in it takes this much longer
};

class FaultyDevice final : public io::Device {
 public:
  FaultyDevice(std::unique_ptr<io::Device> inner, uint64_t seed);
  void SetPlan(const FaultPlan& plan);

  struct Injected {
    uint64_t eio = 0, short_reads = 0, flips = 0, write_errors = 0;
  };
  Injected injected() const;

 protected:
  void SubmitImpl(std::span<io::IoRequest* const> requests) override;

 private:
  std::unique_ptr<io::Device> inner_;
  mutable std::mutex mu_;
  FaultPlan plan_;       // GUARDED_BY(mu_)
  std::mt19937_64 rng_;  // GUARDED_BY(mu_)
  Injected injected_;    // GUARDED_BY(mu_)
};

}  // namespace kvpool::testing

#endif  // KVPOOL_TESTING_FAULTY_DEVICE_H_
