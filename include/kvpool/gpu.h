// The GPU end of the path: KV blocks between host memory and an inference engine's paged KV
// cache in GPU memory. Nothing else in kvpool requires this module; without CUDA (a build
// with -DKVPOOL_CUDA=OFF, or no nvcc) every call answers kUnavailable with the reason.
//
// A paged KV cache is described by a PagedLayout: for each layer, the device address of its
// K part and (unless the model has none) its V part; block slot s of a part starts at
// base + s * slot_stride and holds chunk_bytes. That covers the layouts engines use:
//   vLLM (flash-attn backends), per layer [2][num_blocks][block_size][kv_heads][head_dim]:
//     Vllm(layer_ptrs, num_blocks, block_bytes)
//   SGLang MHA, separate K and V buffers per layer, [tokens][heads][head_dim], a page of
//     page_size tokens contiguous: Split(k_ptrs, v_ptrs, page_bytes, num_pages)
//   cross-layer (one tensor [num_blocks][layers][2][block_size][kv_heads][head_dim], as
//     LMCache's and vLLM's cross-layer blocks): CrossLayer(ptr, num_blocks, layers, chunk)
//
// A host block holds its parts in the order [layer][k, v][chunk_bytes] for the layers it
// covers: a whole block (all layers) is layers * parts * chunk_bytes; a layer key
// (kvpool::LayerKey) holds one layer's [k, v].
//
// Moves are one kernel launch per batch, on the caller's CUDA stream (passed as void*:
// cudaStream_t, nullptr for the legacy default stream); the kernel reads (or writes) pinned
// host memory directly, so a batch of scattered blocks moves at close to the PCIe limit.
// Host memory must be pinned and registered (RegisterHost, PinnedBuffer): a block elsewhere
// is staged through the mover's own pinned buffer (one extra copy, never wrong data).
//
// Thread safety: a Mover is used by one thread at a time; RegisterHost and Event may be
// used from any thread.
#ifndef KVPOOL_GPU_H_
#define KVPOOL_GPU_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvpool/status.h"

namespace kvpool::gpu {

// OK when this build has CUDA and a device is present; else kUnavailable with the reason
// ("built without CUDA", "no CUDA device: ...").
Status Available();
// The device's name and the driver/runtime versions, for reports ("" without a device).
std::string DeviceInfo();

struct PagedLayout {
  std::vector<uint64_t> k_bases;  // device address of each layer's K part
  std::vector<uint64_t> v_bases;  // each layer's V part; empty for K-only caches (MLA)
  uint64_t slot_stride = 0;       // bytes from one slot to the next within a part
  uint64_t chunk_bytes = 0;       // bytes of one slot of one part
  uint32_t num_slots = 0;

  static PagedLayout Vllm(std::span<const uint64_t> layer_ptrs, uint32_t num_blocks,
                          uint64_t block_bytes);
  static PagedLayout Split(std::span<const uint64_t> k_ptrs, std::span<const uint64_t> v_ptrs,
                           uint64_t page_bytes, uint32_t num_pages);
  static PagedLayout CrossLayer(uint64_t ptr, uint32_t num_blocks, uint32_t num_layers,
                                uint64_t chunk_bytes);

  uint32_t layers() const { return static_cast<uint32_t>(k_bases.size()); }
  uint32_t parts() const { return v_bases.empty() ? 1 : 2; }
  // Bytes of a host block covering `n` layers.
  uint64_t HostBytes(uint32_t n) const { return uint64_t(n) * parts() * chunk_bytes; }
  Status Validate() const;
};

// Layers [first, first + count) of each block.
struct LayerRange {
  uint32_t first = 0;
  uint32_t count = 0;  // 0: every layer from first on
  // The host blocks are whole (every layer of the layout) and only the range moves: a
  // layer-by-layer load from blocks stored whole. Otherwise a host block holds just the
  // range's layers.
  bool whole_blocks = false;
};

struct HostBlock {
  std::byte* data = nullptr;  // the block's parts for the range, [layer][k, v][chunk]
  uint32_t slot = 0;          // its slot in the paged cache
};

// Page-locks host memory and maps it for the device (cudaHostRegister): blocks in it move
// without staging. Returns kUnavailable without a device; registering the same region again
// is a no-op. REQUIRES: UnregisterHost before the memory is unmapped. (A registration that
// outlives its mapping makes the driver refuse, or worse alias, whatever is mapped at that
// address next.)
Status RegisterHost(std::span<std::byte> region);
Status UnregisterHost(std::span<std::byte> region);
bool IsRegistered(const void* p, size_t n);

// Page-locked host memory allocated for the device (cudaHostAlloc).
class PinnedBuffer {
 public:
  static Result<std::unique_ptr<PinnedBuffer>> Create(size_t bytes);
  ~PinnedBuffer();
  std::span<std::byte> data() const { return {data_, size_}; }

 private:
  PinnedBuffer(std::byte* d, size_t n) : data_(d), size_(n) {}
  std::byte* data_;
  size_t size_;
};

// A CUDA event: completion of work enqueued on a stream.
class Event {
 public:
  static Result<std::unique_ptr<Event>> Create();
  ~Event();
  Status Record(void* stream);
  bool Ready() const;
  Status Synchronize() const;                   // the host waits
  Status StreamWait(void* stream);              // `stream` waits, the host does not
  float MillisSince(const Event& start) const;  // both recorded and complete

 private:
  explicit Event(void* e) : e_(e) {}
  void* e_;
};

class Mover {
 public:
  static Result<std::unique_ptr<Mover>> Create(const PagedLayout& layout);
  ~Mover();
  const PagedLayout& layout() const;

  // Host -> GPU: each block's parts for `layers` into its slot. One kernel on `stream`;
  // returns once it is enqueued (the host memory must stay put until the stream passes it).
  Status ToGpu(std::span<const HostBlock> blocks, LayerRange layers, void* stream);
  // GPU -> host: each slot's parts for `layers` into the block's memory.
  Status ToHost(std::span<const HostBlock> blocks, LayerRange layers, void* stream);

  struct Stats {
    uint64_t launches = 0, blocks = 0, bytes = 0, staged_blocks = 0;
  };
  Stats stats() const;

  class Impl;

 private:
  explicit Mover(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvpool::gpu

#endif  // KVPOOL_GPU_H_
