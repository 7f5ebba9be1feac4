#include "prestage_bench.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "kvpool/client.h"
#include "kvpool/near_cache.h"

namespace kvpool::bench {

const char kPrestageUsage[] = R"(
kvpool prestage-bench     stall time of a request whose prefix is in the pool: the engine
                          finishes its current work (--lead-layers compute steps), then runs
                          the request's --layers layers of --compute-ms each. Its 128-block
                          chain of 64 KiB blocks comes (a) on demand when needed, (b) from the
                          near cache, prestaged when the request was admitted, (c) layer by
                          layer (GetLayers on an I/O thread) while a compute thread runs each
                          layer once it has arrived. Stall = time compute waits for data.
  --server ADDR  --blocks N (128)  --block-bytes B (65536)  --layers L (8)
  --compute-ms M (20)  --lead-layers K (2)  --runs R (5)  --json PATH
)";

namespace {

struct Row {
  std::string mode;
  std::vector<double> stall_ms;
  double p50() const {
    auto v = stall_ms;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  double max() const { return *std::max_element(stall_ms.begin(), stall_ms.end()); }
};

int Fail(const std::string& m) {
  std::fprintf(stderr, "kvpool prestage-bench: %s\n", m.c_str());
  return 2;
}

void Compute(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

int PrestageBench(int argc, char** argv) {
  ClientOptions co;
  if (const char* s = std::getenv("KVPOOL_SERVER")) co.address = s;
  size_t blocks = 128, block_bytes = 64 << 10;
  int layers = 8, compute_ms = 20, lead = 2, runs = 5;
  std::string json;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (!v) return Fail(a + " needs a value");
    ++i;
    if (a == "--server")
      co.address = v;
    else if (a == "--blocks")
      blocks = std::strtoul(v, nullptr, 10);
    else if (a == "--block-bytes")
      block_bytes = std::strtoul(v, nullptr, 10);
    else if (a == "--layers")
      layers = std::atoi(v);
    else if (a == "--compute-ms")
      compute_ms = std::atoi(v);
    else if (a == "--lead-layers")
      lead = std::atoi(v);
    else if (a == "--runs")
      runs = std::atoi(v);
    else if (a == "--json")
      json = v;
    else
      return Fail("unknown option " + a);
  }
  if (blocks == 0 || blocks > 4096 || block_bytes == 0 || block_bytes > (16u << 20) ||
      layers <= 0 || layers > 256 || block_bytes % layers != 0 || runs <= 0 || lead < 0)
    return Fail("bad sizes (block-bytes must divide into --layers parts)");
  co.ns = "prestage-bench";
  auto writer = Client::Create(co);
  if (!writer.ok()) return Fail(writer.status().ToString());
  if (Status s = (*writer)->Ping(); !s.ok())
    return Fail("kvpoold at " + co.address + ": " + s.ToString());

  size_t part = block_bytes / layers;
  std::vector<std::byte> value(block_bytes, std::byte{0x5a});
  std::vector<std::vector<BlockKey>> chains(runs);
  // Every run uses its own chain, so nothing is local from an earlier run.
  for (int r = 0; r < runs; ++r) {
    std::vector<uint32_t> tokens(blocks * 16);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t(i + r * 1000003u);
    chains[r] = ChainKeys(NamespaceRoot("prestage-bench"), tokens, 16);
    std::vector<PutOp> puts;
    for (size_t i = 0; i < blocks; ++i)
      puts.push_back({chains[r][i], value, i ? chains[r][i - 1] : BlockKey{}, {}});
    std::vector<BlockKey> lkeys(blocks * layers);
    for (int l = 0; l < layers; ++l) {
      for (size_t i = 0; i < blocks; ++i) {
        lkeys[l * blocks + i] = LayerKey(chains[r][i], l);
        puts.push_back({lkeys[l * blocks + i],
                        std::span(value).first(part),
                        i ? LayerKey(chains[r][i - 1], l) : BlockKey{},
                        {}});
      }
    }
    if (Status s = (*writer)->PutBatch(puts, true); !s.ok()) return Fail(s.ToString());
  }

  std::vector<std::vector<std::byte>> bufs(blocks, std::vector<std::byte>(block_bytes));
  auto gets_for = [&](const std::vector<BlockKey>& chain) {
    std::vector<GetOp> ops(blocks);
    for (size_t i = 0; i < blocks; ++i) ops[i].key = chain[i], ops[i].buffer = bufs[i];
    return ops;
  };
  auto check = [&](const std::vector<GetOp>& ops) {
    for (auto& op : ops) {
      if (!op.status.ok()) return false;
    }
    return true;
  };

  Row on_demand{"on demand (get when needed)", {}}, prestaged{"prestaged into the near cache", {}},
      streamed{"layer streaming (get_layers)", {}};
  int errors = 0;
  for (int r = 0; r < runs; ++r) {
    const auto& chain = chains[r];
    // (a) On demand: the engine finishes its current work, then fetches and waits.
    {
      auto c = Client::Create(co);
      (void)(*c)->Ping();
      Compute(lead * compute_ms);
      uint64_t t0 = NowNanos();
      auto ops = gets_for(chain);
      (void)(*c)->GetBatch(ops);
      on_demand.stall_ms.push_back((NowNanos() - t0) / 1e6);
      errors += !check(ops);
      for (int l = 0; l < layers; ++l) Compute(compute_ms);
    }
    // (b) Prestaged when the request was admitted, with the lead time as the deadline.
    {
      auto c = Client::Create(co);
      (void)(*c)->Ping();
      NearCacheOptions no;
      no.store.dram_bytes = std::max<uint64_t>(64 * kMiB, 2 * blocks * block_bytes);
      no.store.lock_memory = false;  // unprivileged runs too; pinning does not change a CPU copy
      auto nc = NearCache::Create(no, std::move(c).value());
      if (!nc.ok()) return Fail(nc.status().ToString());
      auto ticket =
          (*nc)->Prestage(chain, Deadline::After(std::chrono::milliseconds(lead * compute_ms)));
      Compute(lead * compute_ms);
      uint64_t t0 = NowNanos();
      auto ops = gets_for(chain);
      (void)(*nc)->GetBatch(ops);  // local copies; whatever had not arrived comes from the pool
      prestaged.stall_ms.push_back((NowNanos() - t0) / 1e6);
      errors += !check(ops);
      (void)(*nc)->WaitPrestaged(ticket, Deadline::After(std::chrono::seconds(5)));
      for (int l = 0; l < layers; ++l) Compute(compute_ms);
    }
    // (c) Layer streaming: the I/O thread receives layers (GetLayers) while the compute
    // thread (the GPU's stream, in an engine) runs layer l as soon as layer l has arrived.
    {
      auto c = Client::Create(co);
      (void)(*c)->Ping();
      Compute(lead * compute_ms);
      std::vector<std::vector<GetOp>> per_layer(layers, std::vector<GetOp>(blocks));
      std::vector<std::span<GetOp>> spans;
      for (int l = 0; l < layers; ++l) {
        for (size_t i = 0; i < blocks; ++i) {
          per_layer[l][i].key = LayerKey(chain[i], l);
          per_layer[l][i].buffer = std::span(bufs[i]).subspan(l * part, part);
        }
        spans.push_back(per_layer[l]);
      }
      std::mutex mu;
      std::condition_variable cv;
      int arrived = 0;
      double stall = 0;
      std::thread compute([&] {
        for (int l = 0; l < layers; ++l) {
          uint64_t t0 = NowNanos();
          {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [&] { return arrived > l; });
          }
          stall += (NowNanos() - t0) / 1e6;
          Compute(compute_ms);
        }
      });
      (void)(*c)->GetLayers(spans, [&](size_t l) {
        errors += !check(per_layer[l]);
        std::lock_guard<std::mutex> lock(mu);
        arrived = static_cast<int>(l) + 1;
        cv.notify_one();
      });
      compute.join();
      streamed.stall_ms.push_back(stall);
    }
  }

  double compute_total = double(layers) * compute_ms;
  std::printf(
      "\nprestage-bench: %zu blocks x %zu KiB (%zu KiB per layer part), %d layers x %d ms, "
      "lead %d x %d ms, %d runs, kvpoold at %s\n\n",
      blocks, block_bytes >> 10, part >> 10, layers, compute_ms, lead, compute_ms, runs,
      co.address.c_str());
  std::printf("%-34s %12s %12s %14s\n", "mode", "stall p50", "stall max", "stall/compute");
  for (const Row* row : {&on_demand, &prestaged, &streamed}) {
    std::printf("%-34s %9.3f ms %9.3f ms %13.2f%%\n", row->mode.c_str(), row->p50(), row->max(),
                100 * row->p50() / compute_total);
  }
  std::printf("\nprestaged / on demand stall: %.3f; layer streaming / on demand: %.3f%s\n",
              prestaged.p50() / on_demand.p50(), streamed.p50() / on_demand.p50(),
              errors ? "   (SOME GETS FAILED)" : "");
  if (!json.empty()) {
    std::ofstream f(json);
    f << "{\"blocks\": " << blocks << ", \"block_bytes\": " << block_bytes
      << ", \"layers\": " << layers << ", \"compute_ms\": " << compute_ms
      << ", \"lead_layers\": " << lead << ", \"runs\": " << runs << ", \"errors\": " << errors
      << ", \"rows\": [";
    bool first = true;
    for (const Row* row : {&on_demand, &prestaged, &streamed}) {
      f << (first ? "" : ", ") << "{\"mode\": \"" << row->mode
        << "\", \"stall_ms_p50\": " << row->p50() << ", \"stall_ms_max\": " << row->max() << "}";
      first = false;
    }
    f << "]}\n";
  }
  return errors ? 1 : 0;
}

}  // namespace kvpool::bench
