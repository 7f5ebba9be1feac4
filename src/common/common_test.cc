#include <gtest/gtest.h>
#include <unistd.h>

#include <random>
#include <set>
#include <vector>

#include "common/crc32c.h"
#include "common/proc_stat.h"
#include "common/histogram.h"
#include "kvpool/key.h"
#include "kvpool/status.h"

namespace kvpool {
namespace {

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  std::vector<unsigned char> ones(32, 0xFF);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::mt19937 rng(1);
  std::vector<unsigned char> buf(10000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t cut : {0u, 1u, 7u, 4096u, 9999u}) {
    uint32_t a = Crc32cExtend(Crc32c(buf.data(), cut), buf.data() + cut, buf.size() - cut);
    EXPECT_EQ(a, Crc32c(buf.data(), buf.size())) << cut;
  }
}

// Combining the CRCs of two parts equals the CRC of the whole, for any split (empty parts,
// odd lengths, parts of megabytes).
TEST(Crc32c, CombineEqualsWhole) {
  std::mt19937_64 rng(9);
  std::vector<unsigned char> buf(3 << 20);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  std::vector<std::pair<size_t, size_t>> cases = {
      {0, 0}, {0, 5}, {5, 0}, {1, 1}, {1 << 20, 1 << 20}};
  for (int i = 0; i < 200; ++i) {
    size_t n = rng() % buf.size(), cut = n ? rng() % n : 0;
    cases.push_back({cut, n - cut});
  }
  for (auto [a, b] : cases) {
    uint32_t whole = Crc32c(buf.data(), a + b);
    EXPECT_EQ(Crc32cCombine(Crc32c(buf.data(), a), Crc32c(buf.data() + a, b), b), whole)
        << a << " + " << b;
  }
}

// /proc stat fields by their proc(5) numbers, for this very process and its threads.
TEST(ProcStat, ReadsThisProcessAndItsThreads) {
  ProcStat self = ProcStat::OfProcess(::getpid());
  ASSERT_FALSE(self.empty());
  EXPECT_EQ(self.Number(1), ::getpid());
  EXPECT_EQ(self.Field(2), "kvpool_tests");
  EXPECT_EQ(self.Field(3), "R");  // this thread, reading it
  EXPECT_EQ(self.Field(1000), "");
  EXPECT_GE(ProcStat::OfThreads(::getpid()).size(), 1u);
  EXPECT_TRUE(ProcStat::OfProcess(0).empty());  // no such /proc entry
}

TEST(Status, OkCarriesNothingAndErrorsCarryMessages) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.ToString(), "OK");
  Status e = Status::TooLarge("value of 9 bytes");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), Code::kTooLarge);
  EXPECT_EQ(e.ToString(), "TooLarge: value of 9 bytes");
  EXPECT_FALSE(e.retryable());
  EXPECT_TRUE(Status::Busy("x").retryable());
  Status copy = e;
  EXPECT_EQ(copy.message(), "value of 9 bytes");
  Result<int> r = Status::NotFound();
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotFound());
  Result<int> v = 7;
  EXPECT_EQ(*v, 7);
}

TEST(Keys, ChainIsDeterministicAndPrefixSensitive) {
  BlockKey root = NamespaceRoot("tenant/model");
  std::vector<uint32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<uint32_t> b = {1, 2, 3, 4, 9, 6, 7, 8};
  auto ka = ChainKeys(root, a, 4);
  auto kb = ChainKeys(root, b, 4);
  ASSERT_EQ(ka.size(), 2u);  // the trailing partial block gets no key
  ASSERT_EQ(kb.size(), 2u);
  EXPECT_EQ(ka[0], kb[0]);
  EXPECT_NE(ka[1], kb[1]);
  EXPECT_EQ(ka, ChainKeys(root, a, 4));
  EXPECT_EQ(ka[1], ChildKey(ka[0], std::span<const uint32_t>(a).subspan(4, 4)));
  // Same tokens under another namespace or another parent: another key.
  EXPECT_NE(ChainKeys(NamespaceRoot("other"), a, 4)[0], ka[0]);
  EXPECT_EQ(ka[0].ToHex().size(), 32u);
}

// Vectors computed by an independent implementation: Python's xxhash (Debian's
// python3-xxhash), with the snippet in docs/KEYS.md.
TEST(Keys, MatchIndependentImplementation) {
  BlockKey root = NamespaceRoot("tenant/model");
  EXPECT_EQ(root.ToHex(), "97b5dccff954db7cc82e820b08ab4790");
  std::vector<uint32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8};
  auto keys = ChainKeys(root, toks, 4);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].ToHex(), "6f381c1a2721312df6a4df20290648cf");
  EXPECT_EQ(keys[1].ToHex(), "87565f98d610bcfd2bc3a41e72be78dd");
}

TEST(Keys, NoCollisionsAmongManyChains) {
  BlockKey root = NamespaceRoot("t");
  std::set<BlockKey> seen;
  std::mt19937 rng(3);
  for (int c = 0; c < 2000; ++c) {
    std::vector<uint32_t> toks(64);
    for (auto& t : toks) t = rng() % 50;  // small alphabet: many shared prefixes
    for (const auto& k : ChainKeys(root, toks, 16)) seen.insert(k);
  }
  EXPECT_GT(seen.size(), 2000u);
  for (const auto& k : seen) EXPECT_FALSE(k.empty());
}

TEST(Histogram, QuantilesWithinBucketError) {
  Histogram h;
  for (uint64_t v = 1; v <= 100000; ++v) h.Record(v);
  EXPECT_EQ(h.Count(), 100000u);
  auto near = [](double got, double want) { return std::abs(got - want) / want < 0.07; };
  EXPECT_TRUE(near(static_cast<double>(h.Quantile(0.5)), 50000)) << h.Quantile(0.5);
  EXPECT_TRUE(near(static_cast<double>(h.Quantile(0.99)), 99000)) << h.Quantile(0.99);
  LatencySummary s = h.Summary();
  EXPECT_NEAR(s.max_us, 100.0, 0.001);
  EXPECT_NEAR(s.mean_us, 50.0005, 0.01);
  h.Reset();
  EXPECT_EQ(h.Quantile(0.5), 0u);
}

}  // namespace
}  // namespace kvpool
