#include "common/crc32c.h"

#include <isa-l/crc.h>

namespace kvpool {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  // ISA-L's crc32_iscsi works on the un-inverted register; the standard CRC32C inverts
  // on entry and exit.
  return ~crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(data)), static_cast<int>(n),
                      ~crc);
}

}  // namespace kvpool
