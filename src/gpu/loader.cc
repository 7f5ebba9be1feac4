// The loader: kvpool's sources and targets on one side, a Mover on the other. Host memory
// read by a load stays held (views, staging) until that load's event has passed.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "kvpool/gpu_loader.h"

namespace kvpool::gpu {
namespace {

Status CheckSizes(size_t keys, size_t slots, size_t out) {
  if (slots != keys || out != keys)
    return Status::InvalidArgument("keys, slots and statuses differ in length");
  return Status::Ok();
}

Status WrongSize(size_t got, uint64_t want) {
  return Status::InvalidArgument("block of " + std::to_string(got) + " bytes; the layout's is " +
                                 std::to_string(want));
}

}  // namespace

Status RegisterStore(Store& store) {
  std::span<std::byte> m = store.DramMemory();
  if (m.empty()) return Status::InvalidArgument("store has no DRAM tier");
  return RegisterHost(m);
}

Status UnregisterStore(Store& store) { return UnregisterHost(store.DramMemory()); }

Status RegisterClient(Client& client) {
  if (!client.connected()) (void)client.Ping();  // the region is mapped at connect
  std::span<std::byte> m = client.shared_memory();
  if (m.empty())
    return Status::InvalidArgument(
        "client has no same-host region (unix: address "
        "and shared_memory_bytes > 0)");
  return RegisterHost(m);
}

Status UnregisterClient(Client& client) { return UnregisterHost(client.shared_memory()); }

// A connection's worker: its mover, its two staging halves (registered memory: the
// connection's same-host region when it is large enough, else pinned memory it owns) and
// the event of each half's last move.
struct Worker {
  std::unique_ptr<Mover> mover;
  std::unique_ptr<PinnedBuffer> pinned;
  std::unique_ptr<Event> done[2];
  bool used[2] = {false, false};

  Status Init(const PagedLayout& layout) {
    if (mover) return Status::Ok();
    auto m = Mover::Create(layout);
    if (!m.ok()) return m.status();
    mover = std::move(*m);
    for (auto& e : done) {
      auto r = Event::Create();
      if (!r.ok()) return r.status();
      e = std::move(*r);
    }
    return Status::Ok();
  }
  // Waits until half h's last move has read its memory.
  Status Free(int h) {
    if (!used[h]) return Status::Ok();
    used[h] = false;
    return done[h]->Synchronize();
  }
  Status Drain() {
    Status s0 = Free(0), s1 = Free(1);
    return s0.ok() ? s1 : s0;
  }
  // Staging of `bytes` (both halves): the client's region if it holds them, else pinned.
  Result<std::span<std::byte>> Staging(Client* c, size_t bytes) {
    if (c) {
      if (!c->connected()) (void)c->Ping();  // the region is mapped at connect
      // The server writes into the region: registered, the kernel reads it in place; not
      // registered, the mover stages it (a memcpy, still no socket copy).
      std::span<std::byte> shm = c->shared_memory();
      if (shm.size() >= bytes) return shm.first(bytes);
    }
    if (!pinned || pinned->data().size() < bytes) {
      if (Status s = Drain(); !s.ok()) return s;
      pinned.reset();
      auto p = PinnedBuffer::Create(bytes);
      if (!p.ok()) return p.status();
      pinned = std::move(*p);
    }
    return pinned->data().first(bytes);
  }
};

class Loader::Impl {
 public:
  PagedLayout layout;
  LoaderOptions o;
  std::unique_ptr<Mover> mover;  // loads from stores
  struct InFlight {
    std::unique_ptr<Event> done;
    std::vector<BlockView> views;
  };
  std::deque<InFlight> in_flight;
  std::vector<std::unique_ptr<Worker>> workers;  // one per connection of a parallel load

  uint32_t Count(LayerRange r) const { return r.count ? r.count : layout.layers() - r.first; }

  // Prestages into GPU memory, run on one thread of their own, in order.
  struct GpuPrestage {
    NearCache* near;
    std::vector<BlockKey> keys;
    std::vector<uint32_t> slots;
    void* stream;
    Deadline deadline;
    Status status;
    size_t landed = 0;
    bool done = false;
  };
  Mutex pmu;
  CondVar pcv;
  std::map<Ticket, GpuPrestage> prestages GUARDED_BY(pmu);
  std::deque<Ticket> queue GUARDED_BY(pmu);
  Ticket next_ticket GUARDED_BY(pmu) = 1;
  bool stop GUARDED_BY(pmu) = false;
  std::thread prestager;
  std::unique_ptr<Mover> prestage_mover;  // the prestage thread's own

  ~Impl() {
    {
      MutexLock lock(pmu);
      stop = true;
    }
    pcv.SignalAll();
    if (prestager.joinable()) prestager.join();
  }

  void PrestageLoop() {
    MutexLock lock(pmu);
    while (true) {
      pcv.Wait(lock, [&]() REQUIRES(pmu) { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stopping, nothing left
      Ticket t = queue.front();
      queue.pop_front();
      GpuPrestage job = prestages[t];  // a copy: the map may change meanwhile
      lock.Unlock();
      size_t landed = 0;
      Status s = RunPrestage(job, &landed);
      lock.Lock();
      GpuPrestage& j = prestages[t];
      j.status = s;
      j.landed = landed;
      j.done = true;
      pcv.SignalAll();
    }
  }

  // The near cache's prestage, then one move of the leading blocks it holds, waited for.
  Status RunPrestage(const GpuPrestage& job, size_t* landed) {
    NearCache::Ticket t = job.near->Prestage(job.keys, job.deadline);
    const size_t local = job.near->WaitPrestaged(t, {});  // the prestage stops at its deadline
    const uint64_t want = layout.HostBytes(layout.layers());
    std::vector<BlockKey> keys(job.keys.begin(), job.keys.begin() + local);
    std::vector<Result<BlockView>> got;
    for (size_t i = 0; i < keys.size(); ++i) got.emplace_back(Status::NotFound());
    (void)job.near->local().ReadBatch(keys, got);
    std::vector<BlockView> views;
    std::vector<HostBlock> blocks;
    for (size_t i = 0; i < got.size(); ++i) {  // the leading blocks only: a prefix is usable
      if (!got[i].ok() || got[i]->data().size() != want) break;
      views.push_back(std::move(*got[i]));
      blocks.push_back({const_cast<std::byte*>(views.back().data().data()), job.slots[i]});
    }
    if (blocks.empty()) return Status::Ok();
    if (!prestage_mover) {
      auto m = Mover::Create(layout);
      if (!m.ok()) return m.status();
      prestage_mover = std::move(*m);
    }
    if (Status s = prestage_mover->ToGpu(blocks, {}, job.stream); !s.ok()) return s;
    auto e = Event::Create();
    if (!e.ok()) return e.status();
    if (Status s = (*e)->Record(job.stream); !s.ok()) return s;
    if (Status s = (*e)->Synchronize(); !s.ok()) return s;  // landed: the views may go
    *landed = blocks.size();
    return Status::Ok();
  }

  void Reap() {
    while (!in_flight.empty() && in_flight.front().done->Ready()) in_flight.pop_front();
  }

  Worker* WorkerAt(size_t i, Status* s) {
    while (workers.size() <= i) workers.push_back(std::make_unique<Worker>());
    *s = workers[i]->Init(layout);
    return workers[i].get();
  }

  // Reads keys' views (held until the moves pass) and moves them: every layer of `range`
  // in one launch, or with `per_layer` one launch per layer of the layout, each followed by
  // events[l] (if any) and on_layer(l).
  Status FromStore(Store& store, std::span<const BlockKey> keys, std::span<const uint32_t> slots,
                   LayerRange range, void* stream, std::span<Status> out, bool per_layer = false,
                   std::span<Event* const> events = {},
                   const std::function<void(size_t)>& on_layer = {}) {
    Reap();
    const uint64_t want = layout.HostBytes(per_layer ? layout.layers() : Count(range));
    std::vector<Result<BlockView>> got;
    got.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) got.emplace_back(Status::NotFound());
    (void)store.ReadBatch(keys, got);
    InFlight f;
    std::vector<HostBlock> blocks;
    for (size_t k = 0; k < keys.size(); ++k) {
      const size_t i = k;
      if (!got[k].ok()) {
        out[i] = got[k].status().code() == Code::kCorruption ? Status::NotFound() : got[k].status();
        continue;
      }
      BlockView v = std::move(*got[k]);
      if (v.data().size() != want) {
        out[i] = WrongSize(v.data().size(), want);
        continue;
      }
      blocks.push_back({const_cast<std::byte*>(v.data().data()), slots[i]});
      f.views.push_back(std::move(v));
      out[i] = Status::Ok();
    }
    if (per_layer) {
      for (uint32_t l = 0; l < layout.layers(); ++l) {
        if (!blocks.empty())
          if (Status s = mover->ToGpu(blocks, LayerRange{l, 1, true}, stream); !s.ok()) return s;
        if (l < events.size())
          if (Status s = events[l]->Record(stream); !s.ok()) return s;
        if (on_layer) on_layer(l);
      }
    } else {
      if (blocks.empty()) return Status::Ok();
      if (Status s = mover->ToGpu(blocks, range, stream); !s.ok()) return s;
    }
    if (blocks.empty()) return Status::Ok();
    auto e = Event::Create();
    if (!e.ok()) return e.status();
    f.done = std::move(*e);
    if (Status s = f.done->Record(stream); !s.ok()) return s;
    in_flight.push_back(std::move(f));
    return Status::Ok();
  }

  // One connection's share, pipelined: chunk c+1 is on the wire while chunk c is moved.
  Status FromClient(Worker& w, Client& c, std::span<const BlockKey> keys,
                    std::span<const uint32_t> slots, LayerRange range, void* stream,
                    std::span<Status> out, Deadline deadline) {
    if (keys.empty()) return Status::Ok();
    const uint64_t want = layout.HostBytes(Count(range));
    size_t chunk = std::min<size_t>(std::max<uint32_t>(o.chunk_blocks, 1), keys.size());
    auto staging = w.Staging(&c, 2 * chunk * want);
    if (!staging.ok()) return staging.status();
    std::span<std::byte> half[2] = {staging->first(chunk * want),
                                    staging->subspan(chunk * want, chunk * want)};
    const size_t chunks = (keys.size() + chunk - 1) / chunk;
    std::vector<GetOp> ops[2];
    Client::Ticket tickets[2] = {0, 0};
    auto submit = [&](size_t ci) -> Status {
      const int h = ci % 2;
      if (Status s = w.Free(h); !s.ok()) return s;
      const size_t begin = ci * chunk, n = std::min(chunk, keys.size() - begin);
      ops[h].assign(n, GetOp{});
      for (size_t k = 0; k < n; ++k) {
        ops[h][k].key = keys[begin + k];
        ops[h][k].buffer = half[h].subspan(k * want, want);
      }
      auto t = c.SubmitGet(ops[h]);
      if (!t.ok()) {
        for (size_t k = 0; k < n; ++k) out[begin + k] = t.status();
        ops[h].clear();
        return Status::Ok();
      }
      tickets[h] = *t;
      return Status::Ok();
    };
    auto finish = [&](size_t ci) -> Status {
      const int h = ci % 2;
      const size_t begin = ci * chunk;
      if (ops[h].empty()) return Status::Ok();
      (void)c.Wait(tickets[h], deadline);
      std::vector<HostBlock> blocks;
      for (size_t k = 0; k < ops[h].size(); ++k) {
        GetOp& op = ops[h][k];
        if (op.status.ok() && op.size != want) op.status = WrongSize(op.size, want);
        if (op.status.code() == Code::kBufferTooSmall) op.status = WrongSize(op.size, want);
        out[begin + k] = op.status;
        if (op.status.ok()) blocks.push_back({op.buffer.data(), slots[begin + k]});
      }
      if (blocks.empty()) return Status::Ok();
      if (Status s = w.mover->ToGpu(blocks, range, stream); !s.ok()) return s;
      w.used[h] = true;
      return w.done[h]->Record(stream);
    };
    for (size_t ci = 0; ci < chunks; ++ci) {
      if (Status s = submit(ci); !s.ok()) return s;
      if (ci > 0)
        if (Status s = finish(ci - 1); !s.ok()) return s;
    }
    return finish(chunks - 1);
  }
};

Result<std::unique_ptr<Loader>> Loader::Create(const PagedLayout& layout,
                                               const LoaderOptions& options) {
  auto m = Mover::Create(layout);
  if (!m.ok()) return m.status();
  auto impl = std::make_unique<Impl>();
  impl->layout = layout;
  impl->o = options;
  impl->mover = std::move(*m);
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Loader::Ticket Loader::PrestageToGpu(NearCache& near, std::span<const BlockKey> keys,
                                     std::span<const uint32_t> slots, void* stream,
                                     Deadline deadline) {
  MutexLock lock(impl_->pmu);
  const Ticket t = impl_->next_ticket++;
  Impl::GpuPrestage& job = impl_->prestages[t];
  job.near = &near;
  job.stream = stream;
  job.deadline = deadline;
  if (slots.size() != keys.size()) {
    job.status = Status::InvalidArgument("keys and slots differ in length");
    job.done = true;
    return t;
  }
  for (uint32_t s : slots) {
    if (s >= impl_->layout.num_slots) {
      job.status = Status::InvalidArgument("slot " + std::to_string(s) + " of " +
                                           std::to_string(impl_->layout.num_slots));
      job.done = true;
      return t;
    }
  }
  job.keys.assign(keys.begin(), keys.end());
  job.slots.assign(slots.begin(), slots.end());
  impl_->queue.push_back(t);
  if (!impl_->prestager.joinable())
    impl_->prestager = std::thread([impl = impl_.get()] { impl->PrestageLoop(); });
  impl_->pcv.SignalAll();
  return t;
}

Result<size_t> Loader::WaitGpuPrestage(Ticket ticket, Deadline deadline) {
  MutexLock lock(impl_->pmu);
  auto it = impl_->prestages.find(ticket);
  if (it == impl_->prestages.end())
    return Status::InvalidArgument("no such prestage (or already reported)");
  auto done = [&] { return it->second.done; };
  if (deadline.none()) {
    impl_->pcv.Wait(lock, done);
  } else {
    const uint64_t now = NowNanos();
    if (deadline.steady_ns > now)
      impl_->pcv.WaitFor(lock, std::chrono::nanoseconds(deadline.steady_ns - now), done);
  }
  if (!it->second.done) return size_t{0};
  Status s = it->second.status;
  size_t landed = it->second.landed;
  impl_->prestages.erase(it);
  if (!s.ok()) return s;
  return landed;
}
Loader::~Loader() { (void)Synchronize(); }  // then ~Impl finishes the queued prestages
const PagedLayout& Loader::layout() const { return impl_->layout; }

Mover::Stats Loader::stats() const {
  Mover::Stats s = impl_->mover->stats();
  for (auto& w : impl_->workers) {
    if (!w->mover) continue;
    Mover::Stats ws = w->mover->stats();
    s.launches += ws.launches;
    s.blocks += ws.blocks;
    s.bytes += ws.bytes;
    s.staged_blocks += ws.staged_blocks;
  }
  return s;
}

Status Loader::Synchronize() {
  Status first;
  for (auto& f : impl_->in_flight)
    if (Status s = f.done->Synchronize(); !s.ok() && first.ok()) first = s;
  impl_->in_flight.clear();
  for (auto& w : impl_->workers)
    if (Status s = w->Drain(); !s.ok() && first.ok()) first = s;
  return first;
}

Status Loader::Load(Store& store, std::span<const BlockKey> keys, std::span<const uint32_t> slots,
                    LayerRange layers, void* stream, std::span<Status> out) {
  if (Status s = CheckSizes(keys.size(), slots.size(), out.size()); !s.ok()) return s;
  return impl_->FromStore(store, keys, slots, layers, stream, out);
}

Status Loader::LoadLayerwise(Store& store, std::span<const BlockKey> keys,
                             std::span<const uint32_t> slots, void* stream,
                             std::span<Event* const> events, std::span<Status> out,
                             const std::function<void(size_t)>& on_layer) {
  if (Status s = CheckSizes(keys.size(), slots.size(), out.size()); !s.ok()) return s;
  if (!events.empty() && events.size() != impl_->layout.layers())
    return Status::InvalidArgument("one event per layer of the layout");
  return impl_->FromStore(store, keys, slots, {}, stream, out, true, events, on_layer);
}

Status Loader::Load(std::span<Client* const> clients, std::span<const BlockKey> keys,
                    std::span<const uint32_t> slots, LayerRange layers, void* stream,
                    std::span<Status> out, Deadline deadline) {
  if (Status s = CheckSizes(keys.size(), slots.size(), out.size()); !s.ok()) return s;
  if (clients.empty()) return Status::InvalidArgument("no connections");
  impl_->Reap();
  const size_t n = clients.size(), share = (keys.size() + n - 1) / n;
  std::vector<Worker*> ws(n);
  for (size_t i = 0; i < n; ++i) {
    Status s;
    ws[i] = impl_->WorkerAt(i, &s);
    if (!s.ok()) return s;
  }
  std::vector<Status> results(n);
  auto run = [&](size_t i) {
    const size_t begin = std::min(keys.size(), i * share);
    const size_t len = std::min(share, keys.size() - begin);
    results[i] =
        impl_->FromClient(*ws[i], *clients[i], keys.subspan(begin, len), slots.subspan(begin, len),
                          layers, stream, out.subspan(begin, len), deadline);
  };
  if (n == 1) {
    run(0);
  } else {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < n; ++i) threads.emplace_back(run, i);
    for (auto& t : threads) t.join();
  }
  for (const Status& s : results)
    if (!s.ok()) return s;
  return Status::Ok();
}

Status Loader::Load(NearCache& near, std::span<const BlockKey> keys,
                    std::span<const uint32_t> slots, LayerRange layers, void* stream,
                    std::span<Status> out, Deadline deadline) {
  if (Status s = CheckSizes(keys.size(), slots.size(), out.size()); !s.ok()) return s;
  if (Status s = impl_->FromStore(near.local(), keys, slots, layers, stream, out); !s.ok())
    return s;
  // The rest through the near cache (which keeps them) into pinned staging, then moved.
  std::vector<size_t> rest;
  for (size_t i = 0; i < keys.size(); ++i)
    if (out[i].IsNotFound()) rest.push_back(i);
  if (rest.empty()) return Status::Ok();
  Status ws;
  Worker* w = impl_->WorkerAt(0, &ws);
  if (!ws.ok()) return ws;
  if (Status s = w->Drain(); !s.ok()) return s;
  const uint64_t want = impl_->layout.HostBytes(impl_->Count(layers));
  auto staging = w->Staging(nullptr, rest.size() * want);
  if (!staging.ok()) return staging.status();
  std::vector<GetOp> ops(rest.size());
  for (size_t k = 0; k < rest.size(); ++k) {
    ops[k].key = keys[rest[k]];
    ops[k].buffer = staging->subspan(k * want, want);
  }
  Status fetched = near.GetBatch(ops, deadline);
  std::vector<HostBlock> blocks;
  for (size_t k = 0; k < rest.size(); ++k) {
    Status s = ops[k].status;
    if (s.ok() && ops[k].size != want) s = WrongSize(ops[k].size, want);
    if (s.code() == Code::kBufferTooSmall) s = WrongSize(ops[k].size, want);
    out[rest[k]] = s;
    if (s.ok()) blocks.push_back({ops[k].buffer.data(), slots[rest[k]]});
  }
  if (blocks.empty()) return fetched.ok() || fetched.IsNotFound() ? Status::Ok() : fetched;
  if (Status s = w->mover->ToGpu(blocks, layers, stream); !s.ok()) return s;
  w->used[0] = true;
  return w->done[0]->Record(stream);
}

Status Loader::LoadLayers(Client& client, std::span<const BlockKey> blocks,
                          std::span<const uint32_t> slots, std::span<const uint32_t> layers,
                          void* stream, std::span<Event* const> events, std::span<Status> out,
                          const std::function<void(size_t)>& on_layer, Deadline deadline) {
  if (slots.size() != blocks.size()) return Status::InvalidArgument("blocks and slots differ");
  if (events.size() != layers.size()) return Status::InvalidArgument("one event per layer");
  if (out.size() != blocks.size() * layers.size())
    return Status::InvalidArgument("one status per block and layer");
  for (uint32_t l : layers)
    if (l >= impl_->layout.layers()) return Status::InvalidArgument("layer past the layout");
  Status ws;
  Worker* w = impl_->WorkerAt(0, &ws);
  if (!ws.ok()) return ws;
  if (Status s = w->Drain(); !s.ok()) return s;
  const uint64_t want = impl_->layout.HostBytes(1);
  const size_t nb = blocks.size();
  auto staging = w->Staging(&client, layers.size() * nb * want);
  if (!staging.ok()) return staging.status();
  std::vector<std::vector<GetOp>> ops(layers.size(), std::vector<GetOp>(nb));
  std::vector<std::span<GetOp>> spans;
  for (size_t i = 0; i < layers.size(); ++i) {
    for (size_t j = 0; j < nb; ++j) {
      ops[i][j].key = LayerKey(blocks[j], layers[i]);
      ops[i][j].buffer = staging->subspan((i * nb + j) * want, want);
    }
    spans.push_back(ops[i]);
  }
  Status moved;
  Status s = client.GetLayers(
      spans,
      [&](size_t i) {
        std::vector<HostBlock> hb;
        for (size_t j = 0; j < nb; ++j) {
          GetOp& op = ops[i][j];
          Status st = op.status;
          if (st.ok() && op.size != want) st = WrongSize(op.size, want);
          out[i * nb + j] = st;
          if (st.ok()) hb.push_back({op.buffer.data(), slots[j]});
        }
        if (!moved.ok()) return;
        if (!hb.empty()) moved = w->mover->ToGpu(hb, LayerRange{layers[i], 1}, stream);
        if (moved.ok()) moved = events[i]->Record(stream);
        if (moved.ok() && on_layer) on_layer(i);
      },
      deadline);
  // Every layer's moves read the staging: it is free once the last one has passed.
  w->used[0] = true;
  if (Status r = w->done[0]->Record(stream); !r.ok() && moved.ok()) moved = r;
  if (!moved.ok()) return moved;
  return s.ok() || s.code() == Code::kTimeout ? Status::Ok() : s;
}

Status Loader::Save(Store& store, std::span<const BlockKey> keys, std::span<const BlockKey> parents,
                    std::span<const uint32_t> slots, LayerRange layers, void* stream,
                    std::span<Status> out) {
  if (Status s = CheckSizes(keys.size(), slots.size(), out.size()); !s.ok()) return s;
  if (!parents.empty() && parents.size() != keys.size())
    return Status::InvalidArgument("keys and parents differ in length");
  const uint64_t want = impl_->layout.HostBytes(impl_->Count(layers));
  std::vector<Reservation> res(keys.size());
  std::vector<HostBlock> blocks;
  std::vector<size_t> where;
  for (size_t i = 0; i < keys.size(); ++i) {
    PutOptions po;
    if (!parents.empty()) po.parent = parents[i];
    auto r = store.Reserve(keys[i], want, po);
    if (!r.ok()) {
      out[i] = r.status();
      continue;
    }
    res[i] = std::move(*r);
    blocks.push_back({res[i].data().data(), slots[i]});
    where.push_back(i);
  }
  if (blocks.empty()) return Status::Ok();
  if (Status s = impl_->mover->ToHost(blocks, layers, stream); !s.ok()) return s;
  auto e = Event::Create();
  if (!e.ok()) return e.status();
  if (Status s = (*e)->Record(stream); !s.ok()) return s;
  if (Status s = (*e)->Synchronize(); !s.ok()) return s;
  for (size_t i : where) out[i] = store.Commit(std::move(res[i]));
  return Status::Ok();
}

Status Loader::Save(Client& client, std::span<const BlockKey> keys,
                    std::span<const BlockKey> parents, std::span<const uint32_t> slots,
                    LayerRange layers, void* stream, std::span<Status> out, Deadline deadline) {
  if (Status s = CheckSizes(keys.size(), slots.size(), out.size()); !s.ok()) return s;
  if (!parents.empty() && parents.size() != keys.size())
    return Status::InvalidArgument("keys and parents differ in length");
  Status ws;
  Worker* w = impl_->WorkerAt(0, &ws);
  if (!ws.ok()) return ws;
  if (Status s = w->Drain(); !s.ok()) return s;
  const uint64_t want = impl_->layout.HostBytes(impl_->Count(layers));
  const size_t chunk = std::min<size_t>(std::max<uint32_t>(impl_->o.chunk_blocks, 1), keys.size());
  if (chunk == 0) return Status::Ok();
  auto staging = w->Staging(&client, chunk * want);
  if (!staging.ok()) return staging.status();
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    const size_t n = std::min(chunk, keys.size() - begin);
    std::vector<HostBlock> blocks(n);
    std::vector<PutOp> ops(n);
    for (size_t k = 0; k < n; ++k) {
      blocks[k] = {staging->data() + k * want, slots[begin + k]};
      ops[k] = PutOp{keys[begin + k],
                     staging->subspan(k * want, want),
                     parents.empty() ? BlockKey{} : parents[begin + k],
                     {}};
    }
    if (Status s = w->mover->ToHost(blocks, layers, stream); !s.ok()) return s;
    if (Status s = w->done[0]->Record(stream); !s.ok()) return s;
    if (Status s = w->done[0]->Synchronize(); !s.ok()) return s;
    (void)client.PutBatch(ops, false, deadline);
    for (size_t k = 0; k < n; ++k) out[begin + k] = ops[k].status;
  }
  return Status::Ok();
}

}  // namespace kvpool::gpu
