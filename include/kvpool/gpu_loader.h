// Blocks between kvpool and a paged GPU KV cache: loads (an embedded Store, a NearCache,
// kvpoold over one or more connections) and stores (GPU -> kvpool), each a batch of keys
// with a slot per key, the moves one kernel per batch (kvpool/gpu.h).
//
// Copies: a block resident in a registered store's DRAM (RegisterStore) moves straight
// from the store's memory into GPU memory; a block from kvpoold lands in the connection's
// same-host region (registered: RegisterClient) or the loader's pinned staging (TCP) and
// moves from there; a save writes each slot straight into a reservation of the target. Loads from
// kvpoold are pipelined: chunk i+1 is in flight on the wire while chunk i crosses PCIe.
//
// Every call enqueues on the caller's stream and returns; the host memory read by loads in
// flight stays held until they pass (the loader checks at each call; Synchronize waits).
// REQUIRES: a store or near cache loaded from outlives the loads in flight from it (call
// Synchronize before destroying it).
// A block of the wrong size for the layout is kInvalidArgument for that item; a miss is
// kNotFound; neither fails the batch.
//
// Thread safety: one thread at a time per loader (its prestage thread is its own).
#ifndef KVPOOL_GPU_LOADER_H_
#define KVPOOL_GPU_LOADER_H_

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvpool/client.h"
#include "kvpool/gpu.h"
#include "kvpool/near_cache.h"
#include "kvpool/store.h"

namespace kvpool::gpu {

struct LoaderOptions {
  uint32_t chunk_blocks = 64;  // blocks per pipelined request when loading from kvpoold
};

// Registers a store's DRAM tier, or a client's same-host region (connecting it first: the
// region is mapped at connect), with the device, so that blocks in them move without
// staging. REQUIRES: the matching Unregister before the store or client is destroyed (and
// before a client that lost its connection reconnects). Unregistered memory works too: the
// mover stages it (one more copy).
Status RegisterStore(Store& store);
Status UnregisterStore(Store& store);
Status RegisterClient(Client& client);
Status UnregisterClient(Client& client);

class Loader {
 public:
  static Result<std::unique_ptr<Loader>> Create(const PagedLayout& layout,
                                                const LoaderOptions& options = {});
  ~Loader();  // waits for the loads in flight

  // out[i]: the status of keys[i] (OK, kNotFound, kInvalidArgument for a wrong size).
  Status Load(Store& store, std::span<const BlockKey> keys, std::span<const uint32_t> slots,
              LayerRange layers, void* stream, std::span<Status> out);
  // From kvpoold: the keys are split into contiguous shares, one per connection, fetched in
  // parallel (a connection with a same-host shared region receives into it).
  Status Load(std::span<Client* const> clients, std::span<const BlockKey> keys,
              std::span<const uint32_t> slots, LayerRange layers, void* stream,
              std::span<Status> out, Deadline deadline = {});
  // Local blocks straight from the near cache, the rest through it from its pool.
  Status Load(NearCache& near, std::span<const BlockKey> keys, std::span<const uint32_t> slots,
              LayerRange layers, void* stream, std::span<Status> out, Deadline deadline = {});
  // Layer by layer from whole blocks in a store (a prestaged near cache's): one lookup,
  // then per layer one kernel moving that layer of every block, `events[l]` recorded after
  // it (if given) and on_layer(l) called, so the engine's layer l waits only for its own
  // layer. out[i] for keys[i], as Load.
  Status LoadLayerwise(Store& store, std::span<const BlockKey> keys,
                       std::span<const uint32_t> slots, void* stream,
                       std::span<Event* const> events, std::span<Status> out,
                       const std::function<void(size_t)>& on_layer = {});
  // Layer streaming: one get per layer of `layers` (LayerKey parts of `blocks`), all sent
  // at once; as layer layers[i] arrives its move is enqueued on `stream`, `events[i]` is
  // recorded after it, and on_layer(i) is called (on this thread), where the caller enqueues
  // that layer's compute: layer i computes while later layers are still on the wire.
  // out[i * blocks.size() + j]. Returns when every layer's move is enqueued.
  Status LoadLayers(Client& client, std::span<const BlockKey> blocks,
                    std::span<const uint32_t> slots, std::span<const uint32_t> layers, void* stream,
                    std::span<Event* const> events, std::span<Status> out,
                    const std::function<void(size_t)>& on_layer = {}, Deadline deadline = {});

  // Prestaging into GPU memory: the near cache prestages `keys` (NearCache::Prestage: in
  // order, stopping at a miss or the deadline), then the loader's prestage thread moves the
  // leading blocks that arrived into their slots on `stream`. Returns at once.
  // REQUIRES: `near` outlives the prestage (WaitGpuPrestage or the loader's destruction).
  using Ticket = uint64_t;
  Ticket PrestageToGpu(NearCache& near, std::span<const BlockKey> keys,
                       std::span<const uint32_t> slots, void* stream, Deadline deadline);
  // How many leading blocks of that prestage are in GPU memory, once it has ended (moved and
  // landed) or `deadline` passed (then what had landed: 0). A finished ticket is reported
  // once; kInvalidArgument for a ticket never issued or already reported, or slots and keys
  // of different lengths.
  Result<size_t> WaitGpuPrestage(Ticket ticket, Deadline deadline = {});

  // GPU -> kvpool: the parts of `layers` in each slot become the block keys[i] (chained to
  // parents[i], empty for none). Insert-only: a held key is kExists and left alone. The host
  // waits for the copies (the blocks must be complete before they are committed).
  Status Save(Store& store, std::span<const BlockKey> keys, std::span<const BlockKey> parents,
              std::span<const uint32_t> slots, LayerRange layers, void* stream,
              std::span<Status> out);
  Status Save(Client& client, std::span<const BlockKey> keys, std::span<const BlockKey> parents,
              std::span<const uint32_t> slots, LayerRange layers, void* stream,
              std::span<Status> out, Deadline deadline = {});

  // Waits until every load enqueued so far has landed, and releases what they read.
  Status Synchronize();

  const PagedLayout& layout() const;
  Mover::Stats stats() const;

  class Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvpool::gpu

#endif  // KVPOOL_GPU_LOADER_H_
