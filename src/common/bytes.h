// Fixed-width integers in byte strings, for the byte-exact formats documented in docs/
// (key derivations, engines' hashes, KV event frames). Explicit shifts: host-independent.
#ifndef KVPOOL_COMMON_BYTES_H_
#define KVPOOL_COMMON_BYTES_H_

#include <cstdint>
#include <string>

namespace kvpool {

// Appends the low `bytes` bytes of v, least significant first.
inline void AppendLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Appends the low `bytes` bytes of v, most significant first.
inline void AppendBe(std::string& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Reads `bytes` bytes, most significant first.
inline uint64_t ReadBe(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace kvpool

#endif  // KVPOOL_COMMON_BYTES_H_
