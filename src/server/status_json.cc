#include "server/status_json.h"

#include <nlohmann/json.hpp>

namespace kvpool::server {
namespace {

using nlohmann::json;

json Latency(const LatencySummary& l) {
  json le = json::array();
  for (uint64_t v : l.le) le.push_back(v);
  return {{"count", l.count},
          {"p50_us", l.p50_us},
          {"p99_us", l.p99_us},
          {"p999_us", l.p999_us},
          {"max_us", l.max_us},
          {"mean_us", l.mean_us},
          {"le", le}};
}

json Tier(const TierStats& t) {
  return {{"capacity_bytes", t.capacity_bytes},
          {"used_bytes", t.used_bytes},
          {"blocks", t.blocks},
          {"hits", t.hits},
          {"evictions", t.evictions},
          {"bytes_written", t.bytes_written},
          {"bytes_read", t.bytes_read}};
}

}  // namespace

std::string RenderStatusJson(const NodeStats& n) {
  const StoreStats& s = n.store;
  const ServerStats& v = n.server;
  json bounds = json::array();
  for (double b : kLatencyBoundsUs) bounds.push_back(b);
  json tenants = json::array();
  for (const TenantSnapshot& t : n.tenants) {
    tenants.push_back({{"name", t.name},
                       {"connections", t.connections},
                       {"requests", t.requests},
                       {"gets", t.gets},
                       {"hits", t.hits},
                       {"puts", t.puts},
                       {"bytes_in", t.bytes_in},
                       {"bytes_out", t.bytes_out}});
  }
  json members = json::array();
  for (const PoolMemberInfo& m : n.members) {
    members.push_back({{"id", m.id}, {"address", m.address}, {"capacity_bytes", m.capacity_bytes}});
  }
  json j = {
      {"unix_ms", n.unix_ms},
      {"uptime_seconds", n.uptime_seconds},
      {"store",
       {{"dram", Tier(s.dram)},
        {"flash", Tier(s.flash)},
        {"gets", s.gets},
        {"misses", s.misses},
        {"puts", s.puts},
        {"put_exists", s.put_exists},
        {"put_rejected", s.put_rejected},
        {"erases", s.erases},
        {"demotions", s.demotions},
        {"promotions", s.promotions},
        {"admission_drops", s.admission_drops},
        {"crc_failures", s.crc_failures},
        {"io_errors", s.io_errors},
        {"flash_restored", s.flash_restored},
        {"index_entries", s.index_entries},
        {"reuse_bonus_dram_fulls", s.reuse_bonus_dram_fulls},
        {"unused_to_flash", s.unused_to_flash},
        {"promote_all_flash_hits", s.promote_all_flash_hits}}},
      {"latency",
       {{"bounds_us", bounds},
        {"put", Latency(s.put_latency)},
        {"get_dram", Latency(s.get_dram_latency)},
        {"get_flash", Latency(s.get_flash_latency)}}},
      {"server",
       {{"connections_open", v.connections_open},
        {"connections_accepted", v.connections_accepted},
        {"connections_refused", v.connections_refused},
        {"requests", v.requests},
        {"protocol_errors", v.protocol_errors},
        {"auth_failures", v.auth_failures},
        {"bytes_in", v.bytes_in},
        {"bytes_out", v.bytes_out},
        {"leases", v.leases.held}}},
      {"tenants", tenants},
      {"pool", {{"in_pool", n.in_pool}, {"member_id", n.member_id}, {"members", members}}},
  };
  return j.dump();
}

}  // namespace kvpool::server
