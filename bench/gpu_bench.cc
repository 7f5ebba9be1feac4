// kvpool_gpu_bench: moves between pinned host memory and a paged GPU cache, beside the PCIe
// limit measured in the same run (one large pinned cudaMemcpy each way) and beside the
// obvious alternative (one cudaMemcpyAsync per block). Prints a table and writes JSON.
// A benchmark: nothing here asserts. Without a GPU it says why and exits 2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvpool/gpu.h"

namespace kvpool::gpu {
namespace {

#define CK(x)                                                       \
  do {                                                              \
    cudaError_t e_ = (x);                                           \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

struct Row {
  std::string name;
  uint64_t blocks, block_bytes;
  double ms, gbps, limit_gbps;
};
std::vector<Row> g_rows;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `fn` (which enqueues on `s`) `reps` times with CUDA events; the median in ms.
template <class F>
double TimeMs(cudaStream_t s, int reps, F&& fn) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  fn();  // warm-up
  CK(cudaStreamSynchronize(s));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a, s));
    fn();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return Median(ms);
}

void Add(Row r) {
  std::printf("%-44s %6llu %9llu %9.3f %8.2f %8.2f %6.2fx\n", r.name.c_str(),
              (unsigned long long)r.blocks, (unsigned long long)r.block_bytes, r.ms, r.gbps,
              r.limit_gbps, r.gbps / r.limit_gbps);
  std::fflush(stdout);
  g_rows.push_back(r);
}

struct Limits {
  double h2d, d2h;
};

Limits PinnedLimit(cudaStream_t s, size_t bytes, int reps) {
  void *h, *d;
  CK(cudaHostAlloc(&h, bytes, 0));
  CK(cudaMalloc(&d, bytes));
  std::memset(h, 1, bytes);
  double up = TimeMs(s, reps, [&] { CK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s)); });
  double down =
      TimeMs(s, reps, [&] { CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s)); });
  cudaFreeHost(h);
  cudaFree(d);
  Limits l{bytes / up / 1e6, bytes / down / 1e6};
  Add({"pinned cudaMemcpy host->GPU (the limit)", 1, bytes, up, l.h2d, l.h2d});
  Add({"pinned cudaMemcpy GPU->host (the limit)", 1, bytes, down, l.d2h, l.d2h});
  return l;
}

// `n` blocks of `bytes` in pinned memory, scattered into 2n slots of a one-layer K-only cache
// (a block is one chunk), both ways, by the mover and by one cudaMemcpyAsync per block.
void Scattered(cudaStream_t s, const Limits& lim, uint64_t n, uint64_t bytes, int reps) {
  auto host = PinnedBuffer::Create(n * bytes);
  if (!host.ok()) {
    std::fprintf(stderr, "%s\n", host.status().ToString().c_str());
    std::exit(1);
  }
  std::memset((*host)->data().data(), 3, n * bytes);
  void* dev;
  CK(cudaMalloc(&dev, 2 * n * bytes));
  std::vector<uint64_t> k = {reinterpret_cast<uint64_t>(dev)};
  PagedLayout layout = PagedLayout::Split(k, {}, bytes, static_cast<uint32_t>(2 * n));
  auto mover = Mover::Create(layout);
  if (!mover.ok()) std::exit(1);
  std::vector<uint32_t> slots(2 * n);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), std::mt19937(1));
  std::vector<HostBlock> blocks(n);
  for (uint64_t i = 0; i < n; ++i) blocks[i] = {(*host)->data().data() + i * bytes, slots[i]};
  const std::string shape = std::to_string(n) + " x " + std::to_string(bytes >> 10) + " KiB";
  const double total = double(n) * bytes;
  // Alternate the order of the two methods between the directions.
  for (int dir = 0; dir < 2; ++dir) {
    const bool up = dir == 0;
    const double limit = up ? lim.h2d : lim.d2h;
    const char* arrow = up ? "host->GPU" : "GPU->host";
    auto kernel = [&] {
      Status st = up ? (*mover)->ToGpu(blocks, {}, s) : (*mover)->ToHost(blocks, {}, s);
      if (!st.ok()) std::exit(1);
    };
    auto per_block = [&] {
      for (auto& b : blocks) {
        char* d = static_cast<char*>(dev) + uint64_t(b.slot) * bytes;
        if (up)
          CK(cudaMemcpyAsync(d, b.data, bytes, cudaMemcpyHostToDevice, s));
        else
          CK(cudaMemcpyAsync(b.data, d, bytes, cudaMemcpyDeviceToHost, s));
      }
    };
    double tk, tp;
    if (up) {
      tk = TimeMs(s, reps, kernel);
      tp = TimeMs(s, reps, per_block);
    } else {
      tp = TimeMs(s, reps, per_block);
      tk = TimeMs(s, reps, kernel);
    }
    Add({std::string("kvpool mover ") + arrow + " " + shape, n, bytes, tk, total / tk / 1e6,
         limit});
    Add({std::string("cudaMemcpyAsync per block ") + arrow + " " + shape, n, bytes, tp,
         total / tp / 1e6, limit});
  }
  cudaFree(dev);
}

void WriteJson(const std::string& path, const std::string& device) {
  std::ofstream f(path);
  f << "{\n  \"device\": \"" << device << "\",\n  \"rows\": [\n";
  for (size_t i = 0; i < g_rows.size(); ++i) {
    const Row& r = g_rows[i];
    f << "    {\"name\": \"" << r.name << "\", \"blocks\": " << r.blocks
      << ", \"block_bytes\": " << r.block_bytes << ", \"ms\": " << r.ms << ", \"gbps\": " << r.gbps
      << ", \"limit_gbps\": " << r.limit_gbps << ", \"ratio\": " << r.gbps / r.limit_gbps << "}"
      << (i + 1 < g_rows.size() ? ",\n" : "\n");
  }
  f << "  ]\n}\n";
}

int Main(int argc, char** argv) {
  std::string json = "bench-gpu.json";
  int reps = 9;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::printf(
          "usage: kvpool_gpu_bench [--json PATH] [--reps N]\n"
          "Scattered moves (1000 x 64 KiB, 64 x 2 MiB, 2048 x 2 MiB) between pinned host memory\n"
          "and a paged GPU cache, each way, by kvpool's one-launch mover and by one\n"
          "cudaMemcpyAsync per block, beside the pinned-copy limit of this run (median of\n"
          "--reps timed runs each, CUDA events).\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (Status s = Available(); !s.ok()) {
    std::fprintf(stderr, "kvpool_gpu_bench: %s\n", s.ToString().c_str());
    return 2;
  }
  std::string device = DeviceInfo();
  std::printf("device: %s\n", device.c_str());
  std::printf("%-44s %6s %9s %9s %8s %8s %7s\n", "move", "blocks", "bytes", "ms", "GB/s", "limit",
              "ratio");
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Limits lim = PinnedLimit(s, 1ull << 30, reps);
  Scattered(s, lim, 1000, 64 << 10, reps);
  Scattered(s, lim, 64, 2 << 20, reps);
  Scattered(s, lim, 2048, 2 << 20, std::max(3, reps / 3));  // a 32K-token Llama-8B prefix
  WriteJson(json, device);
  std::printf("wrote %s\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace kvpool::gpu

int main(int argc, char** argv) { return kvpool::gpu::Main(argc, argv); }
