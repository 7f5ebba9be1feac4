// The tiered block store: DRAM tier over a flash tier, embedded in the calling process.
//
// Blocks are written once: a put of a key already held leaves the held data alone and
// answers kExists (unless PutOptions::overwrite). A get copies into the caller's buffer. A
// block lost to eviction, a failed CRC or an I/O error is a miss (kNotFound), never an
// error and never wrong data. Probes (Exists, MatchPrefix) never count as a use.
//
// Thread safety: every method may be called from any number of threads at once.
#ifndef KVPOOL_STORE_H_
#define KVPOOL_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvpool/block_store.h"
#include "kvpool/key.h"
#include "kvpool/options.h"
#include "kvpool/stats.h"
#include "kvpool/status.h"

namespace kvpool {

struct PutOptions {
  // The block's parent in its prefix chain (empty for a chain's first block). Eviction
  // keeps parents while their children are held: a child is useless without its parent.
  BlockKey parent;
  // Replace a held value instead of answering kExists.
  bool overwrite = false;
  // The block's token ids, when the engine has them: not stored, handed to the listener
  // (KV events carry them; routers hash them). Must stay valid until the put or commit
  // returns.
  std::span<const uint32_t> token_ids = {};
  // Whose bytes these are (a tenant, 1..kMaxTenants-1; 0: nobody's). The block's bytes
  // count against that tenant's quota (Store::SetQuota) in each tier while held there.
  uint16_t tenant = 0;
};

// Tenant ids run 1..kMaxTenants-1 (0: no tenant).
inline constexpr uint32_t kMaxTenants = 4096;

// A tenant's share of the store: at most this many bytes (whole 4 KiB pages) in DRAM and
// on flash; 0: no limit. A tenant at its DRAM quota evicts its own coldest blocks to make
// room (to flash, as any eviction); at its flash quota its oldest flash blocks leave.
// Other tenants' blocks are never evicted for it. A put that cannot fit (larger than the
// quota, or the quota full of blocks pinned by readers) fails with kNoSpace, which says so.
struct TenantQuota {
  uint64_t dram_bytes = 0;
  uint64_t flash_bytes = 0;
};

struct TenantUsage {
  uint64_t dram_bytes = 0;   // DRAM pages held (and reserved) for the tenant's blocks
  uint64_t flash_bytes = 0;  // pages of its live flash blocks
};

// Block lifecycle, for publishers of KV events (StoreOptions::listener). Called on the
// thread that stored or removed the block, with internal locks held: implementations must
// be quick (queue and return) and must not call back into the store. A block is removed
// when it leaves the store entirely (erased, evicted from the last tier, replaced, failed
// verification); moving between DRAM and flash is not an event. A block lost with an
// evicted flash region is reported once the writes that took the region are done.
// `tenant` is the block's (PutOptions::tenant; 0: none), for publishing each tenant's
// events to it alone; 0 also for the rare removal the background sweep finds, whose
// tenant is no longer known.
class StoreListener {
 public:
  virtual ~StoreListener() = default;
  // token_ids: the put's (PutOptions::token_ids), empty when the writer gave none.
  virtual void OnStored(const BlockKey& key, const BlockKey& parent, uint64_t size,
                        std::span<const uint32_t> token_ids, uint16_t tenant) = 0;
  virtual void OnRemoved(const BlockKey& key, uint16_t tenant) = 0;
};

class Store;
namespace engine {
class TieredStore;
}

// A slot reserved by Store::Reserve: fill data() in place, then Store::Commit. Destroying
// an uncommitted reservation releases the slot. Move-only; used by one thread at a time.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&& other) noexcept { *this = std::move(other); }
  Reservation& operator=(Reservation&& other) noexcept;
  ~Reservation();
  std::span<std::byte> data() const { return data_; }
  const BlockKey& key() const { return key_; }
  bool valid() const { return owner_ != nullptr; }

 private:
  friend class engine::TieredStore;
  Store* owner_ = nullptr;
  std::span<std::byte> data_;
  BlockKey key_;
  PutOptions options_;
  uint32_t record_ = 0;
  uint64_t reserve_ns_ = 0;  // time Reserve took (put latency = it + the commit's)
};

// A block as ListBlocks reports it.
struct HeldBlock {
  BlockKey key;
  uint32_t size = 0;
  bool in_dram = false;  // else on flash only
  uint8_t uses = 0;      // past uses the policy counts (0..3)
};

class Store : public BlockStore {
 public:
  // Opens a store (allocates the arena, opens or creates the flash file).
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  virtual ~Store() = default;

  virtual Status Put(const BlockKey& key, std::span<const std::byte> value,
                     const PutOptions& options = {}) = 0;
  // Two-phase put for zero copy: reserve `size` bytes, fill them, commit.
  virtual Result<Reservation> Reserve(const BlockKey& key, size_t size,
                                      const PutOptions& options = {}) = 0;
  virtual Status Commit(Reservation reservation) = 0;
  // Commit only if the filled bytes' CRC32C equals `expected_crc` (a value that came over
  // a wire); otherwise the slot is released and kCorruption returned. One CRC pass.
  virtual Status CommitVerified(Reservation reservation, uint32_t expected_crc) = 0;
  // Commit with the CRC32C the caller computed over the filled bytes as it wrote them (a
  // copy that checksums on the way: no second pass). A wrong crc is never wrong data:
  // flash reads and verifying clients check it, and a mismatch is a miss.
  virtual Status CommitChecksummed(Reservation reservation, uint32_t crc) = 0;

  // Copies the value into `buffer` and returns its size.
  virtual Result<size_t> Get(const BlockKey& key, std::span<std::byte> buffer) = 0;
  // A view of the value in place (DRAM hit: no copy; flash hit: read into a DRAM record
  // that is promoted and viewed in place; into memory the view owns only when DRAM has no
  // room for it). kNotFound on a miss. Counts as a use, like Get.
  virtual Result<BlockView> Read(const BlockKey& key) = 0;
  // Read without waiting for flash: a DRAM hit gives its view, a block held only on flash
  // gives kBusy (nothing counted: call Read for it where waiting is fine, as a server's
  // I/O thread does), and a miss kNotFound. For event loops that must never block.
  virtual Result<BlockView> ReadResident(const BlockKey& key) = 0;
  virtual bool Exists(const BlockKey& key) = 0;
  virtual Status Erase(const BlockKey& key) = 0;

  // The BlockStore calls (kvpool/block_store.h). In process they answer at once: the call
  // returns OK, or kTimeout (every item too) when the deadline had passed before it. Puts
  // and gets of a batch share their flash I/O; ReadBatch's views are in place (as Read).
  Status PutBatch(std::span<PutOp> ops, bool overwrite = false,
                  Deadline deadline = {}) override = 0;
  Status GetBatch(std::span<GetOp> ops, Deadline deadline = {}) override = 0;
  Status ExistsBatch(std::span<KeyOp> ops, Deadline deadline = {}) override = 0;
  Status EraseBatch(std::span<KeyOp> ops, Deadline deadline = {}) override = 0;
  Result<size_t> MatchPrefix(std::span<const BlockKey> chain, Deadline deadline = {}) override = 0;
  Status ReadBatch(std::span<const BlockKey> keys, std::span<Result<BlockView>> out,
                   Deadline deadline = {}) override = 0;
  // Brings flash-resident blocks into DRAM in the background; returns at once.
  virtual void Prefetch(std::span<const BlockKey> keys) = 0;
  // Waits until background work queued so far (prefetches, demotions) is done. For tests
  // and orderly shutdown; the data path never needs it.
  virtual void Quiesce() = 0;

  // Erases every block (all namespaces). Views and reservations stay valid.
  virtual void Clear() = 0;

  // The blocks held, hottest first: DRAM-resident before flash-only, more past uses first;
  // at most `max`. A snapshot (for draining a node to its successors); counts no use.
  virtual std::vector<HeldBlock> ListBlocks(size_t max) = 0;

  virtual StoreStats GetStats() const = 0;

  // Sets a tenant's quota (applies to its next puts and demotions; blocks over a lowered
  // quota leave as the tenant writes). REQUIRES: 0 < tenant < kMaxTenants.
  virtual void SetQuota(uint16_t tenant, const TenantQuota& quota) = 0;
  virtual TenantUsage Usage(uint16_t tenant) const = 0;

  // The DRAM tier's memory (every DRAM-resident block's bytes lie in it), for registering
  // it with a device once (kvpool::gpu::RegisterHost) so that blocks move without staging.
  virtual std::span<std::byte> DramMemory() const = 0;

 protected:
  friend class Reservation;
  friend class BlockView;
  virtual void Abort(Reservation& reservation) = 0;
  virtual void ReleaseView(BlockView& view) = 0;
};

}  // namespace kvpool

#endif  // KVPOOL_STORE_H_
