// Helpers shared by the binding's files: keys and buffers from Python objects, and the
// Status -> exception rule (bad arguments raise ValueError; misses never raise).
#ifndef KVPOOL_PYTHON_BINDING_H_
#define KVPOOL_PYTHON_BINDING_H_

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kvpool/client.h"
#include "kvpool/gpu.h"
#include "kvpool/key.h"
#include "kvpool/near_cache.h"
#include "kvpool/pool.h"
#include "kvpool/status.h"
#include "kvpool/store.h"
#include "shared_client.h"

namespace py = pybind11;

namespace kvpool_py {
using namespace ::kvpool;

// A key from Python: a Key, a 32-digit hex string (Key.hex()), or any other str/bytes
// (hashed with KeyFromBytes, as RESP and the CLI name keys).
inline BlockKey ToKey(const py::handle& h) {
  if (py::isinstance<BlockKey>(h)) return h.cast<BlockKey>();
  if (py::isinstance<py::bytes>(h)) {
    std::string s = h.cast<std::string>();
    return KeyFromBytes(s);
  }
  if (py::isinstance<py::str>(h)) return ParseKey(h.cast<std::string>());
  throw py::value_error("a key is a kvpool.Key, str or bytes");
}

inline std::vector<BlockKey> ToKeys(const py::iterable& keys) {
  std::vector<BlockKey> out;
  for (const py::handle& h : keys) out.push_back(ToKey(h));
  return out;
}

// A contiguous buffer (read-only or writable) held for the duration of a call: the buffer
// protocol (bytes, bytearray, memoryview, numpy) or a DLPack capsule (torch and any other
// __dlpack__ producer; host memory only).
struct Buffer {
  py::buffer_info info;
  py::object keep;  // the DLPack capsule: its deleter runs when the last reference goes
  std::byte* data = nullptr;
  size_t size = 0;
  Buffer(const py::handle& obj, bool writable) {
    if (PyCapsule_IsValid(obj.ptr(), "dltensor")) {
      FromDlpack(obj);
      return;
    }
    py::buffer b = py::reinterpret_borrow<py::buffer>(obj);
    info = b.request(writable);
    if (info.ndim > 0) {
      // C-contiguous only: strides must match a dense row-major layout.
      py::ssize_t expect = info.itemsize;
      for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
        if (info.shape[d] > 1 && info.strides[d] != expect)
          throw py::value_error("buffer must be C-contiguous");
        expect *= info.shape[d];
      }
    }
    data = static_cast<std::byte*>(info.ptr);
    size = static_cast<size_t>(info.size * info.itemsize);
  }

 private:
  void FromDlpack(const py::handle& capsule) {
    keep = py::reinterpret_borrow<py::object>(capsule);
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    const DLTensor& t = m->dl_tensor;
    if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
      throw py::value_error(
          "tensor is not in host memory: load GPU tensors with kvpool.gpu.Loader (block slots of "
          "a paged cache), or copy it to (pinned) CPU memory first");
    if (t.dtype.bits % 8 != 0) throw py::value_error("sub-byte element types are not supported");
    uint64_t item = uint64_t(t.dtype.bits / 8) * t.dtype.lanes, n = 1, expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (t.strides && t.shape[d] > 1 && uint64_t(t.strides[d]) != expect)
        throw py::value_error("tensor must be contiguous");
      expect *= uint64_t(t.shape[d]);
      n *= uint64_t(t.shape[d]);
    }
    data = static_cast<std::byte*>(t.data) + t.byte_offset;
    size = n * item;
  }
};

// Anything with the buffer protocol as it is; else a DLPack capsule from __dlpack__ (torch
// tensors, CuPy pinned arrays, ...): no copies either way.
inline py::object AsBufferObject(const py::handle& obj) {
  if (PyObject_CheckBuffer(obj.ptr())) return py::reinterpret_borrow<py::object>(obj);
  if (PyCapsule_IsValid(obj.ptr(), "dltensor")) return py::reinterpret_borrow<py::object>(obj);
  if (py::hasattr(obj, "__dlpack__")) return obj.attr("__dlpack__")();
  throw py::value_error(
      "value must support the buffer protocol or DLPack (bytes, numpy, torch CPU tensor)");
}

// Connection settings from the keyword arguments every Python connection takes.
inline ClientOptions MakeClientOptions(const std::string& address, const std::string& ns,
                                       const std::string& token, int timeout_ms,
                                       uint64_t shared_memory_bytes = 0) {
  ClientOptions o;
  o.address = address;
  o.ns = ns;
  o.token = token;
  o.request_timeout_ms = timeout_ms;
  o.connect_timeout_ms = std::min(timeout_ms, 1000);
  o.shared_memory_bytes = shared_memory_bytes;
  return o;
}

// TLS settings of a Client or Pool: tls=True (or tls_ca/tls_cert given) speaks TLS 1.3.
inline void SetTls(ClientOptions& o, bool tls, const std::string& ca, const std::string& cert,
                   const std::string& key, const std::string& server_name) {
  o.tls = tls;
  o.tls_ca = ca;
  o.tls_cert = cert;
  o.tls_key = key;
  o.tls_server_name = server_name;
}

inline void Check(const Status& s) {
  if (s.ok()) return;
  if (s.code() == Code::kInvalidArgument || s.code() == Code::kTooLarge)
    throw py::value_error(s.ToString());
  throw std::runtime_error(s.ToString());
}

inline std::string CodeString(const Status& s) { return std::string(CodeName(s.code())); }

// Memory of a Store, NearCache or Client registered with the GPU (kvpool.gpu) for as long
// as its owner lives: the owner's face declares it after the owner, so it is unregistered
// before the owner unmaps the memory. Move-only.
struct GpuRegistration {
  std::span<std::byte> region;
  GpuRegistration() = default;
  GpuRegistration(GpuRegistration&& o) noexcept : region(std::exchange(o.region, {})) {}
  GpuRegistration& operator=(GpuRegistration&& o) noexcept {
    Reset();
    region = std::exchange(o.region, {});
    return *this;
  }
  ~GpuRegistration() { Reset(); }
  void Reset() {
    if (!region.empty()) (void)kvpool::gpu::UnregisterHost(region);
    region = {};
  }
  // Registers `r` (unregistering what was registered before, e.g. a reconnected client's
  // old region); a no-op when it is already the registered region.
  Status Ensure(std::span<std::byte> r) {
    if (r.empty() || (r.data() == region.data() && r.size() == region.size())) return Status::Ok();
    Reset();
    Status s = kvpool::gpu::RegisterHost(r);
    if (s.ok()) region = r;
    return s;
  }
};

// The Python classes' C++ objects (Store, Client, Pool, NearCache): each is a
// kvpool::BlockStore (bs()), which every batch call of the module goes through.
struct StoreFace {
  std::unique_ptr<Store> s;
  GpuRegistration gpu = {};
  BlockStore& bs() { return *s; }
};

struct ClientFace {
  std::unique_ptr<SharedClient> shared;  // safe to call from any Python thread
  Client* c;                             // its primary connection (hold it: shared->Primary())
  GpuRegistration gpu = {};
  BlockStore& bs() { return *shared; }
};

struct PoolFace {
  std::unique_ptr<PoolClient> c;
  BlockStore& bs() { return *c; }
};

struct NearFace {
  std::unique_ptr<NearCache> n;
  GpuRegistration gpu = {};
  BlockStore& bs() { return *n; }
};

// Defined in bind_keys.cc and bind_lmcache.cc.
void BindKeys(py::module_& m);
void BindLmcache(py::module_& m);
void BindGpu(py::module_& m);  // bind_gpu.cc: kvpool.gpu

}  // namespace kvpool_py

#endif  // KVPOOL_PYTHON_BINDING_H_
