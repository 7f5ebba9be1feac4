#include "io/device.h"

#include <array>
#include <cstdint>

namespace kvpool::io {

void Device::Submit(std::span<IoRequest> requests) {
  constexpr size_t kChunk = 256;
  std::array<IoRequest*, kChunk> valid;
  size_t i = 0;
  while (i < requests.size()) {
    size_t n = 0;
    for (; i < requests.size() && n < kChunk; ++i) {
      IoRequest& r = requests[i];
      auto addr = reinterpret_cast<uintptr_t>(r.buf);
      if (r.len == 0 || r.offset % kPageSize || r.len % kPageSize || addr % kPageSize ||
          r.offset > size_ || r.len > size_ - r.offset) {
        r.status = Status::InvalidArgument("unaligned or out-of-range device request");
        counters_.errors.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      valid[n++] = &r;
    }
    if (n == 0) continue;
    SubmitImpl(std::span<IoRequest* const>(valid.data(), n));
    for (size_t j = 0; j < n; ++j) {
      const IoRequest& r = *valid[j];
      bool read = r.op == IoRequest::Op::kRead;
      if (!r.status.ok()) {
        counters_.errors.fetch_add(1, std::memory_order_relaxed);
      } else if (read) {
        counters_.reads.fetch_add(1, std::memory_order_relaxed);
        counters_.bytes_read.fetch_add(r.len, std::memory_order_relaxed);
      } else {
        counters_.writes.fetch_add(1, std::memory_order_relaxed);
        counters_.bytes_written.fetch_add(r.len, std::memory_order_relaxed);
      }
    }
  }
}

Status Device::Read(uint64_t offset, void* buf, uint32_t len) {
  IoRequest r{IoRequest::Op::kRead, offset, buf, len, {}};
  Submit(std::span<IoRequest>(&r, 1));
  return r.status;
}

Status Device::Write(uint64_t offset, const void* buf, uint32_t len) {
  IoRequest r{IoRequest::Op::kWrite, offset, const_cast<void*>(buf), len, {}};
  Submit(std::span<IoRequest>(&r, 1));
  return r.status;
}

}  // namespace kvpool::io
