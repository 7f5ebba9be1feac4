#include "cluster/membership.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "cluster/etcd.h"

namespace kvpool::cluster {

std::unique_ptr<Membership> Membership::Static(std::vector<Member> members) {
  std::unique_ptr<Membership> m(new Membership());
  m->Publish(std::move(members));
  m->ready_ = true;
  return m;
}

std::unique_ptr<Membership> Membership::FromEtcd(std::vector<std::string> endpoints,
                                                 std::string prefix, int timeout_ms,
                                                 EtcdAccess access) {
  std::unique_ptr<Membership> m(new Membership());
  m->view_.members = std::make_shared<const std::vector<Member>>();
  m->view_.source_ok = false;
  m->view_.source_error = "etcd not answered yet";
  m->thread_ =
      std::thread([p = m.get(), endpoints = std::move(endpoints), prefix = std::move(prefix),
                   timeout_ms, access = std::move(access)]() mutable {
        p->Run(std::move(endpoints), std::move(prefix), timeout_ms, std::move(access));
      });
  m->expirer_ = std::thread([p = m.get()] { p->ExpireHolds(); });
  return m;
}

Membership::~Membership() {
  {
    MutexLock lock(state_mu_);
    stop_ = true;
  }
  state_cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
  if (expirer_.joinable()) expirer_.join();
}

namespace {
constexpr auto kMassWindow = std::chrono::seconds(3);
constexpr auto kHoldFor = std::chrono::seconds(10);
}  // namespace

void Membership::ApplyRecords(std::map<std::string, Member> next) {
  MutexLock lock(state_mu_);
  auto now = Clock::now();
  for (const auto& [key, m] : records_) {
    if (!next.count(key)) departures_.push_back(Departure{now, key, m});
  }
  for (const auto& [key, m] : next) held_.erase(key);  // back (or still there)
  while (!departures_.empty() && now - departures_.front().at > kMassWindow) {
    departures_.pop_front();
  }
  size_t gone = 0;
  for (const Departure& d : departures_) gone += !next.count(d.key);
  if (gone >= 2 && 2 * gone >= next.size() + gone) {
    for (const Departure& d : departures_) {
      if (!next.count(d.key) && !held_.count(d.key)) held_[d.key] = Held{d.member, now + kHoldFor};
    }
    state_cv_.SignalAll();
  }
  records_ = std::move(next);
  PublishRecordsLocked();
}

void Membership::PublishRecordsLocked() {
  std::map<std::string, Member> by_id;  // a held member never shadows a live record
  for (const auto& [key, h] : held_) by_id[h.member.id] = h.member;
  for (const auto& [key, m] : records_) by_id[m.id] = m;
  std::vector<Member> list;
  for (auto& [id, m] : by_id) list.push_back(std::move(m));
  Publish(std::move(list));
}

void Membership::ExpireHolds() {
  MutexLock lock(state_mu_);
  while (!stop_) {
    if (held_.empty()) {
      state_cv_.WaitFor(lock, std::chrono::milliseconds(500));
      continue;
    }
    auto first = Clock::time_point::max();
    for (const auto& [key, h] : held_) first = std::min(first, h.until);
    if (Clock::now() < first) {
      state_cv_.WaitUntil(lock, std::min(first, Clock::now() + std::chrono::milliseconds(500)));
      continue;
    }
    auto now = Clock::now();
    std::erase_if(held_, [&](const auto& kv) { return kv.second.until <= now; });
    PublishRecordsLocked();
  }
}

MembershipView Membership::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_;
}

bool Membership::WaitReady(int timeout_ms) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!ready_.load()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void Membership::Publish(std::vector<Member> members) {
  std::sort(members.begin(), members.end(),
            [](const Member& a, const Member& b) { return a.id < b.id; });
  std::lock_guard<std::mutex> lock(mu_);
  if (view_.members && *view_.members == members) return;
  view_.members = std::make_shared<const std::vector<Member>>(std::move(members));
  view_.version = version_.load() + 1;
  version_.store(view_.version, std::memory_order_release);
}

void Membership::SetSource(bool ok, std::string error) {
  std::lock_guard<std::mutex> lock(mu_);
  view_.source_ok = ok;
  view_.source_error = std::move(error);
}

void Membership::Run(std::vector<std::string> endpoints, std::string prefix, int timeout_ms,
                     EtcdAccess access) {
  Etcd etcd(std::move(endpoints), timeout_ms, std::move(access));
  int backoff_ms = 100;
  while (!stop_) {
    std::vector<EtcdKv> kvs;
    int64_t revision = 0;
    Status s = etcd.RangePrefix(prefix, &kvs, &revision);
    if (s.ok()) {
      std::map<std::string, Member> by_key;
      for (const EtcdKv& kv : kvs) {
        if (auto m = DecodeMember(kv.value); m.ok()) by_key[kv.key] = std::move(m).value();
      }
      auto publish = [&] { ApplyRecords(by_key); };
      publish();
      SetSource(true, "");
      ready_ = true;
      backoff_ms = 100;
      int64_t last = revision;
      s = etcd.WatchPrefix(
          prefix, revision + 1,
          [&](const EtcdEvent& e) {
            if (e.deleted) {
              by_key.erase(e.kv.key);
            } else if (auto m = DecodeMember(e.kv.value); m.ok()) {
              by_key[e.kv.key] = std::move(m).value();
            } else {
              by_key.erase(e.kv.key);  // a record we cannot read is not a member
            }
            publish();
          },
          stop_, &last);
      if (stop_) break;
    }
    SetSource(false, s.ToString());
    ready_ = true;  // answered, if only with an error: callers stop waiting
    for (int waited = 0; waited < backoff_ms && !stop_; waited += 20) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    backoff_ms = std::min(backoff_ms * 2, 2000);
  }
}

}  // namespace kvpool::cluster
