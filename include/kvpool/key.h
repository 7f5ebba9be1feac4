// Block keys: 128-bit names of KV blocks, chained so that a block's key also names its prefix.
//
// Derivation (reproducible from any language; docs/KEYS.md has test vectors):
//   root   = XXH3_128bits(UTF-8 bytes of "kvpool/ns/v1/" + namespace name)
//   key[i] = XXH3_128bits(parent16 || tok_0 || ... || tok_{n-1})
// where parent16 is key[i-1] (root for i = 0) as 16 bytes, high 64 bits first, each half
// little-endian, and tok_j are the block's token ids as little-endian uint32. Only full
// blocks get keys (a trailing partial block is never cached, as in vLLM and SGLang).
// The all-zero key is reserved (it marks empty index slots); a derivation that yields it
// is mapped to {0, 1}.
#ifndef KVPOOL_KEY_H_
#define KVPOOL_KEY_H_

#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvpool {

struct BlockKey {
  uint64_t hi = 0;
  uint64_t lo = 0;
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  friend auto operator<=>(const BlockKey&, const BlockKey&) = default;
  bool empty() const { return hi == 0 && lo == 0; }
  // 32 lowercase hex digits, hi first.
  std::string ToHex() const;
};

// The root key of a namespace (tenant + model + layout, as one string for now).
BlockKey NamespaceRoot(std::string_view name);

// Keys of the full blocks of `tokens`, block_tokens tokens each, chained from `parent`.
// REQUIRES: block_tokens > 0.
std::vector<BlockKey> ChainKeys(const BlockKey& parent, std::span<const uint32_t> tokens,
                                size_t block_tokens);

// One chain step: the key of a block with these tokens whose parent is `parent`.
BlockKey ChildKey(const BlockKey& parent, std::span<const uint32_t> tokens);

// A key named by arbitrary bytes (a string key, as RESP and the CLI use):
// XXH3_128bits(bytes), hi = high64. The all-zero result maps to {0, 1}.
BlockKey KeyFromBytes(std::string_view bytes);
// 32 hex digits (as ToHex writes) -> that key; anything else -> KeyFromBytes(text).
BlockKey ParseKey(std::string_view text);

// The key kvpoold stores a client's key under, in the namespace whose root is `ns_root`
// (NamespaceRoot of the HELLO's namespace): XXH3_128bits(le64 ns_root.hi || le64 ns_root.lo
// || le64 key.hi || le64 key.lo). KV events name blocks by it. The empty key stays empty.
BlockKey PoolKey(const BlockKey& ns_root, const BlockKey& key);

// Layer streaming: layer `layer` of a block stored as per-layer parts is the block
// XXH3_128bits(le64 block.hi || le64 block.lo || "layer" || le32 layer). A part's parent is
// the same layer of the block's parent, so each layer's chain is evicted leaf first.
BlockKey LayerKey(const BlockKey& block, uint32_t layer);

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const { return k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull); }
};

}  // namespace kvpool

#endif  // KVPOOL_KEY_H_
