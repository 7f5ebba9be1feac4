// Randomized tests of the engine against a reference model: a map of what was put, plus
// the rule that a cache may forget but never invent. With capacity to spare the model is
// exact (nothing may be forgotten); under pressure every answer must be the latest value
// put or a miss. Several threads interleave put/get/erase/prefetch on shared keys.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "store_testing.h"

namespace kvpool::engine {
namespace {

using kvpool::testing::OpenStore;
using kvpool::testing::SmallOptions;
using kvpool::testing::TestKey;
using kvpool::testing::TestValue;

size_t SizeOf(uint64_t key, uint32_t version) {
  return 512 + (key * 7919 + version * 104729) % 40000;
}

struct ModelCase {
  uint64_t dram, flash;
  Admission admission;
  bool exact;  // capacity holds everything: no forgetting allowed
};

class StoreModelTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(StoreModelTest, SingleThreadAgainstMap) {
  const ModelCase& mc = GetParam();
  StoreOptions o = SmallOptions(mc.dram);
  o.admission = mc.admission;
  std::unique_ptr<io::Device> dev;
  if (mc.flash) dev = std::make_unique<io::MemoryDevice>(mc.flash);
  auto s = OpenStore(o, std::move(dev));
  ASSERT_TRUE(s);
  std::map<uint64_t, uint32_t> model;  // key -> version held
  std::mt19937_64 rng(mc.dram + mc.flash);
  std::vector<std::byte> out(64 * 1024);
  const uint64_t kKeys = mc.exact ? 150 : 3000;
  for (int step = 0; step < 20000; ++step) {
    uint64_t id = rng() % kKeys;
    BlockKey k = TestKey(id);
    auto it = model.find(id);
    switch (rng() % 10) {
      case 0:
      case 1:
      case 2: {  // put (insert-only, or overwrite with a new version)
        bool overwrite = rng() % 4 == 0;
        uint32_t ver = it == model.end() ? 0 : it->second + (overwrite ? 1 : 0);
        PutOptions po;
        po.overwrite = overwrite;
        Status st = s->Put(k, TestValue(k, ver, SizeOf(id, ver)), po);
        if (st.ok()) {
          model[id] = ver;
        } else {
          ASSERT_EQ(st.code(), Code::kExists) << st.ToString();
          ASSERT_FALSE(overwrite);
          if (mc.exact) ASSERT_NE(it, model.end());
        }
        break;
      }
      case 3: {
        Status st = s->Erase(k);
        if (mc.exact) ASSERT_EQ(st.ok(), it != model.end());
        model.erase(id);
        break;
      }
      case 4: {
        bool e = s->Exists(k);
        if (it == model.end()) ASSERT_FALSE(e) << "invented key " << id;
        if (mc.exact && it != model.end()) ASSERT_TRUE(e);
        break;
      }
      case 5: {
        BlockKey one[1] = {k};
        s->Prefetch(one);
        break;
      }
      default: {
        auto r = s->Get(k, out);
        if (it == model.end()) {
          ASSERT_TRUE(r.status().IsNotFound()) << "invented key " << id;
          break;
        }
        if (!r.ok()) {
          ASSERT_TRUE(r.status().IsNotFound()) << r.status().ToString();
          ASSERT_FALSE(mc.exact) << "forgot key " << id << " with room to spare";
          model.erase(id);  // forgotten: the model forgets too
          break;
        }
        auto want = TestValue(k, it->second, SizeOf(id, it->second));
        ASSERT_EQ(*r, want.size());
        ASSERT_EQ(0, std::memcmp(out.data(), want.data(), want.size())) << "wrong data " << id;
      }
    }
  }
  StoreStats st = s->GetStats();
  EXPECT_EQ(st.crc_failures, 0u);
  if (!mc.exact) EXPECT_GT(st.dram.evictions, 0u);
}

INSTANTIATE_TEST_SUITE_P(Configs, StoreModelTest,
                         ::testing::Values(ModelCase{16 * kMiB, 0, Admission::kProbation, true},
                                           ModelCase{8 * kMiB, 0, Admission::kProbation, false},
                                           ModelCase{4 * kMiB, 16 * kMiB, Admission::kAll, false},
                                           ModelCase{4 * kMiB, 16 * kMiB, Admission::kProbation,
                                                     false},
                                           ModelCase{4 * kMiB, 64 * kMiB, Admission::kAll, false}));

// Threads share one key space. Values are a function of (key, version); versions only
// grow, so a reader may see any version it or another thread wrote, or a miss, but never
// bytes that match no version (torn, stale-region, or another key's data).
TEST(StoreConcurrency, ManyThreadsNeverSeeWrongData) {
  for (bool mover : {false, true}) {
    StoreOptions o = SmallOptions(6 * kMiB, mover);
    o.admission = Admission::kAll;
    auto s = OpenStore(o, std::make_unique<io::MemoryDevice>(24 * kMiB));
    ASSERT_TRUE(s);
    constexpr int kThreads = 4, kKeys = 800, kSteps = 6000;
    std::atomic<int> wrong{0}, hits{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        std::mt19937_64 rng(t * 1000 + mover);
        std::vector<std::byte> out(64 * 1024);
        for (int step = 0; step < kSteps; ++step) {
          uint64_t id = rng() % kKeys;
          BlockKey k = TestKey(id);
          int op = static_cast<int>(rng() % 10);
          if (op < 3) {
            uint32_t ver = static_cast<uint32_t>(rng() % 4);
            PutOptions po;
            po.overwrite = rng() % 2;
            (void)s->Put(k, TestValue(k, ver, SizeOf(id, ver)), po);
          } else if (op == 3) {
            (void)s->Erase(k);
          } else if (op == 4) {
            std::vector<BlockKey> ks = {k, TestKey((id + 1) % kKeys)};
            s->Prefetch(ks);
          } else {
            auto r = s->Get(k, out);
            if (!r.ok()) continue;
            bool match = false;
            for (uint32_t ver = 0; ver < 4 && !match; ++ver) {
              auto want = TestValue(k, ver, SizeOf(id, ver));
              match = *r == want.size() && !std::memcmp(out.data(), want.data(), want.size());
            }
            if (!match) {
              ++wrong;
              std::string who = "none";
              for (uint64_t j = 0; j < kKeys; ++j) {
                for (uint32_t ver = 0; ver < 4; ++ver) {
                  auto want = TestValue(TestKey(j), ver, SizeOf(j, ver));
                  if (*r == want.size() && !std::memcmp(out.data(), want.data(), 64)) {
                    who = std::to_string(j) + "v" + std::to_string(ver);
                  }
                }
              }
              ADD_FAILURE() << "key " << id << " got " << *r << " bytes; first bytes match " << who;
            }
            ++hits;
          }
        }
      });
    }
    for (auto& th : ts) th.join();
    EXPECT_EQ(wrong.load(), 0) << "mover=" << mover;
    EXPECT_GT(hits.load(), 1000);
    StoreStats st = s->GetStats();
    EXPECT_EQ(st.crc_failures, 0u);
    EXPECT_GT(st.demotions, 0u);
  }
}

}  // namespace
}  // namespace kvpool::engine
