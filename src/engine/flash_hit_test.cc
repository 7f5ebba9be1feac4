// A flash hit read as a view (issue 18 item 3): one index lookup to find the block, one
// to publish its promotion, no heap allocation, and the view is the promoted DRAM record
// itself (pinned), not a copy.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

#include "engine/index.h"
#include "engine/tiered_store.h"
#include "io/memory_device.h"
#include "store_testing.h"

// Counts operator new on a thread while a test asks (replaces the global one for the test
// binary; off, it only reads a thread-local flag). Not under a sanitizer, whose own
// operator new (the variants not replaced here) must pair with its own delete.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVPOOL_COUNT_NEW 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVPOOL_COUNT_NEW 0
#endif
#endif
#ifndef KVPOOL_COUNT_NEW
#define KVPOOL_COUNT_NEW 1
#endif

namespace {
thread_local bool counting = false;
thread_local uint64_t news = 0;
}  // namespace

#if KVPOOL_COUNT_NEW
void* operator new(std::size_t n) {
  if (counting) ++news;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace kvpool::engine {
namespace {

using testing::OpenStore;
using testing::SmallOptions;
using testing::TestKey;
using testing::TestValue;

TEST(FlashHit, OneLookupToFindNoAllocationAndTheViewIsThePromotedRecord) {
  Index::Shard::CountFinds(true);
  StoreOptions o = SmallOptions(4 * kMiB);
  o.admission = Admission::kAll;
  // A fixed policy: the tuner queues the accesses of its sampled keys (one in many), which
  // may grow its queue; the read path itself allocates nothing.
  o.reuse_bonus = 0.6;
  auto s = OpenStore(o, std::make_unique<io::MemoryDevice>(32 * kMiB));
  ASSERT_TRUE(s);
  constexpr size_t kSize = 64 * 1024;
  for (uint64_t k = 0; k < 200; ++k)
    ASSERT_TRUE(s->Put(TestKey(k), TestValue(TestKey(k), 1, kSize)).ok());
  std::vector<uint64_t> on_flash, in_dram;
  for (const HeldBlock& b : s->ListBlocks(1000))
    (b.in_dram ? in_dram : on_flash).push_back(b.key.lo - 1);
  ASSERT_GE(on_flash.size(), 4u);
  // Room in DRAM, so that a promotion evicts nothing (eviction's lookups are not the read's).
  for (uint64_t k : in_dram) ASSERT_TRUE(s->Erase(TestKey(k)).ok());
  {
    auto warm = s->Read(TestKey(on_flash[0]));  // the thread's scratch, sized once
    ASSERT_TRUE(warm.ok());
  }
  uint64_t key = on_flash[1];
  uint64_t finds0 = Index::Shard::finds_on_this_thread();
  counting = true;
  news = 0;
  auto view = s->Read(TestKey(key));
  counting = false;
  uint64_t finds = Index::Shard::finds_on_this_thread() - finds0;
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(finds, 2u) << "one lookup to find the block, one to publish its promotion";
  if (KVPOOL_COUNT_NEW) EXPECT_EQ(news, 0u) << "heap allocations in a flash hit";
  auto want = TestValue(TestKey(key), 1, kSize);
  ASSERT_EQ(view->data().size(), kSize);
  EXPECT_EQ(0, std::memcmp(view->data().data(), want.data(), kSize));
  // The view's bytes are the DRAM record the block was promoted into.
  std::span<std::byte> dram = s->DramMemory();
  EXPECT_GE(view->data().data(), dram.data());
  EXPECT_LT(view->data().data(), dram.data() + dram.size());
  // Now a DRAM hit: one lookup, still no allocation, the same bytes.
  BlockView v = std::move(*view);
  finds0 = Index::Shard::finds_on_this_thread();
  counting = true;
  news = 0;
  auto again = s->Read(TestKey(key));
  counting = false;
  EXPECT_EQ(Index::Shard::finds_on_this_thread() - finds0, 1u);
  if (KVPOOL_COUNT_NEW) EXPECT_EQ(news, 0u);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data().data(), v.data().data());
  StoreStats st = s->GetStats();
  EXPECT_EQ(st.flash.hits, 2u);
  EXPECT_EQ(st.promotions, 2u);
  Index::Shard::CountFinds(false);
  // Erased while viewed: the view's bytes stay until it goes.
  ASSERT_TRUE(s->Erase(TestKey(key)).ok());
  EXPECT_EQ(0, std::memcmp(v.data().data(), want.data(), kSize));
}

TEST(FlashHit, ABatchOfViewsMixesTiersAndMisses) {
  StoreOptions o = SmallOptions(4 * kMiB);
  o.admission = Admission::kAll;
  auto s = OpenStore(o, std::make_unique<io::MemoryDevice>(32 * kMiB));
  ASSERT_TRUE(s);
  for (uint64_t k = 0; k < 120; ++k)
    ASSERT_TRUE(s->Put(TestKey(k), TestValue(TestKey(k), 1, 40000)).ok());
  for (size_t n : {3u, 20u}) {  // inline and heap-held batches
    std::vector<BlockKey> keys;
    for (size_t i = 0; i < n; ++i) keys.push_back(TestKey(i % 2 ? 1000 + i : (i * 37) % 120));
    std::vector<Result<BlockView>> out;
    for (size_t i = 0; i < n; ++i) out.emplace_back(Status::Internal("unset"));
    (void)s->ReadBatch(keys, out);
    for (size_t i = 0; i < n; ++i) {
      if (i % 2) {
        EXPECT_TRUE(out[i].status().IsNotFound()) << i;
        continue;
      }
      ASSERT_TRUE(out[i].ok()) << i << " " << out[i].status().ToString();
      auto want = TestValue(keys[i], 1, 40000);
      ASSERT_EQ(out[i]->data().size(), want.size());
      EXPECT_EQ(0, std::memcmp(out[i]->data().data(), want.data(), want.size())) << i;
    }
  }
}

}  // namespace
}  // namespace kvpool::engine
