// The flash tier's metadata on the device, so that a store reopens its flash with its
// blocks: where it lives (FlashGeometry) and how a region's summary and the superblock
// are encoded. Pure functions over buffers; FlashLog does the I/O.
//
// Layout of a device of D bytes with regions of R bytes: data regions [0, n*R), then one
// superblock page, then n summary slots of `slot_pages` pages each (the most a region can
// need: one entry per page of data), n the largest count for which all of it fits. A slot
// is stored in two parts: its first `head_pages` (up to 4: a whole summary of up to 510
// blocks) side by side with every other slot's, so that an open reads all of them in a
// few large sequential reads; the rest in a second area, read only for regions of many
// small blocks.
//
// A summary lists the blocks that start in one region: key, page within the region, size,
// CRC32C, and whether the block is dead (erased, overwritten, moved). It carries the
// device's instance id (a new format orphans every older summary), the region and the
// sequence number of the region's entry into the log (newer copies of a key win), and a
// CRC over the whole summary: a summary torn by a crash fails it and its region is dropped
// whole. Only the pages a summary needs are written (64 KiB blocks: 3 pages per 16 MiB).
#ifndef KVPOOL_ENGINE_FLASH_SUMMARY_H_
#define KVPOOL_ENGINE_FLASH_SUMMARY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvpool/key.h"

namespace kvpool::engine {

struct FlashGeometry {
  uint64_t region_bytes = 0;
  uint32_t regions = 0;
  uint32_t slot_pages = 0;   // pages per summary slot
  uint32_t head_pages = 0;   // of which stored in the head area
  uint64_t meta_offset = 0;  // the superblock's byte offset; slots follow it
  uint64_t meta_bytes = 0;   // superblock + slots

  // persistent = false: the whole device is data (nothing survives a restart).
  static FlashGeometry For(uint64_t device_bytes, uint64_t region_bytes, bool persistent);
  // The device size that holds floor(data_bytes / region_bytes) regions of data and their
  // metadata (a file is made this large: flash_bytes of data, the metadata on top).
  static uint64_t DeviceBytesFor(uint64_t data_bytes, uint64_t region_bytes);
  // Where the first head_pages of a region's slot live, and where the rest does.
  uint64_t head_offset(uint32_t region) const {
    return meta_offset + 4096 + uint64_t{region} * head_pages * 4096;
  }
  uint64_t tail_offset(uint32_t region) const {
    return meta_offset + 4096 + uint64_t{regions} * head_pages * 4096 +
           uint64_t{region} * (slot_pages - head_pages) * 4096;
  }
};

struct SummaryEntry {
  BlockKey key;
  uint32_t page = 0;   // first page, relative to the region's start
  uint32_t size = 0;   // bytes
  uint32_t crc = 0;    // CRC32C of the value
  uint32_t flags = 0;  // bit 0: dead; bits 16-31: the block's tenant (PutOptions::tenant)
  static constexpr uint32_t kDead = 1;
  bool dead() const { return flags & kDead; }
  uint16_t tenant() const { return static_cast<uint16_t>(flags >> 16); }
};
static_assert(sizeof(SummaryEntry) == 32);

struct SummaryHeader {
  uint64_t instance = 0;
  uint64_t seq = 0;  // the region's entry into the log: larger is newer
  uint32_t region = 0;
  uint32_t count = 0;
};

// Pages a summary of `count` entries takes.
uint32_t SummaryPages(uint32_t count);
// Encodes into `out` (resized to SummaryPages(entries.size()) * 4096 bytes).
void EncodeSummary(const SummaryHeader& h, std::span<const SummaryEntry> entries,
                   std::vector<std::byte>* out);
// The header of a summary whose first page is `page` (4096 bytes), if it carries the
// magic and `instance`. Says nothing yet about the rest's integrity.
bool PeekSummary(std::span<const std::byte> page, uint64_t instance, SummaryHeader* h);
// Decodes a whole summary (SummaryPages(h.count) pages); false if torn or foreign.
bool DecodeSummary(std::span<const std::byte> buf, uint64_t instance, SummaryHeader* h,
                   std::vector<SummaryEntry>* entries);
// A first page no summary decodes from (written when a region is taken again).
void EncodeInvalidSummary(std::vector<std::byte>* out);

struct Superblock {
  uint64_t instance = 0;
  uint64_t region_bytes = 0;
  uint32_t regions = 0;
  uint32_t slot_pages = 0;
};
void EncodeSuperblock(const Superblock& sb, std::vector<std::byte>* out);  // one page
bool DecodeSuperblock(std::span<const std::byte> page, Superblock* sb);

}  // namespace kvpool::engine

#endif  // KVPOOL_ENGINE_FLASH_SUMMARY_H_
