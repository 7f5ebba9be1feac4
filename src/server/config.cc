#include "server/config.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <variant>
#include <vector>

#include "common/units.h"

namespace kvpool::server {
namespace {

using Value = std::variant<std::string, long long, bool, std::vector<std::string>, double>;

uint64_t MemAvailable() {
  std::ifstream f("/proc/meminfo");
  std::string name;
  uint64_t kb;
  std::string unit;
  while (f >> name >> kb >> unit) {
    if (name == "MemAvailable:") return kb * 1024;
  }
  return 1ull << 30;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// A "string" with \" \\ \n \t escapes; *rest gets what follows the closing quote.
bool ParseString(std::string_view s, std::string* out, std::string_view* rest) {
  if (s.empty() || s[0] != '"') return false;
  out->clear();
  for (size_t i = 1; i < s.size(); ++i) {
    char c = s[i];
    if (c == '"') {
      *rest = s.substr(i + 1);
      return true;
    }
    if (c == '\\') {
      if (++i >= s.size()) return false;
      char e = s[i];
      c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
      if (e != 'n' && e != 't' && e != '"' && e != '\\') return false;
    }
    out->push_back(c);
  }
  return false;
}

std::string_view StripComment(std::string_view s) {
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && in_string) {
      ++i;
    } else if (s[i] == '"') {
      in_string = !in_string;
    } else if (s[i] == '#' && !in_string) {
      return s.substr(0, i);
    }
  }
  return s;
}

Result<Value> ParseValue(std::string_view s) {
  s = Trim(s);
  std::string str;
  std::string_view rest;
  if (s.starts_with('"')) {
    if (!ParseString(s, &str, &rest) || !Trim(rest).empty()) {
      return Status::InvalidArgument("unterminated or malformed string");
    }
    return Value(str);
  }
  if (s == "true") return Value(true);
  if (s == "false") return Value(false);
  if (s.starts_with('[')) {
    std::vector<std::string> items;
    s.remove_prefix(1);
    s = Trim(s);
    while (!s.empty() && s[0] != ']') {
      if (!ParseString(s, &str, &rest)) return Status::InvalidArgument("arrays hold \"strings\"");
      items.push_back(str);
      s = Trim(rest);
      if (s.starts_with(',')) s = Trim(s.substr(1));
    }
    if (s != "]") return Status::InvalidArgument("array not closed by ]");
    return Value(items);
  }
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return Value(v);
  double d = 0;
  auto [dend, dec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (dec == std::errc() && dend == s.data() + s.size() && !s.empty()) return Value(d);
  return Status::InvalidArgument(
      "value must be a \"string\", integer, number, true/false or [array]");
}

Result<uint64_t> AsSize(const Value& v) {
  if (auto* i = std::get_if<long long>(&v)) {
    if (*i < 0) return Status::InvalidArgument("negative size");
    return static_cast<uint64_t>(*i);
  }
  if (auto* s = std::get_if<std::string>(&v)) return ParseSize(*s);
  return Status::InvalidArgument("expected a size");
}

Result<std::string> AsString(const Value& v) {
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  return Status::InvalidArgument("expected a \"string\"");
}

Result<bool> AsBool(const Value& v) {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  return Status::InvalidArgument("expected true or false");
}

using Setter = std::function<Status(const Value&, DaemonConfig*)>;

std::string OffOr(const std::string& v) { return v == "off" ? "" : v; }

Setter Size(std::function<void(DaemonConfig*, uint64_t)> set, uint64_t max = ~0ull,
            uint64_t min = 0) {
  return [set, max, min](const Value& v, DaemonConfig* c) -> Status {
    auto n = AsSize(v);
    if (!n.ok()) return n.status();
    if (*n > max) return Status::InvalidArgument("at most " + std::to_string(max));
    if (*n < min) return Status::InvalidArgument("at least " + std::to_string(min));
    set(c, *n);
    return Status::Ok();
  };
}

Setter Int(std::function<void(DaemonConfig*, long long)> set, long long min, long long max) {
  return [set, min, max](const Value& v, DaemonConfig* c) -> Status {
    auto* i = std::get_if<long long>(&v);
    if (!i) return Status::InvalidArgument("expected an integer");
    if (*i < min || *i > max) {
      return Status::InvalidArgument("must be in " + std::to_string(min) + ".." +
                                     std::to_string(max));
    }
    set(c, *i);
    return Status::Ok();
  };
}

std::string FormatNumber(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", d);
  return buf;
}

Setter Number(std::function<void(DaemonConfig*, double)> set, double min, double max) {
  return [set, min, max](const Value& v, DaemonConfig* c) -> Status {
    double d;
    if (auto* i = std::get_if<long long>(&v)) {
      d = static_cast<double>(*i);
    } else if (auto* f = std::get_if<double>(&v)) {
      d = *f;
    } else {
      return Status::InvalidArgument("expected a number");
    }
    if (!(d >= min && d <= max)) {
      return Status::InvalidArgument("must be in [" + FormatNumber(min) + ", " + FormatNumber(max) +
                                     "]");
    }
    set(c, d);
    return Status::Ok();
  };
}

Setter Str(std::function<void(DaemonConfig*, std::string)> set) {
  return [set](const Value& v, DaemonConfig* c) -> Status {
    auto s = AsString(v);
    if (!s.ok()) return s.status();
    set(c, *s);
    return Status::Ok();
  };
}

Setter Bool(std::function<void(DaemonConfig*, bool)> set) {
  return [set](const Value& v, DaemonConfig* c) -> Status {
    auto b = AsBool(v);
    if (!b.ok()) return b.status();
    set(c, *b);
    return Status::Ok();
  };
}

// A setting that is one of two words; `set` gets whether it is the second.
Setter Either(std::string a, std::string b, std::function<void(DaemonConfig*, bool)> set) {
  return [a, b, set](const Value& v, DaemonConfig* c) -> Status {
    auto s = AsString(v);
    if (!s.ok()) return s.status();
    if (*s != a && *s != b) return Status::InvalidArgument("\"" + a + "\" or \"" + b + "\"");
    set(c, *s == b);
    return Status::Ok();
  };
}

const std::map<std::string, std::pair<Setter, std::string>>& Fields() {
  static const auto* fields = new std::map<std::string, std::pair<Setter, std::string>>{
      {"server.listen",
       {Str([](DaemonConfig* c, std::string s) { c->server.listen = OffOr(s); }),
        "native protocol TCP address, host:port (default 127.0.0.1:7400; \"off\" or \"\": "
        "none)"}},
      {"server.metrics_listen",
       {Str([](DaemonConfig* c, std::string s) { c->metrics_listen = OffOr(s); }),
        "HTTP endpoint: Prometheus metrics (/metrics), live page (/), JSON (/api/stats), "
        "host:port, e.g. 127.0.0.1:7402; keep it on loopback or a trusted network (default "
        "off)"}},
      {"server.resp_listen",
       {Str([](DaemonConfig* c, std::string s) { c->server.resp_listen = OffOr(s); }),
        "RESP2 (Redis protocol) address (default 127.0.0.1:7401; \"off\" or \"\": none)"}},
      {"server.unix_socket",
       {Str([](DaemonConfig* c, std::string s) {
          c->server.unix_path = OffOr(s);
          c->unix_socket = !c->server.unix_path.empty();
        }),
        "same-host socket path (default <data_dir>/kvpoold.sock; \"off\" or \"\": none)"}},
      {"server.data_dir",
       {Str([](DaemonConfig* c, std::string s) { c->data_dir = s; }),
        "directory for the lock, socket and flash file (default kvpool-data)"}},
      {"server.reactors",
       {Size([](DaemonConfig* c, uint64_t n) { c->server.reactors = unsigned(n); }, 256),
        "event-loop threads (default: one per core)"}},
      {"server.io_threads",
       {Size([](DaemonConfig* c, uint64_t n) { c->server.io_threads = unsigned(n); }, 1024),
        "threads that serve gets from flash, off the reactors (default 0: two per reactor)"}},
      {"server.max_lease_bytes",
       {Size([](DaemonConfig* c, uint64_t n) { c->server.max_lease_bytes = n; }),
        "bytes held for loads announced by a lookup-and-lock (LMCache) (default 256MiB, at most "
        "dram_bytes/4)"}},
      {"server.max_lease_ms",
       {Size([](DaemonConfig* c, uint64_t n) { c->server.max_lease_ms = uint32_t(n); }, 3'600'000),
        "longest lease a lookup-and-lock may ask for, in ms (default 60000)"}},
      {"server.reactor_nice",
       {Int([](DaemonConfig* c, long long n) { c->server.reactor_nice = int(n); }, -20, 19),
        "nice value of the reactor threads, -20..19 (default -10; 0 leaves them alone)"}},
      {"server.max_connections",
       {Size([](DaemonConfig* c, uint64_t n) { c->server.max_connections = unsigned(n); }, 1 << 20,
             1),
        "connections beyond this are closed at accept (default 1024)"}},
      {"server.handshake_timeout_ms",
       {Size([](DaemonConfig* c, uint64_t n) { c->server.handshake_timeout_ms = unsigned(n); },
             3'600'000),
        "close a connection that has not sent its HELLO (native) or a first command (RESP) "
        "this long after it was accepted, in ms (default 10000; 0: never)"}},
      {"server.request_timeout_ms",
       {Size([](DaemonConfig* c, uint64_t n) { c->server.request_timeout_ms = unsigned(n); },
             3'600'000),
        "close a connection part-way through a request (a partial frame, command or TLS "
        "record) this long after its previous request, in ms: byte-at-a-time senders cannot "
        "hold a slot (default 30000; 0: never)"}},
      {"server.idle_timeout_ms",
       {Size([](DaemonConfig* c, uint64_t n) { c->server.idle_timeout_ms = unsigned(n); },
             86'400'000),
        "close a connection that sent no request this long, in ms (default 0: never)"}},
      {"server.tls_cert",
       {Str([](DaemonConfig* c, std::string s) { c->server.tls.cert_file = s; }),
        "PEM certificate chain: TLS 1.3 on the native, RESP and HTTP ports (default \"\": "
        "plain); reloaded on SIGHUP"}},
      {"server.tls_key",
       {Str([](DaemonConfig* c, std::string s) { c->server.tls.key_file = s; }),
        "PEM private key of tls_cert (default: in tls_cert)"}},
      {"server.tls_client_ca",
       {Str([](DaemonConfig* c, std::string s) { c->server.tls.ca_file = s; }),
        "PEM CA of client certificates: clients may present one, peer connections must "
        "(default \"\": none asked for)"}},
      {"server.tls_require_client_cert",
       {Bool([](DaemonConfig* c, bool b) { c->server.tls.require_client_cert = b; }),
        "refuse clients without a certificate of tls_client_ca: mutual TLS (default false)"}},
      {"server.max_batch",
       {Size([](DaemonConfig* c, uint64_t n) { c->server.limits.max_batch = n; }, 65536, 1),
        "items per request (default 1024)"}},
      {"server.max_request_bytes",
       {Size([](DaemonConfig* c, uint64_t n) { c->server.limits.max_request_bytes = n; }),
        "value bytes in one request frame (default 1GiB)"}},
      {"server.log_level",
       {[](const Value& v, DaemonConfig* c) -> Status {
          auto s = AsString(v);
          if (!s.ok()) return s.status();
          auto level = log::ParseLevel(*s);
          if (!level) return Status::InvalidArgument("\"error\", \"warn\", \"info\" or \"debug\"");
          c->log_level = *level;
          return Status::Ok();
        },
        "log detail: error, warn, info (default) or debug; reloaded on SIGHUP"}},
      {"server.resp_namespace",
       {Str([](DaemonConfig* c, std::string s) { c->server.resp_namespace = s; }),
        "namespace of keys set over RESP (default \"resp\")"}},
      {"cluster.etcd",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.etcd = s; }),
        "etcd endpoints host:port[,..]: register this node there (default \"\": off)"}},
      {"cluster.prefix",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.prefix = s; }),
        "etcd key prefix of the pod's members (default /kvpool/members/)"}},
      {"cluster.peer_token",
       {Str([](DaemonConfig* c, std::string s) { c->server.peer_token = s; }),
        "token of peer connections (kvpool cluster drain, other nodes), which address stored "
        "keys in every namespace; needed on a node with tenants (default \"\": refused there)"}},
      {"cluster.etcd_user",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.etcd_user = s; }),
        "etcd user, with auth on in etcd: the cluster's credential (default: $ETCDCTL_USER)"}},
      {"cluster.etcd_password_file",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.etcd_password_file = s; }),
        "file holding that user's etcd password (default: $ETCDCTL_PASSWORD)"}},
      {"cluster.etcd_tls_ca",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.etcd_tls_ca = s; }),
        "PEM CA of etcd's certificate: speak HTTPS to etcd (default: $ETCDCTL_CACERT)"}},
      {"cluster.etcd_tls_cert",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.etcd_tls_cert = s; }),
        "PEM client certificate for etcd (its --client-cert-auth) (default: $ETCDCTL_CERT)"}},
      {"cluster.etcd_tls_key",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.etcd_tls_key = s; }),
        "its private key (default: $ETCDCTL_KEY)"}},
      {"cluster.member_id",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.member_id = s; }),
        "stable member name placement hashes (default: the advertise address)"}},
      {"cluster.advertise",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.advertise = s; }),
        "address clients dial (default: listen host and bound port)"}},
      {"cluster.capacity",
       {Size([](DaemonConfig* c, uint64_t n) { c->cluster.capacity = n; }),
        "advertised capacity, the placement weight (default: DRAM + flash)"}},
      {"cluster.node",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.node = s; }), "topology label: node"}},
      {"cluster.rack",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.rack = s; }), "topology label: rack"}},
      {"cluster.zone",
       {Str([](DaemonConfig* c, std::string s) { c->cluster.zone = s; }), "topology label: zone"}},
      {"cluster.lease_ttl",
       {Size([](DaemonConfig* c, uint64_t n) { c->cluster.lease_ttl = unsigned(n); }, 3600, 2),
        "etcd lease seconds (>= 2); a dead node leaves the member list after this (default 3)"}},
      {"events.endpoint",
       {Str([](DaemonConfig* c, std::string s) { c->events.endpoint = s; }),
        "ZeroMQ PUB endpoint for KV events in vLLM's format, e.g. \"tcp://*:5557\" (default off)"}},
      {"events.replay_endpoint",
       {Str([](DaemonConfig* c, std::string s) { c->events.replay_endpoint = s; }),
        "ZeroMQ ROUTER endpoint that replays buffered event batches (default off)"}},
      {"events.topic",
       {Str([](DaemonConfig* c, std::string s) { c->events.topic = s; }),
        "first frame of every event message (default \"kv@<hostname>@kvpool\", which llm-d's "
        "default \"kv@\" filter passes)"}},
      {"events.format",
       {Either("array", "map", [](DaemonConfig* c, bool map) { c->events.map_form = map; }),
        "event form inside the [ts, events, dp_rank] batch: \"map\" (the default: named "
        "fields, as vLLM publishes since PR #42892) or \"array\" (positional, as older vLLM "
        "and routers before their map support)"}},
      {"events.medium",
       {Str([](DaemonConfig* c, std::string s) { c->events.medium = s; }),
        "medium named in every event (default \"EXTERNAL\": Dynamo's external tier)"}},
      {"events.data_parallel_rank",
       {Size([](DaemonConfig* c, uint64_t n) { c->events.data_parallel_rank = int(n); }, 1 << 20),
        "data_parallel_rank of every batch (default 0)"}},
      {"events.hash",
       {Either("int", "bytes", [](DaemonConfig* c, bool bytes) { c->events.int_hashes = !bytes; }),
        "block hash form in events: \"int\" (64-bit, vLLM's int form) or \"bytes\" (16)"}},
      {"events.block_size",
       {Size([](DaemonConfig* c, uint64_t n) { c->events.block_size = unsigned(n); }, 1 << 20),
        "tokens per block, reported in BlockStored (default 16)"}},
      {"events.all_tenants",
       {Bool([](DaemonConfig* c, bool b) { c->events.all_tenants = b; }),
        "on a node with tenants, the endpoint carries every tenant's blocks (an operator's "
        "router); default false: blocks of no tenant only (each tenant's go to its own "
        "kv_events_endpoint)"}},
      {"events.buffer_steps",
       {Size([](DaemonConfig* c, uint64_t n) { c->events.buffer_steps = unsigned(n); }, 1 << 24),
        "event batches kept for replay (default 10000)"}},
      {"store.dram_bytes",
       {Size([](DaemonConfig* c, uint64_t n) { c->store.dram_bytes = n; }),
        "DRAM tier (default: a quarter of MemAvailable)"}},
      {"store.flash_bytes",
       {Size([](DaemonConfig* c, uint64_t n) { c->store.flash_bytes = n; }),
        "flash tier size; 0 = DRAM only (default min(4GiB, free disk/4))"}},
      {"store.flash_path",
       {Str([](DaemonConfig* c, std::string s) { c->store.flash_path = s; }),
        "flash tier file or block device (default <data_dir>/flash.kvpool)"}},
      {"store.region_bytes",
       {Size([](DaemonConfig* c, uint64_t n) { c->store.region_bytes = n; }),
        "flash log region, the unit of eviction (default 16MiB)"}},
      {"store.max_value_bytes",
       {Size([](DaemonConfig* c, uint64_t n) { c->store.max_value_bytes = n; }),
        "largest block (default 128MiB, at most half the DRAM tier)"}},
      {"store.huge_pages",
       {[](const Value& v, DaemonConfig* c) -> Status {
          auto b = AsBool(v);
          if (!b.ok()) return b.status();
          c->store.huge_pages = *b;
          return Status::Ok();
        },
        "back the DRAM tier with huge pages when possible (default true)"}},
      {"store.flash_restore",
       {[](const Value& v, DaemonConfig* c) -> Status {
          auto b = AsBool(v);
          if (!b.ok()) return b.status();
          c->store.flash_restore = *b;
          return Status::Ok();
        },
        "find the blocks already on the flash file or device at start (warm restart; "
        "default true; false formats it anew)"}},
      {"store.flush_on_close",
       {[](const Value& v, DaemonConfig* c) -> Status {
          auto b = AsBool(v);
          if (!b.ok()) return b.status();
          c->store.flush_on_close = *b;
          return Status::Ok();
        },
        "on a clean stop, write the blocks held only in DRAM to flash so the next start "
        "finds them (default true)"}},
      {"store.prefault",
       {[](const Value& v, DaemonConfig* c) -> Status {
          auto b = AsBool(v);
          if (!b.ok()) return b.status();
          c->store.prefault = *b;
          return Status::Ok();
        },
        "touch the whole DRAM tier at start: no page-fault (or huge-page "
        "compaction) stalls on puts later (default true)"}},
      {"store.reuse_bonus",
       {[](const Value& v, DaemonConfig* c) -> Status {
          if (auto* s = std::get_if<std::string>(&v); s && *s == "auto") {
            c->store.reuse_bonus = StoreOptions::kReuseBonusAuto;
            return Status::Ok();
          }
          Status s =
              Number([](DaemonConfig* c, double d) { c->store.reuse_bonus = d; }, 0, 64)(v, c);
          if (!s.ok()) return Status::InvalidArgument("\"auto\" or a number in [0, 64]");
          return s;
        },
        "DRAM eviction: how many store-fulls (DRAM + flash) of newer blocks each past use "
        "of a block outlives; \"auto\" (default): learnt while running, by simulating "
        "candidates on a sample of keys; 0: LRU"}},
      {"store.admission",
       {[](const Value& v, DaemonConfig* c) -> Status {
          auto s = AsString(v);
          if (!s.ok()) return s.status();
          if (*s == "budget")
            c->store.admission = Admission::kBudget;
          else if (*s == "probation")
            c->store.admission = Admission::kProbation;
          else if (*s == "all")
            c->store.admission = Admission::kAll;
          else
            return Status::InvalidArgument("\"budget\", \"probation\" or \"all\"");
          return Status::Ok();
        },
        "flash admission: \"budget\" (default: every block DRAM pushes out goes to flash "
        "within the write budget; unread blocks are refused first when it runs low, and "
        "once flash is full they are written only while that is learnt to pay), "
        "\"probation\" (S3-FIFO: blocks never read in DRAM are never written) or \"all\""}},
      {"store.flash_writes_per_day",
       {Number([](DaemonConfig* c, double d) { c->store.flash_writes_per_day = d; }, 0, 1000),
        "flash write budget of the \"budget\" admission, in drive writes per day, with "
        "one whole device as the burst (default 3; 0: unlimited)"}},
  };
  return *fields;
}

// The flags: each sets one setting of Fields() (its parser, range and help), or, for the
// few that have no place in the file, does its own thing. The order is --help's.
struct Flag {
  const char* name;
  const char* arg;                     // what it takes, for --help; "" for a switch
  const char* key;                     // the setting it sets; "" for a flag of its own
  const char* switch_value = nullptr;  // a switch sets its setting to this ("true", "false")
  const char* help = "";               // a flag of its own: what it does
  std::function<Status(const std::string&, DaemonConfig*, FlagEffects*)> own = nullptr;
};

const std::vector<Flag>& Flags() {
  static const auto* flags = new std::vector<Flag>{
      {"--config", "FILE", "", nullptr,
       "TOML file with [server], [store], [cluster], [events] and [[tenant]] tables (below); "
       "flags given too override it",
       [](const std::string&, DaemonConfig*, FlagEffects*) { return Status::Ok(); }},
      {"--data-dir", "DIR", "server.data_dir"},
      {"--listen", "ADDR", "server.listen"},
      {"--resp-listen", "ADDR", "server.resp_listen"},
      {"--metrics-listen", "ADDR", "server.metrics_listen"},
      {"--unix-socket", "PATH", "server.unix_socket"},
      {"--dram", "SIZE", "store.dram_bytes"},
      {"--flash", "SIZE", "store.flash_bytes"},
      {"--flash-path", "PATH", "store.flash_path"},
      {"--flash-fresh", "", "store.flash_restore", "false",
       "start with an empty flash tier (by default the blocks on the flash file or device "
       "are found again: warm restart)"},
      {"--no-prefault", "", "store.prefault", "false",
       "do not touch the DRAM tier at start (a faster start, slower first puts)"},
      {"--max-value", "SIZE", "store.max_value_bytes"},
      {"--max-batch", "N", "server.max_batch"},
      {"--max-connections", "N", "server.max_connections"},
      {"--reactors", "N", "server.reactors"},
      {"--io-threads", "N", "server.io_threads"},
      {"--max-lease", "SIZE", "server.max_lease_bytes"},
      {"--reactor-nice", "N", "server.reactor_nice"},
      {"--tls-cert", "FILE", "server.tls_cert"},
      {"--tls-key", "FILE", "server.tls_key"},
      {"--tls-client-ca", "FILE", "server.tls_client_ca"},
      {"--tls-require-client-cert", "", "server.tls_require_client_cert", "true"},
      {"--etcd", "ENDPOINTS", "cluster.etcd"},
      {"--etcd-prefix", "P", "cluster.prefix"},
      {"--member-id", "ID", "cluster.member_id"},
      {"--advertise", "ADDR", "cluster.advertise"},
      {"--capacity", "SIZE", "cluster.capacity"},
      {"--labels", "L", "", nullptr,
       "topology labels, e.g. zone=z1,rack=r4,node=host7 (cluster.zone, .rack, .node)",
       [](const std::string& v, DaemonConfig* c, FlagEffects*) -> Status {
         std::stringstream labels(v);
         for (std::string kv; std::getline(labels, kv, ',');) {
           size_t eq = kv.find('=');
           std::string name = kv.substr(0, eq);
           std::string val = eq == std::string::npos ? "" : kv.substr(eq + 1);
           if (name == "node") {
             c->cluster.node = val;
           } else if (name == "rack") {
             c->cluster.rack = val;
           } else if (name == "zone") {
             c->cluster.zone = val;
           } else {
             return Status::InvalidArgument("node=..,rack=..,zone=.. (got '" + kv + "')");
           }
         }
         return Status::Ok();
       }},
      {"--lease-ttl", "SECONDS", "cluster.lease_ttl"},
      {"--kv-events", "ENDPOINT", "events.endpoint"},
      {"--kv-events-replay", "EP", "events.replay_endpoint"},
      {"--kv-events-topic", "T", "events.topic"},
      {"--kv-events-format", "F", "events.format"},
      {"--kv-events-medium", "M", "events.medium"},
      {"--kv-events-hash", "H", "events.hash"},
      {"--log-level", "L", "server.log_level"},
      {"--ready-file", "PATH", "", nullptr,
       "once listening, write {\"pid\":..,\"port\":..,\"resp_port\":..} there",
       [](const std::string& v, DaemonConfig* c, FlagEffects*) {
         c->ready_file = v;
         return Status::Ok();
       }},
      {"--print-config", "", "", nullptr, "print the settings that would be used, and exit",
       [](const std::string&, DaemonConfig*, FlagEffects* e) {
         e->print_config = true;
         return Status::Ok();
       }},
      {"--help", "", "", nullptr, "this text",
       [](const std::string&, DaemonConfig*, FlagEffects* e) {
         e->help = true;
         return Status::Ok();
       }},
  };
  return *flags;
}

// A flag's value as the setting's parser takes it: the text, or (a setting that wants a
// number) the number it spells.
Status SetFromText(const Setter& set, const std::string& text, DaemonConfig* c) {
  Status as_text = set(Value(text), c);
  if (as_text.ok()) return as_text;
  long long i = 0;
  auto [iend, ierr] = std::from_chars(text.data(), text.data() + text.size(), i);
  if (ierr == std::errc() && iend == text.data() + text.size() && !text.empty()) {
    return set(Value(i), c);
  }
  double d = 0;
  auto [dend, derr] = std::from_chars(text.data(), text.data() + text.size(), d);
  if (derr == std::errc() && dend == text.data() + text.size() && !text.empty()) {
    return set(Value(d), c);
  }
  return as_text;
}

// Wraps `text` at `width` columns, each line after the first indented by `indent`.
std::string Wrap(const std::string& text, size_t indent, size_t width) {
  std::string out, line;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (!line.empty() && indent + line.size() + 1 + w.size() > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  return out + line;
}

}  // namespace

Status ApplyFlags(int argc, const char* const* argv, DaemonConfig* config, FlagEffects* effects) {
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    if (name == "-h") name = "--help";
    const Flag* f = nullptr;
    for (const Flag& candidate : Flags()) {
      if (name == candidate.name) f = &candidate;
    }
    if (!f) return Status::InvalidArgument("unknown option '" + name + "' (--help lists them)");
    std::string value;
    if (*f->arg) {
      if (i + 1 >= argc) {
        return Status::InvalidArgument(name + " needs a value (" + std::string(f->arg) + ")");
      }
      value = argv[++i];
    }
    Status s;
    if (f->own) {
      s = f->own(value, config, effects);
    } else {
      const Setter& set = Fields().at(f->key).first;
      s = f->switch_value ? set(Value(std::string(f->switch_value) == "true"), config)
                          : SetFromText(set, value, config);
    }
    if (!s.ok()) return Status::InvalidArgument(name + ": " + std::string(s.message()));
  }
  return Status::Ok();
}

std::string DescribeFlags() {
  std::string out;
  for (const Flag& f : Flags()) {
    std::string head = "  " + std::string(f.name) + (*f.arg ? " " + std::string(f.arg) : "");
    std::string help;
    if (f.own) {
      help = f.help;
    } else {
      help = *f.help ? f.help : Fields().at(f.key).second;
      help += f.switch_value ? std::string(" (sets ") + f.key + " = " + f.switch_value + ")"
                             : std::string(" (") + f.key + ")";
    }
    if (head.size() >= 25) {
      out += head + "\n" + std::string(25, ' ');
    } else {
      out += head + std::string(25 - head.size(), ' ');
    }
    out += Wrap(help, 25, 90) + "\n";
  }
  return out;
}

DaemonConfig MachineDefaults(const std::string& data_dir) {
  DaemonConfig c;
  c.data_dir = data_dir;
  c.store.dram_bytes = std::max<uint64_t>(64 * kMiB, MemAvailable() / 4 / kMiB * kMiB);
  uint64_t free_disk = 16 * kGiB;
  struct statvfs vfs {};
  std::string probe = data_dir;
  if (::statvfs(probe.c_str(), &vfs) != 0) ::statvfs(".", &vfs);
  if (vfs.f_frsize) free_disk = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  c.store.flash_bytes = std::min<uint64_t>(4 * kGiB, free_disk / 4 / (16 * kMiB) * (16 * kMiB));
  c.store.max_value_bytes = std::min<uint64_t>(c.store.max_value_bytes, c.store.dram_bytes / 2);
  c.store.prefault = true;  // a daemon pays the page faults once, at start
  // llm-d subscribes to "kv@" topics and reads "kv@<pod>@<model>": this node, the pool.
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == 0) std::strcpy(host, "kvpoold");
  c.events.topic = std::string("kv@") + host + "@kvpool";
  return c;
}

Status ApplyToml(std::string_view text, DaemonConfig* config,
                 std::map<std::string, std::string>* settings) {
  std::string table;
  size_t line_no = 0;
  Tenant* tenant = nullptr;
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_no;
    auto fail = [&](std::string_view why) {
      return Status::InvalidArgument("config line " + std::to_string(line_no) + ": " +
                                     std::string(why));
    };
    line = Trim(StripComment(line));
    if (line.empty()) continue;
    if (line.starts_with("[[")) {
      if (line != "[[tenant]]") return fail("the only array of tables is [[tenant]]");
      table = "tenant";
      config->server.tenants.emplace_back();
      tenant = &config->server.tenants.back();
      continue;
    }
    if (line.starts_with('[')) {
      if (line != "[server]" && line != "[store]" && line != "[cluster]" && line != "[events]") {
        return fail("tables are [server], [store], [cluster], [events], [[tenant]]");
      }
      table = std::string(line.substr(1, line.size() - 2));
      tenant = nullptr;
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) return fail("expected key = value");
    std::string key(Trim(line.substr(0, eq)));
    auto value = ParseValue(line.substr(eq + 1));
    if (!value.ok()) return fail(value.status().message());
    if (table.empty()) return fail("key outside a table");
    if (table == "tenant") {
      if (key == "name" || key == "token") {
        auto s = AsString(*value);
        if (!s.ok()) return fail(key + ": " + std::string(s.status().message()));
        (key == "name" ? tenant->name : tenant->token) = *s;
      } else if (key == "namespaces") {
        auto* list = std::get_if<std::vector<std::string>>(&*value);
        if (!list) return fail("namespaces: expected [\"ns\", \"prefix/*\", ...]");
        tenant->namespaces = *list;
      } else if (key == "max_connections") {
        auto* n = std::get_if<long long>(&*value);
        if (!n || *n < 0 || *n > (1 << 20)) return fail("max_connections: an integer 0..1048576");
        tenant->max_connections = static_cast<uint32_t>(*n);
      } else if (key == "kv_events_endpoint") {
        auto s = AsString(*value);
        if (!s.ok()) return fail(key + ": " + std::string(s.status().message()));
        tenant->kv_events_endpoint = *s;
      } else if (key == "dram_quota" || key == "flash_quota") {
        auto n = AsSize(*value);
        if (!n.ok()) return fail(key + ": " + std::string(n.status().message()));
        (key == "dram_quota" ? tenant->dram_quota : tenant->flash_quota) = *n;
      } else if (key == "encryption_key_file" || key == "encryption_key_command") {
        auto s = AsString(*value);
        if (!s.ok()) return fail(key + ": " + std::string(s.status().message()));
        (key == "encryption_key_file" ? tenant->key_file : tenant->key_command) = *s;
      } else {
        return fail("unknown tenant key '" + key +
                    "' (name, token, namespaces, max_connections, dram_quota, flash_quota, "
                    "kv_events_endpoint, encryption_key_file, encryption_key_command)");
      }
      continue;
    }
    auto it = Fields().find(table + "." + key);
    if (it == Fields().end()) return fail("unknown setting '" + table + "." + key + "'");
    if (Status s = it->second.first(*value, config); !s.ok()) {
      return fail(table + "." + key + ": " + std::string(s.message()));
    }
    if (settings) (*settings)[it->first] = std::string(Trim(line.substr(eq + 1)));
  }
  std::set<std::string_view> names;
  for (const Tenant& t : config->server.tenants) {
    if (t.token.empty()) return Status::InvalidArgument("config: a [[tenant]] without a token");
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument("config: two tenants named '" + t.name +
                                     "' (names tell tenants' figures and quotas apart)");
    }
    if ((t.dram_quota && t.dram_quota < 64 * 1024) ||
        (t.flash_quota && t.flash_quota < 64 * 1024)) {
      return Status::InvalidArgument("config: tenant '" + t.name +
                                     "': a quota is at least 64KiB (0 or absent: none)");
    }
    if (t.namespaces.empty()) {
      return Status::InvalidArgument("config: tenant '" + t.name + "' has no namespaces");
    }
    if (!t.key_file.empty() && !t.key_command.empty()) {
      return Status::InvalidArgument("config: tenant '" + t.name +
                                     "': encryption_key_file or encryption_key_command, not both");
    }
  }
  return Status::Ok();
}

std::string DescribeSettings() {
  std::string out;
  for (const auto& [name, field] : Fields()) {
    bool has_flag = false;
    for (const Flag& f : Flags()) has_flag = has_flag || (name == f.key && !f.switch_value);
    if (has_flag) continue;  // described with its flag
    out += "  " + name +
           (name.size() < 27 ? std::string(27 - name.size(), ' ') : "\n" + std::string(29, ' ')) +
           Wrap(field.second, 29, 90) + "\n";
  }
  return out;
}

}  // namespace kvpool::server
