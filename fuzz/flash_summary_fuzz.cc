// libFuzzer target for the flash metadata decoders (region summaries, superblock): any
// bytes read from a device must decode or be refused, never crash or read out of bounds;
// entries made from the bytes encode and decode to themselves, and any one flipped byte
// of an encoded summary is refused (run under ASan+UBSan).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "engine/flash_summary.h"

using kvpool::engine::SummaryEntry;
using kvpool::engine::SummaryHeader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> raw(reinterpret_cast<const std::byte*>(data), size);
  uint64_t instance = 0;
  if (size >= 16) std::memcpy(&instance, data + 8, 8);
  SummaryHeader h;
  std::vector<SummaryEntry> entries;
  (void)kvpool::engine::PeekSummary(raw, instance, &h);
  (void)kvpool::engine::DecodeSummary(raw, instance, &h, &entries);
  kvpool::engine::Superblock sb;
  (void)kvpool::engine::DecodeSuperblock(raw, &sb);

  // Round trip: entries from the bytes.
  std::vector<SummaryEntry> in(size / sizeof(SummaryEntry));
  if (!in.empty()) std::memcpy(in.data(), data, in.size() * sizeof(SummaryEntry));
  SummaryHeader hh{instance | 1, size, static_cast<uint32_t>(size % 977), 0};
  std::vector<std::byte> enc;
  kvpool::engine::EncodeSummary(hh, in, &enc);
  SummaryHeader out_h;
  std::vector<SummaryEntry> out;
  if (!kvpool::engine::DecodeSummary(enc, hh.instance, &out_h, &out)) __builtin_trap();
  if (out.size() != in.size() || out_h.seq != hh.seq || out_h.region != hh.region ||
      (!in.empty() && std::memcmp(out.data(), in.data(), in.size() * sizeof(SummaryEntry)))) {
    __builtin_trap();
  }
  size_t used = 64 + in.size() * sizeof(SummaryEntry);
  size_t at = size ? (data[0] * 131u + size) % used : 0;
  enc[at] ^= std::byte{static_cast<unsigned char>(size ? (data[size - 1] | 1) : 1)};
  if (kvpool::engine::DecodeSummary(enc, hh.instance, &out_h, &out)) __builtin_trap();
  return 0;
}
