// The two serializations vLLM hashes a block with, for the one object shape it hashes:
// the tuple (parent: bytes, tokens: tuple[int, ...], extra_keys: None), and the str that
// seeds NONE_HASH. Byte-exact with CPython's pickle (protocol 5, the C pickler) and with
// cbor2.dumps(..., canonical=True). Not general encoders: only what block hashing needs.
#ifndef KVPOOL_KEYS_SERIALIZE_H_
#define KVPOOL_KEYS_SERIALIZE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvpool::keys {

// REQUIRES: parent.size() < 256 and tokens.size() <= 8192 (the pickle fits one frame).
std::string PickleBlockTuple(std::string_view parent, std::span<const uint32_t> tokens);
std::string PickleStr(std::string_view s);  // REQUIRES: s.size() < 256, valid UTF-8
std::string CborBlockTuple(std::string_view parent, std::span<const uint32_t> tokens);
std::string CborStr(std::string_view s);

std::string Sha256(std::string_view bytes);          // 32-byte digest
std::string Xxh3_128Digest(std::string_view bytes);  // 16 bytes, big-endian (xxhash's digest())

}  // namespace kvpool::keys

#endif  // KVPOOL_KEYS_SERIALIZE_H_
