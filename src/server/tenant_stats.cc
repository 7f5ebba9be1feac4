#include "server/tenant_stats.h"

namespace kvpool::server {

TenantCounters* TenantStats::For(std::string_view name) {
  MutexLock lock(mu_);
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second.get();
  if (by_name_.size() >= kMaxTenants) name = "other";
  auto [at, added] = by_name_.try_emplace(std::string(name));
  if (added) at->second = std::make_unique<TenantCounters>();
  return at->second.get();
}

std::vector<TenantSnapshot> TenantStats::Snapshot() const {
  MutexLock lock(mu_);
  std::vector<TenantSnapshot> out;
  out.reserve(by_name_.size());
  for (const auto& [name, c] : by_name_) {
    auto r = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
    out.push_back(TenantSnapshot{name, r(c->connections), r(c->requests), r(c->gets), r(c->hits),
                                 r(c->puts), r(c->bytes_in), r(c->bytes_out)});
  }
  return out;
}

}  // namespace kvpool::server
