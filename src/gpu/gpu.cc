// The GPU module on the CUDA runtime: registered host regions, pinned buffers, events and
// the mover (descriptors, staging of unregistered blocks, one kernel launch per batch).
#include "kvpool/gpu.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "gpu/kernels.h"

namespace kvpool::gpu {
namespace {

// A failed call leaves its error as the runtime's "last error", where the next library to
// ask (torch checks after each launch) would take it for its own: clear it here.
Status CudaError(cudaError_t e, const char* what) {
  (void)cudaGetLastError();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

// Registered regions by host start: [start, start + size) -> the device address of start.
struct Registry {
  Mutex mu;
  std::map<uintptr_t, std::pair<size_t, uintptr_t>> regions GUARDED_BY(mu);

  void Add(const void* p, size_t n, const void* dev) {
    MutexLock lock(mu);
    regions[reinterpret_cast<uintptr_t>(p)] = {n, reinterpret_cast<uintptr_t>(dev)};
  }
  void Remove(const void* p) {
    MutexLock lock(mu);
    regions.erase(reinterpret_cast<uintptr_t>(p));
  }
  bool Exactly(const void* p, size_t n) {
    MutexLock lock(mu);
    auto it = regions.find(reinterpret_cast<uintptr_t>(p));
    return it != regions.end() && it->second.first == n;
  }
  // The device address of [p, p + n) if it lies in one registered region, else 0.
  uintptr_t Translate(const void* p, size_t n) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    MutexLock lock(mu);
    auto it = regions.upper_bound(a);
    if (it == regions.begin()) return 0;
    --it;
    const auto [size, dev] = it->second;
    if (a - it->first > size || n > size - (a - it->first)) return 0;
    return dev + (a - it->first);
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: regions outlive static destructors
  return *r;
}

const Status& DeviceStatus() {
  static const Status s = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
      return Status::Unavailable(std::string("no CUDA device: ") + cudaGetErrorString(e));
    if (n == 0) return Status::Unavailable("no CUDA device");
    return Status::Ok();
  }();
  return s;
}

// The device address of host memory the kernel may read directly: a registered region, or
// memory some other library pinned (torch's pinned tensors); 0 when it must be staged.
uintptr_t DeviceAddress(const void* p, size_t n) {
  if (uintptr_t d = registry().Translate(p, n)) return d;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error state of this query
    return 0;
  }
  if (attr.type != cudaMemoryTypeHost || attr.devicePointer == nullptr) return 0;
  // Foreign pinned memory: assume the allocation covers [p, p + n) (the caller's buffer).
  return reinterpret_cast<uintptr_t>(attr.devicePointer);
}

}  // namespace

Status Available() { return DeviceStatus(); }

std::string DeviceInfo() {
  if (!DeviceStatus().ok()) return "";
  int dev = 0, driver = 0, runtime = 0;
  cudaDeviceProp prop{};
  (void)cudaGetDevice(&dev);
  (void)cudaGetDeviceProperties(&prop, dev);
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  return std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) +
         " SMs, driver " + std::to_string(driver) + ", runtime " + std::to_string(runtime);
}

Status RegisterHost(std::span<std::byte> region) {
  if (Status s = DeviceStatus(); !s.ok()) return s;
  if (region.empty()) return Status::InvalidArgument("empty region");
  if (registry().Exactly(region.data(), region.size())) return Status::Ok();
  cudaError_t e = cudaHostRegister(region.data(), region.size(),
                                   cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (e != cudaSuccess) return CudaError(e, "cudaHostRegister");
  void* dev = nullptr;
  if ((e = cudaHostGetDevicePointer(&dev, region.data(), 0)) != cudaSuccess)
    return CudaError(e, "cudaHostGetDevicePointer");
  registry().Add(region.data(), region.size(), dev);
  return Status::Ok();
}

Status UnregisterHost(std::span<std::byte> region) {
  if (Status s = DeviceStatus(); !s.ok()) return s;
  if (!registry().Exactly(region.data(), region.size()))
    return Status::InvalidArgument("region was not registered");
  registry().Remove(region.data());
  cudaError_t e = cudaHostUnregister(region.data());
  return e == cudaSuccess ? Status::Ok() : CudaError(e, "cudaHostUnregister");
}

bool IsRegistered(const void* p, size_t n) { return registry().Translate(p, n) != 0; }

Result<std::unique_ptr<PinnedBuffer>> PinnedBuffer::Create(size_t bytes) {
  if (Status s = DeviceStatus(); !s.ok()) return s;
  void* p = nullptr;
  cudaError_t e =
      cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable | cudaHostAllocMapped);
  if (e != cudaSuccess) return CudaError(e, "cudaHostAlloc");
  void* dev = nullptr;
  if ((e = cudaHostGetDevicePointer(&dev, p, 0)) != cudaSuccess) {
    cudaFreeHost(p);
    return CudaError(e, "cudaHostGetDevicePointer");
  }
  registry().Add(p, bytes, dev);
  return std::unique_ptr<PinnedBuffer>(new PinnedBuffer(static_cast<std::byte*>(p), bytes));
}

PinnedBuffer::~PinnedBuffer() {
  registry().Remove(data_);
  cudaFreeHost(data_);
}

Result<std::unique_ptr<Event>> Event::Create() {
  if (Status s = DeviceStatus(); !s.ok()) return s;
  cudaEvent_t e;
  // Blocking sync: a waiting host thread sleeps. Spinning ones (the default) took the cores
  // kvpoold needed to serve the same load (8 loader threads spinning on one host).
  cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventBlockingSync);
  if (err != cudaSuccess) return CudaError(err, "cudaEventCreate");
  return std::unique_ptr<Event>(new Event(e));
}

Event::~Event() { cudaEventDestroy(static_cast<cudaEvent_t>(e_)); }

Status Event::Record(void* stream) {
  cudaError_t e = cudaEventRecord(static_cast<cudaEvent_t>(e_), static_cast<cudaStream_t>(stream));
  return e == cudaSuccess ? Status::Ok() : CudaError(e, "cudaEventRecord");
}

bool Event::Ready() const {
  return cudaEventQuery(static_cast<cudaEvent_t>(e_)) != cudaErrorNotReady;
}

Status Event::Synchronize() const {
  cudaError_t e = cudaEventSynchronize(static_cast<cudaEvent_t>(e_));
  return e == cudaSuccess ? Status::Ok() : CudaError(e, "cudaEventSynchronize");
}

Status Event::StreamWait(void* stream) {
  cudaError_t e =
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(e_), 0);
  return e == cudaSuccess ? Status::Ok() : CudaError(e, "cudaStreamWaitEvent");
}

float Event::MillisSince(const Event& start) const {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.e_), static_cast<cudaEvent_t>(e_)) !=
      cudaSuccess)
    return -1;
  return ms;
}

// A launch's resources: descriptors (pinned, copied to the device on the stream) and the
// staging area of blocks outside registered memory; reused once its event has passed.
struct Launch {
  MoveDesc* host_descs = nullptr;
  MoveDesc* dev_descs = nullptr;
  size_t desc_cap = 0;
  std::byte* staging = nullptr;
  size_t staging_cap = 0;
  cudaEvent_t done = nullptr;

  ~Launch() {
    if (done) cudaEventSynchronize(done), cudaEventDestroy(done);
    cudaFreeHost(host_descs);
    cudaFree(dev_descs);
    cudaFreeHost(staging);
  }
  Status Reserve(size_t descs, size_t staging_bytes) {
    cudaError_t e;
    if (descs > desc_cap) {
      cudaFreeHost(host_descs);
      cudaFree(dev_descs);
      host_descs = dev_descs = nullptr;
      desc_cap = std::max<size_t>(descs, 2 * desc_cap);
      if ((e = cudaHostAlloc(&host_descs, desc_cap * sizeof(MoveDesc), 0)) != cudaSuccess ||
          (e = cudaMalloc(&dev_descs, desc_cap * sizeof(MoveDesc))) != cudaSuccess) {
        desc_cap = 0;
        return CudaError(e, "descriptor buffers");
      }
    }
    if (staging_bytes > staging_cap) {
      cudaFreeHost(staging);
      staging = nullptr;
      staging_cap = std::max(staging_bytes, 2 * staging_cap);
      if ((e = cudaHostAlloc(&staging, staging_cap, cudaHostAllocMapped)) != cudaSuccess) {
        staging_cap = 0;
        return CudaError(e, "staging buffer");
      }
    }
    return Status::Ok();
  }
};

class Mover::Impl {
 public:
  PagedLayout layout;
  uint64_t* dev_bases = nullptr;
  std::vector<std::unique_ptr<Launch>> launches;
  Stats stats;

  ~Impl() {
    launches.clear();  // waits for each launch's event
    cudaFree(dev_bases);
  }

  Result<Launch*> FreeLaunch() {
    for (auto& l : launches)
      if (cudaEventQuery(l->done) == cudaSuccess) return l.get();
    auto l = std::make_unique<Launch>();
    cudaError_t e =
        cudaEventCreateWithFlags(&l->done, cudaEventDisableTiming | cudaEventBlockingSync);
    if (e != cudaSuccess) return CudaError(e, "cudaEventCreate");
    launches.push_back(std::move(l));
    return launches.back().get();
  }

  Status Move(std::span<const HostBlock> blocks, LayerRange range, void* stream, bool to_gpu) {
    if (range.first >= layout.layers())
      return Status::InvalidArgument("layer " + std::to_string(range.first) + " of a " +
                                     std::to_string(layout.layers()) + "-layer layout");
    const uint32_t count = range.count ? range.count : layout.layers() - range.first;
    if (count > layout.layers() - range.first)
      return Status::InvalidArgument("layer range past the layout's last layer");
    if (blocks.empty()) return Status::Ok();
    const uint64_t block_bytes = layout.HostBytes(range.whole_blocks ? layout.layers() : count);
    std::vector<uint32_t> staged;
    std::vector<uintptr_t> dev(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i].slot >= layout.num_slots)
        return Status::InvalidArgument("slot " + std::to_string(blocks[i].slot) + " of " +
                                       std::to_string(layout.num_slots));
      if (blocks[i].data == nullptr) return Status::InvalidArgument("a block without memory");
      dev[i] = DeviceAddress(blocks[i].data, block_bytes);
      if (dev[i] == 0) staged.push_back(static_cast<uint32_t>(i));
    }
    auto lr = FreeLaunch();
    if (!lr.ok()) return lr.status();
    Launch* l = *lr;
    // Staged blocks carry only the moved layers: part_off is where they start in the block,
    // and each descriptor points part_off before its staging slot, so the kernel's offsets
    // (which count from the block's start) land inside it.
    const uint64_t part_bytes = layout.HostBytes(count);
    const uint64_t part_off = range.whole_blocks ? layout.HostBytes(range.first) : 0;
    if (Status s = l->Reserve(blocks.size(), staged.size() * part_bytes); !s.ok()) return s;
    void* staging_dev = nullptr;
    if (!staged.empty()) {
      cudaError_t e = cudaHostGetDevicePointer(&staging_dev, l->staging, 0);
      if (e != cudaSuccess) return CudaError(e, "cudaHostGetDevicePointer");
    }
    for (size_t k = 0; k < staged.size(); ++k) {
      const uint32_t i = staged[k];
      if (to_gpu) std::memcpy(l->staging + k * part_bytes, blocks[i].data + part_off, part_bytes);
      dev[i] = reinterpret_cast<uintptr_t>(staging_dev) + k * part_bytes - part_off;
    }
    for (size_t i = 0; i < blocks.size(); ++i) l->host_descs[i] = {dev[i], blocks[i].slot};
    auto s = static_cast<cudaStream_t>(stream);
    cudaError_t e = cudaMemcpyAsync(l->dev_descs, l->host_descs, blocks.size() * sizeof(MoveDesc),
                                    cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess) return CudaError(e, "descriptor copy");
    MoveArgs a{
        l->dev_descs,       dev_bases, static_cast<uint32_t>(blocks.size()),  layout.parts(),
        range.first,        count,     range.whole_blocks ? range.first : 0u, layout.slot_stride,
        layout.chunk_bytes, to_gpu};
    if ((e = LaunchMove(a, s)) != cudaSuccess) return CudaError(e, "move kernel launch");
    if ((e = cudaEventRecord(l->done, s)) != cudaSuccess) return CudaError(e, "cudaEventRecord");
    if (!to_gpu && !staged.empty()) {
      // The caller's memory is not device-visible: wait, then copy out of the staging area.
      if ((e = cudaEventSynchronize(l->done)) != cudaSuccess) return CudaError(e, "move");
      for (size_t k = 0; k < staged.size(); ++k)
        std::memcpy(blocks[staged[k]].data + part_off, l->staging + k * part_bytes, part_bytes);
    }
    stats.launches++;
    stats.blocks += blocks.size();
    stats.bytes += blocks.size() * part_bytes;
    stats.staged_blocks += staged.size();
    return Status::Ok();
  }
};

Result<std::unique_ptr<Mover>> Mover::Create(const PagedLayout& layout) {
  if (Status s = DeviceStatus(); !s.ok()) return s;
  if (Status s = layout.Validate(); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->layout = layout;
  std::vector<uint64_t> bases;
  for (uint32_t l = 0; l < layout.layers(); ++l) {
    bases.push_back(layout.k_bases[l]);
    if (layout.parts() == 2) bases.push_back(layout.v_bases[l]);
  }
  cudaError_t e = cudaMalloc(&impl->dev_bases, bases.size() * sizeof(uint64_t));
  if (e != cudaSuccess) return CudaError(e, "cudaMalloc");
  e = cudaMemcpy(impl->dev_bases, bases.data(), bases.size() * sizeof(uint64_t),
                 cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpy");
  return std::unique_ptr<Mover>(new Mover(std::move(impl)));
}

Mover::Mover(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mover::~Mover() = default;
const PagedLayout& Mover::layout() const { return impl_->layout; }
Status Mover::ToGpu(std::span<const HostBlock> blocks, LayerRange layers, void* stream) {
  return impl_->Move(blocks, layers, stream, true);
}
Status Mover::ToHost(std::span<const HostBlock> blocks, LayerRange layers, void* stream) {
  return impl_->Move(blocks, layers, stream, false);
}
Mover::Stats Mover::stats() const { return impl_->stats; }

}  // namespace kvpool::gpu
