// Helpers for engine tests: small stores over memory or faulty devices, and values whose
// bytes are a function of (key, version), so any returned value can be checked.
#ifndef KVPOOL_TESTING_STORE_TESTING_H_
#define KVPOOL_TESTING_STORE_TESTING_H_

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "engine/tiered_store.h"
#include "io/memory_device.h"

namespace kvpool::testing {

inline StoreOptions SmallOptions(uint64_t dram = 8 * kMiB, bool mover = false) {
  StoreOptions o;
  o.dram_bytes = dram;
  o.region_bytes = 256 * kKiB;
  o.max_value_bytes = dram / 2;
  o.index_capacity = 1024;
  o.index_shards = 8;
  o.background_mover = mover;
  o.huge_pages = false;
  return o;
}

// Through the public interface (Store), as callers see it.
inline std::unique_ptr<Store> OpenStore(const StoreOptions& o, std::unique_ptr<io::Device> dev) {
  auto s = engine::TieredStore::Open(o, std::move(dev));
  if (!s.ok()) {
    ADD_FAILURE() << "open: " << s.status().ToString();
    return nullptr;
  }
  return std::unique_ptr<Store>(std::move(s).value());
}

inline BlockKey TestKey(uint64_t i) {
  return BlockKey{(0x12345678ull ^ (i * 0x9E3779B97F4A7C15ull)) | 1, i + 1};
}

// Deterministic bytes for (key, version); size bytes long.
inline std::vector<std::byte> TestValue(const BlockKey& k, uint32_t version, size_t size) {
  std::vector<std::byte> v(size);
  uint64_t x = k.lo * 31 + k.hi + version * 0x100000001b3ull;
  for (size_t i = 0; i < size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, size - i));
  }
  return v;
}

}  // namespace kvpool::testing

#endif  // KVPOOL_TESTING_STORE_TESTING_H_
