// One anonymous mapping for the DRAM tier, allocated once at open: huge pages when the
// system has them (MAP_HUGETLB), else transparent huge pages (madvise), else normal pages.
#ifndef KVPOOL_MEM_ARENA_H_
#define KVPOOL_MEM_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kvpool/status.h"

namespace kvpool::mem {

class Arena {
 public:
  // lock: mlock the whole arena (pinned host memory); fails if RLIMIT_MEMLOCK forbids it.
  // hugetlb: try the reserved huge page pool first (off: transparent huge pages only, for
  // tables that must not take pool pages the DRAM tier was sized for).
  static Result<std::unique_ptr<Arena>> Create(uint64_t bytes, bool huge_pages, bool prefault,
                                               bool lock = false, bool hugetlb = true);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  std::byte* base() const { return base_; }
  uint64_t size() const { return size_; }
  // "hugetlb", "thp" or "4k": what the mapping got.
  const char* page_kind() const { return page_kind_; }

 private:
  Arena(std::byte* base, uint64_t size, const char* kind)
      : base_(base), size_(size), page_kind_(kind) {}
  std::byte* base_;
  uint64_t size_;
  const char* page_kind_;
};

}  // namespace kvpool::mem

#endif  // KVPOOL_MEM_ARENA_H_
