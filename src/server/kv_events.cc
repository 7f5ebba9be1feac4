#include "server/kv_events.h"

#include <msgpack.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <chrono>
#include <cstring>

#include "common/bytes.h"

namespace kvpool::server {
namespace {

std::string Be64(int64_t v) {
  std::string s;
  AppendBe(s, static_cast<uint64_t>(v), 8);
  return s;
}

void PackStr(msgpack_packer* pk, std::string_view s) {
  msgpack_pack_str(pk, s.size());
  msgpack_pack_str_body(pk, s.data(), s.size());
}

// Sends frames as one multipart message. ZMQ_DONTWAIT: a slow subscriber never blocks the
// publisher (PUB drops for it past its high-water mark, as vLLM's does).
void SendParts(void* sock, std::initializer_list<std::string_view> parts) {
  size_t i = 0;
  for (std::string_view p : parts) {
    int flags = ZMQ_DONTWAIT | (++i < parts.size() ? ZMQ_SNDMORE : 0);
    zmq_send(sock, p.data(), p.size(), flags);
  }
}

Status ZmqError(const std::string& what) {
  return Status::InvalidArgument(what + ": " + zmq_strerror(zmq_errno()));
}

}  // namespace

KvEventPublisher::KvEventPublisher(const KvEventsOptions& options) : options_(options) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(const KvEventsOptions& o) {
  if (o.endpoint.empty() && o.tenant_endpoints.empty()) {
    return Status::InvalidArgument("kv events: no endpoint");
  }
  if (o.endpoint.empty() && !o.replay_endpoint.empty()) {
    return Status::InvalidArgument("kv events: a replay endpoint needs the endpoint it replays");
  }
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(o));
  p->ctx_ = zmq_ctx_new();
  int linger = 0;
  auto bind = [&](const std::string& endpoint, int tenant) -> Status {
    Stream s{zmq_socket(p->ctx_, ZMQ_PUB), tenant, 0};
    p->streams_.push_back(s);
    zmq_setsockopt(s.sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(s.sock, endpoint.c_str()) != 0) {
      return ZmqError("kv events: cannot bind " + endpoint);
    }
    return Status::Ok();
  };
  if (!o.endpoint.empty()) {
    if (Status s = bind(o.endpoint, -1); !s.ok()) return s;
  }
  for (const auto& [tenant, endpoint] : o.tenant_endpoints) {
    if (Status s = bind(endpoint, tenant); !s.ok()) return s;
  }
  if (!o.replay_endpoint.empty()) {
    p->replay_ = zmq_socket(p->ctx_, ZMQ_ROUTER);
    zmq_setsockopt(p->replay_, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(p->replay_, o.replay_endpoint.c_str()) != 0)
      return ZmqError("kv events: cannot bind replay " + o.replay_endpoint);
  }
  p->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (p->wake_fd_ < 0) return Status::IoError("kv events: eventfd failed");
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  if (thread_.joinable()) {
    stop_.store(true);
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  if (replay_) zmq_close(replay_);
  for (const Stream& s : streams_) zmq_close(s.sock);
  if (ctx_) zmq_ctx_term(ctx_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void KvEventPublisher::Queue(const Event& e) {
  bool wake;
  {
    MutexLock lock(mu_);
    if (queue_.size() >= options_.max_queued_events) {
      ++stats_.dropped;
      return;
    }
    wake = queue_.empty();
    queue_.push_back(e);
  }
  if (wake) {
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
}

void KvEventPublisher::OnStored(const BlockKey& key, const BlockKey& parent, uint64_t,
                                std::span<const uint32_t> token_ids, uint16_t tenant) {
  Queue(Event{key, parent, true, {token_ids.begin(), token_ids.end()}, tenant});
}

void KvEventPublisher::OnRemoved(const BlockKey& key, uint16_t tenant) {
  Queue(Event{key, {}, false, {}, tenant});
}

KvEventsStats KvEventPublisher::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

std::string KvEventPublisher::Encode(const std::vector<Event>& events) const {
  // Consecutive events of one kind become one event with many hashes; stored blocks join
  // the previous BlockStored when they continue its chain (its last hash is their parent)
  // and carry as many token ids per block, as vLLM reports a request's new blocks.
  struct Group {
    bool stored;
    BlockKey parent;
    std::vector<BlockKey> keys;
    std::vector<uint32_t> tokens;
    size_t per_block;  // token ids per block (0: none given)
  };
  std::vector<Group> groups;
  for (const Event& e : events) {
    Group* g = groups.empty() ? nullptr : &groups.back();
    if (g && g->stored == e.stored &&
        (!e.stored || (g->keys.back() == e.parent && g->per_block == e.token_ids.size()))) {
      g->keys.push_back(e.key);
      g->tokens.insert(g->tokens.end(), e.token_ids.begin(), e.token_ids.end());
    } else {
      groups.push_back(Group{e.stored, e.parent, {e.key}, e.token_ids, e.token_ids.size()});
    }
  }
  msgpack_sbuffer buf;
  msgpack_sbuffer_init(&buf);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
  auto hash = [&](const BlockKey& k) {
    if (options_.int_hashes) {
      msgpack_pack_uint64(&pk, k.lo);
    } else {
      std::string b;
      AppendBe(b, k.hi, 8);
      AppendBe(b, k.lo, 8);
      msgpack_pack_bin(&pk, b.size());
      msgpack_pack_bin_body(&pk, b.data(), b.size());
    }
  };
  const bool map = options_.map_form;
  // A field: its name first in the map form, nothing in the array form.
  auto field = [&](const char* name) {
    if (map) PackStr(&pk, name);
  };
  double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  // The batch is positional in both forms: [ts, events, data_parallel_rank].
  msgpack_pack_array(&pk, 3);
  msgpack_pack_double(&pk, ts);
  msgpack_pack_array(&pk, groups.size());
  for (const Group& g : groups) {
    if (g.stored) {
      if (map) {  // vLLM's BlockStored as it publishes it since PR #42892
        msgpack_pack_map(&pk, 11);
        PackStr(&pk, "type");
      } else {
        msgpack_pack_array(&pk, 8);
      }
      PackStr(&pk, "BlockStored");
      field("block_hashes");
      msgpack_pack_array(&pk, g.keys.size());
      for (const BlockKey& k : g.keys) hash(k);
      field("parent_block_hash");
      if (g.parent.empty()) {
        msgpack_pack_nil(&pk);
      } else {
        hash(g.parent);
      }
      field("token_ids");
      msgpack_pack_array(&pk, g.tokens.size());
      for (uint32_t t : g.tokens) msgpack_pack_uint32(&pk, t);
      field("block_size");
      msgpack_pack_uint32(&pk,
                          g.per_block ? static_cast<uint32_t>(g.per_block) : options_.block_size);
      field("lora_id");
      msgpack_pack_nil(&pk);
      field("medium");
      PackStr(&pk, options_.medium.c_str());
      field("lora_name");
      msgpack_pack_nil(&pk);
      if (map) {
        // No extra keys (LoRA, salt, multimodal) per block; one full-attention group, which
        // is the group Dynamo's and llm-d's indexers keep.
        PackStr(&pk, "extra_keys");
        msgpack_pack_array(&pk, g.keys.size());
        for (size_t i = 0; i < g.keys.size(); ++i) msgpack_pack_nil(&pk);
        PackStr(&pk, "group_idx");
        msgpack_pack_int(&pk, 0);
        PackStr(&pk, "kv_cache_spec_kind");
        PackStr(&pk, "full_attention");
      }
    } else {
      if (map) {
        msgpack_pack_map(&pk, 4);
        PackStr(&pk, "type");
      } else {
        msgpack_pack_array(&pk, 3);
      }
      PackStr(&pk, "BlockRemoved");
      field("block_hashes");
      msgpack_pack_array(&pk, g.keys.size());
      for (const BlockKey& k : g.keys) hash(k);
      field("medium");
      PackStr(&pk, options_.medium.c_str());
      if (map) {
        PackStr(&pk, "group_idx");
        msgpack_pack_int(&pk, 0);
      }
    }
  }
  msgpack_pack_int(&pk, options_.data_parallel_rank);
  std::string out(buf.data, buf.size);
  msgpack_sbuffer_destroy(&buf);
  return out;
}

void KvEventPublisher::ServeReplay() {
  // A request is [identity, (empty delimiter from REQ/DEALER,) be64 start sequence].
  std::vector<std::string> frames;
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, replay_, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      return;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    if (more) continue;
    if (frames.size() >= 2 && frames.back().size() == 8) {
      const std::string& id = frames.front();
      auto start = static_cast<int64_t>(
          ReadBe(reinterpret_cast<const unsigned char*>(frames.back().data()), 8));
      for (const auto& [seq, payload] : history_) {
        if (seq >= start) SendParts(replay_, {id, "", Be64(seq), payload});
      }
      SendParts(replay_, {id, "", Be64(-1), ""});
      MutexLock lock(mu_);
      ++stats_.replays;
    }
    frames.clear();  // anything else is ignored: a bad request must not stop the publisher
  }
}

void KvEventPublisher::Run() {
  std::vector<Event> events;
  for (;;) {
    zmq_pollitem_t items[2] = {{nullptr, wake_fd_, ZMQ_POLLIN, 0}, {replay_, 0, ZMQ_POLLIN, 0}};
    zmq_poll(items, replay_ ? 2 : 1, 1000);
    uint64_t n;
    (void)!::read(wake_fd_, &n, sizeof n);
    if (replay_ && (items[1].revents & ZMQ_POLLIN)) ServeReplay();
    {
      MutexLock lock(mu_);
      events.swap(queue_);
    }
    for (size_t off = 0; off < events.size(); off += options_.max_events_per_batch) {
      size_t len = std::min<size_t>(options_.max_events_per_batch, events.size() - off);
      std::vector<Event> part(events.begin() + off, events.begin() + off + len);
      std::vector<Event> mine;
      for (Stream& s : streams_) {
        mine.clear();
        for (const Event& e : part) {
          if (Carries(s, e)) mine.push_back(e);
        }
        if (mine.empty()) continue;
        std::string payload = Encode(mine);
        int64_t seq = s.next_seq++;
        SendParts(s.sock, {options_.topic, Be64(seq), payload});
        if (s.tenant < 0) {
          history_.emplace_back(seq, std::move(payload));
          if (history_.size() > options_.buffer_steps) history_.pop_front();
        }
      }
      MutexLock lock(mu_);
      ++stats_.batches;
      for (const Event& e : part) ++(e.stored ? stats_.stored : stats_.removed);
    }
    events.clear();
    if (stop_.load()) {
      MutexLock lock(mu_);
      if (queue_.empty()) return;
    }
  }
}

}  // namespace kvpool::server
