// kvpool replay on the real trace (a prefix of it), and the trace parser.
#include "replay.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "trace.h"

namespace kvpool::tools {
namespace {

TEST(Trace, ParsesMooncakeLines) {
  auto r = ParseTraceLine(
      R"({"timestamp": 27, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->timestamp_ms, 27u);
  EXPECT_EQ(r->input_length, 6758u);
  EXPECT_EQ(r->output_length, 500u);
  EXPECT_EQ(r->hash_ids, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_TRUE(ParseTraceLine(R"({"hash_ids": [], "extra": 5})").ok());
}

TEST(Trace, RejectsMalformedLinesWithReasons) {
  for (const char* bad :
       {"", "{", "[1]", R"({"hash_ids": [1,}")", R"({"hash_ids": [-1]})", R"({"timestamp": 1})",
        R"({"hash_ids": [1]} x)", R"({"a\"": 1})", R"({"hash_ids": "x"})"}) {
    auto r = ParseTraceLine(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(Lru, CountsLeadingHitsOnly) {
  std::vector<TraceRequest> t(3);
  t[0].hash_ids = {1, 2, 3};
  t[1].hash_ids = {1, 2, 9};  // 2 leading hits
  t[2].hash_ids = {7, 1, 2};  // 0 leading hits even though 1 and 2 are held
  for (auto& r : t) r.input_length = 3 * 512;
  uint64_t saved;
  EXPECT_EQ(LruPrefixHits(t, 100, &saved, 512), 2u);
  EXPECT_EQ(saved, 1024u);
  EXPECT_EQ(LruPrefixHits(t, 1, &saved, 512), 0u);
}

TEST(Replay, RealTracePrefixReturnsOnlyRightData) {
  auto trace = LoadTrace(std::string(KVPOOL_SOURCE_DIR) + "/data/conversation_trace.jsonl", 2500);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  ASSERT_EQ(trace->size(), 2500u);
  ReplayOptions o;
  o.block_bytes = 8192;
  o.flash_path = "/tmp/kvpool-replay-test-" + std::to_string(getpid());
  size_t calls = 0;
  auto res = RunReplay(*trace, o, [&](size_t done, size_t total, const ReplayResult&) {
    ++calls;
    EXPECT_LE(done, total);
  });
  unlink(o.flash_path.c_str());
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->wrong_data, 0u);
  EXPECT_EQ(res->requests, 2500u);
  EXPECT_GT(calls, 50u);
  EXPECT_GT(res->prefix_hit_ratio(), 0.05);
  EXPECT_GT(res->lru_prefix_hit_ratio(), 0.03);
  EXPECT_EQ(res->dram_hits + res->flash_hits, res->prefix_hits);
  EXPECT_GT(res->stats.flash.bytes_written, 0u);
  std::string table = ReplayTable(*res, o);
  EXPECT_NE(table.find("prefix hit ratio"), std::string::npos);
  EXPECT_NE(ReplayJson(*res, o).find("\"prefix_hit_ratio\":"), std::string::npos);
}

}  // namespace
}  // namespace kvpool::tools
