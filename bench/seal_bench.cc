// What encryption at rest costs a read (issue 20): one kvpoold with two tenants, "sealed"
// (AES-256-GCM, server/sealer.h) and "plain", each with the same 64 KiB blocks; a DRAM tier
// far smaller than the data, so gets are mostly flash reads (and a DRAM phase of the most
// recent blocks). The tenants take turns (sealed first, then plain first, ...), several
// rounds; the table gives each round's items/s and latency, the ratio sealed/plain of the
// medians, and --json writes it all.
//
// usage: kvpool_seal_bench [--seconds S] [--rounds N] [--clients N] [--json PATH]
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "daemon.h"
#include "kvpool/client.h"

namespace {

using kvpool::BlockKey;
constexpr size_t kValue = 64 << 10;
constexpr uint64_t kBlocks = 1200;  // 75 MiB a tenant; the DRAM tier is 8 MiB

struct Round {
  std::string tenant, phase;
  double items_per_s = 0, p50_us = 0, p99_us = 0;
};

std::unique_ptr<kvpool::Client> Connect(const std::string& address, const std::string& ns) {
  kvpool::ClientOptions o;
  o.address = address;
  o.ns = ns;
  o.token = ns + "-token";
  o.request_timeout_ms = 20000;
  auto c = kvpool::Client::Create(o);
  return c.ok() ? std::move(c).value() : nullptr;
}

Round Run(const std::string& address, const std::string& tenant, const std::string& phase,
          uint64_t first, uint64_t count, unsigned clients, double seconds) {
  std::vector<std::vector<double>> lat(clients);
  std::atomic<uint64_t> items{0};
  std::vector<std::thread> threads;
  uint64_t t0 = kvpool::NowNanos(), until = t0 + static_cast<uint64_t>(seconds * 1e9);
  for (unsigned c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto client = Connect(address, tenant);
      std::mt19937_64 rng(c * 7919 + 1);
      std::vector<std::byte> buf(kValue);
      while (kvpool::NowNanos() < until) {
        uint64_t k = first + rng() % count;
        uint64_t s = kvpool::NowNanos();
        auto n = client->Get(BlockKey{9, k}, buf);
        lat[c].push_back(double(kvpool::NowNanos() - s) / 1000.0);
        if (n.ok()) items.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<double> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Round r{tenant, phase};
  r.items_per_s = double(items.load()) / (double(kvpool::NowNanos() - t0) / 1e9);
  if (!all.empty()) {
    r.p50_us = all[all.size() / 2];
    r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.5;
  int rounds = 3;
  unsigned clients = 4;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--seconds") {
      seconds = std::stod(value());
    } else if (a == "--rounds") {
      rounds = std::stoi(value());
    } else if (a == "--clients") {
      clients = static_cast<unsigned>(std::stoi(value()));
    } else if (a == "--json") {
      json = value();
    } else {
      std::fprintf(stderr,
                   "usage: kvpool_seal_bench [--seconds S] [--rounds N] [--clients N] "
                   "[--json PATH]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  std::string dir = kvpool::testing::MakeTempDir("kvpool-seal-bench");
  std::string keys = dir + "/sealed.keys", config = dir + "/kvpoold.toml";
  std::ofstream(keys) << "1 6b7670c0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c\n";
  ::chmod(keys.c_str(), 0600);
  std::ofstream(config) << "[store]\nflash_writes_per_day = 0\n\n"
                        << "[[tenant]]\nname = \"sealed\"\ntoken = \"sealed-token\"\n"
                        << "namespaces = [\"sealed\"]\nencryption_key_file = \"" << keys
                        << "\"\n\n[[tenant]]\nname = \"plain\"\ntoken = \"plain-token\"\n"
                        << "namespaces = [\"plain\"]\n";
  kvpool::testing::Daemon d(dir);
  if (!d.Start({"--config", config, "--dram", "8MiB", "--flash", "512MiB"})) {
    std::fprintf(stderr, "kvpoold did not start: %s\n", d.output().c_str());
    return 1;
  }
  for (const char* tenant : {"sealed", "plain"}) {
    auto c = Connect(d.tcp_address(), tenant);
    std::vector<std::byte> v(kValue);
    for (uint64_t k = 0; k < kBlocks; ++k) {
      for (size_t i = 0; i < kValue; i += 64) v[i] = static_cast<std::byte>(k + i);
      if (!c || !c->Put(BlockKey{9, k}, v).ok()) {
        std::fprintf(stderr, "preload of %s failed at %llu\n", tenant, (unsigned long long)k);
        return 1;
      }
    }
  }
  std::printf("64 KiB gets, %u clients, %.1f s a round; DRAM 8 MiB, %llu blocks a tenant\n",
              clients, seconds, (unsigned long long)kBlocks);
  std::printf("%-7s %-6s %10s %9s %9s\n", "tenant", "phase", "items/s", "p50 us", "p99 us");
  std::vector<Round> all;
  // flash: the oldest blocks (long pushed out of DRAM); dram: the 40 newest.
  for (const char* phase : {"flash", "dram"}) {
    uint64_t first = std::string(phase) == "flash" ? 0 : kBlocks - 40;
    uint64_t count = std::string(phase) == "flash" ? kBlocks - 200 : 40;
    for (int r = 0; r < rounds; ++r) {
      std::vector<std::string> order = {"sealed", "plain"};
      if (r % 2) std::swap(order[0], order[1]);
      for (const std::string& t : order) {
        all.push_back(Run(d.tcp_address(), t, phase, first, count, clients, seconds));
        const Round& x = all.back();
        std::printf("%-7s %-6s %10.0f %9.1f %9.1f\n", x.tenant.c_str(), x.phase.c_str(),
                    x.items_per_s, x.p50_us, x.p99_us);
      }
    }
  }
  std::string out = "{\"rounds\": [";
  std::printf("\n%-36s %8s %8s\n", "ratio (medians of this run)", "value", "goal");
  std::string ratios;
  for (const char* phase : {"flash", "dram"}) {
    std::vector<double> s, p;
    for (const Round& x : all) {
      if (x.phase != phase) continue;
      (x.tenant == "sealed" ? s : p).push_back(x.items_per_s);
    }
    double ratio = Median(p) > 0 ? Median(s) / Median(p) : 0;
    bool flash = std::string(phase) == "flash";
    std::printf("sealed / plain, 64K %s gets items/s %8.2f %8s\n", phase, ratio,
                flash ? ">=0.80" : "-");
    ratios += std::string(ratios.empty() ? "" : ", ") + "\"sealed/plain " + phase +
              "\": " + std::to_string(ratio);
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const Round& x = all[i];
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s{\"tenant\": \"%s\", \"phase\": \"%s\", \"items_per_s\": %.1f, "
                  "\"p50_us\": %.1f, \"p99_us\": %.1f}",
                  i ? ", " : "", x.tenant.c_str(), x.phase.c_str(), x.items_per_s, x.p50_us,
                  x.p99_us);
    out += buf;
  }
  out += "], \"ratios\": {" + ratios + "}}\n";
  if (!json.empty()) std::ofstream(json) << out;
  d.Stop();
  std::system(("rm -rf '" + dir + "'").c_str());
  return 0;
}
