#include "server/io_workers.h"

namespace kvpool::server {

IoWorkers::IoWorkers(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

void IoWorkers::Submit(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    if (!stopping_) {
      queue_.push_back(std::move(task));
      cv_.Signal();
      return;
    }
  }
  task();
}

void IoWorkers::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void IoWorkers::Loop() {
  MutexLock lock(mu_);
  for (;;) {
    cv_.Wait(lock, [this]() REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    task();
    lock.Lock();
  }
}

}  // namespace kvpool::server
