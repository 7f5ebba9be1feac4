#include "io/memory_device.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

namespace kvpool::io {

MemoryDevice::MemoryDevice(uint64_t size) : Device(size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();  // construction only, never the data path
  mem_ = static_cast<std::byte*>(p);
}

MemoryDevice::~MemoryDevice() { munmap(mem_, size()); }

void MemoryDevice::SubmitImpl(std::span<IoRequest* const> requests) {
  for (IoRequest* r : requests) {
    if (r->op == IoRequest::Op::kRead) {
      std::memcpy(r->buf, mem_ + r->offset, r->len);
    } else {
      std::memcpy(mem_ + r->offset, r->buf, r->len);
    }
    r->status = Status::Ok();
  }
}

}  // namespace kvpool::io
