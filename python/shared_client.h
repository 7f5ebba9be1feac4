// kvpool.Client shared between Python threads: a BlockStore over a few connections to
// one kvpoold. A call takes the primary connection when it is free (so a single-threaded
// user, its same-host region and its GPU registration see one connection, as before) and
// otherwise an idle extra one, opening up to max_extra more while calls overlap; beyond
// that it waits for one to come back. Calls that must see the primary itself (its region,
// a layer stream) hold it with Primary().
#ifndef KVPOOL_PYTHON_SHARED_CLIENT_H_
#define KVPOOL_PYTHON_SHARED_CLIENT_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "kvpool/client.h"

namespace kvpool_py {

class SharedClient final : public kvpool::BlockStore {
 public:
  SharedClient(std::unique_ptr<kvpool::Client> primary, kvpool::ClientOptions options,
               size_t max_extra)
      : primary_(std::move(primary)), options_(std::move(options)), max_extra_(max_extra) {
    options_.shared_memory_bytes = 0;  // extra connections go over the socket only
  }

  // A connection held for one call (or longer); given back when destroyed.
  class Lease {
   public:
    Lease(SharedClient* s, kvpool::Client* c) : s_(s), c_(c) {}
    Lease(Lease&& o) noexcept : s_(o.s_), c_(o.c_) { o.c_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (c_) s_->GiveBack(c_);
    }
    kvpool::Client* operator->() const { return c_; }
    kvpool::Client& operator*() const { return *c_; }

   private:
    SharedClient* s_;
    kvpool::Client* c_;
  };

  Lease Any() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      if (!primary_busy_) {
        primary_busy_ = true;
        return Lease(this, primary_.get());
      }
      if (!idle_.empty()) {
        kvpool::Client* c = idle_.back();
        idle_.pop_back();
        return Lease(this, c);
      }
      if (extra_.size() < max_extra_) {
        auto c = kvpool::Client::Create(options_);  // connects lazily: no I/O under the lock
        if (c.ok()) {
          extra_.push_back(std::move(c).value());
          return Lease(this, extra_.back().get());
        }
      }
      cv_.wait(l);
    }
  }

  Lease Primary() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !primary_busy_; });
    primary_busy_ = true;
    return Lease(this, primary_.get());
  }

  // Connections opened beside the primary so far (for tests).
  size_t extra_connections() {
    std::lock_guard<std::mutex> l(mu_);
    return extra_.size();
  }

  kvpool::Status PutBatch(std::span<kvpool::PutOp> ops, bool overwrite,
                          kvpool::Deadline deadline) override {
    return Any()->PutBatch(ops, overwrite, deadline);
  }
  kvpool::Status GetBatch(std::span<kvpool::GetOp> ops, kvpool::Deadline deadline) override {
    return Any()->GetBatch(ops, deadline);
  }
  kvpool::Status ExistsBatch(std::span<kvpool::KeyOp> ops, kvpool::Deadline deadline) override {
    return Any()->ExistsBatch(ops, deadline);
  }
  kvpool::Status EraseBatch(std::span<kvpool::KeyOp> ops, kvpool::Deadline deadline) override {
    return Any()->EraseBatch(ops, deadline);
  }
  kvpool::Result<size_t> MatchPrefix(std::span<const kvpool::BlockKey> chain,
                                     kvpool::Deadline deadline) override {
    return Any()->MatchPrefix(chain, deadline);
  }

 private:
  void GiveBack(kvpool::Client* c) {
    std::lock_guard<std::mutex> l(mu_);
    if (c == primary_.get()) {
      primary_busy_ = false;
    } else {
      idle_.push_back(c);
    }
    cv_.notify_all();
  }

  const std::unique_ptr<kvpool::Client> primary_;
  kvpool::ClientOptions options_;
  const size_t max_extra_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool primary_busy_ = false;                           // guarded by mu_
  std::vector<std::unique_ptr<kvpool::Client>> extra_;  // guarded by mu_
  std::vector<kvpool::Client*> idle_;                   // guarded by mu_
};

}  // namespace kvpool_py

#endif  // KVPOOL_PYTHON_SHARED_CLIENT_H_
