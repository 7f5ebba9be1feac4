#include "workload/replay.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "common/clock.h"
#include "kvpool/key.h"
#include "kvpool/store.h"

namespace kvpool::workload {
namespace {

// Chained keys of a request's block ids (each id stands for one block of tokens).
// The trace's own time, for the flash write budget: a replay runs hours of trace in
// seconds, and the budget is a rate of the workload's time, not the replay's.
std::atomic<uint64_t> g_trace_ns{0};
uint64_t TraceClock() { return g_trace_ns.load(std::memory_order_relaxed); }

std::vector<BlockKey> KeysOf(const TraceRequest& r, const BlockKey& root) {
  std::vector<BlockKey> keys;
  keys.reserve(r.hash_ids.size());
  BlockKey prev = root;
  for (uint64_t id : r.hash_ids) {
    uint32_t tok[2] = {static_cast<uint32_t>(id), static_cast<uint32_t>(id >> 32)};
    prev = ChildKey(prev, tok);
    keys.push_back(prev);
  }
  return keys;
}

// The value stored for a key: its bytes are a function of the key, so a get can verify.
void Fill(std::byte* p, size_t n, const BlockKey& k) {
  uint64_t x = k.lo ^ (k.hi << 1);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(p + i, &x, 8);
  }
}

}  // namespace

Result<ReplayResult> RunReplay(const std::vector<TraceRequest>& trace, const ReplayOptions& o,
                               const ReplayProgress& progress) {
  ReplayResult res;
  std::unordered_set<uint64_t> distinct;
  for (const auto& r : trace) {
    distinct.insert(r.hash_ids.begin(), r.hash_ids.end());
    res.blocks_requested += r.hash_ids.size();
  }
  res.distinct_blocks = distinct.size();
  res.capacity_blocks = std::max<uint64_t>(
      16, static_cast<uint64_t>(o.capacity_fraction * static_cast<double>(distinct.size())));
  if (o.block_bytes == 0 || o.block_bytes % 8) {
    return Status::InvalidArgument("block bytes must be a positive multiple of 8");
  }

  StoreOptions so;
  uint64_t total = res.capacity_blocks * ((o.block_bytes + 4095) / 4096 * 4096);
  bool flash = !o.flash_path.empty();
  uint64_t dram = flash ? static_cast<uint64_t>(o.dram_share * static_cast<double>(total)) : total;
  so.dram_bytes = std::max<uint64_t>(4 * kMiB, (dram + 4095) / 4096 * 4096);
  so.max_value_bytes =
      std::min<uint64_t>(so.dram_bytes / 2, std::max<uint64_t>(o.block_bytes, 4096));
  if (flash) {
    uint64_t fb = total - std::min(total, dram);
    so.region_bytes = std::clamp<uint64_t>(fb / 64 / 4096 * 4096, 256 * kKiB, 16 * kMiB);
    so.region_bytes = std::max<uint64_t>(so.region_bytes, (o.block_bytes + 4095) / 4096 * 4096);
    so.flash_bytes = std::max<uint64_t>(fb / so.region_bytes, 2) * so.region_bytes;
    so.flash_path = o.flash_path;
    // A replay starts cold: blocks a previous replay left in the file would be hits no
    // store could have had (same trace, same keys).
    so.flash_restore = false;
  }
  so.admission = o.admission;
  so.flash_writes_per_day = o.flash_writes_per_day;
  so.clock_ns = &TraceClock;
  g_trace_ns.store(trace.empty() ? 0 : trace[0].timestamp_ms * 1'000'000);
  so.probation_fraction = o.probation_fraction;
  so.reuse_bonus = o.reuse_bonus;
  so.prefault = true;  // as kvpoold does: page faults paid at open, not inside the timed puts
  so.index_capacity = res.capacity_blocks * 4;
  auto opened = Store::Open(so);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<Store> store = std::move(opened).value();

  BlockKey root = NamespaceRoot("replay/mooncake-conversation");
  std::vector<std::byte> bufs;
  std::vector<GetOp> gets;
  uint64_t t0 = NowNanos();
  double dram_fill_sum = 0, flash_fill_sum = 0;
  uint64_t fill_samples = 0;
  size_t step = std::max<size_t>(1, trace.size() / 100);
  for (size_t ri = 0; ri < trace.size(); ++ri) {
    const TraceRequest& r = trace[ri];
    std::vector<BlockKey> keys = KeysOf(r, root);
    g_trace_ns.store(std::max(g_trace_ns.load(), r.timestamp_ms * 1'000'000));
    res.tokens_total += r.input_length;
    size_t matched = store->MatchPrefix(keys).value();
    // Load the matched prefix (one batch: flash reads go out together).
    bufs.resize(std::max<size_t>(bufs.size(), matched * o.block_bytes));
    gets.assign(matched, GetOp{});
    for (size_t i = 0; i < matched; ++i) {
      gets[i].key = keys[i];
      gets[i].buffer = std::span<std::byte>(bufs.data() + i * o.block_bytes, o.block_bytes);
    }
    StoreStats before = store->GetStats();
    if (ri >= trace.size() / 2) {
      auto share = [](const TierStats& t) {
        return t.capacity_bytes ? double(t.used_bytes) / double(t.capacity_bytes) : 0.0;
      };
      dram_fill_sum += share(before.dram);
      flash_fill_sum += share(before.flash);
      ++fill_samples;
    }
    (void)store->GetBatch(gets);
    StoreStats after = store->GetStats();
    size_t hits = 0;
    while (hits < matched && gets[hits].status.ok()) ++hits;
    std::vector<std::byte> expect(o.block_bytes);
    for (size_t i = 0; i < hits; ++i) {
      Fill(expect.data(), o.block_bytes, keys[i]);
      if (gets[i].size != o.block_bytes ||
          std::memcmp(expect.data(), gets[i].buffer.data(), o.block_bytes) != 0) {
        ++res.wrong_data;
      }
      res.bytes_got += gets[i].size;
    }
    res.prefix_hits += hits;
    // Which tier served each of the leading hits. A block can leave between the match and
    // the get (its flash region evicted by the mover meanwhile): the gets after it may still
    // hit, but only the leading ones count, so the split is capped at them (DRAM first; only
    // in such a batch is it approximate).
    uint64_t from_dram = std::min<uint64_t>(after.dram.hits - before.dram.hits, hits);
    res.dram_hits += from_dram;
    res.flash_hits += std::min<uint64_t>(after.flash.hits - before.flash.hits, hits - from_dram);
    res.tokens_saved += TokensSaved(hits, r, o.tokens_per_block);
    // Prefill computed the rest: store it, chained to its parent. Like vLLM and SGLang,
    // only full blocks are stored: a trailing partial block is never reusable.
    const size_t full = FullBlocks(r, o.tokens_per_block);
    std::vector<std::byte> value(o.block_bytes);
    for (size_t i = hits; i < full; ++i) {
      Fill(value.data(), value.size(), keys[i]);
      PutOptions po;
      if (i > 0) po.parent = keys[i - 1];
      Status s = store->Put(keys[i], value, po);
      if (s.ok()) res.bytes_put += value.size();
    }
    ++res.requests;
    res.blocks_done += keys.size();
    if (progress && (ri % step == 0 || ri + 1 == trace.size())) {
      res.seconds = static_cast<double>(NowNanos() - t0) / 1e9;
      progress(ri + 1, trace.size(), res);
    }
  }
  store->Quiesce();
  res.seconds = static_cast<double>(NowNanos() - t0) / 1e9;
  res.stats = store->GetStats();
  if (fill_samples) {
    res.dram_fill = dram_fill_sum / double(fill_samples);
    res.flash_fill = flash_fill_sum / double(fill_samples);
  }
  res.lru_prefix_hits =
      LruPrefixHits(trace, res.capacity_blocks, &res.lru_tokens_saved, o.tokens_per_block);
  res.offline_prefix_hits =
      OfflinePrefixHits(trace, res.capacity_blocks, &res.offline_tokens_saved, o.tokens_per_block);
  return res;
}

std::string ReplayTable(const ReplayResult& r, const ReplayOptions& o) {
  std::ostringstream s;
  char line[256];
  auto ratio = [](uint64_t a, uint64_t b) { return b ? double(a) / double(b) : 0.0; };
  s << "\nkvpool replay: " << r.requests << " requests, " << r.blocks_requested
    << " block references, " << r.distinct_blocks << " distinct blocks\n";
  s << "capacity " << r.capacity_blocks << " blocks (" << o.capacity_fraction * 100
    << "% of distinct) of " << o.block_bytes / 1024 << " KiB; "
    << (o.flash_path.empty()
            ? "DRAM only"
            : "DRAM " + std::to_string(r.stats.dram.capacity_bytes >> 20) + " MiB + flash " +
                  std::to_string(r.stats.flash.capacity_bytes >> 20) + " MiB")
    << "; " << r.seconds << " s\n\n";
  std::snprintf(line, sizeof line, "%-34s %14s %14s %14s\n", "", "kvpool", "plain LRU", "offline");
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14.4f %14.4f %14.4f\n", "prefix hit ratio (blocks)",
                r.prefix_hit_ratio(), r.lru_prefix_hit_ratio(),
                ratio(r.offline_prefix_hits, r.blocks_requested));
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14.4f %14s\n", "  served from DRAM",
                ratio(r.dram_hits, r.blocks_requested), "-");
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14.4f %14s\n", "  served from flash",
                ratio(r.flash_hits, r.blocks_requested), "-");
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14llu %14llu %14llu\n", "prefill tokens saved",
                (unsigned long long)r.tokens_saved, (unsigned long long)r.lru_tokens_saved,
                (unsigned long long)r.offline_tokens_saved);
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14.4f %14.4f %14.4f\n", "  share of input tokens",
                ratio(r.tokens_saved, r.tokens_total), ratio(r.lru_tokens_saved, r.tokens_total),
                ratio(r.offline_tokens_saved, r.tokens_total));
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14.3f\n", "DRAM held (mean share, 2nd half)",
                r.dram_fill);
  s << line;
  if (!o.flash_path.empty()) {
    std::snprintf(line, sizeof line, "%-34s %14.3f\n", "flash held (mean share, 2nd half)",
                  r.flash_fill);
    s << line;
  }
  std::snprintf(line, sizeof line, "%-34s %14.3f\n", "reuse bonus at the end (DRAM-fulls)",
                r.stats.reuse_bonus_dram_fulls);
  s << line;
  if (!o.flash_path.empty()) {
    std::snprintf(line, sizeof line, "%-34s %14.2f\n", "probation share at the end",
                  r.stats.probation_share);
    s << line;
    std::snprintf(line, sizeof line, "%-34s %14s\n", "unused blocks to flash at the end",
                  r.stats.unused_to_flash ? "yes" : "no");
    s << line;
    std::snprintf(line, sizeof line, "%-34s %14s\n", "flash hits promoted at the end",
                  r.stats.promote_all_flash_hits ? "all" : "older half");
    s << line;
  }
  std::snprintf(line, sizeof line, "%-34s %14.1f\n", "bytes put (MiB)", r.bytes_put / 1048576.0);
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14.1f\n", "bytes read by gets (MiB)",
                r.bytes_got / 1048576.0);
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14.1f\n", "flash written (MiB)",
                r.stats.flash.bytes_written / 1048576.0);
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14.3f\n", "  per byte put",
                ratio(r.stats.flash.bytes_written, r.bytes_put));
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14llu\n", "  blocks used there, moved on reclaim",
                (unsigned long long)r.stats.flash_reinserted);
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14.1f\n", "flash read (MiB)",
                r.stats.flash.bytes_read / 1048576.0);
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14llu\n", "blocks refused by flash admission",
                (unsigned long long)r.stats.admission_drops);
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14llu\n", "  by the write budget",
                (unsigned long long)r.stats.budget_drops);
  s << line;
  std::snprintf(line, sizeof line, "%-34s %14llu\n", "wrong data returned (must be 0)",
                (unsigned long long)r.wrong_data);
  s << line;
  std::snprintf(line, sizeof line, "\n%-16s %10s %10s %10s %10s\n", "latency (us)", "count", "p50",
                "p99", "p99.9");
  s << line;
  auto lat = [&](const char* name, const LatencySummary& l) {
    std::snprintf(line, sizeof line, "%-16s %10llu %10.2f %10.2f %10.2f\n", name,
                  (unsigned long long)l.count, l.p50_us, l.p99_us, l.p999_us);
    s << line;
  };
  lat("put", r.stats.put_latency);
  lat("get (DRAM)", r.stats.get_dram_latency);
  lat("get (flash)", r.stats.get_flash_latency);
  return s.str();
}

std::string ReplayJson(const ReplayResult& r, const ReplayOptions& o) {
  std::ostringstream s;
  auto lat = [&](const LatencySummary& l) {
    std::ostringstream t;
    t << "{\"count\":" << l.count << ",\"p50_us\":" << l.p50_us << ",\"p99_us\":" << l.p99_us
      << ",\"p999_us\":" << l.p999_us << ",\"max_us\":" << l.max_us << ",\"le\":[";
    for (size_t i = 0; i < kLatencyBounds; ++i) t << (i ? "," : "") << l.le[i];
    t << "]}";
    return t.str();
  };
  s << "{\"requests\":" << r.requests << ",\"blocks_requested\":" << r.blocks_requested
    << ",\"distinct_blocks\":" << r.distinct_blocks << ",\"capacity_blocks\":" << r.capacity_blocks
    << ",\"block_bytes\":" << o.block_bytes << ",\"capacity_fraction\":" << o.capacity_fraction
    << ",\"dram_share\":" << o.dram_share << ",\"prefix_hit_ratio\":" << r.prefix_hit_ratio()
    << ",\"lru_prefix_hit_ratio\":" << r.lru_prefix_hit_ratio() << ",\"dram_hits\":" << r.dram_hits
    << ",\"flash_hits\":" << r.flash_hits << ",\"tokens_saved\":" << r.tokens_saved
    << ",\"lru_tokens_saved\":" << r.lru_tokens_saved << ",\"offline_prefix_hit_ratio\":"
    << (r.blocks_requested ? double(r.offline_prefix_hits) / double(r.blocks_requested) : 0.0)
    << ",\"offline_tokens_saved\":" << r.offline_tokens_saved
    << ",\"tokens_total\":" << r.tokens_total << ",\"bytes_put\":" << r.bytes_put
    << ",\"bytes_got\":" << r.bytes_got
    << ",\"flash_bytes_written\":" << r.stats.flash.bytes_written
    << ",\"flash_reinserted\":" << r.stats.flash_reinserted
    << ",\"admission_drops\":" << r.stats.admission_drops
    << ",\"budget_drops\":" << r.stats.budget_drops
    << ",\"flash_bytes_read\":" << r.stats.flash.bytes_read << ",\"dram_fill\":" << r.dram_fill
    << ",\"flash_fill\":" << r.flash_fill << ",\"wrong_data\":" << r.wrong_data
    << ",\"reuse_bonus\":" << r.stats.reuse_bonus_dram_fulls
    << ",\"probation_share\":" << r.stats.probation_share
    << ",\"unused_to_flash\":" << (r.stats.unused_to_flash ? "true" : "false")
    << ",\"promote_all_flash_hits\":" << (r.stats.promote_all_flash_hits ? "true" : "false")
    << ",\"seconds\":" << r.seconds << ",\"put_latency\":" << lat(r.stats.put_latency)
    << ",\"get_dram_latency\":" << lat(r.stats.get_dram_latency)
    << ",\"get_flash_latency\":" << lat(r.stats.get_flash_latency) << "}\n";
  return s.str();
}

}  // namespace kvpool::workload
