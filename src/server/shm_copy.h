// Copying a block into a same-host client's shared memory, checked against its CRC on the
// way (so the client need not read it again), on one thread or, for a large block when
// the server is lightly loaded, on two.
#ifndef KVPOOL_SERVER_SHM_COPY_H_
#define KVPOOL_SERVER_SHM_COPY_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvpool::server {

class IoWorkers;

// Copies src to dst; true if the copied bytes' CRC32C is `want`. With `helpers`, a block
// of at least kSplitCopyBytes is cut in two and the second half offered to an I/O thread:
// if one takes it before the caller has copied the first half, the halves are copied side
// by side; if none does (all busy), the caller copies it too. Never waits behind other
// work queued on the helpers.
inline constexpr size_t kSplitCopyBytes = 512 * 1024;
bool CopyVerified(std::byte* dst, std::span<const std::byte> src, uint32_t want,
                  IoWorkers* helpers = nullptr);

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_SHM_COPY_H_
