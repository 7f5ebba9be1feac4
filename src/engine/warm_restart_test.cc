// Issue 16 item 6: the flash tier survives a restart. A store reopened over the same
// device finds its blocks (index rebuilt from region summaries, no data read); a key
// erased or overwritten before a crash never comes back with old bytes; a crash at any
// write (torn or not) loses blocks at worst, never returns wrong bytes.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "crash_device.h"
#include "engine/tiered_store.h"
#include "io/memory_device.h"
#include "store_testing.h"

namespace kvpool::engine {
namespace {

using testing::CrashDevice;
using testing::OpenStore;
using testing::SharedDevice;
using testing::SmallOptions;
using testing::TestKey;
using testing::TestValue;

constexpr uint64_t kFlash = 16 * kMiB;

StoreOptions RestartOptions() {
  StoreOptions o = SmallOptions(4 * kMiB);
  o.max_value_bytes = 256 * kKiB;
  o.admission = Admission::kAll;  // every block leaving DRAM is written: a full log
  return o;
}

size_t SizeOf(uint64_t key, uint32_t version) {
  return 4096 + ((key * 7919 + version * 104729) % 24) * 4096 - (key % 3) * 100;
}

// Values are (key, version); version 0 = absent.
using Model = std::map<uint64_t, uint32_t>;

// Reads every key of the model (and `extra` absent ones); wrong bytes fail the test.
// Returns how many of the model's present keys were readable.
size_t CheckAgainst(Store& s, const Model& model, const std::vector<uint64_t>& gone) {
  std::vector<std::byte> out(256 * kKiB);
  size_t readable = 0;
  for (const auto& [k, v] : model) {
    auto r = s.Get(TestKey(k), out);
    if (!r.ok()) {
      EXPECT_TRUE(r.status().IsNotFound()) << r.status().ToString();
      continue;
    }
    auto want = TestValue(TestKey(k), v, SizeOf(k, v));
    EXPECT_EQ(*r, want.size()) << "key " << k;
    EXPECT_EQ(0, std::memcmp(out.data(), want.data(), want.size())) << "wrong bytes, key " << k;
    ++readable;
  }
  for (uint64_t k : gone) {
    EXPECT_FALSE(s.Get(TestKey(k), out).ok()) << "erased key " << k << " came back";
  }
  return readable;
}

TEST(WarmRestart, CleanCloseKeepsEveryBlockAcrossTwoRestarts) {
  auto mem = std::make_shared<io::MemoryDevice>(kFlash);
  Model model;
  std::vector<uint64_t> gone;
  {
    auto s = OpenStore(RestartOptions(), std::make_unique<SharedDevice>(mem));
    ASSERT_TRUE(s);
    for (uint64_t k = 0; k < 260; ++k) {  // ~13 MiB: more than DRAM, less than flash
      ASSERT_TRUE(s->Put(TestKey(k), TestValue(TestKey(k), 1, SizeOf(k, 1))).ok());
      model[k] = 1;
    }
    EXPECT_EQ(CheckAgainst(*s, model, gone), model.size());
    EXPECT_GT(s->GetStats().demotions, 50u);
  }
  {
    auto s = OpenStore(RestartOptions(), std::make_unique<SharedDevice>(mem));
    ASSERT_TRUE(s);
    StoreStats st = s->GetStats();
    EXPECT_EQ(st.flash_restored, model.size()) << "every block held at close is found";
    EXPECT_EQ(st.flash_regions_dropped, 0u);
    EXPECT_EQ(CheckAgainst(*s, model, gone), model.size());
    st = s->GetStats();
    EXPECT_EQ(st.crc_failures + st.io_errors + st.stale_races, 0u)
        << st.crc_failures << " " << st.io_errors << " " << st.stale_races;
    // Life goes on: erase some, overwrite some, add some.
    std::mt19937 rng(3);
    std::vector<uint64_t> keys;
    for (const auto& [k, v] : model) keys.push_back(k);
    for (size_t i = 0; i < keys.size(); i += 4) {
      ASSERT_TRUE(s->Erase(TestKey(keys[i])).ok());
      model.erase(keys[i]);
      gone.push_back(keys[i]);
    }
    for (size_t i = 1; i < keys.size(); i += 4) {
      PutOptions ow;
      ow.overwrite = true;
      ASSERT_TRUE(
          s->Put(TestKey(keys[i]), TestValue(TestKey(keys[i]), 2, SizeOf(keys[i], 2)), ow).ok());
      model[keys[i]] = 2;
    }
    for (uint64_t k = 1000; k < 1040; ++k) {
      ASSERT_TRUE(s->Put(TestKey(k), TestValue(TestKey(k), 1, SizeOf(k, 1))).ok());
      model[k] = 1;
    }
    EXPECT_EQ(CheckAgainst(*s, model, gone), model.size());
  }
  auto s = OpenStore(RestartOptions(), std::make_unique<SharedDevice>(mem));
  ASSERT_TRUE(s);
  size_t found = CheckAgainst(*s, model, gone);
  EXPECT_GE(found * 100, model.size() * 99) << found << " of " << model.size();
}

TEST(WarmRestart, RestoreOffStartsEmptyAndForgetsTheOldBlocks) {
  auto mem = std::make_shared<io::MemoryDevice>(kFlash);
  {
    auto s = OpenStore(RestartOptions(), std::make_unique<SharedDevice>(mem));
    for (uint64_t k = 0; k < 50; ++k) {
      ASSERT_TRUE(s->Put(TestKey(k), TestValue(TestKey(k), 1, SizeOf(k, 1))).ok());
    }
  }
  StoreOptions o = RestartOptions();
  o.flash_restore = false;
  {
    auto s = OpenStore(o, std::make_unique<SharedDevice>(mem));
    EXPECT_EQ(s->GetStats().flash_restored, 0u);
    EXPECT_FALSE(s->Exists(TestKey(3)));
  }
  // The format is new: even a store that restores does not see the blocks of before.
  auto s = OpenStore(RestartOptions(), std::make_unique<SharedDevice>(mem));
  EXPECT_FALSE(s->Exists(TestKey(3)));
}

// A deterministic workload; a crash (every later write fails) at write `crash_at`.
// Returns the model before and after the operation during which the crash happened:
// after a restart each key must read as one of the two (or be a miss).
struct CrashRun {
  Model before, after;
  bool crashed = false;
  uint64_t writes = 0;
};

CrashRun RunWorkload(std::shared_ptr<io::Device> mem, int64_t crash_at, bool torn) {
  CrashRun run;
  // The crash device outlives the store (its state is read after the close).
  auto crash_dev = std::make_shared<CrashDevice>(mem, crash_at, torn);
  CrashDevice* crash = crash_dev.get();
  auto dev = std::make_unique<SharedDevice>(crash_dev);
  StoreOptions o = RestartOptions();
  o.dram_bytes = 4 * kMiB;
  o.max_value_bytes = 128 * kKiB;
  auto opened = engine::TieredStore::Open(o, std::move(dev));
  if (!opened.ok()) {  // the crash hit the format itself
    run.crashed = crash->crashed();
    return run;
  }
  std::unique_ptr<Store> s = std::move(opened).value();
  std::mt19937 rng(11);
  Model model;
  for (int op = 0; op < 700 && !crash->crashed(); ++op) {
    Model prev = model;
    uint64_t k = rng() % 160;
    int what = static_cast<int>(rng() % 10);
    if (what < 6) {  // put: new, or overwrite with the next version
      uint32_t v = model.count(k) ? model[k] + 1 : 1;
      PutOptions po;
      po.overwrite = true;
      Status st = s->Put(TestKey(k), TestValue(TestKey(k), v, SizeOf(k, v) % (128 * kKiB)), po);
      if (st.ok()) model[k] = v;
    } else if (what < 8) {
      (void)s->Erase(TestKey(k));
      model.erase(k);
    } else {
      std::vector<std::byte> out(128 * kKiB);
      (void)s->Get(TestKey(k), out);
    }
    if (crash->crashed()) {
      run.before = prev;
      run.after = model;
      run.crashed = true;
    }
  }
  if (!run.crashed) run.before = run.after = model;
  s.reset();  // a close: the dead process's (every write fails), or one the crash hits
  run.crashed = crash->crashed();
  run.writes = crash->writes();
  return run;
}

TEST(WarmRestart, CrashAtEveryWriteLosesBlocksNeverReturnsWrongOrErasedBytes) {
  // A dry run counts the writes; then a crash at each (a stride of them if many),
  // alternately torn (first page only) and lost whole.
  uint64_t total = RunWorkload(std::make_shared<io::MemoryDevice>(8 * kMiB), -1, false).writes;
  ASSERT_GT(total, 200u);
  uint64_t stride = std::max<uint64_t>(1, total / 160);
  size_t points = 0, found_total = 0, present_total = 0;
  for (uint64_t at = 0; at < total; at += stride) {
    auto mem = std::make_shared<io::MemoryDevice>(8 * kMiB);
    CrashRun run = RunWorkload(mem, static_cast<int64_t>(at), (at / stride) % 2 == 1);
    ASSERT_TRUE(run.crashed) << at;
    auto s = OpenStore(RestartOptions(), std::make_unique<SharedDevice>(mem));
    ASSERT_TRUE(s) << "reopen after a crash at write " << at;
    std::vector<std::byte> out(256 * kKiB);
    for (uint64_t k = 0; k < 160; ++k) {
      auto r = s->Get(TestKey(k), out);
      bool in_before = run.before.count(k), in_after = run.after.count(k);
      if (in_before || in_after) ++present_total;
      if (!r.ok()) continue;
      ++found_total;
      bool ok = false;
      for (const Model* m : {&run.before, &run.after}) {
        auto it = m->find(k);
        if (it == m->end()) continue;
        auto want = TestValue(TestKey(k), it->second, SizeOf(k, it->second) % (128 * kKiB));
        ok |= *r == want.size() && std::memcmp(out.data(), want.data(), want.size()) == 0;
      }
      ASSERT_TRUE(ok) << "crash at write " << at << ": key " << k
                      << (in_before || in_after ? " returned bytes of a superseded version"
                                                : " erased before the crash came back");
    }
    ++points;
  }
  EXPECT_GE(points, 100u);
  // Not everything is lost either: the sealed regions come back.
  EXPECT_GT(found_total * 4, present_total) << found_total << " of " << present_total;
}

}  // namespace
}  // namespace kvpool::engine
