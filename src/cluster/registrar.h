// A kvpoold's presence in etcd: the member record under <prefix><id>, attached to a lease
// of ttl seconds that a background thread keeps alive (every ttl/3). If the lease is lost
// (etcd restarted, a long pause) it registers again; on Stop() it revokes the lease so
// clients see the node leave at once rather than after the TTL. While registered it checks
// its record every ttl/3 as it keeps the lease alive: a record deleted by hand, or
// overwritten, is written back at once (within one lease).
#ifndef KVPOOL_CLUSTER_REGISTRAR_H_
#define KVPOOL_CLUSTER_REGISTRAR_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd.h"
#include "cluster/member.h"
#include "kvpool/status.h"

namespace kvpool::cluster {

struct RegistrarOptions {
  std::vector<std::string> endpoints;
  std::string prefix = "/kvpool/members/";
  int ttl_seconds = 3;
  int timeout_ms = 1000;
  EtcdAccess access;  // etcd auth and TLS (the cluster's credential)
};

// Before registering: kExists if another node's record (another address) holds this id
// now, so that a second node with a reused --member-id is refused instead of taking the
// first's place. OK when etcd cannot be asked (the registration retries anyway).
Status CheckMemberIdFree(const RegistrarOptions& options, const Member& self);

class Registrar {
 public:
  using Log = std::function<void(const std::string&)>;
  Registrar(RegistrarOptions options, Member self, Log log);
  ~Registrar() { Stop(); }
  void Start();
  void Stop();
  bool registered() const { return registered_.load(); }

 private:
  void Run();
  bool Sleep(int ms);  // false when stopping
  RegistrarOptions options_;
  Member self_;
  Log log_;
  std::atomic<bool> registered_{false};
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace kvpool::cluster

#endif  // KVPOOL_CLUSTER_REGISTRAR_H_
