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
                                                 std::string prefix, int timeout_ms) {
  std::unique_ptr<Membership> m(new Membership());
  m->view_.members = std::make_shared<const std::vector<Member>>();
  m->view_.source_ok = false;
  m->view_.source_error = "etcd not answered yet";
  m->thread_ = std::thread(
      [p = m.get(), endpoints = std::move(endpoints), prefix = std::move(prefix),
       timeout_ms]() mutable { p->Run(std::move(endpoints), std::move(prefix), timeout_ms); });
  return m;
}

Membership::~Membership() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
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

void Membership::Run(std::vector<std::string> endpoints, std::string prefix, int timeout_ms) {
  Etcd etcd(std::move(endpoints), timeout_ms);
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
      auto publish = [&] {
        std::vector<Member> list;
        for (auto& [k, m] : by_key) list.push_back(m);
        Publish(std::move(list));
      };
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
