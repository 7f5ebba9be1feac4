// kvpool_bench: engine micro-benchmarks. Prints a table and writes JSON. Every figure is
// set beside a physical limit measured in the same run (memcpy for DRAM paths, fio on the
// same file for the flash tier), as a ratio. Benchmarks, not tests: nothing here asserts.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "engine/index.h"
#include "io/uring_device.h"
#include "kvpool/key.h"
#include "kvpool/store.h"

namespace kvpool {
namespace {

struct Lat {
  std::vector<uint64_t> ns;
  double Q(double q) {
    if (ns.empty()) return 0;
    std::sort(ns.begin(), ns.end());
    return static_cast<double>(ns[std::min(ns.size() - 1, static_cast<size_t>(q * ns.size()))]) /
           1e3;
  }
};

struct Row {
  std::string name;
  double p50 = 0, p99 = 0, p999 = 0, gbps = 0;
  double ref_gbps = 0;  // the physical limit beside it (memcpy or fio)
  std::string ref;
  uint64_t ops = 0;
};

std::vector<Row> g_rows;

void Add(Row r) {
  std::printf("%-34s %8llu %9.2f %9.2f %9.2f %8.2f", r.name.c_str(), (unsigned long long)r.ops,
              r.p50, r.p99, r.p999, r.gbps);
  if (r.ref_gbps > 0)
    std::printf("   %5.2fx %s (%.2f GB/s)", r.gbps / r.ref_gbps, r.ref.c_str(), r.ref_gbps);
  std::printf("\n");
  std::fflush(stdout);
  g_rows.push_back(std::move(r));
}

BlockKey Key(uint64_t i) { return BlockKey{i * 0x9E3779B97F4A7C15ull + 7, i + 1}; }

// memcpy from a 400 MiB pool (cold, like the arena) into one hot buffer (like a caller's).
double MemcpyGbps(size_t size) {
  const size_t pool = 400ull << 20, slots = pool / size;
  std::vector<std::byte> a(pool, std::byte{1}), b(size);
  uint64_t reps = std::max<uint64_t>(4, (1024ull << 20) / size);
  std::mt19937_64 rng(5);
  uint64_t t0 = NowNanos();
  for (uint64_t i = 0; i < reps; ++i) {
    std::memcpy(b.data(), a.data() + (rng() % slots) * size, size);
  }
  double s = static_cast<double>(NowNanos() - t0) / 1e9;
  return static_cast<double>(reps * size) / s / 1e9;
}

void BenchIndex(uint64_t entries) {
  engine::Index index(entries, 64);
  for (uint64_t i = 0; i < entries; ++i) {
    auto& s = index.ShardFor(Key(i));
    MutexLock lock(s.mu);
    s.Insert(Key(i))->crc = static_cast<uint32_t>(i);
  }
  std::mt19937_64 rng(1);
  Lat lat;
  const int kOps = 2000000;
  lat.ns.reserve(kOps);
  uint64_t found = 0;
  for (int i = 0; i < kOps; ++i) {
    BlockKey k = Key(rng() % (entries * 2));  // half hits, half misses
    uint64_t t0 = NowNanos();
    auto& s = index.ShardFor(k);
    {
      MutexLock lock(s.mu);
      found += s.Find(k) != nullptr;
    }
    lat.ns.push_back(NowNanos() - t0);
  }
  Row r;
  r.name = "index lookup @" + std::to_string(entries / 1000000) + "M (lock+probe)";
  r.ops = kOps;
  r.p50 = lat.Q(0.5);
  r.p99 = lat.Q(0.99);
  r.p999 = lat.Q(0.999);
  Add(r);
  std::printf("  (%.1f%% found; %llu bytes of table = %.1f bytes per entry)\n",
              100.0 * found / kOps, (unsigned long long)index.Bytes(),
              static_cast<double>(index.Bytes()) / static_cast<double>(entries));
}

// match_prefix of a held 1000-block chain in a store with kvpoold's default index (1M
// entries), with the caches warm (the same chain asked again at once) and cold (4 MiB
// touched between calls, as a server's other work would): the cold case is what huge
// pages for the index tables are for (each lookup a cache miss, on 4 KiB pages a TLB
// miss too).
//
// With `flash_file`, the same chain on the flash tier (DRAM too small for it, warm caches):
// each matched flash block's validity is checked, and it is marked for reinsertion (a read
// is coming), so this row is the index walk plus that.
void BenchMatch(const std::string& flash_file = "") {
  StoreOptions o;
  o.dram_bytes = flash_file.empty() ? 64 * kMiB : 4 * kMiB;
  o.max_value_bytes = 1 * kMiB;
  if (!flash_file.empty()) {
    o.flash_path = flash_file;
    o.flash_bytes = 64 * kMiB;
    o.flash_restore = false;
    o.admission = Admission::kAll;
  }
  auto opened = Store::Open(o);
  if (!opened.ok()) {
    std::printf("match: %s\n", opened.status().ToString().c_str());
    return;
  }
  Store& store = **opened;
  std::vector<uint32_t> tokens(1000 * 16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 2654435761u);
  std::vector<BlockKey> chain = ChainKeys(NamespaceRoot("bench"), tokens, 16);
  std::vector<std::byte> block(1024, std::byte{7});
  for (size_t i = 0; i < chain.size(); ++i)
    (void)store.Put(chain[i], block, PutOptions{.parent = i ? chain[i - 1] : BlockKey{}});
  if (!flash_file.empty()) {  // newer blocks push the whole chain out of DRAM
    std::vector<std::byte> filler(64 * 1024, std::byte{1});
    for (uint64_t i = 0; i < 256; ++i) (void)store.Put(BlockKey{7, i + 1}, filler);
    store.Quiesce();
    size_t in_dram = 0;
    for (const HeldBlock& b : store.ListBlocks(1 << 20)) {
      if (b.in_dram && std::find(chain.begin(), chain.end(), b.key) != chain.end()) ++in_dram;
    }
    if (in_dram > 0) std::printf("match: %zu of the chain still in DRAM\n", in_dram);
  }
  std::vector<char> other(4 << 20);
  for (bool cold : {false, true}) {
    if (!flash_file.empty() && cold) break;  // the flash row: warm only
    Lat lat;
    for (int it = 0; it < 3000; ++it) {
      if (cold) {
        for (size_t j = 0; j < other.size(); j += 64) other[j] = static_cast<char>(other[j] + 1);
      }
      uint64_t t0 = NowNanos();
      size_t held = store.MatchPrefix(chain).value();
      lat.ns.push_back(NowNanos() - t0);
      if (held != chain.size()) std::printf("match: only %zu of the chain held\n", held);
    }
    Row r;
    r.name = !flash_file.empty() ? "match_prefix 1000 keys, on flash"
             : cold              ? "match_prefix 1000 keys, cold"
                                 : "match_prefix 1000 keys, warm";
    r.ops = lat.ns.size();
    r.p50 = lat.Q(0.5);
    r.p99 = lat.Q(0.99);
    r.p999 = lat.Q(0.999);
    Add(r);
  }
}

void BenchDram(size_t size, double memcpy_gbps) {
  StoreOptions o;
  o.dram_bytes = 1 * kGiB;
  o.max_value_bytes = 4 * kMiB;
  o.prefault = true;
  auto st = Store::Open(o);
  if (!st.ok()) {
    std::fprintf(stderr, "open: %s\n", st.status().ToString().c_str());
    return;
  }
  auto& s = *st;
  uint64_t n = std::min<uint64_t>(4000, (400ull << 20) / size);
  std::vector<std::byte> v(size, std::byte{7}), out(size);
  Lat put, get;
  uint64_t t0 = NowNanos();
  for (uint64_t i = 0; i < n; ++i) {
    v[0] = std::byte(i);
    uint64_t a = NowNanos();
    (void)s->Put(Key(i), v);
    put.ns.push_back(NowNanos() - a);
  }
  double put_s = static_cast<double>(NowNanos() - t0) / 1e9;
  std::mt19937_64 rng(2);
  uint64_t gets = n * 3;
  t0 = NowNanos();
  for (uint64_t i = 0; i < gets; ++i) {
    uint64_t a = NowNanos();
    (void)s->Get(Key(rng() % n), out);
    get.ns.push_back(NowNanos() - a);
  }
  double get_s = static_cast<double>(NowNanos() - t0) / 1e9;
  std::string sz =
      size >= kMiB ? std::to_string(size / kMiB) + " MiB" : std::to_string(size / kKiB) + " KiB";
  Add({"put " + sz + " (DRAM, CRC)", put.Q(0.5), put.Q(0.99), put.Q(0.999),
       static_cast<double>(n * size) / put_s / 1e9, memcpy_gbps, "memcpy", n});
  Add({"get " + sz + " DRAM hit", get.Q(0.5), get.Q(0.99), get.Q(0.999),
       static_cast<double>(gets * size) / get_s / 1e9, memcpy_gbps, "memcpy", gets});
}

// fio on the same file: random reads, io_uring, O_DIRECT. Returns GB/s and P50/P99 clat.
bool Fio(const std::string& file, uint64_t span, size_t bs, int qd, double secs, double* gbps,
         double* p50, double* p99) {
  std::string out = file + ".fio.json";
  std::string cmd = "fio --name=kvpool-ref --filename=" + file + " --size=" + std::to_string(span) +
                    " --rw=randread --bs=" + std::to_string(bs) +
                    " --ioengine=io_uring --direct=1 --iodepth=" + std::to_string(qd) +
                    " --runtime=" + std::to_string(secs) +
                    " --time_based --output-format=json --output=" + out + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return false;
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string j = ss.str();
  unlink(out.c_str());
  auto num_after = [&](size_t from, const std::string& key) -> double {
    size_t p = j.find(key, from);
    if (p == std::string::npos) return -1;
    return std::strtod(j.c_str() + p + key.size(), nullptr);
  };
  size_t rd = j.find("\"read\"");
  if (rd == std::string::npos) return false;
  *gbps = num_after(rd, "\"bw_bytes\" : ") / 1e9;
  size_t clat = j.find("\"clat_ns\"", rd);
  *p50 = num_after(clat, "\"50.000000\" : ") / 1e3;
  *p99 = num_after(clat, "\"99.000000\" : ") / 1e3;
  return *gbps > 0;
}

// The flash tier: raw device reads (the I/O engine alone) and store gets of flash-resident
// blocks (index + read + CRC + copy + promotion), each at QD1 and QD32, beside fio.
// Returns the bytes of the file it filled (the span later readers should stay in).
uint64_t BenchFlash(const std::string& file, uint64_t file_bytes, size_t size, bool run_fio) {
  StoreOptions o;
  o.dram_bytes = 64 * kMiB;
  o.max_value_bytes = 4 * kMiB;
  o.flash_path = file;
  o.flash_bytes = file_bytes;
  o.region_bytes = 16 * kMiB;
  o.admission = Admission::kAll;
  o.io_queue_depth = 64;
  auto st = Store::Open(o);
  if (!st.ok()) {
    std::fprintf(stderr, "open flash store: %s\n", st.status().ToString().c_str());
    return 0;
  }
  auto& s = *st;
  uint64_t n = (file_bytes - 64 * kMiB) / size * 9 / 10;
  std::vector<std::byte> v(size, std::byte{3});
  for (uint64_t i = 0; i < n; ++i) {
    v[0] = std::byte(i);
    (void)s->Put(Key(i), v);
  }
  s->Quiesce();
  std::string sz = std::to_string(size / kKiB) + " KiB";
  std::vector<uint64_t> order(n * 8 / 10);  // the oldest 80%: on flash, not in DRAM
  for (uint64_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(3));

  for (int qd : {1, 32}) {
    double fio_gbps = 0, fio_p50 = 0, fio_p99 = 0;
    bool have_fio =
        run_fio && Fio(file, n * size / 4096 * 4096, size, qd, 4, &fio_gbps, &fio_p50, &fio_p99);
    if (have_fio) {
      Add({"fio randread " + sz + " QD" + std::to_string(qd), fio_p50, fio_p99, 0, fio_gbps, 0, "",
           0});
    }
    // Store gets in batches of qd (flash reads of a batch go out in one submit).
    StoreStats before = s->GetStats();
    std::vector<std::vector<std::byte>> bufs(qd, std::vector<std::byte>(size));
    std::vector<GetOp> ops(qd);
    Lat lat;
    uint64_t t0 = NowNanos(), done = 0, bytes = 0;
    // Each pass reads blocks no pass read before: gets at batch 1 the first quarter, views
    // the second, gets at batch 32 the second half.
    size_t cursor = (qd == 1) ? 0 : order.size() / 2;
    size_t end = (qd == 1) ? order.size() / 4 : order.size();
    while (NowNanos() - t0 < 3'000'000'000ull && cursor + qd <= end) {
      for (int i = 0; i < qd; ++i) ops[i] = {Key(order[cursor++]), bufs[i], 0, 0, {}};
      uint64_t a = NowNanos();
      (void)s->GetBatch(ops);
      lat.ns.push_back(NowNanos() - a);
      for (auto& op : ops) bytes += op.status.ok() ? op.size : 0;
      done += qd;
    }
    double secs = static_cast<double>(NowNanos() - t0) / 1e9;
    StoreStats after = s->GetStats();
    Row r{"store get " + sz + " flash hit, batch " + std::to_string(qd),
          lat.Q(0.5),
          lat.Q(0.99),
          lat.Q(0.999),
          static_cast<double>(bytes) / secs / 1e9,
          have_fio ? fio_gbps : 0,
          "fio",
          done};
    Add(r);
    std::printf("  (%llu of %llu gets served by flash; latency is per batch of %d)\n",
                (unsigned long long)(after.flash.hits - before.flash.hits),
                (unsigned long long)done, qd);
    if (qd != 1) continue;
    // The view API on flash hits: the promoted DRAM record, pinned (no copy out).
    Lat vlat;
    uint64_t vt0 = NowNanos(), vdone = 0, vbytes = 0;
    cursor = order.size() / 4;
    while (NowNanos() - vt0 < 2'000'000'000ull && cursor < order.size() / 2) {
      uint64_t a = NowNanos();
      auto view = s->Read(Key(order[cursor++]));
      vlat.ns.push_back(NowNanos() - a);
      vbytes += view.ok() ? view->data().size() : 0;
      ++vdone;
    }
    double vsecs = static_cast<double>(NowNanos() - vt0) / 1e9;
    Add({"store read (view) " + sz + " flash hit", vlat.Q(0.5), vlat.Q(0.99), vlat.Q(0.999),
         static_cast<double>(vbytes) / vsecs / 1e9, have_fio ? fio_gbps : 0, "fio", vdone});
  }
  return n * size;
}

void BenchDevice(const std::string& file, uint64_t bytes, uint64_t span, size_t size,
                 bool run_fio) {
  auto dev = io::UringDevice::Open({file, bytes, 64});
  if (!dev.ok()) return;
  void* buf = std::aligned_alloc(4096, size * 32);
  std::mt19937_64 rng(4);
  for (int qd : {1, 32}) {
    std::vector<io::IoRequest> reqs(qd == 1 ? 1 : 1024);
    Lat lat;
    uint64_t t0 = NowNanos(), done = 0;
    while (NowNanos() - t0 < 3'000'000'000ull) {
      for (size_t i = 0; i < reqs.size(); ++i) {
        reqs[i] = {io::IoRequest::Op::kRead,
                   (rng() % (span / size)) * size,
                   static_cast<char*>(buf) + (i % 32) * size,
                   static_cast<uint32_t>(size),
                   {}};
      }
      uint64_t a = NowNanos();
      (*dev)->Submit(reqs);
      lat.ns.push_back(NowNanos() - a);
      done += reqs.size();
    }
    double secs = static_cast<double>(NowNanos() - t0) / 1e9;
    double fio_gbps = 0, p50, p99;
    if (run_fio) Fio(file, span / size * size, size, qd, 3, &fio_gbps, &p50, &p99);
    Row r{"device randread " + std::to_string(size / kKiB) + " KiB QD" + std::to_string(qd),
          qd == 1 ? lat.Q(0.5) : 0,
          qd == 1 ? lat.Q(0.99) : 0,
          qd == 1 ? lat.Q(0.999) : 0,
          static_cast<double>(done * size) / secs / 1e9,
          fio_gbps,
          "fio",
          done};
    Add(r);
  }
  std::free(buf);
}

void WriteJson(const std::string& path) {
  std::ofstream o(path);
  o << "{\"rows\":[";
  for (size_t i = 0; i < g_rows.size(); ++i) {
    const Row& r = g_rows[i];
    o << (i ? "," : "") << "{\"name\":\"" << r.name << "\",\"ops\":" << r.ops
      << ",\"p50_us\":" << r.p50 << ",\"p99_us\":" << r.p99 << ",\"p999_us\":" << r.p999
      << ",\"gbps\":" << r.gbps << ",\"ref\":\"" << r.ref << "\",\"ref_gbps\":" << r.ref_gbps
      << ",\"ratio\":" << (r.ref_gbps > 0 ? r.gbps / r.ref_gbps : 0) << "}";
  }
  o << "]}\n";
}

}  // namespace
}  // namespace kvpool

int main(int argc, char** argv) {
  using namespace kvpool;
  std::string json = "bench-engine.json", file = "kvpool-data/bench-flash.img";
  bool quick = false, fio = true;
  std::string only;  // index, dram or flash: run one section
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--no-fio")
      fio = false;
    else if (a == "--json" && i + 1 < argc)
      json = argv[++i];
    else if (a == "--flash-file" && i + 1 < argc)
      file = argv[++i];
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else {
      std::printf(
          "usage: kvpool_bench [--quick] [--no-fio] [--only index|dram|flash] [--json PATH]\n"
          "                    [--flash-file PATH]\n"
          "  index lookup at 10M entries, match_prefix of a 1000-block chain; put/get latency and "
          "GB/s for 16K..2M blocks (DRAM\n"
          "  hits); flash-tier random reads at QD1/QD32 beside fio on the same file.\n"
          "  --quick: 1M index entries, fewer sizes (for CI smoke runs)\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (fio && std::system("fio --version >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "fio not found: flash rows run without their reference\n");
    fio = false;
  }
  if (file.find('/') != std::string::npos) {
    std::string dir = file.substr(0, file.rfind('/'));
    std::system(("mkdir -p " + dir).c_str());
  }
  std::printf("%-34s %8s %9s %9s %9s %8s   %s\n", "benchmark", "ops", "p50 us", "p99 us",
              "p99.9 us", "GB/s", "vs limit");
  auto want = [&](const char* s) { return only.empty() || only == s; };
  if (want("index")) BenchIndex(quick ? 1000000 : 10000000);
  if (want("index")) BenchMatch();
  if (want("index")) {
    BenchMatch(file + ".match");
    std::remove((file + ".match").c_str());
  }
  std::vector<size_t> sizes = {16 * kKiB, 64 * kKiB, 256 * kKiB, 1 * kMiB, 2 * kMiB};
  if (quick) sizes = {64 * kKiB};
  if (want("dram")) {
    for (size_t sz : sizes) BenchDram(sz, MemcpyGbps(sz));
  }
  uint64_t fbytes = quick ? 512 * kMiB : 2 * kGiB;
  // The store run fills the file first, so the raw device rows read real data (a fresh
  // preallocated file reads back zeros without touching the disk).
  if (want("flash")) {
    uint64_t span = BenchFlash(file, fbytes, 64 * kKiB, fio);
    if (span) BenchDevice(file, fbytes, span, 64 * kKiB, fio);
  }
  unlink(file.c_str());
  WriteJson(json);
  std::printf("wrote %s\n", json.c_str());
  return 0;
}
