// libFuzzer target for encryption at rest's inputs: a tenant's key list (any text is a key
// list or an error naming the line, never a crash), and stored bytes handed to Open (any
// bytes are a miss unless they are a block sealed under that key: never a crash, never
// bytes out of bounds).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "server/sealer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto keys = kvpool::server::TenantKeys::Parse("fuzz", text);
  if (!keys.ok() && keys.status().message().empty()) __builtin_trap();
  static const auto fixed = std::move(kvpool::server::TenantKeys::Parse(
                                          "fuzz",
                                          "7 000102030405060708090a0b0c0d0e0f101112131415161718191a"
                                          "1b1c1d1e1f"))
                                .value();
  std::span<const std::byte> stored(reinterpret_cast<const std::byte*>(data), size);
  if (kvpool::server::IsSealed(stored)) {
    std::vector<std::byte> out(size - kvpool::server::kSealOverhead);
    if (kvpool::server::Open(*fixed, kvpool::BlockKey{1, 2}, stored, out.data()).ok())
      __builtin_trap();  // a forgery that authenticates
  }
  return 0;
}
