#include "cluster_cli.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cluster/placement.h"
#include "common/units.h"
#include "kvpool/pool.h"

namespace kvpool::tools {

const char kClusterUsage[] = R"(kvpool cluster - the pod pool as one store

usage:
  kvpool cluster status [--etcd HOST:PORT[,..] [--etcd-prefix P] | --members LIST] [--json]
                        [--tls-ca FILE [--tls-cert FILE --tls-key FILE]]
      Members with labels and advertised capacity, whether each answers, and its
      bytes held, blocks, gets and hit rate (one STAT round trip per node).
      LIST: "host:port[,capacity=SIZE][,id=ID][,zone=Z][,rack=R][,node=N];..."
      Default: --members 127.0.0.1:7400. Exit status 1 if a member is unreachable.
  kvpool cluster drain NODE --etcd HOST:PORT[,..] [--etcd-prefix P] [--token T]
                       [--max-blocks N] [--batch N]
      Takes member NODE (id or address) out of the pod without losing its hot blocks:
      it leaves the member list at once and keeps serving (clients read through from
      it meanwhile), then its blocks, hottest first (at most N, default 4Mi), are copied
      to their owners among the remaining members, with progress. Stop it afterwards.
      --token: the cluster's peer token (cluster.peer_token) on nodes with tenants.
      --tls-ca FILE, --tls-cert FILE, --tls-key FILE: nodes with TLS (their CA; this
      tool's certificate, which nodes with a client CA require of peers).
      etcd with auth or TLS: etcdctl's variables (ETCDCTL_USER, ETCDCTL_PASSWORD,
      ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY), for status and drain alike.
  kvpool cluster placement [--keys N] [--members N] [--json PATH]
      Placement benchmark: N keys (default 1,000,000) over N members (default 8) with
      unequal weights: each member's share against its weight, and the keys moved by a
      join and by a leave against the minimum (1/N).
)";

namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kvpool cluster: %s\n", msg.c_str());
  return 2;
}

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) o.push_back(c);
  }
  return o;
}

int Status(int argc, char** argv) {
  PoolOptions o;
  o.members = "127.0.0.1:7400";
  bool json = false;
  size_t expect = 0;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--etcd" && (v = value()))
      o.etcd = v;
    else if (a == "--etcd-prefix" && (v = value()))
      o.etcd_prefix = v;
    else if (a == "--members" && (v = value()))
      o.members = v;
    else if (a == "--json")
      json = true;
    else if (a == "--expect-members" && (v = value()))
      expect = std::strtoull(v, nullptr, 10);
    else if ((a == "--tls-ca" || a == "--tls-cert" || a == "--tls-key") && (v = value()))
      (a == "--tls-ca"     ? o.client.tls_ca
       : a == "--tls-cert" ? o.client.tls_cert
                           : o.client.tls_key) = v;
    else
      return Fail("unknown or incomplete option '" + a + "'\n" + kClusterUsage);
  }
  o.node_timeout_ms = 1000;
  auto pool = PoolClient::Create(o);
  if (!pool.ok()) return Fail(pool.status().ToString());
  PoolStatus st = (*pool)->GetStatus(/*query_nodes=*/true);
  int unreachable = 0;
  for (const auto& m : st.members) unreachable += !m.reachable;
  // Anything an operator's script must not read as healthy: exit 1.
  bool unhealthy = unreachable || !st.membership_ok || st.members.size() < expect;
  if (st.members.size() < expect) {
    std::fprintf(stderr, "kvpool cluster status: %zu members listed, %zu expected\n",
                 st.members.size(), expect);
  }
  if (json) {
    std::printf("{\"membership_ok\": %s, \"membership_error\": \"%s\", \"members\": [",
                st.membership_ok ? "true" : "false", JsonEscape(st.membership_error).c_str());
    for (size_t i = 0; i < st.members.size(); ++i) {
      const auto& m = st.members[i];
      std::printf(
          "%s\n  {\"id\": \"%s\", \"address\": \"%s\", \"zone\": \"%s\", \"rack\": \"%s\", "
          "\"node\": \"%s\", \"capacity\": %llu, \"reachable\": %s, \"used_bytes\": %llu, "
          "\"blocks\": %llu, \"gets\": %llu, \"hits\": %llu}",
          i ? "," : "", JsonEscape(m.id).c_str(), JsonEscape(m.address).c_str(),
          JsonEscape(m.zone).c_str(), JsonEscape(m.rack).c_str(), JsonEscape(m.node).c_str(),
          (unsigned long long)m.capacity, m.reachable ? "true" : "false",
          (unsigned long long)m.used_bytes, (unsigned long long)m.blocks,
          (unsigned long long)m.gets, (unsigned long long)m.hits);
    }
    std::printf("\n]}\n");
    return unhealthy ? 1 : 0;
  }
  std::printf("membership: %s%s, %zu members\n",
              o.etcd.empty() ? "static list" : ("etcd " + o.etcd).c_str(),
              st.membership_ok
                  ? ""
                  : (" (UNREACHABLE: " + st.membership_error + "; last known list)").c_str(),
              st.members.size());
  std::printf("%-22s %-22s %-8s %-8s %-10s %10s %10s %10s %10s %8s %s\n", "id", "address", "zone",
              "rack", "node", "capacity", "used", "blocks", "gets", "hit rate", "state");
  for (const auto& m : st.members) {
    char hit[16] = "-";
    if (m.stats_valid && m.gets)
      std::snprintf(hit, sizeof(hit), "%.3f", double(m.hits) / double(m.gets));
    std::printf("%-22s %-22s %-8s %-8s %-10s %10s %10s %10llu %10llu %8s %s\n", m.id.c_str(),
                m.address.c_str(), m.zone.empty() ? "-" : m.zone.c_str(),
                m.rack.empty() ? "-" : m.rack.c_str(), m.node.empty() ? "-" : m.node.c_str(),
                FormatSize(m.capacity).c_str(),
                m.stats_valid ? FormatSize(m.used_bytes).c_str() : "-",
                (unsigned long long)m.blocks, (unsigned long long)m.gets, hit,
                m.reachable ? "up" : "UNREACHABLE");
  }
  return unhealthy ? 1 : 0;
}

int PlacementBench(int argc, char** argv) {
  size_t keys = 1'000'000, members = 8;
  std::string json;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--keys" && i + 1 < argc)
      keys = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--members" && i + 1 < argc)
      members = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--json" && i + 1 < argc)
      json = argv[++i];
    else
      return Fail("unknown or incomplete option '" + a + "'\n" + kClusterUsage);
  }
  if (keys < 1000 || keys > 100'000'000 || members < 2 || members > 1000) {
    return Fail("--keys 1000..1e8, --members 2..1000");
  }
  // Weights 1, 2, 3, 4, 1, 2, 3, 4, ... TiB: unequal, as mixed node sizes are.
  std::vector<cluster::Member> ms;
  for (size_t i = 0; i < members; ++i) {
    cluster::Member m;
    m.id = "node-" + std::to_string(i);
    m.address = "10.0.0." + std::to_string(i + 1) + ":7400";
    m.capacity = (1 + i % 4) * (1ull << 40);
    ms.push_back(m);
  }
  std::vector<BlockKey> ks(keys);
  std::mt19937_64 rng(42);
  for (auto& k : ks) k = {rng(), rng()};
  auto owners = [&](const std::vector<cluster::Member>& list) {
    cluster::Placement p(list);
    std::vector<std::string> out(keys);
    for (size_t i = 0; i < keys; ++i) out[i] = list[p.Owner(ks[i])].id;
    return out;
  };
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> base = owners(ms);
  double ns_per_key =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
      keys;
  double total_w = 0;
  for (const auto& m : ms) total_w += double(m.capacity);
  std::printf("placement: %zu keys over %zu members (weights 1-4 TiB), weighted rendezvous\n", keys,
              members);
  std::printf("%-10s %8s %10s %10s %10s\n", "member", "weight", "expected", "share", "deviation");
  double worst = 0;
  std::string rows;
  for (const auto& m : ms) {
    size_t n = std::count(base.begin(), base.end(), m.id);
    double expect = double(m.capacity) / total_w, share = double(n) / double(keys);
    double dev = share / expect - 1;
    worst = std::max(worst, std::fabs(dev));
    std::printf("%-10s %6.0fTi %10.4f %10.4f %+9.2f%%\n", m.id.c_str(),
                double(m.capacity) / (1ull << 40), expect, share, 100 * dev);
    rows += (rows.empty() ? "" : ", ") + std::string("{\"id\": \"") + m.id +
            "\", \"expected\": " + std::to_string(expect) +
            ", \"share\": " + std::to_string(share) + "}";
  }
  // Join: a new member of average weight; leave: member 0 goes.
  std::vector<cluster::Member> joined = ms;
  cluster::Member extra;
  extra.id = "node-new";
  extra.address = "10.0.1.1:7400";
  extra.capacity = (1ull << 40) * 5 / 2;
  joined.push_back(extra);
  std::vector<cluster::Member> left(ms.begin() + 1, ms.end());
  auto moved = [&](const std::vector<std::string>& after) {
    size_t n = 0;
    for (size_t i = 0; i < keys; ++i) n += after[i] != base[i];
    return double(n) / double(keys);
  };
  std::vector<std::string> after_join = owners(joined), after_leave = owners(left);
  double join_moved = moved(after_join), leave_moved = moved(after_leave);
  double join_min = double(extra.capacity) / (total_w + double(extra.capacity));
  double leave_min = double(ms[0].capacity) / total_w;
  size_t wrong_join = 0, wrong_leave = 0;  // moves that were not forced by the change
  for (size_t i = 0; i < keys; ++i) {
    if (after_join[i] != base[i] && after_join[i] != extra.id) ++wrong_join;
    if (after_leave[i] != base[i] && base[i] != ms[0].id) ++wrong_leave;
  }
  double bound = 1.0 / double(members) + 0.02;
  std::printf("\nworst share deviation from weight: %.2f%% (goal <= 5%%: %s)\n", 100 * worst,
              worst <= 0.05 ? "met" : "NOT met");
  std::printf(
      "join of a %.1f TiB member: %.2f%% of keys moved (its weight share %.2f%%; "
      "goal <= 1/N + 2%% = %.2f%%: %s); moves between old members: %zu\n",
      double(extra.capacity) / (1ull << 40), 100 * join_moved, 100 * join_min, 100 * bound,
      join_moved <= bound ? "met" : "NOT met", wrong_join);
  std::printf(
      "leave of %s: %.2f%% of keys moved (its share %.2f%%; goal <= %.2f%%: %s); other moves: "
      "%zu\n",
      ms[0].id.c_str(), 100 * leave_moved, 100 * leave_min, 100 * bound,
      leave_moved <= bound ? "met" : "NOT met", wrong_leave);
  std::printf("owner computation: %.0f ns per key over %zu members\n", ns_per_key, members);
  if (!json.empty()) {
    std::ofstream f(json);
    f << "{\"keys\": " << keys << ", \"members\": " << members << ", \"shares\": [" << rows
      << "], \"worst_deviation\": " << worst << ", \"join_moved\": " << join_moved
      << ", \"leave_moved\": " << leave_moved << ", \"bound\": " << bound
      << ", \"moves_between_others\": " << wrong_join + wrong_leave
      << ", \"ns_per_key\": " << ns_per_key << "}\n";
  }
  return worst <= 0.05 && join_moved <= bound && leave_moved <= bound &&
                 wrong_join + wrong_leave == 0
             ? 0
             : 1;
}

}  // namespace

int ClusterCommand(int argc, char** argv) {
  std::string sub = argc > 0 ? argv[0] : "";
  if (sub == "status") return Status(argc - 1, argv + 1);
  if (sub == "placement") return PlacementBench(argc - 1, argv + 1);
  if (sub == "drain") return DrainCommand(argc - 1, argv + 1);
  std::fputs(kClusterUsage, sub == "--help" || sub == "-h" ? stdout : stderr);
  return sub == "--help" || sub == "-h" ? 0 : 2;
}

}  // namespace kvpool::tools
