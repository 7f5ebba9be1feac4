// kvpool.lmcache.Connector: a native connector for LMCache's "native_plugin" L2 adapter.
//
// LMCache (lmcache/v1/distributed/l2_adapters/native_plugin_l2_adapter.py and
// native_connector_l2_adapter.py, LMCache dev of 2026-11) builds the connector with the
// config's adapter_params as keyword arguments, checks it has event_fd, submit_batch_get,
// submit_batch_set, submit_batch_exists, drain_completions and close (submit_batch_delete
// is optional), and drives it from several threads: submit_* returns a future id at once,
// the connector signals its eventfd when completions are ready, and LMCache's demux thread
// polls the fd and calls drain_completions() -> [(future_id, ok, error, per-key bools)].
//
// Here: worker threads, each with its own kvpool Client, run the batches without the GIL;
// buffers (memoryviews over LMCache's L1 memory) are held from submit until the completion
// is drained, so LMCache's memory is never released under a running transfer. Keys are
// LMCache's object-key strings, stored under ForeignKey(root of the namespace, "lmcache",
// key). Sets are insert-only (a chunk already held counts as stored).
//
// LMCache's lookup is "lookup and lock": the adapter assumes a chunk submit_batch_exists
// found is still there for the load that follows. Exists is therefore a lookup-and-lock on
// kvpoold (Client::HoldBatch): each chunk found is held until the get that loads it, or for
// lookup_lease_ms if no load comes (0: a plain probe, nothing held).
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "binding.h"
#include "kvpool/client.h"
#include "kvpool/schema.h"

namespace kvpool_py {
namespace {

enum class Op { kGet, kSet, kExists, kDelete };

// Python buffers pinned by a job; released only with the GIL held (in drain or close).
struct Pinned {
  std::vector<py::buffer_info> infos;
  std::vector<py::object> keeps;  // DLPack capsules
};

struct Job {
  uint64_t id;
  Op op;
  std::vector<BlockKey> keys;
  std::vector<std::span<std::byte>> buffers;
  std::unique_ptr<Pinned> pinned;
};

struct Completion {
  uint64_t id;
  bool ok;
  std::string error;
  std::vector<bool> results;
  bool has_results;
  std::unique_ptr<Pinned> pinned;
};

class Connector {
 public:
  Connector(const ClientOptions& options, unsigned workers, uint32_t lease_ms)
      : root_(NamespaceRoot(options.ns)), lease_ms_(lease_ms) {
    if (workers == 0 || workers > 64) throw py::value_error("workers must be 1..64");
    auto probe = Client::Create(options);  // invalid options fail here, not in a worker
    Check(probe.status());
    efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd_ < 0) throw std::runtime_error("eventfd failed");
    for (unsigned i = 0; i < workers; ++i) {
      threads_.emplace_back([this, options] { Work(options); });
    }
  }
  ~Connector() { Close(); }

  int event_fd() const { return efd_; }

  uint64_t Submit(Op op, const std::vector<std::string>& keys, const py::object& buffers) {
    auto job = std::make_unique<Job>();
    job->op = op;
    for (const auto& k : keys) job->keys.push_back(ForeignKey(root_, "lmcache", k));
    if (op == Op::kGet || op == Op::kSet) {
      job->pinned = std::make_unique<Pinned>();
      for (const py::handle& h : buffers) {
        Buffer b(h, op == Op::kGet);
        job->buffers.emplace_back(b.data, b.size);
        job->pinned->infos.push_back(std::move(b.info));
        if (b.keep) job->pinned->keeps.push_back(std::move(b.keep));
      }
      if (job->buffers.size() != job->keys.size())
        throw py::value_error("keys and memoryviews differ in length");
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) throw std::runtime_error("connector is closed");
    job->id = next_id_++;
    uint64_t id = job->id;
    jobs_.push_back(std::move(job));
    cv_.notify_one();
    return id;
  }

  py::list Drain() {
    uint64_t n;
    (void)!::read(efd_, &n, sizeof n);
    std::deque<Completion> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done.swap(done_);
    }
    py::list out;
    for (Completion& c : done) {
      py::object results = py::none();
      if (c.has_results) results = py::cast(c.results);
      out.append(py::make_tuple(c.id, c.ok, c.error, results));
      c.pinned.reset();  // GIL held: the memoryviews may go
    }
    return out;
  }

  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
    }
    cv_.notify_all();
    {
      py::gil_scoped_release nogil;
      for (auto& t : threads_) t.join();
    }
    threads_.clear();
    jobs_.clear();  // never started: their buffers are released here, with the GIL
    done_.clear();
    ::close(efd_);
    efd_ = -1;
  }

 private:
  void Work(ClientOptions options) {
    auto client = Client::Create(options);
    for (;;) {
      std::unique_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closed_ || !jobs_.empty(); });
        if (closed_) return;  // queued jobs are dropped; their futures never complete
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      Completion c = Run(**client, *job);
      c.pinned = std::move(job->pinned);
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_.push_back(std::move(c));
      }
      uint64_t one = 1;
      (void)!::write(efd_, &one, sizeof one);
    }
  }

  Completion Run(Client& client, Job& job) const {
    Completion c{job.id, true, "", {}, true, nullptr};
    Status s;
    size_t n = job.keys.size();
    c.results.assign(n, false);
    switch (job.op) {
      case Op::kGet: {
        std::vector<GetOp> ops(n);
        for (size_t i = 0; i < n; ++i) ops[i].key = job.keys[i], ops[i].buffer = job.buffers[i];
        s = client.GetBatch(ops);
        for (size_t i = 0; i < n; ++i)
          c.results[i] = ops[i].status.ok() && ops[i].size == job.buffers[i].size();
        break;
      }
      case Op::kSet: {
        std::vector<PutOp> ops(n);
        for (size_t i = 0; i < n; ++i) ops[i] = PutOp{job.keys[i], job.buffers[i], {}, {}};
        s = client.PutBatch(ops, /*overwrite=*/false);
        for (size_t i = 0; i < n; ++i)
          c.results[i] = ops[i].status.ok() || ops[i].status.code() == Code::kExists;
        break;
      }
      case Op::kExists:
      case Op::kDelete: {
        std::vector<KeyOp> ops(n);
        for (size_t i = 0; i < n; ++i) ops[i].key = job.keys[i];
        if (job.op == Op::kDelete) {
          s = client.EraseBatch(ops);
        } else if (lease_ms_ > 0) {
          s = client.HoldBatch(ops, std::chrono::milliseconds(lease_ms_));
        } else {
          s = client.ExistsBatch(ops);
        }
        for (size_t i = 0; i < n; ++i) c.results[i] = ops[i].status.ok();
        break;
      }
    }
    if (!s.ok()) {
      c.ok = false;
      c.error = s.ToString();
    } else if (job.op == Op::kSet) {
      for (bool r : c.results) c.ok = c.ok && r;  // LMCache reads a store's ok as "stored"
    }
    return c;
  }

  const BlockKey root_;
  const uint32_t lease_ms_;
  int efd_ = -1;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;                    // GUARDED_BY(mu_)
  uint64_t next_id_ = 1;                   // GUARDED_BY(mu_)
  std::deque<std::unique_ptr<Job>> jobs_;  // GUARDED_BY(mu_)
  std::deque<Completion> done_;            // GUARDED_BY(mu_)
};

}  // namespace

void BindLmcache(py::module_& m) {
  py::module_ l = m.def_submodule(
      "lmcache",
      "LMCache native_plugin L2 connector. Config: {\"type\": \"native_plugin\", "
      "\"module_path\": \"kvpool.lmcache\", \"class_name\": \"Connector\", \"adapter_params\": "
      "{\"address\": \"127.0.0.1:7400\"}}");
  py::class_<Connector>(l, "Connector")
      .def(py::init([](const std::string& address, const std::string& ns, const std::string& token,
                       int timeout_ms, unsigned workers, uint64_t shared_memory_bytes,
                       int64_t lookup_lease_ms) {
             if (lookup_lease_ms < 0 || lookup_lease_ms > 3'600'000)
               throw py::value_error("lookup_lease_ms must be 0..3600000");
             return std::make_unique<Connector>(
                 MakeClientOptions(address, ns, token, timeout_ms, shared_memory_bytes), workers,
                 static_cast<uint32_t>(lookup_lease_ms));
           }),
           py::kw_only(), py::arg("address") = "127.0.0.1:7400", py::arg("namespace") = "lmcache",
           py::arg("token") = "", py::arg("timeout_ms") = 5000, py::arg("workers") = 2,
           py::arg("shared_memory_bytes") = 0, py::arg("lookup_lease_ms") = 10000)
      .def("event_fd", &Connector::event_fd,
           "Readable (eventfd) while completions wait to be drained.")
      .def(
          "submit_batch_get",
          [](Connector& c, const std::vector<std::string>& keys, const py::object& views) {
            return c.Submit(Op::kGet, keys, views);
          },
          py::arg("keys"), py::arg("memoryviews"))
      .def(
          "submit_batch_set",
          [](Connector& c, const std::vector<std::string>& keys, const py::object& views) {
            return c.Submit(Op::kSet, keys, views);
          },
          py::arg("keys"), py::arg("memoryviews"))
      .def(
          "submit_batch_exists",
          [](Connector& c, const std::vector<std::string>& keys) {
            return c.Submit(Op::kExists, keys, py::none());
          },
          py::arg("keys"),
          "Lookup and lock: each key found is held for the load that follows (released by "
          "that load, or after lookup_lease_ms).")
      .def(
          "submit_batch_delete",
          [](Connector& c, const std::vector<std::string>& keys) {
            return c.Submit(Op::kDelete, keys, py::none());
          },
          py::arg("keys"))
      .def("drain_completions", &Connector::Drain,
           "[(future_id, ok, error, [bool per key] or None), ...]")
      .def("close", &Connector::Close);
}

}  // namespace kvpool_py
