#include "mem/arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kvpool::mem {

Result<std::unique_ptr<Arena>> Arena::Create(uint64_t bytes, bool huge_pages, bool prefault,
                                             bool lock, bool hugetlb) {
  constexpr uint64_t kHuge = 2ull << 20;
  if (bytes == 0) return Status::InvalidArgument("arena size is zero");
  uint64_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* p = MAP_FAILED;
  const char* kind = "4k";
  if (huge_pages && hugetlb) {
    // Without MAP_NORESERVE, so that mmap fails now (rather than SIGBUS later) when the
    // huge page pool cannot back the whole arena.
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, (flags & ~MAP_NORESERVE) | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) kind = "hugetlb";
  }
  if (p == MAP_FAILED) {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) {
      return Status::NoSpace("mmap of " + std::to_string(size) + " bytes: " + std::strerror(errno));
    }
    if (huge_pages && madvise(p, size, MADV_HUGEPAGE) == 0) kind = "thp";
  }
  if (prefault) {
    // After madvise, so transparent huge pages back the touched range (MAP_POPULATE at
    // mmap time would fault in 4 KiB pages, 512 times the faults). One write per 4 KiB.
    auto* b = static_cast<volatile std::byte*>(p);
    for (uint64_t off = 0; off < size; off += 4096) b[off] = std::byte{0};
  }
  if (lock && mlock(p, size) != 0) {  // pinned: never swapped out, safe for DMA registration
    int e = errno;
    munmap(p, size);
    return Status::NoSpace("mlock of " + std::to_string(size) + " bytes: " + std::strerror(e) +
                           " (raise RLIMIT_MEMLOCK, e.g. ulimit -l, or turn pinning off)");
  }
  return std::unique_ptr<Arena>(new Arena(static_cast<std::byte*>(p), size, kind));
}

Arena::~Arena() { munmap(base_, size_); }

}  // namespace kvpool::mem
