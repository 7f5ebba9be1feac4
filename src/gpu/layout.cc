// PagedLayout: the engines' paged KV layouts as (base per layer and part, slot stride, chunk).
#include <string>

#include "kvpool/gpu.h"

namespace kvpool::gpu {

PagedLayout PagedLayout::Vllm(std::span<const uint64_t> layer_ptrs, uint32_t num_blocks,
                              uint64_t block_bytes) {
  // [2][num_blocks][block_size][kv_heads][head_dim]: V starts num_blocks blocks after K.
  PagedLayout l;
  for (uint64_t p : layer_ptrs) {
    l.k_bases.push_back(p);
    l.v_bases.push_back(p + uint64_t(num_blocks) * block_bytes);
  }
  l.slot_stride = block_bytes;
  l.chunk_bytes = block_bytes;
  l.num_slots = num_blocks;
  return l;
}

PagedLayout PagedLayout::Split(std::span<const uint64_t> k_ptrs, std::span<const uint64_t> v_ptrs,
                               uint64_t page_bytes, uint32_t num_pages) {
  PagedLayout l;
  l.k_bases.assign(k_ptrs.begin(), k_ptrs.end());
  l.v_bases.assign(v_ptrs.begin(), v_ptrs.end());
  l.slot_stride = page_bytes;
  l.chunk_bytes = page_bytes;
  l.num_slots = num_pages;
  return l;
}

PagedLayout PagedLayout::CrossLayer(uint64_t ptr, uint32_t num_blocks, uint32_t num_layers,
                                    uint64_t chunk_bytes) {
  // [num_blocks][layers][2][chunk]: a slot holds every layer, K then V.
  PagedLayout l;
  for (uint32_t i = 0; i < num_layers; ++i) {
    l.k_bases.push_back(ptr + uint64_t(i) * 2 * chunk_bytes);
    l.v_bases.push_back(ptr + (uint64_t(i) * 2 + 1) * chunk_bytes);
  }
  l.slot_stride = uint64_t(num_layers) * 2 * chunk_bytes;
  l.chunk_bytes = chunk_bytes;
  l.num_slots = num_blocks;
  return l;
}

Status PagedLayout::Validate() const {
  if (k_bases.empty()) return Status::InvalidArgument("layout has no layers");
  if (!v_bases.empty() && v_bases.size() != k_bases.size())
    return Status::InvalidArgument("layout: " + std::to_string(k_bases.size()) + " K parts but " +
                                   std::to_string(v_bases.size()) + " V parts");
  if (chunk_bytes == 0) return Status::InvalidArgument("layout: chunk_bytes is 0");
  if (num_slots == 0) return Status::InvalidArgument("layout: no slots");
  if (slot_stride < chunk_bytes && num_slots > 1)
    return Status::InvalidArgument("layout: slot_stride is smaller than chunk_bytes");
  for (uint64_t b : k_bases)
    if (b == 0) return Status::InvalidArgument("layout: a null K base");
  for (uint64_t b : v_bases)
    if (b == 0) return Status::InvalidArgument("layout: a null V base");
  return Status::Ok();
}

}  // namespace kvpool::gpu
