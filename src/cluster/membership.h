// Where a client learns the pool's members: a static list, or etcd (a prefix of member
// records kept alive by each kvpoold's lease; see registrar.h), watched in the background.
// The data path never waits on it: Current() answers the last known list at once, and
// says whether the source is reachable.
//
// A mass departure is not believed at once: when at least half of the members (two or
// more) vanish within 3 s, as when etcd itself stalled and every lease expired together,
// they stay listed for 10 s unless they come back meanwhile (their nodes register again
// within a lease). A node really gone is dropped sooner by the pool client's data path,
// which stops placing on a node that does not answer. Single departures (a drain, a
// SIGTERM, one crash) are published at once.
#ifndef KVPOOL_CLUSTER_MEMBERSHIP_H_
#define KVPOOL_CLUSTER_MEMBERSHIP_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd.h"
#include "cluster/member.h"
#include "common/mutex.h"

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
                                              std::string prefix, int timeout_ms,
                                              EtcdAccess access = EtcdAccess::FromEnvironment());
  ~Membership();

  MembershipView Current() const;
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // Waits up to timeout_ms for the first answer from the source (true if it came).
  bool WaitReady(int timeout_ms) const;

 private:
  Membership() = default;
  void Run(std::vector<std::string> endpoints, std::string prefix, int timeout_ms,
           EtcdAccess access);
  void Publish(std::vector<Member> members);
  void SetSource(bool ok, std::string error);
  // The etcd source: records as etcd has them now (by key); publishes them with the
  // members held after a mass departure.
  void ApplyRecords(std::map<std::string, Member> next);
  void PublishRecordsLocked() REQUIRES(state_mu_);
  void ExpireHolds();

  using Clock = std::chrono::steady_clock;
  struct Departure {
    Clock::time_point at;
    std::string key;
    Member member;
  };
  struct Held {
    Member member;
    Clock::time_point until;
  };
  Mutex state_mu_;
  CondVar state_cv_;
  std::map<std::string, Member> records_ GUARDED_BY(state_mu_);
  std::map<std::string, Held> held_ GUARDED_BY(state_mu_);
  std::deque<Departure> departures_ GUARDED_BY(state_mu_);  // the last 3 s
  std::thread expirer_;

  mutable std::mutex mu_;
  MembershipView view_;
  std::atomic<uint64_t> version_{0};
  std::atomic<bool> ready_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvpool::cluster

#endif  // KVPOOL_CLUSTER_MEMBERSHIP_H_
