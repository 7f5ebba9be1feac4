// Where a client learns the pool's members: a static list, or etcd (a prefix of member
// records kept alive by each kvpoold's lease; see registrar.h), watched in the background.
// The data path never waits on it: Current() answers the last known list at once, and
// says whether the source is reachable.
#ifndef KVPOOL_CLUSTER_MEMBERSHIP_H_
#define KVPOOL_CLUSTER_MEMBERSHIP_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/member.h"

namespace kvpool::cluster {

struct MembershipView {
  std::shared_ptr<const std::vector<Member>> members;  // sorted by id
  uint64_t version = 0;                                // changes whenever the list does
  bool source_ok = true;  // etcd reachable (always true for a static list)
  std::string source_error;
};

class Membership {
 public:
  static std::unique_ptr<Membership> Static(std::vector<Member> members);
  // Lists `prefix` and watches it; reconnects with backoff (100 ms .. 2 s) after a failure.
  static std::unique_ptr<Membership> FromEtcd(std::vector<std::string> endpoints,
                                              std::string prefix, int timeout_ms);
  ~Membership();

  MembershipView Current() const;
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // Waits up to timeout_ms for the first answer from the source (true if it came).
  bool WaitReady(int timeout_ms) const;

 private:
  Membership() = default;
  void Run(std::vector<std::string> endpoints, std::string prefix, int timeout_ms);
  void Publish(std::vector<Member> members);
  void SetSource(bool ok, std::string error);

  mutable std::mutex mu_;
  MembershipView view_;
  std::atomic<uint64_t> version_{0};
  std::atomic<bool> ready_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvpool::cluster

#endif  // KVPOOL_CLUSTER_MEMBERSHIP_H_
