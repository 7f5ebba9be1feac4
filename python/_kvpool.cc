// The kvpool Python module (pybind11): block keys, the embedded Store, the Client and the
// PoolClient. Values go in and out through the buffer protocol (bytes, bytearray, numpy
// arrays, torch CPU tensors, memoryview): a get writes straight into the caller's array,
// a put reads straight from it, no copy in between. Every call that does I/O releases the
// GIL. Misses are None / -1 / False, never exceptions; bad arguments raise ValueError.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "binding.h"
#include "kvpool/client.h"
#include "kvpool/pool.h"
#include "kvpool/store.h"

using namespace kvpool_py;

namespace {

// The shared batch logic for Store, Client and PoolClient.
template <class T>
struct Ops {
  static py::object Get(T& t, const py::handle& key, const py::object& out) {
    BlockKey k = ToKey(key);
    if (out.is_none()) {
      // Unknown size: read into a growing buffer.
      std::vector<std::byte> buf(64 << 10);
      for (int attempt = 0; attempt < 2; ++attempt) {
        GetOp op;
        op.key = k;
        op.buffer = buf;
        {
          py::gil_scoped_release nogil;
          (void)t.GetBatch(std::span<GetOp>(&op, 1));
        }
        if (op.status.ok()) return py::bytes(reinterpret_cast<const char*>(buf.data()), op.size);
        if (op.status.code() != Code::kBufferTooSmall) return py::none();
        buf.resize(op.size);
      }
      return py::none();
    }
    py::object obj = AsBufferObject(out);
    Buffer b(obj, true);
    GetOp op;
    op.key = k;
    op.buffer = {b.data, b.size};
    {
      py::gil_scoped_release nogil;
      (void)t.GetBatch(std::span<GetOp>(&op, 1));
    }
    if (op.status.code() == Code::kBufferTooSmall) {
      throw py::value_error("buffer of " + std::to_string(b.size) +
                            " bytes is smaller than the value (" + std::to_string(op.size) + ")");
    }
    return op.status.ok() ? py::object(py::int_(op.size)) : py::none();
  }

  // Returns the size of each value read, or -1 for a miss (or a buffer too small).
  static std::vector<int64_t> BatchGet(T& t, const py::iterable& keys, const py::iterable& outs) {
    std::vector<BlockKey> ks = ToKeys(keys);
    std::vector<py::object> objs;
    for (const py::handle& h : outs) objs.push_back(AsBufferObject(h));
    if (objs.size() != ks.size()) throw py::value_error("keys and buffers differ in length");
    std::vector<Buffer> bufs;
    bufs.reserve(objs.size());
    for (auto& o : objs) bufs.emplace_back(o, true);
    std::vector<GetOp> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      ops[i].key = ks[i];
      ops[i].buffer = {bufs[i].data, bufs[i].size};
    }
    {
      py::gil_scoped_release nogil;
      (void)t.GetBatch(ops);
    }
    std::vector<int64_t> sizes(ops.size());
    for (size_t i = 0; i < ops.size(); ++i)
      sizes[i] = ops[i].status.ok() ? int64_t(ops[i].size) : -1;
    return sizes;
  }

  // Per-item status names: "OK", "Exists", "TooLarge", ... (CodeName).
  static std::vector<std::string> BatchPut(T& t, const py::iterable& keys,
                                           const py::iterable& values, bool overwrite,
                                           const py::object& parents) {
    std::vector<BlockKey> ks = ToKeys(keys);
    std::vector<BlockKey> ps;
    if (!parents.is_none()) {
      for (const py::handle& h : parents) ps.push_back(h.is_none() ? BlockKey{} : ToKey(h));
      if (ps.size() != ks.size()) throw py::value_error("keys and parents differ in length");
    }
    std::vector<py::object> objs;
    for (const py::handle& h : values) objs.push_back(AsBufferObject(h));
    if (objs.size() != ks.size()) throw py::value_error("keys and values differ in length");
    std::vector<Buffer> bufs;
    bufs.reserve(objs.size());
    for (auto& o : objs) bufs.emplace_back(o, false);
    std::vector<PutOp> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i)
      ops[i] = PutOp{ks[i], {bufs[i].data, bufs[i].size}, ps.empty() ? BlockKey{} : ps[i], {}};
    {
      py::gil_scoped_release nogil;
      t.PutOps(ops, overwrite);
    }
    std::vector<std::string> out;
    for (auto& op : ops) out.push_back(CodeString(op.status));
    return out;
  }

  // Raw-address forms, for engines that hand over host-pool addresses (SGLang's
  // get_page_buffer_meta, Mooncake's batch_get_into): the caller guarantees each (ptr, size)
  // is valid memory for the duration of the call.
  static std::vector<int64_t> BatchGetPtrs(T& t, const py::iterable& keys,
                                           const std::vector<uintptr_t>& ptrs,
                                           const std::vector<uint64_t>& sizes) {
    std::vector<BlockKey> ks = ToKeys(keys);
    if (ptrs.size() != ks.size() || sizes.size() != ks.size())
      throw py::value_error("keys, ptrs and sizes differ in length");
    std::vector<GetOp> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      ops[i].key = ks[i];
      ops[i].buffer = {reinterpret_cast<std::byte*>(ptrs[i]), sizes[i]};
    }
    {
      py::gil_scoped_release nogil;
      (void)t.GetBatch(ops);
    }
    std::vector<int64_t> out(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) out[i] = ops[i].status.ok() ? int64_t(ops[i].size) : -1;
    return out;
  }

  static std::vector<std::string> BatchPutPtrs(T& t, const py::iterable& keys,
                                               const std::vector<uintptr_t>& ptrs,
                                               const std::vector<uint64_t>& sizes,
                                               const py::object& parents) {
    std::vector<BlockKey> ks = ToKeys(keys);
    if (ptrs.size() != ks.size() || sizes.size() != ks.size())
      throw py::value_error("keys, ptrs and sizes differ in length");
    std::vector<BlockKey> ps;
    if (!parents.is_none()) {
      for (const py::handle& h : parents) ps.push_back(h.is_none() ? BlockKey{} : ToKey(h));
      if (ps.size() != ks.size()) throw py::value_error("keys and parents differ in length");
    }
    std::vector<PutOp> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i)
      ops[i] = PutOp{ks[i],
                     {reinterpret_cast<const std::byte*>(ptrs[i]), sizes[i]},
                     ps.empty() ? BlockKey{} : ps[i],
                     {}};
    {
      py::gil_scoped_release nogil;
      t.PutOps(ops, false);
    }
    std::vector<std::string> out;
    for (auto& op : ops) out.push_back(CodeString(op.status));
    return out;
  }

  static std::vector<bool> BatchExists(T& t, const py::iterable& keys) {
    std::vector<BlockKey> ks = ToKeys(keys);
    std::vector<KeyOp> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) ops[i].key = ks[i];
    {
      py::gil_scoped_release nogil;
      (void)t.ExistsBatch(ops);
    }
    std::vector<bool> out;
    for (auto& op : ops) out.push_back(op.status.ok());
    return out;
  }
};

// Uniform faces over the three targets.
struct StoreFace {
  std::unique_ptr<Store> s;
  Status GetBatch(std::span<GetOp> ops) {
    s->GetBatch(ops);
    return Status::Ok();
  }
  void PutOps(std::span<PutOp> ops, bool overwrite) {
    for (PutOp& op : ops) op.status = s->Put(op.key, op.value, PutOptions{op.parent, overwrite});
  }
  Status ExistsBatch(std::span<KeyOp> ops) {
    s->ExistsBatch(ops);
    return Status::Ok();
  }
};

struct ClientFace {
  std::unique_ptr<Client> c;
  Status GetBatch(std::span<GetOp> ops) { return c->GetBatch(ops); }
  void PutOps(std::span<PutOp> ops, bool overwrite) {
    Status s = c->PutBatch(ops, overwrite);
    if (!s.ok()) {
      for (auto& op : ops) {
        if (op.status.ok()) op.status = s;
      }
    }
  }
  Status ExistsBatch(std::span<KeyOp> ops) { return c->ExistsBatch(ops); }
};

struct PoolFace {
  std::unique_ptr<PoolClient> c;
  Status GetBatch(std::span<GetOp> ops) { return c->GetBatch(ops); }
  void PutOps(std::span<PutOp> ops, bool overwrite) { (void)c->PutBatch(ops, overwrite); }
  Status ExistsBatch(std::span<KeyOp> ops) { return c->ExistsBatch(ops); }
};

template <class T, class C>
void BindOps(C& cls) {
  cls.def("get", &Ops<T>::Get, py::arg("key"), py::arg("out") = py::none(),
          "Value of key: bytes (out=None) or the size written into `out` (a writable buffer: "
          "numpy array, bytearray, torch CPU tensor). None on a miss.")
      .def(
          "put",
          [](T& t, const py::handle& key, const py::handle& value, bool overwrite,
             const py::object& parent) {
            auto r = Ops<T>::BatchPut(t, py::make_tuple(key), py::make_tuple(value), overwrite,
                                      parent.is_none() ? parent : py::make_tuple(parent));
            return r[0];
          },
          py::arg("key"), py::arg("value"), py::arg("overwrite") = false,
          py::arg("parent") = py::none(),
          "Store value (any buffer). Returns the status name: OK, Exists (insert-only: already "
          "held), TooLarge, ...")
      .def("batch_get", &Ops<T>::BatchGet, py::arg("keys"), py::arg("outs"),
           "Reads each key into its buffer; returns sizes, -1 for a miss. One round trip (GIL "
           "released).")
      .def("batch_put", &Ops<T>::BatchPut, py::arg("keys"), py::arg("values"),
           py::arg("overwrite") = false, py::arg("parents") = py::none(),
           "Stores each value (parents: each block's parent in its chain, for prefix-aware "
           "eviction; None for none); returns a status name per item.")
      .def("batch_get_ptrs", &Ops<T>::BatchGetPtrs, py::arg("keys"), py::arg("ptrs"),
           py::arg("sizes"),
           "batch_get into raw addresses (ints, e.g. tensor.data_ptr()); the caller keeps the "
           "memory valid during the call. Returns sizes, -1 for a miss.")
      .def("batch_put_ptrs", &Ops<T>::BatchPutPtrs, py::arg("keys"), py::arg("ptrs"),
           py::arg("sizes"), py::arg("parents") = py::none(),
           "Insert-only batch_put from raw addresses; a status name per item.")
      .def("batch_exists", &Ops<T>::BatchExists, py::arg("keys"))
      .def("exists", [](T& t, const py::handle& key) {
        return bool(Ops<T>::BatchExists(t, py::make_tuple(key))[0]);
      });
}

}  // namespace

PYBIND11_MODULE(_kvpool, m) {
  m.doc() = "kvpool: a context memory store for LLM inference (KV-cache blocks)";

  py::class_<BlockKey>(m, "Key", "A 128-bit block key.")
      .def(py::init([](uint64_t hi, uint64_t lo) {
             return BlockKey{hi, lo};
           }),
           py::arg("hi"), py::arg("lo"))
      .def_readonly("hi", &BlockKey::hi)
      .def_readonly("lo", &BlockKey::lo)
      .def("hex", &BlockKey::ToHex)
      .def_static("from_hex",
                  [](const std::string& s) {
                    if (s.size() != 32) throw py::value_error("32 hex digits");
                    return ParseKey(s);
                  })
      .def_static(
          "from_bytes", [](const py::bytes& b) { return KeyFromBytes(std::string(b)); },
          "XXH3-128 of arbitrary bytes (as RESP and the CLI name keys)")
      .def("__eq__", [](const BlockKey& a, const BlockKey& b) { return a == b; })
      .def("__hash__", [](const BlockKey& k) { return BlockKeyHash{}(k); })
      .def("__repr__", [](const BlockKey& k) { return "kvpool.Key('" + k.ToHex() + "')"; });

  m.def(
      "namespace_root", [](const std::string& ns) { return NamespaceRoot(ns); },
      py::arg("namespace"));
  m.def(
      "pool_key",
      [](const py::object& ns, const py::handle& key) {
        BlockKey root = py::isinstance<py::str>(ns) ? NamespaceRoot(ns.cast<std::string>())
                                                    : ns.cast<BlockKey>();
        return PoolKey(root, ToKey(key));
      },
      py::arg("namespace"), py::arg("key"),
      "The key kvpoold stores `key` under for clients of `namespace` (a name or its root "
      "Key); KV events name blocks by it (its .lo is vLLM's int form).");
  m.def(
      "chain_keys",
      [](const py::object& parent, const py::object& tokens, size_t block_tokens) {
        if (block_tokens == 0) throw py::value_error("block_tokens must be > 0");
        BlockKey p = py::isinstance<py::str>(parent) ? NamespaceRoot(parent.cast<std::string>())
                                                     : parent.cast<BlockKey>();
        std::vector<uint32_t> toks;
        for (const py::handle& t : tokens) toks.push_back(t.cast<uint32_t>());
        return ChainKeys(p, toks, block_tokens);
      },
      py::arg("parent"), py::arg("tokens"), py::arg("block_tokens") = 16,
      "Chained keys of the full blocks of `tokens` (parent: a Key or a namespace name). "
      "docs/KEYS.md.");

  py::class_<StoreFace> store(m, "Store",
                              "The embedded tiered store (DRAM + optional flash file).");
  store
      .def(py::init([](uint64_t dram_bytes, const std::string& flash_path, uint64_t flash_bytes) {
             StoreOptions o;
             o.dram_bytes = dram_bytes;
             o.flash_path = flash_path;
             o.flash_bytes = flash_bytes;
             o.max_value_bytes = std::min<uint64_t>(o.max_value_bytes, dram_bytes / 2);
             auto s = Store::Open(o);
             Check(s.status());
             return StoreFace{std::move(s).value()};
           }),
           py::arg("dram_bytes") = 256ull << 20, py::arg("flash_path") = "",
           py::arg("flash_bytes") = 1ull << 30)
      .def("match_prefix",
           [](StoreFace& s, const py::iterable& keys) {
             auto ks = ToKeys(keys);
             py::gil_scoped_release nogil;
             return s.s->MatchPrefix(ks);
           })
      .def("erase", [](StoreFace& s, const py::handle& key) { return s.s->Erase(ToKey(key)).ok(); })
      .def("stats", [](StoreFace& s) { return s.s->GetStats().ToString(); });
  BindOps<StoreFace>(store);

  py::class_<ClientFace> client(m, "Client", "A connection to one kvpoold (one thread at a time).");
  client
      .def(py::init([](const std::string& address, const std::string& ns, const std::string& token,
                       int timeout_ms, uint64_t shared_memory_bytes) {
             ClientOptions o;
             o.address = address;
             o.ns = ns;
             o.token = token;
             o.request_timeout_ms = timeout_ms;
             o.connect_timeout_ms = std::min(timeout_ms, 1000);
             o.shared_memory_bytes = shared_memory_bytes;
             auto c = Client::Create(o);
             Check(c.status());
             return ClientFace{std::move(c).value()};
           }),
           py::arg("address") = "127.0.0.1:7400", py::arg("namespace") = "default",
           py::arg("token") = "", py::arg("timeout_ms") = 5000, py::arg("shared_memory_bytes") = 0)
      .def(
          "match_prefix",
          [](ClientFace& c, const py::iterable& keys) -> int64_t {
            auto ks = ToKeys(keys);
            py::gil_scoped_release nogil;
            auto r = c.c->MatchPrefix(ks);
            return r.ok() ? int64_t(*r) : 0;
          },
          "Leading keys of the chain the server holds (one round trip; 0 if unreachable).")
      .def("erase",
           [](ClientFace& c, const py::handle& key) {
             BlockKey k = ToKey(key);
             py::gil_scoped_release nogil;
             return c.c->Erase(k).ok();
           })
      .def("ping",
           [](ClientFace& c) {
             py::gil_scoped_release nogil;
             return c.c->Ping().ok();
           })
      .def("stats",
           [](ClientFace& c) {
             auto r = c.c->ServerStats();
             Check(r.status());
             return *r;
           })
      .def(
          "shared_memory",
          [](ClientFace& c) {
            auto s = c.c->shared_memory();
            return py::memoryview::from_memory(s.data(), static_cast<py::ssize_t>(s.size()));
          },
          "The same-host region (empty unless connected over unix: with shared_memory_bytes): "
          "values in it skip the socket.");
  BindOps<ClientFace>(client);

  py::class_<PoolFace> pool(m, "Pool", "The pod pool: many kvpoold nodes as one store.");
  pool.def(py::init([](const std::string& members, const std::string& etcd, const std::string& ns,
                       int node_timeout_ms) {
             PoolOptions o;
             o.members = members;
             o.etcd = etcd;
             o.client.ns = ns;
             o.node_timeout_ms = node_timeout_ms;
             auto c = PoolClient::Create(o);
             Check(c.status());
             return PoolFace{std::move(c).value()};
           }),
           py::arg("members") = "", py::arg("etcd") = "", py::arg("namespace") = "default",
           py::arg("node_timeout_ms") = 300)
      .def("owner_of", [](PoolFace& p, const py::handle& key) { return p.c->OwnerOf(ToKey(key)); });
  BindOps<PoolFace>(pool);

  BindKeys(m);
  BindLmcache(m);
}
