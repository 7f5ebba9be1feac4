#include "server/resp_connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include "common/crc32c.h"
#include "server/server.h"

namespace kvpool::server {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kExpiryBytes = 8;
constexpr int kCommandsPerTurn = 256;

uint64_t NowUnixMs() {
  using namespace std::chrono;
  return static_cast<uint64_t>(
      duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

std::string Upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

bool ParseInt(std::string_view s, long long* v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

RespConnection::RespConnection(Server& server, net::Fd fd, ReactorCounters& counters)
    : Connection(server, std::move(fd), counters),
      in_(kReadChunk),
      authed_(server.tenants()->open()),
      scope_(server.options().resp_namespace) {
  limits_.max_bulk_bytes = server.options().limits.max_value_bytes;
  if (authed_) {
    tenant_name_ = TenantStats::kOpen;
    CountAs(server.tenant_stats().For(TenantStats::kOpen));
  }
}

Next RespConnection::Drive() {
  bool failed = false;
  if (OutputPending() && !Flush(&failed)) return failed ? Next::kClose : Next::kWrite;
  if (closing_) return Next::kClose;
  if (waiting_) return Next::kWait;
  for (int turn = 0; turn < kCommandsPerTurn && !waiting_; ++turn) {
    std::string_view buffered(in_.data() + in_start_, in_end_ - in_start_);
    size_t consumed = 0;
    std::string error;
    RespParse p = ParseRespCommand(buffered, limits_, &args_, &consumed, &error);
    if (p == RespParse::kError) {
      ++counters_.protocol_errors;
      ReplyError("ERR Protocol error: " + error);
      closing_ = true;
      break;
    }
    if (p == RespParse::kIncomplete) {
      if (OutputPending()) break;  // send the replies so far before waiting for more
      Io r = Fill();
      if (r == Io::kBlocked) return Next::kRead;
      if (r == Io::kFailed) return Next::kClose;
      continue;
    }
    CountRequest();
    ++commands_;
    server_.leases().Tick();  // an expired lease pins nothing a SET needs room for
    bool keep = args_.empty() || Execute(args_);
    in_start_ += consumed;  // args_ pointed into in_; Execute has copied what it keeps
    if (!keep) {
      closing_ = true;
      break;
    }
  }
  if (OutputPending() && !Flush(&failed)) return failed ? Next::kClose : Next::kWrite;
  if (closing_) return Next::kClose;
  if (waiting_) return Next::kWait;
  return in_start_ < in_end_ ? Next::kAgain : Next::kRead;
}

RespConnection::Io RespConnection::Fill() {
  if (in_start_ == in_end_) {
    in_start_ = in_end_ = 0;
  } else if (in_start_ > 0) {
    std::memmove(in_.data(), in_.data() + in_start_, in_end_ - in_start_);
    in_end_ -= in_start_;
    in_start_ = 0;
  }
  if (in_.size() - in_end_ < kReadChunk / 4) {
    // A command larger than the buffer (a big SET): grow, up to one value plus headers.
    size_t cap = limits_.max_bulk_bytes + kReadChunk;
    if (in_.size() >= cap) return Io::kFailed;
    in_.resize(std::min(cap, in_.size() * 2));
  }
  ssize_t n = Receive(in_.data() + in_end_, in_.size() - in_end_);
  if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? Io::kBlocked : Io::kFailed;
  if (n == 0) return Io::kFailed;
  in_end_ += static_cast<size_t>(n);
  CountIn(static_cast<uint64_t>(n));
  return Io::kDone;
}

void RespConnection::Reply(std::string_view text) {
  size_t at = out_bytes_.size();
  out_bytes_.resize(at + text.size());
  if (!text.empty()) std::memcpy(out_bytes_.data() + at, text.data(), text.size());
  QueueOwned(at, text.size());
}

void RespConnection::ReplyError(std::string_view message) {
  std::string line = "-";
  line += message;
  line += "\r\n";
  Reply(line);
}

void RespConnection::ReplyInt(long long v) { Reply(":" + std::to_string(v) + "\r\n"); }

void RespConnection::ReplyBulk(std::string_view s) {
  Reply("$" + std::to_string(s.size()) + "\r\n");
  Reply(s);
  Reply("\r\n");
}

BlockKey RespConnection::KeyOf(std::string_view key) const { return scope_.Key(KeyFromBytes(key)); }

std::span<const std::byte> RespConnection::Plain(const BlockKey& key,
                                                 std::span<const std::byte> stored) {
  if (!seal_keys_ && !IsSealed(stored)) return stored;
  uint32_t crc = 0;
  auto plain = OpenSealed(key, stored, &crc);  // kept until the reply is sent
  return plain.ok() ? *plain : std::span<const std::byte>();
}

// A GET's or MGET's blocks; the reply goes out on the reactor once they are all resolved.
class MgetRead final : public BlockRead {
 public:
  MgetRead(Store& store, std::vector<BlockKey> keys, bool array)
      : BlockRead(store, std::move(keys)), array_(array) {}
  void Finish(Connection& c) override {
    static_cast<RespConnection&>(c).ReplyViews(keys_, views_, array_);
  }

 private:
  bool array_;
};

void RespConnection::ReplyValues(std::span<const std::string_view> names, bool array) {
  std::vector<BlockKey> keys;
  keys.reserve(names.size());
  for (std::string_view name : names) keys.push_back(KeyOf(name));
  StartRead(std::make_shared<MgetRead>(*server_.store(), std::move(keys), array));
}

void RespConnection::ReplyViews(const std::vector<BlockKey>& keys,
                                std::vector<Result<BlockView>>& views, bool array) {
  if (array) Reply("*" + std::to_string(keys.size()) + "\r\n");
  uint64_t hits = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    Result<BlockView>& view = views[i];
    std::span<const std::byte> stored;
    if (view.ok()) stored = Plain(keys[i], view->data());
    if (stored.size() < kExpiryBytes) {
      Reply("$-1\r\n");
      continue;
    }
    uint64_t expiry;
    std::memcpy(&expiry, stored.data(), kExpiryBytes);
    if (expiry != 0 && expiry <= NowUnixMs()) {
      view = Status::NotFound();  // unpin before erasing
      server_.leases().Forget(keys[i]);
      (void)server_.store()->Erase(keys[i]);
      Reply("$-1\r\n");
      continue;
    }
    std::span<const std::byte> v = stored.subspan(kExpiryBytes);
    Reply("$" + std::to_string(v.size()) + "\r\n");
    QueueView(v);
    views_.push_back(std::move(*view));  // (unused when v is an opened copy; harmless)
    Reply("\r\n");
    ++hits;
  }
  CountGets(keys.size(), hits);
}

Status RespConnection::Set(std::string_view key, std::string_view value, uint64_t expiry_ms,
                           bool overwrite) {
  Store* store = server_.store();
  if (overwrite) server_.leases().Forget(KeyOf(key));
  auto r = ReserveValue(KeyOf(key), value.size() + kExpiryBytes,
                        PutOptions{.parent = {}, .overwrite = overwrite});
  if (!r.ok()) return r.status();
  std::byte* dst = r->data().data() + value_offset();
  std::memcpy(dst, &expiry_ms, kExpiryBytes);
  std::memcpy(dst + kExpiryBytes, value.data(), value.size());
  Status s = seal_keys_ ? SealReserved(KeyOf(key), Crc32c(dst, value.size() + kExpiryBytes),
                                       /*checksummed=*/true, std::move(r).value())
                        : store->Commit(std::move(r).value());
  CountPuts(s.ok());
  return s;
}

std::optional<uint64_t> RespConnection::ExpiryOf(std::string_view key) {
  Store* store = server_.store();
  BlockKey k = KeyOf(key);
  auto view = store->ReadResident(k);
  if (!view.ok() && view.status().code() == Code::kBusy) view = store->Read(k);  // on flash
  if (!view.ok()) return std::nullopt;
  std::span<const std::byte> stored = Plain(k, view->data());
  if (stored.size() < kExpiryBytes) return std::nullopt;
  uint64_t expiry;
  std::memcpy(&expiry, stored.data(), kExpiryBytes);
  if (expiry != 0 && expiry <= NowUnixMs()) return std::nullopt;
  return expiry;
}

bool RespConnection::Execute(const std::vector<std::string_view>& args) {
  std::string cmd = Upper(args[0]);
  size_t argc = args.size();
  auto arity = [&](size_t min, bool even_rest = false) {
    if (argc < min || (even_rest && (argc - 1) % 2 != 0)) {
      ReplyError("ERR wrong number of arguments for '" + std::string(args[0]) + "' command");
      return false;
    }
    return true;
  };
  if (cmd == "QUIT") {
    Reply("+OK\r\n");
    return false;
  }
  if (cmd == "AUTH") {
    if (!arity(2)) return true;
    std::string_view token = args[argc - 1];  // AUTH token, or AUTH user token
    std::shared_ptr<const Tenants> tenants = server_.tenants();
    std::string tenant;
    uint32_t cap = 0;
    std::shared_ptr<const TenantKeys> keys;
    uint16_t id = 0;
    Status s =
        tenants->Authorize(token, server_.options().resp_namespace, &tenant, &cap, &keys, &id);
    if (tenants->open()) {
      ReplyError("ERR AUTH called without any password configured");
    } else if (s.ok() && !CountAs(server_.tenant_stats().For(tenant), cap)) {
      ReplyError("ERR max number of clients reached for this tenant");
    } else if (s.ok()) {
      authed_ = true;
      tenant_name_ = tenant;
      seal_keys_ = std::move(keys);
      tenant_id_ = id;
      Reply("+OK\r\n");
    } else {
      ++counters_.auth_failures;
      ReplyError("WRONGPASS invalid username-password pair or user is disabled.");
    }
    return true;
  }
  if (!authed_) {
    ReplyError("NOAUTH Authentication required.");
    return true;
  }
  // MULTI/EXEC: commands are queued and run back to back at EXEC (client libraries' default
  // pipelines use it). Not isolated from other connections; no WATCH.
  if (cmd == "MULTI") {
    if (in_multi_) return ReplyError("ERR MULTI calls can not be nested"), true;
    in_multi_ = true;
    queued_.clear();
    Reply("+OK\r\n");
    return true;
  }
  if (cmd == "DISCARD") {
    if (!in_multi_) return ReplyError("ERR DISCARD without MULTI"), true;
    in_multi_ = false;
    queued_.clear();
    Reply("+OK\r\n");
    return true;
  }
  if (cmd == "EXEC") {
    if (!in_multi_) return ReplyError("ERR EXEC without MULTI"), true;
    in_multi_ = false;
    std::vector<std::vector<std::string>> queued = std::move(queued_);
    queued_.clear();
    Reply("*" + std::to_string(queued.size()) + "\r\n");
    for (const auto& q : queued) {
      std::vector<std::string_view> views(q.begin(), q.end());
      if (!Execute(views)) return false;
    }
    return true;
  }
  if (in_multi_) {
    if (queued_.size() >= 4096) return ReplyError("ERR too many commands in MULTI"), true;
    queued_.emplace_back(args.begin(), args.end());
    Reply("+QUEUED\r\n");
    return true;
  }
  Store* store = server_.store();
  if (cmd == "PING") {
    if (argc > 1) {
      ReplyBulk(args[1]);
    } else {
      Reply("+PONG\r\n");
    }
  } else if (cmd == "ECHO") {
    if (arity(2)) ReplyBulk(args[1]);
  } else if (cmd == "GET") {
    if (arity(2)) ReplyValues(std::span(args).subspan(1, 1), /*array=*/false);
  } else if (cmd == "MGET") {
    if (arity(2)) ReplyValues(std::span(args).subspan(1), /*array=*/true);
  } else if (cmd == "SET" || cmd == "SETEX" || cmd == "PSETEX") {
    bool plain = cmd == "SET";
    if (!arity(plain ? 3 : 4)) return true;
    std::string_view key = args[1], value = plain ? args[2] : args[3];
    uint64_t expiry = 0;
    bool nx = false, xx = false, keep_ttl = false, has_ttl = false;
    auto set_ttl = [&](std::string_view n, uint64_t unit_ms, bool absolute) {
      long long v;
      if (!ParseInt(n, &v) || v <= 0) {
        ReplyError("ERR invalid expire time in '" + Upper(args[0]) + "' command");
        return false;
      }
      expiry = absolute ? static_cast<uint64_t>(v) * unit_ms
                        : NowUnixMs() + static_cast<uint64_t>(v) * unit_ms;
      return true;
    };
    if (!plain && !set_ttl(args[2], cmd == "SETEX" ? 1000 : 1, false)) return true;
    for (size_t i = 3; plain && i < argc; ++i) {
      std::string opt = Upper(args[i]);
      bool has_arg = i + 1 < argc;
      if ((opt == "EX" || opt == "PX" || opt == "EXAT" || opt == "PXAT") && has_arg && !keep_ttl &&
          !has_ttl) {
        if (!set_ttl(args[++i], opt[0] == 'E' ? 1000 : 1, opt.size() == 4)) return true;
        has_ttl = true;
      } else if (opt == "NX" && !xx) {
        nx = true;
      } else if (opt == "XX" && !nx) {
        xx = true;
      } else if (opt == "KEEPTTL" && !has_ttl) {
        keep_ttl = true;
      } else {
        ReplyError("ERR syntax error");
        return true;
      }
    }
    if (keep_ttl) expiry = ExpiryOf(key).value_or(0);  // a new key gets none, as in Redis
    if (xx && !store->Exists(KeyOf(key))) return Reply("$-1\r\n"), true;
    Status s = Set(key, value, expiry, /*overwrite=*/!nx);
    if (s.ok()) {
      Reply("+OK\r\n");
    } else if (s.code() == Code::kExists) {
      Reply("$-1\r\n");
    } else if (s.code() ==
               Code::kNoSpace) {  // as Redis over maxmemory (redis-py: OutOfMemoryError)
      ReplyError("OOM " + std::string(s.message()));
    } else {
      ReplyError("ERR " + s.ToString());
    }
  } else if (cmd == "MSET") {
    if (!arity(3, true)) return true;
    Status first;
    for (size_t i = 1; i + 1 < argc; i += 2) {
      Status s = Set(args[i], args[i + 1], 0, true);
      if (!s.ok() && first.ok()) first = s;
    }
    if (first.ok()) {
      Reply("+OK\r\n");
    } else {
      ReplyError("ERR " + first.ToString());
    }
  } else if (cmd == "EXISTS") {
    if (!arity(2)) return true;
    long long n = 0;
    for (size_t i = 1; i < argc; ++i) n += store->Exists(KeyOf(args[i])) ? 1 : 0;
    ReplyInt(n);
  } else if (cmd == "DEL" || cmd == "UNLINK") {
    if (!arity(2)) return true;
    long long n = 0;
    for (size_t i = 1; i < argc; ++i) {
      server_.leases().Forget(KeyOf(args[i]));
      n += store->Erase(KeyOf(args[i])).ok() ? 1 : 0;
    }
    ReplyInt(n);
  } else if (cmd == "DBSIZE") {
    if (!server_.tenants()->open()) {
      // The store's size is every tenant's; a tenant's own is not counted.
      ReplyError("ERR DBSIZE is not available on a pool with tenants");
    } else {
      ReplyInt(static_cast<long long>(store->GetStats().index_entries));
    }
  } else if (cmd == "FLUSHALL" || cmd == "FLUSHDB") {
    if (!server_.tenants()->open()) {
      ReplyError("ERR FLUSHALL is disabled on a pool with tenants (it would empty them all)");
    } else {
      server_.leases().Clear();
      store->Clear();
      Reply("+OK\r\n");
    }
  } else if (cmd == "INFO" && !server_.tenants()->open()) {
    // A tenant sees its own figures only, not the store's shape.
    auto r = [&](const std::atomic<uint64_t>& v) {
      return std::to_string(v.load(std::memory_order_relaxed));
    };
    uint64_t gets = tenant_->gets.load(std::memory_order_relaxed);
    uint64_t hits = tenant_->hits.load(std::memory_order_relaxed);
    TenantUsage u;
    TenantQuota q;
    TenantHolding(&u, &q);
    ReplyBulk(
        "# Server\r\nredis_version:7.0.0\r\nkvpool_version:0.1.0\r\n"
        "redis_mode:standalone\r\n\r\n# Clients\r\nconnected_clients:" +
        r(tenant_->connections) + "\r\n\r\n# Memory\r\nused_memory:" +
        std::to_string(u.dram_bytes) + "\r\nmaxmemory:" + std::to_string(q.dram_bytes) +
        "\r\nkvpool_flash_bytes:" + std::to_string(u.flash_bytes) + "\r\nkvpool_flash_quota:" +
        std::to_string(q.flash_bytes) + "\r\n\r\n# Stats\r\nkvpool_tenant:" + tenant_name_ +
        "\r\ntotal_commands_processed:" + r(tenant_->requests) +
        "\r\nkeyspace_hits:" + std::to_string(hits) +
        "\r\nkeyspace_misses:" + std::to_string(gets - std::min(gets, hits)) +
        "\r\ntotal_net_input_bytes:" + r(tenant_->bytes_in) +
        "\r\ntotal_net_output_bytes:" + r(tenant_->bytes_out) + "\r\n");
  } else if (cmd == "INFO") {
    StoreStats st = store->GetStats();
    ServerStats ss = server_.GetStats();
    std::string info =
        "# Server\r\nredis_version:7.0.0\r\nkvpool_version:0.1.0\r\n"
        "redis_mode:standalone\r\n\r\n# Clients\r\nconnected_clients:" +
        std::to_string(ss.connections_open) +
        "\r\n\r\n# Memory\r\nused_memory:" + std::to_string(st.dram.used_bytes) +
        "\r\nmaxmemory:" + std::to_string(st.dram.capacity_bytes) +
        "\r\n\r\n# Stats\r\ntotal_commands_processed:" + std::to_string(ss.requests) +
        "\r\nkeyspace_hits:" + std::to_string(st.dram.hits + st.flash.hits) +
        "\r\nkeyspace_misses:" + std::to_string(st.misses) +
        "\r\nevicted_keys:" + std::to_string(st.dram.evictions) +
        "\r\n\r\n# Keyspace\r\ndb0:keys=" + std::to_string(st.index_entries) + ",expires=0\r\n";
    ReplyBulk(info);
  } else if (cmd == "SELECT") {
    // One keyspace per namespace: database 0 only, as a Redis with "databases 1".
    if (arity(2)) {
      if (args[1] == "0") {
        Reply("+OK\r\n");
      } else {
        ReplyError("ERR DB index is out of range");
      }
    }
  } else if (cmd == "TTL" || cmd == "PTTL") {
    if (!arity(2)) return true;
    std::optional<uint64_t> expiry = ExpiryOf(args[1]);
    if (!expiry) {
      ReplyInt(-2);
    } else if (*expiry == 0) {
      ReplyInt(-1);
    } else {
      uint64_t left = *expiry - std::min(*expiry, NowUnixMs());
      ReplyInt(static_cast<long long>(cmd == "TTL" ? (left + 500) / 1000 : left));
    }
  } else if (cmd == "CONFIG" && argc == 3 && Upper(args[1]) == "GET") {
    // Client handshakes probe settings (redis-benchmark asks for "save", "appendonly"):
    // none of Redis's settings apply, so each reads as empty.
    Reply("*2\r\n");
    ReplyBulk(args[2]);
    ReplyBulk("");
  } else if (cmd == "CONFIG" || cmd == "COMMAND") {
    Reply("*0\r\n");
  } else if (cmd == "CLIENT") {
    std::string sub = argc > 1 ? Upper(args[1]) : "";
    if (sub == "SETNAME" && argc == 3) {
      if (args[2].find_first_of(" \n\r") != std::string_view::npos) {
        ReplyError("ERR Client names cannot contain spaces, newlines or special characters.");
      } else {
        client_name_ = std::string(args[2].substr(0, 256));
        Reply("+OK\r\n");
      }
    } else if (sub == "GETNAME" && argc == 2) {
      if (client_name_.empty()) {
        Reply("$-1\r\n");
      } else {
        ReplyBulk(client_name_);
      }
    } else if (sub == "ID" && argc == 2) {
      ReplyInt(static_cast<long long>(id()));
    } else if (sub == "SETINFO" && argc == 4) {  // client libraries announce themselves
      Reply("+OK\r\n");
    } else {
      ReplyError("ERR unknown subcommand or wrong number of arguments for 'CLIENT'");
    }
  } else {
    std::string name(args[0].substr(0, 64));
    ReplyError("ERR unknown command '" + name + "'");
  }
  return true;
}

}  // namespace kvpool::server
