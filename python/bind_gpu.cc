// kvpool.gpu: KV blocks between kvpool and an engine's paged KV cache in GPU memory. Tensors
// come in by DLPack (torch CUDA tensors, bf16 included) or __cuda_array_interface__; a CPU
// tensor where a CUDA one is needed, or a call on a host without a GPU, raises with the
// reason (never a crash). Streams: None (the legacy default stream), an int handle, or an
// object with .cuda_stream (torch.cuda.Stream).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "binding.h"
#include "kvpool/gpu.h"
#include "kvpool/gpu_loader.h"

namespace kvpool_py {
namespace {

using kvpool::gpu::Event;
using kvpool::gpu::LayerRange;
using kvpool::gpu::Loader;
using kvpool::gpu::PagedLayout;

// A CUDA tensor's memory: address, shape, element size. `keep` holds the DLPack capsule
// (and with it the tensor) for as long as the description lives.
struct CudaTensor {
  uint64_t ptr = 0;
  std::vector<int64_t> shape;
  uint64_t itemsize = 0;
  py::object keep;

  uint64_t elements(size_t from = 0) const {
    uint64_t n = 1;
    for (size_t d = from; d < shape.size(); ++d) n *= uint64_t(shape[d]);
    return n;
  }
};

CudaTensor FromDlpack(const py::object& capsule_obj) {
  CudaTensor t;
  t.keep = capsule_obj;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule_obj.ptr(), "dltensor"));
  if (!m) throw py::value_error("invalid DLPack capsule");
  const DLTensor& d = m->dl_tensor;
  if (d.device.device_type != kDLCUDA && d.device.device_type != kDLCUDAManaged)
    throw py::value_error("not a CUDA tensor (DLPack device type " +
                          std::to_string(int(d.device.device_type)) +
                          "): the paged KV cache must be in GPU memory");
  if (d.dtype.bits % 8 != 0) throw py::value_error("sub-byte element types are not supported");
  t.itemsize = uint64_t(d.dtype.bits / 8) * d.dtype.lanes;
  uint64_t expect = 1;
  for (int i = d.ndim - 1; i >= 0; --i) {
    if (d.strides && d.shape[i] > 1 && uint64_t(d.strides[i]) != expect)
      throw py::value_error("the KV cache tensor must be contiguous");
    expect *= uint64_t(d.shape[i]);
  }
  t.shape.assign(d.shape, d.shape + d.ndim);
  t.ptr = reinterpret_cast<uint64_t>(d.data) + d.byte_offset;
  return t;
}

CudaTensor ToCudaTensor(const py::handle& obj) {
  if (PyCapsule_IsValid(obj.ptr(), "dltensor"))
    return FromDlpack(py::reinterpret_borrow<py::object>(obj));
  if (py::hasattr(obj, "__dlpack__")) {
    if (py::hasattr(obj, "__dlpack_device__")) {
      auto dev = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
      if (dev.first != kDLCUDA && dev.first != kDLCUDAManaged)
        throw py::value_error("not a CUDA tensor (DLPack device type " + std::to_string(dev.first) +
                              "): the paged KV cache must be in GPU memory");
    }
    return FromDlpack(obj.attr("__dlpack__")());
  }
  if (py::hasattr(obj, "__cuda_array_interface__")) {
    py::dict cai = obj.attr("__cuda_array_interface__");
    CudaTensor t;
    t.keep = py::reinterpret_borrow<py::object>(obj);
    t.ptr = cai["data"].cast<py::tuple>()[0].cast<uint64_t>();
    for (const py::handle& d : cai["shape"]) t.shape.push_back(d.cast<int64_t>());
    std::string ts = cai["typestr"].cast<std::string>();
    t.itemsize = std::stoull(ts.substr(2));
    if (cai.contains("strides") && !cai["strides"].is_none()) {
      uint64_t expect = t.itemsize;
      auto strides = cai["strides"].cast<std::vector<int64_t>>();
      for (int i = int(t.shape.size()) - 1; i >= 0; --i) {
        if (t.shape[i] > 1 && uint64_t(strides[i]) != expect)
          throw py::value_error("the KV cache tensor must be contiguous");
        expect *= uint64_t(t.shape[i]);
      }
    }
    return t;
  }
  throw py::value_error("expected a CUDA tensor (DLPack or __cuda_array_interface__)");
}

// A PagedLayout and the tensors it points into (kept alive with it).
struct GpuLayout {
  PagedLayout layout;
  std::vector<CudaTensor> tensors;
};

void Validate(const GpuLayout& g) {
  Status s = g.layout.Validate();
  if (!s.ok()) throw py::value_error(s.ToString());
}

GpuLayout Vllm(const py::iterable& kv_caches) {
  GpuLayout g;
  std::vector<uint64_t> ptrs;
  for (const py::handle& h : kv_caches) {
    CudaTensor t = ToCudaTensor(h);
    if (t.shape.size() < 3 || t.shape[0] != 2)
      throw py::value_error("a vLLM layer cache is [2][num_blocks][block_size][heads][dim]");
    if (!g.tensors.empty() && t.shape != g.tensors[0].shape)
      throw py::value_error("every layer's cache must have the same shape");
    ptrs.push_back(t.ptr);
    g.tensors.push_back(std::move(t));
  }
  if (g.tensors.empty()) throw py::value_error("no layers");
  const CudaTensor& t0 = g.tensors[0];
  g.layout = PagedLayout::Vllm(ptrs, uint32_t(t0.shape[1]), t0.elements(2) * t0.itemsize);
  Validate(g);
  return g;
}

GpuLayout Split(const py::iterable& k_buffers, const py::object& v_buffers, uint64_t page_size) {
  if (page_size == 0) throw py::value_error("page_size must be > 0");
  GpuLayout g;
  std::vector<uint64_t> k, v;
  uint64_t tokens = 0, token_bytes = 0;
  auto add = [&](const py::handle& h, std::vector<uint64_t>& out) {
    CudaTensor t = ToCudaTensor(h);
    if (t.shape.empty()) throw py::value_error("a KV buffer is [tokens][heads][dim]");
    uint64_t tb = t.elements(1) * t.itemsize;
    if (token_bytes && (tb != token_bytes || uint64_t(t.shape[0]) != tokens))
      throw py::value_error("every K and V buffer must have the same shape");
    token_bytes = tb;
    tokens = uint64_t(t.shape[0]);
    out.push_back(t.ptr);
    g.tensors.push_back(std::move(t));
  };
  for (const py::handle& h : k_buffers) add(h, k);
  if (!v_buffers.is_none())
    for (const py::handle& h : v_buffers) add(h, v);
  if (tokens < page_size) throw py::value_error("buffers hold fewer tokens than one page");
  g.layout = PagedLayout::Split(k, v, page_size * token_bytes, uint32_t(tokens / page_size));
  Validate(g);
  return g;
}

GpuLayout CrossLayer(const py::handle& tensor) {
  GpuLayout g;
  CudaTensor t = ToCudaTensor(tensor);
  if (t.shape.size() < 4 || t.shape[2] != 2)
    throw py::value_error("a cross-layer cache is [num_blocks][layers][2][block_size][heads][dim]");
  g.layout = PagedLayout::CrossLayer(t.ptr, uint32_t(t.shape[0]), uint32_t(t.shape[1]),
                                     t.elements(3) * t.itemsize);
  g.tensors.push_back(std::move(t));
  Validate(g);
  return g;
}

void* ToStream(const py::object& s) {
  if (s.is_none()) return nullptr;
  if (py::hasattr(s, "cuda_stream"))
    return reinterpret_cast<void*>(s.attr("cuda_stream").cast<uintptr_t>());
  return reinterpret_cast<void*>(s.cast<uintptr_t>());
}

LayerRange ToRange(const py::object& layers) {
  if (layers.is_none()) return {};
  auto t = layers.cast<std::pair<uint32_t, uint32_t>>();
  return LayerRange{t.first, t.second};
}

std::vector<uint32_t> ToSlots(const py::iterable& slots) {
  std::vector<uint32_t> out;
  for (const py::handle& h : slots) out.push_back(h.cast<uint32_t>());
  return out;
}

std::vector<std::string> Names(const std::vector<Status>& st) {
  std::vector<std::string> out;
  for (const Status& s : st) out.push_back(CodeString(s));
  return out;
}

void CheckGpu(const Status& s) {
  if (s.code() == Code::kUnavailable) throw std::runtime_error(s.ToString());
  Check(s);
}

struct PyLoader {
  std::shared_ptr<GpuLayout> layout;
  // Stores and near caches whose blocks loads in flight still read (their views): kept
  // alive until synchronize(). Declared before `loader`, so the loader (which waits for
  // its loads) is destroyed first.
  std::vector<py::object> sources;
  std::vector<py::object> prestaging;  // near caches prestaged from: alive while the loader is
  std::unique_ptr<Loader> loader;

  void Hold(const py::object& source) {
    if (sources.size() >= 16) (void)Sync();  // bounded: an engine that never synchronizes
    sources.push_back(source);
  }
  Status Sync() {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = loader->Synchronize();
    }
    sources.clear();
    return s;
  }
};

// Registers a source's or target's memory with the GPU while its face lives (kvpool.gpu.register
// raises on failure; loads and saves go on without, staging).
Status Prepare(const py::handle& obj) {
  if (py::isinstance<StoreFace>(obj)) {
    StoreFace& f = obj.cast<StoreFace&>();
    return f.gpu.Ensure(f.s->DramMemory());
  }
  if (py::isinstance<NearFace>(obj)) {
    NearFace& f = obj.cast<NearFace&>();
    return f.gpu.Ensure(f.n->local().DramMemory());
  }
  if (py::isinstance<ClientFace>(obj)) {
    ClientFace& f = obj.cast<ClientFace&>();
    if (!f.c->connected()) {
      py::gil_scoped_release nogil;
      (void)f.c->Ping();  // the same-host region is mapped at connect
    }
    return f.gpu.Ensure(f.c->shared_memory());
  }
  return Status::InvalidArgument("a kvpool.Store, NearCache or Client");
}

std::vector<std::string> Load(PyLoader& l, const py::object& source, const py::iterable& keys,
                              const py::iterable& slots, const py::object& layers,
                              const py::object& stream, int timeout_ms) {
  std::vector<BlockKey> ks = ToKeys(keys);
  std::vector<uint32_t> ss = ToSlots(slots);
  if (ks.size() != ss.size()) throw py::value_error("keys and slots differ in length");
  std::vector<Status> out(ks.size());
  LayerRange range = ToRange(layers);
  void* st = ToStream(stream);
  Deadline d = timeout_ms > 0 ? Deadline::After(std::chrono::milliseconds(timeout_ms)) : Deadline{};
  Status s;
  l.Hold(source);  // loads in flight read its memory
  if (py::isinstance<py::list>(source) || py::isinstance<py::tuple>(source)) {
    for (const py::handle& h : source) (void)Prepare(h);
  } else {
    (void)Prepare(source);
  }
  if (py::isinstance<StoreFace>(source)) {
    Store& store = *source.cast<StoreFace&>().s;
    py::gil_scoped_release nogil;
    s = l.loader->Load(store, ks, ss, range, st, out);
  } else if (py::isinstance<NearFace>(source)) {
    NearCache& near = *source.cast<NearFace&>().n;
    py::gil_scoped_release nogil;
    s = l.loader->Load(near, ks, ss, range, st, out, d);
  } else {
    std::vector<Client*> clients;
    if (py::isinstance<ClientFace>(source)) {
      clients.push_back(source.cast<ClientFace&>().c);
    } else if (py::isinstance<py::list>(source) || py::isinstance<py::tuple>(source)) {
      for (const py::handle& h : source) {
        if (!py::isinstance<ClientFace>(h))
          throw py::value_error("a list of sources must hold kvpool.Client objects");
        clients.push_back(h.cast<ClientFace&>().c);
      }
    } else {
      throw py::value_error("source: a kvpool.Store, NearCache, Client or list of Clients");
    }
    py::gil_scoped_release nogil;
    s = l.loader->Load(clients, ks, ss, range, st, out, d);
  }
  CheckGpu(s);
  return Names(out);
}

std::vector<std::string> Save(PyLoader& l, const py::object& target, const py::iterable& keys,
                              const py::iterable& slots, const py::object& parents,
                              const py::object& layers, const py::object& stream) {
  std::vector<BlockKey> ks = ToKeys(keys);
  std::vector<uint32_t> ss = ToSlots(slots);
  if (ks.size() != ss.size()) throw py::value_error("keys and slots differ in length");
  std::vector<BlockKey> ps;
  if (!parents.is_none())
    for (const py::handle& h : parents) ps.push_back(h.is_none() ? BlockKey{} : ToKey(h));
  std::vector<Status> out(ks.size());
  LayerRange range = ToRange(layers);
  void* st = ToStream(stream);
  (void)Prepare(target);
  Status s;
  if (py::isinstance<StoreFace>(target)) {
    Store& store = *target.cast<StoreFace&>().s;
    py::gil_scoped_release nogil;
    s = l.loader->Save(store, ks, ps, ss, range, st, out);
  } else if (py::isinstance<NearFace>(target)) {
    Store& store = target.cast<NearFace&>().n->local();
    py::gil_scoped_release nogil;
    s = l.loader->Save(store, ks, ps, ss, range, st, out);
  } else if (py::isinstance<ClientFace>(target)) {
    l.Hold(target);
    Client& c = *target.cast<ClientFace&>().c;
    py::gil_scoped_release nogil;
    s = l.loader->Save(c, ks, ps, ss, range, st, out);
  } else {
    throw py::value_error("target: a kvpool.Store, NearCache or Client");
  }
  CheckGpu(s);
  return Names(out);
}

// n events for a layer-by-layer load: the Python objects and the pointers the loader takes.
std::pair<std::vector<std::shared_ptr<Event>>, std::vector<Event*>> MakeEvents(size_t n) {
  std::vector<std::shared_ptr<Event>> events;
  std::vector<Event*> raw;
  for (size_t i = 0; i < n; ++i) {
    auto e = Event::Create();
    CheckGpu(e.status());
    events.push_back(std::shared_ptr<Event>(std::move(e).value()));
    raw.push_back(events.back().get());
  }
  return {std::move(events), std::move(raw)};
}

// A Python on_layer(i), called on the loader's thread (which holds no GIL): takes the GIL,
// and keeps the first exception to raise once the loader has returned (an exception never
// unwinds through the loader; later layers are still moved, not computed).
struct LayerCallback {
  py::object fn;
  std::unique_ptr<py::error_already_set> raised;

  std::function<void(size_t)> Get() {
    if (fn.is_none()) return {};
    return [this](size_t i) {
      py::gil_scoped_acquire gil;
      if (raised) return;
      try {
        fn(i);
      } catch (py::error_already_set& e) {
        raised = std::make_unique<py::error_already_set>(std::move(e));
      }
    };
  }
  void Rethrow() {
    if (raised) throw std::move(*raised);
  }
};

}  // namespace

void BindGpu(py::module_& root) {
  py::module_ m = root.def_submodule(
      "gpu", "KV blocks between kvpool and a paged KV cache in GPU memory (one kernel per batch).");
  m.def(
      "available",
      [] {
        Status s = kvpool::gpu::Available();
        return py::make_tuple(s.ok(), s.ok() ? kvpool::gpu::DeviceInfo() : s.ToString());
      },
      "(True, device) when this build has CUDA and a GPU is present, else (False, reason).");
  m.def(
      "register",
      [](const py::object& obj) {
        if (py::isinstance<ClientFace>(obj) && obj.cast<ClientFace&>().c->shared_memory().empty()) {
          ClientFace& f = obj.cast<ClientFace&>();
          if (!f.c->connected()) (void)f.c->Ping();
          if (f.c->shared_memory().empty())
            throw py::value_error(
                "this client has no same-host region to register (unix: "
                "address and shared_memory_bytes > 0)");
        }
        CheckGpu(Prepare(obj));
      },
      py::arg("obj"),
      "Page-locks a Store's or NearCache's DRAM, or a Client's same-host region, for the GPU "
      "(until the object is gone), so blocks move from it without staging. Loads and saves "
      "do this on first use; call it ahead to keep its cost (every page) off the first load.");

  py::class_<GpuLayout, std::shared_ptr<GpuLayout>>(m, "Layout", "A paged KV cache in GPU memory.")
      .def_static(
          "vllm", [](const py::iterable& t) { return std::make_shared<GpuLayout>(Vllm(t)); },
          py::arg("kv_caches"),
          "vLLM's per-layer caches, each [2][num_blocks][block_size][kv_heads][head_dim]; a "
          "slot is a block id.")
      .def_static(
          "split",
          [](const py::iterable& k, const py::object& v, uint64_t page) {
            return std::make_shared<GpuLayout>(Split(k, v, page));
          },
          py::arg("k_buffers"), py::arg("v_buffers"), py::arg("page_size"),
          "SGLang's MHA pool: per layer a K and a V buffer [tokens][heads][dim]; a slot is a "
          "page of page_size tokens (v_buffers None: K only, as MLA).")
      .def_static(
          "cross_layer",
          [](const py::handle& t) { return std::make_shared<GpuLayout>(CrossLayer(t)); },
          py::arg("cache"), "One tensor [num_blocks][layers][2][block_size][heads][dim].")
      .def_property_readonly("layers", [](const GpuLayout& g) { return g.layout.layers(); })
      .def_property_readonly("num_slots", [](const GpuLayout& g) { return g.layout.num_slots; })
      .def_property_readonly("chunk_bytes", [](const GpuLayout& g) { return g.layout.chunk_bytes; })
      .def(
          "block_bytes",
          [](const GpuLayout& g, uint32_t layers) {
            return g.layout.HostBytes(layers ? layers : g.layout.layers());
          },
          py::arg("layers") = 0,
          "Bytes of a kvpool block covering `layers` layers (0: all): [layer][k, v][chunk].");

  py::class_<Event, std::shared_ptr<Event>>(m, "Event", "A CUDA event (a layer's arrival).")
      .def("ready", &Event::Ready)
      .def("synchronize",
           [](Event& e) {
             Status s;
             {
               py::gil_scoped_release nogil;
               s = e.Synchronize();
             }
             CheckGpu(s);
           })
      .def(
          "wait",
          [](Event& e, const py::object& stream) { CheckGpu(e.StreamWait(ToStream(stream))); },
          py::arg("stream") = py::none(), "Makes `stream` wait for the event (the host does not).");

  py::class_<PyLoader>(m, "Loader",
                       "Moves kvpool blocks into (load) and out of (save) a paged GPU cache.")
      .def(py::init([](std::shared_ptr<GpuLayout> layout, uint32_t chunk_blocks) {
             kvpool::gpu::LoaderOptions o;
             o.chunk_blocks = chunk_blocks;
             auto l = Loader::Create(layout->layout, o);
             CheckGpu(l.status());
             return PyLoader{layout, {}, {}, std::move(l).value()};
           }),
           py::arg("layout"), py::arg("chunk_blocks") = 64)
      .def("load", &Load, py::arg("source"), py::arg("keys"), py::arg("slots"),
           py::arg("layers") = py::none(), py::arg("stream") = py::none(),
           py::arg("timeout_ms") = 0,
           "Enqueues the moves of keys[i] into slot slots[i] on `stream` (source: Store, "
           "NearCache, Client, or a list of Clients fetched in parallel). layers=(first, count) "
           "for a block holding only those layers. A status name per key: OK, NotFound, "
           "InvalidArgument (a block of the wrong size for the layout).")
      .def("save", &Save, py::arg("target"), py::arg("keys"), py::arg("slots"),
           py::arg("parents") = py::none(), py::arg("layers") = py::none(),
           py::arg("stream") = py::none(),
           "Stores slot slots[i] as block keys[i] (insert-only); returns once the blocks are "
           "in kvpool. A status name per key.")
      .def(
          "load_layerwise",
          [](PyLoader& l, const py::object& source, const py::iterable& keys,
             const py::iterable& slots, const py::object& stream, const py::object& on_layer) {
            Store* store = py::isinstance<StoreFace>(source)  ? source.cast<StoreFace&>().s.get()
                           : py::isinstance<NearFace>(source) ? &source.cast<NearFace&>().n->local()
                                                              : nullptr;
            if (!store) throw py::value_error("source: a kvpool.Store or NearCache");
            std::vector<BlockKey> ks = ToKeys(keys);
            std::vector<uint32_t> ss = ToSlots(slots);
            if (ks.size() != ss.size()) throw py::value_error("keys and slots differ in length");
            l.Hold(source);
            (void)Prepare(source);
            auto [events, raw] = MakeEvents(l.layout->layout.layers());
            std::vector<Status> out(ks.size());
            void* st = ToStream(stream);
            LayerCallback cb{on_layer, nullptr};
            Status s;
            {
              py::gil_scoped_release nogil;
              s = l.loader->LoadLayerwise(*store, ks, ss, st, raw, out, cb.Get());
            }
            cb.Rethrow();
            CheckGpu(s);
            return py::make_tuple(events, Names(out));
          },
          py::arg("source"), py::arg("keys"), py::arg("slots"), py::arg("stream") = py::none(),
          py::arg("on_layer") = py::none(),
          "Layer by layer from whole blocks in a Store or NearCache (prestaged): one kernel per "
          "layer on `stream`; after layer l's is enqueued, on_layer(l) is called (enqueue work "
          "that needs layer l on the same stream there, or wait on events[l] elsewhere). "
          "Returns (events, statuses).")
      .def(
          "load_layers",
          [](PyLoader& l, const py::object& client, const py::iterable& blocks,
             const py::iterable& slots, const py::iterable& layers, const py::object& stream,
             const py::object& on_layer, int timeout_ms) {
            if (!py::isinstance<ClientFace>(client)) throw py::value_error("a kvpool.Client");
            l.Hold(client);
            (void)Prepare(client);
            Client& c = *client.cast<ClientFace&>().c;
            std::vector<BlockKey> ks = ToKeys(blocks);
            std::vector<uint32_t> ss = ToSlots(slots), ls = ToSlots(layers);
            auto [events, raw] = MakeEvents(ls.size());
            std::vector<Status> out(ks.size() * ls.size());
            Deadline d = timeout_ms > 0 ? Deadline::After(std::chrono::milliseconds(timeout_ms))
                                        : Deadline{};
            void* st = ToStream(stream);
            LayerCallback cb{on_layer, nullptr};
            Status s;
            {
              py::gil_scoped_release nogil;
              s = l.loader->LoadLayers(c, ks, ss, ls, st, raw, out, cb.Get(), d);
            }
            cb.Rethrow();
            CheckGpu(s);
            return py::make_tuple(events, Names(out));
          },
          py::arg("client"), py::arg("blocks"), py::arg("slots"), py::arg("layers"),
          py::arg("stream") = py::none(), py::arg("on_layer") = py::none(),
          py::arg("timeout_ms") = 0,
          "Layer streaming into the GPU: all layers are requested at once; as layer layers[i] "
          "arrives its move is enqueued on `stream` and on_layer(i) is called, where the "
          "engine enqueues that layer's attention (it runs while later layers are still "
          "arriving). Returns (events, statuses): events[i] completes when layer layers[i] of "
          "every block is in its slot (for work on other streams).")
      .def(
          "prestage",
          [](PyLoader& l, const py::object& near, const py::iterable& keys,
             const py::iterable& slots, int timeout_ms, const py::object& stream) {
            if (!py::isinstance<NearFace>(near)) throw py::value_error("a kvpool.NearCache");
            std::vector<BlockKey> ks = ToKeys(keys);
            std::vector<uint32_t> ss = ToSlots(slots);
            if (ks.size() != ss.size()) throw py::value_error("keys and slots differ in length");
            if (std::none_of(l.prestaging.begin(), l.prestaging.end(),
                             [&](const py::object& o) { return o.is(near); }))
              l.prestaging.push_back(near);  // until the loader goes (it finishes the queue)
            (void)Prepare(near);
            Deadline d = timeout_ms > 0 ? Deadline::After(std::chrono::milliseconds(timeout_ms))
                                        : Deadline{};
            return l.loader->PrestageToGpu(*near.cast<NearFace&>().n, ks, ss, ToStream(stream), d);
          },
          py::arg("near"), py::arg("keys"), py::arg("slots"), py::arg("timeout_ms"),
          py::arg("stream") = py::none(),
          "Prestaging into GPU memory: the near cache pulls the chain in (stopping at a miss "
          "or after timeout_ms) and the loader's own thread moves the leading blocks that "
          "arrived into their slots on `stream`. Returns a ticket at once.")
      .def(
          "wait_prestaged",
          [](PyLoader& l, uint64_t ticket, int timeout_ms) {
            Deadline d = timeout_ms > 0 ? Deadline::After(std::chrono::milliseconds(timeout_ms))
                                        : Deadline{};
            Result<size_t> r = Status::Internal("unset");
            {
              py::gil_scoped_release nogil;
              r = l.loader->WaitGpuPrestage(ticket, d);
            }
            CheckGpu(r.status());
            return *r;
          },
          py::arg("ticket"), py::arg("timeout_ms") = 0,
          "Leading blocks of that prestage now in GPU memory, once it ended or timeout_ms "
          "passed (0: wait for the end). Reported once.")
      .def(
          "synchronize", [](PyLoader& l) { CheckGpu(l.Sync()); },
          "Waits until every load enqueued so far has landed; releases what they read.")
      .def("stats", [](PyLoader& l) {
        auto s = l.loader->stats();
        py::dict d;
        d["launches"] = s.launches;
        d["blocks"] = s.blocks;
        d["bytes"] = s.bytes;
        d["staged_blocks"] = s.staged_blocks;
        return d;
      });
}

}  // namespace kvpool_py
