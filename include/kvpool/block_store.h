// kvpool::BlockStore: the one batch interface every kvpool block store implements: the
// embedded Store (kvpool/store.h), a Client of one kvpoold (kvpool/client.h), a PoolClient
// of the pod pool (kvpool/pool.h) and a NearCache in front of any of them
// (kvpool/near_cache.h). Code written against it runs on each unchanged.
//
// Calls:
//   - Every call is a batch; each op gets its own status: OK, kNotFound (absent),
//     kExists (insert-only put of a held key), kTooLarge, kNoSpace, kBufferTooSmall,
//     kTimeout (the deadline passed first), kUnavailable (the store could not be reached).
//   - The returned Status is the call's: OK when the store answered (even if every item
//     missed), kUnavailable or kTimeout when it could not; then no item reads as absent.
//   - Every call takes a deadline (Deadline{}: none; an embedded store answers at once).
//   - Puts are insert-only unless `overwrite`; a put names its block's parent so chains are
//     evicted leaf first. Gets copy into the caller's buffers; ReadBatch gives views, in
//     place where the store holds the bytes in this process.
//
// Thread safety: as each implementation says (Store, PoolClient, NearCache: any threads;
// Client: one thread at a time).
#ifndef KVPOOL_BLOCK_STORE_H_
#define KVPOOL_BLOCK_STORE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kvpool/key.h"
#include "kvpool/status.h"

namespace kvpool {

class Store;
namespace engine {
class TieredStore;
}

// An absolute limit on a call, on the monotonic clock. Deadline{} is none. Items not
// answered when it passes get kTimeout and the call returns kTimeout at the deadline.
struct Deadline {
  uint64_t steady_ns = 0;  // CLOCK_MONOTONIC nanoseconds; 0: none
  static Deadline After(std::chrono::nanoseconds d);
  bool none() const { return steady_ns == 0; }
  bool passed() const;
};

struct PutOp {
  BlockKey key;
  std::span<const std::byte> value;
  BlockKey parent;
  Status status;                             // out: OK, kExists, kTooLarge, kNoSpace, ...
  std::span<const uint32_t> token_ids = {};  // in, optional: as PutOptions::token_ids
  uint16_t tenant = 0;                       // in, optional: as PutOptions::tenant
};

struct GetOp {
  BlockKey key;
  std::span<std::byte> buffer;  // in: where the value goes
  size_t size = 0;              // out: the value's size (also set on kBufferTooSmall)
  uint32_t crc = 0;             // out: CRC32C of the value, computed at put
  Status status;                // out: OK, kNotFound, kBufferTooSmall
};

struct KeyOp {
  BlockKey key;
  Status status;  // out: OK or kNotFound
};

// A block's bytes, read while the view lives. From the embedded store's DRAM tier the view
// is the block in place (no copy), and its memory stays valid until the view is destroyed
// even if the block is erased or evicted meanwhile; otherwise the view owns a copy.
// Move-only; hold an in-place view briefly (it keeps DRAM from being reused).
class BlockView {
 public:
  BlockView() = default;
  BlockView(BlockView&& other) noexcept { *this = std::move(other); }
  BlockView& operator=(BlockView&& other) noexcept;
  ~BlockView();
  std::span<const std::byte> data() const { return data_; }
  uint32_t crc() const { return crc_; }
  // A view that owns `size` bytes at `bytes` (a copy the caller made).
  static BlockView Owning(std::unique_ptr<std::byte[]> bytes, size_t size, uint32_t crc);

 private:
  friend class engine::TieredStore;
  void Reset();
  Store* owner_ = nullptr;  // null: owned_ (a copy) or empty
  uint32_t record_ = 0;
  std::unique_ptr<std::byte[]> owned_;
  std::span<const std::byte> data_;
  uint32_t crc_ = 0;
};

// For implementations: every op of a call whose deadline passed before it began gets
// kTimeout, which the call returns too.
template <class OpT>
Status ExpireAll(std::span<OpT> ops) {
  Status s = Status::Timeout("deadline passed before the call");
  for (OpT& op : ops) op.status = s;
  return s;
}

// The same for ReadBatch's results.
inline Status ExpireAll(std::span<Result<BlockView>> out) {
  Status s = Status::Timeout("deadline passed before the call");
  for (Result<BlockView>& r : out) r = s;
  return s;
}

class BlockStore {
 public:
  virtual ~BlockStore() = default;

  virtual Status PutBatch(std::span<PutOp> ops, bool overwrite = false, Deadline deadline = {}) = 0;
  virtual Status GetBatch(std::span<GetOp> ops, Deadline deadline = {}) = 0;
  virtual Status ExistsBatch(std::span<KeyOp> ops, Deadline deadline = {}) = 0;
  virtual Status EraseBatch(std::span<KeyOp> ops, Deadline deadline = {}) = 0;
  // How many leading keys of `chain` are held (a probe: no use counted, nothing pinned).
  virtual Result<size_t> MatchPrefix(std::span<const BlockKey> chain, Deadline deadline = {}) = 0;
  // out[i]: a view of keys[i]'s value, or its status (kNotFound, kTimeout, ...). This
  // default asks for the sizes (a get into no buffer), then gets into buffers it owns;
  // the embedded store answers with views in place.
  virtual Status ReadBatch(std::span<const BlockKey> keys, std::span<Result<BlockView>> out,
                           Deadline deadline = {});
};

}  // namespace kvpool

#endif  // KVPOOL_BLOCK_STORE_H_
