// Engines' own block hashes, computed byte for byte as each engine does, from token ids:
// vLLM (prefix caching), LMCache (256-token chunks), SGLang HiCache (pages), Dynamo (KV
// router). With these a block can be named in any engine's terms: an adapter that receives
// an engine's hash finds the kvpool key (ForeignKey in schema.h), and a router that knows
// the tokens can compute what every engine calls each block.
//
// Sources read (docs/KEYS.md cites the files): vLLM vllm/utils/hashing.py and
// vllm/v1/core/kv_cache_utils.py (hash_block_tokens, init_none_hash); LMCache
// lmcache/v1/token_database.py (ChunkedTokenDatabase); SGLang
// python/sglang/srt/mem_cache/hicache_storage.py (get_hash_str); Dynamo
// lib/kv-router (compute_block_hash_for_seq, compute_seq_hash_for_block).
//
// Thread safety: pure functions.
#ifndef KVPOOL_ENGINE_KEYS_H_
#define KVPOOL_ENGINE_KEYS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/status.h"

namespace kvpool::engines {

// vLLM's --prefix-caching-hash-algo. sha256/xxhash serialize with pickle (protocol 5),
// the *_cbor forms with canonical CBOR; sha256 digests are 32 bytes, xxhash (XXH3-128) 16.
enum class VllmHash : unsigned char { kSha256, kSha256Cbor, kXxhash, kXxhashCbor };
Result<VllmHash> ParseVllmHash(std::string_view name);  // "sha256_cbor", ...

// NONE_HASH, the parent of a chain's first block: hash_fn(PYTHONHASHSEED as a str).
// (Without PYTHONHASHSEED vLLM draws it at random and no other process can match it.)
std::string VllmNoneHash(VllmHash algo, std::string_view python_hash_seed);

// hash_fn((parent, tuple(tokens), extra_keys=None)) for one block. REQUIRES: parent is a
// digest of this algo (or NONE_HASH) and tokens.size() <= 8192.
std::string VllmBlockHash(VllmHash algo, std::string_view parent, std::span<const uint32_t> tokens);

// The chain of full blocks' hashes (vLLM hashes only full blocks), from NONE_HASH.
std::vector<std::string> VllmBlockHashes(VllmHash algo, std::string_view python_hash_seed,
                                         std::span<const uint32_t> tokens, size_t block_size);

// vLLM's integer form of a block hash in KV events (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES):
// the digest read big-endian, low 64 bits.
uint64_t VllmExternalHash(std::string_view digest);

// LMCache ChunkedTokenDatabase: the same hash function over 256-token chunks (chunk_size),
// the trailing partial chunk included (save_unfull_chunk, the default).
std::vector<std::string> LmcacheChunkHashes(VllmHash algo, std::string_view python_hash_seed,
                                            std::span<const uint32_t> tokens,
                                            size_t chunk_size = 256);

// SGLang HiCache page keys: SHA-256 over the parent's digest (absent for the first page)
// and little-endian u32 token ids, as 64 lowercase hex digits; with SGLANG_USE_XXH3_HASH=1,
// XXH3-64 (seed 1337) over the same bytes, as 16 hex digits. Full pages only.
std::vector<std::string> SglangPageHashes(std::span<const uint32_t> tokens, size_t page_size,
                                          bool xxh3 = false);

// Dynamo KV router: local block hash = XXH3-64(seed 1337) of the block's LE u32 tokens;
// sequence hash[0] = local[0], hash[i] = XXH3-64(seed 1337)(le64(hash[i-1]) || le64(local[i])).
struct DynamoHashes {
  std::vector<uint64_t> local, sequence;
};
DynamoHashes DynamoBlockHashes(std::span<const uint32_t> tokens, size_t block_size);

// Lowercase hex of bytes.
std::string Hex(std::string_view bytes);

}  // namespace kvpool::engines

#endif  // KVPOOL_ENGINE_KEYS_H_
