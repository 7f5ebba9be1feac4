#include "kvpool/key.h"

#define XXH_INLINE_ALL  // the 32-byte hashes here (PoolKey: per key of every request) inline
#include <xxhash.h>

#include <bit>
#include <cstring>

namespace kvpool {
namespace {

BlockKey FromHash(XXH128_hash_t h) {
  BlockKey k{h.high64, h.low64};
  if (k.empty()) k.lo = 1;  // the zero key is reserved for empty index slots
  return k;
}

static_assert(std::endian::native == std::endian::little, "big-endian hosts need a swap");

// Little-endian u64 (on this little-endian host: the bytes as they are; one store, where the
// byte-by-byte form cost as much as the hash in PoolKey, run for every key of a request).
void PutLe64(unsigned char* p, uint64_t v) { std::memcpy(p, &v, sizeof v); }

}  // namespace

std::string BlockKey::ToHex() const {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[15 - i] = kDigits[(hi >> (4 * i)) & 15];
    s[31 - i] = kDigits[(lo >> (4 * i)) & 15];
  }
  return s;
}

BlockKey NamespaceRoot(std::string_view name) {
  std::string buf = "kvpool/ns/v1/";
  buf.append(name);
  return FromHash(XXH3_128bits(buf.data(), buf.size()));
}

BlockKey ChildKey(const BlockKey& parent, std::span<const uint32_t> tokens) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  unsigned char p[16];
  PutLe64(p, parent.hi);
  PutLe64(p + 8, parent.lo);
  XXH3_128bits_update(&state, p, sizeof p);
  // Token ids go in as little-endian u32; on a little-endian host that is the array itself.
  static_assert(std::endian::native == std::endian::little, "big-endian hosts need a swap");
  XXH3_128bits_update(&state, tokens.data(), tokens.size_bytes());
  return FromHash(XXH3_128bits_digest(&state));
}

std::vector<BlockKey> ChainKeys(const BlockKey& parent, std::span<const uint32_t> tokens,
                                size_t block_tokens) {
  std::vector<BlockKey> keys;
  if (block_tokens == 0) return keys;
  keys.reserve(tokens.size() / block_tokens);
  BlockKey prev = parent;
  for (size_t off = 0; off + block_tokens <= tokens.size(); off += block_tokens) {
    prev = ChildKey(prev, tokens.subspan(off, block_tokens));
    keys.push_back(prev);
  }
  return keys;
}

BlockKey PoolKey(const BlockKey& ns_root, const BlockKey& key) {
  if (key.empty()) return key;
  unsigned char buf[32];
  PutLe64(buf, ns_root.hi);
  PutLe64(buf + 8, ns_root.lo);
  PutLe64(buf + 16, key.hi);
  PutLe64(buf + 24, key.lo);
  return FromHash(XXH3_128bits(buf, sizeof buf));
}

BlockKey LayerKey(const BlockKey& block, uint32_t layer) {
  if (block.empty()) return block;
  unsigned char buf[16 + 5 + 4];
  PutLe64(buf, block.hi);
  PutLe64(buf + 8, block.lo);
  std::memcpy(buf + 16, "layer", 5);
  for (int i = 0; i < 4; ++i) buf[21 + i] = static_cast<unsigned char>(layer >> (8 * i));
  return FromHash(XXH3_128bits(buf, sizeof buf));
}

BlockKey KeyFromBytes(std::string_view bytes) {
  return FromHash(XXH3_128bits(bytes.data(), bytes.size()));
}

BlockKey ParseKey(std::string_view text) {
  if (text.size() == 32) {
    BlockKey k;
    bool hex = true;
    for (size_t i = 0; i < 32 && hex; ++i) {
      char c = text[i];
      int v = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (v < 0) hex = false;
      uint64_t& half = i < 16 ? k.hi : k.lo;
      half = (half << 4) | static_cast<uint64_t>(v < 0 ? 0 : v);
    }
    if (hex && !k.empty()) return k;
  }
  return KeyFromBytes(text);
}

}  // namespace kvpool
