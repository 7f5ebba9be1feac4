// The move kernel's launch interface (src/gpu/kernels.cu), shared with the mover.
#ifndef KVPOOL_GPU_KERNELS_H_
#define KVPOOL_GPU_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace kvpool::gpu {

// One block of a batch: its host address (device-visible: pinned and mapped) and its slot.
struct MoveDesc {
  uint64_t host;
  uint64_t slot;
};

struct MoveArgs {
  const MoveDesc* descs;  // device-visible, `count` entries
  const uint64_t* bases;  // device memory: [layer][part] base addresses (parts per layer)
  uint32_t count;         // blocks in the batch
  uint32_t parts;         // 1 (K only) or 2 (K, V)
  uint32_t first_layer;
  uint32_t layers;            // layers moved per block
  uint32_t host_first_layer;  // the host block's index of first_layer (0, or first_layer)
  uint64_t slot_stride;
  uint64_t chunk_bytes;
  bool to_gpu;
};

// Enqueues the batch on `stream`: one launch, every (block, layer, part) chunk a set of
// thread blocks. Returns the launch's error.
cudaError_t LaunchMove(const MoveArgs& args, cudaStream_t stream);

}  // namespace kvpool::gpu

#endif  // KVPOOL_GPU_KERNELS_H_
