// PoolClient: placement, per-node fan-out and failure tracking over one Client per node.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "cluster/etcd.h"
#include "cluster/membership.h"
#include "cluster/placement.h"
#include "kvpool/pool.h"

namespace kvpool {
namespace {

using cluster::Member;
using Clock = std::chrono::steady_clock;

struct Node {
  Member member;
  std::unique_ptr<Client> client;
  uint64_t consecutive_failures = 0, requests = 0, failures = 0;
  bool dropped = false;
  bool reachable = true;
  std::atomic<bool> revived{false};  // set by the prober when a dropped node answers
  Clock::time_point dropped_at;
};

// Parses the node's STAT text (Store's StoreStats::ToString lines) into the status fields.
void ParseStats(const std::string& text, PoolMemberStatus* out) {
  unsigned long long used = 0, cap = 0, blocks = 0, hits = 0;
  unsigned long long fused = 0, fcap = 0, fblocks = 0, fhits = 0, puts = 0, gets = 0;
  const char* dram = std::strstr(text.c_str(), "dram: ");
  const char* flash = std::strstr(text.c_str(), "flash: ");
  const char* g = std::strstr(text.c_str(), "), gets ");
  if (!dram || !flash || !g) return;
  if (std::sscanf(dram, "dram: %llu/%llu bytes, %llu blocks, hits %llu", &used, &cap, &blocks,
                  &hits) != 4 ||
      std::sscanf(flash, "flash: %llu/%llu bytes, %llu blocks, hits %llu", &fused, &fcap, &fblocks,
                  &fhits) != 4 ||
      std::sscanf(g, "), gets %llu", &gets) != 1) {
    return;
  }
  (void)puts;
  out->stats_valid = true;
  out->used_bytes = used + fused;
  out->capacity_bytes = cap + fcap;
  out->blocks = std::max(blocks, fblocks);
  out->gets = gets;
  out->hits = hits + fhits;
}

}  // namespace

class PoolClient::Impl {
 public:
  explicit Impl(const PoolOptions& o, std::unique_ptr<cluster::Membership> m)
      : options_(o), membership_(std::move(m)) {
    prober_ = std::thread([this] { Probe(); });
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(probe_mu_);
      stop_ = true;
    }
    probe_cv_.notify_all();
    prober_.join();
  }

  // Brings nodes and placement up to date with membership and failures.
  void Refresh() {
    bool changed = false;
    if (uint64_t v = membership_->version(); v != version_) {
      cluster::MembershipView view = membership_->Current();
      version_ = view.version;
      std::map<std::string, std::shared_ptr<Node>> next;
      for (const Member& m : *view.members) {
        auto it = nodes_.find(m.id);
        if (it != nodes_.end() && it->second->member.address == m.address) {
          if (!(it->second->member == m)) {  // new capacity or labels; the prober reads it
            std::lock_guard<std::mutex> lock(probe_mu_);
            it->second->member = m;
          }
          next[m.id] = it->second;
          continue;
        }
        auto n = std::make_shared<Node>();
        n->member = m;
        ClientOptions co = options_.client;
        co.address = m.address;
        co.shared_memory_bytes = 0;
        co.connect_timeout_ms = std::min(co.connect_timeout_ms, options_.node_timeout_ms);
        co.request_timeout_ms = options_.node_timeout_ms;
        auto c = Client::Create(co);
        if (!c.ok()) continue;  // an address the client cannot use is not a member
        n->client = std::move(c).value();
        next[m.id] = n;
      }
      {
        std::lock_guard<std::mutex> lock(probe_mu_);
        nodes_ = std::move(next);
      }
      changed = true;
    }
    for (auto& [id, n] : nodes_) {
      if (n->dropped && n->revived.exchange(false)) {
        std::lock_guard<std::mutex> lock(probe_mu_);
        n->dropped = false;
        n->consecutive_failures = 0;
        n->reachable = true;
        changed = true;
      }
    }
    if (changed || placement_dirty_) Rebuild();
  }

  void Rebuild() {
    live_.clear();
    std::vector<Member> members;
    for (auto& [id, n] : nodes_) {
      if (n->dropped) continue;
      live_.push_back(n.get());
      members.push_back(n->member);
    }
    placement_ = cluster::Placement(members);
    placement_dirty_ = false;
  }

  void Success(Node* n) {
    ++n->requests;
    n->consecutive_failures = 0;
    n->reachable = true;
  }
  void Failure(Node* n) {
    ++n->requests;
    ++n->failures;
    n->reachable = false;
    if (++n->consecutive_failures >= uint64_t(std::max(1, options_.failures_to_drop)) &&
        !n->dropped) {
      std::lock_guard<std::mutex> lock(probe_mu_);
      n->dropped = true;
      n->dropped_at = Clock::now();
      placement_dirty_ = true;
    }
  }

  // Splits ops by owner, submits every part, then waits for each: nodes work in parallel.
  // A node that fails leaves its ops with `down` (kNotFound for reads).
  template <class OpT, class Submit>
  Status Dispatch(std::span<OpT> ops, Submit submit, Code down, Deadline deadline) {
    Refresh();
    if (live_.empty()) {
      for (OpT& op : ops) op.status = Status(down, "no pool members");
      return Status(Code::kUnavailable, "the pool has no reachable members");
    }
    size_t nn = live_.size();
    std::vector<std::vector<OpT>> parts(nn);
    std::vector<std::vector<size_t>> where(nn);
    for (size_t i = 0; i < ops.size(); ++i) {
      size_t o = nn == 1 ? 0 : placement_.Owner(ops[i].key);
      parts[o].push_back(ops[i]);
      where[o].push_back(i);
    }
    std::vector<Result<Client::Ticket>> tickets(nn, Status(Code::kInternal, "not sent"));
    for (size_t n = 0; n < nn; ++n) {
      if (!parts[n].empty()) tickets[n] = submit(*live_[n]->client, std::span<OpT>(parts[n]));
    }
    for (size_t n = 0; n < nn; ++n) {
      if (parts[n].empty()) continue;
      Status s =
          tickets[n].ok() ? live_[n]->client->Wait(*tickets[n], deadline) : tickets[n].status();
      bool caller_deadline = s.code() == Code::kTimeout && deadline.passed();
      if (s.ok()) {
        Success(live_[n]);
      } else if (!caller_deadline) {
        Failure(live_[n]);
      }
      for (size_t k = 0; k < parts[n].size(); ++k) {
        OpT& dst = ops[where[n][k]];
        dst = parts[n][k];
        if (!s.ok()) {
          dst.status = Status(caller_deadline ? Code::kTimeout : down,
                              "node " + live_[n]->member.id + ": " + s.ToString());
        }
      }
    }
    return Status::Ok();
  }

  void Probe() {
    std::unique_lock<std::mutex> lock(probe_mu_);
    int period = std::max(20, options_.retry_after_ms / 4);
    while (!stop_) {
      probe_cv_.wait_for(lock, std::chrono::milliseconds(period), [&] { return stop_; });
      if (stop_) break;
      std::vector<std::pair<std::shared_ptr<Node>, std::string>> due;  // node, address
      auto now = Clock::now();
      for (auto& [id, n] : nodes_) {
        if (n->dropped && !n->revived &&
            now - n->dropped_at >= std::chrono::milliseconds(options_.retry_after_ms)) {
          due.emplace_back(n, n->member.address);
        }
      }
      lock.unlock();
      for (auto& [n, address] : due) {
        ClientOptions co = options_.client;
        co.address = address;
        co.shared_memory_bytes = 0;
        co.connect_timeout_ms = co.request_timeout_ms = options_.node_timeout_ms;
        auto c = Client::Create(co);
        bool ok = c.ok() && (*c)->Ping().ok();
        lock.lock();
        if (ok)
          n->revived = true;
        else
          n->dropped_at = Clock::now();
        lock.unlock();
      }
      lock.lock();
    }
  }

  PoolOptions options_;
  std::unique_ptr<cluster::Membership> membership_;
  uint64_t version_ = 0;
  std::map<std::string, std::shared_ptr<Node>>
      nodes_;  // by id; guarded by probe_mu_ for the prober
  std::vector<Node*> live_;
  cluster::Placement placement_;
  bool placement_dirty_ = false;
  std::mutex probe_mu_;
  std::condition_variable probe_cv_;
  bool stop_ = false;
  std::thread prober_;
};

Result<std::unique_ptr<PoolClient>> PoolClient::Create(const PoolOptions& options) {
  std::unique_ptr<cluster::Membership> m;
  if (!options.etcd.empty()) {
    auto endpoints = cluster::SplitEndpoints(options.etcd);
    if (endpoints.empty())
      return Status::InvalidArgument("etcd: no endpoints in '" + options.etcd + "'");
    m = cluster::Membership::FromEtcd(endpoints, options.etcd_prefix,
                                      std::max(100, options.node_timeout_ms * 3));
    m->WaitReady(options.etcd_wait_ms);
  } else {
    auto list = cluster::ParseMemberList(options.members);
    if (!list.ok()) return list.status();
    if (list->empty()) return Status::InvalidArgument("no pool members: set members or etcd");
    m = cluster::Membership::Static(std::move(list).value());
  }
  if (options.node_timeout_ms <= 0) return Status::InvalidArgument("node_timeout_ms must be > 0");
  return std::unique_ptr<PoolClient>(new PoolClient(std::make_unique<Impl>(options, std::move(m))));
}

PoolClient::PoolClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PoolClient::~PoolClient() = default;

Status PoolClient::PutBatch(std::span<PutOp> ops, bool overwrite, Deadline deadline) {
  return impl_->Dispatch(
      ops, [overwrite](Client& c, std::span<PutOp> part) { return c.SubmitPut(part, overwrite); },
      Code::kUnavailable, deadline);
}

Status PoolClient::GetBatch(std::span<GetOp> ops, Deadline deadline) {
  Status s = impl_->Dispatch(
      ops, [](Client& c, std::span<GetOp> part) { return c.SubmitGet(part); }, Code::kNotFound,
      deadline);
  for (GetOp& op : ops) {
    if (op.status.code() == Code::kNotFound) op.size = 0;
  }
  return s;
}

Status PoolClient::ExistsBatch(std::span<KeyOp> ops, Deadline deadline) {
  return impl_->Dispatch(
      ops, [](Client& c, std::span<KeyOp> part) { return c.SubmitExists(part); }, Code::kNotFound,
      deadline);
}

Status PoolClient::EraseBatch(std::span<KeyOp> ops, Deadline deadline) {
  return impl_->Dispatch(
      ops, [](Client& c, std::span<KeyOp> part) { return c.SubmitErase(part); }, Code::kUnavailable,
      deadline);
}

Result<size_t> PoolClient::MatchPrefix(std::span<const BlockKey> chain, Deadline deadline) {
  std::vector<KeyOp> ops(chain.size());
  for (size_t i = 0; i < chain.size(); ++i) ops[i].key = chain[i];
  Status s = ExistsBatch(ops, deadline);
  if (!s.ok() && !chain.empty() && ops[0].status.code() != Code::kOk &&
      ops[0].status.code() != Code::kNotFound) {
    return s;
  }
  size_t n = 0;
  while (n < ops.size() && ops[n].status.ok()) ++n;
  return n;
}

Status PoolClient::Put(const BlockKey& key, std::span<const std::byte> value,
                       const PutOptions& options) {
  PutOp op{key, value, options.parent, {}};
  (void)PutBatch(std::span<PutOp>(&op, 1), options.overwrite);
  return op.status;
}

Result<size_t> PoolClient::Get(const BlockKey& key, std::span<std::byte> buffer) {
  GetOp op;
  op.key = key;
  op.buffer = buffer;
  (void)GetBatch(std::span<GetOp>(&op, 1));
  if (!op.status.ok()) return op.status;
  return op.size;
}

bool PoolClient::Exists(const BlockKey& key) {
  KeyOp op{key, {}};
  (void)ExistsBatch(std::span<KeyOp>(&op, 1));
  return op.status.ok();
}

Status PoolClient::Erase(const BlockKey& key) {
  KeyOp op{key, {}};
  (void)EraseBatch(std::span<KeyOp>(&op, 1));
  return op.status;
}

std::string PoolClient::OwnerOf(const BlockKey& key) {
  impl_->Refresh();
  if (impl_->live_.empty()) return {};
  return impl_->live_[impl_->placement_.Owner(key)]->member.id;
}

PoolStatus PoolClient::GetStatus(bool query_nodes) {
  impl_->Refresh();
  cluster::MembershipView view = impl_->membership_->Current();
  PoolStatus st;
  st.membership_ok = view.source_ok;
  st.membership_error = view.source_error;
  st.membership_version = view.version;
  for (auto& [id, n] : impl_->nodes_) {
    PoolMemberStatus m;
    m.id = n->member.id;
    m.address = n->member.address;
    m.node = n->member.labels.node;
    m.rack = n->member.labels.rack;
    m.zone = n->member.labels.zone;
    m.capacity = n->member.capacity;
    m.in_placement = !n->dropped;
    if (query_nodes && !n->dropped) {
      auto text = n->client->ServerStats();
      if (text.ok()) {
        impl_->Success(n.get());
        ParseStats(*text, &m);
      } else {
        impl_->Failure(n.get());
      }
    }
    m.reachable = n->reachable;
    m.consecutive_failures = n->consecutive_failures;
    m.requests = n->requests;
    m.failures = n->failures;
    st.members.push_back(std::move(m));
  }
  return st;
}

}  // namespace kvpool
