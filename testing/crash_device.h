// A device that dies: writes pass through to a shared inner device until the Nth, which
// lands torn (only its first page) or not at all, and every write after it fails, as if
// the process had been killed at that moment. Open a second store over the same inner
// device to see what a restart finds. Reads keep working (the dead process no longer
// matters; the next one reads the inner device).
//
// Thread safety: Submit is thread-safe; writes are counted in submission order.
#ifndef KVPOOL_TESTING_CRASH_DEVICE_H_
#define KVPOOL_TESTING_CRASH_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "io/device.h"

namespace kvpool::testing {

// Forwards everything to a shared device (so that two stores can use it in turn).
class SharedDevice final : public io::Device {
 public:
  explicit SharedDevice(std::shared_ptr<io::Device> inner)
      : io::Device(inner->size()), inner_(std::move(inner)) {}

 protected:
  void SubmitImpl(std::span<io::IoRequest* const> requests) override;

 private:
  std::shared_ptr<io::Device> inner_;
};

class CrashDevice final : public io::Device {
 public:
  // crash_at: index of the write that crashes (0 = the first); negative: never.
  CrashDevice(std::shared_ptr<io::Device> inner, int64_t crash_at, bool torn);
  bool crashed() const { return crashed_.load(std::memory_order_acquire); }
  uint64_t writes() const;  // writes submitted so far (the crashing one included)

 protected:
  void SubmitImpl(std::span<io::IoRequest* const> requests) override;

 private:
  std::shared_ptr<io::Device> inner_;
  const int64_t crash_at_;
  const bool torn_;
  mutable std::mutex mu_;
  uint64_t writes_ = 0;  // GUARDED_BY(mu_)
  std::atomic<bool> crashed_{false};
};

}  // namespace kvpool::testing

#endif  // KVPOOL_TESTING_CRASH_DEVICE_H_
