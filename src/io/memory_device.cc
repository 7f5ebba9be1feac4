#include "io/memory_device.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>

namespace kvpool::io {

MemoryDevice::MemoryDevice(uint64_t size) : Device(size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();  // construction only, never the data path
  mem_ = static_cast<std::byte*>(p);
}

MemoryDevice::~MemoryDevice() { munmap(mem_, size()); }

namespace {
// Device bytes are shared with concurrent I/O, as a real device's are: a read may race a
// write to the same region (the engine detects that by CRC and region generation). Word-wise
// relaxed atomics make such a race defined behaviour (torn at 8-byte granularity, like DMA)
// instead of a C++ data race. REQUIRES: 8-byte aligned, length a multiple of 8.
void CopyWords(void* dst, const void* src, size_t len) {
  auto* d = static_cast<uint64_t*>(dst);
  auto* s = static_cast<uint64_t*>(const_cast<void*>(src));
  for (size_t i = 0; i < len / 8; ++i) {
    uint64_t v = std::atomic_ref<uint64_t>(s[i]).load(std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(d[i]).store(v, std::memory_order_relaxed);
  }
}
}  // namespace

void MemoryDevice::SubmitImpl(std::span<IoRequest* const> requests) {
  for (IoRequest* r : requests) {
    if (r->op == IoRequest::Op::kRead) {
      CopyWords(r->buf, mem_ + r->offset, r->len);
    } else {
      CopyWords(mem_ + r->offset, r->buf, r->len);
    }
    r->status = Status::Ok();
  }
}

}  // namespace kvpool::io
