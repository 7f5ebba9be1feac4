#include "server/leases.h"

#include <algorithm>
#include <cstdint>

namespace kvpool::server {

void Leases::Hold(const BlockKey& key, BlockView view, uint64_t now_ns, uint64_t ttl_ns) {
  MutexLock lock(mu_);
  SweepLocked(now_ns);
  ++counts_.granted;
  uint64_t expiry_ns = now_ns + ttl_ns;
  auto [it, fresh] = held_.try_emplace(key);
  Lease& l = it->second;
  if (fresh) {
    bytes_ += view.data().size();
    l.view = std::make_shared<const BlockView>(std::move(view));
    count_.fetch_add(1, std::memory_order_relaxed);
  } else {
    due_.erase({l.expiry_ns, l.seq});
    expiry_ns = std::max(expiry_ns, l.expiry_ns);
  }
  ++l.holders;
  l.expiry_ns = expiry_ns;
  l.seq = ++next_seq_;
  due_.emplace(std::pair{l.expiry_ns, l.seq}, key);
  if (l.expiry_ns < next_due_.load(std::memory_order_relaxed)) {
    next_due_.store(l.expiry_ns, std::memory_order_relaxed);
  }
  // Over the bound: the leases due soonest go (possibly this one, if it is alone and large).
  while (bytes_ > max_bytes_ && !due_.empty()) DropLocked(held_.find(due_.begin()->second), true);
}

std::shared_ptr<const BlockView> Leases::Take(const BlockKey& key, uint64_t now_ns,
                                              bool store_missed) {
  MutexLock lock(mu_);
  SweepLocked(now_ns);
  auto it = held_.find(key);
  if (it == held_.end()) return nullptr;
  ++counts_.loads;
  counts_.saved += store_missed;
  std::shared_ptr<const BlockView> v = it->second.view;
  if (--it->second.holders == 0) DropLocked(it, false);
  return v;
}

void Leases::ForgetSlow(const BlockKey* key) {
  MutexLock lock(mu_);
  if (key == nullptr) {
    while (!held_.empty()) DropLocked(held_.begin(), false);
    return;
  }
  auto it = held_.find(*key);
  if (it != held_.end()) DropLocked(it, false);
}

void Leases::SweepSlow(uint64_t now_ns) {
  MutexLock lock(mu_);
  SweepLocked(now_ns);
}

void Leases::SweepLocked(uint64_t now_ns) {
  while (!due_.empty() && due_.begin()->first.first <= now_ns) {
    DropLocked(held_.find(due_.begin()->second), true);
  }
  next_due_.store(due_.empty() ? UINT64_MAX : due_.begin()->first.first, std::memory_order_relaxed);
}

void Leases::DropLocked(Map::iterator it, bool expired) {
  Lease& l = it->second;
  bytes_ -= l.view->data().size();
  due_.erase({l.expiry_ns, l.seq});
  if (expired) counts_.expired += l.holders;
  held_.erase(it);  // the pin goes with the last reference to the view
  count_.fetch_sub(1, std::memory_order_relaxed);
}

LeaseStats Leases::stats() const {
  MutexLock lock(mu_);
  LeaseStats s = counts_;
  s.held = held_.size();
  s.held_bytes = bytes_;
  return s;
}

}  // namespace kvpool::server
