// PoolClient: placement, per-node fan-out and failure tracking over one Client per node,
// and the handoff after a membership change (misses read through from previous owners).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_set>

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

}  // namespace

class PoolClient::Impl {
 public:
  struct Era;  // below
  explicit Impl(const PoolOptions& o, std::unique_ptr<cluster::Membership> m)
      : options_(o), membership_(std::move(m)), ns_root_(NamespaceRoot(o.client.ns)) {
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
    // The placement being replaced stays an era for handoff_ms: a miss at a block's new
    // owner reads through from its owner in that era (ReadThrough).
    if (!placement_.empty() && options_.handoff_ms > 0) {
      eras_.push_front(Era{placement_, live_nodes_,
                           Clock::now() + std::chrono::milliseconds(options_.handoff_ms)});
      if (eras_.size() > kMaxEras) eras_.pop_back();
    }
    live_.clear();
    live_nodes_.clear();
    std::vector<Member> members;
    for (auto& [id, n] : nodes_) {
      if (n->dropped) continue;
      live_.push_back(n.get());
      live_nodes_.push_back(n);
      members.push_back(n->member);
    }
    placement_ = cluster::Placement(members);
    placement_dirty_ = false;
  }

  // Placement hashes the key as the nodes store it (scoped by the namespace), so that a
  // drain, which sees only stored keys, finds the same owners as the clients.
  BlockKey Placed(const BlockKey& key) const {
    return options_.client.peer ? key : PoolKey(ns_root_, key);
  }
  size_t OwnerIndex(const BlockKey& key) const {
    return live_.size() == 1 ? 0 : placement_.Owner(Placed(key));
  }

  // After Dispatch: the ops a node answered "absent" (or that failed), asked of the
  // owners they had before the last membership changes, newest first. Gets found there
  // are also stored at their owner now (insert-only), so the next get hits there.
  template <class OpT, class Submit>
  void ReadThrough(std::span<OpT> ops, Submit submit, bool keep, Deadline deadline) {
    ExpireEras();
    if (eras_.empty() || live_.empty()) return;
    std::vector<size_t> missing;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].status.code() == Code::kNotFound && !tombstones_.count(ops[i].key)) {
        missing.push_back(i);
      }
    }
    std::vector<std::pair<size_t, Node*>> found;  // op index, owner now
    for (const Era& era : eras_) {
      if (missing.empty()) break;
      std::map<Node*, std::vector<size_t>> by_prev;
      for (size_t i : missing) {
        if (Node* prev = PreviousOwner(era, ops[i].key)) by_prev[prev].push_back(i);
      }
      std::vector<std::pair<Node*, std::vector<OpT>>> parts;
      std::vector<Result<Client::Ticket>> tickets;
      for (auto& [prev, idx] : by_prev) {
        std::vector<OpT> part;
        for (size_t i : idx) part.push_back(ops[i]);
        parts.emplace_back(prev, std::move(part));
      }
      for (auto& [prev, part] : parts)
        tickets.push_back(submit(*prev->client, std::span<OpT>(part)));
      std::vector<size_t> still;
      size_t k = 0;
      for (auto& [prev, idx] : by_prev) {
        auto& part = parts[k].second;
        Status st =
            tickets[k].ok() ? prev->client->Wait(*tickets[k], deadline) : tickets[k].status();
        ++k;
        if (st.ok()) {
          Success(prev);
        } else if (!(st.code() == Code::kTimeout && deadline.passed())) {
          Failure(prev);
        }
        for (size_t j = 0; j < idx.size(); ++j) {
          ++handoff_reads_;
          if (st.ok() && part[j].status.ok()) {
            ++handoff_hits_;
            ops[idx[j]] = part[j];
            found.emplace_back(idx[j], live_[OwnerIndex(ops[idx[j]].key)]);
          }
        }
      }
      for (size_t i : missing) {
        if (!ops[i].status.ok()) still.push_back(i);
      }
      missing = std::move(still);
    }
    if (keep) KeepAtOwners(ops, found, deadline);
  }

  // The key's owner in `era` when it differs from its owner now and is not failing (a
  // node gone for good would cost a timeout per call); else null.
  Node* PreviousOwner(const Era& era, const BlockKey& key) {
    Node* prev = era.live[era.placement.size() == 1 ? 0 : era.placement.Owner(Placed(key))].get();
    if (prev->member.id == live_[OwnerIndex(key)]->member.id) return nullptr;
    if (prev->consecutive_failures >= uint64_t(std::max(1, options_.failures_to_drop)))
      return nullptr;
    return prev;
  }

  void ExpireEras() {
    auto now = Clock::now();
    while (!eras_.empty() && eras_.back().until < now) eras_.pop_back();
    if (eras_.empty()) tombstones_.clear();
  }

  // Stores the blocks a read-through found at their owners now (insert-only).
  template <class OpT>
  void KeepAtOwners(std::span<OpT> ops, const std::vector<std::pair<size_t, Node*>>& found,
                    Deadline deadline) {
    if constexpr (std::is_same_v<OpT, GetOp>) {
      std::map<Node*, std::vector<PutOp>> puts;
      for (auto [i, owner] : found) {
        puts[owner].push_back(PutOp{
            ops[i].key, std::span<const std::byte>(ops[i].buffer.data(), ops[i].size), {}, {}});
      }
      std::vector<std::pair<Node*, Result<Client::Ticket>>> tickets;
      for (auto& [owner, part] : puts) {
        tickets.emplace_back(owner, owner->client->SubmitPut(part, /*overwrite=*/false));
      }
      for (auto& [owner, t] : tickets) {
        if (t.ok()) (void)owner->client->Wait(*t, deadline);
      }
      handoff_kept_ += found.size();
    }
  }

  // An erase or overwrite also reaches the previous owners, so that a read-through can
  // never bring back bytes the pool no longer holds for that key.
  void ForgetPrevious(std::span<const BlockKey> keys, Deadline deadline) {
    ExpireEras();
    if (eras_.empty() || live_.empty()) return;
    // A previous owner that misses the erase (down now, back later) must not hand the old
    // bytes out either: these keys are never read through again in this handoff.
    tombstones_.insert(keys.begin(), keys.end());
    if (tombstones_.size() > kMaxTombstones) {  // too many to track: end the handoff
      eras_.clear();
      tombstones_.clear();
      return;
    }
    std::map<Node*, std::vector<KeyOp>> by_prev;
    for (const Era& era : eras_) {
      for (const BlockKey& key : keys) {
        if (Node* prev = PreviousOwner(era, key)) by_prev[prev].push_back(KeyOp{key, {}});
      }
    }
    std::vector<std::pair<Node*, Result<Client::Ticket>>> tickets;
    for (auto& [prev, part] : by_prev) tickets.emplace_back(prev, prev->client->SubmitErase(part));
    for (auto& [prev, t] : tickets) {
      if (t.ok()) (void)prev->client->Wait(*t, deadline);
    }
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
    if (deadline.passed()) return ExpireAll(ops);  // nothing asked: kTimeout, not "absent"
    Refresh();
    if (live_.empty()) {
      for (OpT& op : ops) op.status = Status(down, "no pool members");
      return Status(Code::kUnavailable, "the pool has no reachable members");
    }
    size_t nn = live_.size();
    std::vector<std::vector<OpT>> parts(nn);
    std::vector<std::vector<size_t>> where(nn);
    for (size_t i = 0; i < ops.size(); ++i) {
      size_t o = OwnerIndex(ops[i].key);
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

  // A placement in force before a membership change, and the nodes it placed on (kept
  // alive, with their connections, though they may have left).
  struct Era {
    cluster::Placement placement;
    std::vector<std::shared_ptr<Node>> live;
    Clock::time_point until;
  };
  static constexpr size_t kMaxEras = 3;

  PoolOptions options_;
  std::unique_ptr<cluster::Membership> membership_;
  const BlockKey ns_root_;
  std::vector<std::shared_ptr<Node>> live_nodes_;  // live_, owning
  std::deque<Era> eras_;                           // newest first
  static constexpr size_t kMaxTombstones = 1 << 20;
  std::unordered_set<BlockKey, BlockKeyHash> tombstones_;  // erased or overwritten meanwhile
  uint64_t handoff_reads_ = 0, handoff_hits_ = 0, handoff_kept_ = 0;
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
    cluster::EtcdAccess access{options.etcd_user, options.etcd_password, options.etcd_tls_ca,
                               options.etcd_tls_cert, options.etcd_tls_key};
    if (!access.configured()) access = cluster::EtcdAccess::FromEnvironment();
    m = cluster::Membership::FromEtcd(endpoints, options.etcd_prefix,
                                      std::max(100, options.node_timeout_ms * 3), access);
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
  Status s = impl_->Dispatch(
      ops, [overwrite](Client& c, std::span<PutOp> part) { return c.SubmitPut(part, overwrite); },
      Code::kUnavailable, deadline);
  if (overwrite) {
    std::vector<BlockKey> keys;
    for (const PutOp& op : ops) keys.push_back(op.key);
    impl_->ForgetPrevious(keys, deadline);
  }
  return s;
}

Status PoolClient::GetBatch(std::span<GetOp> ops, Deadline deadline) {
  auto submit = [](Client& c, std::span<GetOp> part) { return c.SubmitGet(part); };
  // A node that does not answer: its items are kUnavailable (a miss to the engine, but not
  // "absent": the block may well be there).
  Status s = impl_->Dispatch(ops, submit, Code::kUnavailable, deadline);
  if (s.ok()) impl_->ReadThrough(ops, submit, /*keep=*/true, deadline);
  for (GetOp& op : ops) {
    if (!op.status.ok() && op.status.code() != Code::kBufferTooSmall) op.size = 0;
  }
  return s;
}

Status PoolClient::ExistsBatch(std::span<KeyOp> ops, Deadline deadline) {
  auto submit = [](Client& c, std::span<KeyOp> part) { return c.SubmitExists(part); };
  // A node that does not answer says nothing about its keys: kUnavailable, not absent (a
  // prefix match still stops there).
  Status s = impl_->Dispatch(ops, submit, Code::kUnavailable, deadline);
  if (s.ok()) impl_->ReadThrough(ops, submit, /*keep=*/false, deadline);
  return s;
}

Status PoolClient::EraseBatch(std::span<KeyOp> ops, Deadline deadline) {
  Status s = impl_->Dispatch(
      ops, [](Client& c, std::span<KeyOp> part) { return c.SubmitErase(part); }, Code::kUnavailable,
      deadline);
  std::vector<BlockKey> keys;
  for (const KeyOp& op : ops) keys.push_back(op.key);
  impl_->ForgetPrevious(keys, deadline);
  return s;
}

Result<size_t> PoolClient::MatchPrefix(std::span<const BlockKey> chain, Deadline deadline) {
  std::vector<KeyOp> ops(chain.size());
  for (size_t i = 0; i < chain.size(); ++i) ops[i].key = chain[i];
  Status s = ExistsBatch(ops, deadline);
  if (!s.ok()) return s;
  // A node that did not answer ends the prefix at its first key; if that is the chain's
  // first key nothing is known: the error, not a prefix of 0.
  if (!chain.empty() && !ops[0].status.ok() && !ops[0].status.IsNotFound()) return ops[0].status;
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

Result<bool> PoolClient::Exists(const BlockKey& key, Deadline deadline) {
  KeyOp op{key, {}};
  if (Status s = ExistsBatch(std::span<KeyOp>(&op, 1), deadline); !s.ok()) return s;
  if (op.status.ok() || op.status.IsNotFound()) return op.status.ok();
  return op.status;
}

Status PoolClient::Erase(const BlockKey& key) {
  KeyOp op{key, {}};
  (void)EraseBatch(std::span<KeyOp>(&op, 1));
  return op.status;
}

std::string PoolClient::OwnerOf(const BlockKey& key) {
  impl_->Refresh();
  if (impl_->live_.empty()) return {};
  return impl_->live_[impl_->OwnerIndex(key)]->member.id;
}

PoolStatus PoolClient::GetStatus(bool query_nodes) {
  impl_->Refresh();
  cluster::MembershipView view = impl_->membership_->Current();
  PoolStatus st;
  st.membership_ok = view.source_ok;
  st.membership_error = view.source_error;
  st.membership_version = view.version;
  st.handoff_reads = impl_->handoff_reads_;
  st.handoff_hits = impl_->handoff_hits_;
  st.handoff_kept = impl_->handoff_kept_;
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
      auto f = n->client->ServerFigures();
      if (f.ok()) {
        impl_->Success(n.get());
        m.stats_valid = true;
        m.used_bytes = f->dram_used + f->flash_used;
        m.capacity_bytes = f->dram_capacity + f->flash_capacity;
        m.blocks = std::max(f->dram_blocks, f->flash_blocks);
        m.gets = f->gets;
        m.hits = f->dram_hits + f->flash_hits;
      } else if (f.status().retryable()) {
        impl_->Failure(n.get());
      } else {
        impl_->Success(n.get());  // it answered, but not with figures (an older kvpoold)
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
