#include "cluster/registrar.h"

#include <algorithm>
#include <chrono>

#include "cluster/etcd.h"

namespace kvpool::cluster {

Registrar::Registrar(RegistrarOptions options, Member self, Log log)
    : options_(std::move(options)), self_(std::move(self)), log_(std::move(log)) {}

void Registrar::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Registrar::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Registrar::Sleep(int ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stop_; });
  return !stop_;
}

namespace {

// The value stored under exactly `key` ("" if none), or why it could not be read.
Result<std::string> ReadRecord(Etcd& etcd, const std::string& key) {
  std::vector<EtcdKv> kvs;
  int64_t revision = 0;
  if (Status s = etcd.RangePrefix(key, &kvs, &revision); !s.ok()) return s;
  for (const EtcdKv& kv : kvs) {
    if (kv.key == key) return kv.value;
  }
  return std::string();
}

}  // namespace

Status CheckMemberIdFree(const RegistrarOptions& options, const Member& self) {
  Etcd etcd(options.endpoints, options.timeout_ms, options.access);
  auto record = ReadRecord(etcd, options.prefix + self.id);
  if (!record.ok() || record->empty()) return Status::Ok();
  auto other = DecodeMember(*record);
  if (other.ok() && other->address != self.address) {
    return Status::Exists("member id '" + self.id + "' is registered by the node at " +
                          other->address +
                          "; give this node another --member-id, or stop that one");
  }
  return Status::Ok();
}

void Registrar::Run() {
  Etcd etcd(options_.endpoints, options_.timeout_ms, options_.access);
  const std::string key = options_.prefix + self_.id;
  const std::string record = EncodeMember(self_);
  int backoff_ms = 100;
  std::string last_error;
  while (Sleep(0)) {
    auto lease = etcd.LeaseGrant(options_.ttl_seconds);
    Status s = lease.ok() ? etcd.Put(key, record, *lease) : lease.status();
    if (!s.ok()) {
      if (s.ToString() != last_error)
        log_("etcd: cannot register " + key + ": " + s.ToString() + " (retrying)");
      last_error = s.ToString();
      if (!Sleep(backoff_ms)) break;
      backoff_ms = std::min(backoff_ms * 2, 2000);
      continue;
    }
    registered_ = true;
    backoff_ms = 100;
    last_error.clear();
    log_("etcd: registered " + key + " (lease " + std::to_string(*lease) + ", ttl " +
         std::to_string(options_.ttl_seconds) + " s)");
    int interval_ms = std::max(100, options_.ttl_seconds * 1000 / 3);
    while (Sleep(interval_ms)) {
      auto ttl = etcd.LeaseKeepAlive(*lease);
      if (ttl.ok() && *ttl > 0) {
        // The record itself: deleted by hand, or overwritten, it is written back.
        auto now = ReadRecord(etcd, key);
        if (now.ok() && *now != record && etcd.Put(key, record, *lease).ok()) {
          log_(now->empty() ? "etcd: our record " + key + " had vanished; registered again"
                            : "etcd: our record " + key + " had been overwritten; restored");
        }
        continue;
      }
      registered_ = false;
      log_(ttl.ok()
               ? "etcd: lease expired; registering again"
               : "etcd: keep-alive failed: " + ttl.status().ToString() + "; registering again");
      break;
    }
    if (registered_) {  // stopping: leave at once
      (void)etcd.LeaseRevoke(*lease);
      registered_ = false;
      log_("etcd: left " + key);
      return;
    }
  }
}

}  // namespace kvpool::cluster
