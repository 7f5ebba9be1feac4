// A device in process memory: the engine's test bed, and a DRAM-only "flash" for benches.
#ifndef KVPOOL_IO_MEMORY_DEVICE_H_
#define KVPOOL_IO_MEMORY_DEVICE_H_

#include <memory>

#include "io/device.h"

namespace kvpool::io {

class MemoryDevice final : public Device {
 public:
  explicit MemoryDevice(uint64_t size);
  ~MemoryDevice() override;

 protected:
  void SubmitImpl(std::span<IoRequest* const> requests) override;

 private:
  std::byte* mem_;
};

}  // namespace kvpool::io

#endif  // KVPOOL_IO_MEMORY_DEVICE_H_
