// The engine on a real file through io_uring with O_DIRECT.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "io/uring_device.h"
#include "kvpool/store.h"
#include "store_testing.h"

namespace kvpool {
namespace {

using kvpool::testing::TestKey;
using kvpool::testing::TestValue;

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/kvpool-test-" + std::to_string(getpid()) + "-" + name;
}

TEST(UringDevice, ReadsBackWhatItWrote) {
  std::string path = TempPath("dev");
  auto dev = io::UringDevice::Open({path, 8 * kMiB, 32});
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  EXPECT_EQ((*dev)->size(), 8 * kMiB);
  void* w = std::aligned_alloc(4096, 64 * 4096);
  void* r = std::aligned_alloc(4096, 64 * 4096);
  for (int i = 0; i < 64 * 4096; ++i)
    static_cast<unsigned char*>(w)[i] = static_cast<unsigned char>(i * 7);
  std::vector<io::IoRequest> reqs;
  for (int i = 0; i < 64; ++i) {
    reqs.push_back({io::IoRequest::Op::kWrite,
                    uint64_t(i) * 16 * 4096,
                    static_cast<char*>(w) + i * 4096,
                    4096,
                    {}});
  }
  (*dev)->Submit(reqs);
  for (auto& q : reqs) ASSERT_TRUE(q.status.ok()) << q.status.ToString();
  for (auto& q : reqs) {
    q.op = io::IoRequest::Op::kRead;
    q.buf = static_cast<char*>(r) + (static_cast<char*>(q.buf) - static_cast<char*>(w));
  }
  (*dev)->Submit(reqs);
  for (auto& q : reqs) ASSERT_TRUE(q.status.ok());
  EXPECT_EQ(0, std::memcmp(w, r, 64 * 4096));
  // Misaligned and out-of-range requests are refused, one by one.
  EXPECT_EQ((*dev)->Read(1, r, 4096).code(), Code::kInvalidArgument);
  EXPECT_EQ((*dev)->Read(8 * kMiB, r, 4096).code(), Code::kInvalidArgument);
  std::free(w);
  std::free(r);
  unlink(path.c_str());
}

TEST(UringDevice, ClearErrors) {
  auto d = io::UringDevice::Open({"/nonexistent-dir/x", 1 * kMiB, 8});
  EXPECT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("/nonexistent-dir/x"), std::string_view::npos);
  EXPECT_FALSE(io::UringDevice::Open({"", 1 * kMiB, 8}).ok());
}

TEST(UringStore, BlocksSurviveTheTripThroughFlash) {
  std::string path = TempPath("store");
  StoreOptions o;
  o.dram_bytes = 8 * kMiB;
  o.flash_path = path;
  o.flash_bytes = 64 * kMiB;
  o.region_bytes = 1 * kMiB;
  o.max_value_bytes = 1 * kMiB;
  o.admission = Admission::kAll;
  auto opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto& s = *opened;
  constexpr int kN = 800;  // 800 x 64 KiB = 50 MiB: most on flash
  for (int i = 0; i < kN; ++i)
    ASSERT_TRUE(s->Put(TestKey(i), TestValue(TestKey(i), 0, 65536 - 100)).ok());
  s->Quiesce();
  std::vector<std::byte> out(65536);
  int hits = 0;
  for (int i = 0; i < kN; i += 2) {
    auto r = s->Get(TestKey(i), out);
    if (!r.ok()) continue;
    ++hits;
    auto want = TestValue(TestKey(i), 0, 65536 - 100);
    ASSERT_EQ(*r, want.size());
    ASSERT_EQ(0, std::memcmp(out.data(), want.data(), want.size())) << i;
  }
  StoreStats st = s->GetStats();
  EXPECT_GT(hits, 250);
  EXPECT_GT(st.flash.hits, 200u);
  EXPECT_EQ(st.crc_failures, 0u);
  EXPECT_EQ(st.io_errors, 0u);
  // Write amplification: flash bytes written = demoted, compacted and reinserted blocks x
  // their rounded size; compaction moved fewer blocks than were demoted.
  EXPECT_EQ(st.flash.bytes_written - st.flash_summary_bytes,
            (st.demotions + st.flash_compacted + st.flash_reinserted) * 65536);
  EXPECT_LE(st.flash_compacted, st.demotions);
  s.reset();
  EXPECT_TRUE(std::filesystem::exists(path));
  unlink(path.c_str());
}

}  // namespace
}  // namespace kvpool
