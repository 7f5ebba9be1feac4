#include "engine/flash_summary.h"

#include <algorithm>
#include <cstring>

#include "common/crc32c.h"

namespace kvpool::engine {
namespace {
constexpr uint64_t kSummaryMagic = 0x4b56504f4f4c5355ull;  // "KVPOOLSU"
constexpr uint64_t kSuperMagic = 0x4b56504f4f4c5342ull;    // "KVPOOLSB"
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 64;

// Summary header, little-endian as the host (the file never leaves the machine).
struct RawHeader {
  uint64_t magic;
  uint64_t instance;
  uint64_t seq;
  uint32_t region;
  uint32_t count;
  uint32_t version;
  uint32_t crc;  // over the whole summary with this field zero
  uint8_t pad[24];
};
static_assert(sizeof(RawHeader) == kHeaderBytes);

struct RawSuper {
  uint64_t magic;
  uint64_t instance;
  uint64_t region_bytes;
  uint32_t regions;
  uint32_t slot_pages;
  uint32_t version;
  uint32_t crc;
};
}  // namespace

FlashGeometry FlashGeometry::For(uint64_t device_bytes, uint64_t region_bytes, bool persistent) {
  FlashGeometry g;
  g.region_bytes = region_bytes;
  if (region_bytes < 4096) return g;
  if (!persistent) {
    g.regions = static_cast<uint32_t>(device_bytes / region_bytes);
    g.meta_offset = uint64_t{g.regions} * region_bytes;
    return g;
  }
  g.slot_pages = SummaryPages(static_cast<uint32_t>(region_bytes / 4096));
  g.head_pages = std::min<uint32_t>(4, g.slot_pages);
  uint64_t per_region = region_bytes + uint64_t{g.slot_pages} * 4096;
  g.regions = device_bytes > 4096 ? static_cast<uint32_t>((device_bytes - 4096) / per_region) : 0;
  g.meta_offset = uint64_t{g.regions} * region_bytes;
  g.meta_bytes = 4096 + uint64_t{g.regions} * g.slot_pages * 4096;
  return g;
}

uint64_t FlashGeometry::DeviceBytesFor(uint64_t data_bytes, uint64_t region_bytes) {
  if (region_bytes < 4096) return data_bytes;
  uint64_t regions = data_bytes / region_bytes;
  uint64_t slot = uint64_t{SummaryPages(static_cast<uint32_t>(region_bytes / 4096))} * 4096;
  return regions * region_bytes + 4096 + regions * slot;
}

uint32_t SummaryPages(uint32_t count) {
  return static_cast<uint32_t>((kHeaderBytes + uint64_t{count} * sizeof(SummaryEntry) + 4095) /
                               4096);
}

void EncodeSummary(const SummaryHeader& h, std::span<const SummaryEntry> entries,
                   std::vector<std::byte>* out) {
  out->assign(uint64_t{SummaryPages(static_cast<uint32_t>(entries.size()))} * 4096, std::byte{0});
  RawHeader raw{};
  raw.magic = kSummaryMagic;
  raw.instance = h.instance;
  raw.seq = h.seq;
  raw.region = h.region;
  raw.count = static_cast<uint32_t>(entries.size());
  raw.version = kFormatVersion;
  std::memcpy(out->data(), &raw, sizeof(raw));
  if (!entries.empty()) {
    std::memcpy(out->data() + kHeaderBytes, entries.data(), entries.size() * sizeof(SummaryEntry));
  }
  size_t used = kHeaderBytes + entries.size() * sizeof(SummaryEntry);
  raw.crc = Crc32c(out->data(), used);
  std::memcpy(out->data(), &raw, sizeof(raw));
}

bool PeekSummary(std::span<const std::byte> page, uint64_t instance, SummaryHeader* h) {
  if (page.size() < kHeaderBytes) return false;
  RawHeader raw;
  std::memcpy(&raw, page.data(), sizeof(raw));
  if (raw.magic != kSummaryMagic || raw.version != kFormatVersion || raw.instance != instance) {
    return false;
  }
  h->instance = raw.instance;
  h->seq = raw.seq;
  h->region = raw.region;
  h->count = raw.count;
  return true;
}

bool DecodeSummary(std::span<const std::byte> buf, uint64_t instance, SummaryHeader* h,
                   std::vector<SummaryEntry>* entries) {
  if (!PeekSummary(buf, instance, h)) return false;
  size_t used = kHeaderBytes + uint64_t{h->count} * sizeof(SummaryEntry);
  if (used > buf.size()) return false;
  RawHeader raw;
  std::memcpy(&raw, buf.data(), sizeof(raw));
  uint32_t stored = raw.crc;
  raw.crc = 0;
  uint32_t crc = Crc32c(&raw, sizeof(raw));
  crc = Crc32cExtend(crc, buf.data() + kHeaderBytes, used - kHeaderBytes);
  if (crc != stored) return false;
  entries->resize(h->count);
  if (h->count) {
    std::memcpy(entries->data(), buf.data() + kHeaderBytes, h->count * sizeof(SummaryEntry));
  }
  return true;
}

void EncodeInvalidSummary(std::vector<std::byte>* out) { out->assign(4096, std::byte{0}); }

void EncodeSuperblock(const Superblock& sb, std::vector<std::byte>* out) {
  out->assign(4096, std::byte{0});
  RawSuper raw{
      kSuperMagic, sb.instance, sb.region_bytes, sb.regions, sb.slot_pages, kFormatVersion, 0};
  raw.crc = Crc32c(&raw, sizeof(raw));
  std::memcpy(out->data(), &raw, sizeof(raw));
}

bool DecodeSuperblock(std::span<const std::byte> page, Superblock* sb) {
  if (page.size() < sizeof(RawSuper)) return false;
  RawSuper raw;
  std::memcpy(&raw, page.data(), sizeof(raw));
  uint32_t stored = raw.crc;
  raw.crc = 0;
  if (raw.magic != kSuperMagic || raw.version != kFormatVersion ||
      Crc32c(&raw, sizeof(raw)) != stored) {
    return false;
  }
  *sb = {raw.instance, raw.region_bytes, raw.regions, raw.slot_pages};
  return true;
}

}  // namespace kvpool::engine
