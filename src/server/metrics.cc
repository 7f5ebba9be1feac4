#include "server/metrics.h"

#include <cstdio>
#include <sstream>

namespace kvpool::server {
namespace {

class Writer {
 public:
  // One HELP and TYPE line per family, then its samples.
  void Family(const char* name, const char* type, const char* help) {
    o_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void Sample(const std::string& name, const std::string& labels, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    o_ << name;
    if (!labels.empty()) o_ << "{" << labels << "}";
    o_ << " " << buf << "\n";
  }
  void One(const char* name, const char* type, const char* help, double v) {
    Family(name, type, help);
    Sample(name, "", v);
  }
  void Histogram(const char* name, const char* help, const std::string& labels,
                 const LatencySummary& l, bool family) {
    if (family) Family(name, "histogram", help);
    std::string sep = labels.empty() ? "" : ",";
    for (size_t i = 0; i < kLatencyBounds; ++i) {
      char le[32];
      std::snprintf(le, sizeof le, "%g", kLatencyBoundsUs[i] / 1e6);
      Sample(std::string(name) + "_bucket", labels + sep + "le=\"" + le + "\"",
             static_cast<double>(l.le[i]));
    }
    Sample(std::string(name) + "_bucket", labels + sep + "le=\"+Inf\"",
           static_cast<double>(l.count));
    Sample(std::string(name) + "_sum", labels, l.mean_us * static_cast<double>(l.count) / 1e6);
    Sample(std::string(name) + "_count", labels, static_cast<double>(l.count));
  }
  std::string str() const { return o_.str(); }

 private:
  std::ostringstream o_;
};

double D(uint64_t v) { return static_cast<double>(v); }

// A label value: backslash, quote and newline escaped.
std::string Label(const char* name, const std::string& v) {
  std::string out = std::string(name) + "=\"";
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out + "\"";
}

void RenderTenants(Writer& w, const std::vector<TenantSnapshot>& tenants) {
  if (tenants.empty()) return;
  struct Field {
    const char* name;
    const char* type;
    const char* help;
    uint64_t TenantSnapshot::*v;
  };
  static const Field kFields[] = {
      {"kvpool_tenant_connections", "gauge", "Client connections open, by tenant.",
       &TenantSnapshot::connections},
      {"kvpool_tenant_requests_total", "counter", "Requests served, by tenant.",
       &TenantSnapshot::requests},
      {"kvpool_tenant_gets_total", "counter", "Blocks asked for, by tenant.",
       &TenantSnapshot::gets},
      {"kvpool_tenant_hits_total", "counter", "Blocks found, by tenant.", &TenantSnapshot::hits},
      {"kvpool_tenant_puts_total", "counter", "Blocks stored, by tenant.", &TenantSnapshot::puts},
      {"kvpool_tenant_received_bytes_total", "counter", "Bytes received from a tenant's clients.",
       &TenantSnapshot::bytes_in},
      {"kvpool_tenant_sent_bytes_total", "counter", "Bytes sent to a tenant's clients.",
       &TenantSnapshot::bytes_out},
      {"kvpool_tenant_dram_bytes", "gauge", "DRAM held by a tenant's blocks.",
       &TenantSnapshot::dram_bytes},
      {"kvpool_tenant_flash_bytes", "gauge", "Flash held by a tenant's live blocks.",
       &TenantSnapshot::flash_bytes},
      {"kvpool_tenant_dram_quota_bytes", "gauge", "A tenant's DRAM quota (0: none).",
       &TenantSnapshot::dram_quota},
      {"kvpool_tenant_flash_quota_bytes", "gauge", "A tenant's flash quota (0: none).",
       &TenantSnapshot::flash_quota},
  };
  for (const Field& f : kFields) {
    w.Family(f.name, f.type, f.help);
    for (const TenantSnapshot& t : tenants) w.Sample(f.name, Label("tenant", t.name), D(t.*f.v));
  }
}

void RenderPool(Writer& w, const NodeStats& node) {
  if (!node.in_pool) return;
  w.One("kvpool_pool_members", "gauge", "Pod members this node sees in etcd (itself included).",
        D(node.members.size()));
  w.Family("kvpool_pool_member_capacity_bytes", "gauge",
           "Capacity each member advertises (its placement weight).");
  for (const PoolMemberInfo& m : node.members) {
    w.Sample("kvpool_pool_member_capacity_bytes",
             Label("member", m.id) + "," + Label("address", m.address), D(m.capacity_bytes));
  }
}

}  // namespace

std::string RenderMetrics(const NodeStats& node) {
  const StoreStats& s = node.store;
  const ServerStats& n = node.server;
  Writer w;
  w.Family("kvpool_capacity_bytes", "gauge", "Bytes a tier can hold.");
  w.Sample("kvpool_capacity_bytes", "tier=\"dram\"", D(s.dram.capacity_bytes));
  w.Sample("kvpool_capacity_bytes", "tier=\"flash\"", D(s.flash.capacity_bytes));
  w.Family("kvpool_used_bytes", "gauge", "Bytes held by a tier (flash: live blocks).");
  w.Sample("kvpool_used_bytes", "tier=\"dram\"", D(s.dram.used_bytes));
  w.Sample("kvpool_used_bytes", "tier=\"flash\"", D(s.flash.used_bytes));
  w.Family("kvpool_blocks", "gauge", "Blocks with a copy in a tier.");
  w.Sample("kvpool_blocks", "tier=\"dram\"", D(s.dram.blocks));
  w.Sample("kvpool_blocks", "tier=\"flash\"", D(s.flash.blocks));
  w.Family("kvpool_hits_total", "counter", "Gets served from a tier.");
  w.Sample("kvpool_hits_total", "tier=\"dram\"", D(s.dram.hits));
  w.Sample("kvpool_hits_total", "tier=\"flash\"", D(s.flash.hits));
  w.One("kvpool_misses_total", "counter", "Gets of blocks not held.", D(s.misses));
  w.One("kvpool_gets_total", "counter", "Gets (hits and misses).", D(s.gets));
  w.One("kvpool_puts_total", "counter", "Blocks stored.", D(s.puts));
  w.One("kvpool_puts_existing_total", "counter", "Puts of blocks already held.", D(s.put_exists));
  w.One("kvpool_puts_rejected_total", "counter", "Puts refused (bad size, no room).",
        D(s.put_rejected));
  w.One("kvpool_erases_total", "counter", "Blocks erased.", D(s.erases));
  w.Family("kvpool_evictions_total", "counter",
           "DRAM: blocks dropped or demoted; flash: regions evicted.");
  w.Sample("kvpool_evictions_total", "tier=\"dram\"", D(s.dram.evictions));
  w.Sample("kvpool_evictions_total", "tier=\"flash\"", D(s.flash.evictions));
  w.One("kvpool_demotions_total", "counter", "Blocks written from DRAM to flash.", D(s.demotions));
  w.One("kvpool_promotions_total", "counter", "Flash hits copied back into DRAM.", D(s.promotions));
  w.One("kvpool_admission_drops_total", "counter",
        "Blocks leaving DRAM that flash admission refused.", D(s.admission_drops));
  w.One("kvpool_write_budget_drops_total", "counter",
        "Of those, refused by the flash write budget.", D(s.budget_drops));
  w.One("kvpool_quota_evictions_total", "counter",
        "Blocks a tenant's quota pushed out of DRAM or off flash.", D(s.quota_evictions));
  w.Family("kvpool_tier_in_bytes_total", "counter",
           "Bytes into a tier (DRAM: blocks put; flash: written to the device).");
  w.Sample("kvpool_tier_in_bytes_total", "tier=\"dram\"", D(s.dram.bytes_written));
  w.Sample("kvpool_tier_in_bytes_total", "tier=\"flash\"", D(s.flash.bytes_written));
  w.Family("kvpool_tier_out_bytes_total", "counter",
           "Bytes out of a tier (DRAM: hits served; flash: read from the device).");
  w.Sample("kvpool_tier_out_bytes_total", "tier=\"dram\"", D(s.dram.bytes_read));
  w.Sample("kvpool_tier_out_bytes_total", "tier=\"flash\"", D(s.flash.bytes_read));
  w.One("kvpool_flash_written_bytes_total", "counter",
        "Bytes written to flash (endurance: compare with the drive's rating).",
        D(s.flash.bytes_written));
  w.One("kvpool_flash_read_bytes_total", "counter", "Bytes read from flash.",
        D(s.flash.bytes_read));
  w.One("kvpool_flash_compacted_blocks_total", "counter",
        "Live blocks moved so their region could be reused.", D(s.flash_compacted));
  w.One("kvpool_flash_reinserted_blocks_total", "counter",
        "Blocks read since written, moved to the head before their region was taken.",
        D(s.flash_reinserted));
  w.One("kvpool_flash_live_evicted_blocks_total", "counter",
        "Live blocks evicted with their region (flash full).", D(s.flash_live_evicted));
  w.One("kvpool_flash_restored_blocks", "gauge",
        "Blocks found on the flash when the store opened (warm restart).", D(s.flash_restored));
  w.One("kvpool_flash_summary_bytes_total", "counter",
        "Flash metadata bytes written (region summaries, superblock).", D(s.flash_summary_bytes));
  w.One("kvpool_crc_failures_total", "counter",
        "Flash reads whose CRC32C did not match (answered as misses).", D(s.crc_failures));
  w.One("kvpool_io_errors_total", "counter", "Failed flash reads or writes.", D(s.io_errors));
  w.One("kvpool_index_entries", "gauge", "Entries in the block index.", D(s.index_entries));
  w.One("kvpool_policy_reuse_bonus", "gauge",
        "DRAM eviction: DRAM-fulls of newer blocks one past use outlives (learnt or fixed).",
        s.reuse_bonus_dram_fulls);
  w.One("kvpool_policy_unused_to_flash", "gauge",
        "1 while blocks leaving DRAM's probation unused are written to a full flash tier "
        "(learnt), 0 while they are dropped.",
        s.unused_to_flash ? 1.0 : 0.0);
  w.One("kvpool_policy_promote_all_flash_hits", "gauge",
        "1 while every flash hit of a get or read is promoted into DRAM (learnt), 0 while a "
        "block far from the flash log's end is read where it lies.",
        s.promote_all_flash_hits ? 1.0 : 0.0);
  w.Histogram("kvpool_put_latency_seconds", "Put latency inside the store.", "", s.put_latency,
              true);
  w.Histogram("kvpool_get_latency_seconds", "Get latency inside the store, by tier.",
              "tier=\"dram\"", s.get_dram_latency, true);
  w.Histogram("kvpool_get_latency_seconds", "", "tier=\"flash\"", s.get_flash_latency, false);
  w.One("kvpool_connections", "gauge", "Client connections open.", D(n.connections_open));
  w.One("kvpool_connections_accepted_total", "counter", "Client connections accepted.",
        D(n.connections_accepted));
  w.One("kvpool_connections_refused_total", "counter",
        "Client connections refused (over max_connections).", D(n.connections_refused));
  w.One("kvpool_connections_handshake_timeouts_total", "counter",
        "Connections closed for not completing a handshake in time.", D(n.handshake_timeouts));
  w.One("kvpool_connections_request_timeouts_total", "counter",
        "Connections closed part-way through a request (or idle) past the timeouts.",
        D(n.request_timeouts));
  w.One("kvpool_tls_failures_total", "counter", "TLS handshakes or records that failed.",
        D(n.tls_failures));
  w.One("kvpool_sealed_misses_total", "counter",
        "Sealed (encrypted) blocks answered as misses: key retired or shredded, block moved or "
        "swapped, or another tenant's.",
        D(n.seal_misses));
  w.One("kvpool_requests_total", "counter", "Requests served (native and RESP).", D(n.requests));
  w.One("kvpool_protocol_errors_total", "counter", "Malformed requests.", D(n.protocol_errors));
  w.One("kvpool_auth_failures_total", "counter", "Requests with a wrong or missing token.",
        D(n.auth_failures));
  w.Family("kvpool_network_bytes_total", "counter", "Bytes over client connections.");
  w.Sample("kvpool_network_bytes_total", "direction=\"in\"", D(n.bytes_in));
  w.Sample("kvpool_network_bytes_total", "direction=\"out\"", D(n.bytes_out));
  w.One("kvpool_leases", "gauge", "Blocks held for a load announced by a lookup-and-lock.",
        D(n.leases.held));
  w.One("kvpool_lease_bytes", "gauge", "Bytes of the blocks held by leases.",
        D(n.leases.held_bytes));
  w.One("kvpool_lease_loads_total", "counter", "Gets that released a lease.", D(n.leases.loads));
  w.One("kvpool_lease_expired_total", "counter", "Leases that ran out before their load.",
        D(n.leases.expired));
  RenderTenants(w, node.tenants);
  RenderPool(w, node);
  w.One("kvpool_uptime_seconds", "gauge", "Seconds since the node started.", node.uptime_seconds);
  return w.str();
}

}  // namespace kvpool::server
