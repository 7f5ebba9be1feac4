// The native wire protocol (docs/PROTOCOL.md): fixed little-endian frames, each a 40-byte
// header, `meta_len` bytes of per-item metadata, then `data_len` bytes of values.
//
// This file has the layouts and the pure functions that encode and check them; no I/O.
// The parser (ParseHeader, the Decode* functions) is what the fuzz target drives: it never
// trusts a length and never reads past what it was given.
#ifndef KVPOOL_NET_PROTOCOL_H_
#define KVPOOL_NET_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/key.h"
#include "kvpool/status.h"

namespace kvpool::net {

inline constexpr uint32_t kMagic = 0x4C50564B;  // "KVPL" as bytes on the wire
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 40;
inline constexpr uint8_t kResponseBit = 0x80;

enum class Op : uint8_t {
  kHello = 1,   // meta: HelloRequest; must be the first frame of a connection
  kPut = 2,     // meta: count x PutItem; data: the inline values, concatenated
  kGet = 3,     // meta: count x GetItem; response data: the inline values found
  kExists = 4,  // meta: count x 16-byte key
  kErase = 5,   // meta: count x 16-byte key
  kMatch = 6,   // meta: count x 16-byte key (a chain); response: header.count = prefix held
  kStat = 7,    // response data: the store's stats as text, or with kStatFigures as figures
  kPing = 8,    // response data: the request's data, echoed
  // Peer connections only (HELLO with kHelloPeer):
  kList = 9,    // data: u64 max; response data: count x ListedBlock, hottest first
  kLeave = 10,  // the node leaves the pod's member list and keeps serving (drain)
};

// STAT request flag: answer the figures (a "KVS1" tag, u32 count, then count x u64 in
// StatFigure order; fields are only ever appended) instead of the text.
inline constexpr uint16_t kStatFigures = 1;
enum StatFigure : uint32_t {
  kDramUsed,
  kDramCapacity,
  kDramBlocks,
  kDramHits,
  kFlashUsed,
  kFlashCapacity,
  kFlashBlocks,
  kFlashHits,
  kPuts,
  kGets,
  kMisses,
  kTenantScoped,
  kStatFigureCount
};

// Whole-request status in a response header's `flags` (low 8 bits): a Code value.
// Item statuses travel in each ResponseItem.
struct Header {
  uint32_t magic = kMagic;
  uint8_t version = kVersion;
  uint8_t opcode = 0;
  uint16_t flags = 0;
  uint64_t request_id = 0;
  uint32_t count = 0;
  uint32_t meta_len = 0;
  uint64_t data_len = 0;
  uint32_t reserved = 0;
  uint32_t crc = 0;  // CRC32C over the header (this field as zero) and the meta bytes
};

inline constexpr size_t kKeyBytes = 16;
inline constexpr size_t kPutItemBytes = 56;
inline constexpr size_t kGetItemBytes = 32;
inline constexpr size_t kResponseItemBytes = 16;
inline constexpr uint64_t kInline = ~0ull;  // shm_offset: the value travels in the stream

inline constexpr uint32_t kPutOverwrite = 1;  // PutItem.flags
inline constexpr uint32_t kPutFromShm = 2;    // PutItem.flags: value at shm_offset

struct PutItem {
  BlockKey key, parent;
  uint32_t len = 0;
  uint32_t crc = 0;  // CRC32C of the value, computed by the client; the server verifies
  uint32_t flags = 0;
  // The block's token ids (for KV events), sent after the item's inline value (or alone, for
  // a value from shared memory) as `tokens` little-endian u32s. 0: none. (Protocol 1 had a
  // reserved zero here: old clients send none.)
  uint32_t tokens = 0;
  uint64_t shm_offset = kInline;  // with kPutFromShm: where the value is in shared memory
};

// Most token ids one put item may carry (a block of tokens; larger is a malformed frame).
inline constexpr uint32_t kMaxTokensPerBlock = 65536;

// Bytes an item adds to a PUT's data section: its inline value, then its token ids.
inline uint64_t PutDataBytes(const PutItem& it) {
  return ((it.flags & kPutFromShm) ? 0 : uint64_t{it.len}) + uint64_t{it.tokens} * 4;
}

struct GetItem {
  BlockKey key;
  uint64_t max_len = 0;           // the caller's buffer size
  uint64_t shm_offset = kInline;  // kInline, or where in shared memory to write the value
};

// ResponseItem.flags: the server checked the CRC over the bytes it wrote into the
// client's shared-memory region (the client's own memory), so the client need not.
inline constexpr uint8_t kVerifiedInShm = 1;

struct ResponseItem {
  uint8_t code = 0;   // a kvpool::Code
  uint8_t flags = 0;  // kVerifiedInShm
  uint32_t crc = 0;   // get: CRC32C of the value as put
  uint64_t size = 0;  // get: the value's size (also on kBufferTooSmall)
};

inline constexpr uint32_t kHelloWantShm = 1;  // HelloRequest.flags: an fd rides along
// HelloRequest.flags: a peer (another node, the drain tool): keys are the stored keys (no
// namespace scoping) and kList/kLeave are allowed. Refused unless the token is the
// cluster's peer token (or the node has no tenants).
inline constexpr uint32_t kHelloPeer = 2;
// One block of a kList answer: key (16), size (u32), flags (u32: bit 0 in DRAM, bits 8-15
// past uses).
inline constexpr size_t kListedBlockBytes = 24;
// The first bytes of a shared-memory region are its control block: u64 at offset 0 is the
// request id of the last response the server has handed to the socket (written after the
// send), so a client may spin on memory instead of sleeping in recv. Values go after it.
inline constexpr size_t kShmControlBytes = 64;

struct HelloRequest {
  std::string ns;     // namespace
  std::string token;  // access token ("" when the server has no tenants)
  uint32_t flags = 0;
  uint64_t shm_bytes = 0;  // size of the shared-memory region passed with SCM_RIGHTS
};

// Server limits, sent back in the HELLO response's meta (8 x u64).
struct Limits {
  uint64_t max_batch = 1024;
  uint64_t max_value_bytes = 128ull << 20;
  uint64_t max_request_bytes = 1ull << 30;  // meta + data of one frame
  uint64_t max_meta_bytes = 1 << 20;
  uint64_t shm_enabled = 0;  // response: the server mapped the client's region
  uint64_t reserved[3] = {};
};

void EncodeHeader(const Header& h, std::byte out[kHeaderBytes]);
// Fills `crc` over the header and `meta`, then encodes.
void SealHeader(Header& h, std::span<const std::byte> meta, std::byte out[kHeaderBytes]);
// Decodes without checking anything but the size.
Header DecodeHeader(const std::byte in[kHeaderBytes]);
// Checks magic, version, opcode and the lengths against `limits`. The CRC is checked with
// CheckCrc once the meta bytes are in.
Status CheckHeader(const Header& h, const Limits& limits, bool is_response);
bool CheckCrc(const Header& h, const std::byte header_bytes[kHeaderBytes],
              std::span<const std::byte> meta);

void AppendKey(std::vector<std::byte>& out, const BlockKey& key);
void AppendKeys(std::vector<std::byte>& out, std::span<const BlockKey> keys);
void AppendPutItem(std::vector<std::byte>& out, const PutItem& item);
void AppendGetItem(std::vector<std::byte>& out, const GetItem& item);
void AppendResponseItem(std::vector<std::byte>& out, const ResponseItem& item);
void AppendHello(std::vector<std::byte>& out, const HelloRequest& hello);
void AppendLimits(std::vector<std::byte>& out, const Limits& limits);

BlockKey DecodeKey(const std::byte* p);
PutItem DecodePutItem(const std::byte* p);
GetItem DecodeGetItem(const std::byte* p);
ResponseItem DecodeResponseItem(const std::byte* p);
Result<HelloRequest> DecodeHello(std::span<const std::byte> meta);
Limits DecodeLimits(std::span<const std::byte> meta);

// The meta size a request of this opcode and count must have (HELLO, STAT, PING: any).
// Returns false for an opcode with fixed-size items whose meta_len does not match.
bool MetaSizeMatches(Op op, uint32_t count, uint32_t meta_len);

// Parses a whole request frame held in memory (header, meta, data) and checks every
// item's lengths against the frame: the fuzz target's entry point, and the server's
// check once meta is in (data may be absent: data_available = false).
Status ValidateRequest(std::span<const std::byte> frame, const Limits& limits, bool data_available);

// Status codes travel as one byte, the Code value. A byte no Code has (a newer or faulty
// peer) reads as kInternal, never as an enum value that does not exist.
inline uint8_t WireCode(const Status& s) { return static_cast<uint8_t>(s.code()); }
Code CodeFromWire(uint8_t b);

}  // namespace kvpool::net

#endif  // KVPOOL_NET_PROTOCOL_H_
