// The DRAM tier's eviction order against a reference model: a list of linked records, each
// with its last use and past uses, and the rule "evict the lowest last use + bonus x uses;
// of equal ones the one placed last". Random links, uses, chain placements, unlinks and
// evictions (records are freed and reused, so stale heap entries meet reused ids).
#include "engine/dram_tier.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "store_testing.h"

namespace kvpool::engine {
namespace {

struct ModelRecord {
  uint64_t last = 0;
  uint8_t uses = 0;
  uint64_t seq = 0;
  uint32_t pages = 0;
};

class PolicyModel {
 public:
  PolicyModel(uint64_t total_pages, uint64_t bonus_pages)
      : total_pages_(total_pages), bonus_(bonus_pages) {}
  // A new record: no past uses.
  void Allocated(uint32_t id) { uses_[id] = 0; }
  // Linking keeps the record's past uses (a victim linked back, a record moving queues).
  void Link(uint32_t id, uint32_t pages) {
    linked_[id] = {clock_, uses_[id], ++seq_, pages};
    clock_ += pages;
    link_no_[id] = ++links_;
  }
  void Touch(uint32_t id) {
    ModelRecord& r = linked_.at(id);
    r.uses = uses_[id] = std::min<uint8_t>(r.uses + 1, 3);
    r.last = clock_;
  }
  void PlaceBehind(uint32_t id, uint32_t parent) {
    auto c = linked_.find(id), p = linked_.find(parent);
    if (c == linked_.end() || p == linked_.end() || id == parent) return;
    // The parent was used just now (within 1/16 of DRAM's linking), or linked within the
    // last 4096 links (a chain being stored, however long).
    bool used_now = c->second.last - p->second.last <= total_pages_ / 16 + 64;
    bool linked_now = links_ - link_no_[parent] <= 4096;
    if (p->second.last > c->second.last || (!used_now && !linked_now)) return;
    c->second.last = p->second.last;
    c->second.seq = ++seq_;
  }
  void Unlink(uint32_t id) { linked_.erase(id); }
  // The record the rule evicts next.
  uint32_t Victim() const {
    uint32_t best = kNoRecord;
    uint64_t best_key = 0, best_seq = 0;
    for (const auto& [id, r] : linked_) {
      uint64_t key = r.last + bonus_ * r.uses;
      if (best == kNoRecord || key < best_key || (key == best_key && r.seq > best_seq)) {
        best = id;
        best_key = key;
        best_seq = r.seq;
      }
    }
    return best;
  }
  bool linked(uint32_t id) const { return linked_.count(id) > 0; }
  size_t size() const { return linked_.size(); }

 private:
  const uint64_t total_pages_, bonus_;
  uint64_t clock_ = 0, seq_ = 0, links_ = 0;
  std::map<uint32_t, ModelRecord> linked_;
  std::map<uint32_t, uint64_t> link_no_;
  std::map<uint32_t, uint8_t> uses_;
};

void RunAgainstModel(double reuse_bonus, uint64_t seed) {
  StoreOptions o = testing::SmallOptions(4 * kMiB);
  o.admission = Admission::kAll;  // no probation queue: every record is in main
  o.reuse_bonus = reuse_bonus;
  auto created = DramTier::Create(o);
  ASSERT_TRUE(created.ok());
  DramTier& tier = **created;
  const uint64_t total_pages = o.dram_bytes / 4096;
  PolicyModel model(total_pages, static_cast<uint64_t>(reuse_bonus * total_pages));
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> live;  // allocated records, linked or not
  auto pick = [&] { return live[rng() % live.size()]; };
  int evictions = 0;
  for (int step = 0; step < 20000; ++step) {
    switch (rng() % 8) {
      case 0:
      case 1: {  // a new block, maybe placed behind a parent
        uint32_t pages = 1 + rng() % 4;
        uint32_t id = tier.Allocate(pages * 4096 - rng() % 4096);
        if (id == kNoRecord) break;  // full: the eviction case makes room
        uint32_t parent = live.empty() ? kNoRecord : pick();
        live.push_back(id);
        model.Allocated(id);
        tier.Link(id, /*main=*/false);
        model.Link(id, pages);
        if (parent != kNoRecord && rng() % 2) {
          tier.PlaceBehind(id, parent);
          model.PlaceBehind(id, parent);
        }
        break;
      }
      case 2:
      case 3: {  // a use
        if (live.empty()) break;
        uint32_t id = pick();
        if (!model.linked(id)) break;
        tier.Touch(id);
        model.Touch(id);
        break;
      }
      case 4: {  // leaves the queue (erased, or moving) and maybe comes back now
        if (live.empty()) break;
        uint32_t id = pick();
        tier.Unlink(id);
        model.Unlink(id);
        if (rng() % 2) {
          tier.Link(id, true);
          model.Link(id, tier.rec(id).pages);
        } else {
          live.erase(std::find(live.begin(), live.end(), id));
          tier.Free(id);
        }
        break;
      }
      default: {  // evict one and free it
        if (model.size() == 0) break;
        DramTier::Victim v;
        ASSERT_EQ(tier.PickVictims(1, &v), 1u) << "step " << step;
        ASSERT_EQ(v.id, model.Victim()) << "step " << step;
        model.Unlink(v.id);
        live.erase(std::find(live.begin(), live.end(), v.id));
        tier.Free(v.id);
        ++evictions;
        break;
      }
    }
  }
  EXPECT_GT(evictions, 3000);
}

TEST(DramTierPolicy, EvictsInTheModelsOrderWithReuseBonus) { RunAgainstModel(2.0, 1); }
TEST(DramTierPolicy, EvictsInTheModelsOrderAsLru) { RunAgainstModel(0.0, 2); }
TEST(DramTierPolicy, EvictsInTheModelsOrderWithSmallBonus) { RunAgainstModel(0.01, 3); }

TEST(DramTierPolicy, ABlockUsedAgainOutlivesNewerOneTimeBlocks) {
  StoreOptions o = testing::SmallOptions(4 * kMiB);
  o.admission = Admission::kAll;
  o.reuse_bonus = 1.0;  // one past use outlives a store-full (here DRAM only) of new blocks
  auto tier = std::move(DramTier::Create(o)).value();
  uint32_t hot = tier->Allocate(4096);
  tier->Link(hot, false);
  tier->Touch(hot);
  // A DRAM-full of one-time blocks linked after it all leave before it does.
  std::vector<uint32_t> cold;
  for (int i = 0; i < 1000; ++i) {
    uint32_t id = tier->Allocate(4096);
    ASSERT_NE(id, kNoRecord);
    tier->Link(id, false);
    cold.push_back(id);
  }
  for (size_t i = 0; i < cold.size(); ++i) {
    DramTier::Victim v;
    ASSERT_EQ(tier->PickVictims(1, &v), 1u);
    ASSERT_EQ(v.id, cold[i]) << i;  // the cold ones, oldest first
  }
  DramTier::Victim v;
  ASSERT_EQ(tier->PickVictims(1, &v), 1u);
  EXPECT_EQ(v.id, hot);
}

// Issue 16: a chain longer than 1/16 of DRAM, stored at once, was cut into segments whose
// recency grew along the chain, so the head segment left first and the rest of the chain
// stayed in DRAM unreachable. Stored at once, a chain of any length leaves leaf first.
TEST(DramTierPolicy, ALongChainStoredAtOnceLeavesLeafFirst) {
  StoreOptions o = testing::SmallOptions(4 * kMiB);  // 1024 pages: 1/16 is 64 pages
  o.admission = Admission::kAll;
  o.reuse_bonus = 0;
  auto tier = std::move(DramTier::Create(o)).value();
  std::vector<uint32_t> chain;
  for (int i = 0; i < 400; ++i) {  // 400 pages, six times the window in pages
    uint32_t id = tier->Allocate(4096);
    ASSERT_NE(id, kNoRecord);
    tier->Link(id, false);
    if (!chain.empty()) tier->PlaceBehind(id, chain.back());
    chain.push_back(id);
  }
  for (size_t i = 0; i < chain.size(); ++i) {
    DramTier::Victim v;
    ASSERT_EQ(tier->PickVictims(1, &v), 1u);
    ASSERT_EQ(v.id, chain[chain.size() - 1 - i]) << i;
  }
}

// Issue 16: a victim the read path could not evict (it had to be written first) was linked
// back as the newest block, so every flash hit looking for room made the DRAM's coldest
// blocks its hottest. Put back, it keeps its place: it is picked again first, in the main
// queue and in probation alike.
TEST(DramTierPolicy, AVictimPutBackKeepsItsPlace) {
  for (bool probation : {false, true}) {
    SCOPED_TRACE(probation ? "probation" : "main");
    StoreOptions o = testing::SmallOptions(4 * kMiB);
    o.admission = probation ? Admission::kProbation : Admission::kAll;
    o.reuse_bonus = 0;
    auto tier = std::move(DramTier::Create(o)).value();
    std::vector<uint32_t> ids;
    for (int i = 0; i < 8; ++i) {
      uint32_t id = tier->Allocate(4096);
      ASSERT_NE(id, kNoRecord);
      tier->Link(id, false);
      ids.push_back(id);
    }
    DramTier::Victim v[2];
    ASSERT_EQ(tier->PickVictims(2, v), 2u);
    ASSERT_EQ(v[0].id, ids[0]);
    ASSERT_EQ(v[1].id, ids[1]);
    EXPECT_EQ(v[0].from_probation, probation);
    tier->PutBack(v[1]);
    tier->PutBack(v[0]);
    DramTier::Victim again[2];
    ASSERT_EQ(tier->PickVictims(2, again), 2u);
    EXPECT_EQ(again[0].id, ids[0]);
    EXPECT_EQ(again[1].id, ids[1]);
    if (probation) continue;  // (below its share, probation is not drawn from first)
    // Linked back instead, the same victim becomes the newest: the others leave first.
    tier->Link(again[0].id, true);
    tier->PutBack(again[1]);
    DramTier::Victim next;
    ASSERT_EQ(tier->PickVictims(1, &next), 1u);
    EXPECT_EQ(next.id, ids[1]);
    tier->Link(next.id, true);
    ASSERT_EQ(tier->PickVictims(1, &next), 1u);
    EXPECT_EQ(next.id, ids[2]);
  }
}

// The policy tuner moves the probation queue's share while the store runs: above its
// share probation gives the victims, below it main does.
TEST(DramTierPolicy, TheProbationShareCanChange) {
  StoreOptions o = testing::SmallOptions(4 * kMiB);  // 1024 pages
  o.admission = Admission::kProbation;
  o.probation_fraction = 0.02;  // 20 pages
  auto tier = std::move(DramTier::Create(o)).value();
  for (int i = 0; i < 40; ++i) {
    uint32_t id = tier->Allocate(4096);
    ASSERT_NE(id, kNoRecord);
    tier->Link(id, /*main=*/i < 8);
  }
  DramTier::Victim v;
  ASSERT_EQ(tier->PickVictims(1, &v), 1u);
  EXPECT_TRUE(v.from_probation) << "32 pages in probation, over its 20";
  tier->SetProbation(0.5);
  ASSERT_EQ(tier->PickVictims(1, &v), 1u);
  EXPECT_FALSE(v.from_probation) << "31 pages, under its 512";
  tier->SetProbation(0.01);
  ASSERT_EQ(tier->PickVictims(1, &v), 1u);
  EXPECT_TRUE(v.from_probation);
}

TEST(DramTierPolicy, GhostsRememberPastUses) {
  StoreOptions o = testing::SmallOptions(4 * kMiB);
  auto tier = std::move(DramTier::Create(o)).value();
  BlockKey a = testing::TestKey(1), b = testing::TestKey(2), c = testing::TestKey(3);
  tier->GhostInsert(a, 2);
  tier->GhostInsert(b);
  tier->GhostInsert(c, 9);
  EXPECT_EQ(tier->GhostUses(a), 2);
  EXPECT_EQ(tier->GhostUses(b), 0);
  EXPECT_EQ(tier->GhostUses(c), DramTier::kMaxUses);
  EXPECT_EQ(tier->GhostUses(testing::TestKey(4)), -1);
  // Like a FIFO of its size: every ghost of the last capacity() - 4*ways inserts is still
  // there (a direct-mapped table had lost a quarter of them), and one older than
  // capacity() inserts is forgotten.
  const uint64_t cap = tier->ghost_capacity();
  const uint64_t recent = cap / 2;
  for (uint64_t i = 0; i < cap; ++i) tier->GhostInsert(testing::TestKey(1000 + i), 1);
  size_t kept = 0;
  for (uint64_t i = cap - recent; i < cap; ++i)
    kept += tier->GhostUses(testing::TestKey(1000 + i)) == 1;
  EXPECT_GE(kept, recent * 97 / 100) << "of the " << recent << " latest";
  EXPECT_EQ(tier->GhostUses(a), -1);
  EXPECT_EQ(tier->GhostUses(b), -1);
}

}  // namespace
}  // namespace kvpool::engine
