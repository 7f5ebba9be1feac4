#include "server/tenants.h"

#include <algorithm>
#include <cstring>

#include "kvpool/store.h"

namespace kvpool::server {
namespace {

bool Matches(std::string_view pattern, std::string_view ns) {
  if (pattern.ends_with('*')) return ns.starts_with(pattern.substr(0, pattern.size() - 1));
  return pattern == ns;
}

}  // namespace

bool SameToken(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;  // no early exit: timing does not tell how much matched
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

Status LoadTenantKeys(std::vector<Tenant>& tenants) {
  std::vector<std::shared_ptr<const TenantKeys>> loaded(tenants.size());
  for (size_t i = 0; i < tenants.size(); ++i) {
    const Tenant& t = tenants[i];
    if (t.key_file.empty() && t.key_command.empty()) continue;
    auto k = TenantKeys::Load(t.name, t.key_file, t.key_command);
    if (!k.ok()) return k.status();
    loaded[i] = std::move(k).value();
  }
  for (size_t i = 0; i < tenants.size(); ++i) tenants[i].keys = std::move(loaded[i]);
  return Status::Ok();
}

Tenants::Tenants(std::vector<Tenant> tenants) : tenants_(std::move(tenants)) {
  AssignTenantIds(tenants_);
}

void AssignTenantIds(std::vector<Tenant>& tenants) {
  std::vector<Tenant*> by_name;
  for (Tenant& t : tenants) by_name.push_back(&t);
  std::sort(by_name.begin(), by_name.end(),
            [](const Tenant* a, const Tenant* b) { return a->name < b->name; });
  std::vector<bool> taken(kMaxTenants, false);
  taken[0] = true;
  size_t assigned = 0;
  for (Tenant* t : by_name) {
    if (++assigned >= kMaxTenants) break;  // beyond that many tenants: not accounted
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : t->name) h = (h ^ c) * 1099511628211ull;
    uint32_t id = 1 + static_cast<uint32_t>(h % (kMaxTenants - 1));
    while (taken[id]) id = id + 1 == kMaxTenants ? 1 : id + 1;
    taken[id] = true;
    t->id = static_cast<uint16_t>(id);
  }
}

Status Tenants::Authorize(std::string_view token, std::string_view ns, std::string* tenant,
                          uint32_t* max_connections, std::shared_ptr<const TenantKeys>* keys,
                          uint16_t* id) const {
  if (tenant) tenant->clear();
  if (max_connections) *max_connections = 0;
  if (keys) keys->reset();
  if (id) *id = 0;
  if (open()) return Status::Ok();
  for (const Tenant& t : tenants_) {
    if (!SameToken(t.token, token)) continue;
    for (const std::string& pattern : t.namespaces) {
      if (!Matches(pattern, ns)) continue;
      if (tenant) *tenant = t.name;
      if (max_connections) *max_connections = t.max_connections;
      if (keys) *keys = t.keys;
      if (id) *id = t.id;
      return Status::Ok();
    }
    return Status::Refused("namespace '" + std::string(ns) + "' is not open to this token");
  }
  return Status::Refused("unknown access token");
}

const Tenant* Tenants::ById(uint16_t id) const {
  for (const Tenant& t : tenants_) {
    if (id != 0 && t.id == id) return &t;
  }
  return nullptr;
}

const Tenant* Tenants::ByName(std::string_view name) const {
  for (const Tenant& t : tenants_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

BlockKey Scope::Key(const BlockKey& k) const { return raw_ ? k : PoolKey(root_, k); }

}  // namespace kvpool::server
