// The GPU module in a build without CUDA: every call answers kUnavailable with the reason,
// so callers (the Python module, the CLI) report it instead of failing to link or load.
#include "kvpool/gpu.h"

namespace kvpool::gpu {
namespace {
Status NoCuda() {
  return Status::Unavailable("kvpool was built without CUDA (no nvcc, or -DKVPOOL_CUDA=OFF)");
}
}  // namespace

Status Available() { return NoCuda(); }
std::string DeviceInfo() { return ""; }
Status RegisterHost(std::span<std::byte>) { return NoCuda(); }
Status UnregisterHost(std::span<std::byte>) { return NoCuda(); }
bool IsRegistered(const void*, size_t) { return false; }
Result<std::unique_ptr<PinnedBuffer>> PinnedBuffer::Create(size_t) { return NoCuda(); }
PinnedBuffer::~PinnedBuffer() = default;
Result<std::unique_ptr<Event>> Event::Create() { return NoCuda(); }
Event::~Event() = default;
Status Event::Record(void*) { return NoCuda(); }
bool Event::Ready() const { return true; }
Status Event::Synchronize() const { return NoCuda(); }
Status Event::StreamWait(void*) { return NoCuda(); }
float Event::MillisSince(const Event&) const { return 0; }

class Mover::Impl {};
Result<std::unique_ptr<Mover>> Mover::Create(const PagedLayout&) { return NoCuda(); }
Mover::Mover(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mover::~Mover() = default;
const PagedLayout& Mover::layout() const {
  static const PagedLayout empty;
  return empty;
}
Status Mover::ToGpu(std::span<const HostBlock>, LayerRange, void*) { return NoCuda(); }
Status Mover::ToHost(std::span<const HostBlock>, LayerRange, void*) { return NoCuda(); }
Mover::Stats Mover::stats() const { return {}; }

}  // namespace kvpool::gpu
