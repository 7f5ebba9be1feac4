// The move kernel: scattered KV chunks between pinned host memory and a paged GPU cache in
// one launch. Each thread block copies up to kPiece bytes of one chunk with 16-byte accesses,
// four in flight per thread: reads of host memory cross PCIe, and many outstanding reads are
// what fills the link (one cudaMemcpyAsync per block left 80% of it idle).
#include <algorithm>

#include "gpu/kernels.h"

namespace kvpool::gpu {
namespace {

constexpr uint32_t kThreads = 256;
constexpr uint64_t kPiece = 64 << 10;  // bytes per thread block
constexpr int kUnroll = 4;
constexpr unsigned kBlocksPerSm = 4;

// Copies one piece: up to kPiece bytes of one (block, layer, part) chunk.
__device__ void MovePiece(const MoveArgs& a, uint64_t unit, uint64_t pieces) {
  const uint64_t chunk_id = unit / pieces;  // (block, layer, part) flattened
  const uint32_t per_block = a.layers * a.parts;
  const uint64_t b = chunk_id / per_block;
  const uint32_t r = static_cast<uint32_t>(chunk_id % per_block);
  const uint32_t layer = r / a.parts, part = r % a.parts;
  const MoveDesc d = a.descs[b];
  const uint64_t begin = (unit % pieces) * kPiece;
  if (begin >= a.chunk_bytes) return;
  const uint64_t n = min(kPiece, a.chunk_bytes - begin);
  char* host = reinterpret_cast<char*>(d.host) +
               (uint64_t(a.host_first_layer + layer) * a.parts + part) * a.chunk_bytes + begin;
  char* dev = reinterpret_cast<char*>(a.bases[(a.first_layer + layer) * a.parts + part]) +
              d.slot * a.slot_stride + begin;
  const char* src = a.to_gpu ? host : dev;
  char* dst = a.to_gpu ? dev : host;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | n) & 15) == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* t = reinterpret_cast<uint4*>(dst);
    const uint64_t words = n / 16;
    uint64_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * kThreads < words; i += kUnroll * kThreads) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = s[i + u * kThreads];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) t[i + u * kThreads] = v[u];
    }
    for (; i < words; i += kThreads) t[i] = s[i];
  } else {
    for (uint64_t i = threadIdx.x; i < n; i += kThreads) dst[i] = src[i];
  }
}

// A bounded grid walks the pieces: a move waits on PCIe, and a grid of one thread block per
// piece would hold every SM for the whole transfer, starving the engine's kernels on other
// streams (a layer-wise load overlapped with compute gained nothing). A few blocks per SM
// keep ~4 MB of reads in flight, more than the link needs.
__global__ void MoveKernel(MoveArgs a, uint64_t units, uint64_t pieces) {
  for (uint64_t u = blockIdx.x; u < units; u += gridDim.x) MovePiece(a, u, pieces);
}

unsigned MaxBlocks() {
  static const unsigned n = [] {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 32;
    return static_cast<unsigned>(sms) * kBlocksPerSm;
  }();
  return n;
}

}  // namespace

cudaError_t LaunchMove(const MoveArgs& args, cudaStream_t stream) {
  if (args.count == 0 || args.layers == 0 || args.chunk_bytes == 0) return cudaSuccess;
  const uint64_t chunks = uint64_t(args.count) * args.layers * args.parts;
  const uint64_t pieces = (args.chunk_bytes + kPiece - 1) / kPiece;
  const uint64_t units = chunks * pieces;
  const unsigned grid = static_cast<unsigned>(std::min<uint64_t>(units, MaxBlocks()));
  MoveKernel<<<grid, kThreads, 0, stream>>>(args, units, pieces);
  return cudaGetLastError();
}

}  // namespace kvpool::gpu
