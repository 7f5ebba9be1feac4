// Sizes as people write them: "64K", "16MiB", "8GiB", "1.5G", "4096". Binary multiples.
#ifndef KVPOOL_COMMON_UNITS_H_
#define KVPOOL_COMMON_UNITS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "kvpool/status.h"

namespace kvpool {

Result<uint64_t> ParseSize(std::string_view text);
// "1.5 GiB", "64 KiB", "100 B".
std::string FormatSize(uint64_t bytes);

}  // namespace kvpool

#endif  // KVPOOL_COMMON_UNITS_H_
