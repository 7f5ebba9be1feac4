// io::Device: the seam between the engine and storage. The engine never sees io_uring;
// tests run it over a MemoryDevice or a fault-injecting wrapper (testing/faulty_device.h).
//
// Contract: offsets, lengths and buffers are multiples of kPageSize (O_DIRECT's rule, kept
// for every device so that tests catch what real devices would refuse). Submit runs a batch
// and returns when every request is done; each request carries its own status, and a short
// transfer is an error (kIoError), never a partial success.
//
// Thread safety: Submit may be called from many threads at once; requests touching the
// same bytes concurrently give unspecified data (the engine prevents that, or checks CRCs).
#ifndef KVPOOL_IO_DEVICE_H_
#define KVPOOL_IO_DEVICE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "kvpool/status.h"

namespace kvpool::io {

inline constexpr uint64_t kPageSize = 4096;

struct IoRequest {
  enum class Op : unsigned char { kRead, kWrite };
  Op op = Op::kRead;
  uint64_t offset = 0;
  void* buf = nullptr;
  uint32_t len = 0;
  Status status;  // out
};

struct DeviceCounters {
  std::atomic<uint64_t> reads{0}, writes{0}, bytes_read{0}, bytes_written{0}, errors{0};
};

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  uint64_t size() const { return size_; }
  const DeviceCounters& counters() const { return counters_; }

  // Checks alignment and bounds (kInvalidArgument per bad request), then runs the rest.
  void Submit(std::span<IoRequest> requests);
  Status Read(uint64_t offset, void* buf, uint32_t len);
  Status Write(uint64_t offset, const void* buf, uint32_t len);

 protected:
  explicit Device(uint64_t size) : size_(size) {}
  // REQUIRES: every request is aligned and in bounds. Sets each request's status.
  virtual void SubmitImpl(std::span<IoRequest* const> requests) = 0;

 private:
  uint64_t size_;
  DeviceCounters counters_;
};

}  // namespace kvpool::io

#endif  // KVPOOL_IO_DEVICE_H_
