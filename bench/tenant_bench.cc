// A noisy neighbour against a quiet tenant (issue 20, tenant quotas), embedded store.
//
// The quiet tenant reads its working set (a share of DRAM, keys drawn uniformly; a miss is
// put back, as an engine recomputes and stores a prefix); the noisy one streams blocks it
// never reads again, `--noise` puts per quiet read. Three configurations over the same
// sequence: no quotas, the noisy tenant capped at half of DRAM, and the quiet tenant alone
// (its ceiling). Configurations alternate in order across rounds. The table gives the quiet
// tenant's hit ratio (second half of each run), what each tenant held at the end, and the
// noisy tenant's put latency (what the per-tenant eviction costs a put at its quota).
//
// usage: kvpool_tenant_bench [--rounds N] [--ops N] [--noise R] [--json PATH]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "kvpool/store.h"

namespace {

using kvpool::BlockKey;
using kvpool::kMiB;

constexpr size_t kValue = 16 << 10;
constexpr uint64_t kDram = 64 * kMiB;
constexpr uint16_t kQuiet = 1, kNoisy = 2;

struct Run {
  std::string config;
  int round = 0;
  double quiet_hit_ratio = 0;
  double quiet_mib = 0, noisy_mib = 0;
  double noisy_put_p50_us = 0, noisy_put_p99_us = 0;
};

double Pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

Run RunOnce(const std::string& config, int round, uint64_t ops, unsigned noise) {
  kvpool::StoreOptions o;
  o.dram_bytes = kDram;
  o.huge_pages = false;
  o.background_mover = false;
  o.max_value_bytes = 1 * kMiB;
  auto opened = kvpool::Store::Open(o);
  if (!opened.ok()) {
    std::fprintf(stderr, "open: %s\n", opened.status().ToString().c_str());
    std::exit(1);
  }
  auto store = std::move(opened).value();
  if (config == "noisy capped at 1/2") store->SetQuota(kNoisy, {.dram_bytes = kDram / 2});
  const uint64_t quiet_set = kDram * 4 / 10 / kValue;  // 40% of DRAM
  std::vector<std::byte> value(kValue, std::byte{1}), buf(kValue);
  std::mt19937_64 rng(round * 7919 + 17);
  uint64_t noisy_next = 0, hits = 0, reads = 0;
  std::vector<double> put_us;
  put_us.reserve(ops * noise / 2 + 1);
  kvpool::PutOptions quiet, noisy;
  quiet.tenant = kQuiet;
  noisy.tenant = kNoisy;
  for (uint64_t i = 0; i < ops; ++i) {
    BlockKey qk{1, 1 + rng() % quiet_set};
    bool hit = store->Get(qk, buf).ok();
    if (!hit) (void)store->Put(qk, value, quiet);
    if (i >= ops / 2) {
      ++reads;
      hits += hit;
    }
    if (config == "quiet alone") continue;
    for (unsigned r = 0; r < noise; ++r) {
      uint64_t t0 = kvpool::NowNanos();
      (void)store->Put(BlockKey{2, ++noisy_next}, value, noisy);
      if (i >= ops / 2) put_us.push_back(static_cast<double>(kvpool::NowNanos() - t0) / 1e3);
    }
  }
  Run r{config, round};
  r.quiet_hit_ratio = reads ? static_cast<double>(hits) / static_cast<double>(reads) : 0;
  r.quiet_mib = static_cast<double>(store->Usage(kQuiet).dram_bytes) / kMiB;
  r.noisy_mib = static_cast<double>(store->Usage(kNoisy).dram_bytes) / kMiB;
  r.noisy_put_p50_us = Pct(put_us, 0.5);
  r.noisy_put_p99_us = Pct(put_us, 0.99);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  uint64_t ops = 200000;
  unsigned noise = 4;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--rounds") {
      rounds = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--ops") {
      ops = std::max<uint64_t>(1000, std::strtoull(next().c_str(), nullptr, 10));
    } else if (a == "--noise") {
      noise = static_cast<unsigned>(std::max(1, std::atoi(next().c_str())));
    } else if (a == "--json") {
      json = next();
    } else {
      std::fprintf(stderr,
                   "usage: kvpool_tenant_bench [--rounds N] [--ops N] [--noise R] [--json PATH]\n"
                   "  a quiet tenant's hit ratio beside a streaming one: no quotas, the noisy\n"
                   "  one capped at half of DRAM, and the quiet one alone\n");
      return a == "--help" ? 0 : 2;
    }
  }
  std::vector<std::string> configs = {"no quotas", "noisy capped at 1/2", "quiet alone"};
  std::vector<Run> runs;
  std::printf("%-22s %5s %10s %9s %9s %10s %10s\n", "config", "round", "quiet hit", "quiet MiB",
              "noisy MiB", "put p50us", "put p99us");
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::string> order = configs;
    if (round % 2) std::reverse(order.begin(), order.end());
    for (const std::string& c : order) {
      Run r = RunOnce(c, round, ops, noise);
      std::printf("%-22s %5d %10.3f %9.1f %9.1f %10.2f %10.2f\n", c.c_str(), round,
                  r.quiet_hit_ratio, r.quiet_mib, r.noisy_mib, r.noisy_put_p50_us,
                  r.noisy_put_p99_us);
      std::fflush(stdout);
      runs.push_back(r);
    }
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << "{\"bench\":\"tenant\",\"dram_mib\":" << kDram / kMiB << ",\"value_bytes\":" << kValue
      << ",\"noise\":" << noise << ",\"ops\":" << ops << ",\"runs\":[";
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& r = runs[i];
      f << (i ? "," : "") << "{\"config\":\"" << r.config << "\",\"round\":" << r.round
        << ",\"quiet_hit_ratio\":" << r.quiet_hit_ratio << ",\"quiet_mib\":" << r.quiet_mib
        << ",\"noisy_mib\":" << r.noisy_mib << ",\"noisy_put_p50_us\":" << r.noisy_put_p50_us
        << ",\"noisy_put_p99_us\":" << r.noisy_put_p99_us << "}";
    }
    f << "]}\n";
  }
  return 0;
}
