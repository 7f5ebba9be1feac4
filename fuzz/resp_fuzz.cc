// libFuzzer target for the RESP2 request parser: commands are parsed one after another
// from any bytes; each parse consumes something, stays in bounds, or stops with a reason.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/resp_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvpool::server;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  RespLimits limits;
  limits.max_bulk_bytes = 1 << 16;
  limits.max_args = 64;
  limits.max_inline_bytes = 1024;
  std::vector<std::string_view> args;
  std::string error;
  for (int i = 0; i < 1000 && !in.empty(); ++i) {
    size_t used = 0;
    RespParse p = ParseRespCommand(in, limits, &args, &used, &error);
    if (p == RespParse::kError) {
      if (error.empty()) __builtin_trap();
      break;
    }
    if (p == RespParse::kIncomplete) break;
    if (used == 0 || used > in.size()) __builtin_trap();
    for (std::string_view a : args) {
      if (a.data() < in.data() || a.data() + a.size() > in.data() + used) __builtin_trap();
    }
    in.remove_prefix(used);
  }
  return 0;
}
