// A file or raw block device driven by io_uring with O_DIRECT: the flash tier's backend.
//
// A regular file is created if missing and preallocated (fallocate) to the asked size, so
// the log never extends the file (no metadata updates, no fsync needed or done). Each
// calling thread borrows a ring from a small pool, so concurrent batches do not share a
// submission queue lock.
#ifndef KVPOOL_IO_URING_DEVICE_H_
#define KVPOOL_IO_URING_DEVICE_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "io/device.h"

namespace kvpool::io {

struct UringDeviceOptions {
  std::string path;
  // Bytes to use. For a file: its preallocated size. For a block device: 0 = whole device.
  uint64_t size = 0;
  unsigned queue_depth = 64;
};

class UringDevice final : public Device {
 public:
  static Result<std::unique_ptr<UringDevice>> Open(const UringDeviceOptions& options);
  ~UringDevice() override;

 protected:
  void SubmitImpl(std::span<IoRequest* const> requests) override;

 private:
  struct Ring;
  UringDevice(int fd, uint64_t size, unsigned depth);
  std::unique_ptr<Ring> AcquireRing();
  void ReleaseRing(std::unique_ptr<Ring> ring);

  int fd_;
  unsigned depth_;
  Mutex pool_mu_;
  std::vector<std::unique_ptr<Ring>> pool_ GUARDED_BY(pool_mu_);
};

}  // namespace kvpool::io

#endif  // KVPOOL_IO_URING_DEVICE_H_
