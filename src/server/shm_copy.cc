#include "server/shm_copy.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "common/clock.h"
#include "common/crc32c.h"
#include "server/io_workers.h"

namespace kvpool::server {
namespace {

// Copies in 64 KiB steps, checking each step's CRC over the destination while it is still
// in this core's cache: one pass over the source, and the client does not have to pull the
// bytes across cores a second time to verify them.
uint32_t CopyWithCrc(std::byte* dst, const std::byte* src, size_t n) {
  constexpr size_t kStep = 64 * 1024;
  uint32_t crc = 0;
  for (size_t off = 0; off < n; off += kStep) {
    size_t len = std::min(kStep, n - off);
    std::memcpy(dst + off, src + off, len);
    crc = Crc32cExtend(crc, dst + off, len);
  }
  return crc;
}

// The second half of a split copy. Whoever moves `state` off kOffered first copies it.
struct Half {
  enum : int { kOffered, kTakenByHelper, kTakenByCaller, kDone };
  std::byte* dst;
  const std::byte* src;
  size_t n;
  uint32_t crc = 0;
  std::atomic<int> state{kOffered};
};

}  // namespace

bool CopyVerified(std::byte* dst, std::span<const std::byte> src, uint32_t want,
                  IoWorkers* helpers) {
  if (!helpers || src.size() < kSplitCopyBytes)
    return CopyWithCrc(dst, src.data(), src.size()) == want;
  size_t mid = src.size() / 2 / 4096 * 4096;
  auto half = std::make_shared<Half>();
  half->dst = dst + mid;
  half->src = src.data() + mid;
  half->n = src.size() - mid;
  helpers->Submit([half] {
    int offered = Half::kOffered;
    if (!half->state.compare_exchange_strong(offered, Half::kTakenByHelper)) return;
    half->crc = CopyWithCrc(half->dst, half->src, half->n);
    half->state.store(Half::kDone, std::memory_order_release);
  });
  uint32_t crc_a = CopyWithCrc(dst, src.data(), mid);
  int offered = Half::kOffered;
  uint32_t crc_b;
  if (half->state.compare_exchange_strong(offered, Half::kTakenByCaller)) {
    crc_b = CopyWithCrc(half->dst, half->src, half->n);  // no helper got to it
  } else {
    // A helper is copying (it took the half while running, so it is on a CPU): spin for a
    // while, then yield in case it shares this CPU.
    uint64_t spin_until = NowNanos() + 200'000;
    while (half->state.load(std::memory_order_acquire) != Half::kDone) {
      if (NowNanos() < spin_until) {
        __builtin_ia32_pause();
      } else {
        sched_yield();
      }
    }
    crc_b = half->crc;
  }
  return Crc32cCombine(crc_a, crc_b, half->n) == want;
}

}  // namespace kvpool::server
