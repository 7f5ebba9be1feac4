// kvpoold: the pool daemon. Parses settings (machine defaults < config file < flags),
// locks the data directory, opens the store, serves until SIGTERM/SIGINT; SIGHUP reloads
// what can change while running.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd.h"
#include "cluster/member.h"
#include "cluster/membership.h"
#include "cluster/registrar.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/units.h"
#include "engine/tiered_store.h"
#include "kvpool/store.h"
#include "net/socket.h"
#include "server/config.h"
#include "server/http_endpoint.h"
#include "server/metrics.h"
#include "server/node_stats.h"
#include "server/server.h"
#include "server/status_json.h"
#include "server/status_page.h"

namespace {

using kvpool::server::DaemonConfig;

constexpr char kUsage[] =
    R"(kvpoold - the kvpool pool daemon: serves a tiered KV-cache block store (DRAM +
flash) over the native protocol (TCP and a same-host Unix socket with shared
memory) and over RESP2 (Redis clients work unchanged).

usage: kvpoold [options]

With no options it starts on the embedded defaults: native protocol on
127.0.0.1:7400, RESP on 127.0.0.1:7401, Unix socket kvpool-data/kvpoold.sock,
DRAM tier a quarter of MemAvailable, flash tier kvpool-data/flash.kvpool.
Settings apply in order: machine defaults, then --config FILE, then flags.

options (each but a few sets the file setting named in brackets; the flag wins):
%s
more settings of the file (TOML; sizes as integers or strings like "16MiB"):
%s
  [[tenant]]  name = "a", token = "secret", namespaces = ["a/*", "shared"],
              max_connections = 64 (optional: its connections on this node),
              dram_quota = "4GiB", flash_quota = "64GiB" (optional: the most of
              this node's store its blocks may hold; at a quota its own coldest
              blocks leave, never another tenant's; a put that cannot fit fails),
              kv_events_endpoint = "tcp://*:5560" (optional: KV events of its
              blocks, and only its, go there; with tenants --kv-events carries
              blocks of no tenant unless events.all_tenants = true; read at start),
              encryption_key_file = "/etc/kvpool/a.keys" (optional, mode 0600:
              "<version> <64 hex>" lines) or encryption_key_command = "..." (a KMS
              hook printing that list): its values are sealed with AES-256-GCM
              before they are stored; SIGHUP rotates, retires, or (an empty list)
              crypto-shreds them
      With tenants, a client's HELLO must carry a token whose tenant lists the
      namespace ('*' ends a prefix); RESP clients must AUTH with a token that
      opens server.resp_namespace. Without tenants the pool is open. A tenant's
      STAT and INFO show its own figures (and what it holds against its quotas),
      not the store's; DBSIZE is refused.

Signals: SIGTERM or SIGINT stop it cleanly: blocks held only in DRAM are written to
flash first (store.flush_on_close), and the next start finds them. After a crash
(kill -9) the blocks of every completed flash region are found; none is ever wrong
or comes back erased. A second kvpoold on the same data directory is refused.
SIGHUP reads the TLS certificate and key again (renewed files apply to new
connections; a broken pair keeps the running one), reads --config FILE again and
applies the tenants (new connections authenticate against them) and the log
level; it logs the settings that changed but take a restart.
)";

void Log(const std::string& msg) { kvpool::log::Info(msg); }

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kvpoold: %s\n(kvpoold --help for usage)\n", msg.c_str());
  return 2;
}

// How this node reaches etcd: the [cluster] settings, else etcdctl's environment variables.
kvpool::Result<kvpool::cluster::EtcdAccess> EtcdAccessOf(const kvpool::server::ClusterConfig& c) {
  kvpool::cluster::EtcdAccess a = kvpool::cluster::EtcdAccess::FromEnvironment();
  if (!c.etcd_user.empty()) a.user = c.etcd_user;
  if (!c.etcd_password_file.empty()) {
    std::ifstream f(c.etcd_password_file);
    std::string password;
    if (!f || !std::getline(f, password))
      return kvpool::Status::InvalidArgument("cannot read etcd_password_file " +
                                             c.etcd_password_file);
    a.password = password;
  }
  if (!c.etcd_tls_ca.empty()) a.tls_ca = c.etcd_tls_ca;
  if (!c.etcd_tls_cert.empty()) a.tls_cert = c.etcd_tls_cert;
  if (!c.etcd_tls_key.empty()) a.tls_key = c.etcd_tls_key;
  return a;
}

// This node as clients should see it: the advertise address (or the listen host with the
// port actually bound), a stable id, capacity and labels.
kvpool::Result<kvpool::cluster::Member> SelfMember(const DaemonConfig& c, uint16_t port) {
  if (c.server.listen.empty())
    return kvpool::Status::InvalidArgument("etcd membership needs the native TCP listener");
  kvpool::cluster::Member m;
  m.address = c.cluster.advertise;
  if (m.address.empty()) {
    auto addr = kvpool::net::ParseAddress(c.server.listen);
    if (!addr.ok()) return addr.status();
    std::string host = addr->host;
    if (host.empty() || host == "0.0.0.0") {
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      host = name;
    }
    m.address = host + ":" + std::to_string(port);
  }
  m.id = c.cluster.member_id.empty() ? m.address : c.cluster.member_id;
  m.capacity = c.cluster.capacity ? c.cluster.capacity : c.store.dram_bytes + c.store.flash_bytes;
  m.labels = {c.cluster.node, c.cluster.rack, c.cluster.zone};
  if (auto check = kvpool::cluster::DecodeMember(kvpool::cluster::EncodeMember(m)); !check.ok()) {
    return check.status();
  }
  return m;
}

}  // namespace

// Logs each change of the pod's member list (who joined, who left) until `stopping`.
void LogMemberChanges(const kvpool::cluster::Membership& peers, const std::atomic<bool>& stopping) {
  uint64_t seen = 0;
  std::vector<std::string> before;
  while (!stopping.load()) {
    if (uint64_t v = peers.version(); v != seen) {
      seen = v;
      std::vector<std::string> now;
      kvpool::cluster::MembershipView view = peers.Current();  // holds the list alive
      for (const auto& m : *view.members) now.push_back(m.id + "@" + m.address);
      std::string joined, left;
      for (const auto& m : now) {
        if (std::find(before.begin(), before.end(), m) == before.end()) joined += " " + m;
      }
      for (const auto& m : before) {
        if (std::find(now.begin(), now.end(), m) == now.end()) left += " " + m;
      }
      Log("pod members: " + std::to_string(now.size()) +
          (joined.empty() ? "" : "; joined:" + joined) + (left.empty() ? "" : "; left:" + left));
      before = std::move(now);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The HTTP port: /metrics, /api/stats and the live page, all from one snapshot function.
// `pod` (may be null) is the member list this node watches; `self_id` its own id.
kvpool::Result<std::unique_ptr<kvpool::server::HttpEndpoint>> StartHttp(
    const std::string& listen, kvpool::Store* store, kvpool::server::Server* server,
    const kvpool::cluster::Membership* pod, const std::string& self_id) {
  uint64_t start_ns = kvpool::NowNanos();
  auto snapshot = [store, server, pod, self_id, start_ns] {
    kvpool::server::NodeStats n;
    n.store = store->GetStats();
    n.server = server->GetStats();
    n.tenants = server->TenantSnapshots();
    n.uptime_seconds = static_cast<double>(kvpool::NowNanos() - start_ns) / 1e9;
    n.unix_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
    if (pod) {
      n.in_pool = true;
      n.member_id = self_id;
      kvpool::cluster::MembershipView view = pod->Current();
      for (const auto& m : *view.members) n.members.push_back({m.id, m.address, m.capacity});
    }
    return n;
  };
  std::vector<kvpool::server::HttpRoute> routes = {
      {"/metrics", "text/plain; version=0.0.4; charset=utf-8",
       [snapshot] { return kvpool::server::RenderMetrics(snapshot()); }},
      {"/api/stats", "application/json",
       [snapshot] { return kvpool::server::RenderStatusJson(snapshot()); }},
      {"/", "text/html; charset=utf-8", [] { return kvpool::server::StatusPage(); }},
  };
  auto h = kvpool::server::HttpEndpoint::Start(listen, std::move(routes),
                                               [server] { return server->tls(); });
  if (!h.ok()) return h.status();
  std::string base = (server->tls() ? "https://" : "http://") +
                     listen.substr(0, listen.rfind(':')) + ":" + std::to_string((*h)->port());
  Log("http: live page " + base + "/, metrics " + base + "/metrics, JSON " + base + "/api/stats");
  return h;
}

// The HTTP address other nodes and `kvpool top` dial: the listen host, or the member
// address's host when it listens on every interface.
std::string HttpAdvertise(const std::string& listen, const std::string& member_address,
                          uint16_t port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") {
    host = member_address.substr(0, member_address.rfind(':'));
  }
  return host + ":" + std::to_string(port);
}

struct LeaveHook {
  kvpool::Mutex mu;
  kvpool::cluster::Registrar* registrar GUARDED_BY(mu) = nullptr;
  bool left GUARDED_BY(mu) = false;
};

struct Loaded {
  DaemonConfig config;
  std::string config_file;
  std::map<std::string, std::string> file_settings;  // what the file set ("table.key")
  bool print_config = false;
};

// Settings in order: machine defaults, the config file, flags; then those derived from
// them. At start and again on SIGHUP.
kvpool::Result<Loaded> Load(int argc, char** argv) {
  auto Bad = [](const std::string& msg) { return kvpool::Status::InvalidArgument(msg); };
  Loaded out;
  std::string data_dir = "kvpool-data";
  for (int i = 1; i + 1 < argc; ++i) {  // data dir and config first: they shape the defaults
    std::string a = argv[i];
    if (a == "--data-dir") data_dir = argv[i + 1];
    if (a == "--config") out.config_file = argv[i + 1];
  }
  DaemonConfig& c = out.config;
  c = kvpool::server::MachineDefaults(data_dir);
  if (!out.config_file.empty()) {
    std::ifstream f(out.config_file);
    if (!f) return Bad("cannot read config file " + out.config_file + ": " + std::strerror(errno));
    std::stringstream ss;
    ss << f.rdbuf();
    if (auto s = kvpool::server::ApplyToml(ss.str(), &c, &out.file_settings); !s.ok()) {
      return Bad(out.config_file + ": " + std::string(s.message()));
    }
  }
  kvpool::server::FlagEffects effects;
  if (auto st = kvpool::server::ApplyFlags(argc, argv, &c, &effects); !st.ok()) {
    return Bad(std::string(st.message()));
  }
  out.print_config = effects.print_config;
  // Derived settings.
  c.store.max_value_bytes = std::min(c.store.max_value_bytes, c.store.dram_bytes / 2);
  c.server.limits.max_value_bytes = c.store.max_value_bytes;
  // Leased blocks stay pinned in DRAM: at most a quarter of it, so puts always find room.
  c.server.max_lease_bytes = std::min(c.server.max_lease_bytes, c.store.dram_bytes / 4);
  if (c.unix_socket && c.server.unix_path.empty())
    c.server.unix_path = c.data_dir + "/kvpoold.sock";
  if (c.store.flash_bytes == 0) {
    c.store.flash_path.clear();
  } else if (c.store.flash_path.empty()) {
    c.store.flash_path = c.data_dir + "/flash.kvpool";
  }
  if (kvpool::Status s = c.store.Validate(); !s.ok()) return Bad(std::string(s.message()));
  // Tenants' encryption keys: read now, so a missing or malformed key list fails the start
  // (or the reload, which then keeps the running keys).
  if (kvpool::Status s = kvpool::server::LoadTenantKeys(c.server.tenants); !s.ok())
    return Bad(std::string(s.message()));
  return out;
}

// SIGHUP: the settings are loaded again (defaults < file < flags, as at start). The
// tenants and the log level apply now; a setting the file changed that takes a restart is
// named, and keeps its running value. A file that no longer parses changes nothing.
void Reload(int argc, char** argv, Loaded& running, kvpool::server::Server* server) {
  if (!running.config.server.tls.cert_file.empty()) {
    kvpool::Status t = server->ReloadTls();
    if (t.ok()) {
      Log("SIGHUP: TLS certificate and key read again from " + running.config.server.tls.cert_file);
    } else {
      kvpool::log::Error("SIGHUP: " + std::string(t.message()) + "; keeping the running TLS keys");
    }
  }
  if (running.config_file.empty()) {
    Log("SIGHUP: started without --config, nothing to reload");
    return;
  }
  auto next = Load(argc, argv);
  if (!next.ok()) {
    kvpool::log::Error("SIGHUP: " + std::string(next.status().message()) +
                       "; keeping the running settings");
    return;
  }
  DaemonConfig& now = running.config;
  auto reloadable = [](const std::string& key) {
    const auto& r = kvpool::server::kReloadableSettings;
    return std::find(std::begin(r), std::end(r), key) != std::end(r);
  };
  std::vector<std::string> needs_restart;  // changed, added or removed, and not reloadable
  for (const auto& [key, value] : next->file_settings) {
    auto was = running.file_settings.find(key);
    bool same = was != running.file_settings.end() && was->second == value;
    if (!same && !reloadable(key)) needs_restart.push_back(key);
  }
  for (const auto& [key, value] : running.file_settings) {
    if (!next->file_settings.count(key) && !reloadable(key)) needs_restart.push_back(key);
  }
  server->SetTenants(next->config.server.tenants);
  kvpool::log::SetLevel(next->config.log_level);
  std::string tenants;
  for (const auto& t : next->config.server.tenants) {
    tenants += (tenants.empty() ? "" : ",") + t.name;
    if (t.keys) {
      std::string versions;
      for (uint32_t v : t.keys->versions())
        versions += (versions.empty() ? "" : "+") + std::to_string(v);
      tenants += t.keys->shredded() ? " [sealed, no keys: shredded]"
                                    : " [sealed, key versions " + versions + "]";
    }
  }
  Log("SIGHUP: reloaded " + running.config_file + ": " +
      std::to_string(next->config.server.tenants.size()) + " tenants" +
      (tenants.empty() ? " (open)" : " (" + tenants + ")") + ", log level " +
      kvpool::log::LevelName(next->config.log_level));
  if (!needs_restart.empty()) {
    std::string keys;
    for (const auto& k : needs_restart) keys += (keys.empty() ? "" : ", ") + k;
    kvpool::log::Warn("SIGHUP: changed in " + running.config_file +
                      " but applied only at restart: " + keys);
  }
  now.server.tenants = next->config.server.tenants;
  now.log_level = next->config.log_level;
  for (const auto& [key, value] : next->file_settings) {
    if (std::find(needs_restart.begin(), needs_restart.end(), key) == needs_restart.end()) {
      running.file_settings[key] = value;
    }
  }
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(kUsage, kvpool::server::DescribeFlags().c_str(),
                  kvpool::server::DescribeSettings().c_str());
      return 0;
    }
  }
  auto loaded = Load(argc, argv);
  if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
  DaemonConfig c = loaded->config;
  kvpool::log::SetLevel(c.log_level);

  std::ostringstream summary;
  summary << "native=" << (c.server.listen.empty() ? "off" : c.server.listen)
          << " resp=" << (c.server.resp_listen.empty() ? "off" : c.server.resp_listen)
          << " unix=" << (c.server.unix_path.empty() ? "off" : c.server.unix_path)
          << " dram=" << kvpool::FormatSize(c.store.dram_bytes) << " flash="
          << (c.store.flash_path.empty()
                  ? "off"
                  : kvpool::FormatSize(c.store.flash_bytes) + " at " + c.store.flash_path)
          << " max_value=" << kvpool::FormatSize(c.store.max_value_bytes)
          << " max_batch=" << c.server.limits.max_batch << " tenants=" << c.server.tenants.size()
          << " etcd=" << (c.cluster.etcd.empty() ? "off" : c.cluster.etcd + " " + c.cluster.prefix)
          << " kv_events=" << (c.events.endpoint.empty() ? "off" : c.events.endpoint) << " tls="
          << (c.server.tls.cert_file.empty()     ? "off"
              : c.server.tls.require_client_cert ? "on (client certificates required)"
              : c.server.tls.ca_file.empty()     ? "on"
                                                 : "on (client certificates optional)");
  if (loaded->print_config) {
    std::printf("%s\n", summary.str().c_str());
    return 0;
  }

  if (::mkdir(c.data_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Fail("cannot create data directory " + c.data_dir + ": " + std::strerror(errno));
  }
  std::string lock_path = c.data_dir + "/LOCK";
  int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) return Fail("cannot open " + lock_path + ": " + std::strerror(errno));
  if (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    (void)!::pread(lock, pid, sizeof(pid) - 1, 0);
    return Fail("data directory " + c.data_dir + " is in use by another kvpoold (pid " +
                std::string(pid, strcspn(pid, "\n")) + "); stop it or pick another --data-dir");
  }
  std::string pid = std::to_string(getpid()) + "\n";
  (void)!::ftruncate(lock, 0);
  (void)!::pwrite(lock, pid.data(), pid.size(), 0);

  // Signals (SIGTERM/SIGINT: stop; SIGHUP: reload) are taken by sigwait in this thread only; every
  // thread started below inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Log("starting: " + summary.str());
  if (c.store.prefault) {
    Log("touching the " + kvpool::FormatSize(c.store.dram_bytes) +
        " DRAM tier once now, so puts never stall on page faults (--no-prefault skips)");
  }
  // The publisher outlives the store: the store reports to it until it is closed.
  std::unique_ptr<kvpool::server::KvEventPublisher> events;
  kvpool::server::AssignTenantIds(c.server.tenants);
  for (const kvpool::server::Tenant& t : c.server.tenants) {
    if (!t.kv_events_endpoint.empty()) {
      c.events.tenant_endpoints.emplace_back(t.id, t.kv_events_endpoint);
    }
  }
  if (!c.events.endpoint.empty() || !c.events.tenant_endpoints.empty()) {
    auto pub = kvpool::server::KvEventPublisher::Start(c.events);
    if (!pub.ok()) return Fail(pub.status().ToString());
    events = std::move(pub).value();
    c.store.listener = events.get();
    std::string where = c.events.endpoint.empty() ? "" : " on " + c.events.endpoint;
    if (!c.events.tenant_endpoints.empty()) {
      where += " (" + std::to_string(c.events.tenant_endpoints.size()) +
               " tenants on their own endpoints)";
    }
    Log("kv events: publishing" + where +
        (c.events.replay_endpoint.empty() ? "" : ", replay on " + c.events.replay_endpoint));
  } else if (!c.events.replay_endpoint.empty()) {
    return Fail("--kv-events-replay needs --kv-events");
  }
  uint64_t open_ns = kvpool::NowNanos();
  auto store = kvpool::Store::Open(c.store);
  if (!store.ok()) return Fail("cannot open the store: " + store.status().ToString());
  if (!c.store.flash_path.empty()) {
    kvpool::StoreStats st = (*store)->GetStats();
    char ms[32];
    std::snprintf(ms, sizeof(ms), "%.1f", static_cast<double>(kvpool::NowNanos() - open_ns) / 1e6);
    Log(c.store.flash_restore
            ? "flash: " + std::to_string(st.flash_restored) + " blocks (" +
                  kvpool::FormatSize(st.flash.used_bytes) + ") found at " + c.store.flash_path +
                  (st.flash_regions_dropped
                       ? ", " + std::to_string(st.flash_regions_dropped) + " torn regions dropped"
                       : "") +
                  ", store open in " + ms + " ms"
            : "flash: started empty (--flash-fresh)");
  }
  // A peer's LEAVE (kvpool cluster drain) takes the node out of the member list.
  auto leave = std::make_shared<LeaveHook>();
  if (!c.cluster.etcd.empty()) {
    c.server.on_leave = [leave]() -> kvpool::Status {
      kvpool::MutexLock lock(leave->mu);
      if (!leave->registrar) return kvpool::Status::Unavailable("not registered yet");
      if (!leave->left) {
        leave->registrar->Stop();  // revokes the lease: clients see the node leave at once
        leave->left = true;
        Log("left the pod's member list (drain); still serving");
      }
      return kvpool::Status::Ok();
    };
  }
  auto server = kvpool::server::Server::Start(c.server, store->get());
  if (!server.ok()) return Fail("cannot listen: " + server.status().ToString());
  auto& srv = *server;
  Log("listening: native port " + std::to_string(srv->port()) + ", resp port " +
      std::to_string(srv->resp_port()) + ", " + std::to_string(srv->reactor_count()) +
      " reactors at nice " + std::to_string(srv->reactor_nice()));
  if (!srv->reactor_nice_error().empty()) {
    Log("reactor priority left as it was: " + srv->reactor_nice_error());
  }
  std::unique_ptr<kvpool::cluster::Registrar> registrar;
  std::unique_ptr<kvpool::cluster::Membership> peers;
  std::thread peer_log;
  std::atomic<bool> stopping{false};
  std::optional<kvpool::cluster::Member> self;
  std::vector<std::string> etcd_endpoints = kvpool::cluster::SplitEndpoints(c.cluster.etcd);
  kvpool::cluster::EtcdAccess check_access;
  if (!c.cluster.etcd.empty()) {
    auto me = SelfMember(c, srv->port());
    if (!me.ok()) return Fail("cluster: " + me.status().ToString());
    self = std::move(me).value();
    auto access = EtcdAccessOf(c.cluster);
    if (!access.ok()) return Fail("cluster: " + access.status().ToString());
    // A node joins only with the cluster's credential: one etcd refuses stops it here.
    {
      kvpool::cluster::Etcd etcd(etcd_endpoints, 2000, *access);
      std::vector<kvpool::cluster::EtcdKv> kvs;
      int64_t rev = 0;
      kvpool::Status s = etcd.RangePrefix(c.cluster.prefix, &kvs, &rev);
      if (s.code() == kvpool::Code::kRefused)
        return Fail(
            "cluster: etcd refused this node's credential (cluster.etcd_user and "
            "etcd_password_file, or etcd_tls_cert): " +
            std::string(s.message()));
      if (s.code() == kvpool::Code::kInvalidArgument)
        return Fail("cluster: " + std::string(s.message()));
      if (!s.ok())
        kvpool::log::Warn("cluster: etcd not answering yet (" + s.ToString() +
                          "); registration retries");
    }
    kvpool::cluster::RegistrarOptions check;
    check.endpoints = etcd_endpoints;
    check.prefix = c.cluster.prefix;
    check.access = check_access = *access;
    if (kvpool::Status s = kvpool::cluster::CheckMemberIdFree(check, *self); !s.ok()) {
      return Fail("cluster: " + std::string(s.message()));
    }
    // Nodes watch the member list too: each change is logged (who joined, who left), and
    // the HTTP endpoint shows it.
    peers = kvpool::cluster::Membership::FromEtcd(etcd_endpoints, c.cluster.prefix, 1000, *access);
    peer_log = std::thread([&] { LogMemberChanges(*peers, stopping); });
  }
  std::unique_ptr<kvpool::server::HttpEndpoint> http;
  if (!c.metrics_listen.empty()) {
    auto h = StartHttp(c.metrics_listen, store->get(), srv.get(), peers.get(),
                       self ? self->id : std::string());
    if (!h.ok()) return Fail("cannot serve HTTP: " + h.status().ToString());
    http = std::move(h).value();
  }
  if (self) {
    if (http) self->http = HttpAdvertise(c.metrics_listen, self->address, http->port());
    kvpool::cluster::RegistrarOptions ro;
    ro.endpoints = etcd_endpoints;
    ro.prefix = c.cluster.prefix;
    ro.ttl_seconds = static_cast<int>(c.cluster.lease_ttl);
    ro.access = check_access;
    Log("member " + self->id + " at " + self->address + ", capacity " +
        kvpool::FormatSize(self->capacity) + ", registering in etcd " + c.cluster.etcd);
    registrar = std::make_unique<kvpool::cluster::Registrar>(ro, *self, Log);
    registrar->Start();
    kvpool::MutexLock lock(leave->mu);
    leave->registrar = registrar.get();
  }
  if (!c.ready_file.empty()) {
    std::string tmp = c.ready_file + ".tmp";
    std::ofstream f(tmp);
    f << "{\"pid\": " << getpid() << ", \"port\": " << srv->port()
      << ", \"resp_port\": " << srv->resp_port()
      << ", \"metrics_port\": " << (http ? http->port() : 0) << ", \"unix\": \""
      << c.server.unix_path << "\"}\n";
    f.close();
    std::rename(tmp.c_str(), c.ready_file.c_str());
  }

  int sig = 0;
  while (sigwait(&stop_signals, &sig) == 0 && sig == SIGHUP) {
    Reload(argc, argv, *loaded, srv.get());
  }
  Log(std::string("stopping on ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT"));
  stopping = true;
  if (peer_log.joinable()) peer_log.join();
  peers.reset();
  {
    kvpool::MutexLock lock(leave->mu);
    leave->registrar = nullptr;
  }
  registrar.reset();  // leave the member list before the port closes
  srv->Stop();
  kvpool::server::ServerStats ss = srv->GetStats();
  Log("served " + std::to_string(ss.requests) + " requests on " +
      std::to_string(ss.connections_accepted) + " connections; stopped");
  server->reset();
  if (!c.store.flash_path.empty() && c.store.flush_on_close) {
    Log("writing the blocks held only in DRAM to flash (store.flush_on_close)");
  }
  uint64_t close_ns = kvpool::NowNanos();
  store->reset();
  if (!c.store.flash_path.empty()) {
    Log("flash closed in " + std::to_string((kvpool::NowNanos() - close_ns) / 1'000'000) + " ms");
  }
  ::close(lock);
  return 0;
}
