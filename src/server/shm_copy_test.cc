#include "server/shm_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "common/crc32c.h"
#include "server/io_workers.h"

namespace kvpool::server {
namespace {

std::vector<std::byte> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

// Split or not, with helpers or without: the bytes arrive exactly, the right CRC is
// accepted and a wrong one refused (the server then answers a miss, never wrong data).
TEST(ShmCopy, CopiesExactlyAndChecksTheCrcOnEveryPath) {
  IoWorkers helpers(2);
  for (size_t n : {size_t{0}, size_t{1000}, kSplitCopyBytes - 1, kSplitCopyBytes,
                   kSplitCopyBytes + 4097, size_t{3} << 20}) {
    auto src = Random(n, n);
    uint32_t crc = Crc32c(src.data(), n);
    for (IoWorkers* h : {static_cast<IoWorkers*>(nullptr), &helpers}) {
      std::vector<std::byte> dst(n + 1, std::byte{0x5A});
      EXPECT_TRUE(CopyVerified(dst.data(), src, crc, h)) << n;
      EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << n;
      EXPECT_EQ(dst[n], std::byte{0x5A}) << n;  // nothing past the end
      EXPECT_FALSE(CopyVerified(dst.data(), src, crc ^ 1, h)) << n;
    }
  }
}

// Every helper busy (a long task each): the caller copies the second half itself instead
// of waiting, and the helpers later find the half taken and leave it alone.
TEST(ShmCopy, BusyHelpersDoNotDelayTheCopy) {
  IoWorkers helpers(1);
  std::atomic<bool> release{false};
  helpers.Submit([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  auto src = Random(2 << 20, 7);
  std::vector<std::byte> dst(src.size());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(CopyVerified(dst.data(), src, Crc32c(src.data(), src.size()), &helpers));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(dst, src);
  std::fill(dst.begin(), dst.end(), std::byte{0});
  release = true;
  helpers.Stop();  // runs the queued half: it must not write into dst any more
  EXPECT_EQ(dst, std::vector<std::byte>(src.size()));
  EXPECT_LT(took, std::chrono::seconds(2));
}

// Many concurrent split copies sharing two helpers (as reactors would): all exact.
TEST(ShmCopy, ConcurrentSplitCopiesShareTheHelpers) {
  IoWorkers helpers(2);
  auto src = Random(1 << 20, 3);
  uint32_t crc = Crc32c(src.data(), src.size());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      std::vector<std::byte> dst(src.size());
      for (int i = 0; i < 20; ++i) {
        std::fill(dst.begin(), dst.end(), std::byte{0});
        if (!CopyVerified(dst.data(), src, crc, &helpers) || dst != src) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace kvpool::server
