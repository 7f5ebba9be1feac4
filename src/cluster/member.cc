#include "cluster/member.h"

#include <nlohmann/json.hpp>

#include "common/units.h"

namespace kvpool::cluster {
namespace {

using nlohmann::json;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool ValidText(std::string_view s, size_t max) {
  if (s.size() > max) return false;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == ',' || c == ';') return false;
  }
  return true;
}

Status Check(const Member& m) {
  if (m.address.empty() || !ValidText(m.address, 255) || m.address.find(':') == std::string::npos) {
    return Status(Code::kInvalidArgument, "member address must be host:port");
  }
  if (m.id.empty() || !ValidText(m.id, 255)) return Status(Code::kInvalidArgument, "bad member id");
  if (!ValidText(m.labels.node, 255) || !ValidText(m.labels.rack, 255) ||
      !ValidText(m.labels.zone, 255)) {
    return Status(Code::kInvalidArgument, "bad member label");
  }
  if (m.capacity == 0) return Status(Code::kInvalidArgument, "member capacity must be > 0");
  if (!m.http.empty() && (!ValidText(m.http, 255) || m.http.find(':') == std::string::npos)) {
    return Status(Code::kInvalidArgument, "member http address must be host:port");
  }
  return Status::Ok();
}

}  // namespace

std::string EncodeMember(const Member& m) {
  json j = {{"id", m.id},
            {"address", m.address},
            {"capacity", m.capacity},
            {"labels", {{"node", m.labels.node}, {"rack", m.labels.rack}, {"zone", m.labels.zone}}},
            {"protocol", m.protocol}};
  if (!m.http.empty()) j["http"] = m.http;
  return j.dump();
}

Result<Member> DecodeMember(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status(Code::kInvalidArgument, "member record is not a JSON object");
  Member m;
  auto str = [&](const json& o, const char* name, std::string* out) {
    auto it = o.find(name);
    if (it != o.end() && it->is_string()) *out = it->get<std::string>();
  };
  str(j, "id", &m.id);
  str(j, "address", &m.address);
  str(j, "http", &m.http);
  if (m.id.empty()) m.id = m.address;
  if (auto it = j.find("capacity"); it != j.end() && it->is_number_unsigned())
    m.capacity = it->get<uint64_t>();
  if (auto it = j.find("protocol"); it != j.end() && it->is_number_unsigned()) {
    m.protocol = static_cast<uint32_t>(std::min<uint64_t>(it->get<uint64_t>(), UINT32_MAX));
  }
  if (auto it = j.find("labels"); it != j.end() && it->is_object()) {
    str(*it, "node", &m.labels.node);
    str(*it, "rack", &m.labels.rack);
    str(*it, "zone", &m.labels.zone);
  }
  if (Status s = Check(m); !s.ok()) return s;
  return m;
}

Result<Member> ParseMemberSpec(std::string_view spec) {
  Member m;
  bool first = true;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view part = Trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (first) {
      m.address = std::string(part);
      first = false;
      continue;
    }
    size_t eq = part.find('=');
    if (eq == std::string_view::npos) {
      return Status(Code::kInvalidArgument,
                    "member option '" + std::string(part) + "' is not name=value");
    }
    std::string_view name = part.substr(0, eq), value = part.substr(eq + 1);
    if (name == "capacity") {
      auto n = ParseSize(value);
      if (!n.ok())
        return Status(Code::kInvalidArgument,
                      "member capacity: " + std::string(n.status().message()));
      m.capacity = *n;
    } else if (name == "id") {
      m.id = std::string(value);
    } else if (name == "node") {
      m.labels.node = std::string(value);
    } else if (name == "rack") {
      m.labels.rack = std::string(value);
    } else if (name == "zone") {
      m.labels.zone = std::string(value);
    } else {
      return Status(Code::kInvalidArgument, "unknown member option '" + std::string(name) +
                                                "' (capacity, id, node, rack, zone)");
    }
  }
  if (m.id.empty()) m.id = m.address;
  if (Status s = Check(m); !s.ok()) return s;
  return m;
}

Result<std::vector<Member>> ParseMemberList(std::string_view text) {
  std::vector<Member> out;
  while (!text.empty()) {
    size_t end = text.find_first_of(";\n");
    std::string_view line = Trim(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (line.empty() || line.front() == '#') continue;
    auto m = ParseMemberSpec(line);
    if (!m.ok()) return m.status();
    for (const Member& o : out) {
      if (o.id == m->id)
        return Status(Code::kInvalidArgument, "member '" + m->id + "' listed twice");
    }
    out.push_back(std::move(m).value());
  }
  return out;
}

}  // namespace kvpool::cluster
