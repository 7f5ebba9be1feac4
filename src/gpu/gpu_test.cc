// The GPU module: layouts (everywhere), and with a device the moves against a host model of
// each engine layout, the loader from a store, from kvpoold (TCP and the same-host region)
// and layer streaming. Without a device the device tests skip with the reason printed.
#include "kvpool/gpu.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include "daemon.h"
#include "kvpool/client.h"
#include "kvpool/gpu_loader.h"
#include "kvpool/near_cache.h"
#include "kvpool/store.h"

namespace kvpool::gpu {
namespace {

#define REQUIRE_GPU()                                                     \
  do {                                                                    \
    Status avail = Available();                                           \
    if (!avail.ok()) GTEST_SKIP() << "no GPU here: " << avail.ToString(); \
  } while (0)

std::vector<std::byte> Pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

TEST(GpuLayout, EngineLayoutsNameTheRightAddresses) {
  std::vector<uint64_t> layers = {0x10000, 0x90000};
  PagedLayout v = PagedLayout::Vllm(layers, 8, 0x1000);  // [2][8 blocks][4 KiB]
  ASSERT_TRUE(v.Validate().ok());
  EXPECT_EQ(v.layers(), 2u);
  EXPECT_EQ(v.parts(), 2u);
  EXPECT_EQ(v.v_bases[1], 0x90000u + 8 * 0x1000);
  EXPECT_EQ(v.HostBytes(2), 4u * 0x1000);

  PagedLayout c = PagedLayout::CrossLayer(0x100000, 4, 3, 0x200);  // [4][3][2][512 B]
  ASSERT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.slot_stride, 3u * 2 * 0x200);
  EXPECT_EQ(c.k_bases[2], 0x100000u + 4 * 0x200);
  EXPECT_EQ(c.v_bases[2], 0x100000u + 5 * 0x200);

  std::vector<uint64_t> k = {1 << 20}, vv = {2 << 20, 3 << 20};
  EXPECT_EQ(PagedLayout::Split(k, vv, 256, 4).Validate().code(), Code::kInvalidArgument);
  PagedLayout mla = PagedLayout::Split(k, {}, 256, 4);
  ASSERT_TRUE(mla.Validate().ok());
  EXPECT_EQ(mla.parts(), 1u);
  EXPECT_EQ(PagedLayout{}.Validate().code(), Code::kInvalidArgument);
}

TEST(GpuLayout, WithoutADeviceEveryCallSaysWhy) {
  if (Available().ok()) GTEST_SKIP() << "a GPU is present: " << DeviceInfo();
  std::vector<uint64_t> layers = {0x10000};
  auto m = Mover::Create(PagedLayout::Vllm(layers, 4, 4096));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kUnavailable);
  EXPECT_FALSE(m.status().message().empty());
  EXPECT_FALSE(PinnedBuffer::Create(4096).ok());
}

// A device allocation holding an engine's whole cache, zeroed.
struct DeviceMemory {
  void* p = nullptr;
  size_t n;
  explicit DeviceMemory(size_t bytes) : n(bytes) {
    EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, n), cudaSuccess);
  }
  ~DeviceMemory() { cudaFree(p); }
  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(p) + off; }
  std::vector<std::byte> Read() const {
    std::vector<std::byte> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// The device address of (layer, part, slot) per the layout, as offsets into one allocation.
size_t Offset(const PagedLayout& l, const DeviceMemory& m, uint32_t layer, uint32_t part,
              uint32_t slot) {
  uint64_t base = part == 0 ? l.k_bases[layer] : l.v_bases[layer];
  return base - m.addr() + uint64_t(slot) * l.slot_stride;
}

// Moves `nblocks` host blocks (some in pinned memory, some in ordinary memory) into
// scattered slots, checks every byte of the device memory against the model (the chunks
// where the layout says, zeros elsewhere), then moves them back out and compares.
void RoundTrip(const PagedLayout& l, DeviceMemory& mem, LayerRange range, size_t nblocks) {
  const uint32_t count = range.count ? range.count : l.layers() - range.first;
  const uint64_t bb = l.HostBytes(count);
  auto pinned = PinnedBuffer::Create(nblocks * bb);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  std::vector<std::vector<std::byte>> plain(nblocks);
  std::vector<HostBlock> blocks;
  std::vector<uint32_t> perm(l.num_slots);
  for (uint32_t i = 0; i < l.num_slots; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  for (size_t b = 0; b < nblocks; ++b) {
    auto data = Pattern(bb, b + 1);
    std::byte* at;
    if (b % 3 == 2) {  // every third block from unregistered memory: staged
      plain[b] = data;
      at = plain[b].data();
    } else {
      at = (*pinned)->data().data() + b * bb;
      std::memcpy(at, data.data(), bb);
    }
    blocks.push_back({at, perm[b]});
  }
  auto mover = Mover::Create(l);
  ASSERT_TRUE(mover.ok()) << mover.status().ToString();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_TRUE((*mover)->ToGpu(blocks, range, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ((*mover)->stats().staged_blocks, nblocks / 3);

  std::vector<std::byte> model(mem.n);  // zeros where nothing was moved
  for (size_t b = 0; b < nblocks; ++b) {
    auto data = Pattern(bb, b + 1);
    for (uint32_t li = 0; li < count; ++li)
      for (uint32_t p = 0; p < l.parts(); ++p)
        std::memcpy(model.data() + Offset(l, mem, range.first + li, p, blocks[b].slot),
                    data.data() + (uint64_t(li) * l.parts() + p) * l.chunk_bytes, l.chunk_bytes);
  }
  ASSERT_TRUE(mem.Read() == model) << "device memory differs from the layout's model";

  // Back out, into fresh memory (pinned and plain alike).
  std::vector<std::vector<std::byte>> back(nblocks, std::vector<std::byte>(bb));
  std::vector<HostBlock> out;
  for (size_t b = 0; b < nblocks; ++b) out.push_back({back[b].data(), blocks[b].slot});
  ASSERT_TRUE((*mover)->ToHost(out, range, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (size_t b = 0; b < nblocks; ++b) ASSERT_TRUE(back[b] == Pattern(bb, b + 1)) << "block " << b;
  cudaStreamDestroy(stream);
}

TEST(GpuMove, VllmLayoutScatteredBothWays) {
  REQUIRE_GPU();
  const uint32_t layers = 3, slots = 40;
  const uint64_t block = 16 * 2 * 128 * 2;  // 16 tokens, 2 heads, dim 128, bf16
  DeviceMemory mem(layers * 2 * slots * block);
  std::vector<uint64_t> ptrs;
  for (uint32_t l = 0; l < layers; ++l) ptrs.push_back(mem.addr(l * 2 * slots * block));
  RoundTrip(PagedLayout::Vllm(ptrs, slots, block), mem, {}, 25);
}

TEST(GpuMove, SglangSplitLayoutOneLayerAndOddSizes) {
  REQUIRE_GPU();
  const uint32_t layers = 4, pages = 16;
  const uint64_t page = 1000;  // not a multiple of 16: the byte-wise path
  DeviceMemory mem(layers * 2 * pages * page);
  std::vector<uint64_t> k, v;
  for (uint32_t l = 0; l < layers; ++l) {
    k.push_back(mem.addr(l * pages * page));
    v.push_back(mem.addr((layers + l) * pages * page));
  }
  PagedLayout lay = PagedLayout::Split(k, v, page, pages);
  RoundTrip(lay, mem, LayerRange{2, 1}, 9);
}

TEST(GpuMove, CrossLayerLayoutAndLargeChunks) {
  REQUIRE_GPU();
  const uint32_t layers = 2, slots = 6;
  const uint64_t chunk = 200 << 10;  // larger than one thread block's piece
  DeviceMemory mem(uint64_t(slots) * layers * 2 * chunk);
  RoundTrip(PagedLayout::CrossLayer(mem.addr(), slots, layers, chunk), mem, {}, 5);
}

// Whole blocks moved one layer at a time (as a layer-wise load does), registered and staged
// alike, then one layer moved back out into whole blocks: only that layer's bytes change.
TEST(GpuMove, WholeBlocksLayerByLayer) {
  REQUIRE_GPU();
  const uint32_t layers = 3, slots = 12;
  const uint64_t block = 4096;
  DeviceMemory mem(layers * 2 * slots * block);
  std::vector<uint64_t> ptrs;
  for (uint32_t l = 0; l < layers; ++l) ptrs.push_back(mem.addr(l * 2 * slots * block));
  PagedLayout lay = PagedLayout::Vllm(ptrs, slots, block);
  const uint64_t bb = lay.HostBytes(layers);
  auto pinned = PinnedBuffer::Create(4 * bb);
  ASSERT_TRUE(pinned.ok());
  std::vector<std::byte> plain = Pattern(bb, 99);
  std::vector<HostBlock> blocks;
  for (uint32_t b = 0; b < 4; ++b) {
    auto d = Pattern(bb, b);
    std::memcpy((*pinned)->data().data() + b * bb, d.data(), bb);
    blocks.push_back({(*pinned)->data().data() + b * bb, 2 * b + 1});
  }
  blocks.push_back({plain.data(), 10});  // unregistered: staged, only the layer's part
  auto mover = Mover::Create(lay);
  ASSERT_TRUE(mover.ok());
  for (uint32_t l = 0; l < layers; ++l)
    ASSERT_TRUE((*mover)->ToGpu(blocks, LayerRange{l, 1, true}, nullptr).ok()) << l;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto dev = mem.Read();
  for (size_t b = 0; b < blocks.size(); ++b)
    for (uint32_t l = 0; l < layers; ++l)
      for (uint32_t p = 0; p < 2; ++p)
        ASSERT_EQ(0, std::memcmp(dev.data() + Offset(lay, mem, l, p, blocks[b].slot),
                                 blocks[b].data + (l * 2 + p) * block, block))
            << "block " << b << " layer " << l << " part " << p;
  std::vector<std::vector<std::byte>> back(blocks.size(), std::vector<std::byte>(bb));
  std::vector<HostBlock> out;
  for (size_t b = 0; b < blocks.size(); ++b) out.push_back({back[b].data(), blocks[b].slot});
  ASSERT_TRUE((*mover)->ToHost(out, LayerRange{1, 1, true}, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (size_t b = 0; b < blocks.size(); ++b) {
    std::vector<std::byte> want(bb);
    std::memcpy(want.data() + 2 * block, blocks[b].data + 2 * block, 2 * block);
    EXPECT_TRUE(back[b] == want) << "block " << b << ": only layer 1 written";
  }
}

TEST(GpuMove, BadArgumentsAreRefused) {
  REQUIRE_GPU();
  DeviceMemory mem(2 * 4 * 4096);
  std::vector<uint64_t> ptrs = {mem.addr()};
  auto mover = Mover::Create(PagedLayout::Vllm(ptrs, 4, 4096));
  ASSERT_TRUE(mover.ok());
  std::vector<std::byte> buf(8192);
  HostBlock b{buf.data(), 4};  // slot 4 of 4
  EXPECT_EQ((*mover)->ToGpu({&b, 1}, {}, nullptr).code(), Code::kInvalidArgument);
  b.slot = 0;
  EXPECT_EQ((*mover)->ToGpu({&b, 1}, LayerRange{1, 1}, nullptr).code(), Code::kInvalidArgument);
  EXPECT_TRUE((*mover)->ToGpu({&b, 1}, {}, nullptr).ok());
}

// A small vLLM-shaped cache for the loader tests.
struct Cache {
  static constexpr uint32_t kLayers = 2, kSlots = 32;
  static constexpr uint64_t kChunk = 8192;
  DeviceMemory mem{kLayers * 2 * kSlots * kChunk};
  PagedLayout layout;
  Cache() {
    std::vector<uint64_t> ptrs;
    for (uint32_t l = 0; l < kLayers; ++l) ptrs.push_back(mem.addr(l * 2 * kSlots * kChunk));
    layout = PagedLayout::Vllm(ptrs, kSlots, kChunk);
  }
  uint64_t block_bytes() const { return layout.HostBytes(kLayers); }
};

TEST(GpuLoader, StoreToGpuAndBackThroughAnotherStore) {
  REQUIRE_GPU();
  Cache cache;
  StoreOptions so;
  so.dram_bytes = 16 << 20;
  so.max_value_bytes = 1 << 20;
  auto src = Store::Open(so), dst = Store::Open(so);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_TRUE(RegisterStore(**src).ok());
  ASSERT_TRUE(RegisterStore(**src).ok()) << "registering again is a no-op";
  std::vector<BlockKey> keys;
  std::vector<uint32_t> slots;
  for (uint32_t i = 0; i < 12; ++i) {
    keys.push_back(BlockKey{7, i});
    slots.push_back(31 - 2 * i);
    if (i == 5) continue;                                     // a miss in the middle
    auto v = Pattern(i == 9 ? 100 : cache.block_bytes(), i);  // block 9: wrong size
    ASSERT_TRUE((*src)->Put(keys.back(), v).ok());
  }
  auto loader = Loader::Create(cache.layout);
  ASSERT_TRUE(loader.ok());
  std::vector<Status> out(keys.size());
  ASSERT_TRUE((*loader)->Load(**src, keys, slots, {}, nullptr, out).ok());
  ASSERT_TRUE((*loader)->Synchronize().ok());
  for (uint32_t i = 0; i < 12; ++i) {
    Code want = i == 5 ? Code::kNotFound : i == 9 ? Code::kInvalidArgument : Code::kOk;
    EXPECT_EQ(out[i].code(), want) << i << ": " << out[i].ToString();
  }
  EXPECT_EQ((*loader)->stats().staged_blocks, 0u) << "registered DRAM moves without staging";
  // GPU -> another store, then compare bytes.
  std::vector<Status> saved(keys.size());
  std::vector<BlockKey> parents(keys.size());
  ASSERT_TRUE((*loader)->Save(**dst, keys, parents, slots, {}, nullptr, saved).ok());
  std::vector<std::byte> got(cache.block_bytes());
  for (uint32_t i = 0; i < 12; ++i) {
    if (i == 5 || i == 9) continue;
    ASSERT_TRUE(saved[i].ok()) << saved[i].ToString();
    auto r = (*dst)->Get(keys[i], got);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(got == Pattern(cache.block_bytes(), i)) << "block " << i;
  }
  // Layer by layer from the same store: an event per layer, on_layer in order.
  ASSERT_EQ(cudaMemset(cache.mem.p, 0, cache.mem.n), cudaSuccess);
  std::vector<std::unique_ptr<Event>> evs;
  std::vector<Event*> ev;
  for (uint32_t l = 0; l < Cache::kLayers; ++l) {
    auto e = Event::Create();
    ASSERT_TRUE(e.ok());
    evs.push_back(std::move(e).value());
    ev.push_back(evs.back().get());
  }
  std::vector<size_t> seen;
  ASSERT_TRUE((*loader)
                  ->LoadLayerwise(**src, keys, slots, nullptr, ev, out,
                                  [&](size_t l) { seen.push_back(l); })
                  .ok());
  EXPECT_EQ(seen, (std::vector<size_t>{0, 1}));
  ASSERT_TRUE(ev.back()->Synchronize().ok());
  auto dev = cache.mem.Read();
  for (uint32_t i = 0; i < 12; ++i) {
    if (i == 5 || i == 9) {
      EXPECT_FALSE(out[i].ok());
      continue;
    }
    auto want = Pattern(cache.block_bytes(), i);
    for (uint32_t l = 0; l < Cache::kLayers; ++l)
      for (uint32_t p = 0; p < 2; ++p)
        ASSERT_EQ(0, std::memcmp(dev.data() + Offset(cache.layout, cache.mem, l, p, slots[i]),
                                 want.data() + (l * 2 + p) * Cache::kChunk, Cache::kChunk))
            << "layer-wise: block " << i << " layer " << l;
  }
  // Insert-only: saving again answers kExists per item.
  ASSERT_TRUE((*loader)->Save(**dst, keys, parents, slots, {}, nullptr, saved).ok());
  EXPECT_EQ(saved[0].code(), Code::kExists);
  // dst was never registered: its reservations were staged.
  EXPECT_GT((*loader)->stats().staged_blocks, 0u);
  EXPECT_TRUE(UnregisterStore(**src).ok());
  EXPECT_FALSE(UnregisterStore(**src).ok()) << "not registered any more";
}

class GpuDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Available().ok()) GTEST_SKIP() << "no GPU here: " << Available().ToString();
    char tmpl[] = "/tmp/kvpool-gpu-XXXXXX";
    dir_ = mkdtemp(tmpl);
    daemon_ = std::make_unique<kvpool::testing::Daemon>(dir_);
    ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  }
  void TearDown() override {
    if (daemon_) EXPECT_EQ(daemon_->Stop(), 0) << daemon_->output();
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::unique_ptr<Client> Connect(bool unix_shm) {
    ClientOptions o;
    o.address = unix_shm ? daemon_->unix_address() : daemon_->tcp_address();
    o.ns = "gpu";
    if (unix_shm) o.shared_memory_bytes = 4 << 20;
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok());
    return std::move(*c);
  }
  std::string dir_;
  std::unique_ptr<kvpool::testing::Daemon> daemon_;
};

TEST_F(GpuDaemonTest, LoadsFromKvpooldOverTcpAndSharedMemoryInParallel) {
  Cache cache;
  auto writer = Connect(false);
  std::vector<BlockKey> keys;
  std::vector<uint32_t> slots;
  for (uint32_t i = 0; i < 30; ++i) {
    keys.push_back(BlockKey{9, i});
    slots.push_back((i * 7) % Cache::kSlots);
    if (i == 17) continue;
    ASSERT_TRUE(writer->Put(keys.back(), Pattern(cache.block_bytes(), 100 + i)).ok());
  }
  LoaderOptions lo;
  lo.chunk_blocks = 4;  // several chunks per connection: the pipeline turns over
  auto loader = Loader::Create(cache.layout, lo);
  ASSERT_TRUE(loader.ok());
  for (bool shm : {false, true}) {
    ASSERT_EQ(cudaMemset(cache.mem.p, 0, cache.mem.n), cudaSuccess);
    auto a = Connect(shm), b = Connect(shm), c = Connect(shm);
    std::vector<Client*> clients = {a.get(), b.get(), c.get()};
    if (shm) {  // two of the three regions registered (read in place), one staged
      ASSERT_TRUE(RegisterClient(*a).ok());
      ASSERT_TRUE(RegisterClient(*b).ok());
    } else {
      EXPECT_EQ(RegisterClient(*a).code(), Code::kInvalidArgument) << "TCP has no region";
    }
    std::vector<Status> out(keys.size());
    ASSERT_TRUE((*loader)->Load(clients, keys, slots, {}, nullptr, out).ok());
    ASSERT_TRUE((*loader)->Synchronize().ok());
    if (shm) {  // before the clients unmap their regions
      EXPECT_TRUE(UnregisterClient(*a).ok());
      EXPECT_TRUE(UnregisterClient(*b).ok());
    }
    auto dev = cache.mem.Read();
    for (uint32_t i = 0; i < 30; ++i) {
      if (i == 17) {
        EXPECT_TRUE(out[i].IsNotFound()) << out[i].ToString();
        continue;
      }
      ASSERT_TRUE(out[i].ok()) << i << " shm=" << shm << ": " << out[i].ToString();
      auto want = Pattern(cache.block_bytes(), 100 + i);
      for (uint32_t l = 0; l < Cache::kLayers; ++l)
        for (uint32_t p = 0; p < 2; ++p)
          ASSERT_EQ(0, std::memcmp(dev.data() + Offset(cache.layout, cache.mem, l, p, slots[i]),
                                   want.data() + (l * 2 + p) * Cache::kChunk, Cache::kChunk))
              << "block " << i << " layer " << l << " shm=" << shm;
    }
  }
}

// Prestaging into GPU memory through a near cache: the chain's leading blocks land in their
// slots (a miss ends the prefix), the ticket reports them once, bad tickets are refused.
TEST_F(GpuDaemonTest, PrestageToGpuLandsTheLeadingBlocks) {
  Cache cache;
  auto writer = Connect(false);
  std::vector<BlockKey> keys;
  std::vector<uint32_t> slots;
  for (uint32_t i = 0; i < 10; ++i) {
    keys.push_back(BlockKey{21, i});
    slots.push_back(20 - i);
    if (i != 7) ASSERT_TRUE(writer->Put(keys.back(), Pattern(cache.block_bytes(), 300 + i)).ok());
  }
  NearCacheOptions no;
  no.store.dram_bytes = 16 << 20;
  no.store.max_value_bytes = 1 << 20;
  no.store.lock_memory = false;
  auto near = NearCache::Create(no, Connect(false));
  ASSERT_TRUE(near.ok()) << near.status().ToString();
  ASSERT_TRUE(RegisterStore((*near)->local()).ok());
  auto loader = Loader::Create(cache.layout);
  ASSERT_TRUE(loader.ok());
  auto t = (*loader)->PrestageToGpu(**near, keys, slots, nullptr,
                                    Deadline::After(std::chrono::seconds(5)));
  auto landed = (*loader)->WaitGpuPrestage(t);
  ASSERT_TRUE(landed.ok()) << landed.status().ToString();
  EXPECT_EQ(*landed, 7u) << "block 7 is missing: the prefix ends there";
  auto dev = cache.mem.Read();
  for (uint32_t i = 0; i < 7; ++i) {
    auto want = Pattern(cache.block_bytes(), 300 + i);
    for (uint32_t l = 0; l < Cache::kLayers; ++l)
      for (uint32_t p = 0; p < 2; ++p)
        ASSERT_EQ(0, std::memcmp(dev.data() + Offset(cache.layout, cache.mem, l, p, slots[i]),
                                 want.data() + (l * 2 + p) * Cache::kChunk, Cache::kChunk))
            << "block " << i;
  }
  EXPECT_EQ((*loader)->WaitGpuPrestage(t).status().code(), Code::kInvalidArgument) << "once";
  std::vector<uint32_t> bad = {Cache::kSlots};
  auto tb = (*loader)->PrestageToGpu(**near, std::span(keys).first(1), bad, nullptr, {});
  EXPECT_EQ((*loader)->WaitGpuPrestage(tb).status().code(), Code::kInvalidArgument);
  loader->reset();  // before the near cache it read from
  EXPECT_TRUE(UnregisterStore((*near)->local()).ok());
}

TEST_F(GpuDaemonTest, LayerStreamingRecordsAnEventPerLayerAndSavesThroughTheClient) {
  Cache cache;
  auto c = Connect(true);
  std::vector<BlockKey> blocks;
  std::vector<uint32_t> slots;
  for (uint32_t i = 0; i < 6; ++i) {
    blocks.push_back(BlockKey{11, i});
    slots.push_back(i + 3);
    for (uint32_t l = 0; l < Cache::kLayers; ++l)
      ASSERT_TRUE(
          c->Put(LayerKey(blocks[i], l), Pattern(cache.layout.HostBytes(1), i * 10 + l)).ok());
  }
  ASSERT_TRUE(RegisterClient(*c).ok());
  auto loader = Loader::Create(cache.layout);
  ASSERT_TRUE(loader.ok());
  std::vector<uint32_t> layers = {0, 1};
  auto e0 = Event::Create(), e1 = Event::Create();
  ASSERT_TRUE(e0.ok() && e1.ok());
  std::vector<Event*> events = {e0->get(), e1->get()};
  std::vector<Status> out(blocks.size() * layers.size());
  std::vector<size_t> seen;
  ASSERT_TRUE((*loader)
                  ->LoadLayers(*c, blocks, slots, layers, nullptr, events, out,
                               [&](size_t i) { seen.push_back(i); })
                  .ok());
  EXPECT_EQ(seen, (std::vector<size_t>{0, 1}));
  ASSERT_TRUE(events[1]->Synchronize().ok());
  EXPECT_TRUE(events[0]->Ready());
  for (auto& s : out) EXPECT_TRUE(s.ok()) << s.ToString();
  // Save whole blocks (both layers) back through the client, then read them from kvpoold.
  std::vector<BlockKey> whole = {BlockKey{12, 0}, BlockKey{12, 1}};
  std::vector<uint32_t> from = {slots[0], slots[5]};
  std::vector<Status> saved(2);
  ASSERT_TRUE((*loader)->Save(*c, whole, {}, from, {}, nullptr, saved).ok());
  for (size_t k = 0; k < 2; ++k) {
    ASSERT_TRUE(saved[k].ok()) << saved[k].ToString();
    std::vector<std::byte> got(cache.block_bytes());
    auto r = c->Get(whole[k], got);
    ASSERT_TRUE(r.ok());
    uint32_t b = k == 0 ? 0 : 5;
    for (uint32_t l = 0; l < Cache::kLayers; ++l) {
      auto want = Pattern(cache.layout.HostBytes(1), b * 10 + l);
      EXPECT_EQ(0, std::memcmp(got.data() + l * want.size(), want.data(), want.size()))
          << "block " << b << " layer " << l;
    }
  }
  ASSERT_TRUE((*loader)->Synchronize().ok());
  EXPECT_TRUE(UnregisterClient(*c).ok());
}

}  // namespace
}  // namespace kvpool::gpu
