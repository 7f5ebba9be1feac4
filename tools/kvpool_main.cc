// kvpool: the command-line tool. A thin shell: parse, wire, print.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "client_cli.h"
#include "cluster_cli.h"
#include "common/units.h"
#include "net_bench.h"
#include "prestage_bench.h"
#include "report.h"
#include "top.h"
#include "workload/gen_trace.h"
#include "workload/replay.h"
#include "workload/trace.h"

namespace {

constexpr char kUsage[] = R"(kvpool - a context memory store for LLM inference (KV cache blocks)

usage: kvpool <command> [options]

commands:
  replay    replay a request trace against an embedded store (DRAM + flash tiers) and,
            for comparison, a plain LRU over the same blocks and the offline ceiling
  gen-trace write a seeded synthetic trace (families below) in the same format
  put, get, del, exists, stat, ping
            one operation against a running kvpoold (see below)
  bench     kvpoold beside redis-server, memcached, file-per-block+fsync, TCP echo and
            memcpy, in one run (kvpool bench --help)
  cluster   the pod pool: status of its members, placement benchmark
            (kvpool cluster --help)
  top       live figures of one kvpoold or the whole pod (kvpool top --help)
  help      this text

kvpool replay [options]
  --trace PATH          trace (Mooncake JSONL: hash_ids of 512-token blocks)
                        default: data/conversation_trace.jsonl
  --block-bytes N       bytes per block, with K/M suffixes (default 32K)
  --capacity F          total capacity as a fraction of the trace's distinct blocks
                        (default 0.05)
  --dram-share F        share of the capacity held in DRAM, rest on flash (default 0.5)
  --flash PATH          flash tier file, created and preallocated (default
                        kvpool-data/replay-flash.img); "none" for DRAM only
  --admission MODE      budget (default: blocks leaving DRAM go to flash within the
                        write budget, unread ones refused first when it runs low),
                        all (always) or probation (unread blocks never written)
  --flash-dwpd F        write budget of the budget admission, drive writes per day of
                        the trace's own time (default 3; 0: unlimited)
  --probation F         share of DRAM for the probation queue to start with (default
                        0.02: new blocks pass through DRAM to flash, which acts as
                        probation); with flash and --reuse-bonus auto the store learns
                        it (2, 10, 25 or 50%) and whether blocks leaving it unused are
                        written to a full flash
  --reuse-bonus F       DRAM eviction: how many store-fulls (DRAM + flash) of newer
                        blocks each past use of a block outlives; auto (default):
                        learnt while replaying from simulated candidates; 0 = LRU.
                        With flash, auto also learns whether a flash hit is copied
                        into DRAM or, far from the log's end, read where it lies
  --requests N          replay only the first N requests (default: all)
  --json PATH           also write the results as JSON
  --report DIR          replay at each capacity of --report-capacities and draw
                        DIR/hit_ratio.png (kvpool, LRU, offline against capacity) and
                        DIR/latency_cdf.png (+ .svg), from DIR/replay.json, with
                        DIR/plot.py (python3-matplotlib; $KVPOOL_PYTHON picks python)
  --report-capacities L capacities for --report (default 0.02,0.05,0.1,0.2)
  --quiet               no progress bar
  --stats               also print the store's own counters at the end (demotions,
                        compaction, reinsertion, regions evicted, latencies)

kvpool gen-trace [options]      (workloads unlike the conversation trace)
  --family F            chat (multi-turn sessions), shared (popular system prompts and
                        few-shot headers), agent (tool loops, growing context), rag
                        (one-off documents: scan-heavy), zipf (bursty popular
                        prefixes), phase (chat, then rag); default chat
  --seed N              random seed (default 1): the same seed, the same trace
  --requests N          requests (default 5000)
  --continue P          chat/agent: chance a session takes another turn (default 0.7)
  --out PATH            write here (default: standard output)
)";

bool ParseSize(const char* s, uint64_t* out) {
  auto v = kvpool::ParseSize(s);
  if (v.ok()) *out = *v;
  return v.ok();
}

bool ParseFraction(const char* s, double* out) {
  char* end;
  *out = std::strtod(s, &end);
  return end != s && !*end && *out > 0 && *out <= 1;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kvpool: %s\n(kvpool --help for usage)\n", msg.c_str());
  return 2;
}

// `replay --report DIR`: one replay per capacity, a summary table, then the figures.
int ReplayReport(const std::vector<kvpool::workload::TraceRequest>& trace,
                 kvpool::workload::ReplayOptions o, const std::string& trace_path,
                 const std::string& dir, const std::vector<double>& capacities,
                 const kvpool::workload::ReplayProgress& progress) {
  std::string points;
  uint64_t wrong = 0;
  std::printf("%-10s %10s %10s %10s %10s %10s\n", "capacity", "kvpool", "DRAM", "flash",
              "plain LRU", "offline");
  for (double f : capacities) {
    o.capacity_fraction = f;
    auto res = kvpool::workload::RunReplay(trace, o, progress);
    if (!res.ok()) return Fail(res.status().ToString());
    double n = res->blocks_requested ? static_cast<double>(res->blocks_requested) : 1.0;
    std::printf("%9.1f%% %10.4f %10.4f %10.4f %10.4f %10.4f\n", 100 * f, res->prefix_hit_ratio(),
                static_cast<double>(res->dram_hits) / n, static_cast<double>(res->flash_hits) / n,
                res->lru_prefix_hit_ratio(), static_cast<double>(res->offline_prefix_hits) / n);
    std::string one = kvpool::workload::ReplayJson(*res, o);
    while (!one.empty() && one.back() == '\n') one.pop_back();
    points += (points.empty() ? "" : ",\n  ") + one;
    wrong += res->wrong_data;
  }
  std::string bounds;
  for (double b : kvpool::kLatencyBoundsUs)
    bounds += (bounds.empty() ? "" : ",") + std::to_string(b);
  std::string escaped;
  for (char c : trace_path)
    escaped += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  std::string json = "{\"kind\":\"replay\",\"trace\":\"" + escaped + "\",\"latency_bounds_us\":[" +
                     bounds + "],\n \"points\":[\n  " + points + "]}\n";
  auto files = kvpool::bench::WriteReport(dir, "replay", json);
  if (!files.ok()) return Fail(std::string(files.status().message()));
  std::printf("\nreport: %s/replay.json\n", dir.c_str());
  for (const std::string& f : *files) std::printf("figure: %s\n", f.c_str());
  return wrong == 0 ? 0 : 1;
}

int Replay(int argc, char** argv) {
  kvpool::workload::ReplayOptions o;
  std::string trace = "data/conversation_trace.jsonl", json, flash = "kvpool-data/replay-flash.img";
  std::string report;
  std::vector<double> report_capacities = {0.02, 0.05, 0.1, 0.2};
  uint64_t requests = 0;
  bool quiet = false, stats = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto need = [&](const char* name) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)name;
      return argv[++i];
    };
    const char* v = nullptr;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--stats") {
      stats = true;
    } else if (!(v = need(a.c_str()))) {
      return Fail("option " + a + " needs a value, or is unknown");
    } else if (a == "--trace") {
      trace = v;
    } else if (a == "--block-bytes") {
      if (!ParseSize(v, &o.block_bytes) || o.block_bytes < 8 || o.block_bytes % 8)
        return Fail("--block-bytes: a size that is a multiple of 8, like 32K");
    } else if (a == "--capacity") {
      if (!ParseFraction(v, &o.capacity_fraction)) return Fail("--capacity: a fraction in (0, 1]");
    } else if (a == "--dram-share") {
      if (!ParseFraction(v, &o.dram_share) || o.dram_share >= 1)
        return Fail("--dram-share: a fraction in (0, 1)");
    } else if (a == "--flash") {
      flash = v;
    } else if (a == "--admission") {
      if (std::string(v) == "budget")
        o.admission = kvpool::Admission::kBudget;
      else if (std::string(v) == "probation")
        o.admission = kvpool::Admission::kProbation;
      else if (std::string(v) == "all")
        o.admission = kvpool::Admission::kAll;
      else
        return Fail("--admission: budget, probation or all");
    } else if (a == "--flash-dwpd") {
      char* end = nullptr;
      o.flash_writes_per_day = std::strtod(v, &end);
      if (end == v || *end || !(o.flash_writes_per_day >= 0 && o.flash_writes_per_day <= 1000))
        return Fail("--flash-dwpd: a number in [0, 1000]");
    } else if (a == "--probation") {
      if (!ParseFraction(v, &o.probation_fraction) || o.probation_fraction > 0.9)
        return Fail("--probation: a fraction in (0, 0.9]");
    } else if (a == "--reuse-bonus") {
      char* end = nullptr;
      o.reuse_bonus = std::strtod(v, &end);
      if (std::string(v) == "auto")
        o.reuse_bonus = kvpool::StoreOptions::kReuseBonusAuto;
      else if (end == v || *end || !(o.reuse_bonus >= 0 && o.reuse_bonus <= 64))
        return Fail("--reuse-bonus: auto or a number in [0, 64]");
    } else if (a == "--requests") {
      if (!ParseSize(v, &requests)) return Fail("--requests: a count");
    } else if (a == "--json") {
      json = v;
    } else if (a == "--report") {
      report = v;
    } else if (a == "--report-capacities") {
      report_capacities.clear();
      std::stringstream list(v);
      for (std::string item; std::getline(list, item, ',');) {
        double f;
        if (!ParseFraction(item.c_str(), &f))
          return Fail("--report-capacities: fractions in (0, 1]");
        report_capacities.push_back(f);
      }
      if (report_capacities.empty()) return Fail("--report-capacities: at least one fraction");
    } else {
      return Fail("unknown option " + a);
    }
  }
  if (flash != "none") {
    std::string dir =
        flash.substr(0, flash.find_last_of('/') == std::string::npos ? 0 : flash.find_last_of('/'));
    if (!dir.empty()) mkdir(dir.c_str(), 0755);
    o.flash_path = flash;
  }
  auto loaded = kvpool::workload::LoadTrace(trace, requests, o.tokens_per_block);
  if (!loaded.ok()) return Fail(loaded.status().ToString());
  auto progress = [&](size_t done, size_t total, const kvpool::workload::ReplayResult& r) {
    if (quiet) return;
    int width = 40, filled = static_cast<int>(width * done / total);
    std::fprintf(stderr, "\r[%.*s%*s] %3zu%% %zu/%zu requests, hit ratio %.3f, %.1f s", filled,
                 "########################################", width - filled, "", done * 100 / total,
                 done, total, r.blocks_done ? double(r.prefix_hits) / double(r.blocks_done) : 0.0,
                 r.seconds);
    if (done == total) std::fputc('\n', stderr);
  };
  if (!report.empty()) return ReplayReport(*loaded, o, trace, report, report_capacities, progress);
  auto res = kvpool::workload::RunReplay(*loaded, o, progress);
  if (!res.ok()) return Fail(res.status().ToString());
  std::fputs(kvpool::workload::ReplayTable(*res, o).c_str(), stdout);
  if (stats) std::printf("\nstore counters:\n%s", res->stats.ToString().c_str());
  if (!json.empty()) {
    std::ofstream out(json);
    out << kvpool::workload::ReplayJson(*res, o);
    if (!out) return Fail("cannot write " + json);
  }
  return res->wrong_data == 0 ? 0 : 1;
}

int GenTrace(int argc, char** argv) {
  kvpool::workload::GenOptions o;
  std::string out_path;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return Fail("option " + a + " needs a value, or is unknown");
    const char* v = argv[++i];
    uint64_t n = 0;
    if (a == "--family") {
      o.family = v;
    } else if (a == "--seed") {
      if (!ParseSize(v, &n)) return Fail("--seed: a number");
      o.seed = n;
    } else if (a == "--requests") {
      if (!ParseSize(v, &n) || n == 0) return Fail("--requests: a count > 0");
      o.requests = n;
    } else if (a == "--continue") {
      char* end = nullptr;
      o.continue_p = std::strtod(v, &end);
      if (end == v || *end || !(o.continue_p >= 0 && o.continue_p < 1))
        return Fail("--continue: a probability in [0, 1)");
    } else if (a == "--out") {
      out_path = v;
    } else {
      return Fail("unknown option " + a);
    }
  }
  auto trace = kvpool::workload::GenerateTrace(o);
  if (!trace.ok()) return Fail(std::string(trace.status().message()));
  std::ofstream file;
  if (!out_path.empty()) {
    file.open(out_path);
    if (!file) return Fail("cannot write " + out_path);
  }
  std::ostream& out = out_path.empty() ? std::cout : file;
  for (const auto& r : *trace) out << kvpool::workload::TraceLine(r) << '\n';
  out.flush();
  if (!out)
    return Fail("writing " + (out_path.empty() ? std::string("stdout") : out_path) + " failed");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    std::fputs(kvpool::tools::kClientUsage, stdout);
    std::fputs(kvpool::bench::kPrestageUsage, stdout);
    return 0;
  }
  if (cmd == "replay") return Replay(argc - 2, argv + 2);
  if (cmd == "gen-trace") return GenTrace(argc - 2, argv + 2);
  if (cmd == "bench") return kvpool::bench::NetBench(argc - 2, argv + 2);
  if (cmd == "cluster") return kvpool::tools::ClusterCommand(argc - 2, argv + 2);
  if (cmd == "top") return kvpool::tools::TopCommand(argc - 2, argv + 2);
  if (cmd == "prestage-bench") return kvpool::bench::PrestageBench(argc - 2, argv + 2);
  if (cmd == "put" || cmd == "get" || cmd == "del" || cmd == "exists" || cmd == "stat" ||
      cmd == "ping" || cmd == "match-bench") {
    return kvpool::tools::ClientCommand(cmd, argc - 2, argv + 2);
  }
  return Fail("unknown command " + cmd);
}
