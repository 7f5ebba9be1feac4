// CRC32C (Castagnoli), the block checksum. ISA-L's folding implementation (~3x one
// SSE4.2 stream). Crc32c("123456789") == 0xE3069283.
#ifndef KVPOOL_COMMON_CRC32C_H_
#define KVPOOL_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace kvpool {

// Extends `crc` (the CRC of earlier bytes, 0 for none) over data[0, n).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
// The CRC of A followed by B from the CRCs of each (len_b: B's length), without reading
// either: for a value checksummed in parts on different threads. O(log len_b).
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace kvpool

#endif  // KVPOOL_COMMON_CRC32C_H_
