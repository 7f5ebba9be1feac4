// kvpool bench: kvpoold beside its peers and the physical limits, in one run.
#include "net_bench.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "bench_targets.h"
#include "common/clock.h"
#include "common/histogram.h"
#include "common/proc_stat.h"
#include "common/units.h"
#include "net/socket.h"
#include "report.h"

namespace kvpool::bench {
namespace {

constexpr char kUsage[] =
    R"(kvpool bench - kvpoold beside redis-server, memcached, a file-per-block directory
with fsync, a plain TCP echo (the loopback limit) and memcpy, in one run.

usage: kvpool bench [options]
  --targets LIST   comma-separated, from: kvpool (native TCP), kvpool-shm (same-host
                   Unix socket + shared memory), kvpool-tls (native TCP with TLS 1.3),
                   redis, memcached, fsync, echo (default: all but kvpool-tls); pool1, pool2, pool3: 1-3 kvpoold nodes
                   behind the pool client (static members, placement per key)
  --suite NAME     standard (default): the configurations behind the figures in
                   docs/PERFORMANCE.md; sweep: every size x clients x batch below
  --sizes LIST     value sizes for sweep (default 16K,64K,256K,1M,2M)
  --clients LIST   concurrent clients for sweep (default 1,8,64)
  --batch LIST     items per request for sweep (default 1,16,64)
  --seconds S      time per configuration (default 1.0)
  --work-dir DIR   scratch directory (default kvpool-data/bench)
  --busy-poll-us N kvpool clients poll this long before sleeping on a reply
                   (ClientOptions::busy_poll_us; default 0)
  --kvpoold-args S extra kvpoold flags, space-separated (e.g. "--reactors 1";
                   kvpoold's reactors run at nice -10 unless "--reactor-nice 0")
  --peer-nice N    run every thread of redis-server and memcached at nice N (e.g. -10,
                   the priority kvpoold gives its reactors; default 0: as started)
  --json PATH      also write every row and the ratios as JSON
  --report DIR     write DIR/bench.json and draw DIR/throughput.png (items/s of every
                   target per workload) and DIR/latency_cdf.png (+ .svg) with
                   DIR/plot.py (python3-matplotlib; $KVPOOL_PYTHON picks python)
  --quick          a few milliseconds per configuration (smoke test)
Servers are started on loopback by the benchmark and stopped by PID when done.
"srv cpu" and "cli cpu": CPU microseconds per item of the server processes and of
the benchmark's client threads (user + system, from /proc and getrusage).
)";

struct Config {
  std::string op;  // get or put
  size_t size;
  unsigned clients;
  unsigned batch;
};

struct Row {
  Row(std::string t, Config c) : target(std::move(t)), cfg(std::move(c)) {}
  std::string target;
  Config cfg;
  uint64_t ops = 0;  // items
  double seconds = 0, ops_per_s = 0, gbps = 0, p50 = 0, p99 = 0, p999 = 0;
  // CPU time per item, microseconds: the server processes' and this process's (the client
  // threads); -1 where there is none. Steadier than throughput on a shared machine.
  double server_cpu_us = -1, client_cpu_us = -1;
  std::vector<double> cdf_us;  // latency at each of kCdfQ (the report's CDF)
  std::string error;
};

// Quantiles kept per row for the latency CDF of `--report`.
constexpr double kCdfQ[] = {0.001, 0.01, 0.05, 0.1,  0.2,  0.3,   0.4,   0.5,    0.6, 0.7,
                            0.8,   0.9,  0.95, 0.98, 0.99, 0.995, 0.999, 0.9999, 1.0};

void Summarize(const Histogram& hist, Row& row) {
  row.p50 = hist.Quantile(0.5) / 1e3;
  row.p99 = hist.Quantile(0.99) / 1e3;
  row.p999 = hist.Quantile(0.999) / 1e3;
  row.cdf_us.clear();
  if (hist.Count() == 0) return;
  for (double q : kCdfQ) row.cdf_us.push_back(hist.Quantile(q) / 1e3);
}

// user + system CPU seconds of the server processes, all threads (utime + stime ticks).
double ServerCpuSeconds(const BenchTarget& t) {
  long long ticks = 0;
  for (pid_t p : t.ServerPids()) {
    ProcStat s = ProcStat::OfProcess(p);
    ticks += s.Number(14) + s.Number(15);
  }
  return static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double SelfCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string KeyName(size_t size, size_t i) {
  return "b" + std::to_string(size) + "_" + std::to_string(i);
}

size_t KeysFor(size_t size) { return std::clamp<size_t>((128u << 20) / size, 16, 512); }

// Puts the keys every get config of this size reads (once per target and size).
Status Preload(BenchTarget& t, size_t size) {
  auto conn = t.Connect();
  if (!conn.ok()) return conn.status();
  std::vector<std::byte> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = static_cast<std::byte>(i * 131 + size);
  for (size_t i = 0; i < KeysFor(size); ++i) {
    if (Status s = (*conn)->Put(KeyName(size, i), v); !s.ok()) return s;
  }
  return Status::Ok();
}

Row Run(BenchTarget& t, const Config& c, double seconds) {
  Row row{t.name(), c};
  std::vector<std::unique_ptr<BenchConn>> conns;
  for (unsigned i = 0; i < c.clients; ++i) {
    auto conn = t.Connect();
    if (!conn.ok()) {
      row.error = conn.status().ToString();
      return row;
    }
    conns.push_back(std::move(conn).value());
  }
  Histogram hist;
  std::atomic<uint64_t> items{0};
  std::atomic<bool> failed{false};
  std::string error;
  std::mutex error_mu;
  std::atomic<bool> go{false};
  uint64_t deadline = 0;
  std::vector<std::thread> threads;
  for (unsigned ci = 0; ci < c.clients; ++ci) {
    threads.emplace_back([&, ci] {
      BenchConn& conn = *conns[ci];
      std::span<std::byte> area = conn.Buffer(c.size * c.batch);
      std::vector<std::span<std::byte>> bufs;
      for (unsigned b = 0; b < c.batch; ++b) bufs.push_back(area.subspan(b * c.size, c.size));
      std::vector<std::string> keys(c.batch);
      std::mt19937_64 rng(ci * 7919 + 1);
      size_t nkeys = KeysFor(c.size);
      uint64_t seq = 0;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      while (NowNanos() < deadline && !failed.load(std::memory_order_relaxed)) {
        Status s;
        uint64_t t0 = NowNanos();
        if (c.op == "get") {
          for (auto& k : keys) k = KeyName(c.size, rng() % nkeys);
          s = conn.Get(keys, bufs);
        } else {
          std::string k = "p" + std::to_string(ci) + "_" + std::to_string(seq++ % 4096);
          s = conn.Put(k, bufs[0]);
        }
        hist.Record(NowNanos() - t0);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          error = s.ToString();
          failed = true;
          break;
        }
        items.fetch_add(c.op == "get" ? c.batch : 1, std::memory_order_relaxed);
      }
    });
  }
  const double server_cpu0 = ServerCpuSeconds(t), client_cpu0 = SelfCpuSeconds();
  uint64_t start = NowNanos();
  deadline = start + static_cast<uint64_t>(seconds * 1e9);
  go.store(true, std::memory_order_release);
  for (auto& th : threads) th.join();
  row.seconds = (NowNanos() - start) / 1e9;
  row.ops = items.load();
  if (row.ops > 0) {
    if (!t.ServerPids().empty())
      row.server_cpu_us = (ServerCpuSeconds(t) - server_cpu0) / row.ops * 1e6;
    row.client_cpu_us = (SelfCpuSeconds() - client_cpu0) / row.ops * 1e6;
  }
  row.ops_per_s = row.ops / row.seconds;
  row.gbps = row.ops_per_s * c.size / 1e9;
  Summarize(hist, row);
  row.error = error;
  return row;
}

// Single-thread memcpy of `size` bytes, cycling over a source larger than the caches.
Row Memcpy(size_t size, double seconds) {
  Row row{"memcpy", Config{"copy", size, 1, 1}};
  size_t span = std::max<size_t>(256u << 20, size * 4);
  std::vector<std::byte> src(span, std::byte{1}), dst(size);
  Histogram hist;
  uint64_t start = NowNanos(), end = start + static_cast<uint64_t>(seconds * 1e9), n = 0;
  size_t off = 0;
  while (NowNanos() < end) {
    uint64_t t0 = NowNanos();
    std::memcpy(dst.data(), src.data() + off, size);
    hist.Record(NowNanos() - t0);
    off = (off + size) % (span - size + 1);
    ++n;
  }
  row.seconds = (NowNanos() - start) / 1e9;
  row.ops = n;
  row.ops_per_s = n / row.seconds;
  row.gbps = row.ops_per_s * size / 1e9;
  Summarize(hist, row);
  return row;
}

struct Ratio {
  std::string name;
  double value;
  double goal;  // -1: none
  bool higher_better;
};

std::string BenchJson(const std::vector<Row>& rows, const std::vector<Ratio>& ratios,
                      double seconds) {
  std::ostringstream f;
  f << "{\n  \"seconds_per_config\": " << seconds << ",\n  \"cdf_q\": [";
  for (size_t i = 0; i < std::size(kCdfQ); ++i) f << (i ? ", " : "") << kCdfQ[i];
  f << "],\n  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    f << "    {\"target\": \"" << r.target << "\", \"op\": \"" << r.cfg.op
      << "\", \"size\": " << r.cfg.size << ", \"clients\": " << r.cfg.clients
      << ", \"batch\": " << r.cfg.batch << ", \"items_per_s\": " << r.ops_per_s
      << ", \"gb_per_s\": " << r.gbps << ", \"p50_us\": " << r.p50 << ", \"p99_us\": " << r.p99
      << ", \"p999_us\": " << r.p999 << ", \"server_cpu_us_per_item\": " << r.server_cpu_us
      << ", \"client_cpu_us_per_item\": " << r.client_cpu_us << ", \"cdf_us\": [";
    for (size_t j = 0; j < r.cdf_us.size(); ++j) f << (j ? ", " : "") << r.cdf_us[j];
    f << "], \"error\": \"";
    for (char c : r.error) {
      if (c == '"' || c == '\\') f << '\\';
      if (static_cast<unsigned char>(c) >= 0x20) f << c;
    }
    f << "\"}" << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  f << "  ],\n  \"ratios\": [\n";
  for (size_t i = 0; i < ratios.size(); ++i) {
    f << "    {\"name\": \"" << ratios[i].name << "\", \"value\": " << ratios[i].value
      << ", \"goal\": " << ratios[i].goal << "}" << (i + 1 < ratios.size() ? ",\n" : "\n");
  }
  f << "  ]\n}\n";
  return f.str();
}

std::vector<Config> Standard(const std::string& target) {
  // The figures of docs/PERFORMANCE.md: 64 KiB gets at 1 and 8 clients, 1 MiB gets at
  // 1 client, 64 KiB puts, a size sweep at 8 clients, batches, and 64 clients.
  std::vector<Config> v;
  if (target == "fsync") {
    return {{"put", 64 << 10, 1, 1}, {"put", 1 << 20, 1, 1}, {"get", 64 << 10, 1, 1}};
  }
  if (target == "echo") {
    return {{"get", 64 << 10, 1, 1}, {"get", 64 << 10, 8, 1}, {"get", 1 << 20, 1, 1}};
  }
  for (size_t s : {16u << 10, 64u << 10, 256u << 10, 1u << 20, 2u << 20})
    v.push_back({"get", s, 8, 1});
  v.push_back({"get", 64 << 10, 1, 1});
  v.push_back({"get", 1 << 20, 1, 1});
  v.push_back({"get", 1 << 20, 1, 16});
  v.push_back({"get", 64 << 10, 8, 16});
  v.push_back({"get", 64 << 10, 64, 1});
  v.push_back({"put", 64 << 10, 1, 1});
  v.push_back({"put", 64 << 10, 8, 1});
  return v;
}

void PrintRow(const Row& r) {
  if (!r.error.empty()) {
    std::printf("%-12s %-4s %8s %4u %4u  error: %s\n", r.target.c_str(), r.cfg.op.c_str(),
                FormatSize(r.cfg.size).c_str(), r.cfg.clients, r.cfg.batch, r.error.c_str());
    return;
  }
  auto cpu = [](double us) {
    char b[16];
    if (us < 0) return std::string("-");
    std::snprintf(b, sizeof b, "%.1f", us);
    return std::string(b);
  };
  std::printf("%-12s %-4s %8s %4u %4u %11.0f %7.2f %9.1f %9.1f %9.1f %8s %8s\n", r.target.c_str(),
              r.cfg.op.c_str(), FormatSize(r.cfg.size).c_str(), r.cfg.clients, r.cfg.batch,
              r.ops_per_s, r.gbps, r.p50, r.p99, r.p999, cpu(r.server_cpu_us).c_str(),
              cpu(r.client_cpu_us).c_str());
  std::fflush(stdout);
}

const Row* Find(const std::vector<Row>& rows, const std::string& target, const std::string& op,
                size_t size, unsigned clients, unsigned batch) {
  for (const Row& r : rows) {
    if (r.target == target && r.cfg.op == op && r.cfg.size == size && r.cfg.clients == clients &&
        r.cfg.batch == batch && r.error.empty()) {
      return &r;
    }
  }
  return nullptr;
}

int EchoServer(uint16_t port) {
  auto l = net::ListenTcp(net::Address{false, "127.0.0.1", port, {}});
  if (!l.ok()) return 1;
  int lfd = l->get();
  static std::vector<std::byte> payload(64u << 20, std::byte{7});
  while (true) {
    pollfd p{lfd, POLLIN, 0};
    if (::poll(&p, 1, -1) <= 0) continue;
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    net::SetNoDelay(fd);
    net::SetBufferSizes(fd, 4 << 20);
    std::thread([fd] {
      uint64_t sizes[64];
      while (true) {
        ssize_t n = ::recv(fd, sizes, sizeof(sizes), 0);
        if (n <= 0 || n % 8 != 0) break;  // requests are 8-byte sizes, sent whole
        for (ssize_t i = 0; i < n / 8; ++i) {
          size_t left = std::min<uint64_t>(sizes[i], payload.size()), off = 0;
          while (left > 0) {
            ssize_t m = ::send(fd, payload.data() + off, left, MSG_NOSIGNAL);
            if (m <= 0) break;
            off += static_cast<size_t>(m);
            left -= static_cast<size_t>(m);
          }
        }
      }
      ::close(fd);
    }).detach();
  }
}

}  // namespace

int NetBench(int argc, char** argv) {
  std::vector<std::string> targets = {"kvpool",    "kvpool-shm", "redis",
                                      "memcached", "fsync",      "echo"};
  std::string suite = "standard", json, work = "kvpool-data/bench", report;
  std::vector<size_t> sizes = {16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20};
  std::vector<unsigned> clients = {1, 8, 64}, batches = {1, 16, 64};
  double seconds = 1.0;
  unsigned busy_poll_us = 0;
  std::vector<std::string> kvpoold_args;
  int peer_nice = 0;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kvpool bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--echo-server") {
      return EchoServer(static_cast<uint16_t>(std::stoi(value())));
    } else if (a == "--targets") {
      targets = Split(value());
    } else if (a == "--suite") {
      suite = value();
      if (suite != "standard" && suite != "sweep") {
        std::fprintf(stderr, "kvpool bench: --suite standard or sweep\n");
        return 2;
      }
    } else if (a == "--sizes") {
      sizes.clear();
      for (const std::string& s : Split(value())) {
        auto n = ParseSize(s);
        if (!n.ok() || *n == 0 || *n > (64u << 20)) {
          std::fprintf(stderr, "kvpool bench: --sizes: '%s' is not a size up to 64MiB\n",
                       s.c_str());
          return 2;
        }
        sizes.push_back(*n);
      }
    } else if (a == "--clients" || a == "--batch") {
      auto& list = a == "--clients" ? clients : batches;
      list.clear();
      for (const std::string& s : Split(value())) {
        int n = std::atoi(s.c_str());
        if (n < 1 || n > 1024) {
          std::fprintf(stderr, "kvpool bench: %s: 1..1024\n", a.c_str());
          return 2;
        }
        list.push_back(static_cast<unsigned>(n));
      }
    } else if (a == "--seconds") {
      seconds = std::atof(value().c_str());
      if (seconds <= 0 || seconds > 600) {
        std::fprintf(stderr, "kvpool bench: --seconds in (0, 600]\n");
        return 2;
      }
    } else if (a == "--work-dir") {
      work = value();
    } else if (a == "--json") {
      json = value();
    } else if (a == "--report") {
      report = value();
    } else if (a == "--busy-poll-us") {
      busy_poll_us = static_cast<unsigned>(std::atoi(value().c_str()));
    } else if (a == "--kvpoold-args") {
      std::istringstream words(value());
      for (std::string w; words >> w;) kvpoold_args.push_back(w);
    } else if (a == "--peer-nice") {
      peer_nice = std::atoi(value().c_str());
      if (peer_nice < -20 || peer_nice > 19) {
        std::fprintf(stderr, "kvpool bench: --peer-nice: -20..19\n");
        return 2;
      }
    } else if (a == "--quick") {
      seconds = 0.05;
    } else {
      std::fprintf(stderr, "kvpool bench: unknown option '%s'\n", a.c_str());
      return 2;
    }
  }
  ::signal(SIGPIPE, SIG_IGN);
  std::system(("mkdir -p '" + work + "'").c_str());
  BenchEnv env;
  env.work_dir = work;
  env.busy_poll_us = busy_poll_us;
  env.kvpoold_args = kvpoold_args;
  env.peer_nice = peer_nice;
  char exe[4096] = {};
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string dir = n > 0 ? std::string(exe, n) : "";
  env.kvpoold_path = dir.substr(0, dir.rfind('/') + 1) + "kvpoold";

  std::printf("%-12s %-4s %8s %4s %4s %11s %7s %9s %9s %9s %8s %8s\n", "target", "op", "size",
              "cli", "bat", "items/s", "GB/s", "p50 us", "p99 us", "p99.9 us", "srv cpu",
              "cli cpu");
  std::vector<Row> rows;
  for (const std::string& name : targets) {
    auto target = StartTarget(name, env);
    if (!target.ok()) {
      std::printf("%-12s skipped: %s\n", name.c_str(), target.status().ToString().c_str());
      continue;
    }
    std::vector<Config> configs;
    if (suite == "standard") {
      configs = Standard(name);
    } else {
      for (size_t s : sizes)
        for (unsigned c : clients)
          for (unsigned b : batches) configs.push_back({"get", s, c, b});
      for (size_t s : sizes) configs.push_back({"put", s, 1, 1});
    }
    std::map<size_t, bool> loaded;
    for (const Config& c : configs) {
      if (c.op == "get" && name != "echo" && !loaded[c.size]) {
        if (Status s = Preload(**target, c.size); !s.ok()) {
          Row r{name, c};
          r.error = "preload: " + s.ToString();
          PrintRow(r);
          rows.push_back(r);
          continue;
        }
        loaded[c.size] = true;
      }
      rows.push_back(Run(**target, c, seconds));
      PrintRow(rows.back());
    }
  }
  for (size_t s : {64u << 10, 1u << 20}) {
    rows.push_back(Memcpy(s, seconds));
    PrintRow(rows.back());
  }

  // The issue's figures, as ratios from this run.
  std::vector<Ratio> ratios;
  constexpr double kNoGoal = -1;
  auto ratio = [&](const std::string& label, const Row* a, const Row* b, double Row::*f,
                   double goal, bool higher) {
    if (a && b && b->*f > 0) ratios.push_back({label, a->*f / b->*f, goal, higher});
  };
  const size_t k64 = 64 << 10, m1 = 1 << 20;
  for (const char* kv : {"kvpool", "kvpool-shm"}) {
    std::string p = kv;
    ratio(p + " / redis, 64K get x8 throughput", Find(rows, kv, "get", k64, 8, 1),
          Find(rows, "redis", "get", k64, 8, 1), &Row::ops_per_s, 2.0, true);
    ratio(p + " / memcached, 64K get x8 throughput", Find(rows, kv, "get", k64, 8, 1),
          Find(rows, "memcached", "get", k64, 8, 1), &Row::ops_per_s, 1.5, true);
    ratio(p + " / redis, 64K get x8 P99", Find(rows, kv, "get", k64, 8, 1),
          Find(rows, "redis", "get", k64, 8, 1), &Row::p99, 0.5, false);
    for (const char* peer : {"redis", "memcached"}) {  // no goal: what each item costs
      ratio(p + " / " + peer + ", 64K get x8 server CPU", Find(rows, kv, "get", k64, 8, 1),
            Find(rows, peer, "get", k64, 8, 1), &Row::server_cpu_us, kNoGoal, false);
    }
  }
  // TLS 1.3 against plaintext, same build (issue 20: >= 0.6x).
  ratio("kvpool-tls / kvpool, 64K get x8 throughput", Find(rows, "kvpool-tls", "get", k64, 8, 1),
        Find(rows, "kvpool", "get", k64, 8, 1), &Row::ops_per_s, 0.6, true);
  ratio("kvpool-tls / kvpool, 64K put x8 throughput", Find(rows, "kvpool-tls", "put", k64, 8, 1),
        Find(rows, "kvpool", "put", k64, 8, 1), &Row::ops_per_s, 0.6, true);
  ratio("kvpool / echo, 64K get x1 P99", Find(rows, "kvpool", "get", k64, 1, 1),
        Find(rows, "echo", "get", k64, 1, 1), &Row::p99, 1.3, false);
  ratio("kvpool-shm / memcpy, 1M get x1 GB/s", Find(rows, "kvpool-shm", "get", m1, 1, 1),
        Find(rows, "memcpy", "copy", m1, 1, 1), &Row::gbps, 0.7, true);
  ratio("kvpool-shm / memcpy, 1M get x1 batch 16 GB/s", Find(rows, "kvpool-shm", "get", m1, 1, 16),
        Find(rows, "memcpy", "copy", m1, 1, 1), &Row::gbps, 0.7, true);
  ratio("fsync-files / kvpool, 64K put x1 P99", Find(rows, "fsync-files", "put", k64, 1, 1),
        Find(rows, "kvpool", "put", k64, 1, 1), &Row::p99, 40, true);
  if (!ratios.empty()) std::printf("\n%-44s %8s %8s\n", "ratio (this run)", "value", "goal");
  for (const Ratio& r : ratios) {
    if (r.goal == kNoGoal) {
      std::printf("%-44s %8.2f %8s\n", r.name.c_str(), r.value, "-");
      continue;
    }
    bool met = r.higher_better ? r.value >= r.goal : r.value <= r.goal;
    std::printf("%-44s %8.2f %s%-7.2f %s\n", r.name.c_str(), r.value,
                r.higher_better ? ">=" : "<=", r.goal, met ? "met" : "NOT met");
  }
  std::string doc = BenchJson(rows, ratios, seconds);
  if (!json.empty()) {
    std::ofstream f(json);
    f << doc;
    if (!f) {
      std::fprintf(stderr, "kvpool bench: cannot write %s\n", json.c_str());
      return 2;
    }
  }
  if (!report.empty()) {
    auto files = WriteReport(report, "bench", doc);
    if (!files.ok()) {
      std::fprintf(stderr, "kvpool bench: %s\n", std::string(files.status().message()).c_str());
      return 1;
    }
    std::printf("\nreport: %s/bench.json\n", report.c_str());
    for (const std::string& file : *files) std::printf("figure: %s\n", file.c_str());
  }
  return 0;
}

}  // namespace kvpool::bench
