// libFuzzer target for kvpoold's TOML config parser: any text is applied or rejected
// with a message naming the line; never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvpool::server::DaemonConfig c;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  kvpool::Status s = kvpool::server::ApplyToml(text, &c);
  if (!s.ok() && s.message().empty()) __builtin_trap();
  return 0;
}
