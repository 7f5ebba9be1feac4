// kvpool replay on the real trace (a prefix of it), and the trace parser.
#include "workload/replay.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <unordered_map>
#include <unordered_set>

#include "workload/gen_trace.h"
#include "workload/trace.h"

namespace kvpool::workload {
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

TEST(Lru, IsOfferedOnlyTheFullBlocksTheStoreIsOffered) {
  // Each request's last block is partial (input 2.2 blocks): the store never holds it, so a
  // like-for-like LRU must not either; the repeated request hits its two full blocks only.
  std::vector<TraceRequest> t(2);
  for (auto& r : t) {
    r.hash_ids = {1, 2, 3};
    r.input_length = 2 * 512 + 100;
  }
  uint64_t saved;
  EXPECT_EQ(LruPrefixHits(t, 100, &saved, 512), 2u);
  EXPECT_EQ(OfflinePrefixHits(t, 100, &saved, 512), 2u);
  t[1].input_length = 3 * 512;  // when the same ids are full in both, the third is reused
  t[0].input_length = 3 * 512;
  EXPECT_EQ(LruPrefixHits(t, 100, &saved, 512), 3u);
}

TEST(Offline, EvictsTheBlockUsedFarthestAhead) {
  // Capacity 2; references 1 2 3 1 2 (one block per request). LRU evicts 1 for 3, then 2 for
  // 1, then 3 for 2: 0 hits. Farthest-next-use does not admit 3 (never used again): 2 hits.
  std::vector<TraceRequest> t;
  for (uint64_t id : {1, 2, 3, 1, 2}) {
    TraceRequest r;
    r.hash_ids = {id};
    r.input_length = 512;
    t.push_back(r);
  }
  uint64_t saved;
  EXPECT_EQ(LruPrefixHits(t, 2, &saved, 512), 0u);
  EXPECT_EQ(OfflinePrefixHits(t, 2, &saved, 512), 2u);
  EXPECT_EQ(saved, 1024u);
  EXPECT_EQ(OfflinePrefixHits(t, 0, &saved, 512), 0u);
}

TEST(Offline, BoundsLruOnTheRealTrace) {
  auto trace = LoadTrace(std::string(KVPOOL_SOURCE_DIR) + "/data/conversation_trace.jsonl", 3000);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  for (uint64_t cap : {200, 2000}) {
    uint64_t a, b;
    uint64_t lru = LruPrefixHits(*trace, cap, &a, 512);
    uint64_t off = OfflinePrefixHits(*trace, cap, &b, 512);
    EXPECT_GT(off, lru) << cap;
  }
}

TEST(Trace, BadFilesAreErrorsNamingThePath) {
  std::string dir = ::testing::TempDir() + "/kvpool-trace-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  auto write = [&](const std::string& name, const std::string& text) {
    std::string p = dir + "/" + name;
    std::ofstream(p) << text;
    return p;
  };
  auto is = [](const Result<std::vector<TraceRequest>>& r, const std::string& part) {
    return !r.ok() && r.status().message().find(part) != std::string_view::npos;
  };
  EXPECT_TRUE(is(LoadTrace(dir), "is a directory"));
  std::string empty = write("empty.jsonl", "");
  EXPECT_TRUE(is(LoadTrace(empty), empty + ": no requests"));
  std::string blank = write("blank.jsonl", "\n  \n");
  EXPECT_TRUE(is(LoadTrace(blank), "no requests"));
  std::string bad = write("bad.jsonl",
                          "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, "
                          "\"hash_ids\": [1, 2]}\n"
                          "{\"timestamp\": 1, \"input_length\": 1025, \"output_length\": 1, "
                          "\"hash_ids\": [1, 2]}\n");
  auto r = LoadTrace(bad);
  EXPECT_TRUE(is(r, bad + ":2: input_length 1025 needs 3 blocks")) << r.status().ToString();
  EXPECT_TRUE(LoadTrace(bad, 1).ok()) << "the first line alone is consistent";
  EXPECT_TRUE(LoadTrace(bad, 0, 0).ok()) << "unchecked with tokens_per_block 0";
  std::string huge = write("huge.jsonl",
                           "{\"timestamp\": 0, \"input_length\": 18446744073709551615, "
                           "\"output_length\": 1, \"hash_ids\": [1]}\n");
  EXPECT_TRUE(is(LoadTrace(huge), "needs 36028797018963968 blocks")) << "no overflow";
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(GenTrace, EveryFamilyIsSeededConsistentAndShapedAsNamed) {
  std::string dir = ::testing::TempDir() + "/kvpool-gen-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  for (const std::string& f : TraceFamilies()) {
    GenOptions o;
    o.family = f;
    o.requests = 1200;
    auto a = GenerateTrace(o), b = GenerateTrace(o);
    ASSERT_TRUE(a.ok() && b.ok()) << f;
    ASSERT_EQ(a->size(), 1200u) << f;
    o.seed = 2;
    auto c = GenerateTrace(o);
    ASSERT_TRUE(c.ok());
    bool same = true, other = false;
    for (size_t i = 0; i < a->size(); ++i) {
      same = same && (*a)[i].hash_ids == (*b)[i].hash_ids &&
             (*a)[i].input_length == (*b)[i].input_length;
      other = other || (*a)[i].hash_ids != (*c)[i].hash_ids;
    }
    EXPECT_TRUE(same) << f << ": the same seed gives the same trace";
    EXPECT_TRUE(other) << f << ": another seed another";
    // Written out, it loads under the consistency rule (input_length vs hash ids).
    std::string path = dir + "/" + f + ".jsonl";
    {
      std::ofstream out(path);
      for (const auto& r : *a) out << TraceLine(r) << "\n";
    }
    auto back = LoadTrace(path);
    ASSERT_TRUE(back.ok()) << f << ": " << back.status().ToString();
    ASSERT_EQ(back->size(), a->size());
    uint64_t refs = 0, last_ts = 0;
    std::unordered_map<uint64_t, int> seen;
    for (const auto& r : *back) {
      EXPECT_GE(r.timestamp_ms, last_ts) << f;
      last_ts = r.timestamp_ms;
      refs += r.hash_ids.size();
      for (uint64_t id : r.hash_ids) ++seen[id];
    }
    const double distinct_share = double(seen.size()) / double(refs);
    if (f == "rag") EXPECT_GT(distinct_share, 0.6) << "scan-heavy";
    if (f == "shared" || f == "zipf") EXPECT_LT(distinct_share, 0.5) << f << ": popular prefixes";
    if (f == "chat" || f == "agent") EXPECT_LT(distinct_share, 0.5) << f << ": contexts resent";
  }
  // phase: the second half shares no block with the first.
  GenOptions o;
  o.family = "phase";
  o.requests = 1000;
  auto p = GenerateTrace(o);
  ASSERT_TRUE(p.ok());
  std::unordered_set<uint64_t> first;
  for (size_t i = 0; i < 500; ++i) first.insert((*p)[i].hash_ids.begin(), (*p)[i].hash_ids.end());
  for (size_t i = 500; i < 1000; ++i)
    for (uint64_t id : (*p)[i].hash_ids) ASSERT_EQ(first.count(id), 0u);
  // chat: a continued session's next turn starts with the whole previous context.
  o.family = "chat";
  auto chat = GenerateTrace(o);
  ASSERT_TRUE(chat.ok());
  size_t extended = 0;
  for (size_t i = 0; i < chat->size(); ++i)
    for (size_t j = i + 1; j < chat->size() && j < i + 200; ++j) {
      const auto& x = (*chat)[i].hash_ids;
      const auto& y = (*chat)[j].hash_ids;
      if (y.size() > x.size() && std::equal(x.begin(), x.end(), y.begin())) {
        ++extended;
        break;
      }
    }
  EXPECT_GT(extended, chat->size() / 2);
  o.family = "nope";
  auto bad = GenerateTrace(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("chat, shared"), std::string_view::npos);
  std::system(("rm -rf '" + dir + "'").c_str());
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
  // Again over the file the first replay left: it starts cold (the same keys found there
  // would be hits no store could have had).
  auto again = RunReplay(*trace, o);
  unlink(o.flash_path.c_str());
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->stats.flash_restored, 0u);
  EXPECT_LT(again->prefix_hit_ratio(), res->prefix_hit_ratio() + 0.02);
  EXPECT_EQ(res->wrong_data, 0u);
  EXPECT_EQ(res->requests, 2500u);
  EXPECT_GT(calls, 50u);
  EXPECT_GT(res->prefix_hit_ratio(), 0.05);
  EXPECT_GT(res->lru_prefix_hit_ratio(), 0.03);
  EXPECT_EQ(res->dram_hits + res->flash_hits, res->prefix_hits);
  EXPECT_GT(res->stats.flash.bytes_written, 0u);
  // Both tiers fill; some DRAM is kept free for puts and promotions.
  EXPECT_GT(res->dram_fill, 0.5);
  EXPECT_LT(res->dram_fill, 1.0);
  EXPECT_GT(res->flash_fill, 0.5);
  EXPECT_LE(res->flash_fill, 1.0);
  std::string table = ReplayTable(*res, o);
  EXPECT_NE(table.find("prefix hit ratio"), std::string::npos);
  EXPECT_NE(table.find("flash held"), std::string::npos);
  EXPECT_NE(ReplayJson(*res, o).find("\"prefix_hit_ratio\":"), std::string::npos);
  EXPECT_NE(ReplayJson(*res, o).find("\"flash_fill\":"), std::string::npos);
  // What the policy tuner chose, at the end: in the table and the JSON.
  EXPECT_NE(table.find("probation share at the end"), std::string::npos);
  EXPECT_NE(table.find("unused blocks to flash at the end"), std::string::npos);
  EXPECT_GT(res->stats.probation_share, 0.0);
  EXPECT_NE(ReplayJson(*res, o).find("\"probation_share\":"), std::string::npos);
  EXPECT_NE(ReplayJson(*res, o).find("\"unused_to_flash\":"), std::string::npos);
  EXPECT_NE(table.find("flash hits promoted at the end"), std::string::npos);
  EXPECT_NE(ReplayJson(*res, o).find("\"promote_all_flash_hits\":"), std::string::npos);
  EXPECT_NE(table.find("moved on reclaim"), std::string::npos);
  EXPECT_NE(ReplayJson(*res, o).find("\"flash_reinserted\":"), std::string::npos);

  // DRAM only: evicting 1/256 of the blocks at a time keeps it all but full.
  o.flash_path.clear();
  auto dram_only = RunReplay(*trace, o);
  ASSERT_TRUE(dram_only.ok()) << dram_only.status().ToString();
  EXPECT_EQ(dram_only->wrong_data, 0u);
  EXPECT_GT(dram_only->dram_fill, 0.98);
  EXPECT_EQ(dram_only->flash_fill, 0.0);
  EXPECT_EQ(ReplayTable(*dram_only, o).find("flash held"), std::string::npos);
}

}  // namespace
}  // namespace kvpool::workload
