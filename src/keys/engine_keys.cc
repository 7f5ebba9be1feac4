#include "kvpool/engine_keys.h"

#include <xxhash.h>

#include "common/bytes.h"
#include "keys/serialize.h"

namespace kvpool::engines {
namespace {

constexpr uint64_t kXxh3Seed = 1337;  // SGLang's and Dynamo's seed

bool IsCbor(VllmHash a) { return a == VllmHash::kSha256Cbor || a == VllmHash::kXxhashCbor; }
bool IsSha(VllmHash a) { return a == VllmHash::kSha256 || a == VllmHash::kSha256Cbor; }

std::string Digest(VllmHash algo, const std::string& serialized) {
  return IsSha(algo) ? keys::Sha256(serialized) : keys::Xxh3_128Digest(serialized);
}

std::string_view TokenBytes(std::span<const uint32_t> tokens) {
  // Little-endian u32 ids: on a little-endian host, the array itself.
  return {reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes()};
}

uint64_t Xxh3_64(std::string_view bytes) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), kXxh3Seed);
}

}  // namespace

Result<VllmHash> ParseVllmHash(std::string_view name) {
  if (name == "sha256") return VllmHash::kSha256;
  if (name == "sha256_cbor") return VllmHash::kSha256Cbor;
  // Older or process-local schemes: refused by name rather than computed as something else.
  if (name == "sha256_cbor_64bit")
    return Status::InvalidArgument(
        "vLLM's sha256_cbor_64bit (before vLLM PR #23673, a 64-bit int chain) is not "
        "reproduced; sha256_cbor is the current 32-byte form (docs/KEYS.md)");
  if (name == "builtin")
    return Status::InvalidArgument(
        "the builtin hash is Python's hash() with a per-process seed: no other process can "
        "compute it; use sha256, sha256_cbor, xxhash or xxhash_cbor (docs/KEYS.md)");
  if (name == "xxhash") return VllmHash::kXxhash;
  if (name == "xxhash_cbor") return VllmHash::kXxhashCbor;
  return Status::InvalidArgument(
      "unknown vLLM hash algorithm (sha256, sha256_cbor, xxhash, xxhash_cbor): " +
      std::string(name));
}

std::string VllmNoneHash(VllmHash algo, std::string_view python_hash_seed) {
  return Digest(algo,
                IsCbor(algo) ? keys::CborStr(python_hash_seed) : keys::PickleStr(python_hash_seed));
}

std::string VllmBlockHash(VllmHash algo, std::string_view parent,
                          std::span<const uint32_t> tokens) {
  return Digest(algo, IsCbor(algo) ? keys::CborBlockTuple(parent, tokens)
                                   : keys::PickleBlockTuple(parent, tokens));
}

std::vector<std::string> VllmBlockHashes(VllmHash algo, std::string_view python_hash_seed,
                                         std::span<const uint32_t> tokens, size_t block_size) {
  std::vector<std::string> out;
  if (block_size == 0) return out;
  std::string parent = VllmNoneHash(algo, python_hash_seed);
  for (size_t off = 0; off + block_size <= tokens.size(); off += block_size) {
    parent = VllmBlockHash(algo, parent, tokens.subspan(off, block_size));
    out.push_back(parent);
  }
  return out;
}

uint64_t VllmExternalHash(std::string_view digest) {
  uint64_t v = 0;
  size_t start = digest.size() > 8 ? digest.size() - 8 : 0;
  for (size_t i = start; i < digest.size(); ++i)
    v = (v << 8) | static_cast<unsigned char>(digest[i]);
  return v;
}

std::vector<std::string> LmcacheChunkHashes(VllmHash algo, std::string_view python_hash_seed,
                                            std::span<const uint32_t> tokens, size_t chunk_size) {
  std::vector<std::string> out;
  if (chunk_size == 0) return out;
  std::string prefix = VllmNoneHash(algo, python_hash_seed);
  for (size_t off = 0; off < tokens.size(); off += chunk_size) {
    size_t n = std::min(chunk_size, tokens.size() - off);
    prefix = VllmBlockHash(algo, prefix, tokens.subspan(off, n));
    out.push_back(prefix);
  }
  return out;
}

std::vector<std::string> SglangPageHashes(std::span<const uint32_t> tokens, size_t page_size,
                                          bool xxh3) {
  std::vector<std::string> out;
  if (page_size == 0) return out;
  std::string prior;  // raw bytes of the previous page's digest
  for (size_t off = 0; off + page_size <= tokens.size(); off += page_size) {
    std::string buf = prior;
    buf.append(TokenBytes(tokens.subspan(off, page_size)));
    if (xxh3) {
      prior.clear();
      AppendBe(prior, Xxh3_64(buf), 8);  // format(digest, "016x"): big-endian hex
    } else {
      prior = keys::Sha256(buf);
    }
    out.push_back(Hex(prior));
  }
  return out;
}

DynamoHashes DynamoBlockHashes(std::span<const uint32_t> tokens, size_t block_size) {
  DynamoHashes h;
  if (block_size == 0) return h;
  for (size_t off = 0; off + block_size <= tokens.size(); off += block_size) {
    uint64_t local = Xxh3_64(TokenBytes(tokens.subspan(off, block_size)));
    h.local.push_back(local);
    if (h.sequence.empty()) {
      h.sequence.push_back(local);
    } else {
      uint64_t pair[2] = {h.sequence.back(), local};  // le64 || le64 on a little-endian host
      h.sequence.push_back(Xxh3_64({reinterpret_cast<const char*>(pair), sizeof pair}));
    }
  }
  return h;
}

std::string Hex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    s.push_back(kDigits[c >> 4]);
    s.push_back(kDigits[c & 15]);
  }
  return s;
}

}  // namespace kvpool::engines
