#include "top.h"

#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd.h"
#include "cluster/http.h"
#include "cluster/membership.h"
#include "common/units.h"

namespace kvpool::tools {

const char kTopUsage[] = R"(kvpool top - live figures of one kvpoold or the whole pod

usage: kvpool top [--http HOST:PORT[,..] | --etcd HOST:PORT[,..] [--etcd-prefix P]]
                  [--interval SECONDS] [--iterations N] [--once]
  --http LIST     the nodes' HTTP endpoints (kvpoold --metrics-listen); default
                  127.0.0.1:7402
  --etcd LIST     take the nodes from the pod's member list in etcd (each member
                  advertises its HTTP endpoint when it serves one)
  --interval S    refresh period (default 1)
  --iterations N  stop after N refreshes (default: until q)
  --once          one refresh after one interval, printed plainly (for scripts);
                  exit status 1 if a node did not answer
Per node and for the pod: gets/s, hit ratio (all, DRAM, flash), puts/s, get and put
p99 over the last interval, bytes/s in and out, connections, DRAM and flash used.
Per tenant across the pod: connections, requests/s, gets/s, hit ratio, puts/s, bytes/s.
Keys: q quits.
)";

namespace {

using nlohmann::json;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kvpool top: %s\n(kvpool top --help for usage)\n", msg.c_str());
  return 2;
}

struct Node {
  std::string name, http;
  std::optional<json> prev, now;
  std::string error;
};

Result<json> FetchStats(const std::string& address) {
  auto conn = cluster::HttpConnection::Open(address, 1000);
  if (!conn.ok()) return conn.status();
  if (Status s = conn->Get("/api/stats"); !s.ok()) return s;
  std::string body;
  if (Status s = conn->ReadResponse(&body); !s.ok()) return s;
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("store")) {
    return Status::InvalidArgument("not a kvpoold /api/stats answer");
  }
  return j;
}

uint64_t U(const json& j, std::initializer_list<const char*> path) {
  const json* at = &j;
  for (const char* p : path) {
    auto it = at->find(p);
    if (it == at->end()) return 0;
    at = &*it;
  }
  return at->is_number() ? at->get<uint64_t>() : 0;
}

// Sums of what happened between two snapshots of one or many nodes.
struct Delta {
  double seconds = 0;
  double gets = 0, dram_hits = 0, flash_hits = 0, puts = 0, bytes_in = 0, bytes_out = 0;
  std::vector<double> bounds;
  std::map<std::string, std::vector<double>> le;  // op -> bucket deltas (cumulative)
  std::map<std::string, double> count;
  uint64_t connections = 0, dram_used = 0, dram_cap = 0, flash_used = 0, flash_cap = 0;

  void Add(const json& now, const json& before) {
    double dt = (static_cast<double>(U(now, {"unix_ms"})) - U(before, {"unix_ms"})) / 1000.0;
    seconds = std::max(seconds, dt);
    auto d = [&](std::initializer_list<const char*> p) {
      return static_cast<double>(U(now, p)) - static_cast<double>(U(before, p));
    };
    gets += d({"store", "gets"});
    dram_hits += d({"store", "dram", "hits"});
    flash_hits += d({"store", "flash", "hits"});
    puts += d({"store", "puts"});
    bytes_in += d({"server", "bytes_in"});
    bytes_out += d({"server", "bytes_out"});
    connections += U(now, {"server", "connections_open"});
    dram_used += U(now, {"store", "dram", "used_bytes"});
    dram_cap += U(now, {"store", "dram", "capacity_bytes"});
    flash_used += U(now, {"store", "flash", "used_bytes"});
    flash_cap += U(now, {"store", "flash", "capacity_bytes"});
    const json& lat = now["latency"];
    if (bounds.empty()) bounds = lat["bounds_us"].get<std::vector<double>>();
    for (const char* op : {"get_dram", "get_flash", "put"}) {
      std::vector<double>& acc = le[op];
      const json& a = lat[op]["le"];
      const json& b = before["latency"][op]["le"];
      acc.resize(a.size());
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        acc[i] += a[i].get<double>() - b[i].get<double>();
      }
      count[op] += lat[op]["count"].get<double>() - before["latency"][op]["count"].get<double>();
    }
  }

  // The q-quantile of an op in the interval: its bucket's upper bound (NaN: none).
  double Quantile(const std::string& op, double q) const {
    auto c = count.find(op);
    auto l = le.find(op);
    if (c == count.end() || l == le.end() || c->second <= 0) return NAN;
    for (size_t i = 0; i < l->second.size() && i < bounds.size(); ++i) {
      if (l->second[i] >= q * c->second) return bounds[i];
    }
    return INFINITY;
  }
};

std::string Rate(double v) {
  char b[32];
  if (std::isnan(v)) return "-";
  if (v >= 1e6)
    std::snprintf(b, sizeof b, "%.2fM", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(b, sizeof b, "%.1fk", v / 1e3);
  else
    std::snprintf(b, sizeof b, "%.0f", v);
  return b;
}

std::string Pct(double num, double den) {
  if (den <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100.0 * num / den);
  return b;
}

std::string Us(double us) {
  char b[32];
  if (std::isnan(us)) return "-";
  if (std::isinf(us)) return ">1 s";
  if (us >= 1000)
    std::snprintf(b, sizeof b, "%.0f ms", us / 1000);
  else
    std::snprintf(b, sizeof b, "%.0f us", us);
  return b;
}

std::string PerSecond(double bytes, double seconds) {
  if (seconds <= 0) return "-";
  return FormatSize(static_cast<uint64_t>(std::max(0.0, bytes / seconds))) + "/s";
}

std::string Used(uint64_t used, uint64_t cap) {
  if (cap == 0) return "-";
  return FormatSize(used) + " " + Pct(static_cast<double>(used), static_cast<double>(cap));
}

std::string Row(const std::string& name, const Delta& d) {
  char b[512];
  double s = d.seconds > 0 ? d.seconds : NAN;
  std::snprintf(b, sizeof b, "%-24.24s %8s %6s %6s %6s %8s %7s %7s %11s %11s %5llu %16s %16s\n",
                name.c_str(), Rate(d.gets / s).c_str(),
                Pct(d.dram_hits + d.flash_hits, d.gets).c_str(), Pct(d.dram_hits, d.gets).c_str(),
                Pct(d.flash_hits, d.gets).c_str(), Rate(d.puts / s).c_str(),
                Us(d.Quantile("get_dram", 0.99)).c_str(), Us(d.Quantile("put", 0.99)).c_str(),
                PerSecond(d.bytes_in, d.seconds).c_str(), PerSecond(d.bytes_out, d.seconds).c_str(),
                static_cast<unsigned long long>(d.connections),
                Used(d.dram_used, d.dram_cap).c_str(), Used(d.flash_used, d.flash_cap).c_str());
  return b;
}

struct TenantSum {
  uint64_t connections = 0;
  double requests = 0, gets = 0, hits = 0, puts = 0, in = 0, out = 0;
};

std::string Frame(const std::vector<Node>& nodes, double interval, bool keys) {
  std::string out;
  char head[256];
  time_t t = time(nullptr);
  struct tm utc {};
  gmtime_r(&t, &utc);
  char ts[32];
  strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S UTC", &utc);
  std::snprintf(head, sizeof head, "kvpool top - %zu node%s, %s, every %.1f s%s\n\n", nodes.size(),
                nodes.size() == 1 ? "" : "s", ts, interval, keys ? " (q quits)" : "");
  out += head;
  char cols[512];
  std::snprintf(cols, sizeof cols, "%-24s %8s %6s %6s %6s %8s %7s %7s %11s %11s %5s %16s %16s\n",
                "NODE", "GETS/S", "HIT", "DRAM", "FLASH", "PUTS/S", "GET P99", "PUT P99", "IN",
                "OUT", "CONNS", "DRAM USED", "FLASH USED");
  out += cols;
  Delta pod;
  std::map<std::string, TenantSum> tenants;
  double seconds = 0;
  for (const Node& n : nodes) {
    if (!n.error.empty()) {
      out += n.name.substr(0, 24) + std::string(n.name.size() < 24 ? 25 - n.name.size() : 1, ' ') +
             "not answering: " + n.error + "\n";
      continue;
    }
    if (!n.now || !n.prev) {
      out += n.name.substr(0, 24) + "  (first sample)\n";
      continue;
    }
    Delta d;
    d.Add(*n.now, *n.prev);
    out += Row(n.name, d);
    pod.Add(*n.now, *n.prev);
    seconds = std::max(seconds, d.seconds);
    std::map<std::string, json> before;
    for (const json& tj : (*n.prev)["tenants"]) before[tj["name"].get<std::string>()] = tj;
    for (const json& tj : (*n.now)["tenants"]) {
      std::string name = tj["name"].get<std::string>();
      json b = before.count(name) ? before[name] : json::object();
      TenantSum& s = tenants[name];
      auto d2 = [&](const char* f) {
        return static_cast<double>(U(tj, {f})) - static_cast<double>(U(b, {f}));
      };
      s.connections += U(tj, {"connections"});
      s.requests += d2("requests");
      s.gets += d2("gets");
      s.hits += d2("hits");
      s.puts += d2("puts");
      s.in += d2("bytes_in");
      s.out += d2("bytes_out");
    }
  }
  if (nodes.size() > 1) out += Row("pod", pod);
  if (!tenants.empty() && seconds > 0) {
    std::snprintf(cols, sizeof cols, "\n%-24s %5s %8s %8s %6s %8s %11s %11s\n", "TENANT", "CONNS",
                  "REQ/S", "GETS/S", "HIT", "PUTS/S", "IN", "OUT");
    out += cols;
    for (const auto& [name, s] : tenants) {
      char b[256];
      std::snprintf(b, sizeof b, "%-24.24s %5llu %8s %8s %6s %8s %11s %11s\n", name.c_str(),
                    static_cast<unsigned long long>(s.connections),
                    Rate(s.requests / seconds).c_str(), Rate(s.gets / seconds).c_str(),
                    Pct(s.hits, s.gets).c_str(), Rate(s.puts / seconds).c_str(),
                    PerSecond(s.in, seconds).c_str(), PerSecond(s.out, seconds).c_str());
      out += b;
    }
  }
  return out;
}

// Puts the terminal in non-canonical, no-echo mode while alive (when stdin is one), so a
// single key press is read at once; restored on destruction and on SIGINT/SIGTERM.
class KeyReader {
 public:
  KeyReader() {
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0) {
      active_ = true;
      restore_ = saved_;
      std::signal(SIGINT, Restore);
      std::signal(SIGTERM, Restore);
    }
  }
  ~KeyReader() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  bool active() const { return active_; }
  // Waits up to `ms` for a key; true if it was q (or stdin closed).
  bool WaitForQuit(int ms) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (true) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      until - std::chrono::steady_clock::now())
                                      .count());
      if (left <= 0) return false;
      if (!active_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(left));
        return false;
      }
      pollfd p{STDIN_FILENO, POLLIN, 0};
      if (poll(&p, 1, left) <= 0) continue;
      char c;
      ssize_t n = read(STDIN_FILENO, &c, 1);
      if (n == 0) return true;
      if (n == 1 && (c == 'q' || c == 'Q')) return true;
    }
  }

 private:
  static void Restore(int sig) {
    tcsetattr(STDIN_FILENO, TCSANOW, &restore_);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  static inline termios restore_{};
  termios saved_{};
  bool active_ = false;
};

}  // namespace

int TopCommand(int argc, char** argv) {
  std::string http = "127.0.0.1:7402", etcd, prefix = "/kvpool/members/";
  double interval = 1.0;
  long iterations = 0;
  bool once = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--help" || a == "-h") {
      std::fputs(kTopUsage, stdout);
      return 0;
    } else if (a == "--http" && (v = value())) {
      http = v;
    } else if (a == "--etcd" && (v = value())) {
      etcd = v;
    } else if (a == "--etcd-prefix" && (v = value())) {
      prefix = v;
    } else if (a == "--interval" && (v = value())) {
      char* end;
      interval = std::strtod(v, &end);
      if (*end || !(interval >= 0.1 && interval <= 3600)) return Fail("--interval: 0.1..3600");
    } else if (a == "--iterations" && (v = value())) {
      char* end;
      iterations = std::strtol(v, &end, 10);
      if (*end || iterations < 1) return Fail("--iterations: a positive count");
    } else if (a == "--once") {
      once = true;
    } else {
      return Fail("unknown or incomplete option '" + a + "'");
    }
  }
  std::vector<Node> nodes;
  if (!etcd.empty()) {
    auto pod = cluster::Membership::FromEtcd(cluster::SplitEndpoints(etcd), prefix, 1000);
    if (!pod->WaitReady(3000)) return Fail("etcd at " + etcd + " did not answer within 3 s");
    cluster::MembershipView view = pod->Current();
    for (const auto& m : *view.members) {
      Node n{m.id, m.http, {}, {}, {}};
      if (m.http.empty()) n.error = "no HTTP endpoint (start it with --metrics-listen)";
      nodes.push_back(std::move(n));
    }
    if (nodes.empty()) return Fail("no members under " + prefix + " in etcd " + etcd);
  } else {
    for (const std::string& addr : cluster::SplitEndpoints(http))
      nodes.push_back(Node{addr, addr, {}, {}, {}});
    if (nodes.empty()) return Fail("--http: no address");
  }
  if (once) iterations = 1;
  bool screen = !once && isatty(STDOUT_FILENO);
  KeyReader keys;
  int interval_ms = static_cast<int>(interval * 1000);
  auto sample = [&] {
    for (Node& n : nodes) {
      if (n.http.empty()) continue;
      auto j = FetchStats(n.http);
      n.prev = std::move(n.now);
      n.now.reset();
      if (j.ok()) {
        n.now = std::move(j).value();
        n.error.clear();
      } else {
        n.error = std::string(j.status().message());
      }
    }
  };
  sample();
  for (long frame = 0; iterations == 0 || frame < iterations; ++frame) {
    if (keys.WaitForQuit(interval_ms)) break;
    sample();
    std::string text = Frame(nodes, interval, keys.active() && !once);
    if (screen) text = "\x1b[H\x1b[2J" + text;
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  bool all_answered = true;
  for (const Node& n : nodes) all_answered &= n.error.empty();
  return once && !all_answered ? 1 : 0;
}

}  // namespace kvpool::tools
