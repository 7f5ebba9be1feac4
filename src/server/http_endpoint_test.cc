// A node's HTTP port: the Prometheus exposition and the JSON of a store's counters, and
// the endpoint against well-behaved and hostile clients (raw sockets on loopback).
#include "server/http_endpoint.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "net/socket.h"
#include "server/metrics.h"
#include "server/status_json.h"
#include "server/status_page.h"
#include "store_testing.h"

namespace kvpool::server {
namespace {

// name{labels} -> value, from the text format; also checks every sample has a TYPE.
std::map<std::string, double> Parse(const std::string& text) {
  std::map<std::string, double> out;
  std::map<std::string, std::string> types;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      types[name] = type;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    std::string key = line.substr(0, sp);
    std::string base = key.substr(0, key.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string s(suffix);
      if (!types.count(base) && base.size() > s.size() &&
          base.compare(base.size() - s.size(), s.size(), s) == 0) {
        base = base.substr(0, base.size() - s.size());
      }
    }
    EXPECT_TRUE(types.count(base)) << "no TYPE for " << key;
    out[key] = std::stod(line.substr(sp + 1));
  }
  return out;
}

std::string Http(uint16_t port, const std::string& request) {
  auto fd = net::Connect(*net::ParseAddress("127.0.0.1:" + std::to_string(port)), 2000);
  if (!fd.ok()) return "connect failed";
  send(fd->get(), request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd->get(), buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

NodeStats Sample(Store& store) {
  std::vector<std::byte> out(4096);
  for (int i = 0; i < 30; ++i) {
    EXPECT_TRUE(
        store.Put(testing::TestKey(i), testing::TestValue(testing::TestKey(i), 0, 4096)).ok());
  }
  for (int i = 0; i < 40; ++i) (void)store.Get(testing::TestKey(i), out);  // 10 misses
  NodeStats n;
  n.store = store.GetStats();
  n.server.connections_open = 3;
  n.server.bytes_in = 1234;
  n.tenants = {TenantSnapshot{"a", 2, 10, 8, 5, 4, 100, 200},
               TenantSnapshot{"b \"x\"", 1, 1, 0, 0, 1, 7, 0}};
  n.in_pool = true;
  n.member_id = "n1";
  n.members = {{"n1", "10.0.0.1:7400", 1 << 30}, {"n2", "10.0.0.2:7400", 2u << 30}};
  n.uptime_seconds = 12.5;
  n.unix_ms = 1'700'000'000'000;
  return n;
}

TEST(Metrics, RenderMatchesTheStoresCounters) {
  auto store = testing::OpenStore(testing::SmallOptions(), nullptr);
  auto m = Parse(RenderMetrics(Sample(*store)));
  EXPECT_EQ(m["kvpool_puts_total"], 30);
  EXPECT_EQ(m["kvpool_gets_total"], 40);
  EXPECT_EQ(m["kvpool_misses_total"], 10);
  EXPECT_EQ(m["kvpool_hits_total{tier=\"dram\"}"], 30);
  EXPECT_EQ(m["kvpool_blocks{tier=\"dram\"}"], 30);
  EXPECT_EQ(m["kvpool_tier_in_bytes_total{tier=\"dram\"}"], 30 * 4096);
  EXPECT_EQ(m["kvpool_tier_out_bytes_total{tier=\"dram\"}"], 30 * 4096);
  EXPECT_EQ(m["kvpool_connections"], 3);
  EXPECT_EQ(m["kvpool_network_bytes_total{direction=\"in\"}"], 1234);
  // Histogram: cumulative buckets, +Inf equals the count.
  EXPECT_EQ(m["kvpool_get_latency_seconds_count{tier=\"dram\"}"], 30);
  EXPECT_EQ(m["kvpool_get_latency_seconds_bucket{tier=\"dram\",le=\"+Inf\"}"], 30);
  EXPECT_LE(m["kvpool_get_latency_seconds_bucket{tier=\"dram\",le=\"1e-06\"}"],
            m["kvpool_get_latency_seconds_bucket{tier=\"dram\",le=\"0.001\"}"]);
  EXPECT_EQ(m["kvpool_get_latency_seconds_bucket{tier=\"dram\",le=\"1\"}"], 30);
  EXPECT_GT(m["kvpool_put_latency_seconds_sum"], 0);
  // Per tenant (label values escaped), pool members as this node sees them.
  EXPECT_EQ(m["kvpool_tenant_hits_total{tenant=\"a\"}"], 5);
  EXPECT_EQ(m["kvpool_tenant_gets_total{tenant=\"a\"}"], 8);
  EXPECT_EQ(m["kvpool_tenant_sent_bytes_total{tenant=\"a\"}"], 200);
  EXPECT_EQ(m["kvpool_tenant_connections{tenant=\"b \\\"x\\\"\"}"], 1);
  EXPECT_EQ(m["kvpool_pool_members"], 2);
  EXPECT_EQ(m["kvpool_pool_member_capacity_bytes{member=\"n2\",address=\"10.0.0.2:7400\"}"],
            double(2u << 30));
  EXPECT_EQ(m["kvpool_uptime_seconds"], 12.5);
}

TEST(Metrics, JsonCarriesWhatThePageDraws) {
  auto store = testing::OpenStore(testing::SmallOptions(), nullptr);
  auto j = nlohmann::json::parse(RenderStatusJson(Sample(*store)));
  EXPECT_EQ(j["store"]["gets"], 40);
  EXPECT_EQ(j["store"]["misses"], 10);
  EXPECT_EQ(j["store"]["dram"]["hits"], 30);
  EXPECT_EQ(j["store"]["dram"]["blocks"], 30);
  EXPECT_EQ(j["server"]["connections_open"], 3);
  EXPECT_EQ(j["latency"]["get_dram"]["count"], 30);
  ASSERT_EQ(j["latency"]["get_dram"]["le"].size(), kLatencyBounds);
  EXPECT_EQ(j["latency"]["bounds_us"].size(), kLatencyBounds);
  EXPECT_EQ(j["latency"]["get_dram"]["le"][kLatencyBounds - 1], 30);
  EXPECT_EQ(j["tenants"][0]["name"], "a");
  EXPECT_EQ(j["tenants"][1]["name"], "b \"x\"");
  EXPECT_EQ(j["pool"]["members"][1]["id"], "n2");
  EXPECT_EQ(j["unix_ms"], 1'700'000'000'000);
  // The page is whole and loads nothing from elsewhere.
  const std::string& page = StatusPage();
  EXPECT_EQ(page.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(page.find("/api/stats"), std::string::npos);
  EXPECT_NE(page.find("</html>"), std::string::npos);
  EXPECT_EQ(page.find("src=\"http"), std::string::npos);
  EXPECT_EQ(page.find("href=\"http"), std::string::npos);
}

TEST(Metrics, EndpointServesAndSurvivesHostileClients) {
  int renders = 0;
  auto ep =
      HttpEndpoint::Start("127.0.0.1:0", {{"/metrics", "text/plain; version=0.0.4",
                                           [&] {
                                             ++renders;
                                             return std::string("# TYPE x counter\nx 1\n");
                                           }},
                                          {"/", "text/html", [] { return std::string("<p>"); }}});
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  uint16_t port = (*ep)->port();
  std::string r = Http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(r.find("\r\n\r\n# TYPE x counter\nx 1\n"), std::string::npos);
  r = Http(port, "GET /?refresh=1 HTTP/1.1\r\n\r\n");
  EXPECT_NE(r.find("text/html\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\r\n\r\n<p>"), std::string::npos);
  r = Http(port, "HEAD /metrics HTTP/1.1\r\n\r\n");  // headers only, the length of the body
  EXPECT_NE(r.find("Content-Length: 21\r\n"), std::string::npos) << r;
  EXPECT_EQ(r.substr(r.size() - 4), "\r\n\r\n");
  EXPECT_EQ(Http(port, "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Http(port, "GET /metricsx HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Http(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(Http(port, std::string(20000, 'A')).rfind("HTTP/1.1 431", 0), 0u);
  // A client that connects and says nothing holds the endpoint at most 2 s.
  auto idle = net::Connect(*net::ParseAddress("127.0.0.1:" + std::to_string(port)), 2000);
  ASSERT_TRUE(idle.ok());
  auto t0 = std::chrono::steady_clock::now();
  r = Http(port, "GET /metrics HTTP/1.0\r\n\r\n");
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK", 0), 0u);
  EXPECT_LT(waited, 3.5);
  EXPECT_EQ((*ep)->served(0), 3u);  // two GETs and the HEAD
  EXPECT_EQ((*ep)->served(1), 1u);
  EXPECT_EQ(renders, 3);
  EXPECT_FALSE(HttpEndpoint::Start("unix:/tmp/x", {}).ok());
  EXPECT_FALSE(HttpEndpoint::Start("nonsense", {}).ok());
}

}  // namespace
}  // namespace kvpool::server
