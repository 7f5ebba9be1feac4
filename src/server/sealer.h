// Encryption at rest per tenant: AES-256-GCM over a tenant's blocks before they enter the
// store, so that no copy of them (DRAM, the flash tier, a block a drain moves to another
// node) holds plaintext.
//
// A sealed block, as stored (docs/PROTOCOL.md, "Sealed blocks"):
//   magic "kvpSEAL1" (8) | key version (4, LE) | nonce (12) | E(crc (4) | value) | tag (16)
// The CRC inside is the client's CRC32C of the value (end-to-end integrity survives); the
// associated data binds the tenant's name, the block's stored key (namespace and key) and
// the key version, so a sealed block copied under another key, namespace or tenant does not
// open: it is a miss, never another block's bytes. Nonces are 96 random bits per seal.
//
// Keys: a tenant's key file (or the output of its key command, a KMS hook) lists
// "<version> <64 hex digits>" lines. The highest version seals; every listed version opens.
// Rotation adds a line; retiring a version removes it (its blocks become misses); a tenant
// whose list is empty has been crypto-shredded: all its blocks are misses at once.
//
// Thread safety: TenantKeys is immutable; Seal/Open are thread-safe.
#ifndef KVPOOL_SERVER_SEALER_H_
#define KVPOOL_SERVER_SEALER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/key.h"
#include "kvpool/status.h"

namespace kvpool::server {

constexpr size_t kSealMagicBytes = 8;
constexpr size_t kSealPrefix = 28;  // magic, key version, nonce, then the sealed CRC
constexpr size_t kSealTag = 16;
constexpr size_t kSealOverhead = kSealPrefix + kSealTag;

class TenantKeys {
 public:
  struct Key {
    uint32_t version = 0;
    std::array<unsigned char, 32> bytes{};
  };
  // Parses a key list. Errors name the line (never a key's digits).
  static Result<std::shared_ptr<const TenantKeys>> Parse(std::string_view tenant,
                                                         std::string_view text);
  // From a file (which must not be readable by group or others), or from the standard
  // output of `command` run by /bin/sh (exit 0 within 10 s). Exactly one of them.
  static Result<std::shared_ptr<const TenantKeys>> Load(std::string_view tenant,
                                                        const std::string& file,
                                                        const std::string& command);

  const std::string& tenant() const { return tenant_; }
  bool shredded() const { return keys_.empty(); }
  const Key* current() const { return keys_.empty() ? nullptr : &keys_.back(); }
  const Key* Find(uint32_t version) const;
  std::vector<uint32_t> versions() const;

 private:
  std::string tenant_;
  std::vector<Key> keys_;  // ascending version
};

// Whether stored bytes are a sealed block (the magic).
bool IsSealed(std::span<const std::byte> stored);

// Seals in place. `buf` is kSealPrefix bytes of room, the value, then kSealTag bytes of
// room. kRefused when the tenant has no key to seal with (shredded).
Status Seal(const TenantKeys& keys, const BlockKey& stored_key, uint32_t crc,
            std::span<std::byte> buf);

// Opens a sealed block into `out` (stored.size() - kSealOverhead bytes) and returns the CRC
// the client put it with. kNotFound when it is not sealed, its key version is not (or no
// longer) listed, or it does not authenticate under this tenant and key.
Result<uint32_t> Open(const TenantKeys& keys, const BlockKey& stored_key,
                      std::span<const std::byte> stored, std::byte* out);

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_SEALER_H_
