// The policy tuner on workloads whose best reuse bonus is known by construction: one where
// a block's past uses predict nothing (any bonus keeps dead blocks), one where scans pass
// between the uses of a hot set (only a bonus keeps it), and a change from one to the
// other. Then the tuner inside the store: it learns, and the store beats its fixed LRU.
#include "engine/policy_tuner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/tiered_store.h"
#include "io/memory_device.h"
#include "store_testing.h"

namespace kvpool::engine {
namespace {

constexpr uint64_t kPages = 4096;  // a simulated DRAM of 4096 one-page blocks (R = 1)

BlockKey Key(uint64_t i) { return testing::TestKey(i + 1); }

// Hot blocks (an eighth of DRAM) each used once per round, with a scan of one-off blocks
// (1.5 DRAM-fulls) between rounds: LRU loses every hot block, a bonus keeps them.
void HotSetBetweenScans(PolicyTuner& t, uint64_t rounds, uint64_t* next_key) {
  const uint64_t hot = kPages / 8, scan = kPages * 3 / 2;
  for (uint64_t r = 0; r < rounds; ++r) {
    for (uint64_t h = 0; h < hot; ++h) {
      BlockKey k = Key(h);
      t.Chain(std::span<const BlockKey>(&k, 1));
    }
    for (uint64_t s = 0; s < scan; ++s) {
      BlockKey k = Key(1'000'000 + (*next_key)++);
      t.Chain(std::span<const BlockKey>(&k, 1));
    }
  }
}

// Every other block is used four times in a burst and never again; the rest are used
// again once, a quarter of a DRAM-full of new blocks later. LRU keeps every one of those;
// a large bonus keeps the dead bursts instead.
void BurstsThenRecency(PolicyTuner& t, uint64_t steps, uint64_t* next_key) {
  std::vector<BlockKey> pending;
  size_t head = 0;
  for (uint64_t i = 0; i < steps; ++i) {
    BlockKey k = Key(1'000'000 + (*next_key)++);
    uint64_t n = (i % 2 == 0) ? 4 : 1;
    for (uint64_t u = 0; u < n; ++u) t.Chain(std::span<const BlockKey>(&k, 1));
    if (n == 1) pending.push_back(k);
    if (pending.size() - head > kPages / 8) {  // reused once, 1024 new blocks later
      t.Chain(std::span<const BlockKey>(&pending[head++], 1));
    }
  }
}

TEST(PolicyTuner, StartsAsLruAndSamplesEveryKeyOfASmallTier) {
  PolicyTuner t(kPages, 4 * kPages, 0.0);
  EXPECT_EQ(t.bonus(), 0.0);
  EXPECT_EQ(t.sample_rate(), 1u);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(t.Sampled(Key(i)));
  PolicyTuner big(1ull << 24, 1ull << 26, 0.0);  // 64 GiB: 1 in 256 keys
  EXPECT_EQ(big.sample_rate(), 256u);
  int sampled = 0;
  for (int i = 0; i < 100000; ++i) sampled += big.Sampled(Key(i));
  EXPECT_GT(sampled, 100000 / 256 / 2);
  EXPECT_LT(sampled, 100000 / 256 * 2);
}

TEST(PolicyTuner, LearnsABonusWhenScansPassBetweenUses) {
  PolicyTuner t(kPages, 4 * kPages, 0.0);
  uint64_t next = 0;
  HotSetBetweenScans(t, 40, &next);
  EXPECT_GT(t.epochs(), 5u);
  EXPECT_GE(t.bonus(), 0.5) << "the hot set needs a use to outlive 1.5 DRAM-fulls";
}

TEST(PolicyTuner, StaysNearLruWhenPastUsesPredictNothing) {
  PolicyTuner t(kPages, 4 * kPages, 0.0);
  uint64_t next = 0;
  BurstsThenRecency(t, 60000, &next);
  EXPECT_GT(t.epochs(), 5u);
  EXPECT_LE(t.bonus(), 0.125);
}

TEST(PolicyTuner, FollowsAPhaseChange) {
  PolicyTuner t(kPages, 4 * kPages, 0.0);
  uint64_t next = 0;
  HotSetBetweenScans(t, 40, &next);
  ASSERT_GE(t.bonus(), 0.5);
  BurstsThenRecency(t, 120000, &next);
  // 0.25 still keeps every block the second workload reuses (the dead bursts take under
  // two thirds of DRAM), so the tuner may stop there; anything larger loses hits.
  EXPECT_LE(t.bonus(), 0.25) << "after the change a large bonus only keeps dead blocks";
}

TEST(PolicyTuner, PerKeyAccessesWithoutChains) {
  // A store that only sees gets and puts (no prefix matches) learns from those.
  PolicyTuner t(kPages, 4 * kPages, 0.0);
  const uint64_t hot = kPages / 8, scan = kPages * 3 / 2;
  uint64_t next = 0;
  for (int r = 0; r < 40; ++r) {
    for (uint64_t h = 0; h < hot; ++h) {
      t.Access(Key(h), 1, /*put=*/false);
      t.Access(Key(h), 1, /*put=*/true);  // a miss is recomputed and put
    }
    for (uint64_t s = 0; s < scan; ++s) t.Access(Key(1'000'000 + next++), 1, true);
  }
  EXPECT_GE(t.bonus(), 0.5);
}

// Flash admission of one-hit blocks, learnt by the two-tier simulations (a DRAM of kPages
// and a flash of twice that). Every block is put once and read once more 3/4 of a
// DRAM-full of puts later: by then it has left DRAM's probation (at most half of DRAM)
// unused, and only a flash that took it still holds it.
constexpr uint64_t kFlash = 2 * kPages;
void ReadOnceLater(PolicyTuner& t, uint64_t steps, uint64_t* next_key) {
  const uint64_t later = kPages * 3 / 4;
  for (uint64_t i = 0; i < steps; ++i) {
    uint64_t n = (*next_key)++;
    BlockKey k = Key(2'000'000 + n);
    t.Chain(std::span<const BlockKey>(&k, 1));
    if (n >= later) {
      BlockKey old = Key(2'000'000 + n - later);
      t.Chain(std::span<const BlockKey>(&old, 1));
    }
  }
}

// Unlike HotSetBetweenScans (a hot set that fits DRAM), a hot set of 2 DRAM-fulls needs
// the flash, which the scans of one-off blocks (3 DRAM-fulls) flush when admitted.
void HotSetOnFlashBetweenScans(PolicyTuner& t, uint64_t rounds, uint64_t* next_key) {
  const uint64_t hot = 2 * kPages, scan = 3 * kPages;
  for (uint64_t r = 0; r < rounds; ++r) {
    for (uint64_t h = 0; h < hot + scan; ++h) {
      BlockKey k = h < hot ? Key(h) : Key(1'000'000 + (*next_key)++);
      t.Chain(std::span<const BlockKey>(&k, 1));
    }
  }
}

TEST(PolicyTuner, DropsOneHitBlocksWhenTheyPushAHotSetOffFlash) {
  PolicyTuner t(kPages, 4 * kPages, 0.0, /*flash_pages=*/kFlash, /*probation=*/0.1);
  EXPECT_TRUE(t.admit_one_hit()) << "it starts by admitting";
  uint64_t next = 0;
  HotSetOnFlashBetweenScans(t, 12, &next);
  EXPECT_FALSE(t.admit_one_hit());
}

TEST(PolicyTuner, AdmitsOneHitBlocksAgainWhenTheyAreReadOnFlash) {
  PolicyTuner t(kPages, 4 * kPages, 0.0, /*flash_pages=*/kFlash, /*probation=*/0.1);
  uint64_t next = 0;
  HotSetOnFlashBetweenScans(t, 12, &next);
  ASSERT_FALSE(t.admit_one_hit());
  ReadOnceLater(t, 60000, &next);
  EXPECT_TRUE(t.admit_one_hit()) << "every block is read once more, from flash";
}

// The probation share. Every new block is read once more 0.3 DRAM-fulls of new blocks
// later, and the flash (an eighth of DRAM) is too small to hold it that long: only a
// probation of a quarter or half of DRAM still has it.
TEST(PolicyTuner, LearnsALongerProbationWhenNewBlocksAreReadSoonAfter) {
  PolicyTuner t(kPages, 4 * kPages, 0.0, /*flash_pages=*/kPages / 8, /*probation=*/0.02);
  EXPECT_EQ(t.probation(), 0.02);
  const uint64_t later = kPages * 3 / 10;
  for (uint64_t n = 0; n < 60000; ++n) {
    BlockKey k = Key(1'000'000 + n);
    t.Chain(std::span<const BlockKey>(&k, 1));
    if (n >= later) {
      BlockKey old = Key(1'000'000 + n - later);
      t.Chain(std::span<const BlockKey>(&old, 1));
    }
  }
  EXPECT_GE(t.probation(), 0.25);
}

// A working set of 1.5 DRAM-fulls read in a loop: every flash hit is promoted and every
// promotion demotes a block, while the flash never overflows (nothing is popped from its
// FIFO). Stale FIFO entries are dropped as they pile up.
TEST(PolicyTuner, TheTwoTierFifosStayBounded) {
  PolicyTuner t(kPages, 4 * kPages, 0.0, /*flash_pages=*/kFlash, /*probation=*/0.1);
  const uint64_t set = kPages * 3 / 2;
  for (uint64_t i = 0; i < 200'000; ++i) {
    BlockKey k = Key(i % set);
    t.Chain(std::span<const BlockKey>(&k, 1));
  }
  // Ten simulations (eight for one-hit admission, two for promotion), each holding at most
  // 1.5 DRAM-fulls in DRAM and flash together.
  EXPECT_LT(t.TierFifoEntries(), 10 * (3 * set + 2048));
}

// Promotion of flash hits. Conversations taken in turn, each turn matching the
// conversation's whole chain and adding two blocks, until it is 48 blocks long and a new
// one takes its place; the 250 open at once hold about half of DRAM + flash. A chain read
// on flash is read again a whole round later: by then its promoted copy has left DRAM
// again, having taken room the chains between needed, so more of them go to the log and
// more are pushed off its end. Left on flash (and reinserted once read), they all stay.
void Conversations(PolicyTuner& t, uint64_t turns, uint64_t* next_key) {
  constexpr size_t kOpen = 250, kMax = 48;
  std::vector<std::vector<BlockKey>> open(kOpen);
  for (uint64_t i = 0; i < turns; ++i) {
    std::vector<BlockKey>& c = open[i % kOpen];
    if (c.size() >= kMax) c.clear();
    for (int b = 0; b < 2; ++b) c.push_back(Key(4'000'000 + (*next_key)++));
    t.Chain(c);
  }
}

TEST(PolicyTuner, LeavesFlashHitsWhereTheyLieWhenCopiesCostTheRoom) {
  PolicyTuner t(kPages, 4 * kPages, 0.0, /*flash_pages=*/kFlash, /*probation=*/0.1);
  EXPECT_TRUE(t.promote_all()) << "it starts by promoting every hit";
  uint64_t next = 0;
  Conversations(t, 10000, &next);
  EXPECT_FALSE(t.promote_all());
}

TEST(PolicyTuner, WithoutFlashEverythingIsAdmitted) {
  PolicyTuner t(kPages, 4 * kPages, 0.0);
  uint64_t next = 0;
  HotSetBetweenScans(t, 10, &next);
  EXPECT_TRUE(t.admit_one_hit());
}

// The store with the default (learnt) bonus against the same store with LRU, on the
// hot-set-between-scans workload through its own API: the learnt one keeps the hot set.
uint64_t HotSetHits(double reuse_bonus, StoreStats* stats) {
  StoreOptions o = testing::SmallOptions(4 * kMiB);  // 1024 pages
  o.admission = Admission::kAll;
  o.reuse_bonus = reuse_bonus;
  auto store = std::move(TieredStore::Open(o, nullptr)).value();
  std::vector<std::byte> value(4096, std::byte{7});
  const uint64_t hot = 128, scan = 1536;
  uint64_t next = 0, hits = 0;
  for (int r = 0; r < 60; ++r) {
    for (uint64_t h = 0; h < hot + scan; ++h) {
      BlockKey k = h < hot ? Key(h) : Key(1'000'000 + next++);
      if (store->MatchPrefix(std::span<const BlockKey>(&k, 1)).value() == 1) {
        ++hits;
      } else {
        EXPECT_TRUE(store->Put(k, value, {}).ok());
      }
    }
  }
  *stats = store->GetStats();
  return hits;
}

TEST(PolicyTuner, TheStoreLearnsAndBeatsLru) {
  StoreStats learnt, lru;
  uint64_t learnt_hits = HotSetHits(StoreOptions::kReuseBonusAuto, &learnt);
  uint64_t lru_hits = HotSetHits(0, &lru);
  EXPECT_GT(learnt.policy_epochs, 5u);
  EXPECT_GE(learnt.reuse_bonus_dram_fulls, 0.5);
  EXPECT_EQ(lru.policy_epochs, 0u);
  EXPECT_EQ(lru.reuse_bonus_dram_fulls, 0.0);
  EXPECT_EQ(lru_hits, 0u) << "LRU loses the hot set to every scan";
  EXPECT_GT(learnt_hits, 128u * 30) << "learnt: the hot set hits in most rounds";
}

// The store with flash, on a hot set that needs the flash between scans of one-off
// blocks: it learns to drop blocks leaving probation unused once its flash is full, and
// then holds more of the hot set than in its early rounds (a store that kept writing them
// found 890 of the 1536 in every round).
TEST(PolicyTuner, TheStoreWithFlashLearnsToDropOneHitBlocks) {
  StoreOptions o = testing::SmallOptions(4 * kMiB);  // 1024 pages of DRAM
  o.flash_writes_per_day = 0;                        // no budget: only the tuner refuses
  auto store = testing::OpenStore(o, std::make_unique<io::MemoryDevice>(6 * kMiB));
  ASSERT_NE(store, nullptr);
  std::vector<std::byte> value(4096, std::byte{7});
  const uint64_t hot = 1536, scan = 2048;
  uint64_t next = 0, first_hits = 0, last_hits = 0;
  const int kRounds = 16;
  for (int r = 0; r < kRounds; ++r) {
    for (uint64_t h = 0; h < hot + scan; ++h) {
      BlockKey k = h < hot ? Key(h) : Key(1'000'000 + next++);
      if (store->MatchPrefix(std::span<const BlockKey>(&k, 1)).value() == 1) {
        if (r == 2) ++first_hits;
        if (r == kRounds - 1) ++last_hits;
      } else {
        ASSERT_TRUE(store->Put(k, value, {}).ok());
      }
    }
  }
  StoreStats st = store->GetStats();
  EXPECT_FALSE(st.unused_to_flash) << st.ToString();
  EXPECT_GT(st.admission_drops, scan) << st.ToString();
  EXPECT_GT(last_hits, first_hits + hot / 8) << "first " << first_hits << " last " << last_hits;
}

// The store on the conversations above, through its own API (DRAM of 1024 pages, flash of
// twice that, 64 conversations open; gets for half of them, views for the others, as
// kvpoold reads): it learns to leave a flash hit in the newer half of the log where it
// lies, and every get and view still returns the bytes that were put.
TEST(PolicyTuner, TheStoreLearnsToLeaveYoungFlashHitsOnFlash) {
  StoreOptions o = testing::SmallOptions(4 * kMiB);
  o.flash_writes_per_day = 0;
  auto store = testing::OpenStore(o, std::make_unique<io::MemoryDevice>(8 * kMiB));
  ASSERT_NE(store, nullptr);
  auto value_of = [](const BlockKey& k) {
    return std::vector<std::byte>(4096, static_cast<std::byte>(k.lo * 31 + 7));
  };
  std::vector<std::vector<BlockKey>> open(64);
  std::vector<std::byte> buf(4096);
  uint64_t next = 0, hits = 0, wrong = 0;
  for (uint64_t i = 0; i < 6000; ++i) {
    std::vector<BlockKey>& c = open[i % open.size()];
    if (c.size() >= 48) c.clear();
    for (int b = 0; b < 2; ++b) c.push_back(Key(4'000'000 + next++));
    size_t matched = store->MatchPrefix(c).value();
    for (size_t j = 0; j < c.size(); ++j) {
      if (j < matched && i % 2 == 0) {
        Result<size_t> got = store->Get(c[j], buf);
        if (got.ok()) {
          ++hits;
          wrong += buf != value_of(c[j]);
          continue;
        }
      } else if (j < matched) {
        Result<BlockView> view = store->Read(c[j]);
        if (view.ok()) {
          ++hits;
          std::vector<std::byte> want = value_of(c[j]);
          wrong += !std::equal(view->data().begin(), view->data().end(), want.begin(), want.end());
          continue;
        }
      }
      Status put = store->Put(c[j], value_of(c[j]), {});
      ASSERT_TRUE(put.ok() || put.code() == Code::kExists) << put.ToString();
    }
  }
  StoreStats st = store->GetStats();
  EXPECT_FALSE(st.promote_all_flash_hits) << st.ToString();
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(hits, 6000u * 10);
  EXPECT_GT(st.flash_hits_in_place, 1000u) << st.ToString();
}

}  // namespace
}  // namespace kvpool::engine
