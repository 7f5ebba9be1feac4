#include "kvpool/near_cache.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"

namespace kvpool {

class NearCache::Impl {
 public:
  Impl(const NearCacheOptions& o, std::unique_ptr<Store> local, std::unique_ptr<BlockStore> backend)
      : o_(o), local_(std::move(local)), backend_(std::move(backend)) {
    worker_ = std::thread([this] { Work(); });
  }

  ~Impl() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    worker_.join();
  }

  struct Job {
    std::vector<BlockKey> chain;
    Deadline deadline;
    size_t local = 0;  // leading blocks local so far
    bool done = false;
  };

  Ticket Prestage(std::span<const BlockKey> chain, Deadline deadline) {
    MutexLock lock(mu_);
    Ticket t = next_++;
    auto& j = jobs_[t];
    j.chain.assign(chain.begin(), chain.end());
    j.deadline = deadline;
    queue_.push_back(t);
    cv_.SignalAll();
    return t;
  }

  size_t WaitPrestaged(Ticket t, Deadline deadline) {
    MutexLock lock(mu_);
    auto done = [&]() REQUIRES(mu_) {
      auto it = jobs_.find(t);
      return it == jobs_.end() || it->second.done;
    };
    if (deadline.none()) {
      cv_.Wait(lock, done);
    } else {
      uint64_t now = NowNanos();
      if (deadline.steady_ns > now)
        cv_.WaitFor(lock, std::chrono::nanoseconds(deadline.steady_ns - now), done);
    }
    auto it = jobs_.find(t);
    if (it == jobs_.end()) return 0;
    size_t n = it->second.local;
    if (it->second.done) jobs_.erase(it);  // a finished ticket is reported once
    return n;
  }

  Status GetBatch(std::span<GetOp> ops, Deadline deadline) {
    (void)local_->GetBatch(ops);
    std::vector<GetOp> remote;
    std::vector<size_t> where;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].status.ok()) {
        Count(&NearCacheStats::local_hits);
      } else if (ops[i].status.IsNotFound()) {
        remote.push_back(ops[i]);
        where.push_back(i);
      }
    }
    if (remote.empty()) return Status::Ok();
    Status s;
    {
      std::lock_guard<std::mutex> lock(io_mu_);
      s = backend_->GetBatch(remote, deadline);
    }
    for (size_t k = 0; k < remote.size(); ++k) {
      GetOp& op = ops[where[k]];
      op = remote[k];
      if (op.status.ok()) {
        Count(&NearCacheStats::pool_hits);
        if (o_.keep_fetched) (void)local_->Put(op.key, op.buffer.first(op.size));
      } else {
        Count(&NearCacheStats::misses);
      }
    }
    return s;
  }

  void Count(uint64_t NearCacheStats::*field, uint64_t n = 1) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.*field += n;
  }

  // Puts go to the backend; what it took is kept locally too when keep_fetched (replacing
  // the local copy on an overwrite). A failed overwrite drops the local copy: the backend
  // may hold either value now. kExists leaves it: insert-only blocks do not change.
  Status PutBatch(std::span<PutOp> ops, bool overwrite, Deadline deadline) {
    Status s;
    {
      std::lock_guard<std::mutex> lock(io_mu_);
      s = backend_->PutBatch(ops, overwrite, deadline);
    }
    for (const PutOp& op : ops) {
      PutOptions po{op.parent, overwrite, {}, op.tenant};
      if (op.status.ok() && o_.keep_fetched) {
        (void)local_->Put(op.key, op.value, po);
      } else if (overwrite) {
        (void)local_->Erase(op.key);
      }
    }
    return s;
  }

  Status ExistsBatch(std::span<KeyOp> ops, Deadline deadline) {
    (void)local_->ExistsBatch(ops);
    std::vector<KeyOp> remote;
    std::vector<size_t> where;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i].status.ok()) {
        remote.push_back({ops[i].key, {}});
        where.push_back(i);
      }
    }
    if (remote.empty()) return Status::Ok();
    Status s;
    {
      std::lock_guard<std::mutex> lock(io_mu_);
      s = backend_->ExistsBatch(remote, deadline);
    }
    for (size_t k = 0; k < remote.size(); ++k) ops[where[k]].status = remote[k].status;
    return s;
  }

  Status EraseBatch(std::span<KeyOp> ops, Deadline deadline) {
    std::vector<KeyOp> local(ops.begin(), ops.end());
    (void)local_->EraseBatch(local);
    Status s;
    {
      std::lock_guard<std::mutex> lock(io_mu_);
      s = backend_->EraseBatch(ops, deadline);
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (local[i].status.ok() && ops[i].status.IsNotFound()) ops[i].status = Status::Ok();
    }
    return s;
  }

  Result<size_t> MatchPrefix(std::span<const BlockKey> chain, Deadline deadline) {
    size_t local = local_->MatchPrefix(chain).value();
    if (local == chain.size()) return local;
    Result<size_t> remote = [&] {
      std::lock_guard<std::mutex> lock(io_mu_);
      return backend_->MatchPrefix(chain, deadline);
    }();
    if (!remote.ok()) return remote;
    return std::max(local, remote.value());
  }

  const NearCacheOptions o_;
  std::unique_ptr<Store> local_;
  std::unique_ptr<BlockStore> backend_;
  mutable std::mutex stats_mu_;
  NearCacheStats stats_;

 private:
  // Fetches one job's chain in order, a batch at a time; stops at a miss or the deadline.
  // Transfer buffers persist across prestages and only grow (to the largest block seen).
  void Run(Ticket t, const Job& job) {
    const std::vector<BlockKey>& chain = job.chain;
    if (slots_.size() < o_.batch) slots_.resize(o_.batch);
    size_t i = local_->MatchPrefix(chain).value();  // already local: no transfer
    Publish(t, i, false);
    while (i < chain.size()) {
      if (job.deadline.passed()) {
        Count(&NearCacheStats::prestage_stopped_at_deadline);
        break;
      }
      size_t n = std::min<size_t>(o_.batch, chain.size() - i);
      std::vector<GetOp> ops(n);
      for (size_t k = 0; k < n; ++k) {
        if (slots_[k].size() < slot_bytes_) slots_[k].resize(slot_bytes_);
        ops[k].key = chain[i + k];
        ops[k].buffer = slots_[k];
      }
      {
        std::lock_guard<std::mutex> lock(io_mu_);
        (void)backend_->GetBatch(ops, job.deadline);
        // Blocks larger than the slots: grow every slot to the largest (later batches reuse
        // them), then fetch those blocks again in one request.
        std::vector<GetOp> again;
        std::vector<size_t> where;
        for (size_t k = 0; k < n; ++k) {
          GetOp& op = ops[k];
          if (op.status.code() != Code::kBufferTooSmall || op.size > o_.max_block_bytes) continue;
          slot_bytes_ = std::max<uint64_t>(slot_bytes_, op.size);
          where.push_back(k);
        }
        if (!where.empty()) {
          for (auto& slot : slots_) {
            if (slot.size() < slot_bytes_) slot.resize(slot_bytes_);
          }
          for (size_t k : where) {
            ops[k].buffer = slots_[k];
            again.push_back(ops[k]);
          }
          (void)backend_->GetBatch(again, job.deadline);
          for (size_t j = 0; j < where.size(); ++j) ops[where[j]] = again[j];
        }
      }
      size_t got = 0;
      for (; got < n; ++got) {
        GetOp& op = ops[got];
        if (!op.status.ok()) break;
        Status ps = local_->Put(op.key, op.buffer.first(op.size), {ParentOf(chain, i + got)});
        if (!ps.ok() && ps.code() != Code::kExists) break;
      }
      Count(&NearCacheStats::prestaged, got);
      i += got;
      Publish(t, i, false);
      if (got < n) {
        Count(ops[got].status.code() == Code::kTimeout
                  ? &NearCacheStats::prestage_stopped_at_deadline
                  : &NearCacheStats::prestage_stopped_at_miss);
        break;
      }
    }
    Publish(t, i, true);
  }

  static BlockKey ParentOf(const std::vector<BlockKey>& chain, size_t i) {
    return i == 0 ? BlockKey{} : chain[i - 1];
  }

  void Publish(Ticket t, size_t local, bool done) {
    MutexLock lock(mu_);
    auto it = jobs_.find(t);
    if (it != jobs_.end()) {
      it->second.local = local;
      it->second.done = done;
    }
    if (done) {
      // Prestages nobody waits for are forgotten once many newer ones have finished.
      finished_.push_back(t);
      while (finished_.size() > kFinishedKept) {
        auto old = jobs_.find(finished_.front());
        if (old != jobs_.end() && old->second.done) jobs_.erase(old);
        finished_.pop_front();
      }
      cv_.SignalAll();
    }
  }

  void Work() {
    for (;;) {
      Ticket t;
      Job snapshot;
      {
        MutexLock lock(mu_);
        cv_.Wait(lock, [&]() REQUIRES(mu_) { return stop_ || !queue_.empty(); });
        if (stop_) {
          for (auto& [id, j] : jobs_) j.done = true;
          cv_.SignalAll();
          return;
        }
        t = queue_.front();
        queue_.pop_front();
        Job& queued = jobs_[t];
        snapshot.chain = std::move(queued.chain);  // only the worker needs the chain
        snapshot.deadline = queued.deadline;
      }
      Run(t, snapshot);
    }
  }

  std::mutex io_mu_;  // the connection: one request at a time
  // The worker's transfer buffers (only the worker thread touches them).
  std::vector<std::vector<std::byte>> slots_;
  uint64_t slot_bytes_ = 64 * 1024;
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  Ticket next_ GUARDED_BY(mu_) = 1;
  std::map<Ticket, Job> jobs_ GUARDED_BY(mu_);
  std::deque<Ticket> queue_ GUARDED_BY(mu_);
  static constexpr size_t kFinishedKept = 4096;
  std::deque<Ticket> finished_ GUARDED_BY(mu_);  // done, oldest first
  std::thread worker_;
};

Result<std::unique_ptr<NearCache>> NearCache::Create(const NearCacheOptions& o,
                                                     std::unique_ptr<BlockStore> backend) {
  if (!backend) return Status::InvalidArgument("near cache: no backend store");
  if (o.batch == 0 || o.max_block_bytes == 0)
    return Status::InvalidArgument("near cache: batch and max_block_bytes must be > 0");
  StoreOptions so = o.store;
  so.max_value_bytes = std::min<uint64_t>(so.max_value_bytes, so.dram_bytes / 2);
  auto local = Store::Open(so);
  if (!local.ok()) return local.status();
  auto impl = std::make_unique<Impl>(o, std::move(local).value(), std::move(backend));
  return std::unique_ptr<NearCache>(new NearCache(std::move(impl)));
}

NearCache::NearCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NearCache::~NearCache() = default;

NearCache::Ticket NearCache::Prestage(std::span<const BlockKey> chain, Deadline deadline) {
  return impl_->Prestage(chain, deadline);
}
size_t NearCache::WaitPrestaged(Ticket ticket, Deadline deadline) {
  return impl_->WaitPrestaged(ticket, deadline);
}
Status NearCache::GetBatch(std::span<GetOp> ops, Deadline deadline) {
  if (deadline.passed()) return ExpireAll(ops);
  return impl_->GetBatch(ops, deadline);
}
Status NearCache::PutBatch(std::span<PutOp> ops, bool overwrite, Deadline deadline) {
  if (deadline.passed()) return ExpireAll(ops);
  return impl_->PutBatch(ops, overwrite, deadline);
}
Status NearCache::ExistsBatch(std::span<KeyOp> ops, Deadline deadline) {
  if (deadline.passed()) return ExpireAll(ops);
  return impl_->ExistsBatch(ops, deadline);
}
Status NearCache::EraseBatch(std::span<KeyOp> ops, Deadline deadline) {
  if (deadline.passed()) return ExpireAll(ops);
  return impl_->EraseBatch(ops, deadline);
}
Result<size_t> NearCache::MatchPrefix(std::span<const BlockKey> chain, Deadline deadline) {
  if (deadline.passed()) return Status::Timeout("deadline passed before the call");
  return impl_->MatchPrefix(chain, deadline);
}
Status NearCache::ReadBatch(std::span<const BlockKey> keys, std::span<Result<BlockView>> out,
                            Deadline deadline) {
  // Local blocks as views in place; the rest copied from the backend (BlockStore's way).
  if (out.size() < keys.size()) return Status::InvalidArgument("fewer results than keys");
  if (deadline.passed()) return ExpireAll(out.first(keys.size()));
  (void)impl_->local_->ReadBatch(keys, out);
  std::vector<BlockKey> remote;
  std::vector<size_t> where;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!out[i].ok() && out[i].status().IsNotFound()) {
      remote.push_back(keys[i]);
      where.push_back(i);
    }
  }
  if (remote.empty()) return Status::Ok();
  std::vector<Result<BlockView>> got;
  got.reserve(remote.size());
  for (size_t k = 0; k < remote.size(); ++k) got.emplace_back(Status::NotFound());
  Status s = BlockStore::ReadBatch(remote, got, deadline);
  for (size_t k = 0; k < remote.size(); ++k) out[where[k]] = std::move(got[k]);
  return s;
}
size_t NearCache::LocalPrefix(std::span<const BlockKey> chain) {
  return impl_->local_->MatchPrefix(chain).value();
}
Store& NearCache::local() { return *impl_->local_; }
NearCacheStats NearCache::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu_);
  return impl_->stats_;
}

}  // namespace kvpool
