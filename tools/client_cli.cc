// kvpool put/get/del/exists/stat/ping: one operation against a kvpoold.
#include "client_cli.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/histogram.h"
#include "common/units.h"
#include "host_noise.h"
#include "kvpool/client.h"

namespace kvpool::tools {
namespace {

int Usage(const std::string& msg) {
  std::fprintf(stderr, "kvpool: %s\n(kvpool --help for usage)\n", msg.c_str());
  return 2;
}

}  // namespace

const char kClientUsage[] = R"(
kvpool put KEY [FILE]     store FILE (default: stdin) under KEY
kvpool get KEY [FILE]     write KEY's value to FILE (default: stdout); exit 1 on a miss
kvpool del KEY            erase KEY; exit 1 if it was not held
kvpool exists KEY...      print held/missing per key; exit 1 if any is missing
kvpool stat               the server's counters
kvpool ping               round trip to the server
kvpool match-bench [N]    prefix-match latency: puts a chain of N (default 1000) 1 KiB blocks
                          in namespace "match-bench", then times match_prefix over it for 2 s
                          (after 1 s measuring how often the host takes the CPU away),
                          then one data get of --get-bytes (default 64K; a 16-token block of
                          Llama-3.1-8B is 2M) on the same connection for 1 s as the yardstick
  KEY is 32 hex digits (a block key, as ChainKeys derives) or any other string,
  which is hashed (XXH3-128) into a key.
  --server ADDR           host:port or unix:/path (default 127.0.0.1:7400, or $KVPOOL_SERVER)
  --ns NAME               namespace (default "default")
  --token T               access token (default $KVPOOL_TOKEN)
  --overwrite             put: replace a held value (default: keep it, exit 1)
  --timeout-ms N          per request (default 5000)
  --busy-poll-us N        poll this long for a reply before sleeping (default 0)
  --get-bytes B           match-bench: size of the yardstick get (default 64K, 4K..128M)
)";

int ClientCommand(const std::string& cmd, int argc, char** argv) {
  ClientOptions o;
  if (const char* s = std::getenv("KVPOOL_SERVER")) o.address = s;
  if (const char* t = std::getenv("KVPOOL_TOKEN")) o.token = t;
  bool overwrite = false;
  uint64_t get_bytes = 64 << 10;
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--server" || a == "--ns" || a == "--token" || a == "--timeout-ms" ||
        a == "--busy-poll-us" || a == "--get-bytes") {
      const char* v = value();
      if (!v) return Usage(a + " needs a value");
      if (a == "--server") o.address = v;
      if (a == "--ns") o.ns = v;
      if (a == "--token") o.token = v;
      if (a == "--timeout-ms") o.request_timeout_ms = o.connect_timeout_ms = std::atoi(v);
      if (a == "--busy-poll-us") o.busy_poll_us = static_cast<unsigned>(std::atoi(v));
      if (a == "--get-bytes") {
        auto b = ParseSize(v);
        if (!b.ok() || *b < 4096 || *b > (128ull << 20))
          return Usage("--get-bytes: a size from 4K to 128M, not \"" + std::string(v) + "\"");
        get_bytes = *b;
      }
    } else if (a == "--overwrite") {
      overwrite = true;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kClientUsage, stdout);
      return 0;
    } else if (a.starts_with("--")) {
      return Usage("unknown option " + a);
    } else {
      args.push_back(a);
    }
  }
  auto client = Client::Create(o);
  if (!client.ok()) return Usage(client.status().ToString());
  Client& c = **client;
  auto report = [&](const Status& s) {
    std::fprintf(stderr, "kvpool %s: %s\n", cmd.c_str(), s.ToString().c_str());
    return s.IsNotFound() || s.code() == Code::kExists ? 1 : 3;
  };
  if (cmd == "ping") {
    Status s = c.Ping();
    if (!s.ok()) return report(s);
    std::printf("pong from %s\n", o.address.c_str());
    return 0;
  }
  if (cmd == "stat") {
    auto text = c.ServerStats();
    if (!text.ok()) return report(text.status());
    std::fputs(text->c_str(), stdout);
    return 0;
  }
  if (cmd == "match-bench") {
    size_t n = args.empty() ? 1000 : std::strtoul(args[0].c_str(), nullptr, 10);
    if (n == 0 || n > 100000) return Usage("match-bench N: 1..100000 blocks");
    std::vector<uint32_t> tokens(n * 16);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 2654435761u);
    std::vector<BlockKey> chain = ChainKeys(NamespaceRoot("match-bench"), tokens, 16);
    std::vector<std::byte> block(1024, std::byte{7});
    std::vector<PutOp> puts;
    for (size_t i = 0; i < n; ++i)
      puts.push_back(PutOp{chain[i], block, i ? chain[i - 1] : BlockKey{}, {}});
    if (Status s = c.PutBatch(puts, /*overwrite=*/true); !s.ok()) return report(s);
    // The floor under any tail figure here: how often this host takes the CPU away.
    bench::HostNoise noise = bench::MeasureHostNoise(1'000'000'000ull);
    Histogram hist;
    uint64_t end = NowNanos() + 2'000'000'000ull, count = 0;
    size_t matched = 0;
    while (NowNanos() < end) {
      uint64_t t0 = NowNanos();
      auto r = c.MatchPrefix(chain);
      hist.Record(NowNanos() - t0);
      if (!r.ok()) return report(r.status());
      matched = *r;
      ++count;
    }
    // The yardstick the issue names: one data get in the same run.
    std::vector<std::byte> big(get_bytes, std::byte{1}), out(get_bytes);
    BlockKey big_key = KeyFromBytes("match-bench-get-" + std::to_string(get_bytes));
    if (Status s = c.Put(big_key, big, PutOptions{.parent = {}, .overwrite = true}); !s.ok())
      return report(s);
    Histogram get_hist;
    end = NowNanos() + 1'000'000'000ull;
    while (NowNanos() < end) {
      uint64_t t0 = NowNanos();
      auto r = c.Get(big_key, out);
      get_hist.Record(NowNanos() - t0);
      if (!r.ok()) return report(r.status());
    }
    std::printf(
        "match_prefix over a %zu-block chain (%zu held): %llu calls, p50 %.1f us, p99 %.1f us, "
        "p99.9 %.1f us\n"
        "one %s get, same connection: p50 %.1f us, p99 %.1f us "
        "(match_prefix p99 / get p99 = %.2f)\n",
        n, matched, (unsigned long long)count, hist.Quantile(0.5) / 1e3, hist.Quantile(0.99) / 1e3,
        hist.Quantile(0.999) / 1e3, FormatSize(get_bytes).c_str(), get_hist.Quantile(0.5) / 1e3,
        get_hist.Quantile(0.99) / 1e3,
        double(hist.Quantile(0.99)) / double(get_hist.Quantile(0.99)));
    std::printf("%s (spinning 1 s before the run)\n", noise.ToString().c_str());
    return matched == n ? 0 : 1;
  }
  if (args.empty()) return Usage(cmd + " needs a KEY");
  if (cmd == "put") {
    if (args.size() > 2) return Usage("put KEY [FILE]");
    std::vector<char> data;
    if (args.size() == 2) {
      std::ifstream f(args[1], std::ios::binary);
      if (!f) return Usage("cannot read " + args[1]);
      data.assign(std::istreambuf_iterator<char>(f), {});
    } else {
      data.assign(std::istreambuf_iterator<char>(std::cin), {});
    }
    Status s = c.Put(ParseKey(args[0]), std::as_bytes(std::span(data)),
                     PutOptions{.parent = {}, .overwrite = overwrite});
    if (!s.ok()) return report(s);
    std::fprintf(stderr, "stored %zu bytes under %s\n", data.size(),
                 ParseKey(args[0]).ToHex().c_str());
    return 0;
  }
  if (cmd == "get") {
    if (args.size() > 2) return Usage("get KEY [FILE]");
    std::vector<std::byte> buf(1 << 20);
    GetOp op;
    op.key = ParseKey(args[0]);
    for (int attempt = 0; attempt < 2; ++attempt) {  // once more if the buffer was small
      op.buffer = buf;
      Status s = c.GetBatch(std::span<GetOp>(&op, 1));
      if (!s.ok()) return report(s);
      if (op.status.code() != Code::kBufferTooSmall) break;
      buf.resize(op.size);
    }
    if (!op.status.ok()) return report(op.status);
    FILE* out = args.size() == 2 ? std::fopen(args[1].c_str(), "wb") : stdout;
    if (!out) return Usage("cannot write " + args[1]);
    std::fwrite(buf.data(), 1, op.size, out);
    if (out != stdout) std::fclose(out);
    return 0;
  }
  if (cmd == "del") {
    Status s = c.Erase(ParseKey(args[0]));
    return s.ok() ? 0 : report(s);
  }
  if (cmd == "exists") {
    std::vector<KeyOp> ops;
    for (const std::string& k : args) ops.push_back(KeyOp{ParseKey(k), {}});
    Status s = c.ExistsBatch(ops);
    if (!s.ok()) return report(s);
    int rc = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      std::printf("%s\t%s\n", args[i].c_str(), ops[i].status.ok() ? "held" : "missing");
      if (!ops[i].status.ok()) rc = 1;
    }
    return rc;
  }
  return Usage("unknown command " + cmd);
}

}  // namespace kvpool::tools
