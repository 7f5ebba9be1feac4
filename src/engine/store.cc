// Store::Open (the public factory), Reservation, StoreOptions::Validate, stats printing.
#include "kvpool/store.h"

#include <memory>
#include <sstream>
#include <string>

#include "engine/flash_summary.h"
#include "engine/tiered_store.h"
#include "io/uring_device.h"

namespace kvpool {

Status StoreOptions::Validate() const {
  if (dram_bytes < 4 * kMiB) return Status::InvalidArgument("dram_bytes must be at least 4 MiB");
  if (max_value_bytes == 0 || max_value_bytes > dram_bytes / 2) {
    return Status::InvalidArgument("max_value_bytes must be in (0, dram_bytes / 2]");
  }
  if (max_value_bytes >= (1ull << 30)) {
    return Status::InvalidArgument("max_value_bytes must be under 1 GiB");
  }
  if (region_bytes < 64 * kKiB || region_bytes % 4096) {
    return Status::InvalidArgument("region_bytes must be a multiple of 4 KiB, at least 64 KiB");
  }
  if (!flash_path.empty() && flash_bytes != 0 && flash_bytes < 2 * region_bytes) {
    return Status::InvalidArgument("flash_bytes must hold at least two regions");
  }
  if (flash_bytes / 4096 >= (1ull << 30)) {
    return Status::InvalidArgument("flash_bytes must be under 4 TiB");
  }
  if (index_shards == 0 || index_shards > 65536)
    return Status::InvalidArgument("index_shards must be in 1..65536");
  if (probation_fraction < 0 || probation_fraction > 0.9) {
    return Status::InvalidArgument("probation_fraction must be in [0, 0.9]");
  }
  if (!(reuse_bonus == kReuseBonusAuto || (reuse_bonus >= 0 && reuse_bonus <= 64))) {
    return Status::InvalidArgument("reuse_bonus must be in [0, 64], or auto");
  }
  if (!(flash_writes_per_day >= 0 && flash_writes_per_day <= 1000)) {
    return Status::InvalidArgument("flash_writes_per_day must be in [0, 1000]");
  }
  if (dram_free_target < 0 || dram_free_target > 0.5) {
    return Status::InvalidArgument("dram_free_target must be in [0, 0.5]");
  }
  if (io_queue_depth == 0 || io_queue_depth > 4096) {
    return Status::InvalidArgument("io_queue_depth must be in [1, 4096]");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  Status s = options.Validate();
  if (!s.ok()) return s;
  std::unique_ptr<io::Device> device;
  if (!options.flash_path.empty()) {
    // flash_bytes of data; the region summaries (under 1%) come on top of it. A block
    // device used whole (flash_bytes 0) holds them within.
    uint64_t bytes = options.flash_bytes == 0 ? 0
                                              : engine::FlashGeometry::DeviceBytesFor(
                                                    options.flash_bytes, options.region_bytes);
    auto dev = io::UringDevice::Open({options.flash_path, bytes, options.io_queue_depth});
    if (!dev.ok()) return dev.status();
    device = std::move(dev).value();
  }
  auto store = engine::TieredStore::Open(options, std::move(device));
  if (!store.ok()) return store.status();
  return std::unique_ptr<Store>(std::move(store).value());
}

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    if (owner_) owner_->Abort(*this);
    owner_ = other.owner_;
    data_ = other.data_;
    key_ = other.key_;
    options_ = other.options_;
    record_ = other.record_;
    reserve_ns_ = other.reserve_ns_;
    other.owner_ = nullptr;
  }
  return *this;
}

Reservation::~Reservation() {
  if (owner_) owner_->Abort(*this);
}

namespace {
void Lat(std::ostringstream& o, const char* name, const LatencySummary& l) {
  o << "  " << name << ": n=" << l.count << " p50=" << l.p50_us << "us p99=" << l.p99_us
    << "us p99.9=" << l.p999_us << "us max=" << l.max_us << "us\n";
}
}  // namespace

std::string StoreStats::ToString() const {
  std::ostringstream o;
  o << "dram: " << dram.used_bytes << "/" << dram.capacity_bytes << " bytes, " << dram.blocks
    << " blocks, hits " << dram.hits << ", evictions " << dram.evictions << "\n";
  o << "flash: " << flash.used_bytes << "/" << flash.capacity_bytes << " bytes, " << flash.blocks
    << " blocks, hits " << flash.hits << ", regions evicted " << flash.evictions << ", written "
    << flash.bytes_written << ", read " << flash.bytes_read << "\n";
  o << "puts " << puts << " (exists " << put_exists << ", rejected " << put_rejected << "), gets "
    << gets << ", misses " << misses << ", erases " << erases << "\n";
  o << "demotions " << demotions << ", promotions " << promotions << " (hits left on flash "
    << flash_hits_in_place << "), admission drops " << admission_drops << " (write budget "
    << budget_drops << "), prefetched " << prefetched << "/" << prefetch_requests
    << ", quota evictions " << quota_evictions << "\n";
  o << "policy: reuse bonus " << reuse_bonus_dram_fulls << " DRAM-fulls per use"
    << (reuse_bonus_learnt ? " (learnt, " + std::to_string(policy_epochs) + " epochs)" : " (fixed)")
    << "; probation " << probation_share << " of DRAM, blocks leaving it unused "
    << (unused_to_flash ? "go to flash" : "are dropped") << "; flash hits promoted "
    << (promote_all_flash_hits ? "all" : "from the older half of the log") << "\n";
  o << "flash blocks moved by compaction " << flash_compacted << ", reinserted " << flash_reinserted
    << ", live blocks evicted " << flash_live_evicted << "\n";
  o << "flash blocks restored at open " << flash_restored << ", regions dropped (torn) "
    << flash_regions_dropped << ", metadata bytes written " << flash_summary_bytes << "\n";
  o << "crc failures " << crc_failures << ", io errors " << io_errors << ", stale races "
    << stale_races << ", index " << index_entries << " entries in " << index_bytes << " bytes\n";
  Lat(o, "put", put_latency);
  Lat(o, "get dram", get_dram_latency);
  Lat(o, "get flash", get_flash_latency);
  return o.str();
}

}  // namespace kvpool
