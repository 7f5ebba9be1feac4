// The kvpool Python module (pybind11): block keys and the four BlockStores: the embedded
// Store, the Client, the PoolClient (Pool) and the NearCache, bound once (Ops<T> over
// T::bs()). Values go in and out through the buffer protocol (bytes, bytearray, numpy
// arrays, torch CPU tensors, memoryview): a get writes straight into the caller's array, a
// put reads straight from it, no copy in between. Every call that does I/O releases the
// GIL. Misses are None / -1 / False; a call that got no answer raises kvpool.Unavailable or
// kvpool.Timeout; bad arguments raise ValueError.
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "binding.h"
#include "kvpool/client.h"
#include "kvpool/near_cache.h"
#include "kvpool/pool.h"
#include "kvpool/store.h"

using namespace kvpool_py;

namespace {

// kvpool.Unavailable (a ConnectionError) and kvpool.Timeout (a TimeoutError): a server
// that did not answer, where the answer would otherwise read as "absent".
PyObject* g_unavailable = nullptr;
PyObject* g_timeout = nullptr;

[[noreturn]] void RaiseNoAnswer(const Status& s) {
  PyErr_SetString(s.code() == Code::kTimeout ? g_timeout : g_unavailable, s.ToString().c_str());
  throw py::error_already_set();
}

// A call that got no answer at all (unreachable, or nothing by the deadline). Other call
// failures (an unknown token: kRefused, ...) are the store's answer, given per item.
bool NoAnswer(const Status& s) {
  return s.code() == Code::kUnavailable || s.code() == Code::kTimeout;
}

Deadline FromTimeout(int timeout_ms) {
  return timeout_ms > 0 ? Deadline::After(std::chrono::milliseconds(timeout_ms)) : Deadline{};
}

// The Python calls of every BlockStore (Store, Client, Pool, NearCache), on T::bs().
// Transport failures (no answer from the store: kvpool.Unavailable, kvpool.Timeout) raise;
// what the store answered per item (a miss, Exists, TooLarge, ...) is returned.
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
        Status s;
        {
          py::gil_scoped_release nogil;
          s = t.bs().GetBatch(std::span<GetOp>(&op, 1));
        }
        if (NoAnswer(s)) RaiseNoAnswer(s);
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
    Status s;
    {
      py::gil_scoped_release nogil;
      s = t.bs().GetBatch(std::span<GetOp>(&op, 1));
    }
    if (NoAnswer(s)) RaiseNoAnswer(s);
    if (op.status.code() == Code::kBufferTooSmall) {
      throw py::value_error("buffer of " + std::to_string(b.size) +
                            " bytes is smaller than the value (" + std::to_string(op.size) + ")");
    }
    return op.status.ok() ? py::object(py::int_(op.size)) : py::none();
  }

  // Returns the size of each value read, or -1 for a miss (or a buffer too small).
  // With with_status, (sizes, status names): "NotFound", "Timeout", "BufferTooSmall", ...
  static py::object BatchGetPy(T& t, const py::iterable& keys, const py::iterable& outs,
                               int timeout_ms, bool with_status) {
    std::vector<std::string> codes;
    auto sizes = BatchGet(t, keys, outs, timeout_ms, with_status ? &codes : nullptr);
    if (!with_status) return py::cast(sizes);
    return py::make_tuple(sizes, codes);
  }

  static std::vector<int64_t> BatchGet(T& t, const py::iterable& keys, const py::iterable& outs,
                                       int timeout_ms, std::vector<std::string>* codes = nullptr) {
    std::vector<BlockKey> ks = ToKeys(keys);
    std::vector<Buffer> bufs = Buffers(outs, ks.size(), /*writable=*/true);
    std::vector<GetOp> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      ops[i].key = ks[i];
      ops[i].buffer = {bufs[i].data, bufs[i].size};
    }
    return RunGets(t, ops, FromTimeout(timeout_ms), codes);
  }

  // Per-item status names: "OK", "Exists", "TooLarge", ... (CodeName).
  static std::vector<std::string> BatchPut(T& t, const py::iterable& keys,
                                           const py::iterable& values, bool overwrite,
                                           const py::object& parents, int timeout_ms = 0,
                                           const py::object& token_ids = py::none()) {
    std::vector<BlockKey> ks = ToKeys(keys);
    std::vector<BlockKey> ps = Parents(parents, ks.size());
    std::vector<Buffer> bufs = Buffers(values, ks.size(), /*writable=*/false);
    std::vector<std::vector<uint32_t>> toks = TokenIds(token_ids, ks.size());
    std::vector<PutOp> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      ops[i] = PutOp{ks[i], {bufs[i].data, bufs[i].size}, ps[i], {}};
      if (!toks.empty()) ops[i].token_ids = toks[i];
    }
    return RunPuts(t, ops, overwrite, FromTimeout(timeout_ms));
  }

  // Each block's token ids (a sequence of ints, or None), or none at all when None.
  static std::vector<std::vector<uint32_t>> TokenIds(const py::object& token_ids, size_t n) {
    if (token_ids.is_none()) return {};
    std::vector<std::vector<uint32_t>> out;
    for (const py::handle& h : token_ids) {
      out.emplace_back();
      if (h.is_none()) continue;
      for (const py::handle& t : h) out.back().push_back(t.cast<uint32_t>());
      if (out.back().size() > 65536) throw py::value_error("more than 65536 token ids in a block");
    }
    if (out.size() != n) throw py::value_error("keys and token_ids differ in length");
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
    return RunGets(t, ops, {}, nullptr);
  }

  static std::vector<std::string> BatchPutPtrs(T& t, const py::iterable& keys,
                                               const std::vector<uintptr_t>& ptrs,
                                               const std::vector<uint64_t>& sizes,
                                               const py::object& parents) {
    std::vector<BlockKey> ks = ToKeys(keys);
    if (ptrs.size() != ks.size() || sizes.size() != ks.size())
      throw py::value_error("keys, ptrs and sizes differ in length");
    std::vector<BlockKey> ps = Parents(parents, ks.size());
    std::vector<PutOp> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i)
      ops[i] = PutOp{ks[i], {reinterpret_cast<const std::byte*>(ptrs[i]), sizes[i]}, ps[i], {}};
    return RunPuts(t, ops, false, {});
  }

  // The buffers of `objs` (one per key), held for the call.
  static std::vector<Buffer> Buffers(const py::iterable& objs, size_t n, bool writable) {
    std::vector<py::object> held;
    for (const py::handle& h : objs) held.push_back(AsBufferObject(h));
    if (held.size() != n) throw py::value_error("keys and buffers differ in length");
    std::vector<Buffer> bufs;
    bufs.reserve(n);
    for (auto& o : held) bufs.emplace_back(o, writable);  // a capsule stays alive in Buffer
    return bufs;
  }

  // Each block's parent (None: none), or all empty when `parents` is None.
  static std::vector<BlockKey> Parents(const py::object& parents, size_t n) {
    if (parents.is_none()) return std::vector<BlockKey>(n);
    std::vector<BlockKey> ps;
    for (const py::handle& h : parents) ps.push_back(h.is_none() ? BlockKey{} : ToKey(h));
    if (ps.size() != n) throw py::value_error("keys and parents differ in length");
    return ps;
  }

  // Runs the gets without the GIL; sizes (-1 for a miss) and, if asked, status names
  // (then a call that got no answer gives every item's status instead of raising).
  static std::vector<int64_t> RunGets(T& t, std::vector<GetOp>& ops, Deadline d,
                                      std::vector<std::string>* codes) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = t.bs().GetBatch(ops, d);
    }
    if (NoAnswer(s) && !codes) RaiseNoAnswer(s);
    std::vector<int64_t> sizes(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      sizes[i] = ops[i].status.ok() ? int64_t(ops[i].size) : -1;
      if (codes) codes->push_back(CodeString(ops[i].status));
    }
    return sizes;
  }

  static std::vector<std::string> RunPuts(T& t, std::vector<PutOp>& ops, bool overwrite,
                                          Deadline d) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = t.bs().PutBatch(ops, overwrite, d);
    }
    if (NoAnswer(s)) RaiseNoAnswer(s);
    std::vector<std::string> out;
    for (auto& op : ops) out.push_back(CodeString(op.status));
    return out;
  }

  // Raises kvpool.Unavailable / kvpool.Timeout when the call got no answer (a Pool: no
  // member answered); an item of a pool node that did not answer is False.
  static std::vector<bool> BatchExists(T& t, const py::iterable& keys, int timeout_ms = 0) {
    std::vector<KeyOp> ops = RunExists(t, keys, timeout_ms);
    std::vector<bool> out;
    for (auto& op : ops) out.push_back(op.status.ok());
    return out;
  }

  // One key: True or False as its server answered; an exception when none did.
  static bool Exists(T& t, const py::handle& key, int timeout_ms) {
    KeyOp op = RunExists(t, py::make_tuple(key), timeout_ms)[0];
    if (!op.status.ok() && !op.status.IsNotFound()) RaiseNoAnswer(op.status);
    return op.status.ok();
  }

  // Each value's size without reading it (-1: not held): a get with no room, which every
  // target answers with the size alone. Raises as batch_exists when there was no answer.
  static std::vector<int64_t> BatchSizes(T& t, const py::iterable& keys, int timeout_ms) {
    std::vector<BlockKey> ks = ToKeys(keys);
    std::vector<GetOp> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) ops[i].key = ks[i];
    Status s;
    {
      py::gil_scoped_release nogil;
      s = t.bs().GetBatch(ops, FromTimeout(timeout_ms));
    }
    if (!s.ok()) RaiseNoAnswer(s);
    std::vector<int64_t> out;
    for (const GetOp& op : ops) {
      bool held = op.status.ok() || op.status.code() == Code::kBufferTooSmall;
      if (!held && !op.status.IsNotFound() && op.status.retryable()) RaiseNoAnswer(op.status);
      out.push_back(held ? int64_t(op.size) : -1);
    }
    return out;
  }

  // Leading keys of the chain held; raises when the store did not answer.
  static int64_t MatchPrefix(T& t, const py::iterable& keys, int timeout_ms) {
    std::vector<BlockKey> ks = ToKeys(keys);
    Result<size_t> r = Status::Internal("unset");
    {
      py::gil_scoped_release nogil;
      r = t.bs().MatchPrefix(ks, FromTimeout(timeout_ms));
    }
    if (NoAnswer(r.status())) RaiseNoAnswer(r.status());
    return r.ok() ? static_cast<int64_t>(r.value()) : 0;
  }

  // Whether each key was held (and is erased now); raises when the store did not answer.
  static std::vector<bool> BatchErase(T& t, const py::iterable& keys, int timeout_ms) {
    std::vector<KeyOp> ops = RunKeys(t, keys, timeout_ms, &BlockStore::EraseBatch);
    std::vector<bool> out;
    for (const KeyOp& op : ops) {
      if (!op.status.ok() && !op.status.IsNotFound() && op.status.retryable())
        RaiseNoAnswer(op.status);
      out.push_back(op.status.ok());
    }
    return out;
  }

  static std::vector<KeyOp> RunExists(T& t, const py::iterable& keys, int timeout_ms) {
    return RunKeys(t, keys, timeout_ms, &BlockStore::ExistsBatch);
  }

  // A batch over keys (exists, erase) without the GIL; raises when the call failed.
  static std::vector<KeyOp> RunKeys(T& t, const py::iterable& keys, int timeout_ms,
                                    Status (BlockStore::*call)(std::span<KeyOp>, Deadline)) {
    std::vector<BlockKey> ks = ToKeys(keys);
    std::vector<KeyOp> ops(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) ops[i].key = ks[i];
    Deadline d = FromTimeout(timeout_ms);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = (t.bs().*call)(ops, d);
    }
    if (!s.ok()) RaiseNoAnswer(s);
    return ops;
  }
};

// A layer-by-layer get in flight (Client.get_layers): every layer's request is sent when it
// is created, and a receiver thread takes the answers as they come, so the caller's work
// between next() calls (computing a layer) never holds up the rest of the transfer. Each
// next() waits (GIL released) until the next layer has landed and yields
// (layer, [size or -1 per block]). The stream holds one of the Client's connections until
// every layer has landed (other calls on the Client use its other connections meanwhile);
// dropping it waits for the transfer to end.
struct LayerStream {
  py::object owner;                            // the Client, kept alive
  std::unique_ptr<SharedClient::Lease> lease;  // a connection, held until every layer landed
  Client* client;
  std::vector<uint32_t> layers;
  std::vector<std::vector<GetOp>> ops;
  std::vector<py::object> objs;  // the output buffers, alive while in flight
  std::vector<Buffer> bufs;
  std::vector<Result<Client::Ticket>> tickets;
  Deadline deadline;
  size_t next = 0;
  std::mutex mu;
  std::condition_variable cv;
  size_t landed = 0;  // GUARDED_BY(mu): layers received so far
  std::thread receiver;

  void Start() {
    receiver = std::thread([this] {
      for (size_t i = 0; i < tickets.size(); ++i) {
        if (tickets[i].ok()) (void)client->Wait(*tickets[i], deadline);
        std::lock_guard<std::mutex> lock(mu);
        landed = i + 1;
        cv.notify_all();
      }
      lease.reset();  // the connection is free for the Client's other calls
    });
  }

  py::tuple Next() {
    if (next >= layers.size()) throw py::stop_iteration();
    size_t i = next++;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return landed > i; });
    }
    std::vector<int64_t> sizes;
    for (GetOp& op : ops[i]) sizes.push_back(op.status.ok() ? int64_t(op.size) : -1);
    return py::make_tuple(layers[i], sizes);
  }
  ~LayerStream() {
    py::gil_scoped_release nogil;
    if (receiver.joinable()) receiver.join();  // buffers must outlive the I/O
  }
};

template <class T, class C>
void BindOps(C& cls) {
  cls.def("get", &Ops<T>::Get, py::arg("key"), py::arg("out") = py::none(),
          "Value of key: bytes (out=None) or the size written into `out` (a writable buffer: "
          "numpy array, bytearray, torch CPU tensor). None on a miss.")
      .def(
          "put",
          [](T& t, const py::handle& key, const py::handle& value, bool overwrite,
             const py::object& parent, const py::object& token_ids) {
            auto r = Ops<T>::BatchPut(t, py::make_tuple(key), py::make_tuple(value), overwrite,
                                      parent.is_none() ? parent : py::make_tuple(parent), 0,
                                      token_ids.is_none() ? token_ids : py::make_tuple(token_ids));
            return r[0];
          },
          py::arg("key"), py::arg("value"), py::arg("overwrite") = false,
          py::arg("parent") = py::none(), py::arg("token_ids") = py::none(),
          "Store value (any buffer). Returns the status name: OK, Exists (insert-only: already "
          "held), TooLarge, ...")
      .def("batch_get", &Ops<T>::BatchGetPy, py::arg("keys"), py::arg("outs"),
           py::arg("timeout_ms") = 0, py::arg("with_status") = false,
           "Reads each key into its buffer; returns sizes, -1 for a miss or an item not served "
           "within timeout_ms (the call's deadline; 0: none). One round trip (GIL released). "
           "with_status=True returns (sizes, status names) to tell NotFound from Timeout, "
           "BufferTooSmall, Refused, Unavailable.")
      .def("batch_put", &Ops<T>::BatchPut, py::arg("keys"), py::arg("values"),
           py::arg("overwrite") = false, py::arg("parents") = py::none(), py::arg("timeout_ms") = 0,
           py::arg("token_ids") = py::none(),
           "Stores each value (parents: each block's parent in its chain, for prefix-aware "
           "eviction; None for none; token_ids: each block's token ids, which kvpoold's KV "
           "events carry to routers); returns a status name per item.")
      .def("batch_get_ptrs", &Ops<T>::BatchGetPtrs, py::arg("keys"), py::arg("ptrs"),
           py::arg("sizes"),
           "batch_get into raw addresses (ints, e.g. tensor.data_ptr()); the caller keeps the "
           "memory valid during the call. Returns sizes, -1 for a miss.")
      .def("batch_put_ptrs", &Ops<T>::BatchPutPtrs, py::arg("keys"), py::arg("ptrs"),
           py::arg("sizes"), py::arg("parents") = py::none(),
           "Insert-only batch_put from raw addresses; a status name per item.")
      .def("batch_exists", &Ops<T>::BatchExists, py::arg("keys"), py::arg("timeout_ms") = 0,
           "Whether each key is held; raises kvpool.Unavailable or kvpool.Timeout when the "
           "server (a Pool: every member) did not answer.")
      .def("batch_sizes", &Ops<T>::BatchSizes, py::arg("keys"), py::arg("timeout_ms") = 0,
           "Each value's size in bytes without reading it, -1 for a key not held; raises "
           "kvpool.Unavailable or kvpool.Timeout when the server did not answer.")
      .def(
          "size",
          [](T& t, const py::handle& key, int timeout_ms) -> py::object {
            int64_t n = Ops<T>::BatchSizes(t, py::make_tuple(key), timeout_ms)[0];
            return n < 0 ? py::object(py::none()) : py::object(py::int_(n));
          },
          py::arg("key"), py::arg("timeout_ms") = 0,
          "The value's size in bytes without reading it, or None; raises as exists().")
      .def("exists", &Ops<T>::Exists, py::arg("key"), py::arg("timeout_ms") = 0,
           "Whether the key is held; raises kvpool.Unavailable or kvpool.Timeout when its "
           "server did not answer (never False for a server that is down).")
      .def("match_prefix", &Ops<T>::MatchPrefix, py::arg("keys"), py::arg("timeout_ms") = 0,
           "Leading keys of the chain that are held (a probe: one round trip; a Pool asks "
           "every node in parallel); raises kvpool.Unavailable or kvpool.Timeout when no "
           "answer came for the chain's first key.")
      .def("batch_erase", &Ops<T>::BatchErase, py::arg("keys"), py::arg("timeout_ms") = 0,
           "Erases each key; whether each was held. Raises when the store did not answer.")
      .def(
          "erase",
          [](T& t, const py::handle& key, int timeout_ms) {
            return bool(Ops<T>::BatchErase(t, py::make_tuple(key), timeout_ms)[0]);
          },
          py::arg("key"), py::arg("timeout_ms") = 0,
          "Erases the key; whether it was held. Raises when the store did not answer.");
}

}  // namespace

PYBIND11_MODULE(_kvpool, m) {
  m.doc() = "kvpool: a context memory store for LLM inference (KV-cache blocks)";
  g_unavailable = PyErr_NewExceptionWithDoc("kvpool.Unavailable",
                                            "The server was unreachable: no answer (not a miss).",
                                            PyExc_ConnectionError, nullptr);
  g_timeout = PyErr_NewExceptionWithDoc("kvpool.Timeout",
                                        "The server did not answer by the deadline (not a miss).",
                                        PyExc_TimeoutError, nullptr);
  m.attr("Unavailable") = py::handle(g_unavailable);
  m.attr("Timeout") = py::handle(g_timeout);

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
      "layer_key",
      [](const py::handle& block, uint32_t layer) { return LayerKey(ToKey(block), layer); },
      py::arg("block"), py::arg("layer"), "The key of one layer's part of a block (docs/KEYS.md).");
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
      .def(py::init([](uint64_t dram_bytes, const std::string& flash_path, uint64_t flash_bytes,
                       uint64_t max_value_bytes, uint64_t region_bytes,
                       const std::string& admission, bool prefault, bool huge_pages,
                       const py::object& reuse_bonus, bool flash_restore) {
             StoreOptions o;
             o.dram_bytes = dram_bytes;
             o.flash_path = flash_path;
             o.flash_bytes = flash_bytes;
             o.max_value_bytes = max_value_bytes
                                     ? max_value_bytes
                                     : std::min<uint64_t>(o.max_value_bytes, dram_bytes / 2);
             if (region_bytes) o.region_bytes = region_bytes;
             if (admission == "budget") {
               o.admission = Admission::kBudget;
             } else if (admission == "probation") {
               o.admission = Admission::kProbation;
             } else if (admission == "all") {
               o.admission = Admission::kAll;
             } else {
               throw py::value_error("admission: \"budget\", \"probation\" or \"all\"");
             }
             o.prefault = prefault;
             o.huge_pages = huge_pages;
             o.flash_restore = flash_restore;
             if (py::isinstance<py::str>(reuse_bonus)) {
               if (reuse_bonus.cast<std::string>() != "auto")
                 throw py::value_error("reuse_bonus: \"auto\" or a number");
               o.reuse_bonus = StoreOptions::kReuseBonusAuto;
             } else {
               o.reuse_bonus = reuse_bonus.cast<double>();
             }
             auto s = Store::Open(o);
             Check(s.status());
             return StoreFace{std::move(s).value()};
           }),
           py::arg("dram_bytes") = 256ull << 20, py::arg("flash_path") = "",
           py::arg("flash_bytes") = 1ull << 30, py::arg("max_value_bytes") = 0,
           py::arg("region_bytes") = 0, py::arg("admission") = "budget",
           py::arg("prefault") = false, py::arg("huge_pages") = true,
           py::arg("reuse_bonus") = py::str("auto"), py::arg("flash_restore") = true,
           "The engine's options (docs/ENGINE.md): max_value_bytes (0: the default, at most "
           "half the DRAM tier), region_bytes (0: 16 MiB), admission (\"budget\", "
           "\"probation\", \"all\"), prefault, huge_pages, reuse_bonus (\"auto\" or "
           "store-fulls per past use), flash_restore (find the blocks already on flash_path). "
           "Bad options raise ValueError saying which.")
      .def("stats", [](StoreFace& s) { return s.s->GetStats().ToString(); });
  BindOps<StoreFace>(store);

  py::class_<ClientFace> client(
      m, "Client",
      "Connections to one kvpoold, safe to share between threads: a call uses the first "
      "connection when it is free and opens more (up to max_connections) while calls overlap.");
  client
      .def(py::init([](const std::string& address, const std::string& ns, const std::string& token,
                       int timeout_ms, uint64_t shared_memory_bytes, bool tls,
                       const std::string& tls_ca, const std::string& tls_cert,
                       const std::string& tls_key, const std::string& tls_server_name,
                       unsigned max_connections) {
             if (max_connections == 0) throw py::value_error("max_connections must be >= 1");
             ClientOptions o =
                 MakeClientOptions(address, ns, token, timeout_ms, shared_memory_bytes);
             SetTls(o, tls, tls_ca, tls_cert, tls_key, tls_server_name);
             auto c = Client::Create(o);
             Check(c.status());
             Client* primary = c->get();
             return ClientFace{
                 std::make_unique<SharedClient>(std::move(c).value(), o, max_connections - 1),
                 primary};
           }),
           py::arg("address") = "127.0.0.1:7400", py::arg("namespace") = "default",
           py::arg("token") = "", py::arg("timeout_ms") = 5000, py::arg("shared_memory_bytes") = 0,
           py::arg("tls") = false, py::arg("tls_ca") = "", py::arg("tls_cert") = "",
           py::arg("tls_key") = "", py::arg("tls_server_name") = "", py::arg("max_connections") = 8,
           "TLS: tls=True (or tls_ca/tls_cert given) speaks TLS 1.3; tls_ca: the CA bundle "
           "the node's certificate must chain to (default: the system's); tls_cert/tls_key: "
           "a client certificate for mutual TLS.")
      .def("ping",
           [](ClientFace& c) {
             py::gil_scoped_release nogil;
             return c.shared->Any()->Ping().ok();
           })
      .def("stats",
           [](ClientFace& c) {
             Result<std::string> r = Status::Internal("unset");
             {
               py::gil_scoped_release nogil;
               r = c.shared->Any()->ServerStats();
             }
             Check(r.status());
             return *r;
           })
      .def_property_readonly(
          "crc_failures",
          [](ClientFace& c) {
            py::gil_scoped_release nogil;
            return c.shared->Primary()->stats().crc_failures;
          },
          "Gets on the first connection whose value did not match the CRC32C it was put "
          "with (answered as misses).")
      .def_property_readonly(
          "extra_connections", [](ClientFace& c) { return c.shared->extra_connections(); },
          "Connections opened beside the first because calls overlapped (at most "
          "max_connections - 1).")
      .def(
          "shared_memory",
          [](ClientFace& c) {
            std::span<std::byte> s;
            {
              py::gil_scoped_release nogil;
              s = c.shared->Primary()->shared_memory();
            }
            return py::memoryview::from_memory(s.data(), static_cast<py::ssize_t>(s.size()));
          },
          "The same-host region (empty unless connected over unix: with shared_memory_bytes): "
          "values in it skip the socket.");
  client
      .def(
          "get_layers",
          [](py::object self, const py::iterable& blocks, const py::iterable& layers,
             const py::iterable& outs, int timeout_ms) {
            ClientFace& c = self.cast<ClientFace&>();
            auto stream = std::make_unique<LayerStream>();
            stream->owner = self;
            {
              py::gil_scoped_release nogil;  // the stream holds a connection while in flight
              stream->lease = std::make_unique<SharedClient::Lease>(c.shared->Any());
            }
            stream->client = &**stream->lease;
            std::vector<BlockKey> ks = ToKeys(blocks);
            for (const py::handle& l : layers) stream->layers.push_back(l.cast<uint32_t>());
            std::vector<py::list> rows;
            for (const py::handle& r : outs)
              rows.push_back(py::list(py::reinterpret_borrow<py::object>(r)));
            if (rows.size() != stream->layers.size())
              throw py::value_error("outs needs one row of buffers per layer");
            size_t total = 0;
            for (auto& r : rows) {
              if (r.size() != ks.size())
                throw py::value_error("each row needs one buffer per block");
              total += r.size();
            }
            stream->bufs.reserve(total);
            stream->ops.resize(rows.size());
            for (size_t i = 0; i < rows.size(); ++i) {
              for (size_t j = 0; j < ks.size(); ++j) {
                stream->objs.push_back(AsBufferObject(rows[i][j]));
                stream->bufs.emplace_back(stream->objs.back(), true);
                GetOp op;
                op.key = LayerKey(ks[j], stream->layers[i]);
                op.buffer = {stream->bufs.back().data, stream->bufs.back().size};
                stream->ops[i].push_back(op);
              }
            }
            if (timeout_ms > 0)
              stream->deadline = Deadline::After(std::chrono::milliseconds(timeout_ms));
            {
              py::gil_scoped_release nogil;
              for (auto& layer_ops : stream->ops)
                stream->tickets.push_back(stream->client->SubmitGet(layer_ops));
            }
            stream->Start();
            return stream;
          },
          py::arg("blocks"), py::arg("layers"), py::arg("outs"), py::arg("timeout_ms") = 0,
          "Layer streaming: sends a get for each layer's parts of `blocks` at once and returns "
          "an iterator that yields (layer, sizes) as each layer arrives (outs[i][j]: the buffer "
          "for layer layers[i] of block j; sizes -1 for a miss). Compute layer i while the "
          "rest is still arriving.")
      .def(
          "put_layer",
          [](ClientFace& c, const py::iterable& blocks, uint32_t layer, const py::iterable& values,
             const py::object& parents) {
            std::vector<BlockKey> ks = ToKeys(blocks);
            py::list keys, ps;
            for (size_t j = 0; j < ks.size(); ++j) keys.append(LayerKey(ks[j], layer));
            py::object pobj = py::none();
            if (!parents.is_none()) {
              for (const py::handle& h : parents)
                ps.append(h.is_none() ? py::object(py::none())
                                      : py::cast(LayerKey(ToKey(h), layer)));
              pobj = ps;
            }
            return Ops<ClientFace>::BatchPut(c, keys, values, false, pobj);
          },
          py::arg("blocks"), py::arg("layer"), py::arg("values"), py::arg("parents") = py::none(),
          "Stores one layer of each block (as prefill finishes that layer); its parts chain "
          "to the same layer of each parent. A status name per block.");
  BindOps<ClientFace>(client);
  py::class_<LayerStream>(m, "LayerStream", "A layer-by-layer get in flight (Client.get_layers).")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &LayerStream::Next)
      .def_property_readonly(
          "landed",
          [](LayerStream& st) {
            std::lock_guard<std::mutex> lock(st.mu);
            return st.landed;
          },
          "Layers received so far (the receiver runs ahead of the consumer).");

  py::class_<PoolFace> pool(m, "Pool", "The pod pool: many kvpoold nodes as one store.");
  pool.def(py::init([](const std::string& members, const std::string& etcd, const std::string& ns,
                       int node_timeout_ms, const std::string& token, bool tls,
                       const std::string& tls_ca, const std::string& tls_cert,
                       const std::string& tls_key) {
             PoolOptions o;
             o.members = members;
             o.etcd = etcd;
             o.client.ns = ns;
             o.client.token = token;
             SetTls(o.client, tls, tls_ca, tls_cert, tls_key, "");
             o.node_timeout_ms = node_timeout_ms;
             auto c = PoolClient::Create(o);
             Check(c.status());
             return PoolFace{std::move(c).value()};
           }),
           py::arg("members") = "", py::arg("etcd") = "", py::arg("namespace") = "default",
           py::arg("node_timeout_ms") = 300, py::arg("token") = "", py::arg("tls") = false,
           py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "")
      .def("owner_of", [](PoolFace& p, const py::handle& key) { return p.c->OwnerOf(ToKey(key)); });
  BindOps<PoolFace>(pool);

  py::class_<NearFace> near(m, "NearCache",
                            "A client-side near cache (pinned embedded store) in front of kvpoold "
                            "or the pod pool; prestage() pulls chains in before they are needed.");
  near.def(py::init([](const std::string& address, const std::string& ns,
                       const std::string& members, const std::string& etcd, uint64_t dram_bytes,
                       bool pin, unsigned batch, uint64_t max_block_bytes, int timeout_ms) {
             NearCacheOptions o;
             o.store.dram_bytes = dram_bytes;
             o.store.lock_memory = pin;
             o.batch = batch;
             o.max_block_bytes = max_block_bytes;
             Result<std::unique_ptr<NearCache>> nc = Status::Internal("unset");
             if (!members.empty() || !etcd.empty()) {
               PoolOptions po;
               po.members = members;
               po.etcd = etcd;
               po.client.ns = ns;
               auto p = PoolClient::Create(po);
               Check(p.status());
               nc = NearCache::Create(o, std::move(p).value());
             } else {
               auto c = Client::Create(MakeClientOptions(address, ns, "", timeout_ms));
               Check(c.status());
               nc = NearCache::Create(o, std::move(c).value());
             }
             Check(nc.status());
             return NearFace{std::move(nc).value()};
           }),
           py::arg("address") = "127.0.0.1:7400", py::arg("namespace") = "default",
           py::arg("members") = "", py::arg("etcd") = "", py::arg("dram_bytes") = 256ull << 20,
           py::arg("pin") = true, py::arg("batch") = 16, py::arg("max_block_bytes") = 4ull << 20,
           py::arg("timeout_ms") = 5000)
      .def(
          "prestage",
          [](NearFace& f, const py::iterable& keys, int timeout_ms) {
            auto ks = ToKeys(keys);
            return f.n->Prestage(ks, FromTimeout(timeout_ms));
          },
          py::arg("keys"), py::arg("timeout_ms"),
          "Starts pulling the chain into the near cache and returns a ticket at once; the "
          "prestage stops at a missing block or after timeout_ms, keeping what arrived.")
      .def(
          "wait_prestaged",
          [](NearFace& f, uint64_t ticket, int timeout_ms) {
            py::gil_scoped_release nogil;
            return f.n->WaitPrestaged(ticket, FromTimeout(timeout_ms));
          },
          py::arg("ticket"), py::arg("timeout_ms") = 0,
          "Leading blocks of the ticket's chain that are local, once it ended or timeout_ms "
          "passed (0: wait for the end).")
      .def("local_prefix",
           [](NearFace& f, const py::iterable& keys) {
             auto ks = ToKeys(keys);
             return f.n->LocalPrefix(ks);
           })
      .def("stats", [](NearFace& f) {
        NearCacheStats s = f.n->stats();
        py::dict d;
        d["local_hits"] = s.local_hits;
        d["pool_hits"] = s.pool_hits;
        d["misses"] = s.misses;
        d["prestaged"] = s.prestaged;
        d["prestage_stopped_at_deadline"] = s.prestage_stopped_at_deadline;
        d["prestage_stopped_at_miss"] = s.prestage_stopped_at_miss;
        return d;
      });
  BindOps<NearFace>(near);

  BindKeys(m);
  BindLmcache(m);
  BindGpu(m);
}
