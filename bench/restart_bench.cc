// kvpool_restart_bench: the flash tier across a restart (issue 16). Fills a flash file
// with blocks, closes cleanly and reopens (reopen time, share found, every byte checked);
// then a child process reopens it, keeps putting and erasing, and is killed with SIGKILL
// mid-write; the parent reopens again (share of the blocks held at the kill that are
// found, wrong bytes, erased blocks back). Prints a table and writes JSON. Benchmarks, not
// tests: nothing here asserts; the figures go to docs/PERFORMANCE.md.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/units.h"
#include "kvpool/store.h"

namespace kvpool {
namespace {

std::string LoadAvg() {
  std::ifstream f("/proc/loadavg");
  std::string line;
  std::getline(f, line);
  return line;
}

BlockKey Key(uint64_t i) { return BlockKey{i * 0x9E3779B97F4A7C15ull + 11, i + 1}; }

void Fill(uint64_t i, std::span<std::byte> v) {
  uint64_t x = i * 0xD6E8FEB86659FD93ull + 1;
  for (size_t off = 0; off < v.size(); off += 8) {
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ull;
    std::memcpy(v.data() + off, &x, std::min<size_t>(8, v.size() - off));
  }
}

struct Options {
  std::string path = "kvpool-data/restart-bench.flash";
  uint64_t flash = 16 * kGiB, dram = 1 * kGiB, block = 64 * kKiB;
  std::string json = "bench-restart.json";
};

// Shared with the child that gets killed: what it had acknowledged.
struct Shared {
  std::atomic<uint64_t> next_put;  // keys [first, next_put) were acknowledged
  std::atomic<uint64_t> erased_n;
  uint64_t erased[1 << 16];
};

StoreOptions StoreOpts(const Options& o) {
  StoreOptions so;
  so.flash_path = o.path;
  so.flash_bytes = o.flash;
  so.dram_bytes = o.dram;
  so.max_value_bytes = std::max<uint64_t>(o.block, 1 * kMiB);
  so.admission = Admission::kAll;  // the fill is the point, not the write budget
  so.index_capacity = o.flash / o.block * 2;
  return so;
}

double Seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

// Reads keys [0, n) except `skip`; counts found and wrong. `erased` must all be absent.
struct Check {
  uint64_t found = 0, wrong = 0, erased_back = 0;
  double seconds = 0;
};
Check Verify(Store& s, uint64_t n, const std::vector<char>& erased, size_t block) {
  Check c;
  uint64_t t0 = NowNanos();
  std::vector<std::byte> out(block), want(block);
  for (uint64_t i = 0; i < n; ++i) {
    auto r = s.Get(Key(i), out);
    if (!r.ok()) continue;
    if (erased[i]) {
      ++c.erased_back;
      continue;
    }
    Fill(i, want);
    if (*r != block || std::memcmp(out.data(), want.data(), block) != 0) {
      ++c.wrong;
    } else {
      ++c.found;
    }
  }
  c.seconds = Seconds(NowNanos() - t0);
  return c;
}

int Run(const Options& o) {
  const uint64_t per_flash = o.flash / o.block;
  const uint64_t n1 = per_flash * 85 / 100;  // phase 1: 85% of the flash
  const uint64_t n2 = per_flash * 8 / 100;   // phase 2 (killed): up to 8% more
  std::vector<char> erased(n1 + n2, 0);
  std::printf("restart bench: %s, %s flash, %s DRAM, %s blocks; load %s\n", o.path.c_str(),
              FormatSize(o.flash).c_str(), FormatSize(o.dram).c_str(), FormatSize(o.block).c_str(),
              LoadAvg().c_str());
  std::vector<std::byte> v(o.block);
  std::string json = "{\n";
  auto emit = [&](const char* k, double x) {
    std::printf("  %-38s %12.3f\n", k, x);
    char b[128];
    std::snprintf(b, sizeof(b), "  \"%s\": %.6g,\n", k, x);
    json += b;
  };
  // Phase 1: fill, clean close.
  uint64_t close_ns = 0, fill_ns = 0, fresh_open_ns = 0;
  {
    StoreOptions so = StoreOpts(o);
    so.flash_restore = false;
    uint64_t t0 = NowNanos();
    auto s = Store::Open(so);
    fresh_open_ns = NowNanos() - t0;
    if (!s.ok()) {
      std::fprintf(stderr, "open: %s\n", s.status().ToString().c_str());
      return 1;
    }
    t0 = NowNanos();
    for (uint64_t i = 0; i < n1; ++i) {
      Fill(i, v);
      Status st = (*s)->Put(Key(i), v);
      if (!st.ok()) {
        std::fprintf(stderr, "put %llu: %s\n", (unsigned long long)i, st.ToString().c_str());
        return 1;
      }
      if (i % (n1 / 10) == 0)
        std::fprintf(stderr, "fill %llu%%\n", (unsigned long long)(i * 100 / n1));
    }
    fill_ns = NowNanos() - t0;
    t0 = NowNanos();
    s->reset();
    close_ns = NowNanos() - t0;
  }
  emit("fresh_open_s", Seconds(fresh_open_ns));
  emit("fill_gbps", static_cast<double>(n1 * o.block) / static_cast<double>(fill_ns));
  emit("clean_close_s", Seconds(close_ns));
  // Phase 2: reopen after the clean close.
  {
    uint64_t t0 = NowNanos();
    auto s = Store::Open(StoreOpts(o));
    uint64_t open_ns = NowNanos() - t0;
    if (!s.ok()) return 1;
    StoreStats st = (*s)->GetStats();
    emit("clean_reopen_s", Seconds(open_ns));
    // What the restore adds to an open (the DRAM tier and index cost the same either way).
    double extra = Seconds(open_ns > fresh_open_ns ? open_ns - fresh_open_ns : 0);
    double per_100 = 100.0 * static_cast<double>(kGiB) / static_cast<double>(o.flash);
    emit("clean_restore_extra_s", extra);
    emit("clean_restore_extra_s_per_100GiB", extra * per_100);
    emit("clean_reopen_s_per_100GiB", Seconds(open_ns) * per_100);
    emit("clean_restored_blocks", static_cast<double>(st.flash_restored));
    Check c = Verify(**s, n1, erased, o.block);
    emit("clean_found_share", static_cast<double>(c.found) / static_cast<double>(n1));
    emit("clean_wrong_bytes_blocks", static_cast<double>(c.wrong));
    emit("clean_verify_gbps", static_cast<double>(c.found * o.block) / 1e9 / c.seconds);
  }
  // Phase 3: a child reopens, puts and erases, and is killed mid-write.
  auto* sh = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  sh->next_put = n1;
  sh->erased_n = 0;
  pid_t child = fork();
  if (child == 0) {
    auto s = Store::Open(StoreOpts(o));
    if (!s.ok()) _exit(1);
    std::vector<std::byte> w(o.block);
    std::mt19937_64 rng(5);
    for (uint64_t i = n1; i < n1 + n2; ++i) {
      Fill(i, w);
      if (!(*s)->Put(Key(i), w).ok()) _exit(2);
      sh->next_put.store(i + 1, std::memory_order_release);
      if (i % 20 == 0) {  // an erase of an older block, acknowledged before it is recorded
        uint64_t victim = rng() % n1;
        if ((*s)->Erase(Key(victim)).ok()) {
          uint64_t k = sh->erased_n.load(std::memory_order_relaxed);
          if (k < (1 << 16)) {
            sh->erased[k] = victim;
            sh->erased_n.store(k + 1, std::memory_order_release);
          }
        }
      }
    }
    pause();  // wait for the kill
    _exit(0);
  }
  // Kill once it has put half of its share (its reopen included).
  uint64_t t0 = NowNanos();
  while (sh->next_put.load(std::memory_order_acquire) < n1 + n2 / 2 &&
         NowNanos() - t0 < 600'000'000'000ull) {
    usleep(1000);
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  uint64_t acked = sh->next_put.load(std::memory_order_acquire);
  uint64_t erased_n = sh->erased_n.load(std::memory_order_acquire);
  for (uint64_t k = 0; k < erased_n; ++k) erased[sh->erased[k]] = 1;
  uint64_t held = acked;
  for (uint64_t k = 0; k < acked; ++k) held -= erased[k] ? 1 : 0;
  emit("kill_acked_puts_after_reopen", static_cast<double>(acked - n1));
  emit("kill_acked_erases", static_cast<double>(erased_n));
  {
    uint64_t t1 = NowNanos();
    auto s = Store::Open(StoreOpts(o));
    uint64_t open_ns = NowNanos() - t1;
    if (!s.ok()) return 1;
    StoreStats st = (*s)->GetStats();
    emit("kill_reopen_s", Seconds(open_ns));
    emit("kill_regions_dropped", static_cast<double>(st.flash_regions_dropped));
    Check c = Verify(**s, acked, erased, o.block);
    emit("kill_found_share", static_cast<double>(c.found) / static_cast<double>(held));
    emit("kill_wrong_bytes_blocks", static_cast<double>(c.wrong));
    emit("kill_erased_back", static_cast<double>(c.erased_back));
    emit("kill_dram_blocks_at_most", static_cast<double>(o.dram / o.block));
  }
  json += "  \"flash_bytes\": " + std::to_string(o.flash) +
          ",\n  \"block_bytes\": " + std::to_string(o.block) + "\n}\n";
  std::ofstream(o.json) << json;
  std::printf("wrote %s\n", o.json.c_str());
  unlink(o.path.c_str());
  return 0;
}

}  // namespace
}  // namespace kvpool

int main(int argc, char** argv) {
  kvpool::Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto size = [&](uint64_t* out) {
      if (i + 1 >= argc) return false;
      auto n = kvpool::ParseSize(argv[++i]);
      if (!n.ok()) return false;
      *out = *n;
      return true;
    };
    if (a == "--path" && i + 1 < argc) {
      o.path = argv[++i];
    } else if (a == "--json" && i + 1 < argc) {
      o.json = argv[++i];
    } else if ((a == "--flash" && size(&o.flash)) || (a == "--dram" && size(&o.dram)) ||
               (a == "--block" && size(&o.block))) {
    } else {
      std::fprintf(stderr,
                   "usage: kvpool_restart_bench [--path FILE] [--flash 16GiB] [--dram 1GiB] "
                   "[--block 64KiB] [--json bench-restart.json]\n"
                   "Fills FILE (deleted at the end) to 85%% with blocks, closes, reopens and "
                   "checks every byte; then kills a writer with SIGKILL and checks again.\n");
      return 2;
    }
  }
  return kvpool::Run(o);
}
